"""The static HTML report of a Spark replay: the same report as the local replay's (figures,
top failures, summaries, masking), built from Spark aggregations without collecting record
verdicts; and `kqlab report --engine spark`."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kqlab.policy.model import Sensitive
from kqlab.reporting import report, top_failures
from kqlab.sources import demo_topics
from kqlab.spark import replay_spark
from kqlab.validate import replay
from tests.spark.test_parity import DEMO_NOW, demo  # noqa: F401  (module fixture)


@pytest.fixture(scope="module")
def orders(spark, demo):  # noqa: F811
    _, folders, _ = demo
    policy = demo_topics.load_policies()["orders"]
    local = replay(folders["orders"], policy, now=DEMO_NOW)
    sv = replay_spark(folders["orders"], policy, spark=spark, now=DEMO_NOW)
    return folders["orders"], policy, local, sv


def test_spark_report_equals_the_local_report(orders):
    _, policy, local, sv = orders
    want = report(local, policy)
    got = report(sv, policy)
    assert got == want
    assert "Why records were rejected" in got and "Where in each partition" in got


def test_top_failures_on_spark_with_masking(orders):
    _, policy, local, sv = orders
    for p in (policy, dataclasses.replace(policy, sensitive=Sensitive(fields=("amount",)))):
        want, got = top_failures(local, p, limit=20), top_failures(sv, p, limit=20)
        assert got.to_pylist() == want.to_pylist()
        assert got.num_rows > 3
    masked = top_failures(sv, dataclasses.replace(policy, sensitive=Sensitive(
        fields=("amount",))), limit=50).to_pylist()
    amounts = [r["message"] for r in masked if r["rule"] == "amount-range"]
    assert amounts and all(not re.search(r"got -?\d", m) for m in amounts), amounts


def test_report_collects_no_record_verdicts(orders, monkeypatch):
    """Every view of a Spark report is drawn from Spark aggregations, the partition × offset
    view included (it used to be drawn from collected verdicts, and left out above a limit):
    neither the verdicts nor their per-record reasons reach the driver."""
    _, policy, _, sv = orders

    def refuse(*_args, **_kwargs):
        raise AssertionError("the report collected record verdicts")

    monkeypatch.setattr(type(sv), "to_local", refuse)
    monkeypatch.setattr(type(sv), "record_reasons", refuse)
    html = report(sv, policy)
    assert "Where in each partition" in html and "Why records were rejected" in html
    assert 'id="kqlab-offsets"' in html and "left out" not in html


def test_cli_report_engine_spark(orders, tmp_path):
    folder, _, local, _ = orders
    out = tmp_path / "r.html"
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "kqlab"), "report", str(folder), "--policy",
         "kqlab/sources/demo_topics_orders_policy.yaml", "--now", str(DEMO_NOW),
         "--engine", "spark", "--master", "local[1]", "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=300)
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    # the exit status agrees with the verdict (1: FAIL)
    assert proc.returncode == (0 if doc["verdict"]["passed"] else 1), proc.stderr[-3000:]
    assert doc["report"] == str(out) and doc["bytes"] == out.stat().st_size
    assert doc["summary"]["outcomes"] == local.by_outcome()
    assert doc["summary"]["engine"] == "spark"
