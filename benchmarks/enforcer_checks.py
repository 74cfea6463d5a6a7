"""The Structured Streaming enforcer with and without the policy's sample checks, on one
embedded Apache Kafka broker (127.0.0.1), in one run: what computing the checks costs.

Data: ``spark_kafka.py``'s clicks topic (4 partitions, JSON values ~110 bytes, 3 % invalid),
produced once (not timed).  Contenders, interleaved each round (the order alternates):

* **plain**: the demo clicks policy (three rules) — the enforcer as before;
* **checks**: the same policy with seven enforced checks on 1-minute windows (volume by
  partition, null_rate, duplicate_rate of ``event_id`` — every value distinct, the heaviest
  partial —, distinct pages, stat max, reject_rate, freshness by partition): each task also
  computes the partials, the driver merges, judges and saves the check state per
  micro-batch, and sends the alert rows.

Both run ``Trigger.AvailableNow`` on ``local[2]`` with ``maxOffsetsPerTrigger`` 200k (the
exported default).  The rate counts records from the first micro-batch to the last commit,
as ``spark_kafka.py`` does; CPU is the whole process tree's (this process, the JVM, the
Python workers, the broker) over the same run.  The last line is one JSON object with the
best rate of each, the ratio (goal: checks ≥ 0.8× plain), per-round ratios, CPU seconds and
the load average.  ``--quick``: 200k records, two rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spark_kafka import NOW, PARTS, TOPIC, enforcer_rate, produce

CHECKS = """checks:
- {id: vol, kind: volume, window: 1m, by: partition, min: 1}
- {id: users, kind: null_rate, field: user_id, window: 1m, max: 1}
- {id: dup-events, kind: duplicate_rate, of: event_id, window: 1m, max: 0}
- {id: pages, kind: distinct, field: page, window: 1m, min: 1}
- {id: newest, kind: stat, stat: max, field: ts, window: 1m, max: 100000000000000000}
- {id: refused, kind: reject_rate, window: 1m, max: 0.05}
- {id: fresh, kind: freshness, by: partition, max_age_ms: 3600000}
"""


def _tree_cpu() -> float:
    """CPU seconds of this process and every process under it (reaped children included)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        cpu[int(entry)] = sum(int(x) for x in fields[11:15]) / tick
    me = os.getpid()

    def under(pid: int) -> bool:
        while pid > 1:
            if pid == me:
                return True
            pid = parent.get(pid, 1)
        return False

    return sum(c for pid, c in cpu.items() if under(pid))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k records, two rounds")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (200_000 if args.quick else 1_000_000)
    rounds = args.rounds or (2 if args.quick else 3)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kqlab.embedded import broker
    from kqlab.policy import loads_policy
    from kqlab.sources.demo_topics import load_policies
    from kqlab.spark.kafka_source import register
    from kqlab.spark.session import spark_session

    plain = load_policies()["clicks"]
    checked = plain.with_checks(loads_policy(
        f"kqlab: 1\nname: c\nvalue: {{format: json}}\n{CHECKS}").checks)
    work = tempfile.mkdtemp(prefix="kqlab-bench-enforcer-checks-")
    rates: dict[str, list[float]] = {"plain": [], "checks": []}
    cpus: dict[str, list[float]] = {"plain": [], "checks": []}
    snap: dict = {}
    with broker() as b:
        b.create_topic(TOPIC, partitions=PARTS)
        b.create_topic("warmup", partitions=PARTS)
        b.create_topic(f"{TOPIC}.alerts", partitions=1)
        b.create_topic("warmup.alerts", partitions=1)
        produce(b.bootstrap, TOPIC, n)
        produce(b.bootstrap, "warmup", 2_000)
        spark = spark_session("local[2]", app_name="kqlab-bench-enforcer-checks")
        register(spark)
        for r in range(rounds):
            order = ("plain", "checks") if r % 2 == 0 else ("checks", "plain")
            for name in order:
                policy = checked if name == "checks" else plain
                for t in ("enf.valid", "enf.dlq"):
                    for s in (f".{name}{r}", f".w{name}{r}"):
                        b.create_topic(f"{t}{s}", partitions=PARTS)
                enforcer_rate(spark, b.bootstrap, "warmup", 2_000, f".w{name}{r}",
                              f"{work}/warmup-{name}{r}", policy=policy)
                c0 = _tree_cpu()
                rate, snap_r = enforcer_rate(spark, b.bootstrap, TOPIC, n, f".{name}{r}",
                                             f"{work}/{name}{r}", policy=policy)
                cpus[name].append(_tree_cpu() - c0)
                rates[name].append(rate)
                if name == "checks":
                    snap = snap_r
                print(f"round {r + 1}: {name} {rate:,.0f} records/s, "
                      f"{cpus[name][-1]:.1f} CPU s", file=sys.stderr)
        spark.stop()
    best = {k: max(v) for k, v in rates.items()}
    print(json.dumps({
        "benchmark": "enforcer_checks", "records": n, "partitions": PARTS, "rounds": rounds,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "plain_records_per_s": round(best["plain"]),
        "checks_records_per_s": round(best["checks"]),
        "ratio": round(best["checks"] / best["plain"], 3), "goal_ratio": 0.8,
        "ratio_per_round": [round(c / p, 3) for c, p in
                            zip(rates["checks"], rates["plain"], strict=True)],
        "cpu_s": {k: [round(x, 1) for x in v] for k, v in cpus.items()},
        "checks": len(checked.checks), "alerts": (snap.get("checks") or {}).get("alerts"),
        "now": NOW}))


if __name__ == "__main__":
    main()
