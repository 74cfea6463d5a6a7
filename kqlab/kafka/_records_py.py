"""Pure-Python reference parser for the records inside magic v2 batches (spec §1.4, §3.D.3).

This module is the documented reference; ``kqlab.kafka._crecords`` (a C extension, when it
builds) implements the same function and the tests hold the two equal.  ``records_parser``
picks one.

``parse_records(regions, counts, modes, with_data, failed)`` walks the (decompressed) records
region of each batch and returns a :class:`ParsedRecords` of flat columns over all batches, so
the caller builds Arrow arrays once per chunk instead of once per batch.

Three modes (:class:`ReadMode`), one per reader the broker uses (``docs/kafka-4x-record-
structure.md``):

* ``BUFFER`` — ``DefaultRecord.readFrom(ByteBuffer)`` over the batch's own buffer (uncompressed
  batches, every path): the length prefix must fit the remaining bytes and match the bytes
  consumed, the header count may not exceed the remaining bytes; a length varint that is too
  long escapes as an ``IllegalArgumentException`` (UNKNOWN_SERVER_ERROR);
* ``STREAM`` — ``DefaultRecord.readFrom(InputStream)`` (compressed batches the broker rebuilds):
  each body is read into a buffer of exactly its declared length and parsed inside it;
* ``PARTIAL`` — ``DefaultRecord.readPartiallyFrom`` (compressed batches kept in place): key,
  value and header bytes are only skipped and the length prefix is never used.

``failed`` says, per batch, that the region is what a failing codec delivered: the first read
past its end throws on the broker (UNKNOWN_SERVER_ERROR) instead of meeting a clean end of
stream.

``codecs`` and ``read`` let the parser decompress: with ``codecs`` (one codec id per region),
a region whose id is not 0 is a batch's *compressed* records stream, and what is parsed is
``read(i)``: a ``(data, failed)`` pair, the bytes the broker's codec stream delivers and
whether it failed after them (``kqlab.kafka.compression.read_stream``; ``failed[i]`` is not
used for such a region).  This reference calls ``read`` for every compressed region; the C
kernel decompresses a zstd region itself when every frame of it decodes whole (``read`` would
then return exactly those bytes and no failure) and calls ``read`` for anything else, so the
caller's reader stays the one definition of what a damaged stream delivers.

A structural error stops a batch: its ``batch_n`` says how many records came before it and
``batch_error`` holds ``(kind, a, b)`` with a kind from :class:`ParseErrorKind`.  Which broker
check a kind is, and its text, is data in :mod:`kqlab.kafka.checks.structure`, so the C and
Python parsers only agree on numbers.
"""

from __future__ import annotations

import enum
from array import array
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np


class ReadMode(enum.IntEnum):
    """Which of the broker's record readers a region is read with (module docstring)."""

    PARTIAL = 0  # DefaultRecord.readPartiallyFrom: compressed, appended in place
    BUFFER = 1  # DefaultRecord.readFrom(ByteBuffer): uncompressed
    STREAM = 2  # DefaultRecord.readFrom(InputStream): compressed, rebuilt


#: ``ByteBuffer.allocate`` of a record body this large fails on the stock broker heap
#: (``-Xmx1G``, kafka-server-start.sh): OutOfMemoryError, UNKNOWN_SERVER_ERROR.  Smaller bodies
#: are assumed to be allocated (the real limit is the broker's free heap).
BODY_ALLOCATION_LIMIT = 1 << 30


class ParseErrorKind(enum.IntEnum):
    """What stopped the reading of a batch's records (each maps to one broker check)."""

    PREMATURE_EOF = 1  # the region ended before ``count`` records were read
    SIZE_EXCEEDS_REMAINING = 2  # a = declared size, b = remaining bytes (BUFFER)
    SIZE_MISMATCH = 3  # a = declared size, b = bytes actually read
    NEGATIVE_HEADER_COUNT = 4  # a = header count
    HEADER_COUNT_EXCEEDS_REMAINING = 5  # a = header count
    NEGATIVE_HEADER_KEY = 6  # a = header key length
    INVALID_STRUCTURE = 7  # varint too long / a length running past the end
    RECORDS_REMAINING = 8  # bytes left after ``count`` records
    INVALID_COUNT = 9  # a = count (negative)
    SKIP_EOF = 10  # PARTIAL: skipping key/value/header bytes ran past the end; a = bytes left
    LENGTH_TOO_LONG = 11  # BUFFER: the length varint has 5 continuation bytes; a = Java's value
    PAYLOAD_EOF = 12  # STREAM: fewer bytes than the declared size; a = size, b = bytes left
    CODEC_READ = 13  # the reader needed a byte past what a failing codec delivered
    CODEC_TAIL = 14  # ... to check that nothing follows the last record
    BODY_TOO_LARGE = 15  # STREAM: the body buffer cannot be allocated; a = size


class ParsedRecords(NamedTuple):
    """Flat columns for the records of several batches (``N`` records, ``H`` headers)."""

    batch_n: np.ndarray  # int64[batches]: records parsed per batch
    batch_error: list[tuple[int, int, int] | None]  # per batch: (kind, a, b) or None
    ts_delta: np.ndarray  # int64[N]
    offset_delta: np.ndarray  # int32[N]
    attributes: np.ndarray  # int8[N]
    key_length: np.ndarray  # int32[N], -1 = null
    value_length: np.ndarray  # int32[N], -1 = null
    header_count: np.ndarray  # int32[N]
    # The data buffers are only filled when ``with_data`` (else None): Arrow-style int32 offsets
    # (length N+1 / H+1) over one concatenated bytes buffer; null entries are empty.
    key_offsets: np.ndarray | None
    key_data: bytes | None
    value_offsets: np.ndarray | None
    value_data: bytes | None
    header_key_offsets: np.ndarray | None
    header_key_data: bytes | None
    header_value_offsets: np.ndarray | None
    header_value_data: bytes | None
    header_value_length: np.ndarray | None  # int32[H], -1 = null


class _StructureError(Exception):
    """Internal: a varint too long or a length past the end (Java's IllegalArgument/Underflow)."""


class _Underflow(_StructureError):
    """Internal: the buffer ended inside a varint (Java's BufferUnderflowException)."""


class _TooLong(_StructureError):
    """Internal: a varint with continuation bits on its last byte; ``value`` is the 32-bit
    value Java's ``illegalVarintException`` prints."""

    def __init__(self, value: int):
        super().__init__(value)
        self.value = value


def _varint(buf: bytes | memoryview, pos: int, end: int, limit: int) -> tuple[int, int]:
    """Zig-zag varint (limit 5 → int32, 10 → int64) with Java's truncation rules."""
    u = 0
    shift = 0
    for _ in range(limit):
        if pos >= end:
            raise _Underflow
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            if limit == 5:
                u &= 0xFFFFFFFF
            else:
                u &= 0xFFFFFFFFFFFFFFFF
            return (u >> 1) ^ -(u & 1), pos
        shift += 7
    raise _TooLong(u & 0xFFFFFFFF)


class _Stop(Exception):
    """Internal: the record cannot be read; ``err`` is the batch's (kind, a, b)."""

    def __init__(self, kind: int, a: int = 0, b: int = 0):
        super().__init__(kind)
        self.err = (int(kind), a, b)


def _mode_list(modes: int | Sequence[int], n: int) -> list[int]:
    if isinstance(modes, int | np.integer):
        return [int(modes)] * n
    out = [int(m) for m in modes]
    if len(out) != n:
        raise ValueError("modes must be one mode or one per region")
    return out


#: ``read(i) -> (data, failed)``: what the broker's codec stream delivers from region ``i``
StreamReader = Callable[[int], tuple[bytes | memoryview, bool]]


def parse_records(regions: Sequence[bytes | memoryview], counts: Sequence[int],
                  modes: int | Sequence[int] = ReadMode.BUFFER, with_data: bool = True,
                  failed: Sequence[bool] | None = None, codecs: Sequence[int] | None = None,
                  read: StreamReader | None = None) -> ParsedRecords:
    """Parse each region's ``count`` records in its :class:`ReadMode` (a bool is accepted:
    True is BUFFER, False PARTIAL); compressed regions (``codecs``) are parsed from what
    ``read`` delivers.  See the module docstring."""
    if len(regions) != len(counts):
        raise ValueError("regions and counts must have the same length")
    mode_of = _mode_list(modes, len(regions))
    if failed is not None and len(failed) != len(regions):
        raise ValueError("failed must have one flag per region")
    if codecs is not None:
        if len(codecs) != len(regions):
            raise ValueError("codecs must have one codec id per region")
        if read is None:
            raise ValueError("codecs need a read function")
    batch_n = np.zeros(len(regions), dtype=np.int64)
    batch_error: list[tuple[int, int, int] | None] = []
    ts_delta = array("q")
    offset_delta = array("i")
    attributes = array("b")
    key_length = array("i")
    value_length = array("i")
    header_count = array("i")
    key_offsets = array("i", [0])
    value_offsets = array("i", [0])
    hk_offsets = array("i", [0])
    hv_offsets = array("i", [0])
    hv_length = array("i")
    key_data = bytearray()
    value_data = bytearray()
    hk_data = bytearray()
    hv_data = bytearray()

    for bi, (buf, count) in enumerate(zip(regions, counts, strict=True)):
        mode = mode_of[bi]
        fail = bool(failed[bi]) if failed is not None else False
        if codecs is not None and codecs[bi]:
            # the codec stream is opened before the count is looked at (wrapForInput)
            buf, fail = read(bi)  # type: ignore[misc]
            fail = bool(fail)
        partial = mode == ReadMode.PARTIAL
        stream = mode == ReadMode.STREAM
        end = len(buf)
        pos = 0
        n = 0
        err: tuple[int, int, int] | None = None
        if count < 0:
            batch_error.append((ParseErrorKind.INVALID_COUNT, count, 0))
            continue
        # past the end of the region: the codec's failure, or a clean end of stream
        eof_struct = ParseErrorKind.CODEC_READ if fail else ParseErrorKind.INVALID_STRUCTURE
        while n < count:
            try:
                # -- length prefix --
                try:
                    size, pos = _varint(buf, pos, end, 5)
                except _Underflow:
                    raise _Stop(ParseErrorKind.CODEC_READ if fail
                                else ParseErrorKind.PREMATURE_EOF) from None
                except _TooLong as exc:
                    if mode == ReadMode.BUFFER:
                        raise _Stop(ParseErrorKind.LENGTH_TOO_LONG, exc.value) from None
                    raise _Stop(ParseErrorKind.PREMATURE_EOF) from None
                if stream:
                    if size < 0:  # ByteBuffer.allocate: IllegalArgumentException
                        raise _Stop(ParseErrorKind.PREMATURE_EOF)
                    if size >= BODY_ALLOCATION_LIMIT:
                        raise _Stop(ParseErrorKind.BODY_TOO_LARGE, size)
                    if size > end - pos:
                        if fail:
                            raise _Stop(ParseErrorKind.CODEC_READ)
                        raise _Stop(ParseErrorKind.PAYLOAD_EOF, size, end - pos)
                    limit = pos + size  # the body is parsed inside its own buffer
                elif not partial:
                    if size > end - pos:
                        raise _Stop(ParseErrorKind.SIZE_EXCEEDS_REMAINING, size, end - pos)
                    limit = end
                else:
                    limit = end
                start = pos
                eof = eof_struct if partial else ParseErrorKind.INVALID_STRUCTURE
                try:
                    if pos >= limit:
                        raise _Stop(eof)
                    attr = buf[pos]
                    pos += 1
                    tsd, pos = _varint(buf, pos, limit, 10)
                    offd, pos = _varint(buf, pos, limit, 5)
                    klen, pos = _varint(buf, pos, limit, 5)
                    kstart = pos
                    if klen >= 0:
                        pos = _skip(pos, klen, limit, partial, fail)
                    vlen, pos = _varint(buf, pos, limit, 5)
                    vstart = pos
                    if vlen >= 0:
                        pos = _skip(pos, vlen, limit, partial, fail)
                    hcount, pos = _varint(buf, pos, limit, 5)
                    if hcount < 0:
                        raise _Stop(ParseErrorKind.NEGATIVE_HEADER_COUNT, hcount)
                    if not partial and hcount > limit - pos:
                        raise _Stop(ParseErrorKind.HEADER_COUNT_EXCEEDS_REMAINING, hcount)
                    hdrs = []
                    for _ in range(hcount):
                        hklen, pos = _varint(buf, pos, limit, 5)
                        if hklen < 0:
                            raise _Stop(ParseErrorKind.NEGATIVE_HEADER_KEY, hklen)
                        hkstart = pos
                        pos = _skip(pos, hklen, limit, partial, fail)
                        hvlen, pos = _varint(buf, pos, limit, 5)
                        hvstart = pos
                        if hvlen >= 0:
                            pos = _skip(pos, hvlen, limit, partial, fail)
                        hdrs.append((hkstart, hklen, hvstart, hvlen))
                except _Underflow:
                    raise _Stop(eof) from None
                except _StructureError:  # a varint too long (IllegalArgumentException)
                    raise _Stop(ParseErrorKind.INVALID_STRUCTURE) from None
                if not partial and pos - start != size:
                    raise _Stop(ParseErrorKind.SIZE_MISMATCH, size, pos - start)
            except _Stop as stop:
                err = stop.err
                break
            # -- the record is whole: emit it --
            n += 1
            ts_delta.append(tsd)
            offset_delta.append(offd)
            attributes.append(attr - 256 if attr > 127 else attr)
            key_length.append(klen if klen >= 0 else -1)
            value_length.append(vlen if vlen >= 0 else -1)
            header_count.append(hcount)
            if with_data:
                if klen > 0:
                    key_data += buf[kstart:kstart + klen]
                key_offsets.append(len(key_data))
                if vlen > 0:
                    value_data += buf[vstart:vstart + vlen]
                value_offsets.append(len(value_data))
                for hkstart, hklen, hvstart, hvlen in hdrs:
                    hk_data += buf[hkstart:hkstart + hklen]
                    hk_offsets.append(len(hk_data))
                    if hvlen > 0:
                        hv_data += buf[hvstart:hvstart + hvlen]
                    hv_offsets.append(len(hv_data))
                    hv_length.append(hvlen if hvlen >= 0 else -1)
        if err is None and n == count:
            if pos != end:
                err = (int(ParseErrorKind.RECORDS_REMAINING), 0, 0)
            elif fail:
                err = (int(ParseErrorKind.CODEC_TAIL), 0, 0)
        batch_n[bi] = n
        batch_error.append(err)

    def arr(a: array, dtype: type) -> np.ndarray:
        return np.frombuffer(a, dtype=dtype).copy() if len(a) else np.zeros(0, dtype=dtype)

    return ParsedRecords(
        batch_n=batch_n,
        batch_error=batch_error,
        ts_delta=arr(ts_delta, np.int64),
        offset_delta=arr(offset_delta, np.int32),
        attributes=arr(attributes, np.int8),
        key_length=arr(key_length, np.int32),
        value_length=arr(value_length, np.int32),
        header_count=arr(header_count, np.int32),
        key_offsets=arr(key_offsets, np.int32) if with_data else None,
        key_data=bytes(key_data) if with_data else None,
        value_offsets=arr(value_offsets, np.int32) if with_data else None,
        value_data=bytes(value_data) if with_data else None,
        header_key_offsets=arr(hk_offsets, np.int32) if with_data else None,
        header_key_data=bytes(hk_data) if with_data else None,
        header_value_offsets=arr(hv_offsets, np.int32) if with_data else None,
        header_value_data=bytes(hv_data) if with_data else None,
        header_value_length=arr(hv_length, np.int32) if with_data else None,
    )


def _skip(pos: int, length: int, limit: int, partial: bool, fail: bool) -> int:
    """Step over ``length`` key/value/header bytes: past the end, the full readers' slice
    fails (IllegalArgumentException: invalid structure) and the partial reader's skip meets
    the end of stream (or the codec's failure)."""
    stop = pos + length
    if stop > limit:
        if not partial:
            raise _Stop(ParseErrorKind.INVALID_STRUCTURE)
        if fail:
            raise _Stop(ParseErrorKind.CODEC_READ)
        raise _Stop(ParseErrorKind.SKIP_EOF, stop - limit)
    return stop


class RecordsParser:
    """One :func:`parse_records` call, fed piece by piece: ``add`` pieces in order (each is
    parsed when added, so ``read`` runs then), ``finish`` once for the columns one call over
    everything would return.

    ``add_batches`` is the decoder's bulk form: whole v2 batches of a buffer given by position
    and size, read with the broker's full reader (the buffer reader for codec 0, the stream
    reader otherwise), each batch's CRC-32C checked into ``crc_valid`` as it is read.  The C
    kernel checks each CRC right before parsing that batch, so a segment is read from memory
    once instead of twice (once by the scan, once by the parser).  ``reserve`` is a capacity
    hint for the C kernel's value buffer and ``threads`` how many threads its ``add_batches``
    decompresses zstd batches on; neither changes any result, nor anything here.
    """

    def __init__(self, with_data: bool = True, reserve: int = 0, threads: int = 1):
        self.with_data = with_data
        self._pieces: list[ParsedRecords] = []
        self._closed = False

    @property
    def batches(self) -> int:
        """Batches added so far."""
        return sum(len(p.batch_n) for p in self._pieces)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("RecordsParser is finished (or an error left it incomplete)")

    def add(self, regions: Sequence[bytes | memoryview], counts: Sequence[int],
            modes: int | Sequence[int] = ReadMode.BUFFER, failed: Sequence[bool] | None = None,
            codecs: Sequence[int] | None = None, read: StreamReader | None = None) -> None:
        """Parse more regions (``read(i)`` indexes this call's regions)."""
        self._check_open()
        try:
            self._pieces.append(parse_records(regions, counts, modes, self.with_data, failed,
                                              codecs, read))
        except BaseException:
            self._closed = True
            raise

    def add_batches(self, buf, positions: np.ndarray, sizes: np.ndarray, crcs: np.ndarray,
                    counts: np.ndarray, codecs: np.ndarray, read: StreamReader | None,
                    crc_valid: np.ndarray) -> None:
        """Parse whole v2 batches of ``buf`` (see the class docstring)."""
        from kqlab.kafka._scan_py import crc32c

        self._check_open()
        view = memoryview(buf).cast("B")
        pos = [int(p) for p in positions]
        size = [int(s) for s in sizes]
        codec = [int(c) for c in codecs]
        for k, (p, s, c) in enumerate(zip(pos, size, codec, strict=True)):
            if p < 0 or s < 61 or p + s > len(view) or not 0 <= c <= 254:
                self._closed = True
                raise ValueError(f"add_batches: batch {k} (position {p}, size {s}, codec {c}) "
                                 "is not a v2 batch inside the buffer")
        if any(codec) and read is None:
            self._closed = True
            raise ValueError("codecs need a read function")
        for k, (p, s) in enumerate(zip(pos, size, strict=True)):
            crc_valid[k] = crc32c(view[p + 21:p + s]) == int(crcs[k])
        self.add([view[p + 61:p + s] for p, s in zip(pos, size, strict=True)],
                 [int(c) for c in counts],
                 [ReadMode.STREAM if c else ReadMode.BUFFER for c in codec], None,
                 codec if any(codec) else None, read)

    def finish(self) -> ParsedRecords:
        """The columns over everything added; the parser is spent afterwards."""
        self._check_open()
        self._closed = True
        pieces = self._pieces
        if not pieces:
            return parse_records([], [], ReadMode.BUFFER, self.with_data)
        if len(pieces) == 1:
            return pieces[0]

        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(p, name) for p in pieces])

        def offsets(name: str) -> np.ndarray:
            out = [np.zeros(1, dtype=np.int64)]
            base = 0
            for p in pieces:
                o = getattr(p, name)
                out.append(o[1:].astype(np.int64) + base)
                base += int(o[-1])
            if base > 2**31 - 1:
                raise OverflowError("parse_records: a concatenated key/value/header data "
                                    "buffer would exceed 2**31-1 bytes (int32 offsets); parse "
                                    "fewer batches per call")
            return np.concatenate(out).astype(np.int32)

        def data(name: str) -> bytes:
            return b"".join(getattr(p, name) for p in pieces)

        with_data = self.with_data
        return ParsedRecords(
            batch_n=cat("batch_n"),
            batch_error=[e for p in pieces for e in p.batch_error],
            ts_delta=cat("ts_delta"), offset_delta=cat("offset_delta"),
            attributes=cat("attributes"), key_length=cat("key_length"),
            value_length=cat("value_length"), header_count=cat("header_count"),
            key_offsets=offsets("key_offsets") if with_data else None,
            key_data=data("key_data") if with_data else None,
            value_offsets=offsets("value_offsets") if with_data else None,
            value_data=data("value_data") if with_data else None,
            header_key_offsets=offsets("header_key_offsets") if with_data else None,
            header_key_data=data("header_key_data") if with_data else None,
            header_value_offsets=offsets("header_value_offsets") if with_data else None,
            header_value_data=data("header_value_data") if with_data else None,
            header_value_length=cat("header_value_length") if with_data else None,
        )
