"""Pure-Python reference for ``kqlab.kafka._crecords.scan_batches`` and ``crc32c``.

This module is the specification of the C versions: the tests hold ``_crecords.scan_batches``
equal to :func:`scan_batches` field by field (values and dtypes) on any input.

``scan_batches(buf, start, end)`` walks ``buf[start:end]`` batch by batch with the broker's
scanning rules (spec §1.1; :func:`kqlab.kafka.log.scan_buffer`).  At each position ``pos``, with
``r = end - pos`` bytes remaining:

* ``r == 0`` — stop, :data:`STOP_END`;
* ``r < 12`` — stop, :data:`STOP_SHORT` (too few bytes for the offset + length header);
* the big-endian int32 ``length`` at ``pos + 8`` is below 14 — stop, :data:`STOP_CORRUPT_LENGTH`;
* ``r < 17`` or ``12 + length > r`` — stop, :data:`STOP_TRUNCATED`;
* otherwise a batch occupies ``[pos, pos + 12 + length)``; it is recorded and the walk goes on
  at its end.  A magic byte outside 0..2 does *not* stop the walk: the caller labels the batch.

The result is a tuple of 15 numpy columns (one entry per batch, see :data:`COLUMNS`) followed by
``stop_pos`` (absolute), ``stop_kind`` and ``stop_length`` (the length read at ``stop_pos`` for
the corrupt-length and truncated kinds, else -1).  Positions are absolute indices into ``buf``.
The v2 header fields (``partition_leader_epoch`` .. ``records_count``) are read only for batches
with magic 2 and at least 61 bytes, and are 0 otherwise; ``crc_valid`` is True only for such a
batch whose CRC-32C over ``[pos + 21, pos + size)`` equals its ``crc`` field (legacy v0/v1
batches are False here: their CRC-32 is checked elsewhere).
"""

from __future__ import annotations

import operator
import struct

import google_crc32c
import numpy as np

STOP_END = 0
STOP_SHORT = 1
STOP_CORRUPT_LENGTH = 2
STOP_TRUNCATED = 3

LOG_OVERHEAD = 12
HEADER_SIZE_UP_TO_MAGIC = 17
MIN_RECORD_OVERHEAD = 14
V2_HEADER_SIZE = 61
CRC_START = 21  # the v2 CRC-32C covers [21, end of batch)

#: the 15 columns of the result, with their dtypes
COLUMNS: tuple[tuple[str, str], ...] = (
    ("positions", "int64"),
    ("sizes", "int64"),
    ("magic", "int8"),
    ("base_offset", "int64"),
    ("partition_leader_epoch", "int32"),
    ("crc", "uint32"),
    ("attributes", "int16"),
    ("last_offset_delta", "int32"),
    ("base_timestamp", "int64"),
    ("max_timestamp", "int64"),
    ("producer_id", "int64"),
    ("producer_epoch", "int16"),
    ("base_sequence", "int32"),
    ("records_count", "int32"),
    ("crc_valid", "bool"),
)

_OFFSET_LENGTH = struct.Struct(">qi")
_MAGIC = struct.Struct(">b")
# partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp,
# producerId, producerEpoch, baseSequence, recordsCount (bytes 12..60 of a v2 batch)
_V2_REST = struct.Struct(">ibIhiqqqhii")
_V2_ZEROS = (0,) * 10


def crc32c(buf) -> int:
    """CRC-32C (Castagnoli) of a bytes-like object, as an unsigned int.

    ``google_crc32c.value(bytes(buf))``; going through ``memoryview`` makes a non-buffer (an
    int, a str) a ``TypeError`` as in C, instead of ``bytes(5)``'s five zero bytes.
    """
    return google_crc32c.value(bytes(memoryview(buf)))


def _as_bytes_view(buf) -> memoryview:
    """A flat unsigned-byte view of ``buf`` (copied as ``bytes(buf)`` when not C-contiguous)."""
    mv = memoryview(buf)
    if not mv.c_contiguous:
        mv = memoryview(bytes(mv))
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def scan_batches(buf, start: int = 0, end: int | None = None, *, crc: bool = True) -> tuple:
    """Walk ``buf[start:end]`` batch by batch; see the module docstring for the result.
    ``crc=False`` reads the headers only (``crc_valid`` all False), for a caller that checks
    the CRCs itself while it reads the batches (``RecordsParser.add_batches``)."""
    check_crc = crc  # the name is taken by each header's crc below
    data = _as_bytes_view(buf)
    n = data.nbytes
    start = operator.index(start)
    end = n if end is None else operator.index(end)
    if not 0 <= start <= end <= n:
        raise ValueError(f"scan_batches: need 0 <= start <= end <= len(buf), got start={start}, "
                         f"end={end}, len(buf)={n}")
    rows: list[tuple] = []
    pos = start
    stop_length = -1
    while True:
        r = end - pos
        if r == 0:
            stop_kind = STOP_END
            break
        if r < LOG_OVERHEAD:
            stop_kind = STOP_SHORT
            break
        base_offset, length = _OFFSET_LENGTH.unpack_from(data, pos)
        if length < MIN_RECORD_OVERHEAD:
            stop_kind, stop_length = STOP_CORRUPT_LENGTH, length
            break
        if r < HEADER_SIZE_UP_TO_MAGIC or LOG_OVERHEAD + length > r:
            stop_kind, stop_length = STOP_TRUNCATED, length
            break
        size = LOG_OVERHEAD + length
        (magic,) = _MAGIC.unpack_from(data, pos + 16)
        if magic == 2 and size >= V2_HEADER_SIZE:
            ple, _, crc, *rest = _V2_REST.unpack_from(data, pos + 12)
            v2 = (ple, crc, *rest)
            crc_valid = check_crc and google_crc32c.value(
                bytes(data[pos + CRC_START:pos + size])) == crc
        else:
            v2 = _V2_ZEROS
            crc_valid = False
        rows.append((pos, size, magic, base_offset, *v2, crc_valid))
        pos += size
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(COLUMNS)
    arrays = tuple(np.array(col, dtype=dtype) for col, (_, dtype) in zip(columns, COLUMNS,
                                                                         strict=True))
    return (*arrays, pos, stop_kind, stop_length)
