"""Spark driver memory: a 10M-record replay keeps the driver under 2 GB RSS.

The driver of a local session is two processes: this Python interpreter and the JVM (whose
heap is ``spark.driver.memory``, 1g here).  Both peaks (``VmHWM``) are read after the
replay and a summary; the records themselves live only in the tasks' Python workers and in
the verdict Parquet files.  Also prints records/s on ``local[*]`` (the peer here is the
local engine's own peak on a tenth of the data, for scale).  ``--quick``: 1M records.
The last line is one JSON object.
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
    ap.add_argument("--quick", action="store_true", help="1M records")
    ap.add_argument("--records", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (1_000_000 if args.quick else 10_000_000)
    root = data.log_dir(n, 8)
    run = data.in_subprocess("spark_run_cli", "local[*]", str(root), "1", "1")
    driver = run["driver_python_peak_mb"] + run["driver_jvm_peak_mb"]
    rate = run["records"] / run["seconds"]
    tenth = data.log_dir(n // 10, 8)
    local = data.in_subprocess("local_run", str(tenth), "1")
    print(f"records {run['records']:,} in 8 partitions on local[*]: {run['seconds']:.1f} s, "
          f"{rate:,.0f} records/s")
    print(f"  driver peak RSS: python {run['driver_python_peak_mb']:.0f} MB + JVM "
          f"{run['driver_jvm_peak_mb']:.0f} MB = {driver:.0f} MB (goal < 2048 MB)")
    print(f"  (the local engine holds {local['peak_mb']:.0f} MB for a tenth of the records)")
    print(orjson.dumps({
        "benchmark": "spark_memory", "records": run["records"],
        "kqlab_spark_records_per_s": round(rate),
        "kqlab_local_records_per_s": round(local["records"] / local["seconds"]),
        "driver_python_peak_mb": run["driver_python_peak_mb"],
        "driver_jvm_peak_mb": run["driver_jvm_peak_mb"], "driver_peak_mb": round(driver, 1),
        "local_engine_peak_mb_tenth": local["peak_mb"],
        "ratio": round(driver / 2048, 3), "goal": "driver_peak_mb < 2048"}).decode())


if __name__ == "__main__":
    main()
