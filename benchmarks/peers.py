"""Field rules over one decoded sample: kqlab's vectorised kernels vs Great Expectations, pandera.

Builds >= 1M JSON order records (``order_id``, ``customer_id``, ``amount``, ``currency``,
``status``; ~0.1 % defective: null customers, negative amounts, unknown statuses and
currencies, malformed ids), decodes them once with kqlab (not timed), and hands the *same
decoded columns* to every tool (pandas for the peers, ``DecodedColumn`` for kqlab).  Then times
five equivalent rules:

==========================  ======================================  ===========================
kqlab                       Great Expectations 1.x (pandas)         pandera (pandas)
==========================  ======================================  ===========================
field_not_null customer_id  ExpectColumnValuesToNotBeNull           Column(nullable=False)
field_range amount [0,1e4]  ExpectColumnValuesToBeBetween           Check.in_range
field_in status             ExpectColumnValuesToBeInSet             Check.isin
field_in currency           ExpectColumnValuesToBeInSet             Check.isin
field_regex order_id        ExpectColumnValuesToMatchRegex          Check.str_matches
==========================  ======================================  ===========================

Each tool reports failures the way it is normally used: kqlab a per-record mask and message
per failing record (``evaluate_rule``), GX its default ``SUMMARY`` result (counts and partial
lists, suite built once, ``batch.validate`` timed), pandera ``validate(lazy=True)`` (every
failure case, ``SchemaErrors`` caught).  The failing counts are cross-checked between all
three before any number is printed.  The last line is one JSON object with records/s per tool
and the ratios.  ``--quick`` uses 200k records and one repetition (< 60 s).

Needs the ``bench`` extra: ``pip install 'kqlab[bench]'`` (great_expectations, pandera).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
import warnings

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kqlab.policy import loads_policy
from kqlab.records import RECORDS_SCHEMA
from kqlab.validate.context import EvalContext
from kqlab.validate.rules import evaluate_rule

NOW = 1_763_700_000_000
STATUSES = ["NEW", "PAID", "SHIPPED", "CANCELLED"]
CURRENCIES = ["EUR", "USD", "GBP"]
ID_PATTERN = r"^o-[0-9]{7}$"
POLICY = f"""
kqlab: 1
name: bench-fields
value: {{format: json}}
rules:
- {{id: customer, kind: field_not_null, field: customer_id}}
- {{id: amount, kind: field_range, field: amount, min: 0, max: 10000}}
- {{id: status, kind: field_in, field: status, values: {STATUSES}}}
- {{id: currency, kind: field_in, field: currency, values: {CURRENCIES}}}
- {{id: order-id, kind: field_regex, field: order_id, pattern: '{ID_PATTERN}'}}
"""


def make_values(n: int, seed: int = 5) -> list[bytes]:
    """JSON order values; about one in a thousand has one defect."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        d = {"order_id": f"o-{i % 10**7:07d}", "customer_id": f"c-{rng.randrange(50_000):05d}",
             "amount": round(rng.lognormvariate(3.5, 1.0), 2), "currency": rng.choice(CURRENCIES),
             "status": rng.choice(STATUSES)}
        if rng.random() < 0.001:
            kind = rng.randrange(5)
            if kind == 0:
                d["customer_id"] = None
            elif kind == 1:
                d["amount"] = -d["amount"]
            elif kind == 2:
                d["status"] = "REFUNDED"
            elif kind == 3:
                d["currency"] = "XXX"
            else:
                d["order_id"] = f"order {i}"
        out.append(orjson.dumps(d))
    return out


def make_context(n: int):
    """The records table and an EvalContext with the value column decoded (not timed)."""
    import pyarrow as pa

    values = make_values(n)
    table = pa.table({
        "topic": pa.array(["bench"] * n, pa.string()),
        "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(n), pa.int64()),
        "timestamp": pa.array([NOW] * n, pa.int64()),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.array([None] * n, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "headers": pa.array([[]] * n, RECORDS_SCHEMA.field("headers").type),
        "batch_offset": pa.array(range(n), pa.int64()),
        "batch_index": pa.array([0] * n, pa.int32()),
    }, schema=RECORDS_SCHEMA)
    policy = loads_policy(POLICY)
    ctx = EvalContext(table, NOW, value_format=policy.value, key_format=policy.key)
    decoded = ctx.decoded("value")  # decode once: every tool gets these columns
    ctx.decode_failed("value")
    return policy, ctx, decoded


def run_kqlab(ctx, policy) -> dict[str, int]:
    return {rule.id: evaluate_rule(ctx, rule).count for rule in policy.rules}


def gx_suite(df):
    import great_expectations as gx
    import great_expectations.expectations as gxe

    context = gx.get_context(mode="ephemeral")
    source = context.data_sources.add_pandas("bench")
    asset = source.add_dataframe_asset("orders")
    batch_def = asset.add_batch_definition_whole_dataframe("all")
    suite = context.suites.add(gx.ExpectationSuite(name="orders"))
    suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column="customer_id"))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="amount", min_value=0,
                                                            max_value=10000))
    suite.add_expectation(gxe.ExpectColumnValuesToBeInSet(column="status", value_set=STATUSES))
    suite.add_expectation(gxe.ExpectColumnValuesToBeInSet(column="currency",
                                                          value_set=CURRENCIES))
    suite.add_expectation(gxe.ExpectColumnValuesToMatchRegex(column="order_id",
                                                             regex=ID_PATTERN))
    batch = batch_def.get_batch(batch_parameters={"dataframe": df})
    return batch, suite


def run_gx(batch, suite) -> dict[str, int]:
    result = batch.validate(suite, result_format="SUMMARY")
    names = {"expect_column_values_to_not_be_null": "customer",
             "expect_column_values_to_be_between": "amount",
             "expect_column_values_to_match_regex": "order-id"}
    out = {}
    for r in result.results:
        cfg = r.expectation_config
        name = names.get(cfg.type) or cfg.kwargs["column"]
        out[name] = int(r.result.get("unexpected_count", 0))
    return out


def pandera_schema():
    import pandera.pandas as pdr

    return pdr.DataFrameSchema({
        "customer_id": pdr.Column(str, nullable=False),
        "amount": pdr.Column(float, pdr.Check.in_range(0, 10000), nullable=True),
        "status": pdr.Column(str, pdr.Check.isin(STATUSES), nullable=True),
        "currency": pdr.Column(str, pdr.Check.isin(CURRENCIES), nullable=True),
        "order_id": pdr.Column(str, pdr.Check.str_matches(ID_PATTERN), nullable=True),
    })


def run_pandera(schema, df) -> dict[str, int]:
    import pandera.errors

    names = {"customer_id": "customer", "amount": "amount", "status": "status",
             "currency": "currency", "order_id": "order-id"}
    out = dict.fromkeys(names.values(), 0)
    try:
        schema.validate(df, lazy=True)
    except pandera.errors.SchemaErrors as exc:
        fc = exc.failure_cases
        for column, count in fc.groupby("column")["index"].nunique().items():
            out[names[column]] = int(count)
    return out


def best(fn, reps: int, *args) -> tuple[float, dict[str, int]]:
    best_s, got = float("inf"), {}
    for _ in range(reps):
        t0 = time.perf_counter()
        got = fn(*args)
        best_s = min(best_s, time.perf_counter() - t0)
    return best_s, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k records, one repetition")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (200_000 if args.quick else 1_000_000)
    reps = args.reps or (1 if args.quick else 3)
    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("TQDM_DISABLE", "1")  # GX's progress bars, not our output
    t0 = time.perf_counter()
    policy, ctx, decoded = make_context(n)
    import pandas as pd

    df = pd.DataFrame({f.name: col.to_pandas() for f, col in
                       zip(decoded.values.type, decoded.values.flatten(), strict=True)})
    print(f"built and decoded {n} JSON records ({time.perf_counter() - t0:.1f} s, not timed)")
    run_kqlab(ctx, policy)  # first-use costs (regex compilation, kernels)
    k_s, k_counts = best(run_kqlab, max(reps, 3), ctx, policy)
    batch, suite = gx_suite(df)
    g_s, g_counts = best(run_gx, reps, batch, suite)
    schema = pandera_schema()
    p_s, p_counts = best(run_pandera, reps, schema, df)
    if not (k_counts == g_counts == p_counts):
        raise AssertionError(f"the tools disagree: kqlab {k_counts}, GX {g_counts}, "
                             f"pandera {p_counts}")
    k, g, p = n / k_s, n / g_s, n / p_s
    print(f"failing records per rule (all three agree): {k_counts}")
    print(f"kqlab (5 vectorised field rules):   {k:>14,.0f} records/s")
    print(f"Great Expectations 1.x (pandas):    {g:>14,.0f} records/s   kqlab {k / g:6.1f}x "
          "(goal >= 10x)")
    print(f"pandera (pandas, lazy):             {p:>14,.0f} records/s   kqlab {k / p:6.1f}x "
          "(goal >= 5x)")
    print(orjson.dumps({"benchmark": "peers", "records": n, "rules": len(policy.rules),
                        "kqlab_records_per_s": round(k), "gx_records_per_s": round(g),
                        "pandera_records_per_s": round(p), "ratio_gx": round(k / g, 2),
                        "ratio_pandera": round(k / p, 2), "goal_ratio_gx": 10,
                        "goal_ratio_pandera": 5}).decode())


if __name__ == "__main__":
    main()
