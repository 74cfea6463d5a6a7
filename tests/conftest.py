"""Session-wide fixtures: one real Apache Kafka broker for every test that talks Kafka.

The broker (single-node KRaft on loopback, :mod:`kqlab.embedded.kafka`) costs ~4 s to start,
so the whole session shares one; each test uses topics of its own (:func:`topic_name` gives a
unique one).  A test that is about the broker's life itself (a crash, a restart, a plugin on
its classpath) starts a broker of its own.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest

_SEQ = itertools.count()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[object]:
    """The session's real Apache Kafka broker (the newest 4.x of ``kqlab.embedded.VERSIONS``)."""
    from kqlab.embedded import KafkaBroker

    b = KafkaBroker()
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name no other test of the session uses (from the test's own name)."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:120].strip("-.")
    return f"{base}-{next(_SEQ)}"
