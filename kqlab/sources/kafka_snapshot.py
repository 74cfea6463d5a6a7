"""A live topic streamed into a snapshot: :func:`sample_to_snapshot`.

The sample is resolved once (:func:`kqlab.sources.kafka.resolve_ranges`), then each
partition's range is read in windows and every window is appended to the snapshot as its own
part and dropped, so memory is bounded by the window, not by the sample.  Exact framing reads
the windows with the raw Fetch client (:class:`~kqlab.sources.fetch.FetchClient`), otherwise
one consumer streams them (:func:`~kqlab.sources.kafka_consume.read_with_consumer`) with its
prefetch queue bounded by the settings below.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kqlab.records import BATCHES_SCHEMA
from kqlab.sources.fetch import FetchClient
from kqlab.sources.files import Snapshot
from kqlab.sources.kafka import resolve_ranges, sample
from kqlab.sources.kafka_client import consumer_conf, new_group_id, redact
from kqlab.sources.kafka_consume import read_with_consumer
from kqlab.sources.kafka_errors import KafkaSourceError, ReadCancelled, SampleCancelled
from kqlab.sources.progress import Progress
from kqlab.sources.sample_result import FRAMING, PartitionRange
from kqlab.sources.sample_tables import (
    filter_batches_to_records,
    keep_mask,
    payload_bytes,
    time_filter,
)

__all__ = [
    "FETCH_MAX_BYTES",
    "FETCH_QUEUE_BACKOFF_MS",
    "QUEUE_KB",
    "QUEUE_MIN_MESSAGES",
    "sample_to_snapshot",
]

#: librdkafka prefetch queue bound for streaming into a snapshot (KiB)
QUEUE_KB = 16 << 10
#: librdkafka ``fetch.max.bytes`` for streaming into a snapshot: the *compressed* size of one
#: Fetch response.  librdkafka checks its queue bounds only before sending a Fetch, so one
#: response is always queued whole, decompressed, and Kafka fills a response with up to
#: ``max.partition.fetch.bytes`` (1 MiB) of *each* partition, up to this total.  With the 50 MB
#: default a well-compressed topic (lz4, ~30x) of many partitions could queue ~50 MB
#: compressed (>1.5 GB of records with librdkafka's per-message overhead) at once.  1 MB (the
#: default ``message.max.bytes``, which librdkafka requires it not to undercut) keeps one
#: response to ~120k records whatever the partition count.  A batch larger than this is still
#: returned (KIP-74).
FETCH_MAX_BYTES = 1_000_000
#: librdkafka ``queued.min.messages`` for streaming (default 100k): stop prefetching at two
#: consume batches; with a response of ~120k records the default added one more response
QUEUE_MIN_MESSAGES = 20_000
#: librdkafka ``fetch.queue.backoff.ms`` for streaming: how long a partition waits before the
#: next Fetch once the queue is over its bounds (default 1000 ms: with responses of ~120k
#: records the queue is over ``queued.min.messages`` after every Fetch, and the read stalled
#: a second each time).  The queue is re-checked every 20 ms instead.
FETCH_QUEUE_BACKOFF_MS = 20


def sample_to_snapshot(config_or_bootstrap: str | Mapping[str, Any], topic: str,
                       out: str | Path, *, exact_framing: bool = False,
                       chunk_records: int = 50_000, overwrite: bool = False,
                       **sample_args: Any) -> Snapshot:
    """Sample ``topic`` (as :func:`kqlab.sources.kafka.sample` with ``sample_args``) into a
    new snapshot at ``out``, one part per chunk.

    The ranges are resolved once; then each partition is read in windows of
    ``chunk_records`` offsets, each window is appended as its own part and dropped.  **Memory
    bound:** one window's records (at most ``chunk_records`` rows) plus, with exact framing, the
    batches overlapping it and one Fetch response sized to the window (see
    :meth:`FetchClient.read`), or without it librdkafka's prefetch queue, bounded to about
    20k records plus one Fetch response of 1 MB compressed (``queued.min.messages``,
    ``queued.max.messages.kbytes``, ``fetch.max.bytes``; settings given in the config win) —
    not the whole sample, whatever the compression ratio.  Exception: ``random_fraction``
    together with ``max_records`` (the cap applies after the random filter) reads the whole
    sample in memory first.

    A batch that straddles two windows is written once (with the first window).  The snapshot
    records ``method`` (``"fetch:<how>"`` or ``"consumer:<how>"``), the resolved ``ranges`` and the
    ``cluster`` config (redacted: no secrets are stored).

    ``progress(records, bytes, partitions_done, records_per_s)`` gets running totals over all
    windows.  ``cancel`` (a :class:`threading.Event`) stops within about a second and raises
    :class:`~kqlab.sources.kafka_errors.SampleCancelled` whose ``snapshot`` holds the parts
    written so far (including what the interrupted window had read); they stay valid.  The
    metadata's ``extra.complete`` is ``false`` from creation until the last window is written
    (so a crashed or cancelled run is recognisable), ``true`` afterwards; a cancelled run also
    gets ``extra.cancelled = true``.  ``start_time_ms`` / ``end_time_ms`` / ``time_lookup`` work
    as in :func:`~kqlab.sources.kafka.sample`.
    """
    if chunk_records < 1:
        raise KafkaSourceError(f"chunk_records must be >= 1, got {chunk_records}")
    config = ({"bootstrap.servers": config_or_bootstrap}
              if isinstance(config_or_bootstrap, str) else dict(config_or_bootstrap))
    sample_args = dict(sample_args)
    progress: Progress | None = sample_args.pop("progress", None)
    cancel: threading.Event | None = sample_args.pop("cancel", None)
    timed = (sample_args.get("start_time_ms") is not None
             or sample_args.get("end_time_ms") is not None)
    how = ("random" if sample_args.get("random_fraction") is not None
           else "latest" if sample_args.get("latest") is not None
           else "time" if timed
           else "max_records" if sample_args.get("max_records") is not None else "range")
    method = f"{'fetch' if exact_framing else 'consumer'}:{how}"
    framing = "exact" if exact_framing else FRAMING
    timeout_s = float(sample_args.get("timeout_s", 30.0))
    t0 = time.monotonic()

    frac = sample_args.get("random_fraction")
    if (frac is not None or timed) and sample_args.get("max_records") is not None:
        whole_cancelled: SampleCancelled | None = None
        try:
            res = sample(config, topic, exact_framing=exact_framing, progress=progress,
                         cancel=cancel, **sample_args)
        except SampleCancelled as exc:
            if exc.result is None:
                raise
            res, whole_cancelled = exc.result, exc
        snap = Snapshot.create(out, topic=topic, cluster=redact(config), method=method,
                               ranges=[r.to_dict() for r in res.ranges], framing=framing,
                               overwrite=overwrite, extra={"complete": False})
        for i in range(0, max(res.records.num_rows, 1), chunk_records):
            part = res.records.slice(i, chunk_records)
            snap.append(part, filter_batches_to_records(res.batches, part)
                        if exact_framing and res.batches is not None else None)
        if whole_cancelled is not None:
            snap.update_extra(cancelled=True)
            whole_cancelled.snapshot = snap
            raise whole_cancelled
        snap.update_extra(complete=True)
        return snap

    ranges = resolve_ranges(config, topic, **{k: v for k, v in sample_args.items() if k in (
        "partitions", "start_offset", "end_offset", "latest", "max_records", "timeout_s",
        "allow_empty", "start_time_ms", "end_time_ms", "time_lookup")}, cancel=cancel)
    snap = Snapshot.create(out, topic=topic, cluster=redact(config), method=method,
                           ranges=[r.to_dict() for r in ranges], framing=framing,
                           overwrite=overwrite, extra={"complete": False})
    seed = int(sample_args.get("seed", 0))
    t_lo, t_hi = sample_args.get("start_time_ms"), sample_args.get("end_time_ms")
    client = (FetchClient(config, timeout_s=timeout_s, read_committed=True)  # as the consumer
              if exact_framing else None)
    total_rows = total_bytes = done = 0

    def report(rows: int, nbytes: int, parts_done: int) -> None:
        if progress is not None:
            progress(rows, nbytes, parts_done, rows / max(time.monotonic() - t0, 1e-9))

    cancelled: SampleCancelled | None = None
    if client is None:
        cancelled = _stream_consumer(config, topic, ranges, snap, chunk_records, frac, seed,
                                     t_lo, t_hi, timeout_s, progress, cancel, t0)
        ranges = []  # all written
    try:
        for r in ranges:
            last_batch = -1
            for s in range(r.start, r.end, chunk_records):
                e = min(s + chunk_records, r.end)
                if client is not None:
                    try:
                        d = client.read(topic, r.partition, s, e, cancel=cancel)
                        records, batches, issues = d.records, d.batches, d.issues
                    except ReadCancelled as part:
                        records, issues = part.records, part.issues
                        batches = part.batches if part.batches is not None \
                            else BATCHES_SCHEMA.empty_table()
                        cancelled = SampleCancelled(
                            f"sampling {topic!r} into {out} was cancelled", snapshot=snap)
                    if frac is not None or timed:
                        if frac is not None:
                            records = records.filter(pa.array(keep_mask(records, frac, seed)))
                        records = time_filter(records, t_lo, t_hi)
                        batches = filter_batches_to_records(batches, records)
                    batches = batches.filter(pc.greater(batches.column("batch_offset"),
                                                        last_batch))
                    if batches.num_rows:
                        last_batch = pc.max(batches.column("batch_offset")).as_py()
                else:
                    break  # the consumer path streams the whole range below
                snap.append(records, batches, issues)
                total_rows += records.num_rows
                total_bytes += payload_bytes(records)
                if cancelled is not None:
                    break
                report(total_rows, total_bytes, done)
            if cancelled is not None:
                break
            done += 1
    finally:
        if client is not None:
            client.close()
    if cancelled is not None:
        snap.update_extra(cancelled=True)
        raise cancelled
    snap.update_extra(complete=True)
    if client is not None:
        report(total_rows, total_bytes, done)
    return snap


def _stream_consumer(config: dict[str, Any], topic: str, ranges: list[PartitionRange],
                     snap: Snapshot, chunk_records: int, frac: float | None, seed: int,
                     t_lo: int | None, t_hi: int | None, timeout_s: float,
                     progress: Progress | None, cancel: threading.Event | None, t0: float
                     ) -> SampleCancelled | None:
    """The consumer path of :func:`sample_to_snapshot`: one consumer, each partition's range
    streamed and appended in parts of at most ``chunk_records`` rows.  Returns the
    ``SampleCancelled`` to raise when cancelled, else ``None``."""
    from confluent_kafka import Consumer

    bootstrap = str(config.get("bootstrap.servers") or config.get("metadata.broker.list"))
    errors: list[str] = []
    conf = dict(config)
    # bound librdkafka's prefetch queue (default 64 MiB) to a few windows, and one Fetch
    # response (queued whole, decompressed) to ~1 MB compressed; see FETCH_MAX_BYTES
    conf.setdefault("queued.max.messages.kbytes", QUEUE_KB)
    conf.setdefault("fetch.max.bytes", max(FETCH_MAX_BYTES,
                                           int(conf.get("message.max.bytes") or 0)))
    conf.setdefault("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
    conf.setdefault("queued.min.messages", QUEUE_MIN_MESSAGES)
    consumer = Consumer(consumer_conf(conf, new_group_id(), errors))

    def write(table: pa.Table) -> None:
        if frac is not None:
            table = table.filter(pa.array(keep_mask(table, frac, seed)))
        table = time_filter(table, t_lo, t_hi)
        for i in range(0, table.num_rows, chunk_records):
            snap.append(table.slice(i, chunk_records))

    done_rows = done_bytes = 0
    try:
        for k, r in enumerate(ranges):
            if r.end <= r.start:
                continue

            def prog(n: int, nb: int, d: int, _rate: float, k: int = k,
                     base_rows: int = done_rows, base_bytes: int = done_bytes) -> None:
                rows = base_rows + n
                if progress is not None:
                    progress(rows, base_bytes + nb, k + d,
                             rows / max(time.monotonic() - t0, 1e-9))

            try:
                _, nb = read_with_consumer(
                    consumer, topic, {r.partition: (r.start, r.end)}, bootstrap, timeout_s,
                    prog if progress is not None else None, t0, cancel, on_chunk=write,
                    chunk_rows=chunk_records)
            except ReadCancelled as exc:
                write(exc.records)
                return SampleCancelled(f"sampling {topic!r} from {bootstrap} into "
                                       f"{snap.path} was cancelled", snapshot=snap)
            done_rows += r.end - r.start
            done_bytes += nb
    finally:
        with contextlib.suppress(Exception):
            consumer.close()
    return None
