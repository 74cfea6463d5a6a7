"""What a policy change does to a sample: records newly rejected and newly accepted, per rule.

Both replays must cover the same records (the same sample under two policy versions, e.g. two
``Replayer.run`` calls).  A newly rejected record is charged to the reason that rejects it
under the new policy; a newly accepted one to the reason that rejected it under the old.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.view import RecordReasons, ViewError
from kqlab.viz._figures import _STYLE, _color, _title
from kqlab.viz._style import RuleColors, rule_colors

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.policy.model import Policy
    from kqlab.validate.view import VerdictsView

__all__ = ["impact_spec", "impact_table", "policy_impact"]


def _same_memory(a: pa.Table, b: pa.Table) -> bool:
    """Whether two tables hold their columns in the very same buffers (two edits' views of
    one sample's coordinates): then they are row for row the same, without comparing."""
    if a.num_rows != b.num_rows or a.column_names != b.column_names:
        return False
    for x, y in zip(a.columns, b.columns, strict=True):
        if x.num_chunks != y.num_chunks:
            return False
        for cx, cy in zip(x.chunks, y.chunks, strict=True):
            if cx.offset != cy.offset or len(cx) != len(cy) or cx.type != cy.type:
                return False
            bx, by = cx.buffers(), cy.buffers()
            if len(bx) != len(by) or any(
                    (p is None) != (q is None) or (p is not None and q is not None and (
                        p.address != q.address or p.size != q.size))
                    for p, q in zip(bx, by, strict=True)):
                return False
    return True


def _row_map(before: pa.Table, after: pa.Table) -> np.ndarray | None:
    """For every row of ``after``, the row of the same record in ``before`` (None: the same
    row)."""
    if _same_memory(before, after):
        return None
    if before.num_rows == after.num_rows and pc.all(pc.and_(
            pc.equal(before.column("offset"), after.column("offset")),
            pc.equal(before.column("partition"), after.column("partition")))).as_py() in (
            True, None):
        return np.arange(after.num_rows)
    keys = ["topic", "partition", "offset"]
    a = after.select(keys).append_column("_a", pa.array(np.arange(after.num_rows)))
    b = before.select(keys).append_column("_b", pa.array(np.arange(before.num_rows)))
    joined = a.join(b, keys, join_type="inner").sort_by("_a")
    if joined.num_rows != after.num_rows or before.num_rows != after.num_rows:
        raise ViewError("the two replays cover different records: replay the same sample "
                        "under both policies (e.g. Replayer(sample).run(old), .run(new))")
    return joined.column("_b").to_numpy()


def impact_table(before: VerdictsView, after: VerdictsView) -> pa.Table:
    """Per reason: ``newly_rejected`` and ``newly_accepted`` records, and how many records the
    rule failed before and after (observe rules included), largest change first.

    Reads both replays' per-record reasons (:meth:`VerdictsView.record_reasons`): an impact
    compares records one by one."""
    a, b = before.record_reasons(), after.record_reasons()
    rows = _row_map(a.keys, b.keys)
    a_outcome = a.outcome if rows is None else a.outcome[rows]
    a_reason = a.reason if rows is None else a.reason[rows]
    ok_before = a_outcome == 0
    ok_after = b.outcome == 0
    labels = sorted(set(a.labels) | set(b.labels) |
                    set(before.rules.column("rule").to_pylist()) |
                    set(after.rules.column("rule").to_pylist()))
    at = {name: i for i, name in enumerate(labels)}
    k = len(labels) + 1  # the last slot: no known reason

    def remap(rr: RecordReasons, reasons: np.ndarray) -> np.ndarray:
        lut = np.array([at[x] for x in rr.labels] + [k - 1], dtype=np.int64)
        return lut[np.where(reasons >= 0, reasons, len(rr.labels))]

    new_rej = ok_before & ~ok_after
    new_acc = ~ok_before & ok_after
    rejected = np.bincount(remap(b, b.reason[new_rej]), minlength=k)
    accepted = np.bincount(remap(a, a_reason[new_acc]), minlength=k)
    failed = {}
    for name, v in (("before", before), ("after", after)):
        t = v.rules.to_pydict()
        failed[name] = dict(zip(t["rule"], t["failed_records"], strict=True))
    names = [*labels, "(no reason recorded)"]
    out = pa.table({
        "reason": pa.array(names, pa.string()),
        "newly_rejected": pa.array(rejected, pa.int64()),
        "newly_accepted": pa.array(accepted, pa.int64()),
        "failed_before": pa.array([failed["before"].get(n) for n in names], pa.int64()),
        "failed_after": pa.array([failed["after"].get(n) for n in names], pa.int64()),
    })
    changed = pc.or_(pc.or_(pc.greater(out.column("newly_rejected"), 0),
                            pc.greater(out.column("newly_accepted"), 0)),
                     pc.not_equal(pc.fill_null(out.column("failed_before"), -1),
                                  pc.fill_null(out.column("failed_after"), -1)))
    out = out.filter(changed)
    size = pc.add(out.column("newly_rejected"), out.column("newly_accepted"))
    return out.append_column("_n", size).sort_by([("_n", "descending"),
                                                  ("reason", "ascending")]).drop_columns("_n")


def policy_impact(before: VerdictsView, after: VerdictsView, *,
                  policies: tuple[Policy, Policy] | None = None,
                  colors: RuleColors | None = None) -> go.Figure:
    """Diverging bars per rule: records the new policy rejects that the old accepted (right)
    and records it accepts that the old rejected (left, hatched), each in its rule's colour
    (the same as in every other figure).  With ``policies=(old, new)`` the subtitle
    summarises the rule changes (:func:`kqlab.policy.diff`).

    The figure is :func:`impact_spec` wrapped without plotly validating it again (the spec
    is what validation gives, a test checks): the editor draws it after every edit, and
    validating a few bars and their layout cost as much as computing the impact.
    Validation is on for whatever is set on the figure afterwards."""
    spec = impact_spec(before, after, policies=policies, colors=colors)
    try:
        fig = go.Figure(spec, _validate=False)
    except TypeError:  # a plotly without the flag: the validated way
        return go.Figure(spec)
    fig._validate = True
    fig.layout._validate = True
    return fig


def impact_spec(before: VerdictsView, after: VerdictsView, *,
                policies: tuple[Policy, Policy] | None = None,
                colors: RuleColors | None = None) -> dict[str, Any]:
    """:func:`policy_impact` as the plotly JSON dict (``data``, ``layout``), built without
    plotly's object tree and written as plotly's validation writes it (titles as
    ``{"text": ...}``, the template as its JSON), so wrapping it unvalidated gives the same
    figure."""
    from kqlab.viz._checks import _template

    colors = rule_colors(after, rule_colors(before, colors))
    table = impact_table(before, after).to_pydict()
    n_rej, n_acc = sum(table["newly_rejected"]), sum(table["newly_accepted"])
    note = f"{n_rej:,} records newly rejected, {n_acc:,} newly accepted"
    if policies is not None:
        from kqlab.policy.changes import diff

        change = diff(*policies).summary().replace("\n", "; ")
        note += f" — {change[:200]}"
    reasons = table["reason"]
    shades = [_color(colors, r) for r in reasons]
    data = [
        {"type": "bar", "y": reasons, "x": table["newly_rejected"], "orientation": "h",
         "name": "newly rejected", "marker": {"color": shades},
         "hovertemplate": "%{y}: %{x:,} records newly rejected<extra></extra>"},
        {"type": "bar", "y": list(reasons), "x": [-x for x in table["newly_accepted"]],
         "orientation": "h", "name": "newly accepted",
         "marker": {"color": list(shades), "opacity": 0.7,
                    "pattern": {"shape": "/", "fillmode": "overlay",
                                "fgcolor": "rgba(255,255,255,0.75)"}},
         "customdata": table["newly_accepted"],
         "hovertemplate": "%{y}: %{customdata:,} records newly accepted<extra></extra>"},
    ]
    layout: dict[str, Any] = {
        "template": _template(), **copy.deepcopy(_STYLE), "barmode": "relative",
        "title": _title("Policy impact", note),
        "height": max(240, 100 + 28 * len(reasons)),
        "yaxis": {"autorange": "reversed", "automargin": True},
        "xaxis": {"title": {"text": "← newly accepted · records · newly rejected →"},
                  "zeroline": True}}
    return {"data": data, "layout": layout}
