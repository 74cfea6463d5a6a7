"""End-to-end replay of a log directory against the bare decode + parse loop on the same files.

A log directory of 8 partitions of order records (``_spark_data``'s records: ~150-byte values,
string keys, two headers, an idempotent producer, batches of 100, a small rate of defects;
lz4 or uncompressed) in two value formats:

* **json** — JSON values, ``_spark_data``'s seven-rule policy (key, two header rules, three
  field rules, an observed size rule);
* **avro** — the same orders as Confluent-framed Avro (schema id 1 from a schema folder),
  the same seven rules on the decoded fields.

In one run, interleaved and repeated (best of each), it times:

* **kqlab**: ``kqlab.validate.stream.replay_stream(log_dir, policy)`` — segments read and
  decoded chunk by chunk, every value decoded, the broker's checks, the rules, the verdict
  tables and their summary;
* **the loop**: kqlab's own segment decoder (``kqlab.kafka.log.iter_log_tables``) and one
  ``orjson.loads`` (json) or ``fastavro.schemaless_reader`` (avro, header skipped) per value —
  the least any replay has to do, with no rules, no verdicts and no Arrow columns.

``ratio`` is kqlab's rate over the loop's (goal >= 1.0).  Then the memory check: a fresh
interpreter replays a 10M-record directory (``--quick``: the timed one) with ``replay_stream``
and reports its peak RSS (``resource.getrusage``; goal <= 2 GB); the loop's peak is printed
beside it.  ``--quick`` (under 60 s): 800k JSON and 400k Avro records, two repetitions.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import _spark_data as data

NOW = data.NOW
SCHEMA_ID = 1
AVRO_SCHEMA = {
    "type": "record", "name": "Order", "namespace": "bench",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string"},
        {"name": "items", "type": "int"},
        {"name": "note", "type": "string"},
    ],
}
GOAL_RATIO = 1.0
GOAL_PEAK_MB = 2048


def policy_text(fmt: str, schemas: Path | None = None) -> str:
    """``_spark_data``'s seven rules with the value format of ``fmt``."""
    text = data.POLICY
    if fmt == "avro":
        assert schemas is not None
        text = text.replace("value: {format: json}",
                            "value: {format: avro, wire: confluent, schemas: {path: "
                            f"'{schemas.as_posix()}'}}}}")
    return text


def _partition_bytes(records: int, codec: str, fmt: str, seed: int = 3) -> bytes:
    """One partition of order batches (``_spark_data``'s records, any codec and format)."""
    import fastavro

    from kqlab.kafka.builder import BatchBuilder, Record
    from kqlab.kafka.compression import Codec

    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    header = b"\0" + struct.pack(">i", SCHEMA_ID)
    rng = random.Random(seed)
    out = []
    offset = seq = 0
    ts = NOW - 3_600_000
    per_batch = 100
    while offset < records:
        k = min(per_batch, records - offset)
        b = BatchBuilder(codec=Codec.LZ4 if codec == "lz4" else Codec.NONE, base_offset=offset,
                         base_timestamp=ts, producer_id=7, producer_epoch=0,
                         base_sequence=seq)
        for i in range(k):
            key, doc, headers = data.order_fields(rng, offset + i)
            if fmt == "json":
                value = orjson.dumps(doc)
            else:
                buf = io.BytesIO()
                doc["amount"] = float(doc["amount"])
                fastavro.schemaless_writer(buf, parsed, doc)
                value = header + buf.getvalue()
            b.append(Record(key=key, value=value, headers=headers, timestamp=ts + i))
        out.append(b.build())
        offset += k
        seq += k
        ts += 40
    return b"".join(out)


def log_dir(records: int, fmt: str, codec: str, partitions: int = 8) -> Path:
    """A cached log directory of ``records`` records (one partition generated, copied)."""
    if fmt == "json" and codec == "lz4":
        return data.log_dir(records, partitions)  # the spark benchmarks' very files
    per = records // partitions
    root = Path(tempfile.gettempdir()) / f"kqlab-bench-e2e-{fmt}-{codec}-{per}x{partitions}"
    done = root / ".complete"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    blob = _partition_bytes(per, codec, fmt)
    for p in range(partitions):
        folder = root / "data" / f"orders-{p}"
        folder.mkdir(parents=True)
        (folder / "00000000000000000000.log").write_bytes(blob)
    if fmt == "avro":
        (root / "schemas").mkdir()
        (root / "schemas" / f"{SCHEMA_ID}.avsc").write_bytes(orjson.dumps(AVRO_SCHEMA))
    done.touch()
    print(f"  generated {per * partitions:,} {fmt}/{codec} records ({partitions} x "
          f"{len(blob) / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return root


def _source(root: Path) -> Path:
    return root / "data" if (root / "data").is_dir() else root


def _policy(root: Path, fmt: str):
    from kqlab.policy import loads_policy

    return loads_policy(policy_text(fmt, root / "schemas" if fmt == "avro" else None))


def run_kqlab(root: Path, fmt: str) -> tuple[int, dict]:
    """``replay_stream`` over the directory; (records, outcomes)."""
    from kqlab.validate.stream import replay_stream

    v = replay_stream(_source(root), _policy(root, fmt), now=NOW)
    v.summary()
    return v.records.num_rows, v.by_outcome()


def run_loop(root: Path, fmt: str) -> int:
    """kqlab's segment decoder and one parse per value, nothing else."""
    from kqlab.kafka.log import iter_log_tables, partition_dirs

    n = 0
    if fmt == "json":
        loads = orjson.loads
        for part in partition_dirs(_source(root)):
            for chunk in iter_log_tables(part):
                for v in chunk.records.column("value").to_pylist():
                    if v is not None:
                        loads(v)
                    n += 1
        return n
    import fastavro

    parsed = fastavro.parse_schema(orjson.loads((root / "schemas" / "1.avsc").read_bytes()))
    reader = fastavro.schemaless_reader
    for part in partition_dirs(_source(root)):
        for chunk in iter_log_tables(part):
            for v in chunk.records.column("value").to_pylist():
                if v is not None:
                    bio = io.BytesIO(v)
                    bio.seek(5)
                    reader(bio, parsed)
                n += 1
    return n


def timed(fn, *args) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of every thread of this process, result)."""
    c, t = time.process_time(), time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, time.process_time() - c, out


def compare(root: Path, fmt: str, reps: int) -> dict:
    """Best seconds of kqlab and the loop, interleaved (a load spike hits both); also the CPU
    seconds each used (kqlab reads ahead and parses JSON on worker threads: its wall time
    gains on the loop only while cores are free)."""
    tk = tl = ck = cl = float("inf")
    records = outcomes = None
    for _ in range(reps):
        dt, cpu, (records, outcomes) = timed(run_kqlab, root, fmt)  # type: ignore[misc]
        tk, ck = min(tk, dt), min(ck, cpu)
        dt, cpu, looped = timed(run_loop, root, fmt)
        tl, cl = min(tl, dt), min(cl, cpu)
        if looped != records:
            raise AssertionError(f"the loop read {looped} records, kqlab replayed {records}")
    assert isinstance(records, int)
    return {"records": records, "outcomes": outcomes, "kqlab_records_per_s": round(records / tk),
            "loop_records_per_s": round(records / tl), "ratio": round(tl / tk, 3),
            "kqlab_cpu_s": round(ck, 2), "loop_cpu_s": round(cl, 2),
            "cpu_ratio": round(cl / ck, 3)}


def peak_rss(root: Path, fmt: str, what: str) -> dict:
    """Peak RSS (MB) of a fresh interpreter running ``what`` (kqlab or loop) over ``root``.

    The interpreter is started by ``/bin/sh``, not forked from this process: Linux keeps a
    forked child's RSS high-water mark across ``exec``, so ``resource.getrusage`` in a child
    of this (large) process would report this process's size.  The child's ``VmHWM`` is
    read too (``peak_mb_vmhwm``) as a cross-check.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    code = (f"import sys, resource, time, orjson; sys.path.insert(0, {here!r}); "
            f"import replay_e2e as b; from pathlib import Path; t = time.perf_counter(); "
            f"r = b.run_{what}(Path({str(root)!r}), {fmt!r}); dt = time.perf_counter() - t; "
            "n = r[0] if isinstance(r, tuple) else r; "
            "hwm = [int(x.split()[1]) for x in open('/proc/self/status') "
            "if x.startswith('VmHWM:')][0] / 1024; "
            "print(orjson.dumps({'records': n, 'seconds': dt, 'peak_mb': "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "
            "'peak_mb_vmhwm': hwm}).decode())")
    # sh forks the interpreter from its own small image (the trailing command keeps it so)
    proc = subprocess.run(["/bin/sh", "-c", '"$0" -c "$1"; exit $?', sys.executable, code],
                          capture_output=True, text=True, timeout=7200)
    if proc.returncode:
        raise RuntimeError(f"{what} on {root} failed:\n{proc.stderr[-3000:]}")
    return orjson.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="800k JSON + 400k Avro records, two repetitions, no 10M run")
    ap.add_argument("--records", type=int, default=None, help="JSON records (Avro: half)")
    ap.add_argument("--big", type=int, default=10_000_000,
                    help="records of the memory run (not with --quick)")
    ap.add_argument("--codec", choices=("lz4", "none"), default="lz4")
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (800_000 if args.quick else 2_000_000)
    reps = args.reps or (2 if args.quick else 3)
    out: dict = {"benchmark": "replay_e2e", "codec": args.codec, "partitions": 8}
    for fmt, count in (("json", n), ("avro", n // 2)):
        root = log_dir(count, fmt, args.codec)
        run_kqlab(log_dir(16_000, fmt, args.codec), fmt)  # first-use costs, both sides
        run_loop(log_dir(16_000, fmt, args.codec), fmt)
        r = compare(root, fmt, reps)
        out[fmt] = r
        print(f"{fmt}: {r['records']:,} records in 8 partitions ({args.codec}), "
              f"{r['outcomes']}")
        print(f"  kqlab replay_stream (decode + 7 rules + broker checks + verdicts): "
              f"{r['kqlab_records_per_s']:>10,} records/s")
        print(f"  bare loop (segment decoder + one parse per value):               "
              f"{r['loop_records_per_s']:>10,} records/s")
        print(f"  ratio {r['ratio']:.2f} (goal >= {GOAL_RATIO}); CPU seconds: kqlab "
              f"{r['kqlab_cpu_s']:.2f} (all threads), loop {r['loop_cpu_s']:.2f}")
    big = n if args.quick else args.big
    root = log_dir(big, "json", args.codec)
    mem = peak_rss(root, "json", "kqlab")
    loop = peak_rss(root, "json", "loop")
    print(f"memory: replay_stream of {mem['records']:,} JSON records in a fresh interpreter: "
          f"peak RSS {mem['peak_mb']:.0f} MB (goal <= {GOAL_PEAK_MB}), "
          f"{mem['records'] / mem['seconds']:,.0f} records/s; the loop's peak "
          f"{loop['peak_mb']:.0f} MB")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    out.update({
        "kqlab_records_per_s": out["json"]["kqlab_records_per_s"],
        "loop_records_per_s": out["json"]["loop_records_per_s"],
        "ratio": out["json"]["ratio"], "avro_ratio": out["avro"]["ratio"],
        "memory_records": mem["records"], "peak_rss_mb": round(mem["peak_mb"], 1),
        "peak_vmhwm_mb": round(mem["peak_mb_vmhwm"], 1),
        "loop_peak_rss_mb": round(loop["peak_mb"], 1),
        "memory_records_per_s": round(mem["records"] / mem["seconds"]),
        "goal_ratio": GOAL_RATIO, "goal_peak_rss_mb": GOAL_PEAK_MB,
        "load_average": round(os.getloadavg()[0], 2)})
    for fmt in ("json", "avro"):
        out[fmt].pop("outcomes")
    print(orjson.dumps(out).decode())


if __name__ == "__main__":
    main()
