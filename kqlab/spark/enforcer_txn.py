"""Exactly-once delivery for the Structured Streaming enforcer (``delivery: exactly-once`` in
``enforcer.yaml``): one Kafka transaction per task, holding the task's records in the sink
and dead-letter topics *and* the source offset it reached.

Why: at least once, a micro-batch whose tasks delivered everything but whose driver died
before Spark wrote its commit log runs again from the same offsets and sends its records a
second time (10 kill -9 gave 2.5 % duplicates).  Spark's ``foreachBatch`` cannot make its
own commit atomic with the writes, so the writes carry their own progress marker, as Kafka
Streams does: each task's producer has a ``transactional.id`` fixed by the checkpoint and
the source topic-partition (a streaming task reads exactly one topic-partition's range, in
offset order), and commits, in the same transaction as the records, the offset after the
last record it forwarded to the consumer group named after the checkpoint
(``send_offsets_to_transaction``; the group is never joined, only written).  A re-run task:

1. ``init_transactions`` with the same id: any earlier attempt of that topic-partition
   (a task of the killed driver still running on an executor included) is fenced, and its
   open transaction aborted;
2. reads the group's committed offset for its topic-partition (stable: after step 1 no
   transaction of it is pending) and forwards only the records at or past it; the earlier
   ones are counted ``skipped``, already in the sink or dead-letter topic exactly once.

A task's range is committed whole or not at all, so a re-run finds its range either all
done or not begun.  Readers of the sink and dead-letter topics must read with
``isolation.level=read_committed`` (librdkafka's default; the Java client's is
``read_uncommitted``) or they also see the records of aborted attempts.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from typing import Any

#: how long a task waits for the transaction coordinator (init, offsets, commit)
TXN_TIMEOUT_S = 60.0


def txn_prefix(checkpoint: str) -> str:
    """The enforcer's transactional-id prefix and consumer group: fixed by the checkpoint
    (a restart from the same checkpoint resumes the same transactions)."""
    digest = hashlib.sha256(checkpoint.rstrip("/").encode()).hexdigest()[:16]
    return f"kqlab-enforcer-{digest}"


class TaskTransaction:
    """One task's transaction on ``topic``/``partition``: :attr:`floor` is the first source
    offset not yet forwarded by an earlier attempt; :meth:`commit` ends it with the source
    offset after ``last_offset``."""

    def __init__(self, prefix: str, producer_config: Mapping[str, Any],
                 client_config: Mapping[str, Any], topic: str, partition: int,
                 on_delivery: Any):
        from confluent_kafka import Consumer, Producer, TopicPartition

        from kqlab.spark.enforcer import PRODUCER_DEFAULTS, EnforcerError

        self.topic, self.partition = topic, partition
        self.producer = Producer({
            **PRODUCER_DEFAULTS, **dict(producer_config),
            "transactional.id": f"{prefix}-{topic}-{partition}",
            "delivery.report.only.error": True, "on_delivery": on_delivery})
        self.consumer = Consumer({**dict(client_config), "group.id": prefix,
                                  "enable.auto.commit": False,
                                  "isolation.level": "read_committed"})
        try:
            self.producer.init_transactions(TXN_TIMEOUT_S)
            got = self.consumer.committed([TopicPartition(topic, partition)],
                                          timeout=TXN_TIMEOUT_S)
            self.floor = max(int(got[0].offset), 0)  # OFFSET_INVALID (none yet): 0
            self.producer.begin_transaction()
        except Exception as exc:
            self.close()
            raise EnforcerError(f"{topic}[{partition}]: cannot open the task's transaction "
                                f"({exc}); is the broker's transaction coordinator up "
                                "(transaction.state.log.*)?") from exc

    def commit(self, last_offset: int) -> None:
        """Commit the records produced and the source offset ``last_offset + 1``."""
        from confluent_kafka import TopicPartition

        self.producer.send_offsets_to_transaction(
            [TopicPartition(self.topic, self.partition, last_offset + 1)],
            self.consumer.consumer_group_metadata(), TXN_TIMEOUT_S)
        self.producer.commit_transaction(TXN_TIMEOUT_S)

    def abort(self) -> None:
        """Abort (nothing of it becomes visible to read_committed readers)."""
        # fenced or dead: the coordinator aborts it anyway
        with contextlib.suppress(Exception):
            self.producer.abort_transaction(TXN_TIMEOUT_S)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a consumer that never joined a group
            self.consumer.close()
