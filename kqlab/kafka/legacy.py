"""Legacy message sets, magic v0 and v1 (spec §1.7; Java LegacyRecord, AbstractLegacyRecordBatch).

Layout of one log entry::

    offset:int64 size:int32 crc:uint32 magic:int8 attributes:int8 [timestamp:int64, v1 only]
    keyLength:int32 key valueLength:int32 value

The CRC is CRC-32 (IEEE) over magic .. end of value.  A compressed entry is a *wrapper* whose
value is a compressed message set of inner entries: inner offsets are absolute in v0 and relative
(0..n-1) in v1, where the wrapper carries the offset of the last inner message.

A wrapper's inner set is read as Kafka's ``AbstractLegacyRecordBatch.DeepRecordsIterator`` reads
it, all at once when the iterator is built: a zstd wrapper or a null value is refused first, a
codec failure anywhere ends it (``KafkaException``), an inner message declaring fewer than 14
bytes is a ``CorruptRecordException``, and an inner message cut short simply ends the set
(``DataLogInputStream.nextBatch`` returns null): kqlab notes that last one without rejecting.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kqlab.kafka.checksums import crc32
from kqlab.kafka.compression import Codec, compress, read_stream
from kqlab.kafka.varint import to_int64

_ENTRY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
RECORD_OVERHEAD_V0 = 14
RECORD_OVERHEAD_V1 = 22
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08


class LegacyFormatError(ValueError):
    """A legacy message cannot be parsed (sizes past the end, too short)."""


@dataclass(slots=True)
class LegacyMessage:
    """One v0/v1 message: a top-level entry or an inner message of a compressed wrapper."""

    offset: int
    magic: int
    attributes: int
    timestamp: int  # -1 for v0
    key: bytes | None
    value: bytes | None
    crc: int
    crc_valid: bool
    size: int  # the entry's size field (bytes after offset+size)

    @property
    def codec(self) -> int:
        """Codec id of the attributes' low three bits."""
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """-1 for v0, else 0 CreateTime / 1 LogAppendTime."""
        if self.magic == 0:
            return -1
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    def render(self) -> str:
        """Java's ``LegacyRecordBatch.toString`` shape, used inside broker messages."""
        codec = Codec(self.codec).name if self.codec <= Codec.ZSTD else str(self.codec)
        stamp = "" if self.magic == 0 else (
            f"{'LogAppendTime' if self.timestamp_type == 1 else 'CreateTime'}={self.timestamp}, ")
        return (f"LegacyRecordBatch(offset={self.offset}, Record(magic={self.magic}, "
                f"attributes={self.attributes}, compression={codec}, crc={self.crc}, {stamp}"
                f"key={0 if self.key is None else len(self.key)} bytes, "
                f"value={0 if self.value is None else len(self.value)} bytes))")


@dataclass(slots=True)
class LegacyEntry:
    """A top-level legacy log entry and, for a compressed wrapper, its inner messages."""

    wrapper: LegacyMessage
    inner: list[LegacyMessage] | None = None
    #: deep-iteration problem (text as the broker words it), None when the entry is whole
    error: str | None = None
    #: why the broker stops: ``"decompress"`` (the codec fails: ``error`` is the Java cause),
    #: ``"zstd"`` (codec 4 in a wrapper), ``"corrupt"`` (an inner message under 14 bytes),
    #: ``"invalid"`` (InvalidRecordException); ``"ignored"`` when the inner set merely ends
    #: inside a message, which the broker accepts
    error_kind: str | None = None
    inner_positions: list[int] = field(default_factory=list)
    #: index of the first compressed inner message (the deep iterator stops there)
    nested_at: int | None = None

    @property
    def messages(self) -> list[LegacyMessage]:
        """The records this entry carries: its inner messages, or itself when uncompressed."""
        return self.inner if self.inner is not None else [self.wrapper]


def parse_message(data: bytes, pos: int = 0) -> tuple[LegacyMessage, int]:
    """Parse the entry at ``pos``; return it and the position after it."""
    end = len(data)
    if pos + 12 > end:
        raise LegacyFormatError("truncated entry header")
    offset, size = _INT64.unpack_from(data, pos)[0], _INT32.unpack_from(data, pos + 8)[0]
    body = pos + 12
    if size < RECORD_OVERHEAD_V0:
        raise LegacyFormatError(f"Record size {size} is less than the minimum record overhead "
                                f"({RECORD_OVERHEAD_V0})")
    stop = body + size
    if stop > end:
        raise LegacyFormatError(f"entry of {size} bytes runs past the end ({end - body} left)")
    _o, _s, crc, magic, attributes = _ENTRY.unpack_from(data, pos)
    p = body + 6
    if magic == 1:
        if size < RECORD_OVERHEAD_V1:
            raise LegacyFormatError(f"v1 record size {size} is less than {RECORD_OVERHEAD_V1}")
        timestamp = _INT64.unpack_from(data, p)[0]
        p += 8
    else:
        timestamp = -1
    key, p = _read_bytes(data, p, stop)
    value, p = _read_bytes(data, p, stop)
    crc_valid = crc32(data[body + 4:stop]) == crc
    return LegacyMessage(offset, magic, attributes & 0xFF, timestamp, key, value, crc, crc_valid,
                         size), stop


def _read_bytes(data: bytes, p: int, stop: int) -> tuple[bytes | None, int]:
    if p + 4 > stop:
        raise LegacyFormatError("length field runs past the end of the message")
    (n,) = _INT32.unpack_from(data, p)
    p += 4
    if n < 0:
        return None, p
    if p + n > stop:
        raise LegacyFormatError(f"field of {n} bytes runs past the end of the message")
    return data[p:p + n], p + n


def open_entry(data: bytes) -> LegacyEntry:
    """Parse one top-level entry; decompress and list a wrapper's inner messages.

    Never raises for bad *inner* data: the problem lands in ``error``/``error_kind``.
    """
    wrapper, _ = parse_message(data, 0)
    entry = LegacyEntry(wrapper)
    if wrapper.codec == Codec.NONE:
        return entry
    entry.inner = []
    if wrapper.codec == Codec.ZSTD:
        # DeepRecordsIterator: checked before anything is read (the text prints the magic)
        entry.error = ("Invalid wrapper compressionType found in legacy deep record iterator "
                       f"{wrapper.magic}")
        entry.error_kind = "zstd"
        return entry
    if wrapper.value is None:
        entry.error = ("Found invalid compressed record set with null value (magic = "
                       f"{wrapper.magic})")
        entry.error_kind = "invalid"
        return entry
    if wrapper.codec > Codec.ZSTD:
        entry.error, entry.error_kind = f"Unknown compression type id {wrapper.codec}", "invalid"
        return entry
    got = read_stream(wrapper.codec, wrapper.value, magic=wrapper.magic)
    stream = got.data
    inner: list[LegacyMessage] = []
    p = 0
    end = len(stream)
    while p < end or got.failure is not None:  # DataLogInputStream.nextBatch
        size = _INT32.unpack_from(stream, p + 8)[0] if end - p >= 12 else None
        if size is not None and size < RECORD_OVERHEAD_V0:
            entry.error = (f"Record size is less than the minimum record overhead "
                           f"({RECORD_OVERHEAD_V0})")
            entry.error_kind = "corrupt"
            break
        if size is None or end - p - 12 < size:
            if got.failure is not None:  # the read reaches the codec's failure
                entry.error, entry.error_kind = got.failure.cause, "decompress"
            else:
                entry.error = (f"inner message at byte {p} is cut short ({end - p} bytes "
                               "left): the broker ends the inner set there")
                entry.error_kind = "ignored"
            break
        try:
            msg, nxt = parse_message(stream, p)
        except LegacyFormatError as exc:
            entry.error, entry.error_kind = str(exc), "invalid"
            break
        entry.inner_positions.append(p)
        inner.append(msg)
        p = nxt
    entry.inner = inner
    stops = entry.error_kind not in (None, "ignored")
    # the constructor's checks, then makeNext's (a compressed inner message) as it iterates
    if not inner and not stops:
        entry.error, entry.error_kind = "Found invalid compressed record set with no inner " \
            "records", "invalid"
        stops = True
    if inner and wrapper.magic >= 1:
        last_inner = inner[-1].offset
        if wrapper.offset < last_inner and wrapper.offset != 0 and not stops:
            entry.error = (f"Found invalid wrapper offset in compressed v1 message set, wrapper "
                           f"offset '{wrapper.offset}' is less than the last inner message "
                           f"offset '{last_inner}' and it is not zero.")
            entry.error_kind = "invalid"
            stops = True
    nested = next((i for i, m in enumerate(inner) if m.codec != Codec.NONE), None)
    if nested is not None and not stops:
        entry.error, entry.error_kind = "Inner messages must not be compressed", "invalid"
        entry.nested_at = nested
    if inner and wrapper.magic >= 1:
        # v1 inner offsets are relative; rebase them on the wrapper (a 0 wrapper is tolerated),
        # in Java's wrapping long arithmetic (DeepRecordsIterator: absoluteBaseOffset)
        base = to_int64(wrapper.offset - last_inner) if wrapper.offset != 0 else 0
        for m in inner:
            m.offset = to_int64(base + m.offset)
    return entry


def encode_message(offset: int, key: bytes | None, value: bytes | None, *, magic: int = 1,
                   attributes: int = 0, timestamp: int = -1, crc: int | None = None) -> bytes:
    """Encode one legacy entry (``crc=None`` computes it; pass a value to corrupt it on purpose)."""
    body = bytearray()
    body.append(magic & 0xFF)
    body.append(attributes & 0xFF)
    if magic >= 1:
        body += _INT64.pack(timestamp)
    for field_ in (key, value):
        if field_ is None:
            body += _INT32.pack(-1)
        else:
            body += _INT32.pack(len(field_)) + field_
    crc_value = crc32(body) if crc is None else crc
    message = struct.pack(">I", crc_value) + bytes(body)
    return _INT64.pack(offset) + _INT32.pack(len(message)) + message


def encode_wrapper(messages: list[tuple[bytes | None, bytes | None, int]], *, magic: int = 1,
                   codec: Codec | int = Codec.GZIP, base_offset: int = 0,
                   timestamp_type: int = 0, inner_magic: int | None = None,
                   inner_attributes: int = 0, wrapper_offset: int | None = None) -> bytes:
    """Encode a compressed wrapper around ``(key, value, timestamp)`` messages.

    v1 inner offsets are relative and the wrapper takes the last absolute offset; v0 inner
    offsets are absolute.  ``inner_magic``/``inner_attributes`` let tests build the broken
    shapes the broker rejects (mismatched magic, compressed inner messages).
    """
    codec = Codec(codec)
    inner_magic = magic if inner_magic is None else inner_magic
    parts = []
    for i, (key, value, ts) in enumerate(messages):
        off = i if magic >= 1 else base_offset + i
        parts.append(encode_message(off, key, value, magic=inner_magic,
                                    attributes=inner_attributes, timestamp=ts))
    payload = compress(codec, b"".join(parts))
    attrs = int(codec) | (TIMESTAMP_TYPE_MASK if timestamp_type == 1 and magic >= 1 else 0)
    max_ts = max((m[2] for m in messages), default=-1)
    if wrapper_offset is None:
        wrapper_offset = base_offset + len(messages) - 1
    return encode_message(wrapper_offset, None, payload, magic=magic, attributes=attrs,
                          timestamp=max_ts)
