"""The Spark engine's verdicts equal the local engine's, on a real local SparkSession.

Parity is checked by :func:`kqlab.spark.parity_check` (every record verdict with every failure,
every batch verdict with its record errors, rule counts and the summary) on the demo topics
(log directory and snapshots, exact and rebuilt framing, Avro via a ``mock://`` registry that
only the driver holds), on hypothesis-generated log directories under generated policies of
every JSON rule kind, and on a snapshot whose batches cross Parquet file boundaries.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from kqlab.sources import demo_topics
from kqlab.sources.files import Snapshot
from kqlab.spark import parity_check, plan_units, replay_spark
from kqlab.validate import replay
from tests.spark.strategies import NOW, log_dirs, policies, write_log_dir

DEMO_NOW = 1_763_700_000_000


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    d = demo_topics.generate(root / "all", DEMO_NOW)
    by_topic = {}
    for topic in ("orders", "clicks"):
        folder = root / topic
        folder.mkdir()
        for name, src in d.folders.items():
            if name.rsplit("-", 1)[0] == topic:
                shutil.copytree(src, folder / name)
        by_topic[topic] = folder
    return d, by_topic, root


def _snapshot(root: Path, topic: str, parts: list[tuple[pa.Table, pa.Table | None]],
              framing: str = "exact") -> Snapshot:
    snap = Snapshot.create(root, topic=topic, framing=framing)
    for records, batches in parts:
        snap.append(records, batches)
    return snap


@pytest.mark.parametrize("topic", ["orders", "clicks"])
def test_demo_log_directory(spark, demo, topic):
    _, folders, _ = demo
    policy = demo_topics.load_policies()[topic]
    report = parity_check(folders[topic], policy, spark=spark, now=DEMO_NOW)
    report.raise_for_differences()
    assert report.records > 1000 and report.spark_verdicts.units == len(
        list(folders[topic].iterdir()))
    outcomes = report.spark_verdicts.by_outcome()
    assert outcomes["rejected"] > 0 and outcomes["collateral"] > 0  # defects were found


def test_demo_snapshot_exact_and_rebuilt_framing(spark, demo, tmp_path):
    from kqlab.kafka.log import read_log

    _, folders, _ = demo
    # one snapshot holding every orders partition, a part per partition and chunk
    parts = []
    for folder in sorted(folders["orders"].iterdir()):
        log = read_log(folder)
        parts.append((log.records, log.batches))
    snap = _snapshot(tmp_path / "orders-snap", "orders", parts)
    policy = demo_topics.load_policies()["orders"]
    for framing in ("exact", "single", "linger"):
        report = parity_check(snap.path, policy, spark=spark, now=DEMO_NOW, framing=framing)
        report.raise_for_differences()
        assert report.spark_verdicts.framing == (
            "exact" if framing == "exact" else f"reconstructed:{framing}")


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(log_dirs(), policies())
def test_generated_samples(spark, tmp_path_factory, logs, policy):
    root = write_log_dir(tmp_path_factory.mktemp("gen") / "log", logs)
    report = parity_check(root, policy, spark=spark, now=NOW)
    report.raise_for_differences()
    assert report.spark_verdicts.units == len(logs)


def test_generated_samples_cover_what_matters(spark, tmp_path):
    """One fixed draw shows the generated data reaches collateral, record errors, producer
    checks across batches and every profile's codes (so the property test is not vacuous)."""
    import random

    from kqlab.policy import loads_policy
    from tests.spark.strategies import RULES, partition_log

    rng = random.Random(11)
    root = write_log_dir(tmp_path / "log", {p: partition_log(rng, 40) for p in range(3)})
    policy = loads_policy("kqlab: 1\nname: all\nvalue: {format: json}\nrules:\n" +
                          "".join(f"- {r}\n" for r in RULES))
    report = parity_check(root, policy, spark=spark, now=NOW)
    report.raise_for_differences()
    v = replay(root, policy, now=NOW)
    assert "P" in set(v.batches.column("check").to_pylist())
    assert v.by_outcome()["collateral"] > 0
    # producer checks need batches the policy lets through: a lenient policy reaches them
    lenient = loads_policy("kqlab: 1\nname: lenient\nrules:\n"
                           "- {id: key, kind: key_required}\n")
    parity_check(root, lenient, spark=spark, now=NOW).raise_for_differences()
    checks = set(replay(root, lenient, now=NOW).batches.column("check").to_pylist())
    assert any(c and c.startswith("F") for c in checks), checks
    errors = [e for row in v.batches.column("record_errors").to_pylist() for e in row or []]
    assert len(errors) > 10
    assert all(r["failed_records"] >= 0 for r in v.rules.to_pylist())
    assert sum(r["failed_records"] > 0 for r in v.rules.to_pylist()) >= len(RULES) - 3


def test_batches_crossing_parquet_file_boundaries(spark, demo, tmp_path):
    """Records of one batch split over two part files, several units per job."""
    from kqlab.kafka.log import read_log
    from kqlab.kafka.table_checks import records_per_batch

    _, folders, _ = demo
    parts = []
    for folder in sorted(folders["clicks"].iterdir()):
        log = read_log(folder)
        n_r = records_per_batch(log.batches, log.records.num_rows)
        # cut the records in the middle of batch 5 (batches 0-5 go with the first part)
        cut = int(n_r[:5].sum()) + max(1, int(n_r[5]) // 2)
        assert 0 < cut < log.records.num_rows and n_r[5] > 1
        parts.append((log.records.slice(0, cut), log.batches.slice(0, 6)))
        parts.append((log.records.slice(cut), log.batches.slice(6)))
    snap = _snapshot(tmp_path / "clicks-snap", "clicks", parts)
    plan = plan_units(snap.path)
    assert len(plan.units) == 2 and all(len(u.records) == 2 for u in plan.units)
    policy = demo_topics.load_policies()["clicks"]
    report = parity_check(snap.path, policy, spark=spark, now=DEMO_NOW)
    report.raise_for_differences()
    # the split batch was judged as one batch: same verdict as the unsplit log
    whole = replay(folders["clicks"], policy, now=DEMO_NOW)
    assert report.spark_verdicts.count()[1] == whole.batches.num_rows


def test_spark_verdicts_summaries_match_local(spark, demo, tmp_path):
    _, folders, _ = demo
    policy = demo_topics.load_policies()["orders"]
    local = replay(folders["orders"], policy, now=DEMO_NOW)
    sv = replay_spark(folders["orders"], policy, spark=spark, now=DEMO_NOW,
                      out=tmp_path / "v")
    assert sv.by_time(3_600_000).equals(local.by_time(3_600_000))
    assert sv.by_producer().equals(local.by_producer())
    assert sv.by_partition().equals(local.by_partition())
    assert sv.by_error() == local.by_error()
    assert sv.by_action() == local.by_action()
    vetted = sv.vet(policy, source="demo", today="2026-11-21")
    assert vetted.provenance == local.vet(policy, source="demo",
                                          today="2026-11-21").provenance
    # the verdicts are Parquet files under out=, one per unit and table
    assert sorted(p.name for p in (tmp_path / "v").iterdir()) == ["batches", "records"]
    assert len(list((tmp_path / "v" / "records").glob("part-u*.parquet"))) == sv.units == 3
    assert sv.records.count() == local.records.num_rows
    assert sv.records.columns == local.records.column_names


def test_no_clock_given_both_engines_judge_by_the_samples_own(spark, demo, tmp_path):
    """A replay a week after sampling must not judge every timestamp against today: with no
    ``now``, the Spark engine reads the sample's clock as the local engine does (a log's last
    batches, a snapshot's batches, rebuilt batches for rebuilt framing), and they agree."""
    import time

    from kqlab.kafka.log import read_log

    _, folders, _ = demo
    policy = demo_topics.load_policies()["orders"]
    logs = [read_log(f) for f in sorted(folders["orders"].iterdir())]
    parts = [(log.records, log.batches) for log in logs]
    snap = _snapshot(tmp_path / "orders-snap", "orders", parts)
    for source, framing in ((folders["orders"], "exact"), (snap.path, "exact"),
                            (snap.path, "single"), (snap.path, "linger")):
        report = parity_check(source, policy, spark=spark, framing=framing)
        report.raise_for_differences()
        sv = report.spark_verdicts
        assert sv.clock == "sample", (source, framing)
        # the demo was written at DEMO_NOW (2025), its newest batch a little before it
        assert DEMO_NOW - 3_600_000 < sv.now <= DEMO_NOW < time.time() * 1000, (source, framing)
