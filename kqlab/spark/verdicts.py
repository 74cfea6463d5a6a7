"""Verdicts of a Spark replay: DataFrames on Parquet, summaries by Spark aggregation.

:class:`SparkVerdicts` is a :class:`~kqlab.validate.view.VerdictsView` like the local
engine's :class:`~kqlab.validate.verdicts.Verdicts`, with the same answers (``summary()`` is
the same dict, the views' tables are equal), but it never collects record rows to the driver
for them: every count and aggregate is a Spark aggregation (:mod:`kqlab.spark.aggregates`),
and the explorer's pages, examples and record lookups are bounded collects.
:meth:`to_local` collects everything into a local ``Verdicts`` (for parity checks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from kqlab.errors import KqlabError
from kqlab.spark import aggregates as agg
from kqlab.validate.verdicts import (
    OUTCOMES,
    RECORD_VERDICTS_SCHEMA,
    REPLAY_BATCHES_SCHEMA,
    Verdicts,
)
from kqlab.validate.view import (
    OutcomeGroups,
    RecordLookup,
    RecordPage,
    RecordQuery,
    RecordReasons,
    Spans,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.types import StructType

    from kqlab.policy.model import Policy


class TooLargeToCollect(KqlabError):
    """``to_local()`` was asked to collect more rows than its ``max_records`` allows."""


def _struct_type(schema: pa.Schema) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _read(spark: SparkSession, files: list[str], schema: pa.Schema) -> DataFrame:
    """The verdict files as one DataFrame (an empty one of that shape when there are none)."""
    if not files:
        return spark.createDataFrame([], _struct_type(schema))
    return spark.read.schema(_struct_type(schema)).parquet(*files)


def _read_local(files: list[str], out: str, schema: pa.Schema) -> pa.Table:
    """The files in order, read with pyarrow (``to_local``: no Spark job, exact row order)."""
    import pyarrow.parquet as pq

    from kqlab.spark.outputs import filesystem

    fs, _ = filesystem(out)
    names = schema.names[2:]
    tables = [pq.read_table(f.split("://", 1)[-1] if "://" in f else f, filesystem=fs,
                            columns=names) for f in files]
    target = pa.schema(list(schema)[2:])
    if not tables:
        return target.empty_table()
    return pa.concat_tables(tables).cast(target)


@dataclass
class SparkVerdicts:
    """The outcome of a Spark replay (see the module doc); ``path`` holds its Parquet files
    (``records/`` and ``batches/``, one file per unit, with ``unit`` and ``seq`` columns
    before the contract's so the log order can be restored)."""

    #: which engine produced the verdicts: for display only (views never branch on it)
    engine: ClassVar[str] = "spark"
    spark: SparkSession
    path: str
    record_files: list[str]
    batch_files: list[str]
    rules: pa.Table
    profile: str
    framing: str
    now: int
    policy_name: str | None = None
    policy_hash: str | None = None
    issues: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: units that could not be replayed: topic, partition, path, error, message
    errors: list[dict[str, Any]] = field(default_factory=list)
    units: int = 0
    seconds: float = 0.0
    n_records: int = 0
    n_batches: int = 0
    #: where ``now`` came from: ``given``, ``sample`` (the sample's own clock, as the local
    #: engine reads it) or ``wall clock`` (the sample has no timestamps)
    clock: str = "given"
    #: the policy's sample checks, as the engine judged them (None: not computed; the Spark
    #: engine's partial aggregates feed kqlab.validate.sample_checks.finish_check)
    check_results: Any = field(default=None, repr=False)
    _counts: list[Row] | None = field(default=None, repr=False)
    _bcounts: list[Row] | None = field(default=None, repr=False)
    _matches: dict[RecordQuery, int] = field(default_factory=dict, repr=False)

    @property
    def raw_records(self) -> DataFrame:
        """Record verdicts with ``unit`` and ``seq`` (a DataFrame)."""
        from kqlab.spark.executor import RECORD_FILE_SCHEMA

        return _read(self.spark, self.record_files, RECORD_FILE_SCHEMA)

    @property
    def raw_batches(self) -> DataFrame:
        """Batch verdicts with ``unit`` and ``seq`` (a DataFrame)."""
        from kqlab.spark.executor import BATCH_FILE_SCHEMA

        return _read(self.spark, self.batch_files, BATCH_FILE_SCHEMA)

    @property
    def records(self) -> DataFrame:
        """Record verdicts (a DataFrame with the columns of ``RECORD_VERDICTS_SCHEMA``)."""
        return self.raw_records.select(*RECORD_VERDICTS_SCHEMA.names)

    @property
    def batches(self) -> DataFrame:
        """Batch verdicts (a DataFrame with the columns of ``REPLAY_BATCHES_SCHEMA``)."""
        return self.raw_batches.select(*REPLAY_BATCHES_SCHEMA.names)

    # -- summaries: Spark aggregations, small results --------------------------------------
    def _record_counts(self) -> list[Row]:
        """Records per (topic, partition, outcome): one small aggregation, kept."""
        if self._counts is None:
            self._counts = self.records.groupBy("topic", "partition", "outcome").count() \
                .collect()
        return self._counts

    def _batch_counts(self) -> list[Row]:
        """Batches per (error, producer, action, rejected?): one small aggregation, kept."""
        from pyspark.sql import functions as sf

        if self._bcounts is None:
            self._bcounts = self.batches.groupBy(
                "error_name", "producer_id", "producer_action",
                (sf.col("error_code") != 0).alias("rej")).agg(
                sf.count(sf.lit(1)).alias("n"), sf.count("record_count").alias("n_rc"),
                sf.sum("record_count").alias("s_rc")).collect()
        return self._bcounts

    def checks(self) -> pa.Table:
        """The sample checks' results (``CHECK_RESULTS_SCHEMA``; empty: none computed)."""
        from kqlab.validate.sample_checks import empty_check_results

        return (self.check_results or empty_check_results()).results

    def check_windows(self, check: str | None = None) -> pa.Table:
        """Every judged window of the sample checks (of ``check``)."""
        import pyarrow.compute as pc

        from kqlab.validate.sample_checks import empty_check_results

        windows = (self.check_results or empty_check_results()).windows
        return windows if check is None else windows.filter(
            pc.equal(windows.column("check"), check))

    def by_outcome(self) -> dict[str, int]:
        """Records per outcome (as :meth:`Verdicts.by_outcome`)."""
        counts = dict.fromkeys(OUTCOMES, 0)
        for row in self._record_counts():
            counts[row["outcome"]] = counts.get(row["outcome"], 0) + row["count"]
        return counts

    def by_error(self) -> dict[str, dict[str, int]]:
        """Per broker error name: batches and records."""
        out: dict[str, dict[str, int]] = {}
        for r in self._batch_counts():
            e = out.setdefault(r["error_name"], {"batches": 0, "records": 0})
            e["batches"] += r["n_rc"]
            e["records"] += r["s_rc"] or 0
        return out

    def by_partition(self) -> pa.Table:
        """Per topic-partition: records by outcome."""
        rows = self._record_counts()
        outcomes = list(OUTCOMES)
        if any(r["outcome"] == "undetermined" for r in rows):
            outcomes.append("undetermined")
        table: dict[tuple[str, int], dict[str, int]] = {}
        for r in rows:
            table.setdefault((r["topic"], r["partition"]), dict.fromkeys(outcomes, 0))[
                r["outcome"]] += r["count"]
        keys = sorted(table)
        return pa.table({"topic": pa.array([k[0] for k in keys], pa.string()),
                         "partition": pa.array([k[1] for k in keys], pa.int32()),
                         **{o: pa.array([table[k][o] for k in keys], pa.int64())
                            for o in outcomes}})

    def _pivot(self, df: DataFrame, keys: list[str], key_types: list[pa.DataType]) -> pa.Table:
        from pyspark.sql import functions as sf

        outcomes = list(OUTCOMES)
        if self.by_outcome().get("undetermined"):
            outcomes.append("undetermined")
        agg = [sf.sum(sf.when(sf.col("outcome") == o, 1).otherwise(0)).cast("long").alias(o)
               for o in outcomes]
        t = df.groupBy(*keys).agg(*agg).orderBy(*keys).toArrow()
        schema = pa.schema([*zip(keys, key_types, strict=True),
                            *((o, pa.int64()) for o in outcomes)])
        return pa.table([t.column(f.name).cast(f.type) for f in schema], schema=schema)

    def by_time(self, bucket_ms: int = 60_000) -> pa.Table:
        """Per time bucket (record timestamp floored to ``bucket_ms``): records by outcome."""
        from pyspark.sql import functions as sf

        bucket = (sf.expr(f"timestamp div {int(bucket_ms)}") * int(bucket_ms)).alias("bucket")
        return self._pivot(self.records.select(bucket, "outcome"), ["bucket"], [pa.int64()])

    def by_producer(self) -> pa.Table:
        """Per producer id: batches, rejected batches, and records."""
        acc: dict[int | None, list[Any]] = {}
        for r in self._batch_counts():
            a = acc.setdefault(r["producer_id"], [0, None, None])
            a[0] += r["n_rc"]
            if r["rej"] is not None:  # null codes (undetermined) count as Arrow's sum does
                a[1] = (a[1] or 0) + (r["n"] if r["rej"] else 0)
            if r["s_rc"] is not None:
                a[2] = (a[2] or 0) + r["s_rc"]
        keys = sorted(acc, key=lambda k: (k is None, k))
        return pa.table({"producer_id": pa.array(keys, pa.int64()),
                         "batches": pa.array([acc[k][0] for k in keys], pa.int64()),
                         "rejected_batches": pa.array([acc[k][1] for k in keys], pa.int64()),
                         "records": pa.array([acc[k][2] for k in keys], pa.int64())})

    def by_action(self) -> dict[str, int]:
        """Records per producer action (appended, duplicate, retried, split, failed)."""
        out: dict[str, int] = {}
        for r in self._batch_counts():
            out[r["producer_action"]] = out.get(r["producer_action"], 0) + (r["s_rc"] or 0)
        return out

    def count(self) -> tuple[int, int]:
        """``(records, batches)`` (known from the tasks' reports: no Spark job)."""
        return self.n_records, self.n_batches

    # -- the views: Spark aggregations (kqlab.spark.aggregates) -----------------------------
    def by_reason(self) -> pa.Table:
        """The reasons table (see :mod:`kqlab.validate.view`)."""
        return agg.by_reason(self)

    def spans(self, max_spans: int = 2000, max_points: int = 0) -> Spans:
        """The partition × offset spans (see :class:`~kqlab.validate.view.Spans`)."""
        return agg.spans(self, max_spans, max_points)

    def timeline(self, bucket_ms: int | None = None, max_buckets: int = 300,
                 max_reasons: int = 8) -> tuple[pa.Table, int]:
        """Records per bucket and top reason, and the bucket size."""
        return agg.timeline(self, bucket_ms, max_buckets, max_reasons)

    def producer_outcomes(self, sample_batches: pa.Table | None = None) -> OutcomeGroups:
        """Records per outcome per producer."""
        return agg.producer_outcomes(self, sample_batches)

    def record_reasons(self) -> RecordReasons:
        """Per record: coordinates, outcome and reason (collected: four columns a record)."""
        return agg.record_reasons(self)

    def top_failures(self, limit: int = 50, masked: Mapping[str, str] | None = None
                     ) -> pa.Table:
        """The most frequent failures."""
        return agg.top_failures(self, limit, masked)

    def find(self, query: RecordQuery, start: int = 0, limit: int = 20) -> RecordPage:
        """A page of the refused records matching ``query`` (the count is kept per query)."""
        page = agg.find(self, query, start, limit, self._matches.get(query.unordered()))
        self._matches[query.unordered()] = page.matches
        return page

    def lookup(self, partition: int, offset: int, topic: str | None = None
               ) -> RecordLookup | None:
        """The verdicts of one record and its batch."""
        return agg.lookup(self, partition, offset, topic)

    def examples(self, rule: str | None = None, limit: int = 10) -> pa.Table:
        """Up to ``limit`` failing records per rule (or of ``rule``), for the UI: the record
        verdict columns plus ``example_rule``; a bounded collect whatever the sample size."""
        from pyspark.sql import Window
        from pyspark.sql import functions as sf

        exploded = self.raw_records.select(
            "unit", "seq", *RECORD_VERDICTS_SCHEMA.names,
            sf.explode("failures").alias("f")).select(
            "unit", "seq", *RECORD_VERDICTS_SCHEMA.names, sf.col("f.rule").alias("example_rule"))
        exploded = exploded.filter(sf.col("example_rule").isNotNull())
        if rule is not None:
            exploded = exploded.filter(sf.col("example_rule") == rule)
        w = Window.partitionBy("example_rule").orderBy("unit", "seq")
        t = (exploded.dropDuplicates(["unit", "seq", "example_rule"])
             .withColumn("n", sf.row_number().over(w)).filter(sf.col("n") <= int(limit))
             .orderBy("example_rule", "unit", "seq").drop("n", "unit", "seq").toArrow())
        schema = pa.schema([*RECORD_VERDICTS_SCHEMA, ("example_rule", pa.string())])
        return pa.table([t.column(f.name).cast(f.type) for f in schema], schema=schema)

    def vet(self, policy: Policy, *, source: str | None = None, today: str | None = None
            ) -> Policy:
        """``policy`` with its provenance (as :meth:`Verdicts.vet`)."""
        from pyspark.sql import functions as sf

        from kqlab.validate.verdicts import vetted

        parts = [{"topic": r["topic"], "partition": r["partition"],
                  "offsets": [r["lo"], r["hi"]]}
                 for r in self.records.groupBy("topic", "partition").agg(
                     sf.min("offset").alias("lo"), sf.max("offset").alias("hi"))
                 .orderBy("topic", "partition").collect()]
        n_records, n_batches = self.count()
        return vetted(policy, framing=self.framing, now=self.now, profile=self.profile,
                      partitions=parts, records=n_records, batches=n_batches,
                      rejected=self.by_outcome()["rejected"], source=source, today=today)

    def summary(self) -> dict[str, Any]:
        """The local engine's summary dict, computed by Spark (plus ``engine``, ``units``,
        ``errors`` and ``out``)."""
        from kqlab.validate.verdicts import summary_of

        return {**summary_of(self, *self.count()),
                "engine": self.engine, "units": self.units, "errors": self.errors,
                "out": self.path, "seconds": round(self.seconds, 3)}

    def to_local(self, max_records: int | None = 5_000_000) -> Verdicts:
        """Collect into a local :class:`~kqlab.validate.verdicts.Verdicts` (records in
        partition order, then log order); refuses more than ``max_records`` records."""
        if max_records is not None and self.n_records > max_records:
            raise TooLargeToCollect(f"{self.n_records:,} record verdicts exceed max_records="
                                    f"{max_records:,}: use the DataFrames and summaries, or "
                                    "pass max_records=None")
        from kqlab.spark.executor import BATCH_FILE_SCHEMA, RECORD_FILE_SCHEMA

        local = Verdicts(_read_local(self.record_files, self.path, RECORD_FILE_SCHEMA),
                         _read_local(self.batch_files, self.path, BATCH_FILE_SCHEMA),
                         self.rules, self.profile, self.framing, self.now, self.policy_name,
                         self.policy_hash, list(self.issues), list(self.notes))
        local.check_results = self.check_results  # judged once, by the engine
        return local

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """In a notebook: the kqlab MIME payload beside its HTML fallback (the local
        verdicts' display, counted by Spark)."""
        from kqlab.validate import mime

        payload = mime.replay_payload(self)
        return mime.bundle(payload, mime.replay_text(payload))

    def __repr__(self) -> str:
        return (f"SparkVerdicts({self.path!r}, units={self.units}, policy={self.policy_name!r}, "
                f"framing={self.framing!r}, errors={len(self.errors)})")
