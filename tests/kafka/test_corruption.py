"""Corrupt input never crashes, hangs or disappears (spec §1.1 scanning, §3 check order).

Valid batches and whole multi-batch segments are mutated — byte flips, insertions, deletions,
truncations — or replaced by random bytes, then pushed through every reading and validating
entry point: ``scan_buffer``, ``decode_records``, ``TableBuilder.add/take``, ``read_log`` /
``iter_log_tables`` on a real file, and ``PartitionValidator.validate`` in both sources.

The properties:

* nothing raises, and every example finishes well inside the hypothesis deadline;
* tables always conform to ``RECORDS_SCHEMA`` / ``BATCHES_SCHEMA``;
* every batch the scanner finds becomes a batches row (with ``crc_valid`` telling the truth)
  and every scan problem becomes a ``LogIssue``: nothing is dropped;
* every verdict carries a known error code, and a CRC-covered mutation with a stale CRC is
  CORRUPT_MESSAGE at C3 unless a check that runs earlier applies (spec §3 order).
"""

from __future__ import annotations

import itertools
import struct
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kqlab.kafka import (
    BatchBuilder,
    PartitionValidator,
    Record,
    legacy,
    read_log,
    validate_batches,
)
from kqlab.kafka.batch import TableBuilder, decode_batches, decode_records
from kqlab.kafka.checksums import crc32, crc32c
from kqlab.kafka.compression import Codec, compress
from kqlab.kafka.errors import error_for_code
from kqlab.kafka.log import LogIssue, iter_log_batches, iter_log_tables, scan_buffer
from kqlab.kafka.validator import BatchOutcome
from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA

FUZZ = settings(max_examples=150, deadline=2000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])
TS = 1_700_000_000_000

#: validator set-ups covering the paths: U, Z in place / rebuild, compacted, LogAppendTime,
#: the legacy-friendly 3.9 produce v2, a tiny max.message.bytes (C2/E1)
VALIDATOR_SETUPS = [
    {"source": "producer"},
    {"source": "log"},
    {"source": "producer", "config": {"cleanup.policy": "compact"}},
    {"source": "log", "config": {"message.timestamp.type": "LogAppendTime"}},
    {"source": "producer", "config": {"compression.type": "gzip"}},
    {"source": "producer", "config": {"compression.type": "uncompressed"}},
    {"source": "producer", "broker_version": "3.9", "produce_version": 2},
    {"source": "log", "broker_version": "3.9", "produce_version": 2,
     "config": {"message.timestamp.difference.max.ms": 1000}},
    {"source": "producer", "config": {"max.message.bytes": 200}},
    {"source": "log", "config": {"max.message.bytes": 100, "compression.type": "lz4"}},
]


# -- building valid input -----------------------------------------------------------------------

records_st = st.lists(
    st.builds(Record,
              value=st.one_of(st.none(), st.binary(max_size=60),
                              st.just(b"abc" * 40)),
              key=st.one_of(st.none(), st.binary(max_size=8)),
              headers=st.lists(st.tuples(st.sampled_from(["a", "b", "ключ"]),
                                         st.one_of(st.none(), st.binary(max_size=6))),
                               max_size=2).map(tuple),
              timestamp=st.one_of(st.none(), st.integers(TS - 5000, TS + 5000))),
    min_size=1, max_size=6)


@st.composite
def v2_batches(draw: st.DrawFn, base_offset: int = 0) -> bytes:
    codec = draw(st.sampled_from(list(Codec)))
    pid = draw(st.sampled_from([-1, -1, 7, 2**40]))
    b = BatchBuilder(codec=codec, base_offset=base_offset, base_timestamp=TS,
                     producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                     base_sequence=draw(st.integers(0, 100)) if pid >= 0 else -1,
                     transactional=pid >= 0 and draw(st.booleans()),
                     timestamp_type=draw(st.sampled_from([0, 0, 1])),
                     snappy_framing=draw(st.sampled_from(["xerial", "raw"])))
    for r in draw(records_st):
        b.append(r)
    return b.build()


@st.composite
def legacy_batches(draw: st.DrawFn, base_offset: int = 0) -> bytes:
    magic = draw(st.sampled_from([0, 1]))
    msgs = [(draw(st.one_of(st.none(), st.binary(max_size=5))), draw(st.binary(max_size=30)),
             TS + i) for i in range(draw(st.integers(1, 4)))]
    codec = draw(st.sampled_from([Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]))
    if codec is Codec.NONE:
        k, v, ts = msgs[0]
        return legacy.encode_message(base_offset, k, v, magic=magic, timestamp=ts)
    return legacy.encode_wrapper(msgs, magic=magic, codec=codec, base_offset=base_offset)


any_batch = st.one_of(v2_batches(), v2_batches(), legacy_batches())


@st.composite
def segments(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """A v2 log segment of 1-6 batches with continuous broker-assigned offsets."""
    parts, starts, offset, pos = [], [], draw(st.integers(0, 10**6)), 0
    for _ in range(draw(st.integers(1, 6))):
        data = draw(v2_batches(base_offset=offset))
        n = struct.unpack_from(">i", data, 57)[0]
        parts.append(data)
        starts.append(pos)
        pos += len(data)
        offset += n
    return b"".join(parts), starts


# -- mutations ----------------------------------------------------------------------------------


@st.composite
def flips(draw: st.DrawFn, data: bytes, lo: int = 0, skip: frozenset[int] = frozenset()
          ) -> tuple[bytes, set[int]]:
    """XOR 1-4 bytes at positions >= lo (never in ``skip``); returns the changed positions."""
    candidates = [i for i in range(lo, len(data)) if i not in skip]
    assume(candidates)
    positions = draw(st.sets(st.sampled_from(candidates), min_size=1, max_size=4))
    out = bytearray(data)
    for p in positions:
        out[p] ^= draw(st.integers(1, 255))
    return bytes(out), positions


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """Any mix of flips, insertions, deletions and truncation."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "flip", "insert", "delete", "truncate",
                                     "length"]))
        if kind == "flip" and out:
            i = draw(st.integers(0, len(out) - 1))
            out[i] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            i = draw(st.integers(0, len(out)))
            out[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and out:
            i = draw(st.integers(0, len(out) - 1))
            del out[i:i + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del out[draw(st.integers(0, len(out))):]
        elif kind == "length" and len(out) >= 12:
            struct.pack_into(">i", out, 8, draw(st.sampled_from(
                [-1, 0, 13, 14, 25, 48, 61, 2**31 - 1, len(out) - 12 + 1,
                 len(out) - 12 - 1])))
    return bytes(out)


def _fix_crc(data: bytes) -> bytes:
    """Recompute the checksum of a (possibly mutated) batch so validation reaches stage D."""
    out = bytearray(data)
    if len(out) >= 61 and out[16] == 2:
        struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    elif len(out) >= 26 and out[16] in (0, 1):
        struct.pack_into(">I", out, 12, crc32(bytes(out[16:])))
    return bytes(out)


# -- invariants ---------------------------------------------------------------------------------


def _scan(data: bytes) -> tuple[list[tuple[int, bytes]], list[LogIssue]]:
    batches, issues = [], []
    for item in scan_buffer(data):
        if isinstance(item, LogIssue):
            issues.append(item)
        else:
            batches.append(item)
    return batches, issues


def _check_scan(data: bytes) -> tuple[list[tuple[int, bytes]], list[LogIssue]]:
    batches, issues = _scan(data)
    pos = 0
    for p, chunk in batches:
        assert p == pos
        assert data[p:p + len(chunk)] == chunk
        assert len(chunk) >= 12 + 14
        assert struct.unpack_from(">i", chunk, 8)[0] == len(chunk) - 12
        pos += len(chunk)
    assert len(issues) <= 1
    if issues:
        (issue,) = issues
        assert issue.position == pos
        assert issue.kind in ("truncated_tail", "corrupt_length")
        assert issue.bytes == len(data) - pos
    else:
        assert pos == len(data)
    return batches, issues


def _check_tables(records: pa.Table, batches: pa.Table) -> None:
    assert records.schema == RECORDS_SCHEMA
    assert batches.schema == BATCHES_SCHEMA
    rows = batches.to_pylist()
    declared = sum(max(r["record_count"] or 0, 0) for r in rows)
    assert records.num_rows <= declared
    assert set(records.column("batch_offset").to_pylist()) <= {r["batch_offset"] for r in rows}
    for r in rows:
        assert r["size_bytes"] is not None
        assert isinstance(r["crc_valid"], bool)
        if r["magic"] == 2 and r["size_bytes"] >= 61:
            assert r["crc"] is not None


def _check_decoded(data: bytes) -> pa.Table:
    scanned, issues = _check_scan(data)
    d = decode_records(data, topic="t", partition=1)
    _check_tables(d.records, d.batches)
    rows = d.batches.to_pylist()
    # nothing dropped: one row per scanned batch, at its position, plus the scan issues
    assert len(rows) == len(scanned)
    assert [r["position"] for r in rows] == [p for p, _ in scanned]
    assert d.issues == issues
    if data:
        assert len(rows) + len(d.issues) >= 1
    for (_, chunk), r in zip(scanned, rows, strict=True):
        assert r["size_bytes"] == len(chunk)
        if chunk[16] == 2 and len(chunk) >= 61:
            stored = struct.unpack_from(">I", chunk, 17)[0]
            assert r["crc_valid"] == (crc32c(chunk[21:]) == stored)
        elif chunk[16] not in (0, 1, 2) or (chunk[16] == 2 and len(chunk) < 61):
            assert r["crc_valid"] is False
            assert r["decode_error"] is not None
    # decode_batches on the scanned pieces and TableBuilder directly agree
    other = decode_batches([c for _, c in scanned], topic="t", partition=1)
    assert other.records.equals(d.records)
    assert other.batches.drop_columns(["position"]).equals(d.batches.drop_columns(["position"]))
    return d.batches


def _check_outcome(out: BatchOutcome) -> None:
    assert isinstance(out, BatchOutcome)
    err = error_for_code(out.error_code)
    assert err.name == out.error_name
    if out.error_code == 0:
        assert out.record_errors == []
    if out.record_errors:
        assert out.error_code in (32, 87)
        assert all(i >= 0 and isinstance(m, str) for i, m in out.record_errors)
    if out.error_code != 0:
        assert out.check


def _validate_all(data: bytes) -> list[BatchOutcome]:
    outs = []
    for setup in VALIDATOR_SETUPS:
        kw = dict(setup)
        v = PartitionValidator("t", 0, kw.pop("config", None), now=TS, **kw)
        out = v.validate(data)
        _check_outcome(out)
        outs.append(out)
    return outs


# -- decoding: single batches ---------------------------------------------------------------------


@FUZZ
@given(st.data())
def test_mutated_batch_decodes_without_raising(data: st.DataObject) -> None:
    original = data.draw(any_batch)
    bad = data.draw(mutated(original))
    if data.draw(st.booleans()):
        bad = _fix_crc(bad)
    _check_decoded(bad)


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes_decode_without_raising(data: bytes) -> None:
    _check_decoded(data)


@FUZZ
@given(st.data())
def test_crc_region_flip_is_reported(data: st.DataObject) -> None:
    original = data.draw(v2_batches())
    bad, _ = data.draw(flips(original, lo=21))
    stale = crc32c(bad[21:]) != struct.unpack_from(">I", bad, 17)[0]
    batches = _check_decoded(bad)
    (row,) = batches.to_pylist()
    assert row["crc_valid"] is (not stale)
    if stale:  # never dropped: the row stays, flagged
        assert row["position"] == 0 and row["size_bytes"] == len(original)


@FUZZ
@given(st.data())
def test_header_bytes_fuzz_with_fresh_crc(data: st.DataObject) -> None:
    """Random header fields (counts, deltas, attributes, codec ids 5-7) under a valid CRC."""
    original = bytearray(data.draw(v2_batches()))
    for field, fmt in ((21, ">h"), (23, ">i"), (27, ">q"), (35, ">q"), (43, ">q"),
                       (51, ">h"), (53, ">i"), (57, ">i")):
        if data.draw(st.booleans()):
            size = struct.calcsize(fmt) * 8
            value = data.draw(st.one_of(st.integers(-(2 ** (size - 1)), 2 ** (size - 1) - 1),
                                        st.sampled_from([-1, 0, 1, 2, 5, 7])))
            struct.pack_into(fmt, original, field, value)
    bad = _fix_crc(bytes(original))
    rows = _check_decoded(bad).to_pylist()
    assert rows[0]["crc_valid"] is True
    for out in _validate_all(bad):
        assert out.check != "C3"


@FUZZ
@given(st.data())
def test_compressed_garbage_under_valid_crc(data: st.DataObject) -> None:
    """A well-formed header around random (possibly compressed) records bytes."""
    codec = data.draw(st.sampled_from(list(Codec)))
    body = data.draw(st.binary(max_size=300))
    if data.draw(st.booleans()):
        body = compress(codec, body)
    count = data.draw(st.integers(-2, 8))
    header = struct.pack(">qiibIhiqqqhii", 0, 49 + len(body), -1, 2, 0, int(codec),
                         count - 1, TS, TS, -1, -1, -1, count)
    batch = _fix_crc(header + body)
    _check_decoded(batch)
    _validate_all(batch)


@FUZZ
@given(st.lists(st.one_of(st.binary(max_size=80), any_batch,
                          any_batch.flatmap(lambda b: mutated(b))), max_size=6))
def test_table_builder_add_take_never_raises(chunks: list[bytes]) -> None:
    builder = TableBuilder("t", 2)
    for i, chunk in enumerate(chunks):
        builder.add(i, chunk)  # even mis-framed input becomes a row
        if i == 2:
            records, batches = builder.take()
            _check_tables(records, batches)
            assert batches.num_rows == 3
    records, batches = builder.take()
    _check_tables(records, batches)
    assert batches.num_rows == (len(chunks) - 3 if len(chunks) > 2 else len(chunks))
    assert set(batches.column("position").to_pylist()) <= set(range(len(chunks)))


# -- decoding: segments and files -----------------------------------------------------------------


def _write(tmp: Path, data: bytes) -> Path:
    folder = tmp / "orders-3"
    folder.mkdir(exist_ok=True)
    path = folder / "00000000000000000000.log"
    path.write_bytes(data)
    return folder


def _check_file(data: bytes, chunk: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = _write(Path(tmp), data)
        whole = read_log(folder)
        _check_tables(whole.records, whole.batches)
        assert set(whole.batches.column("topic").to_pylist()) <= {"orders"}
        buf = decode_records(data, topic="orders", partition=3)
        assert whole.records.equals(buf.records)
        assert whole.batches.equals(buf.batches)
        # file issues carry the file name; otherwise the same as the buffer scan
        assert [(i.kind, i.position, i.bytes) for i in whole.issues] == [
            (i.kind, i.position, i.bytes) for i in buf.issues]
        assert all(i.file and i.file.endswith(".log") for i in whole.issues)
        parts = list(iter_log_tables(folder, chunk_batches=chunk))
        assert all(p.batches.num_rows <= chunk for p in parts)
        assert pa.concat_tables([p.records for p in parts]).equals(whole.records)
        assert pa.concat_tables([p.batches for p in parts]).equals(whole.batches)
        assert [i for p in parts for i in p.issues] == whole.issues
        raw = [x for x in iter_log_batches(folder) if not isinstance(x, LogIssue)]
        verdicts = validate_batches(iter_log_batches(folder), topic="orders", partition=3,
                                    now=TS, source="log")
        assert verdicts.num_rows == len(raw)
        for code, name in zip(verdicts.column("error_code").to_pylist(),
                              verdicts.column("error_name").to_pylist(), strict=True):
            assert error_for_code(code).name == name


@FUZZ
@given(segments(), st.integers(1, 4))
def test_valid_segment_roundtrip(segment, chunk: int) -> None:
    data, starts = segment
    rows = _check_decoded(data).to_pylist()
    assert [r["position"] for r in rows] == starts
    assert all(r["decode_error"] is None and r["crc_valid"] for r in rows)
    for prev, nxt in itertools.pairwise(rows):
        assert nxt["batch_offset"] == prev["batch_offset"] + prev["last_offset_delta"] + 1
    _check_file(data, chunk)


@FUZZ
@given(st.data(), st.integers(1, 3))
def test_mutated_segment(data: st.DataObject, chunk: int) -> None:
    segment, _ = data.draw(segments())
    bad = data.draw(mutated(segment))
    _check_decoded(bad)
    _check_file(bad, chunk)
    v = validate_batches([c for _, c in _scan(bad)[0]], topic="t", partition=0, now=TS,
                         source="log")
    assert v.num_rows == len(_scan(bad)[0])


@FUZZ
@given(st.data())
def test_segment_flip_keeps_every_batch(data: st.DataObject) -> None:
    """Flips that leave the framing intact: every batch is still a row; hit ones flag CRC."""
    segment, starts = data.draw(segments())
    ends = [*starts[1:], len(segment)]
    framing = frozenset(p for s in starts for p in (*range(s + 8, s + 12), s + 16))
    bad, hit = data.draw(flips(segment, skip=framing))
    rows = _check_decoded(bad).to_pylist()
    assert [r["position"] for r in rows] == starts
    for s, e, r in zip(starts, ends, rows, strict=True):
        touched = {p for p in hit if s + 17 <= p < e}  # CRC field or the CRC-covered bytes
        if not touched:
            assert r["crc_valid"] is True
            if not {p for p in hit if s <= p < e}:
                assert r["decode_error"] is None
        else:
            chunk = bad[s:e]
            assert r["crc_valid"] == (crc32c(chunk[21:]) == struct.unpack_from(">I", chunk, 17)[0])


@FUZZ
@given(st.data(), st.integers(1, 4))
def test_truncated_tail(data: st.DataObject, chunk: int) -> None:
    segment, starts = data.draw(segments())
    ends = [*starts[1:], len(segment)]
    k = data.draw(st.integers(0, len(starts) - 1))
    cut = data.draw(st.integers(starts[k] + 1, ends[k] - 1))
    cut_data = segment[:cut]
    d = decode_records(cut_data)
    _check_tables(d.records, d.batches)
    rows = d.batches.to_pylist()
    assert len(rows) == k
    assert all(r["decode_error"] is None and r["crc_valid"] for r in rows)
    assert len(d.issues) == 1
    (issue,) = d.issues
    assert issue.kind == "truncated_tail"
    assert issue.position == starts[k]
    assert issue.bytes == cut - starts[k]
    full = decode_records(segment)
    n_before = sum(r["record_count"] for r in rows)
    assert d.records.equals(full.records.slice(0, n_before))
    with tempfile.TemporaryDirectory() as tmp:
        folder = _write(Path(tmp), cut_data)
        log = read_log(folder)
        assert [i.kind for i in log.issues] == ["truncated_tail"]
        assert log.batches.num_rows == k
        _check_file(cut_data, chunk)


# -- validation -----------------------------------------------------------------------------------


@FUZZ
@given(st.data())
def test_validator_never_raises_on_mutations(data: st.DataObject) -> None:
    original = data.draw(any_batch)
    bad = data.draw(mutated(original))
    if data.draw(st.booleans()):
        bad = _fix_crc(bad)
    _validate_all(bad)


@FUZZ
@given(st.binary(max_size=400))
def test_validator_never_raises_on_random_bytes(data: bytes) -> None:
    _validate_all(data)


@FUZZ
@given(segments())
def test_validator_multi_batch_requests(segment) -> None:
    data, starts = segment
    for out in _validate_all(data):
        if len(starts) > 1:
            assert not out.accepted  # A4.d / D1: v2 requests carry exactly one batch


def _expected_stale_crc_verdict(data: bytes, source: str) -> tuple[int, str] | None:
    """Spec §3 order for one v2 batch whose framing (length, magic) is intact."""
    base_offset = struct.unpack_from(">q", data, 0)[0]
    if source == "producer" and base_offset != 0:
        return 87, "C1"
    if crc32c(data[21:]) != struct.unpack_from(">I", data, 17)[0]:
        return 2, "C3"
    return None


@FUZZ
@given(st.data(), st.sampled_from(["producer", "log"]))
def test_stale_crc_is_corrupt_message(data: st.DataObject, source: str) -> None:
    original = data.draw(v2_batches())
    assume(len(original) <= 1048588)
    # anything but the framing (length, magic): header fields, the CRC, records bytes
    bad, _ = data.draw(flips(original, skip=frozenset({8, 9, 10, 11, 16})))
    expected = _expected_stale_crc_verdict(bad, source)
    v = PartitionValidator("t", 0, None, now=TS, source=source)
    out = v.validate(bad)
    _check_outcome(out)
    if expected is not None:
        assert (out.error_code, out.check) == expected, out
        if expected[1] == "C3":
            assert out.error_name == "CORRUPT_MESSAGE"
            assert out.record_errors == [] and out.error_message is None
            assert out.retriable


@FUZZ
@given(st.data(), st.sampled_from(["producer", "log"]))
def test_crc_covered_mutation_always_c3(data: st.DataObject, source: str) -> None:
    """Mutations strictly inside the CRC-covered region [21, end) with the CRC left stale."""
    original = data.draw(v2_batches())
    bad, _ = data.draw(flips(original, lo=21))
    assume(crc32c(bad[21:]) != struct.unpack_from(">I", bad, 17)[0])
    out = PartitionValidator("t", 0, None, now=TS, source=source).validate(bad)
    assert (out.error_code, out.check) == (2, "C3"), out
    # the same batch through the segment path: a row flagged crc_valid=False, verdict C3
    rows = decode_records(bad).batches.to_pylist()
    assert [r["crc_valid"] for r in rows] == [False]
    verdicts = validate_batches([bad], topic="t", partition=0, now=TS, source=source)
    assert verdicts.column("check").to_pylist() == ["C3"]


@FUZZ
@given(st.data())
def test_legacy_stale_crc_is_corrupt_message(data: st.DataObject) -> None:
    original = data.draw(legacy_batches())
    bad, _ = data.draw(flips(original, lo=17))  # attributes .. end: covered by CRC-32
    assume(crc32(bad[16:]) != struct.unpack_from(">I", bad, 12)[0])
    for source in ("producer", "log"):
        v = PartitionValidator("t", 0, None, broker_version="3.9", produce_version=2, now=TS,
                               source=source)
        out = v.validate(bad)
        assert (out.error_code, out.check) == (2, "C3"), out


@pytest.mark.parametrize("source", ["producer", "log"])
def test_spec_v4_sequence_overwrite(source: str) -> None:
    """Spec §10 V4: seq := -2 without a fresh CRC gives 2 (C3), with one 87 (D2.f)."""
    v4 = bytes.fromhex(
        "00000000000000000000003affffffff02239656cf0000000000000000018bcfe568000000018bcfe568"
        "0000000000000004d20000000000000000000110000000026b027600")
    v = PartitionValidator("t", 0, None, now=TS, source=source)
    assert v.validate(v4).error_code == 0
    stale = v4[:53] + b"\xff\xff\xff\xfe" + v4[57:]
    out = PartitionValidator("t", 0, None, now=TS, source=source).validate(stale)
    assert (out.error_code, out.check) == (2, "C3")
    out = PartitionValidator("t", 0, None, now=TS, source=source).validate(_fix_crc(stale))
    assert (out.error_code, out.check) == (87, "D2.f")


def test_scan_rules_s0_to_s4() -> None:
    """Spec §1.1 on tiny inputs: ignored tails, short lengths, bad magic, truncation."""
    good = BatchBuilder(base_timestamp=TS, records=[Record(value=b"v")]).build()
    assert _scan(b"") == ([], [])
    _, issues = _scan(good + b"\x00" * 11)
    assert [i.kind for i in issues] == ["truncated_tail"]
    _, issues = _scan(struct.pack(">qi", 0, 13) + b"\x00" * 20)
    assert [i.kind for i in issues] == ["corrupt_length"]
    _, issues = _scan(good[:-1])
    assert [(i.kind, i.position) for i in issues] == [("truncated_tail", 0)]
    bad_magic = bytearray(good)
    bad_magic[16] = 7
    batches, issues = _scan(bytes(bad_magic) + good)
    assert [p for p, _ in batches] == [0, len(good)] and issues == []
    rows = decode_records(bytes(bad_magic) + good).batches.to_pylist()
    assert "Invalid magic found in record: 7" in rows[0]["decode_error"]
    assert rows[1]["decode_error"] is None
    out = PartitionValidator("t", 0, None, now=TS, source="producer").validate(bytes(bad_magic))
    assert (out.error_code, out.check, out.whole_request) == (2, "A1", True)


def _stale(batch: bytes) -> bytes:
    out = bytearray(batch)
    out[-1] ^= 0x5A  # inside the CRC-covered region, CRC left as it was
    return bytes(out)


def test_check_order_around_c3() -> None:
    """Spec §3: A1 < A4.d < B0 < C1 < C2 < C3 for a batch that is also CRC-corrupt."""
    good = BatchBuilder(base_timestamp=TS, records=[Record(value=b"v" * 50)]).build()
    bad = _stale(good)

    def verdict(data: bytes, **kw) -> BatchOutcome:
        kw.setdefault("source", "producer")
        config = kw.pop("config", None)
        out = PartitionValidator("t", 0, config, now=TS, **kw).validate(data)
        _check_outcome(out)
        return out

    out = verdict(bad)
    assert (out.error_code, out.check, out.whole_request) == (2, "C3", False)
    assert out.detail == (f"Record is corrupt (stored crc = {struct.unpack_from('>I', bad, 17)[0]})"
                          " in topic partition t-0.")
    # C2 runs before C3
    out = verdict(bad, config={"max.message.bytes": len(bad) - 1})
    assert (out.error_code, out.check) == (10, "C2")
    out = verdict(bad, config={"max.message.bytes": len(bad)})
    assert (out.error_code, out.check) == (2, "C3")
    # C1 (producer bytes only) runs before C2
    moved = bytearray(bad)
    struct.pack_into(">q", moved, 0, 5)
    out = verdict(bytes(moved), config={"max.message.bytes": 10})
    assert (out.error_code, out.check) == (87, "C1")
    out = verdict(bytes(moved), source="log")
    assert (out.error_code, out.check) == (2, "C3")
    # A1: the first batch cannot be scanned -> whole request, the text is returned
    short = struct.pack(">qi", 0, 13) + b"\x00" * 13
    out = verdict(short)
    assert (out.error_code, out.check, out.whole_request) == (2, "A1", True)
    assert out.error_message == "Record size 13 is less than the minimum record overhead (14)"
    # A4.d: the *second* batch cannot be scanned -> CORRUPT_MESSAGE for this partition only
    out = verdict(bad + short)
    assert (out.error_code, out.check, out.whole_request) == (2, "A4.d", False)
    assert out.error_message is None
    out = verdict(bad + good)
    assert (out.error_code, out.check) == (87, "A4.d")
    # B0: a v2 first batch of 26..50 bytes is a whole-request UNKNOWN_SERVER_ERROR
    tiny = bytearray(bad[:40])
    struct.pack_into(">i", tiny, 8, 40 - 12)
    out = verdict(bytes(tiny))
    assert (out.error_code, out.check, out.whole_request) == (-1, "B0", True)
    assert out.error_message is None
    # 51..60 bytes: past B0, then C3 (size < 61 is never a valid v2 batch)
    small = bytearray(bad[:55])
    struct.pack_into(">i", small, 8, 55 - 12)
    out = verdict(bytes(small))
    assert (out.error_code, out.check) == (2, "C3")
    rows = decode_records(bytes(small)).batches.to_pylist()
    assert rows[0]["crc_valid"] is False and rows[0]["decode_error"] is not None
