"""The sample checks' result tables, and their text (rendered at the edge, from the data).

A replay reports every ``checks:`` entry of its policy as one row of
:data:`CHECK_RESULTS_SCHEMA` — identity as data, like a rule failure's (``check``, ``kind``,
``metric``, the thresholds, ``params``): views group and compare by the columns and never
parse :func:`describe_check`'s text — and every judged window (or group) of it as one row of
:data:`CHECK_WINDOWS_SCHEMA` (what a sparkline draws and a drill-down filters records by).
Both engines build these two tables with the same schemas.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kqlab.records import PARAMS_TYPE

__all__ = ["CHECK_RESULTS_SCHEMA", "CHECK_STATUSES", "CHECK_WINDOWS_SCHEMA", "FAILING_TYPE",
           "NOT_EVALUABLE_REASONS", "CheckResults", "describe_check", "empty_check_results",
           "group_text"]

#: a check's status: its threshold held everywhere, failed somewhere, or could not be judged
CHECK_STATUSES = ("pass", "fail", "not_evaluable")

#: why a check (or a window) could not be judged: a code, explained at the edge
NOT_EVALUABLE_REASONS = {
    "no_records": "no records (after when) in the sample",
    "no_values": "the field is null or missing in every record",
    "not_numeric": "the field holds no numbers",
    "not_scalar": "the field holds objects or lists, not single values",
    "too_few_values": "too few values for the statistic",
    "no_timestamps": "no record has a timestamp",
    "too_many_windows": "the sample spans more windows (x groups) than a volume check "
                        "judges — use a larger window (see params.windows)",
    "baseline_missing": "the baseline sample is not there",
    "baseline_unreadable": "the baseline sample cannot be read",
    "baseline_empty": "the baseline has no values to compare with",
    "no_shapes": "records carry neither schema ids nor decoded fields",
}

#: one failing window (or group): its group (null: no ``by``), [start, end) in epoch ms, the
#: records it held and its observed value
FAILING_TYPE = pa.list_(pa.struct([
    ("group", pa.string()), ("start", pa.int64()), ("end", pa.int64()),
    ("records", pa.int64()), ("observed", pa.float64())]))

CHECK_RESULTS_SCHEMA = pa.schema([
    ("check", pa.string()),          # the check's id
    ("kind", pa.string()),           # its kind (kqlab.policy.check_catalog)
    ("status", pa.string()),         # pass | fail | not_evaluable
    ("reason", pa.string()),         # not_evaluable: a NOT_EVALUABLE_REASONS code; else null
    ("metric", pa.string()),         # what observed measures: records, age_ms, null_rate ...
    ("observed", pa.float64()),      # the worst window's (group's) value; whole-sample value
    ("min", pa.float64()),           # the thresholds (null: that side is open); freshness:
    ("max", pa.float64()),           # max = max_age_ms, drift: max = max_psi
    ("window_ms", pa.int64()),       # null: judged over the whole sample
    ("by", pa.string()),             # null: no groups
    ("records", pa.int64()),         # records the check read (after when)
    ("windows", pa.int64()),         # windows x groups judged
    ("failing_windows", pa.int64()),
    ("failing", FAILING_TYPE),       # every failing window, in (start, group) order
    ("new_values", pa.list_(pa.string())),  # drift: new categories; schema_drift: new shapes
    ("params", PARAMS_TYPE),         # the check's other parameters, and what it measured
                                     # against (now, baseline_records), as text
])

CHECK_WINDOWS_SCHEMA = pa.schema([
    ("check", pa.string()),
    ("group", pa.string()),
    ("start", pa.int64()),
    ("end", pa.int64()),
    ("records", pa.int64()),
    ("observed", pa.float64()),      # null: not evaluable in this window (no values)
    ("status", pa.string()),
    ("partial", pa.bool_()),         # the sample covers only part of the window
])


@dataclass(frozen=True)
class CheckResults:
    """A replay's sample-check results: one row per check, one row per judged window."""

    results: pa.Table
    windows: pa.Table

    def failed(self) -> list[str]:
        """Ids of the failing checks, in policy order."""
        rows = self.results.select(["check", "status"]).to_pylist()
        return [r["check"] for r in rows if r["status"] == "fail"]

    def to_dicts(self) -> list[dict[str, Any]]:
        """The results as JSON-ready dicts (params as a mapping), with their text."""
        out = []
        for row in self.results.to_pylist():
            row["params"] = dict(row["params"] or [])
            row["text"] = describe_check(row)
            out.append(row)
        return out


def empty_check_results() -> CheckResults:
    """No checks (a policy without ``checks:``)."""
    return CheckResults(CHECK_RESULTS_SCHEMA.empty_table(), CHECK_WINDOWS_SCHEMA.empty_table())


def _number(metric: str, value: float | None) -> str:
    if value is None:
        return "—"
    if metric.endswith("_rate"):
        return f"{value:.2%}"
    if metric == "age_ms":
        return _duration(value)
    if metric == "psi":
        return f"{value:.4f}"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.4g}"


def _duration(ms: float) -> str:
    ms = float(ms)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if abs(ms) >= size:
            return f"{ms / size:.3g}{unit}"
    return f"{ms:.0f}ms"


def _when(ms: int | None) -> str:
    if ms is None:
        return "?"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def group_text(group: str | None, by: str | None) -> str:
    """A window's group as shown: no ``by`` is one group of every record; a ``by`` group
    without a label holds the records whose field or header is null or missing.

    >>> group_text("orders-1", "partition"), group_text(None, None), group_text(None, "x")
    ('orders-1', '(all)', '(no value)')
    """
    if group is not None:
        return group
    return "(all)" if by is None else "(no value)"


def describe_check(row: Mapping[str, Any]) -> str:
    """One line for a result row (a dict of :data:`CHECK_RESULTS_SCHEMA`): what was observed
    against which threshold, and where it failed — rendered from the columns.

    Examples
    --------
    >>> print(describe_check({
    ...     "check": "v", "kind": "volume", "status": "fail", "reason": None,
    ...     "metric": "records", "observed": 0.0, "min": 1.0, "max": None, "window_ms": 60000,
    ...     "by": "partition", "records": 500, "windows": 40, "failing_windows": 10,
    ...     "new_values": [], "params": {}, "failing": [{"group": "p-1", "start":
    ...     1763700000000, "end": 1763700060000, "records": 0, "observed": 0.0}]}))
    v (volume): fail — records 0, min 1 · 10 of 40 windows fail, first p-1 at 2025-11-21 04:40:00
    """
    metric = row.get("metric") or ""
    head = f"{row['check']} ({row['kind']}): {row['status']}"
    params = row.get("params") or {}
    if not isinstance(params, Mapping):
        params = dict(params)
    if row["status"] == "not_evaluable":
        reason = row.get("reason") or ""
        text = f"{head} — {NOT_EVALUABLE_REASONS.get(reason, reason)}"
        if params.get("baseline_path"):
            text += f": {params['baseline_path']}"
        if params.get("baseline_error"):
            text += f" ({params['baseline_error']})"
        return text
    shown = metric if metric != "stat" else str(params.get("stat", "stat"))
    bounds = []
    if row.get("min") is not None:
        bounds.append(f"min {_number(metric, row['min'])}")
    if row.get("max") is not None:
        bounds.append(f"max {_number(metric, row['max'])}")
    text = f"{head} — {shown} {_number(metric, row.get('observed'))}"
    if bounds:
        text += ", " + ", ".join(bounds)
    windows = row.get("windows") or 0
    failing = row.get("failing_windows") or 0
    if row.get("window_ms") is not None or row.get("by") is not None:
        unit = "windows" if row.get("window_ms") is not None else "groups"
        text += f" · {failing} of {windows} {unit} fail" if failing else \
            f" · {windows} {unit}"
        first = (row.get("failing") or [None])[0]
        if first:
            where = group_text(first["group"], row.get("by")) if row.get("by") else ""
            at = f"at {_when(first['start'])}" if row.get("window_ms") is not None else ""
            text += ", first " + " ".join(part for part in (where, at) if part)
    if params.get("ahead_ms") is not None:
        groups = int(params.get("ahead_groups") or 1)
        who = f"{params['ahead_group']}'s" if params.get("ahead_group") else "the"
        text += (f" · {who} newest record is {_duration(float(params['ahead_ms']))} ahead of "
                 "now" + (f" ({groups} groups ahead)" if groups > 1 else "")
                 + ": a clock runs ahead, its age is unknown")
    new = row.get("new_values") or []
    if new:
        shown_new = ", ".join(new[:5]) + (f", … ({len(new)})" if len(new) > 5 else "")
        text += f" · new: {shown_new}"
    return text
