"""Kafka on Spark: the ``kqlab-kafka`` read and the Structured Streaming enforcer, each against
its single-process peer, on one embedded Apache Kafka broker (127.0.0.1), in one run.

Data: a 4-partition topic of clicks-like records (JSON values ~110 bytes, a ``source`` header,
no key; 3 % invalid; lz4 batches), produced once (not timed).  Then:

* **read**: the whole topic read on Spark ``local[2]`` (``spark.read.format("kqlab-kafka")``,
  every column materialised by the ``noop`` sink) against the single-process sampler,
  ``kqlab.sources.kafka.sample`` — its default (the consumer: what ``kqlab sample`` runs) and
  ``exact_framing=True`` (raw Fetch + kqlab's parser, the framing the Spark read also has).
  Goal: Spark ≥ 1.6× the sampler.
* **enforce**: the Structured Streaming enforcer (``kqlab.spark.enforcer.Enforcer``,
  ``local[2]``, ``Trigger.AvailableNow``) against the validating gate (``kqlab.gate.Gate``,
  as in ``benchmarks/gate.py``) with the demo clicks policy, each to its own sink and
  dead-letter topics.  Rates count records from the first micro-batch / poll batch to the
  last commit (session start, worker start-up and group joins excluded; a small warm-up topic
  is enforced first so the Python workers are up).  Goal: enforcer ≥ 0.5× the gate.

Broker, Spark and the peers share the machine's cores; the Spark session is started once.
Each round runs every read contender ``--read-reps`` times (3), interleaved, and keeps the best.
The last line is one JSON object with every rate and both ratios (best over the rounds) and the
load average, and each round's ratios (they swing with the machine's load).  ``--quick``:
50k records, one round.

Spark's own Kafka connector (``format("kafka")``, resolved by ``make setup``) runs beside
kqlab-kafka in the same session: the read and the enforcer (``connector: spark``), so the
JSON line also has kqlab-kafka / connector ratios for both.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gate import click_value  # the gate benchmark's data: the two measure the same records

PARTS = 4
TOPIC = "bench.kafka"
NOW = int(time.time() * 1000)
# Kafka refuses a session timeout under group.min.session.timeout.ms (6000)
GROUP = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
         "fetch.max.bytes": "52428800", "max.partition.fetch.bytes": "10485760"}


def produce(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    rng = random.Random(7)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                  "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000})
    for i in range(n):
        src = b"web" if i % 3 else b"mobile"
        while True:
            try:
                p.produce(topic, click_value(rng, i, NOW), None, partition=i % PARTS, timestamp=NOW,
                          headers=[("source", b"tv" if i % 200 == 3 else src)])
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def read_rates(spark: object, bootstrap: str, n: int, reps: int = 1) -> dict[str, float]:
    """records/s of the sampler (both ways) and of the Spark read, same topic: the best of
    ``reps`` runs of each, interleaved (a read of 200k records lasts about a second, so one
    run of each swings with what else the machine runs)."""
    from kqlab.sources.kafka import sample

    def spark_read(fmt: str = "kqlab-kafka") -> float:
        r = (spark.read.format(fmt)  # type: ignore[attr-defined]
             .option("kafka.bootstrap.servers", bootstrap).option("subscribe", TOPIC))
        # headers: kqlab-kafka always reads them, the connector when asked
        df = (r.option("includeHeaders", "true") if fmt == "kafka" else r).load()
        t0 = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        return n / (time.perf_counter() - t0)

    def sampler(exact: bool) -> float:
        t0 = time.perf_counter()
        got = sample(bootstrap, TOPIC, exact_framing=exact).records.num_rows
        assert got == n, (got, n)
        return got / (time.perf_counter() - t0)

    spark_read()  # warm-up: the Python workers start, kqlab is imported
    spark_read("kafka")  # ... and the connector's classes are loaded
    out = {"sampler": 0.0, "sampler_exact": 0.0, "spark": 0.0, "connector": 0.0}
    for _ in range(reps):
        out["sampler"] = max(out["sampler"], sampler(False))
        out["sampler_exact"] = max(out["sampler_exact"], sampler(True))
        out["spark"] = max(out["spark"], spark_read())
        out["connector"] = max(out["connector"], spark_read("kafka"))
    return out


def gate_rate(bootstrap: str, n: int, suffix: str) -> float:
    from kqlab.gate import Gate, GateSettings, Route
    from kqlab.sources.demo_topics import load_policies

    g = Gate(load_policies()["clicks"], GateSettings(
        routes=(Route(source=TOPIC, sink=f"gate.valid{suffix}", dlq=f"gate.dlq{suffix}"),),
        bootstrap=bootstrap, group=f"bench-gate{suffix}", consumer=GROUP, batch_max=20_000,
        log_interval=0, now=NOW, final_log=False))
    t = threading.Thread(target=g.run, daemon=True)
    t.start()
    while g.metrics.records < n:
        time.sleep(0.01)
    g.stop()
    t.join(30)
    m = g.metrics
    assert m.first_at is not None and m.last_at is not None
    return m.records / (m.last_at - m.first_at)


def enforcer_rate(spark: object, bootstrap: str, topic: str, n: int, suffix: str,
                  checkpoint: str, policy: object = None, connector: str = "python"
                  ) -> tuple[float, dict]:
    """The enforcer's rate on ``topic`` (``policy``: the demo clicks policy by default;
    ``connector``: kqlab-kafka + confluent-kafka, or Spark's own Kafka source and sink)."""
    from kqlab.sources.demo_topics import load_policies
    from kqlab.spark.enforcer import Enforcer, EnforcerSettings
    from kqlab.spark.enforcer_config import Route

    starts: list[float] = []
    e = Enforcer(spark, policy or load_policies()["clicks"], EnforcerSettings(
        routes=(Route(topic, f"enf.valid{suffix}", f"enf.dlq{suffix}"),),
        bootstrap=bootstrap, checkpoint=checkpoint, now=NOW, available_now=True,
        source={"maxOffsetsPerTrigger": str(max(n, 1))}, connector=connector))
    ends: list[float] = []
    e.on_batch.append(lambda line: ends.append(time.monotonic()))
    original = e._on_micro_batch

    def timed(df: object, batch_id: int) -> None:
        starts.append(time.monotonic())
        original(df, batch_id)

    e._on_micro_batch = timed  # type: ignore[method-assign]
    snap = e.run()
    assert snap["records"] == n, (snap["records"], n)
    return n / (ends[-1] - starts[0]), snap


def native_enforcer_rate(spark: object, b: object, n: int, r: int, work: str) -> float:
    """The enforcer with ``connector: spark`` (Spark's Kafka source and sink), after a
    warm-up of its own (the connector's classes loaded)."""
    for suffix in (f".cw{r}", f".c{r}"):
        for t in ("enf.valid", "enf.dlq"):
            b.create_topic(f"{t}{suffix}", partitions=PARTS)  # type: ignore[attr-defined]
    bootstrap = b.bootstrap  # type: ignore[attr-defined]
    enforcer_rate(spark, bootstrap, "warmup", 2_000, f".cw{r}", f"{work}/cwarmup{r}",
                  connector="spark")
    return enforcer_rate(spark, bootstrap, TOPIC, n, f".c{r}", f"{work}/native{r}",
                         connector="spark")[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="50k records, one round (under a minute)")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--read-reps", type=int, default=3,
                    help="runs of each read contender per round (best kept)")
    args = ap.parse_args()
    n = args.records or (50_000 if args.quick else 1_000_000)
    rounds = args.rounds or (1 if args.quick else 3)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kqlab.embedded import broker
    from kqlab.spark.kafka_source import register
    from kqlab.spark.session import spark_session

    work = tempfile.mkdtemp(prefix="kqlab-bench-spark-kafka-")
    with broker() as b:
        topics = [TOPIC, "warmup", *(f"{k}.{s}{r}" for r in range(rounds)
                                     for k in ("gate", "enf") for s in ("valid", "dlq"))]
        for t in topics:
            b.create_topic(t, partitions=PARTS)
        t0 = time.perf_counter()
        produce(b.bootstrap, TOPIC, n)
        produce(b.bootstrap, "warmup", 2_000)
        print(f"produced {n:,} records in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        spark = spark_session("local[2]", app_name="kqlab-bench-spark-kafka")
        register(spark)
        reads, gates, enfs, natives, snap = [], [], [], [], {}
        for r in range(rounds):
            reads.append(read_rates(spark, b.bootstrap, n, args.read_reps))
            print(f"round {r + 1}: read — sampler {reads[-1]['sampler']:,.0f}, exact sampler "
                  f"{reads[-1]['sampler_exact']:,.0f}, spark local[2] "
                  f"{reads[-1]['spark']:,.0f}, Spark's connector local[2] "
                  f"{reads[-1]['connector']:,.0f} records/s", file=sys.stderr)
            for t in ("enf.valid", "enf.dlq"):  # the warm-up's output is not measured
                b.create_topic(f"{t}.w{r}", partitions=PARTS)
            enforcer_rate(spark, b.bootstrap, "warmup", 2_000, f".w{r}",
                          f"{work}/warmup{r}")  # Python workers up, kqlab imported
            gates.append(gate_rate(b.bootstrap, n, str(r)))
            rate, snap = enforcer_rate(spark, b.bootstrap, TOPIC, n, str(r),
                                       f"{work}/enforcer{r}")
            enfs.append(rate)
            natives.append(native_enforcer_rate(spark, b, n, r, work))
            print(f"round {r + 1}: enforce — gate {gates[-1]:,.0f}, spark enforcer "
                  f"{enfs[-1]:,.0f}, on Spark's connector {natives[-1]:,.0f} records/s",
                  file=sys.stderr)
        spark.stop()
    best = {k: max(x[k] for x in reads) for k in reads[0]}
    print(json.dumps({
        "benchmark": "spark_kafka", "records": n, "partitions": PARTS, "rounds": rounds,
        "read_reps": args.read_reps, "load_avg_1m": round(os.getloadavg()[0], 2),
        "read": {"sampler_records_per_s": round(best["sampler"]),
                 "sampler_exact_records_per_s": round(best["sampler_exact"]),
                 "spark_local2_records_per_s": round(best["spark"]),
                 "ratio": round(best["spark"] / best["sampler"], 3),
                 "ratio_vs_exact_sampler": round(best["spark"] / best["sampler_exact"], 3),
                 "connector_local2_records_per_s": round(best["connector"]),
                 "kqlab_kafka_vs_connector": round(best["spark"] / best["connector"], 3),
                 "goal_ratio": 1.6,
                 "ratio_per_round": [round(x["spark"] / x["sampler"], 3) for x in reads]},
        "enforce": {"gate_records_per_s": round(max(gates)),
                    "enforcer_local2_records_per_s": round(max(enfs)),
                    "ratio": round(max(enfs) / max(gates), 3), "goal_ratio": 0.5,
                    "enforcer_connector_local2_records_per_s": round(max(natives)),
                    "kqlab_kafka_vs_connector": round(max(enfs) / max(natives), 3),
                    "ratio_per_round": [round(e / g, 3) for e, g in zip(enfs, gates, strict=True)],
                    "forwarded": snap.get("forwarded"),
                    "dead_lettered": snap.get("dead_lettered"),
                    "by_rule": snap.get("by_rule")}}))


if __name__ == "__main__":
    main()
