"""The vectorised record-check kernels of ``broker_verdicts`` against the per-batch validator.

``tests/kafka/test_table_checks.py`` holds the tables' verdicts equal to ``validate_batches``
on generated segments of small batches.  These cases aim at the group-by kernels of the
record checks (R3 / R4 / record policy): record errors grouped per batch, the first three of
each batch rendered into the INVALID_RECORD text, the ``check`` labels, the KIP-686 first
failure per batch, with batches of 1 to 40 records beside empty (declared count 0) and
corrupt batches, null keys and values, policy messages that are empty or quote, and the
policy given as a Python list, a numpy object array or an Arrow array.  Without ``raw``, so
every row is judged from the tables alone.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.kafka import decode_records
from kqlab.kafka.builder import BatchBuilder, Record, rewrite_header
from kqlab.kafka.log import scan_buffer
from kqlab.kafka.table_checks import UNDETERMINED, RecordPolicy, broker_verdicts, policy_by_batch
from kqlab.kafka.validator import PartitionValidator
from tests.kafka.forms import with_ids

NOW = 1_700_000_000_000
PROFILES = ["kip-940", "kip-729", "kip-686"]
CONFIGS: list[tuple[str | None, dict]] = [
    ("4.0", {"cleanup.policy": "compact", "message.timestamp.before.max.ms": "3600000",
             "message.timestamp.after.max.ms": "60000"}),
    ("3.9", {"cleanup.policy": "compact", "message.timestamp.difference.max.ms": "600000"}),
    ("4.0", {}),
    ("3.5", {"cleanup.policy": "compact"}),
    ("4.0", {"compression.type": "lz4", "cleanup.policy": "compact",
             "message.timestamp.before.max.ms": "1000"}),
]
KEYS = ("error_code", "error_name", "error_message", "check", "detail", "record_count")
MESSAGES = ["rule says no", "", "it's 'quoted', with a comma", "ünïcødé ✓", "a; b (after 1 of 2)"]


def build(rng: random.Random, n_batches: int, max_records: int) -> bytes:
    out, offset = [], 0
    for _ in range(n_batches):
        n = rng.choice([1, 1, 2, 3, 4, 7, max_records])
        codec = rng.choice([0, 0, 0, 1, 3])
        recs = []
        for _ in range(n):
            ts = NOW + rng.choice([0, -5_000, 5_000, -7_200_000, 7_200_000, 120_000])
            key = None if rng.random() < 0.3 else b"k%d" % rng.randrange(50)
            value = None if rng.random() < 0.1 else b"v" * rng.choice([0, 3, 40])
            recs.append(Record(key=key, value=value, timestamp=ts))
        data = BatchBuilder(codec=codec, base_offset=offset, base_timestamp=NOW,
                            records=recs).build()
        fault = rng.random()
        if fault < 0.06:
            data = rewrite_header(data, fix_crc=False, max_timestamp=NOW + 1)  # stale CRC
        elif fault < 0.1 and codec == 0:  # declared count 0: no records in the table
            data = rewrite_header(data, records_count=0)
        elif fault < 0.14 and codec == 0:  # declared count too low: a structural error
            data = rewrite_header(data, records_count=max(1, n - 1), last_offset_delta=n - 2)
        out.append(data)
        offset += n
    return b"".join(out)


def policy_messages(rng: random.Random, n: int, share: float) -> list[str | None]:
    return [rng.choice(MESSAGES) + f" ({i})" * (rng.random() < 0.5) if rng.random() < share
            else None for i in range(n)]


def check(data: bytes, config: tuple[str | None, dict], profile: str,
          messages: list[str | None]) -> pa.Table:
    bv, cfg = config
    d = decode_records(data, topic="t", partition=0)
    assert d.records.num_rows == len(messages)
    policy = RecordPolicy(profile, messages)
    got = broker_verdicts(d.records, d.batches, cfg, broker_version=bv, now=NOW, policy=policy)
    # the same policy as Arrow, as a numpy object array: the same verdicts
    for alt in (pa.array(messages, pa.string()), pa.chunked_array([pa.array(messages,
                                                                             pa.string())]),
                np.asarray([*messages, None], dtype=object)[:-1]):
        again = broker_verdicts(d.records, d.batches, cfg, broker_version=bv, now=NOW,
                                policy=RecordPolicy(profile, alt))
        assert again.equals(got)
    v = PartitionValidator("t", 0, cfg, broker_version=bv, now=NOW)
    per_batch = policy_by_batch(d.records, d.batches, policy)
    want = [v.validate(b, position=p, policy=per_batch[i]).to_dict()
            for i, (p, b) in enumerate(scan_buffer(data))]
    rows = got.to_pylist()
    assert len(rows) == len(want)
    for g, w in zip(rows, want, strict=True):
        if g["check"] == UNDETERMINED:  # a compressed batch with a structural error
            continue
        assert {k: g[k] for k in KEYS} == {k: w[k] for k in KEYS}
        assert g["record_errors"] == with_ids(w)
    return got


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.integers(1, 12), st.sampled_from([5, 12, 40]),
       st.sampled_from(CONFIGS), st.sampled_from(PROFILES), st.sampled_from([0.0, 0.1, 0.5, 1]))
def test_record_kernels_generated(seed, n_batches, max_records, config, profile, share):
    rng = random.Random(seed)
    data = build(rng, n_batches, max_records)
    n = decode_records(data, topic="t", partition=0).records.num_rows
    check(data, config, profile, policy_messages(rng, n, share))


def _batch(keys: list[bytes | None], ts: list[int], offset: int = 0) -> bytes:
    return BatchBuilder(base_offset=offset, base_timestamp=NOW, records=[
        Record(key=k, value=b"v", timestamp=t) for k, t in zip(keys, ts, strict=True)]).build()


@pytest.mark.parametrize("profile", PROFILES)
def test_mixed_errors_in_one_batch(profile):
    """R3, R4 and policy failures interleaved in one batch of 9 and around it: the record
    errors keep their batch indexes and texts, the first three are shown, the label names
    every kind present."""
    late = NOW + 10 * 3_600_000
    keys = [None, b"k", b"k", None, b"k", b"k", b"k", None, b"k"]
    ts = [NOW, late, NOW, late, NOW, NOW, late, NOW, NOW]
    data = _batch([b"k"], [NOW]) + _batch(keys, ts, 1) + _batch([None], [late], 10) + \
        _batch([b"k", b"k"], [NOW, NOW], 11) + \
        _batch([None, b"k", None, b"k", None], [NOW] * 5, 13)
    messages = [None,  # batch 0, then batch 1 (9 records), 2, 3 (2 records), 4 (5 records)
                None, None, "p2", "p3", "p4", None, "p6", None, "p8", "p", "q0", "q1",
                None, "r1", None, "r3", None]
    got = check(data, CONFIGS[0], profile, messages)
    checks = got["check"].to_pylist()
    codes = got["error_code"].to_pylist()
    assert codes == [0, 32, 87, 44 if profile == "kip-686" else 87, 87]
    r3 = "Compacted topic cannot accept message without key in topic partition t-0"
    if profile == "kip-686":
        assert checks == [None, "R3+R4", "R3", "P", "R3"]
        assert got["error_message"][3].as_py() == "q0"
        shown = [(0, r3), (2, r3), (4, r3)]
        total = 3
    else:
        assert checks == [None, "P+R3+R4", "R3", "P", "P+R3"]
        errs = got["record_errors"][1].as_py()
        assert [e["batch_index"] for e in errs] == [0, 1, 2, 3, 4, 6, 7, 8]
        shown = [(0, r3), (1, "r1"), (2, r3)]
        total = 5
    text = ", ".join(f"RecordError(batchIndex={j}, message='{t}')" for j, t in shown)
    assert got["error_message"][4].as_py() == (
        f"One or more records have been rejected due to {total} record errors in total, and "
        f"only showing the first three errors at most: [{text}]")


def test_no_record_errors_and_no_policy():
    data = _batch([b"k"] * 3, [NOW] * 3) + _batch([b"k"], [NOW], 3)
    d = decode_records(data, topic="t", partition=0)
    for policy in (None, RecordPolicy("kip-940", [None] * 4),
                   RecordPolicy("kip-940", pa.nulls(4, pa.string()))):
        out = broker_verdicts(d.records, d.batches, CONFIGS[0][1], broker_version="4.0",
                              now=NOW, policy=policy)
        assert out["error_code"].to_pylist() == [0, 0]
        assert out["record_errors"].to_pylist() == [[], []]


def test_policy_length_must_match_records():
    data = _batch([b"k"] * 3, [NOW] * 3)
    d = decode_records(data, topic="t", partition=0)
    with pytest.raises(ValueError, match="messages"):
        broker_verdicts(d.records, d.batches, now=NOW, policy=RecordPolicy("kip-940", ["x"]))


LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def _wrap(x: int) -> int:
    return (x + 2**63) % 2**64 - 2**63


@pytest.mark.parametrize("before_after", [True, False])
@pytest.mark.parametrize(("below", "above"), [(0, 0), (1000, 60_000), (3_600_000, 3_600_000),
                                             (LONG_MAX, 1000), (1000, LONG_MAX),
                                             (LONG_MAX, LONG_MAX), (LONG_MAX - 5, 7)])
@pytest.mark.parametrize("now", [NOW, 0, LONG_MAX - 10, LONG_MIN + 10])
def test_out_of_range_wraps_like_the_broker(before_after, below, above, now):
    """R4's timestamp kernel == the broker's long arithmetic, at the extremes too (and its
    fast path when every timestamp is within the bounds)."""
    from kqlab.kafka.checks.record import timestamp_out_of_range
    from kqlab.kafka.configs import TopicConfig

    if before_after:
        cfg = TopicConfig.from_dict({"message.timestamp.before.max.ms": below,
                                     "message.timestamp.after.max.ms": above}, "4.0")
    else:
        cfg = TopicConfig.from_dict({"message.timestamp.difference.max.ms": below}, "3.5")

    def _out_of_range(ts, now, *_):  # the one R4 kernel every engine calls
        return timestamp_out_of_range(ts, now, cfg)

    if not before_after:
        above = below
    near = [now + d for d in (0, -1, 1, -below, -below - 1, above, above + 1)]
    values = [v for v in [-1, 0, LONG_MIN, LONG_MAX, LONG_MIN + 1, LONG_MAX - 1, *near]
              if LONG_MIN <= v <= LONG_MAX]
    for ts in ([v] for v in values):
        arr = np.asarray(ts, dtype=np.int64)
        if before_after:
            want = [t != -1 and (_wrap(now - t) > below or _wrap(-_wrap(now - t)) > above)
                    for t in ts]
        else:
            want = [t != -1 and _wrap(abs(_wrap(t - now))) > below for t in ts]
        got = _out_of_range(arr, now, below, above, before_after)
        assert got.tolist() == want, ts
    arr = np.asarray(values, dtype=np.int64)
    got = _out_of_range(arr, now, below, above, before_after)
    one_by_one = [bool(_out_of_range(arr[i:i + 1], now, below, above, before_after)[0])
                  for i in range(len(arr))]
    assert got.tolist() == one_by_one
    assert len(_out_of_range(np.zeros(0, np.int64), now, below, above, before_after)) == 0
