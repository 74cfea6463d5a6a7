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

Avro values are not bound as kqlab decodes them (:mod:`kqlab.export.avro_fields`): a decimal
reaches CEL as a Python ``Decimal``, a date as an ``int``, a timestamp as a CEL timestamp.  Field
rules on such fields are written for that binding — a decimal compared through the executor's
own ``double()``, a date or timestamp failing every non-null value exactly as the replay does —
so the contract refuses what the replay rejects.

Each rule keeps its identity: ``name`` is the kqlab rule id, ``doc`` (the serializer's failure
text) its message or description, and ``params`` carry its kind, severity and description as
``kqlab.*`` strings.  ``tags`` stay empty on purpose: on a Confluent rule they select the
tagged *fields* a field-level rule visits, and these are message-level rules.

The writer schema comes from the policy's schema source, whatever it is: a registry (its
subject's latest version), a folder of ``.avsc`` files (``<subject>.avsc``, else the highest
``<id>.avsc``), or the ``schema`` given.  A ``mock://`` registry lives in the process that
filled it: a fresh process (the CLI) sees it empty, and the error says what to give instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kqlab.export.base import (
    APPROXIMATE,
    DECODE_KEY,
    DECODE_VALUE,
    EXACT,
    NOT_EXPRESSIBLE,
    Export,
    ExportError,
    RuleFidelity,
    implicit_row,
    implicit_rules,
    provenance,
    provenance_properties,
)
from kqlab.export.confluent_json import DRAFT7, JSON_INT64, json_schema_fidelity, json_schema_of

__all__ = ["build", "cel_variables", "confluent_rule", "register_contract", "rename_cel",
           "writer_schema"]

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
    "Avro: records that do not match the schema cannot be serialized at all (the writer "
    "fails after the rules ran); JSON: the JSONSerializer validates every value against the "
    "registered JSON Schema after the domain rules. Decode and schema-id rules hold by "
    "construction: the serializer is handed objects, never bytes",
    "onFailure DLQ copies the record as JSON with __rule.* headers to the dead-letter topic "
    "and still raises (confluent-kafka >= 2.16)",
    "observe-mode rules are exported with onFailure NONE: the client neither rejects nor counts",
    "JSON: a value that is the JSON text null is handed to the serializer as None, which "
    "returns None - the producer writes a tombstone and no rule runs",
    "JSON: a JSON integer outside the signed 64-bit range anywhere in the value makes the "
    "Python CEL executor fail before any rule is evaluated: every rule refuses that record",
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
    from kqlab.policy.message_params import params_filled

    text = params_filled(rule)  # the current parameters, never a stale copy of them
    if text and "{" not in text:
        return text
    return rule.description or f"kqlab rule {rule.id} ({rule.kind}) failed"


def _params(rule: Any) -> dict[str, str]:
    """What a Confluent rule's ``params`` (a string map the CEL executor ignores) carry of the
    kqlab rule: its kind, severity and description."""
    out = {"kqlab.kind": rule.kind, "kqlab.severity": rule.severity}
    if rule.description:
        out["kqlab.description"] = rule.description
    return out


def _present(rule: Any) -> tuple[str, str]:
    """``(guard, v)``: the CEL guard that the rule's field is present (every step a map that
    has it) and the expression of the field, as :func:`field_rule_to_cel` writes them."""
    from kqlab.policy.model import Rule
    from kqlab.validate.fields import field_rule_to_cel

    probe = field_rule_to_cel(Rule(id=rule.id, kind="field_not_null",
                                   params={"field": rule.param("field")}))
    m = re.fullmatch(r"(.*) && type\((.*)\) != null_type", probe, re.S)
    if m is None:  # pragma: no cover - field_rule_to_cel's documented form
        raise ExportError(f"rule {rule.id!r}: unexpected field expression {probe!r}")
    return m.group(1), m.group(2)


def _cel_double(x: Any) -> str:
    text = repr(float(x))
    return text if any(c in text for c in ".en") else text + ".0"


def _typed_field_cel(rule: Any, ft: Any) -> tuple[str | None, str, str]:
    """A field rule over an Avro field, written for the executor's binding of that field's
    type: ``(expr in kqlab's terms or None for the generic form, status, how)``."""
    kind = rule.kind
    if ft is None or kind == "field_not_null" or \
            (kind == "field_type" and rule.param("type") == "null"):
        return None, EXACT, ""  # type(v) (!=|==) null_type holds for every binding
    if ft.cls == "union" and not ft.numeric:
        return None, APPROXIMATE, (
            f" (approximate: {rule.param('field')} is an Avro union {ft.avro}; kqlab's replay "
            "reads such a field as its branch's JSON text, the executor as the branch value)")
    if ft.cls == "union" and ft.floats and kind == "field_type" and \
            rule.param("type") == "integer":
        return None, APPROXIMATE, (
            f" (approximate: {rule.param('field')} is an Avro union {ft.avro}, which kqlab "
            "reads as doubles: no value is an integer there, while the executor sees ints)")
    if ft.cls not in ("decimal", "temporal"):
        return None, EXACT, ""
    guard, v = _present(rule)
    values = list(rule.param("values") or ()) if kind == "field_in" else []
    null_ok = (kind in ("field_range", "field_in", "field_regex", "field_length") and
               rule.param("allow_null") is not False) or None in values
    checks: list[str]
    if ft.cls == "temporal":
        checks = ["false"]
        how = (f"; {rule.param('field')} is an Avro {ft.avro}, never a number or string to "
               "kqlab: every non-null value fails, written so (the executor would see a "
               + ("day count" if ft.avro == "date" else "timestamp or time") + ")")
    elif kind == "field_range":
        checks = [f"type({v}) != null_type"]
        if rule.param("min") is not None:
            checks.append(f"double({v}) >= {_cel_double(rule.param('min'))}")
        if rule.param("max") is not None:
            checks.append(f"double({v}) <= {_cel_double(rule.param('max'))}")
        how = (f"; {rule.param('field')} is an Avro {ft.avro}: compared through the "
               "executor's double(), as kqlab compares it (the executor binds a Decimal)")
    elif kind == "field_in":
        floats = [_cel_double(x) for x in values
                  if isinstance(x, int | float) and not isinstance(x, bool)]
        checks = [f"double({v}) in [{', '.join(floats)}]"] if floats else ["false"]
        how = (f"; {rule.param('field')} is an Avro {ft.avro}: its double() is looked up "
               "among the numbers listed, as kqlab does")
    elif kind == "field_type":
        checks = [f"type({v}) != null_type"] if rule.param("type") == "number" else ["false"]
        how = f"; {rule.param('field')} is an Avro {ft.avro}: a number, never an integer"
    else:  # regex, length: never a string, bytes or list
        checks = ["false"]
        how = f"; {rule.param('field')} is an Avro {ft.avro}: every non-null value fails"
    body = " && ".join(checks)
    expr = f"!({guard}) || type({v}) == null_type || ({body})" if null_ok else \
        f"{guard} && {body}"
    return expr, EXACT, how


def confluent_rule(rule: Any, *, dlq_topic: str | None = None, writer: Any = None,
                   proto: Any = None) -> tuple[RuleFidelity, dict[str, Any] | None]:
    """One kqlab rule as a Confluent domain rule (or None) with its fidelity.

    ``writer`` is the Avro writer schema (parsed JSON) for Avro values: field rules are then
    written for the executor's binding of their field's type (module docstring); ``proto``
    the message descriptor for Protobuf values (:mod:`kqlab.export.confluent_protobuf`).
    """
    from kqlab.validate.fields import FIELD_KINDS, field_rule_to_cel

    def row(status: str, how: str) -> RuleFidelity:
        return RuleFidelity(rule=rule.id, kind=rule.kind, status=status, how=how,
                            mode=rule.mode, implicit=rule.id.startswith("decode:"))

    k = rule.kind
    value_side = rule.spec.param("target") is None or rule.param("target") != "key"
    status = EXACT
    if k in FIELD_KINDS:
        expr, how = field_rule_to_cel(rule), "CEL CONDITION via field_rule_to_cel"
        if writer is not None:
            from kqlab.export.avro_fields import field_type

            typed, status, extra = _typed_field_cel(rule, field_type(writer,
                                                                     str(rule.param("field"))))
            if typed is not None:
                expr, how = typed, "CEL CONDITION for the Avro type"
            how += extra
        elif proto is not None:
            from kqlab.export.confluent_protobuf import protobuf_field_cel

            typed, status, extra = protobuf_field_cel(rule, proto)
            expr = typed or expr
            how += extra
    elif k == "cel":
        expr, how = rule.param("expr"), "CEL CONDITION, the expression as written"
        status = APPROXIMATE
        how += (" (approximate: the Python client evaluates it with cel-python, kqlab with "
                "cel-expr-python; cel-python has no heterogeneous equality - `1 != null` "
                "raises - and a rule that raises refuses the record)")
        if proto is not None:
            from kqlab.export.confluent_protobuf import CEL_PROTOBUF

            how += CEL_PROTOBUF
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
        extra_vars = sorted(cel_variables(text) - set(_RENAMES))
        if extra_vars:
            return row(NOT_EXPRESSIBLE, f"the {what} reads {', '.join(extra_vars)}; the CEL "
                       "executor binds only `message` (the record value)"), None
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
                           "mode": "WRITE", "type": "CEL", "expr": body,
                           "params": _params(rule)}
    if rule.mode == "observe":
        out["onFailure"] = "NONE"
        return row(APPROXIMATE, how + "; observe mode exported as onFailure NONE (not counted)"
                   ), out
    if dlq_topic:
        out["params"]["dlq.topic"] = dlq_topic
        out["onFailure"] = "DLQ"
    else:
        out["onFailure"] = "ERROR"
    return row(status, how), out


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


def _schema(policy: Any, subject: str, schema: str | None
            ) -> tuple[str, str, str | None, str | None]:
    """``(schemaType, schema text, note, rule id)``: given, the subject's latest, or from the
    policy; ``rule id`` names the ``json_schema`` rule whose schema is registered (or None)."""
    fmt = policy.value.format
    if fmt == "avro":
        if schema is not None:
            return "AVRO", schema, None, None
        text, note = writer_schema(policy, subject)
        return "AVRO", text, note, None
    if fmt == "json":
        if schema is not None:
            return "JSON", schema, None, None
        for r in policy.rules:
            if r.kind != "json_schema" or r.param("target") == "key" or r.mode != "reject":
                continue  # an observe-mode schema would refuse: it is not registered
            doc = json_schema_of(r)
            if doc is None:
                continue
            note = f"schema: the policy's json_schema rule {r.id!r}"
            if isinstance(doc, dict) and "$schema" not in doc:
                # kqlab validates with fastjsonschema, whose default is draft-07; the
                # serializer's jsonschema defaults to the newest draft: pin the one kqlab used
                doc = {"$schema": DRAFT7, **doc}
                note += " (pinned to draft-07, the draft kqlab's validator assumed)"
            return "JSON", json.dumps(doc, sort_keys=True), note, r.id
        return "JSON", json.dumps({}), \
            "schema: the empty schema {} accepts any JSON value, as json_valid does (the " \
            "policy declares no JSON Schema)", None
    raise ExportError(f"a data contract needs an Avro, JSON or Protobuf value; policy "
                      f"{policy.name!r} "
                      f"has value format {fmt!r}")


def writer_schema(policy: Any, subject: str | None = None) -> tuple[str, str]:
    """``(schema text, where it came from)``: the Avro writer schema of the policy's value
    subject, read from the policy's schema source — the subject's latest version in a
    registry, or from a folder ``<subject>.avsc``, else the highest ``<id>.avsc``, else its
    one schema.  ``ExportError`` says what to give when the source cannot answer (an
    in-memory ``mock://`` registry is empty in a new process)."""
    subject = _subject(policy, subject)
    src = policy.value.schemas
    if src is None or not (src.registry or src.path):
        raise ExportError("an Avro data contract needs the writer schema: give schema= "
                          "(kqlab export --schema FILE.avsc), value.schemas.path (a folder of "
                          ".avsc files) or value.schemas.registry in the policy")
    if src.path:
        return _folder_schema(Path(src.path), subject)
    from kqlab.serde.schemas import registry_client

    try:
        latest = registry_client(src.registry, src.config).get_latest_version(subject)
    except Exception as exc:
        hint = ""
        if str(src.registry).startswith("mock://"):
            hint = (f"; {src.registry} is an in-memory registry, empty in a new process "
                    "unless the same process filled it: point value.schemas.path at a folder "
                    "of .avsc files or pass --schema FILE.avsc")
        raise ExportError(f"cannot read the latest schema of {subject!r} from the policy's "
                          f"registry: {type(exc).__name__}: {exc}{hint}") from None
    return latest.schema.schema_str, \
        f"schema: latest version {latest.version} of {subject!r} (id {latest.schema_id})"


def _folder_schema(folder: Path, subject: str) -> tuple[str, str]:
    if folder.is_file():
        files = {folder.stem: folder}
    elif folder.is_dir():
        files = {f.stem: f for f in sorted(folder.glob("*.avsc"))}
    else:
        raise ExportError(f"the policy's schema folder {folder} does not exist")
    ids = sorted((int(stem), f) for stem, f in files.items() if stem.isdigit())
    if subject in files:
        chosen, why = files[subject], f"{subject}.avsc in the policy's schema folder"
    elif ids:
        chosen = ids[-1][1]
        why = f"{chosen.name}, the highest schema id in the policy's schema folder"
    elif len(files) == 1:
        chosen = next(iter(files.values()))
        why = f"{chosen.name}, the one schema in the policy's schema folder"
    else:
        raise ExportError(f"the schema folder {folder} holds no {subject}.avsc and no "
                          "<id>.avsc: name the writer schema with --schema FILE.avsc")
    try:
        text = chosen.read_text(encoding="utf-8")
        json.loads(text)
    except (OSError, ValueError) as exc:
        raise ExportError(f"cannot read the writer schema {chosen.name}: {exc}") from None
    return text, f"schema: {why}"


def build(policy: Any, *, subject: str | None = None, schema: str | None = None,
          dlq_topic: str | None = None) -> Export:
    """The register body, the subject-config body and a registration script for ``policy``.

    ``subject`` defaults to the policy's value subject (TopicNameStrategy otherwise);
    ``schema`` to the writer schema from the policy's schema source (:func:`writer_schema`);
    ``dlq_topic`` makes failing rules copy the record there (``onFailure: DLQ``) instead of
    only raising.
    """
    subject = _subject(policy, subject)
    pb = None
    schema_note: str | None
    if policy.value.format == "protobuf" and schema is None:
        from kqlab.export.confluent_protobuf import protobuf_contract

        pb = protobuf_contract(policy, subject)
        schema_type, schema_text, schema_note, schema_rule = "PROTOBUF", pb.schema, pb.note, None
    else:
        schema_type, schema_text, schema_note, schema_rule = _schema(policy, subject, schema)
    writer = json.loads(schema_text) if schema_type == "AVRO" else None
    prov = provenance(policy)
    fid, rules = [], []
    for r in policy.rules:
        f, rule = confluent_rule(r, dlq_topic=dlq_topic, writer=writer,
                                 proto=None if pb is None else pb.desc)
        if schema_type == "JSON" and schema is None and r.kind == "json_schema" and \
                r.param("target") != "key":
            f = json_schema_fidelity(r, schema_rule)
        elif schema_type == "JSON" and rule is not None and f.status == EXACT:
            f = RuleFidelity(rule=f.rule, kind=f.kind, mode=f.mode, status=APPROXIMATE,
                             how=f.how + JSON_INT64)
        fid.append(f)
        if rule is not None:
            rules.append(rule)
    fid.extend(_implicit(policy))
    warnings: list[str] = []
    if writer is not None:
        from kqlab.export.avro_fields import rule_warnings

        warnings = [f"rule {rid}: {why}" for rid, why in
                    rule_warnings(policy.rules, writer).items()]
    metadata = {"properties": provenance_properties(prov)}
    rule_set = {"domainRules": rules}
    register = {"schemaType": schema_type, "schema": schema_text,
                "references": [] if pb is None else pb.references,
                "metadata": metadata, "ruleSet": rule_set}
    config = {"defaultMetadata": metadata, "defaultRuleSet": rule_set}
    script = _SCRIPT.format(subject=subject, policy=policy.name, hash=prov["content_hash"])
    files = {
        f"confluent/{subject}.register.json": json.dumps(register, indent=2) + "\n",
        f"confluent/{subject}.config.json": json.dumps(config, indent=2) + "\n",
        "confluent/register_contract.py": script,
    }
    if pb is not None and pb.reference_bodies:
        files[f"confluent/{subject}.references.json"] = json.dumps(
            [{"subject": s, "body": b} for s, b in pb.reference_bodies.items()], indent=2) + "\n"
        notes_pb = [f"register the references first ({', '.join(pb.reference_bodies)}: "
                    f"{subject}.references.json, in order; register_contract.py does)"]
    else:
        notes_pb = []
    notes = [n for n in (schema_note,) if n] + notes_pb
    notes.append(f"POST /subjects/{subject}/versions with {subject}.register.json (a new schema "
                 f"version carrying the rules), or PUT /config/{subject} with "
                 f"{subject}.config.json (defaultRuleSet merged into every new version)")
    notes.append("the registry must support data contracts (Confluent Platform Enterprise 7.4+ "
                 "with the RuleSetResourceExtension, or Confluent Cloud Advanced); Karapace "
                 "silently drops ruleSet")
    return Export(target="confluent", title=TITLE, policy=policy.name, files=files,
                  fidelity=tuple(fid), behaviour=BEHAVIOUR, notes=tuple(notes),
                  warnings=tuple(warnings),
                  data={"subject": subject, "register": register, "config": config,
                        "schema_rule": schema_rule, "writer": writer, "proto": pb})


def _implicit(policy: Any) -> list[RuleFidelity]:
    """The implicit rows (:func:`~kqlab.export.base.implicit_rules`) for a data contract."""
    out = []
    for r in implicit_rules(policy):
        if r.id == DECODE_VALUE:
            f, _ = confluent_rule(r)
            out.append(implicit_row(r, f.status, f.how))
        elif r.id == DECODE_KEY:
            out.append(implicit_row(r, EXACT, "the contract belongs to the value subject and "
                                    "never reads the key: no record is refused for its key, as "
                                    "in the replay"))
        else:
            out.append(implicit_row(r, APPROXIMATE, "by construction: the serializer frames "
                                    "every value with the latest registered id of the subject, "
                                    "where the replay accepts any id its schema source knows"))
    return out


def register_contract(client: Any, export: Export) -> int:
    """Register the exported contract through a confluent-kafka ``SchemaRegistryClient``
    (``mock://`` in tests); returns the schema id.  The body goes through
    ``Schema.from_dict``, the same model the REST client POSTs."""
    from confluent_kafka.schema_registry import Schema

    data = export.data
    pb = data.get("proto")
    for ref_subject, body in (pb.reference_bodies.items() if pb is not None else ()):
        client.register_schema(ref_subject, Schema.from_dict(body))  # Protobuf imports first
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
here = Path(__file__).parent
refs = here / "{subject}.references.json"
for ref in json.loads(refs.read_text()) if refs.exists() else []:  # Protobuf imports
    client.register_schema(ref["subject"], Schema.from_dict(ref["body"]))
body = json.loads((here / "{subject}.register.json").read_text())
print(client.register_schema("{subject}", Schema.from_dict(body)))
'''
