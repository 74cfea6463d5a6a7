"""Confluent data contract: schema ``metadata`` + a CEL ``ruleSet`` (deployment-targets.md §2).

The contract is registered with the schema (``POST /subjects/{subject}/versions``) or as the
subject's ``defaultRuleSet`` (``PUT /config/{subject}``), and the Confluent serializers run
its rules on every record they write: CEL ``CONDITION`` rules, mode ``WRITE``, ``onFailure``
``ERROR`` (raise) or ``DLQ`` (copy to a dead-letter topic, then raise).

What confluent-kafka 2.16.0's CEL executor binds (``rules/cel/cel_executor.py``): the record as
``message`` — and ``now`` when the expression names it — nothing else.  The serializer's
context knows the headers and the original key, but no executor hands them to CEL, so header,
key and metadata rules are not expressible.  The Python executor runs cel-python, which lacks
the CEL strings extension, so only core CEL is emitted: field rules through
:func:`kqlab.validate.fields.field_rule_to_cel` (written to be portable across engines), ``cel``
rules as they are, with the variable ``value`` renamed ``message``; a ``when`` precondition
becomes the executor's guard (``guard ; expr``: a false guard passes a CONDITION).
"""

from __future__ import annotations

import json
from typing import Any

from kqlab.export.base import (
    APPROXIMATE,
    EXACT,
    NOT_EXPRESSIBLE,
    Export,
    ExportError,
    RuleFidelity,
    provenance,
    provenance_properties,
)

__all__ = ["build", "cel_variables", "confluent_rule", "register_contract", "rename_cel"]

TITLE = "Confluent data contract (schema metadata + CEL ruleSet)"

BEHAVIOUR = (
    "client-side: enforced only by producers that serialize with the Confluent serializers, "
    "rules enabled, and the registered schema (auto.register.schemas=false, "
    "use.latest.version=true); a producer writing raw bytes bypasses every rule",
    "per record: the serializer refuses one record (SerializationError caused by "
    "RuleConditionError) before it is produced; nothing reaches Kafka, there is no Kafka error "
    "code and no batch collateral — the replay's 'collateral' records would be produced",
    "null values (tombstones) are never serialized, so no rule runs on them (kqlab's field "
    "checks do not judge tombstones either)",
    "records that do not match the schema cannot be serialized at all (the writer fails "
    "before the rules run): decode and schema-id rules hold by construction",
    "onFailure DLQ copies the record as JSON with __rule.* headers to the dead-letter topic "
    "and still raises (confluent-kafka >= 2.16)",
    "observe-mode rules are exported with onFailure NONE: the client neither rejects nor counts",
)

#: variables of the Confluent executor a kqlab expression may map to
_RENAMES = {"value": "message"}
#: type names the Confluent executor shadows: its extra functions (``extra_func.py``) define
#: ``double`` and ``string``, so the identifiers no longer denote the types and
#: ``type(x) == double`` is false for every double (verified with 2.16.0); a literal's type is
#: the portable spelling, core CEL on every engine
_TYPE_SPELLINGS = {"double": "type(0.0)", "string": 'type("")'}
#: identifiers that are not variables (type names, the null literal handled by the parser)
_TYPE_IDENTS = frozenset(("int", "uint", "double", "bool", "string", "bytes", "list", "map",
                          "null_type", "type", "dyn"))
_MACROS = frozenset(("all", "exists", "exists_one", "map", "filter"))


def _idents(expr: str) -> tuple[list[tuple[str, int]], set[str]]:
    """``(name, position)`` of every identifier used as a variable, and macro-bound names."""
    from celpy.celparser import CELParser

    tree = CELParser().parse(expr)
    used: list[tuple[str, int]] = []
    bound: set[str] = set()
    for node in tree.iter_subtrees():
        name = str(node.data)
        if name == "ident":
            tok = node.children[0]
            used.append((str(tok), tok.start_pos))
        elif name == "member_dot_arg" and str(node.children[1]) in _MACROS and \
                len(node.children) > 2:
            first = node.children[2].children[0]
            for sub in first.iter_subtrees():
                if str(sub.data) == "ident":
                    bound.add(str(sub.children[0]))
                    break
    return used, bound


def cel_variables(expr: str) -> frozenset[str]:
    """The free variables an expression reads (macro variables and type names excluded).

    Examples
    --------
    >>> sorted(cel_variables("value.items.all(i, i.qty > 0) && headers.x == 'a'"))
    ['headers', 'value']
    """
    used, bound = _idents(expr)
    return frozenset(n for n, _ in used if n not in bound and n not in _TYPE_IDENTS)


def rename_cel(expr: str, renames: dict[str, str] | None = None) -> str:
    """``expr`` with free variables renamed (default ``value`` → ``message``); field names,
    strings and macro variables are left alone.

    Examples
    --------
    >>> rename_cel('has(value.value) && value.value == "value"')
    'has(message.value) && message.value == "value"'
    >>> rename_cel("type(value.a) == double", {"value": "message", "double": "type(0.0)"})
    'type(message.a) == type(0.0)'
    """
    renames = _RENAMES if renames is None else renames
    used, bound = _idents(expr)
    out = expr
    for name, pos in sorted(used, key=lambda x: -x[1]):
        if name in renames and name not in bound:
            out = out[:pos] + renames[name] + out[pos + len(name):]
    return out


def _doc(rule: Any) -> str:
    """The rule's failure text for ``doc`` (the serializer's error message): the rule's own
    message when it has no per-record placeholders, else its description or a plain label."""
    text = rule.message
    if text and "{" not in text:
        return text
    return rule.description or f"kqlab rule {rule.id} ({rule.kind}) failed"


def confluent_rule(rule: Any, *, dlq_topic: str | None = None
                   ) -> tuple[RuleFidelity, dict[str, Any] | None]:
    """One kqlab rule as a Confluent domain rule (or None) with its fidelity."""
    from kqlab.validate.fields import FIELD_KINDS, field_rule_to_cel

    def row(status: str, how: str) -> RuleFidelity:
        return RuleFidelity(rule=rule.id, kind=rule.kind, status=status, how=how,
                            mode=rule.mode)

    k = rule.kind
    value_side = rule.spec.param("target") is None or rule.param("target") != "key"
    if k in FIELD_KINDS:
        expr, how = field_rule_to_cel(rule), "CEL CONDITION via field_rule_to_cel"
    elif k == "cel":
        expr, how = rule.param("expr"), "CEL CONDITION, the expression as written"
    elif k in ("decodable", "avro_valid", "json_valid", "json_schema") and value_side:
        return row(APPROXIMATE, "by construction: the serializer writes only data that "
                   "conforms to the registered schema (a raw-bytes producer is not checked)"
                   ), None
    elif k in ("magic_byte", "schema_id_registered") and value_side:
        return row(APPROXIMATE, "by construction: the serializer frames every value with the "
                   "registered schema's id (magic byte 0 + id)"), None
    elif k == "schema_id_allowed" and value_side:
        return row(APPROXIMATE, "by construction: the serializer writes the latest registered "
                   "id; pin one of the allowed ids with use.schema.id"), None
    elif k == "plugin":
        return row(NOT_EXPRESSIBLE, "Python plugin: never exportable"), None
    elif k.startswith("header") or k == "headers_size":
        return row(NOT_EXPRESSIBLE, "the CEL executor binds only `message` (the record value); "
                   "headers are not an input"), None
    elif k in ("key_required", "key_size") or not value_side:
        return row(NOT_EXPRESSIBLE, "rules attach to the value subject; a missing key has no "
                   "serializer call and the key is not bound in CEL"), None
    elif k in ("value_required",):
        return row(NOT_EXPRESSIBLE, "the serializer is never called for a null value"), None
    elif k in ("value_size", "record_size"):
        return row(NOT_EXPRESSIBLE, "sizes are only known after serialization; use the "
                   "topic's max.message.bytes (topic-policy target)"), None
    elif k == "timestamp_window":
        return row(NOT_EXPRESSIBLE, "the record timestamp is not bound in CEL; use "
                   "message.timestamp.*.max.ms (topic-policy target)"), None
    else:
        return row(NOT_EXPRESSIBLE, f"no Confluent equivalent for {k}"), None
    # an expression: it may read only the value
    guard = rule.when
    for text, what in ((expr, "expression"), (guard, "when precondition")):
        if text is None:
            continue
        extra = sorted(cel_variables(text) - set(_RENAMES))
        if extra:
            return row(NOT_EXPRESSIBLE, f"the {what} reads {', '.join(extra)}; the CEL executor "
                       "binds only `message` (the record value)"), None
        if ";" in text:
            return row(NOT_EXPRESSIBLE, f"the {what} contains ';', which the executor takes as "
                       "its guard separator"), None
    renames = {**_RENAMES, **_TYPE_SPELLINGS}
    body = rename_cel(expr, renames)
    if body != rename_cel(expr):
        how += " (type names double/string spelt type(0.0)/type(\"\"): the executor shadows them)"
    if guard is not None:
        body = f"{rename_cel(guard, renames)} ; {body}"
        how += " with the `when` precondition as the executor's guard"
    out: dict[str, Any] = {"name": rule.id, "doc": _doc(rule), "kind": "CONDITION",
                           "mode": "WRITE", "type": "CEL", "expr": body}
    if rule.mode == "observe":
        out["onFailure"] = "NONE"
        return row(APPROXIMATE, how + "; observe mode exported as onFailure NONE (not counted)"
                   ), out
    if dlq_topic:
        out["params"] = {"dlq.topic": dlq_topic}
        out["onFailure"] = "DLQ"
    else:
        out["onFailure"] = "ERROR"
    return row(EXACT, how), out


def _subject(policy: Any, subject: str | None) -> str:
    if subject:
        return subject
    src = policy.value.schemas
    if src is not None and src.subject:
        return src.subject
    if policy.topics.names:
        return f"{policy.topics.names[0]}-value"  # TopicNameStrategy
    raise ExportError(f"policy {policy.name!r} names no value subject and no topic: pass "
                      "subject=")


def _schema(policy: Any, subject: str, schema: str | None) -> tuple[str, str, str | None]:
    """``(schemaType, schema text, note)``: given, the subject's latest, or from the policy."""
    fmt = policy.value.format
    if fmt == "avro":
        if schema is not None:
            return "AVRO", schema, None
        src = policy.value.schemas
        if src is None or not src.registry:
            raise ExportError("an Avro data contract needs the writer schema: give schema= or "
                              "value.schemas.registry in the policy")
        from kqlab.serde.schemas import registry_client

        try:
            latest = registry_client(src.registry, src.config).get_latest_version(subject)
        except Exception as exc:
            raise ExportError(f"cannot read the latest schema of {subject!r} from the policy's "
                              f"registry: {type(exc).__name__}: {exc}") from None
        return "AVRO", latest.schema.schema_str, \
            f"schema: latest version {latest.version} of {subject!r} (id {latest.schema_id})"
    if fmt == "json":
        if schema is not None:
            return "JSON", schema, None
        inline = next((r.param("schema") for r in policy.rules if r.kind == "json_schema"
                       and r.param("schema") is not None and r.param("target") != "key"), None)
        if inline is not None:
            from kqlab.policy.model import thaw

            return "JSON", json.dumps(thaw(inline), sort_keys=True), \
                "schema: the policy's inline json_schema rule"
        return "JSON", json.dumps({"type": "object"}), \
            "schema: a permissive {'type': 'object'} (the policy declares no JSON Schema)"
    raise ExportError(f"a data contract needs an Avro or JSON value; policy {policy.name!r} "
                      f"has value format {fmt!r}")


def build(policy: Any, *, subject: str | None = None, schema: str | None = None,
          dlq_topic: str | None = None, today: str | None = None) -> Export:
    """The register body, the subject-config body and a registration script for ``policy``.

    ``subject`` defaults to the policy's value subject (TopicNameStrategy otherwise);
    ``schema`` to the subject's latest schema in the policy's registry; ``dlq_topic`` makes
    failing rules copy the record there (``onFailure: DLQ``) instead of only raising.
    """
    subject = _subject(policy, subject)
    schema_type, schema_text, schema_note = _schema(policy, subject, schema)
    prov = provenance(policy, today=today)
    fid, rules = [], []
    for r in policy.rules:
        f, rule = confluent_rule(r, dlq_topic=dlq_topic)
        fid.append(f)
        if rule is not None:
            rules.append(rule)
    metadata = {"properties": provenance_properties(prov)}
    rule_set = {"domainRules": rules}
    register = {"schemaType": schema_type, "schema": schema_text, "references": [],
                "metadata": metadata, "ruleSet": rule_set}
    config = {"defaultMetadata": metadata, "defaultRuleSet": rule_set}
    script = _SCRIPT.format(subject=subject, policy=policy.name, hash=prov["content_hash"])
    files = {
        f"confluent/{subject}.register.json": json.dumps(register, indent=2) + "\n",
        f"confluent/{subject}.config.json": json.dumps(config, indent=2) + "\n",
        "confluent/register_contract.py": script,
    }
    notes = [n for n in (schema_note,) if n]
    notes.append(f"POST /subjects/{subject}/versions with {subject}.register.json (a new schema "
                 f"version carrying the rules), or PUT /config/{subject} with "
                 f"{subject}.config.json (defaultRuleSet merged into every new version)")
    notes.append("the registry must support data contracts (Confluent Platform Enterprise 7.4+ "
                 "with the RuleSetResourceExtension, or Confluent Cloud Advanced); Karapace "
                 "silently drops ruleSet")
    return Export(target="confluent", title=TITLE, policy=policy.name, files=files,
                  fidelity=tuple(fid), behaviour=BEHAVIOUR, notes=tuple(notes),
                  data={"subject": subject, "register": register, "config": config})


def register_contract(client: Any, export: Export) -> int:
    """Register the exported contract through a confluent-kafka ``SchemaRegistryClient``
    (``mock://`` in tests); returns the schema id.  The body goes through
    ``Schema.from_dict``, the same model the REST client POSTs."""
    from confluent_kafka.schema_registry import Schema

    data = export.data
    return client.register_schema(data["subject"], Schema.from_dict(data["register"]))


_SCRIPT = '''"""Register the data contract of kqlab policy {policy!r} ({hash}).

Run: python register_contract.py URL  (credentials come from the environment, never this file:
SR_BASIC_AUTH_USER_INFO=user:secret). Producers then serialize with
{{"auto.register.schemas": False, "use.latest.version": True}} so the rules run.
"""
import json
import os
import sys
from pathlib import Path

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

conf = {{"url": sys.argv[1]}}
if os.environ.get("SR_BASIC_AUTH_USER_INFO"):
    conf["basic.auth.user.info"] = os.environ["SR_BASIC_AUTH_USER_INFO"]
client = SchemaRegistryClient.new_client(conf)
body = json.loads((Path(__file__).parent / "{subject}.register.json").read_text())
print(client.register_schema("{subject}", Schema.from_dict(body)))
'''
