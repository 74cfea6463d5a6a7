"""The streaming replay: a policy applied to a live Kafka stream on Spark Structured Streaming,
each micro-batch judged by the verdict core.

::

    from kqlab.spark.streaming import StreamingReplay
    run = StreamingReplay(spark, policy, {"kafka.bootstrap.servers": "broker:9092",
                                          "subscribe": "orders"},
                          checkpoint="ckpt/orders", until="latest").start()
    run.view()              # a table in the notebook, one row per micro-batch as it arrives
    run.wait()              # until the stop condition (end offsets or a record budget)
    run.verdicts()          # SparkVerdicts over every micro-batch's verdict files

**The query.**  ``format("kqlab-kafka")`` with ``rows=raw``
(:mod:`kqlab.spark.kafka_source`) gives, per micro-batch and topic-partition, the bytes of the
batches whose last offset the micro-batch read; a ``mapInArrow`` task decodes them with
kqlab's codec and judges them with :class:`~kqlab.validate.replayer.Replayer` — the local
engine's code — exactly as :func:`kqlab.validate.stream.replay_stream` judges a chunk: the
partition's :class:`~kqlab.kafka.validator.PartitionValidator` (producer state, next offset)
carries from micro-batch to micro-batch (``broker_verdicts(validator=...)``).  The task writes
the micro-batch's record and batch verdicts as Parquet (as the batch engine's tasks do) and
returns one small row; ``Dataset.observe`` sums those rows, so every micro-batch's counts by
outcome and rule reach the driver in the query's progress, where a
:class:`~pyspark.sql.streaming.StreamingQueryListener` hands them to :class:`StreamingReplay`
(and its notebook view) together with the lag.

**State across micro-batches.**  A Spark task keeps nothing between micro-batches, so each
partition's validator is stored after every micro-batch under the checkpoint
(``<checkpoint>/kqlab/state/<topic>/<partition>/<offset>.pickle``, keyed by the offset the
next micro-batch starts at) and read back by the task that judges the next one.  The key is
the offset, not the batch id: a micro-batch Spark runs again after a restart (same offsets, from
its write-ahead log) reads the same state and rewrites the same files, so a restart changes
no verdict.  Older states are deleted once a newer one is written.

**Where a micro-batch boundary differs from one replay of the same offsets** (and where it
does not): producer state and offsets carry over, so batch verdicts are the same; a batch is
judged whole, in the micro-batch that read its last offset (a batch that straddles a boundary
waits for the next micro-batch); rules see one micro-batch at a time, which changes nothing for
the built-in rule kinds (each judges a record alone) but would for a plugin that compares
records; ``now`` is fixed when given, else the wall clock when each micro-batch is judged
(a whole-sample replay defaults to the sample's own clock instead); a first batch that starts
before the starting offset is judged whole, with the records before that offset (the broker
judged it whole; a sample cut there cannot be replayed exactly at all).  Batches are judged
from their decoded tables, as a live sample is judged locally (``raw`` bytes are not handed to
the byte-level validator), so rows the tables cannot decide are ``undetermined`` on both.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.errors import KqlabError

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.policy.model import Policy
    from kqlab.spark.verdicts import SparkVerdicts

__all__ = [
    "BATCH_SCHEMA",
    "MicroBatch",
    "ReplayJob",
    "StreamingReplay",
    "StreamingReplayError",
    "judge_raw",
]

#: what a judging task returns: one row per topic-partition range of a micro-batch
BATCH_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()),
    ("range_start", pa.int64()), ("range_end", pa.int64()),
    ("records", pa.int64()), ("batches", pa.int64()),
    ("accepted", pa.int64()), ("rejected", pa.int64()), ("collateral", pa.int64()),
    ("rejected_batches", pa.int64()), ("undetermined", pa.int64()),
    ("by_rule", pa.string()),   # JSON {rule: records it failed with a rejecting code}
    ("observed", pa.string()),  # JSON {rule: records an observe-mode rule failed}
    ("rules", pa.string()),     # JSON: the replay's rule rows (failed/rejected counts)
])
#: the name of the observed metrics in the query's progress
METRICS = "kqlab_replay"


class StreamingReplayError(KqlabError):
    """The streaming replay cannot run as asked, or its query failed."""


@dataclass(frozen=True)
class ReplayJob:
    """Everything a judging task needs (pickled once into the task closure)."""

    policy: Any          # the policy as given (the replay adds the implicit rules)
    profile: str
    now: int | None      # None: the wall clock per micro-batch
    resolver: Any        # a portable schema resolver, or None
    location: str        # <checkpoint>/kqlab: state/ and verdicts/ under it
    units: dict[str, int]  # "topic\0partition" -> unit number (the verdict files' order)


# -- the task ------------------------------------------------------------------------------
def _fs(location: str) -> tuple[Any, str]:
    from kqlab.spark.outputs import filesystem

    return filesystem(location)


def state_dir(base: str, topic: str, partition: int) -> str:
    return f"{base}/state/{topic}/{partition}"


def load_state(job: ReplayJob, topic: str, partition: int, offset: int) -> Any:
    """The validator the previous micro-batch left for ``offset``, or None for a partition
    judged for the first time.  A partition with states but none for ``offset`` means the
    checkpoint and the state were separated: refuse rather than judge with the wrong one."""
    from pyarrow import fs as pafs

    fs, base = _fs(job.location)
    folder = state_dir(base, topic, partition)
    infos = [i for i in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
             if i.is_file and i.base_name.endswith(".pickle")]
    want = f"{offset:020d}.pickle"
    hit = next((i for i in infos if i.base_name == want), None)
    if hit is None:
        if infos:
            have = sorted(int(i.base_name.split(".")[0]) for i in infos)
            raise StreamingReplayError(
                f"no producer state for {topic}[{partition}] at offset {offset} under "
                f"{folder} (states there: {have[-3:]}): the checkpoint and its kqlab/ folder "
                "were separated; start the replay with a new checkpoint location")
        return None
    with fs.open_input_stream(hit.path) as f:
        return pickle.loads(f.read())


def save_state(job: ReplayJob, topic: str, partition: int, offset: int, validator: Any,
               older_than: int) -> None:
    """Store ``validator`` for the micro-batch starting at ``offset`` (write, then rename),
    and drop the states before ``older_than`` (no micro-batch can start there again)."""
    from pyarrow import fs as pafs

    fs, base = _fs(job.location)
    folder = state_dir(base, topic, partition)
    fs.create_dir(folder, recursive=True)
    final = f"{folder}/{offset:020d}.pickle"
    tmp = f"{folder}/.{offset:020d}.{uuid.uuid4().hex[:8]}.tmp"
    with fs.open_output_stream(tmp) as f:
        f.write(pickle.dumps(validator, protocol=pickle.HIGHEST_PROTOCOL))
    fs.move(tmp, final)
    for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        name = info.base_name
        if info.is_file and name.endswith(".pickle") and int(name.split(".")[0]) < older_than:
            with contextlib.suppress(OSError):
                fs.delete_file(info.path)


def decode_raw(topic: str, partition: int, datas: list[bytes]) -> tuple[pa.Table, pa.Table]:
    """Records and batches of the fetched batch bytes, decoded by kqlab's codec (the fetch's
    own decoder: every column is the sampler's, ``position`` counts within ``datas``)."""
    from kqlab.kafka.batch import TableBuilder

    builder = TableBuilder(topic, partition)
    builder.add_buffer(b"".join(datas), 0, final=True)
    return builder.take()


def _counts(column: pa.ChunkedArray | pa.Array) -> dict[str, int]:
    if not len(column):
        return {}
    vc = pc.value_counts(column)
    return {str(v["values"]): int(v["counts"]) for v in vc.to_pylist()}


def judge_range(job: ReplayJob, topic: str, partition: int, start: int, end: int,
                datas: list[bytes]) -> dict[str, Any]:
    """Judge one micro-batch's batches of one partition, write their verdicts and the
    partition's state for the next micro-batch; the summary row as a dict."""
    from kqlab.kafka.validator import PartitionValidator
    from kqlab.validate.replayer import Replayer
    from kqlab.validate.sample import Sample

    validator = load_state(job, topic, partition, start)
    row: dict[str, Any] = {
        "topic": topic, "partition": partition, "range_start": start, "range_end": end,
        "records": 0, "batches": 0, "accepted": 0, "rejected": 0, "collateral": 0,
        "rejected_batches": 0, "undetermined": 0, "by_rule": "{}", "observed": "{}",
        "rules": "[]"}
    now = job.now if job.now is not None else int(time.time() * 1000)
    if datas:
        records, batches = decode_raw(topic, partition, datas)
        sample = Sample(records, batches, None, "exact", "log")
        replayer = Replayer(sample, now=now, resolver=_cached_resolver(job.resolver))
        validators: dict[tuple[str, int], PartitionValidator] = {}
        if validator is not None:
            validator.now = now  # the clock of this micro-batch (fixed when job.now is)
            validators[(topic, partition)] = validator
        replayer.assembler.validators = validators
        v = replayer.run(job.policy, profile=job.profile)
        validator = validators.get((topic, partition), validator)
        _write_verdicts(job, topic, partition, start, end, v)
        outcome = _counts(v.records.column("outcome"))
        fails = pc.list_flatten(v.records.column("failures"))
        rejecting = pc.not_equal(pc.struct_field(fails, "code"), 0) if len(fails) else \
            pa.array([], pa.bool_())
        errors = v.batches.column("error_code")
        checks = v.batches.column("check")
        row.update(
            records=v.records.num_rows, batches=v.batches.num_rows,
            accepted=outcome.get("accepted", 0), rejected=outcome.get("rejected", 0),
            collateral=outcome.get("collateral", 0),
            rejected_batches=int(pc.sum(pc.not_equal(errors, 0)).as_py() or 0)
            if len(errors) else 0,
            undetermined=int(pc.sum(pc.equal(checks, "undetermined")).as_py() or 0)
            if len(checks) else 0,
            by_rule=json.dumps(_counts(pc.struct_field(fails.filter(rejecting), "rule")))
            if len(fails) else "{}",
            observed=json.dumps(_counts(pc.struct_field(fails.filter(pc.invert(rejecting)),
                                                        "rule"))) if len(fails) else "{}",
            rules=json.dumps(v.rules.to_pylist()))
    if validator is not None:  # None: nothing judged yet, the next range starts fresh too
        save_state(job, topic, partition, end, validator, older_than=start)
    return row


def _cached_resolver(resolver: Any) -> Any:
    """One resolver per worker process (schema lookups cached across micro-batches)."""
    if resolver is None:
        return None
    from kqlab.spark.executor import _cached_resolver as cached

    return cached(resolver)


def _write_verdicts(job: ReplayJob, topic: str, partition: int, start: int, end: int,
                    v: Any) -> None:
    """The range's record and batch verdicts, one Parquet file each, named by unit and
    range (a micro-batch run again rewrites the same files), and its rule rows."""
    import pyarrow.parquet as pq

    from kqlab.spark.executor import BATCH_FILE_SCHEMA, RECORD_FILE_SCHEMA

    unit = job.units.get(f"{topic}\0{partition}")
    if unit is None:
        raise StreamingReplayError(f"{topic}[{partition}] was not among the partitions when "
                                   "the replay started")
    fs, base = _fs(job.location)
    name = f"u{unit:05d}-{start:020d}-{end:020d}"
    for kind, table, schema, seq in (
            ("records", v.records, RECORD_FILE_SCHEMA, "offset"),
            ("batches", v.batches, BATCH_FILE_SCHEMA, "batch_offset")):
        n = table.num_rows
        t = pa.table([pa.array(np.full(n, unit, np.int32)), table.column(seq),
                      *table.columns], schema=schema)
        folder = f"{base}/verdicts/{kind}"
        fs.create_dir(folder, recursive=True)
        tmp = f"{folder}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
        pq.write_table(t, tmp, filesystem=fs, compression="zstd")
        fs.move(tmp, f"{folder}/{name}.parquet")
    folder = f"{base}/verdicts/rules"
    fs.create_dir(folder, recursive=True)
    with fs.open_output_stream(f"{folder}/{name}.json") as f:
        f.write(json.dumps(v.rules.to_pylist()).encode())


def judge_raw(job: ReplayJob) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: ``rows=raw`` rows in, one :data:`BATCH_SCHEMA` row per
    range out.  A task sees whole ranges in order (raw rows are never split), so the rows
    of one range are collected, then judged."""
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        key: tuple[str, int, int, int] | None = None
        datas: list[bytes] = []
        for rb in batches:
            cols = rb.to_pydict()
            for t, p, s, e, d in zip(cols["topic"], cols["partition"], cols["range_start"],
                                     cols["range_end"], cols["data"], strict=True):
                k = (t, p, s, e)
                if k != key:
                    if key is not None:
                        yield _row(judge_range(job, *key, datas))
                    key, datas = k, []
                if d is not None:
                    datas.append(d)
        if key is not None:
            yield _row(judge_range(job, *key, datas))
    return fn


def _row(d: dict[str, Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([d], schema=BATCH_SCHEMA)


# -- the driver ----------------------------------------------------------------------------
@dataclass
class MicroBatch:
    """One micro-batch as the query's progress reports it."""

    batch_id: int
    records: int
    batches: int
    accepted: int
    rejected: int
    collateral: int
    rejected_batches: int
    undetermined: int
    by_rule: dict[str, int]
    observed: dict[str, int]
    #: offsets the micro-batch ended at, and the partitions' latest offsets then
    end_offsets: dict[str, dict[int, int]]
    latest_offsets: dict[str, dict[int, int]]
    seconds: float
    timestamp: str = ""
    rules: list[list[dict[str, Any]]] = field(default_factory=list, repr=False)

    @property
    def reject_rate(self) -> float:
        """Records not appended (rejected + collateral) per record judged."""
        return (self.rejected + self.collateral) / self.records if self.records else 0.0

    @property
    def lag(self) -> int:
        """Offsets waiting after this micro-batch (latest − end, summed over partitions)."""
        return sum(max(o - self.end_offsets.get(t, {}).get(p, o), 0)
                   for t, parts in self.latest_offsets.items() for p, o in parts.items())

    def to_dict(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "records": self.records, "batches": self.batches,
                "outcomes": {"accepted": self.accepted, "rejected": self.rejected,
                             "collateral": self.collateral},
                "rejected_batches": self.rejected_batches,
                "undetermined": self.undetermined, "by_rule": self.by_rule,
                "observed": self.observed, "reject_rate": round(self.reject_rate, 6),
                "lag": self.lag, "seconds": round(self.seconds, 3)}


def _offsets(text: Any) -> dict[str, dict[int, int]]:
    if not text or text == "None":
        return {}
    doc = json.loads(text) if isinstance(text, str) else text
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in doc.items()}


def micro_batch(progress: Any) -> MicroBatch | None:
    """The :class:`MicroBatch` of one ``StreamingQueryProgress`` (None: not a replay's)."""
    metrics = progress.observedMetrics.get(METRICS)
    if metrics is None:
        return None
    m = metrics.asDict() if hasattr(metrics, "asDict") else dict(metrics)

    def merged(key: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for text in m.get(key) or ():
            for k, v in json.loads(text).items():
                out[k] = out.get(k, 0) + int(v)
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    src = progress.sources[0] if progress.sources else None
    duration = progress.durationMs or {}
    return MicroBatch(
        batch_id=int(progress.batchId), records=int(m.get("records") or 0),
        batches=int(m.get("batches") or 0), accepted=int(m.get("accepted") or 0),
        rejected=int(m.get("rejected") or 0), collateral=int(m.get("collateral") or 0),
        rejected_batches=int(m.get("rejected_batches") or 0),
        undetermined=int(m.get("undetermined") or 0),
        by_rule=merged("by_rule"), observed=merged("observed"),
        end_offsets=_offsets(src.endOffset if src else None),
        latest_offsets=_offsets(getattr(src, "latestOffset", None) if src else None),
        seconds=float(duration.get("triggerExecution", 0)) / 1000,
        timestamp=str(progress.timestamp),
        rules=[json.loads(t) for t in m.get("rules") or ()])


def committed_offsets(spark_checkpoint: str) -> dict[str, dict[int, int]]:
    """The source offsets of the last micro-batch Spark committed under ``spark_checkpoint``
    (its ``commits/`` and ``offsets/`` logs), or ``{}`` for a query that committed none."""
    from pyarrow import fs as pafs

    fs, base = _fs(spark_checkpoint)
    ids = [int(i.base_name) for i in fs.get_file_info(pafs.FileSelector(
        f"{base}/commits", allow_not_found=True)) if i.is_file and i.base_name.isdigit()]
    if not ids:
        return {}
    with fs.open_input_stream(f"{base}/offsets/{max(ids)}") as f:
        lines = f.read().decode().strip().splitlines()
    return _offsets(lines[-1]) if len(lines) >= 3 else {}


def observed_metrics(df: Any) -> Any:
    """``df`` (:data:`BATCH_SCHEMA` rows) with the replay's per-micro-batch metrics."""
    from pyspark.sql import functions as sf

    sums = [sf.coalesce(sf.sum(c), sf.lit(0)).alias(c) for c in (
        "records", "batches", "accepted", "rejected", "collateral", "rejected_batches",
        "undetermined")]
    return df.observe(METRICS, *sums, sf.collect_list("by_rule").alias("by_rule"),
                      sf.collect_list("observed").alias("observed"),
                      sf.collect_list("rules").alias("rules"))


class _Listener:
    """Hands the replay's progress events to :class:`StreamingReplay` (a
    ``StreamingQueryListener`` built lazily: PySpark is imported only here)."""

    @staticmethod
    def make(owner: StreamingReplay) -> Any:
        from pyspark.sql.streaming import StreamingQueryListener

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's name
                pass

            def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's name
                if str(event.progress.id) == owner.query_id:
                    owner._on_progress(event.progress)

            def onQueryIdle(self, event: Any) -> None:  # noqa: N802 - Spark's name
                pass

            def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 - Spark's name
                if str(event.id) == owner.query_id:
                    owner._terminated.set()

        return Listener()


class StreamingReplay:
    """A policy replayed on a Kafka stream with Spark Structured Streaming (module doc).

    ``options`` are ``format("kqlab-kafka")``'s (``kafka.bootstrap.servers``, ``subscribe``,
    ``subscribePattern`` or ``assign``, ``startingOffsets``, ``maxOffsetsPerTrigger`` ...;
    ``rows`` is set here).  The replay reads the topic-partitions there are when it starts
    (it pins them as ``assign``: its verdict files are numbered by them), not those the
    cluster adds while it runs.
    ``checkpoint`` is where Spark keeps the query's offsets and kqlab its producer state and
    verdict files (``<checkpoint>/kqlab/``); restarting with the same checkpoint resumes.

    Stop conditions: ``until`` — ``"latest"`` (the high watermarks when the replay starts) or
    ``{topic: {partition: offset}}`` end offsets: the query stops once every partition
    reached them (nothing past them is read); ``max_records`` — a record budget: the query
    stops after the micro-batch that reaches it (give ``maxOffsetsPerTrigger`` to bound the
    overshoot).  Neither: it runs until :meth:`stop`.
    """

    def __init__(self, spark: Any, policy: Policy, options: Mapping[str, str], *,
                 checkpoint: str, until: str | Mapping[str, Mapping[int, int]] | None = None,
                 max_records: int | None = None, now: int | None = None,
                 profile: str | None = None, resolver: Any = None,
                 trigger_seconds: float = 0.0,
                 on_batch: Callable[[MicroBatch], None] | None = None):
        from kqlab.spark.kafka_source import SourceOptions

        self.spark = spark
        self.policy = policy
        self.options = {**{str(k): str(v) for k, v in options.items()}, "rows": "raw"}
        for k in list(self.options):
            if k.lower() in ("endingoffsets", "endingtimestamp"):
                raise StreamingReplayError(f"pass the end as until=..., not as option {k}")
        self.source = SourceOptions.parse(self.options)
        self.checkpoint = checkpoint.rstrip("/")
        self.location = f"{self.checkpoint}/kqlab"
        self.until = until
        self.max_records = max_records
        self.now = now
        self.profile = profile or policy.enforcement
        self.resolver = resolver
        self.trigger_seconds = trigger_seconds
        self.on_batch: list[Callable[[MicroBatch], None]] = [on_batch] if on_batch else []
        self.batches: list[MicroBatch] = []
        self.ending: dict[str, dict[int, int]] | None = None
        self.query: Any = None
        self.query_id = ""
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._terminated = threading.Event()
        self._listener: Any = None
        self._units: dict[str, int] = {}

    # -- running ---------------------------------------------------------------------------
    def start(self) -> StreamingReplay:
        """Start the query (returns at once; see :meth:`wait`)."""
        from kqlab.serde.schemas import SchemaResolver
        from kqlab.spark.kafka_source import offsets_json, register, resolve

        if self.query is not None:
            raise StreamingReplayError("this replay was started already")
        register(self.spark)
        ranges = resolve(self.source, ending=False)
        self._units = {f"{t}\0{p}": i for i, (t, p) in enumerate(
            sorted((t, p) for t, parts in ranges.items() for p in parts))}
        options = dict(self.options)
        if self.source.discovers:
            # the verdict files are numbered by the partitions read now (``_units``): pin
            # them, as the source's ``assign`` (a subscribed stream would add partitions)
            pinned = {t: sorted(parts) for t, parts in ranges.items() if parts}
            if not pinned:
                raise StreamingReplayError("no topic-partition to replay: the source's "
                                           "topics have none on the cluster")
            options = {k: v for k, v in options.items()
                       if k.lower() not in ("subscribe", "subscribepattern")}
            options["assign"] = json.dumps(pinned)
        if self.until is not None:
            if self.until == "latest":
                self.ending = {t: {p: e for p, (_, e) in parts.items()}
                               for t, parts in ranges.items()}
            elif isinstance(self.until, Mapping):
                self.ending = {str(t): {int(p): int(o) for p, o in parts.items()}
                               for t, parts in self.until.items()}
            else:
                raise StreamingReplayError(f"until must be 'latest' or end offsets "
                                           f"{{topic: {{partition: offset}}}}, not "
                                           f"{self.until!r}")
            options["endingOffsets"] = json.dumps(offsets_json(self.ending))
        resolver = self.resolver
        if resolver is None and self.policy.value.schemas is not None:
            resolver = SchemaResolver.from_source(self.policy.value.schemas)
        if resolver is not None:
            from kqlab.serde.schemas import portable_resolver

            resolver = portable_resolver(resolver)
        job = ReplayJob(self.policy, self.profile, self.now, resolver, self.location,
                        self._units)
        from pyspark.sql.pandas.types import from_arrow_schema

        raw = self.spark.readStream.format("kqlab-kafka").options(**options).load()
        judged = observed_metrics(raw.mapInArrow(judge_raw(job),
                                                 from_arrow_schema(BATCH_SCHEMA)))
        self._listener = _Listener.make(self)
        self.spark.streams.addListener(self._listener)
        writer = (judged.writeStream.format("noop").queryName(
            f"kqlab-replay-{uuid.uuid4().hex[:8]}")
                  .option("checkpointLocation", f"{self.checkpoint}/spark")
                  .trigger(processingTime=f"{self.trigger_seconds:g} seconds"))
        self.query = writer.start()
        self.query_id = str(self.query.id)
        if self.ending is not None:
            begin = committed_offsets(f"{self.checkpoint}/spark") or {
                t: {p: s for p, (s, _) in parts.items()} for t, parts in ranges.items()}
            if self._reached(begin):
                self._done.set()  # nothing left to read: no micro-batch will report
        return self

    def _reached(self, end: Mapping[str, Mapping[int, int]]) -> bool:
        """Every partition is at or past its end offset."""
        assert self.ending is not None
        return all(end.get(t, {}).get(p, -1) >= o
                   for t, parts in self.ending.items() for p, o in parts.items())

    def _on_progress(self, progress: Any) -> None:
        mb = micro_batch(progress)
        if mb is None:
            # an empty trigger (no new data): only the end condition may have changed
            return
        with self._lock:
            self.batches.append(mb)
        for fn in self.on_batch:
            with contextlib.suppress(Exception):  # a view's error must not stop the replay
                fn(mb)
        if self.max_records is not None and self.records >= self.max_records:
            self._done.set()
        if self.ending is not None and self._reached(mb.end_offsets):
            self._done.set()

    @property
    def records(self) -> int:
        """Records judged so far (every micro-batch reported)."""
        with self._lock:
            return sum(b.records for b in self.batches)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the stop condition holds (then stop the query) or the query ends;
        True when it stopped, False on ``timeout``.  A failed query raises
        :class:`StreamingReplayError` with Spark's reason."""
        if self.query is None:
            raise StreamingReplayError("start() the replay first")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._done.is_set():
                self.stop()
                return True
            if not self.query.isActive:
                self._raise_if_failed()
                return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            self._done.wait(0.1)

    def _raise_if_failed(self) -> None:
        exc = self.query.exception() if self.query is not None else None
        if exc is not None:
            text = str(exc).strip().splitlines()
            raise StreamingReplayError(f"the streaming replay failed: "
                                       f"{text[0] if text else exc}")

    def stop(self) -> None:
        """Stop the query (a micro-batch in flight is run again on the next start)."""
        if self.query is not None and self.query.isActive:
            self.query.stop()
        if self._listener is not None:
            with contextlib.suppress(Exception):
                self.spark.streams.removeListener(self._listener)
            self._listener = None
        self._raise_if_failed()

    # -- results ---------------------------------------------------------------------------
    def totals(self) -> dict[str, Any]:
        """Counts over every micro-batch reported by this run."""
        with self._lock:
            bs = list(self.batches)
        by_rule: dict[str, int] = {}
        for b in bs:
            for k, v in b.by_rule.items():
                by_rule[k] = by_rule.get(k, 0) + v
        n = sum(b.records for b in bs)
        bad = sum(b.rejected + b.collateral for b in bs)
        return {"micro_batches": len(bs), "records": n,
                "outcomes": {o: sum(getattr(b, o) for b in bs)
                             for o in ("accepted", "rejected", "collateral")},
                "by_rule": dict(sorted(by_rule.items(), key=lambda kv: (-kv[1], kv[0]))),
                "reject_rate": round(bad / n, 6) if n else 0.0,
                "lag": bs[-1].lag if bs else None}

    def verdicts(self) -> SparkVerdicts:
        """Every micro-batch's verdicts so far (all runs on this checkpoint) as one
        :class:`~kqlab.spark.verdicts.SparkVerdicts`: the views, summaries and explorer of
        the batch engine work on them unchanged."""
        from pyarrow import fs as pafs

        from kqlab.spark.outputs import spark_path
        from kqlab.spark.verdicts import SparkVerdicts
        from kqlab.validate.assemble import replay_notes
        from kqlab.validate.replayer import with_implicit_rules
        from kqlab.validate.rule_table import merge_rule_rows

        fs, base = _fs(self.location)

        def files(kind: str) -> list[str]:
            infos = fs.get_file_info(pafs.FileSelector(f"{base}/verdicts/{kind}",
                                                       allow_not_found=True))
            return sorted(i.path for i in infos if i.is_file and not
                          i.base_name.startswith("."))

        effective = with_implicit_rules(self.policy)
        parts = []
        for path in files("rules"):
            with fs.open_input_stream(path) as f:
                parts.append(json.loads(f.read()))
        rules = merge_rule_rows(effective.rules, parts)  # the local engine's one merge
        record_files, batch_files = files("records"), files("batches")
        topics = sorted({t for t, _ in (k.split("\0") for k in self._units)})
        sv = SparkVerdicts(
            self.spark, self.location, [spark_path(f, self.location) for f in record_files],
            [spark_path(f, self.location) for f in batch_files], rules, self.profile,
            "exact", self.now if self.now is not None else int(time.time() * 1000),
            self.policy.name,
            self.policy.content_hash(), [], [], [], len(self._units), 0.0)
        undetermined = sv.batches.filter("check = 'undetermined'").count() \
            if batch_files else 0
        sv.notes = replay_notes(effective, topics, undetermined)
        counts = sv.records.count() if record_files else 0
        sv.n_records = counts
        sv.n_batches = sv.batches.count() if batch_files else 0
        return sv

    def view(self) -> Any:
        """A notebook view that adds a row per micro-batch as it arrives."""
        from kqlab.spark.stream_view import StreamView

        view = StreamView(title=f"streaming replay of {self.policy.name}")
        for b in list(self.batches):
            view.add(b)
        self.on_batch.append(view.add)
        return view
