"""The config file of the kqlab validating gate (``kqlab gate --config``; see ``kqlab.gate``).

The gate consumes a raw topic, validates every record with the same validator the replay
uses, forwards the valid ones to a clean topic and dead-letters the rest.  This exporter only
fixes what its config names — the policy (path and content hash, so
the gate can refuse an edited file) and, per topic, the source, sink and dead-letter topics —
and nothing a deployment decides (bootstrap servers, credentials, group ids), so the file
holds no secret by construction.

The policy travels with the config: ``gate/policy.yaml`` is the policy itself (canonical
YAML, the hash the config pins) and ``gate.yaml`` names it relative to itself, so the folder
runs wherever it is copied — unless its schema source holds credentials, which never enter an
export (the note says to put the file there).  A caller may name its own copy instead
(``policy_path``, relative to ``gate.yaml``'s folder).  Every rule is *claimed* ``exact`` —
the gate runs kqlab's own validator per record, except Python plugins when the gate's
environment lacks them — and the fidelity report proves it by running the gate
(:mod:`kqlab.export.roundtrip_gate`).
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
    implicit_row,
    implicit_rules,
    portable_path,
    provenance,
    provenance_lines,
    rule_lines,
    secrets_of,
)
from kqlab.gate._config import GATE_VERSION

__all__ = ["GATE_VERSION", "POLICY_FILE", "build", "gate_config"]

TITLE = "kqlab validating gate config"
#: the policy copy written beside ``gate.yaml`` when no ``policy_path`` is given
POLICY_FILE = "policy.yaml"

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
        "policy": {"path": policy_path or POLICY_FILE,
                   "content_hash": policy.content_hash()},
        "topics": [{"source": t, "sink": t + sink_suffix, "dlq": t + dlq_suffix}
                   for t in policy.topics.names],
    }


def _portable(policy: Any) -> Any:
    """``policy`` with the vetting sample named portably (an absolute path by its last
    component); provenance is outside the content hash, so the copy keeps the pinned hash."""
    from dataclasses import replace

    from kqlab.policy.model import thaw

    prov = policy.provenance
    source = None if prov is None else prov.sample.get("source")
    if not isinstance(source, str) or portable_path(source) == source:
        return policy
    sample = {**thaw(prov.sample), "source": portable_path(source)}
    return replace(policy, provenance=replace(prov, sample=sample))


def build(policy: Any, *, policy_path: str | None = None) -> Export:
    """``gate/gate.yaml`` (the config ``kqlab gate --config`` takes) and, unless
    ``policy_path`` names another copy, ``gate/policy.yaml`` (the policy it runs)."""
    from kqlab.policy import dump_policy

    prov = provenance(policy)
    cfg = gate_config(policy, policy_path=policy_path)
    fid = [RuleFidelity(rule=r.id, kind=r.kind, mode=r.mode, status=EXACT,
                        how="the gate runs kqlab's validator on every record" +
                        ("" if r.exportable else "; the plugin module must be importable "
                         "where the gate runs"))
           for r in policy.rules]
    fid += [implicit_row(r, EXACT, "the gate runs kqlab's validator, its implicit checks "
                         "included") for r in implicit_rules(policy)]
    head = comment_block([
        "kqlab gate config: run it with `kqlab gate --config gate.yaml --bootstrap B`.",
        "Bootstrap servers and credentials are deployment settings and deliberately not",
        "in this file. The policy path is relative to this file's folder.",
        *provenance_lines(prov),
        *rule_lines(policy.rules)])
    text = head + yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False)
    files = {"gate/gate.yaml": text}
    notes = ["minimal on purpose: policy path + hash and topics only"]
    if policy_path is None and secrets_of(policy):
        # the copy would carry the schema source's credentials (and the hash covers them)
        notes.append(f"the policy's schema source holds credentials, so it is not copied into "
                     f"the export: put the policy file beside gate.yaml as {POLICY_FILE}")
    elif policy_path is None:
        from kqlab.policy import PolicyError

        try:
            files[f"gate/{POLICY_FILE}"] = dump_policy(_portable(policy))
        except PolicyError as exc:  # a policy built in Python that no file could hold
            raise ExportError(f"the gate runs a policy file, and this policy cannot be "
                              f"written as one: {exc}") from None
        notes.append(f"{POLICY_FILE} is the policy itself, beside gate.yaml: copy the folder")
    return Export(target="gate", title=TITLE, policy=policy.name, files=files,
                  fidelity=tuple(fid), behaviour=BEHAVIOUR, data=cfg, notes=tuple(notes))
