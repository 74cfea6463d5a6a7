"""``Workbench``: the quickstart UI — a replay panel, the policy editor and the rejection
explorer wired together, plus the figures of the current replay.

The pieces stay independent (each usable alone); the workbench only forwards results: a run
of the panel loads its sample into the editor (one :class:`~kqlab.validate.Replayer`, so later
edits are incremental), and every accepted edit refreshes the explorer and the figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ipywidgets as w

from kqlab.widgets._common import build_figures, css, show
from kqlab.widgets._editor import PolicyEditor
from kqlab.widgets._explorer import RejectionExplorer
from kqlab.widgets._replay import ReplayPanel


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

    def __init__(self, source: Any, policy: Any, *, now: int | None = None,
                 sources: Mapping[str, Any] | None = None,
                 figures: tuple[str, ...] = ("reasons", "offsets", "timeline")):
        self.figure_names = tuple(figures)
        self.figures: dict[str, Any] = {}
        named = {"sample": source, **(sources or {})}
        self.panel = ReplayPanel(policy, named, now=now)
        self.panel.on_result(self._on_replay)
        self.explorer = RejectionExplorer()
        self.figures_out = css(w.Output(), "figures")
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
    def policy(self) -> Any:
        """The current policy (the editor's)."""
        return self.editor.policy if self.editor is not None else self.panel.policy

    @property
    def verdicts(self) -> Any:
        """The current verdicts (after the last replay or edit)."""
        return self.editor.verdicts if self.editor is not None else self.panel.verdicts

    def replay(self, source: Any = None, *, engine: str | None = None) -> Any:
        """Replay ``source`` (default: the panel's choice) with the current policy."""
        return self.panel.run(source, engine=engine, policy=self.policy)

    def report(self, path: str | Path, **options: Any) -> Path:
        """A static HTML report of the current replay (:func:`kqlab.report`)."""
        from kqlab.reporting import report

        sample = self.editor.replayer if self.editor is not None else None
        return report(self.verdicts, self.policy, sample=sample, path=path, **options)

    # -- wiring ---------------------------------------------------------------------------------
    def _on_replay(self, panel: ReplayPanel) -> None:
        if panel.replayer is None:  # Spark: no local sample to edit against; show the result
            self._show(panel.verdicts, None)
            return
        if self.editor is None:
            self.editor = PolicyEditor(panel.replayer, panel.policy, figures=("impact",))
            self.editor.on_change(lambda ed: self._show(ed.verdicts, ed.replayer))
            self._editor_box.children = (self.editor.widget,)
        else:  # a new sample: the editor keeps the policy and re-evaluates on it
            self.editor.replayer = panel.replayer
            self.editor.previous = None
            self.editor._refresh()
        self._show(self.editor.verdicts, panel.replayer)

    def _show(self, verdicts: Any, sample: Any) -> None:
        self.explorer.set_verdicts(verdicts, sample, self.policy)
        self.figures = build_figures(self.figure_names, verdicts, {"sample": sample})
        show(self.figures_out, *self.figures.values())
