"""The Spark engine around the verdicts: failed units, progress, examples, outputs, session,
CLI.  Real local SparkSession; parity itself is in test_parity.py."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kqlab.policy import loads_policy
from kqlab.spark import (
    SparkReplayError,
    SparkTerminalProgress,
    TooLargeToCollect,
    plan_units,
    replay_spark,
    spark_session,
)
from kqlab.validate import replay
from tests.spark.strategies import NOW, partition_log, write_log_dir

POLICY = loads_policy("kqlab: 1\nname: t\nvalue: {format: json}\nrules:\n"
                      "- {id: key, kind: key_required}\n"
                      "- {id: amount, kind: field_range, field: amount, min: 0, max: 1000}\n"
                      "- {id: trace, kind: header_required, name: trace, mode: observe}\n")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    import random

    rng = random.Random(5)
    return write_log_dir(tmp_path_factory.mktemp("log") / "log",
                         {p: partition_log(rng, 30) for p in range(4)})


def test_a_bad_segment_becomes_an_error_not_a_failed_job(spark, logdir, tmp_path):
    import shutil

    root = tmp_path / "log"
    shutil.copytree(logdir, root)
    bad = root / "orders-2" / "00000000000000000000.log"
    bad.unlink()
    bad.mkdir()  # a segment that cannot be read (a folder where the file should be)
    (root / "orders-2" / "00000000000000000010.log").write_bytes(b"\x00" * 7)
    sv = replay_spark(root, POLICY, spark=spark, now=NOW)
    assert [(e["topic"], e["partition"]) for e in sv.errors] == [("orders", 2)]
    assert sv.errors[0]["error"] in ("IsADirectoryError", "PermissionError", "OSError")
    assert any("could not be replayed" in n and "orders-2" in n for n in sv.notes)
    # every other partition was replayed, identically to the local engine
    got = sv.to_local()
    assert sorted(set(got.records.column("partition").to_pylist())) == [0, 1, 3]
    for p in (0, 1, 3):
        local = replay(root / f"orders-{p}", POLICY, now=NOW)
        mine = got.records.filter(got.records.column("partition").to_numpy() == p)
        assert mine.equals(local.records)


def test_every_unit_failing_fails_the_run_naming_paths_and_host(spark, logdir, tmp_path):
    """No unit readable (here: every segment a folder): not a 0-record summary but
    UnitsFailed, naming each unit's path and the host of the executor that failed it."""
    import shutil
    import socket

    from kqlab.spark.engine import UnitsFailed

    root = tmp_path / "log"
    shutil.copytree(logdir, root)
    for seg in root.glob("orders-*/*.log"):
        seg.unlink()
        seg.mkdir()
    with pytest.raises(UnitsFailed, match="none of the 4 unit") as err:
        replay_spark(root, POLICY, spark=spark, now=NOW)
    for p in range(4):
        assert f"orders-{p} ({root / f'orders-{p}'}, on {socket.gethostname()})" in \
            str(err.value)


def test_a_corrupt_parquet_part_becomes_an_error(spark, logdir, tmp_path):
    from kqlab.kafka.log import read_log
    from kqlab.sources.files import Snapshot

    snap = Snapshot.create(tmp_path / "snap", topic="orders", framing="exact")
    for p in range(4):
        log = read_log(logdir / f"orders-{p}")
        snap.append(log.records, log.batches)
    part = snap.part_files("records")[1]  # partition 1's records
    part.write_bytes(part.read_bytes()[:-200] + b"garbage!" * 25)
    sv = replay_spark(snap.path, POLICY, spark=spark, now=NOW)
    assert [e["partition"] for e in sv.errors] == [1]
    assert sv.summary()["records"] > 0 and sv.units == 4


def test_progress_reports_every_unit(spark, logdir):
    stream = io.StringIO()
    progress = SparkTerminalProgress(stream)
    seen = []

    def callback(done, total, failed, seconds):
        seen.append((done, total, failed))
        progress(done, total, failed, seconds)

    sv = replay_spark(logdir, POLICY, spark=spark, now=NOW, progress=callback)
    assert seen and seen[-1][0] == seen[-1][1] == sv.units == 4
    assert seen[-1][2] == 0
    progress.close()
    assert "4/4 units replayed" in stream.getvalue()


def test_notebook_progress_widget(spark, logdir):
    from kqlab.spark import SparkNotebookProgress

    bar = SparkNotebookProgress()
    replay_spark(logdir, POLICY, spark=spark, now=NOW, progress=bar)
    assert bar.spark is spark and bar.group and bar.group.startswith("kqlab-replay-")
    assert bar.bar.value == bar.bar.max == 4
    assert "4/4 units replayed" in bar.label.value


def test_examples_are_a_bounded_collect(spark, logdir):
    sv = replay_spark(logdir, POLICY, spark=spark, now=NOW)
    ex = sv.examples(limit=3)
    per_rule = {}
    for r in ex.column("example_rule").to_pylist():
        per_rule[r] = per_rule.get(r, 0) + 1
    assert per_rule and max(per_rule.values()) <= 3
    assert {"key", "amount"} <= set(per_rule)
    one = sv.examples("amount", limit=2)
    assert one.num_rows == 2 and set(one.column("example_rule").to_pylist()) == {"amount"}
    for failures in one.column("failures").to_pylist():
        assert any(f["rule"] == "amount" for f in failures)


def test_to_local_refuses_too_many_rows(spark, logdir):
    sv = replay_spark(logdir, POLICY, spark=spark, now=NOW)
    with pytest.raises(TooLargeToCollect, match="max_records"):
        sv.to_local(max_records=10)


def test_output_folder_is_not_overwritten_by_accident(spark, logdir, tmp_path):
    out = tmp_path / "verdicts"
    replay_spark(logdir, POLICY, spark=spark, now=NOW, out=out)
    with pytest.raises(SparkReplayError, match="overwrite=True"):
        replay_spark(logdir, POLICY, spark=spark, now=NOW, out=out)
    sv = replay_spark(logdir, POLICY, spark=spark, now=NOW, out=out, overwrite=True)
    assert sv.path == str(out.resolve())


def test_empty_source_and_bad_sources(spark, tmp_path):
    from kqlab.sources.files import Snapshot
    from kqlab.spark.units import UnitPlanError

    snap = Snapshot.create(tmp_path / "empty", topic="orders", framing="exact")
    sv = replay_spark(snap.path, POLICY, spark=spark, now=NOW)
    assert sv.units == 0 and sv.summary()["records"] == 0
    assert [r["failed_records"] for r in sv.rules.to_pylist()] == [0, 0, 0, 0]
    with pytest.raises(UnitPlanError, match="no such file or folder"):
        plan_units(tmp_path / "missing")
    (tmp_path / "junk").mkdir()
    with pytest.raises(Exception, match="neither"):
        plan_units(tmp_path / "junk")


def test_session_helper_reuses_and_refuses(spark):
    from kqlab.spark import SparkUnavailable
    from kqlab.spark.session import free_port

    assert spark_session() is spark  # the active session
    assert spark_session(spark=spark) is spark
    with pytest.raises(SparkUnavailable, match="already running"):
        spark_session("local[1]")
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert spark.conf.get("spark.driver.host") == "127.0.0.1"
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    port = free_port()
    assert 4040 <= port < 4240


def test_cli_replay_engine_spark(logdir, tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text("kqlab: 1\nname: t\nvalue: {format: json}\nrules:\n"
                      "- {id: key, kind: key_required}\n")
    out = tmp_path / "v"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", "kqlab.cli", "replay", str(logdir), "--policy", str(policy),
           "--now", str(NOW), "--json"]
    spark = subprocess.run([*cmd, "--engine", "spark", "--master", "local[1]", "--out",
                            str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert spark.returncode == 0, spark.stderr
    local = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    s, lo = json.loads(spark.stdout.splitlines()[-1]), json.loads(local.stdout.splitlines()[-1])
    assert s["engine"] == "spark" and s["units"] == 4 and s["out"] == str(out.resolve())
    for key in ("records", "batches", "outcomes", "by_rule", "by_error", "by_partition",
                "by_producer", "producer_actions", "notes"):
        assert s[key] == lo[key], key
    assert len(list((out / "records").glob("*.parquet"))) == 4


def test_schema_lookups_are_cached_per_worker(tmp_path):
    """Tasks unpickle their own copy of the job; the worker keeps one resolver per source."""
    import pickle

    from pyspark import cloudpickle  # what Spark ships task closures with

    from kqlab.serde.schemas import SchemaResolver, portable_resolver
    from kqlab.sources import demo_topics
    from kqlab.spark import executor
    from kqlab.spark.executor import Job, _cached_resolver, replay_unit
    from kqlab.spark.units import plan_units
    from kqlab.validate.replayer import with_implicit_rules

    executor._RESOLVERS.clear()

    d = demo_topics.generate(tmp_path / "demo", NOW)
    policy = demo_topics.load_policies()["orders"]
    resolver = portable_resolver(SchemaResolver.from_source(policy.value.schemas))
    job = Job(with_implicit_rules(policy), NOW, "exact", "kip-940", 5, 16384, resolver)
    first, second = (pickle.loads(cloudpickle.dumps(job)), pickle.loads(cloudpickle.dumps(job)))
    assert first.resolver is not second.resolver
    cached = _cached_resolver(first.resolver)
    assert _cached_resolver(second.resolver) is cached
    unit = plan_units(d.folders["orders-0"]).units[0]
    v1 = replay_unit(unit, first)
    looked_up = dict(cached._by_id)
    assert looked_up  # the first task fetched the schemas it met ...
    v2 = replay_unit(unit, second)
    assert cached._by_id == looked_up  # ... the second found them cached
    assert v1.records.equals(v2.records)


def test_in_memory_tables_are_refused_with_a_hint(spark):
    import pyarrow as pa

    from kqlab.spark.units import UnitPlanError

    with pytest.raises(UnitPlanError, match=r"Snapshot\.create"):
        replay_spark(pa.table({"x": [1]}), POLICY, spark=spark, now=NOW)
