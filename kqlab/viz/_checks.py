"""Sample checks drawn small: one sparkline per check of its windows' observed values, with
its thresholds and its failing windows marked (the workbench's checks panel, notebooks).

Every number comes from the verdicts' check tables (:data:`~kqlab.validate.sample_checks
.CHECK_RESULTS_SCHEMA` rows, :data:`~kqlab.validate.sample_checks.CHECK_WINDOWS_SCHEMA`
windows).  A check judged over thousands of windows is drawn from at most ``max_points``
points per group: each bucket of consecutive windows shows its worst one (largest excess
over a threshold), so a failing window never disappears from the line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa

from kqlab.viz._style import COLORS, RULE_PALETTE, register_template

__all__ = ["check_sparklines", "sparkline_spec", "worst_points"]

#: groups drawn per check (the ones with most failing windows first)
MAX_GROUPS = 6
#: height of one check's sparkline, in pixels
ROW_HEIGHT = 70


def worst_points(observed: np.ndarray, lo: float | None, hi: float | None,
                 max_points: int) -> np.ndarray:
    """Indices of at most ``max_points`` of ``observed`` (in order): each bucket of
    consecutive values keeps the one furthest beyond ``lo``/``hi`` (inside both: the one
    nearest a bound); all when there are few enough.  NaN (not evaluable) counts as least."""
    n = len(observed)
    if n <= max_points:
        return np.arange(n)
    v = observed.astype(float)
    excess = np.full(n, -np.inf)
    if lo is not None:
        excess = np.maximum(excess, lo - v)
    if hi is not None:
        excess = np.maximum(excess, v - hi)
    if lo is None and hi is None:
        excess = np.abs(v - np.nanmean(v)) if np.isfinite(v).any() else np.zeros(n)
    excess = np.where(np.isnan(excess), -np.inf, excess)
    bucket = (np.arange(n) * max_points) // n  # consecutive buckets of near-equal size
    order = np.lexsort((-excess, bucket))  # per bucket, its worst first (ties: earliest)
    firsts = np.r_[True, bucket[order][1:] != bucket[order][:-1]]
    return np.sort(order[firsts])


def check_sparklines(results: Sequence[Mapping[str, Any]], windows: Mapping[str, pa.Table],
                     *, max_points: int = 240) -> go.Figure:
    """One small line per check (``results``: result rows as dicts, in policy order;
    ``windows``: each check's judged windows): observed value per window (per group: one
    line each, at most :data:`MAX_GROUPS`), dashed threshold lines, failing windows as
    red markers.  A check without windows shows one bar per group (or one value).  The
    figure of :func:`sparkline_spec` (what the checks panel sends as it is)."""
    return go.Figure(sparkline_spec(results, windows, max_points=max_points))


def sparkline_spec(results: Sequence[Mapping[str, Any]], windows: Mapping[str, pa.Table],
                   *, max_points: int = 240) -> dict[str, Any]:
    """:func:`check_sparklines` as the plotly JSON dict, built without plotly's object tree
    (which costs ~0.3 s for a few checks: a threshold edit redraws the panel at once)."""
    rows = list(results)
    layout: dict[str, Any] = {"template": _template(), "showlegend": False,
                              "margin": {"l": 40, "r": 10, "t": 30, "b": 20}}
    if not rows:
        layout.update(height=60, annotations=[{"text": "no sample checks", "showarrow": False,
                                               "xref": "paper", "yref": "paper"}])
        return {"data": [], "layout": layout}
    n = len(rows)
    gap = min(0.3 / n, 0.08)
    h = (1 - gap * (n - 1)) / n
    data: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    titles = []
    for i, row in enumerate(rows, start=1):
        top = 1 - (i - 1) * (h + gap)
        suffix = "" if i == 1 else str(i)
        layout[f"xaxis{suffix}"] = {"anchor": f"y{suffix}", "domain": [0, 1],
                                    "tickformat": "%m-%d %H:%M", "nticks": 8}
        layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}", "domain": [max(0, top - h), top]}
        titles.append({"text": f"{row['check']} · {row['status']}", "showarrow": False,
                       "xref": "paper", "yref": "paper", "x": 0.5, "y": top,
                       "xanchor": "center", "yanchor": "bottom", "font": {"size": 11}})
        table = windows.get(row["check"])
        traces = _traces(row, table if table is not None else pa.table({}), max_points)
        for t in traces:
            t.update(xaxis=f"x{suffix}", yaxis=f"y{suffix}")
        data.extend(traces)
        shapes.extend({"type": "line", "xref": f"x{suffix} domain", "x0": 0, "x1": 1,
                       "yref": f"y{suffix}", "y0": b, "y1": b,
                       "line": {"dash": "dash", "width": 1, "color": COLORS["rejected"]}}
                      for b in (row.get("min"), row.get("max")) if b is not None)
    layout.update(height=40 + (ROW_HEIGHT + 30) * n, annotations=titles, shapes=shapes)
    return {"data": data, "layout": layout}


def _traces(row: Mapping[str, Any], table: pa.Table, max_points: int) -> list[dict[str, Any]]:
    lo, hi = row.get("min"), row.get("max")
    metric = row.get("metric") or ""
    if table.num_rows == 0:
        if row.get("observed") is None:
            return []
        return [{"type": "bar", "x": [row["check"]], "y": [row["observed"]],
                 "marker": {"color": _status(row["status"])},
                 "hovertemplate": f"{metric}: %{{y}}<extra></extra>"}]
    d = table.select(["group", "start", "observed", "status"]).to_pydict()
    groups = np.array(["" if g is None else g for g in d["group"]], dtype=object)
    observed = np.array([np.nan if v is None else v for v in d["observed"]], float)
    status = np.array(d["status"], dtype=object)
    if row.get("window_ms") is None:  # groups only: one bar per group
        order = np.argsort(groups, kind="stable")
        return [{"type": "bar", "x": groups[order].tolist(), "y": _plain(observed[order]),
                 "marker": {"color": [_status(s) for s in status[order]]},
                 "hovertemplate": "%{x}: %{y}<extra></extra>"}]
    start = np.asarray(d["start"], np.int64)
    names, first = np.unique(groups, return_index=True)
    fails = {g: int(((groups == g) & (status == "fail")).sum()) for g in names}
    seen = {g: int(f) for g, f in zip(names.tolist(), first.tolist(), strict=True)}
    shown = sorted(seen, key=lambda g: (-fails[g], seen[g]))[:MAX_GROUPS]
    out: list[dict[str, Any]] = []
    for k, g in enumerate(shown):
        at = np.flatnonzero(groups == g)
        at = at[np.argsort(start[at], kind="stable")]
        pick = at[worst_points(observed[at], lo, hi, max_points)]
        label = g or row["check"]
        out.append({"type": "scatter", "mode": "lines", "name": label,
                    "x": _times(start[pick]), "y": _plain(observed[pick]),
                    "line": {"width": 1, "color": RULE_PALETTE[k % len(RULE_PALETTE)]},
                    "hovertemplate": f"{label} %{{x}}: %{{y}}<extra></extra>"})
        bad = pick[status[pick] == "fail"]
        if len(bad):
            out.append({"type": "scatter", "mode": "markers", "name": f"{label} failing",
                        "x": _times(start[bad]), "y": _plain(observed[bad]),
                        "marker": {"size": 4, "color": COLORS["rejected"]},
                        "hovertemplate": f"{label} %{{x}}: %{{y}} (fails)<extra></extra>"})
    return out


def _times(ms: np.ndarray) -> list[str]:
    return ms.astype("datetime64[ms]").astype(str).tolist()


def _plain(values: np.ndarray) -> list[float | None]:
    """Numbers for JSON (NaN: not evaluable, a gap in the line)."""
    return [None if np.isnan(v) else float(v) for v in values.tolist()]


@cache
def _template_json() -> str:
    import json

    import plotly.io as pio

    return json.dumps(pio.templates[register_template()].to_plotly_json())


def _template() -> dict[str, Any]:
    """The shared kqlab template as plain JSON (a fresh copy per figure)."""
    import json

    return json.loads(_template_json())


def _status(status: str) -> str:
    return {"pass": COLORS["accepted"], "fail": COLORS["rejected"]}.get(
        status, COLORS["undetermined"])
