"""Redrive: send the dead letters that pass an amended policy back to their source topic (or
a chosen one), exactly once across re-runs and crashes.

:func:`redrive` reads the dead-letter topic, recovers what an interrupted earlier run may
have sent (:mod:`kqlab.dlq.redrive_log`), plans (:func:`~kqlab.dlq.revalidate.revalidate`)
and — only with ``execute=True`` — sends, chunk by chunk: log intent, produce, (every
record of the chunk acknowledged) log done; chunks are pipelined, the next produced while
earlier ones are in flight.  A dry run (the default) reads and plans and writes nothing.

What a redriven record is: the original key, value and headers (the failure headers
removed), the original timestamp (the producer's clock where the dead letter has none), plus
one header ``kqlab.redrive: <dlq topic>:<partition>:<offset>`` naming the dead letter it
came from.  It goes to its source partition when it returns to its source topic (where it
was), else the producer's partitioner places it by key (murmur2, as the Java client does).
The producer is idempotent (``enable.idempotence=true``, ``acks=all``).  The dead letters
themselves stay in the dead-letter topic (Kafka cannot delete single records): the log says
which were redriven, and a later triage sees their markers when they come back.

Fault injection (for the crash test): ``KQLAB_REDRIVE_KILL_AT=PHASE:N`` SIGKILLs the process
when its ``N``-th chunk reaches ``PHASE`` — one of :data:`KILL_PHASES`: ``intent`` (intent
logged, nothing produced), ``producing`` (half the chunk produced), ``produced`` (all
produced, not all acknowledged), ``flushed`` (all of it acknowledged, done not logged),
``done`` (done logged).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import gc
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.dlq.headers import REDRIVE_HEADER
from kqlab.dlq.parse import last_header
from kqlab.dlq.redrive_log import RedriveLog
from kqlab.dlq.revalidate import RedrivePlan, marker_values, revalidate
from kqlab.dlq.triage import DeadLetterError, raw_fetch_possible, read_dead_letters

if TYPE_CHECKING:
    from kqlab.policy.model import Policy
    from kqlab.serde.schemas import SchemaResolver

__all__ = ["KILL_PHASES", "RecoveryReport", "RedriveResult", "recover", "redrive"]

#: the points of a chunk's cycle ``KQLAB_REDRIVE_KILL_AT`` can kill the process at
KILL_PHASES = ("intent", "producing", "produced", "flushed", "done")
#: records per chunk: one intent line and one done line each
CHUNK = 10_000
#: ``progress(stage, done, total)``: a stage name, units done and the total (None: unknown)
ProgressFn = Callable[[str, int, "int | None"], None]


def _kill_at() -> tuple[str, int] | None:
    spec = os.environ.get("KQLAB_REDRIVE_KILL_AT")
    if not spec:
        return None
    phase, _, n = spec.partition(":")
    if phase not in KILL_PHASES or not n.isdigit() or int(n) < 1:
        raise DeadLetterError(f"KQLAB_REDRIVE_KILL_AT must be PHASE:N with PHASE in "
                              f"{', '.join(KILL_PHASES)} and N >= 1, not {spec!r}")
    return phase, int(n)


@dataclass
class RecoveryReport:
    """What recovery found for the intents an interrupted run left: ``found`` in the target
    (now done), ``missing`` (sent again by this run)."""

    pending: int = 0
    found: int = 0
    missing: int = 0
    scanned: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"pending": self.pending, "found": self.found, "missing": self.missing,
                "scanned": self.scanned}


@dataclass
class RedriveResult:
    """A redrive (or its dry run): the plan, and what was sent where."""

    plan: RedrivePlan
    dry_run: bool
    log: str | None = None
    run: str | None = None
    delivered: int = 0
    #: dead letters the broker refused on redrive: ``(partition, offset, error)``
    failed: list[tuple[int, int, str]] = field(default_factory=list)
    #: dead letters whose delivery's fate is unknown (left to the next run's recovery)
    unknown: list[tuple[int, int, str]] = field(default_factory=list)
    recovery: RecoveryReport = field(default_factory=RecoveryReport)
    elapsed_s: float = 0.0
    send_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every record that was to be sent was delivered."""
        return not self.failed and not self.unknown

    def summary(self, examples: int = 5) -> dict[str, Any]:
        """The result as one JSON-ready dict (``kqlab dlq redrive --json``)."""
        doc = self.plan.summary(examples)
        doc.update({
            "dlq": self.plan.dead.topic, "dry_run": self.dry_run, "log": self.log,
            "run": self.run, "delivered": self.delivered,
            "failed": [{"partition": p, "offset": o, "error": e} for p, o, e in self.failed],
            "unknown": [{"partition": p, "offset": o, "error": e} for p, o, e in self.unknown],
            "recovered": self.recovery.to_dict(), "elapsed_s": round(self.elapsed_s, 3),
            "records_per_s": round(self.delivered / self.send_s, 1) if self.send_s else None,
            "notes": [*doc["notes"], *self.notes],
        })
        if not self.dry_run:
            doc["redrive"]["planned"] = (doc["redrive"]["records"] + len(self.failed)
                                         + len(self.unknown))
        return doc


def _quiet_logger() -> Any:
    import logging

    logger = logging.getLogger("kqlab.dlq.librdkafka")
    if not logger.handlers:
        logger.propagate = False
        logger.addHandler(logging.NullHandler())
    return logger


def _partition_counts(config: Mapping[str, Any], topics: list[str], timeout_s: float
                      ) -> dict[str, int]:
    """Partition counts of the ``topics`` that exist (one Metadata request)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**config, "logger": _quiet_logger()})
    try:
        md = admin.list_topics(timeout=timeout_s)
    except Exception as exc:
        raise DeadLetterError(f"no metadata from {config.get('bootstrap.servers')} within "
                              f"{timeout_s:g}s: {exc}") from None
    return {t: len(md.topics[t].partitions) for t in topics
            if t in md.topics and md.topics[t].error is None}


def _low_watermarks(config: Mapping[str, Any], counts: Mapping[str, int], timeout_s: float
                    ) -> dict[str, dict[int, int]]:
    """Per target partition, the end offset now (ListOffsets latest): where recovery reads
    from.  It may be low (Tansu's is for multi-record batches), never high, so a record this
    run writes is always after it."""
    from confluent_kafka import Consumer, TopicPartition

    from kqlab.sources.kafka_client import consumer_conf, new_group_id

    errors: list[str] = []
    c = Consumer(consumer_conf(config, new_group_id(), errors))
    try:
        out: dict[str, dict[int, int]] = {}
        for t, n in counts.items():
            out[t] = {}
            for p in range(n):
                try:
                    _, hi = c.get_watermark_offsets(TopicPartition(t, p), timeout=timeout_s)
                except Exception as exc:
                    raise DeadLetterError(f"no offsets for {t}[{p}] within {timeout_s:g}s: "
                                          f"{exc}") from None
                out[t][p] = max(int(hi), 0)
        return out
    finally:
        c.close()


def recover(log: RedriveLog, config: Mapping[str, Any], dlq_topic: str, *,
            run: str, timeout_s: float = 30.0,
            progress: ProgressFn | None = None) -> RecoveryReport:
    """Settle the intents an interrupted run left for ``dlq_topic``: read each target
    partition from the interrupted run's ``scan_from`` to its end, find records whose last
    ``kqlab.redrive`` header names a pending dead letter; log them ``found`` (done) and the
    rest ``missing`` (to be sent again)."""
    from kqlab.sources.kafka import sample

    pending = log.state(dlq_topic, "intent")
    report = RecoveryReport(pending=len(pending))
    if not pending:
        return report
    by_marker = {f"{dlq_topic}:{p}:{o}": (p, o) for (p, o) in pending}
    # what to read: per target topic, the partitions pending records may be in, each from
    # the earliest scan_from of the runs that left them
    # (a run without its start offsets — a log from elsewhere — means: read the whole topic)
    wanted: dict[str, dict[int, int] | None] = {}
    for entry in pending.values():
        starts = log.scan_from(entry.run).get(entry.target_topic)
        if not starts:
            wanted[entry.target_topic] = None
            continue
        parts = starts.keys() if entry.target_partition < 0 else [entry.target_partition]
        for p in parts:
            s = starts.get(p, 0)
            cur = wanted.setdefault(entry.target_topic, {})
            if cur is not None:
                cur[p] = min(cur.get(p, s), s)
    found: list[tuple[int, int, str, int, int]] = []
    seen: set[tuple[int, int]] = set()
    for topic, starts_or_all in sorted(wanted.items()):
        if progress is not None:
            progress(f"recovering: reading {topic}", 0, None)
        got = sample(dict(config), topic,
                     partitions=sorted(starts_or_all) if starts_or_all else None,
                     start_offset=starts_or_all or None, allow_empty=True,
                     timeout_s=timeout_s, exact_framing=raw_fetch_possible(config))
        recs = got.records
        report.scanned += recs.num_rows
        if not recs.num_rows:
            continue
        marks = last_header(recs["headers"].combine_chunks(), REDRIVE_HEADER)
        hit = np.flatnonzero(np.asarray(pc.fill_null(pc.is_in(
            marks, value_set=pa.array([m.encode() for m in by_marker], pa.binary())), False)
            .to_numpy(zero_copy_only=False)))
        if not len(hit):
            continue
        vals = marks.take(pa.array(hit)).to_pylist()
        parts = recs["partition"].take(pa.array(hit)).to_pylist()
        offs = recs["offset"].take(pa.array(hit)).to_pylist()
        for v, tp, to in zip(vals, parts, offs, strict=True):
            key = by_marker[v.decode()]
            if key not in seen:
                seen.add(key)
                found.append((key[0], key[1], topic, int(tp), int(to)))
    missing = [k for k in pending if k not in seen]
    log.recovered(run, dlq_topic, found, missing)
    report.found, report.missing = len(found), len(missing)
    return report


def redrive(config_or_bootstrap: str | Mapping[str, Any], topic: str, policy: Policy, *,
            to: str | None = None, execute: bool = False,
            log: str | os.PathLike[str] | RedriveLog | None = None, now: int | None = None,
            chunk_size: int = CHUNK, producer_config: Mapping[str, Any] | None = None,
            timeout_s: float = 30.0, progress: ProgressFn | None = None,
            resolver: SchemaResolver | None = None) -> RedriveResult:
    """Re-validate the dead letters of ``topic`` against ``policy`` and, with
    ``execute=True``, redrive the ones that pass (see the module doc).

    ``to``: send them there instead of their source topics.  ``log``: the redrive log (a path
    or an open :class:`RedriveLog`); required to execute — without it a re-run could not
    know what was sent.  A dry run reads it (if it exists) to leave out what was redriven.
    ``producer_config`` adds librdkafka settings (security, ``client.id`` ...); idempotence
    and ``acks=all`` are the redrive's own.  ``progress(stage, done, total)`` is called per
    stage and per chunk sent.
    """
    with _gc_paused():
        return _redrive(config_or_bootstrap, topic, policy, to=to, execute=execute, log=log,
                        now=now, chunk_size=chunk_size, producer_config=producer_config,
                        timeout_s=timeout_s, progress=progress, resolver=resolver)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while redriving: a redrive allocates a few objects per
    record (header tuples, delivery callbacks, log entries), none of them cyclic, and the
    collector's passes over a growing heap cost more than the work itself."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _redrive(config_or_bootstrap: str | Mapping[str, Any], topic: str, policy: Policy, *,
             to: str | None, execute: bool, log: str | os.PathLike[str] | RedriveLog | None,
             now: int | None, chunk_size: int, producer_config: Mapping[str, Any] | None,
             timeout_s: float, progress: ProgressFn | None,
             resolver: SchemaResolver | None) -> RedriveResult:
    """:func:`redrive`'s body."""
    from kqlab.sources.kafka_client import client_config

    t0 = time.monotonic()
    if chunk_size < 1:
        raise DeadLetterError(f"chunk_size must be at least 1, not {chunk_size}")
    if execute and log is None:
        raise DeadLetterError("an executed redrive needs a redrive log (log=PATH, --log "
                              "FILE): without it a re-run could send a record twice")
    kill = _kill_at() if execute else None
    config, bootstrap = client_config(config_or_bootstrap)
    config = {**config, "logger": _quiet_logger()}
    rlog = log if isinstance(log, RedriveLog) else RedriveLog(log) if log is not None else None
    if rlog is not None and execute:
        rlog.open()
    try:
        def stage(name: str, done: int = 0, total: int | None = None) -> None:
            if progress is not None:
                progress(name, done, total)

        stage(f"reading {topic}")

        def read_progress(records: int, nbytes: int, done: int, rate: float) -> None:
            stage(f"reading {topic}: {records:,} dead letters", records, None)

        dead = read_dead_letters(config, topic, timeout_s=timeout_s, progress=read_progress)
        targets = sorted({to} if to is not None else {
            t for t in dead.records["source_topic"].unique().to_pylist() if t is not None})
        counts = _partition_counts(config, targets, timeout_s) if targets else {}
        if to is not None and to not in counts:
            raise DeadLetterError(f"the target topic {to!r} does not exist on {bootstrap}: "
                                  "create it, or check the name given to --to")
        run = time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
        if execute:
            # set up while re-validating: the producer connects and gets its idempotent
            # producer id in librdkafka's threads, the recovery start offsets (read before
            # anything is sent) come from a helper thread
            pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kqlab-dlq")
            scan_from = pool.submit(_low_watermarks, config, counts, timeout_s)
            pool.shutdown(wait=False)
            producer = _producer(config, producer_config or {})
        recovery = RecoveryReport()
        if rlog is not None and execute and rlog.state(topic, "intent"):
            stage("recovering an interrupted redrive")
            recovery = recover(rlog, config, topic, run=run, timeout_s=timeout_s,
                               progress=progress)
        stage("re-validating", 0, len(dead))
        plan = revalidate(
            dead, policy, to=to, now=now, partitions=counts, resolver=resolver,
            done=rlog.state(topic, "done") if rlog is not None else None,
            pending=rlog.state(topic, "intent") if rlog is not None else None)
        result = RedriveResult(plan, dry_run=not execute,
                               log=str(rlog.path) if rlog is not None else None,
                               recovery=recovery, notes=list(rlog.notes) if rlog else [])
        if execute:
            assert rlog is not None
            result.run = run
            _send(plan, producer, rlog, run, result, chunk_size=chunk_size,
                  scan_from=scan_from.result(), stage=stage, kill=kill, bootstrap=bootstrap)
        result.elapsed_s = time.monotonic() - t0
        return result
    finally:
        if rlog is not None and not isinstance(log, RedriveLog):
            rlog.close()


def _die(kill: tuple[str, int] | None, phase: str, chunk_no: int) -> None:
    """SIGKILL this process if ``KQLAB_REDRIVE_KILL_AT`` names this chunk and ``phase``."""
    if kill == (phase, chunk_no):
        print(f"kqlab dlq redrive: KQLAB_REDRIVE_KILL_AT={phase}:{chunk_no}: SIGKILL",
              file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


#: delivery errors after which the record is certainly not in the target (the broker refused
#: it, or it never left); any other error's fate is unknown and left to recovery
def _definitely_not_written(err: Any) -> bool:
    from confluent_kafka import KafkaError

    code = err.code()
    if code > 0:  # a broker error code: the broker answered and refused the batch
        return not err.retriable()
    return code in (KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION,
                    KafkaError._INVALID_ARG, KafkaError.MSG_SIZE_TOO_LARGE)


class _Chunk:
    """One chunk in flight: its dead letters, where each landed or its error (filled by the
    delivery callbacks), and how many deliveries are still outstanding."""

    __slots__ = ("do", "dp", "errors", "no", "offset", "partition", "remaining", "topics")

    def __init__(self, no: int, dp: list[int], do: list[int], topics: list[str]) -> None:
        self.no, self.dp, self.do, self.topics = no, dp, do, topics
        k = len(dp)
        self.remaining = k
        self.offset = [-1] * k
        self.partition = [-1] * k
        self.errors: dict[int, Any] = {}

    def report(self, i: int, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors[i] = err
        else:
            self.offset[i] = msg.offset()
            self.partition[i] = msg.partition()
        self.remaining -= 1

    def outcome(self) -> tuple[list[tuple[int, int, str, int, int]], list[tuple[int, int, str]],
                               list[tuple[int, int, str]]]:
        """(delivered, failed, unknown) of a settled chunk."""
        delivered: list[tuple[int, int, str, int, int]] = []
        failed: list[tuple[int, int, str]] = []
        unknown: list[tuple[int, int, str]] = []
        errors = self.errors
        for i, (p, o, t, tp, to) in enumerate(zip(self.dp, self.do, self.topics,
                                                   self.partition, self.offset, strict=True)):
            err = errors.get(i) if errors else None
            if err is None:
                delivered.append((p, o, t, tp, to))
            else:
                text = f"{err.name()}: {err.str()}"
                (failed if _definitely_not_written(err) else unknown).append((p, o, text))
        return delivered, failed, unknown


#: chunks produced but not yet settled before the next one waits for the oldest (bounds
#: memory and keeps the pipeline full: a chunk's done line is written as soon as all of it
#: is acknowledged)
_IN_FLIGHT = 3


def _producer(config: Mapping[str, Any], producer_config: Mapping[str, Any]) -> Any:
    """The redrive's producer: idempotent, ``acks=all``, murmur2 partitioning (where a Java
    producer puts a key) for records not sent to a partition of their own."""
    from confluent_kafka import Producer

    return Producer({
        **config, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000,
        "batch.num.messages": 10_000, "partitioner": "murmur2_random",
        **dict(producer_config),
        # the redrive's own contract: idempotent, every replica acknowledges
        "enable.idempotence": True, "acks": "all"})


def _send(plan: RedrivePlan, producer: Any, rlog: RedriveLog, run: str,
          result: RedriveResult, *, chunk_size: int, scan_from: dict[str, dict[int, int]],
          stage: Callable[..., None], kill: tuple[str, int] | None, bootstrap: str) -> None:
    """Send the plan's ``redrive`` rows, chunk by chunk: intent logged → produced → (all
    acknowledged) → done logged.  Chunks are pipelined — the next is logged and produced
    while earlier ones are in flight — and settled in order, so no flush stalls the producer
    between chunks; every record is still logged as an intent before it is produced, and as
    done only once the broker acknowledged it."""
    from collections import deque

    from confluent_kafka import KafkaException

    rows = plan.rows("redrive")
    topic = plan.dead.topic
    take = pa.array(rows)
    d = plan.decisions.take(take)
    targets = d["target_topic"].to_pylist()
    rlog.start_run(run, topic, at=int(time.time() * 1000), bootstrap=bootstrap,
                   policy=f"{plan.policy_name}@{plan.policy_hash[:12]}", to=plan.to,
                   scan_from=scan_from)
    stage("redriving", 0, len(rows))
    if not len(rows):
        return
    t = plan.dead.records.select(["dlq_partition", "dlq_offset", "timestamp", "key", "value",
                                  "headers"]).take(take)
    dps = t["dlq_partition"].to_pylist()
    dos = t["dlq_offset"].to_pylist()
    tparts = d["target_partition"].to_pylist()
    keys = t["key"].to_pylist()
    values = t["value"].to_pylist()
    stamps = t["timestamp"].to_pylist()
    headers = _header_lists(t["headers"], marker_values(topic, np.asarray(dps, np.int64),
                                                         np.asarray(dos, np.int64)))
    t_send = time.monotonic()
    inflight: deque[_Chunk] = deque()
    settled = 0

    def settle(block: bool) -> None:
        """Log done for the chunks at the head whose deliveries all came back (``block``:
        wait for the head)."""
        nonlocal settled
        while inflight:
            head = inflight[0]
            if head.remaining > 0:
                if not block:
                    return
                producer.poll(0.05)
                continue
            _die(kill, "flushed", head.no)
            delivered, failed, unknown = head.outcome()
            rlog.done(run, head.no, topic, delivered, failed, unknown)
            _die(kill, "done", head.no)
            inflight.popleft()
            result.delivered += len(delivered)
            result.failed += failed
            result.unknown += unknown
            settled += len(head.dp)
            stage("redriving", settled, len(rows))
            block = False  # waited for one: take the rest only if already back

    produce = producer.produce
    for chunk_no, start in enumerate(range(0, len(rows), chunk_size), start=1):
        end = min(start + chunk_size, len(rows))
        chunk = _Chunk(chunk_no, dps[start:end], dos[start:end], targets[start:end])
        rlog.intent(run, chunk_no, topic, zip(chunk.dp, chunk.do, chunk.topics,
                                              tparts[start:end], strict=True))
        _die(kill, "intent", chunk_no)
        report = chunk.report
        half = start + (end - start) // 2 if kill == ("producing", chunk_no) else -1
        inflight.append(chunk)
        for i in range(start, end):
            if i == half:
                _die(kill, "producing", chunk_no)
            ts = stamps[i]
            while True:
                try:
                    produce(targets[i], values[i], keys[i], partition=tparts[i],
                            timestamp=ts if ts is not None and ts > 0 else 0,
                            headers=headers[i],
                            on_delivery=functools.partial(report, i - start))
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
                except KafkaException as exc:  # refused before sending (e.g. too large)
                    chunk.errors[i - start] = exc.args[0]
                    chunk.remaining -= 1
                    break
        _die(kill, "produced", chunk_no)
        producer.poll(0)
        settle(block=len(inflight) > _IN_FLIGHT)
    while producer.flush(1.0):
        pass
    settle(block=True)
    result.send_s = time.monotonic() - t_send
    _mark_outcomes(plan, result)


def _header_lists(headers: pa.ChunkedArray | pa.Array, markers: list[bytes]
                  ) -> list[list[tuple[str, str | bytes | None]]]:
    """Per record, its headers as the producer takes them, with the marker last."""
    lists = headers.combine_chunks() if isinstance(headers, pa.ChunkedArray) else headers
    counts = np.asarray(pc.fill_null(pc.list_value_length(lists), 0).to_numpy(
        zero_copy_only=False), dtype=np.int64)
    flat = pc.list_flatten(lists)
    pairs: list[tuple[str, str | bytes | None]] = list(zip(
        flat.field("key").to_pylist(), flat.field("value").to_pylist(), strict=True))
    ends = np.cumsum(counts).tolist()
    starts = [0, *ends[:-1]]
    out = []
    for s, e, m in zip(starts, ends, markers, strict=True):
        h = pairs[s:e]
        h.append((REDRIVE_HEADER, m))
        out.append(h)
    return out


def _mark_outcomes(plan: RedrivePlan, result: RedriveResult) -> None:
    """Rows that were to be redriven but failed or timed out: ``stay`` with why."""
    bad = {(p, o): "failed" for p, o, _ in result.failed}
    bad.update({(p, o): "unknown" for p, o, _ in result.unknown})
    msg = {(p, o): e for p, o, e in [*result.failed, *result.unknown]}
    if not bad:
        return
    d = plan.decisions
    parts = d["dlq_partition"].to_pylist()
    offs = d["dlq_offset"].to_pylist()
    decision = d["decision"].to_pylist()
    why = d["why"].to_pylist()
    message = d["message"].to_pylist()
    for i, key in enumerate(zip(parts, offs, strict=True)):
        if key in bad:
            decision[i], why[i], message[i] = "stay", bad[key], msg[key]
    plan.decisions = d.set_column(d.schema.get_field_index("decision"), "decision",
                                  pa.array(decision, pa.string())) \
        .set_column(d.schema.get_field_index("why"), "why", pa.array(why, pa.string())) \
        .set_column(d.schema.get_field_index("message"), "message",
                    pa.array(message, pa.string()))


def default_log_path(topic: str) -> Path:
    """The CLI's redrive log when ``--log`` is not given: ``<topic>.redrive.jsonl`` here."""
    return Path(f"{topic}.redrive.jsonl")
