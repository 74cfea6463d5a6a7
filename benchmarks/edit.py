"""Editing one rule of a policy on a decoded 1M-record sample: how long until its new verdicts.

Builds one partition of Confluent-framed Avro orders (the shape of ``benchmarks/cel.py``) in
real v2 batches, opens a :class:`kqlab.validate.Replayer` on it and runs a six-rule policy
once (not timed: decoding the values and the first evaluation of every rule).  Then makes 20
edits, each changing one rule's parameters to values not seen before — round robin over a
``cel`` rule, a ``cel`` rule with a ``when`` precondition, a ``field_range`` and a
``field_in`` rule — and times, per edit:

* re-evaluation: ``Replayer.evaluate(policy)`` — the edited rule runs again over the cached
  decoded columns, the five unchanged rules come from the cache (the benchmark checks that
  exactly one rule was evaluated per edit);
* full replay: ``Replayer.run(policy)`` — the same plus the broker's checks and the verdict
  tables, reported for context.

The last line is one JSON object with the median and p95 (ms) of both, their CPU time
(``*_cpu_*``) and the load average; the goal is a p95 re-evaluation of at most 300 ms.
``--quick`` uses 200k records.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.cel import NOW, REGISTRY, SUBJECT, make_values, register

POLICY = f"""
kqlab: 1
name: bench-edit
broker: {{version: '4.0'}}
value:
  format: avro
  wire: confluent
  schemas: {{registry: '{REGISTRY}', subject: {SUBJECT}}}
rules:
- {{id: valid-order, kind: cel, expr: "value.amount > 0.0 && value.order_id.startsWith('o-')"}}
- {{id: currency, kind: cel, expr: "value.currency in ['EUR', 'USD', 'GBP']",
   when: "value.status != 'CANCELLED'"}}
- {{id: amount, kind: field_range, field: amount, min: 0, max: 10000}}
- {{id: status, kind: field_in, field: status, values: [NEW, PAID, SHIPPED, CANCELLED]}}
- {{id: customer, kind: field_not_null, field: customer_id, mode: observe}}
- {{id: note, kind: field_length, field: note, max: 64}}
"""


def make_sample(values: list[bytes], per_batch: int = 500):
    from kqlab.kafka.batch import decode_records
    from kqlab.kafka.builder import BatchBuilder, Record
    from kqlab.kafka.log import scan_buffer
    from kqlab.validate.sample import Sample

    batches = []
    for start in range(0, len(values), per_batch):
        b = BatchBuilder(base_offset=start, base_timestamp=NOW - 1000)
        for v in values[start:start + per_batch]:
            b.append(Record(key=None, value=v))
        batches.append(b.build())
    data = b"".join(batches)
    d = decode_records(data, topic="orders", partition=0)
    return Sample(d.records, d.batches, [bb for _, bb in scan_buffer(data)])


def with_params(rule, **params):
    """``rule`` with some parameters changed (rules are frozen value objects)."""
    import dataclasses

    from kqlab.policy.model import thaw

    return dataclasses.replace(rule, params={**thaw(rule.params), **params})


def edits(policy, count: int) -> list:
    """``count`` policies, each the previous one with one rule's parameters changed."""
    from kqlab.policy.model import Rule

    out = []
    rules = list(policy.rules)
    for i in range(count):
        which = i % 4
        old: Rule = rules[which]
        if which == 0:
            new = with_params(old, expr=f"value.amount > {i}.5 && value.order_id.startsWith('o-')")
        elif which == 1:
            currencies = ", ".join(f"'{c}'" for c in ["EUR", "USD", "GBP", "CHF"][: 1 + i % 4])
            new = with_params(old, expr=f"value.currency in [{currencies}] || "
                                       f"value.quantity > {i}")
        elif which == 2:
            new = with_params(old, max=10000 - i)
        else:
            new = with_params(old, values=["NEW", "PAID", "SHIPPED", "CANCELLED", f"S{i}"][
                i % 3:])
        rules[which] = new
        out.append(policy.with_rules(tuple(rules)))
    return out


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main() -> None:
    from kqlab.policy import loads_policy
    from kqlab.validate.replayer import Replayer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k records")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--edits", type=int, default=20)
    args = ap.parse_args()
    n = args.records or (200_000 if args.quick else 1_000_000)

    t0 = time.perf_counter()
    sample = make_sample(make_values(n, register()))
    policy = loads_policy(POLICY)
    r = Replayer(sample, now=NOW)
    r.run(policy)  # decodes the values and evaluates every rule once
    print(f"{n:,} Avro records: built, decoded and first replayed in "
          f"{time.perf_counter() - t0:.1f} s")
    evaluate_ms, run_ms = [], []
    evaluate_cpu, run_cpu = [], []  # the process's CPU time: less noisy on a shared machine
    for edited in edits(policy, args.edits):
        before = r.evaluations
        t1, c1 = time.perf_counter(), time.process_time()
        r.evaluate(edited)
        evaluate_ms.append((time.perf_counter() - t1) * 1000)
        evaluate_cpu.append((time.process_time() - c1) * 1000)
        assert r.evaluations == before + 1, "an edit must re-evaluate exactly one rule"
        t2, c2 = time.perf_counter(), time.process_time()
        verdicts = r.run(edited)  # every rule cached now: broker checks + verdict tables
        run_ms.append((time.perf_counter() - t2) * 1000)
        run_cpu.append((time.process_time() - c2) * 1000)
        assert r.evaluations == before + 1
    out = {
        "benchmark": "edit", "records": n, "edits": len(evaluate_ms),
        "reevaluate_median_ms": round(statistics.median(evaluate_ms), 1),
        "reevaluate_p95_ms": round(percentile(evaluate_ms, 0.95), 1),
        "full_replay_median_ms": round(statistics.median(run_ms), 1),
        "full_replay_p95_ms": round(percentile(run_ms, 0.95), 1),
        "reevaluate_cpu_median_ms": round(statistics.median(evaluate_cpu), 1),
        "full_replay_cpu_median_ms": round(statistics.median(run_cpu), 1),
        "full_replay_cpu_p95_ms": round(percentile(run_cpu, 0.95), 1),
        "goal_p95_ms": 300,
        "load": [round(x, 2) for x in os.getloadavg()],
    }
    for label, which in (("cel", (0, 1)), ("field", (2, 3))):
        xs = [t for i, t in enumerate(evaluate_ms) if i % 4 in which]
        out[f"reevaluate_{label}_edits_median_ms"] = round(statistics.median(xs), 1)
        out[f"reevaluate_{label}_edits_p95_ms"] = round(percentile(xs, 0.95), 1)
    print(f"last edit: {verdicts.by_outcome()}")
    print(f"re-evaluation after one edit ({len(evaluate_ms)} edits): median "
          f"{out['reevaluate_median_ms']} ms, p95 {out['reevaluate_p95_ms']} ms (goal <= 300)")
    print(f"  of which cel edits: median {out['reevaluate_cel_edits_median_ms']} ms, p95 "
          f"{out['reevaluate_cel_edits_p95_ms']} ms; field edits: median "
          f"{out['reevaluate_field_edits_median_ms']} ms, p95 "
          f"{out['reevaluate_field_edits_p95_ms']} ms")
    print(f"full replay with cached rules: median {out['full_replay_median_ms']} ms, "
          f"p95 {out['full_replay_p95_ms']} ms (broker checks + verdict tables)")
    print(orjson.dumps(out).decode())


if __name__ == "__main__":
    main()
