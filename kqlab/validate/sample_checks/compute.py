"""One chunk's partial aggregate of each check (the local engine: Arrow group-bys and numpy
over whole columns, no per-record Python).

:class:`Chunk` is what the replay hands over for one sample or chunk — its evaluation
context (decoded columns, cached), which records are transaction markers, the rule results
and the records' outcomes — and :func:`partial_of` turns it into the check's
:class:`~kqlab.validate.sample_checks.partials.Partial`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from kqlab.policy.model import Check
from kqlab.validate.context import EvalContext
from kqlab.validate.sample_checks.columns import (
    field_values,
    group_labels,
    key_values,
    numeric_values,
    reads,
    to_text,
)
from kqlab.validate.sample_checks.partials import (
    PARTIAL_SCHEMAS,
    Extent,
    Partial,
    group_aggregate,
)

if TYPE_CHECKING:
    from kqlab.validate.rules import RuleResult

__all__ = ["BaselinePlan", "Chunk", "extent_of", "partial_of"]


@dataclass(frozen=True)
class BaselinePlan:
    """What a check takes from its baseline (read by
    :func:`~kqlab.validate.sample_checks.baseline.baseline_plan`): ``edges`` (inner bin edges
    of a numeric field; None: categories), the baseline's partial, its records, and
    ``reason`` (a not-evaluable code) when it could not be read."""

    path: str
    edges: np.ndarray | None = None
    partial: Partial | None = None
    records: int = 0
    reason: str | None = None
    detail: str | None = None


@dataclass
class Chunk:
    """One sample (or chunk of a streamed replay) as the checks read it.

    ``outcome``: per record the outcome code (0 accepted, 1 rejected, 2 collateral,
    3 undetermined), for ``reject_rate`` without a rule; ``results``: the rules' results by
    rule id, for ``reject_rate`` with one.
    """

    ctx: EvalContext
    control: np.ndarray
    results: dict[str, RuleResult] = field(default_factory=dict)
    outcome: np.ndarray | None = None

    @property
    def n(self) -> int:
        """Records in the chunk."""
        return self.ctx.n


def extent_of(chunk: Chunk) -> Extent:
    """The chunk's time extent (transaction markers and records without timestamp out)."""
    ts = chunk.ctx.timestamps
    keep = ~chunk.control if len(chunk.control) == len(ts) else np.ones(len(ts), bool)
    timed = ts[keep & (ts >= 0)]
    return Extent(int(timed.min()) if len(timed) else None,
                  int(timed.max()) if len(timed) else None, int(keep.sum()))


def _windows(check: Check, ts: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each record's window index (``ts // window``; 0 without ``window``: its start is
    ``index * window``), and ``keep`` narrowed to records a windowed check can place (a
    timestamp)."""
    w = check.window_ms
    if w is None:
        return np.zeros(len(ts), dtype=np.int64), keep
    return ts // w, keep & (ts >= 0)


def _rows(keep: np.ndarray) -> pa.Array | None:
    """The kept rows as Arrow indices, or None when every row is kept (nothing to take)."""
    return None if keep.all() else pa.array(np.flatnonzero(keep))


def _at(column: pa.Array | np.ndarray, rows: pa.Array | None, keep: np.ndarray
        ) -> pa.Array | np.ndarray:
    """``column`` at the kept rows (itself when all are kept)."""
    if rows is None:
        return column
    return column[keep] if isinstance(column, np.ndarray) else column.take(rows)


def partial_of(check: Check, chunk: Chunk, plan: BaselinePlan | None = None) -> Partial:
    """The check's partial aggregate over ``chunk`` (``plan``: what a drift check needs from
    its baseline — numeric bin edges or nothing)."""
    ctx = chunk.ctx
    kind = check.kind
    keep = reads(ctx, chunk.control, check.when)
    counts = {"records": int(keep.sum())}
    if not keep.any():
        return Partial(kind, PARTIAL_SCHEMAS[kind].empty_table(), counts)
    ts = ctx.timestamps
    if kind in ("drift", "schema_drift"):
        return Partial(kind, _shape_partial(check, chunk, keep, plan, counts), counts)
    window, timed = _windows(check, ts, keep)
    scales = {"window": check.window_ms or 1}
    counts["untimed"] = int((keep & ~timed).sum())
    groups = ctx.memo(f"check-by:{check.by}", lambda: group_labels(ctx, check.by))
    if kind == "freshness":
        timed = keep & (ts >= 0)
        rows = _rows(timed)
        table = group_aggregate({"group": _at(groups, rows, timed)},
                                {"newest": ("max", _at(ts, rows, timed)),
                                 "records": ("count", None)},
                                int(timed.sum()), PARTIAL_SCHEMAS[kind])
        return Partial(kind, table, counts)
    if kind == "volume":
        ones = np.ones(chunk.n, np.int64)
        return Partial(kind, _rate_table(kind, groups, window, ones, timed, None, scales),
                       counts)
    if kind == "null_rate":
        nulls = field_values(ctx, str(check.param("field"))).nulls.astype(np.int64)
        return Partial(kind, _rate_table(kind, groups, window, nulls, timed, "nulls", scales),
                       counts)
    if kind == "reject_rate":
        rule = check.param("rule")
        if rule is not None:
            result = chunk.results.get(str(rule))
            rejected = np.zeros(chunk.n, np.int64) if result is None else \
                result.failed.astype(np.int64)
        else:
            outcome = chunk.outcome if chunk.outcome is not None else \
                np.zeros(chunk.n, np.int8)
            rejected = ((outcome == 1) | (outcome == 2)).astype(np.int64)
        return Partial(kind, _rate_table(kind, groups, window, rejected, timed, "rejected",
                                         scales), counts)
    if kind in ("duplicate_rate", "distinct"):
        of = check.param("of") if kind == "duplicate_rate" else check.param("field")
        if of == "key" and kind == "duplicate_rate":
            values = key_values(ctx)
        else:
            fv = field_values(ctx, str(of))
            if fv.values is None:
                counts["not_scalar"] = 1
                return Partial(kind, PARTIAL_SCHEMAS[kind].empty_table(), counts)
            values = to_text(fv.values)
        present = timed & ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
        if not present.any():
            return Partial(kind, PARTIAL_SCHEMAS[kind].empty_table(), counts)
        rows = _rows(present)
        table = group_aggregate({"group": _at(groups, rows, present),
                                 "window": _at(window, rows, present),
                                 "value": _at(values, rows, present)},
                                {"count": ("count", None)}, int(present.sum()),
                                PARTIAL_SCHEMAS[kind], scales)
        return Partial(kind, table, counts)
    if kind == "stat":
        fv = field_values(ctx, str(check.param("field")))
        if fv.values is None:
            counts["not_scalar"] = 1
            return Partial(kind, PARTIAL_SCHEMAS[kind].empty_table(), counts)
        valid, numbers, non_numeric = numeric_values(fv)
        counts["non_numeric"] = int(non_numeric if keep.all() else
                                    (timed & ~fv.nulls & ~valid).sum())
        use = timed & valid
        rows = _rows(use)
        group = _at(groups, rows, use)
        if isinstance(group, pa.DictionaryArray):
            group = group.dictionary_decode()
        table = pa.table({"group": group,
                          "window": pa.array(_at(window, rows, use) * scales["window"]),
                          "value": pa.array(_at(numbers, rows, use))},
                         schema=PARTIAL_SCHEMAS[kind])
        return Partial(kind, table, counts)
    raise KeyError(f"no local implementation of check kind {kind!r}")


def _rate_table(kind: str, groups: pa.Array, window: np.ndarray, hits: np.ndarray,
                keep: np.ndarray, name: str | None, scales: dict[str, int]) -> pa.Table:
    """``records`` and ``name`` (the hits; None: records only) per group and window."""
    rows = _rows(keep)
    values: dict[str, tuple[str, np.ndarray | None]] = {"records": ("count", None)}
    if name is not None:
        values[name] = ("sum", _at(hits, rows, keep))
    return group_aggregate({"group": _at(groups, rows, keep),
                            "window": _at(window, rows, keep)}, values,
                           int(keep.sum()), PARTIAL_SCHEMAS[kind], scales)


def _shape_partial(check: Check, chunk: Chunk, keep: np.ndarray, plan: BaselinePlan | None,
                   counts: dict[str, int]) -> pa.Table:
    """drift: counts per numeric bin or per category; schema_drift: counts per shape."""
    ctx = chunk.ctx
    kind = check.kind
    schema = PARTIAL_SCHEMAS[kind]
    if kind == "schema_drift":
        from kqlab.validate.sample_checks.shapes import record_shapes

        shapes = record_shapes(ctx)
        present = keep & ~np.asarray(shapes.is_null().to_numpy(zero_copy_only=False), bool)
        if not present.any():
            return schema.empty_table()
        rows = _rows(present)
        return group_aggregate({"value": _at(shapes, rows, present)},
                               {"count": ("count", None)}, int(present.sum()), schema)
    fv = field_values(ctx, str(check.param("field")))
    if fv.values is None:
        counts["not_scalar"] = 1
        return schema.empty_table()
    if plan is not None and plan.edges is not None:
        valid, numbers, _ = numeric_values(fv)
        use = keep & valid
        counts["non_numeric"] = int((keep & ~fv.nulls & ~valid).sum())
        bins = np.searchsorted(plan.edges, numbers[use], side="right").astype(np.int64)
        per = np.bincount(bins, minlength=len(plan.edges) + 1)
        at = np.flatnonzero(per)
        return pa.table({"bin": pa.array(at.astype(np.int64)),
                         "value": pa.nulls(len(at), pa.large_binary()),
                         "count": pa.array(per[at].astype(np.int64))}, schema=schema)
    values = to_text(fv.values)
    present = keep & ~fv.nulls
    if not present.any():
        return schema.empty_table()
    idx = pa.array(np.flatnonzero(present))
    bins = np.full(len(idx), -1, np.int64)
    return group_aggregate({"bin": bins, "value": values.take(idx)},
                           {"count": ("count", None)}, len(idx), schema)

