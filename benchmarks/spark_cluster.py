"""Spark on a cluster: the same replay on a 2-worker standalone cluster vs ``local[2]``, and
over Spark Connect vs classic, ratios printed in one run.

A new script rather than ``spark_scaling.py`` extended: that one measures core scaling inside
one JVM (``local[1]`` vs ``local[2]``) in under a minute; this one starts a cluster (master,
two workers of one core each, a Connect server: :mod:`kqlab.spark.standalone`, ~20-30 s) and
ships kqlab to the executors as a packed environment (the workers' own Python has no kqlab),
so it costs a different order of time and needs ``venv-pack``.

Records: ``_spark_data``'s log directory (the ``spark_*`` benchmarks' JSON orders, 8
partitions, seven rules), so the figures compare with ``spark_scaling.py``'s.  Each mode runs
in a fresh interpreter: a warm-up replay (JVM, executors, the archive unpacked on each
executor), then the best of the repetitions.  Modes: ``local[2]``; ``classic`` (a driver on
``spark://``, 2 executors x 1 core); ``connect`` (``sc://``, the Connect server's 2 executors
x 1 core).  The verdict counts must be equal in every mode.

``--master spark://... --remote sc://... --archive kqlab-env.tar.gz`` reuses a running cluster
(its executors must offer 2 cores to each application).  ``--quick``: 200k records, best of
two.  The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _spark_data as data  # noqa: E402

CACHE = HERE.parent / ".cache" / "spark-env"
#: executor cores each cluster application gets (APP_CONF: 2 executors x 1 core)
CLUSTER_CORES = 2


def child(mode: str, target: str, root: str, reps: int, archive: str) -> dict[str, Any]:
    """One mode's replays in this (fresh) interpreter: warm-up, then best of ``reps``."""
    from kqlab.spark import replay_spark, spark_session
    from kqlab.spark.standalone import APP_CONF

    if mode == "local":
        spark = spark_session(target, config={"spark.driver.memory": "1g"})
    elif mode == "classic":
        spark = spark_session(target, config={**APP_CONF, "spark.driver.memory": "1g"},
                              environment=archive)
    else:
        spark = spark_session(remote=target, environment=archive)
    pol = data.policy()
    out = Path(tempfile.mkdtemp(prefix=f"kqlab-bench-cluster-{mode}-"))
    warm = Path(tempfile.gettempdir()) / "kqlab-bench-warm"
    if not warm.exists():
        shutil.copytree(data.log_dir(20_000, 2, topic="warm"), warm)
    t = time.perf_counter()
    replay_spark(warm, pol, spark=spark, now=data.NOW, out=out / "warm").by_outcome()
    warm_s = time.perf_counter() - t
    best, sv, outcomes = float("inf"), None, None
    for i in range(reps):
        t = time.perf_counter()
        sv = replay_spark(Path(root), pol, spark=spark, now=data.NOW, out=out / f"r{i}")
        outcomes = sv.by_outcome()
        best = min(best, time.perf_counter() - t)
    spark.stop()
    shutil.rmtree(out, ignore_errors=True)
    assert sv is not None
    return {"seconds": best, "records": sv.n_records, "outcomes": outcomes,
            "warmup_s": round(warm_s, 2)}


def run_mode(mode: str, target: str, root: Path, reps: int, archive: Path,
             env: dict[str, str]) -> dict[str, Any]:
    args = [sys.executable, str(Path(__file__).resolve()), "--child", mode, target, str(root),
            str(reps), str(archive)]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"the {mode} replay failed:\n{proc.stderr[-3000:]}")
    return orjson.loads(proc.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace, root: Path) -> tuple[dict[str, dict[str, Any]],
                                                            dict[str, float]]:
    """Every mode's result, and the cluster's start-up timings (empty: reused)."""
    from kqlab.spark.standalone import Cluster, packed_environment, spark_home

    reps = 2 if args.quick else 3
    results: dict[str, dict[str, Any]] = {}
    results["local"] = run_mode("local", "local[2]", root, reps, Path(), dict(os.environ))
    if args.master:
        archive = Path(args.archive) if args.archive else packed_environment(CACHE)
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(spark_home())}
        results["classic"] = run_mode("classic", args.master, root, reps, archive, env)
        if args.remote:
            results["connect"] = run_mode("connect", args.remote, root, reps, archive, env)
        return results, {}
    with Cluster(cache=CACHE).start(2, connect=True) as cluster:
        results["classic"] = run_mode("classic", cluster.master, root, reps, cluster.archive,
                                      cluster.env())
        results["connect"] = run_mode("connect", cluster.remote, root, reps, cluster.archive,
                                      cluster.env())
        return results, dict(cluster.timings)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k records, best of two")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--master", help="reuse this spark:// master (default: start a cluster)")
    ap.add_argument("--remote", help="reuse this sc:// Connect server (with --master)")
    ap.add_argument("--archive", help="the packed kqlab environment (with --master)")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, target, root, reps, archive = args.child
        print(orjson.dumps(child(mode, target, root, int(reps), archive)).decode())
        return
    if args.remote and not args.master:
        ap.error("--remote needs --master too (the classic side of the comparison)")
    t0 = time.perf_counter()
    n = args.records or (200_000 if args.quick else 2_000_000)
    root = data.log_dir(n, 8)
    res, timings = measure(args, root)
    base = res["local"]
    for name, r in res.items():
        if r["outcomes"] != base["outcomes"] or r["records"] != base["records"]:
            raise SystemExit(f"{name} verdicts differ from local[2]'s: {r['outcomes']} vs "
                             f"{base['outcomes']}")
    rate = {name: r["records"] / r["seconds"] for name, r in res.items()}
    print(f"records {base['records']:,} in 8 partitions, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")
    if timings:
        print(f"  cluster start-up {timings.get('total_s')} s (pack {timings.get('pack_s')} s)")
    labels = {"local": "local[2]", "classic": "cluster 2x1 core, classic",
              "connect": "cluster 2x1 core, Connect"}
    for name, r in res.items():
        print(f"  {labels[name]:28s} {r['seconds']:7.2f} s  {rate[name]:10,.0f} records/s  "
              f"{rate[name] / CLUSTER_CORES:9,.0f} /core  (warm-up {r['warmup_s']} s)")
    ratios: dict[str, float] = {}
    if "classic" in rate:
        ratios["cluster_vs_local2"] = round(rate["classic"] / rate["local"], 3)
        print(f"  cluster / local[2]  {ratios['cluster_vs_local2']:.2f}x")
    if "connect" in rate:
        ratios["connect_vs_classic"] = round(rate["connect"] / rate["classic"], 3)
        print(f"  Connect / classic   {ratios['connect_vs_classic']:.2f}x")
    print(orjson.dumps({
        "benchmark": "spark_cluster", "records": base["records"], "partitions": 8,
        "cores": os.cpu_count(), "load": round(os.getloadavg()[0], 2),
        "records_per_s": {k: round(v) for k, v in rate.items()},
        "records_per_s_per_core": {k: round(v / CLUSTER_CORES) for k, v in rate.items()},
        **ratios, "startup_s": timings, "wall_s": round(time.perf_counter() - t0, 1)}).decode())


if __name__ == "__main__":
    main()
