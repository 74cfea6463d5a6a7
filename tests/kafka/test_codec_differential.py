"""kqlab's batch encoder and decoder against two independent implementations.

* kafka-python (``kafka.record``): pure-Python record builder and reader, its own varints and
  CRC-32C, stdlib gzip and ``zstandard`` (snappy/lz4 need modules that are not installed, so
  only the codecs it can actually run are generated);
* aiokafka (``aiokafka.record``): Cython builder and reader with every codec.

Batches travel both ways: reference-built batches must decode identically in kqlab (records
*and* batch fields, CRC valid), and kqlab-built batches must decode identically in the
references (whose ``validate_crc()`` must agree).  The legacy v0/v1 builders are checked too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import kafka.codec as kp_codec
import pytest
from aiokafka import codec as aio_codec
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder as AioLegacyBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KpLegacyBuilder
from kafka.record.memory_records import MemoryRecords

from kqlab.kafka import BatchBuilder, Record, decode_batches, decode_records
from kqlab.kafka.batch import RecordBatchHeader
from kqlab.kafka.compression import XERIAL_MAGIC, Codec
from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA

# -- which codecs each reference can really run -------------------------------------------------

_KP_HAS = {Codec.NONE: True, Codec.GZIP: kp_codec.has_gzip(),
           Codec.SNAPPY: kp_codec.has_snappy(), Codec.LZ4: kp_codec.has_lz4(),
           Codec.ZSTD: kp_codec.has_zstd()}
_AIO_HAS = {Codec.NONE: True, Codec.GZIP: aio_codec.has_gzip(),
            Codec.SNAPPY: aio_codec.has_snappy(), Codec.LZ4: aio_codec.has_lz4(),
            Codec.ZSTD: aio_codec.has_zstd()}
KP_CODECS = [c for c in Codec if _KP_HAS[c]]
AIO_CODECS = [c for c in Codec if _AIO_HAS[c]]
#: (codec, snappy framing) pairs kqlab can write
KQ_ENCODINGS = [(c, "xerial") for c in Codec] + [(Codec.SNAPPY, "raw")]

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

INT16 = (-(2**15), 2**15 - 1)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def _ids(codecs):
    return [pytest.param(c, id=c.label) for c in codecs]


def test_reference_codecs_cover_something() -> None:
    # the differential is only meaningful if the references can run compressed batches
    assert Codec.GZIP in KP_CODECS
    assert set(AIO_CODECS) == set(Codec)


# -- strategies ---------------------------------------------------------------------------------

_utf8 = st.characters(codec="utf-8")
header_keys = st.one_of(st.sampled_from(["", "a", "a", "trace-id", "ключ", "🔑", "a\x00b"]),
                        st.text(alphabet=_utf8, max_size=12))
opt_bytes = st.one_of(st.none(), st.just(b""), st.binary(max_size=40))
values = st.one_of(opt_bytes, st.binary(max_size=400),
                   st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8),
                             st.integers(1, 300)))
headers = st.lists(st.tuples(header_keys, st.one_of(st.none(), st.binary(max_size=24))),
                   max_size=5)


@dataclass
class Rec:
    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@st.composite
def record_lists(draw: st.DrawFn, *, sequential: bool = False) -> list[Rec]:
    n = draw(st.integers(1, 12))
    base_ts = draw(st.one_of(st.integers(-(2**41), 2**45), st.just(1_700_000_000_000)))
    recs = []
    off = 0
    for i in range(n):
        if i and not sequential:
            off += draw(st.integers(1, 3))
        elif i:
            off += 1
        ts = base_ts + draw(st.one_of(st.just(0), st.integers(-(2**20), 2**20),
                                      st.integers(-(2**40), 2**40)))
        if ts == -1:  # aiokafka's builder reads -1 as "no timestamp given: use now"
            ts = -2
        recs.append(Rec(off, ts, draw(opt_bytes), draw(values), draw(headers)))
    return recs


producer_states = st.one_of(
    st.just((-1, -1, -1, False)),
    st.tuples(st.integers(0, INT64[1]), st.integers(0, INT16[1]), st.integers(0, INT32[1]),
              st.booleans()),
)


# -- expectations -------------------------------------------------------------------------------


def _expected_rows(recs: list[Rec], base_offset: int, *, lat_max: int | None = None
                   ) -> list[dict]:
    return [{"offset": base_offset + r.offset_delta,
             "timestamp": r.timestamp if lat_max is None else lat_max,
             "timestamp_type": 0 if lat_max is None else 1,
             "key": r.key, "value": r.value,
             "headers": [{"key": k, "value": v} for k, v in r.headers],
             "batch_offset": base_offset, "batch_index": i}
            for i, r in enumerate(recs)]


def _kqlab_rows(data: bytes) -> tuple[list[dict], list[dict]]:
    d = decode_records(data, topic="t", partition=3)
    assert d.records.schema == RECORDS_SCHEMA
    assert d.batches.schema == BATCHES_SCHEMA
    assert d.issues == []
    cols = ["offset", "timestamp", "timestamp_type", "key", "value", "headers", "batch_offset",
            "batch_index"]
    rows = d.records.select(cols).to_pylist()
    assert set(d.records.column("topic").to_pylist()) <= {"t"}
    assert set(d.records.column("partition").to_pylist()) <= {3}
    # decode_batches on the same single batch agrees with decode_records
    other = decode_batches([data], topic="t", partition=3)
    assert other.records.equals(d.records)
    return rows, d.batches.to_pylist()


def _reference_rows(batch, base_offset: int) -> list[dict]:
    return [{"offset": r.offset, "timestamp": r.timestamp, "timestamp_type": r.timestamp_type,
             "key": r.key, "value": r.value,
             "headers": [{"key": k, "value": v} for k, v in r.headers],
             "batch_offset": base_offset, "batch_index": i}
            for i, r in enumerate(batch)]


def _assert_batch_row(row: dict, ref, data: bytes, recs: list[Rec]) -> None:
    h = RecordBatchHeader.parse(data)
    assert row["decode_error"] is None, row
    assert row["crc_valid"] is True
    assert row["batch_offset"] == ref.base_offset == h.base_offset
    assert row["last_offset_delta"] == ref.last_offset_delta == recs[-1].offset_delta
    assert row["magic"] == 2
    assert row["compression"] == Codec(ref.compression_type).label
    assert row["timestamp_type"] == ref.timestamp_type
    assert row["is_transactional"] == ref.is_transactional
    assert row["is_control"] is False
    assert row["producer_id"] == ref.producer_id
    assert row["producer_epoch"] == ref.producer_epoch
    assert row["base_sequence"] == ref.base_sequence
    assert row["partition_leader_epoch"] == h.partition_leader_epoch
    assert row["record_count"] == len(recs)
    assert row["size_bytes"] == len(data)
    assert row["first_timestamp"] == ref.first_timestamp
    assert row["max_timestamp"] == ref.max_timestamp == max(r.timestamp for r in recs)
    assert row["crc"] == ref.crc
    assert row["attributes"] == ref.attributes
    assert row["position"] == 0
    assert (row["topic"], row["partition"]) == ("t", 3)


def _relocate(data: bytes | bytearray, base_offset: int, leader_epoch: int) -> bytes:
    """Set baseOffset and partitionLeaderEpoch (outside the CRC) as a broker would."""
    out = bytearray(data)
    struct.pack_into(">q", out, 0, base_offset)
    struct.pack_into(">i", out, 12, leader_epoch)
    return bytes(out)


# -- (a) reference-built batches decode identically in kqlab ------------------------------------


def _build_reference(builder_cls, codec: Codec, recs: list[Rec], state) -> bytes:
    pid, epoch, seq, txn = state
    b = builder_cls(2, int(codec), int(txn), pid, epoch, seq, 1 << 30)
    for r in recs:
        meta = b.append(r.offset_delta, r.timestamp, r.key, r.value, list(r.headers))
        assert meta is not None
    return bytes(b.build())


def _check_reference_built(builder_cls, reader_cls, codec: Codec, recs: list[Rec], state,
                           base_offset: int, leader_epoch: int) -> None:
    data = _relocate(_build_reference(builder_cls, codec, recs, state), base_offset,
                     leader_epoch)
    ref = reader_cls(data)
    assert ref.validate_crc()
    ref_rows = _reference_rows(ref, base_offset)
    rows, batches = _kqlab_rows(data)
    assert rows == ref_rows
    assert rows == _expected_rows(recs, base_offset)
    (row,) = batches
    _assert_batch_row(row, reader_cls(data), data, recs)
    assert row["compression"] in (codec.label, "none")  # builders drop useless compression


@pytest.mark.parametrize("codec", _ids(KP_CODECS))
@SETTINGS
@given(recs=record_lists(), state=producer_states, base_offset=st.integers(0, 2**62),
       leader_epoch=st.integers(*INT32))
def test_kafka_python_built_batches_decode(codec: Codec, recs, state, base_offset,
                                           leader_epoch) -> None:
    _check_reference_built(KpBuilder, KpBatch, codec, recs, state, base_offset, leader_epoch)


@pytest.mark.parametrize("codec", _ids(AIO_CODECS))
@SETTINGS
@given(recs=record_lists(), state=producer_states, base_offset=st.integers(0, 2**62),
       leader_epoch=st.integers(*INT32))
def test_aiokafka_built_batches_decode(codec: Codec, recs, state, base_offset,
                                       leader_epoch) -> None:
    _check_reference_built(AioBuilder, AioBatch, codec, recs, state, base_offset, leader_epoch)


@pytest.mark.parametrize("codec", _ids(KP_CODECS))
def test_kafka_python_compressed_batch_really_compressed(codec: Codec) -> None:
    recs = [Rec(i, 1_700_000_000_000 + i, b"key-%d" % (i % 3), b"value " * 50,
                [("h", b"x"), ("h", None)]) for i in range(20)]
    data = _build_reference(KpBuilder, codec, recs, (7, 1, 0, True))
    rows, (row,) = _kqlab_rows(data)
    assert row["compression"] == codec.label
    assert rows == _expected_rows(recs, 0)
    assert row["is_transactional"] is True and row["producer_id"] == 7


@pytest.mark.parametrize("codec", _ids(AIO_CODECS))
def test_aiokafka_compressed_batch_really_compressed(codec: Codec) -> None:
    recs = [Rec(i, 1_700_000_000_000 - i, None, b"payload " * 80, [("ключ", b"v")])
            for i in range(30)]
    data = _build_reference(AioBuilder, codec, recs, (-1, -1, -1, False))
    rows, (row,) = _kqlab_rows(data)
    assert row["compression"] == codec.label
    assert rows == _expected_rows(recs, 0)
    if codec is Codec.SNAPPY:
        assert data[61:].startswith(XERIAL_MAGIC)


@SETTINGS
@given(batches=st.lists(st.tuples(record_lists(sequential=True),
                                  st.sampled_from(KP_CODECS), producer_states),
                        min_size=1, max_size=5),
       first=st.integers(0, 2**40))
def test_kafka_python_segment_of_batches(batches, first) -> None:
    """Several reference batches back to back, offsets assigned as a broker would."""
    chunks, expected, offset = [], [], first
    for recs, codec, state in batches:
        chunks.append(_relocate(_build_reference(KpBuilder, codec, recs, state), offset, 5))
        expected.extend(_expected_rows(recs, offset))
        offset += len(recs)
    data = b"".join(chunks)
    d = decode_records(data)
    assert d.issues == []
    assert d.records.drop_columns(["topic", "partition"]).to_pylist() == expected
    b = d.batches.to_pylist()
    assert [r["position"] for r in b] == [sum(map(len, chunks[:i])) for i in range(len(chunks))]
    assert all(r["crc_valid"] and r["decode_error"] is None for r in b)
    ref = [(x.base_offset, x.crc) for x in MemoryRecords(data)]
    assert [(r["batch_offset"], r["crc"]) for r in b] == ref


# -- (b)/(c) kqlab-built batches decode identically in the references ---------------------------


@st.composite
def kqlab_batches(draw: st.DrawFn):
    recs = draw(record_lists())
    pid, epoch, seq, txn = draw(producer_states)
    lat = draw(st.booleans())
    options = {
        "base_offset": draw(st.integers(0, 2**62)),
        "partition_leader_epoch": draw(st.integers(*INT32)),
        "producer_id": pid, "producer_epoch": epoch, "base_sequence": seq,
        "transactional": txn, "timestamp_type": 1 if lat else 0,
        "compression_level": draw(st.none() | st.integers(1, 9)),
    }
    return recs, options


def _build_kqlab(recs: list[Rec], codec: Codec, framing: str, options: dict) -> bytes:
    b = BatchBuilder(codec=codec, snappy_framing=framing, base_timestamp=recs[0].timestamp,
                     **options)
    for r in recs:
        b.append(Record(value=r.value, key=r.key, headers=tuple(r.headers),
                        timestamp=r.timestamp, offset_delta=r.offset_delta))
    b.last_offset_delta = recs[-1].offset_delta
    return b.build()


def _check_kqlab_built(reader_cls, codec: Codec, framing: str, recs: list[Rec],
                       options: dict) -> None:
    data = _build_kqlab(recs, codec, framing, options)
    base = options["base_offset"]
    lat = options["timestamp_type"] == 1
    max_ts = max(r.timestamp for r in recs)
    expected = _expected_rows(recs, base, lat_max=max_ts if lat else None)
    assert reader_cls(data).validate_crc() is True
    ref = reader_cls(data)
    got = _reference_rows(ref, base)
    assert got == expected
    check = reader_cls(data)
    assert check.base_offset == base
    assert check.compression_type == int(codec)
    assert check.timestamp_type == (1 if lat else 0)
    assert check.is_transactional == options["transactional"]
    assert check.producer_id == options["producer_id"]
    assert check.producer_epoch == options["producer_epoch"]
    assert check.base_sequence == options["base_sequence"]
    assert check.first_timestamp == recs[0].timestamp
    assert check.max_timestamp == max_ts
    assert check.last_offset_delta == recs[-1].offset_delta
    # and kqlab reads its own batch the same way
    rows, (row,) = _kqlab_rows(data)
    assert rows == expected
    _assert_batch_row(row, reader_cls(data), data, recs)


@pytest.mark.parametrize("codec", _ids(KP_CODECS))
@SETTINGS
@given(batch=kqlab_batches())
def test_kqlab_built_batches_read_by_kafka_python(codec: Codec, batch) -> None:
    recs, options = batch
    _check_kqlab_built(KpBatch, codec, "xerial", recs, options)


@pytest.mark.parametrize(("codec", "framing"),
                         [pytest.param(c, f, id=f"{c.label}-{f}") for c, f in KQ_ENCODINGS
                          if _AIO_HAS[c]])
@SETTINGS
@given(batch=kqlab_batches())
def test_kqlab_built_batches_read_by_aiokafka(codec: Codec, framing: str, batch) -> None:
    recs, options = batch
    _check_kqlab_built(AioBatch, codec, framing, recs, options)


@pytest.mark.parametrize(("codec", "framing"),
                         [pytest.param(c, f, id=f"{c.label}-{f}") for c, f in KQ_ENCODINGS])
def test_kqlab_large_batch_all_references(codec: Codec, framing: str) -> None:
    """A > 32 KiB batch (several xerial blocks) with duplicate and null-valued headers."""
    recs = [Rec(i, 1_700_000_000_000 + (i * 7919) % 5000, b"k%d" % i if i % 4 else None,
                (b"%08d" % i) * 200 if i % 5 else None,
                [("dup", b"1"), ("dup", None), ("🔑", b""), ("dup", b"2")][: i % 5])
           for i in range(60)]
    options = {"base_offset": 123456, "partition_leader_epoch": 9, "producer_id": 99,
               "producer_epoch": 3, "base_sequence": 2**31 - 10, "transactional": False,
               "timestamp_type": 0, "compression_level": None}
    data = _build_kqlab(recs, codec, framing, options)
    if codec is Codec.SNAPPY:
        assert data[61:].startswith(XERIAL_MAGIC) == (framing == "xerial")
    readers = [AioBatch] + ([KpBatch] if _KP_HAS[codec] else [])
    for reader in readers:
        _check_kqlab_built(reader, codec, framing, recs, options)


# -- legacy v0/v1 -------------------------------------------------------------------------------


LEGACY_CASES = (
    [pytest.param(KpLegacyBuilder, m, c, id=f"kafka-python-v{m}-{c.label}")
     for m in (0, 1) for c in (Codec.NONE, Codec.GZIP)]
    + [pytest.param(AioLegacyBuilder, m, c, id=f"aiokafka-v{m}-{c.label}")
       for m in (0, 1) for c in (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4)
       if not (m == 0 and c is Codec.LZ4)]  # v0 lz4 needs the broken 0.8 framing
)


@st.composite
def legacy_inputs(draw: st.DrawFn):
    n = draw(st.integers(1, 10))
    ts = [draw(st.integers(0, 2**45)) for _ in range(n)]
    keys = [draw(opt_bytes) for _ in range(n)]
    vals = [draw(values) for _ in range(n)]
    return ts, keys, vals, draw(st.integers(0, 2**40))


@pytest.mark.parametrize(("builder_cls", "magic", "codec"), LEGACY_CASES)
@SETTINGS
@given(inputs=legacy_inputs())
def test_legacy_builders_decode_identically(builder_cls, magic: int, codec: Codec,
                                            inputs) -> None:
    ts, keys, vals, shift = inputs
    n = len(ts)
    b = builder_cls(magic, int(codec), 1 << 30)
    compressed = codec is not Codec.NONE
    for i in range(n):
        # producers number inner messages 0..n-1; uncompressed entries carry absolute offsets
        off = i if compressed else shift + i
        assert b.append(off, ts[i], keys[i], vals[i]) is not None
    data = bytearray(b.build())
    if compressed and magic == 1 and shift:
        # a broker-assigned wrapper offset (outside the CRC): inner offsets rebase onto it
        struct.pack_into(">q", data, 0, shift + n - 1)
    data = bytes(data)
    ref = [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value)
           for batch in MemoryRecords(data) for r in batch]
    d = decode_records(data)
    assert d.issues == []
    assert d.records.schema == RECORDS_SCHEMA
    got = [(r["offset"], r["timestamp"], r["key"], r["value"])
           for r in d.records.to_pylist()]
    assert got == ref
    # and against the inputs themselves
    base = 0 if compressed and magic == 0 else shift
    assert [g[0] for g in got] == [base + i for i in range(n)]
    assert [g[1] for g in got] == (ts if magic == 1 else [-1] * n)
    assert [g[2] for g in got] == keys
    assert [g[3] for g in got] == vals
    rows = d.batches.to_pylist()
    assert len(rows) == (1 if compressed else n)
    assert all(r["crc_valid"] and r["decode_error"] is None for r in rows)
    assert {r["magic"] for r in rows} == {magic}
    assert {r["compression"] for r in rows} == {codec.label}
    assert sum(r["record_count"] for r in rows) == n
    assert {r["timestamp_type"] for r in d.records.to_pylist()} == {0 if magic == 1 else -1}


def test_zstd_batch_split_over_two_frames() -> None:
    """A zstd records stream made of two frames (each with its content size).

    zstd-jni's ``ZstdInputStream`` and kafka-python read across frames; kqlab must decode both
    records rather than report a premature EOF after the first frame.
    """
    import zstandard

    from kqlab.kafka.builder import rewrite_header

    plain = _build_kqlab([Rec(0, 1_700_000_000_000, None, b"a", []),
                          Rec(1, 1_700_000_000_000, None, b"b", [])], Codec.NONE, "xerial",
                         {"base_offset": 0, "partition_leader_epoch": -1, "producer_id": -1,
                          "producer_epoch": -1, "base_sequence": -1, "transactional": False,
                          "timestamp_type": 0, "compression_level": None})
    region = plain[61:]
    cctx = zstandard.ZstdCompressor()
    payload = cctx.compress(region[: len(region) // 2]) + cctx.compress(region[len(region) // 2:])
    header = bytearray(plain[:61])
    struct.pack_into(">i", header, 8, 49 + len(payload))
    data = rewrite_header(bytes(header) + payload, attributes=int(Codec.ZSTD))
    ref = KpBatch(data)
    assert ref.validate_crc()
    assert [r.value for r in KpBatch(data)] == [b"a", b"b"]
    rows, (row,) = _kqlab_rows(data)
    assert row["decode_error"] is None, row["decode_error"]
    assert [r["value"] for r in rows] == [b"a", b"b"]
