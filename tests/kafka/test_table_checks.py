"""``broker_verdicts`` (vectorised, over the decoded tables) == ``validate_batches`` (per batch).

Parity is checked row for row (``to_pylist()``) on the demo partition, on hypothesis-generated
segments (codecs, null keys, timestamps around ``now``, producer ids / epochs / sequences with
gaps, duplicates and epoch bumps, transactions and markers, stale CRCs, inconsistent headers
with a fixed CRC) across configs and broker versions, and on the real broker segments.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.kafka import decode_records, iter_log_batches, read_log, validate_batches
from kqlab.kafka.builder import BatchBuilder, Record, control_record, rewrite_header
from kqlab.kafka.log import RawBatch, scan_buffer
from kqlab.kafka.table_checks import UNDETERMINED, broker_verdicts
from kqlab.records import BATCH_VERDICTS_SCHEMA
from kqlab.sources.demo import DEMO_CONFIGS, write_demo_segment
from tests.kafka.forms import with_ids

NOW = 1_700_000_000_000
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
SHARED = Path(__file__).resolve().parents[2].parent / "shared"
REAL = SHARED / "fixtures" / "real-segments"

CONFIGS: list[tuple[str | None, dict]] = [
    (None, {}),
    ("4.0", {"cleanup.policy": "compact", "message.timestamp.before.max.ms": "3600000",
             "message.timestamp.after.max.ms": "60000"}),
    ("3.9", {"message.timestamp.difference.max.ms": "600000"}),
    ("3.5", {"cleanup.policy": "compact,delete",
             "message.timestamp.difference.max.ms": "600000"}),
    ("3.5", {"message.timestamp.type": "LogAppendTime"}),
    ("4.0", {"message.timestamp.type": "LogAppendTime", "cleanup.policy": "compact"}),
    ("4.0", {"max.message.bytes": "400"}),
    ("3.9", {"segment.bytes": "500", "message.timestamp.after.max.ms": "1000"}),
    ("4.0", {"compression.type": "uncompressed", "max.message.bytes": "700"}),
    ("4.0", {"compression.type": "lz4", "segment.bytes": "900"}),
    ("3.9", {"compression.type": "zstd", "inter.broker.protocol.version": "2.0"}),
]
REQUESTS: list[dict] = [
    {}, {"acks": 2}, {"produce_version": 5}, {"transactional_id_authorized": False},
    {"origin": "coordinator"}, {"first_offset": 1000}, {"resync": False},
]


def expected(data: bytes, topic: str, partition: int, config: dict, bv: str | None,
             **request) -> pa.Table:
    raws = [RawBatch(p, b) for p, b in
            (x for x in scan_buffer(data) if isinstance(x, tuple))]
    return validate_batches(raws, topic=topic, partition=partition, config=config,
                            broker_version=bv, now=NOW, **request)


def assert_parity(data: bytes, config: dict, bv: str | None = None, topic: str = "t",
                  partition: int = 0, **request) -> pa.Table:
    """Exact with ``raw``; without it, equal except rows marked undetermined."""
    d = decode_records(data, topic=topic, partition=partition)
    want = expected(data, topic, partition, config, bv, **request).to_pylist()
    raw = [x for x in scan_buffer(data) if isinstance(x, tuple)]
    got = broker_verdicts(d.records, d.batches, config, broker_version=bv, now=NOW,
                          raw=[b for _, b in raw], **request)
    assert got.schema == BATCH_VERDICTS_SCHEMA
    assert got.to_pylist() == want
    plain = broker_verdicts(d.records, d.batches, config, broker_version=bv, now=NOW,
                            **request).to_pylist()
    assert len(plain) == len(want)
    after_unknown = False
    for g, w in zip(plain, want, strict=True):
        if g["check"] == UNDETERMINED:
            assert g["error_code"] is None and g["error_name"] is None and g["detail"]
            after_unknown = True
        elif after_unknown and (g["check"] or "").startswith("F"):
            # an undetermined batch counts as not appended: offsets quoted in stage-F texts
            # (and kept in their parameters) may differ, nothing else
            assert {**g, "detail": None, "params": _no_offsets(g["params"])} == \
                {**w, "detail": None, "params": _no_offsets(w["params"])}
        else:
            assert g == w
    return got


def _no_offsets(params: list | None) -> list | None:
    """A stage-F verdict's parameters without the offsets it quotes."""
    if params is None:
        return None
    return [(k, v) for k, v in params if k not in ("offset", "offset_metadata")]


# -- generated segments ---------------------------------------------------------------------------
TS_CHOICES = [0, -5_000, 5_000, -30 * 60_000, -7_200_000, 7_200_000, 120_000, None]
TS_EXTREME = [-1, LONG_MIN, LONG_MAX, 0]


@st.composite
def segments(draw) -> bytes:
    rng = random.Random(draw(st.integers(0, 2**32)))
    n_batches = draw(st.integers(1, 14))
    state = {1: [0, 0], 2: [0, 0], 3: [5, 7]}  # pid -> [epoch, next seq]
    history: list[bytes] = []
    out = []
    offset = 0
    for _ in range(n_batches):
        kind = rng.random()
        if history and kind < 0.08:  # an exact resend (a duplicate)
            out.append(history[rng.randrange(len(history))])
            continue
        pid = rng.choice([-1, -1, 1, 2, 3])
        if pid > 0 and rng.random() < 0.12:  # transaction marker
            ep = state[pid][0]
            m = BatchBuilder(base_offset=offset, base_timestamp=NOW, producer_id=pid,
                             producer_epoch=ep - (rng.random() < 0.2), control=True,
                             transactional=True)
            m.append(control_record(commit=rng.random() < 0.7, timestamp=NOW))
            out.append(m.build())
            offset += 1
            continue
        n = rng.randrange(1, 7)
        codec = rng.randrange(5)
        base_ts = NOW + (rng.choice(TS_CHOICES) or 0)
        recs = []
        for _ in range(n):
            if rng.random() < 0.05:
                ts = rng.choice(TS_EXTREME)
            else:
                off = rng.choice(TS_CHOICES)
                ts = None if off is None else NOW + off
            key = None if rng.random() < 0.15 else (b"k%d" % rng.randrange(100)
                                                    if rng.random() < 0.9 else b"")
            value = (b"x" * rng.choice([0, 5, 60, 250])) if rng.random() < 0.9 else None
            headers = (("h", b"v"),) if rng.random() < 0.3 else ()
            recs.append(Record(value=value, key=key, headers=headers, timestamp=ts))
        epoch, seq = (-1, -1) if pid < 0 else tuple(state[pid])
        if pid > 0:
            r = rng.random()
            if r < 0.1:
                seq += rng.randrange(1, 4)  # gap
            elif r < 0.15:
                epoch += 1  # epoch bump
                seq = rng.choice([0, 0, 3])
            elif r < 0.18:
                epoch -= 1  # fenced
            elif r < 0.2:
                seq = -1 if rng.random() < 0.5 else rng.randrange(-3, -1)
        b = BatchBuilder(codec=codec, base_offset=offset, base_timestamp=base_ts,
                         producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                         transactional=pid == 2 and rng.random() < 0.6,
                         timestamp_type=1 if rng.random() < 0.08 else 0)
        for r in recs:
            b.append(r)
        data = b.build()
        fault = rng.random()
        if fault < 0.06:
            data = rewrite_header(data, fix_crc=False, max_timestamp=NOW + 1)  # stale CRC
        elif fault < 0.1:
            data = rewrite_header(data, records_count=n + rng.choice([-1, 1, -n]))
        elif fault < 0.13:
            data = rewrite_header(data, last_offset_delta=rng.choice([n, -1, 0]))
        elif fault < 0.15 and len(data) > 70:  # a corrupt tail with a fixed CRC
            cut = bytearray(data)
            struct.pack_into(">I", cut, len(cut) - 4, 0x7FFFFFFF)
            data = rewrite_header(bytes(cut))
        elif fault < 0.16:
            data = rewrite_header(data, attributes=(data[22] & 0xF8) | 6)  # codec id 6
        out.append(data)
        history.append(data)
        if pid > 0 and epoch >= state[pid][0] and seq >= 0:
            state[pid] = [epoch, seq + n]
        offset += n
    return b"".join(out)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments(), st.sampled_from(CONFIGS), st.sampled_from(REQUESTS))
def test_parity_generated(data, config, request):
    bv, cfg = config
    assert_parity(data, cfg, bv, **request)


def test_parity_generated_internal_topic():
    data = b"".join(BatchBuilder(base_timestamp=NOW, records=[Record(value=b"v")]).build()
                    for _ in range(3))
    out = assert_parity(data, {}, topic="__consumer_offsets")
    assert out["check"].to_pylist() == ["B4"] * 3
    out = assert_parity(data, {}, topic="__consumer_offsets", client_id="__admin_client")
    assert out["error_code"].to_pylist() == [0] * 3


# -- demo partition and real segments -----------------------------------------------------------
@pytest.mark.parametrize("bv", ["3.5", "3.9", "4.0"])
def test_parity_demo(tmp_path, bv):
    folder = write_demo_segment(tmp_path, NOW)
    log = read_log(folder)
    raws = [b for b in iter_log_batches(folder) if isinstance(b, RawBatch)]
    want = validate_batches(raws, topic="orders", partition=0, config=DEMO_CONFIGS,
                            broker_version=bv, now=NOW)
    got = broker_verdicts(log.records, log.batches, DEMO_CONFIGS, broker_version=bv, now=NOW)
    assert got.to_pylist() == want.to_pylist()
    seen = set(got["check"].to_pylist())
    assert seen >= {"R3", "C3", "C2", "F4", None}
    assert ("R4" in seen) is (bv != "3.5")  # 3.5 has no before/after bounds


def _real_sources() -> list[Path]:
    if not REAL.is_dir():
        pytest.fail(f"real-segment fixtures not found at {REAL}")
    return [item for group in sorted(p for p in REAL.iterdir() if p.is_dir())
            for item in sorted(group.iterdir()) if item.is_dir() or item.suffix == ".log"]


@pytest.mark.parametrize("config", [{}, {"cleanup.policy": "compact",
                                         "message.timestamp.before.max.ms": "1000"}])
def test_parity_real_segments(config):
    for src in _real_sources():
        log = read_log(src)
        raws = [b for b in iter_log_batches(src) if isinstance(b, RawBatch)]
        topic = log.batches["topic"][0].as_py() if log.batches.num_rows else ""
        part = log.batches["partition"][0].as_py() if log.batches.num_rows else -1
        want = validate_batches(raws, topic=topic, partition=part, config=config, now=NOW)
        got = broker_verdicts(log.records, log.batches, config, now=NOW,
                              raw=[r.data for r in raws])
        assert got.to_pylist() == want.to_pylist(), src
        plain = broker_verdicts(log.records, log.batches, config, now=NOW)
        assert UNDETERMINED not in plain["check"].to_pylist(), src
        assert plain.to_pylist() == want.to_pylist(), src


# -- targeted cases -------------------------------------------------------------------------------
def test_log_append_time_batch_needs_bytes_under_bounded_create_time():
    lat = BatchBuilder(base_timestamp=NOW - 10**9, timestamp_type=1, max_timestamp=NOW,
                       producer_id=7, producer_epoch=0, base_sequence=0,
                       records=[Record(key=b"k", value=b"v")]).build()
    nxt = BatchBuilder(base_timestamp=NOW, producer_id=7, producer_epoch=0, base_sequence=5,
                       base_offset=1, records=[Record(key=b"k", value=b"v")]).build()
    cfg = {"message.timestamp.before.max.ms": "1000"}
    d = decode_records(lat + nxt, topic="t", partition=0)
    plain = broker_verdicts(d.records, d.batches, cfg, now=NOW)
    assert plain["check"].to_pylist() == [UNDETERMINED, UNDETERMINED]  # then: same producer
    assert plain["error_code"].to_pylist() == [None, None]
    got = assert_parity(lat + nxt, cfg)
    assert got["check"].to_pylist() == ["R4", None]  # rejected, then resync accepts seq 5


def test_rebuilt_batch_too_large_e1():
    recs = [Record(key=b"k", value=b"a" * 400) for _ in range(3)]
    data = BatchBuilder(codec=4, base_timestamp=NOW, records=recs).build()
    got = assert_parity(data, {"compression.type": "uncompressed", "max.message.bytes": "700"})
    assert got["check"].to_pylist() == ["E1"]


def test_tables_must_belong_together():
    data = BatchBuilder(base_timestamp=NOW, records=[Record(value=b"v")] * 3).build()
    d = decode_records(data)
    with pytest.raises(ValueError, match="unfiltered"):
        broker_verdicts(d.records.slice(1), d.batches, now=NOW)
    with pytest.raises(ValueError, match="raw="):
        broker_verdicts(d.records, d.batches, now=NOW, source="producer")


def test_empty_tables():
    d = decode_records(b"")
    out = broker_verdicts(d.records, d.batches, now=NOW)
    assert out.num_rows == 0 and out.schema == BATCH_VERDICTS_SCHEMA


@pytest.mark.parametrize("codec", [0, 1, 3])
@pytest.mark.parametrize("topic_codec", ["producer", "lz4"])
def test_declared_count_beyond_records(codec, topic_codec):
    """count and lastOffsetDelta one too high (fixed CRC): D3, from the tables too: the
    decoder keeps what the broker's lenient in-place reader finds (``inplace_check``)."""
    recs = [Record(key=b"k%d" % i, value=b"v") for i in range(3)]
    data = BatchBuilder(codec=codec, base_timestamp=NOW, records=recs, records_count=4,
                        last_offset_delta=3).build()
    cfg = {"compression.type": topic_codec}
    got = assert_parity(data, cfg)
    assert got["check"].to_pylist() == ["D3"]
    d = decode_records(data, topic="t", partition=0)
    plain = broker_verdicts(d.records, d.batches, cfg, now=NOW)["check"].to_pylist()
    # the lenient reader (compressed, same codec) also meets the end of the stream, and the
    # decoder stores that finding as data (was UNDETERMINED before it did)
    assert plain == ["D3"]
    lenient = codec != 0 and topic_codec in ("producer", {1: "gzip", 3: "lz4"}[codec])
    assert d.batches["inplace_check"].to_pylist() == ["D3/eof"]
    assert d.batches["decode_check"].to_pylist() == ["D3/eof"], lenient


# -- a record policy injected where the broker would run it (kip-940 / kip-729 / kip-686) -------

@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments(), st.sampled_from(CONFIGS[:4]),
       st.sampled_from(["kip-940", "kip-729", "kip-686"]), st.randoms(use_true_random=False))
def test_policy_parity_generated(data, config, profile, rnd):
    from kqlab.kafka.table_checks import RecordPolicy, policy_by_batch
    from kqlab.kafka.validator import PartitionValidator

    bv, cfg = config
    d = decode_records(data, topic="t", partition=0)
    n = d.records.num_rows
    messages = [f"rule says no ({i})" if rnd.random() < 0.3 else None for i in range(n)]
    policy = RecordPolicy(profile, messages)
    got = broker_verdicts(d.records, d.batches, cfg, broker_version=bv, now=NOW,
                          raw=[b for _, b in scan_buffer(data)], policy=policy).to_pylist()
    v = PartitionValidator("t", 0, cfg, broker_version=bv, now=NOW)
    per_batch = policy_by_batch(d.records, d.batches, policy)
    want = [v.validate(b, position=p, policy=per_batch[i]).to_dict()
            for i, (p, b) in enumerate(scan_buffer(data))]
    keys = ("error_code", "error_name", "error_message", "check", "detail")
    assert [{k: r[k] for k in keys} | {"record_errors": r["record_errors"]} for r in got] == \
        [{k: w[k] for k in keys} | {"record_errors": with_ids(w)} for w in want]
    # the replay hands the messages over dictionary-encoded (indices into the rules' texts),
    # with the rules too: the same verdicts, row for row
    rules = [None if m is None else f"r{i % 3}" for i, m in enumerate(messages)]
    plain = broker_verdicts(d.records, d.batches, cfg, broker_version=bv, now=NOW,
                            raw=[b for _, b in scan_buffer(data)],
                            policy=RecordPolicy(profile, messages, rules))
    encoded = broker_verdicts(
        d.records, d.batches, cfg, broker_version=bv, now=NOW,
        raw=[b for _, b in scan_buffer(data)],
        policy=RecordPolicy(profile, pa.array(messages, pa.string()).dictionary_encode(),
                            pa.array(rules, pa.string()).dictionary_encode()))
    assert encoded.equals(plain)

