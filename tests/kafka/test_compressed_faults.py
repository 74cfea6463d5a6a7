"""Record structure and compressed batches, judged as a Kafka 4.x broker judges them (spec
§3.D.3, §1.6; ``docs/kafka-4x-record-structure.md``).

Each fault is built from a real batch (``kqlab.kafka.builder``) whose records bytes are then
damaged, with the CRC recomputed so C3 passes.  Every verdict is asserted on four engines that
must agree: ``validate_batches`` with ``source="producer"`` and ``source="log"``, and
``broker_verdicts`` over the decoded tables with and without ``raw=``.  Paths: "in place" is a
compressed batch on a ``compression.type=producer`` topic (``skipKeyValueIterator``),
"rebuild" the same batch on an ``uncompressed`` topic (``streamingIterator``).  Each test names
the Java method that decides.
"""

from __future__ import annotations

import os
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from kqlab.kafka import legacy
from kqlab.kafka.batch import decode_batches
from kqlab.kafka.builder import Record, build_batch, encode_record
from kqlab.kafka.compression import XERIAL_MAGIC, Codec, compress
from kqlab.kafka.records_parser import crc32c
from kqlab.kafka.table_checks import UNDETERMINED, broker_verdicts
from kqlab.kafka.validator import validate_batches
from kqlab.kafka.varint import encode_varint, encode_varlong

NOW = 1_700_000_000_000
COMPRESSED = [pytest.param(c, id=c.label) for c in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4,
                                                    Codec.ZSTD)]
IN_PLACE: dict = {}
REBUILD = {"compression.type": "uncompressed"}
PATHS = [pytest.param(IN_PLACE, id="in_place"), pytest.param(REBUILD, id="rebuild")]
EOF_TEXT = "Incorrect declared batch size, premature EOF reached"
RECS = [Record(key=b"k%d" % i, value=b"value-%d" % i) for i in range(3)]


# -- building damaged batches --------------------------------------------------------------------

def region_of(records: list[Record]) -> bytes:
    """The uncompressed records bytes of a batch of ``records``."""
    return build_batch(records, base_timestamp=NOW)[61:]


def reframe(batch: bytes, *, region: bytes | None = None, wire: bytes | None = None,
            count: int | None = None) -> bytes:
    """``batch`` (from the builder) with its records replaced: ``region`` is compressed with
    the batch's codec, ``wire`` goes in as it is; ``count`` sets recordsCount and a consistent
    lastOffsetDelta.  batchLength and the CRC (records_parser.crc32c) are recomputed."""
    codec = batch[22] & 0x07
    body = wire if wire is not None else (
        batch[61:] if region is None else compress(codec, region))
    out = bytearray(batch[:61] + body)
    struct.pack_into(">i", out, 8, 49 + len(body))
    if count is not None:
        struct.pack_into(">i", out, 23, count - 1)
        struct.pack_into(">i", out, 57, count)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def batch_of(codec: Codec, records: list[Record] = RECS, **kw) -> bytes:
    return build_batch(records, codec=codec, base_timestamp=NOW, **kw)


def record_with(*, length: int | None = None, key: bytes = encode_varint(1) + b"k",
                headers: bytes = encode_varint(0)) -> bytes:
    """One record around hand-made fields; ``length`` overrides its (correct) length."""
    body = b"\x00" + encode_varlong(0) + encode_varint(0) + key + encode_varint(1) + b"v" + \
        headers
    return encode_varint(len(body) if length is None else length) + body


# -- judging on the four engines -----------------------------------------------------------------

def verdicts(batch: bytes, config: dict, **request) -> list[dict]:
    """The batch's verdict from the validator (producer and log sources) and from the table
    checks with and without the bytes."""
    rows = [validate_batches([batch], topic="t", partition=0, config=config, now=NOW,
                             source=source, **request).to_pylist()[0]
            for source in ("producer", "log")]
    d = decode_batches([batch], topic="t", partition=0)
    # the tables judge produce v3+ themselves; older requests only with the bytes
    tables_alone = request.get("produce_version", 9) >= 3
    for raw in ([batch], None) if tables_alone else ([batch],):
        rows.append(broker_verdicts(d.records, d.batches, config, now=NOW, raw=raw,
                                    **request).to_pylist()[0])
    return rows


def judged(batch: bytes, config: dict, code: int, check: str | None, *,
           detail: str | None = None, tables: bool = True, **request) -> dict:
    """Assert every engine answers ``(code, check)`` with one detail and one set of params
    (``tables=False``: the tables alone cannot know, the row says undetermined)."""
    rows = verdicts(batch, config, **request)
    exact = rows if tables or len(rows) == 3 else rows[:3]
    for r in exact:
        assert (r["error_code"], r["check"]) == (code, check), r
        assert r["detail"] == exact[0]["detail"], (r, exact[0])
        assert r["params"] == exact[0]["params"], (r, exact[0])
        assert r["record_errors"] == exact[0]["record_errors"]
    if detail is not None:
        assert exact[0]["detail"] == detail, exact[0]["detail"]
    if not tables and len(rows) == 4:
        assert rows[3]["check"] == UNDETERMINED and rows[3]["error_code"] is None, rows[3]
    return exact[0]


def accepted(batch: bytes, config: dict, *, tables: bool = True) -> None:
    judged(batch, config, 0, None, tables=tables)


# -- 1. inner offsets ----------------------------------------------------------------------------

NON_SEQUENTIAL = [Record(key=b"k", value=b"a", offset_delta=0),
                  Record(key=b"k", value=b"b", offset_delta=0),
                  Record(key=b"k", value=b"c", offset_delta=2)]


@pytest.mark.parametrize("codec", COMPRESSED)
def test_non_sequential_offsets_in_place_cannot_be_rebuilt(codec):
    """LogValidator.validateMessagesAndAssignOffsetsCompressed: the in-place batch was read
    with skipKeyValueIterator; an offset that is not its position turns inPlaceAssignment off
    and buildRecordsAndAssignOffsets -> AbstractRecords.estimateSizeInBytes calls
    PartialDefaultRecord.key(): UnsupportedOperationException, UNKNOWN_SERVER_ERROR."""
    batch = batch_of(codec, NON_SEQUENTIAL, last_offset_delta=2)
    judged(batch, IN_PLACE, -1, "D3.rebuild", detail="key is skipped in PartialDefaultRecord")


@pytest.mark.parametrize("codec", COMPRESSED)
def test_non_sequential_offsets_rebuilt_from_the_start_are_accepted(codec):
    """LogValidator: with another topic codec the batch is read with streamingIterator (full
    DefaultRecords) and rebuilt with fresh offsets; buildRecordsAndAssignOffsets succeeds."""
    accepted(batch_of(codec, NON_SEQUENTIAL, last_offset_delta=2), REBUILD)


def test_non_sequential_offsets_uncompressed_are_kept():
    """LogValidator.assignOffsetsNonCompressed never looks at offset deltas."""
    accepted(batch_of(Codec.NONE, NON_SEQUENTIAL, last_offset_delta=2), IN_PLACE)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_non_sequential_offsets_record_errors_come_first(codec):
    """LogValidator.processRecordErrors runs after the records loop and before the rebuild:
    a null key on a compacted topic is INVALID_RECORD with its record error, not -1."""
    recs = [Record(value=b"a", offset_delta=0), *NON_SEQUENTIAL[1:]]
    out = judged(batch_of(codec, recs, last_offset_delta=2), {"cleanup.policy": "compact"},
                 87, "R3")
    assert [e["batch_index"] for e in out["record_errors"]] == [0]


# -- 2. the record length varint -----------------------------------------------------------------

TOO_LONG = b"\xff" * 5 + b"\x00"


def test_length_varint_too_long_uncompressed_escapes():
    """DefaultRecord.readFrom(ByteBuffer) reads the length with ByteUtils.readVarint(ByteBuffer)
    outside its try; DefaultRecordBatch.uncompressedIterator catches only
    BufferUnderflowException: the IllegalArgumentException reaches ReplicaManager
    (Errors.forException: UNKNOWN_SERVER_ERROR)."""
    batch = reframe(batch_of(Codec.NONE), region=TOO_LONG, count=1)
    judged(batch, IN_PLACE, -1, "D3.varint",
           detail="Varint is too long, the most significant bit in the 5th byte is set, "
                  "converted value: ffffffff")


@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize("codec", COMPRESSED)
def test_length_varint_too_long_compressed_is_premature_eof(codec, config):
    """ByteUtils.readVarint(InputStream) throws IllegalArgumentException, which
    DefaultRecordBatch.StreamRecordIterator.readNext turns into InvalidRecordException."""
    batch = reframe(batch_of(codec), region=TOO_LONG, count=1)
    judged(batch, config, 87, "D3", detail=EOF_TEXT)


def test_negative_length_uncompressed():
    """DefaultRecord.readFrom(ByteBuffer): 'remaining < size' is false for a negative size,
    the fields are read, then the consumed length is compared with it."""
    rec = record_with(length=-3)
    batch = reframe(batch_of(Codec.NONE), region=rec, count=1)
    judged(batch, IN_PLACE, 87, "D3", detail="Invalid record size: expected to read -3 bytes "
                                            f"in record payload, but instead read {len(rec) - 1}")


@pytest.mark.parametrize("codec", COMPRESSED)
def test_negative_length_rebuilt(codec):
    """DefaultRecord.readFrom(InputStream): ByteBuffer.allocate(-3) throws
    IllegalArgumentException -> StreamRecordIterator.readNext: premature EOF."""
    batch = reframe(batch_of(codec), region=record_with(length=-3), count=1)
    judged(batch, REBUILD, 87, "D3", detail=EOF_TEXT)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_negative_length_in_place_is_read(codec):
    """DefaultRecord.readPartiallyFrom never uses the length: the record reads and the batch
    is appended.  The decoder's full reader stops, so the tables alone cannot judge the
    records the broker reads in place (undetermined); with the bytes they can."""
    batch = reframe(batch_of(codec), region=record_with(length=-3), count=1)
    accepted(batch, IN_PLACE, tables=False)
    d = decode_batches([batch])
    row = d.batches.to_pylist()[0]
    assert (row["decode_check"], row["inplace_check"], row["records_decoded"]) == \
        ("D3/eof", None, 0)


def test_length_past_the_buffer_uncompressed():
    """DefaultRecord.readFrom(ByteBuffer): the declared size exceeds buffer.remaining()."""
    batch = reframe(batch_of(Codec.NONE), region=encode_varint(100) + bytes(5), count=1)
    judged(batch, IN_PLACE, 87, "D3", detail="Invalid record size: expected 100 bytes in "
                                            "record payload, but instead the buffer has only 5 "
                                            "remaining bytes.")


@pytest.mark.parametrize("codec", COMPRESSED)
def test_length_past_the_stream_rebuilt(codec):
    """DefaultRecord.readFrom(InputStream): Utils.readFully comes back short."""
    rec = record_with()
    batch = reframe(batch_of(codec), region=encode_varint(len(rec) + 40) + rec[1:], count=1)
    judged(batch, REBUILD, 87, "D3", detail=f"Invalid record size: expected {len(rec) + 40} "
                                           "bytes in record payload, but the record payload "
                                           "reached EOF.")
    # kept in place, the same record is read by its fields and appended
    accepted(batch, IN_PLACE, tables=False)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_huge_length_rebuilt_cannot_be_allocated(codec):
    """DefaultRecord.readFrom(InputStream) allocates the declared body first: 1 GiB does not
    fit the stock -Xmx1G heap, OutOfMemoryError, UNKNOWN_SERVER_ERROR."""
    batch = reframe(batch_of(codec), region=encode_varint(2**30) + b"\x00", count=1)
    judged(batch, REBUILD, -1, "D3.alloc", detail="Java heap space")


# -- 3. where the stream ends: inside the codec, or between records ------------------------------

@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize("codec", COMPRESSED)
def test_stream_ends_cleanly_between_records(codec, config):
    """A whole codec stream holding 3 of 4 declared records: the next length varint reads the
    stream's -1s (ByteUtils.readVarint(InputStream): IllegalArgumentException) ->
    StreamRecordIterator.readNext: INVALID_RECORD."""
    batch = reframe(batch_of(codec), count=4)
    judged(batch, config, 87, "D3", detail=EOF_TEXT)


@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize("codec", COMPRESSED)
def test_stream_truncated_inside_the_codec(codec, config):
    """The compressed bytes are cut in the middle: the codec's stream throws an IOException
    (gzip EOFException, snappy 'failed to read chunk', Lz4BlockInputStream 'Stream ended
    prematurely', zstd-jni 'Truncated source') -> StreamRecordIterator.readNext wraps it in
    KafkaException('Failed to decompress record stream'): UNKNOWN_SERVER_ERROR."""
    batch = batch_of(codec, [Record(key=b"k", value=os.urandom(300)) for _ in range(3)])
    wire = batch[61:]
    cut = reframe(batch, wire=wire[:len(wire) // 2])
    out = judged(cut, config, -1, "D3.codec")
    assert out["detail"].startswith("Failed to decompress record stream (")
    expected = {Codec.GZIP: "java.io.EOFException", Codec.SNAPPY: "failed to read chunk",
                Codec.LZ4: "Stream ended prematurely", Codec.ZSTD: "Truncated source"}[codec]
    assert expected in out["detail"]


@pytest.mark.parametrize("config", PATHS)
def test_gzip_trailer_cut_after_every_record(config):
    """Every record is inflated before GZIPInputStream.readTrailer runs out of bytes: the
    failure comes from StreamRecordIterator.ensureNoneRemaining ('Error checking for remaining
    bytes after reading batch'), still UNKNOWN_SERVER_ERROR."""
    batch = batch_of(Codec.GZIP)
    cut = reframe(batch, wire=batch[61:-4])
    out = judged(cut, config, -1, "D3.codec")
    assert out["detail"].startswith("Error checking for remaining bytes after reading batch")
    assert decode_batches([cut]).batches["records_decoded"].to_pylist() == [3]


@pytest.mark.parametrize("config", PATHS)
def test_lz4_end_mark_missing(config):
    """Lz4BlockInputStream.readBlock needs four more bytes for the end mark after the last
    block: IOException('Stream ended prematurely') when ensureNoneRemaining reads on."""
    batch = batch_of(Codec.LZ4)
    cut = reframe(batch, wire=batch[61:-4])  # kqlab writes no content checksum
    out = judged(cut, config, -1, "D3.codec")
    assert "Stream ended prematurely" in out["detail"]


@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.LZ4])
def test_codec_header_cut_fails_when_opened(codec, config):
    """GZIPInputStream / Lz4BlockInputStream read their header in the constructor:
    Compression.wrapForInput wraps the exception in KafkaException before any record."""
    batch = batch_of(codec)
    cut = reframe(batch, wire=batch[61:66])
    out = judged(cut, config, -1, "D3.codec")
    assert out["detail"] in ("java.io.EOFException",
                             "java.io.IOException: Stream ended prematurely")


def _xerial(*chunks: bytes) -> bytes:
    """A snappy-java stream with one chunk per piece of records bytes."""
    out = [XERIAL_MAGIC + struct.pack(">ii", 1, 1)]
    for piece in chunks:
        block = bytes(cramjam.snappy.compress_raw(piece))
        out.append(struct.pack(">i", len(block)) + block)
    return b"".join(out)


@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize("keep", [0, 3], ids=["at-chunk", "length-cut"])
def test_snappy_stream_ends_at_a_chunk_boundary(config, keep):
    """SnappyInputStream.hasNextChunk returns false when fewer than four bytes of the next
    chunk length remain: a clean end of stream, so the missing record is INVALID_RECORD
    (premature EOF), not a codec failure."""
    parts = [encode_record(r, i, 0) for i, r in enumerate(RECS)]
    full = _xerial(b"".join(parts[:2]), parts[2])
    second = 16 + 4 + len(bytes(cramjam.snappy.compress_raw(b"".join(parts[:2]))))
    batch = reframe(batch_of(Codec.SNAPPY), wire=full[:second + keep])
    judged(batch, config, 87, "D3", detail=EOF_TEXT)


@pytest.mark.parametrize("config", PATHS)
def test_snappy_chunk_cut_fails_before_the_first_record(config):
    """A chunk cut short: 'failed to read chunk' (IOException).  ChunkedBytesStream asks for
    2 KiB and SnappyInputStream.rawRead fills it across chunks, so the first read already
    reaches the bad chunk: no record is read, UNKNOWN_SERVER_ERROR."""
    parts = [encode_record(r, i, 0) for i, r in enumerate(RECS)]
    full = _xerial(b"".join(parts[:2]), parts[2])
    batch = reframe(batch_of(Codec.SNAPPY), wire=full[:-2])
    out = judged(batch, config, -1, "D3.codec")
    assert "failed to read chunk" in out["detail"]
    assert decode_batches([batch]).batches["records_decoded"].to_pylist() == [0]


# -- 4. streams that decompress, but not to records ----------------------------------------------

@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_that_decompresses_negative_header_count(codec, config):
    """A well-formed codec stream of bytes that are not records: both readers read the header
    count and throw InvalidRecordException('Found invalid number of record headers -4')."""
    batch = reframe(batch_of(codec), region=record_with(headers=encode_varint(-4)), count=1)
    judged(batch, config, 87, "D3", detail="Found invalid number of record headers -4")


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_key_past_the_record_depends_on_the_reader(codec):
    """A key length past the end: DefaultRecord.readFrom(InputStream) parses inside the
    record's own buffer (Utils.readBytes: 'Found invalid record structure');
    readPartiallyFrom skips the key (DefaultRecord.skipBytes: 'Reached end of input stream
    before skipping all bytes. Remaining bytes:<n>').  Same code, the reader's own text."""
    rec = record_with(key=encode_varint(1000))
    batch = reframe(batch_of(codec), region=rec, count=1)
    judged(batch, REBUILD, 87, "D3", detail="Found invalid record structure")
    out = judged(batch, IN_PLACE, 87, "D3")
    left = 1000 - (len(rec) - (1 + 1 + 1 + 1 + 2))
    assert out["detail"] == ("Reached end of input stream before skipping all bytes. "
                             f"Remaining bytes:{left}")


@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize("codec", COMPRESSED)
def test_trailing_records_bytes(codec, config):
    """DefaultRecordBatch.RecordIterator.next: after the declared count, ensureNoneRemaining
    reads one more byte of the decompressed stream: 'records still remaining'."""
    batch = reframe(batch_of(codec), region=region_of(RECS) + b"\x00\x01\x02", count=3)
    judged(batch, config, 87, "D3",
           detail="Incorrect declared batch size, records still remaining in file")


def test_trailing_records_bytes_uncompressed():
    """DefaultRecordBatch.uncompressedIterator.ensureNoneRemaining: buffer.hasRemaining()."""
    batch = reframe(batch_of(Codec.NONE), region=region_of(RECS) + b"\x00", count=3)
    judged(batch, IN_PLACE, 87, "D3",
           detail="Incorrect declared batch size, records still remaining in file")


@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize(("codec", "tail", "code"), [
    pytest.param(Codec.GZIP, b"garbage", 0, id="gzip-short-garbage"),
    pytest.param(Codec.GZIP, b"x" * 40, 0, id="gzip-no-header"),
    pytest.param(Codec.LZ4, b"anything after the end mark", 0, id="lz4"),
    pytest.param(Codec.SNAPPY, b"\x00\x00", 0, id="snappy-2-bytes"),
    pytest.param(Codec.ZSTD, b"not a frame", -1, id="zstd"),
])
def test_bytes_after_the_compressed_stream(codec, tail, code, config):
    """GZIPInputStream.readTrailer ignores <= 26 trailing bytes, or a malformed next header;
    Lz4BlockInputStream stops at the end mark; SnappyInputStream.hasNextChunk ends on fewer
    than 4 bytes; ZstdInputStreamNoFinalizer reads the rest as a next frame ('Unknown frame
    descriptor', after every record: ensureNoneRemaining)."""
    batch = batch_of(codec)
    out = judged(reframe(batch, wire=batch[61:] + tail), config, code,
                 None if code == 0 else "D3.codec")
    if code:
        assert out["detail"].startswith("Error checking for remaining bytes after reading "
                                        "batch (com.github.luben.zstd.ZstdIOException")


# -- 5. corrupt streams the codec notices ---------------------------------------------------------

@pytest.mark.parametrize("config", PATHS)
def test_gzip_corrupt_deflate_data(config):
    """InflaterInputStream.read: Inflater throws DataFormatException -> ZipException (an
    IOException) -> KafkaException('Failed to decompress record stream')."""
    batch = batch_of(Codec.GZIP, [Record(key=b"k", value=os.urandom(200))])
    wire = bytearray(batch[61:])
    wire[10:20] = b"\xff" * 10  # the first deflate block header and beyond
    out = judged(reframe(batch, wire=bytes(wire)), config, -1, "D3.codec")
    assert "java.util.zip.ZipException" in out["detail"]


@pytest.mark.parametrize("config", PATHS)
def test_gzip_crc_mismatch_after_the_records(config):
    """GZIPInputStream.readTrailer: 'Corrupt GZIP trailer' when the reader looks for more
    after the last record (StreamRecordIterator.ensureNoneRemaining)."""
    batch = batch_of(Codec.GZIP)
    wire = bytearray(batch[61:])
    wire[-8] ^= 0xFF
    out = judged(reframe(batch, wire=bytes(wire)), config, -1, "D3.codec")
    assert out["detail"] == ("Error checking for remaining bytes after reading batch "
                             "(java.util.zip.ZipException: Corrupt GZIP trailer)")


def _lz4_frame(region: bytes, **kw) -> bytes:
    return lz4.frame.compress(region, block_linked=False, store_size=False,
                              block_size=lz4.frame.BLOCKSIZE_MAX64KB, **kw)


def test_lz4_content_checksum_is_never_verified():
    """Lz4BlockInputStream.readBlock reads the content checksum after the end mark but never
    compares it (a TODO upstream): a wrong one is accepted."""
    batch = batch_of(Codec.LZ4)
    frame = bytearray(_lz4_frame(region_of(RECS), content_checksum=True))
    frame[-1] ^= 0xFF
    for config in (IN_PLACE, REBUILD):
        accepted(reframe(batch, wire=bytes(frame)), config)


@pytest.mark.parametrize("config", PATHS)
def test_lz4_block_checksum_is_verified(config):
    """Lz4BlockInputStream.readBlock: 'Block checksum mismatch' (IOException)."""
    batch = batch_of(Codec.LZ4)
    frame = bytearray(_lz4_frame(region_of(RECS), block_checksum=True))
    frame[-5] ^= 0xFF  # the block checksum before the end mark
    out = judged(reframe(batch, wire=bytes(frame)), config, -1, "D3.codec")
    assert "Block checksum mismatch" in out["detail"]


@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize(("what", "cause"), [
    ("header-checksum", "java.io.IOException: Stream frame descriptor corrupted"),
    ("dependent-blocks", "java.lang.RuntimeException: Dependent block stream is unsupported"),
])
def test_lz4_frame_header_refused(what, cause, config):
    """Lz4BlockInputStream.readHeader (constructor): the header checksum is verified for v2
    batches and Lz4BlockOutputStream.FLG.validate refuses linked blocks; wrapForInput turns
    either into KafkaException(cause)."""
    batch = batch_of(Codec.LZ4)
    frame = bytearray(_lz4_frame(region_of(RECS)))
    if what == "header-checksum":
        frame[6] ^= 0xFF
    else:
        linked = cramjam.lz4.Compressor(level=9, content_checksum=False, block_linked=True)
        linked.compress(region_of(RECS))
        frame = bytearray(linked.finish())
        assert not frame[4] & 0x20
    judged(reframe(batch, wire=bytes(frame)), config, -1, "D3.codec", detail=cause)


@pytest.mark.parametrize("config", PATHS)
def test_gzip_header_flags_as_the_jdk_reads_them(config):
    """GZIPInputStream.readHeader checks FHCRC but not the reserved flag bits (zlib's own gzip
    mode refuses those): reserved bits are accepted, a wrong header CRC is refused when the
    stream is opened."""
    batch = batch_of(Codec.GZIP)
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    region = region_of(RECS)
    deflate = raw.compress(region) + raw.flush()
    trailer = struct.pack("<II", zlib.crc32(region), len(region))
    reserved = b"\x1f\x8b\x08\xe0" + bytes(6) + deflate + trailer
    accepted(reframe(batch, wire=reserved), config)
    head = b"\x1f\x8b\x08\x02" + bytes(6)
    bad_hcrc = head + struct.pack("<H", (zlib.crc32(head) + 1) & 0xFFFF) + deflate + trailer
    judged(reframe(batch, wire=bad_hcrc), config, -1, "D3.codec",
           detail="java.util.zip.ZipException: Corrupt GZIP header")


def test_raw_snappy_is_read():
    """SnappyInputStream.readHeader: input without the xerial magic is read as one raw snappy
    block (readFully), so unframed snappy (librdkafka) is accepted."""
    batch = batch_of(Codec.SNAPPY)
    raw = bytes(cramjam.snappy.compress_raw(region_of(RECS)))
    for config in (IN_PLACE, REBUILD):
        accepted(reframe(batch, wire=raw), config)


@pytest.mark.parametrize("config", PATHS)
def test_snappy_negative_chunk_size(config):
    """SnappyInputStream.hasNextChunk: a negative chunk size is a SnappyError (an Error, not
    an IOException: it passes StreamRecordIterator.readNext and still ends as -1)."""
    batch = batch_of(Codec.SNAPPY)
    wire = bytearray(batch[61:])
    struct.pack_into(">i", wire, 16, -5)
    out = judged(reframe(batch, wire=bytes(wire)), config, -1, "D3.codec")
    assert "SnappyError" in out["detail"]


@pytest.mark.parametrize("config", PATHS)
def test_zstd_two_frames_are_one_stream(config):
    """ZstdInputStreamNoFinalizer decodes frames back to back."""
    batch = batch_of(Codec.ZSTD)
    region = region_of(RECS)
    cctx = zstandard.ZstdCompressor()
    two = cctx.compress(region[:5]) + cctx.compress(region[5:])
    accepted(reframe(batch, wire=two), config)


# -- 6. a codec that fails after some records -----------------------------------------------------

BIG = [Record(key=None, value=os.urandom(30_000)) for _ in range(4)]


@pytest.mark.parametrize("config", [pytest.param({"cleanup.policy": "compact"}, id="in_place"),
                                    pytest.param({"cleanup.policy": "compact",
                                                  "compression.type": "uncompressed"},
                                                 id="rebuild")])
def test_lz4_fails_after_some_records(config):
    """Lz4BlockInputStream reads a block only when the previous one is used up: the records in
    the first 64 KiB block are read (and fail R3: null keys on a compacted topic), then the
    second block's checksum fails.  The KafkaException leaves the loop before
    LogValidator.processRecordErrors: UNKNOWN_SERVER_ERROR, no record errors."""
    batch = batch_of(Codec.LZ4, BIG)
    frame = bytearray(_lz4_frame(region_of(BIG), block_checksum=True))
    (first,) = struct.unpack_from("<I", frame, 7)
    second = 7 + 4 + (first & 0x7FFFFFFF) + 4
    frame[second + 10] ^= 0xFF  # inside the second block
    bad = reframe(batch, wire=bytes(frame))
    out = judged(bad, config, -1, "D3.codec")
    assert out["record_errors"] == []
    assert "Block checksum mismatch" in out["detail"]
    decoded = decode_batches([bad]).batches["records_decoded"].to_pylist()[0]
    assert 0 < decoded < len(BIG)  # the first block's records reached the reader


@pytest.mark.parametrize("config", PATHS)
def test_gzip_fails_after_some_records(config):
    """GZIPInputStream in 16 KiB reads (ChunkedBytesStream): the reads before the corrupt
    deflate data deliver records, then the ZipException ends the batch: -1."""
    batch = batch_of(Codec.GZIP, BIG)
    region = region_of(BIG)
    c = zlib.compressobj(0, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # stored blocks
    wire = bytearray(c.compress(region) + c.flush())
    pos = 10  # walk the stored blocks (header byte, LEN, NLEN, data) past 60 000 bytes
    while pos < 60_000:
        pos += 5 + struct.unpack_from("<H", wire, pos + 1)[0]
    wire[pos + 3] ^= 0xFF  # NLEN no longer matches LEN: "invalid stored block lengths"
    bad = reframe(batch, wire=bytes(wire))
    out = judged(bad, config, -1, "D3.codec")
    assert out["detail"] == ("Failed to decompress record stream (java.util.zip.ZipException: "
                             "invalid stored block lengths)")
    decoded = decode_batches([bad]).batches["records_decoded"].to_pylist()[0]
    assert 0 < decoded < len(BIG)  # records of the earlier reads reached the reader


# -- 7. zstd in a v0/v1 wrapper ------------------------------------------------------------------

def test_zstd_legacy_wrapper():
    """4.x: ProduceRequest.validateRecords refuses any first batch with magic < 2 (A4.b).
    3.x produce v0-2: AbstractLegacyRecordBatch.DeepRecordsIterator refuses a zstd wrapper
    before reading it ('... legacy deep record iterator <magic>': the magic, as Kafka prints)."""
    data = legacy.encode_wrapper([(b"k", b"v", NOW)], magic=1, codec=Codec.ZSTD)
    judged(data, IN_PLACE, 87, "A4.b")
    judged(data, IN_PLACE, 87, "D3", broker_version="3.9", produce_version=2,
           detail="Invalid wrapper compressionType found in legacy deep record iterator 1")


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_legacy_wrapper_codec_failure(codec):
    """DeepRecordsIterator reads the whole inner set in its constructor: an IOException
    anywhere becomes KafkaException(e): -1 (was INVALID_RECORD for a truncated stream)."""
    inner = b"".join(legacy.encode_message(i, b"k", os.urandom(100), magic=1, timestamp=NOW)
                     for i in range(5))
    value = compress(codec, inner)
    data = legacy.encode_message(4, None, value[:len(value) // 2], magic=1,
                                 attributes=int(codec), timestamp=NOW)
    judged(data, IN_PLACE, -1, "D3.codec", broker_version="3.9", produce_version=2)


def test_legacy_inner_message_below_minimum_size():
    """DataLogInputStream.nextBatch: an inner size below 14 is a CorruptRecordException."""
    value = compress(Codec.GZIP, struct.pack(">qi", 0, 13) + bytes(13))
    data = legacy.encode_message(0, None, value, magic=1, attributes=int(Codec.GZIP),
                                 timestamp=NOW)
    judged(data, IN_PLACE, 2, "D3.corrupt", broker_version="3.9", produce_version=2,
           detail="Record size is less than the minimum record overhead (14)")


# -- 8. the decode findings as data, and snapshots written before them --------------------------

def test_decoder_keeps_both_readers_findings():
    """What the full and the in-place reader find is stored per batch (kqlab.records
    DECODE_COLUMNS); records_decoded ties the batches table to the records table."""
    bad = reframe(batch_of(Codec.GZIP), region=record_with(key=encode_varint(1000)), count=1)
    short = reframe(batch_of(Codec.LZ4), count=4)
    d = decode_batches([batch_of(Codec.ZSTD), bad, short])
    rows = d.batches.select(["records_decoded", "decode_kind", "decode_check",
                             "inplace_check"]).to_pylist()
    assert rows == [
        {"records_decoded": 3, "decode_kind": None, "decode_check": None,
         "inplace_check": None},
        {"records_decoded": 0, "decode_kind": "records", "decode_check": "D3/structure",
         "inplace_check": "D3/skip"},
        {"records_decoded": 3, "decode_kind": "records", "decode_check": "D3/eof",
         "inplace_check": "D3/eof"},
    ]
    assert d.records.num_rows == 6
    rec = record_with(key=encode_varint(1000))  # length, attributes, ts, offset, 2-byte key length
    assert dict(d.batches["inplace_params"][1].as_py()) == {"remaining": str(1006 - len(rec))}


def test_snapshot_written_before_the_decode_columns_still_loads(tmp_path):
    """An older snapshot's batches parts lack the decode columns: Snapshot.batches() /
    iter_parts() and the Spark executor's reader fill them (kqlab.records.conform_batches);
    a damaged v2 row is 'unstructured' (its finding was only text) and the table checks call
    it undetermined rather than parse the text."""
    import pyarrow.parquet as pq

    from kqlab.records import BATCHES_SCHEMA, DECODE_COLUMNS
    from kqlab.sources.files import Snapshot
    from kqlab.spark.executor import read_unit_tables
    from kqlab.spark.units import Unit

    good, bad = batch_of(Codec.GZIP), reframe(batch_of(Codec.NONE), count=4)
    d = decode_batches([good, bad, batch_of(Codec.SNAPPY)], topic="t", partition=0)
    snap = Snapshot.create(tmp_path / "snap", topic="t")
    snap.append(d.records, d.batches)
    part = snap.part_files("batches")[0]
    old = pq.read_table(part).drop_columns(list(DECODE_COLUMNS))
    old = old.set_column(old.schema.get_field_index("decode_error"), "decode_error",
                         pa_strings([None, "Incorrect declared batch size, premature EOF "
                                           "reached (after 3 of 4 records)", None]))
    pq.write_table(old, part)

    snap = Snapshot.open(tmp_path / "snap")
    loaded = snap.batches()
    assert loaded.schema.equals(BATCHES_SCHEMA)
    assert loaded["records_decoded"].to_pylist() == [3, 3, 3]
    assert loaded["decode_kind"].to_pylist() == [None, "unstructured", None]
    ((_, parts_b),) = list(snap.iter_parts())
    assert parts_b is not None and parts_b.equals(loaded)
    unit = Unit(0, "snapshot", "t", 0, records=[(str(snap.part_files()[0]), None)],
                batches=[(str(part), None)])
    _, spark_b = read_unit_tables(unit)
    assert spark_b is not None and spark_b.equals(loaded)

    out = broker_verdicts(snap.records(), loaded, IN_PLACE, now=NOW)
    assert out["check"].to_pylist() == [None, UNDETERMINED, None]
    exact = broker_verdicts(snap.records(), loaded, IN_PLACE, now=NOW, raw=[good, bad,
                                                                           batch_of(Codec.SNAPPY)])
    assert exact["check"].to_pylist() == [None, "D3", None]


def pa_strings(values: list[str | None]):
    import pyarrow as pa

    return pa.array(values, pa.string())
