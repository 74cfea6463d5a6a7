"""Decode-to-Arrow throughput: kqlab against kafka-python on the same segment bytes.

Builds one segment per codec (uncompressed, lz4, zstd) of >= 200k records with ~1 KB JSON-like
values in batches of ~16 KB (the Java producer's default batch.size), then times, on the same
in-memory bytes and with CRC checks on both sides:

* kqlab: ``decode_records`` -> the records + batches Arrow tables;
* kafka-python: ``MemoryRecords`` batch by batch, ``validate_crc()``, and every record's offset,
  timestamp, key, value and headers touched.

Prints records/s for both and the ratio per codec; the last line is one JSON object.
``--quick`` uses 50k records and one repetition (done well under 60 s).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kqlab.kafka.batch import decode_records
from kqlab.kafka.builder import BatchBuilder, Record
from kqlab.kafka.compression import Codec
from kqlab.kafka.records_parser import IMPLEMENTATION

WORDS = ("order customer status paid shipped amount currency EUR warehouse berlin parcel "
         "priority express standard discount coupon item sku quantity price total tax").split()


def make_segment(n_records: int, codec: Codec, value_size: int, batch_bytes: int,
                 seed: int = 1) -> bytes:
    """A segment's bytes: consecutive batches as a broker stores them."""
    rng = random.Random(seed)
    per_batch = max(1, batch_bytes // (value_size + 40))
    out = []
    offset = 0
    ts = 1_763_700_000_000
    seq = 0
    while offset < n_records:
        n = min(per_batch, n_records - offset)
        b = BatchBuilder(codec=codec, base_offset=offset, base_timestamp=ts, producer_id=42,
                         producer_epoch=0, base_sequence=seq, partition_leader_epoch=1)
        for i in range(n):
            words = []
            size = 0
            while size < value_size:
                w = rng.choice(WORDS)
                words.append(w)
                size += len(w) + 1
            value = f'{{"id":{offset + i},"text":"{" ".join(words)}"}}'[:value_size]
            b.append(Record(key=f"key-{rng.randrange(100000)}".encode(), value=value.encode(),
                            headers=(("trace", b"%016x" % rng.getrandbits(64)),),
                            timestamp=ts + i))
        out.append(b.build())
        offset += n
        seq += n
        ts += 10
    return b"".join(out)


def run_kqlab(data: bytes) -> int:
    d = decode_records(data, topic="bench", partition=0)
    if not all(d.batches["crc_valid"].to_pylist()):
        raise AssertionError("kqlab: CRC mismatch")
    return d.records.num_rows


def run_kafka_python(data: bytes) -> int:
    from kafka.record.memory_records import MemoryRecords

    mr = MemoryRecords(data)
    n = 0
    while mr.has_next():
        batch = mr.next_batch()
        if not batch.validate_crc():
            raise AssertionError("kafka-python: CRC mismatch")
        for r in batch:
            _ = (r.offset, r.timestamp, r.key, r.value, r.headers)
            n += 1
    return n


def best_rate(fn, data: bytes, n: int, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        got = fn(data)
        dt = time.perf_counter() - t0
        if got != n:
            raise AssertionError(f"{fn.__name__} decoded {got} records, expected {n}")
        best = min(best, dt)
    return n / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="50k records, one repetition")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--value-size", type=int, default=1000)
    ap.add_argument("--batch-bytes", type=int, default=16384)
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (50_000 if args.quick else 200_000)
    reps = args.reps or (1 if args.quick else 3)
    figures: dict[str, dict[str, float]] = {}
    print(f"kqlab records parser: {IMPLEMENTATION}; {n} records of ~{args.value_size} B in "
          f"~{args.batch_bytes} B batches; best of {reps}")
    warm = make_segment(2000, Codec.LZ4, args.value_size, args.batch_bytes)
    run_kqlab(warm)  # first-use costs (pyarrow's lazy imports, kernels) on both sides
    run_kafka_python(warm)
    for codec in (Codec.NONE, Codec.LZ4, Codec.ZSTD):
        data = make_segment(n, codec, args.value_size, args.batch_bytes)
        k = best_rate(run_kqlab, data, n, reps)
        kp = best_rate(run_kafka_python, data, n, reps)
        figures[codec.label] = {"kqlab": round(k), "kafka_python": round(kp),
                                "ratio": round(k / kp, 2), "segment_mb": round(len(data) / 1e6, 1)}
        print(f"{codec.label:>5}: kqlab {k:>12,.0f} rec/s   kafka-python {kp:>10,.0f} rec/s   "
              f"ratio {k / kp:5.1f}x   ({len(data) / 1e6:.1f} MB)")
    ratios = [f["ratio"] for f in figures.values()]
    summary = {
        "benchmark": "decode", "records": n, "implementation": IMPLEMENTATION,
        "kqlab_records_per_s": round(min(f["kqlab"] for f in figures.values())),
        "kafka_python_records_per_s": round(min(f["kafka_python"] for f in figures.values())),
        "ratio": min(ratios), "by_codec": figures,
    }
    print(orjson.dumps(summary).decode())


if __name__ == "__main__":
    main()
