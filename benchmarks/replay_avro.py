"""Avro replay: decoding Confluent-framed Avro + five field rules + the broker's checks, against
bare fastavro decoding of the same values in the same run.

Registers an 8-field order schema in a ``mock://`` Schema Registry (confluent-kafka's own
client), builds one partition of Confluent-framed Avro values (magic byte, schema id, payload)
and decodes the segment once (not timed).  Then times:

* kqlab: ``Replayer.run(policy)`` for a policy with ``value.format: avro`` and five field rules
  (not null, range, set, regex, length) — Avro decoding into an Arrow struct column, the rules,
  the implicit decode rule, the broker's checks and the verdict tables;
* fastavro: ``schemaless_reader`` over every value (header skipped), nothing else.

The ratio is kqlab's rate over fastavro's (goal >= 0.70: the workbench adds at most 30 % over
the decoder itself).  The last line is one JSON object.  ``--quick`` uses 50k records.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import struct
import sys
import time

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kqlab.kafka.builder import BatchBuilder, Record
from kqlab.kafka.log import scan_buffer
from kqlab.policy import loads_policy
from kqlab.validate.replayer import Replayer
from kqlab.validate.sample import Sample

NOW = 1_763_700_000_000
REGISTRY = "mock://bench-avro"
SCHEMA = {
    "type": "record", "name": "Order", "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "quantity", "type": "int"},
        {"name": "status", "type": {"type": "enum", "name": "Status",
                                    "symbols": ["NEW", "PAID", "SHIPPED", "CANCELLED"]}},
        {"name": "coupon", "type": ["null", "string"], "default": None},
        {"name": "created", "type": "long"},
        {"name": "gift", "type": "boolean"},
    ],
}
POLICY = f"""
kqlab: 1
name: bench-avro
broker: {{version: '4.0'}}
value:
  format: avro
  wire: confluent
  schemas: {{registry: '{REGISTRY}', subject: orders-value}}
rules:
- {{id: customer, kind: field_not_null, field: customer}}
- {{id: amount, kind: field_range, field: amount, min: 0, max: 10000}}
- {{id: status, kind: field_in, field: status, values: [NEW, PAID, SHIPPED]}}
- {{id: customer-id, kind: field_regex, field: customer, pattern: '^c-[0-9]+$'}}
- {{id: coupon, kind: field_length, field: coupon, max: 12}}
"""


def register() -> int:
    from confluent_kafka.schema_registry import Schema

    from kqlab.serde.schemas import registry_client

    client = registry_client(REGISTRY)
    return client.register_schema("orders-value", Schema(orjson.dumps(SCHEMA).decode(), "AVRO"))


def make_values(n: int, schema_id: int, seed: int = 5) -> list[bytes]:
    import fastavro

    parsed = fastavro.parse_schema(SCHEMA)
    rng = random.Random(seed)
    header = b"\0" + struct.pack(">i", schema_id)
    out = []
    for i in range(n):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {
            "id": i, "customer": f"c-{rng.randrange(10**6)}",
            "amount": round(rng.uniform(-1, 500), 2), "quantity": rng.randrange(1, 9),
            "status": rng.choice(["NEW", "PAID", "SHIPPED", "CANCELLED"]),
            "coupon": None if rng.random() < 0.7 else f"SAVE{rng.randrange(1000)}",
            "created": NOW - rng.randrange(10**6), "gift": rng.random() < 0.1})
        out.append(header + buf.getvalue())
    return out


def make_sample(values: list[bytes], per_batch: int = 100) -> Sample:
    from kqlab.kafka.batch import decode_records

    batches = []
    for start in range(0, len(values), per_batch):
        b = BatchBuilder(base_offset=start, base_timestamp=NOW - 1000)
        for v in values[start:start + per_batch]:
            b.append(Record(key=None, value=v))
        batches.append(b.build())
    data = b"".join(batches)
    d = decode_records(data, topic="orders", partition=0)
    return Sample(d.records, d.batches, [bb for _, bb in scan_buffer(data)])


def run_kqlab(sample: Sample, policy) -> int:
    v = Replayer(sample, now=NOW).run(policy)
    v.summary()
    return v.records.num_rows


def run_fastavro(values: list[bytes]) -> int:
    import fastavro

    parsed = fastavro.parse_schema(SCHEMA)
    reader = fastavro.schemaless_reader
    n = 0
    for v in values:
        reader(io.BytesIO(v[5:]), parsed)
        n += 1
    return n


def best(fn, arg, reps: int, *extra) -> float:
    t = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(arg, *extra)
        t = min(t, time.perf_counter() - t0)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="50k records, two repetitions")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (50_000 if args.quick else 200_000)
    reps = args.reps or (2 if args.quick else 3)
    schema_id = register()
    values = make_values(n, schema_id)
    sample = make_sample(values)
    policy = loads_policy(POLICY)
    run_kqlab(make_sample(values[:1000]), policy)  # first-use costs on both sides
    run_fastavro(values[:1000])
    tk = best(run_kqlab, sample, reps, policy)
    tf = best(run_fastavro, values, reps)
    k, f = n / tk, n / tf
    v = Replayer(sample, now=NOW).run(policy)
    rejected = v.by_outcome()["rejected"]
    print(f"{n} Avro values (8 fields), 5 field rules; {rejected} records rejected")
    print(f"kqlab replay (decode + 5 rules + broker checks + verdicts): {k:>10,.0f} records/s")
    print(f"bare fastavro schemaless_reader:                            {f:>10,.0f} records/s")
    print(f"ratio {k / f:.2f} (goal >= 0.70)")
    print(orjson.dumps({"benchmark": "replay_avro", "records": n,
                        "kqlab_records_per_s": round(k), "fastavro_records_per_s": round(f),
                        "ratio": round(k / f, 3), "goal_ratio": 0.7}).decode())


if __name__ == "__main__":
    main()
