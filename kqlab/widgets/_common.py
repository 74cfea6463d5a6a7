"""Helpers shared by the kqlab widgets: stable CSS classes, writing into ``Output`` without a
frontend, and the figure registry the editor and the workbench refresh after every edit.

The CSS classes are the contract with browser tests (issue 7, "Real-browser test"): every key
control carries one ``kqlab-...`` class, listed in :data:`CSS`, so a test finds it in the DOM
without depending on labels or layout.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import ipywidgets as w

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
    "form_id": "kqlab-form-id",
    "form_param": "kqlab-form-param-<name>",
    "form_when": "kqlab-form-when",
    "form_apply": "kqlab-form-apply",
    "cel_status": "kqlab-cel-status",
    "enforcement": "kqlab-enforcement",
    "error": "kqlab-error",
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
    "explorer": "kqlab-rejection-explorer",
    "filter_reason": "kqlab-filter-reason",
    "filter_partition": "kqlab-filter-partition",
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
    ``go.FigureWidget`` views of the same figure model: a plain figure's display data comes
    from plotly's renderer machinery, which yields nothing outside a kernel.
    """
    import plotly.graph_objects as go

    out.outputs = ()
    shown = []
    for obj in objs:
        if isinstance(obj, go.Figure):
            obj = go.FigureWidget(obj)
        out.append_display_data(obj)
        shown.append(obj)
    return shown


def error_html(message: str | None) -> str:
    """The inline error line (empty when there is none)."""
    if not message:
        return ""
    import html

    return f'<span style="color:#c0392b">⚠ {html.escape(message)}</span>'


def _reasons(verdicts: Any, ctx: dict[str, Any]) -> Any:
    from kqlab.viz import rejections_by_reason

    return rejections_by_reason(ctx.get("agg") or verdicts)


def _offsets(verdicts: Any, ctx: dict[str, Any]) -> Any:
    from kqlab.viz import rejections_by_offset

    return rejections_by_offset(ctx.get("agg") or verdicts)


def _timeline(verdicts: Any, ctx: dict[str, Any]) -> Any:
    from kqlab.viz import rejection_timeline

    return rejection_timeline(ctx.get("agg") or verdicts)


def _impact(verdicts: Any, ctx: dict[str, Any]) -> Any:
    from kqlab.viz import policy_impact

    before = ctx.get("before")
    if before is None:
        return None
    return policy_impact(before, verdicts, policies=ctx.get("policies"))


#: figure name -> builder(verdicts, context); context holds ``agg`` (shared Aggregates),
#: ``before`` (the previous verdicts) and ``policies`` ((old, new)); None: not applicable
FIGURES: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "reasons": _reasons, "offsets": _offsets, "timeline": _timeline, "impact": _impact,
}


def build_figures(names: tuple[str, ...], verdicts: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    """The named figures of ``verdicts`` (plain ``go.Figure`` objects), sharing one
    :class:`~kqlab.viz.Aggregates` so the per-record work is done once per refresh."""
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(unknown)}; known: {', '.join(FIGURES)}")
    if any(n in ("reasons", "offsets", "timeline") for n in names) and "agg" not in ctx:
        from kqlab.viz import aggregates

        ctx = {**ctx, "agg": aggregates(verdicts, ctx.get("sample"))}
    out = {}
    for name in names:
        fig = FIGURES[name](verdicts, ctx)
        if fig is not None:
            out[name] = fig
    return out
