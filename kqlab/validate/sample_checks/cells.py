"""The (group, window) cells of a chunk as integer codes: computed once per chunk and shared
by every check of the same ``by`` and ``window``, kept beside the partials that hold a row per
value or per value read (``distinct``, ``duplicate_rate``, ``stat``) until they are judged.

Why: those partials hold up to a row per record (a million keys, a million amounts), and
finding their cells again from the ``group`` text and ``window`` columns — to merge the
chunks' partials and to judge each cell — hashed every row once more at each step (two
thirds of the duplicate-key check's cost, most of a p95's).  A chunk knows its cells while
it computes the partial (its records' partition labels are a dictionary, its windows a
small integer range), so it keeps them: per row of the partial table a code, and per code
the cell's group label and window start (:class:`Cells`).  The partial tables themselves
are unchanged (``group``/``window`` columns as :data:`~.partials.PARTIAL_SCHEMAS` says), so a
partial without codes (read back from Parquet, made by another engine) merges and judges
as before, by the columns; the codes are an index over them, never a second truth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.sample_checks.stats import cell_stats

__all__ = ["CELL_KEYS_SCHEMA", "CellIndex", "Cells", "cell_index", "cells_of", "compact_cells",
           "keys_at", "merge_cells"]

#: a cell's identity: its group label (null: no group) and its window start (0: no window)
CELL_KEYS_SCHEMA = pa.schema([("group", pa.string()), ("window", pa.int64())])


@dataclass(frozen=True)
class Cells:
    """Per row of ``table`` (a partial table) the index of its cell in ``keys``
    (:data:`CELL_KEYS_SCHEMA`; every cell holds a row).  Valid for that very table only:
    :func:`cells_of` checks it is still the partial's table (code that filters a partial's
    table replaces the object, and the codes no longer apply)."""

    table: pa.Table
    #: the codes, or what makes them when first read (a merge whose cells all keep their
    #: rows' judgement needs no per-row codes unless the partial is merged again)
    codes_or_thunk: np.ndarray | Callable[[], np.ndarray]
    keys: pa.Table
    #: value-keyed partials: per cell its rows (distinct values) and the sum of their
    #: ``count`` (values read) — a window's whole judgement, kept through merges
    rows: np.ndarray | None = None
    total: np.ndarray | None = None
    #: ``stat``: per cell the statistic of its values, and whether that is the cell's final
    #: value (its values all in this partial: a cell several merged partials hold is
    #: computed again from them when judged)
    observed: np.ndarray | None = None
    known: np.ndarray | None = None

    @property
    def codes(self) -> np.ndarray:
        """Per row of ``table`` its cell (made on first use when given as a thunk)."""
        codes = self.codes_or_thunk
        if callable(codes):
            codes = codes()
            object.__setattr__(self, "codes_or_thunk", codes)
        return codes


def cells_of(partial: object) -> Cells | None:
    """The partial's cell codes when they still describe its table, else None."""
    cells = getattr(partial, "cells", None)
    if cells is None or cells.table is not getattr(partial, "table", None):
        return None
    return cells


@dataclass(frozen=True)
class CellIndex:
    """One chunk's cells for a ``by`` and ``window``: per record its cell code (-1: no
    timestamp, for a windowed check) and per cell its group label and window start (a
    cell may hold no record: what counts the records leaves it out)."""

    codes: np.ndarray
    keys: pa.Table



def compact_cells(table: pa.Table, codes: np.ndarray, keys: pa.Table,
                  count: np.ndarray | None = None,
                  stat: tuple[str, np.ndarray] | None = None) -> Cells:
    """The :class:`Cells` of ``table`` whose rows are in cells ``codes`` of ``keys``,
    renumbered to the cells they use (a partial's cells all hold rows); given the rows'
    ``count`` (value-keyed kinds), with each cell's rows and total; given ``stat`` (the
    statistic and the rows' values: ``stat`` partials), with each cell's rows and its
    statistic, computed here — on the chunk's pass, beside the reading of the next one —
    rather than when the sample is judged (its serial end)."""
    rows = np.bincount(codes, minlength=keys.num_rows)
    used = rows > 0
    total = None
    if count is not None:
        total = rows if len(count) and int(count.max()) == 1 else \
            np.bincount(codes, weights=count, minlength=keys.num_rows).round().astype(np.int64)
    keep_rows = count is not None or stat is not None
    if not used.all():
        renumber = np.cumsum(used) - 1
        codes, keys, rows = renumber[codes], keys.filter(pa.array(used)), rows[used]
        total = None if total is None else total[used]
    observed = known = None
    if stat is not None and len(rows):
        observed = cell_stats(stat[0], codes, stat[1], len(rows))
        known = np.ones(len(rows), bool)
    return Cells(table, codes, keys, rows if keep_rows else None, total, observed, known)


def _label_codes(groups: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Each record's group as an integer code and the labels by code (null: a code of its
    own, the last)."""
    if isinstance(groups, pa.ChunkedArray):
        groups = groups.combine_chunks()
    enc = groups if isinstance(groups, pa.DictionaryArray) else pc.dictionary_encode(groups)
    labels = enc.dictionary
    if not pa.types.is_string(labels.type):
        labels = labels.cast(pa.string())
    if not enc.indices.null_count:
        return enc.indices.to_numpy().astype(np.int64), labels
    codes = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    if (codes < 0).any():
        codes[codes < 0] = len(labels)
        labels = pa.concat_arrays([labels, pa.nulls(1, pa.string())])
    return codes, labels


def cell_index(groups: pa.Array | pa.ChunkedArray, ts: np.ndarray,
               window_ms: int | None) -> CellIndex:
    """The cells of a chunk's records: ``groups`` their group labels
    (:func:`~.columns.group_labels`), ``ts`` their timestamps (negative: none), cut into
    tumbling ``window_ms`` windows aligned to the epoch (None: one window, start 0)."""
    gcode, labels = _label_codes(groups)
    n = len(ts)
    if window_ms is None and len(labels) == 1:  # one group, no window: one cell
        keys = pa.table({"group": labels, "window": pa.array([0], pa.int64())},
                        schema=CELL_KEYS_SCHEMA)
        return CellIndex(np.zeros(n, np.int64), keys if n else keys.slice(0, 0))
    if window_ms is None:
        wcode = np.zeros(n, np.int64)
        low, width, timed = 0, 1, None
    else:
        timed = ts >= 0
        wi = ts // window_ms
        if timed.all():
            timed = None
        elif timed.any():
            wi = np.where(timed, wi, wi[timed][0])  # untimed rows: any cell, code -1 below
        low = int(wi.min()) if n else 0
        width = int(wi.max()) - low + 1 if n else 1
        wcode = wi - low
    one = len(labels) == 1  # a chunk of one partition: its windows are its cells
    code = wcode if one else gcode * width + wcode
    top = len(labels) * width
    if one and width <= 4096:  # every window of the chunk's span a cell (empty ones too:
        used = np.arange(width)  # counts leave them out), the codes as they are
        codes = code
    elif top <= 4 * n + 1024:  # a dense range (groups x windows): counting, no sort
        seen = np.zeros(top, bool)
        seen[code if timed is None else code[timed]] = True
        used = np.flatnonzero(seen)
        if len(used) == top:  # every cell of the range used: the codes are their ranks
            codes = code
        else:
            rank = np.cumsum(seen) - 1
            codes = rank[code]
    else:
        used, codes = np.unique(code if timed is None else code[timed], return_inverse=True)
        if timed is not None:
            codes = np.searchsorted(used, code)
    if timed is not None:
        codes = np.where(timed, codes, -1)
    g, w = np.divmod(used, width)
    starts = (w + low) * (window_ms or 0)
    keys = pa.table({"group": labels.take(pa.array(g)), "window": pa.array(starts, pa.int64())},
                    schema=CELL_KEYS_SCHEMA)
    return CellIndex(np.asarray(codes, np.int64), keys)


def keys_at(keys: pa.Table, codes: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """The group labels and window starts of cells ``codes`` of ``keys``, one per code (a
    partial table's ``group`` and ``window`` columns).  The cells of a chunk usually share
    one label (one partition): then the labels are written as one string repeated, not
    taken code by code."""
    group = keys.column("group").combine_chunks()
    window = pa.array(keys.column("window").to_numpy()[codes])
    labels = pc.unique(group)
    n = len(codes)
    if len(labels) == 1 and labels.null_count == 0 and n:
        text = labels[0].as_py().encode()
        if len(text) * n < 2**31:
            offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(text))
            return pa.StringArray.from_buffers(n, pa.py_buffer(offsets),
                                               pa.py_buffer(text * n)), window
    return group.take(pa.array(codes)), window


def merge_cells(cells: list[Cells]) -> tuple[list[np.ndarray], pa.Table, np.ndarray]:
    """Several partials' cells as one set: per partial the map from its codes to the merged
    codes, the merged cells' keys, and per merged cell how many of the partials hold it
    (the cells' keys are few: this never reads a partial's rows)."""
    keys = pa.concat_tables([c.keys for c in cells]).combine_chunks() if len(cells) > 1 \
        else cells[0].keys
    gcode, labels = _label_codes(keys.column("group"))
    window = keys.column("window").to_numpy()
    pair = np.stack([gcode, window], axis=1)
    distinct, inverse = np.unique(pair, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    holders = np.bincount(inverse, minlength=len(distinct))
    merged = pa.table({"group": labels.take(pa.array(distinct[:, 0])),
                       "window": pa.array(distinct[:, 1], pa.int64())}, schema=CELL_KEYS_SCHEMA)
    maps, at = [], 0
    for c in cells:
        maps.append(inverse[at:at + c.keys.num_rows])
        at += c.keys.num_rows
    return maps, merged, holders
