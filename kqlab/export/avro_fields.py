"""The Avro type behind a field rule's path, and what that type means for its exports.

A field rule is defined once (:mod:`kqlab.validate.fields`), but its exports run on other
engines' views of the same Avro value.  kqlab's replay decodes Avro into Arrow columns
(:mod:`kqlab.serde.avro_arrow`); confluent-kafka 2.16.0's CEL executor binds fastavro's Python
objects (``rules/cel/cel_executor.py``: ``_value_to_cel``).  For most types the two agree —
numbers are numbers, enums and uuids strings, bytes bytes, records maps — but not for these,
verified with 2.16.0:

=====================  =============================  ======================================
Avro                   kqlab's replay                 Confluent's CEL executor
=====================  =============================  ======================================
decimal                a number (cast to double)      a Python ``Decimal``: ``type()`` is
                                                      none of int/uint/double, but its own
                                                      ``double()`` converts it
date                   a date: not a number           an ``int`` (days since the epoch)
time-millis/-micros    a time: not a number           a Python ``time`` (no CEL type)
timestamp-*            a timestamp: not a number      a CEL ``timestamp``
union of several       the branch's JSON text         the branch value itself
non-null types
=====================  =============================  ======================================

:func:`field_type` finds the Avro type at a dotted path of a writer schema and classifies
it; :func:`rule_warnings` names field rules that cannot mean what they say on that type (a
range over a timestamp fails every record, in the replay and in every target alike).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["AvroField", "field_type", "rule_warnings"]

_NUMBERS = {"int", "long", "float", "double"}
_FLOATS = {"float", "double"}
_TEMPORAL = {"date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros",
             "timestamp-nanos", "local-timestamp-millis", "local-timestamp-micros",
             "local-timestamp-nanos"}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


@dataclass(frozen=True, slots=True)
class AvroField:
    """The Avro type at a field path: ``cls`` is one of ``number``, ``decimal``,
    ``temporal``, ``string``, ``bytes``, ``boolean``, ``record``, ``array``, ``null``,
    ``union`` (several non-null branches; ``numeric`` when they are all numbers, ``floats``
    when one is a float or double), and ``avro`` the type's name as Avro writes it
    (``timestamp-millis``, ``decimal(10, 2)``, ``["string", "long"]``)."""

    cls: str
    avro: str
    nullable: bool = False
    numeric: bool = False
    floats: bool = False


def _fullname(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _collect(schema: Any, namespace: str | None, named: dict[str, Any]) -> None:
    """Every named type (record, enum, fixed) a schema defines, by full name."""
    if isinstance(schema, list):
        for branch in schema:
            _collect(branch, namespace, named)
    elif isinstance(schema, dict):
        t = schema.get("type")
        if t in ("record", "error", "enum", "fixed") and "name" in schema:
            full = _fullname(schema["name"], schema.get("namespace", namespace))
            named[full] = schema
            named.setdefault(schema["name"], schema)
            namespace = full.rpartition(".")[0] or None
        if t in ("record", "error"):
            for f in schema.get("fields", ()):
                _collect(f.get("type"), namespace, named)
        elif t == "array":
            _collect(schema.get("items"), namespace, named)
        elif t == "map":
            _collect(schema.get("values"), namespace, named)
        elif isinstance(t, dict | list):
            _collect(t, namespace, named)


def _deref(schema: Any, named: dict[str, Any]) -> Any:
    while isinstance(schema, str) and schema not in _PRIMITIVES and schema in named:
        schema = named[schema]
    if isinstance(schema, dict) and isinstance(schema.get("type"), dict | list) and \
            "logicalType" not in schema:
        return _deref(schema["type"], named)
    return schema


def _unwrap(schema: Any, named: dict[str, Any]) -> tuple[Any, bool]:
    """``(schema without a null branch, nullable)``; several non-null branches stay a list."""
    schema = _deref(schema, named)
    if isinstance(schema, list):
        rest = [b for b in schema if b != "null"]
        nullable = len(rest) < len(schema)
        if len(rest) == 1:
            return _deref(rest[0], named), nullable
        return [_deref(b, named) for b in rest], nullable
    return schema, False


def _classify(schema: Any, nullable: bool) -> AvroField:
    if isinstance(schema, list):
        names = [b if isinstance(b, str) else b.get("logicalType") or b.get("type")
                 for b in schema]
        numeric = all(isinstance(b, str) and b in _NUMBERS for b in schema)
        return AvroField("union", str(names).replace("'", '"'), nullable, numeric=numeric,
                         floats=numeric and any(b in _FLOATS for b in schema))
    if isinstance(schema, str):
        cls = {"null": "null", "boolean": "boolean", "bytes": "bytes", "string": "string"}.get(
            schema, "number" if schema in _NUMBERS else "record")
        return AvroField(cls, schema, nullable, numeric=cls == "number",
                         floats=schema in _FLOATS)
    if isinstance(schema, dict):
        logical, t = schema.get("logicalType"), schema.get("type")
        if logical == "decimal" and t in ("bytes", "fixed"):
            return AvroField("decimal", f"decimal({schema.get('precision')}, "
                             f"{schema.get('scale', 0)})", nullable)
        if logical in _TEMPORAL:
            return AvroField("temporal", str(logical), nullable)
        if logical == "uuid":
            return AvroField("string", "uuid", nullable)
        if t in ("record", "error", "map"):
            return AvroField("record", str(t), nullable)
        if t == "enum":
            return AvroField("string", "enum", nullable)
        if t == "fixed":
            return AvroField("bytes", "fixed", nullable)
        if t == "array":
            return AvroField("array", "array", nullable)
        if isinstance(t, str):
            return _classify(t, nullable)
    return AvroField("record", "unknown", nullable)


def field_type(writer: Any, path: str) -> AvroField | None:
    """The Avro type at the dotted ``path`` of the record schema ``writer`` (parsed JSON), or
    None when the path does not lead to a field (or crosses a union of several records).

    Examples
    --------
    >>> s = {"type": "record", "name": "O", "fields": [
    ...     {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
    ...                                 "precision": 10, "scale": 2}},
    ...     {"name": "c", "type": ["null", {"type": "record", "name": "C", "fields": [
    ...         {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}]}]}
    >>> field_type(s, "amount").cls, field_type(s, "c.at").avro, field_type(s, "c.x")
    ('decimal', 'timestamp-millis', None)
    """
    named: dict[str, Any] = {}
    _collect(writer, None, named)
    node, nullable = _unwrap(writer, named)
    for step in path.split("."):
        if not isinstance(node, dict) or node.get("type") not in ("record", "error"):
            if isinstance(node, dict) and node.get("type") == "map":
                node, _ = _unwrap(node.get("values"), named)
                nullable = True  # a map may lack the key
                continue
            return None
        match = [f for f in node.get("fields", ()) if f.get("name") == step]
        if not match:
            return None
        node, step_nullable = _unwrap(match[0].get("type"), named)
        nullable = nullable or step_nullable
    return _classify(node, nullable)


#: per field kind, the classes whose values the rule can judge as written
_JUDGES = {"field_range": {"number", "decimal"}, "field_regex": {"string"},
           "field_length": {"string", "bytes", "array"}}
_TYPE_CLASSES = {"string": {"string"}, "number": {"number", "decimal"},
                 "integer": {"number"}, "boolean": {"boolean"}, "object": {"record"},
                 "array": {"array"}, "null": {"null"}}


def rule_warnings(rules: Any, writer: Any) -> dict[str, str]:
    """Rule id → why a field rule cannot mean what it says on the writer schema ``writer``:
    the path is not in the schema, or the field's type is one the rule never passes (a
    ``field_range`` over a timestamp compares numbers with a date and fails every non-null
    value, in the replay and in every target)."""
    from kqlab.validate.fields import FIELD_KINDS

    out: dict[str, str] = {}
    for r in rules:
        if r.kind not in FIELD_KINDS:
            continue
        path = str(r.param("field"))
        ft = field_type(writer, path)
        if ft is None:
            if r.kind == "field_not_null" or r.param("allow_null") is False:
                out[r.id] = (f"the writer schema has no field {path}: the rule fails every "
                             "record")
            else:
                out[r.id] = (f"the writer schema has no field {path}: the rule passes every "
                             "record")
            continue
        cls = ft.cls
        if cls == "union":
            cls = "number" if ft.numeric else "string"  # the replay reads JSON text
        if r.kind in _JUDGES and cls not in _JUDGES[r.kind]:
            what = {"field_range": "a number", "field_regex": "a string",
                    "field_length": "a string, bytes or an array"}[r.kind]
            hint = ""
            if ft.avro.startswith(("timestamp", "local-timestamp")) and r.kind == "field_range":
                hint = (f" (compare it in a cel rule, e.g. value.{path} >= "
                        "timestamp('2025-01-01T00:00:00Z'))")
            out[r.id] = (f"{r.kind} on {path}, an Avro {ft.avro}, which is not {what}: every "
                         f"non-null value fails, in the replay and in every target{hint}")
        elif r.kind == "field_type" and cls not in _TYPE_CLASSES[str(r.param("type"))]:
            out[r.id] = (f"field_type {r.param('type')} on {path}, an Avro {ft.avro}: every "
                         "non-null value fails")
        elif r.kind == "field_in":
            values = list(r.param("values") or ())
            usable = {"string": any(isinstance(v, str) for v in values),
                      "number": any(isinstance(v, int | float) and not isinstance(v, bool)
                                    for v in values),
                      "decimal": any(isinstance(v, int | float) and not isinstance(v, bool)
                                     for v in values),
                      "boolean": any(isinstance(v, bool) for v in values)}.get(cls, False)
            if not usable:
                out[r.id] = (f"field_in on {path}, an Avro {ft.avro}: none of the listed values "
                             "has its type, so every non-null value fails")
    return out
