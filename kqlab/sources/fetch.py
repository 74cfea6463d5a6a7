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

**Isolation.**  ``FetchClient(read_committed=True)`` (what :func:`fetch_plan` and the snapshot
reader use, like the consumer's default ``isolation.level``) fetches with isolation level 1:
the broker then answers up to the last stable offset and lists the aborted transactions of
the range, and kqlab drops the batches of those transactions as the Java consumer does
(:func:`aborted_batch_offsets`), so the records are the committed ones and the batches table
holds the committed batches as stored (their markers included).  The default, isolation 0,
reads the log as stored, aborted batches included.

Client settings come from :func:`kqlab.sources.kafka_client.protocol_client_config` (the same
normalisation as the consumer's); :func:`kqlab.sources.kafka.sample` with ``exact_framing=True``
reads its plan with :func:`fetch_plan`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.batch import Decoded, TableBuilder
from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA
from kqlab.sources.kafka_client import protocol_client_config
from kqlab.sources.kafka_errors import (
    BrokerUnreachableError,
    KafkaSourceError,
    KafkaTimeoutError,
    NotAuthorizedError,
    ReadCancelled,
    UnknownTopicError,
)
from kqlab.sources.sample_tables import payload_bytes

if TYPE_CHECKING:
    from kqlab.kafka.log import LogIssue

__all__ = ["DEFAULT_MAX_BYTES", "FETCH_MAX_VERSION", "ClusterTopics", "FetchClient",
           "PartitionFetch", "aborted_batch_offsets", "fetch_exact", "fetch_plan"]

#: highest Fetch version used (v13+ names topics by id only)
FETCH_MAX_VERSION = 12
DEFAULT_MAX_BYTES = 8 << 20
_MAX_BATCH_BYTES = 256 << 20
#: smallest Fetch budget :meth:`FetchClient.read` sizes a request down to (see there)
MIN_FETCH_BYTES = 64 << 10
#: bytes per offset assumed before a partition's first response (a low guess: too low costs
#: one more request, too high decodes far more records than asked for)
_FIRST_BYTES_PER_OFFSET = 1.0
#: a read never waits for new data (its range is planned below the high watermark, or it
#: probes the end), and Kafka answers ``max_wait_ms=0`` at once with what it has
_MAX_WAIT_MS = 0


def _quiet() -> None:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class ClusterTopics:
    """The topics of a cluster as one Metadata response lists them."""

    #: topic -> its partitions, sorted; None when the broker answered with an error for the
    #: topic (e.g. a leader election under way): it exists, its partitions are not known now
    partitions: dict[str, tuple[int, ...] | None]
    #: the topics the broker flags internal (``__consumer_offsets``, ``__transaction_state``)
    internal: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PartitionFetch:
    """One partition of a Fetch response."""

    records: bytes
    high_watermark: int
    #: the end a read_committed reader may read to (-1 when the broker did not send it)
    last_stable_offset: int
    #: ``(producer_id, first_offset)`` of the aborted transactions the response overlaps
    #: (sent for isolation level 1 only)
    aborted: tuple[tuple[int, int], ...] = ()


class FetchClient:
    """One kafka-python protocol connection set for raw Fetch requests (close it, or use
    ``with``).  ``read_committed`` selects the isolation level (see the module doc)."""

    def __init__(self, config_or_bootstrap: str | Mapping[str, Any], *,
                 timeout_s: float = 30.0, read_committed: bool = False):
        from kafka.net.compat import KafkaNetClient

        _quiet()
        self.bootstrap, conf = protocol_client_config(config_or_bootstrap)
        self.timeout_s = timeout_s
        self.read_committed = read_committed
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
        """The client's metadata of every topic (:meth:`cluster_topics`): kafka-python's own
        update asks only for the topics it tracks (none here), which Apache Kafka answers
        with no topic at all, so a topic was never found there."""
        with contextlib.suppress(Exception):
            self.cluster_topics()

    def cluster_topics(self) -> ClusterTopics:
        """Every topic of the cluster and its partitions: one Metadata request for all
        topics, which never creates one (``allow_auto_topic_creation=False``).  The response
        also refreshes the client's metadata, so a topic just listed has a leader to fetch
        from without a second request (a streaming reader calls this at every trigger)."""
        import kafka.errors as Errors  # noqa: N812
        from kafka.protocol.metadata import MetadataRequest

        ms = int(self.timeout_s * 1000)
        req = MetadataRequest(topics=MetadataRequest.ALL_TOPICS,
                              allow_auto_topic_creation=False,
                              include_cluster_authorized_operations=False,
                              include_topic_authorized_operations=False)
        try:
            node = self.client.least_loaded_node(bootstrap_fallback=True)
            resp = self.client.send_and_receive(node, req, timeout_ms=ms)
        except Errors.KafkaTimeoutError:
            raise KafkaTimeoutError(f"no Metadata response from {self.bootstrap} within "
                                    f"{self.timeout_s:g}s") from None
        except Exception as exc:
            raise KafkaSourceError(f"Metadata request to {self.bootstrap} failed: "
                                   f"{type(exc).__name__}: {exc}") from None
        with contextlib.suppress(Exception):  # a cache only: fetches refresh it themselves
            self.client.cluster.update_metadata(resp)
        parts: dict[str, tuple[int, ...] | None] = {}
        internal = set()
        for t in resp.topics:
            if t.name is None:
                continue
            err = Errors.for_code(t.error_code)
            if err is Errors.UnknownTopicOrPartitionError:
                continue  # deleted while the broker answered
            parts[t.name] = None if t.error_code else tuple(sorted(
                int(p.partition_index) for p in t.partitions))
            if t.is_internal:
                internal.add(t.name)
        return ClusterTopics(parts, frozenset(internal))

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
        got = self.fetch_partition(topic, partition, offset, max_bytes)
        return (b"", None) if got is None else (got.records, got.high_watermark)

    def fetch_partition(self, topic: str, partition: int, offset: int, max_bytes: int
                        ) -> PartitionFetch | None:
        """One Fetch request at this client's isolation level: the partition's data, or None
        when the response has none."""
        import kafka.errors as Errors  # noqa: N812
        from kafka.protocol.consumer import FetchRequest

        node = self.leader(topic, partition)
        t_cls = FetchRequest.FetchTopic
        req = FetchRequest(
            replica_id=-1, max_wait_ms=_MAX_WAIT_MS, min_bytes=1, max_bytes=max_bytes,
            isolation_level=1 if self.read_committed else 0,
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
                aborted = tuple((int(a.producer_id), int(a.first_offset))
                                for a in (pd.aborted_transactions or ()))
                return PartitionFetch(bytes(pd.records or b""), int(pd.high_watermark),
                                      int(pd.last_stable_offset), aborted)
        return None  # no partition data

    def read(self, topic: str, partition: int, start: int, end: int, *,
             max_bytes: int = DEFAULT_MAX_BYTES, cancel: threading.Event | None = None
             ) -> Decoded:
        """Read ``[start, end)`` of one partition (see the module doc for the range rules).

        ``max_bytes`` caps each Fetch request.  A request asks for no more than the rest of the
        range needs, at the bytes per offset of this partition's previous response (plus a
        quarter, at least :data:`MIN_FETCH_BYTES`): the whole response is decoded, and
        ``max_bytes`` of well-compressed batches can hold far more records than a small range
        (8 MiB of lz4 batches of repetitive values decoded to ~580k records, ~150 MB, for a
        window of 20k).  Before a partition's first response, 1 byte per offset is assumed.

        ``cancel`` is checked before every Fetch request; once set,
        :class:`~kqlab.sources.kafka_errors.ReadCancelled` is raised with the records, batches
        and issues read so far.
        """
        builder = TableBuilder(topic, partition)
        rec_parts: list[pa.Table] = []
        batch_parts: list[pa.Table] = []
        issues: list[LogIssue] = []
        offset, floor = start, 0
        idle_since = time.monotonic()
        while offset < end:
            if cancel is not None and cancel.is_set():
                d = _decoded(rec_parts, batch_parts, issues)
                raise ReadCancelled(d.records, payload_bytes(d.records), d.batches, d.issues)
            size = max(self._request_size(topic, partition, end - offset, max_bytes), floor)
            got = self.fetch_partition(topic, partition, offset, size)
            buf = got.records if got is not None else b""
            hw = None if got is None else (got.last_stable_offset if self.read_committed
                                           and got.last_stable_offset >= 0
                                           else got.high_watermark)
            stop, kind, new_issues = builder.add_buffer(buf, 0, final=False)
            records, batches = builder.take()
            if got is not None and got.aborted and batches.num_rows:
                drop = aborted_batch_offsets(records, batches, got.aborted)
                if drop:
                    gone = pa.array(drop, pa.int64())
                    batches = batches.filter(pc.invert(pc.is_in(batches.column("batch_offset"),
                                                                value_set=gone)))
                    records = records.filter(pc.invert(pc.is_in(records.column("batch_offset"),
                                                                value_set=gone)))
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
        return min(max(want, MIN_FETCH_BYTES), max_bytes)


def aborted_batch_offsets(records: pa.Table, batches: pa.Table,
                          aborted: tuple[tuple[int, int], ...] | list[tuple[int, int]]
                          ) -> list[int]:
    """The ``batch_offset`` of every data batch of an aborted transaction in one Fetch
    response, by the Java consumer's rule (``CompletedFetch``): walking the batches in offset
    order, a producer id joins the aborted set once a batch reaches the ``first_offset`` of
    one of its aborted transactions and leaves it at its ABORT marker (a control record whose
    key's type is 0); a transactional data batch of a producer in the set is dropped.
    ``aborted`` is the response's ``(producer_id, first_offset)`` list.

    >>> import pyarrow as pa
    >>> from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA
    >>> rows = [(0, 0, False), (1, 0, True)]   # data batch at 0, its ABORT marker at 1
    >>> b = pa.table({"batch_offset": [0, 1], "last_offset_delta": [0, 0],
    ...               "producer_id": [7, 7], "is_transactional": [True, True],
    ...               "is_control": [False, True]})
    >>> r = pa.table({"batch_offset": [0, 1], "key": [b"k", bytes([0, 0, 0, 0])]})
    >>> aborted_batch_offsets(r, b, [(7, 0)])
    [0]
    """
    if not aborted or batches.num_rows == 0:
        return []
    ctrl = batches.filter(batches.column("is_control")).column("batch_offset")
    abort_markers: set[int] = set()
    if len(ctrl):
        marks = records.filter(pc.is_in(records.column("batch_offset"),
                                        value_set=ctrl.combine_chunks()))
        for bo, key in zip(marks.column("batch_offset").to_pylist(),
                           marks.column("key").to_pylist(), strict=True):
            if key is not None and len(key) >= 4 and int.from_bytes(key[2:4], "big") == 0:
                abort_markers.add(int(bo))
    pending = sorted((int(first), int(pid)) for pid, first in aborted)
    cols = [batches.column(c).to_pylist() for c in
            ("batch_offset", "last_offset_delta", "producer_id", "is_transactional",
             "is_control")]
    active: set[int] = set()
    drop: list[int] = []
    i = 0
    for bo, delta, pid, txn, control in sorted(zip(*cols, strict=True)):
        if pid is None or pid < 0:
            continue
        while i < len(pending) and pending[i][0] <= bo + delta:
            active.add(pending[i][1])
            i += 1
        if control:
            if bo in abort_markers:
                active.discard(pid)
        elif txn and pid in active:
            drop.append(int(bo))
    return drop


def _decoded(rec_parts: list[pa.Table], batch_parts: list[pa.Table], issues: list[LogIssue]
             ) -> Decoded:
    records = pa.concat_tables(rec_parts) if rec_parts else RECORDS_SCHEMA.empty_table()
    batches = pa.concat_tables(batch_parts) if batch_parts else BATCHES_SCHEMA.empty_table()
    return Decoded(records, batches, issues)


def fetch_exact(bootstrap: str | Mapping[str, Any], topic: str, partition: int,
                start_offset: int, end_offset: int, *, max_bytes: int = DEFAULT_MAX_BYTES,
                timeout_s: float = 30.0) -> Decoded:
    """Records and exact batches of ``topic[partition]`` for offsets ``[start, end)``.

    ``bootstrap`` is ``"host:port"`` or a librdkafka-style config dict (``bootstrap.servers``
    plus security settings, see :data:`~kqlab.sources.kafka_client.PROTOCOL_CLIENT_SETTINGS`).
    ``max_bytes`` is the per-request budget; ``timeout_s`` bounds connecting, each request and
    the time without progress.  Raises
    :class:`~kqlab.sources.kafka_errors.KafkaSourceError` subclasses.
    """
    if end_offset < start_offset:
        raise KafkaSourceError(f"end_offset {end_offset} < start_offset {start_offset}")
    with FetchClient(bootstrap, timeout_s=timeout_s) as client:
        client.leader(topic, partition)  # unknown topic/partition errors, even for an empty range
        return client.read(topic, partition, start_offset, end_offset, max_bytes=max_bytes)


def fetch_plan(config: str | Mapping[str, Any], topic: str, plan: Mapping[int, tuple[int, int]],
               *, timeout_s: float = 30.0, max_bytes: int = DEFAULT_MAX_BYTES,
               cancel: threading.Event | None = None, read_committed: bool = True
               ) -> tuple[pa.Table, pa.Table, int, list[LogIssue]]:
    """Exact read of ``{partition: (start, end)}``: ``(records, batches, value_bytes, issues)``,
    committed data only unless ``read_committed=False`` (see the module doc).

    When ``cancel`` gets set, raises :class:`~kqlab.sources.kafka_errors.ReadCancelled` with
    what was read (:func:`~kqlab.sources.kafka.sample` turns it into ``SampleCancelled``).
    """
    recs: list[pa.Table] = []
    bats: list[pa.Table] = []
    issues: list[LogIssue] = []
    with FetchClient(config, timeout_s=timeout_s, read_committed=read_committed) as client:
        for p in sorted(plan):
            s, e = plan[p]
            if e <= s:
                continue
            try:
                d = client.read(topic, p, s, e, max_bytes=max_bytes, cancel=cancel)
            except ReadCancelled as part:
                recs.append(part.records)
                bats.append(part.batches if part.batches is not None
                            else BATCHES_SCHEMA.empty_table())
                r = pa.concat_tables(recs)
                raise ReadCancelled(r, payload_bytes(r), pa.concat_tables(bats),
                                    [*issues, *part.issues]) from None
            recs.append(d.records)
            bats.append(d.batches)
            issues.extend(d.issues)
    records = pa.concat_tables(recs) if recs else RECORDS_SCHEMA.empty_table()
    batches = pa.concat_tables(bats) if bats else BATCHES_SCHEMA.empty_table()
    return records, batches, payload_bytes(records), issues
