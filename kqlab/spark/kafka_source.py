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
* ``subscribe`` (``"a,b"``) or ``assign`` (JSON ``{"a": [0, 1]}``);
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
* ``fetchTimeoutMs`` (default 30000) and ``maxBytesPerFetch`` (default 8 MiB).

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
and joins no group: Fetch requests with ``replica_id = -1`` are read-only.  The partitions are
fixed when the query starts.  The high watermark comes from a Fetch response, never from
ListOffsets (wrong on some brokers for multi-record batches, e.g. Tansu).

The batch column ``position`` is the batch's byte offset in the Fetch response that carried
it, so it depends on how a range was cut into requests; every other column is the sampler's.
``crc`` is a ``long`` in Spark (no unsigned ints there): :func:`arrow_to_contract` casts
tables collected from Spark back to kqlab's contracts.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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

__all__ = [
    "FORMAT",
    "RAW_SCHEMA",
    "ROWS",
    "KafkaDataSource",
    "KafkaSourceOptionError",
    "RangePartition",
    "SourceOptions",
    "arrow_to_contract",
    "register",
    "spark_schema",
]

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
_KNOWN = {"subscribe", "assign", "startingoffsets", "endingoffsets", "startingtimestamp",
          "endingtimestamp", "timelookup", "rows", "maxoffsetspersplit", "minpartitions",
          "maxoffsetspertrigger", "fetchtimeoutms", "maxbytesperfetch", "path"}


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options (plain data: pickled into every task)."""

    config: dict[str, str]
    #: topic -> its partitions (None: every partition the topic has)
    topics: dict[str, tuple[int, ...] | None]
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
                "kafka.<librdkafka name>, subscribe, assign, startingOffsets, endingOffsets, "
                "startingTimestamp, endingTimestamp, timeLookup, rows, maxOffsetsPerSplit, "
                "minPartitions, maxOffsetsPerTrigger, fetchTimeoutMs, maxBytesPerFetch")
        topics: dict[str, tuple[int, ...] | None]
        if ("subscribe" in opts) == ("assign" in opts):
            raise KafkaSourceOptionError("give exactly one of subscribe (topics, comma "
                                         "separated) or assign (JSON {\"topic\": [0, 1]})")
        if "subscribe" in opts:
            names = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
            if not names:
                raise KafkaSourceOptionError("subscribe names no topic")
            topics = dict.fromkeys(names)
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
        out = cls(
            config=config, topics=topics,
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


def resolve(opts: SourceOptions, *, ending: bool) -> dict[str, dict[int, tuple[int, int]]]:
    """``{topic: {partition: (start, end)}}``: the options' offsets resolved on the cluster as
    :func:`kqlab.sources.kafka.resolve_ranges` resolves a sample (the sampler's own planning).

    ``ending=False`` resolves the end to the high watermark (a stream's first look)."""
    from kqlab.sources.kafka import resolve_ranges

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

    # the driver-side process keeps this object between calls: one Fetch client for it
    def _fetch_client(self) -> Any:
        from kqlab.sources.fetch import FetchClient

        if self._client is None:
            self._client = FetchClient(self.opts.config, timeout_s=self.opts.timeout_s)
        return self._client

    def initialOffset(self) -> dict[str, dict[str, int]]:  # noqa: N802 - Spark's name
        ranges = resolve(self.opts, ending=False)
        return offsets_json({t: {p: s for p, (s, _) in parts.items()}
                             for t, parts in ranges.items()})

    def ending_offsets(self) -> dict[str, dict[int, int]] | None:
        """``endingOffsets`` resolved once (None: the stream has no end)."""
        if self.opts.ending is None and self.opts.ending_time_ms is None:
            return None
        if self._ending is None:
            ranges = resolve(self.opts, ending=True)
            self._ending = {t: {p: e for p, (_, e) in parts.items()}
                            for t, parts in ranges.items()}
        return self._ending

    def high_watermarks(self, start: Mapping[str, Mapping[int, int]]) -> dict[str, dict[int, int]]:
        """Each partition's high watermark, from a Fetch response at its current offset."""
        client = self._fetch_client()
        out: dict[str, dict[int, int]] = {}
        for t, parts in start.items():
            out[t] = {}
            for p, o in parts.items():
                try:
                    _, hw = client.fetch(t, p, o, 1)
                except Exception:
                    self._client = None
                    with contextlib.suppress(Exception):
                        client.close()
                    raise
                out[t][p] = o if hw is None else max(int(hw), o)
        return out

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:  # noqa: N802
        from pyspark.sql.streaming.datasource import ReadMaxRows

        begin = offsets_from_json(start)
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
        ranges = resolve(self.opts, ending=True) if self.ending_offsets() is not None else \
            resolve(self.opts, ending=False)
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
        out = []
        for t in sorted(e):
            for p in sorted(e[t]):
                lo, hi = s.get(t, {}).get(p, e[t][p]), e[t][p]
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
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None


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
