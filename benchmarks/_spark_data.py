"""Shared data for the ``spark_*`` benchmarks (and ``replay_e2e``'s orders): a log directory
of one topic's partitions.

Each partition holds the same realistic records (JSON order values of ~150 bytes, string
keys, ``trace``/``source`` headers, an idempotent producer, lz4 batches of ~100 records,
a small rate of defects), so every engine and core count replays identical bytes.  One
partition is generated, the others are copies (producer state is per partition, so copies
are independent partitions to the validator).  Generated once per size into the temporary
folder and reused.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NOW = 1_763_700_000_000
POLICY = """
kqlab: 1
name: bench-orders
broker:
  version: '4.0'
  configs: {message.timestamp.before.max.ms: '86400000', message.timestamp.after.max.ms: '3600000'}
value: {format: json}
rules:
- {id: key, kind: key_required}
- {id: trace, kind: header_required, name: trace}
- {id: source, kind: header_values, name: source, values: [web, app, pos]}
- {id: customer, kind: field_not_null, field: customer}
- {id: amount, kind: field_range, field: amount, min: 0, max: 10000}
- {id: currency, kind: field_in, field: currency, values: [EUR, USD, GBP]}
- {id: size, kind: value_size, max: 400, mode: observe}
"""


def order_fields(rng: random.Random, index: int
                 ) -> tuple[bytes | None, dict, tuple[tuple[str, bytes], ...]]:
    """Order ``index``'s key, value document and headers (one in a thousand has a negative
    amount, one in a thousand no customer, one in two thousand no key)."""
    doc = {"order_id": f"o-{index:09d}", "customer": f"c-{rng.randrange(10**6)}",
           "amount": round(rng.uniform(1, 500), 2),
           "currency": rng.choice(["EUR", "USD", "GBP"]), "items": rng.randrange(1, 9),
           "note": "x" * rng.randrange(10, 60)}
    if rng.random() < 0.001:
        doc["amount"] = -1
    if rng.random() < 0.001:
        doc["customer"] = None
    headers = (("trace", b"00-%032x-01" % rng.getrandbits(128)),
               ("source", rng.choice([b"web", b"app", b"pos"])))
    key = None if rng.random() < 0.0005 else b"o-%09d" % index
    return key, doc, headers


def _partition_bytes(records: int, seed: int = 3, per_batch: int = 100) -> bytes:
    from kqlab.kafka.builder import BatchBuilder, Record
    from kqlab.kafka.compression import Codec

    rng = random.Random(seed)
    out = []
    offset = seq = 0
    ts = NOW - 3_600_000
    while offset < records:
        k = min(per_batch, records - offset)
        b = BatchBuilder(codec=Codec.LZ4, base_offset=offset, base_timestamp=ts,
                         producer_id=7, producer_epoch=0, base_sequence=seq)
        for i in range(k):
            key, doc, headers = order_fields(rng, offset + i)
            b.append(Record(key=key, value=orjson.dumps(doc), headers=headers,
                            timestamp=ts + i))
        out.append(b.build())
        offset += k
        seq += k
        ts += 40
    return b"".join(out)


def log_dir(records: int, partitions: int = 8, topic: str = "orders") -> Path:
    """The log directory for ``records`` records over ``partitions`` (cached)."""
    per = records // partitions
    root = Path(tempfile.gettempdir()) / f"kqlab-bench-{topic}-{per}x{partitions}"
    done = root / ".complete"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    data = _partition_bytes(per)
    for p in range(partitions):
        folder = root / f"{topic}-{p}"
        folder.mkdir(parents=True)
        (folder / "00000000000000000000.log").write_bytes(data)
    done.touch()
    print(f"  generated {per * partitions:,} records ({partitions} x {len(data) / 1e6:.0f} MB)"
          f" in {time.perf_counter() - t:.1f} s under {root}", file=sys.stderr)
    return root


def policy():
    from kqlab.policy import loads_policy

    return loads_policy(POLICY)


def rss_mb(pid: int) -> float:
    """Resident set size of process ``pid`` (Linux ``/proc``), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size (``VmHWM``) of process ``pid``, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def spark_run(master: str, root: Path, reps: int, *, memory: bool = False) -> dict:
    """Replay ``root`` on a fresh Spark session with ``master``; best seconds of ``reps``
    (after a warm-up replay that starts the JVM and the Python workers)."""
    from kqlab.spark import replay_spark, spark_session

    spark = spark_session(master, config={"spark.driver.memory": "1g"})
    pol = policy()
    warm = Path(tempfile.gettempdir()) / "kqlab-bench-warm"
    if not warm.exists():
        shutil.copytree(log_dir(20_000, 2, topic="warm"), warm)
    replay_spark(warm, pol, spark=spark, now=NOW).by_outcome()  # JVM and workers warm
    best = float("inf")
    sv = None
    for _ in range(reps):
        t = time.perf_counter()
        sv = replay_spark(root, pol, spark=spark, now=NOW)
        outcomes = sv.by_outcome()  # a summary: the verdicts are usable, not only written
        best = min(best, time.perf_counter() - t)
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    out = {"seconds": best, "records": sv.n_records, "outcomes": outcomes,
           "driver_python_peak_mb": round(peak_rss_mb(os.getpid()), 1),
           "driver_jvm_peak_mb": round(peak_rss_mb(jvm), 1)}
    spark.stop()
    return out


def in_subprocess(fn: str, *args: str) -> dict:
    """Run ``_spark_data.<fn>(*args)`` in a fresh interpreter (one SparkContext per process,
    and a clean peak-RSS reading); returns its JSON result."""
    import subprocess

    code = (f"import sys, orjson; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
            f"import _spark_data as d; r = d.{fn}(*{args!r}); print(orjson.dumps(r).decode())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode:
        raise RuntimeError(f"{fn}{args} failed:\n{proc.stderr[-3000:]}")
    return orjson.loads(proc.stdout.strip().splitlines()[-1])


def spark_run_cli(master: str, root: str, reps: str, memory: str = "0") -> dict:
    return spark_run(master, Path(root), int(reps), memory=memory == "1")


def local_run(root: str, reps: str) -> dict:
    """The local engine on the same directory (best of ``reps``), in this process."""
    from kqlab.validate import replay

    pol = policy()
    best = float("inf")
    for _ in range(int(reps)):
        t = time.perf_counter()
        v = replay(Path(root), pol, now=NOW)
        outcomes = v.by_outcome()
        best = min(best, time.perf_counter() - t)
    return {"seconds": best, "records": v.records.num_rows, "outcomes": outcomes,
            "peak_mb": round(peak_rss_mb(os.getpid()), 1)}
