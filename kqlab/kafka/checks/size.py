"""Spec §3.E: the log's post-validation sizes (``UnifiedLog.append``), for batches the broker
re-encoded (E1) and for every batch against the segment size (E2)."""

from __future__ import annotations

from kqlab.kafka import errors as kerr
from kqlab.kafka.checks._check import CHECKS, Check

E1 = CHECKS.add(Check(
    "E1", "3.E", kerr.MESSAGE_TOO_LARGE,
    "Message batch size is {size} bytes in append topartition {tp} which exceeds the maximum "
    "configured size of {max_message_bytes}.",
    "a re-encoded batch exceeds max.message.bytes", "UnifiedLog.append"))
E2 = CHECKS.add(Check(
    "E2", "3.E", kerr.RECORD_LIST_TOO_LARGE,
    "Message batch size is {size} bytes in append to partition {tp}, which exceeds the maximum "
    "configured segment size of {segment_bytes}.",
    "the validated bytes exceed segment.bytes", "UnifiedLog.append (the comma is Kafka's: "
    "UnifiedLog since 2.0)"))
