"""Pure-Python reference parser for the records inside magic v2 batches (spec §1.4, §3.D.3).

This module is the documented reference; ``kqlab.kafka._crecords`` (a C extension, when it
builds) implements the same function and the tests hold the two equal.  ``records_parser``
picks one.

``parse_records(regions, counts, strict, with_data)`` walks the (decompressed) records region of
each batch and returns a :class:`ParsedRecords` of flat columns over all batches, so the caller
builds Arrow arrays once per chunk instead of once per batch.

Two modes mirror the broker's two readers:

* ``strict=True`` — ``DefaultRecord.readFrom``: the varint length prefix must match the bytes
  consumed, the header count may not exceed the remaining bytes (paths U and Z-rebuild);
* ``strict=False`` — ``PartialDefaultRecord`` (path Z in place): key, value and header bytes are
  only skipped and the length prefix is never compared.

A structural error stops a batch: its ``batch_n`` says how many records came before it and
``batch_error`` holds ``(kind, a, b)`` with a kind from :class:`ParseErrorKind` (message texts
are rendered by :func:`render_parse_error`, so the C and Python parsers only agree on numbers).
"""

from __future__ import annotations

import enum
from array import array
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class ParseErrorKind(enum.IntEnum):
    """Why a batch's records could not be read; every kind is INVALID_RECORD (87) by default."""

    PREMATURE_EOF = 1  # the region ended before ``count`` records were read
    SIZE_EXCEEDS_REMAINING = 2  # a = declared size, b = remaining bytes
    SIZE_MISMATCH = 3  # a = declared size, b = bytes actually read
    NEGATIVE_HEADER_COUNT = 4  # a = header count
    HEADER_COUNT_EXCEEDS_REMAINING = 5  # a = header count
    NEGATIVE_HEADER_KEY = 6  # a = header key length
    INVALID_STRUCTURE = 7  # varint too long / a length running past the end
    RECORDS_REMAINING = 8  # bytes left after ``count`` records
    INVALID_COUNT = 9  # a = count (negative)
    SKIP_EOF = 10  # partial reader: skipping key/value/header bytes ran past the end


def render_parse_error(kind: int, a: int, b: int, *, stream: bool = False) -> str:
    """The broker's exception text for a structural error (for logs: never returned to clients).

    ``stream`` selects the wording of the compressed-stream reader where it differs.
    """
    k = ParseErrorKind(kind)
    if k is ParseErrorKind.PREMATURE_EOF:
        return "Incorrect declared batch size, premature EOF reached"
    if k is ParseErrorKind.SIZE_EXCEEDS_REMAINING:
        if stream:
            return (f"Invalid record size: expected {a} bytes in record payload, but the record "
                    "payload reached EOF.")
        return (f"Invalid record size: expected {a} bytes in record payload, but instead the "
                f"buffer has only {b} remaining bytes.")
    if k is ParseErrorKind.SIZE_MISMATCH:
        return (f"Invalid record size: expected to read {a} bytes in record payload, but instead "
                f"read {b}")
    if k is ParseErrorKind.NEGATIVE_HEADER_COUNT:
        return f"Found invalid number of record headers {a}"
    if k is ParseErrorKind.HEADER_COUNT_EXCEEDS_REMAINING:
        return (f"Found invalid number of record headers. {a} is larger than the remaining size "
                "of the buffer")
    if k is ParseErrorKind.NEGATIVE_HEADER_KEY:
        return f"Invalid negative header key size {a}"
    if k is ParseErrorKind.INVALID_STRUCTURE:
        return "Found invalid record structure"
    if k is ParseErrorKind.RECORDS_REMAINING:
        return "Incorrect declared batch size, records still remaining in file"
    if k is ParseErrorKind.INVALID_COUNT:
        return f"Found invalid record count {a} in magic v2 batch"
    return "Reached end of input stream before skipping all bytes"


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


def _varint(buf: bytes, pos: int, end: int, limit: int) -> tuple[int, int]:
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
    raise _StructureError


def parse_records(regions: Sequence[bytes], counts: Sequence[int], strict: bool = True,
                  with_data: bool = True) -> ParsedRecords:
    """Parse each region's ``count`` records; see the module docstring for the two modes."""
    if len(regions) != len(counts):
        raise ValueError("regions and counts must have the same length")
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
        end = len(buf)
        pos = 0
        n = 0
        err: tuple[int, int, int] | None = None
        if count < 0:
            batch_error.append((ParseErrorKind.INVALID_COUNT, count, 0))
            continue
        while n < count:
            # -- length prefix --
            try:
                size, pos = _varint(buf, pos, end, 5)
            except _Underflow:
                err = (ParseErrorKind.PREMATURE_EOF, 0, 0)
                break
            except _StructureError:
                err = (ParseErrorKind.INVALID_STRUCTURE, 0, 0)
                break
            if strict and size > end - pos:
                err = (ParseErrorKind.SIZE_EXCEEDS_REMAINING, size, end - pos)
                break
            start = pos
            try:
                if pos >= end:
                    raise _StructureError
                attr = buf[pos]
                pos += 1
                tsd, pos = _varint(buf, pos, end, 10)
                offd, pos = _varint(buf, pos, end, 5)
                klen, pos = _varint(buf, pos, end, 5)
                kstart = pos
                if klen >= 0:
                    pos += klen
                    if pos > end:
                        err = (ParseErrorKind.SKIP_EOF if not strict
                               else ParseErrorKind.INVALID_STRUCTURE, 0, 0)
                        break
                vlen, pos = _varint(buf, pos, end, 5)
                vstart = pos
                if vlen >= 0:
                    pos += vlen
                    if pos > end:
                        err = (ParseErrorKind.SKIP_EOF if not strict
                               else ParseErrorKind.INVALID_STRUCTURE, 0, 0)
                        break
                hcount, pos = _varint(buf, pos, end, 5)
                if hcount < 0:
                    err = (ParseErrorKind.NEGATIVE_HEADER_COUNT, hcount, 0)
                    break
                if strict and hcount > end - pos:
                    err = (ParseErrorKind.HEADER_COUNT_EXCEEDS_REMAINING, hcount, 0)
                    break
                hdrs = []
                for _ in range(hcount):
                    hklen, pos = _varint(buf, pos, end, 5)
                    if hklen < 0:
                        err = (ParseErrorKind.NEGATIVE_HEADER_KEY, hklen, 0)
                        break
                    hkstart = pos
                    pos += hklen
                    if pos > end:
                        err = (ParseErrorKind.SKIP_EOF if not strict
                               else ParseErrorKind.INVALID_STRUCTURE, 0, 0)
                        break
                    hvlen, pos = _varint(buf, pos, end, 5)
                    hvstart = pos
                    if hvlen >= 0:
                        pos += hvlen
                        if pos > end:
                            err = (ParseErrorKind.SKIP_EOF if not strict
                                   else ParseErrorKind.INVALID_STRUCTURE, 0, 0)
                            break
                    hdrs.append((hkstart, hklen, hvstart, hvlen))
                if err is not None:
                    break
            except _StructureError:
                err = (ParseErrorKind.INVALID_STRUCTURE, 0, 0)
                break
            if strict and pos - start != size:
                err = (ParseErrorKind.SIZE_MISMATCH, size, pos - start)
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
        if err is None and n == count and pos != end:
            err = (ParseErrorKind.RECORDS_REMAINING, 0, 0)
        batch_n[bi] = n
        batch_error.append(None if err is None else (int(err[0]), err[1], err[2]))

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
