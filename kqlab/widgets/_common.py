"""Helpers shared by the kqlab widgets: stable CSS classes, writing into ``Output`` without a
frontend, and the figure registry the editor and the workbench refresh after every edit.

The CSS classes are the contract with browser tests (issue 7, "Real-browser test"): every key
control carries one ``kqlab-...`` class, listed in :data:`CSS`, so a test finds it in the DOM
without depending on labels or layout.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as w

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from kqlab.validate.view import VerdictsView

#: the documented CSS classes of the key controls (``<id>`` is :func:`slug` of a rule id)
CSS = {
    "editor": "kqlab-policy-editor",
    "add_rule": "kqlab-add-rule",
    "new_kind": "kqlab-new-rule-kind",
    "rule_row": "kqlab-rule-<id>",
    "rule_count": "kqlab-rule-count-<id>",
    "rule_edit": "kqlab-rule-edit-<id>",
    "rule_remove": "kqlab-rule-remove-<id>",
    "rule_up": "kqlab-rule-up-<id>",
    "rule_down": "kqlab-rule-down-<id>",
    "rule_mode": "kqlab-rule-mode-<id>",
    "rule_severity": "kqlab-rule-severity-<id>",
    "form": "kqlab-rule-form",
    "form_kind": "kqlab-form-kind",
    "form_id": "kqlab-form-id",
    "form_param": "kqlab-form-param-<name>",
    "form_when": "kqlab-form-when",
    "form_apply": "kqlab-form-apply",
    "cel_status": "kqlab-cel-status",
    "enforcement": "kqlab-enforcement",
    "error": "kqlab-error",
    "undo": "kqlab-undo",
    "redo": "kqlab-redo",
    "golden": "kqlab-golden",
    "warning": "kqlab-warning",
    "yaml": "kqlab-policy-yaml",
    "suggest": "kqlab-suggest",
    "accept": "kqlab-accept-<id>",
    "outcomes": "kqlab-outcomes",
    "figures": "kqlab-figures",
    "replay_panel": "kqlab-replay-panel",
    "source": "kqlab-source",
    "engine": "kqlab-engine",
    "run": "kqlab-run",
    "cancel": "kqlab-cancel",
    "progress": "kqlab-progress",
    "status": "kqlab-status",
    "clock": "kqlab-clock",
    "explorer": "kqlab-rejection-explorer",
    "filter_reason": "kqlab-filter-reason",
    "filter_partition": "kqlab-filter-partition",
    "filter_errors": "kqlab-filter-errors",
    "table": "kqlab-rejected-table",
    "record": "kqlab-record-<partition>-<offset>",
    "detail": "kqlab-record-detail",
    "workbench": "kqlab-workbench",
}

_NOT_CSS = re.compile(r"[^A-Za-z0-9_-]+")


def slug(text: str) -> str:
    """``text`` as a CSS-class fragment: rule ids may hold dots and colons
    (``suggest.key_required``, ``decode:value``), which a class selector would need escaped."""
    return _NOT_CSS.sub("-", text)


def css(widget: Any, key: str, **parts: str) -> Any:
    """Add the documented class ``CSS[key]`` (placeholders filled from ``parts``); returns the
    widget so constructors stay one expression."""
    name = CSS[key]
    for part, value in parts.items():
        name = name.replace(f"<{part}>", slug(str(value)))
    widget.add_class(name)
    return widget


def show(out: w.Output, *objs: Any) -> list[Any]:
    """Replace what ``out`` shows; returns what was displayed.

    ``outputs = ()`` + ``append_display_data`` rather than ``clear_output()`` /
    ``with out: display()``: those need a frontend, so headless tests and unattended notebook
    runs would see nothing (spec/testing-jupyter.md (b)).  Plain figures are shown as
    :class:`~kqlab.widgets._plot.PlotlyFigure` views (plotly.js once per kernel, not once per
    figure as ``go.FigureWidget``): a plain figure's display data comes from plotly's renderer
    machinery, which yields nothing outside a kernel.
    """
    import plotly.graph_objects as go

    from kqlab.widgets._plot import PlotlyFigure

    out.outputs = ()
    shown = []
    for obj in objs:
        if isinstance(obj, go.Figure):
            obj = PlotlyFigure(obj)
        out.append_display_data(obj)
        shown.append(obj)
    return shown


def update_figure_widget(widget: Any, fig: Any) -> None:
    """Make the ``go.FigureWidget`` ``widget`` show the plain figure ``fig``, in place.

    Rebuilding a ``FigureWidget`` per refresh costs ~10 ms a figure (plotly validates the whole
    figure again, its template included) and replaces the view in the page; here the traces
    are replaced and only the layout properties that differ are set (the template, the same
    every time, is left alone), in one batch update: one message to the frontend.
    """
    new = fig.to_dict()
    old_layout = widget.to_dict().get("layout", {})
    new_layout = new.get("layout", {})
    changed = {k: v for k, v in new_layout.items()
               if k not in old_layout or not _equal(old_layout[k], v)}
    changed.update({k: None for k in old_layout if k not in new_layout})
    with widget.batch_update():
        widget.update(data=new.get("data", []), overwrite=True)
        if changed:
            widget.update_layout(changed, overwrite=True)


def _equal(a: Any, b: Any) -> bool:
    """``a == b`` for layout values, False when numpy arrays inside make it ambiguous (the
    property is then simply set again)."""
    try:
        return bool(a == b)
    except (ValueError, TypeError):
        return False


class FigureView:
    """Named figures shown in an ``Output`` as :class:`~kqlab.widgets._plot.PlotlyFigure`
    views that later refreshes update in place (:meth:`PlotlyFigure.update`): the views keep
    their models, so a page keeps its zoom-free redraw and the refresh skips building widgets."""

    def __init__(self, out: w.Output):
        self.out = out
        self.widgets: dict[str, Any] = {}

    def show(self, figures: dict[str, Any]) -> list[Any]:
        """Show ``figures`` (name -> plain figure); returns the displayed objects."""
        import plotly.graph_objects as go

        from kqlab.widgets._plot import PlotlyFigure

        shown: dict[str, Any] = {}
        reshow = list(figures) != list(self.widgets)
        for name, fig in figures.items():
            old = self.widgets.get(name)
            if isinstance(fig, go.Figure) and isinstance(old, PlotlyFigure):
                old.update(fig)
                shown[name] = old
                continue
            shown[name] = PlotlyFigure(fig) if isinstance(fig, go.Figure) else fig
            reshow = True
        self.widgets = shown
        if reshow:
            show(self.out, *shown.values())
        return list(shown.values())


def error_html(message: str | None) -> str:
    """The inline error line (empty when there is none)."""
    if not message:
        return ""
    import html

    return f'<span style="color:#c0392b">⚠ {html.escape(message)}</span>'


def _reasons(verdicts: VerdictsView, ctx: dict[str, Any]) -> go.Figure:
    from kqlab.viz import rejections_by_reason

    return rejections_by_reason(verdicts, colors=ctx.get("colors"))


def _offsets(verdicts: VerdictsView, ctx: dict[str, Any]) -> go.Figure:
    from kqlab.viz import rejections_by_offset

    return rejections_by_offset(verdicts, colors=ctx.get("colors"))


def _timeline(verdicts: VerdictsView, ctx: dict[str, Any]) -> go.Figure:
    from kqlab.viz import rejection_timeline

    return rejection_timeline(verdicts, colors=ctx.get("colors"))


def _impact(verdicts: VerdictsView, ctx: dict[str, Any]) -> go.Figure | None:
    from kqlab.viz import policy_impact

    before = ctx.get("before")
    if before is None:
        return None
    return policy_impact(before, verdicts, policies=ctx.get("policies"),
                         colors=ctx.get("colors"))


#: figure name -> builder(verdicts, context); context holds ``before`` (the previous
#: verdicts), ``policies`` ((old, new)) and ``colors`` (the session's rule -> colour map,
#: so a rule keeps its colour across edits and replays); None: not applicable
FIGURES: dict[str, Callable[[VerdictsView, dict[str, Any]], go.Figure | None]] = {
    "reasons": _reasons, "offsets": _offsets, "timeline": _timeline, "impact": _impact,
}


def build_figures(names: tuple[str, ...], verdicts: VerdictsView, ctx: dict[str, Any]
                  ) -> dict[str, go.Figure]:
    """The named figures of ``verdicts`` (plain ``go.Figure`` objects), whichever engine
    produced them: the verdicts keep their per-record work between figures (the local
    engine) or aggregate each figure's table themselves (Spark)."""
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(unknown)}; known: {', '.join(FIGURES)}")
    out = {}
    for name in names:
        fig = FIGURES[name](verdicts, ctx)
        if fig is not None:
            out[name] = fig
    return out
