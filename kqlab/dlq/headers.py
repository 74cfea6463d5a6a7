"""The failure headers the common producers of dead letters write, by *family*.

A dead-letter record is the original record (key, value, usually its headers, usually its
timestamp) plus a few headers appended by whoever dead-lettered it, saying why and where it
came from.  Four producers are common; their header names are fixed here once, each read from
the producer's own source:

* ``kqlab`` — kqlab's validating gate (:mod:`kqlab.gate._gate`, whose constants are imported,
  not copied) and the Spark enforcer, which writes the same headers: ``kqlab.rule`` (the rule
  id, or ``broker:<step>`` / ``decode:value``), ``kqlab.message``, ``kqlab.source.topic`` /
  ``.partition`` / ``.offset`` and ``kqlab.policy`` (``name@hash``), appended after the
  record's own headers;
* ``confluent`` — the data-contract rule executor's DLQ action in the Confluent clients
  (confluent-kafka-python 2.16's ``DlqAction._populate_headers``:
  ``confluent_kafka.schema_registry.common.serde.DLQ_RULE_*_HEADER``): ``__rule.name``,
  ``__rule.mode``, ``__rule.subject``, ``__rule.topic`` and, when an exception was raised,
  ``__rule.exception``, appended after the headers of the produce call.  The record never
  reached Kafka (a serializer refused it), so there is no source partition or offset, and on
  ``WRITE`` failures the value is the *JSON form of the object* (the serialized bytes never
  existed), not the bytes a producer would have written;
* ``connect`` — Kafka Connect's sink DLQ with ``errors.deadletterqueue.context.headers.enable``
  (apache/kafka ``DeadLetterQueueReporter``): ``__connect.errors.topic`` / ``.partition`` /
  ``.offset``, ``.connector.name``, ``.task.id``, ``.stage``, ``.class.name``,
  ``.exception.class.name``, ``.exception.message`` and ``.exception.stacktrace``, appended
  after the consumed record's headers;
* ``streams`` — Kafka Streams' built-in DLQ (KIP-1034, ``errors.dead.letter.queue.topic.name``;
  apache/kafka ``ExceptionHandlerUtils``): ``__streams.errors.exception`` (the exception's
  ``toString()``: ``<class>: <message>``), ``.message``, ``.stacktrace``, ``.topic``,
  ``.partition``, ``.offset``.  Streams builds a *new* record from the raw key and value:
  the original headers are **not** kept, and a redriven record goes back without them.

Connect and Streams write ``-1`` for a partition/offset they do not know; those are read as
unknown.  A record whose headers match none of these is of family ``none`` and its reason is
``unknown reason``: shown, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from kqlab.gate._gate import H_MESSAGE, H_OFFSET, H_PARTITION, H_POLICY, H_RULE, H_TOPIC

__all__ = [
    "CONFLUENT",
    "CONNECT",
    "FAMILIES",
    "FAMILY_NAMES",
    "KQLAB",
    "NO_FAMILY",
    "REDRIVE_HEADER",
    "STREAMS",
    "UNKNOWN_REASON",
    "Family",
]

#: the reason of a dead letter without (readable) failure headers
UNKNOWN_REASON = "unknown reason"
#: the family of a record no known producer dead-lettered
NO_FAMILY = "none"
#: the marker header a redrive adds: ``<dlq topic>:<partition>:<offset>`` of the dead letter
#: it came from (topic names cannot hold ``:``, so the value splits unambiguously)
REDRIVE_HEADER = "kqlab.redrive"


@dataclass(frozen=True)
class Family:
    """One producer's failure headers: how to recognise them and which one says what.

    ``keys`` are the exact header names, or ``prefix`` names them all; the other fields name
    the header holding the rule, message, exception, and source coordinates (None: the
    producer writes no such header).  ``reason_prefix`` marks reasons built from an exception
    class (``connect:DataException``) rather than a rule id."""

    name: str
    label: str
    keys: tuple[str, ...]
    prefix: str | None = None
    rule: str | None = None
    message: str | None = None
    exception: str | None = None
    #: the exception header holds ``<class>: <message>`` (Streams' ``toString()``)
    exception_to_string: bool = False
    topic: str | None = None
    partition: str | None = None
    offset: str | None = None
    reason_prefix: str | None = None
    #: the dead letter keeps the original record's headers before the failure headers
    keeps_headers: bool = True


KQLAB = Family(
    "kqlab", "kqlab gate / Spark enforcer",
    keys=(H_RULE, H_MESSAGE, H_TOPIC, H_PARTITION, H_OFFSET, H_POLICY),
    rule=H_RULE, message=H_MESSAGE, topic=H_TOPIC, partition=H_PARTITION, offset=H_OFFSET)

_R = "__rule."
CONFLUENT = Family(
    "confluent", "Confluent data-contract rule (DLQ action)",
    keys=tuple(_R + k for k in ("name", "mode", "subject", "topic", "exception")), prefix=_R,
    rule=_R + "name", message=_R + "exception", topic=_R + "topic")

_C = "__connect.errors."
CONNECT = Family(
    "connect", "Kafka Connect sink DLQ",
    keys=tuple(_C + k for k in (
        "topic", "partition", "offset", "connector.name", "task.id", "stage", "class.name",
        "exception.class.name", "exception.message", "exception.stacktrace")), prefix=_C,
    message=_C + "exception.message", exception=_C + "exception.class.name",
    topic=_C + "topic", partition=_C + "partition", offset=_C + "offset",
    reason_prefix="connect:")

_S = "__streams.errors."
STREAMS = Family(
    "streams", "Kafka Streams DLQ (KIP-1034)",
    keys=tuple(_S + k for k in ("exception", "message", "stacktrace", "topic", "partition",
                                "offset")), prefix=_S,
    message=_S + "message", exception=_S + "exception", exception_to_string=True,
    topic=_S + "topic", partition=_S + "partition", offset=_S + "offset",
    reason_prefix="streams:", keeps_headers=False)

#: every known family, in the order of their codes (1, 2, ...; 0 is no family)
FAMILIES: tuple[Family, ...] = (KQLAB, CONFLUENT, CONNECT, STREAMS)
#: family code -> name (index 0: no family)
FAMILY_NAMES: tuple[str, ...] = (NO_FAMILY, *(f.name for f in FAMILIES))
