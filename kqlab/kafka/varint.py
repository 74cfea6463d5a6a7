"""Zig-zag varints and varlongs with Java's exact semantics (spec §1.5, ByteUtils).

Kafka writes record fields as Protocol-Buffers style zig-zag varints.  The broker reads at most
5 bytes for an int32 (10 for an int64): a continuation bit on the last allowed byte is an error,
and value bits that do not fit are silently dropped.  Callers get ``(value, next_position)`` and
a :class:`VarintError` when the encoding is too long or runs past the end.
"""

from __future__ import annotations

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


class VarintError(ValueError):
    """A varint is too long or runs past the end of its buffer."""


def zigzag32(n: int) -> int:
    """Zig-zag encode a signed int32 to its unsigned form: ``(n << 1) ^ (n >> 31)``."""
    return ((n << 1) ^ (n >> 31)) & _MASK32


def zigzag64(n: int) -> int:
    """Zig-zag encode a signed int64 to its unsigned form: ``(n << 1) ^ (n >> 63)``."""
    return ((n << 1) ^ (n >> 63)) & _MASK64


def encode_unsigned(u: int) -> bytes:
    """LEB128: seven bits per byte, least significant group first."""
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """Encode a signed int32 as a zig-zag varint (values wrap to 32 bits like Java's ``int``)."""
    n = to_int32(n)
    return encode_unsigned(zigzag32(n))


def encode_varlong(n: int) -> bytes:
    """Encode a signed int64 as a zig-zag varlong (values wrap to 64 bits)."""
    n = to_int64(n)
    return encode_unsigned(zigzag64(n))


def size_of_varint(n: int) -> int:
    """Bytes :func:`encode_varint` would write for ``n``."""
    u = zigzag32(to_int32(n))
    size = 1
    while u >= 0x80:
        u >>= 7
        size += 1
    return size


def size_of_varlong(n: int) -> int:
    """Bytes :func:`encode_varlong` would write for ``n``."""
    u = zigzag64(to_int64(n))
    size = 1
    while u >= 0x80:
        u >>= 7
        size += 1
    return size


def decode_varint(buf: bytes | bytearray | memoryview, pos: int, end: int | None = None
                  ) -> tuple[int, int]:
    """Decode a zig-zag int32 at ``pos``; return ``(value, next_pos)``.

    Mirrors ``ByteUtils.readVarint``: at most 5 bytes; bits beyond 32 are dropped.
    """
    if end is None:
        end = len(buf)
    u = 0
    shift = 0
    for i in range(5):
        if pos >= end:
            raise VarintError("buffer underflow reading a varint")
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if not b & 0x80:
            u &= _MASK32
            return (u >> 1) ^ -(u & 1), pos
        shift += 7
        if i == 4:
            break
    raise VarintError(f"Varint is too long, the most significant bit in the 5th byte is set, "
                      f"converted value: {u & _MASK32:x}")


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int, end: int | None = None
                   ) -> tuple[int, int]:
    """Decode a zig-zag int64 at ``pos``; return ``(value, next_pos)`` (at most 10 bytes)."""
    if end is None:
        end = len(buf)
    u = 0
    shift = 0
    for i in range(10):
        if pos >= end:
            raise VarintError("buffer underflow reading a varlong")
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if not b & 0x80:
            u &= _MASK64
            return (u >> 1) ^ -(u & 1), pos
        shift += 7
        if i == 9:
            break
    raise VarintError(f"Varlong is too long, most significant bit in the 10th byte is set, "
                      f"converted value: {u & _MASK64:x}")


def to_int32(n: int) -> int:
    """Wrap ``n`` to a signed 32-bit value, as Java ``int`` arithmetic does."""
    n &= _MASK32
    return n - (1 << 32) if n & 0x80000000 else n


def to_int64(n: int) -> int:
    """Wrap ``n`` to a signed 64-bit value, as Java ``long`` arithmetic does."""
    n &= _MASK64
    return n - (1 << 64) if n & 0x8000000000000000 else n
