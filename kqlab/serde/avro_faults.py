"""Why an Avro payload does not read, in words an analyst can act on: the field and the byte.

fastavro reports a bad payload in its own terms — ``EOFError: Expected -62 bytes, read
65550`` — which names neither the field nor the position, and whose numbers depend on what
follows the value in the reader's buffer.  :func:`explain` walks the payload once more with
the writer schema, the way the Avro binary encoding lays it out (zig-zag varints, length-
prefixed bytes and strings, union and enum indexes, array and map blocks), and stops at the
first thing that cannot be: a length past the end of the value, a negative length, a union
branch or enum symbol that does not exist, text that is not UTF-8, a logical value out of its
range.  The answer names the field path and the byte, counted from the start of the record's
value (the Confluent header included), so it can be checked against ``kqlab inspect`` output
or a hex dump::

    truncated: field 'note' declares 65550 bytes but only 12 remain (byte 17)
    field 'order_id' declares a negative length (-62) at byte 5

It runs only on values that already failed (a handful per sample), so it is plain Python.
It is a function of the value's bytes alone, so every engine gives the same text
(:mod:`kqlab.serde.decode` is its only caller).  When the walk finds nothing wrong (fastavro
refused something the encoding allows), :func:`explain` returns ``None`` and the caller keeps
fastavro's own message.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["explain"]

#: the most bytes a zig-zag varint of a long may take
_MAX_VARINT = 10
_FIXED_SIZES = {"float": 4, "double": 8}
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
#: logical types whose values fastavro converts to Python dates and times, and the unit
_TEMPORAL = {"timestamp-millis": 1_000, "timestamp-micros": 1, "local-timestamp-millis": 1_000,
             "local-timestamp-micros": 1, "time-millis": 1_000, "time-micros": 1}


class _Fault(Exception):
    """The first thing in the payload that cannot be Avro of the schema (its text)."""


class _Unknown(Exception):
    """The schema uses something the walk does not model: leave the message to fastavro."""


def explain(payload: bytes | memoryview, parsed: Any, *, offset: int = 0) -> str | None:
    """What is wrong with ``payload`` as one datum of the fastavro-parsed schema ``parsed``.

    ``offset`` is where the payload starts in the record's value (5 behind a Confluent
    header), so the byte numbers are the value's.  ``None`` when the walk reads the payload
    to its end without a fault.

    Examples
    --------
    >>> import fastavro
    >>> s = fastavro.parse_schema({"type": "record", "name": "R", "fields": [
    ...     {"name": "id", "type": "long"}, {"name": "note", "type": "string"}]})
    >>> explain(b"\\x02\\x9c\\x80\\x08abc", s, offset=5)
    "truncated: field 'note' declares 65550 bytes but only 3 remain (byte 6)"
    >>> print(explain(b'{"id": 1}', s, offset=5))
    the payload is JSON text, not Avro ({"id": 1}); read as Avro: truncated: field 'note' \
declares 17 bytes but only 7 remain (byte 6)
    >>> explain(b"\\x02\\x06abc", s) is None
    True
    """
    data = bytes(payload)
    walker = _Walker(data, offset, parsed.get("__named_schemas", {})
                     if isinstance(parsed, Mapping) else {})
    try:
        walker.read(parsed, ())
    except _Fault as fault:
        return _json_hint(data) + str(fault)
    except (_Unknown, RecursionError):
        return None
    return None  # it reads (trailing bytes, if any, are the caller's to count)


def _json_hint(data: bytes) -> str:
    """A lead-in when the payload is JSON text (a serializer writing JSON behind an Avro
    schema id is a common misconfiguration, and the Avro reading of it means nothing)."""
    if data[:1] not in (b"{", b"["):
        return ""
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return ""
    text = data[:40].decode("utf-8", "replace")
    return f"the payload is JSON text, not Avro ({text}{'…' if len(data) > 40 else ''}); " \
        "read as Avro: "


class _Walker:
    """Reads a payload as the Avro binary encoding of a schema, raising :class:`_Fault`."""

    def __init__(self, data: bytes, offset: int, named: Mapping[str, Any]) -> None:
        self.data = data
        self.pos = 0
        self.offset = offset
        self.named = named

    # -- where ------------------------------------------------------------------------------
    def byte(self, pos: int | None = None) -> int:
        """A payload position as a byte number of the record's value."""
        return self.offset + (self.pos if pos is None else pos)

    @staticmethod
    def subject(path: tuple[str, ...]) -> str:
        if not path:
            return "the datum"
        text = path[0]
        for part in path[1:]:
            text += part if part.startswith("[") else f".{part}"
        return f"field '{text}'"

    def remaining(self) -> int:
        return len(self.data) - self.pos

    # -- primitives -------------------------------------------------------------------------
    def long(self, path: tuple[str, ...], what: str) -> int:
        start = self.pos
        shift = result = 0
        for k in range(_MAX_VARINT):
            if self.pos >= len(self.data):
                if k == 0:
                    raise _Fault(f"truncated: {self.subject(path)} needs {what} at byte "
                                 f"{self.byte()} but the value ends there")
                raise _Fault(f"truncated: {self.subject(path)}'s {what} starting at byte "
                             f"{self.byte(start)} is cut off by the end of the value")
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1)
        raise _Fault(f"{self.subject(path)}: {what} at byte {self.byte(start)} runs longer "
                     f"than {_MAX_VARINT} bytes (not a valid varint)")

    def take(self, n: int, path: tuple[str, ...], what: str, at: int) -> bytes:
        if n > self.remaining():
            raise _Fault(f"truncated: {self.subject(path)} {what} {n} bytes but only "
                         f"{self.remaining()} remain (byte {self.byte(at)})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def sized(self, path: tuple[str, ...]) -> bytes:
        """A length-prefixed ``bytes``/``string`` body."""
        at = self.pos
        n = self.long(path, "a length")
        if n < 0:
            raise _Fault(f"{self.subject(path)} declares a negative length ({n}) at byte "
                         f"{self.byte(at)}")
        return self.take(n, path, "declares", at)

    # -- the walk ---------------------------------------------------------------------------
    def resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema in self.named:
            return self.named[schema]
        return schema

    def read(self, schema: Any, path: tuple[str, ...]) -> None:
        schema = self.resolve(schema)
        if isinstance(schema, list):
            self.union(schema, path)
            return
        if isinstance(schema, Mapping):
            kind = schema.get("type")
            if kind in ("record", "error"):
                for f in schema.get("fields", ()):
                    self.read(f.get("type"), (*path, str(f.get("name"))))
                return
            if kind == "enum":
                self.enum(schema, path)
                return
            if kind == "array":
                self.blocks(path, lambda i: self.read(schema.get("items"), (*path, f"[{i}]")),
                            self.min_size(schema.get("items")))
                return
            if kind == "map":
                def entry(i: int) -> None:
                    key = self.text(self.sized((*path, f"[{i}]")), (*path, f"[{i}]"))
                    self.read(schema.get("values"), (*path, f"[{key!r}]"))
                self.blocks(path, entry, 1)
                return
            if kind == "fixed":
                at = self.pos
                self.take(int(schema.get("size", 0)), path, "needs", at)
                return
            self.primitive(str(kind), path, schema.get("logicalType"))
            return
        self.primitive(str(schema), path, None)

    def primitive(self, kind: str, path: tuple[str, ...], logical: Any) -> None:
        at = self.pos
        if kind == "null":
            return
        if kind == "boolean":
            self.take(1, path, "needs", at)
        elif kind in ("int", "long"):
            value = self.long(path, f"an {kind}" if kind == "int" else "a long")
            self.temporal(value, logical, path, at)
        elif kind in _FIXED_SIZES:
            self.take(_FIXED_SIZES[kind], path, "needs", at)
        elif kind == "bytes":
            self.sized(path)
        elif kind == "string":
            text = self.text(self.sized(path), path, at)
            if logical == "uuid":
                try:
                    uuid.UUID(text)
                except ValueError:
                    raise _Fault(f"{self.subject(path)} is a uuid, but {text[:40]!r} at byte "
                                 f"{self.byte(at)} is not one") from None
        else:
            raise _Unknown(kind)

    def text(self, raw: bytes, path: tuple[str, ...], at: int | None = None) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            body = self.pos - len(raw)
            raise _Fault(f"{self.subject(path)} is not valid UTF-8 at byte "
                         f"{self.byte(body + e.start)}: {e.reason}") from None

    def temporal(self, value: int, logical: Any, path: tuple[str, ...], at: int) -> None:
        """A date/time value fastavro converts must fit Python's dates and times."""
        if logical == "date":
            try:
                _dt.date(1970, 1, 1) + _dt.timedelta(days=value)
            except OverflowError:
                raise _Fault(f"{self.subject(path)}: date {value} (days since 1970-01-01) at "
                             f"byte {self.byte(at)} is outside the years 1-9999") from None
        elif logical in _TEMPORAL:
            micros = value * _TEMPORAL[logical]
            if logical.startswith("time-"):
                if not 0 <= micros < 86_400_000_000:
                    raise _Fault(f"{self.subject(path)}: {logical} {value} at byte "
                                 f"{self.byte(at)} is not a time of day")
                return
            try:
                _EPOCH + _dt.timedelta(microseconds=micros)
            except OverflowError:
                raise _Fault(f"{self.subject(path)}: {logical} {value} at byte "
                             f"{self.byte(at)} is outside the years 1-9999") from None

    def union(self, branches: list[Any], path: tuple[str, ...]) -> None:
        at = self.pos
        i = self.long(path, "a union branch index")
        if not 0 <= i < len(branches):
            names = ", ".join(_type_name(b) for b in branches)
            raise _Fault(f"{self.subject(path)} selects union branch {i} at byte "
                         f"{self.byte(at)}, but the union has {len(branches)} ({names})")
        self.read(branches[i], path)

    def enum(self, schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
        at = self.pos
        i = self.long(path, "an enum index")
        symbols = schema.get("symbols", ())
        if not 0 <= i < len(symbols):
            raise _Fault(f"{self.subject(path)} has enum index {i} at byte {self.byte(at)}, "
                         f"but {schema.get('name')} has {len(symbols)} symbols")

    def blocks(self, path: tuple[str, ...], item: Any, min_size: int) -> None:
        """Array or map blocks: a count (negative: followed by the block's byte size), then
        the items, until a count of 0."""
        done = 0
        while True:
            at = self.pos
            count = self.long(path, "a block count")
            if count == 0:
                return
            if count < 0:
                count = -count
                self.long(path, "a block size")
            if min_size and count * min_size > self.remaining():
                raise _Fault(f"truncated: {self.subject(path)} declares {count} items at byte "
                             f"{self.byte(at)} but only {self.remaining()} bytes remain")
            if not min_size:
                done += count  # items that take no bytes: nothing to read
                continue
            for _ in range(count):
                item(done)
                done += 1

    def min_size(self, schema: Any, depth: int = 0) -> int:
        """The fewest bytes one value of ``schema`` takes (0 for null and empty records)."""
        schema = self.resolve(schema)
        if depth > 32:
            return 0
        if isinstance(schema, list):
            return 1
        if isinstance(schema, Mapping):
            kind = schema.get("type")
            if kind in ("record", "error"):
                return sum(self.min_size(f.get("type"), depth + 1)
                           for f in schema.get("fields", ()))
            if kind == "fixed":
                return int(schema.get("size", 0))
            if kind in ("array", "map", "enum"):
                return 1
            return self.min_size(kind, depth + 1)
        return {"null": 0, "float": 4, "double": 8}.get(str(schema), 1)


def _type_name(schema: Any) -> str:
    if isinstance(schema, Mapping):
        return str(schema.get("name") or schema.get("type"))
    return str(schema)
