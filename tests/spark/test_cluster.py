"""kqlab on a real Spark standalone cluster (two workers whose Python has no kqlab) and over
Spark Connect: the runs issue 28 found broken, now tests (tests/spark/cluster.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark.cluster import Cluster

pytestmark = pytest.mark.cluster
NOW = 1_763_700_000_000
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        c.start()
        print(f"\ncluster start-up: {c.timings}")
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    from kqlab.sources.demo import demo_policy_path, write_demo_segment

    base = tmp_path_factory.mktemp("demo")
    return write_demo_segment(base, NOW), str(demo_policy_path())


def _replay(cluster: Cluster, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = cluster.env(PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "kqlab.cli", "replay", *args, "--now",
                           str(NOW), "--json"], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=400)


def test_relative_path_replay_on_the_cluster_equals_local(cluster, demo, tmp_path):
    """The issue's first run: a relative source on a standalone master, kqlab shipped as a
    packed environment; the summary equals the local engine's (352 records, not 0)."""
    folder, policy = demo
    rel = os.path.relpath(folder, folder.parent)
    spark = _replay(cluster, [rel, "--policy", policy, "--engine", "spark", "--master",
                              cluster.master, "--ship-env", str(cluster.archive),
                              "--out", str(tmp_path / "v")], folder.parent)
    assert spark.returncode == 0, spark.stderr[-3000:]
    local = _replay(cluster, [rel, "--policy", policy], folder.parent)
    s, lo = (json.loads(r.stdout.splitlines()[-1]) for r in (spark, local))
    assert s["engine"] == "spark" and s["records"] == lo["records"] == 352
    for key in ("outcomes", "by_rule", "by_error", "by_partition", "notes"):
        assert s[key] == lo[key], key


def test_replay_over_spark_connect_equals_local(cluster, demo, tmp_path):
    """The issue's second run: replay_spark over Connect (CLI --remote), kqlab shipped as a
    session artifact to executors whose Python has none."""
    folder, policy = demo
    spark = _replay(cluster, [str(folder), "--policy", policy, "--engine", "spark",
                              "--remote", cluster.remote, "--ship-env", str(cluster.archive),
                              "--out", str(tmp_path / "v")], tmp_path)
    assert spark.returncode == 0, spark.stderr[-3000:]
    local = _replay(cluster, [str(folder), "--policy", policy], tmp_path)
    s, lo = (json.loads(r.stdout.splitlines()[-1]) for r in (spark, local))
    assert s["records"] == lo["records"] == 352
    for key in ("outcomes", "by_rule", "by_error", "by_partition", "notes"):
        assert s[key] == lo[key], key


def test_workers_without_the_shipped_environment_fail(cluster, demo, tmp_path):
    """The workers' own Python has no kqlab: without --ship-env the run must fail, so the
    tests above prove the archive is what made them work."""
    folder, policy = demo
    run = _replay(cluster, [str(folder), "--policy", policy, "--engine", "spark",
                            "--master", cluster.master, "--out", str(tmp_path / "v")],
                  tmp_path)
    assert run.returncode != 0
    assert "No module named" in run.stderr
