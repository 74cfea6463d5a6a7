"""Redrive throughput on loopback: ``kqlab.dlq.redrive`` against a bare consume → produce relay.

One embedded Apache Kafka broker (``kqlab.embedded``, 127.0.0.1), one dead-letter topic of orders
dead-lettered by the gate (JSON values ~90 bytes, a ``trace`` header plus the gate's six
failure headers; 2 partitions), produced once.  Then, in the same run, each into its own
target topic:

* relay: the bare relay — assign the dead-letter topic, consume it to its end, produce every
  record unchanged (same partition, headers, timestamp) with the same idempotent producer
  settings, flush.  No parsing, no validation, no log.  Its consumer gets the fetch settings
  kqlab's reader uses (``fetch.queue.backoff.ms=20``, ``fetch.wait.max.ms=50``), so the
  comparison is of the work, not of librdkafka defaults.
* kqlab: :func:`kqlab.dlq.redrive` with ``execute=True``: read and parse the dead letters,
  re-validate every one against the amended policy (a replay, ``framing="single"``), send
  the 95 % that pass back to the source topic with the marker header, the redrive log
  written (intent, flush, done per 10k-record chunk, ``fsync``-ed), target offsets recorded.

Rates are dead letters handled per second, each over its whole call: the relay from creating
its clients to its last flush, the redrive from the call to its return (metadata, reading,
planning, the producer's set-up and the log included), after a warm-up dry run over a
100-record topic (module imports, as the relay's were loaded before it).
``moved_per_s`` counts only what the redrive sent.  The last line is one JSON object with both
rates and ``ratio`` (best kqlab round / best relay round; goal >= 0.5).  ``--quick``: 100k
dead letters, two rounds (< 60 s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kqlab.dlq import redrive
from kqlab.embedded import broker
from kqlab.gate import H_MESSAGE, H_OFFSET, H_PARTITION, H_POLICY, H_RULE, H_TOPIC
from kqlab.policy import loads_policy

PARTS = 2
NOW = int(time.time() * 1000)
PRODUCER = {"enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000}
POLICY = loads_policy("""kqlab: 1
name: orders-v2
value: {format: json}
rules:
- {id: trace, kind: header_required, name: trace}
- {id: amount-positive, kind: field_range, field: amount, min: 0.01}
- {id: currency, kind: field_in, field: currency, values: [EUR, USD, GBP]}
""")


def produce_dead_letters(bootstrap: str, n: int, topic: str = "bench.orders.dlq") -> None:
    """``n`` gate dead letters of ``orders``; every 20th still fails the amended policy."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                  "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000})
    for i in range(n):
        amount = -1 if i % 20 == 0 else 10 + i % 500
        value = (f'{{"order_id":"o-{i:09d}","amount":{amount},"currency":"EUR",'
                 f'"status":"NEW","ts":{NOW}}}').encode()
        headers = [("trace", b"t-%d" % i), (H_RULE, b"amount-positive"),
                   (H_MESSAGE, b"amount 0 is below 0.01"), (H_TOPIC, b"bench.orders"),
                   (H_PARTITION, str(i % PARTS).encode()), (H_OFFSET, str(i).encode()),
                   (H_POLICY, b"orders@0123456789ab")]
        while True:
            try:
                p.produce(topic, value, b"k-%d" % i, partition=i % PARTS,
                          timestamp=NOW - i, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def relay(bootstrap: str, n: int, target: str) -> float:
    """The bare relay; dead letters per second over the whole call (clients created,
    everything consumed, produced and flushed), as the redrive is timed."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    t0 = time.monotonic()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-relay",
                  "enable.auto.commit": False, "enable.partition.eof": False,
                  "fetch.queue.backoff.ms": 20, "fetch.wait.max.ms": 50})
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER,
                  "delivery.report.only.error": True})
    c.assign([TopicPartition("bench.orders.dlq", q, 0) for q in range(PARTS)])
    done = 0
    try:
        while done < n:
            msgs = c.consume(10_000, 0.2)
            for m in msgs:
                if m.error() is not None:
                    continue
                t, ts = m.timestamp()
                kw = {"timestamp": ts} if t else {}
                h = m.headers()
                if h:
                    kw["headers"] = h
                while True:
                    try:
                        p.produce(target, m.value(), m.key(), partition=m.partition(), **kw)
                        break
                    except BufferError:
                        p.poll(0.05)
                done += 1
        while p.flush(1.0):
            pass
        last = time.monotonic()
    finally:
        c.close()
    return done / (last - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100k dead letters, two rounds")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (100_000 if args.quick else 400_000)
    rounds = args.rounds or (2 if args.quick else 3)
    relays, kqlabs, moved = [], [], []
    summary: dict = {}
    with broker() as b, tempfile.TemporaryDirectory(prefix="kqlab-bench-redrive-") as tmp:
        b.create_topic("bench.orders.dlq", partitions=PARTS)
        t0 = time.perf_counter()
        produce_dead_letters(b.bootstrap, n)
        print(f"produced {n} dead letters in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        # warm-up: a dry run over a 100-record dead-letter topic loads what the first redrive
        # would (kqlab.validate, the JSON decoder, librdkafka's clients), as the relay's own
        # imports were loaded before it is timed
        b.create_topic("bench.warm.dlq", partitions=1)
        produce_dead_letters(b.bootstrap, 100, topic="bench.warm.dlq")
        redrive(b.bootstrap, "bench.warm.dlq", POLICY, to="bench.warm.dlq", now=NOW)
        for r in range(rounds):
            relay_target, target = f"bench.relay{r}", f"bench.orders{r}"
            b.create_topic(relay_target, partitions=PARTS)
            b.create_topic(target, partitions=PARTS)
            relays.append(relay(b.bootstrap, n, relay_target))
            t1 = time.monotonic()
            result = redrive(b.bootstrap, "bench.orders.dlq", POLICY, to=target, now=NOW,
                             execute=True, log=os.path.join(tmp, f"redrive{r}.jsonl"),
                             producer_config={"linger.ms": 5})
            elapsed = time.monotonic() - t1
            assert result.ok
            summary = result.summary()
            kqlabs.append(n / elapsed)
            moved.append(result.delivered / elapsed)
            print(f"round {r + 1}: relay {relays[-1]:,.0f} dead letters/s, kqlab redrive "
                  f"{kqlabs[-1]:,.0f} dead letters/s ({result.delivered:,} redriven, "
                  f"{summary['stay']['records']:,} stay)", file=sys.stderr)
            b.admin().delete_topics([relay_target, target])
    best_relay, best = max(relays), max(kqlabs)
    print(json.dumps({
        "benchmark": "redrive", "records": n, "partitions": PARTS, "rounds": rounds,
        "relay_records_per_s": round(best_relay), "kqlab_records_per_s": round(best),
        "kqlab_moved_per_s": round(max(moved)), "ratio": round(best / best_relay, 3),
        "redriven": summary.get("delivered"), "stayed": summary.get("stay", {}).get("by_rule"),
        "goal": {"ratio": 0.5}}))


if __name__ == "__main__":
    main()
