"""The gate end to end on a real Tansu broker: every record of the raw topic lands exactly once
in the sink or the dead-letter topic, in order per partition, unchanged, with the failure
headers — and what it dead-letters is what the replay (``framing="single"``) rejects."""

from __future__ import annotations

import json
import tempfile
import urllib.request

import pytest

from kqlab.gate import (
    H_MESSAGE,
    H_OFFSET,
    H_PARTITION,
    H_POLICY,
    H_RULE,
    H_TOPIC,
    Gate,
    GateSettings,
    Route,
)
from kqlab.sources import demo_topics as dt
from tests.gate.conftest import FAST_GROUP, gate_thread, read_topic, wait_for

NOW = 1_763_700_000_000


@pytest.fixture(scope="module")
def demo():
    return dt.generate(tempfile.mkdtemp(prefix="kqlab-gate-demo-"), NOW)


def _replay_expectation(bootstrap: str, topic: str, policy) -> dict[tuple[int, int], str | None]:
    """(partition, offset) -> None (accepted) or the first rejecting rule, from the replay of
    the raw topic as a consumer reads it, every record its own batch."""
    from kqlab.sources.kafka import sample
    from kqlab.validate import replay

    records = sample(bootstrap, topic, timeout_s=20).records
    v = replay(records, policy, now=NOW, framing="single").records.to_pylist()
    out = {}
    for r in v:
        if r["outcome"] == "accepted":
            out[(r["partition"], r["offset"])] = None
        else:
            assert r["outcome"] == "rejected", r  # single framing: no collateral
            out[(r["partition"], r["offset"])] = next(f["rule"] for f in r["failures"]
                                                      if f["code"] != 0)
    return out


@pytest.mark.parametrize("topic", [dt.CLICKS_TOPIC, dt.ORDERS_TOPIC])
def test_every_record_lands_once_matching_the_replay(kafka, demo, topic):
    from kqlab.cli._common import prepare_registries

    policy = dt.load_policies()[topic]
    prepare_registries(policy)  # orders: the demo's mock registry
    n_parts = dt.CLICKS_PARTITIONS if topic == dt.CLICKS_TOPIC else dt.ORDERS_PARTITIONS
    kafka.create_topic(topic, partitions=n_parts)
    sink, dlq = f"{topic}.valid", f"{topic}.dlq"
    kafka.create_topic(sink, partitions=n_parts)
    kafka.create_topic(dlq, partitions=n_parts)
    kafka.produce(topic, list(dt.iter_records(demo, topic)),
                  config={"message.max.bytes": 1_000_000, "compression.type": "lz4"})
    source = read_topic(kafka.bootstrap, topic, n_parts)
    expected = _replay_expectation(kafka.bootstrap, topic, policy)
    assert len(expected) == len(source) > 1000

    settings = GateSettings(routes=(Route(source=topic, sink=sink, dlq=dlq),),
                            bootstrap=kafka.bootstrap, group=f"gate-e2e-{topic}",
                            consumer=FAST_GROUP, now=NOW, log_interval=0, batch_max=700)
    gate = Gate(policy, settings)
    with gate_thread(gate) as out:
        wait_for(lambda: gate.metrics.records >= len(source), 60, "the gate to drain")
    metrics = out["metrics"]
    assert metrics["records"] == len(source)
    assert metrics["batches"] > 1  # several poll batches, each committed

    valid = read_topic(kafka.bootstrap, sink, n_parts, expect=metrics["forwarded"])
    dead = read_topic(kafka.bootstrap, dlq, n_parts, expect=metrics["dead_lettered"])
    want_dead = {k: r for k, r in expected.items() if r is not None}
    assert len(valid) + len(dead) == len(source)
    assert len(dead) == len(want_dead) > 0
    assert metrics["by_rule"] == {r: sum(1 for x in want_dead.values() if x == r)
                                  for r in set(want_dead.values())}

    by_src = {(m.partition(), m.offset()): m for m in source}
    # the dead-letter topic: the replay's rejections, each once, in source order per partition
    seen = []
    for m in dead:
        h = dict(m.headers())
        key = (int(h[H_PARTITION]), int(h[H_OFFSET]))
        assert h[H_TOPIC] == topic.encode()
        assert m.partition() == key[0]
        assert h[H_RULE].decode() == want_dead[key], key
        assert h[H_MESSAGE]
        assert h[H_POLICY].startswith(policy.name.encode() + b"@")
        src = by_src[key]
        assert (m.key(), m.value(), m.timestamp()) == (src.key(), src.value(), src.timestamp())
        assert m.headers()[:len(src.headers() or ())] == (src.headers() or [])
        seen.append(key)
    assert sorted(seen) == seen == sorted(want_dead)
    # the sink: every accepted record, unchanged, in source order per partition
    want_valid = [by_src[k] for k in sorted(k for k, r in expected.items() if r is None)]
    assert [(m.partition(), m.key(), m.value(), m.headers(), m.timestamp()) for m in valid] == \
        [(m.partition(), m.key(), m.value(), m.headers(), m.timestamp()) for m in want_valid]


def test_health_endpoint_metrics_and_lag(kafka):
    from kqlab.policy import loads_policy

    policy = loads_policy("kqlab: 1\nname: small\nrules: [{id: small, kind: value_size, "
                          "max: 3}, {id: trace, kind: header_required, name: trace, "
                          "mode: observe}]")
    for t in ("h.raw", "h.ok", "h.dlq"):
        kafka.create_topic(t, partitions=2)
    kafka.produce("h.raw", [{"value": b"x" * (i % 6), "partition": i % 2} for i in range(200)])
    gate = Gate(policy, GateSettings(routes=(Route(source="h.raw", sink="h.ok", dlq="h.dlq"),),
                                     bootstrap=kafka.bootstrap, group="gate-health",
                                     consumer=FAST_GROUP, health_port=0, log_interval=0))
    with gate_thread(gate):
        wait_for(lambda: gate.health_address is not None, 10, "the health server")
        host, port = gate.health_address
        assert host == "127.0.0.1"
        wait_for(lambda: gate.metrics.records == 200, 30, "200 records")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            assert r.status == 200
            assert json.loads(r.read())["status"] == "ok"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics.json", timeout=5) as r:
            snap = json.loads(r.read())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            prom = r.read().decode()
    # sizes 0..5 cycle: 4 and 5 fail "max 3" -> 2 of every 6 records
    bad = sum(1 for i in range(200) if i % 6 > 3)
    assert snap["dead_lettered"] == bad and snap["forwarded"] == 200 - bad
    assert snap["by_rule"] == {"small": bad}
    assert snap["observed"] == {"trace": 200}  # observe: counted, never dead-lettered
    assert snap["lag"] == {"h.raw-0": 0, "h.raw-1": 0}
    assert f'kqlab_gate_records_total{{outcome="dead_lettered"}} {bad}' in prom
    assert 'kqlab_gate_rule_failures_total{rule="trace",mode="observe"} 200' in prom
    assert not gate.healthy()  # stopped


def test_scale_out_two_members_share_the_partitions(kafka):
    from kqlab.policy import loads_policy

    policy = loads_policy("kqlab: 1\nname: short\nrules: [{id: small, kind: value_size, "
                          "max: 3}]")
    for t in ("s.raw", "s.ok", "s.dlq"):
        kafka.create_topic(t, partitions=4)
    n = 4000
    settings = GateSettings(routes=(Route(source="s.raw", sink="s.ok", dlq="s.dlq"),),
                            bootstrap=kafka.bootstrap, group="gate-scale", consumer=FAST_GROUP,
                            log_interval=0, batch_max=100)
    a, b = Gate(policy, settings), Gate(policy, settings)
    with gate_thread(a), gate_thread(b):
        # Produce only once the group has settled with both members: on Apache Kafka the first
        # member to join can drain 4000 records before the second's rebalance lands (group
        # join takes seconds), and the test is about sharing, not about who joins first.
        wait_for(lambda: bool(a.metrics.assigned) and bool(b.metrics.assigned)
                 and len(a.metrics.assigned) + len(b.metrics.assigned) == 4, 60,
                 "both members assigned")
        kafka.produce("s.raw", [{"value": str(i).encode(), "partition": i % 4}
                                for i in range(n)])
        wait_for(lambda: a.metrics.records + b.metrics.records >= n, 60, "both gates")
        assigned_a, assigned_b = list(a.metrics.assigned), list(b.metrics.assigned)
    assert a.metrics.records + b.metrics.records == n
    assert a.metrics.records > 0 and b.metrics.records > 0, (assigned_a, assigned_b)
    assert sorted(assigned_a + assigned_b) == [f"s.raw-{p}" for p in range(4)]
    ok = read_topic(kafka.bootstrap, "s.ok", 4, expect=1000)
    dead = read_topic(kafka.bootstrap, "s.dlq", 4, expect=3000)
    assert (len(ok), len(dead)) == (1000, 3000)  # 0-999 are short, 1000-3999 too long
    values = sorted(int(m.value()) for m in ok + dead)
    assert values == list(range(n))  # every record exactly once
    assert all(len(m.value()) > 3 for m in dead) and all(len(m.value()) <= 3 for m in ok)
