"""Tansu per-topic schema files (deployment-targets.md §6.1, test-broker.md §2).

Started with ``--schema-registry file://DIR``, Tansu validates every produced record of topic
``T`` against ``DIR/T.json`` (JSON Schema), ``T.avsc`` (Avro) or ``T.proto``; one document
describes the ``key`` and/or the ``value``.  It expects *raw* payloads — JSON text, an Avro
object-container file, raw protobuf — never the Confluent wire format, and a schema for a part
makes that part mandatory.

For JSON values the exporter writes a JSON Schema whose ``value`` combines the policy's inline
``json_schema`` with its field rules, translated keyword by keyword (``field_range`` →
``minimum``/``maximum``, ``field_in`` → ``enum``, ``field_not_null`` → ``required`` along the
path and ``not: {type: null}`` ...), so kqlab's absent-or-null semantics (``kqlab.validate.fields``)
carry over: a value check on an absent field passes because ``properties`` only constrains keys
that are present.  For Avro values it writes an ``.avsc`` record whose ``value`` field is the
subject's latest writer schema: structure only (Avro has no ranges), and producers must switch
from the Confluent serializer to object-container files.

Keys: a key schema makes Tansu decode every key like the value (JSON text for a ``.json``
topic) and refuse the rest, so ``key_required`` is exported only for policies whose keys *are*
JSON; for string keys it would refuse every record (a plain ``order-1`` is not JSON text), so
it is not exported at all.  Every rule's id, severity and description travel as a
``$comment`` beside its part of the schema (``doc`` in an ``.avsc``).
"""

from __future__ import annotations

import json
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
    provenance_lines,
    rule_lines,
)

__all__ = ["build", "field_schema", "value_schema"]

TITLE = "Tansu per-topic schema files"

BEHAVIOUR = (
    "broker-side: every producer is checked, whatever client it uses",
    "whole batch: one invalid record fails its batch with INVALID_RECORD (87) and a generic "
    "'Broker failed to validate record' (no per-record errors; the reason is only in the "
    "broker's WARN log) — the replay's collateral records are rejected too",
    "raw payloads only: JSON text, Avro object-container files or raw protobuf; a value in the "
    "Confluent wire format (magic byte + schema id) is always rejected",
    "a schema for the value makes it mandatory: null values (tombstones) are rejected",
    "no headers, sizes, timestamps or schema ids; no DLQ; no observe mode",
)

_JSON_TYPES = {"string": "string", "number": "number", "integer": "integer",
               "boolean": "boolean", "object": "object", "array": "array", "null": "null"}


def _nest(path: tuple[str, ...], leaf: dict[str, Any], required: bool) -> dict[str, Any]:
    """``leaf`` placed at ``path`` (``properties`` per step), the steps ``required`` if asked."""
    schema = leaf
    for step in reversed(path):
        node: dict[str, Any] = {"properties": {step: schema}}
        if required:
            node = {"type": "object", "required": [step], **node}
        schema = node
    return schema


def field_schema(rule: Any) -> tuple[dict[str, Any], str, str]:
    """A field rule as a JSON Schema over the value: ``(schema, status, how)``.

    Examples
    --------
    >>> from kqlab.policy.model import Rule
    >>> s, status, _ = field_schema(Rule(id="a", kind="field_range",
    ...                                  params={"field": "amount", "min": 0.01}))
    >>> s, status  # doctest: +NORMALIZE_WHITESPACE
    ({'properties': {'amount': {'anyOf': [{'type': 'null'},
                                          {'type': 'number', 'minimum': 0.01}]}}}, 'exact')
    """
    path = tuple(rule.param("field").split("."))
    k = rule.kind
    allow_null = rule.param("allow_null") is not False
    status, how = EXACT, ""
    if k == "field_not_null":
        return _nest(path, {"not": {"type": "null"}}, True), EXACT, \
            "required along the path, not null"
    if k == "field_type":
        t = rule.param("type")
        if t == "null":
            return _nest(path, {"type": "null"}, False), EXACT, "type null (absent passes)"
        how = f"type {_JSON_TYPES[t]}, required along the path"
        if t == "integer":
            status, how = APPROXIMATE, how + " (JSON Schema's integer accepts 1.0, kqlab not)"
        return _nest(path, {"type": _JSON_TYPES[t]}, True), status, how
    if k == "field_range":
        check: dict[str, Any] = {"type": "number"}
        if rule.param("min") is not None:
            check["minimum"] = rule.param("min")
        if rule.param("max") is not None:
            check["maximum"] = rule.param("max")
        how = "type number with minimum/maximum"
    elif k == "field_in":
        from kqlab.policy.model import thaw

        values = list(thaw(rule.param("values")))
        if allow_null and None not in values:
            values.append(None)
        check, how = {"enum": values}, "enum"
        return _nest(path, check, not allow_null), EXACT, how
    elif k == "field_regex":
        check = {"type": "string", "pattern": rule.param("pattern")}
        status, how = APPROXIMATE, ("pattern (Tansu's regex dialect, not RE2: look-around, "
                                    "\\d/\\w and anchors may differ)")
    elif k == "field_length":
        lo, hi = rule.param("min") or 0, rule.param("max")
        s: dict[str, Any] = {"type": "string", "minLength": lo}
        a: dict[str, Any] = {"type": "array", "minItems": lo}
        if hi is not None:
            s["maxLength"], a["maxItems"] = hi, hi
        check, how = {"anyOf": [s, a]}, "minLength/maxLength (strings), minItems/maxItems (arrays)"
    else:
        raise ExportError(f"rule {rule.id!r} ({k}) is not a field rule")
    if allow_null:
        return _nest(path, {"anyOf": [{"type": "null"}, check]}, False), status, how
    return _nest(path, check, True), status, how + ", required (allow_null: false)"


def _inline_schema(rule: Any) -> dict[str, Any] | None:
    from kqlab.policy.model import thaw

    if rule.param("schema") is not None:
        return thaw(rule.param("schema"))
    path = rule.param("path")
    if path and Path(path).is_file():
        return json.loads(Path(path).read_text(encoding="utf-8"))
    return None


def _json_rules(policy: Any, rules: Any = None
                ) -> tuple[list[RuleFidelity], list[dict[str, Any]], bool]:
    """JSON-format policies: fidelity, the value's schema parts (each with its rule's
    ``$comment``), whether the key is required (a key schema is written)."""
    from kqlab.validate.fields import FIELD_KINDS

    fid, parts, key_required = [], [], False
    for r in (policy.rules if rules is None else rules):
        def row(status: str, how: str, r: Any = r) -> RuleFidelity:
            return RuleFidelity(rule=r.id, kind=r.kind, status=status, how=how, mode=r.mode)

        def comment(part: dict[str, Any], r: Any = r) -> dict[str, Any]:
            return {"$comment": rule_lines([r])[0], **part}

        value_side = r.spec.param("target") is None or r.param("target") != "key"
        if r.mode == "observe":
            fid.append(row(NOT_EXPRESSIBLE, "observe-only rule: Tansu can only reject"))
        elif r.when is not None:
            fid.append(row(NOT_EXPRESSIBLE, "`when` precondition: a schema has no conditions "
                           "over headers or metadata"))
        elif r.kind in FIELD_KINDS:
            schema, status, how = field_schema(r)
            parts.append(comment(schema))
            fid.append(row(status, f"value JSON Schema: {how}"))
        elif r.kind in ("json_valid", "decodable") and value_side:
            fid.append(row(APPROXIMATE, "the value must parse as JSON; Tansu also refuses null "
                           "values (tombstones), which the replay's decoding passes"))
        elif r.kind == "json_schema" and value_side:
            schema = _inline_schema(r)
            if schema is None:
                fid.append(row(NOT_EXPRESSIBLE, f"schema file {r.param('path')!r} not found at "
                               "export time"))
            else:
                parts.append(comment(schema))
                fid.append(row(APPROXIMATE, "the schema itself, validated by Tansu's JSON Schema "
                               "library (draft support may differ from fastjsonschema)"))
        elif r.kind == "value_required":
            ok = not r.param("allow_tombstones")
            fid.append(row(EXACT if ok else NOT_EXPRESSIBLE,
                           "a value schema makes the value mandatory" if ok else
                           "tombstones allowed, but Tansu rejects null values on schema topics"))
        elif r.kind == "key_required":
            if policy.key.format == "json":
                key_required = True
                fid.append(row(APPROXIMATE, "a key schema makes the key mandatory; Tansu also "
                               "decodes it and refuses keys that are not JSON text"))
            else:
                fid.append(row(NOT_EXPRESSIBLE, "a key schema would make Tansu decode every key "
                               f"as JSON text; this policy's keys are {policy.key.format!r}, so "
                               "every record with a plain key (order-1, not \"order-1\") would "
                               "be refused: no key schema is written"))
        else:
            fid.append(row(NOT_EXPRESSIBLE, "Tansu validates payload schemas only, not "
                           f"{r.spec.category} rules" if r.kind != "plugin" else
                           "Python plugin: never exportable"))
    return fid, parts, key_required


def _implicit(policy: Any, key_schema: bool, fmt: str) -> list[RuleFidelity]:
    """The implicit rows (:func:`~kqlab.export.base.implicit_rules`) for Tansu's files."""
    out = []
    for r in implicit_rules(policy):
        if r.id == DECODE_VALUE:
            f = (_json_rules(policy, [r])[0] if fmt == "json" else _avro_rules(policy, [r]))[0]
            out.append(implicit_row(r, f.status, f.how))
        elif r.id == DECODE_KEY:
            if key_schema:
                out.append(implicit_row(r, APPROXIMATE, "the key schema makes Tansu decode every "
                                        "key as JSON text and refuse the rest; the replay never "
                                        "decodes keys"))
            else:
                out.append(implicit_row(r, EXACT, "no key schema is written: Tansu does not look "
                                        "at keys, as the replay does not"))
        else:
            out.append(implicit_row(r, NOT_EXPRESSIBLE, "Tansu rejects every value in the "
                                    "Confluent wire format (magic byte + schema id), whatever "
                                    "its id"))
    return out


def value_schema(policy: Any) -> dict[str, Any]:
    """The JSON Schema of a JSON policy's value (every expressible rule combined)."""
    _, parts, _ = _json_rules(policy)
    if not parts:
        return {}
    return parts[0] if len(parts) == 1 else {"allOf": parts}


def _avro_rules(policy: Any, rules: Any = None) -> list[RuleFidelity]:
    fid = []
    for r in (policy.rules if rules is None else rules):
        def row(status: str, how: str, r: Any = r) -> RuleFidelity:
            return RuleFidelity(rule=r.id, kind=r.kind, status=status, how=how, mode=r.mode)

        if r.kind in ("avro_valid", "decodable") and r.mode == "reject" and r.when is None:
            fid.append(row(APPROXIMATE, "the value must decode with the topic's Avro schema, "
                           "but as an Avro object-container file: producers must stop using "
                           "the Confluent wire format, which Tansu always rejects"))
        elif r.kind in ("schema_id_registered", "schema_id_allowed", "magic_byte"):
            fid.append(row(NOT_EXPRESSIBLE, "object-container files carry their schema, not a "
                           "registry id; Confluent-framed values are always rejected"))
        elif r.kind.startswith("field_"):
            fid.append(row(NOT_EXPRESSIBLE, "an Avro schema has types, no value constraints "
                           "(ranges, sets, patterns, presence beyond the type)"))
        elif r.kind == "plugin":
            fid.append(row(NOT_EXPRESSIBLE, "Python plugin: never exportable"))
        else:
            fid.append(row(NOT_EXPRESSIBLE, "Tansu validates payload schemas only, not "
                           f"{r.spec.category} rules"))
    return fid


def build(policy: Any, *, schema: str | None = None) -> Export:
    """One schema file per topic of ``policy`` (``<topic>.json`` or ``<topic>.avsc``).

    ``schema`` is the Avro writer schema for Avro policies (default: from the policy's schema
    source, as :func:`kqlab.export.confluent.writer_schema` finds it).
    """
    if not policy.topics.names:
        raise ExportError(f"policy {policy.name!r} names no topics: Tansu files are per topic")
    prov = provenance(policy)
    fmt = policy.value.format
    files: dict[str, str] = {}
    notes: list[str] = []
    data: dict[str, Any] = {}
    key_required = False
    if fmt == "json":
        fid, _, key_required = _json_rules(policy)
        status = {f.rule: f.status for f in fid}
        comment = "\n".join(["kqlab export of policy " + "; ".join(provenance_lines(prov)),
                             *rule_lines(policy.rules, status)])
        doc: dict[str, Any] = {"$comment": comment, "type": "object",
                               "properties": {"value": value_schema(policy)},
                               "required": ["value"]}
        if key_required:
            doc["properties"]["key"] = {}
            doc["required"] = ["key", "value"]
        for t in policy.topics.names:
            files[f"tansu/{t}.json"] = json.dumps(doc, indent=2) + "\n"
        data = {"format": "json", "schema": doc}
    elif fmt == "avro":
        from kqlab.export.confluent import _schema, _subject

        fid = _avro_rules(policy)
        status = {f.rule: f.status for f in fid}
        comment = "\n".join(["kqlab export of policy " + "; ".join(provenance_lines(prov)),
                             *rule_lines(policy.rules, status)])
        _, text, note, _ = _schema(policy, _subject(policy, None), schema)
        if note:
            notes.append(note)
        writer = json.loads(text)
        doc = {"type": "record", "name": "TansuRecord", "namespace": "kqlab.export",
               "doc": comment, "fields": [{"name": "value", "type": writer}]}
        for t in policy.topics.names:
            files[f"tansu/{t}.avsc"] = json.dumps(doc, indent=2) + "\n"
        data = {"format": "avro", "schema": doc}
    else:
        fid = [RuleFidelity(rule=r.id, kind=r.kind, status=NOT_EXPRESSIBLE,
                            how=f"value format {fmt!r}: Tansu validates JSON, Avro and "
                            "protobuf payloads only", mode=r.mode) for r in policy.rules]
        notes.append(f"no schema file: value format {fmt!r} has no schema Tansu can check")
    if fmt in ("json", "avro"):
        fid.extend(_implicit(policy, key_required, fmt))
    notes.append("start the broker with --schema-registry file://./<dir> from the directory's "
                 "parent (an absolute file:/// path fails to canonicalize)")
    return Export(target="tansu", title=TITLE, policy=policy.name, files=files,
                  fidelity=tuple(fid), behaviour=BEHAVIOUR, notes=tuple(notes), data=data)
