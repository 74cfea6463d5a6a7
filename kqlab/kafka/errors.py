"""Kafka protocol error codes as the produce path uses them (spec §5.3).

Each code carries its wire name, the client's default message (shown when the broker sends no
``error_message``) and whether the Java client treats it as retriable — the producer-side outcome
of a verdict depends on that flag (spec §6).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaError:
    """One protocol error code: ``code``, wire ``name``, default ``message``, ``retriable``."""

    code: int
    name: str
    message: str
    retriable: bool = False


_ERRORS = (
    KafkaError(-1, "UNKNOWN_SERVER_ERROR",
               "The server experienced an unexpected error when processing the request."),
    KafkaError(0, "NONE", ""),
    KafkaError(2, "CORRUPT_MESSAGE",
               "This message has failed its CRC checksum, exceeds the valid size, has a null key "
               "for a compacted topic, or is otherwise corrupt.", retriable=True),
    KafkaError(3, "UNKNOWN_TOPIC_OR_PARTITION",
               "This server does not host this topic-partition.", retriable=True),
    KafkaError(6, "NOT_LEADER_OR_FOLLOWER",
               "For requests intended only for the leader, this error indicates that the broker "
               "is not the current leader. For requests intended for any replica, this error "
               "indicates that the broker is not a replica of the topic partition.",
               retriable=True),
    KafkaError(10, "MESSAGE_TOO_LARGE",
               "The request included a message larger than the max message size the server will "
               "accept."),
    KafkaError(17, "INVALID_TOPIC_EXCEPTION",
               "The request attempted to perform an operation on an invalid topic."),
    KafkaError(18, "RECORD_LIST_TOO_LARGE",
               "The request included message batch larger than the configured segment size on "
               "the server."),
    KafkaError(19, "NOT_ENOUGH_REPLICAS",
               "Messages are rejected since there are fewer in-sync replicas than required.",
               retriable=True),
    KafkaError(21, "INVALID_REQUIRED_ACKS",
               "Produce request specified an invalid value for required acks."),
    KafkaError(32, "INVALID_TIMESTAMP",
               "The timestamp of the message is out of acceptable range."),
    KafkaError(43, "UNSUPPORTED_FOR_MESSAGE_FORMAT",
               "The message format version on the broker does not support the request."),
    KafkaError(44, "POLICY_VIOLATION", "Request parameters do not satisfy the configured policy."),
    KafkaError(45, "OUT_OF_ORDER_SEQUENCE_NUMBER",
               "The broker received an out of order sequence number."),
    KafkaError(46, "DUPLICATE_SEQUENCE_NUMBER", "The broker received a duplicate sequence number."),
    KafkaError(47, "INVALID_PRODUCER_EPOCH",
               "Producer attempted to produce with an old epoch."),
    KafkaError(48, "INVALID_TXN_STATE",
               "The producer attempted a transactional operation in an invalid state."),
    KafkaError(49, "INVALID_PRODUCER_ID_MAPPING",
               "The producer attempted to use a producer id which is not currently assigned to "
               "its transactional id."),
    KafkaError(52, "TRANSACTION_COORDINATOR_FENCED",
               "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer "
               "the current coordinator for a given producer."),
    KafkaError(53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
               "Transactional Id authorization failed."),
    KafkaError(76, "UNSUPPORTED_COMPRESSION_TYPE",
               "The requesting client does not support the compression type of given partition."),
    KafkaError(87, "INVALID_RECORD",
               "This record has failed the validation on broker and hence will be rejected."),
    KafkaError(120, "TRANSACTION_ABORTABLE",
               "The server encountered an error with the transaction. The client can abort the "
               "transaction to continue using this transactional ID."),
)

_BY_CODE = {e.code: e for e in _ERRORS}
_BY_NAME = {e.name: e for e in _ERRORS}

NONE = _BY_CODE[0]
UNKNOWN_SERVER_ERROR = _BY_CODE[-1]
CORRUPT_MESSAGE = _BY_CODE[2]
MESSAGE_TOO_LARGE = _BY_CODE[10]
INVALID_TOPIC_EXCEPTION = _BY_CODE[17]
RECORD_LIST_TOO_LARGE = _BY_CODE[18]
NOT_ENOUGH_REPLICAS = _BY_CODE[19]
INVALID_REQUIRED_ACKS = _BY_CODE[21]
INVALID_TIMESTAMP = _BY_CODE[32]
UNSUPPORTED_FOR_MESSAGE_FORMAT = _BY_CODE[43]
POLICY_VIOLATION = _BY_CODE[44]
OUT_OF_ORDER_SEQUENCE_NUMBER = _BY_CODE[45]
INVALID_PRODUCER_EPOCH = _BY_CODE[47]
INVALID_TXN_STATE = _BY_CODE[48]
INVALID_PRODUCER_ID_MAPPING = _BY_CODE[49]
TRANSACTION_COORDINATOR_FENCED = _BY_CODE[52]
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = _BY_CODE[53]
UNSUPPORTED_COMPRESSION_TYPE = _BY_CODE[76]
INVALID_RECORD = _BY_CODE[87]


def error_for_code(code: int) -> KafkaError:
    """Return the :class:`KafkaError` for ``code``; unknown codes raise ``KeyError`` naming it."""
    try:
        return _BY_CODE[code]
    except KeyError:
        raise KeyError(f"unknown Kafka error code {code}; known: {sorted(_BY_CODE)}") from None


def error_for_name(name: str) -> KafkaError:
    """Return the :class:`KafkaError` with wire name ``name`` (e.g. ``"INVALID_RECORD"``)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown Kafka error name {name!r}") from None
