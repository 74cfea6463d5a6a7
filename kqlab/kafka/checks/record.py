"""Spec §3.D.4: the per-record checks LogValidator collects (R1-R4, at most one error per
record, the first that fails), and where a record policy joins them (``P``: after R3/R4, only
for records without an earlier error; KIP-940/729 semantics, or KIP-686's batch-level
POLICY_VIOLATION).  R0 is never reached: ``DeepRecordsIterator`` throws on a compressed inner
record before LogValidator can look at it (a structural error, D3, here).

The timestamp rule (R4) lives here once, as numpy over any number of records, so the byte-level
validator (one batch), the table checks (a whole sample) and the gate (a poll batch) judge a
timestamp with the same wrapping 64-bit arithmetic.
"""

from __future__ import annotations

import numpy as np

from kqlab.kafka import errors as kerr
from kqlab.kafka.checks._check import CHECKS, Check
from kqlab.kafka.configs import LONG_MAX, TopicConfig
from kqlab.kafka.varint import to_int64

R1 = CHECKS.add(Check(
    "R1", "3.D.4", kerr.INVALID_RECORD,
    "Record {record}'s magic does not match outer magic {magic} in topic partition {tp}",
    "a legacy record's magic differs from its batch's", "LogValidator.validateRecord",
    "record_error"))
R3 = CHECKS.add(Check(
    "R3", "3.D.4", kerr.INVALID_RECORD,
    "Compacted topic cannot accept message without key in topic partition {tp}",
    "cleanup.policy contains compact and the key is null (an empty key passes)",
    "LogValidator.validateKey", "record_error"))
R4 = CHECKS.add(Check(
    "R4", "3.D.4", kerr.INVALID_TIMESTAMP,
    "Timestamp {timestamp} of message with offset {offset} is out of range. The timestamp "
    "should be within [{lower}, {upper}]",
    "CreateTime topic, timestamp != -1 and now - ts > before.max.ms or ts - now > "
    "after.max.ms (64-bit wrap; before 3.6 |ts - now| > difference.max.ms)",
    "LogValidator.validateTimestamp", "record_error"))
R4_TYPE = CHECKS.add(Check(
    "R4", "3.D.4", kerr.INVALID_TIMESTAMP,
    "Invalid timestamp type in message {record}. Producer should not set timestamp type to "
    "LogAppendTime.",
    "the batch has the LogAppendTime bit and the record was not range-checked",
    "LogValidator.validateTimestamp", "record_error", id="R4/type"))
P = CHECKS.add(Check(
    "P", "7.2", kerr.INVALID_RECORD, "{message}",
    "a record fails a reject rule of the record policy (KIP-940/KIP-729: one record error "
    "per failing record, after R3/R4)", "KIP-940 RecordValidationPolicy.validate",
    "record_error"))
P_BATCH = CHECKS.add(Check(
    "P", "7.1", kerr.POLICY_VIOLATION, "{message}",
    "KIP-686: a record of the batch fails the policy and no broker record error was found; "
    "the first failing record's message, no record errors", "KIP-686 RecordsPolicy.validate",
    "error_message", id="P/batch"))


def timestamp_checked(config: TopicConfig) -> bool:
    """Whether R4 can reject anything on this topic: a CreateTime topic with a finite bound."""
    if config.log_append_time:
        return False
    if config.release.before_after_timestamps:
        return not (config.before_max_ms == LONG_MAX and config.after_max_ms == LONG_MAX)
    return config.difference_max_ms != LONG_MAX


def timestamp_bounds(now: int, config: TopicConfig) -> tuple[int, int]:
    """The ``[lower, upper]`` R4 prints, with Java's 64-bit wrap."""
    if config.release.before_after_timestamps:
        below, above = config.before_max_ms, config.after_max_ms
    else:
        below = above = config.difference_max_ms
    return to_int64(now - below), to_int64(now + above)


def timestamp_out_of_range(ts: np.ndarray, now: int, config: TopicConfig) -> np.ndarray:
    """R4's range verdict per record timestamp (int64 array), ignoring the LogAppendTime bit:
    ``now - ts > before || ts - now > after`` (3.6+) or ``|ts - now| > difference`` (before),
    in wrapping 64-bit arithmetic; ``ts == -1`` and LogAppendTime topics never fail."""
    n = len(ts)
    if not n or config.log_append_time:
        return np.zeros(n, dtype=bool)
    ba = config.release.before_after_timestamps
    below, above = ((config.before_max_ms, config.after_max_ms) if ba
                    else (config.difference_max_ms, config.difference_max_ms))
    lo, hi = now - below, now + above
    if lo >= -LONG_MAX - 1 and hi <= LONG_MAX and int(ts.min()) >= lo and int(ts.max()) <= hi:
        return np.zeros(n, dtype=bool)  # all within bounds and nothing below can wrap
    with np.errstate(over="ignore"):
        if ba:
            diff = np.subtract(np.int64(now), ts)
            bad = diff > np.int64(below)
            np.negative(diff, out=diff)
            bad |= diff > np.int64(above)
        else:
            diff = np.subtract(ts, np.int64(now))
            np.abs(diff, out=diff)  # abs(Long.MIN_VALUE) stays negative, as in Java
            bad = diff > np.int64(below)
    bad &= ts != -1
    return bad


def timestamp_type_flagged(ts: np.ndarray, out_of_range: np.ndarray, lat_batch: bool,
                           config: TopicConfig) -> np.ndarray:
    """R4's second branch per record: the batch carries the LogAppendTime bit and the record
    was not range-checked (3.6+: a LogAppendTime topic, or timestamp -1; before 3.6: any record
    not already out of range)."""
    n = len(ts)
    if not lat_batch:
        return np.zeros(n, dtype=bool)
    if not config.release.before_after_timestamps:
        return ~out_of_range
    if config.log_append_time:
        return np.ones(n, dtype=bool)
    return ts == -1


def render_record(offset: int, timestamp: int, key_size: int, value_size: int, *,
                  partial: bool) -> str:
    """How ``<record>`` prints in R1/R4' texts: ``DefaultRecord`` (full parse, null sizes as
    0) or ``PartialDefaultRecord`` (the in-place reader, null sizes as -1)."""
    if partial:
        return (f"PartialDefaultRecord(offset={offset}, timestamp={timestamp}, "
                f"key={key_size} bytes, value={value_size} bytes)")
    return (f"DefaultRecord(offset={offset}, timestamp={timestamp}, key={max(key_size, 0)} "
            f"bytes, value={max(value_size, 0)} bytes)")
