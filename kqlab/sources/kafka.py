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
to join or commit, see :data:`GROUP_PREFIX`).

The ranges are resolved once, at the start: earliest and latest offsets per partition, where
the latest comes from a Fetch response (see :func:`_true_high_watermarks`; ListOffsets(latest)
is wrong on some brokers, e.g. Tansu, for multi-record batches).  Records appended afterwards
are not read.

**Framing.**  The consumer hands over records, not batches, so the batch framing is lost.  The
result says so: ``framing == "reconstructed:single"`` and every record is treated as its own
batch (``batch_offset = offset``, ``batch_index = 0``).

**Configs** pass through to librdkafka unchanged (SASL, SSL, ...).  They are never printed: the
result keeps only :func:`redact` of them, and error messages name only ``bootstrap.servers``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.errors import KqlabError
from kqlab.records import HEADER_TYPE, RECORDS_SCHEMA

#: every sampling consumer's ``group.id`` starts with this, followed by 16 random hex digits
GROUP_PREFIX = "kqlab-sample-"
#: the framing label of sampled records (see the module docstring)
FRAMING = "reconstructed:single"
REDACTED = "[redacted]"
_log = logging.getLogger(__name__)

_SECRET_KEY = re.compile(r"password|secret|token|jaas|credential|ssl\.key|keystore|"
                         r"private|sasl\.oauthbearer\.config|\.pem$|api\.key", re.IGNORECASE)
_CONSUME_BATCH = 10_000
_PROGRESS_EVERY_S = 0.5
#: accepted values of ``sample(time_lookup=...)``
TIME_LOOKUPS = ("auto", "broker", "scan")
#: offsets read per step while scanning a partition for timestamps
_SCAN_CHUNK = 50_000


class KafkaSourceError(KqlabError):
    """Sampling a live topic failed; the message names the broker and what to do."""


class BrokerUnreachableError(KafkaSourceError, ConnectionError):
    """No broker in ``bootstrap.servers`` answered."""


class UnknownTopicError(KafkaSourceError, LookupError):
    """The topic (or a requested partition) does not exist."""


class NotAuthorizedError(KafkaSourceError, PermissionError):
    """The broker refused access to the topic or cluster."""


class EmptyRangeError(KafkaSourceError, ValueError):
    """The requested range holds no records (pass ``allow_empty=True`` for an empty table)."""


class KafkaTimeoutError(KafkaSourceError, TimeoutError):
    """The broker stopped delivering before the range was read."""


class SampleCancelled(KafkaSourceError):
    """Sampling was cancelled (``cancel`` event set).

    ``result`` is the :class:`SampleResult` of what was read so far (``None`` when nothing
    was planned yet); :func:`kqlab.sources.fetch.sample_to_snapshot` sets ``snapshot`` to the
    snapshot holding the parts already written (its metadata says ``complete: false``).
    """

    def __init__(self, message: str, *, result: SampleResult | None = None,
                 snapshot: Any = None):
        super().__init__(message)
        self.result = result
        self.snapshot = snapshot

    @property
    def records(self) -> pa.Table | None:
        """The records read before the cancel (``result.records``)."""
        return None if self.result is None else self.result.records


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a librdkafka config with secret values replaced.

    >>> redact({"bootstrap.servers": "b:9092", "sasl.password": "hunter2",
    ...         "ssl.key.pem": "-----BEGIN"})
    {'bootstrap.servers': 'b:9092', 'sasl.password': '[redacted]', 'ssl.key.pem': '[redacted]'}
    """
    return {k: (REDACTED if _SECRET_KEY.search(str(k)) and v is not None else v)
            for k, v in config.items()}


@dataclass(frozen=True)
class PartitionRange:
    """What was asked of one partition and what came back (``end`` is exclusive)."""

    partition: int
    low: int       # earliest offset on the broker
    high: int      # high watermark when sampling started
    start: int     # first offset read
    end: int       # one past the last offset read
    records: int   # records returned (after the random filter)


@dataclass(frozen=True, repr=False)
class SampleResult:
    """The sampled records plus how they were obtained."""

    records: pa.Table
    topic: str
    bootstrap: str
    ranges: list[PartitionRange]
    framing: str = FRAMING
    group_id: str = ""
    bytes: int = 0
    elapsed_s: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)  # redacted
    #: with ``exact_framing=True``: the real batches (``BATCHES_SCHEMA``), else ``None``
    batches: pa.Table | None = None
    #: with ``exact_framing=True``: what the batch parser reported (``LogIssue`` objects)
    issues: list = field(default_factory=list)

    @property
    def counts(self) -> dict[int, int]:
        """Records per partition."""
        return {r.partition: r.records for r in self.ranges}

    def __repr__(self) -> str:
        return (f"SampleResult(topic={self.topic!r}, bootstrap={self.bootstrap!r}, "
                f"records={self.records.num_rows}, partitions={len(self.ranges)}, "
                f"framing={self.framing!r})")


Progress = Callable[[int, int, int, float], None]


def client_config(config_or_bootstrap: str | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """A librdkafka config dict (from ``"host:port"`` or a dict) and its bootstrap address."""
    config = ({"bootstrap.servers": config_or_bootstrap}
              if isinstance(config_or_bootstrap, str) else dict(config_or_bootstrap))
    bootstrap = str(config.get("bootstrap.servers") or config.get("metadata.broker.list") or "")
    if not bootstrap:
        raise KafkaSourceError("no bootstrap.servers given: pass 'host:port' or a config dict "
                               "with 'bootstrap.servers'")
    return config, bootstrap


def _check_request(config_or_bootstrap: str | Mapping[str, Any], *, latest: int | None,
                   start_offset: Any, end_offset: Any, start_time_ms: int | None,
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
    :func:`resolve_time_offsets` for ``time_lookup``); the offsets are resolved per partition
    (start: first offset with timestamp >= ``start_time_ms``; end: first offset with timestamp
    >= ``end_time_ms``), and the records read are then also filtered to
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
    issues: list = []
    group_id = GROUP_PREFIX + secrets.token_hex(8)
    conf = _consumer_conf(config, group_id, errors)
    consumer = Consumer(conf)
    cancelled: _Cancelled | None = None
    try:
        parts = _partitions(consumer, topic, partitions, bootstrap, timeout_s, errors)
        lows, highs = _watermarks(consumer, topic, parts, bootstrap, timeout_s)
        highs = _true_high_watermarks(consumer, topic, lows, highs, bootstrap, timeout_s)
        if timed:
            start_offset, end_offset = _time_offsets(
                consumer, topic, parts, lows, highs, start_time_ms, end_time_ms, time_lookup,
                bootstrap, timeout_s, cancel)
        plan = _plan(parts, lows, highs, start_offset, end_offset, latest,
                     max_records if random_fraction is None and not timed else None)
        total = sum(e - s for s, e in plan.values())
        if cancel is not None and cancel.is_set():
            raise _Cancelled(RECORDS_SCHEMA.empty_table(), 0)
        if total == 0:
            if not allow_empty:
                raise EmptyRangeError(_empty_message(topic, bootstrap, lows, highs, plan))
            table = RECORDS_SCHEMA.empty_table()
            nbytes = 0
        elif exact_framing:
            from kqlab.sources.fetch import fetch_plan

            table, batches, nbytes, issues = fetch_plan(config, topic, plan, timeout_s=timeout_s,
                                                        cancel=cancel)
            if progress is not None:
                progress(table.num_rows, nbytes, len(plan),
                         table.num_rows / max(time.monotonic() - t0, 1e-9))
        else:
            table, nbytes = _read(consumer, topic, plan, bootstrap, timeout_s, progress, t0,
                                  cancel)
    except _Cancelled as exc:
        cancelled = exc
        table, nbytes = exc.table, exc.nbytes
        batches = exc.batches
    finally:
        with contextlib.suppress(Exception):
            consumer.close()  # never commits: auto commit is off and nothing is stored

    if timed:
        ts = table.column("timestamp")
        mask = None
        if start_time_ms is not None:
            mask = pc.greater_equal(ts, start_time_ms)
        if end_time_ms is not None:
            m2 = pc.less(ts, end_time_ms)
            mask = m2 if mask is None else pc.and_(mask, m2)
        if mask is not None and table.num_rows:
            table = table.filter(mask)
        if max_records is not None and random_fraction is None and table.num_rows > max_records:
            table = _cap_table(table, parts, max_records)
    if random_fraction is not None:
        table = table.filter(pa.array(_keep(table, random_fraction, seed)))
        if max_records is not None and table.num_rows > max_records:
            table = _cap_table(table, parts, max_records)
    if batches is not None and (random_fraction is not None or timed):
        from kqlab.sources.fetch import filter_batches_to_records

        batches = filter_batches_to_records(batches, table)
    if exact_framing and batches is None:
        from kqlab.records import BATCHES_SCHEMA

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


def _consumer_conf(config: Mapping[str, Any], group_id: str, errors: list[str]
                   ) -> dict[str, Any]:
    conf = dict(config)
    # a bounded read: don't let an empty fetch (the end of a partition) park for 500 ms
    conf.setdefault("fetch.wait.max.ms", 50)
    # once the prefetch queue is over its bounds librdkafka waits this long before the next
    # Fetch (default 1000 ms): a sample drains the queue fast, so look again soon
    conf.setdefault("fetch.queue.backoff.ms", 20)
    conf.update({
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "allow.auto.create.topics": False,
        "error_cb": lambda err: errors.append(str(err)) if len(errors) < 20 else None,
        "logger": _quiet_logger(),
    })
    return conf


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
    consumer = Consumer(_consumer_conf(config, GROUP_PREFIX + secrets.token_hex(8), errors))
    try:
        parts = _partitions(consumer, topic, partitions, bootstrap, timeout_s, errors)
        lows, highs = _watermarks(consumer, topic, parts, bootstrap, timeout_s)
        highs = _true_high_watermarks(consumer, topic, lows, highs, bootstrap, timeout_s)
        if timed:
            try:
                start_offset, end_offset = _time_offsets(
                    consumer, topic, parts, lows, highs, start_time_ms, end_time_ms,
                    time_lookup, bootstrap, timeout_s, cancel)
            except _Cancelled:
                raise SampleCancelled(f"resolving the time window of {topic!r} on {bootstrap} "
                                      "was cancelled") from None
        plan = _plan(parts, lows, highs, start_offset, end_offset, latest, max_records)
    finally:
        with contextlib.suppress(Exception):
            consumer.close()
    if not allow_empty and sum(e - s for s, e in plan.values()) == 0:
        raise EmptyRangeError(_empty_message(topic, bootstrap, lows, highs, plan))
    return [PartitionRange(p, lows[p], highs[p], plan[p][0], plan[p][1], plan[p][1] - plan[p][0])
            for p in parts]


# -- metadata and offsets -------------------------------------------------------------------
def _hint(bootstrap: str, errors: list[str]) -> str:
    last = f" Last client error: {errors[-1]}." if errors else ""
    return (f"could not reach the Kafka broker at {bootstrap}.{last} Check that the address and "
            "port are right, that the broker is running and reachable from here, and that "
            "security.protocol / SASL / SSL settings match the listener.")


def _partitions(consumer: Any, topic: str, wanted: list[int] | None, bootstrap: str,
                timeout_s: float, errors: list[str]) -> list[int]:
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


def _watermarks(consumer: Any, topic: str, parts: list[int], bootstrap: str,
                timeout_s: float) -> tuple[dict[int, int], dict[int, int]]:
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


def _true_high_watermarks(consumer: Any, topic: str, lows: dict[int, int],
                          highs: dict[int, int], bootstrap: str, timeout_s: float
                          ) -> dict[int, int]:
    """The high watermarks as a Fetch response reports them.

    ListOffsets(latest) can be low (Tansu answers "base offset of the last batch + 1"), so each
    non-empty partition is fetched from ``high - 1`` to its end: one batch per partition, and
    the Fetch response's high watermark (or the last offset seen + 1) is the true end.
    """
    from confluent_kafka import KafkaError, TopicPartition

    probe = {p: max(highs[p] - 1, lows[p]) for p in highs if highs[p] > lows[p]}
    if not probe:
        return dict(highs)
    true = dict(highs)
    consumer.assign([TopicPartition(topic, p, o) for p, o in probe.items()])
    pending = set(probe)
    deadline = time.monotonic() + timeout_s
    try:
        while pending:
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"no end of partitions {sorted(pending)} of {topic!r} "
                                        f"from {bootstrap} within {timeout_s:g}s")
            for msg in consumer.consume(1000, 0.05):
                err = msg.error()
                p = msg.partition()
                if err is None:
                    true[p] = max(true[p], msg.offset() + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    true[p] = max(true[p], msg.offset())
                    pending.discard(p)
                else:
                    _raise_consume_error(err, topic, bootstrap)
        for p in probe:
            _, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True)
            if hi is not None and hi >= 0:
                true[p] = max(true[p], hi)
    finally:
        consumer.unassign()
    return true


def _plan(parts: list[int], lows: dict[int, int], highs: dict[int, int],
          start: int | Mapping[int, int] | None, end: int | Mapping[int, int] | None,
          latest: int | None, cap: int | None) -> dict[int, tuple[int, int]]:
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
        shares = _split(cap, {p: e - s for p, (s, e) in plan.items()})
        plan = {p: (s, s + shares[p]) for p, (s, e) in plan.items()}
    return plan


def _split(cap: int, avail: dict[int, int]) -> dict[int, int]:
    """Split ``cap`` over partitions as evenly as their sizes allow (deterministic)."""
    share = dict.fromkeys(avail, 0)
    left = cap
    open_parts = sorted(p for p, n in avail.items() if n > 0)
    while left > 0 and open_parts:
        each, extra = divmod(left, len(open_parts))
        for i, p in enumerate(open_parts):
            share[p] += min(each + (1 if i < extra else 0), avail[p] - share[p])
        left = cap - sum(share.values())
        open_parts = [p for p in open_parts if share[p] < avail[p]]
    return share


def _empty_message(topic: str, bootstrap: str, lows: dict[int, int], highs: dict[int, int],
                   plan: dict[int, tuple[int, int]]) -> str:
    have = ", ".join(f"{p}: [{lows[p]}, {highs[p]})" for p in sorted(plan))
    asked = ", ".join(f"{p}: [{s}, {e})" for p, (s, e) in sorted(plan.items()))
    return (f"the requested range of {topic!r} on {bootstrap} holds no records (partitions "
            f"hold {have}; the request resolved to {asked}). Widen the range or pass "
            "allow_empty=True for an empty table.")


# -- timestamp windows ----------------------------------------------------------------------
def _time_offsets(consumer: Any, topic: str, parts: list[int], lows: dict[int, int],
                  highs: dict[int, int], start_ms: int | None, end_ms: int | None, how: str,
                  bootstrap: str, timeout_s: float, cancel: threading.Event | None
                  ) -> tuple[dict[int, int] | None, dict[int, int] | None]:
    """``(start_offsets, end_offsets)`` of a timestamp window, per partition.

    For a time ``t`` the offset is the first one whose record has ``timestamp >= t`` (the high
    watermark when there is none), i.e. what ListOffsets by timestamp answers:

    * ``"broker"``: trust ``offsets_for_times`` (fast; wrong on brokers that answer it badly —
      Tansu always answers 0);
    * ``"scan"``: read ``[low, high)`` from the beginning in windows of ``_SCAN_CHUNK`` offsets
      and stop at the first record with ``timestamp >= t`` (bounded by the high watermark taken
      at the start; memory is one window; costs a read of the partition up to the answer);
    * ``"auto"`` (default): ask the broker, then verify each answer ``o`` by reading the
      records at ``o - 1`` and ``o`` (``ts[o] >= t`` unless ``o`` is the end, ``ts[o-1] < t``
      unless ``o`` is the start); a partition whose answer fails the check is scanned.
    """
    resolved: dict[str, dict[int, int]] = {"start": {}, "end": {}}
    need: dict[int, dict[str, int]] = {}
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
            if how != "scan":
                o = answers[p]
                if how == "broker" or _time_offset_ok(consumer, topic, p, lo, hi, o, t,
                                                      bootstrap, timeout_s, cancel):
                    resolved[key][p] = o
                    continue
                _log.debug("offsets_for_times(%s[%d], %d) = %d is inconsistent; scanning",
                           topic, p, t, o)
            need.setdefault(p, {})[key] = int(t)
    for p, keys in need.items():
        for key, o in _scan_time_offsets(consumer, topic, p, lows[p], highs[p], keys,
                                         bootstrap, timeout_s, cancel).items():
            resolved[key][p] = o
    return ((resolved["start"] if start_ms is not None else None),
            (resolved["end"] if end_ms is not None else None))


def _broker_time_offsets(consumer: Any, topic: str, parts: list[int], lows: dict[int, int],
                         highs: dict[int, int], t: int, bootstrap: str, timeout_s: float
                         ) -> dict[int, int]:
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


def _timestamps(consumer: Any, topic: str, p: int, s: int, e: int, bootstrap: str,
                timeout_s: float, cancel: threading.Event | None) -> tuple[np.ndarray, np.ndarray]:
    table, _ = _read(consumer, topic, {p: (s, e)}, bootstrap, timeout_s, None,
                     time.monotonic(), cancel)
    return table.column("offset").to_numpy(), table.column("timestamp").to_numpy()


def _time_offset_ok(consumer: Any, topic: str, p: int, lo: int, hi: int, o: int, t: int,
                    bootstrap: str, timeout_s: float, cancel: threading.Event | None) -> bool:
    offs, ts = _timestamps(consumer, topic, p, max(o - 1, lo), min(o + 1, hi), bootstrap,
                           timeout_s, cancel)
    got = dict(zip(offs.tolist(), ts.tolist(), strict=True))
    if o < hi and not (o in got and got[o] >= t):
        return False
    return o <= lo or (o - 1 in got and got[o - 1] < t)


def _scan_time_offsets(consumer: Any, topic: str, p: int, lo: int, hi: int,
                       keys: dict[str, int], bootstrap: str, timeout_s: float,
                       cancel: threading.Event | None) -> dict[str, int]:
    found: dict[str, int] = {}
    for s in range(lo, hi, _SCAN_CHUNK):
        offs, ts = _timestamps(consumer, topic, p, s, min(s + _SCAN_CHUNK, hi), bootstrap,
                               timeout_s, cancel)
        for key, t in keys.items():
            if key not in found:
                idx = np.flatnonzero(ts >= t)
                if len(idx):
                    found[key] = int(offs[idx[0]])
        if len(found) == len(keys):
            break
    return {key: found.get(key, hi) for key in keys}


# -- reading --------------------------------------------------------------------------------
def _raise_consume_error(err: Any, topic: str, bootstrap: str) -> None:
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
    # retriable errors: librdkafka retries; the idle timeout catches a broker that never recovers


class _Cancelled(Exception):
    """Internal: the read was cancelled; carries what was read so far."""

    def __init__(self, table: pa.Table, nbytes: int, batches: pa.Table | None = None):
        super().__init__("cancelled")
        self.table, self.nbytes, self.batches = table, nbytes, batches


def _batch_table(topic: str, msgs: list[Any], todo: dict[int, tuple[int, int]],
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


def _read(consumer: Any, topic: str, plan: dict[int, tuple[int, int]], bootstrap: str,
          timeout_s: float, progress: Progress | None, t0: float,
          cancel: threading.Event | None = None,
          on_chunk: Callable[[pa.Table], None] | None = None, chunk_rows: int = 0
          ) -> tuple[pa.Table, int]:
    """Read ``plan`` with the consumer: ``(records sorted by partition/offset, payload bytes)``.

    With ``on_chunk``, the records are handed over in pieces of about ``chunk_rows`` rows (each
    sorted; whole poll batches, so a piece can exceed ``chunk_rows`` by one batch) and the
    returned table is empty: memory stays at one piece plus librdkafka's fetch queue.  On
    cancel, ``_Cancelled`` carries the records not yet handed over.
    """
    from confluent_kafka import KafkaError, TopicPartition

    from kqlab.sources.fetch import payload_bytes

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
    consumer.resume(assignment)  # a previous _read on this consumer may have paused them
    last_msg = last_progress = time.monotonic()
    eof = KafkaError._PARTITION_EOF
    try:
        while todo:
            if cancel is not None and cancel.is_set():
                raise _Cancelled(result(), nbytes)
            msgs = consumer.consume(_CONSUME_BATCH, 0.05)
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
                                _raise_consume_error(err, topic, bootstrap)
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
            if progress is not None and (now - last_progress >= _PROGRESS_EVERY_S or not todo):
                last_progress = now
                progress(nrows, nbytes, done, nrows / max(now - t0, 1e-9))
    finally:
        consumer.unassign()
    if on_chunk is not None:
        if parts_read:
            on_chunk(result())
        return RECORDS_SCHEMA.empty_table(), nbytes
    return result(), nbytes


# -- seeded random sampling -----------------------------------------------------------------


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised (uint64 wraps silently)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _keep(table: pa.Table, fraction: float, seed: int) -> np.ndarray:
    """Deterministic per-record keep mask: hash(seed, partition, offset) < fraction."""
    part = table.column("partition").to_numpy().astype(np.uint64)
    off = table.column("offset").to_numpy().astype(np.uint64)
    with np.errstate(over="ignore"):
        s = _mix(np.full(len(off), np.uint64(seed & 0xFFFFFFFFFFFFFFFF)))
        h = _mix(s ^ _mix(part + np.uint64(0x9E3779B97F4A7C15)) ^ off)
    u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return u < fraction


def _cap_table(table: pa.Table, parts: list[int], cap: int) -> pa.Table:
    pcol = table.column("partition").to_numpy()
    avail = {p: int((pcol == p).sum()) for p in parts}
    shares = _split(cap, avail)
    rank = np.zeros(len(pcol), dtype=np.int64)
    for p in parts:  # rows are sorted by (partition, offset): rank within the partition
        idx = np.flatnonzero(pcol == p)
        rank[idx] = np.arange(len(idx))
    limit = np.array([shares.get(int(p), 0) for p in pcol], dtype=np.int64)
    return table.filter(pa.array(rank < limit))


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger("kqlab.sources.kafka.librdkafka")
    if not logger.handlers:
        logger.propagate = False
        logger.addHandler(logging.NullHandler())
    return logger
