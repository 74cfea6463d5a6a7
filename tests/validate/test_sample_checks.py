"""Sample-level checks on planted samples: each kind finds what was planted (a partition quiet
for 10 minutes, a null-rate jump, duplicated keys, a shifted distribution whose PSI the test
computes on its own, stale data, new schemas, a rule's reject rate), results carry their
identity as data, and the streamed replay (any chunk size) equals the whole replay."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from kqlab.kafka.builder import Record, build_batch
from kqlab.policy import loads_policy
from kqlab.validate import Replayer, replay
from kqlab.validate.sample_checks import CHECK_RESULTS_SCHEMA, CHECK_WINDOWS_SCHEMA
from kqlab.validate.stream import replay_stream

T0 = 1_763_701_200_000  # a whole hour (epoch-aligned windows start here)
STEP = 6_000  # one record every 6 s per partition: 10 a minute
MINUTE = 60_000
HEAD = "kqlab: 1\nname: p\nvalue: {format: json}\n"


def write_log(root: Path, parts: dict[int, list[tuple[bytes | None, dict | None, int]]],
              per_batch: int = 10) -> Path:
    """A log directory: ``orders-<p>`` folders of one segment, batches of ``per_batch``."""
    root.mkdir(parents=True, exist_ok=True)
    for p, recs in parts.items():
        folder = root / f"orders-{p}"
        folder.mkdir()
        data = b""
        for i in range(0, len(recs), per_batch):
            chunk = recs[i:i + per_batch]
            data += build_batch([Record(key=k, value=None if v is None else
                                        json.dumps(v).encode(), timestamp=ts)
                                 for k, v, ts in chunk], base_offset=i,
                                base_timestamp=chunk[0][2])
        (folder / "00000000000000000000.log").write_bytes(data)
    return root


def result(verdicts, check_id: str) -> dict:
    rows = [r for r in verdicts.checks().to_pylist() if r["check"] == check_id]
    assert len(rows) == 1
    row = rows[0]
    row["params"] = dict(row["params"] or [])
    return row


def hour(p: int, skip=lambda i: False, value=lambda p, i: {"amount": float(i)},
         key=lambda p, i: f"k{p}-{i}".encode(), start: int = T0):
    """An hour of records of partition ``p`` (600, every 6 s), minus those ``skip`` drops."""
    return [(key(p, i), value(p, i), start + i * STEP) for i in range(600) if not skip(i)]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Two partitions over one hour: orders-1 quiet from minute 20 to 30; in the last ten
    minutes orders-0's customer is null in every 12th record (0 % before); every 50th key of
    orders-1 repeats the key before it."""
    rng = np.random.default_rng(7)
    amounts = {p: rng.normal(100, 10, 600) for p in (0, 1)}

    def value(p: int, i: int) -> dict:
        customer = None if (p == 0 and i >= 500 and i % 12 == 0) else f"c-{i % 40}"
        return {"amount": float(amounts[p][i]), "customer": customer, "region": f"r{i % 3}"}

    def key(p: int, i: int) -> bytes:
        return f"k{p}-{i - 1 if p == 1 and i % 50 == 0 and i else i}".encode()

    root = tmp_path_factory.mktemp("planted")
    parts = {0: hour(0, value=value, key=key),
             1: hour(1, skip=lambda i: 200 <= i < 300, value=value, key=key)}
    folder = write_log(root / "log", parts)
    return folder, parts, amounts


def test_volume_finds_the_quiet_partition(planted):
    folder, _, _ = planted
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: vol, kind: volume, window: 1m, by: partition, min: 1}\n"
                          "  - {id: burst, kind: volume, window: 1m, max: 20}\n")
    v = replay(folder, policy)
    vol = result(v, "vol")
    assert vol["status"] == "fail" and vol["metric"] == "records"
    assert vol["failing_windows"] == 10 and vol["windows"] == 120
    assert [(w["group"], w["start"], w["records"]) for w in vol["failing"]] == \
        [("orders-1", T0 + (20 + m) * MINUTE, 0) for m in range(10)]
    assert vol["observed"] == 0.0 and vol["min"] == 1.0 and vol["max"] is None
    windows = v.check_windows("vol")
    assert windows.schema == CHECK_WINDOWS_SCHEMA and windows.num_rows == 120
    assert windows.column("records").to_pylist()[:2] == [10, 10]
    assert result(v, "burst")["status"] == "pass"  # 20 records a minute, both partitions
    assert result(v, "burst")["observed"] == 20.0


def test_volume_window_the_sample_covers_in_part_is_not_held_to_min(tmp_path):
    # 95 records from 30 s into the hour: the first window holds 5, the others 10
    recs = [(b"k", {"a": 1}, T0 + 30_000 + i * STEP) for i in range(95)]
    v = replay(write_log(tmp_path / "log", {0: recs}), loads_policy(
        HEAD + "checks: [{id: vol, kind: volume, window: 1m, min: 10}]\n"))
    vol = result(v, "vol")
    assert vol["status"] == "pass", vol
    windows = v.check_windows("vol").to_pylist()
    assert windows[0]["partial"] and windows[0]["records"] == 5
    assert windows[-1]["partial"] is False or windows[-1]["records"] == 10


def test_null_rate_jump(planted):
    folder, parts, _ = planted
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: nulls, kind: null_rate, field: customer, window: 10m,"
                          " by: partition, max: 0.01}\n"
                          "  - {id: whole, kind: null_rate, field: customer, max: 0.05}\n")
    v = replay(folder, policy)
    nulls = result(v, "nulls")
    planted_nulls = sum(1 for _, val, ts in parts[0] if ts >= T0 + 50 * MINUTE and
                        val["customer"] is None)
    assert nulls["status"] == "fail" and nulls["failing_windows"] == 1
    (window,) = nulls["failing"]
    assert (window["group"], window["start"], window["end"]) == \
        ("orders-0", T0 + 50 * MINUTE, T0 + 60 * MINUTE)
    assert window["observed"] == pytest.approx(planted_nulls / 100)
    assert nulls["observed"] == window["observed"]
    total = sum(1 for p in parts.values() for _, val, _ in p if val["customer"] is None)
    whole = result(v, "whole")
    assert whole["status"] == "pass"
    assert whole["observed"] == pytest.approx(total / (600 + 500))
    assert whole["windows"] == 1 and whole["window_ms"] is None


def test_duplicated_keys_and_values(planted):
    folder, parts, _ = planted
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: dup, kind: duplicate_rate, of: key, max: 0}\n"
                          "  - {id: dup-p, kind: duplicate_rate, of: key, by: partition,"
                          " max: 0}\n"
                          "  - {id: dup-region, kind: duplicate_rate, of: region, max: 0.5}\n")
    v = replay(folder, policy)
    keys = [k for p in parts.values() for k, _, _ in p]
    repeats = len(keys) - len(set(keys))
    # every 50th key of orders-1 repeats the one before (not 0; not in or after the gap)
    assert repeats == 8
    dup = result(v, "dup")
    assert dup["status"] == "fail"
    assert dup["observed"] == pytest.approx(repeats / len(keys))
    by_part = result(v, "dup-p")
    assert [w["group"] for w in by_part["failing"]] == ["orders-1"]
    assert by_part["windows"] == 2
    region = result(v, "dup-region")  # three regions over 1100 records: nearly all repeat
    assert region["status"] == "fail"
    assert region["observed"] == pytest.approx((len(keys) - 3) / len(keys))


def test_distinct_and_stats(planted):
    folder, _, amounts = planted
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: customers, kind: distinct, field: customer, min: 41}\n"
                          "  - {id: regions, kind: distinct, field: region, window: 10m,"
                          " max: 3}\n"
                          "  - {id: mean, kind: stat, stat: mean, field: amount, min: 90}\n"
                          "  - {id: sd, kind: stat, stat: stddev, field: amount, by: partition,"
                          " max: 100}\n"
                          "  - {id: p95, kind: stat, stat: p95, field: amount, window: 30m,"
                          " max: 1000}\n"
                          "  - {id: low, kind: stat, stat: min, field: amount, min: 0}\n")
    v = replay(folder, policy)
    customers = result(v, "customers")
    assert customers["status"] == "fail" and customers["observed"] == 40.0
    assert result(v, "regions")["status"] == "pass"
    assert result(v, "regions")["observed"] == 3.0
    kept = {0: amounts[0], 1: np.delete(amounts[1], np.arange(200, 300))}
    every = np.concatenate([kept[0], kept[1]])
    assert result(v, "mean")["observed"] == pytest.approx(every.mean(), rel=1e-12)
    sd = v.check_windows("sd").to_pylist()
    assert [w["group"] for w in sd] == ["orders-0", "orders-1"]
    assert [w["observed"] for w in sd] == pytest.approx(
        [np.std(kept[0], ddof=1), np.std(kept[1], ddof=1)], rel=1e-12)
    p95 = v.check_windows("p95").to_pylist()
    first_half = np.concatenate([amounts[0][:300], amounts[1][:200]])
    assert p95[0]["start"] == T0 and p95[0]["observed"] == pytest.approx(
        np.percentile(first_half, 95), rel=1e-12)
    assert result(v, "low")["observed"] == pytest.approx(every.min())


def test_stale_partition(tmp_path):
    parts = {0: hour(0), 1: hour(1, start=T0 - 2 * 3_600_000)}  # ended two hours earlier
    folder = write_log(tmp_path / "log", parts)
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: fresh, kind: freshness, by: partition,"
                          " max_age_ms: 600000}\n"
                          "  - {id: fresh-all, kind: freshness, max_age_ms: 600000}\n"
                          f"  - {{id: later, kind: freshness, max_age_ms: 600000,"
                          f" now: {T0 + 5 * 3_600_000}}}\n")
    v = replay(folder, policy)
    newest = {p: max(ts for _, _, ts in recs) for p, recs in parts.items()}
    fresh = result(v, "fresh")
    assert fresh["status"] == "fail" and fresh["metric"] == "age_ms"
    (stale,) = fresh["failing"]
    assert stale["group"] == "orders-1"
    assert stale["observed"] == v.now - newest[1] == 2 * 3_600_000
    assert fresh["params"]["now"] == str(v.now)
    assert result(v, "fresh-all")["status"] == "pass"
    later = result(v, "later")
    assert later["status"] == "fail" and later["observed"] == T0 + 5 * 3_600_000 - newest[0]


def test_a_partition_whose_clock_runs_ahead_is_named_not_hidden(tmp_path):
    """The sample clock is each partition's last batch, the latest of those: a partition whose
    earlier records were stamped two hours ahead has a newest record past "now", a negative
    age no max_age_ms fails; the result says which group and by how much, in text too."""
    from kqlab.validate.sample_checks import describe_check

    ahead = hour(2, start=T0 + 2 * 3_600_000)[:50] + hour(2)[100:]   # 50 records from later
    parts = {0: hour(0), 1: hour(1), 2: ahead}
    folder = write_log(tmp_path / "log", parts)
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: fresh, kind: freshness, by: partition, max_age_ms: 600000}\n"
                          "  - {id: fresh-all, kind: freshness, max_age_ms: 600000}\n")
    v = replay(folder, policy)
    newest = max(ts for _, _, ts in ahead)
    assert newest > v.now
    fresh = result(v, "fresh")
    assert fresh["status"] == "pass"                       # max_age_ms alone cannot fail it
    assert fresh["params"]["ahead_ms"] == str(newest - v.now)
    assert fresh["params"]["ahead_group"] == "orders-2"
    assert fresh["params"]["ahead_groups"] == "1"
    text = describe_check(fresh)
    assert "orders-2's newest record is" in text and "ahead of now" in text
    windows = v.check_windows("fresh").to_pylist()
    assert {w["group"]: w["observed"] for w in windows}["orders-2"] == v.now - newest
    whole = result(v, "fresh-all")                         # one group: the whole sample
    assert whole["params"]["ahead_ms"] == str(newest - v.now)
    assert "ahead_group" not in whole["params"]
    assert "the newest record is" in describe_check(whole)
    on_time = result(replay(write_log(tmp_path / "on-time", {0: hour(0), 1: hour(1)}), policy),
                     "fresh")
    assert "ahead_ms" not in on_time["params"]


def _psi_by_hand(sample: np.ndarray, baseline: np.ndarray, bins: int) -> float:
    """PSI as a data-quality textbook computes it: decile edges of the baseline, shares per
    bin (empty ones floored at 1e-4), Σ (actual − expected) · ln(actual / expected)."""
    edges = np.unique(np.quantile(baseline, [i / bins for i in range(1, bins)]))
    total = 0.0
    for lo, hi in zip([-np.inf, *edges], [*edges, np.inf], strict=True):
        a = max(np.count_nonzero((sample >= lo) & (sample < hi)) / len(sample), 1e-4)
        e = max(np.count_nonzero((baseline >= lo) & (baseline < hi)) / len(baseline), 1e-4)
        total += (a - e) * np.log(a / e)
    return total


def test_drift_against_a_baseline_psi_computed_independently(tmp_path):
    rng = np.random.default_rng(3)
    base_amounts = rng.normal(100, 10, 2000)
    shifted = rng.normal(104, 12, 1500)
    base = write_log(tmp_path / "policies" / "baseline", {0: [
        (b"k", {"amount": float(a), "tier": "gold" if i % 4 else "silver"}, T0 + i)
        for i, a in enumerate(base_amounts)]})
    assert base.exists()
    folder = write_log(tmp_path / "log", {0: [
        (b"k", {"amount": float(a), "tier": ("gold", "silver", "bronze")[i % 3]}, T0 + i)
        for i, a in enumerate(shifted)]})
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: amount, kind: drift, field: amount, baseline: baseline,"
                          " max_psi: 0.1}\n"
                          "  - {id: same, kind: drift, field: amount, baseline: baseline,"
                          " bins: 5, max_psi: 10}\n"
                          "  - {id: tier, kind: drift, field: tier, baseline: baseline,"
                          " max_psi: 0.1}\n"
                          "  - {id: gone, kind: drift, field: amount, baseline: nowhere,"
                          " max_psi: 0.1}\n")
    v = replay(folder, policy, base_dir=tmp_path / "policies")
    amount = result(v, "amount")
    expected = _psi_by_hand(shifted, base_amounts, 10)
    assert expected > 0.1
    assert amount["status"] == "fail" and amount["metric"] == "psi"
    assert amount["observed"] == pytest.approx(expected, rel=1e-9)
    assert amount["params"]["baseline_records"] == "2000"
    assert result(v, "same")["observed"] == pytest.approx(
        _psi_by_hand(shifted, base_amounts, 5), rel=1e-9)
    tier = result(v, "tier")
    share = {"gold": 0.75, "silver": 0.25, "bronze": 0.0}
    actual = {"gold": 1 / 3, "silver": 1 / 3, "bronze": 1 / 3}
    by_hand = sum((actual[c] - max(share[c], 1e-4)) * np.log(actual[c] / max(share[c], 1e-4))
                  for c in share)
    assert tier["observed"] == pytest.approx(by_hand, rel=1e-9)
    assert tier["new_values"] == ["bronze"] and tier["status"] == "fail"
    gone = result(v, "gone")
    assert gone["status"] == "not_evaluable" and gone["reason"] == "baseline_missing"


def test_schema_drift_lists_new_field_sets(tmp_path):
    write_log(tmp_path / "baseline", {0: [(b"k", {"a": 1, "b": 2}, T0 + i) for i in range(20)]})
    folder = write_log(tmp_path / "log", {0: [
        (b"k", {"a": 1, "b": 2, **({"c": 3} if i % 5 == 0 else {})}, T0 + i)
        for i in range(20)]})
    policy = loads_policy(HEAD + "checks: [{id: shapes, kind: schema_drift,"
                          " baseline: baseline}]\n")
    v = replay(folder, policy, base_dir=tmp_path)
    shapes = result(v, "shapes")
    assert shapes["status"] == "fail" and shapes["observed"] == 1.0
    assert shapes["new_values"] == ["fields:a,b,c"]
    same = replay(tmp_path / "baseline", policy, base_dir=tmp_path)
    assert result(same, "shapes")["status"] == "pass"


def test_reject_rate_of_a_rule_and_of_the_policy(planted):
    folder, parts, _ = planted
    policy = loads_policy(HEAD + "rules: [{id: big, kind: field_range, field: amount,"
                          " max: 115, mode: observe},"
                          " {id: key, kind: key_required}]\n"
                          "checks:\n"
                          "  - {id: big-rate, kind: reject_rate, rule: big, max: 0.01}\n"
                          "  - {id: refused, kind: reject_rate, max: 0}\n"
                          "  - {id: big-hourly, kind: reject_rate, rule: big, window: 30m,"
                          " by: partition, max: 0.5}\n")
    v = replay(folder, policy)
    failing = sum(1 for p in parts.values() for _, val, _ in p if val["amount"] > 115)
    assert failing > 11
    big = result(v, "big-rate")
    assert big["status"] == "fail"
    assert big["observed"] == pytest.approx(failing / 1100)
    assert big["params"]["rule"] == "big"
    refused = result(v, "refused")  # observe rule: nothing refused
    assert refused["status"] == "pass" and refused["observed"] == 0.0
    assert result(v, "big-hourly")["windows"] == 4


def test_when_narrows_what_a_check_reads(planted):
    folder, parts, _ = planted
    policy = loads_policy(HEAD + "checks: [{id: r0, kind: null_rate, field: customer,"
                          " max: 1, when: \"value.region == 'r0'\"}]\n")
    row = result(replay(folder, policy), "r0")
    reads = [val for p in parts.values() for _, val, _ in p if val["region"] == "r0"]
    assert row["records"] == len(reads)
    assert row["observed"] == pytest.approx(
        sum(val["customer"] is None for val in reads) / len(reads))


def test_not_evaluable_reasons(planted):
    folder, _, _ = planted
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: missing, kind: stat, stat: mean, field: nope, max: 1}\n"
                          "  - {id: text, kind: stat, stat: mean, field: region, max: 1}\n"
                          "  - {id: none, kind: volume, min: 1, when: 'value.amount < 0'}\n")
    v = replay(folder, policy)
    assert [(r["status"], r["reason"]) for r in v.checks().to_pylist()] == \
        [("not_evaluable", "no_values"), ("not_evaluable", "not_numeric"),
         ("not_evaluable", "no_records")]
    assert v.checks().schema == CHECK_RESULTS_SCHEMA


def test_results_in_summary_and_text(planted):
    folder, _, _ = planted
    policy = loads_policy(HEAD + "checks: [{id: vol, kind: volume, window: 1m,"
                          " by: partition, min: 1}]\n")
    summary = replay(folder, policy).summary()
    (row,) = summary["checks"]
    assert row["status"] == "fail" and row["failing_windows"] == 10
    assert row["text"].startswith("vol (volume): fail — records 0, min 1 · 10 of 120 windows")
    json.dumps(summary)  # JSON-ready


def test_editing_a_threshold_recomputes_nothing(planted):
    folder, _, _ = planted
    r = Replayer(folder)
    text = HEAD + "checks: [{id: vol, kind: volume, window: 1m, by: partition, min: MIN}]\n"
    first = r.run(loads_policy(text.replace("MIN", "1")))
    assert r.check_evaluations == 1
    second = r.run(loads_policy(text.replace("MIN", "11")))
    assert r.check_evaluations == 1  # the partial came from the cache
    assert result(first, "vol")["failing_windows"] == 10
    # 10 a minute at most; the last minute (the sample ends 6 s before it does) is partial
    assert result(second, "vol")["failing_windows"] == 118


@pytest.mark.parametrize("chunk", [1, 3, 4096])
def test_streamed_replay_equals_the_whole_replay(planted, tmp_path, chunk):
    folder, _, _ = planted
    write_log(tmp_path / "baseline", {0: hour(0, value=lambda p, i: {
        "amount": float(i % 97), "customer": f"c-{i % 7}", "region": "r0"})})
    policy = loads_policy(
        HEAD + "rules: [{id: big, kind: field_range, field: amount, max: 115}]\n"
        "checks:\n"
        "  - {id: vol, kind: volume, window: 1m, by: partition, min: 1}\n"
        "  - {id: fresh, kind: freshness, by: partition, max_age_ms: 1000}\n"
        "  - {id: nulls, kind: null_rate, field: customer, window: 10m, max: 0.01}\n"
        "  - {id: dup, kind: duplicate_rate, of: key, window: 30m, max: 0}\n"
        "  - {id: dist, kind: distinct, field: customer, by: region, min: 40}\n"
        "  - {id: mean, kind: stat, stat: mean, field: amount, window: 10m, max: 100}\n"
        "  - {id: sd, kind: stat, stat: stddev, field: amount, by: partition, max: 5}\n"
        "  - {id: p99, kind: stat, stat: p99, field: amount, by: header:none, max: 120}\n"
        "  - {id: rej, kind: reject_rate, rule: big, max: 0}\n"
        "  - {id: refused, kind: reject_rate, window: 5m, max: 0.5}\n"
        "  - {id: drift, kind: drift, field: amount, baseline: baseline, max_psi: 0.1}\n"
        "  - {id: cats, kind: drift, field: customer, baseline: baseline, max_psi: 0.1}\n"
        "  - {id: shapes, kind: schema_drift, baseline: baseline}\n")
    whole = replay(folder, policy, base_dir=tmp_path)
    streamed = replay_stream(folder, policy, chunk_batches=chunk, base_dir=tmp_path)
    assert streamed.checks().to_pylist() == whole.checks().to_pylist()
    assert streamed.check_windows().equals(whole.check_windows())
    statuses = {r["check"]: r["status"] for r in whole.checks().to_pylist()}
    assert set(statuses.values()) == {"pass", "fail"}, statuses


def test_cli_replay_prints_checks_and_exits_1_on_a_failing_one(planted, tmp_path, capsys):
    from kqlab.cli import main

    folder, _, _ = planted
    write_log(tmp_path / "baseline", {0: hour(0)})
    policy = tmp_path / "p.yaml"  # the baseline is relative to the policy file
    policy.write_text(HEAD + "checks:\n"
                      "  - {id: vol, kind: volume, window: 1m, by: partition, min: 1}\n"
                      "  - {id: shapes, kind: schema_drift, baseline: baseline, max: 5}\n",
                      encoding="utf-8")
    assert main(["replay", str(folder), "--policy", str(policy)]) == 1
    out = capsys.readouterr().out
    assert "sample checks" in out
    assert "vol (volume): fail — records 0, min 1 · 10 of 120 windows fail" in out
    assert main(["replay", str(folder), "--policy", str(policy), "--json"]) == 1
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert [(c["check"], c["status"]) for c in checks] == [("vol", "fail"), ("shapes", "pass")]
    assert checks[1]["params"]["baseline_records"] == "600"
    policy.write_text(HEAD + "checks: [{id: vol, kind: volume, window: 1m, min: 1}]\n",
                      encoding="utf-8")
    assert main(["replay", str(folder), "--policy", str(policy)]) == 0  # both partitions


def test_report_opening_verdict_and_checks_section(planted):
    from kqlab.reporting import Thresholds, judge, report

    folder, _, _ = planted
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: vol, kind: volume, window: 1m, by: partition, min: 1}\n"
                          "  - {id: gone, kind: drift, field: amount, baseline: nowhere,"
                          " max_psi: 0.1}\n")
    v = replay(folder, policy)
    verdict = judge(v, Thresholds(max_reject_rate=1))
    assert not verdict.passed and verdict.checks_failed == ["vol"]
    assert any(r.startswith("sample check vol (volume): fail") for r in verdict.reasons)
    assert any("gone (drift): not_evaluable" in w for w in verdict.warnings)
    html = report(v, policy, thresholds=Thresholds(max_reject_rate=1))
    assert "id='kqlab-checks'" in html and "10 of 120" in html


def test_volume_over_a_span_too_long_for_its_window_is_not_evaluable(tmp_path):
    # one record from 1970 beside today's: 56 years of 1 ms windows
    recs = [(b"k", {"a": 1}, 0), *[(b"k", {"a": 1}, T0 + i) for i in range(10)]]
    v = replay(write_log(tmp_path / "log", {0: recs}, per_batch=1), loads_policy(
        HEAD + "checks: [{id: vol, kind: volume, window: 1ms, min: 1}]\n"), now=T0 + 10)
    row = result(v, "vol")
    assert (row["status"], row["reason"]) == ("not_evaluable", "too_many_windows")
    assert int(row["params"]["windows"]) == T0 + 10


def test_a_field_of_mixed_types_counts_alike_whole_and_chunked(tmp_path):
    # partition 0: whole numbers; 1: numbers with decimals (5.0 is 5); 2: text and numbers —
    # each chunk's JSON reader infers its own type, the whole sample's falls back to objects
    values = {0: [1, 2, 5, 7], 1: [5.0, 2.5, 1.0, 7.25], 2: ["x", 3, "5", None]}
    parts = {p: [(f"k{p}-{i}".encode(), {"v": v}, T0 + 1000 * i) for i, v in enumerate(vs)]
             for p, vs in values.items()}
    folder = write_log(tmp_path / "log", parts, per_batch=1)
    write_log(tmp_path / "baseline", {0: [(b"k", {"v": v}, T0) for v in (1, 2, "x")]})
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: dist, kind: distinct, field: v, max: 100}\n"
                          "  - {id: dup, kind: duplicate_rate, of: v, max: 1}\n"
                          "  - {id: mean, kind: stat, stat: mean, field: v, max: 100}\n"
                          "  - {id: drift, kind: drift, field: v, baseline: baseline,"
                          " max_psi: 100}\n")
    whole = replay(folder, policy, base_dir=tmp_path)
    numbers = [1, 2, 5, 7, 5.0, 2.5, 1.0, 7.25, 3]
    texts = {"1", "2", "5", "7", "2.5", "7.25", "x", "3"}
    assert result(whole, "dist")["observed"] == len(texts)
    assert result(whole, "dup")["observed"] == pytest.approx((11 - len(texts)) / 11)
    assert result(whole, "mean")["observed"] == pytest.approx(np.mean(numbers))
    assert sorted(result(whole, "drift")["new_values"]) == sorted(texts - {"1", "2", "x"})
    for chunk in (1, 2):
        streamed = replay_stream(folder, policy, chunk_batches=chunk, base_dir=tmp_path)
        assert streamed.checks().to_pylist() == whole.checks().to_pylist()


def test_schema_drift_of_confluent_framed_avro_values(tmp_path):
    """Values in the Confluent wire format (the demo's Avro orders): a record's shape is its
    schema id and, where its value decodes, its fields.  Against a clean week of the same
    traffic the new shapes are the bad deploy's unregistered ids, and the registered id of
    the records whose bytes do not decode (JSON behind an Avro id) without fields — both
    found here from the raw bytes alone.  Drift of the amounts and the currencies passes:
    the same generator, another seed."""
    from kqlab.sources import demo_topics

    now = 1_763_700_000_000
    sample = demo_topics.generate(tmp_path / "demo", now, scale=0.4)
    week = demo_topics.generate(tmp_path / "week", now - 7 * 86_400_000, seed=8, scale=0.4,
                                defects=False)
    for root, demo in (("orders", sample), ("orders-last-week", week)):
        (tmp_path / root).mkdir()
        for name, folder in demo.folders.items():
            if name.startswith("orders-"):
                (tmp_path / root / name).symlink_to(folder)

    def framed(demo) -> list[tuple[int, bool]]:  # (schema id, value is JSON, not Avro)
        return [(int.from_bytes(r["value"][1:5], "big"), r["value"][5:6] == b"{")
                for name, recs in demo.records.items() if name.startswith("orders-")
                for r in recs if r["value"] is not None]

    known = {sid for sid, _ in framed(week)}
    # a new shape is an id the week lacks (no Avro schema: no fields either) or an id whose
    # bytes do not decode (no fields); listed with the most records first
    new = Counter(f"schema:{sid}" for sid, json_bytes in framed(sample)
                  if sid not in known or json_bytes)
    expected = [text for text, _ in sorted(new.items(), key=lambda tc: (-tc[1], tc[0]))]
    assert any(int(e.split(":")[1]) in demo_topics.UNKNOWN_SCHEMA_IDS for e in expected)
    text = demo_topics.load_policies()["orders"]
    policy = text.with_checks(loads_policy(
        HEAD + "checks:\n"
        "  - {id: schemas, kind: schema_drift, baseline: orders-last-week}\n"
        "  - {id: amounts, kind: drift, field: amount, baseline: orders-last-week,"
        " max_psi: 0.1}\n"
        "  - {id: currencies, kind: drift, field: currency, baseline: orders-last-week,"
        " max_psi: 0.1}\n").checks)
    for v in (replay(tmp_path / "orders", policy, base_dir=tmp_path),
              replay_stream(tmp_path / "orders", policy, base_dir=tmp_path)):
        shapes = result(v, "schemas")
        assert shapes["status"] == "fail" and shapes["new_values"] == expected
        assert shapes["observed"] == len(expected)
        assert result(v, "amounts")["status"] == "pass"
        assert result(v, "currencies")["status"] == "pass"
        assert result(v, "currencies")["new_values"] == []


def test_a_failing_window_is_named_without_an_empty_group(tmp_path):
    """The one line of a windowed check names its first failing window by its group only
    where the check has a ``by`` ("(no value)" for records without one), never a blank."""
    from kqlab.validate.sample_checks import describe_check

    folder = write_log(tmp_path / "log", {0: hour(0, value=lambda p, i: {
        "amount": 1.0, "region": "r1"} if i % 2 else {"amount": float(i)})})
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: p95, kind: stat, stat: p95, field: amount, window: 30m,"
                          " max: 10}\n"
                          "  - {id: by, kind: stat, stat: p95, field: amount, window: 30m,"
                          " by: region, max: 10}\n")
    v = replay(folder, policy)
    alone, grouped = result(v, "p95"), result(v, "by")
    assert describe_check(alone).endswith(", first at 2025-11-21 05:00:00")
    first = grouped["failing"][0]
    assert first["group"] is None  # r1's amounts pass; those without a region fail
    assert describe_check(grouped).endswith(", first (no value) at 2025-11-21 05:00:00")
    assert "  " not in describe_check(alone) + describe_check(grouped)
