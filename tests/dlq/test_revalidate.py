"""Re-validation of dead letters against an amended policy (no broker needed: the dead letters
are built as the gate writes them).

* the replay a redrive plans with (``framing="single"`` batches judged through the table
  checks) gives the very record verdicts of ``replay(table, framing="single")`` and of the
  gate's own judge, on records that exercise every record-level broker check and policy rules;
* the record is judged as it will be produced: at its target topic, with the marker header;
* what stays says why; what goes says where (its source partition when it goes back).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

from kqlab.dlq import DeadLetters, revalidate
from kqlab.gate import Judge, records_table
from kqlab.policy import loads_policy
from kqlab.validate import replay
from kqlab.validate.framing import reconstruct_framing
from tests.dlq.conftest import NOW, gate_dead_letter

POLICY = """kqlab: 1
name: orders-v2
broker:
  version: '4.0'
  configs: {cleanup.policy: 'compact,delete', message.timestamp.before.max.ms: '86400000',
            max.message.bytes: '300'}
value: {format: json}
rules:
- {id: amount-positive, kind: field_range, field: amount, min: 0.01}
- {id: trace, kind: header_required, name: trace}
- {id: marker-once, kind: headers_unique, names: [kqlab.redrive]}
- {id: eur, kind: cel, expr: "value.amount < 1000", mode: observe}
"""


def _records(n: int = 400, seed: int = 3) -> pa.Table:
    """Records hitting R3 (no key, compacted), R4 (too old / too new), C2 (too big), the
    policy's rules, undecodable values, and plenty that pass."""
    rng = np.random.default_rng(seed)
    keys, values, headers, stamps = [], [], [], []
    for i in range(n):
        r = rng.integers(0, 10)
        keys.append(None if r == 0 else b"k%d" % i)
        amount = -1 if r == 1 else int(rng.integers(1, 2000))
        values.append(b"{bad" if r == 2 else b'{"amount": %d, "pad": "%s"}'
                      % (amount, b"x" * (400 if r == 3 else 4)))
        headers.append([] if r == 4 else [("trace", b"t")])
        stamps.append((1, NOW - 2 * 86_400_000 if r == 5 else NOW + 10 ** 9 if r == 6
                       else NOW - i))
    return records_table(["orders"] * n, [i % 2 for i in range(n)], list(range(n)), stamps,
                         keys, values, headers)


def _judged(v) -> list[tuple[str, tuple]]:
    return [(r["outcome"], tuple((f["rule"], f["code"], f["message"]) for f in r["failures"]))
            for r in v.records.sort_by("offset").to_pylist()]


def test_the_table_checks_path_equals_the_validators_and_the_gates():
    policy = loads_policy(POLICY)
    table = _records()
    by_validator = replay(table, policy, now=NOW, framing="single")
    sample = dataclasses.replace(reconstruct_framing(table, "single"), source="log")
    by_tables = replay(sample, policy, now=NOW)
    assert _judged(by_tables) == _judged(by_validator)
    outcomes = {o for o, _ in _judged(by_tables)}
    assert outcomes == {"accepted", "rejected"}
    rules = {f[0] for _, fs in _judged(by_tables) for f in fs}
    assert {"broker:R3", "broker:R4", "broker:C2", "amount-positive", "trace",
            "decode:value"} <= rules, rules
    judge = Judge(policy, now=NOW)(table)
    rejected = np.array([o == "rejected" for o, _ in _judged(by_tables)])
    assert (judge.dead == rejected).all()


def _dead(letters: list[dict]) -> DeadLetters:
    n = len(letters)
    t = records_table(["orders.dlq"] * n, [0] * n, list(range(n)),
                      [(1, x["timestamp"]) for x in letters], [x["key"] for x in letters],
                      [x["value"] for x in letters], [x["headers"] for x in letters])
    return DeadLetters.from_records(t)


def test_what_passes_goes_back_where_it_was_and_what_stays_says_why():
    letters = [gate_dead_letter(i, amount=-1 if i % 4 == 0 else 5) for i in range(12)]
    letters.append({"key": b"x", "value": b"{}", "timestamp": NOW, "headers": []})  # no source
    # redriven before: its record carries a marker; a second one breaks marker-once
    again = gate_dead_letter(13)
    again["headers"].insert(1, ("kqlab.redrive", b"orders.dlq:0:2"))
    letters.append(again)
    plan = revalidate(_dead(letters), loads_policy(POLICY), now=NOW,
                      partitions={"orders": 2})
    d = plan.decisions.to_pylist()
    assert [r["decision"] for r in d[:12]] == ["stay" if i % 4 == 0 else "redrive"
                                               for i in range(12)]
    assert all(r["why"] == "fails" and r["rule"] == "amount-positive" for r in d[:12:4])
    assert [r["target_partition"] for r in d[1:12] if r["decision"] == "redrive"] == \
        [i % 2 for i in range(1, 12) if i % 4]
    assert d[12]["why"] == "no-target" and d[12]["target_topic"] is None
    assert (d[13]["why"], d[13]["rule"]) == ("fails", "marker-once")
    s = plan.summary()
    assert s["redrive"] == {"records": 9, "by_target": {"orders": 9},
                            "by_reason": {"amount-positive": 9}}
    assert s["stay"]["by_why"] == {"fails": 4, "no-target": 1}
    # the re-validation is a verdicts view: the same figures draw what still fails
    assert plan.verdicts is not None
    assert plan.verdicts.by_reason().column("reason").to_pylist()[0] == "amount-positive"


def test_to_another_topic_partitions_by_key_and_a_missing_target_stays():
    letters = [gate_dead_letter(i) for i in range(4)]
    plan = revalidate(_dead(letters), loads_policy(POLICY), to="orders.retry", now=NOW,
                      partitions={"orders.retry": 8})
    d = plan.decisions.to_pylist()
    assert {(r["target_topic"], r["target_partition"], r["decision"]) for r in d} == \
        {("orders.retry", -1, "redrive")}
    plan = revalidate(_dead(letters), loads_policy(POLICY), now=NOW, partitions={})
    assert {r["why"] for r in plan.decisions.to_pylist()} == {"target-missing"}
    # the source partition beyond the target's partitions: the partitioner decides
    plan = revalidate(_dead(letters), loads_policy(POLICY), now=NOW, partitions={"orders": 1})
    assert [r["target_partition"] for r in plan.decisions.to_pylist()] == [0, -1, 0, -1]


def test_the_broker_clock_judges_old_records_at_now():
    """A dead letter from two days ago under a topic that keeps one day: it stays (R4), and
    the same record judged at its own time would pass."""
    letters = [dict(gate_dead_letter(1), timestamp=NOW - 2 * 86_400_000)]
    policy = loads_policy(POLICY)
    assert revalidate(_dead(letters), policy, now=NOW).decisions["rule"][0].as_py() == \
        "broker:R4"
    assert revalidate(_dead(letters), policy, now=NOW - 2 * 86_400_000) \
        .decisions["decision"][0].as_py() == "redrive"


@pytest.mark.parametrize("n", [0, 1])
def test_empty_and_tiny(n):
    plan = revalidate(_dead([gate_dead_letter(i) for i in range(n)]), loads_policy(POLICY),
                      now=NOW)
    assert plan.decisions.num_rows == n
    assert plan.summary()["read"] == n
