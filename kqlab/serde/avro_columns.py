"""Avro values decoded field by field across all values at once (numpy), exactly as fastavro.

:func:`kqlab.serde.decode.decode` defines an Avro column as ``pa.array`` over what fastavro's
``schemaless_reader`` returns for each value on its own, with fastavro's failure (or the
value's unread bytes) as the record's error.  Reading value after value in Python costs
about a microsecond a record; the values of one writer schema all have the same layout, so
this module reads *one field of every value* per step: a cursor per value, a numpy gather
of each value's next bytes, the Arrow column of that field built at once.

Only what can be proven equal is read this way; everything else is *flagged* and read by
fastavro, one value at a time, as before (the caller does that):

* schemas: records (nested, not recursive), null, boolean, int, long, float, double,
  string, bytes, enum, fixed and ``["null", T]`` unions — no logical types, arrays, maps or
  wider unions (then the whole column is read by fastavro);
* values: a boolean byte other than 0/1, a varint longer than 64 bits, an ``int`` outside
  32 bits (``pa.array`` refuses it), a NaN float (its payload), a negative or overlong
  length, invalid UTF-8, an enum or union index out of range (fastavro reads negative
  indices Python's way), and any value that does not end exactly at its end — each of these
  sends its value to fastavro.

A cursor that runs past its value's end is clamped there and flagged, so bytes of other
values are never turned into anything kept.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from kqlab.serde.lazy_values import LazyValues

__all__ = ["LazyAvroValues", "compile_reader", "read_values"]


class _Unsupported(Exception):
    """The schema is outside what is read column by column."""


@dataclass
class _Cursor:
    """Where each value (of the rows read) is: ``pos`` moves, ``end`` is its end; ``bad``
    marks values fastavro must read instead.  ``data`` is the column's data buffer."""

    data: np.ndarray
    pos: np.ndarray
    end: np.ndarray
    bad: np.ndarray

    def byte(self, p: np.ndarray) -> np.ndarray:
        return self.data[np.minimum(p, len(self.data) - 1)] if len(self.data) else \
            np.zeros(len(p), dtype=np.uint8)

    def advance(self, sel: np.ndarray, p: np.ndarray) -> None:
        """Store the new positions of ``sel``; those past their end are flagged and clamped."""
        over = p > self.end[sel]
        if over.any():
            self.bad[sel[over]] = True
            p = np.where(over, self.end[sel], p)
        self.pos[sel] = p

    def varint(self, sel: np.ndarray) -> np.ndarray:
        """Avro's zig-zag varint (a long) at each cursor of ``sel``."""
        p = self.pos[sel].copy()
        b = self.byte(p)
        val = (b & 0x7F).astype(np.uint64)
        p += 1
        more = np.flatnonzero(b >= 0x80)
        shift = 7
        while len(more):
            b = self.byte(p[more])
            if shift == 63:  # the tenth byte may hold one bit; more is not a 64-bit long
                wide = (b > 1)
                self.bad[sel[more[wide]]] = True
            if shift > 63:
                self.bad[sel[more]] = True
                break
            val[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
            p[more] += 1
            more = more[b >= 0x80]
            shift += 7
        self.advance(sel, p)
        return ((val >> np.uint64(1)) ^ (np.uint64(0) - (val & np.uint64(1)))).view(np.int64)

    def fixed_width(self, sel: np.ndarray, width: int, dtype: str) -> np.ndarray:
        """A little-endian number of ``width`` bytes at each cursor (one gather)."""
        p = self.pos[sel]
        top = len(self.data) - width
        out = np.zeros(len(sel), dtype=dtype)
        if top >= 0:
            words = np.ndarray((top + 1,), dtype=dtype, buffer=self.data, strides=(1,))
            out = words[np.clip(p, 0, top)]
        self.advance(sel, p + width)
        return out

    def slices(self, sel: np.ndarray, lengths: np.ndarray, binary_type: pa.DataType
               ) -> pa.Array:
        """The ``lengths`` bytes at each cursor of ``sel``, as one binary column (zero-copy
        offsets into the data buffer, then one take); flagged cursors get empty slices."""
        p = self.pos[sel]
        e = self.end[sel]
        bad = (lengths < 0) | (lengths > e - p)
        if bad.any():
            self.bad[sel[bad]] = True
        lengths = np.where(bad | self.bad[sel], 0, lengths)
        starts = np.where(bad, e, p)
        self.advance(sel, starts + lengths)
        m = len(sel)
        if m == 0:
            return pa.array([], binary_type)
        # value i is element 2i of a binary array whose offsets interleave starts and ends
        # (increasing: each slice lies inside its own value, values do not overlap)
        bounds = np.empty(2 * m, dtype=np.int64)
        bounds[0::2] = starts
        bounds[1::2] = starts + lengths
        large = pa.types.is_large_binary(binary_type)
        offsets = pa.py_buffer(bounds if large else bounds.astype(np.int32))
        interleaved = pa.Array.from_buffers(pa.large_binary() if large else pa.binary(),
                                            2 * m - 1, [None, offsets, self._buffer()])
        return interleaved.take(pa.array(np.arange(0, 2 * m, 2, dtype=np.int64)))

    def _buffer(self) -> pa.Buffer:
        return pa.py_buffer(self.data)


# -- readers: one per schema node; each reads its field for the cursors ``sel`` -------------
class _Reader:
    type: pa.DataType

    def read(self, cur: _Cursor, sel: np.ndarray) -> pa.Array:  # pragma: no cover
        raise NotImplementedError


class _Null(_Reader):
    type = pa.null()

    def read(self, cur: _Cursor, sel: np.ndarray) -> pa.Array:
        return pa.nulls(len(sel))


class _Bool(_Reader):
    type = pa.bool_()

    def read(self, cur: _Cursor, sel: np.ndarray) -> pa.Array:
        b = cur.byte(cur.pos[sel])
        cur.bad[sel[b > 1]] = True  # fastavro reads any non-zero byte as True: its call
        cur.advance(sel, cur.pos[sel] + 1)
        return pa.array(b == 1, pa.bool_())


class _Int(_Reader):
    def __init__(self, bits: int) -> None:
        self.bits = bits
        self.type = pa.int32() if bits == 32 else pa.int64()

    def read(self, cur: _Cursor, sel: np.ndarray) -> pa.Array:
        v = cur.varint(sel)
        if self.bits == 32:
            out = (v < -(2 ** 31)) | (v >= 2 ** 31)
            cur.bad[sel[out]] = True  # pa.array refuses it: the per-record error says so
            return pa.array(np.where(out, 0, v).astype(np.int32), pa.int32())
        return pa.array(v, pa.int64())


class _Float(_Reader):
    def __init__(self, width: int) -> None:
        self.width = width
        self.dtype = "<f4" if width == 4 else "<f8"
        self.type = pa.float32() if width == 4 else pa.float64()

    def read(self, cur: _Cursor, sel: np.ndarray) -> pa.Array:
        v = cur.fixed_width(sel, self.width, self.dtype)
        nan = np.isnan(v)
        if nan.any():  # a NaN's payload through Python floats: fastavro's (and pa.array's) call
            cur.bad[sel[nan]] = True
            v = np.where(nan, v.dtype.type(0), v)
        return pa.array(v, self.type)


class _Bytes(_Reader):
    def __init__(self, text: bool) -> None:
        self.text = text
        self.type = pa.string() if text else pa.binary()

    def read(self, cur: _Cursor, sel: np.ndarray) -> pa.Array:
        n = cur.varint(sel)
        raw = cur.slices(sel, n, pa.binary())
        if not self.text:
            return raw
        try:
            return raw.cast(pa.string())
        except pa.ArrowInvalid:  # fastavro's strict decoding says why, value by value
            bad = _invalid_utf8(raw)
            cur.bad[sel[bad]] = True
            return _blank(raw, bad).cast(pa.string())


class _Fixed(_Reader):
    type = pa.binary()

    def __init__(self, size: int) -> None:
        self.size = size

    def read(self, cur: _Cursor, sel: np.ndarray) -> pa.Array:
        return cur.slices(sel, np.full(len(sel), self.size, dtype=np.int64), pa.binary())


class _Enum(_Reader):
    type = pa.string()

    def __init__(self, symbols: list[str]) -> None:
        self.symbols = pa.array(symbols, pa.string())

    def read(self, cur: _Cursor, sel: np.ndarray) -> pa.Array:
        i = cur.varint(sel)
        out = (i < 0) | (i >= len(self.symbols))
        cur.bad[sel[out]] = True  # fastavro indexes Python's way (-1 is the last): its call
        return self.symbols.take(pa.array(np.where(out, 0, i)))


class _Optional(_Reader):
    """``["null", T]`` (either order): the branch index, then T where it is T."""

    def __init__(self, null_index: int, branch: _Reader) -> None:
        self.null_index = null_index
        self.branch = branch
        self.type = branch.type

    def read(self, cur: _Cursor, sel: np.ndarray) -> pa.Array:
        i = cur.varint(sel)
        cur.bad[sel[(i != 0) & (i != 1)]] = True
        some = np.flatnonzero((i == 1 - self.null_index) & ~cur.bad[sel])
        values = self.branch.read(cur, sel[some])
        where = np.full(len(sel), -1, dtype=np.int64)
        where[some] = np.arange(len(some))
        if len(some) == len(sel):
            return values
        return values.take(pa.array(where, mask=where < 0))


class _Record(_Reader):
    def __init__(self, fields: list[tuple[str, _Reader]]) -> None:
        self.fields = fields
        self.type = pa.struct([pa.field(name, r.type) for name, r in fields])

    def read(self, cur: _Cursor, sel: np.ndarray) -> pa.Array:
        children = [r.read(cur, sel) for _, r in self.fields]
        if not children:
            return pa.array([{}] * len(sel), pa.struct([]))
        return pa.StructArray.from_arrays(children, fields=list(self.type))


def _blank(arr: pa.Array, bad: np.ndarray) -> pa.Array:
    """``arr`` with the ``bad`` values replaced by empty ones (they are read again)."""
    import pyarrow.compute as pc

    return pc.if_else(pa.array(bad), pa.scalar(b"", arr.type), arr)


def _invalid_utf8(arr: pa.Array) -> np.ndarray:
    from kqlab.serde.json_arrow import _invalid_utf8 as find

    return find(arr)


def _compile(schema: Any, named: Mapping[str, Any], expanding: tuple[str, ...]) -> _Reader:
    if isinstance(schema, str):
        if schema == "null":
            return _Null()
        if schema == "boolean":
            return _Bool()
        if schema in ("int", "long"):
            return _Int(32 if schema == "int" else 64)
        if schema in ("float", "double"):
            return _Float(4 if schema == "float" else 8)
        if schema in ("string", "bytes"):
            return _Bytes(schema == "string")
        if schema in named:
            if schema in expanding:
                raise _Unsupported("a recursive type")
            return _compile(named[schema], named, (*expanding, schema))
        raise _Unsupported(f"type {schema!r}")
    if isinstance(schema, list):
        if len(schema) == 2 and "null" in schema:
            k = schema.index("null")
            other = schema[1 - k]
            if isinstance(other, list):
                raise _Unsupported("a nested union")
            return _Optional(k, _compile(other, named, expanding))
        raise _Unsupported("a union of several types")
    if isinstance(schema, dict):
        if "logicalType" in schema:
            raise _Unsupported(f"logical type {schema['logicalType']!r}")
        kind = schema.get("type")
        if kind in ("record", "error"):
            name = schema.get("name", "")
            inner = (*expanding, name)
            return _Record([(f["name"], _compile(f["type"], named, inner))
                            for f in schema.get("fields", ())])
        if kind == "enum":
            return _Enum(list(schema["symbols"]))
        if kind == "fixed":
            return _Fixed(int(schema["size"]))
        if isinstance(kind, str | list | dict) and kind not in ("array", "map"):
            return _compile(kind, named, expanding)
        raise _Unsupported(f"type {kind!r}")
    raise _Unsupported(f"schema {schema!r}")


_COMPILED: dict[int, tuple[Any, _Reader | None]] = {}


def compile_reader(parsed: Any, arrow_type: pa.DataType) -> _Reader | None:
    """The column reader of a fastavro-parsed writer schema, or None when it is outside the
    subset (or maps to another Arrow type than ``arrow_type``, which the caller builds)."""
    hit = _COMPILED.get(id(parsed))
    if hit is not None and hit[0] is parsed:
        return hit[1]
    named = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}
    try:
        reader: _Reader | None = _compile(parsed, named, ())
    except (_Unsupported, KeyError, TypeError, ValueError):
        reader = None
    if reader is not None and reader.type != arrow_type:
        reader = None
    _COMPILED[id(parsed)] = (parsed, reader)
    return reader


def read_values(reader: _Reader, data: np.ndarray, starts: np.ndarray, ends: np.ndarray
                ) -> tuple[pa.Array, np.ndarray]:
    """Read the values ``[starts, ends)`` of ``data`` with ``reader``: their Arrow column
    and, per value, whether fastavro must read it instead (its entry in the column is then
    meaningless)."""
    n = len(starts)
    cur = _Cursor(data, starts.astype(np.int64).copy(), ends.astype(np.int64),
                  np.zeros(n, dtype=bool))
    column = reader.read(cur, np.arange(n, dtype=np.int64))
    cur.bad |= cur.pos != cur.end  # unread bytes, or a datum that needed more
    return column, cur.bad


class LazyAvroValues(LazyValues):
    """Each record's fastavro datum, read when first asked for (values read column by
    column); the datums of values fastavro already read (and None for failures) are kept.

    The replay reads few of them (a failing record's message, CEL's per-record fallbacks),
    so a column read field by field reads nothing value by value until someone looks; a
    whole pass (the export's datums) reads every value once, as before.
    """

    def __init__(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 schema_of: np.ndarray, schemas: list[Any], known: dict[int, object]) -> None:
        super().__init__(len(schema_of), known)
        self._data = data
        self._starts = starts
        self._ends = ends
        self._schema_of = schema_of  # per record: index into schemas, -1: known or None
        self._schemas = schemas
        self._reader: io.BytesIO | None = None

    def _load(self, i: int) -> object:
        from fastavro import schemaless_reader

        k = int(self._schema_of[i])
        if k < 0:
            return None
        if self._reader is None:
            self._reader = io.BytesIO(self._data.tobytes())
        self._reader.seek(int(self._starts[i]))
        return schemaless_reader(self._reader, self._schemas[k])
