"""Producer state in ``PartitionValidator`` (spec §3.F; §9 T25 a-d) and ``validate_batches``.

State carries from one ``validate`` call to the next, as on a real partition: epochs, the last
five batches (duplicates), sequence continuity (with the 2^31-1 wrap) and open transactions.
Bytes are validated as a producer sent them (``source="producer"``, base offset 0); the broker
assigns offsets 0, 1, 2... to appended records.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from kqlab.kafka.builder import Record, build_batch, control_record
from kqlab.kafka.log import RawBatch
from kqlab.kafka.validator import BatchOutcome, PartitionValidator, validate_batches
from kqlab.records import BATCH_VERDICTS_SCHEMA

NOW = 1_700_000_000_000
PID = 1000
INT32_MAX = 2**31 - 1


def validator(config: dict | None = None, **request) -> PartitionValidator:
    return PartitionValidator("t", 0, config, now=NOW, source="producer", **request)


def batch(seq: int, n: int = 1, *, pid: int = PID, epoch: int = 0, ts: int = NOW,
          transactional: bool = False, keys: bool = True, **options) -> bytes:
    """An idempotent (or transactional) v2 batch of ``n`` records starting at ``seq``."""
    records = [Record(key=b"k%d" % i if keys else None, value=b"v%d" % i) for i in range(n)]
    return build_batch(records, base_timestamp=ts, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, transactional=transactional, **options)


def marker(*, commit: bool = True, pid: int = PID, epoch: int = 0, base_offset: int = 0
           ) -> bytes:
    """An end-transaction marker batch as the coordinator writes it (sequence -1)."""
    return build_batch([control_record(commit=commit)], base_timestamp=NOW, control=True,
                       transactional=True, producer_id=pid, producer_epoch=epoch,
                       base_sequence=-1, base_offset=base_offset)


def accepted(out: BatchOutcome, base_offset: int, *, duplicate: bool = False) -> None:
    assert (out.error_code, out.error_name) == (0, "NONE"), out
    assert out.base_offset == base_offset
    assert out.duplicate is duplicate
    assert out.record_errors == [] and out.error_message is None


def rejected(out: BatchOutcome, code: int, name: str, check: str) -> None:
    assert (out.error_code, out.error_name, out.check) == (code, name, check), out
    # §5.2: producer-state errors carry no record errors and no error_message
    assert out.record_errors == []
    assert out.error_message is None
    assert out.whole_request is False
    assert out.base_offset == -1 and out.log_append_time == -1
    assert out.duplicate is False


def out_of_order(out: BatchOutcome) -> None:
    rejected(out, 45, "OUT_OF_ORDER_SEQUENCE_NUMBER", "F4")


# --------------------------------------------------------------------------------------------
# T25: sequences, epochs, duplicates
# --------------------------------------------------------------------------------------------
class TestT25:
    def test_t25a_sequence_gap(self):
        v = validator()
        accepted(v.validate(batch(0)), 0)
        out_of_order(v.validate(batch(2)))

    def test_t25b_old_epoch(self):
        v = validator()
        accepted(v.validate(batch(0, epoch=1)), 0)
        rejected(v.validate(batch(1, epoch=0)), 47, "INVALID_PRODUCER_EPOCH", "F3")
        rejected(v.validate(batch(0, epoch=0)), 47, "INVALID_PRODUCER_EPOCH", "F3")

    def test_new_producer_epoch_below_minus_1_is_old(self):
        # a new producer's last epoch is -1, so an epoch < -1 fails F3 as well
        rejected(validator().validate(batch(0, epoch=-2)), 47, "INVALID_PRODUCER_EPOCH", "F3")

    @pytest.mark.parametrize("which", range(5))
    def test_t25c_exact_resend_of_last_five_is_duplicate(self, which):
        v = validator()
        firsts = []
        for i in range(5):  # five 2-record batches: seq 0-1, 2-3, ... at offsets 0, 2, ...
            out = v.validate(batch(2 * i, 2, ts=NOW - 100 + i))
            accepted(out, 2 * i)
            firsts.append(out.base_offset)
        out = v.validate(batch(2 * which, 2, ts=NOW - 100 + which))
        accepted(out, firsts[which], duplicate=True)
        assert out.check == "F1"
        # F1 quirk: log_append_time is the cached batch's maxTimestamp, even on CreateTime
        assert out.log_append_time == NOW - 100 + which
        # nothing was appended: the next batch follows on
        accepted(v.validate(batch(10)), 10)

    def test_t25c_duplicate_needs_same_epoch(self):
        v = validator()
        accepted(v.validate(batch(0, epoch=3)), 0)
        accepted(v.validate(batch(0, epoch=3)), 0, duplicate=True)
        # the same sequences under a bumped epoch are a new batch (seq 0 after a bump)
        accepted(v.validate(batch(0, epoch=4)), 1)

    @pytest.mark.parametrize(("seq", "n"), [(1, 2), (2, 3), (1, 1), (3, 2), (0, 3)])
    def test_t25d_partial_overlap(self, seq, n):
        v = validator()
        accepted(v.validate(batch(0, 2)), 0)  # seq 0-1
        accepted(v.validate(batch(2, 2)), 2)  # seq 2-3
        out_of_order(v.validate(batch(seq, n)))

    def test_t25d_older_than_last_five(self):
        v = validator()
        for i in range(6):
            accepted(v.validate(batch(i)), i)
        out_of_order(v.validate(batch(0)))  # evicted from the cache of five
        accepted(v.validate(batch(1)), 1, duplicate=True)  # still cached


class TestSequenceRules:
    def test_epoch_bump_requires_sequence_0(self):
        v = validator()
        accepted(v.validate(batch(0, 2)), 0)
        out_of_order(v.validate(batch(2, epoch=1)))
        accepted(v.validate(batch(0, epoch=1)), 2)
        accepted(v.validate(batch(1, epoch=1)), 3)
        rejected(v.validate(batch(2, epoch=0)), 47, "INVALID_PRODUCER_EPOCH", "F3")

    @pytest.mark.parametrize(("epoch", "seq"), [(0, 42), (5, 7), (0, INT32_MAX)])
    def test_unknown_producer_accepts_any_sequence(self, epoch, seq):
        v = validator()
        accepted(v.validate(batch(seq, epoch=epoch)), 0)
        nxt = 0 if seq == INT32_MAX else seq + 1
        out_of_order(v.validate(batch(nxt + 1, epoch=epoch)))
        accepted(v.validate(batch(nxt, epoch=epoch)), 1)

    def test_producer_without_epoch_accepts_any_sequence(self):
        # a producer id with epoch -1 has no known epoch: rule 3 accepts any sequence
        v = validator()
        accepted(v.validate(batch(5, epoch=-1)), 0)
        accepted(v.validate(batch(99, epoch=-1)), 1)
        accepted(v.validate(batch(3, epoch=-1)), 2)

    def test_producers_are_independent(self):
        v = validator()
        accepted(v.validate(batch(0, pid=1)), 0)
        accepted(v.validate(batch(17, pid=2)), 1)
        accepted(v.validate(batch(1, pid=1)), 2)
        out_of_order(v.validate(batch(19, pid=2)))

    def test_sequence_wraps_after_int32_max(self):
        v = validator()
        accepted(v.validate(batch(INT32_MAX - 1)), 0)
        accepted(v.validate(batch(INT32_MAX)), 1)
        out_of_order(v.validate(batch(1)))
        # the int32 reading of MAX + 1 is negative: D2.f rejects it before stage F
        out = v.validate(batch(INT32_MAX + 1 - 2**32))
        assert (out.error_code, out.check) == (87, "D2.f")
        accepted(v.validate(batch(0)), 2)
        accepted(v.validate(batch(1)), 3)

    def test_multi_record_batch_wrapping_past_int32_max(self):
        # lastSequence = incrementSequence(MAX - 1, 2) = 0, so the next batch starts at 1
        v = validator()
        accepted(v.validate(batch(INT32_MAX - 1, 3)), 0)
        out_of_order(v.validate(batch(0)))
        accepted(v.validate(batch(INT32_MAX - 1, 3)), 0, duplicate=True)
        accepted(v.validate(batch(1)), 3)

    def test_after_max_only_zero_follows(self):
        v = validator()
        accepted(v.validate(batch(INT32_MAX - 2, 3)), 0)  # seq MAX-2 .. MAX
        out_of_order(v.validate(batch(1)))
        accepted(v.validate(batch(0)), 3)


class TestRejectedBatchesLeaveStateAlone:
    def test_out_of_order_rejection(self):
        v = validator()
        accepted(v.validate(batch(0)), 0)
        out_of_order(v.validate(batch(5)))
        accepted(v.validate(batch(1)), 1)

    def test_record_error_rejection(self):
        v = validator({"cleanup.policy": "compact"})
        accepted(v.validate(batch(0)), 0)
        out = v.validate(batch(1, 2, keys=False))
        assert (out.error_code, out.check) == (87, "R3")
        accepted(v.validate(batch(1, 2)), 1)  # seq 1 still expected, offset 1 still next
        accepted(v.validate(batch(3)), 3)

    def test_timestamp_rejection_does_not_bump_epoch(self):
        v = validator({"message.timestamp.before.max.ms": 1000})
        accepted(v.validate(batch(0, epoch=0)), 0)
        out = v.validate(batch(0, epoch=1, ts=NOW - 5000))
        assert (out.error_code, out.check) == (32, "R4")
        accepted(v.validate(batch(1, epoch=0)), 1)  # epoch 0 still current

    def test_old_epoch_rejection(self):
        v = validator()
        accepted(v.validate(batch(0, epoch=2)), 0)
        rejected(v.validate(batch(1, epoch=1)), 47, "INVALID_PRODUCER_EPOCH", "F3")
        accepted(v.validate(batch(1, epoch=2)), 1)

    def test_rejected_first_batch_leaves_producer_unknown(self):
        v = validator({"max.message.bytes": 100})
        out = v.validate(batch(5, 20))
        assert (out.error_code, out.check) == (10, "C2")
        accepted(v.validate(batch(9)), 0)  # still unknown: any sequence


# --------------------------------------------------------------------------------------------
# Transactions: F5 and end markers
# --------------------------------------------------------------------------------------------
class TestTransactions:
    def test_f5_non_transactional_batch_in_open_transaction(self):
        v = validator()
        accepted(v.validate(batch(0, transactional=True)), 0)
        rejected(v.validate(batch(1)), 48, "INVALID_TXN_STATE", "F5")
        accepted(v.validate(batch(1, transactional=True)), 1)

    def test_stage_f_order_epoch_before_txn_state(self):
        v = validator()
        accepted(v.validate(batch(0, epoch=1, transactional=True)), 0)
        # old epoch and non-transactional in an open transaction: F3 decides
        rejected(v.validate(batch(1, epoch=0)), 47, "INVALID_PRODUCER_EPOCH", "F3")

    def test_stage_f_order_sequence_before_txn_state(self):
        v = validator()
        accepted(v.validate(batch(0, transactional=True)), 0)
        # a sequence gap and non-transactional in an open transaction: F4 decides
        out_of_order(v.validate(batch(3)))

    def test_duplicate_of_transactional_batch_is_acknowledged(self):
        v = validator()
        accepted(v.validate(batch(0, 2, transactional=True)), 0)
        accepted(v.validate(batch(0, 2, transactional=True)), 0, duplicate=True)

    def test_commit_marker_from_coordinator_closes_transaction(self):
        v = validator()
        accepted(v.validate(batch(0, 2, transactional=True)), 0)
        v.origin = "coordinator"  # the coordinator's WriteTxnMarkers append
        out = v.validate(marker(commit=True))
        accepted(out, 2)
        v.origin = "client"
        accepted(v.validate(batch(2)), 3)  # no open transaction; sequence continues at 2

    def test_abort_marker_closes_transaction_and_a_new_one_opens(self):
        v = validator()
        accepted(v.validate(batch(0, transactional=True)), 0)
        v.origin = "coordinator"
        accepted(v.validate(marker(commit=False)), 1)
        v.origin = "client"
        accepted(v.validate(batch(1, transactional=True)), 2)
        rejected(v.validate(batch(2)), 48, "INVALID_TXN_STATE", "F5")

    def test_marker_from_client_is_rejected_and_leaves_transaction_open(self):
        v = validator()
        accepted(v.validate(batch(0, transactional=True)), 0)
        rejected_marker = v.validate(marker())
        assert (rejected_marker.error_code, rejected_marker.check) == (87, "D2.e")
        rejected(v.validate(batch(1)), 48, "INVALID_TXN_STATE", "F5")

    def test_marker_with_old_epoch_is_fenced(self):
        v = validator()
        accepted(v.validate(batch(0, epoch=3, transactional=True)), 0)
        v.origin = "coordinator"
        out = v.validate(marker(epoch=2))
        assert (out.error_code, out.error_name, out.check) == (47, "INVALID_PRODUCER_EPOCH",
                                                               "F3")

    def test_log_replay_treats_control_batches_as_coordinator_markers(self):
        v = PartitionValidator("t", 0, None, now=NOW, source="log")
        accepted(v.validate(batch(0, 2, transactional=True, base_offset=0)), 0)
        accepted(v.validate(marker(base_offset=2)), 2)
        accepted(v.validate(batch(2, base_offset=3)), 3)

    def test_log_replay_without_marker_keeps_transaction_open(self):
        v = PartitionValidator("t", 0, None, now=NOW, source="log")
        accepted(v.validate(batch(0, 2, transactional=True, base_offset=0)), 0)
        rejected(v.validate(batch(2, base_offset=2)), 48, "INVALID_TXN_STATE", "F5")


# --------------------------------------------------------------------------------------------
# validate_batches: the batch-verdicts table
# --------------------------------------------------------------------------------------------
class TestValidateBatches:
    def test_one_row_per_batch_with_the_verdicts_schema(self):
        no_key = build_batch([Record(value=b"x")], base_timestamp=NOW)
        batches = [batch(0), batch(0), batch(5), no_key, batch(1, 2)]
        table = validate_batches(batches, topic="t", partition=0, source="producer", now=NOW,
                                 config={"cleanup.policy": "compact"})
        assert isinstance(table, pa.Table)
        assert table.schema.equals(BATCH_VERDICTS_SCHEMA)
        assert table.num_rows == len(batches)
        rows = table.to_pylist()
        assert [r["error_code"] for r in rows] == [0, 0, 45, 87, 0]
        assert [r["error_name"] for r in rows] == [
            "NONE", "NONE", "OUT_OF_ORDER_SEQUENCE_NUMBER", "INVALID_RECORD", "NONE"]
        assert [r["check"] for r in rows] == [None, "F1", "F4", "R3", None]
        assert [r["record_count"] for r in rows] == [1, 1, 1, 1, 2]
        assert all(r["topic"] == "t" and r["partition"] == 0 for r in rows)
        assert all(r["batch_offset"] == 0 for r in rows)
        msg = "Compacted topic cannot accept message without key in topic partition t-0"
        assert rows[3]["record_errors"] == [{"batch_index": 0, "message": msg, "check": "R3",
                                             "rule": None, "params": [("tp", "t-0")]}]
        assert rows[3]["error_message"] == (
            "One or more records have been rejected due to 1 record errors in total, and only "
            f"showing the first three errors at most: [RecordError(batchIndex=0, "
            f"message='{msg}')]")
        assert rows[2]["record_errors"] == [] and rows[2]["error_message"] is None

    def test_raw_batches_keep_their_positions(self):
        items = [RawBatch(0, batch(0)), RawBatch(70, batch(1))]
        table = validate_batches(items, topic="t", partition=3, source="producer", now=NOW)
        assert table.schema.equals(BATCH_VERDICTS_SCHEMA)
        assert table.column("position").to_pylist() == [0, 70]
        assert table.column("error_code").to_pylist() == [0, 0]
        assert table.column("partition").to_pylist() == [3, 3]

    def test_empty_input(self):
        table = validate_batches([], topic="t", partition=0, source="producer", now=NOW)
        assert table.schema.equals(BATCH_VERDICTS_SCHEMA)
        assert table.num_rows == 0
