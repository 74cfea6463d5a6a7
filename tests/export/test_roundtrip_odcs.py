"""The ODCS round trip: datacontract-cli's own ``test`` run on the demo policy's contract with
the demo sample's decoded values, compared record by record with the replay
(:mod:`kqlab.export.roundtrip_odcs`)."""

from __future__ import annotations

import pytest

from kqlab.export.base import DECODE_KEY, EXACT, UNVERIFIED, WITHDRAWN
from kqlab.export.fidelity import verdict_of
from kqlab.export.odcs import build
from kqlab.export.roundtrip import SampleView
from kqlab.export.roundtrip_odcs import roundtrip_odcs
from kqlab.policy import load_policy
from kqlab.sources.demo import demo_policy_path, write_demo_segment
from kqlab.validate.replayer import Replayer
from tests.export.test_odcs import datacontract  # noqa: F401

NOW = 1763700000000


@pytest.fixture(scope="module")
def demo_view(tmp_path_factory, datacontract):  # noqa: F811
    policy = load_policy(str(demo_policy_path()))
    folder = write_demo_segment(tmp_path_factory.mktemp("odcs-rt"), NOW)
    return policy, SampleView(policy, Replayer(str(folder), now=NOW))


def test_implicit_rows_have_an_odcs_claim():
    policy = load_policy(str(demo_policy_path()))
    rows = {f.rule: f for f in build(policy).fidelity}
    assert rows[DECODE_KEY].implicit and rows[DECODE_KEY].status == EXACT
    assert len(rows) == len(policy.rules) + 1


def test_the_tool_proves_the_rules_it_runs_and_leaves_the_others_unverified(demo_view):
    policy, view = demo_view
    rt = roundtrip_odcs(policy, view=view)
    assert rt.ran and rt.equal, rt.reason
    ex = build(policy)
    verdicts = {f.rule: verdict_of(f, "odcs", rt).verdict for f in ex.fidelity}
    # library metrics and the schema constraints the field rules imply: run and agreed
    for rid in ("status-known", "amount-positive", "has-currency"):
        check = rt.checks[rid]
        assert verdicts[rid] == EXACT and check.equal
        assert check.refused == check.expected == 1 and check.judged == 348
    # custom rules (engine kqlab) and the key: nothing of the tool ran them
    for rid in ("trace-id", "json", "eur-only", "value-size", DECODE_KEY):
        assert verdicts[rid] == UNVERIFIED and rid in rt.unchecked
    assert rt.whole_equal and rt.refused == rt.expected == 3


def test_a_contract_the_tool_disagrees_with_withdraws_the_claim(demo_view):
    policy, view = demo_view
    text = next(iter(build(policy).files.values()))
    edited = text.replace("        - CANCELLED\n", "        - CANCELLED\n        - REFUNDED\n", 1)
    assert edited != text
    rt = roundtrip_odcs(policy, view=view, contract_text=edited)
    assert rt.ran and not rt.equal and not rt.whole_equal
    check = rt.checks["status-known"]
    assert check.refused == 0 and check.expected == 1 and len(check.only_replay) == 1
    v = verdict_of(build(policy).status_of("status-known"), "odcs", rt)
    assert v.verdict == WITHDRAWN and "REFUNDED" in v.why
    assert rt.checks["has-currency"].equal  # the other rules still agree


def test_a_range_stated_as_minimum_and_maximum_is_proven_by_both(demo, policies,
                                                                 datacontract):  # noqa: F811
    """A field_range becomes two tool checks (field_minimum, field_maximum), each counting
    only its own side of the rule's failures: the rule refuses what either refuses (taking
    the worse of the two withdrew a range the tool enforces exactly)."""
    policy = policies["orders"]  # the demo topics' Avro orders: amounts below the minimum
    rt = roundtrip_odcs(policy, demo / "orders", now=NOW)
    check = rt.checks["amount-range"]
    assert check.equal and check.refused == check.expected > 0, check
    assert verdict_of(next(f for f in build(policy).fidelity if f.rule == "amount-range"),
                      "odcs", rt).verdict == EXACT
