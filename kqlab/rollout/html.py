"""HTML of the what-if and the rollout plan: the report's rollout section, and the notebook
display of :class:`~kqlab.rollout.whatif.WhatIf` and :class:`~kqlab.rollout.plan.RolloutPlan`.

The section is built from those objects only (whose numbers are the replays'), never from a
:class:`~kqlab.validate.view.VerdictsView`, so :func:`kqlab.report` adds it only when asked
(``rollout=``): a report without it is unchanged, whichever engine replayed.  Tables use the
report's classes (``table.t``, ``td.n``, ``.sub``, ``.note``).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.rollout.plan import RolloutPlan
    from kqlab.rollout.whatif import WhatIf

__all__ = ["plan_html", "rollout_section", "whatif_html"]


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, int):
        return f"<td class='n'>{value:,}</td>"
    if isinstance(value, float):
        return f"<td class='n'>{100 * value:.2f} %</td>"
    if value is None:
        return "<td>–</td>"
    return f"<td>{_esc(value)}</td>"


def _table(columns: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return "<p class='sub'>none</p>"
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table class='t'><tr>{head}</tr>{body}</table>"


def _figure(fig: Any, div_id: str) -> str:
    from kqlab.rollout.figures import figure_html

    return f"<div class='fig'>{figure_html(fig, div_id)}</div>"


def whatif_html(whatif: WhatIf, *, figure: bool = True) -> str:
    """The what-if as HTML: the table per enforcement point, what producers are told, which
    rules a point cannot express, and (``figure``) the grouped bars."""
    rows = []
    for t in whatif.targets:
        c = t.counts
        rows.append([t.point.name, t.point.where, t.point.granularity,
                     c.get("accepted"), c.get("refused"), c.get("collateral"),
                     c.get("in_dlq"), t.reject_rate,
                     "; ".join(t.producer_sees()) or ("acknowledged" if t.available else
                                                      f"not available: {t.fidelity.note}"),
                     ", ".join(t.fidelity.not_enforced) or None,
                     ", ".join(t.fidelity.approximate) or None])
    parts = [f"<p class='sub'>policy {_esc(whatif.policy)} on {whatif.records:,} records in "
             f"{whatif.batches:,} batches (framing {_esc(whatif.framing)}, clock "
             f"{whatif.now}, {_esc(whatif.clock)}); every number is a replay of the sample"
             "</p>",
             _table(["point", "where", "per", "accepted", "refused", "collateral",
                     "dead-lettered", "refused + collateral", "producer sees",
                     "cannot express", "approximate"], rows)]
    notes = [f"{t.point.name}: {n}" for t in whatif.targets
             for n in (t.point.caveat, t.fidelity.note) if n]
    if notes:
        parts.append("<ul class='sub'>" + "".join(f"<li>{_esc(n)}</li>" for n in notes)
                     + "</ul>")
    if figure:
        parts.append(_figure(whatif.figure(), "kqlab-whatif"))
    return "\n".join(parts)


def plan_html(plan: RolloutPlan, *, figure: bool = True) -> str:
    """The rollout plan as HTML: the stages with their predicted numbers and the producers
    they break first, the rules' way through them, and (``figure``) the bars per stage."""
    stages = []
    for s in plan.stages:
        c = s.counts
        breaks = ", ".join(f"{b['producer']} (+{b['new_lost']:,})" for b in s.breaks)
        stages.append([s.number, s.title, c["accepted"], c["refused"], c["collateral"],
                       c["in_dlq"], s.reject_rate, breaks or None,
                       ", ".join(sorted(s.exports)) or None])
    rules = [[r.rule, r.kind, r.failed_records,
              ", ".join(f"{k} ({v:,})" for k, v in r.producers.items()) or None,
              r.solo_refused, r.solo_collateral, r.dead_letter_stage, r.block_stage, r.note]
             for r in plan.rules]
    parts = [f"<p class='sub'>policy {_esc(plan.policy)}, blocking at "
             f"{_esc(plan.block_at)}, on {plan.records:,} records"
             + (f"; clients named by header {_esc(plan.client_header)}"
                if plan.client_header else "") + "</p>",
             _table(["stage", "what", "accepted", "refused", "collateral", "dead-lettered",
                     "refused + collateral", "breaks first (records lost beyond the "
                     "previous stage)", "exports"], stages),
             _table(["rule", "kind", "fails on the sample", "producers", "blocked alone: "
                     "refused", "blocked alone: collateral", "dead-letter stage",
                     "block stage", "note"], rules)]
    if plan.notes:
        parts.append("<ul class='note'>" + "".join(f"<li>{_esc(n)}</li>" for n in plan.notes)
                     + "</ul>")
    if figure:
        parts.append(_figure(plan.figure(), "kqlab-rollout-plan"))
    return "\n".join(parts)


def rollout_section(rollout: WhatIf | RolloutPlan | tuple[Any, ...] | list[Any]) -> str:
    """The report's rollout section (``<h2>`` headings included) for a what-if, a plan, or
    both (a tuple or list of them)."""
    from kqlab.rollout.plan import RolloutPlan
    from kqlab.rollout.whatif import WhatIf

    items = list(rollout) if isinstance(rollout, tuple | list) else [rollout]
    parts = []
    for item in items:
        if isinstance(item, WhatIf):
            parts += ["<h2>What if: per enforcement point</h2>", whatif_html(item)]
        elif isinstance(item, RolloutPlan):
            parts += ["<h2>Staged rollout plan</h2>", plan_html(item)]
        else:
            raise TypeError(f"a rollout section shows a WhatIf or a RolloutPlan, not a "
                            f"{type(item).__name__}")
    return "\n".join(parts)
