"""The cost of the sample checks: a replay with one check of each of the 9 kinds against the
same replay without them, on the same log directory, in one run.

Data: ``_spark_data``'s log directory (8 partitions of JSON order records, ~150-byte values,
string keys, two headers, the seven-rule policy), 1 M records; a 100k-record directory of the
same records is the drift and schema-drift baseline (its path relative to the policy's
folder, as a policy file would name it).  The checks:

* ``volume`` per partition per second (min 1), ``freshness`` per partition,
* ``null_rate`` of ``customer`` per 10 s, ``duplicate_rate`` of the key per 10 s (every key
  distinct within a partition: the largest partial a check keeps),
* ``distinct`` currencies, ``stat`` p95 of ``amount`` per 10 s per partition,
* ``reject_rate`` of the ``amount`` rule, ``drift`` of ``amount`` (10 bins),
  ``schema_drift``.

Both sides run ``kqlab.validate.stream.replay_stream`` (what ``kqlab replay`` does for a log
directory: chunks read and decoded ahead while the previous one is judged), interleaved and
repeated; ``ratio`` is the best time with the checks over the best time without (goal
<= 1.25), ``cpu_ratio`` the least CPU seconds (both threads) with over the least without —
each side's minimum, not the CPU of its fastest run, as a load spike inflates a run's CPU
too (cache misses, a slower core) and the minimum is the side's own cost; ``*_median``
the same over the medians.  A baseline's plan (bins,
counts, shapes) is kept for the process once read, as a notebook's or the workbench's next
replay finds it; ``ratio_baseline_read`` / ``cpu_ratio_baseline_read`` time replays that
read and decode the baseline again (the plans forgotten first: a one-shot ``kqlab replay``).
The checks' results are verified before timing (every check judged, none not evaluable).
``--quick`` (under 60 s): the same 1 M records, four repetitions (eight without).  The last
line is one JSON object; it also carries ``check_cpu_s``, each check's CPU seconds (its
partials, on the judging thread or the read-ahead thread, their merge, its finish and
baseline, read again) from one more replay, and ``baseline`` the baselines' part of those.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import _spark_data as data

GOAL_RATIO = 1.25
CHECKS = """
checks:
- {id: volume, kind: volume, window: 1s, by: partition, min: 1}
- {id: fresh, kind: freshness, by: partition, max_age_ms: 7200000}
- {id: customer-null, kind: null_rate, field: customer, window: 10s, max: 0.01}
- {id: dup-keys, kind: duplicate_rate, of: key, window: 10s, by: partition, max: 0}
- {id: currencies, kind: distinct, field: currency, min: 3}
- {id: amount-p95, kind: stat, stat: p95, field: amount, window: 10s, by: partition, max: 10000}
- {id: amount-rejects, kind: reject_rate, rule: amount, max: 0.01}
- {id: amount-drift, kind: drift, field: amount, baseline: BASELINE, max_psi: 0.2}
- {id: shapes, kind: schema_drift, baseline: BASELINE}
"""


def policies(baseline: Path) -> tuple[object, object]:
    """The seven-rule policy, without and with the nine checks."""
    from kqlab.policy import loads_policy

    plain = loads_policy(data.POLICY)
    checked = loads_policy(data.POLICY + CHECKS.replace("BASELINE", baseline.name))
    assert len({c.kind for c in checked.checks}) == 9
    return plain, checked


def timed(root: Path, policy: object, base_dir: Path, *, cold: bool = False
          ) -> tuple[float, float, object]:
    """One streamed replay: wall seconds, CPU seconds (every thread), the verdicts.
    ``cold``: the baselines' plans kept by earlier replays are forgotten first (the replay
    reads and decodes its baseline, as a one-shot ``kqlab replay`` does)."""
    from kqlab.validate.sample_checks.baseline import clear_baseline_cache
    from kqlab.validate.stream import replay_stream

    if cold:
        clear_baseline_cache()
    wall, cpu = time.perf_counter(), time.process_time()
    v = replay_stream(root, policy, now=data.NOW, base_dir=base_dir)  # type: ignore[arg-type]
    v.summary()  # the verdicts are usable, checks included
    return time.perf_counter() - wall, time.process_time() - cpu, v


def profile(root: Path, policy: object, base_dir: Path) -> dict[str, float]:
    """One more replay with each check's CPU seconds on either thread: its partials (per
    chunk; those reading the records alone on either thread), the merge of its
    chunks' partials, its finish, its baseline (drift, schema drift: the first of them
    reads and decodes it for both); ``baseline``: the baselines' share of those."""
    import threading

    from kqlab.validate.sample_checks import compute, run

    spent: dict[str, float] = {}
    lock = threading.Lock()
    kinds = {c.kind: c.id for c in policy.checks}  # type: ignore[attr-defined]

    def timed_fn(fn: object, key: object) -> object:
        def wrapper(*args: object, **kwargs: object) -> object:
            t = time.thread_time()
            try:
                return fn(*args, **kwargs)  # type: ignore[operator]
            finally:
                name = key(args)  # type: ignore[operator]
                with lock:
                    spent[name] = spent.get(name, 0.0) + time.thread_time() - t
        return wrapper

    saved = {name: getattr(run, name) for name in
             ("partial_of", "merge_partials", "finish_check", "baseline_plan")}
    run.partial_of = timed_fn(saved["partial_of"], lambda a: a[0].id)  # type: ignore
    run.merge_partials = timed_fn(saved["merge_partials"], lambda a: kinds[a[0]])  # type: ignore
    run.finish_check = timed_fn(saved["finish_check"], lambda a: a[0].id)  # type: ignore
    run.baseline_plan = timed_fn(saved["baseline_plan"], lambda a: "baseline:" + a[0].id)  # type: ignore
    ahead = compute.partial_of  # what Replayer.prepare_checks calls on the reading thread
    compute.partial_of = timed_fn(ahead, lambda a: a[0].id)  # type: ignore
    try:
        timed(root, policy, base_dir, cold=True)
    finally:
        for name, fn in saved.items():
            setattr(run, name, fn)
        compute.partial_of = ahead  # type: ignore
    for name in [k for k in spent if k.startswith("baseline:")]:  # a check's, and apart
        spent["baseline"] = spent.get("baseline", 0.0) + spent[name]
        check = name.removeprefix("baseline:")
        spent[check] = spent.get(check, 0.0) + spent.pop(name)
    return {k: round(v, 3) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="four repetitions (under 60 s)")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--no-profile", action="store_true",
                    help="skip the replay that measures each check's CPU")
    args = ap.parse_args()
    reps = args.reps or (4 if args.quick else 8)
    root = data.log_dir(args.records)
    baseline = data.log_dir(100_000, topic="baseline")
    plain, checked = policies(baseline)
    base_dir = baseline.parent

    _, _, v = timed(root, checked, base_dir, cold=True)  # warm-up; every check is judged
    rows = v.checks().to_pylist()
    assert [r["status"] for r in rows if r["status"] == "not_evaluable"] == [], rows
    n = v.count()[0]
    print(f"{n:,} records, {len(rows)} checks: " + ", ".join(
        f"{r['check']} {r['status']}" for r in rows), file=sys.stderr)
    runs: dict[str, list[tuple[float, float]]] = {"without": [], "with": [], "cold": []}
    for _ in range(reps):
        for name, pol in (("without", plain), ("with", checked), ("cold", checked)):
            wall, cpu, _ = timed(root, pol, base_dir, cold=name == "cold")
            runs[name].append((wall, cpu))
            label = "with (baseline read)" if name == "cold" else f"{name} checks"
            print(f"  {label:20s}: {wall:6.2f} s wall, {cpu:6.2f} s CPU", file=sys.stderr)
    # each side's least wall and least CPU (and medians): a run hit by load is slower in both
    best = {k: (min(w for w, _ in v), min(c for _, c in v)) for k, v in runs.items()}
    median = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
              for k, v in runs.items()}
    per_check = {} if args.no_profile else profile(root, checked, base_dir)
    if per_check:
        print("  CPU seconds per check (both threads): " + ", ".join(
            f"{k} {v:.3f}" for k, v in per_check.items()), file=sys.stderr)
    ratio = best["with"][0] / best["without"][0]
    cpu_ratio = best["with"][1] / best["without"][1]
    cold_ratio = best["cold"][0] / best["without"][0]
    cold_cpu_ratio = best["cold"][1] / best["without"][1]
    print(f"replay of {n:,} records: {n / best['without'][0]:,.0f} records/s without checks, "
          f"{n / best['with'][0]:,.0f} with the 9 checks; ratio {ratio:.3f} "
          f"(CPU {cpu_ratio:.3f}; goal <= {GOAL_RATIO}); reading the baseline too "
          f"{cold_ratio:.3f} (CPU {cold_cpu_ratio:.3f})", file=sys.stderr)
    print(orjson.dumps({
        "benchmark": "sample_checks", "records": n, "checks": len(rows),
        "records_per_s_without": round(n / best["without"][0]),
        "records_per_s_with": round(n / best["with"][0]),
        "ratio": round(ratio, 3), "cpu_ratio": round(cpu_ratio, 3), "goal": GOAL_RATIO,
        "met": ratio <= GOAL_RATIO,
        "cpu_s_without": round(best["without"][1], 3), "cpu_s_with": round(best["with"][1], 3),
        "ratio_baseline_read": round(cold_ratio, 3),
        "cpu_ratio_baseline_read": round(cold_cpu_ratio, 3),
        "cpu_s_baseline_read": round(best["cold"][1], 3),
        "cpu_ratio_median": round(median["with"][1] / median["without"][1], 3),
        "cpu_ratio_baseline_read_median": round(median["cold"][1] / median["without"][1], 3),
        "reps": reps, "load": round(os.getloadavg()[0], 2),
        "check_cpu_s": per_check,
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }).decode())


if __name__ == "__main__":
    main()
