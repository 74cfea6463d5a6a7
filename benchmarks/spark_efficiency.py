"""Spark efficiency: one Spark core (``local[1]``) against the local engine on the same data.

The same log directory (8 partitions of JSON order records, lz4 batches, an idempotent
producer, seven rules: key, two header rules, three field rules, a size rule; see
``_spark_data.py``) is replayed end to end — segments read and decoded, values parsed,
rules and broker checks, verdict tables — by the local engine in one process and by Spark
with one task slot (plus a summary, so the verdicts are usable).  Each engine runs in its
own interpreter; best of the repetitions.  Goal: Spark at ≥ 70 % of the local engine's
records/s.  ``--quick``: 400k records, best of two.  The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import os
import sys

import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _spark_data as data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="400k records, best of two")
    ap.add_argument("--records", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (400_000 if args.quick else 2_000_000)
    reps = "2" if args.quick else "3"
    root = data.log_dir(n, 8)
    local = data.in_subprocess("local_run", str(root), reps)
    spark = data.in_subprocess("spark_run_cli", "local[1]", str(root), reps)
    assert local["outcomes"] == spark["outcomes"], (local["outcomes"], spark["outcomes"])
    local_rate = local["records"] / local["seconds"]
    spark_rate = spark["records"] / spark["seconds"]
    ratio = spark_rate / local_rate
    print(f"records {local['records']:,} in 8 partitions")
    print(f"  local engine      {local['seconds']:7.2f} s  {local_rate:12,.0f} records/s")
    print(f"  spark local[1]    {spark['seconds']:7.2f} s  {spark_rate:12,.0f} records/s")
    print(f"  efficiency {ratio:.2f} (goal >= 0.70)")
    print(orjson.dumps({
        "benchmark": "spark_efficiency", "records": local["records"], "partitions": 8,
        "kqlab_spark_local1_records_per_s": round(spark_rate),
        "kqlab_local_records_per_s": round(local_rate), "ratio": round(ratio, 3),
        "goal_ratio": 0.7}).decode())


if __name__ == "__main__":
    main()
