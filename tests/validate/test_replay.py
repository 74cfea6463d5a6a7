"""Replay semantics: a failing record rejects its batch, record_errors as KIP-467, collateral,
observe rules, enforcement profiles, producer actions, framing strategies, incremental runs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kqlab.kafka.builder import BatchBuilder, Record, control_record
from kqlab.kafka.compression import Codec
from kqlab.policy.model import BrokerSettings, Policy, Rule
from kqlab.validate import RECORD_VERDICTS_SCHEMA, REPLAY_BATCHES_SCHEMA, Replayer, replay
from kqlab.validate.rules import missing_implementations
from kqlab.validate.verdicts import producer_action

NOW = 1_700_000_000_000


def _segment(tmp_path, batches: list[bytes]):
    folder = tmp_path / "orders-0"
    folder.mkdir()
    (folder / "00000000000000000000.log").write_bytes(b"".join(batches))
    return folder


def _batch(offset: int, records: list[Record], **kw) -> bytes:
    b = BatchBuilder(base_offset=offset, base_timestamp=NOW, **kw)
    for r in records:
        b.append(r)
    return b.build()


def _rec(key: bytes | None = b"k", value: bytes | None = b"v", trace: bool = True) -> Record:
    headers = (("trace-id", b"abc"),) if trace else ()
    return Record(key=key, value=value, headers=headers)


def _policy(*rules: Rule, enforcement: str = "kip-940", **configs) -> Policy:
    return Policy(name="t", enforcement=enforcement,
                  broker=BrokerSettings(version="4.0", configs=configs), rules=rules)


TRACE = Rule(id="trace", kind="header_required", params={"name": "trace-id"},
             message="trace-id header is required")


@pytest.fixture
def three_batches(tmp_path):
    # batch 0: all good; batch 3: record 1 lacks the header; batch 6: all good
    return _segment(tmp_path, [
        _batch(0, [_rec(), _rec(), _rec()]),
        _batch(3, [_rec(), _rec(trace=False), _rec()]),
        _batch(6, [_rec(), _rec(), _rec()]),
    ])


def test_failing_record_rejects_its_batch_with_kip467_record_errors(three_batches):
    v = replay(three_batches, _policy(TRACE), now=NOW)
    assert v.records.schema == RECORD_VERDICTS_SCHEMA
    assert v.batches.schema == REPLAY_BATCHES_SCHEMA
    assert v.records.column("outcome").to_pylist() == [
        "accepted"] * 3 + ["collateral", "rejected", "collateral"] + ["accepted"] * 3
    bad = v.batches.slice(1, 1).to_pylist()[0]
    assert (bad["error_code"], bad["error_name"], bad["check"]) == (87, "INVALID_RECORD", "P")
    assert bad["record_errors"] == [{"batch_index": 1, "message": "trace-id header is required",
                                     "check": "P", "rule": "trace", "params": None}]
    assert bad["error_message"] == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        "showing the first three errors at most: [RecordError(batchIndex=1, "
        "message='trace-id header is required')]")
    assert bad["producer_action"] == "failed" and bad["profile"] == "kip-940"
    failures = v.records.column("failures").to_pylist()
    assert failures[4] == [{"rule": "trace", "code": 87,
                            "message": "trace-id header is required",
                            "kind": "header_required", "step": None, "params": None,
                            "status": "failed"}]
    assert failures[3] == [] and failures[0] == []
    assert v.by_outcome() == {"accepted": 6, "rejected": 1, "collateral": 2}
    assert v.rules.to_pylist()[0]["rejected_batches"] == 1


def test_kip686_rejects_the_batch_with_policy_violation(three_batches):
    v = replay(three_batches, _policy(TRACE, enforcement="kip-686"), now=NOW)
    bad = v.batches.slice(1, 1).to_pylist()[0]
    assert (bad["error_code"], bad["error_name"]) == (44, "POLICY_VIOLATION")
    assert bad["record_errors"] == []
    assert bad["error_message"] == "trace-id header is required"
    assert v.records.column("outcome").to_pylist()[3:6] == ["collateral", "rejected",
                                                           "collateral"]
    assert v.records.column("failures").to_pylist()[4][0]["code"] == 44


def test_kip729_skips_compressed_batches_appended_in_place(tmp_path):
    folder = _segment(tmp_path, [
        _batch(0, [_rec(trace=False)]),
        _batch(1, [_rec(trace=False)], codec=Codec.LZ4),
    ])
    v940 = replay(folder, _policy(TRACE), now=NOW)
    v729 = replay(folder, _policy(TRACE, enforcement="kip-729"), now=NOW)
    assert v940.batches.column("error_code").to_pylist() == [87, 87]
    # KIP-729 validators never see records of compressed batches kept in place
    assert v729.batches.column("error_code").to_pylist() == [87, 0]
    assert v729.batches.column("profile").to_pylist() == ["kip-729"] * 2


def test_broker_record_errors_come_first_and_timestamp_wins(tmp_path):
    folder = _segment(tmp_path, [_batch(0, [
        Record(key=None, value=b"v", headers=(("trace-id", b"x"),)),  # R3 (compacted)
        Record(key=b"k", value=b"v", timestamp=NOW - 10_000),  # R4, and no trace header
        Record(key=b"k", value=b"v"),  # policy only
    ])])
    pol = _policy(TRACE, **{"cleanup.policy": "compact", "message.timestamp.before.max.ms": 5000})
    v = replay(folder, pol, now=NOW)
    b = v.batches.to_pylist()[0]
    assert (b["error_code"], b["check"]) == (32, "P+R3+R4")
    msgs = [e["message"] for e in b["record_errors"]]
    assert msgs[0].startswith("Compacted topic cannot accept message without key")
    assert msgs[1].startswith(f"Timestamp {NOW - 10_000} of message with offset 1")
    assert msgs[2] == "trace-id header is required"
    assert b["error_message"] == "One or more records have been rejected due to invalid timestamp"
    rules = [[f["rule"] for f in fs] for fs in v.records.column("failures").to_pylist()]
    assert rules == [["broker:R3"], ["broker:R4", "trace"], ["trace"]]


def test_observe_rules_count_but_never_reject(three_batches):
    observe = Rule(id="trace", kind="header_required", params={"name": "trace-id"},
                   mode="observe")
    v = replay(three_batches, _policy(observe), now=NOW)
    assert set(v.batches.column("error_code").to_pylist()) == {0}
    assert v.rules.to_pylist()[0]["failed_records"] == 1
    assert v.rules.to_pylist()[0]["rejected_records"] == 0
    assert v.records.column("failures").to_pylist()[4] == [
        {"rule": "trace", "code": 0, "message": "header 'trace-id' is missing",
         "kind": "header_required", "step": None, "params": None, "status": "failed"}]


def test_policy_rejection_leaves_producer_state_alone(tmp_path):
    mk = lambda off, seq, trace: _batch(off, [_rec(trace=trace)], producer_id=7,  # noqa: E731
                                        producer_epoch=0, base_sequence=seq)
    folder = _segment(tmp_path, [mk(0, 0, True), mk(1, 1, False), mk(2, 2, True)])
    v = replay(folder, _policy(TRACE), now=NOW)
    # batch 1 is rejected by the policy: nothing appended, so batch 2 (seq 2) follows a gap —
    # but a real client re-sequences after the failure, which log replay models (resync)
    assert v.batches.column("error_name").to_pylist() == ["NONE", "INVALID_RECORD", "NONE"]


def test_transaction_markers_are_not_judged_by_the_policy(tmp_path):
    folder = _segment(tmp_path, [
        _batch(0, [_rec()], producer_id=9, producer_epoch=0, base_sequence=0,
               transactional=True),
        _batch(1, [control_record(commit=True)], producer_id=9, producer_epoch=0,
               transactional=True, control=True),
        _batch(2, [_rec()], producer_id=9, producer_epoch=0, base_sequence=1),
    ])
    v = replay(folder, _policy(TRACE), now=NOW)
    assert v.batches.column("error_code").to_pylist() == [0, 0, 0]


@pytest.mark.parametrize(("code", "count", "action"), [
    (0, 3, "appended"), (10, 3, "split"), (10, 1, "failed"), (2, 3, "retried"),
    (87, 3, "failed"), (32, 3, "failed"), (45, 3, "failed"), (44, 3, "failed")])
def test_producer_actions_follow_the_java_client(code, count, action):
    assert producer_action(code, count) == action


def test_lost_and_delayed_records_in_the_summary(tmp_path):
    from kqlab.kafka.builder import rewrite_header

    good = _batch(0, [_rec(), _rec()])
    stale_crc = rewrite_header(_batch(2, [_rec(), _rec()]), fix_crc=False, max_timestamp=1)
    folder = _segment(tmp_path, [good, stale_crc, _batch(4, [_rec(trace=False)])])
    s = replay(folder, _policy(TRACE), now=NOW).summary()
    assert s["producer_actions"] == {"appended": 2, "retried": 2, "failed": 1}
    assert (s["records_lost"], s["records_delayed"]) == (1, 2)
    assert s["by_error"]["CORRUPT_MESSAGE"] == {"batches": 1, "records": 2}


def test_framing_strategies(three_batches):
    single = replay(three_batches, _policy(TRACE), now=NOW, framing="single")
    assert single.framing == "reconstructed:single"
    assert single.by_outcome() == {"accepted": 8, "rejected": 1, "collateral": 0}
    assert set(single.batches.column("framing").to_pylist()) == {"reconstructed:single"}
    linger = replay(three_batches, _policy(TRACE), now=NOW, framing="linger", linger_ms=1000)
    assert linger.framing == "reconstructed:linger"
    assert linger.batches.num_rows == 1  # all nine records share one producer-like batch
    assert linger.by_outcome() == {"accepted": 0, "rejected": 1, "collateral": 8}


def test_records_table_needs_a_framing_strategy(three_batches):
    from kqlab.kafka.log import read_log
    from kqlab.validate import ReplayError

    records = read_log(three_batches).records
    with pytest.raises(ReplayError, match="framing='single' or 'linger'"):
        replay(records, _policy(TRACE), now=NOW)
    v = replay(records, _policy(TRACE), now=NOW, framing="single")
    assert v.records.column("offset").to_pylist() == list(range(9))


def test_editing_one_rule_reevaluates_only_that_rule(three_batches):
    size = Rule(id="size", kind="value_size", params={"max": 10})
    r = Replayer(three_batches, now=NOW)
    r.run(_policy(TRACE, size))
    assert r.evaluations == 2
    edited = Rule(id="size", kind="value_size", params={"max": 0})
    v = r.run(_policy(TRACE, edited))
    assert r.evaluations == 3
    assert v.rules.to_pylist()[1]["failed_records"] == 9


def test_every_catalog_kind_has_an_implementation():
    assert missing_implementations() == []


def test_summaries_by_partition_time_and_producer(three_batches):
    v = replay(three_batches, _policy(TRACE), now=NOW)
    part = v.by_partition().to_pylist()
    assert part == [{"topic": "orders", "partition": 0, "accepted": 6, "rejected": 1,
                     "collateral": 2}]
    buckets = v.by_time(60_000).to_pylist()
    assert sum(b["accepted"] + b["rejected"] + b["collateral"] for b in buckets) == 9
    prod = v.by_producer().to_pylist()
    assert prod == [{"producer_id": -1, "batches": 3, "rejected_batches": 1, "records": 9}]


def test_byte_level_rules(tmp_path):
    folder = _segment(tmp_path, [_batch(0, [
        Record(key=b"", value=b"x" * 10, headers=(("a", b"1"), ("a", b"2"))),
        Record(key=b"kk", value=None),
        Record(key=b"kkk", value=b"", headers=(("b", b"zz"),)),
    ])])
    rules = [
        Rule(id="key", kind="key_required", params={"allow_empty": False}),
        Rule(id="val", kind="value_required"),
        Rule(id="val-empty", kind="value_required", params={"allow_tombstones": True,
                                                            "allow_empty": False}),
        Rule(id="ksize", kind="key_size", params={"min": 1, "max": 2}),
        Rule(id="vsize", kind="value_size", params={"max": 5}),
        Rule(id="hsize", kind="headers_size", params={"max": 3}),
        Rule(id="rsize", kind="record_size", params={"max": 12}),
        Rule(id="uniq", kind="headers_unique"),
        Rule(id="hv", kind="header_values", params={"name": "a", "values": ["1"]}),
        Rule(id="hp", kind="header_pattern", params={"name": "b", "pattern": "z+",
                                                     "required": True}),
    ]
    v = replay(folder, _policy(*[Rule(id=r.id, kind=r.kind, params=r.params, mode="observe")
                                 for r in rules]), now=NOW)
    failed = {row["rule"]: row["failed_records"] for row in v.rules.to_pylist()}
    assert failed == {"key": 1, "val": 1, "val-empty": 1, "ksize": 2, "vsize": 1, "hsize": 1,
                      "rsize": 1, "uniq": 1, "hv": 1, "hp": 2}
    per_record = [[f["rule"] for f in fs] for fs in v.records.column("failures").to_pylist()]
    assert per_record[0] == ["key", "ksize", "vsize", "hsize", "rsize", "uniq", "hv", "hp"]
    assert "header 'a' appears more than once" in [
        f["message"] for f in v.records.column("failures").to_pylist()[0]]


def test_timestamp_window_relative_to_now_and_batch(tmp_path):
    folder = _segment(tmp_path, [_batch(0, [
        Record(key=b"k", value=b"v", timestamp=NOW),
        Record(key=b"k", value=b"v", timestamp=NOW + 5_000),
        Record(key=b"k", value=b"v", timestamp=NOW - 90_000),
    ])])
    rules = (Rule(id="now", kind="timestamp_window", params={"before_ms": 60_000,
                                                             "after_ms": 1_000}, mode="observe"),
             Rule(id="batch", kind="timestamp_window", params={"after_ms": 1_000,
                                                               "relative_to": "batch"},
                  mode="observe"))
    v = replay(folder, _policy(*rules), now=NOW)
    per_record = [[f["rule"] for f in fs] for fs in v.records.column("failures").to_pylist()]
    assert per_record == [[], ["now", "batch"], ["now"]]


def test_plugin_rule_is_not_exportable(tmp_path, three_batches):
    plugin = Rule(id="py", kind="plugin",
                  params={"callable": "tests.validate.plugins:reject_odd_offsets"})
    v = replay(three_batches, _policy(plugin), now=NOW)
    assert any("not exportable" in n for n in v.notes)
    assert v.rules.to_pylist()[0]["exportable"] is False
    rejected = pc.equal(v.records.column("outcome"), "rejected")
    offsets = v.records.filter(rejected).column("offset").to_pylist()
    assert offsets == [1, 3, 5, 7]
    msgs = {f["message"] for fs in v.records.column("failures").to_pylist() for f in fs}
    assert msgs == {"odd offset 1", "odd offset 3", "odd offset 5", "odd offset 7"}


def test_no_input_is_dropped(three_batches):
    v = replay(three_batches, _policy(TRACE), now=NOW)
    assert v.records.num_rows == 9 and v.batches.num_rows == 3
    assert np.array_equal(v.records.column("offset").to_numpy(), np.arange(9))
    assert isinstance(v.records.column("failures").type, pa.ListType)


def test_a_log_directory_replays_every_partition_in_order(tmp_path):
    root = tmp_path / "logs"
    for p in (2, 0, 10):  # created out of order: replayed by partition number
        folder = root / f"orders-{p}"
        folder.mkdir(parents=True)
        (folder / "00000000000000000000.log").write_bytes(
            _batch(0, [_rec(), _rec(trace=p != 2)]))
    (root / "not-a-partition").mkdir()
    v = replay(root, _policy(TRACE), now=NOW)
    assert v.records.column("partition").to_pylist() == [0, 0, 2, 2, 10, 10]
    assert v.by_outcome() == {"accepted": 4, "rejected": 1, "collateral": 1}
    assert [v.batches.column("partition")[i].as_py() for i in range(3)] == [0, 2, 10]


def test_linger_framing_keeps_one_open_batch_per_partition(tmp_path):
    """Like the producer's accumulator: another partition's record does not close a batch."""
    n = 6
    records = pa.table({
        "topic": pa.array(["t"] * n), "partition": pa.array([0, 1, 0, 1, 0, 1], pa.int32()),
        "offset": pa.array([0, 0, 1, 1, 2, 2], pa.int64()),
        "timestamp": pa.array([NOW] * n, pa.int64()),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.array([b"k"] * n), "value": pa.array([b"v"] * n),
        "headers": pa.array([[]] * n, pa.list_(pa.struct([("key", pa.string()),
                                                          ("value", pa.binary())]))),
        "batch_offset": pa.array([0] * n, pa.int64()),
        "batch_index": pa.array([0] * n, pa.int32()),
    })
    v = replay(records, _policy(), now=NOW, framing="linger")
    assert v.batches.num_rows == 2  # one batch per partition, not six
    assert v.records.column("partition").to_pylist() == [0, 0, 0, 1, 1, 1]
    assert v.records.column("batch_index").to_pylist() == [0, 1, 2, 0, 1, 2]
    assert v.records.column("offset").to_pylist() == [0, 1, 2, 0, 1, 2]
