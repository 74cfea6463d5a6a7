"""Live sampling from a Kafka topic with confluent-kafka, read-only.

:func:`sample` reads a bounded slice of a topic into a ``RECORDS_SCHEMA`` table:

* **offset ranges** per partition (``start_offset`` inclusive, ``end_offset`` exclusive; an int
  for every partition or a ``{partition: offset}`` dict),
* the **latest N** records per partition (``latest=N``),
* the **whole topic with a cap** (``max_records``; the cap is split evenly over the partitions,
  lowest partitions first for the remainder, and the earliest records of each share are read),
* **seeded random sampling** (``random_fraction``): a record is kept when a hash of
  ``(seed, partition, offset)`` falls below the fraction, so the same seed over the same range
  always gives the same records, whatever order the broker delivers them in.

It never commits offsets and never joins a consumer group: the consumer uses ``assign()`` (not
``subscribe()``), ``enable.auto.commit=false`` and ``enable.auto.offset.store=false``, with a
``group.id`` of its own, ``kqlab-sample-<random hex>`` (librdkafka wants one; it is never used
to join or commit, see :data:`~kqlab.sources.kafka_client.GROUP_PREFIX`).

The ranges are resolved once, at the start: earliest and latest offsets per partition
(ListOffsets; the latest is the last stable offset, since the consumer reads committed data:
the high watermark unless a transaction is open).  Records appended afterwards are not read.

**Transactions.**  Both paths read committed data only (librdkafka's default
``isolation.level=read_committed``; exact framing fetches with isolation level 1 and drops the
batches of aborted transactions, see :mod:`kqlab.sources.fetch`).

**Framing.**  The consumer hands over records, not batches, so the batch framing is lost.  The
result says so: ``framing == "reconstructed:single"`` and every record is treated as its own
batch (``batch_offset = offset``, ``batch_index = 0``).

**Configs** pass through to librdkafka unchanged (SASL, SSL, ...).  They are never printed: the
result keeps only :func:`~kqlab.sources.kafka_client.redact` of them, and error messages name
only ``bootstrap.servers``.

This module is the face of live sampling: the pieces live below it — the errors
(:mod:`~kqlab.sources.kafka_errors`), client configuration (:mod:`~kqlab.sources.kafka_client`),
offsets and plans (:mod:`~kqlab.sources.kafka_offsets`), the consumer read
(:mod:`~kqlab.sources.kafka_consume`), exact framing (:mod:`~kqlab.sources.fetch`) and the
table steps (:mod:`~kqlab.sources.sample_tables`) — and the names users need are re-exported
here.  Streaming a sample into a snapshot is :mod:`kqlab.sources.kafka_snapshot`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA
from kqlab.sources.fetch import fetch_plan
from kqlab.sources.kafka_client import (
    GROUP_PREFIX,
    REDACTED,
    client_config,
    consumer_conf,
    new_group_id,
    redact,
)
from kqlab.sources.kafka_consume import read_with_consumer
from kqlab.sources.kafka_errors import (
    BrokerUnreachableError,
    EmptyRangeError,
    KafkaSourceError,
    KafkaTimeoutError,
    NotAuthorizedError,
    ReadCancelled,
    SampleCancelled,
    UnknownTopicError,
)
from kqlab.sources.kafka_offsets import (
    TIME_LOOKUPS,
    empty_range_message,
    plan_ranges,
    time_offsets,
    topic_partitions,
    watermarks,
)
from kqlab.sources.progress import Progress
from kqlab.sources.sample_result import FRAMING, PartitionRange, SampleResult
from kqlab.sources.sample_tables import (
    cap_table,
    filter_batches_to_records,
    keep_mask,
    time_filter,
)

if TYPE_CHECKING:
    from kqlab.kafka.log import LogIssue

__all__ = [
    "FRAMING",
    "GROUP_PREFIX",
    "REDACTED",
    "TIME_LOOKUPS",
    "BrokerUnreachableError",
    "EmptyRangeError",
    "KafkaSourceError",
    "KafkaTimeoutError",
    "NotAuthorizedError",
    "PartitionRange",
    "Progress",
    "SampleCancelled",
    "SampleResult",
    "UnknownTopicError",
    "client_config",
    "redact",
    "resolve_ranges",
    "sample",
]


def _check_request(config_or_bootstrap: str | Mapping[str, Any], *, latest: int | None,
                   start_offset: int | Mapping[int, int] | None,
                   end_offset: int | Mapping[int, int] | None, start_time_ms: int | None,
                   end_time_ms: int | None, time_lookup: str
                   ) -> tuple[dict[str, Any], str, bool]:
    """The client config, its bootstrap address and whether a time range was asked for;
    a :class:`KafkaSourceError` for options that contradict each other."""
    config, bootstrap = client_config(config_or_bootstrap)
    if latest is not None and (start_offset is not None or end_offset is not None):
        raise KafkaSourceError("latest= cannot be combined with start_offset/end_offset")
    timed = start_time_ms is not None or end_time_ms is not None
    if timed and (latest is not None or start_offset is not None or end_offset is not None):
        raise KafkaSourceError("start_time_ms/end_time_ms cannot be combined with latest= or "
                               "start_offset/end_offset")
    if time_lookup not in TIME_LOOKUPS:
        raise KafkaSourceError(f"time_lookup must be one of {', '.join(TIME_LOOKUPS)}, "
                               f"got {time_lookup!r}")
    return config, bootstrap, timed


def sample(config_or_bootstrap: str | Mapping[str, Any], topic: str, *,
           partitions: list[int] | None = None,
           start_offset: int | Mapping[int, int] | None = None,
           end_offset: int | Mapping[int, int] | None = None,
           latest: int | None = None, max_records: int | None = None,
           random_fraction: float | None = None, seed: int = 0, timeout_s: float = 30.0,
           allow_empty: bool = False, progress: Progress | None = None,
           exact_framing: bool = False, cancel: threading.Event | None = None,
           start_time_ms: int | None = None, end_time_ms: int | None = None,
           time_lookup: str = "auto") -> SampleResult:
    """Read a bounded sample of ``topic`` into a ``RECORDS_SCHEMA`` table (see the module doc).

    ``exact_framing=True`` reads the resolved ranges with raw Fetch requests instead of the
    consumer (:mod:`kqlab.sources.fetch`): the result then has ``framing == "exact"`` and a
    ``batches`` table with the real batch framing (batches overlapping the range are kept
    whole; ``progress`` is called once at the end).

    ``timeout_s`` bounds each metadata/offset request and the time without any new record while
    reading.  ``progress(records, bytes, partitions_done, records_per_s)`` is called about
    twice a second and once at the end.

    ``cancel``: a :class:`threading.Event` checked between polls (every <= 50 ms) and between
    Fetch requests; once set, reading stops within about a second and
    :class:`SampleCancelled` is raised, its ``result`` holding the records read so far.

    ``start_time_ms`` / ``end_time_ms``: a timestamp window instead of offsets (see
    :func:`~kqlab.sources.kafka_offsets.time_offsets` for ``time_lookup``); the offsets are
    resolved per partition (start: first offset with timestamp >= ``start_time_ms``; end: first
    offset with timestamp >= ``end_time_ms``), and the records read are then also filtered to
    ``start_time_ms <= timestamp < end_time_ms`` (for out-of-order timestamps).
    """
    config, bootstrap, timed = _check_request(
        config_or_bootstrap, latest=latest, start_offset=start_offset, end_offset=end_offset,
        start_time_ms=start_time_ms, end_time_ms=end_time_ms, time_lookup=time_lookup)
    if random_fraction is not None and not 0.0 <= random_fraction <= 1.0:
        raise KafkaSourceError(f"random_fraction must be within [0, 1], got {random_fraction}")
    for name, v in (("latest", latest), ("max_records", max_records)):
        if v is not None and v < 0:
            raise KafkaSourceError(f"{name} must be >= 0, got {v}")

    from confluent_kafka import Consumer

    t0 = time.monotonic()
    errors: list[str] = []
    batches: pa.Table | None = None
    issues: list[LogIssue] = []
    group_id = new_group_id()
    consumer = Consumer(consumer_conf(config, group_id, errors))
    cancelled: ReadCancelled | None = None
    try:
        parts = topic_partitions(consumer, topic, partitions, bootstrap, timeout_s, errors)
        lows, highs = watermarks(consumer, topic, parts, bootstrap, timeout_s)
        if timed:
            start_offset, end_offset = time_offsets(
                consumer, topic, parts, lows, highs, start_time_ms, end_time_ms, time_lookup,
                bootstrap, timeout_s, cancel)
        plan = plan_ranges(parts, lows, highs, start_offset, end_offset, latest,
                           max_records if random_fraction is None and not timed else None)
        total = sum(e - s for s, e in plan.values())
        if cancel is not None and cancel.is_set():
            raise ReadCancelled(RECORDS_SCHEMA.empty_table(), 0)
        if total == 0:
            if not allow_empty:
                raise EmptyRangeError(empty_range_message(topic, bootstrap, lows, highs, plan))
            table = RECORDS_SCHEMA.empty_table()
            nbytes = 0
        elif exact_framing:
            table, batches, nbytes, issues = fetch_plan(config, topic, plan, timeout_s=timeout_s,
                                                        cancel=cancel)
            if progress is not None:
                progress(table.num_rows, nbytes, len(plan),
                         table.num_rows / max(time.monotonic() - t0, 1e-9))
        else:
            table, nbytes = read_with_consumer(consumer, topic, plan, bootstrap, timeout_s,
                                               progress, t0, cancel)
    except ReadCancelled as exc:
        cancelled = exc
        table, nbytes = exc.records, exc.nbytes
        batches = exc.batches
    finally:
        with contextlib.suppress(Exception):
            consumer.close()  # never commits: auto commit is off and nothing is stored

    if timed:
        table = time_filter(table, start_time_ms, end_time_ms)
        if max_records is not None and random_fraction is None and table.num_rows > max_records:
            table = cap_table(table, parts, max_records)
    if random_fraction is not None:
        table = table.filter(pa.array(keep_mask(table, random_fraction, seed)))
        if max_records is not None and table.num_rows > max_records:
            table = cap_table(table, parts, max_records)
    if batches is not None and (random_fraction is not None or timed):
        batches = filter_batches_to_records(batches, table)
    if exact_framing and batches is None:
        batches = BATCHES_SCHEMA.empty_table()
    counts = dict.fromkeys(parts, 0)
    for p, n in zip(*np.unique(table.column("partition").to_numpy(), return_counts=True),
                    strict=True):
        counts[int(p)] = int(n)
    ranges = [PartitionRange(p, lows[p], highs[p], plan[p][0], plan[p][1], counts[p])
              for p in parts]
    result = SampleResult(table, topic, bootstrap, ranges,
                          "exact" if exact_framing else FRAMING, group_id, nbytes,
                          time.monotonic() - t0, redact(config), batches, issues)
    if cancelled is not None:
        raise SampleCancelled(f"sampling {topic!r} from {bootstrap} was cancelled after "
                              f"{table.num_rows} records", result=result)
    return result


def resolve_ranges(config_or_bootstrap: str | Mapping[str, Any], topic: str, *,
                   partitions: list[int] | None = None,
                   start_offset: int | Mapping[int, int] | None = None,
                   end_offset: int | Mapping[int, int] | None = None,
                   latest: int | None = None, max_records: int | None = None,
                   timeout_s: float = 30.0, allow_empty: bool = False,
                   start_time_ms: int | None = None, end_time_ms: int | None = None,
                   time_lookup: str = "auto", cancel: threading.Event | None = None
                   ) -> list[PartitionRange]:
    """The ranges :func:`sample` would read (``records`` = planned count), without reading.

    With ``start_time_ms`` / ``end_time_ms`` the offsets are resolved as in :func:`sample`
    (``max_records`` then caps the offsets, before any timestamp filter).
    """
    from confluent_kafka import Consumer

    config, bootstrap, timed = _check_request(
        config_or_bootstrap, latest=latest, start_offset=start_offset, end_offset=end_offset,
        start_time_ms=start_time_ms, end_time_ms=end_time_ms, time_lookup=time_lookup)
    errors: list[str] = []
    consumer = Consumer(consumer_conf(config, new_group_id(), errors))
    try:
        parts = topic_partitions(consumer, topic, partitions, bootstrap, timeout_s, errors)
        lows, highs = watermarks(consumer, topic, parts, bootstrap, timeout_s)
        if timed:
            try:
                start_offset, end_offset = time_offsets(
                    consumer, topic, parts, lows, highs, start_time_ms, end_time_ms,
                    time_lookup, bootstrap, timeout_s, cancel)
            except ReadCancelled:
                raise SampleCancelled(f"resolving the time window of {topic!r} on {bootstrap} "
                                      "was cancelled") from None
        plan = plan_ranges(parts, lows, highs, start_offset, end_offset, latest, max_records)
    finally:
        with contextlib.suppress(Exception):
            consumer.close()
    if not allow_empty and sum(e - s for s, e in plan.values()) == 0:
        raise EmptyRangeError(empty_range_message(topic, bootstrap, lows, highs, plan))
    return [PartitionRange(p, lows[p], highs[p], plan[p][0], plan[p][1], plan[p][1] - plan[p][0])
            for p in parts]
