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
from typing import Any

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa

from kqlab.viz._style import COLORS, RULE_PALETTE

__all__ = ["check_sparklines", "worst_points"]

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
    red markers.  A check without windows shows one bar per group (or one value)."""
    from plotly.subplots import make_subplots

    rows = list(results)
    if not rows:
        fig = go.Figure()
        fig.update_layout(height=60, annotations=[{"text": "no sample checks", "showarrow": False,
                                                       "xref": "paper", "yref": "paper"}])
        return fig
    fig = make_subplots(rows=len(rows), cols=1, vertical_spacing=min(0.3 / len(rows), 0.08),
                        subplot_titles=[f"{r['check']} · {r['status']}" for r in rows])
    for i, row in enumerate(rows, start=1):
        table = windows.get(row["check"])
        _draw(fig, i, row, table if table is not None else pa.table({}), max_points)
    fig.update_layout(height=40 + ROW_HEIGHT * len(rows) + 30 * len(rows), showlegend=False,
                      margin={"l": 40, "r": 10, "t": 30, "b": 20})
    fig.update_annotations(font_size=11)
    # one line of tick labels (plotly's two-line dates run into the next check's title)
    fig.update_xaxes(tickformat="%m-%d %H:%M", nticks=8)
    return fig


def _draw(fig: go.Figure, i: int, row: Mapping[str, Any], table: pa.Table,
          max_points: int) -> None:
    lo, hi = row.get("min"), row.get("max")
    metric = row.get("metric") or ""
    if table.num_rows == 0:
        if row.get("observed") is not None:
            fig.add_trace(go.Bar(x=[row["check"]], y=[row["observed"]], marker_color=_status(
                row["status"]), hovertemplate=f"{metric}: %{{y}}<extra></extra>"), row=i, col=1)
        _bounds(fig, i, lo, hi)
        return
    d = table.select(["group", "start", "end", "observed", "status", "records"]).to_pydict()
    groups = np.array(["" if g is None else g for g in d["group"]], dtype=object)
    observed = np.array([np.nan if v is None else v for v in d["observed"]], float)
    status = np.array(d["status"], dtype=object)
    if row.get("window_ms") is None:  # groups only: one bar per group
        order = np.argsort(groups, kind="stable")
        fig.add_trace(go.Bar(x=groups[order].tolist(), y=observed[order].tolist(),
                             marker_color=[_status(s) for s in status[order]],
                             hovertemplate="%{x}: %{y}<extra></extra>"), row=i, col=1)
        _bounds(fig, i, lo, hi)
        return
    start = np.asarray(d["start"], np.int64)
    names, first = np.unique(groups, return_index=True)
    fails = {g: int(((groups == g) & (status == "fail")).sum()) for g in names}
    shown = sorted(names, key=lambda g: (-fails[g], first[names.tolist().index(g)]))[:MAX_GROUPS]
    for k, g in enumerate(shown):
        at = np.flatnonzero(groups == g)
        at = at[np.argsort(start[at], kind="stable")]
        pick = at[worst_points(observed[at], lo, hi, max_points)]
        x = start[pick].astype("datetime64[ms]").astype(str).tolist()
        label = g or row["check"]
        fig.add_trace(go.Scatter(x=x, y=observed[pick].tolist(), mode="lines", name=label,
                                 line={"width": 1, "color": RULE_PALETTE[k % len(RULE_PALETTE)]},
                                 hovertemplate=f"{label} %{{x}}: %{{y}}<extra></extra>"),
                      row=i, col=1)
        bad = pick[status[pick] == "fail"]
        if len(bad):
            fig.add_trace(go.Scatter(
                x=start[bad].astype("datetime64[ms]").astype(str).tolist(),
                y=observed[bad].tolist(), mode="markers", name=f"{label} failing",
                marker={"size": 4, "color": COLORS["rejected"]},
                hovertemplate=f"{label} %{{x}}: %{{y}} (fails)<extra></extra>"), row=i, col=1)
    _bounds(fig, i, lo, hi)


def _bounds(fig: go.Figure, i: int, lo: float | None, hi: float | None) -> None:
    for bound in (lo, hi):
        if bound is not None:
            fig.add_hline(y=bound, line={"dash": "dash", "width": 1, "color": COLORS["rejected"]},
                          row=i, col=1)


def _status(status: str) -> str:
    return {"pass": COLORS["accepted"], "fail": COLORS["rejected"]}.get(
        status, COLORS["undetermined"])
