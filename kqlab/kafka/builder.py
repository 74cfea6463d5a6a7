"""Encoding magic v2 record batches (Java ``MemoryRecordsBuilder`` / ``DefaultRecord.writeTo``).

Used for fixtures, the demo topic and tests.  Every header field can be overridden — including
ones a well-behaved producer never gets wrong (``last_offset_delta``, ``records_count``, ``crc``)
— so tests can build exactly the malformed batches the broker rejects.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from kqlab.errors import CodecError
from kqlab.kafka.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    V2_HEADER,
)
from kqlab.kafka.checksums import crc32c
from kqlab.kafka.compression import Codec, compress
from kqlab.kafka.varint import encode_varint, encode_varlong, size_of_varint, size_of_varlong

HeaderLike = tuple[str | bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One record to encode.  ``timestamp=None`` uses the batch's base timestamp."""

    value: bytes | None = None
    key: bytes | None = None
    headers: tuple[HeaderLike, ...] = ()
    timestamp: int | None = None
    #: position-independent overrides for tests
    offset_delta: int | None = None
    attributes: int = 0


def _hbytes(k: str | bytes) -> bytes:
    return k.encode() if isinstance(k, str) else k


def encode_record(rec: Record, offset_delta: int, timestamp_delta: int) -> bytes:
    """``DefaultRecord.writeTo``: the length varint, then the body."""
    body = bytearray()
    body.append(rec.attributes & 0xFF)
    body += encode_varlong(timestamp_delta)
    body += encode_varint(offset_delta)
    for part in (rec.key, rec.value):
        if part is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(part))
            body += part
    body += encode_varint(len(rec.headers))
    for hk, hv in rec.headers:
        kb = _hbytes(hk)
        body += encode_varint(len(kb))
        body += kb
        if hv is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(hv))
            body += hv
    return encode_varint(len(body)) + bytes(body)


def record_size(rec: Record, offset_delta: int, timestamp_delta: int) -> int:
    """Bytes :func:`encode_record` writes, without encoding (``DefaultRecord.sizeInBytes``)."""
    body = 1 + size_of_varlong(timestamp_delta) + size_of_varint(offset_delta)
    for part in (rec.key, rec.value):
        body += size_of_varint(-1) if part is None else size_of_varint(len(part)) + len(part)
    body += size_of_varint(len(rec.headers))
    for hk, hv in rec.headers:
        kb = _hbytes(hk)
        body += size_of_varint(len(kb)) + len(kb)
        body += size_of_varint(-1) if hv is None else size_of_varint(len(hv)) + len(hv)
    return size_of_varint(body) + body


def control_record(*, commit: bool, coordinator_epoch: int = 0, timestamp: int | None = None
                   ) -> Record:
    """A transaction marker record: key = (version 0, type 1 commit / 0 abort)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return Record(value=value, key=key, timestamp=timestamp)


@dataclass
class BatchBuilder:
    """Collects records and encodes one v2 batch.

    Examples
    --------
    >>> b = BatchBuilder(base_timestamp=1700000000000)
    >>> b.append(Record(value=b"v", key=b"k"))
    >>> data = b.build()
    >>> len(data), b.estimated_size() == len(data)
    (70, True)
    """

    codec: Codec | int = Codec.NONE
    base_offset: int = 0
    base_timestamp: int | None = None
    max_timestamp: int | None = None
    timestamp_type: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    transactional: bool = False
    control: bool = False
    delete_horizon: bool = False
    partition_leader_epoch: int = -1
    compression_level: int | None = None
    snappy_framing: str = "xerial"
    #: overrides that make malformed batches (None = the consistent value)
    last_offset_delta: int | None = None
    records_count: int | None = None
    crc: int | None = None
    extra_attributes: int = 0
    records: list[Record] = field(default_factory=list)

    def append(self, record: Record) -> None:
        """Add a record (its position is its offset delta unless it overrides it)."""
        self.records.append(record)

    def _base_ts(self) -> int:
        if self.base_timestamp is not None:
            return self.base_timestamp
        stamps = [r.timestamp for r in self.records if r.timestamp is not None]
        return stamps[0] if stamps else int(time.time() * 1000)

    def _payload_parts(self) -> tuple[list[bytes], int]:
        base_ts = self._base_ts()
        parts = []
        for i, r in enumerate(self.records):
            ts = base_ts if r.timestamp is None else r.timestamp
            parts.append(encode_record(r, i if r.offset_delta is None else r.offset_delta,
                                       ts - base_ts))
        return parts, base_ts

    def estimated_size(self) -> int:
        """Exact size of :meth:`build` for an uncompressed batch (an upper bound is not needed)."""
        if Codec(self.codec) is not Codec.NONE:
            raise CodecError("sizes are only predictable for uncompressed batches")
        base_ts = self._base_ts()
        total = V2_HEADER.size
        for i, r in enumerate(self.records):
            ts = base_ts if r.timestamp is None else r.timestamp
            total += record_size(r, i if r.offset_delta is None else r.offset_delta,
                                 ts - base_ts)
        return total

    def build(self) -> bytes:
        """Encode the batch."""
        codec = Codec(self.codec)
        parts, base_ts = self._payload_parts()
        payload = b"".join(parts)
        if codec is not Codec.NONE:
            payload = compress(codec, payload, level=self.compression_level,
                               snappy_framing=self.snappy_framing)
        n = len(self.records)
        stamps = [base_ts if r.timestamp is None else r.timestamp for r in self.records]
        max_ts = self.max_timestamp if self.max_timestamp is not None else (
            max(stamps) if stamps else base_ts)
        attributes = (int(codec) | (TIMESTAMP_TYPE_MASK if self.timestamp_type == 1 else 0)
                      | (TRANSACTIONAL_MASK if self.transactional else 0)
                      | (CONTROL_MASK if self.control else 0)
                      | (DELETE_HORIZON_MASK if self.delete_horizon else 0)
                      | self.extra_attributes)
        last_delta = n - 1 if self.last_offset_delta is None else self.last_offset_delta
        count = n if self.records_count is None else self.records_count
        header = bytearray(V2_HEADER.pack(
            self.base_offset, V2_HEADER.size - 12 + len(payload), self.partition_leader_epoch,
            2, 0, attributes, last_delta, base_ts, max_ts, self.producer_id,
            self.producer_epoch, self.base_sequence, count))
        data = header + payload
        crc = crc32c(bytes(data[ATTRIBUTES_OFFSET:])) if self.crc is None else self.crc
        struct.pack_into(">I", data, 17, crc)
        return bytes(data)


def build_batch(records: Sequence[Record | bytes], **options: object) -> bytes:
    """Encode ``records`` (``Record`` objects or plain values) as one v2 batch.

    ``options`` are :class:`BatchBuilder` fields (``codec``, ``producer_id`` ...).

    Examples
    --------
    >>> data = build_batch([Record(key=b"k", value=b"v")], base_timestamp=1700000000000)
    >>> data.hex()[34:42]
    'e99b8dd8'
    """
    b = BatchBuilder(**options)  # type: ignore[arg-type]
    for r in records:
        b.append(r if isinstance(r, Record) else Record(value=r))
    return b.build()


def rewrite_header(data: bytes, *, fix_crc: bool = True, **fields: int) -> bytes:
    """Overwrite v2 header fields of an encoded batch (as upstream tests do), optionally re-CRC.

    Field names are those of :class:`~kqlab.kafka.batch.RecordBatchHeader`.
    """
    names = ["base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
             "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
             "producer_id", "producer_epoch", "base_sequence", "records_count"]
    values = list(V2_HEADER.unpack_from(data, 0))
    for k, v in fields.items():
        if k not in names:
            raise CodecError(f"unknown header field {k!r}; use one of {names}")
        values[names.index(k)] = v
    out = bytearray(data)
    V2_HEADER.pack_into(out, 0, *values)
    if fix_crc and "crc" not in fields:
        struct.pack_into(">I", out, 17, crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)
