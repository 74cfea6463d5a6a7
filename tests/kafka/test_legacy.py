"""Legacy message sets, magic v0 and v1 (spec §1.7): encoding, deep iteration and decoding.

Layouts are checked byte by byte against the spec; decoding goes through the public
``decode_records`` / ``decode_batches`` path so the records and batches tables are covered too.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from kqlab.kafka import PartitionValidator, decode_batches, decode_records, legacy
from kqlab.kafka.compression import Codec, compress
from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA

LEGACY_CODECS = [pytest.param(c, id=c.label) for c in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4)]
TS = 1_700_000_000_000


def _rows(data: bytes):
    d = decode_records(data)
    assert d.records.schema == RECORDS_SCHEMA
    assert d.batches.schema == BATCHES_SCHEMA
    return d.records.to_pylist(), d.batches.to_pylist(), d.issues


def _wrap(payload: bytes, *, offset: int, magic: int = 1, codec: Codec = Codec.GZIP,
          lat: bool = False, timestamp: int = TS) -> bytes:
    """A compressed wrapper around an already encoded inner message set."""
    attrs = int(codec) | (legacy.TIMESTAMP_TYPE_MASK if lat else 0)
    return legacy.encode_message(offset, None, compress(codec, payload), magic=magic,
                                 attributes=attrs, timestamp=timestamp)


# -- single messages ----------------------------------------------------------------------------


def test_encode_message_v0_layout() -> None:
    data = legacy.encode_message(7, b"k", b"value", magic=0)
    offset, size, crc, magic, attrs = struct.unpack_from(">qiIbb", data, 0)
    assert (offset, magic, attrs) == (7, 0, 0)
    assert size == legacy.RECORD_OVERHEAD_V0 + 1 + 5 == len(data) - 12
    assert crc == zlib.crc32(data[16:])  # CRC-32 (IEEE) over magic .. end of value
    assert struct.unpack_from(">i", data, 18) == (1,)
    assert data[22:23] == b"k"
    assert struct.unpack_from(">i", data, 23) == (5,)
    assert data[27:] == b"value"


def test_encode_message_v1_layout() -> None:
    data = legacy.encode_message(3, None, b"", magic=1, timestamp=TS, attributes=0x08)
    offset, size, crc, magic, attrs, ts = struct.unpack_from(">qiIbbq", data, 0)
    assert (offset, magic, attrs, ts) == (3, 1, 0x08, TS)
    assert size == legacy.RECORD_OVERHEAD_V1 == len(data) - 12
    assert crc == zlib.crc32(data[16:])
    assert struct.unpack_from(">ii", data, 26) == (-1, 0)  # null key, empty value


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize(("key", "value"), [(b"k", b"v"), (None, b"v"), (b"", None),
                                            (None, None), (b"\x00" * 300, b"\xff" * 1000)])
def test_parse_message_roundtrip(magic: int, key: bytes | None, value: bytes | None) -> None:
    data = legacy.encode_message(42, key, value, magic=magic, timestamp=TS)
    msg, end = legacy.parse_message(data)
    assert end == len(data)
    assert (msg.offset, msg.magic, msg.key, msg.value) == (42, magic, key, value)
    assert msg.crc_valid
    assert msg.timestamp == (TS if magic == 1 else -1)
    assert msg.timestamp_type == (0 if magic == 1 else -1)
    assert msg.codec == 0


def test_parse_message_bad_crc_is_a_finding() -> None:
    data = legacy.encode_message(0, b"k", b"v", magic=1, timestamp=TS, crc=12345)
    msg, _ = legacy.parse_message(data)
    assert msg.crc == 12345
    assert not msg.crc_valid


@pytest.mark.parametrize("data", [
    b"\x00" * 11,
    struct.pack(">qi", 0, 13) + b"\x00" * 13,  # below RECORD_OVERHEAD_V0
    struct.pack(">qi", 0, 100) + b"\x00" * 20,  # runs past the end
    struct.pack(">qiIbbq", 0, 21, 0, 1, 0, 0) + b"\x00" * 1,  # v1 below 22
    struct.pack(">qiIbbi", 0, 14, 0, 0, 0, 50) + b"\x00" * 4,  # key runs past the message
])
def test_parse_message_structural_errors(data: bytes) -> None:
    with pytest.raises(legacy.LegacyFormatError):
        legacy.parse_message(data)


@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_message_set_decodes(magic: int) -> None:
    msgs = [legacy.encode_message(10 + i, f"k{i}".encode() if i != 1 else None,
                                  f"v{i}".encode(), magic=magic, timestamp=TS + i)
            for i in range(4)]
    records, batches, issues = _rows(b"".join(msgs))
    assert issues == []
    # uncompressed v0/v1 data is a sequence of single-message "batches"
    assert len(batches) == 4
    assert [b["batch_offset"] for b in batches] == [10, 11, 12, 13]
    assert all(b["record_count"] == 1 and b["last_offset_delta"] == 0 for b in batches)
    assert all(b["crc_valid"] and b["decode_error"] is None for b in batches)
    assert all(b["magic"] == magic and b["compression"] == "none" for b in batches)
    assert [b["position"] for b in batches] == [sum(map(len, msgs[:i])) for i in range(4)]
    assert [r["offset"] for r in records] == [10, 11, 12, 13]
    assert [r["key"] for r in records] == [b"k0", None, b"k2", b"k3"]
    assert [r["value"] for r in records] == [b"v0", b"v1", b"v2", b"v3"]
    if magic == 1:
        assert [r["timestamp"] for r in records] == [TS + i for i in range(4)]
        assert {r["timestamp_type"] for r in records} == {0}
    else:
        assert {r["timestamp"] for r in records} == {-1}
    assert all(r["headers"] == [] for r in records)
    assert [r["batch_index"] for r in records] == [0, 0, 0, 0]


def test_uncompressed_bad_crc_row() -> None:
    good = legacy.encode_message(0, b"k", b"v", magic=1, timestamp=TS)
    bad = bytearray(legacy.encode_message(1, b"k", b"v", magic=1, timestamp=TS))
    bad[-1] ^= 0x01
    records, batches, _ = _rows(good + bytes(bad))
    assert [b["crc_valid"] for b in batches] == [True, False]
    assert [r["offset"] for r in records] == [0, 1]


# -- compressed wrappers ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_v1_relative_offsets_rebased_on_wrapper(codec: Codec) -> None:
    msgs = [(b"a", b"1", TS), (None, b"2", TS + 5), (b"c", None, TS + 2)]
    data = legacy.encode_wrapper(msgs, magic=1, codec=codec, base_offset=100)
    wrapper, _ = legacy.parse_message(data)
    assert wrapper.offset == 102  # the wrapper carries the last absolute offset
    assert wrapper.timestamp == TS + 5
    entry = legacy.open_entry(data)
    assert entry.error is None
    assert [m.offset for m in entry.messages] == [100, 101, 102]
    records, batches, issues = _rows(data)
    assert issues == []
    (b,) = batches
    assert (b["batch_offset"], b["last_offset_delta"], b["record_count"]) == (100, 2, 3)
    assert (b["magic"], b["compression"], b["crc_valid"], b["decode_error"]) == (
        1, codec.label, True, None)
    assert b["max_timestamp"] == TS + 5
    assert b["first_timestamp"] == TS
    assert [r["offset"] for r in records] == [100, 101, 102]
    assert [r["batch_offset"] for r in records] == [100] * 3
    assert [r["batch_index"] for r in records] == [0, 1, 2]
    assert [(r["key"], r["value"]) for r in records] == [(k, v) for k, v, _ in msgs]
    assert [r["timestamp"] for r in records] == [TS, TS + 5, TS + 2]
    assert {r["timestamp_type"] for r in records} == {0}


def test_v1_wrapper_offset_larger_than_inner_range() -> None:
    # broker-assigned: wrapper at 500 with relative inner offsets 0..2 -> 498..500
    msgs = [(None, b"x", TS)] * 3
    data = legacy.encode_wrapper(msgs, magic=1, wrapper_offset=500)
    records, batches, _ = _rows(data)
    assert [r["offset"] for r in records] == [498, 499, 500]
    assert batches[0]["decode_error"] is None


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_v0_inner_offsets_are_absolute(codec: Codec) -> None:
    msgs = [(b"k", b"v%d" % i, -1) for i in range(3)]
    data = legacy.encode_wrapper(msgs, magic=0, codec=codec, base_offset=40)
    inner_offsets = [m.offset for m in legacy.open_entry(data).messages]
    assert inner_offsets == [40, 41, 42]
    records, batches, _ = _rows(data)
    assert [r["offset"] for r in records] == [40, 41, 42]
    assert {r["timestamp"] for r in records} == {-1}
    assert batches[0]["magic"] == 0
    assert batches[0]["decode_error"] is None
    # v0 offsets are never rebased, even when the wrapper offset disagrees
    odd = legacy.encode_wrapper(msgs, magic=0, codec=codec, base_offset=40, wrapper_offset=7)
    assert [r["offset"] for r in _rows(odd)[0]] == [40, 41, 42]


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_v1_wrapper_offset_zero_tolerated(codec: Codec) -> None:
    msgs = [(b"k", b"v", TS + i) for i in range(4)]
    data = legacy.encode_wrapper(msgs, magic=1, codec=codec, wrapper_offset=0)
    entry = legacy.open_entry(data)
    assert entry.error is None
    records, batches, _ = _rows(data)
    assert [r["offset"] for r in records] == [0, 1, 2, 3]
    assert batches[0]["decode_error"] is None
    assert batches[0]["crc_valid"]


def test_v1_wrapper_offset_below_last_inner_is_invalid() -> None:
    msgs = [(b"k", b"v", TS + i) for i in range(3)]
    data = legacy.encode_wrapper(msgs, magic=1, wrapper_offset=1)
    entry = legacy.open_entry(data)
    assert entry.error_kind == "invalid"
    assert "wrapper offset '1'" in (entry.error or "")
    _, batches, _ = _rows(data)
    assert "invalid wrapper offset" in batches[0]["decode_error"]


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_log_append_time_wrapper(codec: Codec) -> None:
    inner = b"".join(legacy.encode_message(i, b"k", b"v", magic=1, timestamp=TS + i)
                     for i in range(3))
    data = _wrap(inner, offset=2, codec=codec, lat=True, timestamp=TS + 999)
    records, batches, _ = _rows(data)
    assert [r["timestamp"] for r in records] == [TS + 999] * 3
    assert [r["timestamp_type"] for r in records] == [1, 1, 1]
    assert batches[0]["timestamp_type"] == 1
    assert batches[0]["max_timestamp"] == TS + 999
    # encode_wrapper's own LAT wrapper takes the inner maximum as its timestamp
    data2 = legacy.encode_wrapper([(None, b"a", TS), (None, b"b", TS + 7)], magic=1,
                                  codec=codec, timestamp_type=1)
    records2, _, _ = _rows(data2)
    assert [(r["timestamp"], r["timestamp_type"]) for r in records2] == [(TS + 7, 1)] * 2


def test_create_time_wrapper_keeps_inner_timestamps() -> None:
    inner = b"".join(legacy.encode_message(i, None, b"v", magic=1, timestamp=TS - i)
                     for i in range(3))
    records, _, _ = _rows(_wrap(inner, offset=2, timestamp=TS + 999))
    assert [r["timestamp"] for r in records] == [TS, TS - 1, TS - 2]
    assert [r["timestamp_type"] for r in records] == [0, 0, 0]


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_inner_crc_corruption_reported(codec: Codec, magic: int) -> None:
    good = legacy.encode_message(0, b"k0", b"v0", magic=magic, timestamp=TS)
    bad = legacy.encode_message(1, b"k1", b"v1", magic=magic, timestamp=TS, crc=0)
    good2 = legacy.encode_message(2, b"k2", b"v2", magic=magic, timestamp=TS)
    data = _wrap(good + bad + good2, offset=2, magic=magic, codec=codec)
    records, batches, _ = _rows(data)
    (b,) = batches
    assert b["crc_valid"]  # the wrapper itself is intact
    assert b["decode_error"] is not None
    assert "invalid CRC" in b["decode_error"]
    assert "[1]" in b["decode_error"]  # names the offset of the broken inner message
    # the records are kept (never dropped), including the corrupt one
    assert [r["value"] for r in records] == [b"v0", b"v1", b"v2"]
    # the broker throws CORRUPT_MESSAGE for it (spec §3.D.3 / T15)
    v = PartitionValidator("t", 0, None, broker_version="3.9", produce_version=2,
                           source="producer", now=TS)
    out = v.validate(legacy.encode_wrapper([(b"k", b"v", TS)], magic=magic, codec=codec))
    assert out.error_code == 0, out
    out = v.validate(_wrap(good + bad + good2, offset=0, magic=magic, codec=codec))
    assert (out.error_code, out.check) == (2, "R2")
    assert out.record_errors == []


NESTED = [pytest.param(Codec.GZIP, Codec.GZIP, id="gzip-in-gzip"),
          pytest.param(Codec.SNAPPY, Codec.LZ4, id="lz4-in-snappy"),
          pytest.param(Codec.LZ4, Codec.SNAPPY, id="snappy-in-lz4")]


def _nested(codec: Codec, inner_codec: Codec) -> bytes:
    inner = legacy.encode_wrapper([(b"k", b"v", TS), (b"k2", b"v2", TS + 1)], magic=1,
                                  codec=inner_codec)
    return _wrap(inner, offset=1, codec=codec, timestamp=TS + 1)


@pytest.mark.parametrize(("codec", "inner_codec"), NESTED)
def test_nested_compressed_wrapper_decode(codec: Codec, inner_codec: Codec) -> None:
    """A wrapper whose inner message is itself a compressed wrapper (double compression).

    Java's ``DeepRecordsIterator`` refuses it ("Inner messages must not be compressed", spec
    §1.7) and kafka-python asserts on it: the batch row must say so rather than hand out the
    inner wrapper's compressed bytes as an ordinary record value.
    """
    data = _nested(codec, inner_codec)
    entry = legacy.open_entry(data)  # never raises
    assert entry.inner is not None
    assert [m.codec for m in entry.inner] == [int(inner_codec)]
    _records, batches, issues = _rows(data)
    assert issues == []
    (b,) = batches
    assert b["crc_valid"]
    assert b["compression"] == codec.label
    assert b["decode_error"] is not None and "compress" in b["decode_error"].lower(), b


@pytest.mark.parametrize(("codec", "inner_codec"), NESTED)
def test_nested_compressed_wrapper_rejected(codec: Codec, inner_codec: Codec) -> None:
    # produce v0-2 on a 3.9 broker: INVALID_RECORD (spec §1.7 deep iteration / §3.D.4 R0)
    v = PartitionValidator("t", 0, None, broker_version="3.9", produce_version=2,
                           source="producer", now=TS)
    out = v.validate(legacy.encode_wrapper([(b"k", b"v", TS)], magic=1, codec=codec))
    assert out.error_code == 0, out
    out = v.validate(_nested(codec, inner_codec))
    assert out.error_code == 87, out


@pytest.mark.parametrize("magic", [0, 1])
def test_mismatched_inner_magic_is_decoded(magic: int) -> None:
    data = legacy.encode_wrapper([(b"k", b"v", TS)] * 2, magic=magic, inner_magic=1 - magic)
    records, batches, _ = _rows(data)
    assert len(records) == 2
    assert batches[0]["magic"] == magic


def test_wrapper_with_null_value() -> None:
    data = legacy.encode_message(0, None, None, magic=1, attributes=int(Codec.GZIP),
                                 timestamp=TS)
    entry = legacy.open_entry(data)
    assert entry.error_kind == "invalid"
    assert entry.inner == []
    records, batches, _ = _rows(data)
    assert records == []
    assert batches[0]["decode_error"] is not None
    assert batches[0]["record_count"] == 0


def test_wrapper_with_empty_inner_set() -> None:
    data = _wrap(b"", offset=0)
    entry = legacy.open_entry(data)
    assert entry.error_kind == "invalid"
    _, batches, _ = _rows(data)
    assert "no inner records" in batches[0]["decode_error"]


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_wrapper_with_corrupt_compressed_value(codec: Codec) -> None:
    payload = bytearray(compress(codec, b"".join(
        legacy.encode_message(i, b"k", b"v" * 50, magic=1, timestamp=TS) for i in range(20))))
    cut = bytes(payload[: len(payload) // 2])
    data = legacy.encode_message(19, None, cut, magic=1, attributes=int(codec), timestamp=TS)
    entry = legacy.open_entry(data)
    assert entry.error is not None
    assert entry.error_kind in ("truncated", "decompress", "invalid")
    records, batches, _ = _rows(data)
    assert batches[0]["decode_error"] is not None
    assert batches[0]["crc_valid"]
    assert len(records) < 20


def test_wrapper_with_zstd_is_labelled() -> None:
    # zstd is invalid in a legacy wrapper; decoding must still not raise
    data = legacy.encode_wrapper([(b"k", b"v", TS)], magic=1, codec=Codec.ZSTD)
    _records, batches, _ = _rows(data)
    assert len(batches) == 1
    assert batches[0]["compression"] == "zstd"


def test_wrapper_with_unknown_codec() -> None:
    data = legacy.encode_message(0, None, b"xxxx", magic=1, attributes=6, timestamp=TS)
    entry = legacy.open_entry(data)
    assert entry.error_kind == "invalid"
    records, batches, _ = _rows(data)
    assert records == []
    assert "Unknown compression type id 6" in batches[0]["decode_error"]


def test_truncated_inner_message() -> None:
    inner = b"".join(legacy.encode_message(i, b"k", b"v", magic=1, timestamp=TS)
                     for i in range(3))
    data = _wrap(inner[:-3], offset=2)
    entry = legacy.open_entry(data)
    # Kafka: AbstractLegacyRecordBatch.DataLogInputStream.nextBatch returns null when an inner
    # message is cut short, which just ends the inner set (no exception): the decoder notes it
    # ("ignored"), it does not make the batch invalid (was "invalid" here)
    assert entry.error_kind == "ignored"
    assert len(entry.inner or []) == 2
    records, batches, _ = _rows(data)
    assert len(records) == 2
    assert batches[0]["decode_error"] is not None
    v = PartitionValidator("t", 0, None, broker_version="3.9", produce_version=2,
                           source="producer", now=TS)
    out = v.validate(data)
    assert out.error_code == 0 and out.record_count == 2, out


def test_mixed_v2_and_legacy_keep_log_order() -> None:
    from kqlab.kafka import build_batch
    from kqlab.kafka.builder import Record

    v2a = build_batch([Record(value=b"a")], base_timestamp=TS, base_offset=0)
    old = legacy.encode_wrapper([(None, b"b", TS), (None, b"c", TS)], magic=1, base_offset=1)
    v2b = build_batch([Record(value=b"d")], base_timestamp=TS, base_offset=3)
    records, batches, issues = _rows(v2a + old + v2b)
    assert issues == []
    assert [r["value"] for r in records] == [b"a", b"b", b"c", b"d"]
    assert [r["offset"] for r in records] == [0, 1, 2, 3]
    assert [b["magic"] for b in batches] == [2, 1, 2]
    d = decode_batches([v2a, old, v2b])
    assert d.records.column("value").to_pylist() == [b"a", b"b", b"c", b"d"]


@pytest.mark.parametrize("magic", [0, 1])
def test_render_matches_java_shape(magic: int) -> None:
    msg, _ = legacy.parse_message(legacy.encode_message(5, b"kk", None, magic=magic,
                                                        timestamp=TS))
    text = msg.render()
    assert text.startswith(f"LegacyRecordBatch(offset=5, Record(magic={magic}, attributes=0, "
                           "compression=NONE, crc=")
    assert text.endswith("key=2 bytes, value=0 bytes))")
    assert ("CreateTime=" in text) == (magic == 1)


@pytest.mark.parametrize("magic", [0, 1])
def test_wrapper_offset_far_from_inner_offsets(magic: int) -> None:
    """A wrapper offset 2^31 past its first inner offset must not crash the batches table.

    v0: inner offsets are absolute, so any wrapper offset can sit far from them; v1: inner
    offsets 0 and 2^31 rebased on a wrapper at 2^31.  The row's ``last_offset_delta`` is an
    int32; decoding must still produce a row (flagged if need be), never raise.
    """
    if magic == 0:
        data = legacy.encode_wrapper([(None, b"v", -1)], magic=0, codec=Codec.GZIP,
                                     base_offset=0, wrapper_offset=2**31)
    else:
        inner = (legacy.encode_message(0, None, b"v", magic=1, timestamp=TS)
                 + legacy.encode_message(2**31, None, b"w", magic=1, timestamp=TS))
        data = _wrap(inner, offset=2**31)
    records, batches, issues = _rows(data)
    assert issues == []
    assert len(batches) == 1
    assert records[0]["value"] == b"v"
    assert records[0]["offset"] == 0
