"""From a check's merged partial aggregate to its result row and its windows (one function
for every engine: an engine computes the partials, this judges them).

Windows are tumbling and aligned to the epoch (``window: 10m`` → [12:00, 12:10), ...).  A
``volume`` check judges every window of every group between the sample's first and last
timestamp, the empty ones too (a quiet partition is a window of zero records); a window the
sample covers only in part (its first and last) is ``partial`` and not held to ``min`` (for
``volume`` and ``distinct``, which count).  Other kinds judge the windows that hold values.
A window whose value cannot be computed (no values, one value for a standard deviation) is
not evaluable and fails nothing; a check is ``fail`` when any window fails, ``pass`` when
some window was judged and none failed, else ``not_evaluable`` with a reason code.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.policy.model import Check
from kqlab.validate.sample_checks.baseline import BaselinePlan
from kqlab.validate.sample_checks.cells import Cells, cells_of
from kqlab.validate.sample_checks.partials import Extent, Partial, group_aggregate
from kqlab.validate.sample_checks.results import CHECK_WINDOWS_SCHEMA
from kqlab.validate.sample_checks.stats import _stat_cells

__all__ = ["PSI_FLOOR", "WINDOW_VALUES_SCHEMA", "distinct_observed", "finish_check", "psi",
           "stat_values"]

#: shares below this are raised to it before the population stability index takes their log
#: (an empty bin would otherwise make it infinite)
PSI_FLOOR = 1e-4
#: at most this many new categories are listed (their number is in params)
MAX_NEW_VALUES = 100
#: a volume check judges every window of every group between the sample's first and last
#: timestamp; beyond this many it is not evaluable (a larger window, or timestamps far apart)
MAX_VOLUME_WINDOWS = 2_000_000


class _TooManyWindows(Exception):
    def __init__(self, cells: int) -> None:
        self.cells = cells
#: per (group, window) the value judged, as an engine that aggregates a kind itself hands it
#: to :func:`finish_check` (``values=``) instead of a partial too large to collect
#: (``distinct``, ``duplicate_rate``: keyed by value; ``stat``: exact values); ``window`` is
#: the window's start (0 without ``window``), ``observed`` NaN where not evaluable
WINDOW_VALUES_SCHEMA = pa.schema([("group", pa.string()), ("window", pa.int64()),
                                  ("records", pa.int64()), ("observed", pa.float64())])
_PER_WINDOW = pa.schema([("group", pa.string()), ("window", pa.int64()),
                         ("records", pa.int64()), ("distinct", pa.int64())])


def psi(actual: np.ndarray, expected: np.ndarray) -> float:
    """Population stability index of two count vectors over the same bins:
    Σ (a − e)·ln(a / e) over their shares, each share at least :data:`PSI_FLOOR`.

    Examples
    --------
    >>> round(psi(np.array([50, 50]), np.array([50, 50])), 6)
    0.0
    >>> round(psi(np.array([60, 40]), np.array([50, 50])), 4)
    0.0405
    """
    a = np.maximum(actual / max(actual.sum(), 1), PSI_FLOOR)
    e = np.maximum(expected / max(expected.sum(), 1), PSI_FLOOR)
    return float(np.sum((a - e) * np.log(a / e)))


def _bounds(check: Check) -> tuple[float | None, float | None]:
    spec = check.spec
    if check.kind == "freshness":
        return None, float(check.param("max_age_ms"))
    if check.kind == "drift":
        return None, float(check.param("max_psi"))
    low = check.param("min") if "min" in spec.thresholds else None
    high = check.param("max") if "max" in spec.thresholds else None
    return (None if low is None else float(low)), (None if high is None else float(high))


def _text(v: bytes | None) -> str | None:
    return None if v is None else v.decode("utf-8", "replace")


class _Windows:
    """The judged windows of one check, as columns."""

    def __init__(self, group: list[str | None], start: np.ndarray, end: np.ndarray,
                 records: np.ndarray, observed: np.ndarray, partial: np.ndarray):
        self.group, self.start, self.end = group, start, end
        self.records, self.observed, self.partial = records, observed, partial


def _per_window(check: Check, p: Partial, extent: Extent, now: int) -> _Windows | None:
    """Each window's (group's) records and observed value (NaN: not evaluable)."""
    t = p.table
    kind = check.kind
    w = check.window_ms
    first, last = extent.first, extent.last
    whole_start = first if first is not None else 0
    whole_end = (last + 1) if last is not None else 0
    if kind == "volume" and w is not None:
        if first is None or last is None:
            return None
        groups = sorted(set(t.column("group").to_pylist()), key=lambda g: (g is None, g)) \
            if check.by else [None]
        if not groups:
            groups = [None]
        cells = ((last // w) - (first // w) + 1) * len(groups)
        if cells > MAX_VOLUME_WINDOWS:
            raise _TooManyWindows(cells)
        starts = np.arange((first // w) * w, (last // w) * w + 1, w, dtype=np.int64)
        g_idx = {g: i for i, g in enumerate(groups)}
        grid = np.zeros((len(groups), len(starts)), dtype=np.int64)
        if t.num_rows:
            gi = np.array([g_idx[g] for g in t.column("group").to_pylist()], dtype=np.int64)
            wi = (t.column("window").to_numpy() - starts[0]) // w
            grid[gi, wi] = t.column("records").to_numpy()
        # windows in (start, group) order
        start = np.repeat(starts, len(groups))
        group = groups * len(starts)
        records = grid.T.reshape(-1)
        partial = (start < first) | (start + w > last + 1)
        return _Windows(group, start, start + w, records, records.astype(np.float64), partial)
    if not t.num_rows:
        return None
    if kind in ("duplicate_rate", "distinct", "stat"):  # rows per value: never listed
        return _per_value_window(check, t, extent, cells_of(p))
    group = t.column("group").to_pylist() if "group" in t.column_names else [None]
    if kind == "freshness":
        newest = t.column("newest").to_numpy()
        n = len(newest)
        return _Windows(group, np.full(n, whole_start), np.full(n, whole_end),
                        t.column("records").to_numpy(), (now - newest).astype(np.float64),
                        np.zeros(n, bool))
    if kind in ("volume", "null_rate", "reject_rate"):
        records = t.column("records").to_numpy()
        hits = records if kind == "volume" else \
            t.column("nulls" if kind == "null_rate" else "rejected").to_numpy()
        observed = hits.astype(np.float64) if kind == "volume" else \
            np.where(records > 0, hits / np.maximum(records, 1), np.nan)
        return _framed(check, group, t.column("window").to_numpy(), records, observed,
                       extent)
    raise KeyError(kind)


def _per_value_window(check: Check, t: pa.Table, extent: Extent,
                      cells: Cells | None = None) -> _Windows:
    """Windows of the kinds whose partial holds a row per value (a million rows for the
    keys of a million records): grouped as columns, their labels listed per window only.
    With the rows' ``cells`` (:mod:`.cells`) a window's values are counted by its code, not
    found again from the group and window columns."""
    kind = check.kind
    if kind in ("duplicate_rate", "distinct") and cells is not None:
        k = cells.keys.num_rows
        if cells.rows is not None and cells.total is not None:  # kept per cell: no row read
            distinct, records = cells.rows.astype(np.int64), cells.total.astype(np.int64)
        else:
            distinct = np.bincount(cells.codes, minlength=k).astype(np.int64)
            records = np.rint(np.bincount(cells.codes, weights=t.column("count").to_numpy(),
                                          minlength=k)).astype(np.int64)
        observed = distinct_observed(kind, records, distinct)
        return _framed(check, cells.keys.column("group").to_pylist(),
                       cells.keys.column("window").to_numpy(), records, observed, extent)
    if kind in ("duplicate_rate", "distinct"):
        per = group_aggregate(
            {"group": t.column("group"), "window": t.column("window").to_numpy()},
            {"records": ("sum", t.column("count").to_numpy()), "distinct": ("count", None)},
            t.num_rows, _PER_WINDOW)
        records = per.column("records").to_numpy()
        observed = distinct_observed(kind, records, per.column("distinct").to_numpy())
        return _framed(check, per.column("group").to_pylist(), per.column("window").to_numpy(),
                       records, observed, extent)
    if kind == "stat":
        return _stats(check, t, extent, cells)
    raise KeyError(kind)


def distinct_observed(kind: str, records: np.ndarray, distinct: np.ndarray) -> np.ndarray:
    """A window's value from its non-null values and distinct values: ``distinct`` counts
    them, ``duplicate_rate`` is (values − distinct) / values."""
    return distinct.astype(np.float64) if kind == "distinct" else \
        (records - distinct) / np.maximum(records, 1)


def _group_ranks(group: list[str | None]) -> np.ndarray:
    """Each label's rank in sorted order, null last."""
    names = sorted({g for g in group if g is not None})
    rank = {g: i for i, g in enumerate(names)}
    return np.array([rank[g] if g is not None else len(names) for g in group], np.int64)


def _framed(check: Check, group: list[str | None], window: np.ndarray, records: np.ndarray,
            observed: np.ndarray, extent: Extent, ordered: bool = False) -> _Windows:
    """Windows from per-(group, window) rows: [start, end) and partial flags, in (start,
    group) order."""
    w = check.window_ms
    first = extent.first if extent.first is not None else 0
    last = extent.last if extent.last is not None else -1
    if w is None:
        start = np.full(len(records), first, np.int64)
        end = np.full(len(records), last + 1, np.int64)
        partial = np.zeros(len(records), bool)
    else:
        start = window.astype(np.int64)
        end = start + w
        partial = (start < first) | (end > last + 1)
    if not ordered and len(start) > 1:
        order = np.lexsort((_group_ranks(group), start))
        group = [group[i] for i in order.tolist()]
        start, end, records = start[order], end[order], records[order]
        observed, partial = observed[order], partial[order]
    return _Windows(group, start, end, records, observed, partial)


def _stats(check: Check, t: pa.Table, extent: Extent, cells: Cells | None = None
           ) -> _Windows:
    """A statistic per (group, window) from the exact values, in (start, group) order."""
    group, window, counts, observed = _stat_columns(check, t, cells)
    return _framed(check, group, window, counts, observed, extent, ordered=True)


def stat_values(check: Check, table: pa.Table) -> pa.Table:
    """The ``stat`` check's value per (group, window) of a ``stat`` partial table
    (:data:`WINDOW_VALUES_SCHEMA`): what an engine computes per cell, by this very code,
    when the exact values cannot all come to one place."""
    group, window, counts, observed = _stat_columns(check, table)
    return pa.table({"group": pa.array(group, pa.string()), "window": pa.array(window),
                     "records": pa.array(counts), "observed": pa.array(observed)},
                    schema=WINDOW_VALUES_SCHEMA)


def _stat_columns(check: Check, t: pa.Table, cells: Cells | None = None
                  ) -> tuple[list[str | None], np.ndarray, np.ndarray, np.ndarray]:
    """Group, window, values and statistic per (group, window), in (window, group) order;
    each cell's values sorted first (so any split of the sample sums them in the same
    order).  With the rows' ``cells`` the order of the cells comes from their few keys
    instead of encoding every row's group and window again."""
    stat = str(check.param("stat"))
    values = t.column("value").to_numpy()
    if cells is not None:
        labels = cells.keys.column("group").to_pylist()
        names = sorted({g for g in labels if g is not None})
        at = {g: i for i, g in enumerate(names)}
        grank = np.array([at[g] if g is not None else len(names) for g in labels], np.int64)
        cwindow = cells.keys.column("window").to_numpy()
        order = np.lexsort((grank, cwindow))  # cells in (window, group) order, null last
        sorted_names: list[str | None] = [*names, None]
        if cells.rows is not None and cells.observed is not None and cells.known is not None:
            # each cell's statistic as its partial computed it; only the cells several
            # merged partials held are computed here, from all their values
            observed = cells.observed.copy()
            todo = ~cells.known
            if todo.any():
                at_rows = todo[cells.codes]
                sub = cells.codes[at_rows]
                _, _, again = _stat_cells(stat, sub, values[at_rows])
                observed[np.unique(sub)] = again
            group = [sorted_names[int(x)] for x in grank[order].tolist()]
            return group, cwindow[order], cells.rows[order].astype(np.int64), \
                observed[order].astype(np.float64)
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        first, counts, observed = _stat_cells(stat, rank[cells.codes], values)
        at_cell = cells.codes[first]
        group = [sorted_names[int(x)] for x in grank[at_cell].tolist()]
        return group, cwindow[at_cell], counts.astype(np.int64), observed.astype(np.float64)
    enc = pc.dictionary_encode(t.column("group")).combine_chunks()
    labels = enc.dictionary.to_pylist()
    ranked = sorted(range(len(labels)), key=lambda i: labels[i])
    rank_of = np.empty(len(labels), np.int64)
    rank_of[ranked] = np.arange(len(labels))
    codes = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    gcode = np.where(codes < 0, len(labels), rank_of[np.maximum(codes, 0)]) \
        if len(labels) else np.zeros(len(codes), np.int64)
    sorted_labels: list[str | None] = [labels[i] for i in ranked] + [None]
    window = t.column("window").to_numpy()
    # one code per (window, group), in that order; values sorted first, then a stable sort
    # by the (small) codes — far cheaper than a three-key lexsort
    step = check.window_ms or 1
    wcode = (window - window.min()) // step if len(window) else window
    if len(wcode) and wcode.max() >= 4 * len(wcode) + 1024:  # windows far apart: compact
        wcode = np.unique(wcode, return_inverse=True)[1].reshape(-1)
    cell = wcode.astype(np.int64) * (len(labels) + 1) + gcode
    first, counts, observed = _stat_cells(stat, cell, values)
    group = [sorted_labels[int(x)] for x in gcode[first].tolist()]
    return group, window[first], counts.astype(np.int64), observed.astype(np.float64)


def finish_check(check: Check, partial: Partial, extent: Extent, now: int,
                 plan: BaselinePlan | None = None, *, values: pa.Table | None = None
                 ) -> tuple[dict[str, Any], pa.Table]:
    """The check's result row (a dict of
    :data:`~kqlab.validate.sample_checks.results.CHECK_RESULTS_SCHEMA`) and its windows
    (:data:`~kqlab.validate.sample_checks.results.CHECK_WINDOWS_SCHEMA`).

    ``values``: the per-window values (:data:`WINDOW_VALUES_SCHEMA`) an engine aggregated
    itself (``distinct``, ``duplicate_rate``, ``stat``); ``partial`` then brings the counters
    only."""
    low, high = _bounds(check)
    if check.kind == "freshness" and check.param("now") is not None:
        now = int(check.param("now"))
    params = {k: str(v) for k, v in check.params.items() if k not in ("min", "max",
                                                                     "max_age_ms", "max_psi")}
    if check.kind == "freshness":
        params["now"] = str(now)
    if check.when:
        params["when"] = check.when
    row: dict[str, Any] = {
        "check": check.id, "kind": check.kind, "status": "not_evaluable", "reason": None,
        "metric": check.spec.metric if check.kind != "stat" else str(check.param("stat")),
        "observed": None, "min": low, "max": high, "window_ms": check.window_ms,
        "by": check.by, "records": int(partial.counts.get("records", 0)), "windows": 0,
        "failing_windows": 0, "failing": [], "new_values": [], "params": params}
    empty = CHECK_WINDOWS_SCHEMA.empty_table()
    if check.kind in ("drift", "schema_drift"):
        return _finish_shapes(check, partial, extent, plan, row), empty
    reason = _reason(check, partial, extent, None if values is None else values.num_rows)
    try:
        ws = None if reason else _per_window(check, partial, extent, now) if values is None \
            else _framed(check, values.column("group").to_pylist(),
                         values.column("window").to_numpy(), values.column("records").to_numpy(),
                         values.column("observed").to_numpy(), extent)
    except _TooManyWindows as exc:
        row["reason"] = "too_many_windows"
        row["params"]["windows"] = str(exc.cells)
        return row, empty
    if ws is None or not len(ws.start):
        row["reason"] = reason or ("no_values" if check.kind in (
            "null_rate", "duplicate_rate", "distinct", "stat") else "no_records")
        return row, empty
    obs = ws.observed
    evaluable = ~np.isnan(obs)
    counts_min = check.kind in ("volume", "distinct")
    held_to_min = evaluable & ~(ws.partial & counts_min)
    below = held_to_min & (obs < low) if low is not None else np.zeros(len(obs), bool)
    above = evaluable & (obs > high) if high is not None else np.zeros(len(obs), bool)
    failed = below | above
    status = np.where(~evaluable, "not_evaluable", np.where(failed, "fail", "pass"))
    n = len(obs)
    windows = pa.table({
        "check": pa.array([check.id] * n, pa.string()), "group": pa.array(ws.group, pa.string()),
        "start": pa.array(ws.start, pa.int64()), "end": pa.array(ws.end, pa.int64()),
        "records": pa.array(ws.records, pa.int64()),
        "observed": pa.array(obs, pa.float64(), mask=~evaluable),
        "status": pa.array(status, pa.string()), "partial": pa.array(ws.partial, pa.bool_())},
        schema=CHECK_WINDOWS_SCHEMA)
    if not evaluable.any():
        row["reason"] = "too_few_values" if check.kind == "stat" else "no_values"
        return row, windows
    excess = np.full(n, -np.inf)
    if high is not None:
        excess = np.maximum(excess, obs - high)
    if low is not None:
        excess = np.maximum(excess, np.where(held_to_min, low - obs, -np.inf))
    if high is None and low is None:  # pragma: no cover - the loader requires a threshold
        excess = obs
    excess = np.where(evaluable, excess, -np.inf)
    if not np.isfinite(excess).any():  # only partial windows under a min: the smallest
        excess = np.where(evaluable, -obs, -np.inf)
    worst = int(np.argmax(excess))
    fail_idx = np.flatnonzero(failed)
    if check.kind == "freshness" and (obs < 0).any():
        # a group whose newest record is ahead of the clock has no age: its clock (or the
        # replay's) is wrong, which no max_age_ms can say; the result names the worst one
        ahead = int(np.argmin(obs))
        row["params"]["ahead_ms"] = str(int(-obs[ahead]))
        row["params"]["ahead_groups"] = str(int((obs < 0).sum()))
        if ws.group[ahead] is not None:
            row["params"]["ahead_group"] = str(ws.group[ahead])
    row.update(status="fail" if len(fail_idx) else "pass", observed=float(obs[worst]),
               windows=int(evaluable.sum()), failing_windows=len(fail_idx),
               failing=[{"group": ws.group[i], "start": int(ws.start[i]),
                         "end": int(ws.end[i]), "records": int(ws.records[i]),
                         "observed": float(obs[i])} for i in fail_idx.tolist()])
    return row, windows


def _reason(check: Check, partial: Partial, extent: Extent, rows: int | None = None
            ) -> str | None:
    """Why a check cannot be judged at all, before looking at windows (``rows``: of the
    per-window values, when given instead of the partial's)."""
    if partial.counts.get("not_scalar"):
        return "not_scalar"
    if not partial.counts.get("records"):
        return "no_records"
    if check.window_ms is not None and extent.first is None:
        return "no_timestamps"
    if check.kind == "stat" and not (partial.table.num_rows if rows is None else rows) and \
            partial.counts.get("non_numeric"):
        return "not_numeric"
    return None


def _finish_shapes(check: Check, partial: Partial, extent: Extent, plan: BaselinePlan | None,
                   row: dict[str, Any]) -> dict[str, Any]:
    """drift and schema_drift: the sample's counts against the baseline's."""
    if plan is None or plan.reason is not None:
        row["reason"] = plan.reason if plan is not None else "baseline_missing"
        if plan is not None:
            row["params"]["baseline_path"] = plan.path
            if plan.detail:
                row["params"]["baseline_error"] = plan.detail
        return row
    assert plan.partial is not None
    row["params"]["baseline_records"] = str(plan.records)
    reason = _reason(check, partial, extent)
    if reason is None and not partial.table.num_rows:
        reason = "no_shapes" if check.kind == "schema_drift" else "no_values"
    if reason:
        row["reason"] = reason
        return row
    base, mine = plan.partial.table, partial.table
    high = row["max"]
    if check.kind == "schema_drift":
        seen = set(base.column("value").to_pylist())
        new = [(c, v) for v, c in zip(mine.column("value").to_pylist(),
                                      mine.column("count").to_pylist(), strict=True)
               if v not in seen]
        new.sort(key=lambda cv: (-cv[0], cv[1]))
        observed = float(len(new))
        row["new_values"] = [_text(v) for _, v in new[:MAX_NEW_VALUES]]
    else:
        if plan.edges is not None:
            nb = len(plan.edges) + 1
            actual = np.zeros(nb)
            expected = np.zeros(nb)
            np.add.at(actual, mine.column("bin").to_numpy(), mine.column("count").to_numpy())
            np.add.at(expected, base.column("bin").to_numpy(), base.column("count").to_numpy())
            row["params"]["bins"] = str(nb)
            new = []
        else:
            bvals = base.column("value").to_pylist()
            mvals = mine.column("value").to_pylist()
            cats = sorted(set(bvals) | set(mvals), key=lambda b: (b is None, b or b""))
            at = {c: i for i, c in enumerate(cats)}
            actual = np.zeros(len(cats))
            expected = np.zeros(len(cats))
            np.add.at(actual, [at[v] for v in mvals], mine.column("count").to_numpy())
            np.add.at(expected, [at[v] for v in bvals], base.column("count").to_numpy())
            known = set(bvals)
            new = sorted(((c, v) for v, c in zip(mvals, mine.column("count").to_pylist(),
                                                 strict=True) if v not in known),
                         key=lambda cv: (-cv[0], cv[1]))
            row["params"]["categories"] = str(len(cats))
        observed = psi(actual, expected)
        row["new_values"] = [_text(v) for _, v in new[:MAX_NEW_VALUES]]
        if new:
            row["params"]["new_categories"] = str(len(new))
    failed = high is not None and observed > high and not math.isnan(observed)
    row.update(status="fail" if failed else "pass", observed=observed, windows=1,
               failing_windows=int(failed))
    if failed:
        row["failing"] = [{"group": None, "start": extent.first or 0,
                           "end": (extent.last + 1) if extent.last is not None else 0,
                           "records": row["records"], "observed": observed}]
    return row
