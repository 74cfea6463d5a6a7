"""Kafka on Spark through PySpark's Python Data Source API: ``format("kqlab-kafka")``.

Spark's own Kafka connector is a Maven jar that many clusters (and this machine) do not have,
and it hands over records without their batches.  This source reads Kafka with kqlab's own
exact-framing fetch (:class:`kqlab.sources.fetch.FetchClient`: raw Fetch requests parsed by
kqlab's codec), so a Spark job sees exactly what :func:`kqlab.sources.kafka.sample` with
``exact_framing=True`` sees, and the broker checks run on Spark as they run locally::

    from kqlab.spark.kafka_source import register
    register(spark)
    df = (spark.read.format("kqlab-kafka")
          .option("kafka.bootstrap.servers", "broker:9092")
          .option("subscribe", "orders")
          .load())                                # kqlab's records table (RECORDS_SCHEMA)
    batches = spark.read.format("kqlab-kafka").option("rows", "batches")...   # BATCHES_SCHEMA
    stream = spark.readStream.format("kqlab-kafka")...                        # the same rows

Options (names as Spark's Kafka connector where one exists):

* ``kafka.<librdkafka property>``: the client config, ``kafka.bootstrap.servers`` required
  (security settings as :data:`kqlab.sources.kafka_client.PROTOCOL_CLIENT_SETTINGS` maps them);
* exactly one of ``subscribe`` (``"a,b"``), ``subscribePattern`` (a regular expression,
  ``"orders-.*"``: searched in each topic name as Spark's connector does — ``orders``
  selects ``orders-eu`` too, ``^orders$`` the one topic — and never a topic the broker flags
  internal; see :func:`matching_topics`) or ``assign`` (JSON ``{"a": [0, 1]}``); a batch
  read resolves the pattern once, when it is planned;
* ``startingOffsets`` / ``endingOffsets``: ``earliest`` | ``latest`` | JSON
  ``{"a": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest; partitions left out take the default:
  earliest to start, latest to end); ``startingTimestamp`` / ``endingTimestamp`` (ms since the
  epoch) instead, resolved as the sampler resolves a time window (``timeLookup``: ``auto``,
  ``broker`` or ``scan``; records outside the window are then dropped, as the sampler does);
* ``rows``: ``records`` (default), ``batches`` or ``raw`` (see below);
* ``maxOffsetsPerSplit`` (default 500000) and ``minPartitions``: batch reads split a
  partition's range into input partitions of at most that many offsets (and into at least
  ``minPartitions`` input partitions overall); ``raw`` rows and time windows never split;
* ``maxOffsetsPerTrigger`` (streaming): most offsets per micro-batch, shared over the
  partitions in proportion to what each has waiting;
* ``fetchTimeoutMs`` (default 30000) and ``maxBytesPerFetch`` (default 8 MiB);
* ``failOnDataLoss`` (streaming, default ``true``): a topic-partition the stream was reading
  gone from the cluster (its topic deleted) fails the query with
  :class:`PartitionsGoneError` naming it; ``false`` drops it and reads on.

**Ranges and batches.**  A Fetch returns whole batches, so a range ``[start, end)`` can begin
and end inside a batch.  ``records`` rows are the records with ``start <= offset < end`` (the
sampler's rule), so the input partitions of a read, or the micro-batches of a stream, hold
each record once.  ``batches`` and ``raw`` rows hold each batch once: the range that holds its
*last* offset owns it (it is complete there), and the last range of a bounded read
(``endingOffsets``) also owns the batches that run past its end — so a bounded read's batch
rows are exactly the sampler's (every batch overlapping the range).  ``raw`` rows carry each
owned batch's bytes as fetched (``data``), plus one marker row per range (``data`` null) so
that a task sees its range even when it owns no batch: the streaming replay
(:mod:`kqlab.spark.streaming`) decodes them with kqlab's codec and judges whole batches.

**Streaming offsets** are JSON per topic and partition, ``{"orders": {"0": 1200, "1": 990}}``
(the next offset to read), checkpointed by Spark.  The reader commits nothing to the cluster
and joins no group: Fetch requests with ``replica_id = -1`` are read-only.  With
``subscribe`` and ``subscribePattern`` the topic-partitions follow the cluster, as with
Spark's connector: at every trigger (``latestOffset``) one Metadata request lists the
cluster's topics, and a partition added to a subscribed topic, or a topic that comes to
match the pattern, joins the stream at its *earliest* offset, whatever ``startingOffsets``
said (:meth:`KafkaStreamReader.current_partitions`); a micro-batch reads a partition its end
offsets have and its start offsets lack from there.  ``assign`` stays fixed, and so does the
set of partitions of a bounded stream (``endingOffsets``, ``Trigger.AvailableNow``: those
of its bound).  A partition that disappears is ``failOnDataLoss``'s (above); only a
partition gone from the cluster's metadata counts — offsets lost to retention fail the
Fetch whatever ``failOnDataLoss`` says.  A stream started at ``startingTimestamp`` keeps
dropping the records older than it in every partition, discovered ones too (Spark's
connector would read a discovered partition whole).  The high watermark comes from a Fetch response,
never from ListOffsets (wrong on some brokers for multi-record batches, e.g. Tansu).

The batch column ``position`` is the batch's byte offset in the Fetch response that carried
it, so it depends on how a range was cut into requests; every other column is the sampler's.
``crc`` is a ``long`` in Spark (no unsigned ints there): :func:`arrow_to_contract` casts
tables collected from Spark back to kqlab's contracts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from kqlab.errors import KqlabError
from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.sources.fetch import ClusterTopics

__all__ = [
    "FORMAT",
    "RAW_SCHEMA",
    "ROWS",
    "KafkaDataSource",
    "KafkaSourceOptionError",
    "PartitionsGoneError",
    "RangePartition",
    "SourceOptions",
    "arrow_to_contract",
    "matching_topics",
    "register",
    "spark_schema",
]

_log = logging.getLogger("kqlab.spark.kafka_source")

#: the format name: ``spark.read.format(FORMAT)``
FORMAT = "kqlab-kafka"
#: what one row is: a record, a batch, or a batch's bytes (see the module doc)
ROWS = ("records", "batches", "raw")
DEFAULT_SPLIT = 500_000
DEFAULT_MAX_BYTES = 8 << 20
#: the Spark-side batches schema: ``crc`` (uint32 in Arrow) travels as int64
SPARK_BATCHES_SCHEMA = BATCHES_SCHEMA.set(BATCHES_SCHEMA.get_field_index("crc"),
                                          pa.field("crc", pa.int64()))
#: ``rows=raw``: one row per owned batch (its bytes as fetched) and one marker per range
RAW_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("range_start", pa.int64()),
    ("range_end", pa.int64()),
    ("batch_offset", pa.int64()),   # null on the range's marker row
    ("last_offset", pa.int64()),
    ("data", pa.binary()),          # null on the marker row
])
#: a bounded request for "the end of the partition" beyond any real offset
_LATEST = 1 << 62


class KafkaSourceOptionError(KqlabError, ValueError):
    """An option of ``format("kqlab-kafka")`` is missing, unknown or malformed."""


class PartitionsGoneError(KqlabError):
    """Topic-partitions a stream was reading are no longer on the cluster (their topic was
    deleted): what they held past the stream's offsets is lost to it.  Raised with
    ``failOnDataLoss=true`` (the default), as Spark's connector fails the query."""


def _arrow_schema(rows: str) -> pa.Schema:
    return {"records": RECORDS_SCHEMA, "batches": SPARK_BATCHES_SCHEMA, "raw": RAW_SCHEMA}[rows]


def spark_schema(rows: str = "records") -> Any:
    """The Spark ``StructType`` of ``rows`` (``records``, ``batches`` or ``raw``)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(_arrow_schema(rows))


def arrow_to_contract(table: pa.Table, rows: str = "records") -> pa.Table:
    """A table collected from a ``kqlab-kafka`` DataFrame (``df.toArrow()``) in kqlab's own
    contract: ``RECORDS_SCHEMA``, ``BATCHES_SCHEMA`` (``crc`` back to uint32) or
    :data:`RAW_SCHEMA`."""
    target = {"records": RECORDS_SCHEMA, "batches": BATCHES_SCHEMA, "raw": RAW_SCHEMA}[rows]
    return table.select(target.names).cast(target)


# -- options --------------------------------------------------------------------------------
_KNOWN = {"subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
          "startingtimestamp", "endingtimestamp", "timelookup", "rows", "maxoffsetspersplit",
          "minpartitions", "maxoffsetspertrigger", "fetchtimeoutms", "maxbytesperfetch",
          "failondataloss", "path"}
#: how the topic-partitions are chosen (Spark's names): only ``assign`` never changes them
STRATEGIES = ("assign", "subscribe", "subscribePattern")


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options (plain data: pickled into every task)."""

    config: dict[str, str]
    #: topic -> its partitions (None: every partition the topic has); with
    #: ``subscribePattern`` empty until :func:`resolve_topics` matches the cluster's topics
    topics: dict[str, tuple[int, ...] | None]
    #: ``assign``, ``subscribe`` or ``subscribePattern`` (:data:`STRATEGIES`)
    strategy: str = "subscribe"
    #: ``subscribePattern``: the regular expression topic names are searched with
    pattern: str | None = None
    #: a topic-partition the stream read gone from the cluster: fail (True) or drop it
    fail_on_data_loss: bool = True
    #: "earliest" | "latest" | {topic: {partition: offset (-2 earliest, -1 latest)}}
    starting: str | dict[str, dict[int, int]] = "earliest"
    ending: str | dict[str, dict[int, int]] | None = None
    starting_time_ms: int | None = None
    ending_time_ms: int | None = None
    time_lookup: str = "auto"
    rows: str = "records"
    max_offsets_per_split: int = DEFAULT_SPLIT
    min_partitions: int = 1
    max_offsets_per_trigger: int | None = None
    timeout_s: float = 30.0
    max_bytes: int = DEFAULT_MAX_BYTES
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def timed(self) -> bool:
        return self.starting_time_ms is not None or self.ending_time_ms is not None

    @property
    def bootstrap(self) -> str:
        return self.config["bootstrap.servers"]

    @property
    def discovers(self) -> bool:
        """Whether a stream looks for topic-partitions new to it at every trigger (Spark's
        ``subscribe`` and ``subscribePattern``; ``assign`` is fixed)."""
        return self.strategy != "assign"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's option map (keys are case-insensitive); raise
        :class:`KafkaSourceOptionError` naming the option and what it takes."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        config = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
        if not config.get("bootstrap.servers"):
            raise KafkaSourceOptionError(
                "option kafka.bootstrap.servers is required (host:port[,host:port]); other "
                "client settings go in kafka.<librdkafka name>, e.g. kafka.security.protocol")
        unknown = sorted(k for k in opts if not k.startswith("kafka.") and k not in _KNOWN)
        if unknown:
            raise KafkaSourceOptionError(
                f"unknown option(s) {', '.join(unknown)} for format {FORMAT!r}; known: "
                "kafka.<librdkafka name>, subscribe, subscribePattern, assign, "
                "startingOffsets, endingOffsets, startingTimestamp, endingTimestamp, "
                "timeLookup, rows, maxOffsetsPerSplit, minPartitions, maxOffsetsPerTrigger, "
                "fetchTimeoutMs, maxBytesPerFetch, failOnDataLoss")
        topics: dict[str, tuple[int, ...] | None] = {}
        given = [s for s in STRATEGIES if s.lower() in opts]
        if len(given) != 1:
            raise KafkaSourceOptionError(
                "give exactly one of subscribe (topics, comma separated), subscribePattern "
                "(a regular expression of topic names) or assign (JSON {\"topic\": [0, 1]}); "
                + (f"got {' and '.join(given)}" if given else "got none"))
        strategy, pattern = given[0], None
        if strategy == "subscribe":
            names = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
            if not names:
                raise KafkaSourceOptionError("subscribe names no topic")
            topics = dict.fromkeys(names)
        elif strategy == "subscribePattern":
            pattern = opts["subscribepattern"]
            if not pattern.strip():
                raise KafkaSourceOptionError("subscribePattern is empty: give a regular "
                                             "expression of topic names, e.g. orders-.*")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise KafkaSourceOptionError(f"subscribePattern {pattern!r} is not a valid "
                                             f"regular expression: {exc}") from None
        else:
            doc = _json(opts["assign"], "assign")
            if not isinstance(doc, dict) or not doc or not all(
                    isinstance(v, list) and all(isinstance(p, int) for p in v)
                    for v in doc.values()):
                raise KafkaSourceOptionError('assign must be JSON like {"orders": [0, 1]}')
            topics = {str(t): tuple(sorted(set(v))) for t, v in doc.items()}
        rows = opts.get("rows", "records")
        if rows not in ROWS:
            raise KafkaSourceOptionError(f"rows must be one of {', '.join(ROWS)}, not {rows!r}")
        lookup = opts.get("timelookup", "auto")
        if lookup not in ("auto", "broker", "scan"):
            raise KafkaSourceOptionError(f"timeLookup must be auto, broker or scan, not "
                                         f"{lookup!r}")
        lossy = opts.get("failondataloss", "true").strip().lower()
        if lossy not in ("true", "false"):
            raise KafkaSourceOptionError(f"failOnDataLoss must be true or false, not "
                                         f"{opts['failondataloss']!r}")
        out = cls(
            config=config, topics=topics, strategy=strategy, pattern=pattern,
            fail_on_data_loss=lossy == "true",
            starting=_offsets_option(opts.get("startingoffsets", "earliest"),
                                     "startingOffsets"),
            ending=(None if "endingoffsets" not in opts else
                    _offsets_option(opts["endingoffsets"], "endingOffsets")),
            starting_time_ms=_int(opts, "startingtimestamp", None),
            ending_time_ms=_int(opts, "endingtimestamp", None),
            time_lookup=lookup, rows=rows,
            max_offsets_per_split=_int(opts, "maxoffsetspersplit", DEFAULT_SPLIT, low=1),
            min_partitions=_int(opts, "minpartitions", 1, low=1),
            max_offsets_per_trigger=_int(opts, "maxoffsetspertrigger", None, low=1),
            timeout_s=_int(opts, "fetchtimeoutms", 30_000, low=1) / 1000,
            max_bytes=_int(opts, "maxbytesperfetch", DEFAULT_MAX_BYTES, low=1024))
        if out.timed and ("startingoffsets" in opts or "endingoffsets" in opts):
            raise KafkaSourceOptionError("startingTimestamp/endingTimestamp cannot be combined "
                                         "with startingOffsets/endingOffsets")
        return out


def _json(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise KafkaSourceOptionError(f"{name} is not valid JSON: {exc}") from None


def _int(opts: Mapping[str, str], key: str, default: Any, *, low: int | None = None) -> Any:
    if key not in opts:
        return default
    try:
        v = int(opts[key])
    except ValueError:
        raise KafkaSourceOptionError(f"option {key} must be an integer, not {opts[key]!r}"
                                     ) from None
    if low is not None and v < low:
        raise KafkaSourceOptionError(f"option {key} must be at least {low}, not {v}")
    return v


def _offsets_option(text: str, name: str) -> str | dict[str, dict[int, int]]:
    if text in ("earliest", "latest"):
        return text
    doc = _json(text, name)
    if not isinstance(doc, dict):
        raise KafkaSourceOptionError(f'{name} must be earliest, latest or JSON like '
                                     '{"orders": {"0": 23, "1": -2}}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise KafkaSourceOptionError(f"{name}: {topic!r} must map partitions to offsets")
        try:
            out[str(topic)] = {int(p): int(o) for p, o in parts.items()}
        except (TypeError, ValueError):
            raise KafkaSourceOptionError(f"{name}: partitions and offsets of {topic!r} must "
                                         "be integers") from None
    return out


def offsets_json(offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    """Offsets as Spark checkpoints them: ``{topic: {"partition": offset}}``, sorted."""
    return {t: {str(p): int(o) for p, o in sorted(parts.items())}
            for t, parts in sorted(offsets.items())}


def offsets_from_json(doc: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[int, int]]:
    """The inverse of :func:`offsets_json`."""
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in doc.items()}


# -- resolving ranges (driver side) ---------------------------------------------------------
def _per_partition(spec: str | dict[str, dict[int, int]] | None, topic: str,
                   default: str) -> tuple[str, dict[int, int] | None]:
    """``("earliest"|"latest"|"given", {partition: offset})`` for one topic."""
    if spec is None:
        return default, None
    if isinstance(spec, str):
        return spec, None
    return "given", spec.get(topic, {})


def matching_topics(pattern: str, cluster: ClusterTopics) -> list[str]:
    """The topics of ``cluster`` that ``subscribePattern`` selects, sorted.

    Spark's rule (``SubscribePatternStrategy``): the pattern is *searched* in each name
    (Scala's ``findFirstIn``, Python's :func:`re.search`), so ``orders`` selects
    ``orders-eu`` too — anchor it (``^orders$``) to name whole topics; and the topics the
    broker flags internal (``__consumer_offsets``, ``__transaction_state``) are never
    selected, whatever the pattern (Spark lists topics with the admin client's default,
    which leaves them out).  A topic the broker answered with an error for (its partitions
    unknown right now) waits for a later look.

    Examples
    --------
    >>> from kqlab.sources.fetch import ClusterTopics
    >>> cluster = ClusterTopics({"orders-a": (0,), "old-orders-b": (0, 1), "clicks": (0,),
    ...                          "orders-c": None, "__consumer_offsets": (0,)},
    ...                         frozenset({"__consumer_offsets"}))
    >>> matching_topics("orders-.*", cluster)
    ['old-orders-b', 'orders-a']
    >>> matching_topics("^orders-.*", cluster), matching_topics("__.*", cluster)
    (['orders-a'], [])
    """
    rx = re.compile(pattern)
    return sorted(t for t, parts in cluster.partitions.items()
                  if parts is not None and t not in cluster.internal and rx.search(t))


def resolve_topics(opts: SourceOptions, client: Any = None) -> SourceOptions:
    """``opts`` with ``subscribePattern`` resolved to the topics that match it on the
    cluster now (:func:`matching_topics`; one Metadata request through ``client``, a
    :class:`~kqlab.sources.fetch.FetchClient`, by default this process's); ``subscribe`` and
    ``assign`` come back as they are."""
    import dataclasses

    if opts.strategy != "subscribePattern":
        return opts
    assert opts.pattern is not None
    cluster = _cluster_topics(opts, client)
    return dataclasses.replace(opts, topics=dict.fromkeys(matching_topics(opts.pattern,
                                                                          cluster)))


def _cluster_topics(opts: SourceOptions, client: Any = None) -> ClusterTopics:
    own = client is None
    client = fetch_client(opts) if own else client
    try:
        topics: ClusterTopics = client.cluster_topics()
    except Exception:
        if own:
            _drop_client(opts)  # a broken connection must not poison the next call
        raise
    return topics


def earliest_offsets(opts: SourceOptions, partitions: Mapping[str, Iterable[int]]
                     ) -> dict[str, dict[int, int]]:
    """The earliest offset of each of ``partitions`` (``{topic: [partition, ...]}``), as
    ``startingOffsets=earliest`` resolves it (:func:`resolve`: the sampler's planning, the
    log start offset from ListOffsets) — where a stream starts a topic-partition it
    discovers (Spark's rule: read from the earliest offset, whatever ``startingOffsets``
    says: it was not there when the query started)."""
    from kqlab.sources.kafka import resolve_ranges

    out: dict[str, dict[int, int]] = {}
    for topic, parts in sorted(partitions.items()):
        wanted = sorted(set(parts))
        if wanted:
            ranges = resolve_ranges(opts.config, topic, partitions=wanted,
                                    timeout_s=opts.timeout_s, allow_empty=True)
            out[topic] = {r.partition: r.start for r in ranges}
    return out


def resolve(opts: SourceOptions, *, ending: bool, client: Any = None
            ) -> dict[str, dict[int, tuple[int, int]]]:
    """``{topic: {partition: (start, end)}}``: the options' offsets resolved on the cluster as
    :func:`kqlab.sources.kafka.resolve_ranges` resolves a sample (the sampler's own planning);
    ``subscribePattern`` first resolved to the topics that match it now
    (:func:`resolve_topics`, through ``client`` if given).

    ``ending=False`` resolves the end to the high watermark (a stream's first look)."""
    from kqlab.sources.kafka import resolve_ranges

    opts = resolve_topics(opts, client)
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for topic, parts in opts.topics.items():
        s_kind, s_map = _per_partition(opts.starting, topic, "earliest")
        e_kind, e_map = _per_partition(opts.ending if ending else None, topic, "latest")
        start: int | dict[int, int] | None = None
        end: int | dict[int, int] | None = None
        if s_kind == "latest":
            start = _LATEST
        elif s_kind == "given":
            assert s_map is not None
            start = {p: (_LATEST if o == -1 else o) for p, o in s_map.items() if o != -2}
        if e_kind == "earliest":
            end = 0
        elif e_kind == "given":
            assert e_map is not None
            end = {p: (0 if o == -2 else o) for p, o in e_map.items() if o != -1}
        ranges = resolve_ranges(
            opts.config, topic, partitions=None if parts is None else list(parts),
            start_offset=None if opts.timed else start, end_offset=None if opts.timed else end,
            start_time_ms=opts.starting_time_ms,
            end_time_ms=opts.ending_time_ms if ending else None,
            time_lookup=opts.time_lookup, timeout_s=opts.timeout_s, allow_empty=True)
        out[topic] = {r.partition: (r.start, r.end) for r in ranges}
    return out


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One input partition: offsets ``[start, end)`` of one topic-partition; ``final`` when
    ``end`` is the read's end (it also owns the batches running past it)."""

    topic: str
    partition: int
    start: int
    end: int
    final: bool = False


def split_ranges(ranges: Mapping[str, Mapping[int, tuple[int, int]]], opts: SourceOptions,
                 *, final: bool) -> list[RangePartition]:
    """The input partitions of a read: each non-empty range cut into pieces of at most
    ``maxOffsetsPerSplit`` offsets and, with ``minPartitions``, into enough pieces overall
    (never for ``raw`` rows or a time window: see the module doc)."""
    items = [(t, p, s, e) for t in ranges for p, (s, e) in sorted(ranges[t].items()) if e > s]
    total = sum(e - s for _, _, s, e in items)
    size = opts.max_offsets_per_split
    if opts.min_partitions > 1 and total:
        size = min(size, max(1, math.ceil(total / opts.min_partitions)))
    whole = opts.rows == "raw" or opts.timed
    out = []
    for t, p, s, e in items:
        step = e - s if whole else size
        for lo in range(s, e, step):
            hi = min(lo + step, e)
            out.append(RangePartition(t, p, lo, hi, final and hi == e))
    return out


# -- reading (executor side) ----------------------------------------------------------------
_CLIENTS: dict[tuple[Any, ...], Any] = {}


def fetch_client(opts: SourceOptions) -> Any:
    """One :class:`~kqlab.sources.fetch.FetchClient` per client config per Python worker
    (Spark reuses workers across tasks, so connections and metadata are reused too)."""
    from kqlab.sources.fetch import FetchClient

    key = (tuple(sorted(opts.config.items())), opts.timeout_s)
    client = _CLIENTS.get(key)
    if client is None:
        client = _CLIENTS[key] = FetchClient(opts.config, timeout_s=opts.timeout_s)
    return client


def _drop_client(opts: SourceOptions) -> None:
    key = (tuple(sorted(opts.config.items())), opts.timeout_s)
    client = _CLIENTS.pop(key, None)
    if client is not None:
        client.close()


def owned(batch_offset: pa.Array | pa.ChunkedArray, last_delta: pa.Array | pa.ChunkedArray,
          part: RangePartition) -> pa.Array:
    """The batches ``part`` owns: its range holds their last offset, or it is the read's
    final range and they run past its end (see the module doc)."""
    last = pc.add(batch_offset, pc.cast(last_delta, pa.int64()))
    mine = pc.and_(pc.greater_equal(last, part.start), pc.less(last, part.end))
    if part.final:
        mine = pc.or_(mine, pc.and_(pc.greater_equal(last, part.end),
                                    pc.less(batch_offset, part.end)))
    return mine


def read_range(opts: SourceOptions, part: RangePartition) -> pa.Table:
    """One input partition's rows (``opts.rows``) as an Arrow table."""
    client = fetch_client(opts)
    try:
        if opts.rows == "raw":
            return read_raw(client, part, opts.max_bytes)
        d = client.read(part.topic, part.partition, part.start, part.end,
                        max_bytes=opts.max_bytes)
    except Exception:
        _drop_client(opts)  # a broken connection must not poison the next task
        raise
    records = d.records
    if opts.timed:
        from kqlab.sources.sample_tables import filter_batches_to_records, time_filter

        records = time_filter(records, opts.starting_time_ms, opts.ending_time_ms)
        if opts.rows == "batches":
            return _spark_batches(filter_batches_to_records(d.batches, records))
    if opts.rows == "records":
        return records
    b = d.batches
    return _spark_batches(b.filter(owned(b.column("batch_offset"),
                                         b.column("last_offset_delta"), part)))


def _spark_batches(batches: pa.Table) -> pa.Table:
    return batches.cast(SPARK_BATCHES_SCHEMA)


def read_raw(client: Any, part: RangePartition, max_bytes: int) -> pa.Table:
    """The marker row of ``part`` and the bytes of every batch it owns, as fetched."""
    import numpy as np

    from kqlab.kafka.records_parser import scan_batches

    t, p, s, e = part.topic, part.partition, part.start, part.end
    offsets: list[int | None] = [None]
    lasts: list[int] = [e - 1]
    datas: list[bytes | None] = [None]
    offset, budget = s, min(max_bytes, 1 << 20)
    idle_since = time.monotonic()
    while offset < e:
        buf, hw = client.fetch(t, p, offset, budget)
        scan = scan_batches(buf, 0, len(buf))
        pos, size, base, delta = scan[0], scan[1], scan[3], scan[7]
        if not len(pos):
            if buf and budget < 256 << 20:
                budget *= 2  # one batch larger than the budget (old brokers): ask for more
                continue
            if hw is not None and hw <= offset:
                break  # the log ends before `end`
            if time.monotonic() - idle_since > client.timeout_s:
                from kqlab.sources.kafka_errors import KafkaTimeoutError

                raise KafkaTimeoutError(f"no batches for {t}[{p}] at offset {offset} from "
                                        f"{client.bootstrap} for {client.timeout_s:g}s")
            time.sleep(0.01)
            continue
        idle_since = time.monotonic()
        last = base + delta.astype(np.int64)
        keep = (last >= s) & (base < e) & ((last < e) | part.final)
        view = memoryview(buf)
        for i in np.flatnonzero(keep).tolist():
            offsets.append(int(base[i]))
            lasts.append(int(last[i]))
            datas.append(bytes(view[int(pos[i]):int(pos[i]) + int(size[i])]))
        nxt = int(last.max()) + 1
        if nxt <= offset:
            break
        offset = nxt
        budget = min(max_bytes, max(budget, int(buf and len(buf)) * 2))
    n = len(offsets)
    return pa.table([pa.repeat(pa.scalar(t, pa.string()), n),
                     pa.repeat(pa.scalar(p, pa.int32()), n),
                     pa.repeat(pa.scalar(s, pa.int64()), n),
                     pa.repeat(pa.scalar(e, pa.int64()), n),
                     pa.array(offsets, pa.int64()), pa.array(lasts, pa.int64()),
                     pa.array(datas, pa.binary())], schema=RAW_SCHEMA)


def _batches_of(table: pa.Table, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
    yield from table.combine_chunks().to_batches(max_chunksize=rows)


# -- the Data Source API classes -----------------------------------------------------------
class KafkaDataSource(DataSource):
    """``format("kqlab-kafka")``: batch and streaming reads (see the module doc)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        self.parsed = SourceOptions.parse(options)

    def schema(self) -> Any:
        return spark_schema(self.parsed.rows)

    def reader(self, schema: Any) -> KafkaBatchReader:
        return KafkaBatchReader(self.parsed)

    def streamReader(self, schema: Any) -> KafkaStreamReader:  # noqa: N802 - Spark's name
        return KafkaStreamReader(self.parsed)


class KafkaBatchReader(DataSourceReader):
    """A bounded read: ``startingOffsets`` (default earliest) to ``endingOffsets`` (default
    the high watermark when the read is planned)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[RangePartition]:
        return split_ranges(resolve(self.opts, ending=True), self.opts, final=True)

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):  # no ranges: Spark reads one empty split
            yield from _batches_of(read_range(self.opts, partition))


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """An unbounded read: micro-batches from ``startingOffsets`` on, each up to the high
    watermark (or ``maxOffsetsPerTrigger``), stopping at ``endingOffsets`` when given.
    ``Trigger.AvailableNow`` reads up to the high watermarks of its start, in micro-batches
    of ``maxOffsetsPerTrigger``."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._latest: dict[str, dict[int, int]] | None = None
        #: Trigger.AvailableNow: the offsets to stop at (the high watermarks at its start)
        self._target: dict[str, dict[int, int]] | None = None
        self._ending: dict[str, dict[int, int]] | None = None
        self._client: Any = None
        #: the earliest offset of each topic-partition discovered after the query started
        #: (where it is read from: :meth:`partitions` sees it in ``end`` only)
        self._earliest: dict[tuple[str, int], int] = {}

    # the driver-side process keeps this object between calls: one Fetch client for it
    def _fetch_client(self) -> Any:
        from kqlab.sources.fetch import FetchClient

        if self._client is None:
            self._client = FetchClient(self.opts.config, timeout_s=self.opts.timeout_s)
        return self._client

    def _drop_fetch_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def initialOffset(self) -> dict[str, dict[str, int]]:  # noqa: N802 - Spark's name
        ranges = resolve(self.opts, ending=False, client=self._fetch_client())
        return offsets_json({t: {p: s for p, (s, _) in parts.items()}
                             for t, parts in ranges.items()})

    def ending_offsets(self) -> dict[str, dict[int, int]] | None:
        """``endingOffsets`` resolved once (None: the stream has no end)."""
        if self.opts.ending is None and self.opts.ending_time_ms is None:
            return None
        if self._ending is None:
            ranges = resolve(self.opts, ending=True, client=self._fetch_client())
            self._ending = {t: {p: e for p, (_, e) in parts.items()}
                            for t, parts in ranges.items()}
        return self._ending

    def high_watermarks(self, start: Mapping[str, Mapping[int, int]]) -> dict[str, dict[int, int]]:
        """Each partition's high watermark, from a Fetch response at its current offset."""
        from kqlab.sources.kafka_errors import UnknownTopicError

        client = self._fetch_client()
        out: dict[str, dict[int, int]] = {}
        gone: list[tuple[str, int]] = []
        for t, parts in start.items():
            out[t] = {}
            for p, o in parts.items():
                try:
                    _, hw = client.fetch(t, p, o, 1)
                except UnknownTopicError:
                    # deleted after the Metadata answer of current_partitions (Apache Kafka
                    # drops a deleted topic from Metadata and Fetch at different moments):
                    # the whole topic is gone, however its other partitions answered
                    if not self.opts.discovers:
                        self._drop_fetch_client()
                        raise
                    gone += [(t, q) for q in sorted(parts)]
                    out[t] = dict(parts)
                    break
                except Exception:
                    self._drop_fetch_client()
                    raise
                out[t][p] = o if hw is None else max(int(hw), o)
        return self._drop_gone(out, gone) if gone else out

    def _drop_gone(self, out: dict[str, dict[int, int]], gone: list[tuple[str, int]]
                   ) -> dict[str, dict[int, int]]:
        """``out`` without the ``gone`` topic-partitions (``failOnDataLoss=false``), or
        :class:`PartitionsGoneError` naming them (``true``, as Spark's connector fails)."""
        names = ", ".join(f"{t}[{p}]" for t, p in gone)
        if self.opts.fail_on_data_loss:
            raise PartitionsGoneError(
                f"topic-partition(s) {names} of this stream are gone from "
                f"{self.opts.bootstrap} (topic deleted?): records not read yet are lost "
                "to it. Set the option failOnDataLoss=false to drop them and read on")
        _log.warning("kqlab-kafka: %s gone from %s; dropped (failOnDataLoss=false)",
                     names, self.opts.bootstrap)
        for t, p in gone:
            del out[t][p]
        return {t: parts for t, parts in out.items() if parts}

    def current_partitions(self, begin: Mapping[str, Mapping[int, int]]
                           ) -> dict[str, dict[int, int]]:
        """``begin`` (the offsets a micro-batch starts from) brought up to the cluster's
        topic-partitions now, as Spark's connector does for ``subscribe`` and
        ``subscribePattern`` at every trigger (``assign`` is fixed: ``begin`` as it is).

        One Metadata request: a topic-partition of the subscribed or matching topics that
        ``begin`` lacks is added at its earliest offset (:func:`earliest_offsets`), so it is
        read from its start; one of ``begin`` gone from the cluster (its topic deleted) is
        :class:`PartitionsGoneError` with ``failOnDataLoss=true`` and dropped with
        ``false``.  A bounded stream (``endingOffsets``, ``Trigger.AvailableNow``) adds only
        the partitions of its bound: its end was fixed when it was resolved."""
        out = {t: dict(parts) for t, parts in begin.items()}
        if not self.opts.discovers:
            return out
        client = self._fetch_client()
        try:
            cluster = client.cluster_topics()
        except Exception:
            self._drop_fetch_client()
            raise
        have = cluster.partitions
        gone = [(t, p) for t, parts in out.items() for p in sorted(parts)
                if t not in have or (have[t] is not None and p not in have[t])]
        if gone:
            out = self._drop_gone(out, gone)
        if self.opts.strategy == "subscribePattern":
            assert self.opts.pattern is not None
            topics = matching_topics(self.opts.pattern, cluster)
        else:
            topics = [t for t in self.opts.topics if have.get(t) is not None]
        new = {(t, p) for t in topics for p in have[t] or () if p not in out.get(t, {})}
        for bound in (self.ending_offsets(), self._target):
            if bound is not None:
                new = {(t, p) for t, p in new if p in bound.get(t, {})}
        unknown: dict[str, list[int]] = {}
        for t, p in new - set(self._earliest):
            unknown.setdefault(t, []).append(p)
        for t, parts in earliest_offsets(self.opts, unknown).items():
            self._earliest.update({(t, p): o for p, o in parts.items()})
        for t, p in sorted(new):
            if (t, p) in self._earliest:
                out.setdefault(t, {})[p] = self._earliest[(t, p)]
        return out

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:  # noqa: N802
        from pyspark.sql.streaming.datasource import ReadMaxRows

        begin = self.current_partitions(offsets_from_json(start))
        latest = self.high_watermarks(begin)
        for cap in (self.ending_offsets(), self._target):
            if cap is not None:
                latest = {t: {p: max(min(o, cap.get(t, {}).get(p, o)), begin[t][p])
                              for p, o in parts.items()} for t, parts in latest.items()}
        self._latest = latest
        if isinstance(limit, ReadMaxRows):
            latest = cap_offsets(begin, latest, int(limit.max_rows))
        return offsets_json(latest)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Fix the offsets ``Trigger.AvailableNow`` stops at: the high watermarks now."""
        ranges = resolve(self.opts, ending=self.ending_offsets() is not None,
                         client=self._fetch_client())
        self._target = {t: {p: e for p, (_, e) in parts.items()} for t, parts in ranges.items()}

    def getDefaultReadLimit(self) -> Any:  # noqa: N802 - Spark's name
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        n = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802 - Spark's name
        return None if self._latest is None else offsets_json(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]
                   ) -> Sequence[RangePartition]:
        s, e = offsets_from_json(start), offsets_from_json(end)
        ending = self.ending_offsets()
        # partitions in ``end`` only were discovered by latestOffset: from their earliest
        # offset (resolved again after a restart, for a micro-batch of the offset log)
        unknown: dict[str, list[int]] = {}
        for t in e:
            for p in e[t]:
                if p not in s.get(t, {}) and (t, p) not in self._earliest:
                    unknown.setdefault(t, []).append(p)
        for t, parts in earliest_offsets(self.opts, unknown).items():
            self._earliest.update({(t, p): o for p, o in parts.items()})
        out = []
        for t in sorted(e):
            for p in sorted(e[t]):
                hi = e[t][p]
                lo = s[t][p] if p in s.get(t, {}) else min(self._earliest.get((t, p), hi), hi)
                if hi > lo:
                    final = ending is not None and ending.get(t, {}).get(p) == hi
                    out.append(RangePartition(t, p, lo, hi, final))
        return out

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):  # no ranges: Spark reads one empty split
            yield from _batches_of(read_range(self.opts, partition))

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the reader never commits offsets to the cluster."""

    def stop(self) -> None:
        self._drop_fetch_client()


def cap_offsets(start: Mapping[str, Mapping[int, int]], latest: Mapping[str, Mapping[int, int]],
                budget: int) -> dict[str, dict[int, int]]:
    """``latest`` cut down to ``budget`` offsets past ``start`` in all, shared in proportion
    to what each partition has waiting (every partition with data advances by at least one).

    >>> cap_offsets({"t": {0: 0, 1: 0}}, {"t": {0: 100, 1: 300}}, 40)
    {'t': {0: 10, 1: 30}}
    """
    waiting = {(t, p): max(o - start.get(t, {}).get(p, o), 0)
               for t, parts in latest.items() for p, o in parts.items()}
    total = sum(waiting.values())
    out = {t: dict(parts) for t, parts in latest.items()}
    if total <= budget:
        return out
    for (t, p), n in waiting.items():
        if n:
            share = max(1, int(budget * n / total))
            out[t][p] = start.get(t, {}).get(p, 0) + min(share, n)
    return out


def register(spark: Any) -> None:
    """Register ``format("kqlab-kafka")`` with ``spark`` (idempotent)."""
    spark.dataSource.register(KafkaDataSource)
