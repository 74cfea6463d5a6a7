"""``RejectionExplorer``: the records a replay would refuse, filtered and paged, down to one
record's detail (:func:`kqlab.viz.record_detail`).

The verdicts (either engine's :class:`~kqlab.validate.view.VerdictsView`) filter and page
themselves (:meth:`~kqlab.validate.view.VerdictsView.find`: an Arrow mask locally, a Spark
filter on Spark), and only the shown page is turned into rows, so the explorer stays quick
on million-record samples and never collects a Spark replay.  Failure messages and keys are
masked per the policy's ``sensitive`` section, like every other view.
"""

from __future__ import annotations

import datetime
import html
from typing import TYPE_CHECKING, Any

import ipywidgets as w
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.view import RecordQuery
from kqlab.widgets._common import css, error_html, show

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.policy.model import Policy
    from kqlab.validate.view import VerdictsView
    from kqlab.viz._detail import RecordDetail
    from kqlab.viz._groups import SampleLike

ALL = "(all)"
COLLATERAL = "(collateral)"


class RejectionExplorer:
    """Filter by reason, partition, offset range and time; page through the rejected records;
    open one record's detail.

    Python twins of the controls: :meth:`set_filter`, :meth:`next_page`, :meth:`prev_page`,
    :meth:`show_record`.  :attr:`rows` is the page shown, :attr:`detail` the last
    :class:`~kqlab.viz.RecordDetail`.
    """

    def __init__(self, verdicts: VerdictsView | None = None, sample: SampleLike | None = None,
                 policy: Policy | None = None, *, page_size: int = 20):
        self.page_size = page_size
        self.verdicts: VerdictsView | None = None
        self.sample: SampleLike | None = None
        self.policy: Policy | None = None
        self.page = 0
        self.rows: list[dict[str, Any]] = []
        self.detail: RecordDetail | None = None
        self.matches = 0
        self._query = RecordQuery()
        self._muted = False  # set_filter sets several controls: their observers wait
        self.reason = css(w.Dropdown(options=[ALL], description="reason"), "filter_reason")
        self.partition = css(w.Dropdown(options=[ALL], description="partition"),
                             "filter_partition")
        self.offset_min = w.Text(description="offsets ≥", placeholder="any")
        self.offset_max = w.Text(description="≤", placeholder="any")
        self.time_min = w.Text(description="time ≥", placeholder="ms or ISO")
        self.time_max = w.Text(description="≤", placeholder="ms or ISO")
        self.apply_button = w.Button(description="Filter", icon="filter")
        self.prev_button = w.Button(icon="chevron-left", tooltip="previous page")
        self.next_button = w.Button(icon="chevron-right", tooltip="next page")
        self.status = w.HTML("")
        self.error = css(w.HTML(""), "error")
        self.table = css(w.VBox(), "table")
        self.detail_out = css(w.Output(), "detail")
        for control in (self.reason, self.partition):
            control.observe(lambda _ch: self._from_controls(), names="value")
        self.apply_button.on_click(lambda _b: self._from_controls())
        self.prev_button.on_click(lambda _b: self.prev_page())
        self.next_button.on_click(lambda _b: self.next_page())
        self.widget = css(w.VBox([
            w.HBox([self.reason, self.partition]),
            w.HBox([self.offset_min, self.offset_max]), w.HBox([self.time_min, self.time_max]),
            w.HBox([self.apply_button, self.prev_button, self.next_button, self.status]),
            self.error, self.table, self.detail_out,
        ]), "explorer")
        self._filters: dict[str, Any] = {}
        if verdicts is not None:
            self.set_verdicts(verdicts, sample, policy)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def set_verdicts(self, verdicts: VerdictsView, sample: SampleLike | None = None,
                     policy: Policy | None = None) -> None:
        """Explore other verdicts (after a replay or an edit); the filters are kept when they
        still apply."""
        self.verdicts, self.sample, self.policy = verdicts, sample, policy
        reasons = sorted(set(verdicts.by_reason().column("reason").to_pylist()))
        parts = sorted(zip(*verdicts.by_partition().select(["topic", "partition"])
                           .to_pydict().values(), strict=True))
        with self.reason.hold_trait_notifications(), self.partition.hold_trait_notifications():
            keep_r, keep_p = self.reason.value, self.partition.value
            self.reason.options = [ALL, COLLATERAL, *reasons]
            self.partition.options = [ALL, *(f"{t}-{p}" for t, p in parts)]
            self.reason.value = keep_r if keep_r in self.reason.options else ALL
            self.partition.value = keep_p if keep_p in self.partition.options else ALL
        self._apply()

    # -- the Python twins --------------------------------------------------------------------
    def set_filter(self, *, reason: str | None = None, partition: str | int | None = None,
                   offsets: tuple[int | None, int | None] | None = None,
                   time: tuple[Any, Any] | None = None) -> list[dict[str, Any]]:
        """Filter the rejected records; returns the first page.  ``reason``: a rule id or
        ``broker:<check>`` (``"(collateral)"``: records rejected with their batch only);
        ``partition``: ``"topic-N"`` (or N when there is one topic); ``offsets`` and ``time``
        (epoch ms, ISO text or datetimes) are inclusive ranges, None for open ends."""
        if partition is not None and not isinstance(partition, str):
            matches = [o for o in self.partition.options if o.rsplit("-", 1)[-1] == str(partition)]
            if len(matches) != 1:
                raise ValueError(f"partition {partition} is ambiguous or absent: "
                                 f"{', '.join(self.partition.options[1:])}")
            partition = matches[0]
        with self._quiet():
            self.reason.value = reason or ALL
            self.partition.value = partition or ALL
            lo, hi = offsets or (None, None)
            self.offset_min.value = "" if lo is None else str(lo)
            self.offset_max.value = "" if hi is None else str(hi)
            t0, t1 = time or (None, None)
            self.time_min.value = "" if t0 is None else str(_ms(t0))
            self.time_max.value = "" if t1 is None else str(_ms(t1))
        self._from_controls()
        return self.rows

    def next_page(self) -> list[dict[str, Any]]:
        """The next page of rejected records."""
        if (self.page + 1) * self.page_size < self.matches:
            self.page += 1
            self._render()
        return self.rows

    def prev_page(self) -> list[dict[str, Any]]:
        """The previous page."""
        if self.page:
            self.page -= 1
            self._render()
        return self.rows

    def show_record(self, partition: int, offset: int, topic: str | None = None
                    ) -> RecordDetail:
        """The detail of one record (a row's button): decoded key/value/headers, raw bytes,
        its batch, every failure, what the producer saw — sensitive data masked."""
        from kqlab.viz import record_detail

        if self.verdicts is None:
            raise ValueError("the explorer has no verdicts yet (set_verdicts)")
        detail = record_detail(self.verdicts, self.sample, partition=partition,
                               offset=offset, topic=topic, policy=self.policy)
        self.detail = detail
        show(self.detail_out, detail)
        return detail

    # -- internals ----------------------------------------------------------------------------
    def _quiet(self) -> Any:
        return _Quiet(self)

    def _from_controls(self) -> None:
        if self._muted or self.verdicts is None:
            return
        try:
            self._filters = {
                "reason": self.reason.value, "partition": self.partition.value,
                "offsets": (_int(self.offset_min.value), _int(self.offset_max.value)),
                "time": (_int_or_time(self.time_min.value), _int_or_time(self.time_max.value)),
            }
        except ValueError as exc:
            self.error.value = error_html(str(exc))
            return
        self.error.value = ""
        self._apply()

    def _apply(self) -> None:
        f = self._filters
        reason = f.get("reason", ALL)
        topic, partition = None, None
        part = f.get("partition", ALL)
        if part not in (None, ALL):
            topic, p = part.rsplit("-", 1)
            partition = int(p)
        self._query = RecordQuery(
            reason=None if reason in (None, ALL, COLLATERAL) else reason,
            collateral=reason == COLLATERAL, topic=topic, partition=partition,
            offsets=f.get("offsets", (None, None)), time=f.get("time", (None, None)))
        self.page = 0
        self._render()

    def _render(self) -> None:
        from kqlab.viz import MASK, masker

        if self.verdicts is None:
            return
        m = masker(self.policy)
        found = self.verdicts.find(self._query, self.page * self.page_size, self.page_size)
        self.matches = found.matches
        page = found.rows.to_pylist()
        keys = self._keys(page)
        self.rows = []
        children = []
        for rec in page:
            failures = rec["failures"] or []
            messages = [m.message(f["rule"], f["message"]) or "" for f in failures]
            where = (rec["topic"], rec["partition"], rec["offset"])
            key = keys.get(where)
            row = {"topic": rec["topic"], "partition": rec["partition"],
                   "offset": rec["offset"], "timestamp": rec["timestamp"],
                   "outcome": rec["outcome"],
                   "reasons": [f["rule"] for f in failures],
                   "messages": messages,
                   "key": (MASK if key is not None and m.key else key)}
            self.rows.append(row)
            button = css(w.Button(description=f"{rec['topic']}-{rec['partition']}@{rec['offset']}",
                                  layout=w.Layout(width="200px"), tooltip="record detail"),
                         "record", partition=rec["partition"], offset=rec["offset"])
            button.on_click(lambda _b, where=where: self.show_record(where[1], where[2],
                                                                     topic=where[0]))
            text = (f"{rec['outcome']} · {_when(rec['timestamp'])} · key "
                    f"<code>{html.escape(str(row['key']))}</code> · "
                    + html.escape("; ".join(f"{r}: {msg}" for r, msg in
                                            zip(row["reasons"], messages, strict=True))
                                  or "rejected with its batch"))
            children.append(w.HBox([button, w.HTML(text)]))
        self.table.children = tuple(children)
        pages = max(1, -(-self.matches // self.page_size))
        self.status.value = (f"{self.matches:,} records · page {self.page + 1} of {pages}")

    def _keys(self, page: list[dict[str, Any]]) -> dict[tuple[str, int, int], str | None]:
        """The page's keys read from the sample (a few rows; None without a sample)."""
        from kqlab.viz import sample_tables

        if not page or self.sample is None:
            return {}
        records, _ = sample_tables(self.sample)
        if records is None:
            return {}
        offsets = pa.array(sorted({r["offset"] for r in page}), pa.int64())
        sub = records.filter(pc.is_in(records.column("offset"), value_set=offsets))
        out = {}
        for r in sub.select(["topic", "partition", "offset", "key"]).to_pylist():
            k = r["key"]
            out[(r["topic"], r["partition"], r["offset"])] = (
                None if k is None else k.decode("utf-8", "replace")[:60])
        return out


class _Quiet:
    """Mute the control observers while :meth:`RejectionExplorer.set_filter` sets several."""

    def __init__(self, explorer: RejectionExplorer):
        self.explorer = explorer

    def __enter__(self) -> None:
        self.explorer._muted = True

    def __exit__(self, *exc: Any) -> None:
        self.explorer._muted = False


def _int(text: str) -> int | None:
    text = text.strip()
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
        return _ms(datetime.datetime.fromisoformat(text))
    except ValueError:
        raise ValueError(f"not a time (epoch ms or ISO 8601): {text!r}") from None


def _when(ms: int | None) -> str:
    if ms is None:
        return "—"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S.%f")[:-3]
