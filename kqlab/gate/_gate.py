"""The validating gate's loop: consume a raw topic, judge every poll batch at once, forward
valid records to the sink and invalid ones to the dead-letter topic, then commit.

Delivery guarantee (at-least-once), and why the loop is shaped the way it is
--------------------------------------------------------------------------------
One iteration handles one poll batch from start to finish: ``consume`` → records table →
:class:`~kqlab.gate._judge.Judge` → ``produce`` every record → ``flush`` until the producer's
queue is empty → commit ``offset + 1`` of the last record per partition, synchronously.  The
producer is idempotent (``enable.idempotence``: no duplicates or reordering from its own
retries) and reports only failed deliveries (``delivery.report.only.error``), so an empty queue
with no error callback means every record of the batch is acknowledged by the broker
(``acks=all``).  A failed delivery stops the gate *before* the commit (exit status 1): the
batch is consumed again after a restart.  A crash anywhere in between does the same, so a
record can be forwarded twice, never lost.

Because a batch is committed before the next ``consume`` call, and the client runs rebalance
callbacks only inside ``consume``, a partition is never revoked with records in flight: group
members can come and go (scale out by starting more gates with the same ``group``).

SIGTERM/SIGINT only set a flag (:meth:`Gate.stop`): the batch in flight is finished, flushed and
committed, then the consumer leaves the group and :meth:`Gate.run` returns.

Fault injection (for the crash test): ``KQLAB_GATE_KILL_AT=PHASE:N`` makes the process SIGKILL
itself when its ``N``-th poll batch reaches ``PHASE`` — one of :data:`KILL_PHASES`: ``polled``
(records consumed, none produced), ``producing`` (half the batch produced), ``produced``
(all produced, not flushed), ``flushed`` (all delivered, not committed), ``committed``.
Unset (always, in production), it costs one ``None`` test per batch.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from kqlab.errors import KqlabError
from kqlab.gate._judge import Judge
from kqlab.policy.model import Policy
from kqlab.records import HEADER_TYPE, RECORDS_SCHEMA

__all__ = ["Gate", "GateError", "GateMetrics", "GateSettings", "Route", "failure_headers",
           "policy_id", "records_table"]

log = logging.getLogger("kqlab.gate")

#: failure headers appended (after the record's own headers) to every dead-lettered record
H_RULE, H_MESSAGE = "kqlab.rule", "kqlab.message"
H_TOPIC, H_PARTITION, H_OFFSET = "kqlab.source.topic", "kqlab.source.partition", \
    "kqlab.source.offset"
H_POLICY = "kqlab.policy"

#: the points of a poll batch's cycle ``KQLAB_GATE_KILL_AT`` can kill the process at
KILL_PHASES = ("polled", "producing", "produced", "flushed", "committed")


def policy_id(policy: Policy) -> bytes:
    """The ``kqlab.policy`` header's value: the policy's name and content hash (12 digits)."""
    return f"{policy.name}@{policy.content_hash()[:12]}".encode()


def failure_headers(headers: Any, rule: str, message: str, topic: str, partition: int,
                    offset: int, policy: bytes) -> list[tuple[str, bytes | None]]:
    """A dead-lettered record's headers: its own (order and duplicates kept), then the failure
    (rule, message), where it came from (source topic, partition, offset) and the policy
    (:func:`policy_id`).  Every enforcer that dead-letters builds them here, so a DLQ reader
    sees one format whichever wrote the record."""
    return [*(headers or ()), (H_RULE, rule.encode()), (H_MESSAGE, message.encode()),
            (H_TOPIC, topic.encode()), (H_PARTITION, str(partition).encode()),
            (H_OFFSET, str(offset).encode()), (H_POLICY, policy)]


def _kill_at() -> tuple[str, int] | None:
    spec = os.environ.get("KQLAB_GATE_KILL_AT")
    if not spec:
        return None
    phase, _, n = spec.partition(":")
    if phase not in KILL_PHASES or not n.isdigit() or int(n) < 1:
        raise GateError(f"KQLAB_GATE_KILL_AT must be PHASE:N with PHASE in "
                        f"{', '.join(KILL_PHASES)} and N >= 1, not {spec!r}")
    return phase, int(n)


class GateError(KqlabError):
    """The gate cannot start as configured, or a delivery failed (nothing was committed)."""


@dataclass(frozen=True, kw_only=True)
class Route:
    """Where the records of one source topic go."""

    source: str
    sink: str
    dlq: str


@dataclass(frozen=True, kw_only=True)
class GateSettings:
    """Everything a gate run needs besides the policy (deployment settings, no secrets kept
    beyond the librdkafka config the caller passes)."""

    routes: tuple[Route, ...]
    bootstrap: str
    group: str
    #: librdkafka settings for both clients (security, client.id ...)
    client: Mapping[str, Any] = field(default_factory=dict)
    consumer: Mapping[str, Any] = field(default_factory=dict)
    producer: Mapping[str, Any] = field(default_factory=dict)
    #: most records per poll batch (one judge call, one flush, one commit)
    batch_max: int = 20_000
    poll_timeout: float = 0.2
    #: "same": a record keeps its source partition number (order per partition preserved;
    #: sink and dead-letter topics need at least as many partitions); "key": the producer's
    #: partitioner (per-key order only)
    partitioning: str = "same"
    #: fixed broker clock (ms) for the timestamp check; None: the wall clock per batch
    now: int | None = None
    #: health/metrics HTTP port on 127.0.0.1 (0: any free port); None: no server
    health_port: int | None = None
    #: seconds between metric log lines (0: none)
    log_interval: float = 10.0
    json_metrics: bool = False
    #: the final "stopped" metric line (off for gates run inside another command, e.g. the
    #: export round trip, whose own output reports the result)
    final_log: bool = True


class GateMetrics:
    """Counters by outcome and rule, per-partition lag, liveness; read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.time()
        self.records = 0
        self.forwarded = 0
        self.dead_lettered = 0
        self.by_rule: dict[str, int] = {}
        self.observed: dict[str, int] = {}
        self.batches = 0
        self.commits = 0
        self.delivery_errors = 0
        self.consume_errors = 0
        self.lag: dict[str, int] = {}
        self.assigned: list[str] = []
        self.last_loop = time.monotonic()
        #: monotonic time the first poll batch arrived / the last one was committed
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.state = "starting"

    def add(self, n: int, dead: int, by_rule: Mapping[str, int],
            observed: Mapping[str, int]) -> None:
        with self._lock:
            self.last_at = time.monotonic()
            self.records += n
            self.dead_lettered += dead
            self.forwarded += n - dead
            self.batches += 1
            self.commits += 1
            for k, v in by_rule.items():
                self.by_rule[k] = self.by_rule.get(k, 0) + v
            for k, v in observed.items():
                self.observed[k] = self.observed.get(k, 0) + v

    def snapshot(self) -> dict[str, Any]:
        """The metrics as one JSON-able dict."""
        with self._lock:
            up = max(time.time() - self.started, 1e-9)
            return {"state": self.state, "uptime_s": round(up, 3), "records": self.records,
                    "forwarded": self.forwarded, "dead_lettered": self.dead_lettered,
                    "records_per_s": round(self.records / up, 1),
                    "by_rule": dict(sorted(self.by_rule.items())),
                    "observed": dict(sorted(self.observed.items())),
                    "batches": self.batches, "commits": self.commits,
                    "delivery_errors": self.delivery_errors,
                    "consume_errors": self.consume_errors,
                    "lag": dict(sorted(self.lag.items())),
                    "lag_total": sum(self.lag.values()), "assigned": list(self.assigned)}

    def prometheus(self) -> str:
        """The metrics in the Prometheus text format (``/metrics``)."""
        s = self.snapshot()
        lines = ["# TYPE kqlab_gate_records_total counter"]
        lines += [f'kqlab_gate_records_total{{outcome="{o}"}} {s[k]}'
                  for o, k in (("forwarded", "forwarded"), ("dead_lettered", "dead_lettered"))]
        lines.append("# TYPE kqlab_gate_rule_failures_total counter")
        lines += [f'kqlab_gate_rule_failures_total{{rule="{r}",mode="reject"}} {v}'
                  for r, v in s["by_rule"].items()]
        lines += [f'kqlab_gate_rule_failures_total{{rule="{r}",mode="observe"}} {v}'
                  for r, v in s["observed"].items()]
        lines.append("# TYPE kqlab_gate_lag gauge")
        lines += [f'kqlab_gate_lag{{partition="{p}"}} {v}' for p, v in s["lag"].items()]
        lines.append("# TYPE kqlab_gate_delivery_errors_total counter")
        lines.append(f"kqlab_gate_delivery_errors_total {s['delivery_errors']}")
        lines.append("# TYPE kqlab_gate_commits_total counter")
        lines.append(f"kqlab_gate_commits_total {s['commits']}")
        return "\n".join(lines) + "\n"


def records_table(topics: list[str], parts: list[int], offsets: list[int],
                  timestamps: list[tuple[int, int]], keys: list[Any], values: list[Any],
                  headers: list[Any]) -> pa.Table:
    """Consumed messages' fields as a ``RECORDS_SCHEMA`` table, each record its own batch
    (``batch_index`` 0), built column by column (no per-record dicts)."""
    n = len(offsets)
    tst = np.fromiter((t for t, _ in timestamps), np.int8, n)
    tsv = np.fromiter((v for _, v in timestamps), np.int64, n)
    tsv[tst == 0] = -1  # TIMESTAMP_NOT_AVAILABLE
    off = pa.array(offsets, pa.int64())
    first = topics[0] if n else ""
    topic_col = pa.repeat(pa.scalar(first, pa.string()), n) if topics.count(first) == n \
        else pa.array(topics, pa.string())
    return pa.table([
        topic_col, pa.array(parts, pa.int32()), off, pa.array(tsv, pa.int64()),
        pa.array((tst == 2).astype(np.int8), pa.int8()),
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
        pa.array([h or () for h in headers], HEADER_TYPE), off,
        pa.repeat(pa.scalar(0, pa.int32()), n),
    ], schema=RECORDS_SCHEMA)


class Gate:
    """One gate process's worth of work: ``Gate(policy, settings).run()`` until :meth:`stop`."""

    def __init__(self, policy: Policy, settings: GateSettings, *, resolver: Any = None):
        if settings.partitioning not in ("same", "key"):
            raise GateError(f"partitioning must be 'same' or 'key', not "
                            f"{settings.partitioning!r}")
        if not settings.routes:
            raise GateError("the gate needs at least one source → sink/dlq route")
        self.policy = policy
        self.settings = settings
        self.judge = Judge(policy, now=settings.now, resolver=resolver)
        self.metrics = GateMetrics()
        self._routes = {r.source: r for r in settings.routes}
        self._stop = threading.Event()
        self._errors: list[str] = []
        self._policy_id = policy_id(policy)
        self.health_address: tuple[str, int] | None = None
        #: the clients are up and subscribed (errors before that are configuration errors)
        self.subscribed = False
        self._http: http.server.ThreadingHTTPServer | None = None
        self._kill = _kill_at()
        self._batch_no = 0

    def _die(self, phase: str) -> None:
        """SIGKILL this process if ``KQLAB_GATE_KILL_AT`` names this batch and ``phase``."""
        if self._kill == (phase, self._batch_no):
            print(f"kqlab gate: KQLAB_GATE_KILL_AT={phase}:{self._batch_no}: SIGKILL",
                  file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    # -- control ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to finish its batch in flight, commit it and return (signal-safe)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- clients ---------------------------------------------------------------------------
    def _clients(self) -> tuple[Any, Any]:
        from confluent_kafka import Consumer, Producer

        s = self.settings
        base = {**dict(s.client), "bootstrap.servers": s.bootstrap}
        consumer = Consumer({
            **base, "group.id": s.group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "enable.partition.eof": False, **dict(s.consumer)})
        producer = Producer({
            **base, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000,
            **dict(s.producer),
            # the gate's own contract: only failures are reported, and they stop the commit
            "delivery.report.only.error": True, "on_delivery": self._on_delivery})
        return consumer, producer

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def _check_partitions(self, consumer: Any) -> None:
        """With ``partitioning="same"``, refuse sinks with fewer partitions than their source
        (records would have nowhere to keep their partition number)."""
        if self.settings.partitioning != "same":
            return
        for r in self.settings.routes:
            md = consumer.list_topics(timeout=10)
            counts = {t: len(md.topics[t].partitions) if t in md.topics and
                      md.topics[t].error is None else 0 for t in (r.source, r.sink, r.dlq)}
            if counts[r.source] == 0:
                raise GateError(f"source topic {r.source!r} does not exist on "
                                f"{self.settings.bootstrap}")
            for t in (r.sink, r.dlq):
                if counts[t] < counts[r.source]:
                    raise GateError(
                        f"topic {t!r} has {counts[t]} partition(s), source {r.source!r} has "
                        f"{counts[r.source]}: create it with at least as many (records keep "
                        "their partition so per-partition order holds), or pass "
                        "partitioning 'key'")

    # -- health ----------------------------------------------------------------------------
    def _serve_health(self) -> None:
        port = self.settings.health_port
        if port is None:
            return
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/metrics.json"):
                    code, body, ctype = 200, json.dumps(gate.metrics.snapshot()), \
                        "application/json"
                elif self.path.startswith("/metrics"):
                    code, body, ctype = 200, gate.metrics.prometheus(), "text/plain"
                elif self.path.startswith("/health"):
                    ok = gate.healthy()
                    code = 200 if ok else 503
                    body = json.dumps({"status": "ok" if ok else "unhealthy",
                                       "state": gate.metrics.state})
                    ctype = "application/json"
                else:
                    code, body, ctype = 404, "not found\n", "text/plain"
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # keep stderr for the gate's own lines
                return

        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._http.daemon_threads = True
        self.health_address = self._http.server_address[:2]  # type: ignore[assignment]
        threading.Thread(target=self._http.serve_forever, name="kqlab-gate-health",
                         daemon=True).start()

    def healthy(self, stale_s: float = 30.0) -> bool:
        """Running and the loop came round within ``stale_s`` seconds."""
        m = self.metrics
        return m.state == "running" and time.monotonic() - m.last_loop < stale_s

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Run until :meth:`stop`; returns the final metrics.  Raises :class:`GateError` when a
        delivery fails (that batch is left uncommitted)."""
        from confluent_kafka import KafkaError

        s = self.settings
        consumer, producer = self._clients()
        self._serve_health()
        last_log = time.monotonic()
        try:
            self._check_partitions(consumer)

            def on_assign(c: Any, parts: list[Any]) -> None:
                self.metrics.assigned = sorted(f"{p.topic}-{p.partition}" for p in parts)

            def on_revoke(c: Any, parts: list[Any]) -> None:
                gone = {f"{p.topic}-{p.partition}" for p in parts}
                self.metrics.assigned = [a for a in self.metrics.assigned if a not in gone]

            consumer.subscribe(list(self._routes), on_assign=on_assign, on_revoke=on_revoke)
            self.subscribed = True
            self.metrics.state = "running"
            while not self._stop.is_set():
                msgs = consumer.consume(s.batch_max, s.poll_timeout)
                self.metrics.last_loop = time.monotonic()
                good = []
                for m in msgs:
                    err = m.error()
                    if err is None:
                        good.append(m)
                    elif err.fatal():
                        raise GateError(f"consumer: {err}")
                    elif err.code() != KafkaError._PARTITION_EOF:
                        self.metrics.consume_errors += 1
                        log.warning("consume error: %s", err)
                if good:
                    self._process(good, consumer, producer)
                if s.log_interval and time.monotonic() - last_log >= s.log_interval:
                    last_log = time.monotonic()
                    self._log_metrics("metrics")
        finally:
            self.metrics.state = "stopping"
            with contextlib.suppress(Exception):
                producer.flush(10)
            with contextlib.suppress(Exception):
                consumer.close()  # leaves the group: the partitions move on at once
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()
            self.metrics.state = "stopped"
        self._log_metrics("stopped")
        return self.metrics.snapshot()

    def _log_metrics(self, event: str) -> None:
        snap = self.metrics.snapshot()
        if self.settings.json_metrics:
            print(json.dumps({"event": event, **snap}), flush=True)
        elif self.settings.log_interval or (event == "stopped" and self.settings.final_log):
            print(f"kqlab gate {event}: {snap['records']} records, {snap['forwarded']} "
                  f"forwarded, {snap['dead_lettered']} dead-lettered {snap['by_rule']}, "
                  f"lag {snap['lag_total']}, {snap['records_per_s']} records/s",
                  file=sys.stderr, flush=True)

    def _process(self, msgs: list[Any], consumer: Any, producer: Any) -> None:
        """Judge, forward, flush, commit one poll batch (see the module docstring)."""
        from confluent_kafka import TopicPartition

        if self.metrics.first_at is None:
            self.metrics.first_at = time.monotonic()
        self._batch_no += 1
        kill = self._kill is not None
        if kill:
            self._die("polled")
        topics = [m.topic() for m in msgs]
        parts = [m.partition() for m in msgs]
        offsets = [m.offset() for m in msgs]
        stamps = [m.timestamp() for m in msgs]
        keys = [m.key() for m in msgs]
        values = [m.value() for m in msgs]
        headers = [m.headers() for m in msgs]
        table = records_table(topics, parts, offsets, stamps, keys, values, headers)
        verdict = self.judge(table)
        dead = verdict.dead
        same = self.settings.partitioning == "same"
        routes = self._routes
        single = routes[topics[0]] if len(routes) == 1 else None
        produce = producer.produce
        k = 0
        half = len(msgs) // 2 if kill else -1
        for i, is_dead in enumerate(dead.tolist()):
            if i == half:
                self._die("producing")
            r = single or routes[topics[i]]
            t_type, ts = stamps[i]
            h = headers[i]
            if is_dead:
                h = failure_headers(h, verdict.rules[k], verdict.messages[k], topics[i],
                                    parts[i], offsets[i], self._policy_id)
                k += 1
            kwargs: dict[str, Any] = {}
            if t_type:
                kwargs["timestamp"] = ts
            if same:
                kwargs["partition"] = parts[i]
            if h:
                kwargs["headers"] = h
            while True:
                try:
                    produce(r.dlq if is_dead else r.sink, values[i], keys[i], **kwargs)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
        if kill:
            self._die("produced")
        while producer.flush(1.0):  # finish the batch whatever the stop flag says
            pass
        if self._errors:
            self.metrics.delivery_errors += len(self._errors)
            first = self._errors[0]
            raise GateError(f"{len(self._errors)} record(s) of the batch were not delivered "
                            f"(first: {first}); nothing of it was committed")
        last: dict[tuple[str, int], int] = {}
        for t, p, o in zip(topics, parts, offsets, strict=True):
            last[(t, p)] = o
        if kill:
            self._die("flushed")
        consumer.commit(offsets=[TopicPartition(t, p, o + 1) for (t, p), o in last.items()],
                        asynchronous=False)
        if kill:
            self._die("committed")
        n_dead = int(dead.sum())
        self.metrics.add(len(msgs), n_dead, verdict.by_rule, verdict.observed)
        for (t, p), o in last.items():
            with contextlib.suppress(Exception):
                _, hi = consumer.get_watermark_offsets(TopicPartition(t, p), cached=True)
                if hi >= 0:
                    self.metrics.lag[f"{t}-{p}"] = max(hi - (o + 1), 0)
