"""The C parser's zstd and lz4 fast paths against the exact reader (``read_stream``).

``parse_records`` decompresses a zstd or lz4 batch itself (libzstd / liblz4, loaded at import)
only when the stream decodes whole, and hands every other stream to the caller's exact reader,
which models what the broker's zstd-jni / Lz4BlockInputStream delivers before it fails.  These
tests hold that contract on valid, damaged, truncated and odd streams (skippable and legacy
zstd frames, trailing garbage, frames without a content size; lz4 frames with and without
block and content checksums, content sizes, stored blocks, dependent blocks), at three levels:
the fast path's own output, the parser's columns, and the decoder's two tables.
"""

from __future__ import annotations

import struct

import lz4.frame
import pyarrow as pa
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.kafka import batch as batch_module
from kqlab.kafka import records_parser
from kqlab.kafka._records_py import ParsedRecords, ReadMode
from kqlab.kafka._records_py import RecordsParser as RecordsParserPy
from kqlab.kafka._records_py import parse_records as parse_py
from kqlab.kafka.batch import decode_records
from kqlab.kafka.builder import Record, build_batch
from kqlab.kafka.compression import Codec, compress, read_stream
from kqlab.kafka.records_parser import crc32c

try:
    from kqlab.kafka import _crecords
except ImportError:  # not built: nothing to compare
    _crecords = None  # type: ignore[assignment]

needs_fast = pytest.mark.skipif(records_parser.ZSTD_VERSION is None,
                                reason="the C parser's zstd fast path is not on")
needs_lz4 = pytest.mark.skipif(records_parser.LZ4_VERSION is None,
                               reason="the C parser's lz4 fast path is not on")

DIFF = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NOW = 1_700_000_000_000


# -- streams ------------------------------------------------------------------------------------

def _frame(payload: bytes, level: int, checksum: bool, content_size: bool) -> bytes:
    return zstandard.ZstdCompressor(level=level, write_checksum=checksum,
                                    write_content_size=content_size).compress(payload)


def _streamed(payload: bytes) -> bytes:
    """A frame written by a streaming compressor (no content size: what zstd-jni writes)."""
    c = zstandard.ZstdCompressor(level=1)
    obj = c.compressobj()
    return obj.compress(payload) + obj.flush()


frames_st = st.builds(
    _frame, st.binary(max_size=3000) | st.just(b"r" * 70_000), st.integers(-5, 9),
    st.booleans(), st.booleans()) | st.builds(_streamed, st.binary(max_size=2000))
skippable_st = st.builds(lambda n, body: struct.pack("<II", 0x184D2A50 + n, len(body)) + body,
                         st.integers(0, 15), st.binary(max_size=20))
legacy_st = st.builds(lambda body: struct.pack("<I", 0xFD2FB527) + body, st.binary(max_size=20))


@st.composite
def streams(draw) -> bytes:
    """A records stream: frames back to back, maybe damaged."""
    parts = draw(st.lists(frames_st | skippable_st | legacy_st if draw(st.booleans())
                          else frames_st, max_size=3))
    data = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(0, 2))):
        how = draw(st.sampled_from(["truncate", "flip", "garbage", "none"]))
        if how == "truncate" and data:
            del data[draw(st.integers(0, len(data) - 1)):]
        elif how == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
        elif how == "garbage":
            data += draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@needs_fast
@DIFF
@given(streams())
def test_fast_path_delivers_what_the_exact_reader_delivers(data):
    """Whenever the fast path decodes a stream, the exact reader delivers the same bytes and
    does not fail; when it declines, the exact reader decides."""
    whole = _crecords._unpack(4, data)
    if whole is not None:
        sr = read_stream(Codec.ZSTD, data)
        assert sr.failure is None
        assert sr.data == whole


@needs_fast
@DIFF
@given(st.lists(frames_st, max_size=3))
def test_fast_path_takes_whole_standard_frames(frames):
    """The fast path is no decoration: standard frames back to back are decoded by it."""
    data = b"".join(frames)
    whole = _crecords._unpack(4, data)
    assert whole is not None
    assert whole == read_stream(Codec.ZSTD, data).data


@needs_fast
@pytest.mark.parametrize("data", [
    b"", b"\x28\xb5\x2f", _frame(b"abc", 3, True, True)[:-1],
    _frame(b"abc", 3, True, True) + b"\x00", _frame(b"abc", 3, False, True) + b"\x28\xb5\x2f\xfd",
    struct.pack("<II", 0x184D2A50, 0), struct.pack("<I", 0xFD2FB527) + b"\x00" * 8,
    # a damaged frame zstd 1.5.4 decodes (268 bytes) and 1.5.7 calls corrupt: the fast path
    # runs the exact reader's own zstd, so it declines it as the exact reader fails on it
    bytes.fromhex("28b52ffd600c00f50100f4020c0000000100006200000204"
                  "6b314a7602026802 31a601000004046b3294017600f801"
                  "000006046b33de020268023304 01e00188051431802e49b004".replace(" ", "")),
], ids=["empty", "short-magic", "truncated", "garbage-after", "magic-after", "skippable",
        "legacy", "corrupt-for-1.5.7"])
def test_fast_path_edges(data):
    """Edges by hand: an empty stream is whole (no frame, nothing delivered); everything the
    exact reader has to judge is left to it."""
    whole = _crecords._unpack(4, data)
    sr = read_stream(Codec.ZSTD, data)
    if data == b"":
        assert whole == b"" and sr.failure is None
    else:
        assert whole is None


# -- the parser ---------------------------------------------------------------------------------

def _records(n: int, seed: int) -> list[Record]:
    return [Record(key=None if (i + seed) % 5 == 0 else b"k%d" % (i + seed),
                   value=b"v" * ((i * 37 + seed) % 300),
                   headers=(("h", b"%d" % i),) if i % 2 else ()) for i in range(n)]


def _region(records: list[Record]) -> bytes:
    return build_batch(records, base_timestamp=NOW)[61:]


@st.composite
def zstd_regions(draw) -> tuple[bytes, int]:
    """A compressed records region and a declared count: valid records (or random bytes)
    compressed as one or two frames, maybe damaged after compression."""
    n = draw(st.integers(0, 6))
    plain = _region(_records(n, draw(st.integers(0, 9)))) if draw(st.booleans()) \
        else draw(st.binary(max_size=200))
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(plain)))
        frames = [plain[:cut], plain[cut:]]
    else:
        frames = [plain]
    data = bytearray(b"".join(_frame(f, 1, draw(st.booleans()), draw(st.booleans()))
                              for f in frames))
    how = draw(st.sampled_from(["none", "none", "truncate", "flip", "garbage"]))
    if how == "truncate" and data:
        del data[draw(st.integers(0, len(data) - 1)):]
    elif how == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data[i] ^= draw(st.integers(1, 255))
    elif how == "garbage":
        data += draw(st.binary(min_size=1, max_size=6))
    count = n + draw(st.sampled_from([0, 0, 0, -1, 1, -n - 1]))
    return bytes(data), count


def _exact_read(regions: list[bytes], calls: list[int]):
    def read(i: int) -> tuple[bytes, bool]:
        calls.append(i)
        sr = read_stream(Codec.ZSTD, regions[i])
        return sr.data, sr.failure is not None
    return read


def _same(got: ParsedRecords, want: ParsedRecords) -> None:
    for name, g, w in zip(ParsedRecords._fields, got, want, strict=True):
        if hasattr(w, "dtype"):
            assert g.dtype == w.dtype and g.tolist() == w.tolist(), name
        else:
            assert type(g) is type(w) and g == w, name


@needs_fast
@DIFF
@given(st.lists(zstd_regions(), max_size=4), st.sampled_from(list(ReadMode)), st.booleans())
def test_parser_fast_path_equals_the_reference(batches, mode, with_data):
    """``parse_records`` with ``codecs``: the C kernel (fast path where it decodes whole) and the
    reference (the exact reader for every batch) give the same columns; the C kernel asks the
    exact reader exactly about the streams its fast path leaves."""
    regions = [r for r, _ in batches]
    counts = [c for _, c in batches]
    codecs = [int(Codec.ZSTD)] * len(regions)
    py_calls: list[int] = []
    c_calls: list[int] = []
    want = parse_py(regions, counts, mode, with_data, None, codecs,
                    _exact_read(regions, py_calls))
    got = ParsedRecords(*_crecords.parse_records(regions, counts, mode, with_data, None, codecs,
                                                 _exact_read(regions, c_calls)))
    _same(got, want)
    assert py_calls == list(range(len(regions)))
    assert c_calls == [i for i, r in enumerate(regions) if _crecords._unpack(4, r) is None]


def test_parser_codecs_need_a_reader():
    with pytest.raises(ValueError, match="read"):
        parse_py([b""], [0], ReadMode.STREAM, True, None, [4])
    if _crecords is not None:
        with pytest.raises(ValueError, match="read"):
            _crecords.parse_records([b""], [0], ReadMode.STREAM, True, None, [4])
        with pytest.raises(TypeError, match="data, failed"):
            _crecords.parse_records([b"x"], [0], ReadMode.STREAM, True, None, [3],
                                    lambda i: b"")


# -- the decoder --------------------------------------------------------------------------------

def _reframe(batch: bytes, wire: bytes) -> bytes:
    """``batch`` with its records stream replaced by ``wire``; length and CRC recomputed."""
    out = bytearray(batch[:61] + wire)
    struct.pack_into(">i", out, 8, 49 + len(wire))
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


@st.composite
def fast_segments(draw) -> bytes:
    """Consecutive zstd and lz4 batches (and an uncompressed one now and then), some with
    their records stream damaged, replaced by garbage, or left whole."""
    parts = []
    offset = 0
    for b in range(draw(st.integers(1, 5))):
        n = draw(st.integers(1, 5))
        codec = draw(st.sampled_from([Codec.NONE, Codec.ZSTD, Codec.ZSTD, Codec.LZ4,
                                      Codec.LZ4]))
        raw = build_batch(_records(n, b), codec=codec, base_offset=offset,
                          base_timestamp=NOW, producer_id=7, base_sequence=offset)
        if codec is not Codec.NONE:
            wire = bytearray(raw[61:])
            how = draw(st.sampled_from(["none", "none", "truncate", "flip", "garbage",
                                        "plain", "records"]))
            if how == "truncate":
                del wire[draw(st.integers(0, len(wire) - 1)):]
            elif how == "flip":
                i = draw(st.integers(0, len(wire) - 1))
                wire[i] ^= draw(st.integers(1, 255))
            elif how == "garbage":
                wire += draw(st.binary(min_size=1, max_size=6))
            elif how == "plain":
                wire = bytearray(draw(st.binary(max_size=40)))
            elif how == "records":  # whole frames around damaged records
                plain = bytearray(_region(_records(n, b)))
                i = draw(st.integers(0, len(plain) - 1))
                plain[i] ^= draw(st.integers(1, 255))
                wire = bytearray(compress(codec, bytes(plain)))
            raw = _reframe(raw, bytes(wire))
        parts.append(raw)
        offset += n
    return b"".join(parts)


def _decode_exact(data: bytes) -> tuple[pa.Table, pa.Table]:
    """The decoder on the pure-Python reference parser (every compressed batch read by the
    exact reader)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(batch_module, "parse_records", parse_py)
        m.setattr(batch_module, "RecordsParser", RecordsParserPy)
        d = decode_records(data, topic="t", partition=3)
    return d.records, d.batches


@needs_fast
@DIFF
@given(fast_segments())
def test_decoder_tables_equal_the_exact_path(data):
    """Both tables, byte for byte, with the fast path and with the exact reader everywhere."""
    d = decode_records(data, topic="t", partition=3)
    records, batches = _decode_exact(data)
    assert d.records.equals(records)
    assert d.batches.equals(batches)


@st.composite
def long_zstd_segments(draw) -> bytes:
    """Enough zstd batches for the parser's helper threads to start (16 or more), a few of
    them damaged so that the exact reader is asked about them between decompressed ones."""
    parts = []
    offset = 0
    damaged = set(draw(st.lists(st.integers(0, 39), max_size=4)))
    for b in range(draw(st.integers(20, 40))):
        n = 1 + b % 4
        raw = build_batch(_records(n, b), codec=Codec.ZSTD if b % 9 else Codec.NONE,
                          base_offset=offset, base_timestamp=NOW)
        if b in damaged and b % 9:
            wire = bytearray(raw[61:])
            del wire[draw(st.integers(0, len(wire) - 1)):]
            raw = _reframe(raw, bytes(wire))
        parts.append(raw)
        offset += n
    return b"".join(parts)


@needs_fast
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(long_zstd_segments(), st.integers(2, 5))
def test_helper_threads_change_nothing(data, threads):
    """zstd batches decompressed by helper threads ahead of the parse: the same tables as on
    one thread and as the exact path."""
    one = decode_records(data, topic="t", partition=3, threads=1)
    many = decode_records(data, topic="t", partition=3, threads=threads)
    records, batches = _decode_exact(data)
    for d in (one, many):
        assert d.records.equals(records)
        assert d.batches.equals(batches)


def _many_batches_segment() -> bytes:
    """600 batches of 1 to 40 records, zstd and lz4 (every 13th uncompressed, every 11th
    compressed one's stream cut short): long enough that the parsing thread keeps arriving at
    batches a helper is still decompressing, and meets declined streams among them."""
    parts = []
    offset = 0
    for b in range(600):
        n = 1 + (b * 7) % 40
        codec = Codec.NONE if b % 13 == 0 else Codec.ZSTD if b % 3 else Codec.LZ4
        raw = build_batch(_records(n, b), codec=codec, base_offset=offset,
                          base_timestamp=NOW)
        if codec is not Codec.NONE and b % 11 == 0:
            raw = _reframe(raw, raw[61:-3])
        parts.append(raw)
        offset += n
    return b"".join(parts)


@needs_fast
@pytest.mark.parametrize("ring", ["default", "overtaking"])
@pytest.mark.parametrize("threads", [2, 3, 5])
def test_helpers_overtaken_or_helped_change_nothing(threads, ring):
    """Whoever decompresses a batch (a helper ahead of the parse, the parsing thread helping
    while a helper is at the batch it needs, or, with no wait allowed, the parsing thread
    decompressing again every batch a helper is still at and dropping the helper's late
    result), the tables are those of one thread, run after run."""
    data = _many_batches_segment()
    one = decode_records(data, topic="t", partition=3, threads=1)
    assert one.batches["decode_error"].null_count < one.batches.num_rows  # cut streams seen
    # "overtaking": helpers that sleep 2 ms before each batch, one slot per thread and no wait,
    # so the parsing thread finds the ring full of batches helpers are at, and decompresses
    # them again at once
    before = _crecords._pool_tuning(*((0, 0, 1, 2_000_000) if ring == "overtaking" else ()))
    try:
        for _ in range(3):
            many = decode_records(data, topic="t", partition=3, threads=threads)
            assert many.records.equals(one.records)
            assert many.batches.equals(one.batches)
    finally:
        _crecords._pool_tuning(*before)


@pytest.mark.skipif(_crecords is None, reason="C extension not built")
def test_pool_tuning_bounds():
    before = _crecords._pool_tuning()
    assert _crecords._pool_tuning(-1, -1, -1, -1) == before  # negative: unchanged
    for bad in ((61 * 10**9,), (0, 2 * 10**6), (0, 0, 0), (0, 0, 65), (0, 0, 1, 2 * 10**9)):
        with pytest.raises(ValueError, match="_pool_tuning"):
            _crecords._pool_tuning(*bad)
    assert _crecords._pool_tuning() == before


def test_decode_threads_setting(monkeypatch):
    monkeypatch.setenv("KQLAB_DECODE_THREADS", "3")
    assert batch_module.decode_threads() == 3
    assert batch_module.TableBuilder().threads == 3
    monkeypatch.setenv("KQLAB_DECODE_THREADS", "0")
    assert batch_module.decode_threads() == 1
    monkeypatch.setenv("KQLAB_DECODE_THREADS", "many")
    with pytest.raises(ValueError, match="KQLAB_DECODE_THREADS"):
        batch_module.decode_threads()
    monkeypatch.delenv("KQLAB_DECODE_THREADS")
    assert 1 <= batch_module.decode_threads() <= batch_module.MAX_DECODE_THREADS


# -- lz4 ------------------------------------------------------------------------------------------

def _lz4(payload: bytes, block_size: int, block_checksum: bool, content_checksum: bool,
         content_size: bool, linked: bool) -> bytes:
    return lz4.frame.compress(payload, block_size=block_size, block_linked=linked,
                              block_checksum=block_checksum, content_checksum=content_checksum,
                              store_size=content_size)


lz4_frames_st = st.builds(
    _lz4, st.binary(max_size=3000) | st.just(b"r" * 200_000) | st.just(bytes(range(256)) * 300),
    st.sampled_from([lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX256KB,
                     lz4.frame.BLOCKSIZE_MAX1MB, lz4.frame.BLOCKSIZE_MAX4MB]),
    st.booleans(), st.booleans(), st.booleans(), st.booleans())


@st.composite
def lz4_streams(draw) -> bytes:
    """An lz4 records stream (one frame, as Kafka writes), maybe damaged or followed by bytes."""
    data = bytearray(draw(lz4_frames_st))
    for _ in range(draw(st.integers(0, 2))):
        how = draw(st.sampled_from(["truncate", "flip", "flip-head", "garbage", "none"]))
        if how == "truncate" and data:
            del data[draw(st.integers(0, len(data) - 1)):]
        elif how == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
        elif how == "flip-head" and data:  # the frame descriptor and first block header
            i = draw(st.integers(0, min(len(data), 24) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif how == "garbage":
            data += draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@needs_lz4
@DIFF
@given(lz4_streams())
def test_lz4_fast_path_delivers_what_the_exact_reader_delivers(data):
    """Whenever the lz4 fast path decodes a stream, Kafka's Lz4BlockInputStream (the exact
    reader) delivers the same bytes without failing."""
    whole = _crecords._unpack(3, data)
    if whole is not None:
        sr = read_stream(Codec.LZ4, data)
        assert sr.failure is None
        assert sr.data == whole


@needs_lz4
@DIFF
@given(lz4_frames_st, st.binary(max_size=8))
def test_lz4_fast_path_takes_independent_frames(frame, tail):
    """Frames with independent blocks are decoded by the fast path, whatever follows them
    (nothing after the end mark is read)."""
    whole = _crecords._unpack(3, frame + tail)
    linked = not frame[4] & 0x20
    assert (whole is None) == linked
    if whole is not None:
        assert whole == read_stream(Codec.LZ4, frame + tail).data


@needs_lz4
def test_lz4_fast_path_never_checks_the_content_checksum():
    """Kafka's stream never verifies the content checksum; neither does the fast path."""
    frame = bytearray(_lz4(b"abc" * 100, lz4.frame.BLOCKSIZE_MAX64KB, False, True, True, False))
    frame[-1] ^= 0xFF
    assert _crecords._unpack(3, bytes(frame)) == b"abc" * 100
    assert read_stream(Codec.LZ4, bytes(frame)).data == b"abc" * 100


def _frame_of(payload: bytes, **kw) -> bytearray:
    opts = {"block_size": lz4.frame.BLOCKSIZE_MAX64KB, "block_checksum": False,
            "content_checksum": False, "content_size": False, "linked": False} | kw
    return bytearray(_lz4(payload, **opts))


def _lz4_cases() -> dict[str, bytes]:
    text = b"kafka records " * 50
    cases: dict[str, bytes] = {}
    f = _frame_of(text)
    f[6] ^= 0x01  # the header checksum byte (no content size: FLG, BD, HC)
    cases["header-checksum"] = bytes(f)
    f = _frame_of(text)
    f[4] |= 0x01  # a reserved FLG bit
    cases["reserved-flg"] = bytes(f)
    cases["dependent-blocks"] = bytes(_frame_of(text, linked=True))
    f = _frame_of(text)
    f[5] = 0x30  # block size value 3
    cases["block-size-value"] = bytes(f)
    f = _frame_of(text, block_checksum=True)
    f[-8] ^= 0x01  # inside the last block's checksum (before the end mark)
    cases["block-checksum"] = bytes(f)
    f = _frame_of(text)
    cases["no-end-mark"] = bytes(f[:-4])
    cases["cut-in-block"] = bytes(f[:12])
    f = _frame_of(text, content_checksum=True)
    cases["cut-content-checksum"] = bytes(f[:-2])
    f = _frame_of(text)
    f[7:11] = (0x7FFFFFFF).to_bytes(4, "little")  # a block larger than the maximum
    cases["block-too-large"] = bytes(f)
    f = _frame_of(text)
    f[11] ^= 0xFF  # the first compressed byte: a corrupt block
    cases["corrupt-block"] = bytes(f)
    cases["short"] = bytes(_frame_of(text)[:5])
    cases["not-lz4"] = b"\x00" * 16
    return cases


@needs_lz4
@pytest.mark.parametrize(("case", "data"), list(_lz4_cases().items()))
def test_lz4_fast_path_declines_what_the_stream_judges(case, data):
    """Every frame Kafka's stream reads differently from a clean decode is the exact reader's
    (it may still deliver all the bytes: then the two must agree)."""
    whole = _crecords._unpack(3, data)
    sr = read_stream(Codec.LZ4, data)
    if whole is not None:
        assert sr.failure is None and sr.data == whole, case
    else:
        assert sr.failure is not None, case


@pytest.mark.skipif(_crecords is None, reason="C extension not built")
def test_exact_codecs_switch_turns_the_fast_paths_off():
    """``KQLAB_EXACT_CODECS=1``: no codec library is bound, every compressed batch goes to the
    exact readers (and the tables are the same)."""
    import os
    import subprocess
    import sys

    code = ("from kqlab.kafka import records_parser as r, _crecords as c;"
            "print(r.ZSTD_VERSION, r.LZ4_VERSION, c._unpack(4, b''))")
    env = dict(os.environ, KQLAB_EXACT_CODECS="1")
    env.pop("KQLAB_PURE_PYTHON", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["None", "None", "None"]
