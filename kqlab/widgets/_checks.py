"""``ChecksPanel``: the policy's sample checks (``checks:``) against the current verdicts —
observed value vs threshold, status, a sparkline per check over its windows — with the
thresholds editable in place and a drill-down from a failing window to its records.

A view of an :class:`~kqlab.authoring.AuthoringSession` like the editor: a threshold typed
here is :meth:`~kqlab.authoring.AuthoringSession.set_threshold` (an edit of the policy, on
the undo/redo history, re-judged from the replayer's cached partial aggregates, so it is
instant on a large sample), and every number shown is read from the session's current
verdicts (:attr:`~kqlab.authoring.AuthoringSession.checks`,
:meth:`~kqlab.authoring.AuthoringSession.check_windows`).

Sensitive data is masked per the policy's ``sensitive`` section, like every view: the group
labels of a check grouped by a masked header or a sensitive field read as pseudonyms (the
table, the failing windows offered, the sparklines), a sensitive drift field's new values as
the mask.  The drill-down lists the sample's records the check read in that window (keys and
values masked too)
(:meth:`~kqlab.authoring.AuthoringSession.window_records`: the group's records with a
timestamp in ``[start, end)``) and tells its ``on_drill`` listeners, which the workbench
uses to filter the rejection explorer to the same partition and time range.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from kqlab.validate.sample_checks.results import group_text
from kqlab.viz._masking import MASK, masker
from kqlab.widgets._common import css, error_html, slug
from kqlab.widgets._plot import PlotlyFigure

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from kqlab.authoring import AuthoringSession, SessionChange
    from kqlab.viz._masking import Masker

#: rows of a window's records shown under the drill-down
RECORDS_SHOWN = 20
#: failing windows offered in the drill-down list (the first ones, in time order)
WINDOWS_OFFERED = 200

CHECKS_CSS = {
    "panel": "kqlab-checks",
    "table": "kqlab-checks-table",
    "row": "kqlab-check-<id>",
    "status": "kqlab-check-status-<id>",
    "select": "kqlab-check-select",
    "threshold": "kqlab-check-threshold-<name>",
    "windows": "kqlab-check-windows",
    "drill": "kqlab-check-drill",
    "records": "kqlab-check-records",
    "sparklines": "kqlab-check-sparklines",
}


@dataclass(frozen=True)
class Drill:
    """A drill-down: check ``check``'s window of ``group`` (None: no ``by``) over
    ``[start, end)`` (None: the whole sample), grouped ``by``, and the records it read."""

    check: str
    by: str | None
    group: str | None
    start: int | None
    end: int | None
    records: pa.Table


class ChecksPanel:
    """The sample checks of a session's policy on its current verdicts.

    Parameters
    ----------
    session
        The :class:`~kqlab.authoring.AuthoringSession` shown.
    live
        Redraw after every change of the session (a standalone panel); the workbench passes
        False and calls :meth:`refresh` when its Checks tab shows.

    Python twins: :meth:`select` (the check dropdown), :meth:`set_threshold` (the threshold
    boxes), :meth:`drill` (a failing window's *Show records*; ``group`` is the real label).
    :attr:`rows` are the session's result rows, :attr:`shown_rows` the same as shown (masked),
    :attr:`figure` the sparklines (plotly JSON, :func:`kqlab.viz._checks
    .sparkline_spec`), :attr:`last_drill` the last drill-down.
    """

    def __init__(self, session: AuthoringSession, *, live: bool = True):
        self.session = session
        self.rows: list[dict[str, Any]] = []
        self.shown_rows: list[dict[str, Any]] = []
        self.figure: Any = None
        self.last_drill: Drill | None = None
        self.on_drill: list[Callable[[Drill], Any]] = []
        self._shown_for: object = None
        self._muted = False
        self.table = _css(w.HTML(""), "table")
        self.sparklines = _css(PlotlyFigure(), "sparklines")
        self.select_box = _css(w.Dropdown(options=[], description="check"), "select")
        self.thresholds = w.HBox([])
        self.windows = _css(w.Dropdown(options=[], description="failing"), "windows")
        self.drill_button = _css(w.Button(description="Show records", icon="search"), "drill")
        self.records_out = _css(w.HTML(""), "records")
        self.error = css(w.HTML(""), "error")
        self.select_box.observe(lambda ch: self._on_select(), names="value")
        self.drill_button.on_click(lambda _b: self._drill_selected())
        self.widget = _css(w.VBox([
            self.table, self.error, w.HBox([self.select_box, self.thresholds]),
            w.HBox([self.windows, self.drill_button]), self.records_out, self.sparklines,
        ]), "panel")
        if live:
            session.observe(self._on_change)
        self.refresh()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    # -- the Python twins --------------------------------------------------------------------
    def select(self, check_id: str) -> None:
        """Show check ``check_id``'s thresholds and failing windows."""
        if check_id not in self.select_box.options:
            raise ValueError(f"no check {check_id!r}: {', '.join(self.select_box.options)}")
        self.select_box.value = check_id

    def set_threshold(self, check_id: str, **thresholds: float | int | None) -> Any:
        """Set thresholds of ``check_id`` through the session (an undoable edit); the panel
        redraws from the new verdicts.  A refused value leaves the policy as it was and says
        why in :attr:`error`."""
        try:
            verdicts = self.session.set_threshold(check_id, **thresholds)
        except Exception as exc:  # EditError and the loader's: shown, the policy kept
            self.error.value = error_html(str(exc))
            raise
        self.refresh()
        return verdicts

    def drill(self, check_id: str, group: str | None = None, start: int | None = None
              ) -> Drill:
        """The records check ``check_id`` read in the window of ``group`` starting at
        ``start`` (its end from the check's judged windows; no ``start``: the group over the
        whole sample), listed under the panel and sent to :attr:`on_drill`."""
        row = next((r for r in self.rows if r["check"] == check_id), None)
        if row is None:
            raise ValueError(f"no check {check_id!r} in the current verdicts")
        end = None
        if start is not None and row["window_ms"] is not None:
            end = start + int(row["window_ms"])
        records = self.session.window_records(check_id, group, start, end)
        drill = Drill(check_id, row["by"], group, start, end, records)
        self.last_drill = drill

        self.records_out.value = _records_html(drill, masker(self.session.policy))
        for listener in list(self.on_drill):
            listener(drill)
        return drill

    # -- drawing --------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Redraw from the session's current verdicts and policy (nothing when already)."""
        s = self.session
        key = (s.verdicts, s.policy)
        if self._shown_for == key:
            return
        self._shown_for = key
        mask = masker(s.policy)
        self.rows = s.checks
        self.shown_rows = mask.check_rows(self.rows)
        self.table.value = _table_html(self.shown_rows)
        self.error.value = error_html(s.error) if s.error else ""
        ids = [c.id for c in s.policy.checks]
        self._muted = True
        try:
            keep = self.select_box.value
            self.select_box.options = ids
            self.select_box.value = keep if keep in ids else (ids[0] if ids else None)
        finally:
            self._muted = False
        self._on_select(force=True)
        from kqlab.viz._checks import sparkline_spec

        self.figure = sparkline_spec(self.shown_rows, {
            r["check"]: mask.check_windows(r["check"], s.check_windows(r["check"]))
            for r in self.rows})
        self.sparklines.update(self.figure)

    def _on_change(self, change: SessionChange) -> None:
        if change.changed & {"verdicts", "policy"}:
            self.refresh()
        elif "error" in change:
            self.error.value = error_html(change.session.error)

    def _on_select(self, force: bool = False) -> None:
        if self._muted and not force:
            return
        check_id = self.select_box.value
        if check_id is None:
            self.thresholds.children = ()
            self.windows.options = []
            return
        check = self.session.policy.check(check_id)
        boxes = []
        for name in check.spec.thresholds:
            value = check.params.get(name)
            box = _css(w.Text(value="" if value is None else str(value), description=name,
                              placeholder="open", continuous_update=False,
                              layout=w.Layout(width="14em")), "threshold", name=name)
            box.observe(lambda ch, n=name: self._typed(n, ch["new"]), names="value")
            boxes.append(box)
        self.thresholds.children = tuple(boxes)
        row = next((r for r in self.rows if r["check"] == check_id), None)
        failing = (row or {}).get("failing") or []
        mask = masker(self.session.policy)
        hide = mask.check_groups(mask.checks.get(check_id))
        # the label shown may be a pseudonym; the value (kept in the kernel) is the real group
        self.windows.options = [
            (_window_label(f, row, mask.group_label(f["group"]) if hide else f["group"]),
             (f["group"], f["start"])) for f in failing[:WINDOWS_OFFERED]]

    def _typed(self, name: str, text: str) -> None:
        check_id = self.select_box.value
        if check_id is None:
            return
        param = self.session.policy.check(check_id).spec.param(name)
        try:
            value = _number(text, param.type if param is not None else "number")
        except ValueError:
            self.error.value = error_html(f"check {check_id}: {name} must be a number "
                                          f"(empty: no bound), not {text!r}")
            return
        try:
            self.set_threshold(check_id, **{name: value})
        except Exception:
            return

    def _drill_selected(self) -> None:
        if self.select_box.value is None or self.windows.value is None:
            return
        group, start = self.windows.value
        try:
            self.drill(self.select_box.value, group, start)
        except Exception as exc:
            self.error.value = error_html(str(exc))


def _css(widget: Any, key: str, **parts: str) -> Any:
    name = CHECKS_CSS[key]
    for part, value in {"id": parts.get("id"), "name": parts.get("name")}.items():
        if value is not None:
            name = name.replace(f"<{part}>", slug(value))
    widget.add_class(name)
    return widget


def _number(text: str, kind: str) -> float | int | None:
    text = text.strip()
    if not text:
        return None
    value = float(text)
    return int(value) if kind == "int" and value.is_integer() else value


def _when(ms: int | None) -> str:
    if ms is None:
        return "—"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S")


def _window_label(f: dict[str, Any], row: dict[str, Any] | None, group: str | None) -> str:
    where = group_text(group, None if row is None else row.get("by"))
    if row is not None and row.get("window_ms") is not None:
        where += f" · {_when(f['start'])}"
    observed = "—" if f["observed"] is None else f"{f['observed']:.4g}"
    return f"{where} · {observed} ({f['records']} records)"


def _table_html(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<i>No sample checks in the policy (add a <code>checks:</code> list).</i>"
    head = ("<tr><th>check</th><th>kind</th><th>status</th><th>observed</th>"
            "<th>threshold</th><th>windows failing</th></tr>")
    body = []
    for r in rows:
        text = r["text"]
        observed, threshold = _observed_and_threshold(text, r)
        windows = "—" if r["windows"] is None else f"{r['failing_windows']} of {r['windows']}"
        sid = slug(r["check"])
        body.append(
            f"<tr class='kqlab-check-{sid}' title='{html.escape(text, quote=True)}'>"
            f"<td>{html.escape(r['check'])}</td><td>{html.escape(r['kind'])}</td>"
            f"<td class='kqlab-check-status-{sid}'>{_badge(r['status'])}</td>"
            f"<td>{html.escape(observed)}</td><td>{html.escape(threshold)}</td>"
            f"<td>{windows}</td></tr>")
    return f"<table>{head}{''.join(body)}</table>"


def _observed_and_threshold(text: str, r: dict[str, Any]) -> tuple[str, str]:
    """The observed value and the bounds, formatted from the row's numbers as
    :func:`~kqlab.validate.sample_checks.describe_check` formats them."""
    from kqlab.validate.sample_checks.results import NOT_EVALUABLE_REASONS
    from kqlab.validate.sample_checks.results import _number as formatted

    metric = r.get("metric") or ""
    bounds = [f"{side} {formatted(metric, r[side])}" for side in ("min", "max")
              if r.get(side) is not None]
    if r["status"] == "not_evaluable":
        reason = r.get("reason") or ""
        return NOT_EVALUABLE_REASONS.get(reason, reason), ", ".join(bounds) or "—"
    shown = metric if metric != "stat" else str(r["params"].get("stat", "stat"))
    return f"{shown} {formatted(metric, r.get('observed'))}", ", ".join(bounds) or "—"


def _badge(status: str) -> str:
    colour = {"pass": "#4c9a6a", "fail": "#c0392b"}.get(status, "#8e8e8e")
    return f"<span style='color:{colour};font-weight:600'>{html.escape(status)}</span>"


def _records_html(drill: Drill, mask: Masker) -> str:
    t = drill.records
    group = drill.group
    if mask.check_groups(mask.checks.get(drill.check)):
        group = mask.group_label(group)
    where = group_text(group, drill.by)
    span = "the whole sample" if drill.start is None else \
        f"[{_when(drill.start)}, {_when(drill.end)}) UTC"
    head = (f"<b>{html.escape(drill.check)}</b>: {t.num_rows:,} records of "
            f"{html.escape(where)} in {span}")
    if t.num_rows == 0:
        return head
    shown = t.slice(0, RECORDS_SHOWN).to_pylist()
    cells = "".join(
        f"<tr><td>{r['topic']}-{r['partition']}</td><td>{r['offset']}</td>"
        f"<td>{_when(r['timestamp'])}</td>"
        f"<td>{html.escape(MASK if mask.key and r['key'] is not None else _text(r['key']))}</td>"
        f"<td>{html.escape(_shown_value(r, mask))}</td></tr>"
        for r in shown)
    more = f"<i>… and {t.num_rows - RECORDS_SHOWN:,} more</i>" \
        if t.num_rows > RECORDS_SHOWN else ""
    return (f"{head}<table><tr><th>partition</th><th>offset</th><th>time (UTC)</th>"
            f"<th>key</th><th>value</th></tr>{cells}</table>{more}")


def _shown_value(r: dict[str, Any], mask: Masker, limit: int = 120) -> str:
    """The decoded value as compact JSON when there is one (its sensitive fields masked),
    else the raw bytes as text (masked whole when they hold a sensitive field)."""
    decoded = r.get("decoded")
    if decoded is None:
        if mask.value_bytes and r["value"] is not None:
            return MASK
        return _text(r["value"], limit)
    decoded = mask.value(decoded)
    import json

    text = decoded if isinstance(decoded, str) else json.dumps(
        decoded, default=str, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _text(b: bytes | None, limit: int = 80) -> str:
    if b is None:
        return "null"
    text = b.decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit - 1] + "…"
