"""The validating gate: consume a raw topic, judge every record with the exported policy (the
replay's own rule kernels, one vectorised call per poll batch), forward valid records to a clean
topic and dead-letter the rest, at least once.

Not imported by ``import kqlab`` (it needs confluent-kafka); ``kqlab gate`` and the deployment
files in ``deploy/gate/`` use it.  Semantics: ``deploy/gate/README.md``.
"""

from kqlab.gate._config import GateFile, load_gate_file
from kqlab.gate._gate import (
    H_MESSAGE,
    H_OFFSET,
    H_PARTITION,
    H_POLICY,
    H_RULE,
    H_TOPIC,
    Gate,
    GateError,
    GateMetrics,
    GateSettings,
    Route,
    records_table,
)
from kqlab.gate._judge import Judge, Judgement

__all__ = [
    "H_MESSAGE",
    "H_OFFSET",
    "H_PARTITION",
    "H_POLICY",
    "H_RULE",
    "H_TOPIC",
    "Gate",
    "GateError",
    "GateFile",
    "GateMetrics",
    "GateSettings",
    "Judge",
    "Judgement",
    "Route",
    "load_gate_file",
    "records_table",
]
