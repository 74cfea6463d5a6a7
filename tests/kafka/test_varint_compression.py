"""Varints, CRCs and compression codecs against the wire-format spec (§1.5, §1.6, §9 T26).

Every vector here is either from the spec's tables or computed independently (LEB128 by hand,
``aiokafka``'s xerial snappy framing, stdlib ``gzip``) so kqlab is never checked against itself.
"""

from __future__ import annotations

import gzip
import io
import os
import struct

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kqlab.kafka.checksums import crc32, crc32c
from kqlab.kafka.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    Codec,
    DecompressionError,
    compress,
    decompress,
)
from kqlab.kafka.varint import (
    VarintError,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
    zigzag32,
    zigzag64,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


# -- varints ------------------------------------------------------------------------------------

#: spec §1.5 table, plus every 1..5-byte length boundary on both signs (zig-zag: n >= 0 maps to
#: 2n, n < 0 to -2n-1, so the boundaries are +-(2^(7k-1)) and 2^(7k-1) - 1).
VARINT_CASES = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (300, "d804"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (-8193, "818001"),
    (1048575, "feff7f"),
    (-1048576, "ffff7f"),
    (1048576, "80808001"),
    (-1048577, "81808001"),
    (134217727, "feffff7f"),
    (-134217728, "ffffff7f"),
    (134217728, "8080808001"),
    (-134217729, "8180808001"),
    (2147483647, "feffffff0f"),
    (-2147483648, "ffffffff0f"),
]

VARLONG_CASES = [
    *VARINT_CASES,
    (2**31, "8080808010"),
    (-(2**31) - 1, "8180808010"),
    (2**34 - 1, "feffffff7f"),
    (-(2**34), "ffffffff7f"),
    (2**34, "808080808001"),
    (2**62 - 1, "feffffffffffffff7f"),
    (-(2**62), "ffffffffffffffff7f"),
    (2**62, "80808080808080808001"),
    (-(2**62) - 1, "81808080808080808001"),
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
]


def _leb128(u: int) -> bytes:
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


@pytest.mark.parametrize(("value", "hexbytes"), VARINT_CASES)
def test_varint_table(value: int, hexbytes: str) -> None:
    raw = bytes.fromhex(hexbytes)
    assert encode_varint(value) == raw
    assert size_of_varint(value) == len(raw)
    assert decode_varint(raw, 0) == (value, len(raw))
    # decoding in the middle of a buffer honours pos/end and stops after the varint
    buf = b"\xaa" + raw + b"\xff\xff"
    assert decode_varint(buf, 1, len(buf)) == (value, 1 + len(raw))


@pytest.mark.parametrize(("value", "hexbytes"), VARLONG_CASES)
def test_varlong_table(value: int, hexbytes: str) -> None:
    raw = bytes.fromhex(hexbytes)
    assert encode_varlong(value) == raw
    assert size_of_varlong(value) == len(raw)
    assert decode_varlong(raw, 0) == (value, len(raw))


def test_zigzag_formulas() -> None:
    assert [zigzag32(n) for n in (0, -1, 1, -2, INT32_MAX, INT32_MIN)] == [
        0, 1, 2, 3, 0xFFFFFFFE, 0xFFFFFFFF]
    assert [zigzag64(n) for n in (0, -1, 1, INT64_MAX, INT64_MIN)] == [
        0, 1, 2, 2**64 - 2, 2**64 - 1]


def test_varint_wraps_like_java_int() -> None:
    # values outside int32 wrap (Java int arithmetic) rather than growing past 5 bytes
    assert encode_varint(2**31) == encode_varint(INT32_MIN)
    assert encode_varint(-(2**31) - 1) == encode_varint(INT32_MAX)
    assert encode_varlong(2**63) == encode_varlong(INT64_MIN)


@given(st.integers(INT32_MIN, INT32_MAX))
@settings(max_examples=300, deadline=None)
def test_varint_roundtrip_matches_leb128(n: int) -> None:
    raw = encode_varint(n)
    assert raw == _leb128(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)
    assert len(raw) <= 5
    assert decode_varint(raw, 0) == (n, len(raw))


@given(st.integers(INT64_MIN, INT64_MAX))
@settings(max_examples=300, deadline=None)
def test_varlong_roundtrip_matches_leb128(n: int) -> None:
    raw = encode_varlong(n)
    assert raw == _leb128(((n << 1) ^ (n >> 63)) & (2**64 - 1))
    assert len(raw) <= 10
    assert decode_varlong(raw, 0) == (n, len(raw))


@pytest.mark.parametrize("raw", [
    "8080808080",  # continuation on the 5th byte
    "ffffffffff01",
    "ffffffff8f",
    "80808080800000",
])
def test_varint_too_long_raises(raw: str) -> None:
    with pytest.raises(VarintError, match="too long"):
        decode_varint(bytes.fromhex(raw), 0)


@pytest.mark.parametrize("raw", ["80" * 10, "ff" * 10 + "01", "ff" * 9 + "80" + "00"])
def test_varlong_too_long_raises(raw: str) -> None:
    with pytest.raises(VarintError, match="too long"):
        decode_varlong(bytes.fromhex(raw), 0)


@pytest.mark.parametrize("raw", ["", "80", "ffff", "ffffffff"])
def test_varint_underflow_raises(raw: str) -> None:
    with pytest.raises(VarintError):
        decode_varint(bytes.fromhex(raw), 0)
    with pytest.raises(VarintError):
        decode_varlong(bytes.fromhex(raw), 0)


def test_varint_underflow_respects_end() -> None:
    # the varint is complete in the buffer but crosses ``end``
    with pytest.raises(VarintError):
        decode_varint(b"\x80\x01", 0, 1)
    with pytest.raises(VarintError):
        decode_varlong(b"\x80\x01", 0, 1)


@pytest.mark.parametrize(("raw", "expected"), [
    # ByteUtils.readVarint: the 5th byte's bits above bit 31 are dropped by the int shift
    ("ffffffff7f", INT32_MIN),  # u = 0xffffffff
    ("feffffff7f", INT32_MAX),  # u = 0xfffffffe
    ("8080808070", 0),  # only bits 32..34 set: all dropped
    ("8180808070", -1),
    ("808080801f", 0x78000000),  # u = 0xf0000000: bits 28..31 kept, bit 32 dropped
])
def test_varint_fifth_byte_high_bits_dropped(raw: str, expected: int) -> None:
    assert decode_varint(bytes.fromhex(raw), 0) == (expected, 5)


def test_varlong_tenth_byte_high_bits_dropped() -> None:
    # 63 one-bits then 0x7f << 63: Java keeps only bit 63 -> u = 2^64-1 -> Long.MIN_VALUE
    assert decode_varlong(bytes.fromhex("ff" * 9 + "7f"), 0) == (INT64_MIN, 10)
    assert decode_varlong(bytes.fromhex("fe" + "ff" * 8 + "7f"), 0) == (INT64_MAX, 10)
    assert decode_varlong(bytes.fromhex("80" * 9 + "7e"), 0) == (0, 10)


# -- checksums ----------------------------------------------------------------------------------


def test_crc32c_reference_values() -> None:
    assert crc32c(b"Some String") == 608512271  # Crc32CTest.testValue (spec §9 T26)
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    assert crc32c(memoryview(b"xx123456789")[2:]) == 0xE3069283


def test_crc32c_accepts_bytearray() -> None:
    # the signature promises bytes | bytearray | memoryview (kafka-python builders hand out
    # bytearrays, and a bytearray slice reaches crc32c through decode_records)
    assert crc32c(bytearray(b"123456789")) == 0xE3069283


def test_crc32_ieee_reference_value() -> None:
    assert crc32(b"123456789") == 0xCBF43926
    assert crc32(memoryview(b"123456789")) == 0xCBF43926


def test_spec_v1_vector_crc() -> None:
    v1 = bytes.fromhex(
        "00000000 00000000 0000003a ffffffff 02 e99b8dd8 0000 00000000"
        "0000018bcfe56800 0000018bcfe56800 ffffffffffffffff ffff ffffffff 00000001"
        "10 00 00 00 02 6b 02 76 00")
    assert len(v1) == 70
    assert crc32c(v1[21:]) == 0xE99B8DD8 == struct.unpack_from(">I", v1, 17)[0]


# -- compression --------------------------------------------------------------------------------

PAYLOADS = {
    "empty": b"",
    "tiny": b"x",
    "text": b"hello kafka " * 1000,
    "random": os.urandom(5000),
    "multi_block": (os.urandom(700) * 40) + b"tail" * 9000,  # > 32 KiB: several xerial blocks
}


@pytest.mark.parametrize("codec", [pytest.param(c, id=c.label) for c in Codec])
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_compression_roundtrip(codec: Codec, name: str) -> None:
    data = PAYLOADS[name]
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(int(codec), compress(int(codec), data)) == data


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.LZ4, Codec.ZSTD])
@pytest.mark.parametrize("level", [1, 9])
def test_compression_levels_roundtrip(codec: Codec, level: int) -> None:
    data = PAYLOADS["text"]
    assert decompress(codec, compress(codec, data, level=level)) == data


def test_codec_parse() -> None:
    assert Codec.parse("LZ4") is Codec.LZ4
    assert Codec.parse("uncompressed") is Codec.NONE
    assert Codec.parse(4) is Codec.ZSTD
    assert Codec.ZSTD.label == "zstd"
    with pytest.raises(ValueError, match="unknown compression codec"):
        Codec.parse("brotli")


def _xerial_blocks(stream: bytes) -> list[int]:
    magic, version, compat = struct.unpack_from(">8sii", stream, 0)
    assert magic == XERIAL_MAGIC
    assert (version, compat) == (1, 1)
    pos, sizes = 16, []
    while pos < len(stream):
        (n,) = struct.unpack_from(">i", stream, pos)
        sizes.append(n)
        pos += 4 + n
    assert pos == len(stream)
    return sizes


def test_xerial_snappy_framing_multi_block() -> None:
    data = PAYLOADS["multi_block"]
    assert len(data) > XERIAL_BLOCK_SIZE == 32 * 1024
    stream = compress(Codec.SNAPPY, data)
    assert stream.startswith(b"\x82SNAPPY\x00")
    blocks = _xerial_blocks(stream)
    assert len(blocks) == -(-len(data) // XERIAL_BLOCK_SIZE)
    assert decompress(Codec.SNAPPY, stream) == data


def test_xerial_snappy_interop_with_aiokafka() -> None:
    from aiokafka import codec as aio

    data = PAYLOADS["multi_block"]
    # kqlab's framing decodes in an independent reader and vice versa
    assert aio.snappy_decode(compress(Codec.SNAPPY, data)) == data
    foreign = aio.snappy_encode(data, xerial_compatible=True, xerial_blocksize=XERIAL_BLOCK_SIZE)
    assert foreign.startswith(XERIAL_MAGIC)
    assert decompress(Codec.SNAPPY, foreign) == data
    # a smaller block size (other snappy-java settings) reads as well
    foreign_small = aio.snappy_encode(data, xerial_compatible=True, xerial_blocksize=4096)
    assert len(_xerial_blocks(foreign_small)) > 10
    assert decompress(Codec.SNAPPY, foreign_small) == data


def test_raw_snappy_decodes() -> None:
    import cramjam
    from aiokafka import codec as aio

    data = PAYLOADS["multi_block"]
    raw = compress(Codec.SNAPPY, data, snappy_framing="raw")
    assert not raw.startswith(XERIAL_MAGIC)
    assert decompress(Codec.SNAPPY, raw) == data
    assert bytes(cramjam.snappy.decompress_raw(raw)) == data
    foreign_raw = bytes(aio.snappy_encode(data, xerial_compatible=False))
    assert decompress(Codec.SNAPPY, foreign_raw) == data


def test_gzip_interop_stdlib() -> None:
    data = PAYLOADS["text"]
    assert gzip.decompress(compress(Codec.GZIP, data)) == data
    assert decompress(Codec.GZIP, gzip.compress(data, compresslevel=1)) == data
    # GZIPInputStream reads concatenated members
    two = gzip.compress(b"abc") + gzip.compress(b"def")
    assert decompress(Codec.GZIP, two) == b"abcdef"


def _zstd_streamed(data: bytes) -> bytes:
    buf = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
        w.write(data)
    return buf.getvalue()


def test_zstd_interop_without_content_size() -> None:
    data = PAYLOADS["text"]
    # a streamed frame has no content size in its header (zstd-jni's output stream)
    assert decompress(Codec.ZSTD, _zstd_streamed(data)) == data
    assert decompress(Codec.ZSTD, _zstd_streamed(b"ab") + _zstd_streamed(b"cd")) == b"abcd"


def test_zstd_concatenated_frames_with_content_size() -> None:
    # zstd-jni's ZstdInputStream (and kafka-python's reader) read across frames; kqlab's own
    # docstring promises "several frames".  Frames written by one-shot compress() carry their
    # content size, which must not make the decoder stop after the first frame.
    cctx = zstandard.ZstdCompressor()
    two = cctx.compress(b"abc") + cctx.compress(b"def")
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(two),
                                                    read_across_frames=True) as r:
        assert r.read() == b"abcdef"  # the reference reading
    assert decompress(Codec.ZSTD, two) == b"abcdef"


def test_lz4_frame_interop_with_aiokafka() -> None:
    from aiokafka import codec as aio

    data = PAYLOADS["multi_block"]
    assert decompress(Codec.LZ4, aio.lz4_encode(data)) == data
    assert aio.lz4_decode(compress(Codec.LZ4, data)) == data


# -- truncated and corrupt streams --------------------------------------------------------------


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.ZSTD])
@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, -1])
def test_truncated_stream_is_flagged_truncated(codec: Codec, keep: float) -> None:
    data = PAYLOADS["random"] + PAYLOADS["text"]
    stream = compress(codec, data)
    cut = len(stream) - 1 if keep == -1 else max(1, int(len(stream) * keep))
    with pytest.raises(DecompressionError) as info:
        decompress(codec, stream[:cut])
    assert info.value.truncated is True
    assert info.value.codec is codec
    assert data.startswith(info.value.partial)


@pytest.mark.parametrize("codec", [Codec.SNAPPY, Codec.LZ4])
def test_truncated_stream_other_codecs(codec: Codec) -> None:
    data = PAYLOADS["multi_block"]
    stream = compress(codec, data)
    with pytest.raises(DecompressionError) as info:
        decompress(codec, stream[: len(stream) // 2])
    assert info.value.truncated is True


def test_gzip_corrupt_stream_is_not_truncated() -> None:
    stream = bytearray(compress(Codec.GZIP, PAYLOADS["random"] + PAYLOADS["text"]))
    bad_header = bytes([0x1F, 0x8C]) + bytes(stream[2:])
    with pytest.raises(DecompressionError) as info:
        decompress(Codec.GZIP, bad_header)
    assert info.value.truncated is False
    # a damaged deflate block: stored-block length / distance errors, CRC mismatch...
    body = bytearray(stream)
    body[12:40] = b"\xff" * 28
    with pytest.raises(DecompressionError) as info:
        decompress(Codec.GZIP, bytes(body))
    assert info.value.truncated is False
    # a wrong trailer CRC is corrupt data, not an early end
    trailer = bytearray(stream)
    trailer[-8] ^= 0xFF
    with pytest.raises(DecompressionError) as info:
        decompress(Codec.GZIP, bytes(trailer))
    assert info.value.truncated is False


def test_zstd_corrupt_stream_is_not_truncated() -> None:
    stream = compress(Codec.ZSTD, PAYLOADS["text"])
    bad_magic = b"\x00\x00\x00\x00" + stream[4:]
    with pytest.raises(DecompressionError) as info:
        decompress(Codec.ZSTD, bad_magic)
    assert info.value.truncated is False
    with pytest.raises(DecompressionError) as info:
        decompress(Codec.ZSTD, b"not a zstd frame at all")
    assert info.value.truncated is False


def test_snappy_corrupt_block_is_not_truncated() -> None:
    stream = bytearray(compress(Codec.SNAPPY, PAYLOADS["text"]))
    struct.pack_into(">i", stream, 16, -5)  # negative block length
    with pytest.raises(DecompressionError) as info:
        decompress(Codec.SNAPPY, bytes(stream))
    assert info.value.truncated is False
    with pytest.raises(DecompressionError) as info:
        decompress(Codec.SNAPPY, XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00")
    assert info.value.truncated is True


def test_lz4_corrupt_block_checksum_is_not_truncated() -> None:
    from aiokafka import codec as aio

    stream = bytearray(aio.lz4_encode(PAYLOADS["random"]))
    stream[len(stream) // 2] ^= 0xFF
    out, exc = _attempt(Codec.LZ4, bytes(stream))
    if exc is not None:
        assert exc.truncated is False
    else:  # no block checksum: a literal byte flip goes unnoticed, but never silently grows
        assert out is not None and len(out) == len(PAYLOADS["random"])


def _attempt(codec: Codec, data: bytes) -> tuple[bytes | None, DecompressionError | None]:
    """Decompress; return the output or the DecompressionError (anything else propagates)."""
    try:
        return decompress(codec, data), None
    except DecompressionError as exc:
        return None, exc


@given(st.binary(max_size=300), st.sampled_from([c for c in Codec if c is not Codec.NONE]))
@settings(max_examples=300, deadline=2000)
def test_garbage_never_escapes_as_other_exceptions(data: bytes, codec: Codec) -> None:
    out, exc = _attempt(codec, data)
    if exc is not None:
        assert isinstance(exc.truncated, bool)
        assert isinstance(exc.partial, bytes)
    else:
        assert isinstance(out, bytes)


@given(st.binary(min_size=1, max_size=3000),
       st.sampled_from([c for c in Codec if c is not Codec.NONE]),
       st.data())
@settings(max_examples=150, deadline=2000)
def test_mutated_streams_never_escape(data: bytes, codec: Codec, draw: st.DataObject) -> None:
    stream = bytearray(compress(codec, data))
    i = draw.draw(st.integers(0, len(stream) - 1))
    stream[i] ^= draw.draw(st.integers(1, 255))
    cut = draw.draw(st.integers(0, len(stream)))
    for candidate in (bytes(stream), bytes(stream[:cut])):
        out, exc = _attempt(codec, candidate)
        assert (out is None) != (exc is None)
        assert exc is None or isinstance(exc.truncated, bool)


# -- LZ4 framing as Kafka's Java codec requires it ----------------------------------------------


def _lz4_blocks_independently(frame: bytes) -> bytes:
    """Read an LZ4 frame the way Kafka's ``Lz4BlockInputStream`` does.

    Every block is decompressed on its own (no dictionary from earlier blocks); the frame
    descriptor must pass ``Lz4BlockOutputStream.FLG/BD.validate()``.
    """
    import cramjam

    assert struct.unpack_from("<I", frame, 0)[0] == 0x184D2204
    flg, bd = frame[4], frame[5]
    assert flg & 0x03 == 0, "FLG reserved bits must be 0"
    assert flg & 0x20, "FLG block independence must be set (Dependent block stream is unsupported)"
    assert flg >> 6 == 1, "FLG version must be 1"
    assert bd & 0x8F == 0 and 4 <= (bd >> 4) & 7 <= 7, "BD must be valid"
    max_block = 1 << (2 * ((bd >> 4) & 7) + 8)
    pos = 6 + (8 if flg & 0x08 else 0) + 1
    out = []
    while True:
        (n,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if n == 0:
            break
        stored, n = bool(n & 0x80000000), n & 0x7FFFFFFF
        assert n <= max_block
        block = frame[pos:pos + n]
        pos += n + (4 if flg & 0x10 else 0)
        if stored:
            out.append(bytes(block))
        else:
            buf = bytearray(max_block)
            k = cramjam.lz4.decompress_block_into(bytes(block), output=buf)
            out.append(bytes(buf[:k]))
    return b"".join(out)


def test_reference_lz4_reader_accepts_kafka_style_frames() -> None:
    from aiokafka import codec as aio

    data = PAYLOADS["multi_block"] * 3  # several 64 KiB blocks
    assert _lz4_blocks_independently(aio.lz4_encode(data)) == data


@pytest.mark.parametrize("name", ["tiny", "text", "multi_block"])
def test_lz4_frames_are_readable_by_kafka(name: str) -> None:
    """kqlab's LZ4 frames must carry the block-independence flag Kafka's Java codec demands.

    ``Lz4BlockOutputStream.FLG.validate()`` throws "Dependent block stream is unsupported" for
    any frame without it, so a broker answers such a batch with UNKNOWN_SERVER_ERROR and Java
    consumers cannot read it (aiokafka and kafka-python write independent blocks for this
    reason).
    """
    data = PAYLOADS[name] * (3 if name == "multi_block" else 1)
    assert _lz4_blocks_independently(compress(Codec.LZ4, data)) == data


def test_dependent_block_lz4_batch_is_rejected_like_the_broker() -> None:
    """A producer's linked-block LZ4 batch: Java's codec refuses the frame header -> -1."""
    import cramjam

    from kqlab.kafka import PartitionValidator
    from kqlab.kafka.builder import Record, build_batch, rewrite_header

    plain = build_batch([Record(value=b"v" * 100, key=b"k")], base_timestamp=1_700_000_000_000)
    comp = cramjam.lz4.Compressor(level=9, content_checksum=False, block_linked=True)
    comp.compress(plain[61:])
    frame = bytes(comp.finish())
    assert not frame[4] & 0x20
    header = bytearray(plain[:61])
    struct.pack_into(">i", header, 8, 49 + len(frame))
    batch = rewrite_header(bytes(header) + frame, attributes=int(Codec.LZ4))
    out = PartitionValidator("t", 0, None, now=1_700_000_000_000, source="producer").validate(
        batch)
    assert out.error_code == -1, out
