"""The enforcer's exactly-once delivery (``delivery: exactly-once``,
:mod:`kqlab.spark.enforcer_txn`) on the session's real Kafka broker, task by task, without
Spark: the task function ``enforce_records`` runs in this process on the same range as a
re-run micro-batch would (Spark's offset log replays the same offsets), after an attempt that
died inside its transaction and after one that committed but whose driver died before
Spark's commit log.  Nothing is duplicated for a read_committed reader, nothing lost, and
the dead attempt is fenced."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("confluent_kafka")

from kqlab.gate._gate import policy_id
from kqlab.policy import loads_policy
from kqlab.records import RECORDS_SCHEMA
from kqlab.spark.enforcer import PRODUCED_SCHEMA, EnforceJob, enforce_records
from kqlab.spark.enforcer_txn import TaskTransaction, txn_prefix

POLICY = loads_policy("""kqlab: 1
name: eos
rules:
- {id: short, kind: value_size, max: 8}
""")


def _records(topic: str, first: int, last: int, now: int) -> pa.RecordBatch:
    """Offsets ``first..last`` of partition 0; every 7th value too long (dead-lettered)."""
    ids = range(first, last + 1)
    rows = [{"topic": topic, "partition": 0, "offset": i, "timestamp": now,
             "timestamp_type": 0, "key": b"k%d" % i,
             "value": b"%08d" % i + (b"!" if i % 7 == 0 else b""),
             "headers": [{"key": "id", "value": str(i).encode()}],
             "batch_offset": i, "batch_index": 0} for i in ids]
    return pa.RecordBatch.from_pylist(rows, schema=RECORDS_SCHEMA)


def _read(bootstrap: str, topic: str, isolation: str, expect: int) -> list[int]:
    """The ``id`` headers of ``topic``'s partition 0, read with ``isolation``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-reader-{isolation}",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "enable.partition.eof": True})
    got: list[int] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        eof = False
        while time.monotonic() < deadline and not (eof and len(got) >= expect):
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    got.append(int(dict(m.headers())["id"]))
                else:
                    eof = True
    finally:
        c.close()
    return got


def test_re_runs_and_a_dead_attempt_duplicate_nothing(kafka_broker: Any, topic_name: str):
    b = kafka_broker
    src, sink, dlq = topic_name, f"{topic_name}.valid", f"{topic_name}.dlq"
    for t in (src, sink, dlq):
        b.create_topic(t, partitions=1)
    boot = {"bootstrap.servers": b.bootstrap}
    prefix = txn_prefix(f"/checkpoints/{topic_name}")
    job = EnforceJob(POLICY, {src: (sink, dlq)}, boot, "same", None, policy_id(POLICY),
                     txn_prefix=prefix, client=boot)
    now = int(time.time() * 1000)

    # an attempt that produced and died inside its transaction (kill -9 while producing)
    zombie = TaskTransaction(prefix, boot, boot, src, 0, lambda err, msg: None)
    for i in range(5):
        zombie.producer.produce(sink, b"%08d" % i, partition=0, headers=[("id", b"%d" % i)])
    zombie.producer.flush(10)

    def attempt(first: int, last: int) -> dict[str, Any]:
        rows = list(enforce_records(job)(iter([_records(src, first, last, now)])))
        assert rows and rows[0].schema == PRODUCED_SCHEMA
        return rows[0].to_pylist()[0]

    a = attempt(0, 19)  # the re-run after the zombie: fences it, sends all 20
    assert (a["records"], a["skipped"], a["dead_lettered"]) == (20, 0, 3)
    with pytest.raises(Exception, match=r"(?i)fenc"):  # the dead attempt cannot commit now
        zombie.commit(4)
    zombie.close()
    again = attempt(0, 19)  # the same range again: Spark's commit log never got it
    assert (again["records"], again["skipped"]) == (20, 20)
    nxt = attempt(20, 29)  # the next micro-batch
    assert (nxt["records"], nxt["skipped"]) == (10, 0)

    ok = _read(b.bootstrap, sink, "read_committed", 25)
    dead = _read(b.bootstrap, dlq, "read_committed", 5)
    assert sorted(ok + dead) == list(range(30))  # none lost, none twice
    assert all(i % 7 == 0 for i in dead) and all(i % 7 for i in ok)
    # the aborted attempt's records are in the log: only read_committed hides them
    assert len(_read(b.bootstrap, sink, "read_uncommitted", 30)) == len(ok) + 5
