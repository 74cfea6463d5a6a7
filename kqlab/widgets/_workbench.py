"""``Workbench``: the quickstart UI — a replay panel, the policy editor and the rejection
explorer, plus the figures and the sample checks of the current verdicts, all views of one
:class:`~kqlab.authoring.AuthoringSession`.

The session is the single source of truth: *Replay* replays its policy as edited, an edit
re-judges its sample, and every view redraws from its current verdicts when it says they
changed — the panel's status line, the editor's counts, the explorer and the figures cannot
disagree.  The explorer and the figures take the verdicts of any engine (a
:class:`~kqlab.validate.view.VerdictsView`); a Spark replay is browsed through Spark (record
details need the local sample), and the next edit re-judges the local sample when it is the
same source.

The Checks tab (:class:`~kqlab.widgets._checks.ChecksPanel`) edits thresholds through the
session, and a failing window's drill-down filters the Rejections tab to its partition and
``[start, end)`` and shows it.

The Rejections, Figures and Checks tabs are drawn when they are shown: an edit made in the Policy
tab redraws only what that tab shows (the rule counts, the outcomes, the impact figure), and
the other tabs follow the current verdicts when they are selected, or when
:attr:`Workbench.explorer` or :attr:`Workbench.figures` is read from Python.  Three figures
and a table page built and drawn per edit for hidden tabs cost more than the edit's
re-judging on a million records (``benchmarks/browser_edit.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from kqlab.authoring import AuthoringSession
from kqlab.widgets._checks import ChecksPanel, Drill
from kqlab.widgets._common import FigureView, build_figures, css
from kqlab.widgets._editor import PolicyEditor
from kqlab.widgets._explorer import RejectionExplorer
from kqlab.widgets._replay import ReplayPanel

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.authoring import SessionChange
    from kqlab.policy.model import Policy
    from kqlab.validate.view import VerdictsView


class Workbench:
    """Replay panel + policy editor + rejection explorer + figures, for one session.

    Parameters
    ----------
    source
        What to replay first (segment path, log directory, snapshot folder, records table);
        more can be offered through ``sources`` and chosen in the panel.
    policy
        The policy to start from (or pass ``session=``).
    now
        The replay clock (epoch ms; default: the sample's own).
    figures
        The figures refreshed after every replay and edit (kept in :attr:`figures`).
    session
        An :class:`~kqlab.authoring.AuthoringSession` to show (its policy is used).
    spark, remote, ship_env, spark_out
        Where the panel's ``spark`` engine runs (default: a ``local[2]`` session): your
        SparkSession (a cluster's or a Spark Connect one), or a Spark Connect server
        ``remote="sc://host:port"`` with a packed kqlab environment ``ship_env`` for its
        executors; on a cluster ``spark_out`` is a folder the driver and every executor
        reach, for the verdict files (see docs/spark-cluster.md).

    Python twins: :meth:`replay` (the panel's *Replay*), ``workbench.session.<edit>()`` or
    ``workbench.editor.<edit>()``, ``workbench.explorer.set_filter()`` / ``show_record()``,
    :meth:`report`.
    """

    def __init__(self, source: Any, policy: Policy | None = None, *, now: int | None = None,
                 sources: Mapping[str, Any] | None = None,
                 figures: tuple[str, ...] = ("reasons", "offsets", "timeline"),
                 session: AuthoringSession | None = None, spark: Any = None,
                 remote: str | None = None, ship_env: str | None = None,
                 spark_out: str | None = None):
        if session is None:
            if policy is None:
                raise TypeError("Workbench needs a policy (or session=)")
            session = AuthoringSession(policy, now=now)
        self.session = session
        self.figure_names = tuple(figures)
        self._figures: dict[str, Any] = {}
        self._figures_for: object = None  # the verdicts self._figures were built from
        named = {"sample": source, **(sources or {})}
        self.panel = ReplayPanel(session, named, spark=spark, remote=remote,
                                 ship_env=ship_env, spark_out=spark_out)
        self.editor = PolicyEditor(session, figures=("impact",))
        self._explorer = RejectionExplorer()
        self._explorer_for: object = None  # the verdicts the explorer browses
        self.figures_out = css(w.Output(), "figures")
        self._figure_view = FigureView(self.figures_out)
        self._checks = ChecksPanel(session, live=False)
        self._checks.on_drill.append(self._on_drill)
        tabs = w.Tab(children=[self.editor.widget, self._explorer.widget, self.figures_out,
                               self._checks.widget])
        for i, title in enumerate(("Policy", "Rejections", "Figures", "Checks")):
            tabs.set_title(i, title)
        self.tabs = tabs
        tabs.observe(self._on_tab, names="selected_index")
        self.widget = css(w.VBox([self.panel.widget, tabs]), "workbench")
        session.observe(self._on_change)
        self.panel.run()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def policy(self) -> Policy:
        """The current policy (the session's)."""
        return self.session.policy

    @property
    def explorer(self) -> RejectionExplorer:
        """The rejection explorer, browsing the current verdicts (brought up to date now if
        the Rejections tab has not shown them yet)."""
        self._refresh_explorer()
        return self._explorer

    @property
    def figures(self) -> dict[str, Any]:
        """The figures of the current verdicts (name -> ``go.Figure``), built now if the
        Figures tab has not shown them yet."""
        self._refresh_figures()
        return self._figures

    @property
    def checks(self) -> ChecksPanel:
        """The sample checks panel, showing the current verdicts (brought up to date now if
        the Checks tab has not shown them yet)."""
        self._checks.refresh()
        return self._checks

    @property
    def verdicts(self) -> VerdictsView | None:
        """The current verdicts (the session's: after the last replay or edit)."""
        return self.session.verdicts

    def replay(self, source: Any = None, *, engine: str | None = None) -> VerdictsView:
        """Replay ``source`` (default: the panel's choice) with the current policy (the
        panel's *Replay*)."""
        return self.panel.run(source, engine=engine)

    def report(self, path: str | Path, **options: Any) -> Path:
        """A static HTML report of the current verdicts (:func:`kqlab.report`)."""
        from kqlab.reporting import report

        if self.verdicts is None:
            raise ValueError("nothing to report yet: replay a sample first")
        out = report(self.verdicts, self.policy, sample=self.session.view_sample, path=path,
                     **options)
        return Path(out)

    def rollout(self, **options: Any) -> Any:
        """The what-if per enforcement point and the staged rollout plan of the policy as
        edited, on the session's local sample (a :class:`~kqlab.widgets.RolloutView`;
        ``options`` go to it, e.g. ``block_at``)."""
        from kqlab.widgets._rollout import RolloutView

        return RolloutView(session=self.session, **options)

    def _on_change(self, change: SessionChange) -> None:
        """New verdicts: the explorer browses them and the figures draw them — now if their
        tab is shown, else when it is (a Spark replay through its own aggregations, never
        collected)."""
        s = change.session
        if "verdicts" not in change or s.verdicts is None:
            return
        if self.tabs.selected_index == _EXPLORER_TAB:
            self._refresh_explorer()
        elif self.tabs.selected_index == _FIGURES_TAB:
            self._refresh_figures()
        elif self.tabs.selected_index == _CHECKS_TAB:
            self._checks.refresh()

    def _on_drill(self, drill: Drill) -> None:
        """A failing window's drill-down: the explorer lists the refused records of the
        same partition (when the check groups by partition; other groups it cannot filter
        by: the time range only) and ``[start, end)``.  A partition without refused records
        is not in the explorer at all: it stays as it was (the panel lists the window's
        records)."""
        explorer = self.explorer
        partition = drill.group if drill.by == "partition" else None
        if partition is not None and partition not in explorer.partition.options:
            return
        end = None if drill.end is None else drill.end - 1  # the explorer's are inclusive
        explorer.set_filter(partition=partition, time=(drill.start, end))
        self.tabs.selected_index = _EXPLORER_TAB

    def _on_tab(self, change: dict[str, Any]) -> None:
        if change["new"] == _EXPLORER_TAB:
            self._refresh_explorer()
        elif change["new"] == _FIGURES_TAB:
            self._refresh_figures()
        elif change["new"] == _CHECKS_TAB:
            self._checks.refresh()

    def _refresh_explorer(self) -> None:
        """Browse the current verdicts, unless the explorer already does."""
        s = self.session
        if s.verdicts is None or self._explorer_for is s.verdicts:
            return
        self._explorer.set_verdicts(s.verdicts, s.view_sample, s.policy)
        self._explorer_for = s.verdicts

    def _refresh_figures(self) -> None:
        """Build and show the figures, unless they are those of the current verdicts."""
        s = self.session
        if s.verdicts is None or self._figures_for is s.verdicts:
            return
        self._figures = build_figures(self.figure_names, s.verdicts, s.figure_context())
        self._figures_for = s.verdicts
        self._figure_view.show(self._figures)


#: the Rejections, Figures and Checks tabs' indexes in :attr:`Workbench.tabs`
_EXPLORER_TAB, _FIGURES_TAB, _CHECKS_TAB = 1, 2, 3
