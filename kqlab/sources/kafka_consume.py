"""Reading planned offset ranges with the confluent-kafka consumer (records, not batches).

:func:`read_with_consumer` assigns the partitions itself (never ``subscribe``), reads each
``[start, end)`` and stops at ``end``, so a sample holds exactly the planned range.  The
consumer hands over records, not batches: every record becomes its own batch
(``batch_offset = offset``, ``batch_index = 0``; the framing
:data:`~kqlab.sources.sample_result.FRAMING`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from kqlab.records import HEADER_TYPE, RECORDS_SCHEMA
from kqlab.sources.kafka_errors import (
    KafkaSourceError,
    KafkaTimeoutError,
    NotAuthorizedError,
    ReadCancelled,
    UnknownTopicError,
)
from kqlab.sources.sample_tables import payload_bytes

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message

    from kqlab.sources.progress import Progress

__all__ = ["CONSUME_BATCH", "PROGRESS_EVERY_S", "raise_consume_error", "read_with_consumer"]

#: most messages taken from the consumer per poll
CONSUME_BATCH = 10_000
#: seconds between progress reports while reading
PROGRESS_EVERY_S = 0.5


def raise_consume_error(err: KafkaError, topic: str, bootstrap: str) -> None:
    """Raise the source error for a consume error; return for a retriable one (librdkafka
    retries those, and the read's idle timeout catches a broker that never recovers)."""
    from confluent_kafka import KafkaError

    code = err.code()
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        raise NotAuthorizedError(f"not authorised to read topic {topic!r} on {bootstrap}: "
                                 "grant READ on it")
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                KafkaError._UNKNOWN_PARTITION):
        raise UnknownTopicError(f"topic {topic!r} disappeared from {bootstrap}: {err}")
    if err.fatal() or not err.retriable():
        raise KafkaSourceError(f"reading {topic!r} from {bootstrap}: {err}")


def _batch_table(topic: str, msgs: list[Message], todo: dict[int, tuple[int, int]],
                 finished: list[int]) -> pa.Table | None:
    """One poll batch of (error-free) messages as a ``RECORDS_SCHEMA`` table.

    Columns are extracted with one list comprehension each and converted to Arrow at once (no
    per-message dicts).  Messages at or past their partition's end are dropped; partitions
    whose last planned offset was seen are added to ``finished``.
    """
    parts = np.fromiter([m.partition() for m in msgs], np.int32, len(msgs))
    offs = np.fromiter([m.offset() for m in msgs], np.int64, len(msgs))
    uniq = np.unique(parts)
    if len(uniq) == 1:
        p = int(uniq[0])
        end = todo[p][1] if p in todo else -1
        keep = offs < end
        if len(offs) and offs.max() >= end - 1:
            finished.append(p)
    else:
        ends = np.full(len(msgs), -1, np.int64)
        for p in uniq.tolist():
            sel = parts == p
            end = todo[p][1] if p in todo else -1
            ends[sel] = end
            if offs[sel].max() >= end - 1:
                finished.append(p)
        keep = offs < ends
    if not keep.all():
        idx = np.flatnonzero(keep)
        msgs = [msgs[i] for i in idx.tolist()]
        parts, offs = parts[idx], offs[idx]
    n = len(msgs)
    if n == 0:
        return None
    ts = [m.timestamp() for m in msgs]
    tst = np.fromiter([t for t, _ in ts], np.int8, n)
    tsv = np.fromiter([v for _, v in ts], np.int64, n)
    tsv[tst == 0] = -1  # TIMESTAMP_NOT_AVAILABLE
    off_arr = pa.array(offs, pa.int64())
    return pa.table([
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.array(parts, pa.int32()),
        off_arr,
        pa.array(tsv, pa.int64()),
        pa.array((tst == 2).astype(np.int8), pa.int8()),  # 1 = LogAppendTime
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.array([m.headers() or () for m in msgs], HEADER_TYPE),
        off_arr,  # batch_offset: each record is its own reconstructed batch
        pa.repeat(pa.scalar(0, pa.int32()), n),
    ], schema=RECORDS_SCHEMA)


def read_with_consumer(consumer: Consumer, topic: str, plan: dict[int, tuple[int, int]],
                       bootstrap: str, timeout_s: float, progress: Progress | None, t0: float,
                       cancel: threading.Event | None = None,
                       on_chunk: Callable[[pa.Table], None] | None = None, chunk_rows: int = 0
                       ) -> tuple[pa.Table, int]:
    """Read ``plan`` with the consumer: ``(records sorted by partition/offset, payload bytes)``.

    ``timeout_s`` bounds the time without any new record; ``progress`` is called every
    :data:`PROGRESS_EVERY_S` and at the end (rates counted from ``t0``).  With ``on_chunk``,
    the records are handed over in pieces of about ``chunk_rows`` rows (each sorted; whole
    poll batches, so a piece can exceed ``chunk_rows`` by one batch) and the returned table is
    empty: memory stays at one piece plus librdkafka's fetch queue.  On cancel,
    :class:`~kqlab.sources.kafka_errors.ReadCancelled` carries the records not yet handed
    over.
    """
    from confluent_kafka import KafkaError, TopicPartition

    todo = {p: (s, e) for p, (s, e) in plan.items() if e > s}
    done = len(plan) - len(todo)
    parts_read: list[pa.Table] = []
    nrows = nbytes = 0

    def result() -> pa.Table:
        if not parts_read:
            return RECORDS_SCHEMA.empty_table()
        table = pa.concat_tables(parts_read).combine_chunks()
        return table.take(pa.array(np.lexsort((table.column("offset").to_numpy(),
                                                table.column("partition").to_numpy()))))

    assignment = [TopicPartition(topic, p, s) for p, (s, _) in todo.items()]
    consumer.assign(assignment)
    consumer.resume(assignment)  # a previous read on this consumer may have paused them
    last_msg = last_progress = time.monotonic()
    eof = KafkaError._PARTITION_EOF
    try:
        while todo:
            if cancel is not None and cancel.is_set():
                raise ReadCancelled(result(), nbytes)
            msgs = consumer.consume(CONSUME_BATCH, 0.05)
            now = time.monotonic()
            if msgs:
                last_msg = now
            elif now - last_msg > timeout_s:
                raise KafkaTimeoutError(
                    f"no records from {bootstrap} for {timeout_s:g}s while reading {topic!r}; "
                    f"still waiting on partitions "
                    f"{', '.join(f'{p} (up to offset {e})' for p, (_, e) in sorted(todo.items()))}"
                    f". {nrows} records were read.")
            finished: list[int] = []
            if msgs:
                if any([m.error() for m in msgs]):  # noqa: C419 (list: one call each, faster)
                    good = []
                    for m in msgs:
                        err = m.error()
                        if err is None:
                            good.append(m)
                        elif m.partition() in todo:
                            if err.code() == eof:
                                finished.append(m.partition())  # the end moved back: stop
                            else:
                                raise_consume_error(err, topic, bootstrap)
                    msgs = good
                if msgs:
                    t = _batch_table(topic, msgs, todo, finished)
                    del msgs
                    if t is not None:
                        parts_read.append(t)
                        nrows += t.num_rows
                        nbytes += payload_bytes(t)
                        if on_chunk is not None and sum(x.num_rows for x in parts_read) \
                                >= chunk_rows:
                            chunk = result()
                            parts_read.clear()
                            on_chunk(chunk)
            for p in dict.fromkeys(finished):
                if p in todo:
                    del todo[p]
                    done += 1
                    consumer.pause([TopicPartition(topic, p)])
            if progress is not None and (now - last_progress >= PROGRESS_EVERY_S or not todo):
                last_progress = now
                progress(nrows, nbytes, done, nrows / max(now - t0, 1e-9))
    finally:
        consumer.unassign()
    if on_chunk is not None:
        if parts_read:
            on_chunk(result())
        return RECORDS_SCHEMA.empty_table(), nbytes
    return result(), nbytes
