"""JSON values decoded by Arrow's JSON reader in bulk, exactly as ``orjson`` + ``pa.array``.

:func:`kqlab.serde.decode.decode` defines a JSON column as ``pa.array([orjson.loads(v) ...])``
with each failing record's orjson message.  Parsing value by value in Python costs about a
microsecond a record before any Arrow column exists, more than reading and decompressing the
segments; Arrow's JSON reader parses many values at once in C++ (and releases the GIL, so
pieces of a column parse on several cores).  :func:`decode_objects` uses it wherever it gives
the *same* column, and sends everything else through orjson one value at a time, so the
column, every error message and every record's Python object stay what they were.

How "the same" is made sure of (each point is a difference found between the two and is
covered in ``tests/serde/test_json_arrow.py``):

* **One document per value.**  The values of a piece are parsed back to back, with no
  separator: a JSON object ends where its braces close, so a value's document cannot run into
  the next value's unless the value itself holds two documents.  Values matching
  ``}[ws]*{`` are therefore never given to the reader in bulk, and a piece must yield exactly
  one row per value; together these prove that row *i* is value *i* (a value missing its end
  would have to be compensated by one holding two documents).
* **What orjson refuses, Arrow must not accept.**  Arrow's reader accepts ``NaN`` and
  ``Infinity``, numbers that overflow to infinity, invalid UTF-8 and nesting deeper than
  orjson's 1024 levels; orjson rejects all of them.  UTF-8 is checked before reading (one
  vectorised cast), deeply nested values are counted out, and a double column holding NaN,
  an infinity or a magnitude of 2**53 or more sends the values whose text could have made
  it (``NaN``, ``Infinity``, 16+ digit runs, three-digit exponents) through orjson.
* **What Arrow refuses, orjson may accept** (duplicate keys, the last of which wins): a
  piece that fails is halved until the failing values are found; those go through orjson,
  and those that parse come back in bulk re-serialized by ``orjson.dumps`` (duplicates
  resolved, whitespace gone, numbers and strings unchanged).
* **Types.**  Arrow infers timestamps from ISO-8601 strings; a piece that did is read again
  with those fields declared as strings.  Integers beyond 2**53 are read as doubles by
  Arrow where ``pa.array`` refuses them (see above).  Pieces are merged with ``pa.array``'s
  inference (fields in order of first appearance, null < int64 < double, structs and lists
  member-wise); anything else — a value that is not an object, types that conflict — is left
  to the per-record path, which is the definition.
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from kqlab.serde.lazy_values import LazyValues

__all__ = ["LazyJsonValues", "decode_objects"]

#: two documents in one value (a top-level object closed, then another opened)
_SPLIT = r"\}[ \t\n\r]*\{"
#: the text behind a double that orjson and Arrow may read differently
_SUSPECT_NUMBER = r"NaN|Infinity|[0-9]{16}|[eE][+-]?[0-9]{3}"
#: values at least this long are checked for nesting deeper than orjson reads
_DEEP_BYTES = 1000
#: below this many values a failing piece is not halved further: they go through orjson
_MIN_PIECE = 256
#: bytes per piece worth a thread of its own
_PIECE_BYTES = 1 << 20
#: magnitude from which pa.array refuses an integer in a double column (and Arrow rounds it)
_EXACT = float(2 ** 53)
_WS = np.zeros(256, dtype=bool)
_WS[list(b" \t\n\r")] = True
#: an object, whitespace around it allowed (the rare values with some are matched whole)
_OBJECT = r"^[ \t\n\r]*\{(?s:.)*\}[ \t\n\r]*$"

try:
    from kqlab.serde import _cjson  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: Arrow's reader does it all
    _cjson = None
#: the C parser first (tests turn it off to hold Arrow's path to the definition too)
FAST_JSON = os.environ.get("KQLAB_JSON_READER", "") != "arrow"

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_workers(), thread_name_prefix="kqlab-json")
        return _pool


def _forget_pool() -> None:
    """A forked child (Spark's Python workers) has none of its parent's threads."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


class _Unsupported(Exception):
    """The bulk path cannot give ``pa.array``'s column here: decode per record."""


class LazyJsonValues(LazyValues):
    """Each record's ``orjson.loads`` object, parsed when first asked for.

    The replay reads few of them (a failing record's message, a widened column's integer
    check), so a column decoded in bulk parses nothing in Python until someone looks; a whole
    pass (CEL per record, the export's datums) parses every value once, as before.
    """

    def __init__(self, data: memoryview, starts: np.ndarray, ends: np.ndarray,
                 parse: np.ndarray, known: dict[int, object]) -> None:
        super().__init__(len(parse), known)  # known: objects already parsed
        self._data = data
        self._starts = starts
        self._ends = ends
        self._parse = parse  # True where the object is still to be parsed from the bytes

    def _load(self, i: int) -> object:
        if not self._parse[i]:
            return None
        return orjson.loads(self._data[int(self._starts[i]):int(self._ends[i])])

    def _load_all(self) -> list[object]:
        out: list[object] = [None] * len(self._parse)
        loads, data, known = orjson.loads, self._data, self._known
        rows = np.flatnonzero(self._parse)
        for i, s, e in zip(rows.tolist(), self._starts[rows].tolist(),
                           self._ends[rows].tolist(), strict=True):
            obj = known.get(i)
            out[i] = loads(data[s:e]) if obj is None else obj
        for i, obj in known.items():
            out[i] = obj
        return out


@dataclass
class _Piece:
    """Consecutive bulk rows (positions ``lo:hi`` of the bulk row list) and what they read to."""

    lo: int
    hi: int
    table: pa.Table | None = None
    error: str | None = None


def decode_objects(payload: pa.Array, errors: list[str | None]
                   ) -> tuple[pa.Array, LazyJsonValues] | None:
    """The JSON column of ``payload`` (binary, null = no value to parse) and its objects.

    Fills ``errors`` (one entry per row, ``None`` = fine) with orjson's message for every
    value that does not parse, as the per-record path words it.  Returns ``None`` when the
    per-record path must decide (values that are not objects, types that conflict, anything
    the bulk path cannot prove equal); ``errors`` is then untouched.
    """
    fast = _decode_parsed(payload, errors) if _cjson is not None and FAST_JSON else None
    if fast is not None:
        return fast
    try:
        column, lazy = _Decoder(payload).run(errors)
    except _Unsupported:
        return None
    return column, lazy


# -- the C parser (kqlab/serde/_cjson.c): columns without objects ------------------------------
_TYPES = {1: pa.bool_(), 2: pa.int64(), 3: pa.float64(), 4: pa.string()}


def _decode_parsed(payload: pa.Array, errors: list[str | None]
                   ) -> tuple[pa.Array, LazyJsonValues] | None:
    """:func:`decode_objects` by ``_cjson.parse_objects`` (pieces on worker threads), or None
    where it cannot answer: a column it does not model, or a value it refused that orjson
    reads (its refusals are otherwise orjson's errors, worded by orjson)."""
    from kqlab.serde.wire import _buffers

    assert _cjson is not None
    n = len(payload)
    if n == 0:
        return None
    valid, starts, ends, data = _buffers(payload)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    flags = np.ascontiguousarray(valid, dtype=np.uint8)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.where(valid, ends - starts, 0), out=offs[1:])
    parse = _cjson.parse_objects

    def one(r: tuple[int, int]) -> tuple[bytes, tuple] | None:
        return parse(data, starts, ends, flags, r[0], r[1])

    ranges = _pieces(offs, _c_threads())
    got = [one(r) for r in ranges] if len(ranges) <= 1 else list(_executor().map(one, ranges))
    if any(g is None for g in got):
        return None
    status = np.frombuffer(b"".join(g[0] for g in got if g is not None), dtype=np.uint8)
    buf = payload.buffers()[2]
    mv = memoryview(buf) if buf is not None else memoryview(b"")
    failed: dict[int, str] = {}
    for i in np.flatnonzero(status == 2).tolist():
        try:
            obj = orjson.loads(mv[int(starts[i]):int(ends[i])])
        except orjson.JSONDecodeError as ex:
            failed[i] = f"invalid JSON: {ex}"
            continue
        if obj is not None:
            return None  # orjson reads what the parser refused: the other readers decide
    objects = status == 0
    if not objects.any():
        column: pa.Array = pa.nulls(n)
    else:
        arrays = [_from_node(g[1]) for g in got if g is not None]
        try:
            target: pa.DataType = pa.null()
            for a in arrays:
                target = _merge(target, a.type)
            column = arrays[0] if len(arrays) == 1 else \
                _valid(pa.concat_arrays([_conform(a, target) for a in arrays]))
        except (_Unsupported, pa.ArrowInvalid, pa.ArrowTypeError) as ex:
            if isinstance(ex, _Unsupported):
                return None
            raise
    for i, msg in failed.items():
        errors[i] = msg
    return column, LazyJsonValues(mv, starts, ends, objects, {})


def _c_threads() -> int:
    """Pieces the C parser splits a column into, one per thread: one per idle CPU
    (``kqlab.kafka.batch.decode_threads``, ``KQLAB_DECODE_THREADS``).  The pieces are
    concatenated afterwards (a copy of the column), which only pays off on cores nobody
    else wants; on a busy machine, or when the streamed replay already parses on its
    read-ahead thread beside the judging one, a column is read in one piece."""
    from kqlab.kafka.batch import decode_threads

    return decode_threads()


def _from_node(node: tuple) -> pa.Array:
    """The Arrow array of one ``_cjson`` column node (type code, length, null count,
    validity bits, buffers or children): zero-copy over the bytes it returned."""
    code, n, nulls, validity, a, b = node
    if code == 0:
        return pa.nulls(n)
    vb = None if validity is None else pa.py_buffer(validity)
    if code == 5:
        children = [_from_node(c) for _, c in a]
        typ = pa.struct([pa.field(name, c.type) for (name, _), c in zip(a, children,
                                                                           strict=True)])
        return pa.Array.from_buffers(typ, n, [vb], null_count=nulls, children=children)
    bufs = [vb, pa.py_buffer(a)] if b is None else [vb, pa.py_buffer(a), pa.py_buffer(b)]
    return pa.Array.from_buffers(_TYPES[code], n, bufs, null_count=nulls)


def _valid(column: pa.Array) -> pa.Array:
    """``column``, structurally checked: Arrow's reader has built malformed arrays (a list of
    nulls whose child is too short, pyarrow 26); such a column is not used."""
    try:
        column.validate()
    except pa.ArrowInvalid as ex:
        raise _Unsupported(f"Arrow's reader built a malformed column: {ex}") from ex
    return column


class _Decoder:
    def __init__(self, payload: pa.Array) -> None:
        from kqlab.serde.wire import _buffers

        self.payload = payload
        self.n = len(payload)
        self.valid, self.starts, self.ends, self.data = _buffers(payload)
        self.lengths = np.where(self.valid, self.ends - self.starts, 0)
        buf = payload.buffers()[2]
        self.mv = memoryview(buf) if buf is not None else memoryview(b"")

    # -- which values may be read in bulk ----------------------------------------------------
    def _bulk_candidates(self) -> np.ndarray:
        """Values that may be read in bulk: plausibly one object, valid UTF-8, not deep."""
        rows = np.flatnonzero(self.valid & (self.lengths >= 2))
        bulk = np.zeros(self.n, dtype=bool)
        if not len(rows):
            return bulk
        # The first document of every piece must be an object: Arrow's reader crashes on a
        # block that opens with a top-level ``null`` (pyarrow 26).
        first = self.data[self.starts[rows]]
        last = self.data[self.ends[rows] - 1]
        bulk[rows] = (first == ord("{")) & (last == ord("}"))
        padded = rows[(_WS[first] & ((last == ord("}")) | _WS[last]))
                      | ((first == ord("{")) & _WS[last])]
        if len(padded):
            bulk[padded] = _matches(self.payload.take(pa.array(padded)), _OBJECT)
        if not bulk.any():
            return bulk
        bulk &= ~_matches(self.payload, _SPLIT)
        try:
            self.payload.cast(pa.large_string() if pa.types.is_large_binary(self.payload.type)
                              else pa.string())
        except pa.ArrowInvalid:
            bulk &= ~_invalid_utf8(self.payload)
        long = np.flatnonzero(bulk & (self.lengths >= _DEEP_BYTES))
        if len(long):
            sub = self.payload.take(pa.array(long))
            depth = (pc.count_substring(sub, "{").fill_null(0).to_numpy(zero_copy_only=False)
                     + pc.count_substring(sub, "[").fill_null(0).to_numpy(zero_copy_only=False))
            bulk[long[depth >= _DEEP_BYTES]] = False
        return bulk

    # -- the decode --------------------------------------------------------------------------
    def run(self, errors: list[str | None]) -> tuple[pa.Array, LazyJsonValues]:
        bulk = self._bulk_candidates()
        known: dict[int, object] = {}  # objects orjson parsed (rows read one by one)
        failed: dict[int, str] = {}
        for _ in range(3):
            self._parse_singles(self.valid & ~bulk, known, failed)
            redo, column = self._read(bulk, known)
            if column is not None:
                for i, msg in failed.items():
                    errors[i] = msg
                parse = bulk.copy()
                return column, LazyJsonValues(self.mv, self.starts, self.ends, parse, known)
            bulk[redo] = False
        raise _Unsupported("values keep failing in bulk")

    def _parse_singles(self, rows_mask: np.ndarray, known: dict[int, object],
                       failed: dict[int, str]) -> None:
        """orjson for the values not read in bulk (each once)."""
        loads, mv = orjson.loads, self.mv
        rows = np.flatnonzero(rows_mask)
        for i, s, e in zip(rows.tolist(), self.starts[rows].tolist(), self.ends[rows].tolist(),
                           strict=True):
            if i in known or i in failed:
                continue
            try:
                obj = loads(mv[s:e])
            except orjson.JSONDecodeError as ex:
                failed[i] = f"invalid JSON: {ex}"
                continue
            if obj is not None and not isinstance(obj, dict):
                raise _Unsupported("a value is not an object")  # pa.array decides the column
            known[i] = obj

    def _read(self, bulk: np.ndarray, known: dict[int, object]
              ) -> tuple[np.ndarray, pa.Array | None]:
        """Read the bulk rows and the objects parsed one by one, in row order and in pieces;
        (rows to take out of bulk, None) when some must go through orjson first."""
        rows = np.flatnonzero(bulk)
        singles = np.array(sorted(i for i, obj in known.items() if obj is not None),
                           dtype=np.int64)
        if len(singles):
            # re-serialized where they sit: pa.array orders fields by first appearance, so
            # a field first seen in one of them must be seen there
            order = np.union1d(rows, singles)
            single = np.isin(order, singles)
            buf, offs = self._mixed_buffer(order, single, known)
        else:
            order, single = rows, np.zeros(len(rows), dtype=bool)
            buf, offs = self._bulk_buffer(rows)
        tables = _read_all(buf, offs, _pieces(offs))
        redo: list[np.ndarray] = []
        good: list[_Piece] = []
        todo = list(tables)
        while todo:
            p = todo.pop()
            ours = ~single[p.lo:p.hi]  # rows that can still go through orjson
            if p.table is None:
                if p.error is not None and "changed from" in p.error \
                        and "Column()" not in p.error:
                    raise _Unsupported(p.error)  # a field's types conflict: pa.array's call
                if p.hi - p.lo <= _MIN_PIECE:
                    if not ours.any():
                        raise _Unsupported("re-serialized objects do not read back in bulk")
                    redo.append(order[p.lo:p.hi][ours])
                else:
                    mid = (p.lo + p.hi) // 2
                    todo.extend(_read_all(buf, offs, [(p.lo, mid), (mid, p.hi)]))
                continue
            suspect = _check_leaves(p.table)
            if suspect is None:
                good.append(p)
                continue
            hits = _matches(_values_of(buf, offs, p.lo, p.hi), _SUSPECT_NUMBER)
            if (hits & ours).any():
                redo.append(order[p.lo:p.hi][hits & ours])
            elif hits.any():
                raise _Unsupported("a re-serialized object holds a number Arrow reads apart")
            elif suspect == "large":  # written as floats: the same doubles either way
                good.append(p)
            else:
                raise _Unsupported("NaN or infinity without its text")
        if redo:
            return np.concatenate(redo), None
        good.sort(key=lambda p: p.lo)
        parts = [p.table for p in good if p.table is not None]
        return np.zeros(0, dtype=np.int64), self._assemble(order, parts)

    def _mixed_buffer(self, order: np.ndarray, single: np.ndarray, known: dict[int, object]
                      ) -> tuple[pa.Buffer, np.ndarray]:
        """Bulk values and re-serialized objects back to back, in row order (a copy: only
        when some values were parsed one by one)."""
        mv = self.mv
        chunks: list[bytes | memoryview] = []
        try:
            for i, one in zip(order.tolist(), single.tolist(), strict=True):
                chunks.append(orjson.dumps(known[i]) if one
                              else mv[int(self.starts[i]):int(self.ends[i])])
        except (TypeError, orjson.JSONEncodeError) as ex:  # nested deeper than it writes
            raise _Unsupported(str(ex)) from ex
        offs = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum([len(c) for c in chunks], out=offs[1:])
        return pa.py_buffer(b"".join(chunks)), offs

    def _bulk_buffer(self, rows: np.ndarray) -> tuple[pa.Buffer, np.ndarray]:
        """The bulk values back to back and their boundaries (zero-copy when nothing else
        has bytes between them)."""
        offs = np.zeros(len(rows) + 1, dtype=np.int64)
        if not len(rows):
            return pa.py_buffer(b""), offs
        s, e = self.starts[rows], self.ends[rows]
        if np.array_equal(s[1:], e[:-1]):
            base = int(s[0])
            offs[1:] = e - base
            buf = self.payload.buffers()[2]
            assert buf is not None
            return buf.slice(base, int(e[-1]) - base), offs
        picked = self.payload.take(pa.array(rows))
        _, ps, pe, _ = _buffers_of(picked)
        base = int(ps[0])
        offs[1:] = pe - base
        pbuf = picked.buffers()[2]
        assert pbuf is not None
        return pbuf.slice(base, int(pe[-1]) - base), offs

    def _assemble(self, order: np.ndarray, parts: list[pa.Table]) -> pa.Array:
        """One struct column, row for row: the rows read (``order``) placed, nulls between."""
        if not parts:  # nothing but nulls and failures: pa.array's null column
            return pa.nulls(self.n)
        target = pa.struct(list(_union([t.schema for t in parts])))
        try:
            column = _valid(pa.concat_arrays([_conform(_as_struct(t), target) for t in parts]))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as ex:
            raise _Unsupported(str(ex)) from ex
        if len(order) == self.n and np.array_equal(order, np.arange(self.n)):
            return column
        where = np.full(self.n, -1, dtype=np.int64)
        where[order] = np.arange(len(order))
        return column.take(pa.array(where, mask=where < 0))


def _buffers_of(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from kqlab.serde.wire import _buffers

    return _buffers(arr)


def _values_of(buf: pa.Buffer, offs: np.ndarray, lo: int, hi: int) -> pa.Array:
    """Values ``lo:hi`` of a piece buffer as a binary column (zero-copy)."""
    rel = offs[lo:hi + 1] - offs[lo]
    return pa.Array.from_buffers(pa.binary(), hi - lo, [
        None, pa.py_buffer(rel.astype(np.int32)), buf.slice(int(offs[lo]), int(rel[-1]))])


def _matches(arr: pa.Array, pattern: str) -> np.ndarray:
    """Where ``pattern`` occurs in a value (False for nulls)."""
    hit = pc.match_substring_regex(arr, pattern)
    return np.asarray(hit.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _invalid_utf8(arr: pa.Array) -> np.ndarray:
    """The values that are not valid UTF-8 (halving to find them: they are rare)."""
    out = np.zeros(len(arr), dtype=bool)
    target = pa.large_string() if pa.types.is_large_binary(arr.type) else pa.string()

    def visit(lo: int, hi: int) -> None:
        try:
            arr.slice(lo, hi - lo).cast(target)
            return
        except pa.ArrowInvalid:
            pass
        if hi - lo <= 64:
            for i, v in enumerate(arr.slice(lo, hi - lo).to_pylist(), start=lo):
                if v is not None:
                    try:
                        v.decode("utf-8")
                    except UnicodeDecodeError:
                        out[i] = True
            return
        mid = (lo + hi) // 2
        visit(lo, mid)
        visit(mid, hi)

    visit(0, len(arr))
    return out


def _pieces(offs: np.ndarray, most: int | None = None) -> list[tuple[int, int]]:
    """Row ranges of about equal bytes, one or a few per worker thread (at most ``most``)."""
    n = len(offs) - 1
    if n <= 0:
        return []
    k = int(min(4 * _workers() if most is None else most,
                max(1, offs[-1] // _PIECE_BYTES), max(1, n // _MIN_PIECE)))
    if k <= 1:
        return [(0, n)]
    cuts = np.searchsorted(offs, np.linspace(0, offs[-1], k + 1)[1:-1])
    bounds = [0, *sorted({int(c) for c in cuts if 0 < c < n}), n]
    return list(itertools.pairwise(bounds))


def _read_all(buf: pa.Buffer, offs: np.ndarray, ranges: list[tuple[int, int]]
              ) -> list[_Piece]:
    """Read each range of values (in worker threads when there are several)."""
    def read(r: tuple[int, int]) -> _Piece:
        lo, hi = r
        piece = _Piece(lo, hi)
        try:
            piece.table = _read_one(buf.slice(int(offs[lo]), int(offs[hi] - offs[lo])), hi - lo)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as ex:
            piece.error = str(ex)
        if piece.table is None and piece.error is None:
            piece.error = "row count"
        return piece

    if len(ranges) <= 1:
        return [read(r) for r in ranges]
    return list(_executor().map(read, ranges))


def _read_one(buf: pa.Buffer, rows: int) -> pa.Table | None:
    """One block of back-to-back objects; None unless it reads to exactly ``rows`` rows.

    Raises Arrow's error when the block does not parse.
    """
    opts = pj.ReadOptions(use_threads=False, block_size=max(buf.size + 1, 1 << 16))
    table = pj.read_json(pa.BufferReader(buf), read_options=opts)
    if table.num_rows != rows:
        return None
    if _has(table.schema, pa.types.is_timestamp):
        # Arrow took ISO-8601 strings for timestamps: the same fields, read as the strings
        schema = pa.schema([f.with_type(_untime(f.type)) for f in table.schema])
        table = pj.read_json(pa.BufferReader(buf), read_options=opts,
                             parse_options=pj.ParseOptions(explicit_schema=schema,
                                                           unexpected_field_behavior="error"))
        if table.num_rows != rows:
            return None
    return table


def _untime(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_untime(t.field(i).type))
                          for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_untime(t.value_type)))
    return t


def _has(schema: pa.Schema, pred: object) -> bool:
    def walk(t: pa.DataType) -> bool:
        if pred(t):  # type: ignore[operator]
            return True
        if pa.types.is_struct(t):
            return any(walk(t.field(i).type) for i in range(t.num_fields))
        if pa.types.is_list(t):
            return walk(t.value_type)
        return False

    return any(walk(f.type) for f in schema)


_PLAIN = (pa.types.is_string, pa.types.is_int64, pa.types.is_boolean, pa.types.is_null)


def _check_leaves(table: pa.Table) -> str | None:
    """Why a piece may differ from orjson: ``"nan"`` (NaN or an infinity), ``"large"`` (a
    double of magnitude 2**53 or more); None when it cannot."""
    worst: str | None = None

    def walk(arr: pa.Array) -> None:
        nonlocal worst
        t = arr.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(arr.field(i))
        elif pa.types.is_list(t):
            walk(arr.values)
        elif pa.types.is_float64(t):
            x = np.asarray(arr.fill_null(0.0).to_numpy(zero_copy_only=False))
            if not np.isfinite(x).all():
                worst = "nan"
            elif worst is None and len(x) and float(np.abs(x).max()) >= _EXACT:
                worst = "large"
        elif not any(p(t) for p in _PLAIN):
            raise _Unsupported(f"Arrow read a {t} column")

    for col in table.columns:
        for chunk in col.chunks:
            walk(chunk)
    return worst


def _as_struct(table: pa.Table) -> pa.StructArray:
    cols = [c.combine_chunks() if c.num_chunks != 1 else c.chunk(0) for c in table.columns]
    if not cols:
        return pa.array([{}] * table.num_rows, pa.struct([]))
    return pa.StructArray.from_arrays(cols, fields=list(table.schema))


def _union(schemas: list[pa.Schema]) -> pa.Schema:
    """The schemas merged as ``pa.array`` infers over their rows in order."""
    t = pa.struct([])
    for s in schemas:
        t = _merge(t, pa.struct(list(s)))
    return pa.schema(list(t))


def _merge(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if {a, b} == {pa.int64(), pa.float64()}:
        return pa.float64()
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        fields = {a.field(i).name: a.field(i).type for i in range(a.num_fields)}
        for i in range(b.num_fields):
            f = b.field(i)
            fields[f.name] = _merge(fields[f.name], f.type) if f.name in fields else f.type
        return pa.struct(list(fields.items()))
    if pa.types.is_list(a) and pa.types.is_list(b):
        return pa.list_(_merge(a.value_type, b.value_type))
    raise _Unsupported(f"{a} and {b} in one field")


def _conform(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """``arr`` as ``target`` (a merge of its type): missing fields null, null columns typed,
    integers widened to doubles where ``pa.array`` would (only exactly representable ones)."""
    t = arr.type
    if t == target:
        return arr
    if pa.types.is_null(t):
        return pa.nulls(len(arr), target)
    if pa.types.is_int64(t) and pa.types.is_float64(target):
        x = arr.fill_null(0).to_numpy(zero_copy_only=False)
        if len(x) and int(np.abs(x).max()) > 2 ** 53:
            raise _Unsupported("an integer beyond 2**53 beside doubles")
        return arr.cast(pa.float64())
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(t) and pa.types.is_struct(target):
        assert isinstance(arr, pa.StructArray)
        have = {t.field(i).name: i for i in range(t.num_fields)}
        children = []
        for i in range(target.num_fields):
            f = target.field(i)
            children.append(_conform(arr.field(have[f.name]), f.type) if f.name in have
                            else pa.nulls(len(arr), f.type))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_list(t) and pa.types.is_list(target):
        assert isinstance(arr, pa.ListArray)
        values = _conform(arr.values, target.value_type)
        return pa.ListArray.from_arrays(arr.offsets, values, type=target, mask=mask)
    raise _Unsupported(f"{t} as {target}")
