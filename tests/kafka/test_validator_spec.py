"""``PartitionValidator`` against the spec ``shared/spec/kafka-validation.md``.

Every case of section 9 (T1-T26) and every byte vector of section 10 (V1-V4 and the listed
mutations), plus the timestamp rules of §3.D.4 (overflow, LAT bit, ≤3.5 difference rule, 3.6-3.9
fallback, 4.0 defaults) and the whole-request errors of §5.4.

Conventions: bytes are validated as a producer sent them (``source="producer"``) with a fixed broker
clock; the upstream tests' "before = after = 1000 ms" is a topic config.  v0/v1 message sets need a
3.x broker and produce v0-2; ``toMagic`` < 2 comes from ``inter.broker.protocol.version`` < 3.0
plus ``message.format.version``.  Where a case is about broker effects (stays uncompressed, bytes
kept, LogAppendTime overwrite) the outcome's ``path`` and ``log_append_time`` are asserted.
Producer state (T25 and section 3.F) lives in ``test_validator_producer_state.py``.
"""

from __future__ import annotations

import pytest

from kqlab.errors import ConfigError
from kqlab.kafka import legacy
from kqlab.kafka.builder import Record, build_batch, control_record, rewrite_header
from kqlab.kafka.checksums import crc32c
from kqlab.kafka.compression import Codec, compress
from kqlab.kafka.validator import BatchOutcome, PartitionValidator

TS = 1_700_000_000_000  # the §10 vectors' timestamp
NOW = TS
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
HOUR = 3_600_000
DAY = 24 * HOUR
TP = "t-0"

CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
CODEC_IDS = [c.label for c in CODECS]
#: compression.type values forcing a target codec (spec §2), in CODECS order
TARGETS = ["uncompressed", "gzip", "snappy", "lz4", "zstd"]
CODEC_PAIRS = [pytest.param(s, t, id=f"{s.label}->{t}") for s in CODECS for t in TARGETS]
LEGACY_CODECS = [Codec.GZIP, Codec.LZ4, Codec.SNAPPY]
BOUNDS_1000 = {"message.timestamp.before.max.ms": 1000, "message.timestamp.after.max.ms": 1000}
#: the count-override tests' topic (LogAppendTime, before = after = 1000)
LAT_TOPIC = {"message.timestamp.type": "LogAppendTime", **BOUNDS_1000}

# --------------------------------------------------------------------------------------------
# §10 byte vectors, verbatim
# --------------------------------------------------------------------------------------------
V1_HEX = """
00000000 00000000 0000003a ffffffff 02 e99b8dd8 0000 00000000
0000018bcfe56800 0000018bcfe56800 ffffffffffffffff ffff ffffffff 00000001
10 00 00 00 02 6b 02 76 00
"""
V2_HEX = "000000000000000000000039ffffffff02d3f2ac750000000000000000018bcfe568000000018bcfe56800ffffffffffffffffffffffffffff000000010e00000001027600"  # noqa: E501
V3_HEX = "000000000000000000000059ffffffff027c6522200000000000020000018bcfe568000000018bcfe56800ffffffffffffffffffffffffffff0000000316000000010a68656c6c6f0016000002010a7468657265001e000004011262656175746966756c00"  # noqa: E501
V4_HEX = "00000000000000000000003affffffff02239656cf0000000000000000018bcfe568000000018bcfe5680000000000000004d20000000000000000000110000000026b027600"  # noqa: E501
V1 = bytes.fromhex("".join(V1_HEX.split()))
V2 = bytes.fromhex(V2_HEX)
V3 = bytes.fromhex(V3_HEX)
V4 = bytes.fromhex(V4_HEX)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def validator(config: dict | None = None, *, version: str | None = None, now: int = NOW,
              **request) -> PartitionValidator:
    """A leader for ``t-0`` validating bytes as a producer sent them."""
    return PartitionValidator("t", 0, config, broker_version=version, now=now,
                              source="producer", **request)


def legacy_config(to_magic: int, config: dict | None = None) -> dict:
    """3.x configs giving ``toMagic`` (IBP < 3.0 makes ``message.format.version`` count)."""
    cfg = dict(config or {})
    if to_magic < 2:
        cfg["inter.broker.protocol.version"] = "2.8"
        cfg["message.format.version"] = {0: "0.9.0", 1: "0.10.0"}[to_magic]
    return cfg


def old_validator(to_magic: int, config: dict | None = None, *, now: int = NOW,
                  produce_version: int = 2, **request) -> PartitionValidator:
    """A 3.9 leader accepting v0/v1 message sets (produce v0-2) with the given ``toMagic``."""
    v = PartitionValidator("t", 0, legacy_config(to_magic, config), broker_version="3.9",
                           now=now, source="producer", produce_version=produce_version,
                           **request)
    assert v.config.to_magic == to_magic
    return v


def v2(values=(b"hello", b"there", b"beautiful"), *, keys=None, ts: int = NOW, **options
       ) -> bytes:
    """A v2 batch of records with the given values (null keys unless ``keys``)."""
    keys = keys if keys is not None else [None] * len(values)
    return build_batch([Record(value=v, key=k) for k, v in zip(keys, values, strict=True)],
                       base_timestamp=ts, **options)


def legacy_set(magic: int, values=(b"hello", b"there", b"beautiful"), *, keys=None,
               ts: int = NOW) -> bytes:
    """Uncompressed v0/v1 data: one single-message entry per record, offsets 0..n-1."""
    keys = keys if keys is not None else [None] * len(values)
    return b"".join(legacy.encode_message(i, k, v, magic=magic, timestamp=ts)
                    for i, (k, v) in enumerate(zip(keys, values, strict=True)))


def legacy_wrapper(magic: int, codec: Codec, values=(b"hello", b"there", b"beautiful"), *,
                   keys=None, ts: int = NOW, **options) -> bytes:
    """A compressed v0/v1 wrapper around the records."""
    keys = keys if keys is not None else [None] * len(values)
    return legacy.encode_wrapper(
        [(k, v, ts if magic >= 1 else -1) for k, v in zip(keys, values, strict=True)],
        magic=magic, codec=codec, **options)


def raw_wrapper(magic: int, codec: Codec, inner: list[bytes], *, wrapper_offset: int,
                timestamp: int = -1) -> bytes:
    """A compressed wrapper around already-encoded inner entries (for broken shapes)."""
    payload = compress(codec, b"".join(inner))
    return legacy.encode_message(wrapper_offset, None, payload, magic=magic,
                                 attributes=int(codec), timestamp=timestamp)


def range_error(ts: int, offset: int, lo: int, hi: int) -> str:
    return (f"Timestamp {ts} of message with offset {offset} is out of range. The timestamp "
            f"should be within [{lo}, {hi}]")


def lat_error(record: str) -> str:
    return (f"Invalid timestamp type in message {record}. Producer should not set timestamp type "
            "to LogAppendTime.")


NO_KEY = f"Compacted topic cannot accept message without key in topic partition {TP}"
INVALID_TS_MESSAGE = "One or more records have been rejected due to invalid timestamp"


def invalid_record_message(errors: list[tuple[int, str]]) -> str:
    """§3.D.5: the InvalidRecordException text (first three errors, Java list rendering)."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return (f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]")


def corrupt_text(stored_crc: int) -> str:
    return f"Record is corrupt (stored crc = {stored_crc}) in topic partition {TP}."


def assert_accepted(out: BatchOutcome, *, path: str | None = None, base_offset: int = 0,
                    log_append_time: int = -1, record_count: int | None = None) -> None:
    assert (out.error_code, out.error_name) == (0, "NONE"), out
    assert out.record_errors == []
    assert out.error_message is None
    assert out.whole_request is False
    assert out.duplicate is False
    assert out.base_offset == base_offset
    assert out.log_append_time == log_append_time
    if path is not None:
        assert out.path == path, out
    if record_count is not None:
        assert out.record_count == record_count


def assert_rejected(out: BatchOutcome, code: int, name: str, check: str, *,
                    detail: str | None = None, record_errors: list | None = None,
                    error_message: str | None = None, whole_request: bool = False) -> None:
    assert (out.error_code, out.error_name, out.check) == (code, name, check), out
    assert out.record_errors == (record_errors or [])
    assert out.error_message == error_message
    assert out.whole_request is whole_request
    assert out.base_offset == -1
    assert out.log_append_time == -1
    assert out.duplicate is False
    if detail is not None:
        assert out.detail == detail


def assert_invalid_record(out: BatchOutcome, check: str, errors: list[tuple[int, str]]) -> None:
    """RecordValidationException with INVALID_RECORD on top (§3.D.5, §5.2)."""
    assert_rejected(out, 87, "INVALID_RECORD", check, record_errors=errors,
                    error_message=invalid_record_message(errors))


def assert_invalid_timestamp(out: BatchOutcome, errors: list[tuple[int, str]], *,
                             check: str = "R4") -> None:
    """RecordValidationException with INVALID_TIMESTAMP on top (§3.D.5, §5.2)."""
    assert_rejected(out, 32, "INVALID_TIMESTAMP", check, record_errors=errors,
                    error_message=INVALID_TS_MESSAGE)


# --------------------------------------------------------------------------------------------
# §10 byte vectors
# --------------------------------------------------------------------------------------------
class TestByteVectors:
    def test_v1_layout_and_crc(self):
        assert len(V1) == 70
        assert V1[17:21] == bytes.fromhex("e99b8dd8")
        assert crc32c(V1[21:]) == 0xE99B8DD8 == 3919285720
        # the record: length 8, attributes, tsΔ, offΔ, key "k", value "v", no headers
        assert V1[61:] == bytes.fromhex("10000000026b027600")

    @pytest.mark.parametrize(("vector", "records", "options", "size", "crc"), [
        pytest.param(V1, [Record(key=b"k", value=b"v")], {}, 70, 0xE99B8DD8, id="V1"),
        pytest.param(V2, [Record(value=b"v")], {}, 69, 0xD3F2AC75, id="V2"),
        pytest.param(V3, [Record(value=b"hello"), Record(value=b"there"),
                          Record(value=b"beautiful")], {}, 101, 0x7C652220, id="V3"),
        pytest.param(V4, [Record(key=b"k", value=b"v")],
                     {"producer_id": 1234, "producer_epoch": 0, "base_sequence": 0}, 70,
                     0x239656CF, id="V4"),
    ])
    def test_build_batch_reproduces_vector(self, vector, records, options, size, crc):
        built = build_batch(records, base_timestamp=TS, **options)
        assert built == vector
        assert len(built) == size
        assert int.from_bytes(built[17:21], "big") == crc == crc32c(built[21:])

    @pytest.mark.parametrize("version", ["3.9", "4.0"])
    def test_v1_accepted(self, version):
        assert_accepted(validator(version=version).validate(V1), path="U", record_count=1)

    @pytest.mark.parametrize("ple", [0, 40, 12345, -7, 2**31 - 1])
    def test_v1_partition_leader_epoch_not_crc_covered_and_accepted(self, ple):
        mutated = rewrite_header(V1, fix_crc=False, partition_leader_epoch=ple)
        assert mutated[17:21] == V1[17:21]
        assert crc32c(mutated[21:]) == 0xE99B8DD8
        assert_accepted(validator().validate(mutated), path="U")

    def test_v2_null_key_non_compacted_accepted(self):
        assert_accepted(validator().validate(V2), path="U")

    def test_v2_null_key_compacted_rejected(self):
        out = validator({"cleanup.policy": "compact"}).validate(V2)
        assert_rejected(
            out, 87, "INVALID_RECORD", "R3",
            record_errors=[(0, "Compacted topic cannot accept message without key in topic "
                               "partition t-0")],
            error_message="One or more records have been rejected due to 1 record errors in "
                          "total, and only showing the first three errors at most: "
                          "[RecordError(batchIndex=0, message='Compacted topic cannot accept "
                          "message without key in topic partition t-0')]")

    def test_v3_out_of_range_by_one_ms(self):
        out = validator(BOUNDS_1000, version="3.9", now=TS + 1001).validate(V3)
        first = ("Timestamp 1700000000000 of message with offset 0 is out of range. The "
                 "timestamp should be within [1700000000001, 1700000002001]")
        assert_invalid_timestamp(out, [
            (0, first),
            (1, range_error(TS, 1, TS + 1, TS + 2001)),
            (2, range_error(TS, 2, TS + 1, TS + 2001)),
        ])

    def test_v3_in_range_at_1000_ms(self):
        assert_accepted(validator(BOUNDS_1000, now=TS + 1000).validate(V3), record_count=3)

    def test_v4_idempotent_accepted(self):
        assert_accepted(validator().validate(V4), path="U")

    def test_v4_sequence_minus_2_stale_crc_is_corrupt(self):
        mutated = V4[:53] + bytes.fromhex("fffffffe") + V4[57:]
        assert mutated == rewrite_header(V4, fix_crc=False, base_sequence=-2)
        out = validator().validate(mutated)
        assert_rejected(out, 2, "CORRUPT_MESSAGE", "C3", detail=corrupt_text(0x239656CF))

    def test_v4_sequence_minus_2_fresh_crc_is_invalid_sequence(self):
        out = validator().validate(rewrite_header(V4, base_sequence=-2))
        assert_rejected(out, 87, "INVALID_RECORD", "D2.f",
                        detail="Invalid sequence number -2 in record batch with producerId 1234 "
                               "in topic partition t-0")

    def test_mutation_base_offset_1_keeps_crc_and_fails_c1(self):
        mutated = rewrite_header(V1, fix_crc=False, base_offset=1)
        assert crc32c(mutated[21:]) == 0xE99B8DD8
        out = validator().validate(mutated)
        assert_rejected(out, 87, "INVALID_RECORD", "C1",
                        detail="The baseOffset of the record batch in the append to t-0 should "
                               "be 0, but it is 1")

    def test_mutation_batch_length_too_long_is_truncated_and_ignored(self):
        # S4: the only batch runs past the end, so no batch is found (A4.a for produce v3+)
        out = validator().validate(rewrite_header(V1, fix_crc=False, batch_length=0x3B))
        assert_rejected(out, 87, "INVALID_RECORD", "A4.a")

    @pytest.mark.parametrize("length", [10, 13, 0, -1])
    def test_mutation_batch_length_below_14_fails_scanning(self, length):
        out = validator().validate(rewrite_header(V1, fix_crc=False, batch_length=length))
        assert_rejected(out, 2, "CORRUPT_MESSAGE", "A1", whole_request=True,
                        error_message=f"Record size {length} is less than the minimum record "
                                      "overhead (14)")

    @pytest.mark.parametrize("length", [0x39, 45])
    def test_mutation_batch_length_shorter_fails_crc(self, length):
        # a 69-byte (one byte trimmed) or 57-byte (< 61) slice: batch not valid, C3
        out = validator().validate(rewrite_header(V1, fix_crc=False, batch_length=length))
        assert_rejected(out, 2, "CORRUPT_MESSAGE", "C3", detail=corrupt_text(3919285720))


# --------------------------------------------------------------------------------------------
# §9 T1-T2: one batch per request
# --------------------------------------------------------------------------------------------
def two_batches(magic: int, codec: Codec) -> bytes:
    """createTwoBatchedRecords: a batch of 1 record, then a batch of 2 records."""
    if magic == 2:
        return v2([b"a"], codec=codec) + v2([b"b", b"c"], codec=codec)
    if codec == Codec.NONE:
        return legacy_set(magic, [b"a"]) + legacy_set(magic, [b"b", b"c"])
    return legacy_wrapper(magic, codec, [b"a"]) + legacy_wrapper(magic, codec, [b"b", b"c"])


ONLY_ONE_BATCH = [  # checkOnlyOneBatch's rows: (magic, source, compression.type)
    (0, Codec.GZIP, "uncompressed"), (1, Codec.GZIP, "uncompressed"),
    (2, Codec.GZIP, "uncompressed"),
    (0, Codec.GZIP, "gzip"), (1, Codec.GZIP, "gzip"), (2, Codec.GZIP, "gzip"),
    (0, Codec.SNAPPY, "gzip"), (1, Codec.SNAPPY, "gzip"), (2, Codec.SNAPPY, "gzip"),
    (0, Codec.LZ4, "gzip"), (1, Codec.LZ4, "gzip"), (2, Codec.LZ4, "gzip"),
    (2, Codec.NONE, "uncompressed"), (2, Codec.NONE, "gzip"), (2, Codec.ZSTD, "gzip"),
]


class TestBatchCount:
    @pytest.mark.parametrize(("magic", "codec", "target"), ONLY_ONE_BATCH)
    def test_t1_only_one_batch_log_validator(self, magic, codec, target):
        # produce v2 skips A4, so LogValidator's batch-count check decides (§3.D.1)
        out = old_validator(magic, {"compression.type": target}).validate(
            two_batches(magic, codec))
        assert_rejected(out, 87, "INVALID_RECORD", "D1",
                        detail="Compressed outer record has more than one batch")

    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    def test_t1_only_one_batch_request_stage(self, codec):
        out = validator().validate(two_batches(2, codec))
        assert_rejected(out, 87, "INVALID_RECORD", "A4.d",
                        detail="Produce requests with version 9 are only allowed to contain "
                               "exactly one record batch per partition")

    @pytest.mark.parametrize(("magic", "target"), [
        (0, "uncompressed"), (1, "uncompressed"), (0, "gzip"), (1, "gzip")])
    def test_t2_allow_multi_batch_legacy_uncompressed(self, magic, target):
        out = old_validator(magic, {"compression.type": target}).validate(
            two_batches(magic, Codec.NONE))
        assert_accepted(out, path="U" if target == "uncompressed" else "Z-rebuild",
                        record_count=3)

    @pytest.mark.parametrize("magic", [0, 1])
    def test_t2_allow_multi_batch_up_converted(self, magic):
        # default 3.9 configs: toMagic 2, so the legacy entries are converted (path X)
        out = old_validator(2).validate(two_batches(magic, Codec.NONE))
        assert_accepted(out, path="X", record_count=3)


# --------------------------------------------------------------------------------------------
# §9 T3-T5: counts and offsets (D2.b-d, 3.D.3)
# --------------------------------------------------------------------------------------------
class TestCountsAndOffsets:
    @pytest.mark.parametrize(("source", "target"), CODEC_PAIRS)
    def test_t3_batch_without_records(self, source, target):
        # writeEmptyHeader: 61 bytes, count 0, base 0, last 5, pid 1324, epoch 10, seq 984, txn
        header = build_batch([], base_timestamp=NOW, extra_attributes=int(source),
                             last_offset_delta=5, producer_id=1324, producer_epoch=10,
                             base_sequence=984, transactional=True, partition_leader_epoch=40)
        assert len(header) == 61
        out = validator({"compression.type": target}).validate(header)
        assert_rejected(out, 87, "INVALID_RECORD", "D2.c",
                        detail="Invalid reported count for record batch: 0 in topic partition "
                               "t-0")

    @staticmethod
    def _three(codec: Codec) -> bytes:
        # createRecords(v2, 1234L, ...): "hello", "there", "beautiful"
        return v2(ts=1234, codec=codec)

    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    def test_t4_count_overrides_consistent(self, codec):
        data = rewrite_header(self._three(codec), last_offset_delta=2, records_count=3)
        out = validator(LAT_TOPIC).validate(data)
        assert_accepted(out, path="U" if codec == Codec.NONE else "Z-inplace",
                        log_append_time=NOW, record_count=3)

    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    @pytest.mark.parametrize(("delta", "count", "check", "detail"), [
        (0, 3, "D2.d", "Inconsistent batch offset range [0, 0] and count of records 3 in topic "
                       "partition t-0"),
        (15, 3, "D2.d", "Inconsistent batch offset range [0, 15] and count of records 3 in "
                        "topic partition t-0"),
        (-3, 3, "D2.b", "Batch has an invalid offset range: [0, -3] in topic partition t-0"),
    ])
    def test_t4b_inconsistent_count_and_offset(self, codec, delta, count, check, detail):
        data = rewrite_header(self._three(codec), last_offset_delta=delta, records_count=count)
        out = validator(LAT_TOPIC).validate(data)
        assert_rejected(out, 87, "INVALID_RECORD", check, detail=detail)

    @pytest.mark.parametrize(("delta", "count"), [(0, 3), (15, 3), (-3, 3), (5, 6), (1, 2)])
    def test_t4_overrides_without_fresh_crc_fail_c3(self, delta, count):
        original = self._three(Codec.NONE)
        data = rewrite_header(original, fix_crc=False, last_offset_delta=delta,
                              records_count=count)
        out = validator(LAT_TOPIC).validate(data)
        stored = int.from_bytes(original[17:21], "big")
        assert_rejected(out, 2, "CORRUPT_MESSAGE", "C3", detail=corrupt_text(stored))

    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    def test_t4c_count_too_high_premature_eof(self, codec):
        data = rewrite_header(self._three(codec), last_offset_delta=5, records_count=6)
        out = validator(LAT_TOPIC).validate(data)
        assert_rejected(out, 87, "INVALID_RECORD", "D3")
        if codec == Codec.NONE:
            assert out.detail == "Incorrect declared batch size, premature EOF reached"
        else:  # the stream reader's wordings (§3.D.3)
            assert out.detail.startswith((
                "Incorrect declared batch size, premature EOF reached",
                "Invalid record size: expected")), out.detail

    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    def test_t4d_count_too_low_records_remain(self, codec):
        data = rewrite_header(self._three(codec), last_offset_delta=1, records_count=2)
        out = validator(LAT_TOPIC).validate(data)
        assert_rejected(out, 87, "INVALID_RECORD", "D3",
                        detail="Incorrect declared batch size, records still remaining in file")

    def test_t5_v2_non_sequential_inner_offsets(self):
        # 20 gzip records all appended at offset 0: lastOffsetDelta 0, count 20
        records = [Record(value=str(i).encode(), offset_delta=0) for i in range(20)]
        data = build_batch(records, codec=Codec.GZIP, base_timestamp=NOW, last_offset_delta=0)
        out = validator(BOUNDS_1000).validate(data)
        assert_rejected(out, 87, "INVALID_RECORD", "D2.d",
                        detail="Inconsistent batch offset range [0, 0] and count of records 20 "
                               "in topic partition t-0")

    @pytest.mark.parametrize("magic", [0, 1])
    def test_t5b_legacy_non_sequential_inner_offsets_rewritten(self, magic):
        inner = [legacy.encode_message(0, None, str(i).encode(), magic=magic,
                                       timestamp=NOW if magic else -1) for i in range(20)]
        data = raw_wrapper(magic, Codec.GZIP, inner, wrapper_offset=0,
                           timestamp=NOW if magic else -1)
        v = old_validator(magic, BOUNDS_1000)
        out = v.validate(data)
        assert_accepted(out, path="Z-rebuild", base_offset=0, record_count=20)
        assert v.next_offset == 20  # offsets 0..19 assigned

    def test_v2_offset_deltas_never_rejected(self):
        # §3.D.3: duplicated deltas pass; path U keeps them, path Z forces a rebuild
        records = [Record(value=b"a", offset_delta=0), Record(value=b"b", offset_delta=0)]
        plain = build_batch(records, base_timestamp=NOW)
        assert_accepted(validator().validate(plain), path="U")
        zipped = build_batch(records, base_timestamp=NOW, codec=Codec.GZIP)
        # a rebuild the broker chose from the start (another topic codec) reads full records
        assert_accepted(validator({"compression.type": "lz4"}).validate(zipped),
                        path="Z-rebuild")
        # Kafka 4.x source (LogValidator.validateMessagesAndAssignOffsetsCompressed): kept in
        # place, the batch was read with skipKeyValueIterator; the delta that is not its
        # position turns in-place assignment off and buildRecordsAndAssignOffsets rebuilds from
        # the PartialDefaultRecords, whose key() throws UnsupportedOperationException:
        # UNKNOWN_SERVER_ERROR, not an accepted rebuild (this line asserted acceptance)
        out = validator().validate(zipped)
        assert (out.error_code, out.check, out.detail) == (
            -1, "D3.rebuild", "key is skipped in PartialDefaultRecord")


# --------------------------------------------------------------------------------------------
# §9 T6, T16, T17: batch attributes (D2.e-h)
# --------------------------------------------------------------------------------------------
class TestBatchAttributes:
    @staticmethod
    def _seq_minus_2(codec: Codec, *, fix_crc: bool) -> bytes:
        data = v2([b"hello"], codec=codec, producer_id=1234, producer_epoch=0, base_sequence=0)
        return rewrite_header(data, fix_crc=fix_crc, base_sequence=-2)

    @pytest.mark.parametrize("to_magic", [0, 1, 2])
    @pytest.mark.parametrize(("source", "target"), CODEC_PAIRS)
    def test_t6_invalid_sequence(self, source, target, to_magic):
        v = old_validator(to_magic, {"compression.type": target}, produce_version=9)
        out = v.validate(self._seq_minus_2(source, fix_crc=True))
        # D2.f precedes D2.h (idempotent records with toMagic < 2)
        assert_rejected(out, 87, "INVALID_RECORD", "D2.f",
                        detail="Invalid sequence number -2 in record batch with producerId 1234 "
                               "in topic partition t-0")

    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    def test_t6_full_broker_stale_crc_is_corrupt(self, codec):
        data = self._seq_minus_2(codec, fix_crc=False)
        out = validator().validate(data)
        assert_rejected(out, 2, "CORRUPT_MESSAGE", "C3",
                        detail=corrupt_text(int.from_bytes(data[17:21], "big")))

    @staticmethod
    def _commit_marker() -> bytes:
        # MemoryRecords.withEndTransactionMarker(23423L, 5, COMMIT): txn + control, seq -1
        return build_batch([control_record(commit=True, coordinator_epoch=0)], base_timestamp=NOW,
                           control=True, transactional=True, producer_id=23423,
                           producer_epoch=5, base_sequence=-1)

    def test_t16_control_records_not_allowed_from_clients(self):
        out = validator().validate(self._commit_marker())
        assert_rejected(out, 87, "INVALID_RECORD", "D2.e",
                        detail="Clients are not allowed to write control records in topic "
                               "partition t-0")

    def test_t16b_control_records_not_compressed(self):
        v = validator({"compression.type": "snappy"}, origin="coordinator")
        out = v.validate(self._commit_marker())
        # source none + control batch: in place, i.e. the marker stays uncompressed
        assert_accepted(out, path="Z-inplace", record_count=1)

    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    @pytest.mark.parametrize(("transactional", "check", "detail"), [
        (True, "D2.g", "Transactional records cannot be used with magic version 1"),
        (False, "D2.h", "Idempotent records cannot be used with magic version 1"),
    ])
    def test_t17_down_conversion_of_producer_records(self, codec, transactional, check, detail):
        data = v2([b"hello"], codec=codec, producer_id=1344, producer_epoch=16, base_sequence=0,
                  transactional=transactional)
        out = old_validator(1, produce_version=9).validate(data)
        assert_rejected(out, 43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", check, detail=detail)

    @pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP], ids=["none", "gzip"])
    def test_t17_to_magic_2_accepts_the_same_batch(self, codec):
        data = v2([b"hello"], codec=codec, producer_id=1344, producer_epoch=16, base_sequence=0)
        assert_accepted(old_validator(2, produce_version=9).validate(data))


# --------------------------------------------------------------------------------------------
# §9 T7-T15: per-record checks (R0-R4) and their aggregation (§3.D.5)
# --------------------------------------------------------------------------------------------
NO_KEY_COMPACTED = [
    *[pytest.param(m, c, id=f"v{m}-{c.label}") for m in (0, 1, 2) for c in LEGACY_CODECS],
    pytest.param(2, Codec.ZSTD, id="v2-zstd"),
]


class TestRecordChecks:
    @pytest.mark.parametrize(("magic", "codec"), NO_KEY_COMPACTED)
    def test_t7_no_key_compacted_topic(self, magic, codec):
        cfg = {"cleanup.policy": "compact", "compression.type": codec.label, **BOUNDS_1000}
        if magic == 2:
            out = validator(cfg).validate(v2(codec=codec))
        else:
            out = old_validator(magic, cfg).validate(legacy_wrapper(magic, codec))
        assert_invalid_record(out, "R3", [(0, NO_KEY), (1, NO_KEY), (2, NO_KEY)])

    def test_t8_unkeyed_then_keyed(self):
        out = validator({"cleanup.policy": "compact"}).validate(
            v2([b"hello", b"there"], keys=[None, b"k"]))
        assert_invalid_record(out, "R3", [(0, NO_KEY)])

    def test_t8b_unkeyed(self):
        out = validator({"cleanup.policy": "compact"}).validate(v2([b"hello"]))
        assert_invalid_record(out, "R3", [(0, NO_KEY)])

    def test_t8c_gzip_keyed_then_unkeyed(self):
        out = validator({"cleanup.policy": "compact"}).validate(
            v2([b"hello", b"there"], keys=[b"k", None], codec=Codec.GZIP))
        assert_invalid_record(out, "R3", [(1, NO_KEY)])

    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    @pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,COMPACT"])
    def test_t8d_all_keyed_accepted(self, codec, policy):
        data = v2([b"hello", b"there", b"x"], keys=[b"k1", b"k2", b""], codec=codec)
        assert_accepted(validator({"cleanup.policy": policy}).validate(data), record_count=3)

    @pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP], ids=["none", "gzip"])
    def test_t9_invalid_create_time_v2(self, codec):
        ts = NOW - 1001
        out = validator(BOUNDS_1000).validate(v2(ts=ts, codec=codec))
        assert_invalid_timestamp(
            out, [(i, range_error(ts, i, NOW - 1000, NOW + 1000)) for i in range(3)])

    def test_t9_invalid_create_time_v1_compressed(self):
        ts = NOW - 1001
        out = old_validator(1, BOUNDS_1000).validate(legacy_wrapper(1, Codec.GZIP, ts=ts))
        assert_invalid_timestamp(
            out, [(i, range_error(ts, i, NOW - 1000, NOW + 1000)) for i in range(3)])

    def test_t9_invalid_create_time_v1_non_compressed(self):
        # Uncompressed v1 data is three single-message batches and §3.D.5 aggregates per batch:
        # the first batch's error rejects the partition, so only batch index 0 is listed.
        ts = NOW - 1001
        out = old_validator(1, BOUNDS_1000).validate(legacy_set(1, ts=ts))
        assert_invalid_timestamp(out, [(0, range_error(ts, 0, NOW - 1000, NOW + 1000))])

    @pytest.mark.parametrize("ts", [
        pytest.param(NOW - DAY - 5 * 60_000, id="past"),
        pytest.param(NOW + HOUR + 5 * 60_000, id="future"),
    ])
    def test_t10_past_and_future_bounds(self, ts):
        cfg = {"message.timestamp.before.max.ms": DAY, "message.timestamp.after.max.ms": HOUR}
        out = validator(cfg).validate(v2(ts=ts, codec=Codec.GZIP))
        assert_invalid_timestamp(
            out, [(i, range_error(ts, i, NOW - DAY, NOW + HOUR)) for i in range(3)])

    @pytest.mark.parametrize(("version", "config", "direction"), [
        ("3.9", "message.timestamp.difference.max.ms", -1),
        ("3.9", "message.timestamp.difference.max.ms", +1),
        ("3.9", "message.timestamp.before.max.ms", -1),
        ("3.9", "message.timestamp.after.max.ms", +1),
        ("4.0", "message.timestamp.before.max.ms", -1),
        ("4.0", "message.timestamp.after.max.ms", +1),
    ])
    def test_t11_produce_with_invalid_timestamp(self, version, config, direction):
        ts = NOW + direction * 5 * HOUR
        out = validator({config: 1000}, version=version).validate(v2(ts=ts, codec=Codec.GZIP))
        assert (out.error_code, out.error_name) == (32, "INVALID_TIMESTAMP")
        assert [i for i, _ in out.record_errors] == [0, 1, 2]
        assert all(m is not None for _, m in out.record_errors)
        assert out.error_message == ("One or more records have been rejected due to invalid "
                                     "timestamp")

    def test_t12_invalid_records_and_invalid_timestamp(self):
        # v1 gzip wrapper: a v1 record at 1200 (clock 0), then five v0 records at +30 offsets
        inner = [legacy.encode_message(0, None, b"timestamp", magic=1, timestamp=1200)]
        inner += [legacy.encode_message(30 * (i + 1), None, str(i).encode(), magic=0)
                  for i in range(5)]
        data = raw_wrapper(1, Codec.GZIP, inner, wrapper_offset=150, timestamp=1200)
        out = old_validator(0, BOUNDS_1000, now=0).validate(data)
        assert (out.error_code, out.error_name) == (32, "INVALID_TIMESTAMP")  # 32 wins
        assert out.check == "R1+R4"
        assert out.error_message == INVALID_TS_MESSAGE
        assert len(out.record_errors) == 6
        assert out.record_errors[0] == (0, range_error(1200, 0, -1000, 1000))
        for i, (index, message) in enumerate(out.record_errors[1:], start=1):
            assert index == i
            assert message.startswith("Record ")
            assert message.endswith("'s magic does not match outer magic 1 in topic partition "
                                    "t-0")
        assert out.base_offset == -1 and out.log_append_time == -1

    @staticmethod
    def _inner_magic_mismatch(batch_magic: int, record_magic: int) -> bytes:
        # recordsWithInvalidInnerMagic: 20 records keyed and valued str(id), no timestamp
        values = [str(i).encode() for i in range(20)]
        inner = [legacy.encode_message(1234567 + i, v, v, magic=record_magic, timestamp=-1)
                 for i, v in enumerate(values)]
        return raw_wrapper(batch_magic, Codec.GZIP, inner, wrapper_offset=1234567 + 19)

    def _assert_magic_errors(self, out: BatchOutcome, batch_magic: int, n: int) -> None:
        assert (out.error_code, out.error_name, out.check) == (87, "INVALID_RECORD", "R1"), out
        assert [i for i, _ in out.record_errors] == list(range(n))
        for _, message in out.record_errors:
            assert message.startswith("Record ")
            assert message.endswith(f"'s magic does not match outer magic {batch_magic} in "
                                    "topic partition t-0")
        assert out.error_message == invalid_record_message(out.record_errors)
        assert out.base_offset == -1 and out.log_append_time == -1

    def test_t13_invalid_record_exception_has_batch_index(self):
        out = old_validator(0).validate(self._inner_magic_mismatch(0, 1))
        self._assert_magic_errors(out, 0, 20)
        assert out.error_message.startswith(
            "One or more records have been rejected due to 20 record errors in total, and only "
            "showing the first three errors at most: [RecordError(batchIndex=0, message='Record ")

    @pytest.mark.parametrize(("batch_magic", "record_magic"), [(0, 1), (1, 0)])
    def test_t14_mismatch_magic(self, batch_magic, record_magic):
        out = old_validator(batch_magic).validate(
            self._inner_magic_mismatch(batch_magic, record_magic))
        self._assert_magic_errors(out, batch_magic, 20)

    @pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.label)
    @pytest.mark.parametrize("magic", [0, 1])
    def test_t15_invalid_inner_checksum(self, magic, codec):
        # LegacyRecord.create(magic, 0L, null, "hello") with CRC byte 0 zeroed, then wrapped
        entry = bytearray(legacy.encode_message(0, None, b"hello", magic=magic, timestamp=0))
        assert entry[12] != 0
        entry[12] = 0
        data = raw_wrapper(magic, codec, [bytes(entry)], wrapper_offset=0, timestamp=0)
        out = old_validator(magic, {"compression.type": codec.label, **BOUNDS_1000}).validate(
            data)
        # thrown immediately, not collected (and before the out-of-range timestamp 0)
        assert_rejected(out, 2, "CORRUPT_MESSAGE", "R2")

    def test_d2a_batch_magic_differs_from_first_batch(self):
        data = legacy_set(0, [b"a"]) + legacy_set(1, [b"b"])
        out = old_validator(1).validate(data)
        assert_rejected(out, 87, "INVALID_RECORD", "D2.a",
                        detail="Batch magic 1 is not the same as the first batch's magic byte 0 "
                               "in topic partition t-0")

    def test_compressed_inner_message_aborts_before_r0(self):
        # §1.7 lists a compressed inner message as a deep-iteration error: upstream's
        # AbstractLegacyRecordBatch.DeepRecordsIterator.makeNext throws InvalidRecordException
        # ("Inner messages must not be compressed") before LogValidator's R0 check sees the
        # record, so the verdict is a structural 87 with no record_errors (§3.D.3, §5.2).
        inner = [legacy.encode_message(i, b"k", b"v", magic=1, attributes=1, timestamp=NOW)
                 for i in range(2)]
        data = raw_wrapper(1, Codec.GZIP, inner, wrapper_offset=1, timestamp=NOW)
        out = old_validator(1).validate(data)
        assert_rejected(out, 87, "INVALID_RECORD", "D3",
                        detail="Inner messages must not be compressed")
        assert out.record_errors == []
        assert out.error_message is None

    def test_r3_r4_mix_gives_invalid_timestamp(self):
        # §3.D.5: INVALID_TIMESTAMP wins the top-level code even if other records failed R3
        ts_bad = NOW - 5000
        data = build_batch([Record(value=b"a"), Record(key=b"k", value=b"b", timestamp=ts_bad)],
                           base_timestamp=NOW)
        out = validator({"cleanup.policy": "compact", **BOUNDS_1000}).validate(data)
        assert_invalid_timestamp(
            out, [(0, NO_KEY), (1, range_error(ts_bad, 1, NOW - 1000, NOW + 1000))],
            check="R3+R4")

    def test_r3_first_error_per_record_wins(self):
        # at most one error per record: a null key out of range reports R3 only
        out = validator({"cleanup.policy": "compact", **BOUNDS_1000}).validate(
            v2([b"a"], ts=NOW - 5000))
        assert_invalid_record(out, "R3", [(0, NO_KEY)])

    def test_error_message_shows_first_three_errors(self):
        out = validator({"cleanup.policy": "compact"}).validate(
            v2([b"a", b"b", b"c", b"d", b"e"], codec=Codec.GZIP))
        errors = [(i, NO_KEY) for i in range(5)]
        assert_invalid_record(out, "R3", errors)
        assert out.error_message.startswith(
            "One or more records have been rejected due to 5 record errors in total")
        assert out.error_message.count("RecordError(") == 3


# --------------------------------------------------------------------------------------------
# §3.D.4 R4: timestamps by broker version
# --------------------------------------------------------------------------------------------
class TestTimestampRules:
    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    @pytest.mark.parametrize("version", ["3.9", "4.0"])
    def test_overflow_long_min_accepted_when_after_is_long_max(self, codec, version):
        cfg = {"message.timestamp.before.max.ms": 1000,
               "message.timestamp.after.max.ms": LONG_MAX}
        data = v2([b"v"], keys=[b"k"], ts=LONG_MIN, codec=codec)
        assert_accepted(validator(cfg, version=version).validate(data))

    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    def test_overflow_long_min_rejected_as_future_with_after_1000(self, codec):
        data = v2([b"v"], keys=[b"k"], ts=LONG_MIN, codec=codec)
        out = validator(BOUNDS_1000).validate(data)
        assert_invalid_timestamp(out, [(0, range_error(LONG_MIN, 0, NOW - 1000, NOW + 1000))])

    def test_no_timestamp_is_never_range_checked(self):
        assert_accepted(validator(BOUNDS_1000).validate(v2(ts=-1)))

    @pytest.mark.parametrize(("ts", "ok"), [
        (NOW - 1000, True), (NOW + 1000, True), (NOW - 1001, False), (NOW + 1001, False)])
    def test_bounds_are_inclusive(self, ts, ok):
        out = validator(BOUNDS_1000).validate(v2([b"v"], ts=ts))
        if ok:
            assert_accepted(out)
        else:
            assert_invalid_timestamp(out, [(0, range_error(ts, 0, NOW - 1000, NOW + 1000))])

    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    @pytest.mark.parametrize("version", ["3.6", "3.9", "4.0"])
    def test_lat_batch_to_create_time_topic_accepted_in_range(self, codec, version):
        # the LAT bit makes every record read as maxTimestamp; records' own stamps are 0
        data = build_batch([Record(key=b"k", value=b"v"), Record(key=b"k", value=b"w")],
                           codec=codec, base_timestamp=0, max_timestamp=NOW, timestamp_type=1)
        out = validator(BOUNDS_1000, version=version).validate(data)
        assert_accepted(out, record_count=2)

    def test_lat_batch_to_create_time_topic_range_checks_max_timestamp(self):
        max_ts = NOW - 5000
        data = build_batch([Record(key=b"k", value=b"v"), Record(key=b"k", value=b"w")],
                           base_timestamp=NOW, max_timestamp=max_ts, timestamp_type=1)
        out = validator(BOUNDS_1000, version="3.9").validate(data)
        assert_invalid_timestamp(
            out, [(i, range_error(max_ts, i, NOW - 1000, NOW + 1000)) for i in range(2)])

    def test_lat_batch_without_timestamp_to_create_time_topic_rejected(self):
        data = build_batch([Record(key=b"k", value=b"v")], base_timestamp=NOW, max_timestamp=-1,
                           timestamp_type=1)
        out = validator(BOUNDS_1000, version="3.9").validate(data)
        assert_invalid_timestamp(out, [(0, lat_error(
            "DefaultRecord(offset=0, timestamp=-1, key=1 bytes, value=1 bytes)"))])

    @pytest.mark.parametrize("version", ["3.6", "3.9", "4.0"])
    def test_lat_batch_to_log_append_time_topic_rejected(self, version):
        data = build_batch([Record(key=b"k", value=b"v"), Record(value=b"vv")],
                           base_timestamp=NOW, timestamp_type=1)
        cfg = {"message.timestamp.type": "LogAppendTime"}
        out = validator(cfg, version=version).validate(data)
        assert_invalid_timestamp(out, [
            (0, lat_error(f"DefaultRecord(offset=0, timestamp={NOW}, key=1 bytes, "
                          "value=1 bytes)")),
            (1, lat_error(f"DefaultRecord(offset=1, timestamp={NOW}, key=0 bytes, "
                          "value=2 bytes)")),
        ])

    def test_lat_batch_to_log_append_time_topic_partial_record_rendering(self):
        # path Z in place reads records partially: PartialDefaultRecord, null prints as -1
        data = build_batch([Record(key=b"k", value=b"v"), Record(value=b"vv")],
                           base_timestamp=NOW, timestamp_type=1, codec=Codec.GZIP)
        out = validator({"message.timestamp.type": "LogAppendTime"}).validate(data)
        assert_invalid_timestamp(out, [
            (0, lat_error(f"PartialDefaultRecord(offset=0, timestamp={NOW}, key=1 bytes, "
                          "value=1 bytes)")),
            (1, lat_error(f"PartialDefaultRecord(offset=1, timestamp={NOW}, key=-1 bytes, "
                          "value=2 bytes)")),
        ])

    def test_lat_batch_to_log_append_time_topic_rebuild_renders_full_record(self):
        data = build_batch([Record(value=b"vv")], base_timestamp=NOW, timestamp_type=1,
                           codec=Codec.GZIP)
        cfg = {"message.timestamp.type": "LogAppendTime", "compression.type": "lz4"}
        out = validator(cfg).validate(data)
        assert_invalid_timestamp(out, [(0, lat_error(
            f"DefaultRecord(offset=0, timestamp={NOW}, key=0 bytes, value=2 bytes)"))])

    # ---- ≤ 3.5: the symmetric difference rule --------------------------------------------
    def test_35_difference_rule_rejects(self):
        cfg = {"message.timestamp.difference.max.ms": 1000}
        ts = NOW - 1001
        out = validator(cfg, version="3.5").validate(v2(ts=ts))
        assert_invalid_timestamp(
            out, [(i, range_error(ts, i, NOW - 1000, NOW + 1000)) for i in range(3)])

    def test_35_difference_rule_accepts_in_range(self):
        cfg = {"message.timestamp.difference.max.ms": 1000}
        assert_accepted(validator(cfg, version="3.5").validate(v2(ts=NOW + 1000)))

    def test_35_math_abs_of_long_min_stays_negative(self):
        # ts - now == Long.MIN_VALUE: Math.abs keeps it negative, so it is never "too far"
        ts = NOW + LONG_MIN
        cfg = {"message.timestamp.difference.max.ms": 1000}
        assert_accepted(validator(cfg, version="3.5").validate(v2([b"v"], ts=ts)))

    def test_35_lat_batch_rejected_even_on_create_time_topic(self):
        data = build_batch([Record(key=b"k", value=b"v")], base_timestamp=NOW, timestamp_type=1)
        cfg = {"message.timestamp.difference.max.ms": 1000}
        out = validator(cfg, version="3.5").validate(data)
        assert_invalid_timestamp(out, [(0, lat_error(
            f"DefaultRecord(offset=0, timestamp={NOW}, key=1 bytes, value=1 bytes)"))])

    def test_35_lat_batch_rejected_on_log_append_time_topic(self):
        data = build_batch([Record(key=b"k", value=b"v")], base_timestamp=NOW, timestamp_type=1)
        out = validator({"message.timestamp.type": "LogAppendTime"}, version="3.5").validate(
            data)
        assert_invalid_timestamp(out, [(0, lat_error(
            f"DefaultRecord(offset=0, timestamp={NOW}, key=1 bytes, value=1 bytes)"))])

    # ---- 3.6-3.9: difference as the fallback of before/after ------------------------------
    @pytest.mark.parametrize("ts", [NOW - 1001, NOW + 1001])
    def test_39_difference_alone_bounds_both_directions(self, ts):
        cfg = {"message.timestamp.difference.max.ms": 1000}
        out = validator(cfg, version="3.9").validate(v2([b"v"], ts=ts))
        assert_invalid_timestamp(out, [(0, range_error(ts, 0, NOW - 1000, NOW + 1000))])

    def test_39_explicit_before_wins_difference_falls_back_for_after(self):
        cfg = {"message.timestamp.difference.max.ms": 1000,
               "message.timestamp.before.max.ms": 5000}
        assert_accepted(validator(cfg, version="3.9").validate(v2([b"v"], ts=NOW - 2000)))
        out = validator(cfg, version="3.9").validate(v2([b"v"], ts=NOW + 2000))
        assert_invalid_timestamp(out, [(0, range_error(NOW + 2000, 0, NOW - 5000, NOW + 1000))])

    def test_39_defaults_are_unbounded(self):
        far = NOW + 10 * 365 * DAY
        assert_accepted(validator(version="3.9").validate(v2([b"v"], ts=far)))
        assert_accepted(validator(version="3.9").validate(v2([b"v"], ts=0)))

    # ---- 4.0: after.max.ms defaults to one hour, difference is gone ------------------------
    def test_40_default_after_is_one_hour(self):
        assert_accepted(validator(version="4.0").validate(v2([b"v"], ts=NOW + HOUR)))
        out = validator(version="4.0").validate(v2([b"v"], ts=NOW + HOUR + 1))
        assert_invalid_timestamp(
            out, [(0, range_error(NOW + HOUR + 1, 0, NOW - LONG_MAX, NOW + HOUR))])

    def test_40_default_before_is_unbounded(self):
        assert_accepted(validator(version="4.0").validate(v2([b"v"], ts=0)))

    def test_40_difference_config_removed(self):
        with pytest.raises(ConfigError):
            validator({"message.timestamp.difference.max.ms": 1000}, version="4.0")


class TestConfigResolution:
    """§2: topic configs fall back to their broker synonyms; a topic value wins."""

    def test_broker_synonym_applies_when_topic_config_unset(self):
        out = validator({"log.cleanup.policy": "compact"}).validate(V2)
        assert (out.error_code, out.check) == (87, "R3")

    @pytest.mark.parametrize("order", ["topic-first", "broker-first"])
    def test_topic_config_wins_over_broker_synonym(self, order):
        items = [("cleanup.policy", "delete"), ("log.cleanup.policy", "compact")]
        cfg = dict(items if order == "topic-first" else items[::-1])
        assert_accepted(validator(cfg).validate(V2))

    def test_broker_timestamp_bounds(self):
        cfg = {"log.message.timestamp.after.max.ms": 1000}
        out = validator(cfg).validate(v2([b"v"], ts=NOW + 1001))
        assert_invalid_timestamp(out, [(0, range_error(NOW + 1001, 0, NOW - LONG_MAX,
                                                       NOW + 1000))])

    def test_broker_log_append_time(self):
        cfg = {"log.message.timestamp.type": "LogAppendTime"}
        assert_accepted(validator(cfg).validate(V1), path="U", log_append_time=NOW)


# --------------------------------------------------------------------------------------------
# §9 T18-T20: target codec, re-compression, LogAppendTime (effects modelled by path)
# --------------------------------------------------------------------------------------------
class TestCompressionAndEffects:
    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    def test_t18_zstd_target_with_ibp_2_0(self, codec):
        cfg = {"compression.type": "zstd", "inter.broker.protocol.version": "2.0"}
        out = validator(cfg, version="3.9").validate(v2(codec=codec))
        assert_rejected(out, 76, "UNSUPPORTED_COMPRESSION_TYPE", "Z0")

    def test_t18_zstd_target_with_ibp_2_1_accepted(self):
        cfg = {"compression.type": "zstd", "inter.broker.protocol.version": "2.1"}
        assert_accepted(validator(cfg, version="3.9").validate(v2()), path="Z-rebuild")

    def test_t18_no_ibp_zstd_check_in_40(self):
        # §8 / §3.D.0: in 4.0 LogValidator takes no IBP and the Z0 check is gone
        cfg = {"compression.type": "zstd", "inter.broker.protocol.version": "2.0"}
        assert_accepted(validator(cfg, version="4.0").validate(v2()), path="Z-rebuild")

    @pytest.mark.parametrize("topic_level", ["1", "5", "9"])
    def test_t19_different_level_does_not_recompress(self, topic_level):
        data = v2(codec=Codec.GZIP, compression_level=9)
        cfg = {"compression.type": "gzip", "compression.gzip.level": topic_level}
        assert_accepted(validator(cfg).validate(data), path="Z-inplace")

    @pytest.mark.parametrize("target", ["lz4", "snappy", "zstd", "uncompressed"])
    def test_t19b_different_codec_recompresses(self, target):
        data = v2(codec=Codec.GZIP, compression_level=9)
        assert_accepted(validator({"compression.type": target}).validate(data),
                        path="Z-rebuild")

    @pytest.mark.parametrize(("codec", "target", "path"), [
        (Codec.NONE, "producer", "U"),
        (Codec.GZIP, "producer", "Z-inplace"),
        (Codec.LZ4, "producer", "Z-inplace"),
        (Codec.NONE, "gzip", "Z-rebuild"),
        (Codec.GZIP, "zstd", "Z-rebuild"),
    ])
    def test_t20_log_append_time_overwrites_timestamps(self, codec, target, path):
        cfg = {"message.timestamp.type": "LogAppendTime", "compression.type": target,
               **BOUNDS_1000}
        # CreateTime stamps far out of range: a LogAppendTime topic never range-checks
        data = v2(ts=NOW - 10 * DAY, codec=codec)
        assert_accepted(validator(cfg).validate(data), path=path, log_append_time=NOW,
                        record_count=3)

    def test_t20_create_time_topic_reports_no_append_time(self):
        assert_accepted(validator().validate(v2()), path="U", log_append_time=-1)

    def test_t20_legacy_log_append_time(self):
        cfg = {"message.timestamp.type": "LogAppendTime"}
        out = old_validator(1, cfg).validate(legacy_wrapper(1, Codec.GZIP, ts=0))
        assert_accepted(out, path="Z-inplace", log_append_time=NOW, record_count=3)


# --------------------------------------------------------------------------------------------
# §9 T21-T24: integrity, request versions, sizes
# --------------------------------------------------------------------------------------------
class TestIntegrityAndSizes:
    def test_t21_stale_crc(self):
        out = validator().validate(rewrite_header(V1, fix_crc=False, last_offset_delta=23))
        assert_rejected(out, 2, "CORRUPT_MESSAGE", "C3", detail=corrupt_text(3919285720))

    def test_t21_batch_length_10(self):
        out = validator().validate(rewrite_header(V1, fix_crc=False, batch_length=10))
        assert (out.error_code, out.error_name) == (2, "CORRUPT_MESSAGE")
        assert out.whole_request is True  # raised while scanning the first batch (A1)

    def test_t22_corrupt_lz4_produce_request(self):
        data = bytearray(v2(codec=Codec.LZ4))
        assert data[61 + 6] != 0
        data[61 + 6] = 0
        out = validator().validate(bytes(data))
        assert_rejected(out, 2, "CORRUPT_MESSAGE", "C3",
                        detail=corrupt_text(int.from_bytes(data[17:21], "big")))
        assert out.base_offset == -1 and out.log_append_time == -1

    def test_t23_zstd_produce_v7_ok(self):
        out = validator(produce_version=7).validate(v2(codec=Codec.ZSTD))
        assert_accepted(out, base_offset=0, path="Z-inplace")

    @pytest.mark.parametrize("produce_version", [3, 4, 5, 6])
    def test_t23_zstd_produce_below_v7_unsupported(self, produce_version):
        out = validator(produce_version=produce_version).validate(v2(codec=Codec.ZSTD))
        assert_rejected(out, 76, "UNSUPPORTED_COMPRESSION_TYPE", "A4.c")

    @pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
    def test_t24_message_size_check(self, codec):
        data = v2(codec=codec)
        size = len(data)
        out = validator({"max.message.bytes": size - 1}).validate(data)
        assert_rejected(out, 10, "MESSAGE_TOO_LARGE", "C2",
                        detail=f"The record batch size in the append to t-0 is {size} bytes "
                               f"which exceeds the maximum configured value of {size - 1}.")
        assert_accepted(validator({"max.message.bytes": size}).validate(data))

    def test_t24b_message_set_size_check(self):
        size = len(V1)
        out = validator({"segment.bytes": size - 1}, version="3.9").validate(V1)
        assert_rejected(out, 18, "RECORD_LIST_TOO_LARGE", "E2")
        assert_accepted(validator({"segment.bytes": size}, version="3.9").validate(V1))


# --------------------------------------------------------------------------------------------
# §5.4 whole-request errors
# --------------------------------------------------------------------------------------------
class TestWholeRequestErrors:
    @pytest.mark.parametrize("produce_version", [2, 9])
    def test_a1_s1_record_size_below_overhead(self, produce_version):
        data = rewrite_header(V1, fix_crc=False, batch_length=13)
        out = validator(version="3.9", produce_version=produce_version).validate(data)
        assert_rejected(out, 2, "CORRUPT_MESSAGE", "A1", whole_request=True,
                        error_message="Record size 13 is less than the minimum record overhead "
                                      "(14)")

    @pytest.mark.parametrize(("magic_byte", "magic"), [(3, 3), (0x7F, 127), (0xFF, -1)])
    def test_a1_s3_invalid_magic(self, magic_byte, magic):
        data = V1[:16] + bytes([magic_byte]) + V1[17:]
        out = validator().validate(data)
        assert_rejected(out, 2, "CORRUPT_MESSAGE", "A1", whole_request=True,
                        error_message=f"Invalid magic found in record: {magic}")

    def test_a4d_scan_error_after_first_batch_is_per_partition(self):
        trailer = (0).to_bytes(8, "big") + (5).to_bytes(4, "big") + b"\x02" * 8
        out = validator().validate(V1 + trailer)
        assert_rejected(out, 2, "CORRUPT_MESSAGE", "A4.d", whole_request=False)

    @pytest.mark.parametrize("version", ["3.9", "4.0"])
    @pytest.mark.parametrize("magic", [0, 1])
    def test_a4b_legacy_magic_with_produce_v3_plus(self, version, magic):
        out = validator(version=version).validate(legacy_set(magic))
        assert_rejected(out, 87, "INVALID_RECORD", "A4.b",
                        detail="Produce requests with version 9 are only allowed to contain "
                               "record batches with magic version 2")

    @pytest.mark.parametrize("produce_version", [0, 1, 2])
    def test_40_refuses_produce_v0_to_v2(self, produce_version):
        with pytest.raises(ValueError, match="refuses produce"):
            validator(version="4.0", produce_version=produce_version)

    def test_a4c_unknown_codec_below_v7_is_unknown_server_error(self):
        data = rewrite_header(V1, attributes=5)
        out = validator(produce_version=5).validate(data)
        # UNKNOWN_SERVER_ERROR: the text is dropped (§5.4)
        assert_rejected(out, -1, "UNKNOWN_SERVER_ERROR", "A4.c", whole_request=True)

    def test_c4_unknown_codec_from_v7_is_per_partition(self):
        out = validator().validate(rewrite_header(V1, attributes=6))
        assert_rejected(out, -1, "UNKNOWN_SERVER_ERROR", "C4", whole_request=False)

    def test_b0_short_v2_batch(self):
        data = rewrite_header(V1, fix_crc=False, batch_length=28)[:40]
        out = validator().validate(data)
        assert_rejected(out, -1, "UNKNOWN_SERVER_ERROR", "B0", whole_request=True)

    def test_a1_prime_unauthorized_transactional_id(self):
        data = v2([b"v"], producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
        out = validator(transactional_id_authorized=False).validate(data)
        assert_rejected(out, 53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "A1'",
                        whole_request=True)


# --------------------------------------------------------------------------------------------
# §9 T26: CRC-32C
# --------------------------------------------------------------------------------------------
def test_t26_crc32c_values():
    assert crc32c(b"Some String") == 608512271
    assert crc32c(b"123456789") == 0xE3069283
