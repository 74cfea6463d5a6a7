"""Spec §3.C: the log's pre-validation of each batch (``UnifiedLog.analyzeAndValidateRecords``):
base offset, size, CRC and codec id, in that order."""

from __future__ import annotations

from kqlab.kafka import errors as kerr
from kqlab.kafka.checks._check import CHECKS, Check

C1 = CHECKS.add(Check(
    "C1", "3.C", kerr.INVALID_RECORD,
    "The baseOffset of the record batch in the append to {tp} should be 0, but it is "
    "{base_offset}", "a v2 batch from a client has a base offset other than 0",
    "UnifiedLog.analyzeAndValidateRecords"))
C2 = CHECKS.add(Check(
    "C2", "3.C", kerr.MESSAGE_TOO_LARGE,
    "The record batch size in the append to {tp} is {size} bytes which exceeds the maximum "
    "configured value of {max_message_bytes}.",
    "batch size (12 + batchLength) > max.message.bytes", "UnifiedLog.analyzeAndValidateRecords"))
C3 = CHECKS.add(Check(
    "C3", "3.C", kerr.CORRUPT_MESSAGE,
    "Record is corrupt (stored crc = {stored_crc}) in topic partition {tp}.",
    "v2: size < 61 or CRC-32C mismatch; legacy: size < 14 or CRC-32 mismatch",
    "UnifiedLog.analyzeAndValidateRecords / DefaultRecordBatch.isValid"))
C4 = CHECKS.add(Check(
    "C4", "3.C", kerr.UNKNOWN_SERVER_ERROR, "Unknown compression type id: {codec}",
    "codec id 5-7 (IllegalArgumentException)", "CompressionType.forId"))
