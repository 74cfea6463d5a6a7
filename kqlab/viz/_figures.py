"""Plotly figures of a replay: pure functions of verdicts (and the sample, where a view reads
record content) returning plain ``go.Figure`` objects; only a UI wraps them in widgets.

Every figure is drawn from :class:`~kqlab.viz._aggregate.Aggregates` tables, so its data is
bounded by reasons, partitions, spans or buckets — not by records — and point-heavy traces use
WebGL (``scattergl``).  Pass an :class:`Aggregates` instead of verdicts to share the per-record
work between several figures (the report does).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa

from kqlab.viz._aggregate import OUTCOME_CODES, Aggregates, ViewError, group_table
from kqlab.viz._masking import masker

__all__ = ["aggregates", "by_key_pattern", "by_producer", "by_schema_id", "rejection_timeline",
           "rejections_by_offset", "rejections_by_reason"]

#: outcome colours, shared by every figure
COLORS = {"accepted": "#4c9a6a", "rejected": "#c0392b", "collateral": "#e6a23c",
          "undetermined": "#8e8e8e", "not_enforced": "#9aa7b8"}
#: reason colours (qualitative, colour-blind friendly), cycled
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442",
           "#000000", "#7f7f7f")
_LAYOUT = {"template": "plotly_white", "margin": {"l": 10, "r": 10, "t": 60, "b": 40},
           # beside the plot, not above it: above, a legend of several rows ran over the title
           "legend": {"orientation": "v", "x": 1.01, "xanchor": "left", "y": 1.0,
                      "yanchor": "top"}}
#: :data:`_LAYOUT` without the template, which :func:`_figure` sets
_STYLE = {k: v for k, v in _LAYOUT.items() if k != "template"}


def _figure() -> go.Figure:
    """An empty figure with the shared template (``_LAYOUT["template"]``).

    Equal to ``go.Figure().update_layout(template=...)``, without plotly validating the
    template property by property: that costs ~8 ms, as much as the rest of a figure, and the
    editor draws figures after every edit.  The template is a fresh copy of the registered
    (already validated) one; validation is on again for everything set afterwards.
    """
    import plotly.io as pio

    template = pio.templates[_LAYOUT["template"]].to_plotly_json()
    try:
        fig = go.Figure(layout={"template": template}, _validate=False)
    except TypeError:  # a plotly without the flag: the validated way
        return go.Figure().update_layout(template=_LAYOUT["template"])
    fig._validate = True
    fig.layout._validate = True
    return fig


def aggregates(verdicts: Any, sample: Any = None) -> Aggregates:
    """The :class:`Aggregates` of ``verdicts`` with the sample's records and batches.

    ``sample`` may be a :class:`~kqlab.validate.sample.Sample`, a
    :class:`~kqlab.validate.replayer.Replayer` (its sample), or a records table.
    """
    if isinstance(verdicts, Aggregates):
        return verdicts
    if hasattr(verdicts, "record_files"):  # a SparkVerdicts
        raise ViewError("this view needs record-level verdicts: use the Spark-aggregated "
                        "views (rejections_by_reason, rejection_timeline, by_producer) or "
                        "collect with SparkVerdicts.to_local()")
    records, batches = _sample_tables(sample)
    # one Aggregates per (verdicts, sample): figures drawn from the same replay, and the next
    # edit's impact diff (which reads the previous verdicts again), share the per-record work
    cache = getattr(verdicts, "_viz_aggregates", None)
    if not isinstance(cache, dict) or cache.get("table") is not verdicts.records:
        cache = {"table": verdicts.records}
        with contextlib.suppress(AttributeError):  # a verdicts type without attributes
            verdicts._viz_aggregates = cache
    key = (id(records) if records is not None else None,
           id(batches) if batches is not None else None)
    hit = cache.get(key)
    if hit is not None and hit._records is records and hit.sample_batches is batches:
        return hit
    agg = Aggregates(verdicts, records, batches)
    # codes a local replay computed while assembling the tables (equal to what Aggregates
    # derives from them; tests check), so the views do not derive them again
    seed = getattr(verdicts, "_codes", None)
    if isinstance(seed, dict) and seed.get("table") is verdicts.records:
        for name in _VERDICT_ONLY:
            if name in seed:
                value = seed[name]
                agg.__dict__[name] = value() if callable(value) else value
    for other in cache.values():  # codes that depend on the verdicts alone are shared
        if isinstance(other, Aggregates):
            for name in _VERDICT_ONLY:
                if name in other.__dict__:
                    agg.__dict__[name] = other.__dict__[name]
            break
    cache[key] = agg
    return agg


#: Aggregates' cached per-record codes computed from the verdicts alone (not the sample)
_VERDICT_ONLY = ("outcome", "_failures", "reason_labels", "_rule_codes", "batch_id", "reason")


def _sample_tables(sample: Any) -> tuple[pa.Table | None, pa.Table | None]:
    if sample is None:
        return None, None
    sample = getattr(sample, "sample", sample)  # a Replayer
    if isinstance(sample, pa.Table):
        return sample, None
    if hasattr(sample, "records") and hasattr(sample, "batches"):
        return sample.records, sample.batches
    raise ViewError(f"sample must be a Sample, a Replayer or a records table, not "
                    f"{type(sample).__name__}")


def _title(text: str, note: str | None = None) -> dict[str, Any]:
    if note:
        text = f"{text}<br><sup>{note}</sup>"
    return {"text": text, "x": 0, "xanchor": "left"}


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


# -- rejections by reason ------------------------------------------------------------------------
def rejections_by_reason(verdicts: Any, *, max_reasons: int = 30) -> go.Figure:
    """Records each reason (rule or ``broker:<check>``) rejected: culprits — the records that
    failed it — apart from collateral — fine records rejected with their batch — and failures
    not enforced (``observe`` rules, or a policy the broker would not apply).

    Accepts local verdicts or a :class:`~kqlab.spark.verdicts.SparkVerdicts` (aggregated in
    Spark; no record is collected).
    """
    table = _spark_reasons(verdicts) if hasattr(verdicts, "record_files") else \
        aggregates(verdicts).by_reason()
    rows = table.to_pydict()
    n = len(rows["reason"])
    if n > max_reasons:  # fold the tail into one bar
        for name in ("culprit", "collateral", "not_enforced"):
            rows[name] = [*rows[name][:max_reasons - 1], sum(rows[name][max_reasons - 1:])]
        rows["reason"] = [*rows["reason"][:max_reasons - 1], f"other ({n - max_reasons + 1})"]
    fig = _figure()
    for name, label in (("culprit", "rejected (culprit)"),
                        ("collateral", "collateral (rejected with its batch)"),
                        ("not_enforced", "failed, not enforced")):
        color = COLORS["rejected" if name == "culprit" else name]
        fig.add_trace(go.Bar(y=rows["reason"], x=rows[name], name=label, orientation="h",
                             marker_color=color,
                             hovertemplate="%{y}: %{x:,} records<extra>" + label + "</extra>"))
    fig.update_layout(**_STYLE, barmode="stack",
                      title=_title("Rejections by reason", "records per rule or broker check"),
                      height=max(260, 60 + 26 * len(rows["reason"])),
                      yaxis={"autorange": "reversed", "automargin": True},
                      xaxis={"title": "records"})
    return fig


def _spark_reasons(sv: Any) -> pa.Table:
    """:meth:`Aggregates.by_reason` as Spark aggregations over the record verdicts."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    df = sv.raw_records.select("unit", "seq", "topic", "partition", "batch_offset", "outcome",
                               sf.posexplode_outer("failures").alias("i", "f"))
    enforced = df.filter(sf.col("f.code") != 0)
    culprit = {r["rule"]: r["n"] for r in enforced.groupBy(sf.col("f.rule").alias("rule")).agg(
        sf.countDistinct("unit", "seq").alias("n")).collect()}
    observed = {r["rule"]: r["n"] for r in df.filter(sf.col("f.code") == 0).groupBy(
        sf.col("f.rule").alias("rule")).count().withColumnRenamed("count", "n").collect()}
    # each batch's reason: its first culprit's first enforced failure
    w = Window.partitionBy("unit", "topic", "partition", "batch_offset").orderBy("seq", "i")
    batch_reason = (enforced.filter(sf.col("outcome") == "rejected")
                    .withColumn("k", sf.row_number().over(w)).filter(sf.col("k") == 1)
                    .select("unit", "topic", "partition", "batch_offset",
                            sf.col("f.rule").alias("rule")))
    coll = sv.raw_records.filter(sf.col("outcome") == "collateral").select(
        "unit", "topic", "partition", "batch_offset")
    collateral = {r["rule"]: r["count"] for r in coll.join(
        batch_reason, ["unit", "topic", "partition", "batch_offset"]).groupBy("rule").count()
        .collect()}
    names = sorted(set(culprit) | set(observed) | set(collateral),
                   key=lambda r: (-(culprit.get(r, 0) + collateral.get(r, 0)),
                                  -observed.get(r, 0), r))
    return pa.table({"reason": pa.array(names, pa.string()),
                     "culprit": pa.array([culprit.get(r, 0) for r in names], pa.int64()),
                     "collateral": pa.array([collateral.get(r, 0) for r in names], pa.int64()),
                     "not_enforced": pa.array([observed.get(r, 0) for r in names], pa.int64())})


# -- partition x offset --------------------------------------------------------------------------
def rejections_by_offset(verdicts: Any, *, max_spans: int = 2000, max_points: int = 20_000,
                         max_reasons: int = 8) -> go.Figure:
    """Where rejected batches sit in each partition: one bar per run of consecutive rejected
    batches (a bad deploy reads as a band), coloured by reason, over the partition's sampled
    range in grey; rejected records as points when there are at most ``max_points``.

    Span ends are exact offsets, so zooming in reaches single offsets; beyond ``max_spans``
    runs the closest runs of a partition are merged (the subtitle says so).
    """
    agg = aggregates(verdicts)
    spans = agg.spans(max_spans=max_spans)
    top = agg.top_reasons(max_reasons)
    labels = agg.reason_labels
    fig = _figure()
    rows = np.arange(len(spans.partitions))
    if len(rows):  # the sampled range of every partition
        x = np.column_stack([spans.extent[:, 0], spans.extent[:, 1] + 1,
                             np.full(len(rows), np.nan)]).ravel()
        y = np.column_stack([rows, rows, np.full(len(rows), np.nan)]).ravel()
        fig.add_trace(go.Scattergl(x=x, y=y, mode="lines", name="sampled offsets",
                                   line={"color": "#d9dde3", "width": 18}, hoverinfo="skip"))
    groups = [(labels[i], spans.reason == i, _color(j)) for j, i in enumerate(top)]
    known = np.isin(spans.reason, top)
    if (~known).any():
        groups.append(("other / mixed reasons" if spans.merged else "other reasons", ~known,
                       "#555555"))
    for name, sel, color in groups:
        if not sel.any():
            continue
        s, e, r = spans.start[sel], spans.end[sel], spans.row[sel]
        # numbers in customdata (a typed array in the JSON), not one hover string per point
        data = np.column_stack([s, e, spans.batches[sel], spans.rejected[sel],
                                spans.collateral[sel]])
        nan = np.full(len(s), np.nan)
        fig.add_trace(go.Scattergl(
            x=np.column_stack([s, e + 1, nan]).ravel(),  # end + 1: a one-offset span shows
            y=np.column_stack([r, r, nan]).ravel(), mode="lines", name=name,
            line={"color": color, "width": 12}, customdata=np.repeat(data, 3, axis=0),
            hovertemplate="offsets %{customdata[0]:,}–%{customdata[1]:,}<br>"
                          "%{customdata[2]:,} batch(es): %{customdata[3]:,} rejected, "
                          "%{customdata[4]:,} collateral<extra>" + name + "</extra>"))
    culprits = np.flatnonzero(agg.outcome == 1)
    note = None
    if 0 < len(culprits) <= max_points:
        offsets = agg.table.column("offset").take(pa.array(culprits)).to_numpy()
        row_of_batch = _partition_rows(agg, spans.partitions)
        fig.add_trace(go.Scattergl(
            x=offsets, y=row_of_batch[agg.batch_id[culprits]], mode="markers",
            name="rejected records", marker={"color": "#222222", "size": 4, "symbol": "line-ns",
                                             "line": {"width": 1, "color": "#222222"}},
            hovertemplate="offset %{x:,}<extra>rejected record</extra>"))
    elif len(culprits):
        note = f"{len(culprits):,} rejected records: zoom shows spans, points above " \
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


def _partition_rows(agg: Aggregates, partitions: list[str]) -> np.ndarray:
    """Per batch: the row of its partition in ``partitions``."""
    import pyarrow.compute as pc

    first = agg.batch_rows["first_row"]
    t = agg.table
    label = pc.binary_join_element_wise(
        pc.cast(t.column("topic").take(pa.array(first)), pa.string()), "-",
        pc.cast(t.column("partition").take(pa.array(first)), pa.string()), "")
    return pc.index_in(label, value_set=pa.array(partitions, pa.string())).to_numpy(
        zero_copy_only=False).astype(np.int64)


# -- timeline ------------------------------------------------------------------------------------
def rejection_timeline(verdicts: Any, *, bucket_ms: int | None = None, max_buckets: int = 300,
                       max_reasons: int = 8) -> go.Figure:
    """Rejection rate per time bucket (record timestamps), stacked by reason, with collateral
    on top: the share of each bucket's records that production would have refused.

    ``bucket_ms=None`` picks a round bucket giving at most ``max_buckets`` buckets.  Accepts
    a :class:`~kqlab.spark.verdicts.SparkVerdicts` (the bucket is chosen the same way, from
    Spark aggregations).
    """
    if hasattr(verdicts, "record_files"):
        bucket_ms = bucket_ms or _spark_bucket(verdicts, max_buckets)
        table, bucket_ms = _spark_timeline(verdicts, bucket_ms, max_reasons)
    else:
        table, bucket_ms = aggregates(verdicts).timeline(bucket_ms, max_buckets, max_reasons)
    cols = table.to_pydict()
    x = np.asarray(cols.pop("bucket"), dtype="datetime64[ms]")
    total = np.maximum(np.asarray(cols.pop("total"), dtype=np.float64), 1)
    fig = _figure()
    for j, (name, counts) in enumerate(cols.items()):
        color = COLORS["collateral"] if name == "collateral" else "#555555" if name == "other" \
            else _color(j)
        rate = 100 * np.asarray(counts, dtype=np.float64) / total
        fig.add_trace(go.Scatter(x=x, y=rate, name=name, mode="lines", stackgroup="rate",
                                 line={"width": 0.5, "color": color},
                                 customdata=np.asarray(counts),
                                 hovertemplate="%{y:.2f} % (%{customdata:,} records)<extra>"
                                 + name + "</extra>"))
    fig.update_layout(**_STYLE, hovermode="x unified",
                      title=_title("Rejection rate over time",
                                   f"share of records per {_duration(bucket_ms)} bucket, "
                                   "by reason"),
                      yaxis={"title": "% of records", "rangemode": "tozero"},
                      xaxis={"title": "record timestamp"}, height=380)
    return fig


def _duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


#: up to this many records the Spark timeline's bucket comes from exact percentiles (the
#: local engine's, so both draw the same figure); above, from approximate ones (bounded memory)
EXACT_PERCENTILE_RECORDS = 5_000_000


def _spark_bucket(sv: Any, max_buckets: int) -> int:
    """:meth:`Aggregates.timeline`'s bucket choice as Spark aggregations: a round bucket for
    the 0.1–99.9 % timestamp range, the full range when that leaves too many buckets."""
    from pyspark.sql import functions as sf

    from kqlab.viz._aggregate import nice_bucket

    ts = sv.records.select("timestamp")
    if sv.n_records <= EXACT_PERCENTILE_RECORDS:  # linear interpolation, as numpy's default
        q = sf.percentile("timestamp", sf.array(sf.lit(0.001), sf.lit(0.999)))
    else:
        q = sf.percentile_approx("timestamp", sf.array(sf.lit(0.001), sf.lit(0.999)), 100_000)
    row = ts.agg(q.alias("q"), sf.min("timestamp").alias("lo"),
                 sf.max("timestamp").alias("hi")).first()
    if row is None or row["q"] is None:
        return 60_000
    lo, hi = (int(v) for v in row["q"])
    bucket_ms = nice_bucket(hi - lo, max_buckets)
    n = ts.select(sf.expr(f"timestamp div {bucket_ms}").alias("b")).distinct().count()
    if n > 2 * max_buckets:
        bucket_ms = nice_bucket(int(row["hi"]) - int(row["lo"]), max_buckets)
    return bucket_ms


def _spark_timeline(sv: Any, bucket_ms: int, max_reasons: int) -> tuple[pa.Table, int]:
    """:meth:`Aggregates.timeline` as Spark aggregations (culprits by their first enforced
    failure; collateral as one series)."""
    from pyspark.sql import functions as sf

    df = sv.records.select(
        (sf.expr(f"timestamp div {int(bucket_ms)}") * int(bucket_ms)).alias("bucket"),
        "outcome", sf.expr("get(filter(failures, f -> f.code != 0), 0).rule").alias("reason"))
    rows = df.groupBy("bucket", "outcome", "reason").count().collect()
    buckets = sorted({r["bucket"] for r in rows})
    at = {b: i for i, b in enumerate(buckets)}
    totals = np.zeros(len(buckets), np.int64)
    per: dict[str, np.ndarray] = {}
    coll = np.zeros(len(buckets), np.int64)
    for r in rows:
        i = at[r["bucket"]]
        totals[i] += r["count"]
        if r["outcome"] == "rejected":
            per.setdefault(r["reason"] or "other", np.zeros(len(buckets), np.int64))[i] += \
                r["count"]
        elif r["outcome"] == "collateral":
            coll[i] += r["count"]
    ranked = sorted(per, key=lambda k: (k == "other", -int(per[k].sum()), k))
    cols: dict[str, Any] = {"bucket": pa.array(buckets, pa.int64()), "total": totals}
    other = np.zeros(len(buckets), np.int64)
    for k, name in enumerate(ranked):
        if k < max_reasons and name != "other":
            cols[name] = per[name]
        else:
            other += per[name]
    if other.any():
        cols["other"] = other
    if coll.any():
        cols["collateral"] = coll
    return pa.table(cols), bucket_ms


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


def by_producer(verdicts: Any, sample: Any = None, *, limit: int = 20) -> go.Figure:
    """Records per outcome for each producer (id, and epoch when the sample's exact batches
    say it): a bad deploy of one producer stands out.  Reconstructed framing has no producer
    ids (a consumer never sees them): the subtitle says so.

    Accepts a :class:`~kqlab.spark.verdicts.SparkVerdicts` (producer ids without epochs:
    the same figure as the local verdicts without a sample), aggregated by Spark.
    """
    if hasattr(verdicts, "record_files"):
        counts, labels = _spark_producer_counts(verdicts)
        note = None if verdicts.framing == "exact" else \
            f"framing {verdicts.framing}: batches were rebuilt, the producer ids are unknown"
        return _outcome_bars(group_table(counts, labels, limit), "Records by producer", note,
                             "producer")
    agg = aggregates(verdicts, sample)
    codes, labels, exact = agg.producers()
    note = None if exact else f"framing {agg.verdicts.framing}: batches were rebuilt, the " \
                              "producer ids are unknown"
    return _outcome_bars(agg.by_group(codes, labels, limit), "Records by producer", note,
                         "producer")


def _spark_producer_counts(sv: Any) -> tuple[np.ndarray, list[str]]:
    """Records per outcome per producer label, as :meth:`Aggregates.producers` labels them:
    each record joined to its batch's verdict on (unit, topic, partition, batch offset), the
    first such batch winning."""
    from pyspark.sql import functions as sf

    keys = ["unit", "topic", "partition", "batch_offset"]
    batches = (sv.raw_batches.groupBy(*keys)
               .agg(sf.min_by("producer_id", "seq").alias("producer_id"))
               .withColumn("matched", sf.lit(True)))
    rows = (sv.raw_records.select(*keys, "outcome").join(batches, keys, "left")
            .groupBy("producer_id", "matched", "outcome").count().collect())
    acc: dict[str, np.ndarray] = {}
    for r in rows:
        pid = r["producer_id"]
        label = "unknown batch" if not r["matched"] else \
            "no producer id" if pid is None or pid < 0 else f"pid {pid}"
        acc.setdefault(label, np.zeros(4, np.int64))[OUTCOME_CODES.index(r["outcome"])] += \
            r["count"]
    labels = sorted(acc)
    return (np.array([acc[k] for k in labels], np.int64).reshape(len(labels), 4), labels)


def by_schema_id(verdicts: Any, sample: Any, *, limit: int = 20) -> go.Figure:
    """Records per outcome for each schema id in the values' Confluent wire header (and the
    values without one): a misconfigured serializer's unknown id stands out."""
    agg = aggregates(verdicts, sample)
    codes, labels = agg.schema_ids()
    return _outcome_bars(agg.by_group(codes, labels, limit), "Records by schema id", None,
                         "value schema")


def by_key_pattern(verdicts: Any, sample: Any, *, policy: Any = None, limit: int = 20,
                   unmask: bool | None = None) -> go.Figure:
    """Records per outcome for each key *pattern* (digits as 9, UUIDs as ``<uuid>``): which
    kinds of keys get rejected.  When the policy marks keys sensitive, letters are masked too
    (``a``/``A``), so no key text reaches the figure."""
    agg = aggregates(verdicts, sample)
    hide = masker(policy, unmask).key
    codes, labels = agg.key_patterns(letters=hide)
    note = "keys are sensitive: letters masked" if hide else None
    return _outcome_bars(agg.by_group(codes, labels, limit), "Records by key pattern", note,
                         "key pattern")
