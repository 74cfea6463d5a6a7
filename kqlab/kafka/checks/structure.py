"""Spec §3.D.3: reading a batch's records, as the Kafka 4.x broker's readers do.

Structural errors abort the partition with no record errors; each Java exception family is one
:class:`Check` here, with the code ``ReplicaManager.appendToLocalLog`` answers for it
(``Errors.forException``): an ``InvalidRecordException`` is INVALID_RECORD (step ``D3``); an
``IOException`` from the codec is wrapped in a ``KafkaException`` and an
``IllegalArgumentException``, ``UnsupportedOperationException`` or ``OutOfMemoryError`` escapes
as it is: all UNKNOWN_SERVER_ERROR (steps ``D3.codec``, ``D3.varint``, ``D3.alloc``,
``D3.rebuild``).  The texts are the broker's exception messages (logged, never returned).

Which check a reader's finding is depends on the reader (:class:`ReadMode`): the same length
varint with five continuation bytes is UNKNOWN_SERVER_ERROR from the uncompressed reader
(``uncompressedIterator`` only catches ``BufferUnderflowException``) and INVALID_RECORD from the
compressed ones (``StreamRecordIterator.readNext`` turns ``IllegalArgumentException`` into
"premature EOF").  :func:`reading_check` is that mapping, used by the byte-level validator, the
decoder (which stores the result as data in the batches table) and, through those columns, the
table checks.  Sources and the fault table: ``docs/kafka-4x-record-structure.md``.
"""

from __future__ import annotations

from kqlab.kafka import errors as kerr
from kqlab.kafka._records_py import ParseErrorKind, ReadMode
from kqlab.kafka.checks._check import CHECKS, Check

_READERS = ("DefaultRecordBatch.RecordIterator / DefaultRecord.readFrom / "
            "readPartiallyFrom")

# -- INVALID_RECORD: InvalidRecordException from the record readers -----------------------------
D3_EOF = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD, "Incorrect declared batch size, premature EOF reached",
    "the records end before the declared count: a length varint at the end of the buffer, or "
    "(compressed) at the end of the stream, too long or a negative length for the rebuild "
    "reader", "DefaultRecordBatch.uncompressedIterator / StreamRecordIterator.readNext",
    id="D3/eof"))
D3_SIZE = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD,
    "Invalid record size: expected {size} bytes in record payload, but instead the buffer has "
    "only {remaining} remaining bytes.",
    "uncompressed: a record's length exceeds the bytes left in the batch",
    "DefaultRecord.readFrom(ByteBuffer)", id="D3/size"))
D3_PAYLOAD_EOF = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD,
    "Invalid record size: expected {size} bytes in record payload, but the record payload "
    "reached EOF.", "compressed, rebuilt: the stream ends inside a record's body",
    "DefaultRecord.readFrom(InputStream)", id="D3/payload"))
D3_SIZE_READ = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD,
    "Invalid record size: expected to read {size} bytes in record payload, but instead read "
    "{read}", "full readers: the record's fields do not use exactly its declared length",
    "DefaultRecord.readFrom", id="D3/read"))
D3_HEADERS = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD, "Found invalid number of record headers {count}",
    "a negative header count", _READERS, id="D3/headers"))
D3_HEADERS_LEFT = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD,
    "Found invalid number of record headers. {count} is larger than the remaining size of the "
    "buffer", "full readers: more headers than bytes left", "DefaultRecord.readFrom",
    id="D3/headers-left"))
D3_HEADER_KEY = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD, "Invalid negative header key size {size}",
    "a negative header key length", _READERS, id="D3/header-key"))
D3_STRUCTURE = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD, "Found invalid record structure",
    "a varint too long inside a record, or a field running past the record (full readers) or "
    "past the end of the stream (a varint, for the in-place reader)", _READERS,
    id="D3/structure"))
D3_SKIP = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD,
    "Reached end of input stream before skipping all bytes. Remaining bytes:{remaining}",
    "compressed, in place: a key, value or header runs past the end of the stream",
    "DefaultRecord.skipBytes", id="D3/skip"))
D3_REMAINING = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD,
    "Incorrect declared batch size, records still remaining in file",
    "bytes (or decompressed bytes) follow the declared count of records",
    "DefaultRecordBatch.RecordIterator.next", id="D3/remaining"))
D3_COUNT = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD, "Found invalid record count {count} in magic v2 batch",
    "a negative record count (clients are stopped earlier by D2.c)",
    "DefaultRecordBatch.RecordIterator", id="D3/count"))

# -- UNKNOWN_SERVER_ERROR: exceptions Errors.forException does not know --------------------------
D3_CODEC = CHECKS.add(Check(
    "D3.codec", "3.D.3", kerr.UNKNOWN_SERVER_ERROR,
    "Failed to decompress record stream ({cause})",
    "the codec fails (IOException, or an unchecked exception of the codec) while a record is "
    "read: a corrupt or truncated compressed stream", "DefaultRecordBatch.StreamRecordIterator"
    ".readNext"))
D3_CODEC_OPEN = CHECKS.add(Check(
    "D3.codec", "3.D.3", kerr.UNKNOWN_SERVER_ERROR, "{cause}",
    "the codec's stream cannot even be opened (a bad gzip or lz4 header, an empty or broken "
    "raw snappy block): KafkaException(cause) before any record", "Compression.wrapForInput",
    id="D3.codec/open"))
D3_CODEC_TAIL = CHECKS.add(Check(
    "D3.codec", "3.D.3", kerr.UNKNOWN_SERVER_ERROR,
    "Error checking for remaining bytes after reading batch ({cause})",
    "every declared record was read, then the codec fails looking for more (a bad trailer, "
    "checksum or block after the records)",
    "DefaultRecordBatch.StreamRecordIterator.ensureNoneRemaining", id="D3.codec/tail"))
D3_VARINT = CHECKS.add(Check(
    "D3.varint", "3.D.3", kerr.UNKNOWN_SERVER_ERROR,
    "Varint is too long, the most significant bit in the 5th byte is set, converted value: "
    "{value}", "uncompressed: a record's length varint has five continuation bytes "
    "(IllegalArgumentException escapes the iterator)",
    "ByteUtils.readVarint(ByteBuffer) via DefaultRecordBatch.uncompressedIterator"))
D3_ALLOC = CHECKS.add(Check(
    "D3.alloc", "3.D.3", kerr.UNKNOWN_SERVER_ERROR, "Java heap space",
    "compressed, rebuilt: a record's declared length of 1 GiB or more cannot be allocated "
    "(OutOfMemoryError on the stock -Xmx1G heap)",
    "DefaultRecord.readFrom(InputStream): ByteBuffer.allocate"))
D3_REBUILD = CHECKS.add(Check(
    "D3.rebuild", "3.D.3", kerr.UNKNOWN_SERVER_ERROR, "key is skipped in PartialDefaultRecord",
    "compressed, read in place, no record error, and some record's offset delta is not its "
    "position: in-place assignment turns off and the batch is rebuilt from the partial "
    "records (UnsupportedOperationException)",
    "LogValidator.buildRecordsAndAssignOffsets / PartialDefaultRecord.key"))
D3_REBUILD_PRODUCER = CHECKS.add(Check(
    "D3.rebuild", "3.D.3", kerr.UNKNOWN_SERVER_ERROR, "{reason}",
    "rebuilt (another codec, or offsets reassigned): the first batch's producer fields cannot "
    "start the new batch — transactional without a producer id, or a producer id with epoch "
    "-1 or a negative base sequence (IllegalArgumentException; found by the broker oracle)",
    "LogValidator.buildRecordsAndAssignOffsets / MemoryRecordsBuilder.<init>",
    id="D3.rebuild/producer"))


def rebuild_producer_reason(pid: int, epoch: int, base_sequence: int,
                            transactional: bool) -> str | None:
    """Why ``MemoryRecordsBuilder`` refuses these producer fields (None: it takes them).  The
    broker builds with ``isControlBatch=false``, so a control batch's -1 sequence counts."""
    if transactional and pid == -1:
        return "Cannot write transactional messages without a valid producer ID"
    if pid != -1 and epoch == -1:
        return "Invalid negative producer epoch"
    if pid != -1 and base_sequence < 0:
        return "Invalid negative sequence number used"
    return None

# -- legacy message sets (v0/v1; produce v0-2 on 3.x only: 4.x refuses them at A4.b) ------------
D3_LEGACY = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD, "{reason}",
    "a compressed v0/v1 wrapper's inner message set is unusable (null value, no inner "
    "messages, a compressed inner message, a wrapper offset below the last inner offset)",
    "AbstractLegacyRecordBatch.DeepRecordsIterator", id="D3/legacy"))
D3_LEGACY_ZSTD = CHECKS.add(Check(
    "D3", "3.D.3", kerr.INVALID_RECORD,
    "Invalid wrapper compressionType found in legacy deep record iterator {magic}",
    "a v0/v1 wrapper with codec 4 (zstd); the text prints the magic, as Kafka's does",
    "AbstractLegacyRecordBatch.DeepRecordsIterator", id="D3/legacy-zstd"))
D3_LEGACY_SIZE = CHECKS.add(Check(
    "D3.corrupt", "3.D.3", kerr.CORRUPT_MESSAGE,
    "Record size is less than the minimum record overhead (14)",
    "an inner message of a compressed v0/v1 wrapper declares fewer than 14 bytes",
    "AbstractLegacyRecordBatch.DataLogInputStream.nextBatch"))
D3_LEGACY_CODEC = CHECKS.add(Check(
    "D3.codec", "3.D.3", kerr.UNKNOWN_SERVER_ERROR, "{cause}",
    "the codec of a compressed v0/v1 wrapper fails anywhere (the inner set is read at once): "
    "KafkaException(cause)", "AbstractLegacyRecordBatch.DeepRecordsIterator",
    id="D3.codec/legacy"))


def reading_check(kind: int, a: int, b: int, mode: int, cause: str | None = None
                  ) -> tuple[Check, dict[str, object]]:
    """The check a reader's finding is, and its parameters: ``(kind, a, b)`` from
    :func:`kqlab.kafka.records_parser.parse_records` in :class:`ReadMode` ``mode``; ``cause``
    is the codec's exception text for the codec kinds."""
    k = ParseErrorKind(kind)
    if k is ParseErrorKind.PREMATURE_EOF:
        return D3_EOF, {}
    if k is ParseErrorKind.SIZE_EXCEEDS_REMAINING:
        if mode == ReadMode.STREAM:
            return D3_PAYLOAD_EOF, {"size": a}
        return D3_SIZE, {"size": a, "remaining": b}
    if k is ParseErrorKind.PAYLOAD_EOF:
        return D3_PAYLOAD_EOF, {"size": a}
    if k is ParseErrorKind.SIZE_MISMATCH:
        return D3_SIZE_READ, {"size": a, "read": b}
    if k is ParseErrorKind.NEGATIVE_HEADER_COUNT:
        return D3_HEADERS, {"count": a}
    if k is ParseErrorKind.HEADER_COUNT_EXCEEDS_REMAINING:
        return D3_HEADERS_LEFT, {"count": a}
    if k is ParseErrorKind.NEGATIVE_HEADER_KEY:
        return D3_HEADER_KEY, {"size": a}
    if k is ParseErrorKind.INVALID_STRUCTURE:
        return D3_STRUCTURE, {}
    if k is ParseErrorKind.RECORDS_REMAINING:
        return D3_REMAINING, {}
    if k is ParseErrorKind.INVALID_COUNT:
        return D3_COUNT, {"count": a}
    if k is ParseErrorKind.SKIP_EOF:
        return D3_SKIP, {"remaining": a}
    if k is ParseErrorKind.LENGTH_TOO_LONG:
        return D3_VARINT, {"value": format(a & 0xFFFFFFFF, "x")}
    if k is ParseErrorKind.BODY_TOO_LARGE:
        return D3_ALLOC, {"size": a}
    if k is ParseErrorKind.CODEC_READ:
        return D3_CODEC, {"cause": cause or "java.io.IOException"}
    return D3_CODEC_TAIL, {"cause": cause or "java.io.IOException"}
