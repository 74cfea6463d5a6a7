"""Sample checks on a real local SparkSession equal the local engine's, kind by kind, on the
planted samples of tests/validate/test_sample_checks.py (a partition quiet for 10 minutes, a
null-rate jump, duplicated keys, stale data, drift and schema drift against a baseline):
windows that span partitions (one Spark task each) are merged by Spark, and the CLI's
``--engine spark --json`` carries the same checks as the local engine."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kqlab.policy import loads_policy
from kqlab.spark import replay_spark
from kqlab.validate import replay
from tests.validate.test_sample_checks import HEAD, MINUTE, T0, hour, write_log

#: every kind, windows across partitions (no ``by``) and per partition, thresholds that
#: fail on what was planted
CHECKS = (
    "rules: [{id: big, kind: field_range, field: amount, max: 115, mode: observe},"
    " {id: key, kind: key_required}]\n"
    "checks:\n"
    "  - {id: vol, kind: volume, window: 1m, by: partition, min: 1}\n"
    "  - {id: vol-all, kind: volume, window: 1m, min: 15}\n"
    "  - {id: fresh, kind: freshness, by: partition, max_age_ms: 600000}\n"
    "  - {id: nulls, kind: null_rate, field: customer, window: 10m, by: partition, max: 0.01}\n"
    "  - {id: nulls-all, kind: null_rate, field: customer, window: 10m, max: 0.01}\n"
    "  - {id: dup, kind: duplicate_rate, of: key, window: 30m, max: 0}\n"
    "  - {id: dup-region, kind: duplicate_rate, of: region, by: partition, max: 0.5}\n"
    "  - {id: customers, kind: distinct, field: customer, window: 10m, min: 41}\n"
    "  - {id: mean, kind: stat, stat: mean, field: amount, window: 10m, max: 100.5}\n"
    "  - {id: sd, kind: stat, stat: stddev, field: amount, by: partition, max: 5}\n"
    "  - {id: p95, kind: stat, stat: p95, field: amount, window: 30m, by: region, max: 120}\n"
    "  - {id: p50, kind: stat, stat: p50, field: amount, by: header:none, max: 120}\n"
    "  - {id: lo, kind: stat, stat: min, field: amount, min: 70}\n"
    "  - {id: hi, kind: stat, stat: max, field: amount, window: 1h, max: 130}\n"
    "  - {id: text, kind: stat, stat: mean, field: region, max: 1}\n"
    "  - {id: rej, kind: reject_rate, rule: big, window: 30m, max: 0}\n"
    "  - {id: refused, kind: reject_rate, window: 5m, by: partition, max: 0.5}\n"
    "  - {id: drift, kind: drift, field: amount, baseline: baseline, max_psi: 0.1}\n"
    "  - {id: cats, kind: drift, field: customer, baseline: baseline, max_psi: 0.1}\n"
    "  - {id: gone, kind: drift, field: amount, baseline: nowhere, max_psi: 0.1}\n"
    "  - {id: shapes, kind: schema_drift, baseline: baseline}\n")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Three partitions over one hour (three Spark units): orders-1 quiet from minute 20 to
    30, orders-0's customer null in every 12th record of the last ten minutes, every 50th key
    of orders-1 repeating the one before, orders-2 ending an hour early with a new field;
    a baseline of other amounts and customers beside the policy."""
    rng = np.random.default_rng(11)
    amounts = {p: rng.normal(100, 10, 600) for p in (0, 1, 2)}

    def value(p: int, i: int) -> dict:
        customer = None if (p == 0 and i >= 500 and i % 12 == 0) else f"c-{i % 40}"
        doc = {"amount": float(amounts[p][i]), "customer": customer, "region": f"r{i % 3}"}
        if p == 2 and i % 7 == 0:
            doc["extra"] = True
        return doc

    def key(p: int, i: int) -> bytes:
        return f"k{p}-{i - 1 if p == 1 and i % 50 == 0 and i else i}".encode()

    root = tmp_path_factory.mktemp("planted")
    write_log(root / "baseline", {0: hour(0, value=lambda p, i: {
        "amount": float(i % 97), "customer": f"c-{i % 7}", "region": "r0"})})
    folder = write_log(root / "log", {
        0: hour(0, value=value, key=key),
        1: hour(1, skip=lambda i: 200 <= i < 300, value=value, key=key),
        2: hour(2, value=value, key=key, start=T0 - 60 * MINUTE)})
    return folder, root


def test_every_kind_equals_the_local_engine(spark, planted, tmp_path):
    folder, base = planted
    policy = loads_policy(HEAD + CHECKS)
    local = replay(folder, policy, base_dir=base)
    sv = replay_spark(folder, policy, spark=spark, out=tmp_path / "out", base_dir=base)
    assert sv.units == 3 and sv.clock == "sample" and sv.now == local.now
    assert sv.checks().to_pylist() == local.checks().to_pylist()
    assert sv.check_windows().equals(local.check_windows())
    assert sv.check_windows("vol").equals(local.check_windows("vol"))
    assert sv.to_local().checks().equals(local.checks())
    statuses = {r["check"]: (r["status"], r["reason"]) for r in sv.checks().to_pylist()}
    # what was planted is found (the equality above is not an equality of two blanks)
    assert statuses["vol"] == ("fail", None) and statuses["fresh"] == ("fail", None)
    assert statuses["nulls"] == ("fail", None) and statuses["dup"] == ("fail", None)
    assert statuses["drift"][0] == "fail" and statuses["shapes"] == ("fail", None)
    assert statuses["text"] == ("not_evaluable", "not_numeric")
    assert statuses["gone"] == ("not_evaluable", "baseline_missing")
    assert {s for s, _ in statuses.values()} == {"pass", "fail", "not_evaluable"}
    vol_all = sv.check_windows("vol-all").to_pylist()  # windows across the three units
    assert max(w["records"] for w in vol_all) == 20  # orders-0 and orders-1 together
    summary = sv.summary()
    assert summary["checks"] == local.summary()["checks"]
    # each check's partials were written once per unit that had rows, then merged by Spark
    written = sorted(p.relative_to(tmp_path / "out").parts[:2]
                     for p in (tmp_path / "out" / "checks").rglob("*.parquet"))
    assert ("checks", "c000") in written and len({w[1] for w in written}) >= 15


def test_a_threshold_on_the_boundary_judges_alike(spark, planted, tmp_path):
    """The statistic the local engine observed, as a threshold: both engines compute the
    same bits, so both pass it (a last-bit difference would fail one of them)."""
    folder, _ = planted
    probe = loads_policy(HEAD + "checks:\n"
                         "  - {id: m, kind: stat, stat: mean, field: amount, max: 1000}\n"
                         "  - {id: s, kind: stat, stat: stddev, field: amount, max: 1000}\n"
                         "  - {id: q, kind: stat, stat: p99, field: amount, max: 1000}\n")
    observed = {r["check"]: r["observed"] for r in replay(folder, probe).checks().to_pylist()}
    edge = loads_policy(HEAD + "checks:\n" + "".join(
        f"  - {{id: {c}, kind: stat, stat: {s}, field: amount, max: {observed[c]!r}}}\n"
        for c, s in (("m", "mean"), ("s", "stddev"), ("q", "p99"))))
    sv = replay_spark(folder, edge, spark=spark, out=tmp_path / "out")
    assert [(r["status"], r["observed"]) for r in sv.checks().to_pylist()] == \
        [("pass", observed[c]) for c in ("m", "s", "q")]


def test_a_snapshot_and_no_checks(spark, planted, tmp_path):
    from kqlab.sources.files import Snapshot
    from kqlab.validate.loading import load_sample

    folder, _ = planted
    sample = load_sample(folder)
    snap = Snapshot.create(tmp_path / "snap", topic="orders", framing="exact")
    snap.append(sample.records, sample.batches)
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: vol, kind: volume, window: 10m, min: 100}\n"
                          "  - {id: regions, kind: distinct, field: region, by: partition,"
                          " max: 2}\n")
    sv = replay_spark(snap.path, policy, spark=spark, out=tmp_path / "out")
    assert sv.checks().to_pylist() == replay(snap.path, policy).checks().to_pylist()
    plain = replay_spark(folder, loads_policy(HEAD), spark=spark, out=tmp_path / "plain")
    assert plain.checks().num_rows == 0 and not (tmp_path / "plain" / "checks").exists()


def test_cli_replay_engine_spark_json_carries_the_local_checks(spark, planted, tmp_path,
                                                              capsys):
    from kqlab.cli import main

    folder, base = planted
    policy = base / "p.yaml"  # baselines relative to the policy file, as locally
    policy.write_text(HEAD + CHECKS, encoding="utf-8")
    args = ["replay", str(folder), "--policy", str(policy), "--json"]
    # the test session is the active one: the CLI runs on it (no second JVM)
    code = main([*args, "--engine", "spark", "--out", str(tmp_path / "out")])
    spark_summary = json.loads(capsys.readouterr().out)
    local_code = main(args)
    local_summary = json.loads(capsys.readouterr().out)
    assert code == local_code == 1  # failing checks
    assert spark_summary["engine"] == "spark"
    assert spark_summary["checks"] == local_summary["checks"]
    assert any(c["check"] == "drift" and c["params"]["baseline_records"] == "600"
               for c in spark_summary["checks"])


def test_a_unit_that_fails_leaves_the_others_checks(spark, planted, tmp_path):
    """A partition that cannot be read is an error of its own (as for the verdicts): the
    checks are judged on the units replayed, as the local engine judges those partitions."""
    import shutil

    folder, base = planted
    root = tmp_path / "log"
    shutil.copytree(folder, root)
    bad = root / "orders-2" / "00000000000000000000.log"
    bad.unlink()
    bad.mkdir()  # a folder where the segment should be
    policy = loads_policy(HEAD + CHECKS)
    sv = replay_spark(root, policy, spark=spark, out=tmp_path / "out", base_dir=base)
    assert [(e["topic"], e["partition"]) for e in sv.errors] == [("orders", 2)]
    shutil.rmtree(root / "orders-2")
    local = replay(root, policy, base_dir=base, now=sv.now)
    assert sv.checks().to_pylist() == local.checks().to_pylist()
