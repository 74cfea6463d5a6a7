"""The figure kind of the what-if and the rollout plan: grouped bars of what happens to the
sample's records (accepted / refused / collateral / dead-lettered) per enforcement point or per
stage (:meth:`WhatIf.figure <kqlab.rollout.whatif.WhatIf.figure>`,
:meth:`RolloutPlan.figure <kqlab.rollout.plan.RolloutPlan.figure>` choose the groups).

Pure functions of counts (the replays' numbers), knowing neither object, drawn with bar traces
only (plotly.js's basic bundle, which the report embeds and the widgets load) in the shared
look of :mod:`kqlab.viz._style`.  The y axis is logarithmic: the accepted records outnumber
the refused ones by orders of magnitude on any healthy topic, and a linear axis would hide
exactly the bars a rollout is about.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from kqlab.viz._style import COLORS, TEMPLATE_NAME, register_template

__all__ = ["BARS", "bars_figure", "figure_html"]

#: the bars of every group: (count key, legend name, colour)
BARS: tuple[tuple[str, str, str], ...] = (
    ("accepted", "accepted (consumers read it)", COLORS["accepted"]),
    ("refused", "refused (the producer gets an error)", COLORS["rejected"]),
    ("collateral", "collateral (lost with a refused batch)", COLORS["collateral"]),
    ("in_dlq", "dead-lettered (the DLQ holds it)", "#5F7A99"),
)


def bars_figure(groups: Sequence[str], counts: Sequence[dict[str, int]], title: str,
          axis: str) -> go.Figure:
    register_template()
    fig = go.Figure()
    for key, name, color in BARS:
        values = [c.get(key, 0) for c in counts]
        totals = [max(c.get("records", 0), 1) for c in counts]
        fig.add_trace(go.Bar(
            x=list(groups), y=[v if v else None for v in values], name=name,
            marker_color=color, text=[f"{v:,}" if v else "" for v in values],
            textposition="outside", cliponaxis=False,
            customdata=[[v, 100 * v / t] for v, t in zip(values, totals, strict=True)],
            hovertemplate="%{x}: %{customdata[0]:,} records (%{customdata[1]:.2f} %)"
                          "<extra>" + key.replace("in_dlq", "dead-lettered") + "</extra>"))
    fig.update_layout(
        template=TEMPLATE_NAME, barmode="group", height=420,
        title={"text": title, "x": 0, "xanchor": "left"},
        margin={"l": 10, "r": 10, "t": 60, "b": 40},
        legend={"orientation": "h", "x": 0, "y": -0.18, "yanchor": "top"},
        xaxis={"title": axis, "type": "category"},
        yaxis={"title": "records (log scale)", "type": "log"})
    return fig


def figure_html(fig: Any, div_id: str) -> str:
    """``fig`` as an HTML fragment for a page that loads plotly.js itself (the report)."""
    import plotly.io as pio

    from kqlab.viz._style import CONFIG

    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config=dict(CONFIG))
