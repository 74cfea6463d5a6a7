"""Protobuf decode + five field rules: kqlab against a confluent-kafka ProtobufDeserializer loop.

Compiles an 8-field order message (``.proto`` text, grpcio-tools' bundled protoc), lets
confluent-kafka's own ``ProtobufSerializer`` register it in a ``mock://`` Schema Registry and
write one partition of Confluent-framed values.  Then times, on the same records:

* kqlab: ``Replayer.run(policy)`` for ``value.format: protobuf`` with five field rules (not
  null, range, set, regex, length) — decoding to an Arrow struct column, the rules, the
  implicit decode rule, the broker's checks and the verdict tables;
* confluent-kafka: ``ProtobufDeserializer`` over every value, then the same five rules in
  Python on each message (what a consumer loop checking records would do).

The ratio is kqlab's rate over the loop's (goal >= 3).  ``--quick`` uses 30k records; the last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.replay_avro import NOW, best, make_sample
from kqlab.policy import loads_policy
from kqlab.validate.replayer import Replayer

REGISTRY = "mock://bench-protobuf"
PROTO = """
syntax = "proto3";
package bench;
enum Status { NEW = 0; PAID = 1; SHIPPED = 2; CANCELLED = 3; }
message Order {
  int64 id = 1; string customer = 2; double amount = 3; int32 quantity = 4;
  Status status = 5; optional string coupon = 6; int64 created = 7; bool gift = 8;
}
"""
RULES = """
rules:
- {id: customer, kind: field_not_null, field: customer}
- {id: amount, kind: field_range, field: amount, min: 0, max: 10000}
- {id: status, kind: field_in, field: status, values: [NEW, PAID, SHIPPED]}
- {id: customer-id, kind: field_regex, field: customer, pattern: '^c-[0-9]+$'}
- {id: coupon, kind: field_length, field: coupon, max: 12}
"""
POLICY = f"""
kqlab: 1
name: bench-protobuf
broker: {{version: '4.0'}}
value:
  format: protobuf
  wire: confluent
  schemas: {{registry: '{REGISTRY}', subject: orders-value}}
""" + RULES


def order_class():
    """The Order message class, compiled from :data:`PROTO` (no generated code kept)."""
    from kqlab.serde.protobuf_schemas import proto_folder

    tmp = Path(tempfile.mkdtemp(prefix="kqlab-bench-proto-"))
    (tmp / "bench_orders.proto").write_text(PROTO, encoding="utf-8")
    schema = proto_folder(tmp).any_file()
    desc = schema.named("bench.Order")
    return schema.message_class(desc), desc


def make_values(n: int, cls, seed: int = 5) -> list[bytes]:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from kqlab.serde.schemas import registry_client

    ser = ProtobufSerializer(cls, registry_client(REGISTRY), {"use.deprecated.format": False})
    ctx = SerializationContext("orders", MessageField.VALUE)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        m = cls(id=i, customer=f"c-{rng.randrange(10**6)}", amount=round(rng.uniform(-1, 500), 2),
                quantity=rng.randrange(1, 9), status=rng.randrange(4),
                created=NOW - rng.randrange(10**6), gift=rng.random() < 0.1)
        if rng.random() >= 0.7:
            m.coupon = f"SAVE{rng.randrange(1000)}"
        out.append(ser(m, ctx))
    return out


def run_confluent(values: list[bytes], cls) -> int:
    """Deserialize every value with confluent-kafka, then the five rules per message."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    de = ProtobufDeserializer(cls, {"use.deprecated.format": False})
    ctx = SerializationContext("orders", MessageField.VALUE)
    pattern = re.compile(r"^c-[0-9]+$")
    names = {v.number: v.name for v in cls.DESCRIPTOR.fields_by_name["status"].enum_type.values}
    allowed = {"NEW", "PAID", "SHIPPED"}
    failed = 0
    for v in values:
        m = de(v, ctx)
        ok = m.customer is not None and 0 <= m.amount <= 10000 \
            and names.get(m.status) in allowed and pattern.search(m.customer) is not None \
            and (not m.HasField("coupon") or len(m.coupon) <= 12)
        failed += not ok
    return failed


def run_kqlab(sample, policy) -> int:
    v = Replayer(sample, now=NOW).run(policy)
    v.summary()
    return v.records.num_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="30k records, two repetitions")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (30_000 if args.quick else 200_000)
    reps = args.reps or (2 if args.quick else 3)
    cls, _ = order_class()
    values = make_values(n, cls)
    sample = make_sample(values)
    policy = loads_policy(POLICY)
    run_kqlab(make_sample(values[:1000]), policy)  # first-use costs on both sides
    run_confluent(values[:1000], cls)
    tk = best(run_kqlab, sample, reps, policy)
    tc = best(run_confluent, values, reps, cls)
    k, c = n / tk, n / tc
    v = Replayer(sample, now=NOW).run(policy)
    rejected = v.by_outcome()["rejected"]
    loop_failed = run_confluent(values, cls)
    print(f"{n} Protobuf values (8 fields), 5 field rules; kqlab rejected {rejected}, "
          f"the loop failed {loop_failed}")
    print(f"kqlab replay (decode + 5 rules + broker checks + verdicts): {k:>10,.0f} records/s")
    print(f"confluent-kafka ProtobufDeserializer + 5 rules in Python:  {c:>10,.0f} records/s")
    print(f"ratio {k / c:.2f} (goal >= 3)")
    print(orjson.dumps({"benchmark": "protobuf_decode", "records": n,
                        "kqlab_records_per_s": round(k), "confluent_records_per_s": round(c),
                        "kqlab_rejected": rejected, "loop_failed": loop_failed,
                        "ratio": round(k / c, 3), "goal_ratio": 3.0}).decode())


if __name__ == "__main__":
    main()
