"""Kafka's wire formats and the broker's batch validation, and nothing about policies.

This package knows record batches (magic v0/v1/v2), compression codecs, CRCs, log segment files,
protocol error codes, topic configs and the broker's ordered check procedure (LogValidator and
friends).  See ``shared/spec/kafka-validation.md`` for the section numbers cited in comments.
"""

import importlib
from typing import Any

# public name -> module (loaded on first use: ``kqlab.kafka.configs`` alone stays light)
_EXPORTS = {
    "BatchBuilder": "kqlab.kafka.builder",
    "BatchOutcome": "kqlab.kafka.validator",
    "BrokerRelease": "kqlab.kafka.configs",
    "Codec": "kqlab.kafka.compression",
    "KafkaError": "kqlab.kafka.errors",
    "LogIssue": "kqlab.kafka.log",
    "PartitionValidator": "kqlab.kafka.validator",
    "PolicyErrors": "kqlab.kafka.validator",
    "Record": "kqlab.kafka.builder",
    "RecordBatchHeader": "kqlab.kafka.batch",
    "RecordPolicy": "kqlab.kafka.table_checks",
    "TopicConfig": "kqlab.kafka.configs",
    "broker_verdicts": "kqlab.kafka.table_checks",
    "build_batch": "kqlab.kafka.builder",
    "decode_batches": "kqlab.kafka.batch",
    "decode_records": "kqlab.kafka.batch",
    "error_for_code": "kqlab.kafka.errors",
    "iter_log_batches": "kqlab.kafka.log",
    "read_log": "kqlab.kafka.log",
    "validate_batches": "kqlab.kafka.validator",
}

__all__ = [
    "BatchBuilder",
    "BatchOutcome",
    "BrokerRelease",
    "Codec",
    "KafkaError",
    "LogIssue",
    "PartitionValidator",
    "PolicyErrors",
    "Record",
    "RecordBatchHeader",
    "RecordPolicy",
    "TopicConfig",
    "broker_verdicts",
    "build_batch",
    "decode_batches",
    "decode_records",
    "error_for_code",
    "iter_log_batches",
    "read_log",
    "validate_batches",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kqlab.kafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
