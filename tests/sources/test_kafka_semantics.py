"""Kafka's own semantics through kqlab's sampling and snapshot paths, on the session's real
Apache Kafka broker (issue 27): the high watermark of multi-record batches, committed reads
with aborted transactions, time windows by the broker's time index, a compacted topic after
the cleaner ran, a LogAppendTime topic and ``max.message.bytes``."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("confluent_kafka")

import kqlab.sources.kafka_offsets as offsets_mod
from kqlab.sources.fetch import FetchClient
from kqlab.sources.files import Snapshot
from kqlab.sources.kafka import resolve_ranges, sample
from kqlab.sources.kafka_snapshot import sample_to_snapshot

TS0 = 1_700_000_000_000


def _keys(result) -> list[str]:
    return [k.decode() for k in result.records.column("key").to_pylist()]


def test_latest_n_by_the_high_watermark_of_multi_record_batches(kafka_broker, topic_name):
    """Kafka's ListOffsets(latest) is the high watermark, also when the last batch holds many
    records: ``latest=N`` reads exactly the last N."""
    kafka_broker.create_topic(topic_name)
    kafka_broker.produce(topic_name, ({"key": b"k%d" % i, "value": b"v%d" % i, "partition": 0}
                                      for i in range(60)),
                         config={"linger.ms": 200, "batch.size": 1 << 20})
    exact = sample(kafka_broker.bootstrap, topic_name, exact_framing=True, timeout_s=10)
    counts = exact.batches.column("record_count").to_pylist()
    assert counts[-1] > 7 and sum(counts) == 60  # the last batch alone holds more than N
    for framing in (False, True):
        r = sample(kafka_broker.bootstrap, topic_name, latest=7, exact_framing=framing,
                   timeout_s=10)
        assert r.records.column("offset").to_pylist() == list(range(53, 60))
        assert _keys(r) == [f"k{i}" for i in range(53, 60)]
        assert [(x.high, x.start, x.end) for x in r.ranges] == [(60, 53, 60)]
    assert [(x.low, x.high) for x in resolve_ranges(kafka_broker.bootstrap, topic_name,
                                                    timeout_s=10)] == [(0, 60)]


@pytest.fixture(scope="module")
def transactional(kafka_broker):
    """One partition: transactions a (committed), b (aborted), c (committed), then d
    (aborted) and e (committed) interleaved with plain records p0..p2; timestamps
    TS0 + 1000 * i over the records in produce order."""
    from confluent_kafka import Producer

    topic = "semantics-transactions"
    kafka_broker.create_topic(topic)
    plain = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 0})
    txn = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 20,
                    "transactional.id": f"{topic}-txn"})
    txn.init_transactions(30)
    i = 0
    for name, commit, mixed in (("a", True, False), ("b", False, False), ("c", True, False),
                                ("d", False, True), ("e", True, True)):
        txn.begin_transaction()
        for j in range(4):
            txn.produce(topic, key=f"{name}{j}".encode(), value=b"x", partition=0,
                        timestamp=TS0 + 1000 * i)
            i += 1
            if mixed and j == 1:
                txn.flush()
                plain.produce(topic, key=f"p{name}".encode(), value=b"y", partition=0,
                              timestamp=TS0 + 1000 * i)
                i += 1
                plain.flush()
        txn.flush()
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    return topic


COMMITTED = ["a0", "a1", "a2", "a3", "c0", "c1", "c2", "c3", "pd", "e0", "e1", "pe", "e2", "e3"]


def test_both_paths_read_committed_records_only(kafka_broker, transactional, tmp_path):
    """Aborted transactions are dropped by the consumer (read_committed) and by exact framing
    (isolation level 1 and the response's aborted transactions); the committed batches keep
    the framing they have in the log."""
    bs = kafka_broker.bootstrap
    consumer = sample(bs, transactional, timeout_s=10)
    exact = sample(bs, transactional, exact_framing=True, timeout_s=10)
    assert _keys(consumer) == _keys(exact) == COMMITTED
    assert consumer.records.column("offset").to_pylist() == \
        exact.records.column("offset").to_pylist()
    # the log as stored (isolation 0) holds the aborted batches; exact framing keeps every
    # other batch row unchanged (markers included) and no aborted one
    with FetchClient(bs, timeout_s=10) as raw_client:
        raw = raw_client.read(transactional, 0, 0, exact.ranges[0].high)
    assert sorted(_keys(raw)) == sorted(COMMITTED + [f"{n}{j}" for n in "bd" for j in range(4)])
    aborted = {bo for bo, k in zip(raw.records.column("batch_offset").to_pylist(),
                                   _keys(raw), strict=True) if k[0] in "bd"}
    cols = ["batch_offset", "record_count", "crc", "size_bytes", "is_control", "producer_id"]
    want = [r for r in raw.batches.select(cols).to_pylist() if r["batch_offset"] not in aborted]
    assert exact.batches.select(cols).to_pylist() == want
    assert sum(exact.batches.column("is_control").to_pylist()) == 5  # every marker
    assert all(exact.batches.column("crc_valid").to_pylist())
    # snapshots, in windows smaller than a transaction, by both paths
    for framing in (False, True):
        snap = sample_to_snapshot(bs, transactional, tmp_path / f"s{framing}",
                                  exact_framing=framing, chunk_records=3, timeout_s=10)
        got = Snapshot.open(tmp_path / f"s{framing}").records()
        assert [k.decode() for k in got.column("key").to_pylist()] == COMMITTED
        assert snap.metadata["extra"]["complete"] is True


def test_time_windows_read_forward_from_the_brokers_answer(kafka_broker, transactional,
                                                          monkeypatch):
    """Kafka's ListOffsets by timestamp counts transaction markers, which carry the broker's
    clock: behind these past timestamps it answers a's COMMIT marker (offset 4) for every
    time.  ``"auto"`` reads forward from that answer (never before it), ``"broker"`` takes it
    as is, ``"scan"`` reads from the start; auto and scan find the same window."""
    reads: list[tuple[int, int]] = []
    real = offsets_mod.scan_time_offsets
    monkeypatch.setattr(offsets_mod, "scan_time_offsets",
                        lambda *a, **k: reads.append((a[2], a[3])) or real(*a, **k))
    bs = kafka_broker.bootstrap
    window = {"start_time_ms": TS0 + 8000, "end_time_ms": TS0 + 17_000, "timeout_s": 10}
    assert [(r.start, r.end) for r in resolve_ranges(bs, transactional, time_lookup="broker",
                                                     allow_empty=True, **window)] == [(4, 4)]
    assert not reads
    # c0 (TS0 + 8000, offset 10) follows b's ABORT marker; the window ends at e0 (offset 21);
    # d's aborted records within it are not read
    for lookup, first in (("auto", 4), ("scan", 0)):
        for framing in (False, True):
            reads.clear()
            r = sample(bs, transactional, time_lookup=lookup, exact_framing=framing, **window)
            assert _keys(r) == ["c0", "c1", "c2", "c3", "pd"]
            assert [(x.start, x.end) for x in r.ranges] == [(10, 21)]
            assert {lo for _, lo in reads} == {first}


def test_compacted_topic_after_the_cleaner_ran(kafka_broker, topic_name):
    """The cleaner keeps the latest record per key inside the batch, at its original offset:
    the sample holds exactly those, by both paths, and kqlab decodes the rewritten batch
    (offset deltas with gaps, new CRC) without an issue."""
    kafka_broker.create_topic(topic_name, config={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0"})
    keys = ["k0", "k1", "k2", "k3", "k4", "k0", "k2", "k0"]  # one batch of 8
    kafka_broker.produce(topic_name, ({"key": k.encode(), "value": f"v{i}".encode(),
                                       "partition": 0} for i, k in enumerate(keys)),
                         config={"linger.ms": 200, "batch.size": 1 << 20})
    time.sleep(0.3)
    kafka_broker.produce(topic_name, [{"key": b"roll", "value": b"r", "partition": 0}])
    latest = {1: "v1", 3: "v3", 4: "v4", 6: "v6", 7: "v7", 8: "r"}  # offset -> value
    deadline = time.monotonic() + 30  # the segment rolled; the cleaner looks every second
    while True:
        r = sample(kafka_broker.bootstrap, topic_name, timeout_s=10)
        if r.records.num_rows == len(latest) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    exact = sample(kafka_broker.bootstrap, topic_name, exact_framing=True, timeout_s=10)
    for got in (r, exact):
        assert dict(zip(got.records.column("offset").to_pylist(),
                        [v.decode() for v in got.records.column("value").to_pylist()],
                        strict=True)) == latest
    assert [(x.low, x.high) for x in exact.ranges] == [(0, 9)]
    b = exact.batches.to_pylist()[0]
    assert (b["batch_offset"], b["record_count"], b["last_offset_delta"]) == (0, 5, 7)
    assert b["crc_valid"] and not exact.issues


def test_log_append_time_topic(kafka_broker, topic_name):
    """On a LogAppendTime topic the broker stamps every batch with its clock: the sample's
    timestamps are the append time (type 1), not the producer's."""
    kafka_broker.create_topic(topic_name, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    kafka_broker.produce(topic_name, ({"key": b"k%d" % i, "value": b"v", "timestamp": TS0 + i,
                                       "partition": 0} for i in range(5)))
    after = int(time.time() * 1000)
    for framing in (False, True):
        r = sample(kafka_broker.bootstrap, topic_name, exact_framing=framing, timeout_s=10)
        assert r.records.column("timestamp_type").to_pylist() == [1] * 5
        assert all(before - 1000 <= t <= after + 1000
                   for t in r.records.column("timestamp").to_pylist())
    assert set(r.batches.column("timestamp_type").to_pylist()) == {1}


def test_max_message_bytes_is_the_topics_limit(kafka_broker, topic_name):
    """A batch over the topic's ``max.message.bytes`` is refused at produce
    (MSG_SIZE_TOO_LARGE) and never reaches a sample; DescribeConfigs reports the limit and
    Kafka's defaults for the unset keys, and kqlab's verdict from those configs agrees."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import ConfigResource, ResourceType

    from kqlab.kafka import Record, build_batch, decode_batches
    from kqlab.kafka.table_checks import broker_verdicts

    kafka_broker.create_topic(topic_name, config={"max.message.bytes": "2000"})
    errors: list = []
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 0})
    for value in (b"s" * 100, b"L" * 5000):
        p.produce(topic_name, value, partition=0,
                  on_delivery=lambda err, msg: errors.append(err and err.code()))
        p.flush(10)
    assert errors == [None, KafkaError.MSG_SIZE_TOO_LARGE]
    r = sample(kafka_broker.bootstrap, topic_name, timeout_s=10)
    assert r.records.column("value").to_pylist() == [b"s" * 100]

    res = ConfigResource(ResourceType.TOPIC, topic_name)
    entries = kafka_broker.admin().describe_configs([res])[res].result(10)
    configs = {k: e.value for k, e in entries.items()}
    assert configs["max.message.bytes"] == "2000" and not entries["max.message.bytes"].is_default
    assert configs["cleanup.policy"] == "delete" and entries["cleanup.policy"].is_default
    set_keys = {k: e.value for k, e in entries.items() if not e.is_default}
    for value, code in ((b"s" * 100, 0), (b"L" * 5000, 10)):  # 10: MESSAGE_TOO_LARGE
        d = decode_batches([build_batch([Record(value=value)], base_timestamp=_now_ms())],
                           topic=topic_name, partition=0)
        # (the keys set on the topic: kqlab's table lacks 4.4's errors.deadletterqueue.*)
        v = broker_verdicts(d.records, d.batches, set_keys, now=_now_ms())
        assert v.column("error_code").to_pylist() == [code]


def _now_ms() -> int:
    return int(time.time() * 1000)
