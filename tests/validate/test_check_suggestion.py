"""Check thresholds proposed from a baseline sample (issue 21, ``kqlab suggest``): each side a
check sets is proposed at the windows' value (at the quantile) widened by the margin, and the
windows it would have failed are those a fresh replay with that threshold fails."""

from __future__ import annotations

import json

import pytest

from kqlab.cli import main
from kqlab.policy import load_policy, loads_policy
from kqlab.validate import replay
from kqlab.validate.check_suggestion import suggest_thresholds
from tests.validate.test_sample_checks import HEAD, hour, write_log

CHECKS = """checks:
  - {id: nulls, kind: null_rate, field: customer, window: 10m, by: partition, max: 0.01}
  - {id: vol, kind: volume, window: 1m, by: partition, min: 1, max: 100}
  - {id: p95, kind: stat, stat: p95, field: amount, window: 10m, max: 100}
  - {id: fresh, kind: freshness, by: partition, max_age_ms: 1000}
"""


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """orders-0: customer null in every 12th record of the last 10 minutes (8 %); orders-1
    quiet from minute 20 to 30; amount = the record's index (0..599)."""
    def value(p: int, i: int) -> dict:
        return {"amount": float(i),
                "customer": None if (p == 0 and i >= 500 and i % 12 == 0) else f"c{i % 9}"}

    root = tmp_path_factory.mktemp("baseline")
    log = write_log(root / "log", {0: hour(0, value=value),
                                   1: hour(1, skip=lambda i: 200 <= i < 300, value=value)})
    (root / "p.yaml").write_text(HEAD + CHECKS, encoding="utf-8")
    return log, root / "p.yaml"


def _alone(policy, check_id, name, value):
    """The policy with only check ``check_id``, its thresholds reduced to ``name`` = value."""
    from dataclasses import replace

    c = policy.check(check_id)
    params = {k: v for k, v in c.params.items() if k not in c.spec.thresholds}
    return policy.with_checks([replace(c, params={**params, name: value})])


def test_proposals_are_the_observed_value_with_a_margin(baseline):
    log, path = baseline
    policy = load_policy(path)
    found = {(p.check, p.threshold): p for p in suggest_thresholds(log, policy, margin=0.2)}
    assert found["nulls", "max"].basis == pytest.approx(0.08)
    assert found["nulls", "max"].proposed == pytest.approx(0.096)
    assert found["vol", "max"].proposed == 12                 # 10 a minute, ceil(10 * 1.2)
    assert found["vol", "min"].proposed == 0                  # the quiet windows: 0 records
    # p95 per 10-minute window of both partitions: the last holds 500..599 twice
    assert found["p95", "max"].basis == pytest.approx(594.05)
    assert found["p95", "max"].proposed == pytest.approx(712.9)
    assert ("fresh", "max_age_ms") not in found               # age 0 at the sample's clock
    for p in found.values():                                  # quantile 1: the sample passes
        assert p.failing_proposed == 0 and p.status_proposed == "pass"
    assert (found["nulls", "max"].failing_now, found["vol", "min"].failing_now,
            found["p95", "max"].failing_now) == (1, 10, 5)


def test_would_fail_counts_equal_a_fresh_replay(baseline):
    log, path = baseline
    policy = load_policy(path)
    found = suggest_thresholds(log, policy, margin=0.1, quantile=0.9)
    vol_min = next(p for p in found if (p.check, p.threshold) == ("vol", "min"))
    assert vol_min.basis == 10 and vol_min.proposed == 9
    assert vol_min.failing_proposed == 10                    # exactly the quiet partition
    for p in found:
        fresh = replay(log, _alone(policy, p.check, p.threshold, p.proposed)).checks()
        assert fresh.column("failing_windows")[0].as_py() == p.failing_proposed, p
        now = replay(log, _alone(policy, p.check, p.threshold, p.current)).checks()
        assert now.column("failing_windows")[0].as_py() == p.failing_now, p
    assert found.accept(policy).check("vol").params == {"min": 9, "max": 11}


def test_cli_suggest_json_and_write(baseline, tmp_path, capsys):
    log, path = baseline
    out = tmp_path / "suggested.yaml"
    assert main(["suggest", str(log), "--policy", str(path), "--margin", "10%",
                 "--quantile", "0.9", "--json", "--write", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    proposals = doc["thresholds"]["proposals"]
    assert {(p["check"], p["threshold"]) for p in proposals} == {
        ("nulls", "max"), ("vol", "min"), ("vol", "max"), ("p95", "max")}
    assert doc["thresholds"]["quantile"] == 0.9 and doc["thresholds"]["margin"] == 0.1
    written = load_policy(out)                               # loads: the thresholds are valid
    by = {(p["check"], p["threshold"]): p["proposed"] for p in proposals}
    assert written.check("vol").params["min"] == by["vol", "min"]
    assert main(["suggest", str(log), "--policy", str(path), "--quantile", "0.2"]) == 2
    assert "--quantile" in capsys.readouterr().err


def test_a_policy_without_checks_gets_a_note(baseline):
    log, _ = baseline
    found = suggest_thresholds(log, loads_policy(HEAD))
    assert len(found) == 0 and "no checks" in found.notes[0]
