"""Record-batch compression codecs, read exactly as a Kafka 4.x broker reads them (spec §1.6).

Writing (:func:`compress`) follows the Java client.  Reading is modelled on the broker's own
input streams, because *where* and *how* a damaged stream fails decides the broker's answer
(``docs/kafka-4x-record-structure.md``):

* gzip: the JDK's ``GZIPInputStream`` (header flags, the 8 KiB input buffer, the trailer CRC and
  size, concatenated members and its rule for trailing garbage);
* snappy: snappy-java 1.1.10.5's ``SnappyInputStream``: the xerial stream framing (magic
  ``\\x82SNAPPY\\x00``, two int32 version words, int32-length-prefixed raw snappy chunks), or,
  without the magic, the whole input as one raw snappy block (non-Java producers write that);
* lz4: Kafka's ``Lz4BlockInputStream``: the LZ4 frame format with independent blocks, the
  header and block checksums verified, the content checksum and size never, nothing read
  after the end mark;
* zstd: zstd-jni's ``ZstdInputStreamNoFinalizer``: frames back to back until the input ends.

:func:`read_stream` returns what the broker's record reader is handed: the bytes delivered
before the codec failed, in the Java reader's delivery units (an lz4 block; a 2 KiB read for
snappy; one 16 KiB ``ChunkedBytesStream`` read for gzip and zstd, whose output is lost when the
read fails), and the failure with the Java exception it raises.  Every codec failure is an
``IOException`` or an unchecked exception on the broker, hence UNKNOWN_SERVER_ERROR wherever it
happens; a stream that simply ends is no failure (the record reader then meets a clean end of
stream).  :func:`decompress` is the convenience form that raises :class:`DecompressionError`.

``zstandard`` decodes zstd (1.8 GB/s here against cramjam's 0.7), python-lz4 LZ4 blocks, zlib
gzip and cramjam snappy; cramjam does all encoding.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass

import cramjam
import lz4.block
import lz4.frame
import zstandard


class Codec(enum.IntEnum):
    """Compression codec ids of the batch attributes' low three bits."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def label(self) -> str:
        """The name Kafka's configs use (``none`` for the producer's ``compression.type``)."""
        return self.name.lower()

    @classmethod
    def parse(cls, value: str | int | Codec) -> Codec:
        """Accept ``"lz4"``, ``3`` or ``Codec.LZ4``; raise ``ValueError`` naming the choices."""
        if isinstance(value, Codec):
            return value
        if isinstance(value, int):
            return cls(value)
        text = value.strip().lower()
        if text in ("uncompressed", "none"):
            return cls.NONE
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(f"unknown compression codec {value!r}; use one of "
                             "none, gzip, snappy, lz4, zstd") from None


@dataclass(frozen=True, slots=True)
class CodecFailure:
    """How the broker's codec stream fails, as the Java exception it throws.

    ``at_open``: the stream's constructor fails (``Compression.wrapForInput`` wraps it in a
    ``KafkaException`` before any record is read); otherwise the failure surfaces when the
    record reader asks for the first byte after the delivered ones.  ``cause`` is the Java
    exception's ``toString()`` (class and message, as the broker logs it); ``truncated`` says
    the input simply ran out inside the codec (still a failure: an ``EOFException``).
    """

    at_open: bool
    cause: str
    truncated: bool


@dataclass(frozen=True, slots=True)
class StreamRead:
    """What the broker's record reader gets out of one compressed records stream."""

    data: bytes
    failure: CodecFailure | None = None


class DecompressionError(Exception):
    """A compressed records stream could not be decoded the way the broker decodes it.

    ``truncated`` is True when the stream simply ended early, ``partial`` holds the bytes the
    broker's reader was handed before the failure and ``cause`` the Java exception text.
    """

    def __init__(self, codec: Codec, detail: str, *, truncated: bool, partial: bytes = b"",
                 cause: str | None = None):
        super().__init__(f"{codec.label}: {detail}")
        self.codec = codec
        self.detail = detail
        self.truncated = truncated
        self.partial = partial
        self.cause = detail if cause is None else cause


class _Fail(Exception):
    """Internal: the Java stream throws ``cause`` (after delivering what was collected)."""

    def __init__(self, cause: str, *, truncated: bool = False, at_open: bool = False):
        super().__init__(cause)
        self.cause = cause
        self.truncated = truncated
        self.at_open = at_open


def _failed(out: list[bytes], exc: _Fail) -> StreamRead:
    return StreamRead(b"".join(out), CodecFailure(exc.at_open, exc.cause, exc.truncated))


# -- gzip: java.util.zip.GZIPInputStream inside ChunkedBytesStream (GzipCompression) ------------

#: GzipCompression: ``new GZIPInputStream(in, 8 * 1024)`` inside a 16 KiB ChunkedBytesStream
GZIP_INPUT_BUFFER = 8 * 1024
GZIP_READ = 16 * 1024
_FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 2, 4, 8, 16
_EOF = "java.io.EOFException"


def _gzip_header(data: bytes, p: int) -> int:
    """``GZIPInputStream.readHeader`` at ``p``; the position after the header.  The reserved
    flag bits and FTEXT are not checked (zlib's own gzip mode would refuse them)."""
    end = len(data)
    start = p

    def need(k: int) -> None:
        if p + k > end:
            raise _Fail(_EOF, truncated=True)

    need(2)
    if data[p] | (data[p + 1] << 8) != 0x8B1F:
        raise _Fail("java.util.zip.ZipException: Not in GZIP format")
    need(3)
    if data[p + 2] != 8:
        raise _Fail("java.util.zip.ZipException: Unsupported compression method")
    need(4)
    flg = data[p + 3]
    need(10)  # then MTIME, XFL and OS are skipped
    p += 10
    if flg & _FEXTRA:
        need(2)
        m = data[p] | (data[p + 1] << 8)
        p += 2
        need(m)
        p += m
    for flag in (_FNAME, _FCOMMENT):
        if flg & flag:
            while True:
                need(1)
                p += 1
                if data[p - 1] == 0:
                    break
    if flg & _FHCRC:
        v = zlib.crc32(data[start:p]) & 0xFFFF
        need(2)
        if data[p] | (data[p + 1] << 8) != v:
            raise _Fail("java.util.zip.ZipException: Corrupt GZIP header")
        p += 2
    return p


def _zip_message(exc: zlib.error) -> str:
    """zlib's own message (``strm->msg``), which Java's ``Inflater`` reports as well."""
    text = str(exc)
    return text.split(": ", 1)[1] if ": " in text else text


def _gunzip(data: bytes, read: int, out: list[bytes]) -> None:
    """Append to ``out`` what each ``GZIPInputStream.read(buf, 0, read)`` returns (``read=0``:
    all an input buffer yields, for the fast pass); raise :class:`_Fail` where Java throws.

    ``InflaterInputStream.read`` inflates the current 8 KiB input buffer until output comes
    out, refilling it from the underlying stream when it runs dry (an ``EOFException`` when
    there is nothing left); at the end of a member ``readTrailer`` checks CRC-32 and size and
    reads a next member only when more than 26 bytes follow in the buffer or the underlying
    stream has more (a malformed next header is ignored, as trailing garbage).
    """
    try:
        h = _gzip_header(data, 0)
    except _Fail as exc:
        exc.at_open = True
        raise
    end = len(data)
    pos = h  # the underlying stream's position: bytes not yet taken into the input buffer
    feed = b""  # the inflater's input: what is left of the current 8 KiB buffer
    d = zlib.decompressobj(-zlib.MAX_WBITS)
    crc = size = 0
    while True:
        chunk = b""
        while True:  # InflaterInputStream.read: while ((n = inf.inflate(...)) == 0)
            try:
                chunk = d.decompress(feed, read)
            except zlib.error as exc:
                raise _Fail(f"java.util.zip.ZipException: {_zip_message(exc)}") from None
            feed = d.unconsumed_tail
            if chunk or d.eof:
                break
            if pos >= end:
                raise _Fail("java.io.EOFException: Unexpected end of ZLIB input stream",
                            truncated=True)
            feed = data[pos:pos + GZIP_INPUT_BUFFER]
            pos += len(feed)
        if chunk:
            out.append(chunk)
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
            continue
        # the member's deflate data ended: GZIPInputStream.readTrailer
        rem = d.unused_data
        n = len(rem)
        seq = rem + data[pos:pos + 8]
        if len(seq) < 8:
            raise _Fail(_EOF, truncated=True)
        stored_crc, stored_size = struct.unpack_from("<II", seq, 0)
        if stored_crc != crc or stored_size != size & 0xFFFFFFFF:
            raise _Fail("java.util.zip.ZipException: Corrupt GZIP trailer")
        if not (end - pos > 0 or n > 26):
            return
        tail = rem[8:] + data[pos + max(0, 8 - n):]
        try:
            m = 8 + _gzip_header(tail, 0)
        except _Fail:
            return  # "ignore any malformed, do nothing"
        if n > m:
            feed = rem[m:]
        else:
            feed = b""
            pos += m - n
        d = zlib.decompressobj(-zlib.MAX_WBITS)
        crc = size = 0


def _read_gzip(data: bytes) -> StreamRead:
    out: list[bytes] = []
    try:
        _gunzip(data, 0, out)
        return StreamRead(b"".join(out))
    except _Fail as exc:
        if exc.at_open or exc.truncated:
            # a truncated stream delivers everything inflatable before the EOFException
            return _failed(out, exc)
    out = []  # a corrupt stream: replay it in 16 KiB reads, the failing read's output is lost
    try:
        _gunzip(data, GZIP_READ, out)
    except _Fail as exc:
        return _failed(out, exc)
    return StreamRead(b"".join(out))  # pragma: no cover - both passes see the same stream


# -- snappy: org.xerial.snappy.SnappyInputStream (1.1.10.5) in a 2 KiB ChunkedBytesStream -------

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, min compatible version
_INT32 = struct.Struct(">i")
#: snappy-java's SnappyOutputStream default block size.
XERIAL_BLOCK_SIZE = 32 * 1024
#: SnappyCompression.decompressionOutputSize: the ChunkedBytesStream read size
SNAPPY_READ = 2 * 1024
#: SnappyInputStream.MAX_CHUNK_SIZE
SNAPPY_MAX_CHUNK = 512 * 1024 * 1024
#: SnappyCodec.MAGIC_HEADER_HEAD: the first four magic bytes as a big-endian int
_MAGIC_HEAD = _INT32.unpack(XERIAL_MAGIC[:4])[0]


def _snappy_raw(block: bytes, what: str) -> bytes:
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError:
        raise _Fail(f"java.io.IOException: FAILED_TO_UNCOMPRESS(5) ({what})") from None


def _unsnappy(data: bytes, out: list[bytes]) -> None:
    """``SnappyInputStream``: the header check in the constructor, then ``hasNextChunk``."""
    if not data:
        raise _Fail("org.xerial.snappy.SnappyIOException: [EMPTY_INPUT] Cannot decompress "
                    "empty stream", at_open=True)
    if len(data) < _XERIAL_HEADER.size or not data.startswith(XERIAL_MAGIC):
        # readFully: the whole input is one raw snappy block, decoded in the constructor (a
        # cut-off xerial header is decoded that way too, and fails: the stream ended early)
        try:
            out.append(_snappy_raw(data, "raw snappy input"))
        except _Fail as exc:
            exc.at_open = True
            exc.truncated = XERIAL_MAGIC.startswith(data[:8])
            raise
        return
    pos = _XERIAL_HEADER.size  # the first header's version words are not checked
    end = len(data)
    while True:
        if end - pos < 4:
            return  # fewer than four bytes: the stream ends, they are ignored
        (n,) = _INT32.unpack_from(data, pos)
        pos += 4
        if n == _MAGIC_HEAD:  # a concatenated stream's header
            if end - pos < _XERIAL_HEADER.size - 4:
                raise _Fail("org.xerial.snappy.SnappyIOException: [FAILED_TO_UNCOMPRESS] "
                            "Insufficient header size in a concatenated block", truncated=True)
            magic = data[pos - 4:pos + 4]
            (version,) = _INT32.unpack_from(data, pos + 4)
            pos += _XERIAL_HEADER.size - 4
            if magic != XERIAL_MAGIC:
                return  # not a valid header: the stream ends here
            if version < 1:
                raise _Fail("org.xerial.snappy.SnappyIOException: [INCOMPATIBLE_VERSION] "
                            f"Compressed with an incompatible codec version {version}. At "
                            "least version 1 is required")
            continue
        if n < 0:
            raise _Fail("org.xerial.snappy.SnappyError: [INVALID_CHUNK_SIZE] chunkSize is too "
                        f"big or negative : {n}")
        if n > SNAPPY_MAX_CHUNK:
            raise _Fail("org.xerial.snappy.SnappyError: [FAILED_TO_UNCOMPRESS] Received "
                        f"chunkSize {n:,} is greater than max configured chunk size "
                        f"{SNAPPY_MAX_CHUNK:,}")
        if end - pos < n:
            raise _Fail("java.io.IOException: failed to read chunk", truncated=True)
        out.append(_snappy_raw(data[pos:pos + n], f"chunk at byte {pos - 4}"))
        pos += n


def _read_snappy(data: bytes) -> StreamRead:
    out: list[bytes] = []
    try:
        _unsnappy(data, out)
        return StreamRead(b"".join(out))
    except _Fail as exc:
        good = b"".join(out)
        if not exc.at_open:
            # ChunkedBytesStream reads 2 KiB at a time and SnappyInputStream.rawRead fills the
            # whole read across chunks: the read that reaches the bad chunk is lost
            good = good[:len(good) - len(good) % SNAPPY_READ]
        return StreamRead(good, CodecFailure(exc.at_open, exc.cause, exc.truncated))


def _snappy_frame(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(data), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(data[start:start + XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


# -- lz4: org.apache.kafka.common.compress.Lz4BlockInputStream ----------------------------------

LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
LZ4_BLOCK_INDEPENDENCE = 0x20
_LZ4_PREMATURE = "java.io.IOException: Stream ended prematurely"
_UINT32_LE = struct.Struct("<I")
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (the LZ4 frame's header and block checksums); pure Python, for the few bytes of a
    frame descriptor and the rare frame that carries block checksums."""
    n = len(data)
    i = 0
    if n >= 16:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed, (seed - _P1) & _M32
        lanes = struct.unpack_from(f"<{(n // 16) * 4}I", data, 0)
        for k in range(0, len(lanes), 4):
            v1 = _rotl((v1 + lanes[k] * _P2) & _M32, 13) * _P1 & _M32
            v2 = _rotl((v2 + lanes[k + 1] * _P2) & _M32, 13) * _P1 & _M32
            v3 = _rotl((v3 + lanes[k + 2] * _P2) & _M32, 13) * _P1 & _M32
            v4 = _rotl((v4 + lanes[k + 3] * _P2) & _M32, 13) * _P1 & _M32
        i = (n // 16) * 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        h = _rotl((h + _UINT32_LE.unpack_from(data, i)[0] * _P3) & _M32, 17) * _P4 & _M32
        i += 4
    while i < n:
        h = _rotl((h + data[i] * _P5) & _M32, 11) * _P1 & _M32
        i += 1
    h ^= h >> 15
    h = h * _P2 & _M32
    h ^= h >> 13
    h = h * _P3 & _M32
    h ^= h >> 16
    return h


def _lz4_header(data: bytes, legacy_v0: bool, *, check_hc: bool = True
                ) -> tuple[int, int, int]:
    """``Lz4BlockInputStream.readHeader``: (FLG, maximum block size, position after it)."""
    if len(data) < 6:
        raise _Fail(_LZ4_PREMATURE, truncated=True, at_open=True)
    if data[:4] != LZ4_FRAME_MAGIC:
        raise _Fail("java.io.IOException: Stream unsupported (invalid magic bytes)",
                    at_open=True)
    flg, bd = data[4], data[5]
    if flg & 0x03:
        raise _Fail("java.lang.RuntimeException: Reserved bits must be 0", at_open=True)
    if not flg & LZ4_BLOCK_INDEPENDENCE:
        raise _Fail("java.lang.RuntimeException: Dependent block stream is unsupported",
                    at_open=True)
    if flg >> 6 != 1:
        raise _Fail(f"java.lang.RuntimeException: Version {flg >> 6} is unsupported",
                    at_open=True)
    if bd & 0x0F:
        raise _Fail("java.lang.RuntimeException: Reserved2 field must be 0", at_open=True)
    size_value = (bd >> 4) & 7
    if size_value < 4:
        raise _Fail("java.lang.RuntimeException: Block size value must be between 4 and 7",
                    at_open=True)
    if bd & 0x80:
        raise _Fail("java.lang.RuntimeException: Reserved3 field must be 0", at_open=True)
    pos = 6
    if flg & 0x08:  # content size: skipped, never compared with the output
        if len(data) - pos < 8:
            raise _Fail(_LZ4_PREMATURE, truncated=True, at_open=True)
        pos += 8
    if pos >= len(data):
        raise _Fail("java.nio.BufferUnderflowException", truncated=True, at_open=True)
    if check_hc and not legacy_v0 and data[pos] != (xxh32(data[4:pos]) >> 8) & 0xFF:
        raise _Fail("java.io.IOException: Stream frame descriptor corrupted", at_open=True)
    return flg, 1 << (2 * size_value + 8), pos + 1


def _lz4_block(block: bytes, max_block: int, pos: int) -> bytes:
    """One compressed block, decoded into at most ``max_block`` bytes (the size of the Java
    stream's decompression buffer).  The output size is not stored, so a small destination is
    tried first (allocating the 4 MiB maximum for every block is slow) and the maximum only
    when that is too small."""
    guess = min(max_block, max(1 << 16, len(block) * 16))
    for size in (guess, max_block) if guess < max_block else (max_block,):
        try:
            return lz4.block.decompress(block, uncompressed_size=size)
        except lz4.block.LZ4BlockError:
            continue
    raise _Fail("java.io.IOException: net.jpountz.lz4.LZ4Exception: Error decoding offset "
                f"{pos} of input buffer")


def _unlz4(data: bytes, out: list[bytes], legacy_v0: bool = False) -> None:
    """The blocks ``Lz4BlockInputStream.readBlock`` delivers, up to the end mark (the content
    checksum is read but never verified; bytes after it are never read)."""
    flg, max_block, pos = _lz4_header(data, legacy_v0)
    end = len(data)
    block_checksum = bool(flg & 0x10)
    while True:
        if end - pos < 4:
            raise _Fail(_LZ4_PREMATURE, truncated=True)
        (word,) = _UINT32_LE.unpack_from(data, pos)
        pos += 4
        stored = bool(word & 0x80000000)
        n = word & 0x7FFFFFFF
        if n == 0:
            if flg & 0x04 and end - pos < 4:  # the (unverified) content checksum
                raise _Fail("java.nio.BufferUnderflowException", truncated=True)
            return
        if n > max_block:
            raise _Fail(f"java.io.IOException: Block size {n} exceeded max: {max_block}")
        if end - pos < n:
            raise _Fail(_LZ4_PREMATURE, truncated=True)
        block = data[pos:pos + n]
        if stored:
            chunk = block
        else:
            chunk = _lz4_block(block, max_block, pos)
        pos += n
        if block_checksum:
            if end - pos < 4:
                raise _Fail("java.nio.BufferUnderflowException", truncated=True)
            if xxh32(block) != _UINT32_LE.unpack_from(data, pos)[0]:
                raise _Fail("java.io.IOException: Block checksum mismatch")
            pos += 4
        out.append(chunk)


def _lz4_frame_end(data: bytes, legacy_v0: bool) -> int | None:
    """Where the frame's end mark (and content checksum) ends, if every block header is
    acceptable to ``readBlock`` (sizes only, nothing decoded); None otherwise."""
    try:  # liblz4 checks the header checksum itself
        flg, max_block, pos = _lz4_header(data, legacy_v0, check_hc=False)
    except _Fail:
        return None
    end = len(data)
    extra = 4 if flg & 0x10 else 0
    while end - pos >= 4:
        (word,) = _UINT32_LE.unpack_from(data, pos)
        pos += 4
        n = word & 0x7FFFFFFF
        if n == 0:
            pos += 4 if flg & 0x04 else 0
            return pos if pos <= end else None
        if n > max_block or end - pos < n + extra:
            return None
        pos += n + extra
    return None


def _read_lz4(data: bytes, legacy_v0: bool = False) -> StreamRead:
    stop = _lz4_frame_end(data, legacy_v0)
    if stop is not None:
        # the frame is well formed as far as Java looks at it: liblz4 decodes it at C speed
        # (and checks block checksums in C); if it refuses (a content checksum or size, which
        # Java never checks, or a bad block) the Java walk below decides
        try:
            return StreamRead(lz4.frame.decompress(data[:stop]))
        except RuntimeError:
            pass
    out: list[bytes] = []
    try:
        _unlz4(data, out, legacy_v0)
    except _Fail as exc:
        # a block is read only when the previous one is used up: everything before the bad
        # block reaches the record reader
        return _failed(out, exc)
    return StreamRead(b"".join(out))


# -- zstd: com.github.luben.zstd.ZstdInputStreamNoFinalizer in a 16 KiB ChunkedBytesStream -----

ZSTD_READ = 16 * 1024
_ZSTD = zstandard.ZstdDecompressor()


def _zstd_message(exc: zstandard.ZstdError) -> str:
    text = str(exc)
    return text.split(": ", 1)[1] if ": " in text else text


#: zstd-jni's source buffer (``ZSTD_DStreamInSize()``: a 128 KiB block + its 3-byte header);
#: the compressed payload reaches the decoder in reads of this size
ZSTD_SOURCE_READ = 128 * 1024 + 3


def _read_zstd(data: bytes) -> StreamRead:
    """Frames back to back; the input ending exactly after a frame ends the stream, ending
    inside one is "Truncated source" after all its decodable output; anything after a frame
    is read as the next frame.

    Except (measured on the broker, issue 27): zstd-jni clears its ``frameFinished`` flag only
    when it reads more source, so a frame cut short after a complete one, inside the same
    :data:`ZSTD_SOURCE_READ` read, ends the stream quietly after its decodable output."""
    out: list[bytes] = []
    rest = data
    frame_end = 0  # where the last complete frame ended (0: none yet)
    while rest:
        dobj = _ZSTD.decompressobj()
        try:
            chunk = dobj.decompress(rest)
        except zstandard.ZstdError:
            break  # replay the failing frame in the broker's read sizes below
        if not dobj.eof:
            out.append(chunk)
            if frame_end and len(data) <= ((frame_end - 1) // ZSTD_SOURCE_READ + 1) \
                    * ZSTD_SOURCE_READ:
                return StreamRead(b"".join(out))
            return _failed(out, _Fail("com.github.luben.zstd.ZstdIOException: Truncated "
                                      "source", truncated=True))
        out.append(chunk)
        rest = dobj.unused_data
        frame_end = len(data) - len(rest)
    else:
        return StreamRead(b"".join(out))
    # a corrupt frame: 16 KiB reads until the one that fails (its output is lost), on a
    # context of its own, as the broker's stream is (zstd-jni opens one per batch): which error
    # a damaged frame raises depends on the buffers a context kept from earlier frames
    reader = zstandard.ZstdDecompressor().stream_reader(rest, read_across_frames=False)
    try:
        while True:
            chunk = reader.read(ZSTD_READ)
            if not chunk:  # pragma: no cover - the one-shot pass failed on this frame
                break
            out.append(chunk)
    except zstandard.ZstdError as exc:
        return _failed(out, _Fail("com.github.luben.zstd.ZstdIOException: "
                                  + _zstd_message(exc)))
    return _failed(out, _Fail("com.github.luben.zstd.ZstdIOException: Unknown frame "
                              "descriptor"))  # pragma: no cover


# -- the two entry points -----------------------------------------------------------------------


def read_stream(codec: Codec | int, data: bytes | memoryview, *, magic: int = 2) -> StreamRead:
    """What the broker's record reader is handed from one compressed records stream (see the
    module docstring); ``magic`` 0 reads an LZ4 frame with Kafka 0.8's broken header checksum
    ignored, as ``Lz4BlockInputStream`` does for v0 message sets."""
    codec = Codec(codec)
    data = bytes(data)
    if codec is Codec.NONE:
        return StreamRead(data)
    if codec is Codec.GZIP:
        return _read_gzip(data)
    if codec is Codec.SNAPPY:
        return _read_snappy(data)
    if codec is Codec.LZ4:
        return _read_lz4(data, legacy_v0=magic == 0)
    return _read_zstd(data)


def decompress(codec: Codec | int, data: bytes | memoryview) -> bytes:
    """Decompress one batch's records stream as the broker does; raise
    :class:`DecompressionError` (with what was delivered before) where its codec fails."""
    codec = Codec(codec)
    result = read_stream(codec, data)
    f = result.failure
    if f is not None:
        raise DecompressionError(codec, f.cause, truncated=f.truncated, partial=result.data,
                                 cause=f.cause)
    return result.data


def compress(codec: Codec | int, data: bytes, *, level: int | None = None,
             snappy_framing: str = "xerial") -> bytes:
    """Compress a records stream the way the Java client does.

    ``snappy_framing="raw"`` writes unframed snappy (as librdkafka does) instead of xerial.
    """
    codec = Codec(codec)
    if codec is Codec.NONE:
        return data
    if codec is Codec.GZIP:
        z = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return z.compress(data) + z.flush()
    if codec is Codec.SNAPPY:
        if snappy_framing == "raw":
            return bytes(cramjam.snappy.compress_raw(data))
        return _snappy_frame(data)
    if codec is Codec.LZ4:
        # independent blocks, as Kafka's Lz4BlockOutputStream writes and its reader requires
        c = cramjam.lz4.Compressor(level=9 if level is None else level, content_checksum=False,
                                   block_linked=False)
        c.compress(data)
        return bytes(c.finish())
    return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
