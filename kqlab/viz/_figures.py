"""Plotly figures of a replay: pure functions of verdicts (and the sample, where a view reads
record content) returning plain ``go.Figure`` objects; only a UI wraps them in widgets.

Every figure is drawn from the small tables of :class:`~kqlab.validate.view.VerdictsView`
(reasons, spans, buckets, groups — bounded by those, not by records), whichever engine
produced the verdicts: each engine aggregates natively, so a figure of Spark verdicts equals
the figure of the local verdicts of the same sample.

Every figure uses the trace types of plotly.js's *basic* bundle only (``scatter``, ``bar``):
the report embeds that bundle (1.2 MB instead of 4.8) and the widgets load it once per
kernel.  Long runs of points are drawn as one SVG path (spans and culprit ticks separated by
gaps), which SVG draws as fast as WebGL would.  A reason has one colour in every figure
(:class:`~kqlab.viz._style.RuleColors`), backgrounds are transparent and widths follow the
container (:mod:`kqlab.viz._style`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa

from kqlab.viz._groups import (
    SampleLike,
    content_counts,
    group_table,
    key_pattern_groups,
    needs_records,
    sample_tables,
    schema_id_groups,
)
from kqlab.viz._masking import masker
from kqlab.viz._style import (
    COLORS,
    OTHER,
    TEMPLATE_NAME,
    RuleColors,
    register_template,
    rule_colors,
)

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.policy.model import Policy
    from kqlab.validate.view import VerdictsView

__all__ = ["by_key_pattern", "by_producer", "by_schema_id", "rejection_timeline",
           "rejections_by_offset", "rejections_by_reason"]

#: the trace types the figures use: all in plotly.js's basic bundle (a test checks)
TRACE_TYPES = frozenset({"scatter", "bar"})
_LAYOUT = {"template": TEMPLATE_NAME, "margin": {"l": 10, "r": 10, "t": 60, "b": 40},
           # beside the plot, not above it: above, a legend of several rows ran over the title
           "legend": {"orientation": "v", "x": 1.01, "xanchor": "left", "y": 1.0,
                      "yanchor": "top"}}
#: :data:`_LAYOUT` without the template, which :func:`_figure` sets
_STYLE = {k: v for k, v in _LAYOUT.items() if k != "template"}
#: collateral and not-enforced bars wear their reason's colour with a pattern
_PATTERNS = {"culprit": "", "collateral": "/", "not_enforced": "."}


def _figure() -> go.Figure:
    """An empty figure with the shared template (``_LAYOUT["template"]``).

    Equal to ``go.Figure().update_layout(template=...)``, without plotly validating the
    template property by property: that costs ~8 ms, as much as the rest of a figure, and the
    editor draws figures after every edit.  The template is a fresh copy of the registered
    (already validated) one; validation is on again for everything set afterwards.
    """
    import plotly.io as pio

    template = pio.templates[register_template()].to_plotly_json()
    try:
        fig = go.Figure(layout={"template": template}, _validate=False)
    except TypeError:  # a plotly without the flag: the validated way
        return go.Figure().update_layout(template=_LAYOUT["template"])
    fig._validate = True
    fig.layout._validate = True
    return fig


def _title(text: str, note: str | None = None) -> dict[str, Any]:
    if note:
        text = f"{text}<br><sup>{note}</sup>"
    return {"text": text, "x": 0, "xanchor": "left"}


def _compact(values: np.ndarray) -> np.ndarray:
    """Integers as int32 when they fit (half the bytes in the figure's JSON, which plotly
    writes as a typed array), else float64 (exact up to 2**53, which offsets stay below)."""
    values = np.asarray(values)
    if values.size and np.abs(values).max() < 2**31:
        return values.astype(np.int32)
    return values.astype(np.float64)


def _color(colors: RuleColors, reason: str) -> str:
    """A reason's colour; the folded groups (``other``...) are grey."""
    if reason == "collateral":
        return COLORS["collateral"]
    if reason == "other" or reason.startswith("other "):
        return OTHER
    return colors[reason]


# -- rejections by reason ------------------------------------------------------------------------
def rejections_by_reason(verdicts: VerdictsView, *, max_reasons: int = 30,
                         colors: RuleColors | None = None) -> go.Figure:
    """Records each reason (rule or ``broker:<check>``) rejected: culprits — the records that
    failed it — apart from collateral — fine records rejected with their batch — and failures
    not enforced (``observe`` rules, or a policy the broker would not apply).

    Each bar wears its reason's colour (the same in every figure); collateral is hatched and
    failures not enforced are dotted."""
    colors = rule_colors(verdicts, colors)
    rows = verdicts.by_reason().to_pydict()
    n = len(rows["reason"])
    if n > max_reasons:  # fold the tail into one bar
        for name in ("culprit", "collateral", "not_enforced"):
            rows[name] = [*rows[name][:max_reasons - 1], sum(rows[name][max_reasons - 1:])]
        rows["reason"] = [*rows["reason"][:max_reasons - 1], f"other ({n - max_reasons + 1})"]
    shades = [_color(colors, r) for r in rows["reason"]]
    fig = _figure()
    for name, label in (("culprit", "rejected (culprit)"),
                        ("collateral", "collateral (rejected with its batch)"),
                        ("not_enforced", "failed, not enforced")):
        marker: dict[str, Any] = {"color": shades}
        if _PATTERNS[name]:
            marker["pattern"] = {"shape": _PATTERNS[name], "fillmode": "overlay",
                                 "fgcolor": "rgba(255,255,255,0.75)"}
            marker["opacity"] = 0.7
        fig.add_trace(go.Bar(y=rows["reason"], x=rows[name], name=label, orientation="h",
                             marker=marker,
                             hovertemplate="%{y}: %{x:,} records<extra>" + label + "</extra>"))
    fig.update_layout(**_STYLE, barmode="stack", legend_traceorder="normal",
                      title=_title("Rejections by reason", "records per rule or broker check"),
                      height=max(260, 60 + 26 * len(rows["reason"])),
                      yaxis={"autorange": "reversed", "automargin": True},
                      xaxis={"title": "records"})
    return fig


# -- partition x offset --------------------------------------------------------------------------
def rejections_by_offset(verdicts: VerdictsView, *, max_spans: int = 2000,
                         max_points: int = 2000, max_reasons: int = 8,
                         colors: RuleColors | None = None) -> go.Figure:
    """Where rejected batches sit in each partition: one bar per run of consecutive rejected
    batches (a bad deploy reads as a band), coloured by reason, over the partition's sampled
    range in grey; rejected records as ticks when there are at most ``max_points``.

    Span ends are exact offsets, so zooming in reaches single offsets; beyond ``max_spans``
    runs the closest runs of a partition are merged (the subtitle says so).  Each group of
    spans (and the ticks) is one SVG path with gaps between its pieces.
    """
    colors = rule_colors(verdicts, colors)
    spans = verdicts.spans(max_spans=max_spans, max_points=max_points)
    top = spans.top_reasons(max_reasons)
    labels = spans.labels
    fig = _figure()
    rows = np.arange(len(spans.partitions))
    if len(rows):  # the sampled range of every partition
        x = np.column_stack([spans.extent[:, 0], spans.extent[:, 1] + 1,
                             np.full(len(rows), np.nan)]).ravel()
        y = np.column_stack([rows, rows, np.full(len(rows), np.nan)]).ravel()
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name="sampled offsets",
                                 line={"color": "rgba(128,128,128,0.25)", "width": 18},
                                 hoverinfo="skip", connectgaps=False))
    groups = [(labels[i], spans.reason == i, _color(colors, labels[i])) for i in top]
    known = np.isin(spans.reason, top)
    if (~known).any():
        groups.append(("other / mixed reasons" if spans.merged else "other reasons", ~known,
                       OTHER))
    for name, sel, color in groups:
        if not sel.any():
            continue
        s, e, r = spans.start[sel], spans.end[sel], spans.row[sel]
        # numbers in customdata (a typed array in the JSON), not one hover string per point
        data = _compact(np.column_stack([s, e, spans.batches[sel], spans.rejected[sel],
                                         spans.collateral[sel]]))
        nan = np.full(len(s), np.nan)
        fig.add_trace(go.Scatter(
            x=np.column_stack([s, e + 1, nan]).ravel(),  # end + 1: a one-offset span shows
            y=np.column_stack([r, r, nan]).ravel().astype(np.float32), mode="lines",
            name=name, connectgaps=False,
            line={"color": color, "width": 12}, customdata=np.repeat(data, 3, axis=0),
            hovertemplate="offsets %{customdata[0]:,}–%{customdata[1]:,}<br>"
                          "%{customdata[2]:,} batch(es): %{customdata[3]:,} rejected, "
                          "%{customdata[4]:,} collateral<extra>" + name + "</extra>"))
    note = None
    if spans.points is not None:
        offsets, point_rows = spans.points
        fig.add_trace(go.Scatter(
            x=offsets, y=point_rows, mode="markers",
            name="rejected records", marker={"color": OTHER, "size": 9,
                                             "symbol": "line-ns-open",
                                             "line": {"width": 1, "color": OTHER}},
            hovertemplate="offset %{x:,}<extra>rejected record</extra>"))
    elif spans.culprits:
        note = f"{spans.culprits:,} rejected records: zoom shows spans, points above " \
               f"{max_points:,} are left out"
    if spans.merged:
        note = (note + "; " if note else "") + f"nearby runs merged to at most {max_spans:,} spans"
    fig.update_layout(**_STYLE, title=_title("Rejected batches by partition and offset", note),
                      height=max(260, 120 + 40 * len(rows)),
                      xaxis={"title": "offset", "tickformat": ",d"},
                      yaxis={"tickmode": "array", "tickvals": rows.tolist(),
                             "ticktext": spans.partitions, "autorange": "reversed",
                             "range": [len(rows) - 0.5, -0.5], "automargin": True})
    return fig


# -- timeline ------------------------------------------------------------------------------------
def gapped(buckets: np.ndarray, bucket_ms: int) -> tuple[np.ndarray, np.ndarray]:
    """Where a line over ``buckets`` (sorted bucket starts, epoch ms) must break: the x values
    with a gap marker inserted one bucket after every bucket whose successor is missing, and
    for each x the row of ``buckets`` it shows (-1 at a gap marker, whose y is null).

    A line through buckets without records would draw a diagonal across the time nothing was
    sampled; with a null there plotly breaks the line (``connectgaps=False``).

    Examples
    --------
    >>> x, rows = gapped(np.array([0, 10, 40, 50]), 10)
    >>> x.tolist(), rows.tolist()
    ([0, 10, 20, 40, 50], [0, 1, -1, 2, 3])
    """
    buckets = np.asarray(buckets, dtype=np.int64)
    if len(buckets) < 2:
        return buckets, np.arange(len(buckets))
    breaks = np.flatnonzero(np.diff(buckets) > bucket_ms)  # rows followed by a gap
    rows = np.insert(np.arange(len(buckets)), breaks + 1, -1)
    x = np.insert(buckets, breaks + 1, buckets[breaks] + bucket_ms)
    return x, rows


def rejection_timeline(verdicts: VerdictsView, *, bucket_ms: int | None = None,
                       max_buckets: int = 300, max_reasons: int = 8,
                       colors: RuleColors | None = None) -> go.Figure:
    """Rejection rate per time bucket (record timestamps): one line per top reason (the share
    of each bucket's records it got rejected), collateral and the rest, and the total refused
    share dashed above them.

    Buckets without records are gaps in every line (no diagonal across time nothing was
    sampled); a bucket alone between gaps shows as a dot.  ``bucket_ms=None`` picks a round
    bucket giving at most ``max_buckets`` buckets.
    """
    colors = rule_colors(verdicts, colors)
    table, bucket_ms = verdicts.timeline(bucket_ms, max_buckets, max_reasons)
    cols = table.to_pydict()
    buckets = np.asarray(cols.pop("bucket"), dtype=np.int64)
    total = np.maximum(np.asarray(cols.pop("total"), dtype=np.float64), 1)
    xs, rows = gapped(buckets, bucket_ms)
    x = xs.astype(np.float64)  # epoch ms on a date axis: a typed array, not ISO strings
    gap = rows < 0
    take = np.where(gap, 0, rows)
    # a point with gaps (or the ends) on both sides has no line: draw it as a dot
    alone = ~gap & ~np.r_[False, ~gap[:-1]] & ~np.r_[~gap[1:], False]
    size = np.where(alone, 6, 0).astype(np.uint8)
    fig = _figure()

    def line(name: str, counts: np.ndarray, color: str, dash: str | None = None) -> None:
        rate = 100 * counts / total
        y = np.where(gap, np.nan, rate[take])
        data = _compact(np.where(gap, 0, counts[take]))
        fig.add_trace(go.Scatter(
            x=x, y=y, name=name, mode="lines+markers", connectgaps=False,
            line={"width": 2 if dash is None else 1.5, "color": color, "dash": dash},
            marker={"size": size, "color": color}, customdata=data,
            hovertemplate="%{y:.2f} % (%{customdata:,} records)<extra>" + name + "</extra>"))

    refused = np.zeros(len(buckets))
    for name, counts in cols.items():
        counts = np.asarray(counts, dtype=np.float64)
        refused += counts
        line(name, counts, _color(colors, name))
    if len(cols) > 1:
        line("all refused", refused, OTHER, dash="dot")
    fig.update_layout(**_STYLE, hovermode="x unified",
                      title=_title("Rejection rate over time",
                                   f"share of records per {_duration(bucket_ms)} bucket, "
                                   "by reason; gaps: no records"),
                      yaxis={"title": "% of records", "rangemode": "tozero"},
                      xaxis={"title": "record timestamp", "type": "date"}, height=380)
    return fig


def _duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


# -- grouped by record properties ----------------------------------------------------------------
def _outcome_bars(table: pa.Table, title: str, note: str | None, axis: str) -> go.Figure:
    cols = table.to_pydict()
    groups = cols.pop("group")
    fig = _figure()
    for outcome, counts in cols.items():
        fig.add_trace(go.Bar(y=groups, x=counts, name=outcome, orientation="h",
                             marker_color=COLORS[outcome],
                             hovertemplate="%{y}: %{x:,} records<extra>" + outcome +
                             "</extra>"))
    fig.update_layout(**_STYLE, barmode="stack", title=_title(title, note),
                      height=max(240, 80 + 28 * len(groups)),
                      yaxis={"autorange": "reversed", "automargin": True, "title": axis},
                      xaxis={"title": "records"})
    return fig


def by_producer(verdicts: VerdictsView, sample: SampleLike | None = None, *,
                limit: int = 20) -> go.Figure:
    """Records per outcome for each producer (id, and epoch when the sample's exact batches
    say it): a bad deploy of one producer stands out.  Reconstructed framing has no producer
    ids (a consumer never sees them): the subtitle says so."""
    _, batches = sample_tables(sample)
    groups = verdicts.producer_outcomes(batches)
    note = None if verdicts.framing == "exact" else \
        f"framing {verdicts.framing}: batches were rebuilt, the producer ids are unknown"
    return _outcome_bars(group_table(groups.counts, groups.labels, limit), "Records by producer",
                         note, "producer")


def by_schema_id(verdicts: VerdictsView, sample: SampleLike | None, *,
                 limit: int = 20) -> go.Figure:
    """Records per outcome for each schema id in the values' Confluent wire header (and the
    values without one): a misconfigured serializer's unknown id stands out."""
    records = needs_records(sample, "value")
    codes, labels = schema_id_groups(records)
    counts = content_counts(verdicts, records, codes, labels)
    return _outcome_bars(group_table(counts, labels, limit), "Records by schema id", None,
                         "value schema")


def by_key_pattern(verdicts: VerdictsView, sample: SampleLike | None, *,
                   policy: Policy | None = None, limit: int = 20,
                   unmask: bool | None = None) -> go.Figure:
    """Records per outcome for each key *pattern* (digits as 9, UUIDs as ``<uuid>``): which
    kinds of keys get rejected.  When the policy marks keys sensitive, letters are masked too
    (``a``/``A``), so no key text reaches the figure."""
    records = needs_records(sample, "key")
    hide = masker(policy, unmask).key
    codes, labels = key_pattern_groups(records, letters=hide)
    counts = content_counts(verdicts, records, codes, labels)
    note = "keys are sensitive: letters masked" if hide else None
    return _outcome_bars(group_table(counts, labels, limit), "Records by key pattern", note,
                         "key pattern")
