"""The Spark engine's side of :class:`~kqlab.validate.view.VerdictsView`: every aggregate as
Spark aggregations over the verdict Parquet files, only small results collected.

Each function answers exactly what :class:`~kqlab.validate.aggregates.LocalAggregates`
answers for the same verdicts (the engines' views are compared figure by figure and the
report byte for byte).  Log order is (``unit``, ``seq``): a unit is a topic-partition, ``seq``
a row's place in it.  A batch is a run of records with the same (topic, partition, batch
offset) within a unit, as the local engine numbers batches in record order.

A record's *reason* is its first enforced failure (code != 0); a collateral record's reason
is its batch's: the reason of the batch's first culprit (rejected record with a reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from kqlab.validate.view import (
    OUTCOME_CODES,
    REASONS_SCHEMA,
    TOP_FAILURES_SCHEMA,
    OutcomeGroups,
    RecordLookup,
    RecordPage,
    RecordQuery,
    RecordReasons,
    Spans,
    coarsen_spans,
    empty_spans,
    nice_bucket,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession


class SparkFrames(Protocol):
    """What the aggregations read of a Spark replay's verdicts (``SparkVerdicts`` is one):
    the verdict DataFrames and a few counts, so this module stays below the verdicts class."""

    spark: SparkSession
    framing: str
    n_records: int
    n_batches: int

    @property
    def raw_records(self) -> DataFrame: ...

    @property
    def raw_batches(self) -> DataFrame: ...

    @property
    def records(self) -> DataFrame: ...

    def by_outcome(self) -> dict[str, int]: ...

#: up to this many records the timeline's bucket comes from exact percentiles (the local
#: engine's, so both draw the same figure); above, from approximate ones (bounded memory)
EXACT_PERCENTILE_RECORDS = 5_000_000
#: what a failure without a rule id is shown as (the local engine's label)
UNNAMED = "(unnamed)"
#: the first enforced failure's rule of a record (null: none)
_OWN = ("CASE WHEN size(filter(failures, f -> coalesce(f.code, 0) != 0)) > 0 THEN "
        f"coalesce(filter(failures, f -> coalesce(f.code, 0) != 0)[0].rule, '{UNNAMED}') END")


def _label() -> Column:
    """``topic-partition``, as the views label a partition."""
    from pyspark.sql import functions as sf

    return sf.concat(sf.col("topic"), sf.lit("-"), sf.col("partition").cast("string"))


def reasoned(sv: SparkFrames) -> DataFrame:
    """Per record: unit, seq, topic, partition, offset, timestamp, outcome, ``batch`` (its run
    number within the unit) and ``reason`` (null for accepted records and rejections without
    an enforced failure)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    w = Window.partitionBy("unit").orderBy("seq")
    key = sf.struct("topic", "partition", "batch_offset")
    df = sv.raw_records.select(
        "unit", "seq", "topic", "partition", "offset", "timestamp", "outcome",
        sf.expr(_OWN).alias("own"),
        sf.when(sf.lag(key).over(w).eqNullSafe(key), 0).otherwise(1).alias("new"))
    df = df.withColumn("batch", sf.sum("new").over(
        w.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    culprit = sf.when((sf.col("outcome") == "rejected") & sf.col("own").isNotNull(),
                      sf.struct("seq", sf.col("own").alias("r")))
    first_culprit = sf.min(culprit).over(Window.partitionBy("unit", "batch"))["r"]
    reason = (sf.when(sf.col("outcome") == "accepted", sf.lit(None).cast("string"))
              .when(sf.col("outcome") == "collateral", first_culprit)
              .otherwise(sf.col("own")))
    return df.select("unit", "seq", "topic", "partition", "offset", "timestamp", "outcome",
                     "batch", reason.alias("reason"))


def reason_labels(sv: SparkFrames) -> list[str]:
    """Every rule or check among the failures, in order of first appearance (log order, then
    place in the record's failures): the local engine's label order."""
    from pyspark.sql import functions as sf

    rows = (sv.raw_records.select("unit", "seq", sf.posexplode("failures").alias("i", "f"))
            .groupBy(sf.coalesce(sf.col("f.rule"), sf.lit(UNNAMED)).alias("rule"))
            .agg(sf.min(sf.struct("unit", "seq", "i")).alias("at")).collect())
    return [r["rule"] for r in sorted(rows, key=lambda r: tuple(r["at"]))]


def by_reason(sv: SparkFrames) -> pa.Table:
    """The reasons table: culprits per enforced rule (distinct records), failures not
    enforced, collateral records per batch reason; ordered as the local engine orders it."""
    from pyspark.sql import functions as sf

    flat = sv.raw_records.select("unit", "seq", sf.explode("failures").alias("f")).select(
        "unit", "seq", sf.coalesce(sf.col("f.rule"), sf.lit(UNNAMED)).alias("rule"),
        sf.coalesce(sf.col("f.code"), sf.lit(0)).alias("code"))
    rows = flat.groupBy("rule").agg(
        sf.countDistinct(sf.when(sf.col("code") != 0, sf.struct("unit", "seq"))).alias("c"),
        sf.sum(sf.when(sf.col("code") == 0, 1).otherwise(0)).alias("o")).collect()
    culprit = {r["rule"]: int(r["c"]) for r in rows}
    observed = {r["rule"]: int(r["o"]) for r in rows}
    coll = reasoned(sv).filter((sf.col("outcome") == "collateral") &
                               sf.col("reason").isNotNull()).groupBy("reason").count().collect()
    collateral = {r["reason"]: int(r["count"]) for r in coll}
    names = sorted(set(culprit) | set(collateral),
                   key=lambda r: (-(culprit.get(r, 0) + collateral.get(r, 0)),
                                  -observed.get(r, 0), r))
    return pa.table({"reason": pa.array(names, pa.string()),
                     "culprit": pa.array([culprit.get(r, 0) for r in names], pa.int64()),
                     "collateral": pa.array([collateral.get(r, 0) for r in names], pa.int64()),
                     "not_enforced": pa.array([observed.get(r, 0) for r in names], pa.int64())},
                    schema=REASONS_SCHEMA)


def spans(sv: SparkFrames, max_spans: int = 2000, max_points: int = 0) -> Spans:
    """Runs of rejected batches per partition: batches and their runs found with window
    functions, one row per run collected (then coarsened like the local engine's)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    labels = reason_labels(sv)
    at = {name: i for i, name in enumerate(labels)}
    rs = reasoned(sv)
    charged = np.zeros(len(labels), np.int64)
    for r in rs.filter(sf.col("reason").isNotNull()).groupBy("reason").count().collect():
        charged[at[r["reason"]]] = r["count"]
    culprits = sv.by_outcome().get("rejected", 0)
    if not sv.n_records:
        return empty_spans([], np.zeros((0, 2), np.int64), labels, charged)
    rejected = sf.when(sf.col("outcome") == "rejected", 1).otherwise(0)
    collateral = sf.when(sf.col("outcome") == "collateral", 1).otherwise(0)
    culprit = sf.when((sf.col("outcome") == "rejected") & sf.col("reason").isNotNull(),
                      sf.struct("seq", "reason"))
    b = rs.groupBy("unit", "batch").agg(
        sf.min_by(_label(), "seq").alias("label"),
        sf.min_by("offset", "seq").alias("start"), sf.max_by("offset", "seq").alias("end"),
        sf.sum(rejected).alias("rejected"), sf.sum(collateral).alias("collateral"),
        sf.min(culprit)["reason"].alias("reason"))
    order = ["start", "unit", "batch"]
    b = b.withColumn("rank", sf.row_number().over(Window.partitionBy("label").orderBy(*order)))
    b = b.persist()
    try:
        extent_rows = b.groupBy("label").agg(sf.min("start").alias("lo"),
                                             sf.max("end").alias("hi")).collect()
        w = Window.partitionBy("label").orderBy(*order)
        bad = b.filter(sf.col("rejected") + sf.col("collateral") > 0)
        prev_rank, prev_reason = sf.lag("rank").over(w), sf.lag("reason").over(w)
        bad = bad.withColumn("new", sf.when(
            prev_rank.isNull() | (prev_rank + 1 != sf.col("rank")) |
            ~prev_reason.eqNullSafe(sf.col("reason")), 1).otherwise(0))
        bad = bad.withColumn("sid", sf.sum("new").over(
            w.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
        place = sf.struct(*order)
        runs = bad.groupBy("label", "sid").agg(
            sf.min(place).alias("first"), sf.max_by("end", place).alias("end"),
            sf.min_by("reason", place).alias("reason"), sf.count(sf.lit(1)).alias("batches"),
            sf.sum("rejected").alias("rejected"), sf.sum("collateral").alias("collateral"),
        ).select("label", sf.col("first.start").alias("start"), "end", "reason", "batches",
                 "rejected", "collateral", sf.col("first.unit").alias("unit"),
                 sf.col("first.batch").alias("batch")).toArrow()
    finally:
        b.unpersist()
    partitions = sorted(r["label"] for r in extent_rows)
    row_of = {name: i for i, name in enumerate(partitions)}
    extent = np.zeros((len(partitions), 2), np.int64)
    for r in extent_rows:
        extent[row_of[r["label"]]] = (r["lo"], r["hi"])
    points = None
    if 0 < culprits <= max_points:
        t = (sv.raw_records.filter(sf.col("outcome") == "rejected")
             .select(_label().alias("label"), "offset", "unit", "seq")
             .orderBy("unit", "seq").toArrow())
        points = (_ints(t, "offset"), np.array([row_of[x] for x in t.column("label").to_pylist()],
                                               np.int64))
    if not runs.num_rows:
        return empty_spans(partitions, extent, labels, charged, culprits, points)
    row = np.array([row_of[x] for x in runs.column("label").to_pylist()], np.int64)
    reason = np.array([-1 if x is None else at[x] for x in runs.column("reason").to_pylist()],
                      np.int64)
    start = _ints(runs, "start")
    sort = np.lexsort((_ints(runs, "batch"), _ints(runs, "unit"), start, row))
    found = {"row": row, "start": start, "end": _ints(runs, "end"), "reason": reason,
             "batches": _ints(runs, "batches"), "rejected": _ints(runs, "rejected"),
             "collateral": _ints(runs, "collateral")}
    found = {k: v[sort] for k, v in found.items()}
    merged = len(sort) > max_spans
    if merged:
        found = coarsen_spans(found, max_spans)
    return Spans(**found, partitions=partitions, extent=extent, merged=merged, labels=labels,
                 reason_records=charged, culprits=culprits, points=points)


def _ints(t: pa.Table, name: str) -> np.ndarray:
    return t.column(name).to_numpy(zero_copy_only=False).astype(np.int64)


def timeline_bucket(sv: SparkFrames, max_buckets: int) -> int:
    """The local engine's bucket choice as Spark aggregations: a round bucket for the
    0.1–99.9 % timestamp range, the full range when that leaves too many buckets."""
    from pyspark.sql import functions as sf

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


def timeline(sv: SparkFrames, bucket_ms: int | None = None, max_buckets: int = 300,
             max_reasons: int = 8) -> tuple[pa.Table, int]:
    """Records per bucket, rejected ones per top reason (by their first enforced failure,
    ties by name; the rest as ``other``), collateral as one series; and the bucket size."""
    from pyspark.sql import functions as sf

    if sv.n_records == 0:
        return pa.table({"bucket": pa.array([], pa.int64()),
                         "total": pa.array([], pa.int64())}), bucket_ms or 60_000
    bucket_ms = bucket_ms or timeline_bucket(sv, max_buckets)
    df = sv.records.select(
        (sf.expr(f"timestamp div {int(bucket_ms)}") * int(bucket_ms)).alias("bucket"),
        "outcome", sf.expr(_OWN).alias("reason"))
    rows = df.groupBy("bucket", "outcome", "reason").count().collect()
    buckets = sorted({r["bucket"] for r in rows})
    place = {b: i for i, b in enumerate(buckets)}
    totals = np.zeros(len(buckets), np.int64)
    per: dict[str | None, np.ndarray] = {}
    coll = np.zeros(len(buckets), np.int64)
    for r in rows:
        i = place[r["bucket"]]
        totals[i] += r["count"]
        if r["outcome"] == "rejected":
            per.setdefault(r["reason"], np.zeros(len(buckets), np.int64))[i] += r["count"]
        elif r["outcome"] == "collateral":
            coll[i] += r["count"]
    named = sorted((k for k in per if k is not None), key=lambda k: (-int(per[k].sum()), k))
    cols: dict[str, Any] = {"bucket": pa.array(buckets, pa.int64()), "total": totals}
    other = per.get(None, np.zeros(len(buckets), np.int64)).copy()
    for k, name in enumerate(named):
        if k < max_reasons:
            cols[name] = per[name]
        else:
            other += per[name]
    if other.any():
        cols["other"] = other
    if coll.any():
        cols["collateral"] = coll
    return pa.table(cols), bucket_ms


def producer_outcomes(sv: SparkFrames, sample_batches: pa.Table | None = None
                      ) -> OutcomeGroups:
    """Records per outcome per producer label (the local engine's labels): each record
    joined to its batch's verdict on (unit, topic, partition, batch offset), the first such
    batch winning; epochs from ``sample_batches`` (exact framing), matched on the batch
    coordinates."""
    from pyspark.sql import functions as sf

    keys = ["unit", "topic", "partition", "batch_offset"]
    batches = (sv.raw_batches.groupBy(*keys)
               .agg(sf.min_by("producer_id", "seq").alias("producer_id"))
               .withColumn("matched", sf.lit(True)))
    epoch = sf.lit(None).cast("string")
    if sv.framing == "exact" and sample_batches is not None and \
            "producer_epoch" in sample_batches.column_names and \
            sample_batches.num_rows == sv.n_batches:
        coords = ["topic", "partition", "batch_offset"]
        epochs = sv.spark.createDataFrame(
            sample_batches.select([*coords, "producer_epoch"]).to_pandas()).groupBy(
            *coords).agg(sf.first("producer_epoch").alias("producer_epoch"))
        batches = batches.join(epochs, coords, "left")
        epoch = sf.col("producer_epoch").cast("string")
    label = (sf.when(sf.col("matched").isNull(), sf.lit("unknown batch"))
             .when(sf.col("producer_id").isNull() | (sf.col("producer_id") < 0),
                   sf.lit("no producer id"))
             .when(epoch.isNull(), sf.concat(sf.lit("pid "), sf.col("producer_id")))
             .otherwise(sf.concat(sf.lit("pid "), sf.col("producer_id"), sf.lit(" · epoch "),
                                  epoch)))
    rows = (sv.raw_records.select(*keys, "outcome").join(batches, keys, "left")
            .groupBy(label.alias("label"), "outcome").count().collect())
    acc: dict[str, np.ndarray] = {}
    for r in rows:
        acc.setdefault(r["label"], np.zeros(4, np.int64))[
            OUTCOME_CODES.index(r["outcome"])] += r["count"]
    labels = sorted(acc)
    counts = np.array([acc[k] for k in labels], np.int64).reshape(len(labels), 4)
    return OutcomeGroups(labels, counts)


def record_reasons(sv: SparkFrames) -> RecordReasons:
    """Per record, in log order: coordinates, outcome code, reason code (one collect of four
    integer columns per record — the one record-level answer)."""
    import pyarrow.compute as pc

    labels = reason_labels(sv)
    t = (reasoned(sv).orderBy("unit", "seq")
         .select("topic", "partition", "offset", "outcome", "reason").toArrow())
    keys = pa.table([t.column("topic").cast(pa.string()), t.column("partition").cast(pa.int32()),
                     t.column("offset").cast(pa.int64())], names=["topic", "partition", "offset"])
    outcome = pc.fill_null(pc.index_in(t.column("outcome"), value_set=pa.array(OUTCOME_CODES)),
                           3).to_numpy(zero_copy_only=False).astype(np.int8)
    reason = pc.fill_null(pc.index_in(t.column("reason"),
                                      value_set=pa.array(labels, pa.string())), -1)
    return RecordReasons(keys, outcome, reason.to_numpy(zero_copy_only=False).astype(np.int64),
                         labels)


def top_failures(sv: SparkFrames, limit: int = 50, masked: Mapping[str, str] | None = None
                 ) -> pa.Table:
    """The most frequent (rule, code, message): one Spark aggregation, ``limit`` rows
    collected.  ``masked`` replaces a rule's messages before grouping (a CASE on the rule
    id); the example is the first record in log order."""
    from pyspark.sql import functions as sf

    f = sv.raw_records.select("unit", "seq", "topic", "partition", "offset",
                              sf.explode("failures").alias("f"))
    message = sf.col("f.message")
    replace = dict(masked or {})
    for rule in sorted(replace):
        message = sf.when(sf.col("f.rule") == rule, sf.lit(replace[rule])).otherwise(message)
    g = (f.select(sf.col("f.rule").alias("rule"), sf.col("f.code").alias("code"),
                  message.alias("message"),
                  sf.struct("unit", "seq", "topic", "partition", "offset").alias("at"))
         .groupBy("rule", "code", "message")
         .agg(sf.count(sf.lit(1)).alias("records"), sf.min("at").alias("at"))
         .orderBy(sf.desc("records"), "rule", "code", "message").limit(int(limit)))
    rows = g.collect()
    if not rows:
        return TOP_FAILURES_SCHEMA.empty_table()
    return pa.table({"rule": [r["rule"] for r in rows], "code": [r["code"] for r in rows],
                     "message": [r["message"] for r in rows],
                     "records": [r["records"] for r in rows],
                     "topic": [r["at"]["topic"] for r in rows],
                     "partition": [r["at"]["partition"] for r in rows],
                     "offset": [r["at"]["offset"] for r in rows]}, schema=TOP_FAILURES_SCHEMA)


def query_filter(query: RecordQuery) -> Column:
    """``query`` as a Spark condition over the record verdicts."""
    from pyspark.sql import functions as sf

    cond = (sf.col("outcome") == "collateral") if query.collateral else \
        (sf.col("outcome") != "accepted")
    if query.errors:  # the records a rule could not judge, whatever their outcome
        errored = sf.exists("failures", lambda f: (f["status"] == sf.lit("error")) & (
            f["rule"] == sf.lit(query.reason) if query.reason is not None else sf.lit(True)))
        cond = (cond & errored) if query.collateral else errored
    elif query.reason is not None and not query.collateral:
        cond = cond & sf.exists("failures", lambda f: f["rule"] == sf.lit(query.reason))
    if query.topic is not None:
        cond = cond & (sf.col("topic") == query.topic)
    if query.partition is not None:
        cond = cond & (sf.col("partition") == int(query.partition))
    for column, (lo, hi) in (("offset", query.offsets), ("timestamp", query.time)):
        if lo is not None:
            cond = cond & (sf.col(column) >= int(lo))
        if hi is not None:
            cond = cond & (sf.col(column) <= int(hi))
    return cond


def find(sv: SparkFrames, query: RecordQuery, start: int, limit: int,
         matches: int | None) -> RecordPage:
    """A page of the refused records matching ``query`` in its order (a filter, an ordered
    ``offset``/``limit``, and a count unless ``matches`` is known); ties in log order."""
    from pyspark.sql import functions as sf

    from kqlab.validate.verdicts import RECORD_VERDICTS_SCHEMA

    df = sv.raw_records.filter(query_filter(query))
    if matches is None:
        matches = df.count()
    log = [sf.col("unit"), sf.col("seq")]
    if query.order == "log":
        order = [c.desc() for c in log] if query.descending else log
    else:
        key = sf.col(query.order) if query.order != "outcome" else \
            sf.when(sf.col("outcome") == "rejected", 1).when(
                sf.col("outcome") == "collateral", 2).otherwise(3)
        order = [key.desc() if query.descending else key.asc(), *log]
    t = (df.orderBy(*order).offset(int(start)).limit(int(limit))
         .select(*RECORD_VERDICTS_SCHEMA.names).toArrow())
    rows = pa.table([t.column(f.name).cast(f.type) for f in RECORD_VERDICTS_SCHEMA],
                    schema=RECORD_VERDICTS_SCHEMA)
    return RecordPage(rows, matches)


def lookup(sv: SparkFrames, partition: int, offset: int, topic: str | None = None
           ) -> RecordLookup | None:
    """One record's verdict (the first in log order at these coordinates), its batch's
    verdict and the failures of its batch: three filtered collects of a few rows."""
    from pyspark.sql import functions as sf

    from kqlab.validate.verdicts import RECORD_VERDICTS_SCHEMA, REPLAY_BATCHES_SCHEMA

    cond = (sf.col("partition") == int(partition)) & (sf.col("offset") == int(offset))
    if topic is not None:
        cond = cond & (sf.col("topic") == topic)
    found = sv.raw_records.filter(cond).orderBy("unit", "seq").limit(1).collect()
    if not found:
        return None
    record = {k: _plain(found[0][k]) for k in RECORD_VERDICTS_SCHEMA.names}
    where = ((sf.col("topic") == record["topic"]) &
             (sf.col("partition") == record["partition"]) &
             (sf.col("batch_offset") == record["batch_offset"]))
    batch_rows = sv.raw_batches.filter(where).orderBy("unit", "seq").limit(1).collect()
    batch = {k: _plain(batch_rows[0][k]) for k in REPLAY_BATCHES_SCHEMA.names} \
        if batch_rows else None
    failures = sv.raw_records.filter(where).select(
        sf.explode("failures").alias("f")).select("f.*").collect()
    return RecordLookup(record, batch, [_plain(f) for f in failures])


def _plain(value: Any) -> Any:
    """A collected Spark value as Arrow's ``to_pylist`` gives it: structs (Rows) as dicts,
    maps as lists of (key, value) pairs."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return [(k, _plain(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
