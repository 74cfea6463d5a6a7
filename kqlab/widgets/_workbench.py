"""``Workbench``: the quickstart UI — a replay panel, the policy editor and the rejection
explorer wired together, plus the figures of the current replay.

The pieces stay independent (each usable alone); the workbench only forwards results: a run
of the panel loads its sample into the editor (one :class:`~kqlab.validate.Replayer`, so later
edits are incremental), and every accepted edit refreshes the explorer and the figures.  The
explorer and the figures take the verdicts of any engine (a
:class:`~kqlab.validate.view.VerdictsView`); a replay without a local sample to edit against
(the Spark engine's) is shown as it is until the next edit or local replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from kqlab.widgets._common import FigureView, build_figures, css
from kqlab.widgets._editor import PolicyEditor
from kqlab.widgets._explorer import RejectionExplorer
from kqlab.widgets._replay import ReplayPanel

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.policy.model import Policy
    from kqlab.validate.view import VerdictsView
    from kqlab.viz._groups import SampleLike


class Workbench:
    """Replay panel + policy editor + rejection explorer + figures, for one policy.

    Parameters
    ----------
    source
        What to replay first (segment path, log directory, snapshot folder, records table);
        more can be offered through ``sources`` and chosen in the panel.
    policy
        The policy to start from.
    now
        The replay clock (epoch ms; default: wall clock).
    figures
        The figures refreshed after every replay and edit (kept in :attr:`figures`).

    Python twins: :meth:`replay` (the panel's *Replay*), ``workbench.editor.<edit>()``,
    ``workbench.explorer.set_filter()`` / ``show_record()``, :meth:`report`.
    """

    def __init__(self, source: Any, policy: Policy, *, now: int | None = None,
                 sources: Mapping[str, Any] | None = None,
                 figures: tuple[str, ...] = ("reasons", "offsets", "timeline")):
        self.figure_names = tuple(figures)
        self.figures: dict[str, Any] = {}
        #: the verdicts of the last replay that left no sample to edit (None: the editor's)
        self._shown: VerdictsView | None = None
        named = {"sample": source, **(sources or {})}
        self.panel = ReplayPanel(policy, named, now=now)
        self.panel.on_result(self._on_replay)
        self.explorer = RejectionExplorer()
        self.figures_out = css(w.Output(), "figures")
        self._figure_view = FigureView(self.figures_out)
        self.editor: PolicyEditor | None = None
        self._editor_box = w.VBox()
        tabs = w.Tab(children=[self._editor_box, self.explorer.widget, self.figures_out])
        for i, title in enumerate(("Policy", "Rejections", "Figures")):
            tabs.set_title(i, title)
        self.widget = css(w.VBox([self.panel.widget, tabs]), "workbench")
        self.panel.run()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def policy(self) -> Policy:
        """The current policy (the editor's)."""
        return self.editor.policy if self.editor is not None else self.panel.policy

    @property
    def verdicts(self) -> VerdictsView:
        """The current verdicts (after the last replay or edit): a Spark replay's
        until the next edit or local replay."""
        if self._shown is not None:
            return self._shown
        return self.editor.verdicts if self.editor is not None else self.panel.verdicts

    def replay(self, source: Any = None, *, engine: str | None = None) -> VerdictsView:
        """Replay ``source`` (default: the panel's choice) with the current policy."""
        return self.panel.run(source, engine=engine, policy=self.policy)

    def report(self, path: str | Path, **options: Any) -> Path:
        """A static HTML report of the current replay (:func:`kqlab.report`)."""
        from kqlab.reporting import report

        sample = self.editor.replayer if self.editor is not None and self._shown is None \
            else None
        out = report(self.verdicts, self.policy, sample=sample, path=path, **options)
        return Path(out)

    # -- wiring ---------------------------------------------------------------------------------
    def _on_replay(self, panel: ReplayPanel) -> None:
        if panel.replayer is None:  # no local sample to edit against: show the result as is
            self._show_result(panel.verdicts)
            return
        self._shown = None
        if self.editor is None:
            self.editor = PolicyEditor(panel.replayer, panel.policy, figures=("impact",))
            self.editor.on_change(lambda ed: self._show(ed.verdicts, ed.replayer))
            self._editor_box.children = (self.editor.widget,)
        else:  # a new sample: the editor keeps the policy and re-evaluates on it
            self.editor.replayer = panel.replayer
            self.editor.previous = None
            self.editor._refresh()
        self._show(self.editor.verdicts, panel.replayer)

    def _show(self, verdicts: VerdictsView, sample: SampleLike | None) -> None:
        self._shown = None  # a local replay or an edit supersedes a result shown as is
        self.explorer.set_verdicts(verdicts, sample, self.policy)
        self.figures = build_figures(self.figure_names, verdicts, {"sample": sample})
        self._figure_view.show(self.figures)

    def _show_result(self, verdicts: VerdictsView) -> None:
        """Verdicts without a sample to edit against: the explorer browses them and the
        figures draw them through their own aggregations (a Spark replay is never collected);
        record details need the sample, which the explorer then says."""
        self.explorer.set_verdicts(verdicts, None, self.policy)
        self.figures = build_figures(self.figure_names, verdicts, {})
        self._figure_view.show(self.figures)
        self._shown = verdicts
