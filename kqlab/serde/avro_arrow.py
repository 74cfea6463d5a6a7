"""Avro schema → Arrow type, plus the few value fix-ups ``pa.array`` needs on fastavro output.

Mapping (every Arrow field is nullable; undecodable rows are null structs):

==========================================  ===========================================
Avro                                        Arrow
==========================================  ===========================================
null / boolean / int / long                 null / bool / int32 / int64
float / double / string / bytes / fixed     float32 / float64 / string / binary / binary
record (and error)                          struct (field order kept)
enum                                        string (the symbol)
array / map                                 list / map<string, …>
["null", T] (any position)                  T (nullable)
union of numeric primitives only            int64, or float64 when a branch is float/double
any other union of two or more non-null     string holding the branch value as JSON text
branches                                    (documented fallback: Arrow cannot build a
                                            dense union from Python values in one pass)
recursive named type (at the recursion)     string holding the value as JSON text
decimal (bytes or fixed)                    decimal128(precision, scale) (decimal256 > 38)
date                                        date32
time-millis / time-micros                   time32[ms] / time64[us]
timestamp-millis / -micros / -nanos         timestamp[ms / us / ns, tz=UTC]
local-timestamp-millis / -micros            timestamp[ms / us] (no time zone)
uuid (string or fixed)                      string
other logical types                         their underlying type
==========================================  ===========================================

fastavro returns Python ``datetime``/``date``/``time``/``Decimal`` objects for logical types,
which ``pa.array`` converts directly; only ``uuid`` and the JSON fallbacks need a per-value
converter, and :func:`avro_to_arrow` returns ``None`` as converter when none is needed (the
common case: no per-value Python work beyond fastavro itself).
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

__all__ = ["ArrowMapping", "arrow_type", "avro_to_arrow", "to_json_text"]

Converter = Callable[[Any], Any]

_PRIMITIVES = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}
_INTEGERS = {"int", "long"}
_FLOATS = {"float", "double"}
_NAMED = {"record", "error", "enum", "fixed"}


@dataclass(frozen=True, slots=True)
class ArrowMapping:
    """The Arrow type of an Avro schema and the per-value converter (``None``: not needed)."""

    type: pa.DataType
    converter: Converter | None


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")  # Avro's JSON encoding of bytes/fixed
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot render {type(value).__name__} as JSON")


def to_json_text(value: Any) -> str | None:
    """A decoded value as JSON text (bytes as ISO-8859-1 strings, decimals as strings)."""
    if value is None:
        return None
    return orjson.dumps(value, default=_json_default,
                        option=orjson.OPT_NON_STR_KEYS).decode()


def _uuid_text(value: Any) -> str | None:
    return None if value is None else str(value)


def _fullname(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


class _Walker:
    def __init__(self, named: Mapping[str, Any] | None) -> None:
        self.named: dict[str, Any] = dict(named or {})
        self.expanding: list[str] = []

    def walk(self, schema: Any, ns: str | None) -> ArrowMapping:
        if isinstance(schema, str):
            return self._name(schema, ns)
        if isinstance(schema, list):
            return self._union(schema, ns)
        if isinstance(schema, dict):
            return self._complex(schema, ns)
        raise ValueError(f"not an Avro schema: {schema!r}")

    def _name(self, name: str, ns: str | None) -> ArrowMapping:
        if name in _PRIMITIVES:
            return ArrowMapping(_PRIMITIVES[name], None)
        full = _fullname(name, ns)
        if full not in self.named and name in self.named:
            full = name
        if full not in self.named:
            raise ValueError(f"unknown Avro type name {name!r}")
        if full in self.expanding:  # recursive type: Arrow types are finite trees
            return ArrowMapping(pa.string(), to_json_text)
        schema = self.named[full]
        return self._complex(schema, full.rpartition(".")[0] or None, registered=True)

    def _union(self, branches: list[Any], ns: str | None) -> ArrowMapping:
        mapped = [(b, self.walk(b, ns)) for b in branches]
        non_null = [(b, m) for b, m in mapped if b != "null"]
        if not non_null:
            return ArrowMapping(pa.null(), None)
        if len(non_null) == 1:
            return non_null[0][1]
        names = {b for b, _ in non_null if isinstance(b, str)}
        if len(names) == len(non_null) and names <= _INTEGERS | _FLOATS:
            return ArrowMapping(pa.float64() if names & _FLOATS else pa.int64(), None)
        return ArrowMapping(pa.string(), to_json_text)

    def _complex(self, schema: dict[str, Any], ns: str | None,
                 registered: bool = False) -> ArrowMapping:
        kind = schema.get("type")
        if isinstance(kind, dict | list):
            return self.walk(kind, ns)
        if kind in _NAMED:
            full = _fullname(schema["name"], schema.get("namespace", ns))
            if not registered:
                self.named[full] = schema
            ns = full.rpartition(".")[0] or None
            if kind in ("record", "error"):
                self.expanding.append(full)
                try:
                    return self._record(schema, ns)
                finally:
                    self.expanding.pop()
            if kind == "enum":
                return ArrowMapping(pa.string(), None)
            return self._logical(schema, "fixed") or ArrowMapping(pa.binary(), None)
        if kind == "array":
            items = self.walk(schema["items"], ns)
            item_conv = items.converter
            return ArrowMapping(pa.list_(items.type), None if item_conv is None else
                                (lambda v: None if v is None else [item_conv(x) for x in v]))
        if kind == "map":
            values = self.walk(schema["values"], ns)
            value_conv = values.converter
            return ArrowMapping(pa.map_(pa.string(), values.type), None if value_conv is None else
                                (lambda v: None if v is None
                                 else {k: value_conv(x) for k, x in v.items()}))
        if isinstance(kind, str) and kind in _PRIMITIVES:
            return self._logical(schema, kind) or ArrowMapping(_PRIMITIVES[kind], None)
        if isinstance(kind, str):
            return self._name(kind, ns)
        raise ValueError(f"not an Avro schema: {schema!r}")

    def _record(self, schema: dict[str, Any], ns: str | None) -> ArrowMapping:
        fields = []
        convs = []
        for f in schema.get("fields", ()):
            m = self.walk(f["type"], ns)
            fields.append(pa.field(f["name"], m.type))
            if m.converter is not None:
                convs.append((f["name"], m.converter))
        if not convs:
            return ArrowMapping(pa.struct(fields), None)

        def record(value: Any) -> Any:
            if value is None:
                return None
            out = dict(value)
            for name, conv in convs:
                out[name] = conv(out.get(name))
            return out

        return ArrowMapping(pa.struct(fields), record)

    @staticmethod
    def _logical(schema: dict[str, Any], base: str) -> ArrowMapping | None:
        lt = schema.get("logicalType")
        if not isinstance(lt, str):
            return None
        if lt == "decimal" and base in ("bytes", "fixed"):
            precision = int(schema.get("precision", 38))
            scale = int(schema.get("scale", 0))
            if 0 < precision <= 38:
                return ArrowMapping(pa.decimal128(precision, scale), None)
            if 0 < precision <= 76:
                return ArrowMapping(pa.decimal256(precision, scale), None)
            return None
        if lt == "uuid" and base in ("string", "fixed"):
            return ArrowMapping(pa.string(), _uuid_text)
        table = {
            ("date", "int"): pa.date32(),
            ("time-millis", "int"): pa.time32("ms"),
            ("time-micros", "long"): pa.time64("us"),
            ("timestamp-millis", "long"): pa.timestamp("ms", tz="UTC"),
            ("timestamp-micros", "long"): pa.timestamp("us", tz="UTC"),
            ("timestamp-nanos", "long"): pa.timestamp("ns", tz="UTC"),
            ("local-timestamp-millis", "long"): pa.timestamp("ms"),
            ("local-timestamp-micros", "long"): pa.timestamp("us"),
        }
        t = table.get((lt, base))
        return None if t is None else ArrowMapping(t, None)


def avro_to_arrow(schema: Any, named: Mapping[str, Any] | None = None) -> ArrowMapping:
    """Map an Avro schema (JSON text or parsed JSON) to its Arrow type and value converter.

    ``named`` holds named types defined elsewhere (schema references), by full name.

    Examples
    --------
    >>> avro_to_arrow({"type": "record", "name": "R", "fields": [
    ...     {"name": "id", "type": "long"},
    ...     {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ...     {"name": "tag", "type": ["null", "string"]}]}).type
    StructType(struct<id: int64, at: timestamp[ms, tz=UTC], tag: string>)
    """
    if isinstance(schema, str | bytes) and str(schema).lstrip()[:1] in ("{", "[", '"'):
        schema = orjson.loads(schema)
    return _Walker(named).walk(schema, None)


def arrow_type(schema: Any, named: Mapping[str, Any] | None = None) -> pa.DataType:
    """The Arrow type of an Avro schema (see the module table)."""
    return avro_to_arrow(schema, named).type
