"""Embedded brokers: a real Apache Kafka for the demo and the tests; Tansu for its own target.

:func:`broker` / :class:`Broker` start a single-node KRaft Apache Kafka broker on loopback from
the jars ``make setup`` resolves from Maven Central (:mod:`kqlab.embedded.kafka`).  Tansu
(:mod:`kqlab.embedded.tansu`) is not Kafka and runs only as the ``tansu`` export target.

To point kqlab at one's own cluster instead, pass its ``bootstrap.servers`` wherever a command
or function takes a bootstrap; nothing here is needed then.
"""

from __future__ import annotations

from kqlab.embedded._process import EmbeddedBrokerError, free_port
from kqlab.embedded.kafka import (
    DEFAULT_VERSION,
    VERSIONS,
    KafkaBroker,
    kafka_broker,
    kafka_libs,
)
from kqlab.embedded.tansu import TansuBroker, tansu_binary, tansu_broker

#: the broker of the demo and the tests
Broker = KafkaBroker
broker = kafka_broker

__all__ = ["DEFAULT_VERSION", "VERSIONS", "Broker", "EmbeddedBrokerError", "KafkaBroker",
           "TansuBroker", "broker", "free_port", "kafka_broker", "kafka_libs", "tansu_binary",
           "tansu_broker"]
