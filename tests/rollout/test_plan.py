"""The staged rollout plan (issue 19): on the demo topics every stage's numbers are what a
fresh replay of that stage's own policies gives, stages come in order (observe, dead-letter,
block waves safest first), the producers that break first are named, and the exported configs
of each stage are the exporters' output for its policies."""

from __future__ import annotations

import json

import pytest

from kqlab.export import export
from kqlab.policy import load_policy
from kqlab.rollout import RolloutError, rollout_plan
from kqlab.validate import replay
from tests.rollout.conftest import AMOUNT, KEYED, NOW, order, policy, write_log


@pytest.fixture(scope="module")
def plans(demo):
    root, policies = demo
    return {t: rollout_plan(policies[t], root / t, now=NOW) for t in ("orders", "clicks")}


def _stage_replay(root, topic, stage):
    """The stage's numbers from fresh replays of its policies: the blocking point (whole
    batch), then the gate's single-framed replay over what it appends."""
    v = replay(root / topic, stage.block_policy, now=NOW, profile=stage.profile)
    o = v.by_outcome()
    accepted = {(r["partition"], r["offset"]) for r in v.records.to_pylist()
                if r["outcome"] == "accepted"}
    dead: set = set()
    gate = stage.gate_policy
    if stage.kind != "observe" and gate is not None:
        g = replay(root / topic, gate, now=NOW, framing="single")
        dead = accepted & {(r["partition"], r["offset"]) for r in g.records.to_pylist()
                           if r["outcome"] == "rejected"}
    return {"accepted": len(accepted - dead), "refused": o["rejected"],
            "collateral": o["collateral"], "dead_lettered": len(dead)}


@pytest.mark.parametrize("topic", ["orders", "clicks"])
def test_every_stage_reproduces_from_a_replay_of_its_policies(demo, plans, topic):
    root, _ = demo
    plan = plans[topic]
    for s in plan.stages:
        c = s.counts
        expect = _stage_replay(root, topic, s)
        assert {k: c[k] for k in expect} == expect, (topic, s.number)
        assert c["records"] == sum(expect.values())


def test_stages_go_observe_dead_letter_then_block_safest_first(plans):
    plan = plans["orders"]
    assert [s.kind for s in plan.stages] == ["observe", "dead-letter"] + ["block"] * 5
    rules = ["traceparent", "schema-registered", "avro", "amount-range", "customer-present"]
    assert plan.stages[0].modes == dict.fromkeys(rules, "observe")
    assert plan.stages[1].modes == dict.fromkeys(rules, "dead-letter")
    assert plan.stages[-1].modes == dict.fromkeys(rules, "block")
    # observe refuses only what the broker's own checks refuse; dead-lettering breaks nobody
    baseline = plan.stages[0].counts
    assert plan.stages[1].counts["lost"] == baseline["lost"]
    assert plan.stages[1].counts["dead_lettered"] == 39  # docs/demo-defects.md: 18+9+9+3
    assert plan.stages[0].breaks == plan.stages[1].breaks == []
    # block waves: fewest records lost (alone, beyond the baseline) first, one rule each
    solo = {r.rule: r.solo_refused + r.solo_collateral for r in plan.rules}
    order = [s.moves[0] for s in plan.stages[2:]]
    assert [solo[r] for r in order] == sorted(solo[r] for r in order)
    assert order[-1] == "traceparent"
    lost = [s.counts["lost"] for s in plan.stages]
    assert lost == sorted(lost)
    assert plan.stages[-1].gate_policy is None  # every rule blocked: no gate left


def test_rules_refusing_nothing_are_blocked_together_first(plans):
    plan = plans["clicks"]
    assert [(s.kind, s.moves) for s in plan.stages] == [
        ("observe", []), ("dead-letter", ["source", "json", "event-type"]),
        ("block", ["source", "event-type"]), ("block", ["json"])]
    assert plan.stages[2].policy_lost == 0 and plan.stages[2].breaks == []
    assert "refuse nothing more than the baseline" in plan.stages[2].title


def test_the_producer_that_breaks_first_is_named(plans):
    first = plans["orders"].breaks_first
    assert [(p["producer"], p["producer_id"], p["client"]) for p in first] == [
        ("pid 2002 · checkout-b", 2002, "checkout-b")]
    assert plans["orders"].client_header == "source"
    by_rule = {r.rule: r for r in plans["orders"].rules}
    assert by_rule["traceparent"].producers == {"pid 2002 · checkout-b": 18}
    assert by_rule["traceparent"].failed_records == 18
    assert [(p["producer"], p["new_lost"]) for p in plans["clicks"].breaks_first] == [
        ("pid 3001 · web", 22)]


def test_each_stage_exports_its_own_policies(plans):
    plan = plans["orders"]
    observe, dead, *blocks = plan.stages
    assert sorted(observe.exports) == ["gate", "kip"] and sorted(dead.exports) == ["gate"]
    assert sorted(blocks[-1].exports) == ["kip"]
    for s in plan.stages:
        for name, ex in s.exports.items():
            pol = s.gate_policy if name == "gate" else s.block_policy
            assert ex.files == export(pol, name).files, (s.number, name)
    # the stage's modes travel into the files: observe rules are counted, not rejected
    kip = observe.exports["kip"].files["kip/kip-940.properties"]
    assert "rule traceparent (header_required, severity error, observe)" in kip


def test_written_plan_holds_each_stages_policies_and_configs(plans, tmp_path):
    plan = plans["clicks"]
    written = plan.write(tmp_path)
    names = {p.relative_to(tmp_path).as_posix() for p in written}
    assert {"plan.json", "stage-1-observe/block-policy.yaml", "stage-2-dead-letter/gate/"
            "gate.yaml", "stage-4-block/kip/kip-940.properties"} <= names
    for s in plan.stages:
        back = load_policy(tmp_path / f"stage-{s.number}-{s.kind}" / "block-policy.yaml")
        assert back.content_hash() == s.block_policy.content_hash()
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert [s["stage"] for s in doc["stages"]] == [1, 2, 3, 4]
    assert doc["stages"][3]["exports"]["kip"] == sorted(plan.stages[3].exports["kip"].files)


def test_rules_the_blocking_point_cannot_express_stay_dead_lettered(demo, plans):
    root, policies = demo
    plan = rollout_plan(policies["clicks"], root / "clicks", now=NOW,
                        block_at="kroxylicious")
    by_rule = {r.rule: r for r in plan.rules}
    assert by_rule["source"].block_stage is None and by_rule["source"].note
    assert by_rule["event-type"].block_stage is None
    assert plan.stages[-1].modes == {"source": "dead-letter", "json": "block",
                                     "event-type": "dead-letter"}
    assert any("cannot be blocked at kroxylicious" in n for n in plan.notes)
    assert "kroxylicious" in plan.stages[-1].exports


def test_the_implicit_decode_rule_gets_a_stage_of_its_own(tmp_path):
    folder = write_log(tmp_path / "orders-0",
                       [order(5) for _ in range(3)] + [order(5, key=None)])
    plan = rollout_plan(policy(AMOUNT, KEYED), folder, now=NOW, exports=False)
    assert [r.rule for r in plan.rules] == ["decode-value", "amount-positive", "keyed"]
    assert plan.stages[0].modes["decode-value"] == "observe"
    assert any("decode-value" in n for n in plan.notes)


def test_a_plan_can_block_at_the_serializer(tmp_path):
    ten = [order(-1 if i == 3 else 5) for i in range(10)]
    folder = write_log(tmp_path / "orders-0", ten)
    plan = rollout_plan(policy(AMOUNT), folder, now=NOW, block_at="confluent")
    last = plan.stages[-1]
    assert last.counts["refused"] == 1 and last.counts["collateral"] == 0
    assert "confluent" in last.exports
    assert plan.breaks_first[0]["new_lost"] == 1


def test_a_wrong_blocking_point_is_refused(tmp_path):
    folder = write_log(tmp_path / "orders-0", [order(5)])
    with pytest.raises(RolloutError, match="block_at must be one of"):
        rollout_plan(policy(AMOUNT), folder, now=NOW, block_at="gate")
