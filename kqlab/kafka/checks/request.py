"""Spec §1.1 and §3.A-§3.B: scanning the request's records field, and the request and
replica-manager stages (``KafkaApis.handleProduceRequest``, ``ProduceRequest.validateRecords``,
``ReplicaManager``).  These decide before any batch is opened."""

from __future__ import annotations

from kqlab.kafka import errors as kerr
from kqlab.kafka.checks._check import CHECKS, Check

#: the internal topics only the admin client may write (B4)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
LOG_OVERHEAD = 12
MIN_RECORD_OVERHEAD = 14

S1 = CHECKS.add(Check(
    "S1", "1.1", kerr.CORRUPT_MESSAGE,
    "Record size {length} is less than the minimum record overhead (14)",
    "a batch's length field is below LegacyRecord.RECORD_OVERHEAD_V0",
    "ByteBufferLogInputStream.nextBatchSize", "error_message"))
S3 = CHECKS.add(Check(
    "S3", "1.1", kerr.CORRUPT_MESSAGE, "Invalid magic found in record: {magic}",
    "a batch's magic byte is not 0, 1 or 2", "ByteBufferLogInputStream.nextBatch",
    "error_message"))
A1 = CHECKS.add(Check(
    "A1", "3.A", kerr.CORRUPT_MESSAGE, "{scan_error}",
    "scanning the first batch of a partition raises S1/S3 (whole request)",
    "RequestUtils.hasTransactionalRecords", "error_message"))
A1_AUTH = CHECKS.add(Check(
    "A1'", "3.A", kerr.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    "Transactional Id authorization failed.",
    "a first batch is transactional and the transactional id is not authorized "
    "(whole request)", "KafkaApis.handleProduceRequest", "error_message"))
A4_A = CHECKS.add(Check(
    "A4.a", "3.A", kerr.INVALID_RECORD,
    "Produce requests with version {version} must have at least one record batch per "
    "partition", "no complete batch in the partition's records",
    "ProduceRequest.validateRecords"))
A4_B = CHECKS.add(Check(
    "A4.b", "3.A", kerr.INVALID_RECORD,
    "Produce requests with version {version} are only allowed to contain record batches with "
    "magic version 2", "the first batch's magic is not 2", "ProduceRequest.validateRecords"))
A4_C = CHECKS.add(Check(
    "A4.c", "3.A", kerr.UNSUPPORTED_COMPRESSION_TYPE,
    "Produce requests with version {version} are not allowed to use ZStandard compression",
    "zstd in a produce request below version 7", "ProduceRequest.validateRecords"))
A4_C_UNKNOWN = CHECKS.add(Check(
    "A4.c", "3.A", kerr.UNKNOWN_SERVER_ERROR, "Unknown compression type id: {codec}",
    "codec id 5-7 in a produce request below version 7 (IllegalArgumentException escapes; "
    "whole request)", "CompressionType.forId", id="A4.c/codec"))
A4_D = CHECKS.add(Check(
    "A4.d", "3.A", kerr.INVALID_RECORD,
    "Produce requests with version {version} are only allowed to contain exactly one record "
    "batch per partition", "a second batch follows the first", "ProduceRequest.validateRecords"))
A4_D_SCAN = CHECKS.add(Check(
    "A4.d", "3.A", kerr.CORRUPT_MESSAGE, "{scan_error}",
    "scanning for a second batch raises S1/S3", "ProduceRequest.validateRecords", id="A4.d/scan"))
B0 = CHECKS.add(Check(
    "B0", "3.B", kerr.UNKNOWN_SERVER_ERROR,
    "java.lang.IndexOutOfBoundsException reading producerId",
    "a v2 first batch of 26-50 bytes: reading its producer id runs past the slice "
    "(whole request)", "ReplicaManager.handleProduceAppend"))
B3 = CHECKS.add(Check(
    "B3", "3.B", kerr.INVALID_REQUIRED_ACKS, "Invalid required acks {acks}",
    "acks is not -1, 0 or 1", "ReplicaManager.appendRecords"))
B4 = CHECKS.add(Check(
    "B4", "3.B", kerr.INVALID_TOPIC_EXCEPTION, "Cannot append to internal topic {topic}",
    "an internal topic written by a client other than __admin_client",
    "ReplicaManager.appendToLocalLog"))


def whole_request_message(error: kerr.KafkaError, text: str | None) -> str | None:
    """§5.4: ``ProduceRequest.getErrorResponse`` drops the text for UNKNOWN_SERVER_ERROR and
    when it equals the code's default message."""
    return None if error.code == -1 or text == error.message else text
