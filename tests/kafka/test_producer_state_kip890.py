"""Producer state as a Kafka 4.x broker keeps it: transactions v2 (KIP-890 part 2) epoch bumps
by end-transaction markers, coordinator-epoch fencing, marker parsing and the release-specific
epoch and sequence checks (``docs/kafka-4x-producer-state.md``).

Every scenario runs on both engines: the byte-level validator (``validate_batches``) and the
vectorised table checks (``broker_verdicts`` over ``decode_batches``), which must agree row for
row.  Batches are replayed as a log (``source="log"``): data batches are the producer's, control
batches the transaction coordinator's markers; ``resync=False`` keeps every sequence checked.
Each test names the Java method whose behaviour it pins (apache/kafka, storage module).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kqlab.kafka import errors as kerr
from kqlab.kafka.batch import decode_batches
from kqlab.kafka.builder import Record, build_batch, control_record
from kqlab.kafka.checks import producer as fchecks
from kqlab.kafka.checks.producer import (
    EndTxnMarker,
    MalformedMarker,
    first_control_record,
    log_offset_metadata,
    parse_end_txn_marker,
    parse_end_txn_markers,
)
from kqlab.kafka.producer_state import ProducerStateManager
from kqlab.kafka.table_checks import broker_verdicts
from kqlab.kafka.validator import PartitionValidator, validate_batches

NOW = 1_700_000_000_000
PID = 7


def data(seq: int, n: int = 1, *, epoch: int, txn: bool = True, pid: int = PID,
         ts: int = NOW) -> bytes:
    """A producer's batch of ``n`` records from sequence ``seq``."""
    return build_batch([Record(key=b"k%d" % i, value=b"v") for i in range(n)],
                       base_timestamp=ts, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, transactional=txn)


def marker(*, epoch: int, commit: bool = True, coordinator_epoch: int = 0, pid: int = PID,
           record: Record | None = None, records: list[Record] | None = None) -> bytes:
    """A coordinator's end-transaction marker batch (sequence -1)."""
    recs = records if records is not None else [
        record or control_record(commit=commit, coordinator_epoch=coordinator_epoch,
                                 timestamp=NOW)]
    return build_batch(recs, base_timestamp=NOW, control=True, transactional=True,
                       producer_id=pid, producer_epoch=epoch, base_sequence=-1)


def run(batches: list[bytes], *, bv: str | None = None, **request: object) -> list[dict]:
    """Verdict rows of ``batches`` replayed as a log; asserts both engines agree."""
    by_bytes = validate_batches(batches, topic="t", partition=0, broker_version=bv, now=NOW,
                                source="log", resync=False, **request).to_pylist()
    d = decode_batches(batches, topic="t", partition=0)
    by_table = broker_verdicts(d.records, d.batches, None, broker_version=bv, now=NOW,
                               source="log", resync=False, **request).to_pylist()
    assert by_table == by_bytes
    return by_bytes


def ok(row: dict) -> None:
    """Appended (offsets show in later refusals' texts: the tables keep the batch's own)."""
    assert (row["error_code"], row["check"]) == (0, None), row


def refused(row: dict, error: kerr.KafkaError, check: str, detail: str) -> None:
    assert (row["error_code"], row["error_name"], row["check"]) == \
        (error.code, error.name, check), row
    assert row["detail"] == detail
    # stage-F refusals reach the client without a message or record errors (spec §5.2)
    assert row["error_message"] is None and row["record_errors"] == []


# --------------------------------------------------------------------------------------------
# (a) the epoch a marker writes: TV2 bumps and resets the sequence, TV1 keeps both
# --------------------------------------------------------------------------------------------
class TestMarkerEpoch:
    def test_tv2_marker_bump_then_next_transaction_from_sequence_0(self):
        # ProducerAppendInfo.appendEndTxnMarker -> ProducerStateEntry.update(epoch, ...) ->
        # maybeUpdateProducerEpoch: a new epoch clears the cached batch metadata, so
        # checkSequence sees currentLastSeq = -1 and accepts sequence 0 (KIP-890 part 2)
        rows = run([data(0, 3, epoch=5), data(3, 2, epoch=5), marker(epoch=6),
                    data(0, 2, epoch=6), data(2, epoch=6), marker(epoch=7),
                    data(0, epoch=7)])
        for r in rows:
            ok(r)

    def test_tv2_next_transaction_cannot_continue_the_old_sequence(self):
        # ProducerAppendInfo.checkSequence: same epoch, no cached batch -> lastSeq -1; the
        # sequence the producer used before the bump is out of order (offsets 0-4 data, 5
        # the marker, so the batch lands at 6)
        rows = run([data(0, 3, epoch=5), data(3, 2, epoch=5), marker(epoch=6),
                    data(5, epoch=6)])
        refused(rows[3], kerr.OUT_OF_ORDER_SEQUENCE_NUMBER, "F4",
                "Out of order sequence number for producer 7 at offset 6 in partition t-0: 5 "
                "(incoming seq. number), -1 (current end sequence number)")

    def test_tv1_marker_keeps_epoch_and_sequence(self):
        # ProducerStateEntry.update with the same epoch: maybeUpdateProducerEpoch keeps the
        # batch metadata, the next transaction continues the sequence (TV0/TV1)
        rows = run([data(0, 3, epoch=5), data(3, 2, epoch=5), marker(epoch=5),
                    data(5, 2, epoch=5), marker(epoch=5, commit=False), data(7, epoch=5)])
        for r in rows:
            ok(r)

    def test_tv1_marker_sequence_0_at_same_epoch_is_out_of_order(self):
        # ProducerAppendInfo.checkSequence: same epoch, the cache still ends at 4
        rows = run([data(0, 5, epoch=5), marker(epoch=5), data(0, epoch=5)])
        refused(rows[2], kerr.OUT_OF_ORDER_SEQUENCE_NUMBER, "F4",
                "Out of order sequence number for producer 7 at offset 6 in partition t-0: 0 "
                "(incoming seq. number), 4 (current end sequence number)")

    def test_marker_closes_the_transaction(self):
        # ProducerStateEntry.update sets currentTxnFirstOffset empty: a non-transactional
        # batch after the marker is fine (F5 only fires inside a transaction)
        rows = run([data(0, epoch=5), marker(epoch=6), data(0, epoch=6, txn=False)])
        for r in rows:
            ok(r)

    def test_marker_for_a_producer_the_partition_never_saw(self):
        # ProducerStateManager.prepareUpdate starts from ProducerStateEntry.empty (epoch -1,
        # coordinator epoch -1): the marker passes both epoch checks and installs its epoch;
        # afterwards the producer is known, so checkSequence wants sequence 0
        rows = run([marker(epoch=3, coordinator_epoch=4), data(3, epoch=3)])
        ok(rows[0])
        refused(rows[1], kerr.OUT_OF_ORDER_SEQUENCE_NUMBER, "F4",
                "Out of order sequence number for producer 7 at offset 1 in partition t-0: 3 "
                "(incoming seq. number), -1 (current end sequence number)")
        rows = run([marker(epoch=3, coordinator_epoch=4), data(0, epoch=3)])
        ok(rows[1])

    def test_empty_control_batch_changes_nothing(self):
        # ProducerAppendInfo.append: a control batch without records ("the entire transaction
        # has been cleaned from the log") is skipped: the transaction stays open, no bump
        rows = run([data(0, epoch=5), marker(epoch=6, records=[]), data(1, epoch=5),
                    data(2, epoch=5, txn=False)])
        ok(rows[1])
        ok(rows[2])
        refused(rows[3], kerr.INVALID_TXN_STATE, "F5",
                "Expected transactional write from producer 7 at offset (offset=2, "
                "segment=[-1:-1]) in partition t-0")

    def test_only_the_first_control_record_counts(self):
        # ProducerAppendInfo.append reads recordIterator.next() once
        rows = run([data(0, epoch=5),
                    marker(epoch=6, records=[control_record(commit=True, coordinator_epoch=2),
                                             Record(key=None, value=None)]),
                    marker(epoch=7, coordinator_epoch=2)])
        ok(rows[1])
        ok(rows[2])


# --------------------------------------------------------------------------------------------
# (b) coordinator-epoch fencing
# --------------------------------------------------------------------------------------------
class TestCoordinatorFencing:
    def test_stale_coordinator_epoch_is_fenced(self):
        # ProducerAppendInfo.checkCoordinatorEpoch: the entry's coordinator epoch (3, from the
        # first marker) > the marker's (2) -> TransactionCoordinatorFencedException (52)
        rows = run([data(0, epoch=5), marker(epoch=5, coordinator_epoch=3),
                    data(1, epoch=5), marker(epoch=5, coordinator_epoch=2),
                    data(2, epoch=5, txn=False)])
        refused(rows[3], kerr.TRANSACTION_COORDINATOR_FENCED, "F6",
                "Invalid coordinator epoch for producerId 7 at offset 3 in partition t-0: 2 "
                "(zombie), 3 (current)")
        # the refused marker changed nothing: the transaction opened at offset 2 is still open
        refused(rows[4], kerr.INVALID_TXN_STATE, "F5",
                "Expected transactional write from producer 7 at offset (offset=3, "
                "segment=[-1:-1]) in partition t-0")

    @pytest.mark.parametrize("coordinator_epoch", [3, 4, 2**31 - 1])
    def test_same_or_newer_coordinator_is_accepted(self, coordinator_epoch):
        rows = run([data(0, epoch=5), marker(epoch=6, coordinator_epoch=3),
                    data(0, epoch=6), marker(epoch=7, coordinator_epoch=coordinator_epoch)])
        for r in rows:
            ok(r)

    def test_producer_epoch_is_checked_before_coordinator_epoch(self):
        # appendEndTxnMarker: checkProducerEpoch, then checkCoordinatorEpoch; with no open
        # transaction the UnifiedLog early epoch check answers first
        rows = run([data(0, epoch=5), marker(epoch=5, coordinator_epoch=3),
                    marker(epoch=4, coordinator_epoch=1)])
        refused(rows[2], kerr.INVALID_PRODUCER_EPOCH, "F3",
                "Epoch of producer 7 is 4, which is smaller than the last seen epoch 5")

    def test_fencing_is_per_producer(self):
        rows = run([marker(epoch=1, coordinator_epoch=9, pid=1),
                    marker(epoch=1, coordinator_epoch=0, pid=2)])
        ok(rows[0])
        ok(rows[1])


# --------------------------------------------------------------------------------------------
# (c) the old epoch after a TV2 bump
# --------------------------------------------------------------------------------------------
class TestOldEpochAfterBump:
    def test_transactional_batch_with_old_epoch(self):
        # UnifiedLog.analyzeAndValidateProducerState (KAFKA-19690): a transactional batch with
        # no ongoing transaction at its epoch is epoch-checked before the verification guard
        rows = run([data(0, epoch=5), marker(epoch=6), data(1, epoch=5)])
        refused(rows[2], kerr.INVALID_PRODUCER_EPOCH, "F3",
                "Epoch of producer 7 is 5, which is smaller than the last seen epoch 6")

    def test_idempotent_batch_with_old_epoch(self):
        # ProducerAppendInfo.checkProducerEpoch (non-transactional batches skip the early check)
        rows = run([data(0, epoch=5), marker(epoch=6), data(1, epoch=5, txn=False)])
        refused(rows[2], kerr.INVALID_PRODUCER_EPOCH, "F3",
                "Epoch of producer 7 at offset 2 in t-0 is 5, which is smaller than the last "
                "seen epoch 6")

    def test_before_the_early_check_the_append_info_text(self):
        # 3.8 has no KAFKA-19690 check: ProducerAppendInfo.checkProducerEpoch decides
        rows = run([data(0, epoch=5), marker(epoch=6), data(1, epoch=5)], bv="3.8")
        refused(rows[2], kerr.INVALID_PRODUCER_EPOCH, "F3",
                "Epoch of producer 7 at offset 2 in t-0 is 5, which is smaller than the last "
                "seen epoch 6")

    def test_kafka_2_7_text(self):
        # 2.4-2.7: ProducerStateManager.scala's ProducerAppendInfo.checkProducerEpoch
        rows = run([data(0, epoch=5), marker(epoch=6), data(1, epoch=5, txn=False)], bv="2.7")
        refused(rows[2], kerr.INVALID_PRODUCER_EPOCH, "F3",
                "Producer's epoch at offset 2 in t-0 is 5, which is smaller than the last seen "
                "epoch 6")

    def test_kafka_4_2_text_names_the_transaction_version(self):
        # 4.2 (KIP-1228): checkProducerEpoch(epoch, offset, TV_UNKNOWN) for data batches
        rows = run([data(0, epoch=5), marker(epoch=6), data(1, epoch=5, txn=False)], bv="4.2")
        refused(rows[2], kerr.INVALID_PRODUCER_EPOCH, "F3",
                "Epoch of producer 7 at offset 2 in t-0 is 5, which is < the last seen epoch 6 "
                "(TV-1)")


# --------------------------------------------------------------------------------------------
# (d) duplicates across a marker
# --------------------------------------------------------------------------------------------
class TestDuplicatesAcrossMarker:
    def test_tv1_marker_keeps_the_duplicate_cache(self):
        # ProducerStateEntry.findDuplicateBatch: same epoch and the (first, last) sequence of a
        # cached batch -> acknowledged with the original offsets (the TV1 marker kept them)
        batches = [data(0, 2, epoch=5), data(2, 2, epoch=5), marker(epoch=5),
                   data(2, 2, epoch=5)]
        rows = run(batches)
        assert rows[3]["check"] == "F1" and rows[3]["error_code"] == 0
        v = PartitionValidator("t", 0, None, now=NOW, source="log", resync=False)
        outs = [v.validate(b) for b in batches]
        assert outs[3].duplicate and outs[3].base_offset == 2

    def test_tv2_marker_forgets_the_old_epoch(self):
        # after the bump the resend's epoch is old: findDuplicateBatch compares epochs first,
        # so it is no duplicate and the early epoch check refuses it
        rows = run([data(0, 2, epoch=5), data(2, 2, epoch=5), marker(epoch=6),
                    data(2, 2, epoch=5)])
        refused(rows[3], kerr.INVALID_PRODUCER_EPOCH, "F3",
                "Epoch of producer 7 is 5, which is smaller than the last seen epoch 6")

    def test_duplicate_within_the_new_epoch(self):
        rows = run([data(0, 2, epoch=5), marker(epoch=6), data(0, 2, epoch=6),
                    data(0, 2, epoch=6)])
        assert rows[3]["check"] == "F1" and rows[3]["error_code"] == 0


# --------------------------------------------------------------------------------------------
# (e) marker bytes, TV2 marker rules (4.2), the TV2 sequence-0 rule (4.1), texts by release
# --------------------------------------------------------------------------------------------
class TestMalformedMarkers:
    @pytest.mark.parametrize(("record", "error", "detail"), [
        (Record(key=b"\x00\x00\x00", value=b"\x00" * 6), kerr.INVALID_RECORD,
         "Invalid value size found for end control record key. Must have at least 4 bytes, "
         "but found only 3"),
        (Record(key=b"\xff\xfe\x00\x01", value=b"\x00" * 6), kerr.INVALID_RECORD,
         "Invalid version found for control record: -2. May indicate data corruption"),
        (Record(key=b"\x00\x00\x00\x02", value=b"\x00" * 6), kerr.UNKNOWN_SERVER_ERROR,
         "Invalid control record type for end transaction markerLEADER_CHANGE"),
        (Record(key=b"\x00\x00\x00\x09", value=b"\x00" * 6), kerr.UNKNOWN_SERVER_ERROR,
         "Invalid control record type for end transaction markerUNKNOWN"),
        (Record(key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00"), kerr.INVALID_RECORD,
         "Invalid value size found for end transaction marker. Must have at least 6 bytes, "
         "but found only 5"),
        (Record(key=b"\x00\x00\x00\x00", value=b"\x80\x00\x00\x00\x00\x00"),
         kerr.INVALID_RECORD,
         "Invalid version found for end transaction marker: -32768. May indicate data "
         "corruption"),
        (Record(key=None, value=b"\x00" * 6), kerr.UNKNOWN_SERVER_ERROR,
         "java.lang.NullPointerException: the marker record's key is null"),
        (Record(key=b"\x00\x00\x00\x01", value=None), kerr.UNKNOWN_SERVER_ERROR,
         "java.lang.NullPointerException: the marker record's value is null"),
    ])
    def test_refused_like_the_broker(self, record, error, detail):
        # EndTransactionMarker.deserialize / ControlRecordType.parseTypeId /
        # deserializeValue: InvalidRecordException -> 87, IllegalArgumentException and NPE ->
        # UNKNOWN_SERVER_ERROR (Errors.forException); the transaction stays open
        rows = run([data(0, epoch=5), marker(epoch=6, record=record), data(1, epoch=5)])
        refused(rows[1], error, "F7", detail)
        ok(rows[2])

    def test_newer_versions_read_as_version_0(self):
        # parseTypeId / deserializeValue log a higher version and parse it as version 0, with
        # the extra value bytes ignored
        got = parse_end_txn_marker(b"\x00\x05\x00\x00", b"\x00\x03\x00\x00\x01\x00\xff\xff")
        assert got == EndTxnMarker(control_type=0, coordinator_epoch=256)
        assert not got.commit

    def test_malformed_is_checked_after_the_early_epoch_check(self):
        # UnifiedLog.analyzeAndValidateProducerState runs before ProducerAppendInfo.append
        bad = Record(key=b"\x00", value=b"")
        rows = run([data(0, epoch=5), marker(epoch=6), marker(epoch=4, record=bad)])
        refused(rows[2], kerr.INVALID_PRODUCER_EPOCH, "F3",
                "Epoch of producer 7 is 4, which is smaller than the last seen epoch 6")

    def test_vectorised_parse_equals_one_by_one(self):
        keys = [b"\x00\x00\x00\x01", None, b"\x00\x00", b"\x00\x00\x00\x00", b"\x00\x01\x00\x03",
                b"\x00\x00\x00\x01" + b"tail", b"\xff\xff\x00\x00"]
        values = [b"\x00\x00\x7f\xff\xff\xff", b"\x00" * 6, b"\x00" * 6, b"\x00\x00",
                  b"\x00" * 6, b"\x00\x00\xff\xff\xff\xfe", b"\x00" * 6]
        # a sliced Arrow array (non-zero offset) reads the same bytes
        k = pa.array([b"pad", *keys], pa.binary()).slice(1)
        v = pa.array([b"pad", *values], pa.binary()).slice(1)
        cols = parse_end_txn_markers(k, v)
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            try:
                one: object = parse_end_txn_marker(key, value)
            except MalformedMarker as exc:
                one = (exc.definition.id, exc.params)
            many = cols.marker(i)
            if isinstance(many, MalformedMarker):
                assert one == (many.definition.id, many.params)
            else:
                assert one == many
        assert cols.marker(0) == EndTxnMarker(1, 2**31 - 1)
        assert cols.marker(5) == EndTxnMarker(1, -2)
        assert [None if e is None else e.id for e in cols.error] == [
            None, "F7/null", "F7/key-size", "F7/value-size", "F7/type", None, "F7/key-version"]

    def test_first_control_record_of_bytes(self):
        b = marker(epoch=1, coordinator_epoch=5)
        assert first_control_record(b) == (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")
        assert first_control_record(marker(epoch=1, records=[])) is None


class TestTransactionsV2MarkerRule:
    """4.2+ (KIP-1228): the leader learns the marker's transaction version from WriteTxnMarkers
    v2 and ProducerAppendInfo.checkProducerEpoch demands a bump for TV2 markers.  The version
    is a request property: set on the validator's producer state (byte path)."""

    def validator(self, bv: str, tv: int | None) -> PartitionValidator:
        v = PartitionValidator("t", 0, None, broker_version=bv, now=NOW, source="log",
                               resync=False)
        v.producers.marker_transaction_version = tv
        return v

    def test_tv2_marker_with_current_epoch_in_open_transaction_is_refused(self):
        v = self.validator("4.2", 2)
        assert v.validate(data(0, epoch=5)).error_code == 0
        out = v.validate(marker(epoch=5))
        assert (out.error_code, out.check) == (47, "F3")
        assert out.detail == ("Epoch of producer 7 at offset 1 in t-0 is 5, which is <= the last "
                              "seen epoch 5 (TV2)")

    def test_tv2_marker_retry_without_open_transaction_is_written(self):
        # KAFKA-19999: markerEpoch == currentEpoch and no ongoing transaction -> an idempotent
        # retry (coordinator recovery, lost response): allowed and appended
        v = self.validator("4.2", 2)
        assert v.validate(data(0, epoch=5)).error_code == 0
        assert v.validate(marker(epoch=6)).error_code == 0
        out = v.validate(marker(epoch=6))
        assert (out.error_code, out.base_offset) == (0, 2)
        assert v.validate(data(0, epoch=6)).error_code == 0  # the retry kept the bump

    def test_tv1_marker_on_4_2_keeps_the_legacy_rule(self):
        v = self.validator("4.2", 1)
        assert v.validate(data(0, epoch=5)).error_code == 0
        assert v.validate(marker(epoch=5)).error_code == 0
        out = v.validate(marker(epoch=4))
        assert out.error_code == 47
        # the early UnifiedLog check answers first (no ongoing transaction at epoch 4)
        assert out.detail == "Epoch of producer 7 is 4, which is smaller than the last seen " \
                             "epoch 5"

    @pytest.mark.parametrize(("tv", "shown"), [(1, "< the last seen epoch -1 (TV1)"),
                                               (None, "< the last seen epoch -1 (TV0)"),
                                               (2, "<= the last seen epoch -1 (TV2)")])
    def test_marker_text_names_its_version(self, tv, shown):
        # checkProducerEpoch(epoch, offset, transactionVersion): an unknown producer (no entry,
        # so no early UnifiedLog check) and a marker epoch below NO_PRODUCER_EPOCH; an unknown
        # version reads as TV0 (appendEndTxnMarker's effectiveTransactionVersion)
        out = self.validator("4.2", tv).validate(marker(epoch=-2))
        assert (out.error_code, out.check) == (47, "F3")
        assert out.detail == f"Epoch of producer 7 at offset 0 in t-0 is -2, which is {shown}"

    def test_before_4_2_tv2_markers_use_the_legacy_rule(self):
        v = self.validator("4.1", 2)
        assert v.validate(data(0, epoch=5)).error_code == 0
        assert v.validate(marker(epoch=5)).error_code == 0

    def test_unknown_version_is_judged_like_a_follower(self):
        # appendEndTxnMarker with TV_UNKNOWN (replication) uses the TV0 rule: a replayed log
        # holds no marker versions
        v = self.validator("4.2", None)
        assert v.validate(data(0, epoch=5)).error_code == 0
        assert v.validate(marker(epoch=5)).error_code == 0

    def test_version_must_be_known(self):
        with pytest.raises(ValueError, match="0, 1, 2 or None"):
            ProducerStateManager("t-0", marker_transaction_version=3)


class TestTransactionsV2SequenceZero:
    def test_tv2_client_first_transactional_batch_must_start_at_0(self):
        # ProducerAppendInfo.checkSequence (KAFKA-18202, 4.1): a verification entry with
        # supportsEpochBump (produce v12+), no cached batch, sequence != 0 -> 45
        rows = run([data(3, epoch=0)], bv="4.1", produce_version=12)
        refused(rows[0], kerr.OUT_OF_ORDER_SEQUENCE_NUMBER, "F4",
                "Invalid sequence number for producer 7 at offset 0 in partition t-0: 3 "
                "(incoming seq. number). Expected sequence 0 for transactions v2 idempotent "
                "producer with no existing state.")

    def test_after_a_tv2_bump_too(self):
        rows = run([data(0, epoch=0), marker(epoch=1), data(2, epoch=1)], bv="4.1",
                   produce_version=12)
        refused(rows[2], kerr.OUT_OF_ORDER_SEQUENCE_NUMBER, "F4",
                "Invalid sequence number for producer 7 at offset 2 in partition t-0: 2 "
                "(incoming seq. number). Expected sequence 0 for transactions v2 idempotent "
                "producer with no existing state.")

    @pytest.mark.parametrize(("bv", "pv", "txn"), [("4.0", 12, True), ("4.1", 11, True),
                                                   ("4.1", 12, False)])
    def test_not_before_4_1_nor_for_older_clients_nor_idempotent_batches(self, bv, pv, txn):
        # an unknown producer accepts any sequence (checkSequence: NO_PRODUCER_EPOCH)
        rows = run([data(3, epoch=0, txn=txn)], bv=bv, produce_version=pv)
        ok(rows[0])

    def test_within_an_ongoing_transaction_no_verification(self):
        # hasOngoingTransaction -> no verification state -> the usual continuity rule
        rows = run([data(0, epoch=0), data(1, epoch=0)], bv="4.1", produce_version=12)
        ok(rows[1])


class TestTextsByRelease:
    @pytest.mark.parametrize(("bv", "shown"), [
        ("3.4", "(offset=1 segment=[-1:-1])"), ("3.5", "(offset=1segment=[-1:-1])"),
        ("3.6", "(offset=1, segment=[-1:-1])"), ("4.1", "(offset=1, segment=[-1:-1])")])
    def test_f5_prints_log_offset_metadata(self, bv, shown):
        # ProducerAppendInfo.appendDataBatch formats firstOffsetMetadata
        # (LogOffsetMetadata.toString: Scala case class < 3.5, Java port 3.5, fixed 3.6)
        rows = run([data(0, epoch=0), data(1, epoch=0, txn=False)], bv=bv)
        refused(rows[1], kerr.INVALID_TXN_STATE, "F5",
                f"Expected transactional write from producer 7 at offset {shown} in partition "
                "t-0")
        assert log_offset_metadata(1, tuple(int(x) for x in bv.split("."))) == shown

    def test_new_epoch_rule_unchanged(self):
        # ProducerAppendInfo.checkSequence: a data batch bumping the epoch itself must start
        # at 0 (the client's own bump, KIP-360), after a marker too
        rows = run([data(0, epoch=0), marker(epoch=1), data(0, epoch=1), data(4, epoch=3)])
        refused(rows[3], kerr.OUT_OF_ORDER_SEQUENCE_NUMBER, "F4",
                "Invalid sequence number for new epoch of producer 7at offset 3 in partition "
                "t-0: 3 (request epoch), 4 (seq. number), 1 (current producer epoch)")


def test_checks_are_registered_with_their_codes():
    assert fchecks.F6.code == 52 and fchecks.F6.error.name == "TRANSACTION_COORDINATOR_FENCED"
    assert not fchecks.F6.error.retriable
    ids = {c.id for c in (fchecks.F3_EARLY, fchecks.F3_TV, fchecks.F3_PRE_28, fchecks.F4_TV2,
                          fchecks.F7_TYPE, fchecks.F7_NULL)}
    assert ids == {"F3/unified-log", "F3/tv", "F3/2.4", "F4/tv2", "F7/type", "F7/null"}
    assert np.all([c.step in ("F3", "F4", "F7") for c in (fchecks.F3_TV, fchecks.F4_TV2,
                                                          fchecks.F7_NULL)])
