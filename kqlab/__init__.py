"""kqlab: a Jupyter-centred data-quality workbench for Apache Kafka topics.

The public API is re-exported here and imported lazily, so ``import kqlab`` stays light (no
pyarrow, pandas, Spark, Jupyter or Kafka client until something is used).

Examples
--------
>>> import kqlab
>>> kqlab.__version__
'0.1.0'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kqlab._version import __version__

#: public name -> module that defines it
_EXPORTS = {
    "read_log": "kqlab.kafka.log",
    "iter_log_tables": "kqlab.kafka.log",
    "iter_log_batches": "kqlab.kafka.log",
    "LogIssue": "kqlab.kafka.log",
    "decode_records": "kqlab.kafka.batch",
    "decode_batches": "kqlab.kafka.batch",
    "Decoded": "kqlab.kafka.batch",
    "build_batch": "kqlab.kafka.builder",
    "BatchBuilder": "kqlab.kafka.builder",
    "Record": "kqlab.kafka.builder",
    "Codec": "kqlab.kafka.compression",
    "PartitionValidator": "kqlab.kafka.validator",
    "BatchOutcome": "kqlab.kafka.validator",
    "validate_batches": "kqlab.kafka.validator",
    "TopicConfig": "kqlab.kafka.configs",
    "BrokerRelease": "kqlab.kafka.configs",
    "RECORDS_SCHEMA": "kqlab.records",
    "BATCHES_SCHEMA": "kqlab.records",
    "BATCH_VERDICTS_SCHEMA": "kqlab.records",
    "KqlabError": "kqlab.errors",
    "ConfigError": "kqlab.errors",
    "LogPathError": "kqlab.errors",
    "Policy": "kqlab.policy",
    "Rule": "kqlab.policy",
    "Check": "kqlab.policy",
    "load_policy": "kqlab.policy",
    "loads_policy": "kqlab.policy",
    "dump_policy": "kqlab.policy",
    "save_policy": "kqlab.policy",
    "PolicyError": "kqlab.policy",
    "diff": "kqlab.policy",
    "replay": "kqlab.validate",
    "Replayer": "kqlab.validate",
    "Verdicts": "kqlab.validate",
    "CheckResults": "kqlab.validate.sample_checks",
    "broker_verdicts": "kqlab.kafka.table_checks",
    "suggest": "kqlab.validate.rule_suggestion",
    "Suggestion": "kqlab.validate.suggestions",
    "Suggestions": "kqlab.validate.suggestions",
    "suggest_thresholds": "kqlab.validate.check_suggestion",
    "ThresholdSuggestions": "kqlab.validate.check_suggestion",
    "check_examples": "kqlab.validate.golden",
    "ExamplesReport": "kqlab.validate.golden",
    "replay_spark": "kqlab.spark.engine",
    "parity_check": "kqlab.spark.parity",
    "spark_session": "kqlab.spark.session",
    "SparkVerdicts": "kqlab.spark.verdicts",
    "export_policy": "kqlab.export",
    "fidelity_report": "kqlab.export",
    "report": "kqlab.reporting",
    "unmask": "kqlab.viz",
    "AuthoringSession": "kqlab.authoring",
    "Workbench": "kqlab.widgets",
    "PolicyEditor": "kqlab.widgets",
    "ReplayPanel": "kqlab.widgets",
    "RejectionExplorer": "kqlab.widgets",
    "ChecksPanel": "kqlab.widgets",
    "RolloutView": "kqlab.widgets",
    "what_if": "kqlab.rollout",
    "WhatIf": "kqlab.rollout",
    "rollout_plan": "kqlab.rollout",
    "RolloutPlan": "kqlab.rollout",
}

__all__ = [
    "BATCHES_SCHEMA",
    "BATCH_VERDICTS_SCHEMA",
    "RECORDS_SCHEMA",
    "AuthoringSession",
    "BatchBuilder",
    "BatchOutcome",
    "BrokerRelease",
    "Check",
    "CheckResults",
    "ChecksPanel",
    "Codec",
    "ConfigError",
    "Decoded",
    "ExamplesReport",
    "KqlabError",
    "LogIssue",
    "LogPathError",
    "PartitionValidator",
    "Policy",
    "PolicyEditor",
    "PolicyError",
    "Record",
    "RejectionExplorer",
    "ReplayPanel",
    "Replayer",
    "RolloutPlan",
    "RolloutView",
    "Rule",
    "SparkVerdicts",
    "Suggestion",
    "Suggestions",
    "ThresholdSuggestions",
    "TopicConfig",
    "Verdicts",
    "WhatIf",
    "Workbench",
    "__version__",
    "broker_verdicts",
    "build_batch",
    "check_examples",
    "decode_batches",
    "decode_records",
    "diff",
    "dump_policy",
    "export_policy",
    "fidelity_report",
    "iter_log_batches",
    "iter_log_tables",
    "load_policy",
    "loads_policy",
    "parity_check",
    "read_log",
    "replay",
    "replay_spark",
    "report",
    "rollout_plan",
    "save_policy",
    "spark_session",
    "suggest",
    "suggest_thresholds",
    "unmask",
    "validate_batches",
    "what_if",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kqlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from kqlab.authoring import AuthoringSession
    from kqlab.errors import ConfigError, KqlabError, LogPathError
    from kqlab.export import export_policy, fidelity_report
    from kqlab.kafka.batch import Decoded, decode_batches, decode_records
    from kqlab.kafka.builder import BatchBuilder, Record, build_batch
    from kqlab.kafka.compression import Codec
    from kqlab.kafka.configs import BrokerRelease, TopicConfig
    from kqlab.kafka.log import LogIssue, iter_log_batches, iter_log_tables, read_log
    from kqlab.kafka.table_checks import broker_verdicts
    from kqlab.kafka.validator import BatchOutcome, PartitionValidator, validate_batches
    from kqlab.policy import (
        Check,
        Policy,
        PolicyError,
        Rule,
        diff,
        dump_policy,
        load_policy,
        loads_policy,
        save_policy,
    )
    from kqlab.records import BATCH_VERDICTS_SCHEMA, BATCHES_SCHEMA, RECORDS_SCHEMA
    from kqlab.reporting import report
    from kqlab.rollout import RolloutPlan, WhatIf, rollout_plan, what_if
    from kqlab.spark import SparkVerdicts, parity_check, replay_spark, spark_session
    from kqlab.validate import Replayer, Verdicts, replay
    from kqlab.validate.golden import ExamplesReport, check_examples
    from kqlab.validate.rule_suggestion import suggest
    from kqlab.validate.sample_checks import CheckResults
    from kqlab.validate.suggestions import Suggestion, Suggestions
    from kqlab.viz import unmask
    from kqlab.widgets import (
        PolicyEditor,
        RejectionExplorer,
        ReplayPanel,
        RolloutView,
        Workbench,
    )
