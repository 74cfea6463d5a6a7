"""HTML pieces of the what-if and the rollout plan (escaping, cells, tables, a figure): each
object renders itself with them (:meth:`WhatIf.html <kqlab.rollout.whatif.WhatIf>`,
:meth:`RolloutPlan.html <kqlab.rollout.plan.RolloutPlan>`), and
:mod:`kqlab.rollout.section` puts them in the report.  Tables use the report's classes
(``table.t``, ``td.n``, ``.sub``, ``.note``).
"""

from __future__ import annotations

import html
from typing import Any

__all__ = ["cell", "esc", "figure_block", "table"]


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def cell(value: Any) -> str:
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, int):
        return f"<td class='n'>{value:,}</td>"
    if isinstance(value, float):
        return f"<td class='n'>{100 * value:.2f} %</td>"
    if value is None:
        return "<td>–</td>"
    return f"<td>{esc(value)}</td>"


def table(columns: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return "<p class='sub'>none</p>"
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table class='t'><tr>{head}</tr>{body}</table>"


def figure_block(fig: Any, div_id: str) -> str:
    from kqlab.rollout.figures import figure_html

    return f"<div class='fig'>{figure_html(fig, div_id)}</div>"


