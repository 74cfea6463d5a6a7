"""Kafka's wire formats and the broker's batch validation, and nothing about policies.

This package knows record batches (magic v0/v1/v2), compression codecs, CRCs, log segment files,
protocol error codes, topic configs and the broker's ordered check procedure (LogValidator and
friends).  See ``shared/spec/kafka-validation.md`` for the section numbers cited in comments.
"""

from kqlab.kafka.batch import RecordBatchHeader, decode_batches, decode_records
from kqlab.kafka.builder import BatchBuilder, Record, build_batch
from kqlab.kafka.compression import Codec
from kqlab.kafka.configs import BrokerProfile, TopicConfig
from kqlab.kafka.errors import KafkaError, error_for_code
from kqlab.kafka.log import LogIssue, iter_log_batches, read_log
from kqlab.kafka.validator import BatchOutcome, PartitionValidator, validate_batches

__all__ = [
    "BatchBuilder",
    "BatchOutcome",
    "BrokerProfile",
    "Codec",
    "KafkaError",
    "LogIssue",
    "PartitionValidator",
    "Record",
    "RecordBatchHeader",
    "TopicConfig",
    "build_batch",
    "decode_batches",
    "decode_records",
    "error_for_code",
    "iter_log_batches",
    "read_log",
    "validate_batches",
]
