"""The KIP-940 and KIP-729 proposals: broker and topic properties as those KIPs define them.

**Proposed API, not in Apache Kafka.**  Neither KIP was accepted or implemented (both were at
the discussion stage; deployment-targets.md §0), so these files describe what a broker built
from the proposals would be configured with — useful to argue for the KIPs with a real policy,
and what kqlab's replay emulates (``enforcement: kip-940 | kip-729``).

* KIP-940 (``shared/seeds/…-kip-940-record-validation-policy.txt``): broker property
  ``record.validation.policy.class.name`` (a ``RecordValidationPolicy`` implementation) and a
  per-topic property ``record.validation.policy`` naming the policy the topic uses (the
  interface's javadoc calls it ``validation.policy``: both names are noted).  The policy sees a
  ``RecordProxy`` with headers, key and value only, and declares ``RecordIntrospectionHints``
  (``needHeaders``, ``needKeyBytes``, ``needValueBytes``: 0 = not needed, -1 = all) so the
  broker decompresses only what is needed.  A rejected record rejects its batch (KIP-467).
* KIP-729 (``…-kip-729-broker-record-validator.txt``): broker property
  ``record.validator.classes`` (comma-separated ``BrokerRecordValidator`` classes), broker-wide
  — one validator must dispatch by topic itself; ``validateRecord(topicPartition, key, value,
  headers)`` runs after the key and timestamp checks.

Neither proposal hands the policy the record's timestamp or offset, so rules reading record
metadata are not expressible; everything else is, by a plugin that embeds kqlab's validator.
"""

from __future__ import annotations

import json
from typing import Any

from kqlab.export.base import (
    EXACT,
    NOT_EXPRESSIBLE,
    PROPOSED,
    Export,
    ExportError,
    RuleFidelity,
    comment_block,
    implicit_row,
    implicit_rules,
    provenance,
    provenance_lines,
    rule_lines,
)

__all__ = ["PLUGIN_CLASS", "VALIDATOR_CLASS", "build", "introspection_hints"]

TITLE = "KIP-940 / KIP-729 record validation (proposed API, not in Apache Kafka)"
#: the class a kqlab broker plugin would have (no such plugin ships: proposed API)
PLUGIN_CLASS = "io.kqlab.kafka.KqlabRecordValidationPolicy"
VALIDATOR_CLASS = "io.kqlab.kafka.KqlabBrokerRecordValidator"
#: value bytes a rule reading only the Confluent framing needs (magic byte + schema id)
_FRAMING_BYTES = {"magic_byte": 1, "schema_id_allowed": 5, "schema_id_registered": 5}
_META = frozenset(("topic", "partition", "offset", "timestamp", "timestamp_type",
                   "batch_offset", "batch_index"))

BEHAVIOUR = (
    PROPOSED + ": no Apache Kafka release has these properties or interfaces",
    "broker-side, inside the produce path after the key and timestamp checks: every producer "
    "is checked",
    "whole batch: a failing record rejects its batch; KIP-940 answers INVALID_RECORD (87) with "
    "per-record errors (KIP-467) — exactly what the replay's kip-940 profile reports",
    "KIP-729 is broker-wide (record.validator.classes): the validator dispatches to the "
    "topic's policy itself; KIP-940 names the policy per topic",
    "the policy sees headers, key and value only (RecordProxy): no timestamp, offset or batch",
)


def _reads(rule: Any) -> set[str]:
    """What a rule reads, with CEL expressions analysed (``cel`` reads only what it names)."""
    needs = set(rule.spec.needs)
    if rule.kind == "cel" or rule.when:
        from kqlab.export.confluent import cel_variables

        used: set[str] = set()
        for expr in (rule.param("expr") if rule.kind == "cel" else None, rule.when):
            if expr:
                used |= cel_variables(expr)
        if rule.kind == "cel":
            needs = set()
        if "value" in used:
            needs.add("decoded_value")
        if "key" in used:
            needs.add("key")
        if used & {"headers", "header_list"}:
            needs.add("headers")
        if used & _META:
            needs.add("metadata")
    return needs


def introspection_hints(policy: Any) -> dict[str, Any]:
    """KIP-940 ``RecordIntrospectionHints`` for ``policy`` (observe rules included: a policy
    counts them, so it must read what they read).

    Examples
    --------
    >>> from kqlab.policy import loads_policy
    >>> introspection_hints(loads_policy("kqlab: 1\\nname: p\\n"
    ...     "rules: [{id: s, kind: schema_id_allowed, ids: [1]}, {id: h, kind: header_required, "
    ...     "name: trace}]"))
    {'needHeaders': True, 'needKeyBytes': 0, 'needValueBytes': 5}
    """
    headers, key, value = False, 0, 0
    for r in policy.rules:
        if not r.exportable:
            continue
        reads = _reads(r)
        headers = headers or "headers" in reads
        part = (r.param("target") or "value") if r.spec.param("target") else "value"
        if r.kind in _FRAMING_BYTES and not r.when:
            if part == "key":
                key = -1 if key == -1 else max(key, _FRAMING_BYTES[r.kind])
            else:
                value = -1 if value == -1 else max(value, _FRAMING_BYTES[r.kind])
            continue
        if reads & {"key", "decoded_key"}:
            key = -1
        if reads & {"value", "decoded_value"}:
            value = -1
    from kqlab.validate.rules import decodes

    if decodes(policy.value):
        value = -1  # the implicit decode rule reads the whole value
    return {"needHeaders": headers, "needKeyBytes": key, "needValueBytes": value}


def _fidelity(policy: Any, rules: Any = None) -> list[RuleFidelity]:
    out = []
    for r in (policy.rules if rules is None else rules):
        def row(status: str, how: str, r: Any = r) -> RuleFidelity:
            return RuleFidelity(rule=r.id, kind=r.kind, status=status, how=how, mode=r.mode)

        if not r.exportable:
            out.append(row(NOT_EXPRESSIBLE, "Python plugin: a broker plugin would have to "
                           "re-implement it in Java"))
        elif "metadata" in _reads(r):
            out.append(row(NOT_EXPRESSIBLE, "reads record metadata (timestamp/offset/batch), "
                           "which RecordProxy does not carry; the broker's own timestamp check "
                           "(message.timestamp.*.max.ms) covers timestamp windows"))
        else:
            out.append(row(EXACT, "run by a plugin embedding kqlab's validator, which the "
                           "replay's kip-940 profile emulates" +
                           ("; observe mode: counted, not rejected" if r.mode == "observe"
                            else "")))
    return out


def _implicit(policy: Any) -> list[RuleFidelity]:
    """The implicit rows: the plugin runs kqlab's validator, implicit checks included."""
    return [implicit_row(r, _fidelity(policy, [r])[0].status, _fidelity(policy, [r])[0].how)
            for r in implicit_rules(policy)]


def build(policy: Any, *, plugin_class: str = PLUGIN_CLASS,
          validator_class: str = VALIDATOR_CLASS) -> Export:
    """``kip-940.properties``, ``kip-729.properties`` and ``introspection-hints.json``."""
    if not policy.topics.names and not policy.topics.patterns:
        raise ExportError(f"policy {policy.name!r} names no topics")
    prov = provenance(policy)
    hints = introspection_hints(policy)
    policy_ref = f"{policy.name}@{prov['content_hash']}"
    fid = _fidelity(policy)
    head = [f"{PROPOSED}.", *provenance_lines(prov),
            *rule_lines(policy.rules, {f.rule: f.status for f in fid})]
    kip940 = comment_block([
        "KIP-940 record validation policy, exported by kqlab (", *head,
        f"introspection hints: {json.dumps(hints)}",
        ")"]) + comment_block(["--- broker (server.properties) ---"]) + \
        f"record.validation.policy.class.name={plugin_class}\n" + comment_block([
            "--- topic configs (kafka-configs --alter --entity-type topics ...) ---",
            "the KIP text names the topic config record.validation.policy; its javadoc "
            "(TopicMetadata.validationPolicy) says validation.policy"])
    kip940 += "".join(f"# topic {t}\nrecord.validation.policy={policy_ref}\n"
                      for t in policy.topics.names)
    if policy.topics.patterns:
        kip940 += comment_block([f"topics matching {p}: set record.validation.policy="
                                 f"{policy_ref}" for p in policy.topics.patterns])
    kip729 = comment_block([
        "KIP-729 broker record validator, exported by kqlab (", *head, ")",
        "broker-wide: the validator applies the policy to its topics "
        f"({', '.join([*policy.topics.names, *policy.topics.patterns])}) and passes the rest",
    ]) + f"record.validator.classes={validator_class}\n" + \
        f"{validator_class}.policy={policy_ref}\n"
    hints_doc = {"label": PROPOSED, "kip": "KIP-940", "policy": policy_ref,
                 "RecordIntrospectionHints": hints, "kqlab": prov}
    files = {"kip/kip-940.properties": kip940, "kip/kip-729.properties": kip729,
             "kip/introspection-hints.json": json.dumps(hints_doc, indent=2) + "\n"}
    notes = (f"{plugin_class} / {validator_class} are the classes a kqlab broker plugin would "
             "have; none ships, because the interfaces do not exist in Apache Kafka",
             f"the {validator_class}.policy line is the plugin's own setting, not a property "
             "KIP-729 defines (its BrokerRecordValidator interface has no configure())")
    return Export(target="kip", title=TITLE, policy=policy.name, files=files,
                  fidelity=(*fid, *_implicit(policy)), behaviour=BEHAVIOUR, notes=notes,
                  proposed=True, data={"hints": hints, "policy_ref": policy_ref})
