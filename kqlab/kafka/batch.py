"""Magic v2 record batches: header layout, CRC, decompression, and decoding to Arrow.

Wire layout (spec §1.2; Java ``DefaultRecordBatch``), all big-endian::

    off  size field                  notes
      0     8 baseOffset             broker-assigned; 0 from producers
      8     4 batchLength            bytes after this field (total = 12 + batchLength)
     12     4 partitionLeaderEpoch   not covered by the CRC
     16     1 magic                  2
     17     4 crc                    CRC-32C over bytes [21, end)
     21     2 attributes             low byte: codec(0-2) tsType(3) txn(4) control(5) delHorizon(6)
     23     4 lastOffsetDelta
     27     8 baseTimestamp
     35     8 maxTimestamp
     43     8 producerId
     51     2 producerEpoch
     53     4 baseSequence
     57     4 recordsCount
     61     - records (one compressed stream when the codec is not none)

Decoding never raises on bad bytes: a batch that cannot be read becomes a batches-table row with
``decode_error`` set (and ``crc_valid`` False when the checksum is wrong), and the records that
could be read before the problem are kept.  What went wrong is data too
(``kqlab.records.DECODE_COLUMNS``): how many records the batch contributed, and, for v2 batches,
which broker check each of the broker's two record readers meets (the full reader, used for
uncompressed batches and for compressed batches it rebuilds, and the lenient in-place reader),
with its parameters, so the vectorised table checks never parse a message.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kqlab.kafka import legacy
from kqlab.kafka.checks._check import Check
from kqlab.kafka.checks.structure import D3_CODEC_OPEN, reading_check
from kqlab.kafka.compression import Codec, StreamRead, read_stream
from kqlab.kafka.log_issues import (
    STOP_CORRUPT_LENGTH,
    STOP_LIMIT,
    STOP_SHORT,
    STOP_TRUNCATED,
    stop_issue,
)
from kqlab.kafka.records_parser import (
    ParsedRecords,
    ReadMode,
    RecordsParser,
    RecordsParserProtocol,
    crc32c,
    parse_records,
    scan_batches,
)
from kqlab.records import BATCHES_SCHEMA, DECODE_COLUMNS, HEADER_TYPE, RECORDS_SCHEMA

V2_HEADER = struct.Struct(">qiibIhiqqqhii")
RECORD_BATCH_OVERHEAD = V2_HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
BASE_SEQUENCE_OFFSET = 53

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1

_CODEC_LABELS = {c.value: c.label for c in Codec}
_CODEC_NAMES = np.array([_CODEC_LABELS[i] for i in range(5)], dtype=object)


def codec_label(codec_id: int) -> str:
    """``"lz4"`` for 3; ``"unknown(5)"`` for ids Kafka does not define."""
    return _CODEC_LABELS.get(codec_id, f"unknown({codec_id})")


def increment_sequence(sequence: int, increment: int) -> int:
    """``DefaultRecordBatch.incrementSequence``: wraps past 2^31-1 to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


@dataclass(frozen=True, slots=True)
class RecordBatchHeader:
    """The 61-byte v2 header, field by field, plus the properties the broker derives."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def parse(cls, data: bytes) -> RecordBatchHeader:
        """Parse the header at the start of ``data`` (at least 61 bytes)."""
        return cls(*V2_HEADER.unpack_from(data, 0))

    @property
    def size(self) -> int:
        """Total bytes of the batch (``12 + batchLength``)."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def codec(self) -> int:
        """Codec id (0 none .. 4 zstd; 5-7 are invalid)."""
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        """The transactional attribute bit."""
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        """The control-batch attribute bit (transaction markers)."""
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """``baseTimestamp`` holds a delete horizon (set by the log cleaner)."""
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_offset(self) -> int:
        """``baseOffset + lastOffsetDelta`` in 64-bit."""
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping like the broker; -1 without a sequence."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def batch_crc_valid(data: bytes) -> tuple[bool, int]:
    """``(valid, computed)`` for a v2 batch: size >= 61 and the stored CRC matches."""
    if len(data) < RECORD_BATCH_OVERHEAD:
        return False, 0
    computed = crc32c(memoryview(data)[ATTRIBUTES_OFFSET:])
    (stored,) = struct.unpack_from(">I", data, CRC_OFFSET)
    return stored == computed, computed


def records_region(raw: bytes | memoryview, codec: int) -> tuple[bytes | memoryview, str | None]:
    """A batch's records bytes (``raw`` = everything after the 61-byte header), decompressed.

    Returns ``(region, error)``: uncompressed records come back as given (zero copy); when the
    codec fails, ``region`` holds what the broker's reader was handed before the failure and
    ``error`` is the Java exception (:func:`kqlab.kafka.compression.read_stream`).
    """
    if codec == Codec.NONE:
        return raw, None
    got = read_stream(codec, raw)
    return got.data, None if got.failure is None else got.failure.cause


Finding = tuple[Check, dict[str, object]]


def read_batch_records(raw: bytes | memoryview, codec: int, count: int, *, in_place: bool,
                       with_data: bool = False
                       ) -> tuple[ParsedRecords, bytes | memoryview, Finding | None]:
    """Read one v2 batch's records as the broker does (spec §3.D.3): ``(parsed, region,
    finding)``, ``finding`` being the ``(check, params)`` that aborts the batch, or None.

    ``raw`` is everything after the 61-byte header.  The reader is the one LogValidator picks:
    the buffer reader for an uncompressed batch, the lenient in-place reader for a compressed
    batch appended in place (``in_place``), the stream reader otherwise, over what the codec
    delivers (:func:`kqlab.kafka.compression.read_stream`).  A declared count of 0 reads
    nothing (the iterators are empty), but the rebuild path still opens the codec.
    """
    if codec == Codec.NONE:
        parsed = parse_records([raw], [count], ReadMode.BUFFER, with_data)
        err = parsed.batch_error[0]
        if err is None or count == 0:
            return parsed, raw, None
        return parsed, raw, reading_check(*err, ReadMode.BUFFER)
    sr = read_stream(codec, raw)
    failure = sr.failure
    opened = failure is not None and failure.at_open
    mode = ReadMode.PARTIAL if in_place else ReadMode.STREAM
    n = 0 if opened or count == 0 else count
    parsed = parse_records([sr.data], [n], mode, with_data,
                           [failure is not None and not opened])
    if opened and not (in_place and count == 0):
        return parsed, sr.data, (D3_CODEC_OPEN, {"cause": failure.cause})  # type: ignore[union-attr]
    err = parsed.batch_error[0]
    if err is None or n == 0:
        return parsed, sr.data, None
    return parsed, sr.data, reading_check(*err, mode, None if failure is None else failure.cause)


def reader_findings(regions: Sequence[bytes | memoryview], counts: Sequence[int],
                    codecs: Sequence[int], streams: dict[int, StreamRead],
                    parsed: ParsedRecords
                    ) -> tuple[list[Finding | None], list[Finding | None]]:
    """What each of the broker's two record readers finds in batches the full reader parsed
    (``parsed``: the buffer reader for uncompressed batches, the stream reader of the rebuild
    path for compressed ones, :meth:`TableBuilder.flush`): ``(full, in_place)``, a
    ``(check, params)`` or None per batch.

    ``regions`` are the batches' records bytes, compressed where ``codecs[i]`` is not 0;
    ``streams[i]`` is what the exact codec reader delivered from a compressed one, missing when
    the parser decompressed it whole itself (the exact reader then delivers the same bytes and
    no failure: it is run here, again, only for the rare batch the full reader stops in).
    Batches whose codec stream cannot even be opened are the caller's (no reader runs).
    Compressed batches the full reader cannot read are read again with the lenient in-place
    reader (``PARTIAL``, no data), which may get further or stop elsewhere; an uncompressed
    batch has one reader for both paths."""
    nb = len(parsed.batch_error)
    full: list[Finding | None] = [None] * nb
    inplace: list[Finding | None] = [None] * nb
    again: list[int] = []
    delivered: list[StreamRead] = []
    for i, err in enumerate(parsed.batch_error):
        if err is None or counts[i] == 0:  # a count of 0 reads nothing
            continue
        if not codecs[i]:
            full[i] = inplace[i] = reading_check(*err, ReadMode.BUFFER)
            continue
        sr = streams.get(i)
        if sr is None:
            sr = streams[i] = read_stream(codecs[i], regions[i])
        if sr.failure is not None and sr.failure.at_open:
            continue
        cause = None if sr.failure is None else sr.failure.cause
        full[i] = reading_check(*err, ReadMode.STREAM, cause)
        again.append(i)
        delivered.append(sr)
    if again:
        failures = [sr.failure for sr in delivered]
        lenient = parse_records([sr.data for sr in delivered], [counts[i] for i in again],
                                ReadMode.PARTIAL, False, [f is not None for f in failures])
        for j, i in enumerate(again):
            err = lenient.batch_error[j]
            if err is not None:
                f = failures[j]
                inplace[i] = reading_check(*err, ReadMode.PARTIAL,
                                           None if f is None else f.cause)
    return full, inplace


# --------------------------------------------------------------------------------------------
# Decoding to the records / batches tables
# --------------------------------------------------------------------------------------------

#: a chunk of the records table holds the records of this many batches (or of a run that
#: passes it)
FLUSH_BATCHES = 4096
#: the value buffer reserved for a run with compressed batches, per byte of the run (at most
#: COMPRESSED_RESERVE_MAX bytes beyond the run's own size: reserved address space, not memory,
#: but a machine without overcommit room still refuses a huge reservation)
COMPRESSED_RESERVE = 5
COMPRESSED_RESERVE_MAX = 256 << 20
#: at most this many threads decompress zstd batches (the parsing thread and its helpers)
MAX_DECODE_THREADS = 4


def decode_threads() -> int:
    """How many threads the decoder decompresses zstd and lz4 batches on:
    ``KQLAB_DECODE_THREADS`` when set, else one plus one per idle CPU of this process (its CPUs
    less the one-minute load average, rounded to the nearest), up to
    :data:`MAX_DECODE_THREADS`.

    Decompression is most of the time spent decoding a compressed segment; the parser's
    helper threads take it off the parsing thread, which decompresses the batches no helper
    has claimed (the decoded tables do not depend on the number).  A helper pays off on a core
    nobody else wants (zstd, ``benchmarks/decode.py --quick`` on 2 cores: 42 ms instead of
    61 ms wall); on a machine that is already busy it costs ~5 % more CPU for about the same
    wall time (load 3-5), so half an idle core is reason enough to start one.  Set
    ``KQLAB_DECODE_THREADS=1`` where every core runs an engine task."""
    text = os.environ.get("KQLAB_DECODE_THREADS", "").strip()
    if text:
        try:
            return max(1, int(text))
        except ValueError:
            raise ValueError(f"KQLAB_DECODE_THREADS must be a whole number, not {text!r}") \
                from None
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    try:
        idle = cpus - os.getloadavg()[0]
    except OSError:  # no load average here
        idle = cpus - 1
    return max(1, min(1 + int(idle + 0.5), cpus, MAX_DECODE_THREADS))

_BATCH_COLUMNS = [f.name for f in BATCHES_SCHEMA]
# the columns kept per row as read; decode_error and the DECODE_COLUMNS are kept apart because
# flush() fills them in once the records are parsed
_TAIL = ("decode_error", *DECODE_COLUMNS)
_ROW_COLUMNS = _BATCH_COLUMNS[:-len(_TAIL)]
_ROWS_SCHEMA = pa.schema(list(BATCHES_SCHEMA)[:-len(_TAIL)])
assert tuple(_BATCH_COLUMNS[-len(_TAIL):]) == _TAIL
_PARAMS = BATCHES_SCHEMA.field("decode_params").type


def _finding_columns(findings: list[Finding | None]) -> tuple[pa.Array, pa.Array]:
    """The ``*_check`` and ``*_params`` columns of a list of findings."""
    checks = [None if f is None else f[0].id for f in findings]
    params = [None if f is None else [(k, str(v)) for k, v in f[1].items()] for f in findings]
    return pa.array(checks, pa.string()), pa.array(params, _PARAMS)


class _Pending(Sequence):
    """The v2 batches handed to the records parser since the last flush, in log order: per
    batch its row, declared count, codec (0: the region is the records bytes), base offset,
    base and max timestamps and LogAppendTime flag, as numpy columns; and, indexed like a list,
    each batch's records region (cut from its buffer only when asked: a codec reader or a
    finding needs it).  Runs of batches come in as arrays, single batches one by one."""

    COLUMNS = (("row", np.int64), ("count", np.int64), ("codec", np.int32),
               ("base_offset", np.int64), ("base_ts", np.int64), ("max_ts", np.int64),
               ("lat", np.bool_))

    def __init__(self) -> None:
        self.n = 0
        self._parts: list[tuple[np.ndarray, ...]] = []
        self._singles: list[tuple] = []
        # (first index, region) for a single batch, (first index, (view, starts, ends)) for a run
        self._firsts: list[int] = []
        self._sources: list[object] = []

    def __len__(self) -> int:
        return self.n

    def add_single(self, values: tuple, region: bytes | memoryview) -> int:
        """One batch (``values`` in :attr:`COLUMNS` order); its index."""
        self._singles.append(values)
        self._firsts.append(self.n)
        self._sources.append(region)
        self.n += 1
        return self.n - 1

    def add_run(self, arrays: tuple[np.ndarray, ...], view: memoryview, starts: np.ndarray,
                ends: np.ndarray) -> int:
        """A run of batches (arrays in :attr:`COLUMNS` order, regions ``view[starts:ends]``);
        the index of its first batch."""
        self._seal()
        self._parts.append(arrays)
        first = self.n
        self._firsts.append(first)
        self._sources.append((view, starts, ends))
        self.n += len(starts)
        return first

    def _seal(self) -> None:
        if self._singles:
            cols = list(zip(*self._singles, strict=True))
            self._parts.append(tuple(np.array(c, dtype=t)
                                     for c, (_, t) in zip(cols, self.COLUMNS, strict=True)))
            self._singles = []

    def columns(self) -> tuple[np.ndarray, ...]:
        """Every batch's values, one array per :attr:`COLUMNS` entry."""
        self._seal()
        if len(self._parts) == 1:
            return self._parts[0]
        if not self._parts:
            return tuple(np.zeros(0, dtype=t) for _, t in self.COLUMNS)
        return tuple(np.concatenate(c) for c in zip(*self._parts, strict=True))

    def __getitem__(self, i):
        """Batch ``i``'s records region (compressed as stored for a compressed batch)."""
        k = bisect.bisect_right(self._firsts, i) - 1
        source = self._sources[k]
        if not isinstance(source, tuple):
            return source
        view, starts, ends = source
        j = i - self._firsts[k]
        return view[int(starts[j]):int(ends[j])]


class TableBuilder:
    """Accumulates decoded batches and builds the records and batches Arrow tables.

    Batches are fed in log order with :meth:`add` or, many at a time, :meth:`add_buffer`.  The
    records of v2 batches go to one :class:`~kqlab.kafka.records_parser.RecordsParser` per
    chunk as they come (:meth:`add_buffer` hands it whole runs of batches, whose CRCs it checks
    while it reads them, so a segment is read from memory once); :meth:`flush` finishes the
    parse and builds the chunk's records table.  The per-batch Python work of the bulk path is
    nothing; compressed batches other than zstd are read by the exact codec readers
    (:func:`kqlab.kafka.compression.read_stream`), zstd ones by the parser itself when they
    decode whole.
    """

    def __init__(self, topic: str = "", partition: int = -1, framing: str = "exact", *,
                 threads: int | None = None):
        self.topic = topic
        self.partition = partition
        self.framing = framing
        #: threads the parser decompresses zstd batches on (:func:`decode_threads`)
        self.threads = decode_threads() if threads is None else max(1, threads)
        # batch rows in log order: blocks of tuples (slow path) or of numpy columns (fast path)
        self._blocks: list[list[tuple] | dict[str, np.ndarray]] = []
        self._nrows = 0
        self._decode_errors: list[str | None] = []
        # per row: records contributed, decode kind, and the two readers' findings
        self._decoded: list[int] = []
        self._kinds: list[str | None] = []
        self._full: list[Finding | None] = []
        self._inplace: list[Finding | None] = []
        self._record_tables: list[pa.Table] = []
        # v2 batches since the last flush (their records are in self._parser), the exact
        # codec reader's deliveries for those it read, and single batches not yet handed to
        # the parser: (index, region, count, codec)
        self._pending = _Pending()
        self._parser: RecordsParserProtocol | None = None
        self._streams: dict[int, StreamRead] = {}
        self._singles: list[tuple[int, bytes | memoryview, int, int]] = []
        self.records_added = 0

    @property
    def rows(self) -> int:
        """Batch rows accumulated since the last :meth:`take`."""
        return self._nrows

    # -- batch rows ------------------------------------------------------------------------
    def _tuple_row(self, row: tuple, error: str | None, kind: str | None = None,
                   decoded: int = 0) -> int:
        if not self._blocks or not isinstance(self._blocks[-1], list):
            self._blocks.append([])
        self._blocks[-1].append(row)  # type: ignore[union-attr]
        self._decode_errors.append(error)
        self._kinds.append(kind)
        self._decoded.append(decoded)
        self._full.append(None)
        self._inplace.append(None)
        self._nrows += 1
        return self._nrows - 1

    def _row(self, kind: str | None = None, decoded: int = 0, **values: object) -> int:
        """Add a batch row from keyword values (the slow path, for unusual batches)."""
        return self._tuple_row(tuple(values.get(name) for name in _ROW_COLUMNS),
                               values.get("decode_error"), kind,  # type: ignore[arg-type]
                               decoded)

    def add(self, position: int | None, data: bytes) -> None:
        """Decode one batch (``data`` = its complete bytes, starting with baseOffset)."""
        if len(data) <= MAGIC_OFFSET:
            self._row("scan", topic=self.topic, partition=self.partition, size_bytes=len(data),
                      position=position, crc_valid=False, framing=self.framing,
                      decode_error=f"batch of {len(data)} bytes is too short to hold a magic "
                                   "byte")
            return
        magic = data[MAGIC_OFFSET]
        if magic == 2:
            self._add_v2(position, data)
        elif magic in (0, 1):
            self._add_legacy(position, data)
        else:
            base_offset = struct.unpack_from(">q", data, 0)[0]
            self._row("magic", topic=self.topic, partition=self.partition,
                      batch_offset=base_offset,
                      magic=magic - 256 if magic > 127 else magic, size_bytes=len(data),
                      position=position, crc_valid=False, framing=self.framing,
                      decode_error=f"Invalid magic found in record: "
                                   f"{magic - 256 if magic > 127 else magic}")

    def _add_v2(self, position: int | None, data: bytes) -> None:
        size = len(data)
        if size < RECORD_BATCH_OVERHEAD:
            base_offset = struct.unpack_from(">q", data, 0)[0]
            self._row("header", topic=self.topic, partition=self.partition,
                      batch_offset=base_offset,
                      magic=2, size_bytes=size, position=position, crc_valid=False,
                      framing=self.framing,
                      decode_error=f"batch of {size} bytes is shorter than the "
                                   f"{RECORD_BATCH_OVERHEAD}-byte v2 header")
            return
        (base_offset, _length, ple, _magic, crc, attributes, last_delta, base_ts, max_ts, pid,
         epoch, base_seq, count) = V2_HEADER.unpack_from(data, 0)
        crc_ok = crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]) == crc
        attr = attributes & 0xFF
        codec = attr & CODEC_MASK
        lat = bool(attr & TIMESTAMP_TYPE_MASK)
        error = kind = None
        region: bytes | memoryview = b""
        count_for_parse = 0
        if codec > Codec.ZSTD:
            error, kind = f"Unknown compression type id {codec}", "codec_id"
        else:
            region, count_for_parse = memoryview(data)[RECORD_BATCH_OVERHEAD:], count
        row = self._tuple_row((
            self.topic, self.partition, base_offset, last_delta, 2, codec_label(codec),
            1 if lat else 0, bool(attr & TRANSACTIONAL_MASK), bool(attr & CONTROL_MASK), pid,
            epoch, base_seq, ple, count, size, base_ts, max_ts, crc_ok, self.framing, position,
            attributes, crc), error, kind)
        codec = codec if codec <= Codec.ZSTD else 0
        i = self._pending.add_single((row, count_for_parse, codec, base_offset, base_ts, max_ts,
                                      lat), region)
        self._singles.append((i, region, count_for_parse, codec))
        if self._pending.n >= FLUSH_BATCHES:
            self.flush()

    def _add_legacy(self, position: int | None, data: bytes) -> None:
        try:
            entry = legacy.open_entry(data)
        except legacy.LegacyFormatError as exc:
            base_offset = struct.unpack_from(">q", data, 0)[0]
            self._row("legacy", topic=self.topic, partition=self.partition,
                      batch_offset=base_offset,
                      magic=data[MAGIC_OFFSET], size_bytes=len(data), position=position,
                      crc_valid=False, framing=self.framing, decode_error=str(exc))
            return
        self.flush()  # keep record order across a v2 -> legacy switch
        w = entry.wrapper
        msgs = entry.messages
        errors = [entry.error] if entry.error else []
        bad_inner = [m.offset for m in (entry.inner or []) if not m.crc_valid]
        if bad_inner:
            errors.append(f"inner messages at offsets {bad_inner} have invalid CRCs")
        first = msgs[0].offset if msgs else w.offset
        last_delta: int | None = w.offset - first
        if not -(2**31) <= last_delta < 2**31:  # type: ignore[operator]
            errors.append(f"wrapper offset {w.offset} is {last_delta} away from the first "
                          f"inner offset {first}")
            last_delta = None
        lat = w.magic >= 1 and w.timestamp_type == 1
        self._row("legacy" if errors else None, len(msgs),
                  topic=self.topic, partition=self.partition, batch_offset=first,
                  last_offset_delta=last_delta, magic=w.magic,
                  compression=codec_label(w.codec), timestamp_type=w.timestamp_type,
                  is_transactional=False, is_control=False, producer_id=-1, producer_epoch=-1,
                  base_sequence=-1, partition_leader_epoch=-1, record_count=len(msgs),
                  size_bytes=len(data), first_timestamp=msgs[0].timestamp if msgs else -1,
                  max_timestamp=w.timestamp, crc_valid=w.crc_valid, framing=self.framing,
                  position=position, attributes=w.attributes, crc=w.crc,
                  decode_error="; ".join(errors) if errors else None)
        n = len(msgs)
        if not n:
            return
        ts = [w.timestamp if lat else m.timestamp for m in msgs]
        tstype = [m.timestamp_type if not lat else 1 for m in msgs]
        self._record_tables.append(pa.table({
            "topic": pa.array([self.topic] * n, pa.string()),
            "partition": pa.array([self.partition] * n, pa.int32()),
            "offset": pa.array([m.offset for m in msgs], pa.int64()),
            "timestamp": pa.array(ts, pa.int64()),
            "timestamp_type": pa.array(tstype, pa.int8()),
            "key": pa.array([m.key for m in msgs], pa.binary()),
            "value": pa.array([m.value for m in msgs], pa.binary()),
            "headers": pa.array([[] for _ in msgs], HEADER_TYPE),
            "batch_offset": pa.array([first] * n, pa.int64()),
            "batch_index": pa.array(range(n), pa.int32()),
        }, schema=RECORDS_SCHEMA))
        self.records_added += n

    # -- records ---------------------------------------------------------------------------
    def _parser_for(self, reserve: int) -> RecordsParserProtocol:
        """The chunk's records parser (``reserve``: bytes for its value buffer, a hint)."""
        if self._parser is None:
            self._parser = RecordsParser(True, reserve, self.threads)
        return self._parser

    def _read(self, i: int, codec: int) -> tuple[bytes, bool]:
        """The parser's ``read`` for pending batch ``i``: what the exact codec reader delivers
        (kept for the findings) and whether the codec failed after it."""
        sr = self._streams[i] = read_stream(codec, self._pending[i])
        f = sr.failure
        if f is not None and f.at_open:
            return b"", False  # wrapForInput throws: no record is read
        return sr.data, f is not None

    def _hand_singles(self) -> None:
        """Give the parser the single batches added since the last run (log order)."""
        singles = self._singles
        if not singles:
            return
        self._singles = []
        parser = self._parser_for(0)
        regions = [r for _, r, _, _ in singles]
        counts = [n for _, _, n, _ in singles]
        codecs = [c for _, _, _, c in singles]
        if not any(codecs):
            parser.add(regions, counts, ReadMode.BUFFER)
            return
        first = singles[0][0]
        # the full reader: the buffer reader, or the stream reader of the rebuild path
        parser.add(regions, counts, [ReadMode.STREAM if c else ReadMode.BUFFER for c in codecs],
                   None, codecs, lambda k: self._read(first + k, codecs[k]))

    def flush(self) -> None:
        """Finish parsing the pending v2 batches and append their records."""
        self._hand_singles()
        pending, parser, streams = self._pending, self._parser, self._streams
        if not pending.n:
            return
        assert parser is not None
        self._pending, self._parser, self._streams = _Pending(), None, {}
        parsed = parser.finish()
        rows, counts, codecs, base_offsets, base_ts, max_ts, lat = pending.columns()
        count_list = counts.tolist()
        full, inplace = reader_findings(pending, count_list, codecs.tolist(), streams, parsed)
        for i, sr in streams.items():
            if sr.failure is not None and sr.failure.at_open:
                full[i] = (D3_CODEC_OPEN, {"cause": sr.failure.cause})
                # the in-place reader of a count-0 batch is empty: it never opens the codec
                inplace[i] = full[i] if count_list[i] != 0 else None
        row_list = rows.tolist()
        decoded = self._decoded
        for row, n in zip(row_list, parsed.batch_n.tolist(), strict=True):
            decoded[row] = n
        if any(full) or any(inplace):
            for i, (f, g) in enumerate(zip(full, inplace, strict=True)):
                row = row_list[i]
                if f is not None:
                    self._full[row] = f
                    self._kinds[row] = "codec" if f[0].step == "D3.codec" else "records"
                    self._decode_errors[row] = f[0].render(**f[1])
                self._inplace[row] = g
        table = _records_table(parsed, self.topic, self.partition, base_offsets, base_ts,
                               max_ts, lat)
        self.records_added += table.num_rows
        self._record_tables.append(table)

    def take(self) -> tuple[pa.Table, pa.Table]:
        """Return ``(records, batches)`` accumulated so far and start afresh."""
        self.flush()
        records = (pa.concat_tables(self._record_tables) if self._record_tables
                   else RECORDS_SCHEMA.empty_table())
        parts = []
        for block in self._blocks:
            if isinstance(block, list):
                cols = list(zip(*block, strict=True))
                arrays = [pa.array(col, BATCHES_SCHEMA.field(i).type)
                          for i, col in enumerate(cols)]
            else:
                arrays = [pa.array(block[name], BATCHES_SCHEMA.field(name).type)
                          for name in _ROW_COLUMNS]
            parts.append(pa.Table.from_arrays(arrays, schema=_ROWS_SCHEMA))
        rows = pa.concat_tables(parts) if parts else _ROWS_SCHEMA.empty_table()
        decode_check, decode_params = _finding_columns(self._full)
        inplace_check, inplace_params = _finding_columns(self._inplace)
        tail = {
            "decode_error": pa.array(self._decode_errors, pa.string()),
            "records_decoded": pa.array(self._decoded, pa.int32()),
            "decode_kind": pa.array(self._kinds, pa.string()),
            "decode_check": decode_check, "decode_params": decode_params,
            "inplace_check": inplace_check, "inplace_params": inplace_params,
        }
        batches = pa.Table.from_arrays([*rows.columns, *(tail[name] for name in _TAIL)],
                                       schema=BATCHES_SCHEMA)
        self._record_tables = []
        self._blocks = []
        self._nrows = 0
        for lst in (self._decode_errors, self._decoded, self._kinds, self._full,
                    self._inplace):
            lst.clear()
        return records, batches

    # -- the bulk path ------------------------------------------------------------------------
    def add_buffer(self, buf: bytes | bytearray | memoryview, base_position: int = 0, *,
                   start: int = 0, final: bool = True, file: str | None = None,
                   max_batches: int | None = None) -> tuple[int, int, list]:
        """Decode the complete batches of ``buf[start:]`` (concatenated, as in a segment).

        Returns ``(stop, stop_kind, issues)``: ``stop`` is the index in ``buf`` where decoding
        stopped (bytes before it are consumed); ``stop_kind`` is 0 (all consumed), 1/3 (an
        incomplete tail), 2 (an impossible length: nothing after it can be read) or -1
        (``max_batches`` reached, more batches follow).  ``base_position`` is ``buf[0]``'s
        position in its file.  With ``final=False`` an incomplete tail is left for the caller
        to extend and resubmit; with ``final=True`` it becomes a
        :class:`~kqlab.kafka.log_issues.LogIssue`.
        """
        (positions, sizes, magic, base_offset, ple, crc, attributes, last_delta, base_ts,
         max_ts, pid, epoch, base_seq, count, _, stop, stop_kind,
         stop_length) = scan_batches(buf, start, len(buf), crc=False)  # checked as parsed
        n = len(positions)
        if max_batches is not None and n > max_batches:
            n = max(max_batches, 0)
            stop, stop_kind = int(positions[n]), STOP_LIMIT
        attr = attributes.astype(np.int32) & 0xFF
        codec = attr & 0x07
        fast = ((magic == 2) & (sizes >= RECORD_BATCH_OVERHEAD) & (codec <= Codec.ZSTD))[:n]
        i = 0
        view = memoryview(buf)
        while i < n:
            # runs of fast batches go through numpy; anything else batch by batch
            j = i
            if fast[i]:
                while j < n and fast[j]:
                    j += 1
                sl = slice(i, j)
                self._add_v2_block(view, base_position, positions[sl], sizes[sl],
                                   base_offset[sl], ple[sl], crc[sl], attributes[sl],
                                   attr[sl], last_delta[sl], base_ts[sl], max_ts[sl], pid[sl],
                                   epoch[sl], base_seq[sl], count[sl])
            else:
                while j < n and not fast[j]:
                    p = int(positions[j])
                    self.add(base_position + p, bytes(view[p:p + int(sizes[j])]))
                    j += 1
            i = j
        issues = []
        if stop_kind == STOP_CORRUPT_LENGTH or (final and stop_kind in (STOP_SHORT,
                                                                        STOP_TRUNCATED)):
            issue = stop_issue(stop_kind, base_position + stop, len(buf) - stop, stop_length,
                               file)
            issues.append(issue)
        return stop, stop_kind, issues

    def _add_v2_block(self, view: memoryview, base_position: int, positions: np.ndarray,
                      sizes: np.ndarray, base_offset: np.ndarray, ple: np.ndarray,
                      crc: np.ndarray, attributes: np.ndarray, attr: np.ndarray,
                      last_delta: np.ndarray, base_ts: np.ndarray, max_ts: np.ndarray,
                      pid: np.ndarray, epoch: np.ndarray, base_seq: np.ndarray,
                      count: np.ndarray) -> None:
        """Rows for a run of well-formed v2 batches, whose records (and CRCs) the parser reads
        now, batch by batch, while each batch is in the cache."""
        m = len(positions)
        codec = attr & 0x07
        lat = (attr & TIMESTAMP_TYPE_MASK) != 0
        row0 = self._nrows
        self._hand_singles()
        first = self._pending.add_run(
            (np.arange(row0, row0 + m, dtype=np.int64), count, codec, base_offset, base_ts,
             max_ts, lat), view, positions + RECORD_BATCH_OVERHEAD, positions + sizes)
        # the value buffer's first capacity: the run's bytes, which bound uncompressed values;
        # compressed records usually decode to several times their size (growing a buffer of
        # tens of MB costs page faults and, when it moves, a copy; untouched capacity costs
        # nothing and is given back when the chunk is finished)
        compressed = bool(codec.any())
        run_bytes = int(sizes.sum())
        parser = self._parser_for(max(run_bytes, min(run_bytes * COMPRESSED_RESERVE,
                                                     COMPRESSED_RESERVE_MAX))
                                  if compressed else run_bytes)
        crc_valid = np.zeros(m, dtype=bool)
        read = None
        if compressed:
            codecs = codec.tolist()

            def read(k: int) -> tuple[bytes, bool]:
                return self._read(first + k, codecs[k])

        parser.add_batches(view, positions, sizes, crc, count, codec, read, crc_valid)
        self._blocks.append({
            "topic": np.full(m, self.topic, dtype=object),
            "partition": np.full(m, self.partition, dtype=np.int32),
            "batch_offset": base_offset, "last_offset_delta": last_delta,
            "magic": np.full(m, 2, dtype=np.int8),
            "compression": _CODEC_NAMES[codec],
            "timestamp_type": lat.astype(np.int8),
            "is_transactional": (attr & TRANSACTIONAL_MASK) != 0,
            "is_control": (attr & CONTROL_MASK) != 0,
            "producer_id": pid, "producer_epoch": epoch, "base_sequence": base_seq,
            "partition_leader_epoch": ple, "record_count": count, "size_bytes": sizes,
            "first_timestamp": base_ts, "max_timestamp": max_ts, "crc_valid": crc_valid,
            "framing": np.full(m, self.framing, dtype=object),
            "position": positions + base_position, "attributes": attributes, "crc": crc,
        })
        none: list[None] = [None] * m
        self._decode_errors.extend(none)
        self._kinds.extend(none)
        self._decoded.extend([0] * m)
        self._full.extend(none)
        self._inplace.extend(none)
        self._nrows += m
        if self._pending.n >= FLUSH_BATCHES:
            self.flush()


def _validity(mask: np.ndarray) -> pa.Buffer | None:
    if mask.all():
        return None
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def _binary(n: int, lengths: np.ndarray, offsets: np.ndarray, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(pa.binary(), n, [_validity(lengths >= 0), pa.py_buffer(offsets),
                                                  pa.py_buffer(data)])


def _header_keys(offsets: np.ndarray, data: bytes) -> pa.Array:
    raw = pa.Array.from_buffers(pa.binary(), len(offsets) - 1,
                                [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        # The broker never checks header keys for UTF-8 (spec §1.4) and Java decodes malformed
        # bytes to U+FFFD; do the same rather than fail the whole chunk.
        return pa.array([v.decode("utf-8", "replace") for v in raw.to_pylist()], pa.string())


def _records_table(parsed: ParsedRecords, topic: str, partition: int, base_offsets: np.ndarray,
                   base_ts: np.ndarray, max_ts: np.ndarray, lat: np.ndarray) -> pa.Table:
    counts = parsed.batch_n
    n = int(counts.sum())
    starts = np.zeros(len(counts), dtype=np.int64)
    if len(counts) > 1:
        np.cumsum(counts[:-1], out=starts[1:])
    # per record, its batch's values: np.repeat straight from the batch columns (no index)
    batch_offsets = np.repeat(base_offsets, counts)
    offsets = batch_offsets + parsed.offset_delta
    timestamps = np.repeat(base_ts, counts) + parsed.ts_delta
    if lat.any():
        lat_rec = np.repeat(lat, counts)
        timestamps = np.where(lat_rec, np.repeat(max_ts, counts), timestamps)
        timestamp_type = lat_rec.astype(np.int8)
    else:
        timestamp_type = np.zeros(n, dtype=np.int8)
    batch_index = (np.arange(n, dtype=np.int64) - np.repeat(starts, counts)).astype(np.int32)
    hcount = parsed.header_count
    list_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(hcount, out=list_offsets[1:])
    assert parsed.header_key_offsets is not None and parsed.header_value_offsets is not None
    hv_len = parsed.header_value_length
    assert hv_len is not None and parsed.header_value_data is not None
    h = len(hv_len)
    header_struct = pa.StructArray.from_arrays(
        [_header_keys(parsed.header_key_offsets, parsed.header_key_data or b""),
         _binary(h, hv_len, parsed.header_value_offsets, parsed.header_value_data)],
        fields=list(HEADER_TYPE.value_type))
    headers = pa.ListArray.from_arrays(pa.array(list_offsets), header_struct, type=HEADER_TYPE)
    assert parsed.key_offsets is not None and parsed.value_offsets is not None
    return pa.table([
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pa.array(timestamps, pa.int64()),
        pa.array(timestamp_type, pa.int8()),
        _binary(n, parsed.key_length, parsed.key_offsets, parsed.key_data or b""),
        _binary(n, parsed.value_length, parsed.value_offsets, parsed.value_data or b""),
        headers,
        pa.array(batch_offsets, pa.int64()),
        pa.array(batch_index, pa.int32()),
    ], schema=RECORDS_SCHEMA)


@dataclass
class Decoded:
    """The records and batches tables of some bytes, plus what the scan had to say."""

    records: pa.Table
    batches: pa.Table
    issues: list  # list[kqlab.kafka.log_issues.LogIssue]
    #: each batch row's complete bytes, when the reader was asked to keep them
    raw: list[bytes] | None = None


def decode_batches(batches: Iterable[bytes], *, topic: str = "", partition: int = -1
                   ) -> Decoded:
    """Decode complete batches (each ``bytes`` starting at its baseOffset) into Arrow tables."""
    builder = TableBuilder(topic, partition)
    for b in batches:
        builder.add(None, b)
    records, table = builder.take()
    return Decoded(records, table, [])


def decode_records(data: bytes, *, topic: str = "", partition: int = -1,
                   threads: int | None = None) -> Decoded:
    """Decode a buffer of concatenated batches (a produce request's records, a segment slice);
    ``threads``: see :func:`decode_threads`."""
    builder = TableBuilder(topic, partition, threads=threads)
    _, _, issues = builder.add_buffer(data)
    records, table = builder.take()
    return Decoded(records, table, issues)
