"""``RejectionExplorer``: the records a replay would refuse in a sortable, filterable, paged
table, and the detail of the one selected (:func:`kqlab.viz.record_detail`).

The verdicts (either engine's :class:`~kqlab.validate.view.VerdictsView`) filter, sort and
page themselves (:meth:`~kqlab.validate.view.VerdictsView.find`: an Arrow mask and a stable
sort locally, a Spark filter and ``orderBy`` on Spark), and only the shown page is turned
into rows, so the explorer stays quick on million-record samples and never collects a Spark
replay.  The table is :class:`~kqlab.widgets._record_table.RecordTable` (anywidget).

The detail pane always shows the selected record: a filter that leaves the selection out
clears it (and the pane), a filter that keeps it keeps both, and new verdicts (a replay, an
edit) redraw it from the new verdicts.  Values are shown for people
(:mod:`kqlab.viz._people`); an error is one line in the pane, never a traceback.  Failure
messages and keys are masked per the policy's ``sensitive`` section, like every other view.
"""

from __future__ import annotations

import contextlib
import datetime
import html
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import ipywidgets as w
import pyarrow as pa
import pyarrow.compute as pc
from IPython.display import HTML

from kqlab.validate.view import RECORD_ORDERS, RecordQuery
from kqlab.widgets._common import css, error_html, show, slug
from kqlab.widgets._record_table import RecordTable

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.policy.model import Policy
    from kqlab.validate.view import VerdictsView
    from kqlab.viz._detail import RecordDetail
    from kqlab.viz._groups import SampleLike

ALL = "(all)"
COLLATERAL = "(collateral)"
#: characters of a key or message shown in a cell (the full text is the cell's tooltip)
CELL = 80

#: the table's columns: key, header, the order its header sorts by ("" none), numeric
COLUMNS = (
    ("partition", "partition", "log", False),
    ("offset", "offset", "offset", True),
    ("time", "time (UTC)", "timestamp", False),
    ("outcome", "outcome", "outcome", False),
    ("reasons", "reasons", "", False),
    ("message", "message", "", False),
    ("key", "key", "", False),
)


def _row_id(topic: str, partition: int, offset: int) -> str:
    return f"{topic}|{partition}|{offset}"


class RejectionExplorer:
    """Filter by reason, partition, offset range and time; sort; page through the refused
    records; select one to see its detail.

    Python twins of the controls: :meth:`set_filter`, :meth:`sort_by`, :meth:`next_page`,
    :meth:`prev_page`, :meth:`show_record` (selects a record), :meth:`clear_selection`.
    :attr:`rows` is the page shown, :attr:`detail` the selected record's
    :class:`~kqlab.viz.RecordDetail` (None when nothing is selected).
    """

    def __init__(self, verdicts: VerdictsView | None = None, sample: SampleLike | None = None,
                 policy: Policy | None = None, *, page_size: int = 20):
        self.page_size = page_size
        self.verdicts: VerdictsView | None = None
        self.sample: SampleLike | None = None
        self.policy: Policy | None = None
        self.rows: list[dict[str, Any]] = []
        self.detail: RecordDetail | None = None
        self.detail_error: str | None = None
        self._detail_exc: Exception | None = None
        self.matches = 0
        self._query = RecordQuery()
        self._selected: dict[str, Any] | None = None  # the selected record's verdict row
        self._muted = False  # set_filter sets several controls: their observers wait
        self.reason = css(w.Dropdown(options=[ALL], description="reason"), "filter_reason")
        self.partition = css(w.Dropdown(options=[ALL], description="partition"),
                             "filter_partition")
        #: the records a rule could not judge (failures with status ``error``), whatever
        #: their outcome: the same query as ``kqlab replay --errors``
        self.errors_only = css(w.Checkbox(value=False, description="evaluation errors only",
                                          indent=False), "filter_errors")
        self.offset_min = w.Text(description="offsets ≥", placeholder="any",
                                 continuous_update=False)
        self.offset_max = w.Text(description="≤", placeholder="any", continuous_update=False)
        self.time_min = w.Text(description="time ≥", placeholder="ms or ISO, UTC",
                               continuous_update=False)
        self.time_max = w.Text(description="≤", placeholder="ms or ISO, UTC",
                               continuous_update=False)
        self.apply_button = w.Button(description="Filter", icon="filter")
        self.clear_button = w.Button(description="Clear filters", icon="times")
        self.error = css(w.HTML(""), "error")
        self.table = css(RecordTable(
            columns=[{"key": k, "label": label, "sort": order, "numeric": num}
                     for k, label, order, num in COLUMNS],
            empty="No refused record matches these filters."), "table")
        self.detail_out = css(w.Output(), "detail")
        for control in (self.reason, self.partition, self.errors_only, self.offset_min,
                        self.offset_max, self.time_min, self.time_max):
            control.observe(lambda _ch: self._from_controls(), names="value")
        self.apply_button.on_click(lambda _b: self._from_controls())
        self.clear_button.on_click(lambda _b: self.set_filter())
        self.table.observe(self._on_sort, names="sort")
        self.table.observe(self._on_page, names="page")
        self.table.observe(self._on_select, names="selected")
        self.widget = css(w.VBox([
            w.HBox([self.reason, self.partition, self.errors_only]),
            w.HBox([self.offset_min, self.offset_max]), w.HBox([self.time_min, self.time_max]),
            w.HBox([self.apply_button, self.clear_button]),
            self.error, self.table, self.detail_out,
        ]), "explorer")
        self._filters: dict[str, Any] = {}
        self._placeholder()
        if verdicts is not None:
            self.set_verdicts(verdicts, sample, policy)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def page(self) -> int:
        """The page shown (0-based)."""
        return self.table.page

    @property
    def selected(self) -> tuple[str, int, int] | None:
        """(topic, partition, offset) of the selected record, or None."""
        r = self._selected
        return None if r is None else (r["topic"], r["partition"], r["offset"])

    def set_verdicts(self, verdicts: VerdictsView, sample: SampleLike | None = None,
                     policy: Policy | None = None) -> None:
        """Explore other verdicts (after a replay or an edit); the filters, the order and the
        selection are kept when they still apply."""
        self.verdicts, self.sample, self.policy = verdicts, sample, policy
        reasons = sorted(set(verdicts.by_reason().column("reason").to_pylist()))
        parts = sorted(zip(*verdicts.by_partition().select(["topic", "partition"])
                           .to_pydict().values(), strict=True))
        with self._quiet():
            keep_r, keep_p = self.reason.value, self.partition.value
            self.reason.options = [ALL, COLLATERAL, *reasons]
            self.partition.options = [ALL, *(f"{t}-{p}" for t, p in parts)]
            self.reason.value = keep_r if keep_r in self.reason.options else ALL
            self.partition.value = keep_p if keep_p in self.partition.options else ALL
        self._from_controls(refresh_detail=True)

    # -- the Python twins --------------------------------------------------------------------
    def set_filter(self, *, reason: str | None = None, partition: str | int | None = None,
                   offsets: tuple[int | None, int | None] | None = None,
                   time: tuple[Any, Any] | None = None, errors: bool = False
                   ) -> list[dict[str, Any]]:
        """Filter the refused records; returns the first page.  ``reason``: a rule id or
        ``broker:<check>`` (``"(collateral)"``: records rejected with their batch only);
        ``partition``: ``"topic-N"`` (or N when there is one topic); ``offsets`` and ``time``
        (epoch ms, ISO text or datetimes) are inclusive ranges, None for open ends;
        ``errors``: instead the records a rule (``reason`` when given) could not judge,
        whatever their outcome.  Nothing given: every refused record."""
        if partition is not None and not isinstance(partition, str):
            matches = [o for o in self.partition.options if o.rsplit("-", 1)[-1] == str(partition)]
            if len(matches) != 1:
                raise ValueError(f"partition {partition} is ambiguous or absent: "
                                 f"{', '.join(self.partition.options[1:])}")
            partition = matches[0]
        with self._quiet():
            self.reason.value = reason or ALL
            self.partition.value = partition or ALL
            self.errors_only.value = bool(errors)
            lo, hi = offsets or (None, None)
            self.offset_min.value = "" if lo is None else str(lo)
            self.offset_max.value = "" if hi is None else str(hi)
            t0, t1 = time or (None, None)
            self.time_min.value = "" if t0 is None else str(_ms(t0))
            self.time_max.value = "" if t1 is None else str(_ms(t1))
        self._from_controls()
        return self.rows

    def sort_by(self, order: str = "log", descending: bool = False) -> list[dict[str, Any]]:
        """List the records by ``order`` (:data:`~kqlab.validate.view.RECORD_ORDERS`: log,
        timestamp, offset, outcome), from the first page; what a column header does."""
        if order not in RECORD_ORDERS:
            raise ValueError(f"unknown order {order!r}: one of {', '.join(RECORD_ORDERS)}")
        self.table.sort = {"key": order, "descending": bool(descending)}
        return self.rows

    def next_page(self) -> list[dict[str, Any]]:
        """The next page of refused records."""
        if (self.table.page + 1) * self.page_size < self.matches:
            self.table.page += 1
        return self.rows

    def prev_page(self) -> list[dict[str, Any]]:
        """The previous page."""
        if self.table.page:
            self.table.page -= 1
        return self.rows

    def show_record(self, partition: int, offset: int, topic: str | None = None
                    ) -> RecordDetail:
        """Select one record and show its detail (a row's click): decoded key/value/headers,
        raw bytes, its batch, every failure, what the producer saw — sensitive data masked.
        Raises :class:`~kqlab.validate.view.ViewError` when there is no detail to show (the
        pane then says why in one line)."""
        if self.verdicts is None:
            raise ValueError("the explorer has no verdicts yet (set_verdicts)")
        found = self.verdicts.lookup(partition, offset, topic)
        if found is None:
            from kqlab.validate.view import ViewError

            where = f"{topic}-{partition}" if topic else f"partition {partition}"
            raise ViewError(f"no record at offset {offset} of {where} in these verdicts")
        self._selected = found.record
        ident = _row_id(found.record["topic"], partition, offset)
        with self._quiet():
            self.table.selected = ident
        detail = self._draw_detail()
        if detail is None:
            assert self._detail_exc is not None
            raise self._detail_exc
        return detail

    def clear_selection(self) -> None:
        """Select nothing: the detail pane says how to select a record."""
        self._selected = None
        self.detail = None
        self.detail_error = None
        with self._quiet():
            self.table.selected = ""
        self._placeholder()

    # -- internals ----------------------------------------------------------------------------
    def _quiet(self) -> Any:
        return _Quiet(self)

    def _from_controls(self, refresh_detail: bool = False) -> None:
        if self._muted or self.verdicts is None:
            return
        try:
            self._filters = {
                "reason": self.reason.value, "partition": self.partition.value,
                "errors": bool(self.errors_only.value),
                "offsets": (_int(self.offset_min.value), _int(self.offset_max.value)),
                "time": (_int_or_time(self.time_min.value), _int_or_time(self.time_max.value)),
            }
        except ValueError as exc:
            self.error.value = error_html(str(exc))
            return
        self.error.value = ""
        self._apply(refresh_detail)

    def _apply(self, refresh_detail: bool = False) -> None:
        f = self._filters
        reason = f.get("reason", ALL)
        topic, partition = None, None
        part = f.get("partition", ALL)
        if part not in (None, ALL):
            topic, p = part.rsplit("-", 1)
            partition = int(p)
        sort = self.table.sort or {}
        self._query = RecordQuery(
            reason=None if reason in (None, ALL, COLLATERAL) else reason,
            collateral=reason == COLLATERAL, errors=bool(f.get("errors", False)),
            topic=topic, partition=partition,
            offsets=f.get("offsets", (None, None)), time=f.get("time", (None, None)),
            order=sort.get("key", "log"), descending=bool(sort.get("descending", False)))
        self._go_to(0)
        self._keep_selection(refresh_detail)

    def _on_sort(self, change: dict[str, Any]) -> None:
        if self._muted or self.verdicts is None:
            return
        new = change["new"] or {}
        order = new.get("key", "log")
        if order not in RECORD_ORDERS:  # not a server-side order: back to log order
            order = "log"
        self._query = replace(self._query, order=order,
                              descending=bool(new.get("descending", False)))
        self._go_to(0)

    def _on_page(self, change: dict[str, Any]) -> None:
        if self._muted or self.verdicts is None:
            return
        self._render(change["new"])

    def _on_select(self, change: dict[str, Any]) -> None:
        if self._muted or self.verdicts is None:
            return
        ident = change["new"]
        if not ident:
            self.clear_selection()
            return
        row = next((r for r in self.rows if _row_id(r["topic"], r["partition"], r["offset"])
                    == ident), None)
        if row is None:  # not on this page (a stale click): nothing to select
            self.clear_selection()
            return
        # a record without a detail: the pane already says why, in one line
        with contextlib.suppress(Exception):
            self.show_record(row["partition"], row["offset"], topic=row["topic"])

    def _go_to(self, page: int) -> None:
        with self._quiet():
            self.table.page = page
        self._render(page)

    def _keep_selection(self, refresh: bool) -> None:
        """After a filter (or new verdicts): keep the selection if it still matches, else
        clear it; redraw its detail from the new verdicts when they changed."""
        sel = self._selected
        if sel is None or self.verdicts is None:
            return
        found = self.verdicts.lookup(sel["partition"], sel["offset"], sel["topic"])
        if found is None or not _matches(found.record, self._query):
            self.clear_selection()
            return
        self._selected = found.record
        if refresh:
            self._draw_detail()

    def _draw_detail(self) -> RecordDetail | None:
        """Draw the selected record's detail (or, when there is none, why, in one line)."""
        from kqlab.viz import record_detail
        from kqlab.viz._people import error_line

        sel = self._selected
        if sel is None or self.verdicts is None:
            return None
        try:
            detail = record_detail(self.verdicts, self.sample, partition=sel["partition"],
                                   offset=sel["offset"], topic=sel["topic"],
                                   policy=self.policy)
        except Exception as exc:  # shown as one line, not a traceback
            self.detail, self._detail_exc = None, exc
            self.detail_error = error_line(exc)
            where = f"{sel['topic']}-{sel['partition']} @ {sel['offset']:,}"
            show(self.detail_out, HTML(
                f"<div class='kqlab-detail-error'><b>{html.escape(where)}</b>: "
                f"{error_html(self.detail_error)}</div>"))
            return None
        self.detail, self.detail_error, self._detail_exc = detail, None, None
        show(self.detail_out, detail)
        return detail

    def _placeholder(self) -> None:
        show(self.detail_out, HTML("<i>Select a record in the table to see its detail: "
                                   "content, raw bytes, batch and what the producer saw.</i>"))

    def _render(self, page: int) -> None:
        from kqlab.viz import MASK, masker
        from kqlab.viz._people import text, tidy

        if self.verdicts is None:
            return
        m = masker(self.policy)
        found = self.verdicts.find(self._query, page * self.page_size, self.page_size)
        self.matches = found.matches
        records = found.rows.to_pylist()
        keys = self._keys(records)
        self.rows, shown = [], []
        for rec in records:
            failures = rec["failures"] or []
            messages = [m.message(f["rule"], f["message"]) or "" for f in failures]
            where = (rec["topic"], rec["partition"], rec["offset"])
            key = keys.get(where)
            key = MASK if key is not None and m.key else key
            row = {"topic": rec["topic"], "partition": rec["partition"],
                   "offset": rec["offset"], "timestamp": rec["timestamp"],
                   "outcome": rec["outcome"], "reasons": [f["rule"] for f in failures],
                   "messages": messages, "key": key}
            self.rows.append(row)
            message = "; ".join(tidy(x) or "" for x in messages) if messages else \
                "rejected with its batch"
            key_text = "null" if key is None else key if key == MASK else text(key)
            ident = _row_id(*where)
            shown.append({
                "id": ident, "topic": rec["topic"], "partition": rec["partition"],
                "offset": rec["offset"], "outcome": rec["outcome"],
                "cls": f"kqlab-record-{slug(str(rec['partition']))}-{slug(str(rec['offset']))}",
                "cells": {"partition": f"{rec['topic']}-{rec['partition']}",
                          "offset": f"{rec['offset']:,}", "time": _when(rec["timestamp"]),
                          "outcome": rec["outcome"],
                          "reasons": ", ".join(dict.fromkeys(row["reasons"])) or "—",
                          "message": _cut(message), "key": _cut(key_text)},
                "titles": {"message": message, "key": key_text},
            })
        pages = max(1, -(-self.matches // self.page_size))
        # one message to the page for the whole page of rows (the table draws once)
        with self._quiet(), self.table.hold_sync():
            self.table.rows = shown
            self.table.matches = self.matches
            self.table.pages = pages
            sel = self.selected
            self.table.selected = _row_id(*sel) if sel is not None else ""
            what = "records a rule could not judge" if self._query.errors else "records"
            self.table.status = f"{self.matches:,} {what} · page {page + 1} of {pages}"

    def _keys(self, page: list[dict[str, Any]]) -> dict[tuple[str, int, int], Any]:
        """The page's keys read from the sample (a few rows; none without a sample): text when
        printable UTF-8, else the bytes."""
        from kqlab.viz import sample_tables
        from kqlab.viz._detail import _raw

        if not page or self.sample is None:
            return {}
        records, _ = sample_tables(self.sample)
        if records is None:
            return {}
        offsets = pa.array(sorted({r["offset"] for r in page}), pa.int64())
        sub = records.filter(pc.is_in(records.column("offset"), value_set=offsets))
        return {(r["topic"], r["partition"], r["offset"]): _raw(r["key"])
                for r in sub.select(["topic", "partition", "offset", "key"]).to_pylist()}


class _Quiet:
    """Mute the control observers while the explorer sets several controls itself."""

    def __init__(self, explorer: RejectionExplorer):
        self.explorer = explorer
        self.before = False

    def __enter__(self) -> None:
        self.before = self.explorer._muted
        self.explorer._muted = True

    def __exit__(self, *exc: Any) -> None:
        self.explorer._muted = self.before


def _matches(record: dict[str, Any], q: RecordQuery) -> bool:
    """Whether the record verdict ``record`` is one ``q`` lists (the filters of
    :meth:`~kqlab.validate.view.VerdictsView.find`, for one record in hand)."""
    outcome = record["outcome"]
    failures = record["failures"] or []
    if q.collateral and outcome != "collateral":
        return False
    if q.errors:  # errored records whatever their outcome, of rule ``reason`` when given
        if not any(f["status"] == "error" and q.reason in (None, f["rule"]) for f in failures):
            return False
    elif outcome == "accepted" or (q.reason is not None and not q.collateral and
                                   q.reason not in {f["rule"] for f in failures}):
        return False
    if q.topic is not None and record["topic"] != q.topic:
        return False
    if q.partition is not None and record["partition"] != q.partition:
        return False
    for column, (lo, hi) in (("offset", q.offsets), ("timestamp", q.time)):
        if (lo is not None and record[column] < lo) or (hi is not None and record[column] > hi):
            return False
    return True


def _cut(text: str) -> str:
    return text if len(text) <= CELL else text[:CELL - 1] + "…"


def _int(text: str) -> int | None:
    text = text.strip().replace(",", "").replace("_", "")
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"not an offset: {text!r}") from None


def _ms(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, str):
        return _int_or_time(value)  # type: ignore[return-value]
    return int(value)


def _int_or_time(text: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return _ms(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        raise ValueError(f"not a time (epoch ms or ISO 8601): {text!r}") from None


def _when(ms: int | None) -> str:
    if ms is None:
        return "—"
    try:
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
            "%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return str(ms)
