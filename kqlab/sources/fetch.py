"""Exact batch framing from a live broker: raw Fetch requests, parsed by kqlab itself.

:func:`fetch_exact` sends plain ``Fetch`` requests (API key 1, at most v12 so topics go by
name) through kafka-python's maintained protocol client (:class:`kafka.net.compat.KafkaNetClient`)
and hands the raw ``records`` bytes of each partition response to
:meth:`kqlab.kafka.batch.TableBuilder.add_buffer`.  No consumer group is joined and nothing is
ever committed: Fetch with ``replica_id = -1`` is a read-only request.

The batches table therefore has ``framing == "exact"``: the real batch boundaries, producer
id/epoch/base sequence, codec, timestamps and whether the stored CRC is valid.

**Range semantics.**  A fetch at offset ``o`` returns whole batches, so the first batch can
start *before* ``o`` (a compressed batch is never split) and the last may run past ``end``.
kqlab keeps whole batches: the **records** table is filtered to ``start <= offset < end``;
the **batches** table keeps *every* batch whose offsets ``[batch_offset, batch_offset +
last_offset_delta]`` overlap the range, so its ``record_count`` can be larger than the number of
its records in the records table.  Records of control batches (transaction markers) are dropped
from the records table (a consumer never delivers them); their batch rows are kept.

:func:`sample_to_snapshot` streams a :func:`kqlab.sources.kafka.sample` into a snapshot in
chunks of at most ``chunk_records`` records per partition window.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.batch import Decoded, TableBuilder
from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA
from kqlab.sources.kafka import (
    FRAMING,
    BrokerUnreachableError,
    KafkaSourceError,
    KafkaTimeoutError,
    NotAuthorizedError,
    UnknownTopicError,
    redact,
)

#: highest Fetch version used (v13+ names topics by id only)
FETCH_MAX_VERSION = 12
DEFAULT_MAX_BYTES = 8 << 20
_MAX_BATCH_BYTES = 256 << 20
#: smallest Fetch budget :meth:`FetchClient.read` sizes a request down to (see there)
_MIN_FETCH_BYTES = 64 << 10
#: bytes per offset assumed before a partition's first response (a low guess: too low costs
#: one more request, too high decodes far more records than asked for)
_FIRST_BYTES_PER_OFFSET = 1.0
CLIENT_ID = "kqlab-fetch"
#: Tansu answers max_wait_ms=0 with no topics at all, so wait a little (min_bytes=1)
_MAX_WAIT_MS = 20
#: librdkafka prefetch queue bound for streaming into a snapshot (KiB)
_QUEUE_KB = 16 << 10
#: librdkafka ``fetch.max.bytes`` for streaming into a snapshot: the *compressed* size of one
#: Fetch response.  librdkafka checks its queue bounds only before sending a Fetch, so one
#: response is always queued whole, decompressed; and some brokers (Tansu) ignore the
#: per-partition limit (``max.partition.fetch.bytes``) and fill the response up to this one.
#: With the 50 MB default a well-compressed topic (lz4, ~30x) put a whole partition (>500k
#: records, ~370 MiB with librdkafka's per-message overhead) in the queue at once.  1 MB (the
#: default ``message.max.bytes``, which librdkafka requires it not to undercut) keeps one
#: response to ~120k records even then.  A batch larger than this is still returned (KIP-74).
_FETCH_MAX_BYTES = 1_000_000
#: librdkafka ``queued.min.messages`` for streaming (default 100k): stop prefetching at two
#: consume batches; with a response of ~120k records the default added one more response
_QUEUE_MIN_MESSAGES = 20_000
#: librdkafka ``fetch.queue.backoff.ms`` for streaming: how long a partition waits before the
#: next Fetch once the queue is over its bounds (default 1000 ms: with responses of ~120k
#: records the queue is over ``queued.min.messages`` after every Fetch, and the read stalled
#: a second each time).  The queue is re-checked every 20 ms instead.
_FETCH_QUEUE_BACKOFF_MS = 20

# librdkafka config key -> kafka-python config key (what exact framing can pass on)
_CONFIG_MAP = {
    "security.protocol": ("security_protocol", str.upper),
    "sasl.mechanism": ("sasl_mechanism", str),
    "sasl.mechanisms": ("sasl_mechanism", str),
    "sasl.username": ("sasl_plain_username", str),
    "sasl.password": ("sasl_plain_password", str),
    "ssl.ca.location": ("ssl_cafile", str),
    "ssl.certificate.location": ("ssl_certfile", str),
    "ssl.key.location": ("ssl_keyfile", str),
    "ssl.key.password": ("ssl_password", str),
    "client.id": ("client_id", str),
}


def _quiet() -> None:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)


def _client_config(config_or_bootstrap: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    from kqlab.sources.kafka import client_config

    config, bootstrap = client_config(config_or_bootstrap)
    out: dict[str, Any] = {"bootstrap_servers": bootstrap.split(","), "client_id": CLIENT_ID}
    for k, v in config.items():
        if k in _CONFIG_MAP:
            name, conv = _CONFIG_MAP[k]
            out[name] = conv(v)
        elif k.startswith(("sasl.", "ssl.")) and v is not None:
            raise KafkaSourceError(f"exact framing cannot pass the client setting {k!r} on "
                                   "(supported: " + ", ".join(sorted(_CONFIG_MAP)) + ")")
    return bootstrap, out


class FetchClient:
    """One kafka-python protocol connection set for raw Fetch requests (close it, or use
    ``with``)."""

    def __init__(self, config_or_bootstrap: str | Mapping[str, Any], *,
                 timeout_s: float = 30.0):
        from kafka.net.compat import KafkaNetClient

        _quiet()
        self.bootstrap, conf = _client_config(config_or_bootstrap)
        self.timeout_s = timeout_s
        #: (topic, partition) -> Fetch response bytes per offset seen last (sizes requests)
        self._bytes_per_offset: dict[tuple[str, int], float] = {}
        ms = max(int(timeout_s * 1000), 1)
        conf.update(request_timeout_ms=ms, socket_connection_setup_timeout_ms=min(ms, 10_000),
                    reconnect_backoff_ms=20, reconnect_backoff_max_ms=500,
                    receive_message_max_bytes=_MAX_BATCH_BYTES + (1 << 20))
        try:
            self.client = KafkaNetClient(**conf)
        except Exception as exc:  # bad settings
            raise KafkaSourceError(f"cannot set up a client for {self.bootstrap}: {exc}") from None
        try:
            self.client.check_version(timeout_ms=ms)
        except Exception as exc:
            self.close()
            raise BrokerUnreachableError(
                f"could not reach the Kafka broker at {self.bootstrap} within {timeout_s:g}s "
                f"({type(exc).__name__}: {exc}). Check that the address and port are right, that "
                "the broker is running and reachable from here, and that security.protocol / "
                "SASL / SSL settings match the listener.") from None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()

    def __enter__(self) -> FetchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _refresh(self) -> None:
        with contextlib.suppress(Exception):
            fut = self.client.cluster.request_update()
            self.client.poll(timeout_ms=int(self.timeout_s * 1000), future=fut)

    def leader(self, topic: str, partition: int) -> int:
        from kafka.structs import TopicPartition

        cluster = self.client.cluster
        parts = cluster.partitions_for_topic(topic)
        if parts is None or partition not in parts:
            self._refresh()
            parts = cluster.partitions_for_topic(topic)
        if parts is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist on {self.bootstrap}")
        if partition not in parts:
            raise UnknownTopicError(f"topic {topic!r} on {self.bootstrap} has partitions "
                                    f"{sorted(parts)}; [{partition}] does not exist")
        node = cluster.leader_for_partition(TopicPartition(topic, partition))
        if node is None or node < 0:
            raise KafkaSourceError(f"{topic}[{partition}] has no leader on {self.bootstrap} "
                                   "right now; retry later")
        return int(node)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int
              ) -> tuple[bytes, int | None]:
        """One Fetch request: ``(raw records bytes, high watermark or None if not sent)``."""
        import kafka.errors as Errors  # noqa: N812
        from kafka.protocol.consumer import FetchRequest

        node = self.leader(topic, partition)
        t_cls = FetchRequest.FetchTopic
        req = FetchRequest(
            replica_id=-1, max_wait_ms=_MAX_WAIT_MS, min_bytes=1, max_bytes=max_bytes,
            isolation_level=0,
            session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[t_cls(topic=topic, partitions=[t_cls.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes,
                current_leader_epoch=-1, log_start_offset=-1)])],
            max_version=FETCH_MAX_VERSION)
        try:
            resp = self.client.send_and_receive(node, req,
                                                timeout_ms=int(self.timeout_s * 1000))
        except Errors.KafkaTimeoutError:
            raise KafkaTimeoutError(f"no Fetch response for {topic}[{partition}] at offset "
                                    f"{offset} from {self.bootstrap} within "
                                    f"{self.timeout_s:g}s") from None
        except Exception as exc:
            raise KafkaSourceError(f"Fetch of {topic}[{partition}] at offset {offset} from "
                                   f"{self.bootstrap} failed: {type(exc).__name__}: {exc}"
                                   ) from None
        if resp.error_code:
            raise KafkaSourceError(f"Fetch from {self.bootstrap} failed: "
                                   f"{Errors.for_code(resp.error_code).__name__}")
        for t in resp.responses:
            for pd in t.partitions:
                if pd.partition_index != partition:
                    continue
                if pd.error_code:
                    err = Errors.for_code(pd.error_code)
                    if err is Errors.UnknownTopicOrPartitionError:
                        raise UnknownTopicError(f"topic {topic!r} partition {partition} is "
                                                f"unknown to {self.bootstrap}")
                    if err is Errors.TopicAuthorizationFailedError:
                        raise NotAuthorizedError(f"not authorised to read topic {topic!r} on "
                                                 f"{self.bootstrap}: grant READ on it")
                    if err is Errors.OffsetOutOfRangeError:
                        raise KafkaSourceError(f"offset {offset} is out of range for "
                                               f"{topic}[{partition}] on {self.bootstrap}")
                    raise KafkaSourceError(f"Fetch of {topic}[{partition}] from "
                                           f"{self.bootstrap}: {err.__name__}")
                return bytes(pd.records or b""), int(pd.high_watermark)
        return b"", None  # no partition data (e.g. nothing new within max_wait_ms)

    def read(self, topic: str, partition: int, start: int, end: int, *,
             max_bytes: int = DEFAULT_MAX_BYTES, cancel: threading.Event | None = None
             ) -> Decoded:
        """Read ``[start, end)`` of one partition (see the module doc for the range rules).

        ``max_bytes`` caps each Fetch request.  A request asks for no more than the rest of the
        range needs, at the bytes per offset of this partition's previous response (plus a
        quarter, at least ``_MIN_FETCH_BYTES``): the whole response is decoded, and
        ``max_bytes`` of well-compressed batches can hold far more records than a small range
        (8 MiB of lz4 batches of repetitive values decoded to ~580k records, ~150 MB, for a
        window of 20k).  Before a partition's first response, 1 byte per offset is assumed.

        ``cancel`` is checked before every Fetch request; once set, the batches read so far are
        returned as a :class:`_PartialRead` exception (internal).
        """
        builder = TableBuilder(topic, partition)
        rec_parts: list[pa.Table] = []
        batch_parts: list[pa.Table] = []
        issues: list = []
        offset, floor = start, 0
        idle_since = time.monotonic()
        while offset < end:
            if cancel is not None and cancel.is_set():
                raise _PartialRead(_decoded(rec_parts, batch_parts, issues))
            size = max(self._request_size(topic, partition, end - offset, max_bytes), floor)
            buf, hw = self.fetch(topic, partition, offset, size)
            stop, kind, new_issues = builder.add_buffer(buf, 0, final=False)
            records, batches = builder.take()
            if new_issues:
                issues.extend(new_issues)
            if batches.num_rows == 0:
                if buf and stop == 0 and kind in (1, 3) and size < _MAX_BATCH_BYTES:
                    floor = size * 2  # one batch larger than the budget (old brokers): more
                    continue
                if new_issues or (hw is not None and hw <= offset):
                    break  # corrupt data, or the log ends before `end` (truncated)
                if time.monotonic() - idle_since > self.timeout_s:
                    raise KafkaTimeoutError(f"no batches for {topic}[{partition}] at offset "
                                            f"{offset} from {self.bootstrap} for "
                                            f"{self.timeout_s:g}s (high watermark {hw})")
                time.sleep(0.01)
                continue
            idle_since = time.monotonic()
            floor = 0
            bo = batches.column("batch_offset")
            last = pc.add(bo, pc.cast(batches.column("last_offset_delta"), pa.int64()))
            nxt = pc.max(last).as_py() + 1
            span = nxt - pc.min(bo).as_py()
            if span > 0 and stop > 0:
                self._bytes_per_offset[(topic, partition)] = stop / span
            keep_b = pc.and_(pc.less(bo, end), pc.greater_equal(last, start))
            batch_parts.append(batches.filter(keep_b))
            off = records.column("offset")
            keep_r = pc.and_(pc.greater_equal(off, start), pc.less(off, end))
            ctrl = batches.filter(batches.column("is_control")).column("batch_offset")
            if len(ctrl):
                keep_r = pc.and_(keep_r, pc.invert(pc.is_in(records.column("batch_offset"),
                                                            value_set=ctrl.combine_chunks())))
            rec_parts.append(records.filter(keep_r))
            if nxt <= offset:
                break  # no progress possible
            offset = nxt
        return _decoded(rec_parts, batch_parts, issues)

    def _request_size(self, topic: str, partition: int, offsets: int, max_bytes: int) -> int:
        """The Fetch budget for ``offsets`` more offsets (see :meth:`read`)."""
        per = self._bytes_per_offset.get((topic, partition), _FIRST_BYTES_PER_OFFSET)
        want = int(per * offsets * 1.25) + 1
        return min(max(want, _MIN_FETCH_BYTES), max_bytes)


class _PartialRead(Exception):
    """Internal: a read was cancelled; ``decoded`` holds what was read."""

    def __init__(self, decoded: Decoded):
        super().__init__("cancelled")
        self.decoded = decoded


def _decoded(rec_parts: list[pa.Table], batch_parts: list[pa.Table], issues: list) -> Decoded:
    records = pa.concat_tables(rec_parts) if rec_parts else RECORDS_SCHEMA.empty_table()
    batches = pa.concat_tables(batch_parts) if batch_parts else BATCHES_SCHEMA.empty_table()
    return Decoded(records, batches, issues)


def fetch_exact(bootstrap: str | Mapping[str, Any], topic: str, partition: int,
                start_offset: int, end_offset: int, *, max_bytes: int = DEFAULT_MAX_BYTES,
                timeout_s: float = 30.0) -> Decoded:
    """Records and exact batches of ``topic[partition]`` for offsets ``[start, end)``.

    ``bootstrap`` is ``"host:port"`` or a librdkafka-style config dict (``bootstrap.servers``
    plus security settings, see ``_CONFIG_MAP``).  ``max_bytes`` is the per-request budget;
    ``timeout_s`` bounds connecting, each request and the time without progress.  Raises
    :class:`~kqlab.sources.kafka.KafkaSourceError` subclasses.
    """
    if end_offset < start_offset:
        raise KafkaSourceError(f"end_offset {end_offset} < start_offset {start_offset}")
    with FetchClient(bootstrap, timeout_s=timeout_s) as client:
        client.leader(topic, partition)  # unknown topic/partition errors, even for an empty range
        return client.read(topic, partition, start_offset, end_offset, max_bytes=max_bytes)


def fetch_plan(config: str | Mapping[str, Any], topic: str, plan: Mapping[int, tuple[int, int]],
               *, timeout_s: float = 30.0, max_bytes: int = DEFAULT_MAX_BYTES,
               cancel: threading.Event | None = None
               ) -> tuple[pa.Table, pa.Table, int, list]:
    """Exact read of ``{partition: (start, end)}``: ``(records, batches, value_bytes, issues)``.

    When ``cancel`` gets set, raises the internal ``_Cancelled`` of :mod:`kqlab.sources.kafka`
    with what was read (:func:`~kqlab.sources.kafka.sample` turns it into ``SampleCancelled``).
    """
    from kqlab.sources.kafka import _Cancelled

    recs, bats, issues = [], [], []
    with FetchClient(config, timeout_s=timeout_s) as client:
        for p in sorted(plan):
            s, e = plan[p]
            if e <= s:
                continue
            try:
                d = client.read(topic, p, s, e, max_bytes=max_bytes, cancel=cancel)
            except _PartialRead as part:
                recs.append(part.decoded.records)
                bats.append(part.decoded.batches)
                r = pa.concat_tables(recs)
                raise _Cancelled(r, payload_bytes(r), pa.concat_tables(bats)) from None
            recs.append(d.records)
            bats.append(d.batches)
            issues.extend(d.issues)
    records = pa.concat_tables(recs) if recs else RECORDS_SCHEMA.empty_table()
    batches = pa.concat_tables(bats) if bats else BATCHES_SCHEMA.empty_table()
    return records, batches, payload_bytes(records), issues


def payload_bytes(records: pa.Table) -> int:
    """Key + value + header key/value bytes (what ``SampleResult.bytes`` counts)."""
    if not records.num_rows:
        return 0
    total = 0
    for name in ("key", "value"):
        total += pc.sum(pc.binary_length(records.column(name))).as_py() or 0
    hdr = pc.list_flatten(records.column("headers"))
    if len(hdr):
        total += pc.sum(pc.binary_length(pc.struct_field(hdr, "key"))).as_py() or 0
        total += pc.sum(pc.binary_length(pc.struct_field(hdr, "value"))).as_py() or 0
    return int(total)


def filter_batches_to_records(batches: pa.Table, records: pa.Table) -> pa.Table:
    """The batch rows that still hold at least one record of ``records`` (after sampling)."""
    if not batches.num_rows:
        return batches
    key = pc.add(pc.multiply(pc.cast(records.column("partition"), pa.int64()), 1 << 40),
                 records.column("batch_offset"))
    bkey = pc.add(pc.multiply(pc.cast(batches.column("partition"), pa.int64()), 1 << 40),
                  batches.column("batch_offset"))
    return batches.filter(pc.is_in(bkey, value_set=pc.unique(key.combine_chunks())))


# -- streaming into a snapshot ----------------------------------------------------------------
def sample_to_snapshot(config_or_bootstrap: str | Mapping[str, Any], topic: str,
                       out: str | Path, *, exact_framing: bool = False,
                       chunk_records: int = 50_000, overwrite: bool = False,
                       **sample_args: Any):
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
    :class:`~kqlab.sources.kafka.SampleCancelled` whose ``snapshot`` holds the parts written so
    far (including what the interrupted window had read); they stay valid.  The metadata's
    ``extra.complete`` is ``false`` from creation until the last window is written (so a crashed
    or cancelled run is recognisable), ``true`` afterwards; a cancelled run also gets
    ``extra.cancelled = true``.  ``start_time_ms`` / ``end_time_ms`` / ``time_lookup`` work as in
    :func:`~kqlab.sources.kafka.sample`.
    """
    from kqlab.sources.files import Snapshot
    from kqlab.sources.kafka import SampleCancelled, resolve_ranges, sample

    if chunk_records < 1:
        raise KafkaSourceError(f"chunk_records must be >= 1, got {chunk_records}")
    config = ({"bootstrap.servers": config_or_bootstrap}
              if isinstance(config_or_bootstrap, str) else dict(config_or_bootstrap))
    sample_args = dict(sample_args)
    progress = sample_args.pop("progress", None)
    cancel = sample_args.pop("cancel", None)
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
        try:
            res = sample(config, topic, exact_framing=exact_framing, progress=progress,
                         cancel=cancel, **sample_args)
        except SampleCancelled as exc:
            if exc.result is None:
                raise
            res, cancelled = exc.result, exc
        else:
            cancelled = None
        snap = Snapshot.create(out, topic=topic, cluster=redact(config), method=method,
                               ranges=[_range_dict(r) for r in res.ranges], framing=framing,
                               overwrite=overwrite, extra={"complete": False})
        for i in range(0, max(res.records.num_rows, 1), chunk_records):
            part = res.records.slice(i, chunk_records)
            snap.append(part, filter_batches_to_records(res.batches, part)
                        if exact_framing else None)
        if cancelled is not None:
            _set_extra(snap, cancelled=True)
            cancelled.snapshot = snap
            raise cancelled
        _set_extra(snap, complete=True)
        return snap

    ranges = resolve_ranges(config, topic, **{k: v for k, v in sample_args.items() if k in (
        "partitions", "start_offset", "end_offset", "latest", "max_records", "timeout_s",
        "allow_empty", "start_time_ms", "end_time_ms", "time_lookup")}, cancel=cancel)
    snap = Snapshot.create(out, topic=topic, cluster=redact(config), method=method,
                           ranges=[_range_dict(r) for r in ranges], framing=framing,
                           overwrite=overwrite, extra={"complete": False})
    seed = int(sample_args.get("seed", 0))
    t_lo, t_hi = sample_args.get("start_time_ms"), sample_args.get("end_time_ms")
    client = FetchClient(config, timeout_s=timeout_s) if exact_framing else None
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
                    except _PartialRead as part:
                        d = part.decoded
                        cancelled = SampleCancelled(
                            f"sampling {topic!r} into {out} was cancelled", snapshot=snap)
                    records, batches, issues = d.records, d.batches, d.issues
                    if frac is not None or timed:
                        if frac is not None:
                            from kqlab.sources.kafka import _keep

                            records = records.filter(pa.array(_keep(records, frac, seed)))
                        records = _time_filter(records, t_lo, t_hi)
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
        _set_extra(snap, cancelled=True)
        raise cancelled
    _set_extra(snap, complete=True)
    if client is not None:
        report(total_rows, total_bytes, done)
    return snap


def _stream_consumer(config: dict[str, Any], topic: str, ranges: list, snap: Any,
                     chunk_records: int, frac: float | None, seed: int, t_lo: int | None,
                     t_hi: int | None, timeout_s: float, progress: Any,
                     cancel: threading.Event | None, t0: float) -> Any:
    """The consumer path of :func:`sample_to_snapshot`: one consumer, each partition's range
    streamed and appended in parts of at most ``chunk_records`` rows.  Returns the
    ``SampleCancelled`` to raise when cancelled, else ``None``."""
    import secrets

    from confluent_kafka import Consumer

    from kqlab.sources.kafka import (
        GROUP_PREFIX,
        SampleCancelled,
        _Cancelled,
        _consumer_conf,
        _keep,
        _read,
    )

    bootstrap = str(config.get("bootstrap.servers") or config.get("metadata.broker.list"))
    errors: list[str] = []
    conf = dict(config)
    # bound librdkafka's prefetch queue (default 64 MiB) to a few windows, and one Fetch
    # response (queued whole, decompressed) to ~1 MB compressed; see _FETCH_MAX_BYTES
    conf.setdefault("queued.max.messages.kbytes", _QUEUE_KB)
    conf.setdefault("fetch.max.bytes", max(_FETCH_MAX_BYTES,
                                           int(conf.get("message.max.bytes") or 0)))
    conf.setdefault("fetch.queue.backoff.ms", _FETCH_QUEUE_BACKOFF_MS)
    conf.setdefault("queued.min.messages", _QUEUE_MIN_MESSAGES)
    consumer = Consumer(_consumer_conf(conf, GROUP_PREFIX + secrets.token_hex(8), errors))

    def write(table: pa.Table) -> None:
        if frac is not None:
            table = table.filter(pa.array(_keep(table, frac, seed)))
        table = _time_filter(table, t_lo, t_hi)
        for i in range(0, table.num_rows, chunk_records):
            snap.append(table.slice(i, chunk_records))

    done_rows = done_bytes = 0
    try:
        for k, r in enumerate(ranges):
            if r.end <= r.start:
                continue

            def prog(n: int, nb: int, d: int, _rate: float, k: int = k, base_rows: int = done_rows,
                     base_bytes: int = done_bytes) -> None:
                rows = base_rows + n
                progress(rows, base_bytes + nb, k + d, rows / max(time.monotonic() - t0, 1e-9))

            try:
                _, nb = _read(consumer, topic, {r.partition: (r.start, r.end)}, bootstrap,
                              timeout_s, prog if progress is not None else None, t0, cancel,
                              on_chunk=write, chunk_rows=chunk_records)
            except _Cancelled as exc:
                write(exc.table)
                return SampleCancelled(f"sampling {topic!r} from {bootstrap} into "
                                       f"{snap.path} was cancelled", snapshot=snap)
            done_rows += r.end - r.start
            done_bytes += nb
    finally:
        with contextlib.suppress(Exception):
            consumer.close()
    return None


def _time_filter(records: pa.Table, lo: int | None, hi: int | None) -> pa.Table:
    if not records.num_rows or (lo is None and hi is None):
        return records
    ts = records.column("timestamp")
    masks = ([pc.greater_equal(ts, lo)] if lo is not None else []) + (
        [pc.less(ts, hi)] if hi is not None else [])
    mask = masks[0] if len(masks) == 1 else pc.and_(*masks)
    return records.filter(mask)


def _set_extra(snap: Any, **values: Any) -> None:
    """Update ``extra`` in a snapshot's metadata and rewrite ``snapshot.json`` atomically.

    ``Snapshot`` has no public way to change ``extra`` after :meth:`Snapshot.create`; this sets
    it on the in-memory metadata and lets :meth:`Snapshot.append` of an empty table (which adds
    no part) rewrite the file.
    """
    snap._meta.setdefault("extra", {}).update(values)
    snap.append(RECORDS_SCHEMA.empty_table())


def _range_dict(r: Any) -> dict[str, int]:
    return {"partition": r.partition, "low": r.low, "high": r.high, "start": r.start,
            "end": r.end}
