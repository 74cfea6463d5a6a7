"""``RolloutView``: the what-if per enforcement point and the staged rollout plan in the
workbench — a thin view over :func:`kqlab.rollout.what_if` and
:func:`kqlab.rollout.rollout_plan`.

One control row (where rules are finally blocked, *What if*), then two tabs: the enforcement
points side by side (table and grouped bars) and the plan's stages (table and bars per stage).
Every number is the replays' (the view only draws the objects those functions return); the
button calls :meth:`RolloutView.run`, which notebooks and tests call directly.  Given an
:class:`~kqlab.authoring.AuthoringSession`, the view replays the session's policy *as edited*
on the session's sample, at the session's clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ipywidgets as w

from kqlab.rollout.points import BLOCK_POINTS
from kqlab.rollout.replays import AUTO
from kqlab.widgets._plot import PlotlyFigure

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.authoring import AuthoringSession
    from kqlab.policy.model import Policy
    from kqlab.rollout.plan import RolloutPlan
    from kqlab.rollout.whatif import WhatIf

__all__ = ["ROLLOUT_CSS", "RolloutView"]

#: the documented CSS classes of the view's key controls (browser tests find them)
ROLLOUT_CSS = {
    "view": "kqlab-rollout",
    "block_at": "kqlab-rollout-block-at",
    "run": "kqlab-rollout-run",
    "status": "kqlab-rollout-status",
    "whatif": "kqlab-rollout-whatif",
    "plan": "kqlab-rollout-plan",
}

_STYLE = ("<style>.kqlab-rollout table.t{border-collapse:collapse;font-size:.9em}"
          ".kqlab-rollout table.t th,.kqlab-rollout table.t td{padding:2px 8px;"
          "border-bottom:1px solid rgba(128,128,128,.25);text-align:left;vertical-align:top}"
          ".kqlab-rollout td.n{text-align:right;font-variant-numeric:tabular-nums}"
          ".kqlab-rollout .sub{opacity:.75}</style>")


def _with(widget: Any, key: str) -> Any:
    widget.add_class(ROLLOUT_CSS[key])
    return widget


class RolloutView:
    """What-if per enforcement point and rollout plan of a policy on a sample.

    Parameters
    ----------
    policy, sample
        The policy and what to replay (a path, a list of partition folders, a snapshot, a
        records table); or pass ``session=``.
    session
        An :class:`~kqlab.authoring.AuthoringSession`: its current policy and local sample.
    block_at
        Where the plan blocks rules (:data:`~kqlab.rollout.points.BLOCK_POINTS`; default: the
        policy's enforcement profile).
    run
        Compute at once (default); False waits for the button or :meth:`run`.

    Python twins: :meth:`run` (the button), :attr:`whatif` and :attr:`plan` (the results).
    """

    def __init__(self, policy: Policy | None = None, sample: Any = None, *,
                 session: AuthoringSession | None = None, now: int | None = None,
                 block_at: str | None = None, client_header: str | None = AUTO,
                 run: bool = True):
        if session is None and (policy is None or sample is None):
            raise TypeError("RolloutView needs a policy and a sample (or session=)")
        self.session = session
        self._policy, self._sample, self._now = policy, sample, now
        self.client_header = client_header
        self.whatif: WhatIf | None = None
        self.plan: RolloutPlan | None = None
        shown = session.policy if session is not None else policy
        assert shown is not None
        start = block_at or shown.enforcement
        self.block_at = _with(w.Dropdown(options=list(BLOCK_POINTS), value=start,
                                         description="block at"), "block_at")
        self.button = _with(w.Button(description="What if", icon="play",
                                     button_style="primary"), "run")
        self.button.on_click(lambda _: self.run())
        self.status = _with(w.HTML(""), "status")
        self.whatif_table = _with(w.HTML(""), "whatif")
        self.plan_table = _with(w.HTML(""), "plan")
        self.whatif_figure = PlotlyFigure()
        self.plan_figure = PlotlyFigure()
        tabs = w.Tab(children=[w.VBox([self.whatif_table, self.whatif_figure]),
                               w.VBox([self.plan_table, self.plan_figure])])
        tabs.set_title(0, "Per enforcement point")
        tabs.set_title(1, "Rollout plan")
        self.widget = _with(w.VBox([w.HTML(_STYLE), w.HBox([self.block_at, self.button]),
                                    self.status, tabs]), "view")
        if run:
            self.run()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def _inputs(self) -> tuple[Policy, Any, int | None]:
        if self.session is None:
            assert self._policy is not None
            return self._policy, self._sample, self._now
        replayer = self.session.replayer
        if replayer is None:
            raise ValueError("the session has no local sample yet: replay one first")
        return self.session.policy, replayer.sample, replayer.now

    def run(self) -> tuple[WhatIf, RolloutPlan]:
        """Replay the policy at every enforcement point and plan its rollout (the button)."""
        from kqlab.rollout.plan import plan_html, rollout_plan
        from kqlab.rollout.replays import SampleReplays
        from kqlab.rollout.whatif import what_if, whatif_html

        policy, sample, now = self._inputs()
        self.status.value = "replaying…"
        replays = SampleReplays(sample, now=now, client_header=self.client_header)
        self.whatif = what_if(policy, replays)
        self.plan = rollout_plan(policy, replays, block_at=self.block_at.value,
                                 exports=False)
        self.whatif_table.value = whatif_html(self.whatif, figure=False)
        self.plan_table.value = plan_html(self.plan, figure=False)
        self.whatif_figure.update(self.whatif.figure())
        self.plan_figure.update(self.plan.figure())
        first = self.plan.breaks_first
        self.status.value = (
            f"{policy.name}: {self.whatif.records:,} records, {len(self.plan.stages)} stages; "
            + ("breaks first: " + ", ".join(p["producer"] for p in first) if first
               else "no producer breaks beyond the broker's own checks"))
        return self.whatif, self.plan
