"""A statistic of each (group, window) cell's exact values — what a ``stat`` check
reports per window — for the finish (:mod:`.finish`) and for a chunk's ``stat`` partial,
which computes it for its cells as it is made (:func:`cell_stats`, kept by
:class:`~.cells.Cells`), so both run the very same code over the same values.

Each cell's values are laid out in cell order and sorted (sums) or partitioned (order
statistics) before the statistic is read, so any split of the sample into chunks gives the
same bits.
"""

from __future__ import annotations

import numpy as np

__all__ = ["QUANTILES", "cell_stats"]

#: the quantile each percentile statistic reads (linear interpolation between exact values)
QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def cell_stats(stat: str, codes: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """``stat`` of the values of each of ``k`` cells (``codes``: per value its cell; every
    cell holds one), by cell — what :func:`_stat_columns` reports for them, computed by
    the same code over the same values (a chunk's ``stat`` partial computes it for its
    cells, so judging a cell no other chunk holds reads none of its values again)."""
    _, counts, observed = _stat_cells(stat, codes, values)
    assert len(counts) == k, (len(counts), k)
    return observed.astype(np.float64)


def _stat_cells(stat: str, cell: np.ndarray, values: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``stat`` of the values of each cell (``cell``: per value a code whose order is the
    cells' order): per cell in that order a row of it, its count and the statistic."""
    dense = len(cell) and int(cell.max()) < 4 * len(cell) + 1024  # codes countable
    per_cell = np.bincount(cell) if dense else np.zeros(0, np.int64)
    used = np.flatnonzero(per_cell)
    if dense and len(used) <= max(64, len(cell) // 256):
        # few cells: values put in cell order (a counting sort of small codes, nearly
        # sequential reads), then each cell's values sorted in place (numpy's vectorised
        # sort, several times cheaper than an argsort and its gathers)
        counts = per_cell[used]
        ends = np.cumsum(counts)
        starts = ends - counts
        runs = _cell_runs(cell)
        if runs is not None:  # few runs of one cell: their slices copied in cell order
            run_starts, run_lengths = runs
            v = np.concatenate([values[a:a + k] for a, k in
                                zip(run_starts.tolist(), run_lengths.tolist(), strict=True)])
            # a cell's first row: the start of its first run (runs keep their order)
            first_run = np.searchsorted(np.cumsum(run_lengths) - run_lengths, starts)
            first = run_starts[first_run]
        else:
            by_cell = _cell_order(cell)
            v = values[by_cell]
            first = by_cell[starts]
        for a, b, kth in zip(starts.tolist(), ends.tolist(), _order_stats(stat, counts),
                             strict=True):
            if kth is None:  # sums: every value in sorted order
                v[a:b].sort()
            else:  # a quantile, min, max: only its positions in sorted order (a partition)
                _order_stat(v[a:b], kth)
    else:
        # equal values are interchangeable, so an unstable (faster) sort gives the same sums
        by_value = np.argsort(values)
        small = cell[by_value]
        small = small.astype(np.uint16) if len(small) and small.max() < 2**16 else small
        order = by_value[np.argsort(small, kind="stable")]
        v, c = values[order], cell[order]
        new = np.ones(len(v), bool)
        new[1:] = c[1:] != c[:-1]
        starts = np.flatnonzero(new)
        ends = np.r_[starts[1:], len(v)]
        counts = ends - starts
        first = order[starts]
    if stat == "mean":
        observed = np.add.reduceat(v, starts) / counts
    elif stat == "min":
        observed = v[starts]
    elif stat == "max":
        observed = v[ends - 1]
    elif stat == "stddev":
        means = np.add.reduceat(v, starts) / counts
        dev = (v - np.repeat(means, counts)) ** 2
        ss = np.add.reduceat(dev, starts)
        observed = np.where(counts > 1, np.sqrt(ss / np.maximum(counts - 1, 1)), np.nan)
    else:
        q = QUANTILES[stat]
        pos = q * (counts - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, counts - 1)
        frac = pos - lo
        a, b = v[starts + lo], v[starts + hi]
        observed = a + (b - a) * frac
    return first, counts, observed


#: at most this many runs of one cell are laid out slice by slice (:func:`_cell_runs`)
_MAX_RUNS = 4096


def _cell_runs(cell: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The runs of one cell code (first row, length) in cell order, each cell's in row order,
    when there are few (a partial of a partition's records in time order: a few runs per
    window); else None.  Copying those slices is the stable sort's layout without an index
    per row."""
    n = len(cell)
    if n < 4096:
        return None
    heads = np.flatnonzero(cell[1:] != cell[:-1]) + 1
    if len(heads) >= _MAX_RUNS:
        return None
    heads = np.concatenate([np.zeros(1, np.int64), heads])
    lengths = np.diff(np.append(heads, n))
    runs = np.argsort(cell[heads], kind="stable")
    return heads[runs], lengths[runs]


def _cell_order(cell: np.ndarray) -> np.ndarray:
    """The rows in cell order, each cell's in row order (``argsort(cell, "stable")``).  A
    partial's rows come in runs of one cell (a partition's records in time order): then the
    runs are ordered and laid out, not the rows sorted."""
    n = len(cell)
    heads = np.flatnonzero(cell[1:] != cell[:-1]) + 1
    if n < 4096 or len(heads) > n // 16:
        small = cell.astype(np.uint16) if cell.max() < 2**16 else cell
        return np.argsort(small, kind="stable")
    heads = np.concatenate([np.zeros(1, np.int64), heads])
    lengths = np.diff(np.append(heads, n))
    runs = np.argsort(cell[heads], kind="stable")  # runs of one cell keep their order
    starts, lengths = heads[runs], lengths[runs]
    # each row of a run: its run's first row, plus its place in the run
    placed = np.cumsum(lengths) - lengths
    return np.repeat(starts - placed, lengths) + np.arange(n)


def _order_stat(v: np.ndarray, kth: list[int]) -> None:
    """Put into ``v``'s positions ``kth`` (one, or two neighbours) the values a sort would
    put there.  Two neighbours: a partition at the first, then the smallest value after it
    moved next to it — numpy's partition at two positions costs several times more."""
    if len(kth) == 2 and kth[1] == kth[0] + 1:
        lo = kth[0]
        v.partition(lo)
        at = lo + 1 + int(np.argmin(v[lo + 1:]))
        v[lo + 1], v[at] = v[at], v[lo + 1]
    else:
        v.partition(kth)


def _order_stats(stat: str, counts: np.ndarray) -> list[list[int] | None]:
    """Per cell the sorted positions ``stat`` reads (None: it reads them all, a sum in
    sorted order) — what the quantile, min and max below take from each cell's values."""
    n = counts.tolist()
    if stat == "min":
        return [[0] for _ in n]
    if stat == "max":
        return [[c - 1] for c in n]
    if stat in QUANTILES:
        q = QUANTILES[stat]
        out: list[list[int] | None] = []
        for c in n:
            lo = int(np.floor(q * (c - 1)))
            out.append(sorted({lo, min(lo + 1, c - 1)}))
        return out
    return [None for _ in n]
