"""Spark scaling: the same replay on ``local[1]`` and ``local[2]`` (this machine's two cores).

≥ 5M records in 8 partitions (see ``_spark_data.py``), replayed end to end on a fresh Spark
session per core count (best of the repetitions, after a warm-up that starts the workers).
Goal: local[2] ≥ 1.7× local[1].  ``--quick``: 1M records, best of two.  The last line
is one JSON object.
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
    ap.add_argument("--quick", action="store_true", help="1M records, best of two")
    ap.add_argument("--records", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (1_000_000 if args.quick else 5_000_000)
    reps = "2" if args.quick else "3"
    root = data.log_dir(n, 8)
    one = data.in_subprocess("spark_run_cli", "local[1]", str(root), reps)
    two = data.in_subprocess("spark_run_cli", "local[2]", str(root), reps)
    assert one["outcomes"] == two["outcomes"]
    r1, r2 = one["records"] / one["seconds"], two["records"] / two["seconds"]
    print(f"records {one['records']:,} in 8 partitions, {os.cpu_count()} cores")
    print(f"  spark local[1]  {one['seconds']:7.2f} s  {r1:12,.0f} records/s")
    print(f"  spark local[2]  {two['seconds']:7.2f} s  {r2:12,.0f} records/s")
    print(f"  scaling {r2 / r1:.2f}x (goal >= 1.7x)")
    print(orjson.dumps({
        "benchmark": "spark_scaling", "records": one["records"], "partitions": 8,
        "cores": os.cpu_count(), "kqlab_local1_records_per_s": round(r1),
        "kqlab_local2_records_per_s": round(r2), "ratio": round(r2 / r1, 3),
        "goal_ratio": 1.7}).decode())


if __name__ == "__main__":
    main()
