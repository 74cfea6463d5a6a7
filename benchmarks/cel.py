"""One CEL rule over decoded Avro orders: kqlab's vectorised ``cel`` rule against per-record
CEL engines on the same rule and data.

Builds Confluent-framed Avro order values (the demo topic's ``Order`` shape: ids, a nullable
customer, amount, currency, status, timestamps, a nullable note), registers the schema in a
``mock://`` Schema Registry (confluent-kafka's own client) and decodes the column once (not
timed: every side starts from the decoded values).  Then times the rule

    value.amount > 0.0 && value.currency in ['EUR', 'USD', 'GBP']
        && value.status != 'CANCELLED' && value.order_id.startsWith('o-')

* kqlab: ``evaluate_rule`` of a ``cel`` rule over the whole sample (Arrow kernels, rows they
  cannot decide per record), including the failure messages;
* cel-expr-python: the compiled program's ``eval`` on each decoded record (``{"value": dict}``),
  nothing else — the engine alone;
* kqlab per record: the pre-vectorisation path (activations + ``evaluate_many``), for reference;
* confluent-kafka: its data-contract rule executor (``CelExecutor.transform``, cel-python) with
  the same rule over ``message``, as a serializer runs a CONDITION rule.

The per-record peers are timed on a subset (they are slow) and reported as records/s, i.e.
extrapolated to the whole sample; every side's verdicts on that subset must agree.  The last
line is one JSON object; ``ratio`` is kqlab over cel-expr-python (goal >= 30).  ``--quick`` uses
200k records.
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

NOW = 1_763_700_000_000
REGISTRY = "mock://bench-cel"
SUBJECT = "orders-value"
SCHEMA = {
    "type": "record", "name": "Order", "namespace": "kqlab.bench",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer_id", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string"},
        {"name": "status", "type": "string"},
        {"name": "created_at", "type": "long"},
        {"name": "quantity", "type": "int"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
EXPR = ("value.amount > 0.0 && value.currency in ['EUR', 'USD', 'GBP'] "
        "&& value.status != 'CANCELLED' && value.order_id.startsWith('o-')")


def register() -> int:
    from confluent_kafka.schema_registry import Schema

    from kqlab.serde.schemas import registry_client

    client = registry_client(REGISTRY)
    return client.register_schema(SUBJECT, Schema(orjson.dumps(SCHEMA).decode(), "AVRO"))


def make_values(n: int, schema_id: int, seed: int = 11) -> list[bytes]:
    """Realistic orders with a few defects: negative amounts, odd currencies, bad ids."""
    import fastavro

    parsed = fastavro.parse_schema(SCHEMA)
    rng = random.Random(seed)
    header = b"\0" + struct.pack(">i", schema_id)
    write = fastavro.schemaless_writer
    currencies = ["EUR"] * 6 + ["USD"] * 3 + ["GBP", "CHF", "eur"]
    statuses = ["NEW", "PAID", "SHIPPED", "CANCELLED"]
    out = []
    for i in range(n):
        buf = io.BytesIO()
        write(buf, parsed, {
            "order_id": f"o-{i}" if rng.random() > 0.002 else f"x-{i}",
            "customer_id": None if rng.random() < 0.05 else f"c-{rng.randrange(10**5)}",
            "amount": round(rng.uniform(-1, 500), 2),
            "currency": rng.choice(currencies), "status": rng.choice(statuses),
            "created_at": NOW - rng.randrange(10**8), "quantity": rng.randrange(1, 9),
            "note": None if rng.random() < 0.8 else "leave at the door"})
        out.append(header + buf.getvalue())
    return out


def make_context(values: list[bytes]):
    import pyarrow as pa

    from kqlab.policy.model import Format, SchemaSource
    from kqlab.records import RECORDS_SCHEMA
    from kqlab.validate.context import EvalContext

    n = len(values)
    table = pa.table({
        "topic": pa.array(["orders"] * n), "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(n), pa.int64()),
        "timestamp": pa.array([NOW] * n, pa.int64()),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.nulls(n, pa.binary()), "value": pa.array(values, pa.binary()),
        "headers": pa.array([[]] * n, RECORDS_SCHEMA.field("headers").type),
        "batch_offset": pa.array([(i // 100) * 100 for i in range(n)], pa.int64()),
        "batch_index": pa.array([i % 100 for i in range(n)], pa.int32()),
    }, schema=RECORDS_SCHEMA)
    fmt = Format(format="avro", wire="confluent",
                 schemas=SchemaSource(registry=REGISTRY, subject=SUBJECT))
    return EvalContext(table, NOW, value_format=fmt)


def run_kqlab(ctx, rule):
    from kqlab.validate.rules import evaluate_rule

    return evaluate_rule(ctx, rule)


def run_cel_expr_python(values: list) -> list:
    from kqlab.policy.cel import compile_cel

    program = compile_cel(EXPR, "cel-expr-python")._compiled
    return [program.eval(data={"value": v}).value() for v in values]


def run_kqlab_per_record(ctx, rows: int) -> list:
    from kqlab.policy.cel import compile_cel, record_activations

    values = ctx.python_values("value")[:rows]
    return compile_cel(EXPR).evaluate_many(record_activations(ctx.records.slice(0, rows),
                                                              values))[0]


def confluent_executor():
    """confluent-kafka's CEL rule executor and a CONDITION rule context for ``SCHEMA``."""
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.common.schema_registry_client import (
        Rule,
        RuleKind,
        RuleMode,
    )
    from confluent_kafka.schema_registry.common.serde import RuleContext
    from confluent_kafka.schema_registry.rules.cel.cel_executor import CelExecutor
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = Schema(orjson.dumps(SCHEMA).decode(), "AVRO")
    rule = Rule(name="valid-order", doc=None, kind=RuleKind.CONDITION, mode=RuleMode.WRITE,
                type="CEL", tags=None, params=None, expr=EXPR.replace("value.", "message."),
                on_success=None, on_failure=None, disabled=False)
    ctx = RuleContext(None, SerializationContext("orders", MessageField.VALUE), schema, schema,
                      SUBJECT, RuleMode.WRITE, rule, 0, [rule], None, None)
    return CelExecutor(), ctx


def run_confluent(values: list) -> list:
    executor, ctx = confluent_executor()
    return [executor.transform(ctx, v) for v in values]


def timed(fn, *args, reps: int = 1):
    best, out = float("inf"), None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    from kqlab.policy.model import Rule

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k records, smaller peer subsets")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (200_000 if args.quick else 1_000_000)
    reps = args.reps or (3 if args.quick else 5)
    sub = min(n, 20_000 if args.quick else 100_000)
    sub_confluent = min(n, 3_000 if args.quick else 10_000)

    t0 = time.perf_counter()
    raw = make_values(n, register())
    ctx = make_context(raw)
    ctx.decoded("value")  # decoding is not what is measured: every side starts decoded
    values = ctx.python_values("value")
    print(f"{n:,} Avro orders built and decoded in {time.perf_counter() - t0:.1f} s")
    rule = Rule(id="valid-order", kind="cel", params={"expr": EXPR},
                message="order {id} is not valid")
    run_kqlab(make_context(raw[:1000]), rule)  # first-use costs (imports, parser) on a warm-up
    tk, result = timed(run_kqlab, ctx, rule, reps=reps)
    from kqlab.validate.cel import evaluate_cel

    col = evaluate_cel(ctx, EXPR)
    tc, cel_out = timed(run_cel_expr_python, values[:sub])
    tp, per_record = timed(run_kqlab_per_record, ctx, sub)
    tf, confluent_out = timed(run_confluent, values[:sub_confluent])
    # the same verdicts on the measured subsets
    expect = (~result.failed[:sub]).tolist()
    assert cel_out == expect, "cel-expr-python disagrees with kqlab"
    assert [r is True for r in per_record] == expect, "per-record path disagrees"
    assert confluent_out == expect[:sub_confluent], "confluent's executor disagrees"
    k, c, p, f = n / tk, sub / tc, sub / tp, sub_confluent / tf
    print(f"rule: {EXPR}")
    print(f"{result.count:,} of {n:,} records fail; {col.per_record:,} rows evaluated per record "
          "by kqlab (the rest by Arrow kernels); verdicts agree on the peers' subsets")
    print(f"kqlab vectorised cel rule (best of {reps}):      {k:>14,.0f} records/s")
    print(f"cel-expr-python eval per record ({sub:,} records): {c:>14,.0f} records/s")
    print(f"kqlab per-record path ({sub:,} records):           {p:>14,.0f} records/s")
    print(f"confluent-kafka CelExecutor ({sub_confluent:,} records):  {f:>14,.0f} records/s")
    print("(per-record peers timed on the first records of the sample, rates extrapolated)")
    print(f"ratio {k / c:.1f}x cel-expr-python (goal >= 30), {k / f:.0f}x confluent-kafka")
    print(orjson.dumps({
        "benchmark": "cel", "records": n, "expr": EXPR,
        "kqlab_records_per_s": round(k), "cel_expr_python_records_per_s": round(c),
        "kqlab_per_record_records_per_s": round(p),
        "confluent_cel_executor_records_per_s": round(f),
        "peers_measured_on": {"cel_expr_python": sub, "kqlab_per_record": sub,
                              "confluent_cel_executor": sub_confluent},
        "peer_rates_extrapolated": True, "kqlab_rows_per_record": col.per_record,
        "ratio": round(k / c, 2), "ratio_confluent": round(k / f, 1), "goal_ratio": 30,
    }).decode())


if __name__ == "__main__":
    main()
