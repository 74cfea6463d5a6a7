"""The Structured Streaming enforcer: the validating gate as a Spark streaming job.

``kqlab export --target spark-streaming`` writes its config (``enforcer.yaml``), the policy, a
launcher (``enforcer_main.py``) and the ``spark-submit`` line (``submit.sh``)::

    BOOTSTRAP=broker:9092 CHECKPOINT=s3a://bucket/kqlab/orders SPARK_MASTER=yarn \\
        sh export/spark-streaming/submit.sh -X security.protocol=SSL

What it does, per micro-batch (``foreachBatch``): the records Spark read since the last one
(``format("kqlab-kafka")``, :mod:`kqlab.spark.kafka_source`; one task per topic-partition
range, in offset order) are judged by the gate's own :class:`~kqlab.gate._judge.Judge`
(each record alone: the policy's rules and the record-level broker checks, exactly
``replay(framing="single")``), and each task produces them unchanged — key, value, headers,
timestamp, partition — to the clean topic, or to the dead-letter topic with the gate's
failure headers (:func:`kqlab.gate._gate.failure_headers`), with an idempotent producer
(``acks=all``), then flushes.  Only when every task has flushed does the batch function
return, and only then does Spark write the micro-batch to its commit log.

Delivery: at least once.  A crash anywhere before the commit log entry runs the micro-batch
again from the checkpoint (same offsets: Spark's write-ahead offset log), so a record can be
forwarded more than once, never lost; per partition, the first copy of each record keeps the
source order (one task produces a partition's range in order; micro-batches run one after
another).  The enforcer counts what restarts may duplicate: each attempt at a micro-batch
is counted in its marker (``<checkpoint>/kqlab/attempts/<batch id>``) before it produces, so
the attempt that finishes knows how many ran before it — each may have sent every record of
the same offsets once — and reports its records times that number as ``redelivered`` (an
upper bound of the duplicates: an attempt that died before its first produce duplicated
nothing; a micro-batch killed twice before it commits is sent up to three times).  Counters
survive restarts in ``<checkpoint>/kqlab/metrics.json``.

Sample checks (the policy's ``checks:``, :mod:`kqlab.spark.enforcer_checks`): each task also
reduces the records it judged to the checks' partial tables — the replay's kernels over the
judge's own decoded columns and rule results, ``reject_rate`` from the task's verdicts — and
returns them with its counts; after every record is delivered the driver merges them into
its check state, judges each window whose end the watermark passed (the newest record
timestamp seen less ``checks.lateness_ms``) once, as a replay of the same records judges it,
produces one JSON alert row per failing window (``alert_passing``: per judged window) to
``checks.alert_topic`` and saves the state under ``<checkpoint>/kqlab/checks/<batch id>/``
before Spark commits; a re-run micro-batch starts from the state of the one before, so no
window counts its records twice (its alert rows may be sent again: keyed
``check|group|window start``).  Windows the state no longer holds are dropped; a record for a
window already judged is counted ``late`` (metrics ``checks.late``, per check) and judged in
no window.  Freshness is judged per group at every micro-batch against the clock (``--now``
or the wall clock), and between micro-batches every trigger interval against the wall clock
(a silent topic runs none), and alerted when a group's status changes.  ``volume`` by
partition judges every partition the source reads — the micro-batch's offsets in Spark's
offset log (:meth:`Enforcer.source_partitions`), empty partitions included — so a partition
that never receives a record is alerted in every closed window, and one the source discovers
while it runs (a route by ``source_pattern`` reads with ``subscribePattern``: a topic created
that matches is read from its earliest offset and routed to that route's sink and
dead-letter topic) is judged from the window after the newest record seen when it joined.
Which checks run, and why the others do not (drift, schema drift, checks over the whole sample), is
:func:`~kqlab.spark.enforcer_config.check_support`.  ``connector: spark`` computes no checks.

Fault injection (for the crash test): ``KQLAB_ENFORCER_KILL_AT=PHASE:N`` SIGKILLs the driver
when its ``N``-th micro-batch of this run reaches ``PHASE`` (:data:`KILL_PHASES`): ``planned``
(nothing produced), ``producing`` (a task produced half its records: the task kills the
driver's process group and its own), ``flushed`` (every record delivered, nothing committed),
``committed`` (Spark committed the micro-batch); ``KQLAB_ENFORCER_KILL_LOG=FILE`` appends
where it killed to ``FILE``.  Unset in production.

``connector: spark`` in the config reads with Spark's own Kafka source and writes with its
Kafka sink (``format("kafka")``, the ``spark-sql-kafka-0-10`` package on the cluster); the
same judge and headers run in between, but the sink sets no record timestamp (Kafka's broker
or producer stamps it) and its producer settings are ``kafka.*`` options of the sink.  A new
stream starts at the earliest offsets on both paths (Spark's own default is latest).
tests/spark/test_spark_kafka_connector.py runs it on the real broker beside the default path.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.errors import KqlabError
from kqlab.spark.enforcer_config import (
    CheckSettings,
    EnforcerConfigError,
    Route,
    default_alert_topic,
    load_enforcer_file,
    route_for,
    source_pattern,
)

__all__ = [
    "KILL_PHASES",
    "PRODUCED_SCHEMA",
    "Enforcer",
    "EnforcerError",
    "EnforcerSettings",
    "enforce_records",
    "judge_for_sink",
    "main",
]

#: the points of a micro-batch ``KQLAB_ENFORCER_KILL_AT`` can kill the driver at
KILL_PHASES = ("planned", "producing", "flushed", "committed")
#: what a task returns: one row per topic-partition it produced
PRODUCED_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()),
    ("first_offset", pa.int64()), ("last_offset", pa.int64()),
    ("records", pa.int64()), ("dead_lettered", pa.int64()),
    ("by_rule", pa.string()), ("observed", pa.string()),
    # records a re-run task did not send again (exactly-once: an earlier attempt's
    # transaction committed them; :mod:`kqlab.spark.enforcer_txn`)
    ("skipped", pa.int64()),
    # the sample checks' partials (kqlab.spark.enforcer_checks.TaskChecks.payload), on a
    # task's first row: a JSON header and one Arrow IPC table per enforced check
    ("checks", pa.binary()), ("partials", pa.list_(pa.binary())),
])
#: the rows ``connector: spark`` hands Spark's Kafka sink
SINK_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
#: the producer settings the enforcer's contract needs (a config cannot turn them off)
PRODUCER_DEFAULTS = {"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                     "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000}


class EnforcerError(KqlabError):
    """The enforcer cannot start as configured, or a delivery failed (nothing committed)."""


def _kill_at() -> tuple[str, int] | None:
    spec = os.environ.get("KQLAB_ENFORCER_KILL_AT")
    if not spec:
        return None
    phase, _, n = spec.partition(":")
    if phase not in KILL_PHASES or not n.isdigit() or int(n) < 1:
        raise EnforcerError(f"KQLAB_ENFORCER_KILL_AT must be PHASE:N with PHASE in "
                            f"{', '.join(KILL_PHASES)} and N >= 1, not {spec!r}")
    return phase, int(n)


def _driver_pid() -> int:
    """The JVM that runs this Python worker: the nearest ``java`` among its ancestors
    (``/proc``; fault injection only, so Linux only)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm == "java":
            return pid
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    raise EnforcerError("no JVM among this worker's parents")


def _announce_kill(text: str) -> None:
    """Say where the fault injection kills, on stderr and, with ``KQLAB_ENFORCER_KILL_LOG``,
    in that file (under spark-submit the driver's stderr passes through the JVM, which may
    die before it copies the line)."""
    print(f"kqlab enforcer: {text}: SIGKILL", file=sys.stderr, flush=True)
    path = os.environ.get("KQLAB_ENFORCER_KILL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text + "\n")


def _kill_driver_from_task(phase: str) -> None:
    """SIGKILL the driver's process group (JVM and Python driver) and this worker's."""
    _announce_kill(f"KQLAB_ENFORCER_KILL_AT={phase}")
    with contextlib.suppress(Exception):
        os.killpg(os.getpgid(_driver_pid()), signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)


# -- the task --------------------------------------------------------------------------------
@dataclass(frozen=True)
class EnforceJob:
    """What a producing task needs (pickled into each micro-batch's task closure)."""

    policy: Any
    routes: dict[str, tuple[str, str]]  # source -> (sink, dlq)
    producer: dict[str, Any]
    partitioning: str
    now: int | None
    policy_id: bytes
    kill_producing: bool = False
    #: the enforced sample checks' closed windows (check id -> judged up to this end), or
    #: None when the enforcer computes no check
    closed: Mapping[str, int] | None = None
    #: the routes by pattern (source pattern, sink, dlq), in config order: a topic no named
    #: route reads goes by the first whose pattern is found in it
    patterns: tuple[tuple[str, str, str], ...] = ()
    #: exactly-once: the transactional-id prefix and group (None: at least once), and the
    #: client settings of the group's offset reads
    txn_prefix: str | None = None
    client: Mapping[str, Any] | None = None

    def route(self, topic: str) -> tuple[str, str]:
        """``(sink, dlq)`` of ``topic``'s records (:func:`route_for`; a pattern's answer is
        kept per worker, as a task may ask per record)."""
        got = self.routes.get(topic)
        if got is not None:
            return got
        key = (self.patterns, topic)
        if key not in _PATTERN_ROUTES:
            r = route_for([Route(s, k, d, pattern=True) for s, k, d in self.patterns], topic)
            if r is None:
                raise EnforcerError(f"no route for records of topic {topic!r}")
            _PATTERN_ROUTES[key] = (r.sink, r.dlq)
        return _PATTERN_ROUTES[key]


_PRODUCERS: dict[tuple[Any, ...], Any] = {}
_PATTERN_ROUTES: dict[tuple[tuple[tuple[str, str, str], ...], str], tuple[str, str]] = {}
_JUDGES: dict[tuple[str, int | None], Any] = {}
_ERRORS: list[str] = []


def _on_delivery(err: Any, msg: Any) -> None:
    if err is not None:
        _ERRORS.append(f"{msg.topic()}[{msg.partition()}]: {err}")


def _producer(config: Mapping[str, Any]) -> Any:
    """One idempotent producer per config per Python worker (Spark reuses workers)."""
    from confluent_kafka import Producer

    key = tuple(sorted((k, str(v)) for k, v in config.items()))
    p = _PRODUCERS.get(key)
    if p is None:
        p = _PRODUCERS[key] = Producer({
            **PRODUCER_DEFAULTS, **dict(config),
            "delivery.report.only.error": True, "on_delivery": _on_delivery})
    return p


def _judge(job: EnforceJob) -> Any:
    from kqlab.gate._judge import Judge

    key = (job.policy.content_hash(), job.now)
    j = _JUDGES.get(key)
    if j is None:
        j = _JUDGES[key] = Judge(job.policy, now=job.now)
    return j


def single_records(batch: pa.RecordBatch | pa.Table) -> pa.Table:
    """Spark's record rows as kqlab's records table with every record its own batch
    (``batch_offset = offset``, ``batch_index = 0``): how the gate judges records."""
    from kqlab.records import RECORDS_SCHEMA

    t = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    t = t.select(RECORDS_SCHEMA.names).cast(RECORDS_SCHEMA)
    n = t.num_rows
    t = t.set_column(RECORDS_SCHEMA.get_field_index("batch_offset"), "batch_offset",
                     t.column("offset"))
    return t.set_column(RECORDS_SCHEMA.get_field_index("batch_index"), "batch_index",
                        pa.array(np.zeros(n, np.int32)))


def header_lists(column: pa.ChunkedArray | pa.Array
                 ) -> list[list[tuple[str, bytes | None]] | None]:
    """Per record its headers as the ``(key, value)`` list a producer takes (None: none),
    sliced from the column's flat pairs (no per-header dicts; a null list has no entries)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(arr, pa.ChunkedArray):  # no chunks at all
        return []
    offsets = arr.offsets.to_pylist()
    flat = arr.values
    pairs: list[tuple[str, bytes | None]] = list(zip(
        flat.field("key").to_pylist(), flat.field("value").to_pylist(), strict=True))
    return [pairs[a:b] or None for a, b in itertools.pairwise(offsets)]


def enforce_records(job: EnforceJob) -> Callable[[Iterator[pa.RecordBatch]],
                                                 Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: records in (one range of one topic-partition per task, in
    offset order), judged and produced, flushed; one :data:`PRODUCED_SCHEMA` row per
    topic-partition out.  A delivery failure raises :class:`EnforcerError` (the micro-batch
    fails and is not committed)."""
    from kqlab.gate._gate import failure_headers

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kqlab.spark.enforcer_checks import TaskChecks

        judge = _judge(job)
        checks = None if job.closed is None else TaskChecks(job.policy, dict(job.closed))
        txn: Any = None
        floor = 0  # exactly-once: the first offset no earlier attempt committed
        skipped = 0
        producer = None if job.txn_prefix else _producer(job.producer)
        _ERRORS.clear()
        same = job.partitioning == "same"
        stats: dict[tuple[str, int], dict[str, int]] = {}
        by_rule: dict[str, int] = {}
        observed: dict[str, int] = {}
        for rb in batches:
            if not rb.num_rows:
                continue
            table = single_records(rb)
            verdict = judge(table)
            if checks is not None:
                checks.add(verdict, table.num_rows)
            topics = table.column("topic").to_pylist()
            parts = table.column("partition").to_pylist()
            offsets = table.column("offset").to_pylist()
            if job.txn_prefix and txn is None:
                txn = _open_txn(job, topics, parts)
                producer, floor = txn.producer, txn.floor
            assert producer is not None
            produce = producer.produce
            # librdkafka: partition -1 lets the partitioner pick, timestamp 0 stamps "now"
            stamps = pc.max_element_wise(pc.fill_null(table.column("timestamp"), 0), 0
                                         ).to_pylist()
            keys = table.column("key").to_pylist()
            values = table.column("value").to_pylist()
            headers = header_lists(table.column("headers"))
            dead = verdict.dead.tolist()
            single = job.route(topics[0]) if topics.count(topics[0]) == len(topics) else None
            k = 0
            half = len(dead) // 2 if job.kill_producing else -1
            for i, is_dead in enumerate(dead):
                if i == half:
                    producer.flush(10)
                    _kill_driver_from_task("producing")
                if offsets[i] < floor:  # an earlier attempt's transaction committed it
                    k += is_dead
                    skipped += 1
                    continue
                sink, dlq = single or job.route(topics[i])
                h = headers[i]
                if is_dead:
                    h = failure_headers(h, verdict.rules[k], verdict.messages[k], topics[i],
                                        parts[i], offsets[i], job.policy_id)
                    k += 1
                while True:
                    try:
                        produce(dlq if is_dead else sink, values[i], keys[i],
                                partition=parts[i] if same else -1, timestamp=stamps[i],
                                headers=h)
                        break
                    except BufferError:  # the local queue is full: let deliveries drain it
                        producer.poll(0.05)
            offs = np.asarray(offsets, dtype=np.int64)
            dead_np = np.asarray(dead, dtype=bool)
            tps = {(topics[0], parts[0])} if topics.count(topics[0]) == len(topics) and \
                parts.count(parts[0]) == len(parts) else set(zip(topics, parts, strict=True))
            for t, p in tps:
                mask = None if len(tps) == 1 else \
                    (np.asarray(topics, dtype=object) == t) & (np.asarray(parts) == p)
                o = offs if mask is None else offs[mask]
                s = stats.setdefault((t, p), {"first": int(o.min()), "records": 0, "dead": 0})
                s["last"] = int(o.max())
                s["records"] += len(o)
                s["dead"] += int(dead_np.sum() if mask is None else dead_np[mask].sum())
            for target, counts in ((by_rule, verdict.by_rule), (observed, verdict.observed)):
                for r, v in counts.items():
                    target[r] = target.get(r, 0) + int(v)
        while producer is not None and producer.flush(1.0):  # every record delivered (or failed)
            pass
        if txn is not None:
            _end_txn(txn, stats, failed=bool(_ERRORS))
        if _ERRORS:
            first, n = _ERRORS[0], len(_ERRORS)
            _ERRORS.clear()
            with contextlib.suppress(Exception):
                del _PRODUCERS[next(k for k, v in _PRODUCERS.items() if v is producer)]
            raise EnforcerError(f"{n} record(s) were not delivered (first: {first}); the "
                                "micro-batch is not committed and runs again on restart")
        head, partials = checks.payload() if checks is not None and stats else (None, None)
        for i, ((t, p), st) in enumerate(sorted(stats.items())):
            # the task's rule counts and check partials ride on its first row (the driver
            # sums the rows)
            yield pa.RecordBatch.from_pylist([{
                "topic": t, "partition": p, "first_offset": st["first"],
                "last_offset": st["last"], "records": st["records"],
                "dead_lettered": st["dead"], "by_rule": json.dumps(by_rule if i == 0 else {}),
                "observed": json.dumps(observed if i == 0 else {}),
                "skipped": skipped if i == 0 else 0, "checks": head if i == 0 else None,
                "partials": partials if i == 0 else None}],
                schema=PRODUCED_SCHEMA)
    return fn


def _open_txn(job: EnforceJob, topics: list[str], parts: list[int]) -> Any:
    """Exactly-once: the task's transaction (its range is one topic-partition's)."""
    from kqlab.spark.enforcer_txn import TaskTransaction

    if len(set(zip(topics, parts, strict=True))) != 1:
        raise EnforcerError("exactly-once delivery needs one topic-partition per task (the "
                            "kqlab-kafka stream's micro-batch tasks); got several")
    assert job.txn_prefix is not None
    return TaskTransaction(job.txn_prefix, job.producer, job.client or {}, topics[0],
                           parts[0], _on_delivery)


def _end_txn(txn: Any, stats: Mapping[tuple[str, int], Mapping[str, int]],
             failed: bool) -> None:
    """Commit the task's records with the source offset after its last one, or abort on a
    delivery failure (the micro-batch then fails and runs again)."""
    try:
        if failed:
            txn.abort()
            return
        try:
            txn.commit(max(s["last"] for s in stats.values()))
        except Exception as exc:
            txn.abort()
            raise EnforcerError(f"{txn.topic}[{txn.partition}]: the task's transaction did "
                                f"not commit ({exc}); the micro-batch is not committed and "
                                "runs again on restart") from exc
    finally:
        txn.close()


def judge_for_sink(job: EnforceJob) -> Callable[[Iterator[pa.RecordBatch]],
                                                Iterator[pa.RecordBatch]]:
    """``connector: spark``: the ``mapInArrow`` function that judges records (Spark's Kafka
    source rows, converted by the caller to kqlab's records columns) and returns the rows
    Spark's Kafka sink writes (:data:`SINK_SCHEMA`): the same judge, routes and failure
    headers as :func:`enforce_records`, without producing."""
    from kqlab.gate._gate import failure_headers

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        judge = _judge(job)
        for rb in batches:
            if not rb.num_rows:
                continue
            table = single_records(rb)
            verdict = judge(table)
            topics = table.column("topic").to_pylist()
            parts = table.column("partition").to_pylist()
            offsets = table.column("offset").to_pylist()
            headers = table.column("headers").to_pylist()
            out_topics, out_headers = [], []
            k = 0
            for i, is_dead in enumerate(verdict.dead.tolist()):
                sink, dlq = job.route(topics[i])
                h = [(x["key"], x["value"]) for x in headers[i] or ()]
                if is_dead:
                    h = failure_headers(h, verdict.rules[k], verdict.messages[k], topics[i],
                                        parts[i], offsets[i], job.policy_id)
                    k += 1
                out_topics.append(dlq if is_dead else sink)
                out_headers.append([{"key": a, "value": b} for a, b in h])
            same = job.partitioning == "same"
            yield pa.RecordBatch.from_arrays([
                pa.array(out_topics, pa.string()),
                table.column("partition").combine_chunks() if same else
                pa.nulls(table.num_rows, pa.int32()),
                table.column("key").combine_chunks(), table.column("value").combine_chunks(),
                pa.array(out_headers, SINK_SCHEMA.field("headers").type)], schema=SINK_SCHEMA)
    return fn


# -- the driver ------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class EnforcerSettings:
    """Everything a run needs besides the policy (deployment settings)."""

    routes: tuple[Route, ...]
    bootstrap: str
    checkpoint: str
    #: librdkafka settings for reading and producing (security, client.id ...)
    client: Mapping[str, Any] = field(default_factory=dict)
    producer: Mapping[str, Any] = field(default_factory=dict)
    #: ``format("kqlab-kafka")`` options: startingOffsets, maxOffsetsPerTrigger ...
    source: Mapping[str, str] = field(default_factory=dict)
    partitioning: str = "same"
    now: int | None = None
    trigger_seconds: float = 0.0
    #: process what is there when the run starts, then stop (Trigger.AvailableNow)
    available_now: bool = False
    connector: str = "python"
    #: print a JSON line per micro-batch on stdout
    json_metrics: bool = False
    #: the sample checks' alert topic, lateness and which windows are sent
    checks: CheckSettings = field(default_factory=CheckSettings)
    #: ``at-least-once`` or ``exactly-once`` (a transaction per task:
    #: :mod:`kqlab.spark.enforcer_txn`; ``connector: python`` only)
    delivery: str = "at-least-once"


class Enforcer:
    """One enforcer run: ``Enforcer(spark, policy, settings).run()`` until :meth:`stop`
    (or, with ``available_now``, until what was there at the start is enforced)."""

    def __init__(self, spark: Any, policy: Any, settings: EnforcerSettings):
        from kqlab.gate._gate import policy_id

        if settings.partitioning not in ("same", "key"):
            raise EnforcerError(f"partitioning must be 'same' or 'key', not "
                                f"{settings.partitioning!r}")
        if not settings.routes:
            raise EnforcerError("the enforcer needs at least one source → sink/dlq route")
        if settings.delivery not in ("at-least-once", "exactly-once"):
            raise EnforcerError(f"delivery must be 'at-least-once' or 'exactly-once', not "
                                f"{settings.delivery!r}")
        if settings.delivery == "exactly-once" and settings.connector != "python":
            raise EnforcerError("delivery: exactly-once needs connector: python (Spark's "
                                "Kafka sink writes at least once)")
        self.spark = spark
        self.policy = policy
        self.settings = settings
        self.checkpoint = settings.checkpoint.rstrip("/")
        self.location = f"{self.checkpoint}/kqlab"
        self._policy_id = policy_id(policy)
        self._kill = _kill_at()
        self._runs = 0  # micro-batches this run handled
        #: micro-batch id -> which micro-batch of this run handled it
        self._handled: dict[int, int] = {}
        self._stop = threading.Event()
        self._batch_lock = threading.Lock()
        self._closed = False
        self.query: Any = None
        self.lag: dict[str, int] = {}
        self.metrics = self._load_metrics()
        self.metrics["restarts"] = int(self.metrics.get("restarts", -1)) + 1
        self.batches: list[dict[str, Any]] = []
        self.on_batch: list[Callable[[dict[str, Any]], None]] = []
        self.checks = self._stream_checks()
        self._producer: Any = None
        self._alert_errors: list[str] = []
        self._ticked = time.monotonic()  # the last freshness judgement (micro-batch or tick)

    def _stream_checks(self) -> Any:
        """The enforced sample checks' driver state (None: the policy has none the enforcer
        computes, or ``connector: spark``, whose judging tasks do not compute them)."""
        from kqlab.spark.enforcer_checks import StreamChecks, enforced_checks

        if not enforced_checks(self.policy) or self.settings.connector != "python":
            return None
        return StreamChecks(self.policy, self.location, self.settings.checks,
                            self.alert_topic, self._policy_id.decode())

    @property
    def alert_topic(self) -> str:
        """Where the sample checks' alert rows go."""
        return self.settings.checks.alert_topic or default_alert_topic(self.settings.routes)

    # -- persistence -----------------------------------------------------------------------
    def _fs(self) -> tuple[Any, str]:
        from kqlab.spark.outputs import filesystem

        return filesystem(self.location)

    def _load_metrics(self) -> dict[str, Any]:
        fs, base = self._fs()
        with contextlib.suppress(FileNotFoundError, OSError), \
                fs.open_input_stream(f"{base}/metrics.json") as f:
            doc: dict[str, Any] = json.loads(f.read())
            return doc
        return {"records": 0, "forwarded": 0, "dead_lettered": 0, "by_rule": {},
                "observed": {}, "micro_batches": 0, "reruns": 0, "redelivered": 0,
                "restarts": -1}

    def _save_metrics(self) -> None:
        fs, base = self._fs()
        fs.create_dir(base, recursive=True)
        tmp = f"{base}/.metrics.{os.getpid()}.tmp"
        with fs.open_output_stream(tmp) as f:
            f.write(json.dumps(self.metrics, sort_keys=True).encode())
        fs.move(tmp, f"{base}/metrics.json")

    def _attempts(self, batch_id: int) -> int:
        """How many attempts at ``batch_id`` began producing before this one (then count
        this one in its marker; each attempt may have sent the micro-batch's records)."""
        from pyarrow import fs as pafs

        fs, base = self._fs()
        folder = f"{base}/attempts"
        fs.create_dir(folder, recursive=True)
        path = f"{folder}/{batch_id:012d}"
        before = 0
        if fs.get_file_info(path).type != pafs.FileType.NotFound:
            with fs.open_input_stream(path) as f:
                text = f.read().decode(errors="replace").strip()
            before = int(text) if text.isdigit() else 1  # an older marker: one attempt
        tmp = f"{folder}/.{batch_id:012d}.{os.getpid()}.tmp"
        with fs.open_output_stream(tmp) as f:
            f.write(str(before + 1).encode())
        fs.move(tmp, path)
        for info in fs.get_file_info(pafs.FileSelector(folder)):
            if info.is_file and info.base_name.isdigit() and \
                    int(info.base_name) < batch_id - 100:
                with contextlib.suppress(OSError):
                    fs.delete_file(info.path)
        return before

    # -- checks ------------------------------------------------------------------------------
    def _client_config(self) -> dict[str, Any]:
        return {**dict(self.settings.client), "bootstrap.servers": self.settings.bootstrap}

    def check_topics(self) -> None:
        """Every source topic exists, and with ``partitioning="same"`` its sink and
        dead-letter topics have at least as many partitions (records keep theirs)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self._client_config())
        try:
            md = admin.list_topics(timeout=15)
        except Exception as exc:
            raise EnforcerError(f"cannot reach {self.settings.bootstrap}: {exc}") from None
        counts = {t: len(m.partitions) for t, m in md.topics.items() if m.error is None}
        if self.checks is not None and not counts.get(self.alert_topic):
            raise EnforcerError(f"alert topic {self.alert_topic!r} does not exist on "
                                f"{self.settings.bootstrap}: create it (the policy's sample "
                                "checks send their alert rows there), or name another one "
                                "in enforcer.yaml's checks.alert_topic")
        routes = self.settings.routes
        outputs = {t for r in routes for t in (r.sink, r.dlq)}
        if self.checks is not None:
            outputs.add(self.alert_topic)
        for r in routes:
            sources = [r.source]
            if r.pattern:
                # a pattern that finds the enforcer's own output would read it back forever
                loop = sorted(t for t in outputs if route_for(routes, t) == r)
                if loop:
                    raise EnforcerError(f"source pattern {r.source!r} matches the enforcer's "
                                        f"own output topic(s) {', '.join(loop)}: anchor it "
                                        "or rename them")
                # those that match now (a topic created later is checked by its produce)
                sources = sorted(t for t in counts if route_for(routes, t) == r)
            elif not counts.get(r.source):
                raise EnforcerError(f"source topic {r.source!r} does not exist on "
                                    f"{self.settings.bootstrap}")
            if self.settings.partitioning != "same":
                continue
            for src in sources:
                for t in (r.sink, r.dlq):
                    if counts.get(t, 0) < counts[src]:
                        raise EnforcerError(
                            f"topic {t!r} has {counts.get(t, 0)} partition(s), source "
                            f"{src!r} has {counts[src]}: create it with at least as many "
                            "(records keep their partition so per-partition order holds), "
                            "or set partitioning: key")

    # -- the query -------------------------------------------------------------------------
    def _job(self, kill_producing: bool = False,
             closed: Mapping[str, int] | None = None) -> EnforceJob:
        from kqlab.spark.enforcer_txn import txn_prefix

        routes = self.settings.routes
        return EnforceJob(self.policy,
                          {r.source: (r.sink, r.dlq) for r in routes if not r.pattern},
                          {**self._client_config(), **dict(self.settings.producer)},
                          self.settings.partitioning, self.settings.now, self._policy_id,
                          kill_producing, closed,
                          tuple((r.source, r.sink, r.dlq) for r in routes if r.pattern),
                          txn_prefix(self.checkpoint)
                          if self.settings.delivery == "exactly-once" else None,
                          self._client_config())

    def _die(self, phase: str) -> None:
        if self._kill == (phase, self._runs):
            _announce_kill(f"KQLAB_ENFORCER_KILL_AT={phase}:{self._runs}")
            os.killpg(os.getpgrp(), signal.SIGKILL)

    def _stream(self) -> Any:
        s = self.settings
        # routes by pattern: one subscribePattern for every route (both sources discover
        # the topics that come to match it while the query runs)
        pattern = source_pattern(s.routes)
        subscribe = ("subscribe", ",".join(r.source for r in s.routes)) if pattern is None \
            else ("subscribePattern", pattern)
        if s.connector == "spark":
            # Spark's Kafka source starts a new stream at "latest"; kqlab-kafka (the default
            # path) at "earliest": both read from the same place unless the config says
            reader = (self.spark.readStream.format("kafka")
                      .option("kafka.bootstrap.servers", s.bootstrap)
                      .option(*subscribe).option("includeHeaders", "true")
                      .option("startingOffsets", "earliest"))
            for k, v in s.client.items():
                reader = reader.option(f"kafka.{k}", str(v))
            for k, v in s.source.items():
                reader = reader.option(k, v)
            return reader.load()
        from kqlab.spark.kafka_source import register

        register(self.spark)
        opts = {"kafka.bootstrap.servers": s.bootstrap, subscribe[0]: subscribe[1],
                **{f"kafka.{k}": str(v) for k, v in s.client.items()}, **dict(s.source)}
        return self.spark.readStream.format("kqlab-kafka").options(**opts).load()

    def _on_micro_batch(self, df: Any, batch_id: int) -> None:
        """``foreachBatch``: judge and produce every record, then return (Spark commits)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        with self._batch_lock:
            if self._closed:
                raise EnforcerError("the enforcer is stopping: this micro-batch runs again "
                                    "on the next start")
            self._runs += 1
            t0 = time.monotonic()
            self._die("planned")
            before = self._attempts(batch_id)
            kill_producing = self._kill == ("producing", self._runs)
            closed = None if self.checks is None else self.checks.before(batch_id)
            if self.settings.connector == "spark":
                rows = self._sink_natively(df)
            else:
                rows = df.mapInArrow(enforce_records(self._job(kill_producing, closed)),
                                     from_arrow_schema(PRODUCED_SCHEMA)).collect()
            if self.checks is not None:
                self._judge_checks(batch_id, rows)
            self._die("flushed")
            self._account(batch_id, rows, before, time.monotonic() - t0)
            self._handled[batch_id] = self._runs
            self._ticked = time.monotonic()

    def _alert_producer(self) -> Any:
        """The driver's own idempotent producer for alert rows, with the enforcer's settings
        (not in the tasks' module-level cache: the tasks' closures must pickle)."""
        from confluent_kafka import Producer

        if self._producer is None:
            def on_delivery(err: Any, msg: Any) -> None:
                if err is not None:
                    self._alert_errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

            self._producer = Producer({**PRODUCER_DEFAULTS, **self._job().producer,
                                       "delivery.report.only.error": True,
                                       "on_delivery": on_delivery})
        return self._producer

    def _freshness_tick(self) -> None:
        """Between micro-batches, every trigger interval (at least a second), the freshness
        checks judged again against the wall clock: a topic gone silent runs no micro-batch,
        and its age grows all the same.  Not with ``--now`` (a fixed clock changes
        nothing) or ``--available-now``.  A failed delivery is reported on stderr and the
        state reloaded (the next micro-batch judges freshness again)."""
        s = self.settings
        if self.checks is None or not self.checks.has_freshness or s.now is not None or \
                s.available_now or time.monotonic() - self._ticked < max(s.trigger_seconds,
                                                                         1.0):
            return
        with self._batch_lock:
            self._ticked = time.monotonic()
            try:
                self._send_alerts(self.checks.tick(int(time.time() * 1000)))
            except EnforcerError as exc:
                self.checks.reset()
                print(f"kqlab enforcer: freshness alerts: {exc}", file=sys.stderr, flush=True)

    def _send_alerts(self, alerts: Sequence[dict[str, Any]]) -> None:
        """Produce alert rows to the alert topic and wait for them (:class:`EnforcerError`
        when one is not delivered)."""
        from kqlab.spark.enforcer_checks import alert_key

        if not alerts:
            return
        producer = self._alert_producer()
        errors = self._alert_errors
        errors.clear()
        for a in alerts:
            while True:
                try:
                    producer.produce(self.alert_topic, json.dumps(a).encode(), alert_key(a))
                    break
                except BufferError:
                    producer.poll(0.05)
        while producer.flush(1.0):
            pass
        if errors:
            first, n = errors[0], len(errors)
            errors.clear()
            raise EnforcerError(f"{n} alert row(s) were not delivered (first: {first})")

    def _judge_checks(self, batch_id: int, rows: Sequence[Any]) -> None:
        """The sample checks after a micro-batch's records are delivered: partials merged,
        closed windows judged, their alert rows produced and flushed, then the state saved
        under this micro-batch (a re-run starts again from the one before)."""
        assert self.checks is not None
        now = self.settings.now if self.settings.now is not None else int(time.time() * 1000)
        partitions = self.source_partitions(batch_id) if self.checks.needs_partitions \
            else None
        try:
            try:
                self._send_alerts(self.checks.after(batch_id, list(rows), now, partitions))
            except EnforcerError as exc:
                raise EnforcerError(f"{exc}; the micro-batch is not committed and runs "
                                    "again on restart") from None
            self.checks.save()
        except BaseException:
            self.checks.reset()  # the state in memory is this failed attempt's
            raise

    def source_partitions(self, batch_id: int) -> dict[str, list[int]]:
        """The topic-partitions the source reads in micro-batch ``batch_id``, those without
        a record too: the partitions of its end offsets in Spark's offset log
        (``<checkpoint>/spark/offsets/<batch id>``, written before the micro-batch runs:
        a line ``v1``, the batch's metadata, then one line per source, here the
        ``kqlab-kafka`` offsets ``{topic: {partition: offset}}``).  Exactly what the
        source reads, so a partition the source does not read is never judged silent."""
        from kqlab.spark.outputs import filesystem

        fs, base = filesystem(f"{self.checkpoint}/spark/offsets/{batch_id}")
        try:
            with fs.open_input_stream(base) as f:
                lines = f.read().decode().splitlines()
            out: dict[str, list[int]] = {}
            for line in lines[2:]:
                if line.strip() in ("", "-"):
                    continue
                doc = json.loads(line)
                if isinstance(doc, str):  # a source's offset kept as a JSON string
                    doc = json.loads(doc)
                for topic, parts in doc.items():
                    out.setdefault(str(topic), []).extend(int(p) for p in parts)
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            raise EnforcerError(
                f"cannot read the source's partitions of micro-batch {batch_id} from Spark's "
                f"offset log {base}: {exc}; the volume checks by partition need them (is the "
                "checkpoint location readable from the driver?)") from None
        return out

    def _sink_natively(self, df: Any) -> list[Any]:
        """``connector: spark``: Spark's Kafka rows → kqlab's records → judged rows →
        Spark's Kafka sink; the per-partition counts from the judged rows."""
        from pyspark.sql.pandas.types import from_arrow_schema

        from kqlab.spark.kafka_frames import records_frame

        s = self.settings
        records = records_frame(df)  # Spark's Kafka rows as kqlab's records columns
        judged = records.mapInArrow(judge_for_sink(self._job()),
                                    from_arrow_schema(SINK_SCHEMA)).cache()
        try:
            writer = judged.write.format("kafka").option("kafka.bootstrap.servers",
                                                         s.bootstrap)
            for k, v in {**dict(s.client), **PRODUCER_DEFAULTS, **dict(s.producer)}.items():
                writer = writer.option(f"kafka.{k}", str(v))
            writer.save()
            dlqs = {r.dlq for r in s.routes}
            counts = judged.groupBy("topic").count().collect()
            dead = sum(r["count"] for r in counts if r["topic"] in dlqs)
            total = sum(r["count"] for r in counts)
        finally:
            judged.unpersist()
        return [{"topic": "*", "partition": -1, "first_offset": None, "last_offset": None,
                 "records": total, "dead_lettered": dead, "by_rule": "{}",
                 "observed": "{}", "skipped": 0, "checks": None, "partials": None}]

    def _account(self, batch_id: int, rows: Sequence[Any], before: int,
                 seconds: float) -> None:
        """Add a finished attempt's counts; ``before`` earlier attempts at the same offsets
        may each have sent its records once already (``redelivered``)."""
        m = self.metrics
        n = sum(int(r["records"]) for r in rows)
        dead = sum(int(r["dead_lettered"]) for r in rows)
        by_rule: dict[str, int] = {}
        observed: dict[str, int] = {}
        for r in rows:
            for target, text in ((by_rule, r["by_rule"]), (observed, r["observed"])):
                for k, v in json.loads(text).items():
                    target[k] = target.get(k, 0) + int(v)
        skipped = sum(int(r["skipped"] or 0) for r in rows)
        m["records"] += n
        m["skipped"] = m.get("skipped", 0) + skipped
        m["forwarded"] += n - dead
        m["dead_lettered"] += dead
        m["micro_batches"] += 1
        for name, counts in (("by_rule", by_rule), ("observed", observed)):
            for k, v in counts.items():
                m[name][k] = m[name].get(k, 0) + v
        # exactly-once: a re-run sends only what no earlier attempt committed
        resent = 0 if self.settings.delivery == "exactly-once" else n * before
        if before:
            m["reruns"] += 1
            m["redelivered"] += resent
        if self.checks is not None:  # counters of the state this micro-batch left
            m["checks"] = self.checks.summary()
        self._save_metrics()
        line = {"event": "batch", "batch_id": batch_id, "records": n, "forwarded": n - dead,
                "dead_lettered": dead, "by_rule": by_rule, "observed": observed,
                "rerun": before > 0, "attempt": before + 1, "redelivered": resent,
                "skipped": skipped,
                "reject_rate": round(dead / n, 6) if n else 0.0,
                "lag": sum(self.lag.values()) if self.lag else None,
                "seconds": round(seconds, 3),
                **({"checks": self.checks.line} if self.checks is not None else {}),
                "partitions": [{"topic": r["topic"], "partition": r["partition"],
                                "first_offset": r["first_offset"],
                                "last_offset": r["last_offset"]} for r in rows]}
        self.batches.append(line)
        for fn in self.on_batch:
            with contextlib.suppress(Exception):
                fn(line)
        if self.settings.json_metrics:
            print(json.dumps(line), flush=True)

    def _listener(self) -> Any:
        from pyspark.sql.streaming import StreamingQueryListener

        owner = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's name
                pass

            def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's name
                p = event.progress
                if owner.query is None or str(p.id) != str(owner.query.id):
                    return
                owner._progress(p)

            def onQueryIdle(self, event: Any) -> None:  # noqa: N802 - Spark's name
                pass

            def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 - Spark's name
                pass

        return Listener()

    def _progress(self, progress: Any) -> None:
        """After Spark committed a micro-batch: the lag per partition, and the committed
        kill point."""
        from kqlab.spark.streaming import _offsets

        for src in progress.sources or ():
            end = _offsets(src.endOffset)
            latest = _offsets(getattr(src, "latestOffset", None))
            for t, parts in latest.items():
                for p, o in parts.items():
                    self.lag[f"{t}-{p}"] = max(o - end.get(t, {}).get(p, o), 0)
        run = self._handled.get(int(progress.batchId))
        if run is not None and self._kill == ("committed", run):
            self._runs = run
            self._die("committed")

    def run(self) -> dict[str, Any]:
        """Run until :meth:`stop` (or, with ``available_now``, until done); the final
        metrics.  A failed micro-batch (a delivery failed) raises :class:`EnforcerError`."""
        s = self.settings
        self.check_topics()
        self._save_metrics()  # this start counts as a restart even if no batch finishes
        listener = self._listener()
        self.spark.streams.addListener(listener)
        writer = (self._stream().writeStream.foreachBatch(self._on_micro_batch)
                  .queryName(f"kqlab-enforcer-{self.policy.name}")
                  .option("checkpointLocation", f"{self.checkpoint}/spark"))
        writer = writer.trigger(availableNow=True) if s.available_now else \
            writer.trigger(processingTime=f"{s.trigger_seconds:g} seconds")
        try:
            self.query = writer.start()
            while self.query.isActive:
                if self._stop.is_set():
                    with self._batch_lock:  # the micro-batch in flight finishes first
                        self._closed = True
                        self.query.stop()
                    break
                self.query.awaitTermination(0.2)
                self._freshness_tick()
            if not self._closed:
                exc = self.query.exception()
                if exc is not None:
                    text = str(exc).strip().splitlines()
                    raise EnforcerError(f"the enforcer's query failed: "
                                        f"{text[0] if text else exc}")
        finally:
            with contextlib.suppress(Exception):
                self.spark.streams.removeListener(listener)
            if self._producer is not None:  # every alert was flushed with its micro-batch
                self._producer = None  # its client closes (no reconnecting after the run)
        return self.snapshot()

    def stop(self) -> None:
        """Finish the micro-batch in flight, then stop (signal-safe)."""
        self._stop.set()

    def snapshot(self) -> dict[str, Any]:
        """The counters over every run on this checkpoint, and the current lag."""
        m = dict(self.metrics)
        m["lag"] = dict(sorted(self.lag.items()))
        m["lag_total"] = sum(self.lag.values())
        return m


# -- the entry point -------------------------------------------------------------------------
def _session(master: str | None) -> Any:
    """Under ``spark-submit`` (a JVM gateway exists): its session, as submitted; else a
    local one from :func:`kqlab.spark.spark_session`."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName("kqlab-enforcer").getOrCreate()
        spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
        return spark
    from kqlab.spark.session import spark_session

    return spark_session(master or "local[2]", app_name="kqlab-enforcer")


def _settings(items: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    both: dict[str, str] = {}
    prod: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise EnforcerConfigError(f"-X expects KEY=VALUE, got {item!r}")
        if key.startswith("producer."):
            prod[key.removeprefix("producer.")] = value
        else:
            both[key] = value
    return both, prod


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="kqlab-spark-enforcer",
        description="The Structured Streaming enforcer: read the source topics, judge every "
        "record with the policy, forward valid records unchanged to the sink and invalid "
        "ones to the dead-letter topic with failure headers; at least once, checkpointed.",
        epilog="exit status: 0 stopped (SIGTERM/SIGINT, or --available-now done), 1 a "
        "micro-batch failed (a delivery failed; nothing of it committed), 2 a wrong request "
        "(config, policy edited after export, missing topics)")
    ap.add_argument("--config", required=True, help="enforcer.yaml from `kqlab export "
                    "--target spark-streaming`")
    ap.add_argument("--bootstrap", required=True, help="bootstrap servers, host:port[,...]")
    ap.add_argument("--checkpoint", required=True, help="the checkpoint location (a path, "
                    "or hdfs://, s3a://, gs://, abfs:// on a cluster); restart with the "
                    "same one to resume")
    ap.add_argument("-X", "--client-config", action="append", default=[], metavar="KEY=VALUE",
                    help="librdkafka setting for reading and producing; prefix producer. "
                    "for the producer only; repeatable")
    ap.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                    help="fixed clock for the timestamp check (default: the wall clock)")
    ap.add_argument("--available-now", action="store_true",
                    help="enforce what the topics hold now, then stop")
    ap.add_argument("--master", default=None,
                    help="Spark master when not run by spark-submit (default local[2])")
    ap.add_argument("--json-metrics", action="store_true",
                    help="a JSON line per micro-batch on stdout")
    ap.add_argument("--json", action="store_true",
                    help="one JSON document on stdout at exit: the final metrics")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kqlab.spark.enforcer`` / ``spark-submit enforcer_main.py``."""
    args = parser().parse_args(argv)
    try:
        enforcer = _build(args)
    except (KqlabError, ValueError) as exc:
        print(f"kqlab enforcer: error: {exc}", file=sys.stderr)
        return 2

    def on_signal(signum: int, frame: Any) -> None:
        enforcer.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        final = enforcer.run()
    except EnforcerError as exc:
        if enforcer.query is None:
            print(f"kqlab enforcer: error: {exc}", file=sys.stderr)
            return 2
        print(f"kqlab enforcer: error: {exc}", file=sys.stderr)
        if args.json or args.json_metrics:
            print(json.dumps({"event": "failed", "error": str(exc), **enforcer.snapshot()}),
                  flush=True)
        return 1
    if args.json or args.json_metrics:
        print(json.dumps({"event": "stopped", **final}), flush=True)
    else:
        print(f"kqlab enforcer stopped: {final['records']} records, {final['forwarded']} "
              f"forwarded, {final['dead_lettered']} dead-lettered, {final['redelivered']} "
              f"redelivered after restarts", file=sys.stderr)
    return 0


def _build(args: argparse.Namespace) -> Enforcer:
    from kqlab.sources.policy_files import load_policy_file, prepare_registries

    cfg = load_enforcer_file(args.config)
    policy = load_policy_file(str(cfg.policy_path))
    if cfg.content_hash and policy.content_hash() != cfg.content_hash:
        raise EnforcerConfigError(
            f"policy {cfg.policy_path} has content hash {policy.content_hash()[:16]}… but "
            f"{cfg.path} expects {cfg.content_hash[:16]}…: the policy was edited after "
            "export; vet and export it again")
    prepare_registries(policy)
    both, prod = _settings(args.client_config)
    settings = EnforcerSettings(
        routes=cfg.routes, bootstrap=args.bootstrap, checkpoint=args.checkpoint, client=both,
        producer=prod, source=cfg.source, partitioning=cfg.partitioning, now=args.now,
        trigger_seconds=cfg.trigger_seconds, available_now=args.available_now,
        connector=cfg.connector, json_metrics=args.json_metrics, checks=cfg.checks,
        delivery=cfg.delivery)
    return Enforcer(_session(args.master), policy, settings)


if __name__ == "__main__":
    sys.exit(main())
