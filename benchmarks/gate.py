"""Gate throughput on loopback: ``kqlab gate`` against a bare consume→produce relay.

One embedded Apache Kafka broker (``kqlab.embedded``, 127.0.0.1), one raw topic of clicks-like
records (JSON values ~110 bytes, a ``source`` header, no key; 3 % invalid), produced once.
Then, in the same run, each over its own consumer group and sink topics:

* relay: the bare at-least-once relay — consume a poll batch, produce every record unchanged
  (same partition, headers, timestamp) with the same idempotent producer settings, flush,
  commit.  No records table, no validation.  The honest baseline: what the delivery guarantee
  alone costs on this machine.
* kqlab: :class:`kqlab.gate.Gate` with the demo clicks policy (header allowlist, JSON valid,
  field in set; the ``decode:value`` rule): builds the Arrow records table per poll batch,
  judges it (vectorised), forwards or dead-letters with failure headers, flush, commit.

Rates count records from the first poll batch to the last commit (group joins excluded).
Broker and clients share the machine's cores.  The last line is one JSON object with both
rates and ``ratio`` (kqlab / relay; goal >= 0.6, and >= 100k records/s absolute).
``--quick``: 200k records, one round (< 60 s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kqlab.embedded import broker
from kqlab.gate import Gate, GateSettings, Route
from kqlab.sources.demo_topics import load_policies

PARTS = 2
# Kafka refuses a session timeout under group.min.session.timeout.ms (6000)
GROUP = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
         "fetch.max.bytes": "52428800", "max.partition.fetch.bytes": "10485760"}
PRODUCER = {"enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000,
            "delivery.report.only.error": True}
BATCH = 20_000
NOW = int(time.time() * 1000)


def click_value(rng: random.Random, i: int, now: int = NOW) -> bytes:
    """Record ``i``'s JSON click value (the demo's clicks policy judges it): every 50th is an
    untracked event type, every 100th (offset 1) truncated JSON."""
    kind = rng.choice(("view", "click", "scroll", "add_to_cart"))
    if i % 50 == 0:
        kind = "purchase"  # not a tracked event
    v = (f'{{"event_id":"e-{i:08d}","session":"s-{rng.getrandbits(40):010x}","user_id":null,'
         f'"type":"{kind}","page":"/p/{i % 40}","ts":{now}}}').encode()
    return v[:40] if i % 100 == 1 else v  # truncated JSON


def produce(bootstrap: str, n: int) -> None:
    from confluent_kafka import Producer

    rng = random.Random(7)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                  "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000})
    for i in range(n):
        src = b"web" if i % 3 else b"mobile"
        while True:
            try:
                p.produce("bench.raw", click_value(rng, i), None, partition=i % PARTS,
                          timestamp=NOW, headers=[("source", b"tv" if i % 200 == 3 else src)])
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def relay(bootstrap: str, n: int, suffix: str = "") -> float:
    """The bare relay; returns records/s from the first poll batch to the last commit."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-relay" + suffix,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "enable.auto.offset.store": False, **GROUP})
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    c.subscribe(["bench.raw"])
    done, first, last = 0, None, None
    try:
        while done < n:
            msgs = c.consume(BATCH, 0.2)
            if not msgs:
                continue
            if first is None:
                first = time.monotonic()
            last_off: dict[int, int] = {}
            for m in msgs:
                t, ts = m.timestamp()
                kw = {"timestamp": ts} if t else {}
                h = m.headers()
                if h:
                    kw["headers"] = h
                while True:
                    try:
                        p.produce("bench.relay" + suffix, m.value(), m.key(),
                                  partition=m.partition(), **kw)
                        break
                    except BufferError:
                        p.poll(0.05)
                last_off[m.partition()] = m.offset()
            while p.flush(1.0):
                pass
            c.commit(offsets=[TopicPartition("bench.raw", q, o + 1)
                              for q, o in last_off.items()], asynchronous=False)
            done += len(msgs)
            last = time.monotonic()
    finally:
        c.close()
    return done / (last - first)


def gate(bootstrap: str, n: int, suffix: str = "") -> tuple[float, dict]:
    policy = load_policies()["clicks"]
    g = Gate(policy, GateSettings(
        routes=(Route(source="bench.raw", sink="bench.valid" + suffix,
                      dlq="bench.dlq" + suffix),),
        bootstrap=bootstrap, group="bench-gate" + suffix, consumer=GROUP, batch_max=BATCH,
        log_interval=0, now=NOW))
    t = threading.Thread(target=g.run, daemon=True)
    t.start()
    while g.metrics.records < n:
        time.sleep(0.01)
    g.stop()
    t.join(30)
    m = g.metrics
    return m.records / (m.last_at - m.first_at), m.snapshot()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k records, one round")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (200_000 if args.quick else 1_000_000)
    rounds = args.rounds or (1 if args.quick else 3)
    with broker() as b:
        for topic in ("bench.raw", "bench.relay", "bench.valid", "bench.dlq"):
            b.create_topic(topic, partitions=PARTS)
        t0 = time.perf_counter()
        produce(b.bootstrap, n)
        print(f"produced {n} records in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        relays, gates, snap = [], [], {}
        for r in range(rounds):
            suffix = str(r) if r else ""  # each round: its own groups and sink topics
            if r:
                for topic in ("bench.relay", "bench.valid", "bench.dlq"):
                    b.create_topic(topic + suffix, partitions=PARTS)
            relays.append(relay(b.bootstrap, n, suffix))
            rate, snap = gate(b.bootstrap, n, suffix)
            gates.append(rate)
            print(f"round {r + 1}: relay {relays[-1]:,.0f} records/s, kqlab gate "
                  f"{gates[-1]:,.0f} records/s", file=sys.stderr)
    best_relay, best_gate = max(relays), max(gates)
    print(json.dumps({
        "benchmark": "gate", "records": n, "partitions": PARTS, "rounds": rounds,
        "relay_records_per_s": round(best_relay), "kqlab_records_per_s": round(best_gate),
        "ratio": round(best_gate / best_relay, 3),
        "forwarded": snap.get("forwarded"), "dead_lettered": snap.get("dead_lettered"),
        "by_rule": snap.get("by_rule"),
        "goal": {"ratio": 0.6, "kqlab_records_per_s": 100_000}}))


if __name__ == "__main__":
    main()
