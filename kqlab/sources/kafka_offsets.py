"""Where a sample starts and ends: partitions, watermarks, offset plans, timestamp windows.

Everything :func:`kqlab.sources.kafka.sample` resolves once, before it reads: the topic's
partitions (:func:`topic_partitions`), their earliest and latest offsets (:func:`watermarks`),
the offsets a timestamp window maps to
(:func:`time_offsets`) and the resulting ``{partition: (start, end)}`` plan
(:func:`plan_ranges`).  Records appended afterwards are not read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from kqlab.sources.kafka_consume import read_with_consumer
from kqlab.sources.kafka_errors import (
    BrokerUnreachableError,
    KafkaSourceError,
    KafkaTimeoutError,
    NotAuthorizedError,
    UnknownTopicError,
)
from kqlab.sources.sample_tables import split_cap

if TYPE_CHECKING:
    from confluent_kafka import Consumer

__all__ = [
    "FORWARD_CHUNK",
    "SCAN_CHUNK",
    "TIME_LOOKUPS",
    "empty_range_message",
    "plan_ranges",
    "scan_time_offsets",
    "time_offsets",
    "topic_partitions",
    "watermarks",
]

#: accepted values of ``sample(time_lookup=...)`` (see :func:`time_offsets`)
TIME_LOOKUPS = ("auto", "broker", "scan")
#: offsets read per step while scanning a partition for timestamps
SCAN_CHUNK = 50_000
#: offsets of the first window read forward from the broker's answer (``"auto"``)
FORWARD_CHUNK = 64


# -- metadata and offsets -------------------------------------------------------------------
def _hint(bootstrap: str, errors: list[str]) -> str:
    last = f" Last client error: {errors[-1]}." if errors else ""
    return (f"could not reach the Kafka broker at {bootstrap}.{last} Check that the address and "
            "port are right, that the broker is running and reachable from here, and that "
            "security.protocol / SASL / SSL settings match the listener.")


def topic_partitions(consumer: Consumer, topic: str, wanted: list[int] | None, bootstrap: str,
                     timeout_s: float, errors: list[str]) -> list[int]:
    """The partitions of ``topic`` to read: all of them, or ``wanted`` after checking they
    exist.  Raises the source error that says why the topic cannot be read."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        # all topics: asking for one topic by name could auto-create it on some brokers
        md = consumer.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        code = err.code() if isinstance(err, KafkaError) else None
        if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                    KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
            raise NotAuthorizedError(f"not authorised on {bootstrap}: {err}. Check the SASL "
                                     "credentials and the ACLs for this principal.") from None
        raise BrokerUnreachableError(_hint(bootstrap, errors)) from None
    tmd = md.topics.get(topic)
    if tmd is None:
        sample_names = sorted(t for t in md.topics if not t.startswith("__"))[:10]
        raise UnknownTopicError(f"topic {topic!r} does not exist on {bootstrap} (topics there "
                                f"include: {', '.join(sample_names) or 'none'})")
    if tmd.error is not None:
        if tmd.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise NotAuthorizedError(f"not authorised to describe topic {topic!r} on "
                                     f"{bootstrap}: grant DESCRIBE and READ on it")
        if tmd.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise UnknownTopicError(f"topic {topic!r} does not exist on {bootstrap}")
        raise KafkaSourceError(f"metadata for topic {topic!r} on {bootstrap}: {tmd.error}")
    have = sorted(tmd.partitions)
    if wanted is None:
        return have
    missing = sorted(set(wanted) - set(have))
    if missing:
        raise UnknownTopicError(f"topic {topic!r} on {bootstrap} has partitions {have}; "
                                f"{missing} do not exist")
    return sorted(set(wanted))


def watermarks(consumer: Consumer, topic: str, parts: list[int], bootstrap: str,
               timeout_s: float) -> tuple[dict[int, int], dict[int, int]]:
    """``(lows, highs)``: the earliest offset and the end (ListOffsets) per partition.

    ``consumer`` reads committed data (``isolation.level=read_committed``, librdkafka's
    default), so the end is the last stable offset: the high watermark, or the first offset of
    the earliest transaction still open (nothing past it can be read committed yet)."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    lows, highs = {}, {}
    for p in parts:
        try:
            lows[p], highs[p] = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                               timeout=timeout_s)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise NotAuthorizedError(f"not authorised to read topic {topic!r} on "
                                         f"{bootstrap}: grant READ on it") from None
            if isinstance(err, KafkaError) and err.code() == KafkaError._TIMED_OUT:
                raise KafkaTimeoutError(f"no offsets for {topic}[{p}] from {bootstrap} within "
                                        f"{timeout_s:g}s") from None
            raise KafkaSourceError(f"offsets of {topic}[{p}] on {bootstrap}: {err}") from None
    return lows, highs


def plan_ranges(parts: list[int], lows: dict[int, int], highs: dict[int, int],
                start: int | Mapping[int, int] | None, end: int | Mapping[int, int] | None,
                latest: int | None, cap: int | None) -> dict[int, tuple[int, int]]:
    """``{partition: (start, end)}`` within each partition's ``[low, high)``: the last
    ``latest`` offsets, or ``start``/``end`` (one for all or per partition); ``cap`` then
    keeps the earliest offsets of each range, split by
    :func:`~kqlab.sources.sample_tables.split_cap`.

    >>> plan_ranges([0, 1], {0: 0, 1: 5}, {0: 10, 1: 8}, None, None, 3, None)
    {0: (7, 10), 1: (5, 8)}
    """
    def pick(v: int | Mapping[int, int] | None, p: int, default: int) -> int:
        if v is None:
            return default
        if isinstance(v, Mapping):
            return int(v.get(p, default))
        return int(v)

    plan = {}
    for p in parts:
        lo, hi = lows[p], highs[p]
        if latest is not None:
            s, e = max(lo, hi - latest), hi
        else:
            s = min(max(pick(start, p, lo), lo), hi)
            e = min(max(pick(end, p, hi), s), hi)
        plan[p] = (s, e)
    if cap is not None:
        shares = split_cap(cap, {p: e - s for p, (s, e) in plan.items()})
        plan = {p: (s, s + shares[p]) for p, (s, e) in plan.items()}
    return plan


def empty_range_message(topic: str, bootstrap: str, lows: dict[int, int],
                        highs: dict[int, int], plan: dict[int, tuple[int, int]]) -> str:
    """The :class:`~kqlab.sources.kafka_errors.EmptyRangeError` text: what the partitions
    hold and what the request resolved to."""
    have = ", ".join(f"{p}: [{lows[p]}, {highs[p]})" for p in sorted(plan))
    asked = ", ".join(f"{p}: [{s}, {e})" for p, (s, e) in sorted(plan.items()))
    return (f"the requested range of {topic!r} on {bootstrap} holds no records (partitions "
            f"hold {have}; the request resolved to {asked}). Widen the range or pass "
            "allow_empty=True for an empty table.")


# -- timestamp windows ----------------------------------------------------------------------
def time_offsets(consumer: Consumer, topic: str, parts: list[int], lows: dict[int, int],
                 highs: dict[int, int], start_ms: int | None, end_ms: int | None, how: str,
                 bootstrap: str, timeout_s: float, cancel: threading.Event | None
                 ) -> tuple[dict[int, int] | None, dict[int, int] | None]:
    """``(start_offsets, end_offsets)`` of a timestamp window, per partition.

    For a time ``t`` the offset is the first one whose committed record has
    ``timestamp >= t`` (the end when there is none).  Kafka's ListOffsets by timestamp
    (``offsets_for_times``, from its time index) answers the first offset of *any* entry of
    the log with ``timestamp >= t``, transaction markers included — and a marker carries the
    broker's clock at commit time, so behind records with older timestamps (a replay, a
    backfill) the answer is the first marker, possibly long before the window:

    * ``"auto"`` (default): ask the broker, then read forward from its answer ``o`` to the
      first committed record with ``timestamp >= t`` (every offset before ``o`` has an older
      timestamp, so nothing before it is read).  Usually the record at ``o`` is the answer,
      and the read is one window of :data:`FORWARD_CHUNK` offsets; the windows double after
      that, up to :data:`SCAN_CHUNK`;
    * ``"broker"``: the broker's answer as is (one request; a marker's offset in the case
      above);
    * ``"scan"``: for a broker that answers ListOffsets by timestamp wrongly (some Kafka-API
      brokers do), read ``[low, high)`` from the beginning in windows of :data:`SCAN_CHUNK`
      offsets and stop at the first record with ``timestamp >= t`` (bounded by the end taken
      at the start; memory is one window; costs a read of the partition up to the answer).

    The records *before* ``o`` are never read to check it: on Kafka the offset before the
    answer is often a marker, an aborted record or one removed by compaction, which a
    committed read does not return, so such a check misfired into a scan of the partition.
    """
    resolved: dict[str, dict[int, int]] = {"start": {}, "end": {}}
    need: dict[int, dict[str, int]] = {}
    forward: list[tuple[str, int, int, int]] = []  # (key, partition, from offset, t)
    for key, t in (("start", start_ms), ("end", end_ms)):
        if t is None:
            continue
        answers = ({} if how == "scan"
                   else _broker_time_offsets(consumer, topic, parts, lows, highs, t,
                                             bootstrap, timeout_s))
        for p in parts:
            lo, hi = lows[p], highs[p]
            if hi <= lo:
                resolved[key][p] = lo
                continue
            if how == "broker" or (how == "auto" and answers[p] >= hi):
                resolved[key][p] = answers[p]
            elif how == "auto":
                forward.append((key, p, answers[p], int(t)))
            else:
                need.setdefault(p, {})[key] = int(t)
    for p, keys in need.items():
        for key, o in scan_time_offsets(consumer, topic, p, lows[p], highs[p], keys,
                                        bootstrap, timeout_s, cancel).items():
            resolved[key][p] = o
    for key, p, o, t in forward:
        resolved[key][p] = scan_time_offsets(consumer, topic, p, o, highs[p], {key: t},
                                             bootstrap, timeout_s, cancel,
                                             first_chunk=FORWARD_CHUNK)[key]
    return ((resolved["start"] if start_ms is not None else None),
            (resolved["end"] if end_ms is not None else None))


def _broker_time_offsets(consumer: Consumer, topic: str, parts: list[int],
                         lows: dict[int, int], highs: dict[int, int], t: int, bootstrap: str,
                         timeout_s: float) -> dict[int, int]:
    from confluent_kafka import KafkaException, TopicPartition

    try:
        answer = consumer.offsets_for_times([TopicPartition(topic, p, int(t)) for p in parts],
                                            timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaSourceError(f"offsets_for_times on {bootstrap} failed: {exc}; pass "
                               "time_lookup='scan' to find the offsets by reading") from None
    out = {}
    for tp in answer:
        p = tp.partition
        o = tp.offset
        out[p] = highs[p] if o is None or o < 0 else min(max(int(o), lows[p]), highs[p])
    return out


def _timestamps(consumer: Consumer, topic: str, p: int, s: int, e: int, bootstrap: str,
                timeout_s: float, cancel: threading.Event | None) -> tuple[np.ndarray, np.ndarray]:
    table, _ = read_with_consumer(consumer, topic, {p: (s, e)}, bootstrap, timeout_s, None,
                                  time.monotonic(), cancel)
    return table.column("offset").to_numpy(), table.column("timestamp").to_numpy()


def scan_time_offsets(consumer: Consumer, topic: str, p: int, lo: int, hi: int,
                      keys: dict[str, int], bootstrap: str, timeout_s: float,
                      cancel: threading.Event | None, *, first_chunk: int = SCAN_CHUNK
                      ) -> dict[str, int]:
    """For each ``{key: t}``, the first offset of partition ``p`` in ``[lo, hi)`` whose
    committed record has ``timestamp >= t`` (``hi`` when none), found by reading windows of
    ``first_chunk`` offsets, doubling up to :data:`SCAN_CHUNK` (see :func:`time_offsets`)."""
    found: dict[str, int] = {}
    s, chunk = lo, max(1, min(first_chunk, SCAN_CHUNK))
    while s < hi and len(found) < len(keys):
        e = min(s + chunk, hi)
        offs, ts = _timestamps(consumer, topic, p, s, e, bootstrap, timeout_s, cancel)
        for key, t in keys.items():
            if key not in found:
                idx = np.flatnonzero(ts >= t)
                if len(idx):
                    found[key] = int(offs[idx[0]])
        s, chunk = e, min(chunk * 2, SCAN_CHUNK)
    return {key: found.get(key, hi) for key in keys}
