"""Mergeable partial aggregates of the sample checks: what one chunk of records contributes.

A check's state is never "the records": it is a small Arrow table per check whose rows are
keyed by group and window (and by value where values must be told apart) and whose other
columns merge by a fixed operation (:data:`PARTIAL_LAYOUT`), plus a few counters that merge
by sum.  Merging the partials of any split of a sample — the chunks of a streamed replay,
the partitions of a Spark job — and merging the whole sample's gives the same table (a
group-by over the concatenation), so a chunked replay's results equal the whole replay's
and any engine that can compute these tables (a ``groupBy`` with ``sum``/``max``/``count``)
feeds the same :func:`~kqlab.validate.sample_checks.finish.finish_check`.

Tables, per kind (``group``: string, null without ``by``; ``window``: int64 epoch-ms start
of the window, 0 without ``window``; ``value``: large_binary canonical text, see
:mod:`.columns`):

=================  ===========================  =============================================
kind               keys                         merged columns
=================  ===========================  =============================================
volume             group, window                records: sum
freshness          group                        newest: max (epoch ms), records: sum
null_rate          group, window                records: sum, nulls: sum
duplicate_rate     group, window, value         count: sum (non-null values only)
distinct           group, window, value         count: sum (non-null values only)
stat               — (rows kept)                group, window, value: float64 (exact values:
                                                quantiles and sums come out the same for any
                                                split, summed in sorted order)
reject_rate        group, window                records: sum, rejected: sum
drift              bin, value                   count: sum (bin: numeric bin index, -1 for a
                                                category; value: the category, null numeric)
schema_drift       value                        count: sum (``schema:<id>``,
                                                ``fields:<a,b,...>``)
=================  ===========================  =============================================

Counters: ``records`` (records the check read, after ``when``), ``untimed`` (read records
without a timestamp, left out of windows), ``non_numeric`` (values that were not numbers),
``not_scalar`` (1: the field holds objects/lists).  The sample's time extent (first and last
timestamp of every record but transaction markers) is one more partial, :class:`Extent`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.sample_checks.cells import Cells, cells_of, keys_at, merge_cells

__all__ = ["PARTIAL_LAYOUT", "PARTIAL_SCHEMAS", "Extent", "Partial", "group_aggregate",
           "merge_partials"]

_G = ("group", pa.string())
_W = ("window", pa.int64())
_V = ("value", pa.large_binary())

#: per kind: the key columns and how every other column merges (``keep``: rows are kept)
PARTIAL_LAYOUT: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "volume": (("group", "window"), {"records": "sum"}),
    "freshness": (("group",), {"newest": "max", "records": "sum"}),
    "null_rate": (("group", "window"), {"records": "sum", "nulls": "sum"}),
    "duplicate_rate": (("group", "window", "value"), {"count": "sum"}),
    "distinct": (("group", "window", "value"), {"count": "sum"}),
    "stat": ((), {"group": "keep", "window": "keep", "value": "keep"}),
    "reject_rate": (("group", "window"), {"records": "sum", "rejected": "sum"}),
    "drift": (("bin", "value"), {"count": "sum"}),
    "schema_drift": (("value",), {"count": "sum"}),
}

#: the partial table's schema per kind (what every engine must produce)
PARTIAL_SCHEMAS: dict[str, pa.Schema] = {
    "volume": pa.schema([_G, _W, ("records", pa.int64())]),
    "freshness": pa.schema([_G, ("newest", pa.int64()), ("records", pa.int64())]),
    "null_rate": pa.schema([_G, _W, ("records", pa.int64()), ("nulls", pa.int64())]),
    "duplicate_rate": pa.schema([_G, _W, _V, ("count", pa.int64())]),
    "distinct": pa.schema([_G, _W, _V, ("count", pa.int64())]),
    "stat": pa.schema([_G, _W, ("value", pa.float64())]),
    "reject_rate": pa.schema([_G, _W, ("records", pa.int64()), ("rejected", pa.int64())]),
    "drift": pa.schema([("bin", pa.int64()), _V, ("count", pa.int64())]),
    "schema_drift": pa.schema([_V, ("count", pa.int64())]),
}


@dataclass
class Partial:
    """One check's partial aggregate: its table (:data:`PARTIAL_SCHEMAS` of its kind) and
    counters."""

    kind: str
    table: pa.Table
    counts: dict[str, int] = field(default_factory=dict)
    #: per row of ``table`` its (group, window) cell, where the local engine knows them
    #: (value-keyed and ``stat`` partials, :mod:`.cells`): an index, never needed
    cells: Cells | None = field(default=None, repr=False, compare=False)

    @classmethod
    def empty(cls, kind: str) -> Partial:
        """Nothing read yet."""
        return cls(kind, PARTIAL_SCHEMAS[kind].empty_table(), {})


@dataclass
class Extent:
    """The sample's time extent: first and last record timestamp (None: no timestamp) and
    records (transaction markers left out); merges by min, max and sum."""

    first: int | None = None
    last: int | None = None
    records: int = 0

    def merge(self, other: Extent) -> Extent:
        """Both extents as one."""
        firsts = [t for t in (self.first, other.first) if t is not None]
        lasts = [t for t in (self.last, other.last) if t is not None]
        return Extent(min(firsts) if firsts else None, max(lasts) if lasts else None,
                      self.records + other.records)


def _key_codes(column: pa.Array | pa.ChunkedArray | np.ndarray) -> np.ndarray:
    """Dense-ish int64 codes of a key column (equal values, equal codes; null its own code):
    a dictionary array's indices as they are, a small integer range shifted to 0, else the
    codes of Arrow's hash kernel (dictionary encoding)."""
    if isinstance(column, np.ndarray):
        if not len(column):
            return column.astype(np.int64)
        low, high = int(column.min()), int(column.max())
        if high - low < 4 * len(column) + 1024:
            return (column - low).astype(np.int64)
        return np.unique(column, return_inverse=True)[1].reshape(-1).astype(np.int64)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not isinstance(column, pa.DictionaryArray):
        heads = _run_heads(column)
        if heads is not None:  # long runs of one value: hash only each run's first row
            codes = _key_codes(column.take(pa.array(heads)))
            return np.repeat(codes, np.diff(np.append(heads, len(column))))
    enc = column if isinstance(column, pa.DictionaryArray) else pc.dictionary_encode(column)
    codes = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    codes[codes < 0] = len(enc.dictionary)
    return codes


def _run_heads(column: pa.Array) -> np.ndarray | None:
    """The first row of each run of equal values of a string or binary column without
    nulls, when its runs are long (a partial's ``group`` column: a chunk's partition, row
    after row) — comparing neighbours costs a fraction of hashing every row; else None."""
    n = len(column)
    if n < 1024 or column.null_count or not (
            pa.types.is_string(column.type) or pa.types.is_large_string(column.type) or
            pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        return None
    # sample first: a column of short runs is hashed at once, without the full comparison
    probe = column.slice(0, 1024)
    if pc.sum(pc.not_equal(probe.slice(0, 1023), probe.slice(1))).as_py() > 64:
        return None
    changed = pc.not_equal(column.slice(0, n - 1), column.slice(1)).to_numpy(
        zero_copy_only=False)
    heads = np.flatnonzero(changed) + 1
    if len(heads) > n // 16:
        return None
    return np.concatenate([np.zeros(1, np.int64), heads.astype(np.int64)])


#: a column with at most this many distinct short values is counted by :func:`short_codes`
SHORT_VALUES = 8


def short_codes(column: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """Dense codes of a binary or string column of few distinct values of at most 7 bytes
    each (currencies, regions, statuses), and the first row of each code; None when it is
    not such a column (then it is hashed as any other).

    Each value is read as one 64-bit word: its bytes, and its length in the top byte.  For
    values of 7 bytes or fewer that word *is* the value (two values are equal exactly when
    their words are), so no hash is computed and none can collide.  The distinct words of
    the first 1024 rows are the candidates; a comparison per candidate gives each row its
    code, and a row matching none (a value the prefix lacks) sends the column to the hash."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    t = column.type
    large = pa.types.is_large_binary(t) or pa.types.is_large_string(t)
    n = len(column)
    if n < 256 or column.null_count or not (large or pa.types.is_binary(t) or
                                              pa.types.is_string(t)):
        return None
    _, offs, data = column.buffers()
    width = 8 if large else 4
    offsets = np.frombuffer(offs, np.int64 if large else np.int32, n + 1,
                            column.offset * width).astype(np.int64)
    lengths = offsets[1:] - offsets[:-1]
    if int(lengths.max()) > 7:
        return None
    start, end = int(offsets[0]), int(offsets[-1])
    raw = np.frombuffer(data, np.uint8, end - start, start) if data is not None and \
        end > start else np.zeros(0, np.uint8)
    size = int(lengths[0])
    if (lengths == size).all():  # one width (codes of a kind): each value read as one
        # little-endian word at a stride of the width, the bytes past it masked off (8 zero
        # bytes after the data keep the last read inside; one length, nothing to add): one
        # pass, not one per byte (0.28 -> 0.08 ms per 125k three-byte values)
        padded = np.zeros(n * size + 8, np.uint8)
        padded[:n * size] = raw[:n * size]
        word = np.ndarray((n,), np.dtype("<u8"), padded, strides=(size,)) & \
            np.uint64((1 << 8 * size) - 1)
    else:  # any widths: each row reads a whole (unaligned) word, its tail masked off
        padded = np.zeros(end - start + 8, np.uint8)
        padded[:end - start] = raw
        words = np.ndarray((len(padded) - 7,), np.dtype("<u8"), padded,
                           strides=(1,))[offsets[:-1] - start]
        words = words & ((np.uint64(1) << (lengths * 8).astype(np.uint64)) - np.uint64(1))
        word = words | (lengths.astype(np.uint64) << np.uint64(56))
    candidates, first = np.unique(word[:1024], return_index=True)
    if len(candidates) > SHORT_VALUES:
        return None
    # each row's rank among the (sorted) candidates; every row one of them, or declined
    codes = np.zeros(n, np.uint8)
    matched = _count(word == candidates[0])
    for w in candidates[1:].tolist():
        codes += word >= np.uint64(w)
        matched += _count(word == np.uint64(w))
    if matched != n:
        return None
    return codes.astype(np.int64), first.astype(np.int64)


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


def _strictly_increasing(column: pa.Array | pa.ChunkedArray | np.ndarray) -> bool:
    """Whether a string or binary column without nulls is in strictly increasing order:
    then every row holds its own value (keys a producer numbered in order), known without
    hashing them."""
    if isinstance(column, np.ndarray | pa.ChunkedArray) or \
            len(column) < 2 or column.null_count or not (
            pa.types.is_string(column.type) or pa.types.is_large_string(column.type) or
            pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        return False
    n = len(column)
    if n > 2048:  # a prefix out of order says no without comparing the whole column
        probe = column.slice(0, 1024)
        if not pc.all(pc.less(probe.slice(0, 1023), probe.slice(1))).as_py():
            return False
    return bool(pc.all(pc.less(column.slice(0, n - 1), column.slice(1))).as_py())


def group_aggregate(keys: Mapping[str, pa.Array | pa.ChunkedArray | np.ndarray],
                    values: Mapping[str, tuple[str, np.ndarray | None]], n: int,
                    schema: pa.Schema, scales: Mapping[str, int] | None = None) -> pa.Table:
    """Rows grouped by the ``keys`` columns, each of ``values`` aggregated by its operation
    (``count``: rows; ``sum``, ``max``: of the given int64 array), as a table of ``schema``.

    Arrow's own group-by hashes string keys row by row; here each key column is dictionary
    encoded (Arrow's hash kernel), the codes combined into one int64 and grouped by numpy —
    several times faster on the partial tables' keys (partitions, windows, values).
    ``scales``: integer key columns given as indices, multiplied back in the output (a
    window given as ``ts // w`` groups over a dense range; its start is ``index * w``)."""
    if n == 0:
        return schema.empty_table()
    code = np.zeros(n, np.int64)
    distinct = False
    for column in keys.values():
        if distinct:
            continue
        if _strictly_increasing(column):  # every row its own value: nothing to group
            distinct = True
            continue
        c = _key_codes(column)
        width = int(c.max()) + 1 if len(c) else 1
        # a column hashed here (its dictionary: the distinct values, every code used) with
        # n codes: every row holds its own value, a group of its own (keys of a topic)
        distinct = distinct or (width == n and not isinstance(column, np.ndarray)
                                and not pa.types.is_dictionary(column.type))
        if distinct:
            continue
        if int(code.max()) * width + width >= 2**62:  # keep the combined code in range
            code = np.unique(code, return_inverse=True)[1].reshape(-1).astype(np.int64)
        code = code * width + c
    top = int(code.max()) + 1
    inverse: np.ndarray
    if distinct:  # nothing to group: rows as they are
        first = inverse = np.arange(n)
        groups = n
    elif top <= 8 * n + 1024:  # a dense range (groups x windows [x values]): counting, no sort
        seen = np.zeros(top, bool)
        seen[code] = True
        rank = np.cumsum(seen, dtype=np.int32 if top < 2**31 else np.int64) - 1
        inverse = np.asarray(rank[code], dtype=np.int64)
        groups = int(rank[-1]) + 1
        first = np.empty(groups, np.int64)
        first[inverse[::-1]] = np.arange(n - 1, -1, -1)  # the last write is the first row
    else:
        _, first, found = np.unique(code, return_index=True, return_inverse=True)
        inverse = np.asarray(found.reshape(-1), dtype=np.int64)
        groups = len(first)
    take = pa.array(first)
    out: dict[str, pa.Array] = {}
    for name, column in keys.items():
        scale = (scales or {}).get(name, 1)
        if distinct:
            out[name] = pa.array(column * scale) if isinstance(column, np.ndarray) else \
                column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        else:
            out[name] = pa.array(column[first] * scale) if isinstance(column, np.ndarray) \
                else column.take(take)
        if isinstance(out[name], pa.DictionaryArray):
            out[name] = out[name].dictionary_decode()
    for name, (op, data) in values.items():
        if op == "count":
            agg = np.bincount(inverse, minlength=groups)
        elif op == "sum":  # exact: the sums are record counts, far below 2**53
            assert data is not None
            agg = np.rint(np.bincount(inverse, weights=data, minlength=groups))
        else:  # max
            assert data is not None
            agg = np.full(groups, np.iinfo(np.int64).min, np.int64)
            np.maximum.at(agg, inverse, data.astype(np.int64))
        out[name] = pa.array(agg.astype(np.int64))
    return pa.table({name: out[name] for name in schema.names}).cast(schema)


def merge_partials(kind: str, partials: Iterable[Partial]) -> Partial:
    """The partials of several chunks as one: tables concatenated and grouped by their keys
    (:data:`PARTIAL_LAYOUT`), counters summed.  The rows' order is not part of the result:
    :func:`~kqlab.validate.sample_checks.finish.finish_check` orders what it reports."""
    items = list(partials)
    counts: dict[str, int] = {}
    for p in items:
        for name, value in p.counts.items():
            counts[name] = counts.get(name, 0) + value
    schema = PARTIAL_SCHEMAS[kind]
    tables = [p.table for p in items if p.table.num_rows]
    if not tables:
        return Partial(kind, schema.empty_table(), counts)
    keys, merged = PARTIAL_LAYOUT[kind]
    held = [p for p in items if p.table.num_rows]
    cells = [cells_of(p) for p in held]
    if len(held) == 1:
        return Partial(kind, held[0].table, counts, cells[0])
    if kind in _CELL_KINDS and all(c is not None for c in cells):
        return _merge_by_cells(kind, held, [c for c in cells if c is not None], counts)
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    if keys and len(tables) > 1:
        table = table.combine_chunks()
        if "value" in keys and "window" in keys:
            return Partial(kind, _merge_cells(kind, tables, table), counts)
        table = group_aggregate(
            {k: table.column(k) for k in keys},
            {name: (op, table.column(name).to_numpy()) for name, op in merged.items()},
            table.num_rows, schema)
    return Partial(kind, table, counts)


def _merge_cells(kind: str, tables: list[pa.Table], table: pa.Table) -> pa.Table:
    """Value-keyed partials (``distinct``, ``duplicate_rate``) merged: only the rows of the
    (group, window) cells that more than one partial holds are grouped again.  Each partial's
    rows are unique on their keys (a partial is grouped), and the chunks of a streamed replay
    share few cells (a partition's consecutive chunks, a window on their boundary), so most
    rows are kept as they are instead of hashing every value once more."""
    n = table.num_rows
    g = _key_codes(table.column("group"))
    w = _key_codes(table.column("window").to_numpy())
    width = int(w.max()) + 1
    cell = g * width + w
    if int(cell.max()) >= 4 * n + 1024:
        cell = np.unique(cell, return_inverse=True)[1].reshape(-1).astype(np.int64)
    cells = int(cell.max()) + 1
    if len(tables) * cells <= 4 * n + 1024:  # per table, the cells it holds (counting)
        holders = np.zeros(cells, np.int64)
        at = 0
        for t in tables:
            holders += np.bincount(cell[at:at + t.num_rows], minlength=cells) > 0
            at += t.num_rows
        shared = (holders > 1)[cell]
    else:
        src = np.repeat(np.arange(len(tables)), [t.num_rows for t in tables])
        rows = np.arange(n)
        first = np.empty(cells, np.int64)
        first[cell[::-1]] = rows[::-1]  # the last write is the first row of the cell
        last = np.empty_like(first)
        last[cell] = rows
        shared = src[first[cell]] != src[last[cell]]  # tables are concatenated in order
    if not shared.any():
        return table
    both = table.filter(pa.array(shared))
    _, merged = PARTIAL_LAYOUT[kind]
    regrouped = group_aggregate(
        {k: both.column(k) for k in ("group", "window", "value")},
        {name: (op, both.column(name).to_numpy()) for name, op in merged.items()},
        both.num_rows, PARTIAL_SCHEMAS[kind])
    return pa.concat_tables([table.filter(pa.array(~shared)), regrouped]).combine_chunks()


#: kinds whose local partials carry their rows' cells (:mod:`.cells`)
_CELL_KINDS = frozenset({"duplicate_rate", "distinct", "stat"})
#: a value-keyed partial grouped by cell code and value (the cells' keys taken after)
_BY_CELL = pa.schema([("cell", pa.int64()), ("value", pa.large_binary()),
                      ("count", pa.int64())])


def _merge_by_cells(kind: str, held: list[Partial], cells: list[Cells],
                    counts: dict[str, int]) -> Partial:
    """Partials that carry their cells merged by them: the cells' keys (a few rows per
    partial) say which cells several partials hold, and only those cells' rows are grouped
    again (value-keyed kinds; ``stat`` keeps every row); the rows of the others are kept as
    they are, without reading their group, window or value.  The merged rows' codes are
    made only when something reads them: a cell held by one partial keeps its judgement
    (value-keyed kinds: its rows and total; ``stat``: its statistic), so judging a merge of
    a stream's chunks that share no cell reads no row."""
    maps, keys, holders = merge_cells(cells)

    def merged_codes() -> np.ndarray:
        return np.concatenate([m[c.codes] for m, c in zip(maps, cells, strict=True)])

    table = pa.concat_tables([p.table for p in held])
    shared_cells = holders > 1
    k = keys.num_rows
    # per cell: the rows of the partials that hold it (and, value-keyed, their counts' sum)
    rows = _per_cell_sum(maps, [c.rows for c in cells], k)
    if kind == "stat":
        return Partial(kind, table, counts, _merged_stats(table, merged_codes, keys, maps,
                                                          cells, shared_cells, rows))
    total = _per_cell_sum(maps, [c.total for c in cells], k)
    if total is None:
        rows = None
    if not shared_cells.any():
        return Partial(kind, table, counts, Cells(table, merged_codes, keys, rows, total))
    codes = merged_codes()
    shared = shared_cells[codes]
    mask = pa.array(shared)
    both = table.filter(mask)
    regrouped = group_aggregate(
        {"cell": codes[shared], "value": both.column("value")},
        {"count": ("sum", both.column("count").to_numpy())}, both.num_rows, _BY_CELL)
    cell = regrouped.column("cell").to_numpy()
    group, window = keys_at(keys, cell)
    again = pa.table({"group": group, "window": window,
                      "value": regrouped.column("value"), "count": regrouped.column("count")},
                     schema=PARTIAL_SCHEMAS[kind])
    out = pa.concat_tables([table.filter(pc.invert(mask)), again])
    if rows is not None:  # a shared cell's rows are its values after grouping them again
        rows = np.where(shared_cells, np.bincount(cell, minlength=k), rows)
    return Partial(kind, out, counts, Cells(out, np.concatenate([codes[~shared], cell]), keys,
                                            rows, total))


def _per_cell_sum(maps: list[np.ndarray], parts: list[np.ndarray | None], k: int
                  ) -> np.ndarray | None:
    """Per merged cell the sum of the partials' per-cell ``parts`` (each partial's cells
    mapped by ``maps``); None when a partial lacks them."""
    given = [p for p in parts if p is not None]
    if len(given) < len(parts):
        return None
    out = np.zeros(k, np.int64)
    for m, part in zip(maps, given, strict=True):
        np.add.at(out, m, part)
    return out


def _merged_stats(table: pa.Table, codes: Callable[[], np.ndarray], keys: pa.Table,
                  maps: list[np.ndarray], cells: list[Cells], shared: np.ndarray,
                  rows: np.ndarray | None) -> Cells:
    """The cells of merged ``stat`` partials: each cell's values (``rows``, summed) and,
    where one partial holds the cell and computed its statistic, that statistic as the
    final one (a cell several partials hold is computed from all its values when judged)."""
    k = keys.num_rows
    if rows is None or any(c.observed is None or c.known is None for c in cells):
        return Cells(table, codes, keys)
    observed = np.full(k, np.nan)
    known = np.zeros(k, bool)
    for m, c in zip(maps, cells, strict=True):
        assert c.observed is not None and c.known is not None
        alone = ~shared[m] & c.known
        observed[m[alone]] = c.observed[alone]
        known[m[alone]] = True
    return Cells(table, codes, keys, rows, None, observed, known)
