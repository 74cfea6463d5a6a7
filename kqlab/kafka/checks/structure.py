"""Spec §3.D.3: reading a batch's records.  Structural errors abort the partition with
INVALID_RECORD (no record errors); a codec failure is a KafkaException, UNKNOWN_SERVER_ERROR.
The texts are the broker's internal exception messages (logged, never returned)."""

from __future__ import annotations

from kqlab.kafka import errors as kerr
from kqlab.kafka.checks._check import CHECKS, Check

D3 = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD, "{reason}",
    "the records of a batch cannot be read as declared (sizes, varints, header counts, "
    "records missing or left over)", "DefaultRecordBatch.RecordIterator / DefaultRecord.readFrom"))
D3_CODEC = CHECKS.add(Check(
    "D3.codec", "3.D.3", kerr.UNKNOWN_SERVER_ERROR, "Failed to decompress record stream ({reason})",
    "the codec fails on the compressed records (KafkaException)",
    "DefaultRecordBatch.StreamRecordIterator.readNext"))
