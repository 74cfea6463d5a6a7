"""The config file of the kqlab validating gate (``kqlab gate --config``; see ``kqlab.gate``).

The gate consumes a raw topic, validates every record with the same validator the replay
uses, forwards the valid ones to a clean topic and dead-letters the rest.  This exporter only
fixes what its config names — the policy (path and content hash, so
the gate can refuse an edited file) and, per topic, the source, sink and dead-letter topics —
and nothing a deployment decides (bootstrap servers, credentials, group ids), so the file
holds no secret by construction.  Every rule is ``exact``: the gate runs kqlab's own validator
per record, except Python plugins when the gate's environment lacks them.
"""

from __future__ import annotations

from typing import Any

import yaml

from kqlab.export.base import (
    EXACT,
    Export,
    ExportError,
    RuleFidelity,
    comment_block,
    provenance,
    provenance_lines,
)

__all__ = ["GATE_VERSION", "build", "gate_config"]

TITLE = "kqlab validating gate config"
GATE_VERSION = 1

BEHAVIOUR = (
    "downstream, not in the produce path: producers write to the raw topic unchecked; "
    "consumers of the sink topic only see valid records",
    "per record: the gate judges each record alone and forwards or dead-letters it, so the "
    "replay's 'collateral' records (valid, rejected with their batch) reach the sink",
    "same validator, same verdict per record as the replay for policy rules; broker checks "
    "(CRC, sequences, batch framing) have already been applied by the raw topic's broker",
)


def gate_config(policy: Any, *, policy_path: str | None = None, sink_suffix: str = ".valid",
                dlq_suffix: str = ".dlq") -> dict[str, Any]:
    """The gate's config as data: ``{kqlab_gate, policy: {path, content_hash}, topics: [...]}``.

    Examples
    --------
    >>> from kqlab.policy.model import Policy, Topics
    >>> cfg = gate_config(Policy(name="orders", topics=Topics(names=("orders",))))
    >>> cfg["topics"]
    [{'source': 'orders', 'sink': 'orders.valid', 'dlq': 'orders.dlq'}]
    """
    if not policy.topics.names:
        raise ExportError(f"policy {policy.name!r} names no topics: the gate needs source "
                          "topic names")
    return {
        "kqlab_gate": GATE_VERSION,
        "policy": {"path": policy_path or f"{policy.name}.yaml",
                   "content_hash": policy.content_hash()},
        "topics": [{"source": t, "sink": t + sink_suffix, "dlq": t + dlq_suffix}
                   for t in policy.topics.names],
    }


def build(policy: Any, *, policy_path: str | None = None, today: str | None = None) -> Export:
    """``gate/gate.yaml``: the config ``kqlab gate --config`` takes."""
    prov = provenance(policy, today=today)
    cfg = gate_config(policy, policy_path=policy_path)
    head = comment_block([
        "kqlab gate config: run it with `kqlab gate --config gate.yaml --bootstrap B`.",
        "Bootstrap servers and credentials are deployment settings and deliberately not",
        "in this file.",
        *provenance_lines(prov)])
    text = head + yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False)
    fid = tuple(RuleFidelity(rule=r.id, kind=r.kind, mode=r.mode, status=EXACT,
                             how="the gate runs kqlab's validator on every record" +
                             ("" if r.exportable else "; the plugin module must be importable "
                              "where the gate runs"))
                for r in policy.rules)
    return Export(target="gate", title=TITLE, policy=policy.name, files={"gate/gate.yaml": text},
                  fidelity=fid, behaviour=BEHAVIOUR, data=cfg,
                  notes=("minimal on purpose: policy path + hash and topics only",))
