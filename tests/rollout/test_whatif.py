"""What-if per enforcement point (issue 19): on planted samples the numbers are exactly what
each point's semantics say, and on the demo topics they equal the verdict core's own replays
(computed here independently with ``kqlab.validate.replay``)."""

from __future__ import annotations

import numpy as np
import pytest

from kqlab.rollout import what_if
from kqlab.rollout.outcome import Answer
from kqlab.rollout.points import enforced_policy, observe_all
from kqlab.validate import replay
from tests.rollout.conftest import AMOUNT, KEYED, NOW, order, policy, write_log


def _answers(target) -> list[tuple]:
    return [(a.who, a.error_code, a.error_name, a.retriable, a.action, a.batches, a.records)
            for a in target.outcome.answers]


@pytest.fixture(scope="module")
def one_bad_in_ten(tmp_path_factory):
    """Batch 0: ten orders, the fourth with a negative amount; batch 1: five good orders."""
    ten = [order(-1 if i == 3 else 5) for i in range(10)]
    folder = write_log(tmp_path_factory.mktemp("planted") / "orders-0", ten,
                       [order(7) for _ in range(5)])
    return folder, what_if(policy(AMOUNT), folder, now=NOW)


def test_broker_profiles_refuse_the_whole_batch(one_bad_in_ten):
    _, w = one_bad_in_ten
    for name, code, text in (("kip-940", 87, "INVALID_RECORD"), ("kip-729", 87,
                                                                 "INVALID_RECORD"),
                             ("kip-686", 44, "POLICY_VIOLATION")):
        t = w.target(name)
        assert t.counts == {"records": 15, "accepted": 5, "refused": 1, "collateral": 9,
                            "dead_lettered": 0, "in_dlq": 0, "lost": 10}, name
        assert t.outcome.reasons(1) == {"amount-positive": 1}
        assert t.outcome.reasons(2) == {"amount-positive": 9}
        refused = [a for a in t.outcome.answers if a.error_code != 0]
        assert [(a.error_code, a.error_name, a.retriable, a.action, a.batches, a.records)
                for a in refused] == [(code, text, False, "failed", 1, 10)], name
        assert "fails every record of the batch" in refused[0].next
        assert t.reject_rate == pytest.approx(10 / 15)


def test_confluent_refuses_the_record_only(one_bad_in_ten):
    _, w = one_bad_in_ten
    t = w.target("confluent")
    assert t.point.granularity == "record"
    assert t.counts == {"records": 15, "accepted": 14, "refused": 1, "collateral": 0,
                        "dead_lettered": 0, "in_dlq": 0, "lost": 1}
    assert t.outcome.reasons(1) == {"amount-positive": 1}
    # the serializer raises for one record; the broker appends both batches without it
    assert _answers(t) == [
        ("client: serializer", None, "SerializationError (RuleConditionError)", False,
         "raised", None, 1),
        ("broker", 0, "NONE", False, "appended", 2, 14)]
    assert "amount-positive" in t.fidelity.approximate  # as its exporter says


def test_gate_and_spark_enforcer_dead_letter_one_and_forward_nine(one_bad_in_ten):
    _, w = one_bad_in_ten
    for name in ("gate", "spark-enforcer"):
        t = w.target(name)
        assert t.counts == {"records": 15, "accepted": 14, "refused": 0, "collateral": 0,
                            "dead_lettered": 1, "in_dlq": 1, "lost": 0}, name
        assert t.outcome.reasons(3) == {"amount-positive": 1}
        # the producers never hear of it: the raw topic's broker appends everything
        assert _answers(t) == [("broker", 0, "NONE", False, "appended", 2, 15)]


def test_a_point_that_cannot_express_the_rule_says_so_and_enforces_nothing(one_bad_in_ten):
    _, w = one_bad_in_ten
    t = w.target("kroxylicious")
    assert "amount-positive" in t.fidelity.not_enforced
    assert "no equivalent" in t.fidelity.not_enforced["amount-positive"]
    assert t.counts["accepted"] == 15 and t.counts["refused"] == 0
    row = {r["point"]: r for r in w.table().to_pylist()}["kroxylicious"]
    assert "amount-positive" in row["not_enforced"]


def test_the_numbers_are_the_replays(one_bad_in_ten):
    folder, w = one_bad_in_ten
    pol = policy(AMOUNT)
    for name in ("kip-940", "kip-729", "kip-686", "kroxylicious"):
        t = w.target(name)
        v = replay(folder, enforced_policy(pol, t.fidelity.enforced), now=NOW,
                   profile=t.point.profile)
        o = v.by_outcome()
        assert (t.counts["accepted"], t.counts["refused"], t.counts["collateral"]) == \
            (o["accepted"], o["rejected"], o["collateral"]), name
    single = replay(folder, pol, now=NOW, framing="single")
    assert single.by_outcome()["rejected"] == w.target("gate").counts["dead_lettered"] == 1


def test_the_proxy_refuses_the_whole_batch_and_the_serializer_cannot_see_keys(tmp_path):
    ten = [order(5, key=None if i == 0 else b"k") for i in range(10)]
    folder = write_log(tmp_path / "orders-0", ten)
    w = what_if(policy(KEYED), folder, now=NOW, points=("kroxylicious", "confluent"))
    krox, conf = w.target("kroxylicious"), w.target("confluent")
    assert (krox.counts["refused"], krox.counts["collateral"]) == (1, 9)
    assert [a for a in krox.outcome.answers if a.error_code] == [
        Answer("proxy", 87, "INVALID_RECORD", False, "failed", 1, 10)]
    assert "keyed" in conf.fidelity.not_enforced
    assert conf.counts["accepted"] == 10 and conf.counts["refused"] == 0


def test_the_serializer_removes_a_batchs_only_culprit_before_the_broker_sees_it(tmp_path):
    old = NOW - 10_000_000  # beyond message.timestamp.before.max.ms below
    a = [order(-1, timestamp=old)] + [order(5) for _ in range(9)]  # culprit fails the rule
    b = [order(5, timestamp=old)] + [order(5) for _ in range(4)]   # culprit passes it
    folder = write_log(tmp_path / "orders-0", a, b)
    pol = policy(AMOUNT, configs="{message.timestamp.before.max.ms: '1000'}")
    w = what_if(pol, folder, now=NOW, points=("confluent", "kip-940"))
    conf = w.target("confluent")
    # batch a: the serializer refuses its only R4 culprit, the broker appends the other nine;
    # batch b: the broker refuses it for R4, its four others are collateral
    assert conf.counts == {"records": 15, "accepted": 9, "refused": 2, "collateral": 4,
                           "dead_lettered": 0, "in_dlq": 0, "lost": 6}
    assert conf.outcome.reasons(1) == {"amount-positive": 1, "broker:R4": 1}
    assert _answers(conf) == [
        ("client: serializer", None, "SerializationError (RuleConditionError)", False,
         "raised", None, 1),
        ("broker", 32, "INVALID_TIMESTAMP", False, "failed", 1, 5),
        ("broker", 0, "NONE", False, "appended", 1, 9)]
    # the broker-side policy loses both batches whole
    assert w.target("kip-940").counts["lost"] == 15


def test_a_dlq_topic_keeps_a_copy_of_what_the_serializer_refuses(one_bad_in_ten):
    folder, _ = one_bad_in_ten
    w = what_if(policy(AMOUNT), folder, now=NOW, points=("confluent",), dlq_topic="o.dlq")
    c = w.target("confluent").counts
    assert (c["refused"], c["in_dlq"], c["lost"]) == (1, 1, 0)


def test_producers_are_named_by_id_and_client_header(tmp_path):
    folder = write_log(tmp_path / "orders-0",
                       [order(5, client="checkout-a") for _ in range(4)],
                       [order(-1, client="checkout-b")] + [order(5, client="checkout-b")] * 3,
                       pids=[11, 12])
    w = what_if(policy(AMOUNT), folder, now=NOW, points=("kip-940", "gate"))
    assert w.client_header == "client.id"
    rows = w.target("kip-940").producers
    assert [(r["producer"], r["producer_id"], r["client"], r["lost"]) for r in rows] == [
        ("pid 12 · checkout-b", 12, "checkout-b", 4), ("pid 11 · checkout-a", 11,
                                                        "checkout-a", 0)]
    gate = {r["producer"]: r for r in w.target("gate").producers}
    assert gate["pid 12 · checkout-b"]["dead_lettered"] == 1
    off = what_if(policy(AMOUNT), folder, now=NOW, points=("gate",), client_header=None)
    assert [r["producer"] for r in off.target("gate").producers] == ["pid 12", "pid 11"]


def test_unavailable_points_say_why(tmp_path):
    folder = write_log(tmp_path / "orders-0", [order(5)])
    from kqlab.policy import loads_policy

    bytes_policy = loads_policy("kqlab: 1\nname: b\ntopics: {names: [orders]}\n"
                                "rules: [{id: keyed, kind: key_required}]")
    t = what_if(bytes_policy, folder, now=NOW, points=("confluent",)).target("confluent")
    assert not t.available and t.counts == {} and t.fidelity.note
    assert t.row()["available"] is False


# -- the demo topics: every point equals the verdict core ----------------------------------
@pytest.mark.parametrize("topic", ["orders", "clicks"])
def test_demo_whatif_equals_the_verdict_core(demo, topic):
    root, policies = demo
    pol = policies[topic]
    w = what_if(pol, root / topic, now=NOW)
    assert [t.point.name for t in w.targets] == ["kip-940", "kip-729", "kip-686", "confluent",
                                                 "kroxylicious", "gate", "spark-enforcer"]
    for t in w.targets:
        assert t.available, t.point.name
        c = t.counts
        assert c["records"] == c["accepted"] + c["refused"] + c["collateral"] + \
            c["dead_lettered"], t.point.name
        if t.point.granularity == "batch":
            v = replay(root / topic, enforced_policy(pol, t.fidelity.enforced), now=NOW,
                       profile=t.point.profile)
            o = v.by_outcome()
            assert (c["accepted"], c["refused"], c["collateral"]) == \
                (o["accepted"], o["rejected"], o["collateral"]), t.point.name
            assert sum(a.records for a in t.outcome.answers) == c["records"]
    # the gate: what the raw topic's broker appends, minus what a single-framed replay rejects
    base = replay(root / topic, observe_all(pol), now=NOW)
    single = replay(root / topic, pol, now=NOW, framing="single")
    appended = {(r["partition"], r["offset"]) for r in base.records.to_pylist()
                if r["outcome"] == "accepted"}
    rejected = {(r["partition"], r["offset"]) for r in single.records.to_pylist()
                if r["outcome"] == "rejected"}
    gate = w.target("gate").counts
    assert gate["dead_lettered"] == len(appended & rejected)
    assert gate["accepted"] == len(appended - rejected)
    assert w.target("spark-enforcer").counts == gate
    # the broker-side profile enforcing every rule is the policy's own replay
    full = replay(root / topic, pol, now=NOW)
    assert w.target(pol.enforcement).counts["refused"] == full.by_outcome()["rejected"]


def test_demo_confluent_refusals_are_the_contract_rules_failures(demo):
    root, policies = demo
    pol = policies["orders"]
    t = what_if(pol, root / "orders", now=NOW, points=("confluent",)).target("confluent")
    single = replay(root / "orders", pol, now=NOW, framing="single")
    enforced = t.fidelity.enforced
    failing = sum(any(f["rule"] in enforced and f["code"] for f in fs)
                  for fs in single.records.column("failures").to_pylist())
    by_client = t.outcome.answers[0]
    assert (by_client.who, by_client.records) == ("client: serializer", failing)
    assert "traceparent" in t.fidelity.not_enforced  # a header rule: no CEL input for it


def test_table_and_json_shapes(one_bad_in_ten):
    _, w = one_bad_in_ten
    table = w.table()
    assert table.column_names == ["point", "where", "granularity", "available", "records",
                                  "accepted", "refused", "collateral", "dead_lettered",
                                  "lost", "reject_rate", "producer_sees", "not_enforced",
                                  "approximate"]
    doc = w.to_dict()
    assert set(doc) == {"policy", "policy_hash", "records", "batches", "now", "clock",
                        "framing", "client_header", "targets", "rule_findings"}
    t = doc["targets"][0]
    assert set(t) >= {"point", "caveat", "counts", "answers", "refused_by", "collateral_by",
                      "dead_lettered_by", "fidelity", "producers", "sources", "behaviour"}
    assert all("replay" in s for s in t["sources"])


def test_figure_has_bars_with_the_counts(one_bad_in_ten):
    _, w = one_bad_in_ten
    fig = w.figure()
    assert {tr.type for tr in fig.data} == {"bar"}
    refused = next(tr for tr in fig.data if tr.name.startswith("refused"))
    names = list(refused.x)
    assert refused.y[names.index("kip-940")] == 1
    assert refused.y[names.index("gate")] is None  # zero: no bar on a log axis
    dlq = next(tr for tr in fig.data if tr.name.startswith("dead-lettered"))
    assert dlq.y[names.index("gate")] == 1
    assert np.isclose(refused.customdata[names.index("kip-940")][1], 100 / 15)


def test_align_matches_records_by_coordinates_and_repeats_in_order():
    import pyarrow as pa

    from kqlab.rollout.replays import align

    target = pa.table({"topic": ["a", "a", "b", "a", "a"],
                       "partition": pa.array([0, 0, 0, 1, 0], pa.int32()),
                       "offset": [1, 2, 1, 1, 1]})
    source = pa.table({"topic": ["a", "b", "a", "a"],
                       "partition": pa.array([0, 0, 0, 0], pa.int32()),
                       "offset": [2, 1, 1, 1]})
    # a-0@1 twice on each side: first to first; a-1@1 has no match
    assert align(target, source).tolist() == [2, 0, 1, -1, 3]
    assert align(target.slice(1, 2), source.slice(0, 0)).tolist() == [-1, -1]
