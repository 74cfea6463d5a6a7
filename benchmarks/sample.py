"""Live sampling throughput against an embedded Apache Kafka broker (same machine, loopback).

Starts a broker, produces N records (~200-byte values, keys, one header on every 10th record)
into a 3-partition topic (not timed), then times in one run over the same offsets:

* kqlab ``sample()`` of the whole topic (consumer, reconstructed framing);
* kqlab ``sample(..., exact_framing=True)`` (raw Fetch + kqlab's batch parser);
* a bare confluent-kafka ``assign()`` + ``consume()`` loop extracting the same fields (key,
  value, headers, timestamp, offset) into Python lists — no Arrow table.

Prints records/s and MB/s of each and both ratios against the bare loop (goal >= 0.8); the last
line is one JSON object.  ``--quick``: 100k records (< 60 s); default 1M.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kqlab.embedded import Broker
from kqlab.sources.kafka import sample

TOPIC = "bench-sample"
PARTITIONS = 3


def produce(bootstrap: str, n: int) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000, "log_level": 0})
    value = os.urandom(100).hex().encode()  # 200 bytes
    total = 0
    for i in range(n):
        key = b"key-%d" % i
        headers = [("trace", b"t%d" % i)] if i % 10 == 0 else None
        while True:
            try:
                p.produce(TOPIC, value, key, partition=i % PARTITIONS, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
        total += len(key) + len(value)
    if p.flush(120):
        raise SystemExit("produce did not finish")
    return total


def bare_loop(bootstrap: str, ranges: dict[int, tuple[int, int]]) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-bare",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50, "log_level": 0})
    keys, values, headers, tss, offsets = [], [], [], [], []
    todo = {p: e for p, (s, e) in ranges.items() if e > s}
    c.assign([TopicPartition(TOPIC, p, ranges[p][0]) for p in todo])
    deadline = time.monotonic() + 300
    while todo and time.monotonic() < deadline:
        for m in c.consume(10_000, 0.05):
            if m.error():
                continue
            p = m.partition()
            if p not in todo:
                continue
            keys.append(m.key())
            values.append(m.value())
            headers.append(m.headers())
            tss.append(m.timestamp()[1])
            off = m.offset()
            offsets.append(off)
            if off >= todo[p] - 1:
                del todo[p]
    c.close()
    return len(offsets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int)
    args = ap.parse_args()
    n = args.records or (100_000 if args.quick else 1_000_000)
    with Broker() as b:
        b.create_topic(TOPIC, partitions=PARTITIONS)
        t0 = time.perf_counter()
        nbytes = produce(b.bootstrap, n)
        print(f"produced {n:,} records in {time.perf_counter() - t0:.1f} s (not timed)")
        # warm-up (connections, imports) on a small slice
        sample(b.bootstrap, TOPIC, max_records=300, timeout_s=30)
        sample(b.bootstrap, TOPIC, max_records=300, timeout_s=30, exact_framing=True)

        t0 = time.perf_counter()
        plain = sample(b.bootstrap, TOPIC, timeout_s=30)
        t_plain = time.perf_counter() - t0
        t0 = time.perf_counter()
        exact = sample(b.bootstrap, TOPIC, timeout_s=30, exact_framing=True)
        t_exact = time.perf_counter() - t0
        ranges = {r.partition: (r.start, r.end) for r in plain.ranges}
        t0 = time.perf_counter()
        got = bare_loop(b.bootstrap, ranges)
        t_bare = time.perf_counter() - t0
    assert plain.records.num_rows == exact.records.num_rows == got == n, (
        plain.records.num_rows, exact.records.num_rows, got, n)
    mb = nbytes / 1e6
    rows = [("kqlab sample (reconstructed)", t_plain), ("kqlab sample (exact framing)", t_exact),
            ("bare confluent-kafka loop", t_bare)]
    for name, t in rows:
        print(f"{name:<30} {n / t:>12,.0f} records/s {mb / t:>8.1f} MB/s  ({t:.2f} s)")
    r_plain, r_exact = t_bare / t_plain, t_bare / t_exact
    print(f"ratio vs bare loop: reconstructed {r_plain:.2f}, exact {r_exact:.2f} (goal >= 0.80)")
    print(json.dumps({"benchmark": "sample", "records": n, "batches": exact.batches.num_rows,
                      "kqlab_records_per_s": round(n / t_plain),
                      "kqlab_exact_records_per_s": round(n / t_exact),
                      "peer_records_per_s": round(n / t_bare),
                      "ratio": round(r_plain, 3), "ratio_exact": round(r_exact, 3),
                      "goal_ratio": 0.8}))


if __name__ == "__main__":
    main()
