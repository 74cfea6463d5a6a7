"""Spec §3.D.1-§3.D.2: LogValidator's batch-count check and ``validateBatch`` (the header
fields of each batch, before its records are read), plus Z0 (zstd below IBP 2.1)."""

from __future__ import annotations

from kqlab.kafka import errors as kerr
from kqlab.kafka.checks._check import CHECKS, Check

Z0 = CHECKS.add(Check(
    "Z0", "3.D.0", kerr.UNSUPPORTED_COMPRESSION_TYPE,
    "Produce requests to inter.broker.protocol.version < 2.1 broker are not allowed to use "
    "ZStandard compression", "target codec zstd below inter.broker.protocol.version 2.1 "
    "(before 4.0)", "LogValidator.validateMessagesAndAssignOffsetsCompressed"))
D1 = CHECKS.add(Check(
    "D1", "3.D.1", kerr.INVALID_RECORD, "Record batch has no batches at all",
    "no batch at all (produce v0-2)", "LogValidator.getFirstBatchAndMaybeValidateNoMoreBatches"))
D1_MORE = CHECKS.add(Check(
    "D1", "3.D.1", kerr.INVALID_RECORD, "Compressed outer record has more than one batch",
    "a v2 (or compressed) first batch is followed by another",
    "LogValidator.getFirstBatchAndMaybeValidateNoMoreBatches", id="D1/more"))
D2_A = CHECKS.add(Check(
    "D2.a", "3.D.2", kerr.INVALID_RECORD,
    "Batch magic {magic} is not the same as the first batch's magic byte {first_magic} in "
    "topic partition {tp}", "a batch's magic differs from the first batch's",
    "LogValidator.validateBatch"))
D2_B = CHECKS.add(Check(
    "D2.b", "3.D.2", kerr.INVALID_RECORD,
    "Batch has an invalid offset range: [{base_offset}, {last_offset}] in topic partition {tp}",
    "lastOffsetDelta < 0 (64-bit)", "LogValidator.validateBatch"))
D2_C = CHECKS.add(Check(
    "D2.c", "3.D.2", kerr.INVALID_RECORD,
    "Invalid reported count for record batch: {count} in topic partition {tp}",
    "recordsCount <= 0", "LogValidator.validateBatch"))
D2_D = CHECKS.add(Check(
    "D2.d", "3.D.2", kerr.INVALID_RECORD,
    "Inconsistent batch offset range [{base_offset}, {last_offset}] and count of records "
    "{count} in topic partition {tp}", "recordsCount != lastOffsetDelta + 1",
    "LogValidator.validateBatch"))
D2_E = CHECKS.add(Check(
    "D2.e", "3.D.2", kerr.INVALID_RECORD,
    "Clients are not allowed to write control records in topic partition {tp}",
    "a client batch has the control bit", "LogValidator.validateBatch"))
D2_F = CHECKS.add(Check(
    "D2.f", "3.D.2", kerr.INVALID_RECORD,
    "Invalid sequence number {sequence} in record batch with producerId {producer_id} in "
    "topic partition {tp}", "producerId > -1 and baseSequence < 0", "LogValidator.validateBatch"))
D2_G = CHECKS.add(Check(
    "D2.g", "3.D.2", kerr.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    "Transactional records cannot be used with magic version {to_magic}",
    "transactional batch and target magic < 2", "LogValidator.validateBatch"))
D2_H = CHECKS.add(Check(
    "D2.h", "3.D.2", kerr.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    "Idempotent records cannot be used with magic version {to_magic}",
    "producerId > -1 and target magic < 2", "LogValidator.validateBatch"))
