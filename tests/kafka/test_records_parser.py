"""The C records parser (``kqlab.kafka._crecords``) against the pure-Python reference.

``kqlab.kafka._records_py.parse_records`` is the specification: on any input — valid regions,
mutated or truncated ones, garbage, odd counts — both implementations must return the same
columns, field by field, in strict and partial mode, with and without data.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.kafka import records_parser
from kqlab.kafka._records_py import ParsedRecords, ParseErrorKind, ReadMode
from kqlab.kafka._records_py import parse_records as parse_py
from kqlab.kafka.varint import encode_varint, encode_varlong, zigzag32, zigzag64

try:
    from kqlab.kafka._crecords import parse_records as parse_c
except ImportError:  # not built: only the reference can be tested
    parse_c = None

needs_c = pytest.mark.skipif(parse_c is None, reason="C extension kqlab.kafka._crecords not built")

IMPLS = [pytest.param(parse_py, id="python")]
if parse_c is not None:
    IMPLS.append(pytest.param(lambda *a: ParsedRecords(*parse_c(*a)), id="c"))

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

PARITY = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- a small record encoder ---------------------------------------------------------------------


def _field(data: bytes | None, null_len: int = -1) -> bytes:
    """A length-prefixed field; ``None`` is written with a negative length (null)."""
    if data is None:
        return encode_varint(null_len)
    return encode_varint(len(data)) + data


def encode_record(attr: int, tsd: int, offd: int, key: bytes | None, value: bytes | None,
                  headers: list[tuple[bytes, bytes | None]], *, null_len: int = -1,
                  size_delta: int = 0) -> bytes:
    """One magic v2 record: varint size prefix + body (``size_delta`` corrupts the prefix)."""
    body = bytearray([attr & 0xFF])
    body += encode_varlong(tsd)
    body += encode_varint(offd)
    body += _field(key, null_len)
    body += _field(value, null_len)
    body += encode_varint(len(headers))
    for hk, hv in headers:
        body += _field(hk)
        body += _field(hv, null_len)
    return encode_varint(len(body) + size_delta) + bytes(body)


def overlong_varint(n: int, length: int, junk: int = 0) -> bytes:
    """``n`` as a zig-zag varint padded to ``length`` (<= 5) bytes; ``junk`` fills the bits of a
    5th byte above bit 31, which Java (and both parsers) drop."""
    u = zigzag32(n)
    out = bytearray()
    for i in range(length):
        group = (u >> (7 * i)) & 0x7F
        if i == 4:
            group |= (junk & 0x7) << 4
        out.append(group | (0x80 if i < length - 1 else 0))
    return bytes(out)


def overlong_varlong(n: int, length: int) -> bytes:
    """``n`` as a zig-zag varlong padded to ``length`` (<= 10) bytes."""
    u = zigzag64(n)
    out = bytearray()
    for i in range(length):
        group = (u >> (7 * i)) & 0x7F
        if i == 9:
            group &= 0x01
        out.append(group | (0x80 if i < length - 1 else 0))
    return bytes(out)


# -- strategies ---------------------------------------------------------------------------------

small_bytes = st.binary(max_size=12)
maybe_bytes = st.none() | small_bytes
header_keys = st.sampled_from([b"", b"k", b"trace-id", b"k"]) | st.binary(max_size=6)
headers_st = st.lists(st.tuples(header_keys, maybe_bytes), max_size=4)


@st.composite
def records_st(draw) -> bytes:
    """One record, usually valid; sometimes with a corrupt size prefix or odd varints."""
    attr = draw(st.integers(0, 255))
    tsd = draw(st.integers(*INT64) | st.integers(-300, 300))
    offd = draw(st.integers(*INT32) | st.integers(-300, 300))
    key = draw(maybe_bytes)
    value = draw(maybe_bytes)
    headers = draw(headers_st)
    null_len = draw(st.sampled_from([-1, -1, -2, -(2**31)]))
    size_delta = draw(st.sampled_from([0] * 8 + [-1, 1, -1000]))
    rec = encode_record(attr, tsd, offd, key, value, headers, null_len=null_len,
                        size_delta=size_delta)
    if draw(st.integers(0, 9)) == 0:
        # re-encode with overlong / junk-bit varints (still valid for the broker)
        body = bytearray([attr])
        body += overlong_varlong(tsd, draw(st.integers(1, 10)))
        body += overlong_varint(offd, 5, draw(st.integers(0, 7)))
        body += _field(key, null_len) + _field(value, null_len)
        body += overlong_varint(len(headers), draw(st.integers(1, 5)))
        for hk, hv in headers:
            body += _field(hk) + _field(hv, null_len)
        rec = overlong_varint(len(body), 5, draw(st.integers(0, 7))) + bytes(body)
    return rec


@st.composite
def batch_st(draw) -> tuple[bytes, int]:
    """A records region and its declared count, possibly damaged."""
    recs = draw(st.lists(records_st(), max_size=6))
    region = bytearray(b"".join(recs))
    n = len(recs)
    mode = draw(st.sampled_from(["valid", "valid", "truncate", "mutate", "extend", "garbage"]))
    if mode == "truncate" and region:
        del region[draw(st.integers(0, len(region) - 1)):]
    elif mode == "mutate" and region:
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(region) - 1))
            region[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]) | st.integers(0, 255))
    elif mode == "extend":
        region += draw(st.binary(min_size=1, max_size=8))
    elif mode == "garbage":
        region = bytearray(draw(st.binary(max_size=80)))
    count = draw(
        st.just(n)
        | st.integers(-2, n + 3)
        | st.sampled_from([0, -1, 2**31 - 1, -(2**31), 2**63, -(2**70), 10**30])
    )
    return bytes(region), count


batches_st = st.lists(batch_st(), max_size=5)


def assert_same(got: tuple, want: ParsedRecords) -> None:
    assert isinstance(got, tuple)
    assert len(got) == len(ParsedRecords._fields)
    for name, g, w in zip(ParsedRecords._fields, got, want, strict=True):
        if isinstance(w, np.ndarray):
            assert isinstance(g, np.ndarray), name
            assert g.dtype == w.dtype, name
            assert g.shape == w.shape, name
            assert np.array_equal(g, w), name
        elif name == "batch_error":
            assert g == w, name
            for e in g:
                assert e is None or (type(e) is tuple and all(type(x) is int for x in e)), e
        else:
            assert type(g) is type(w), name
            assert g == w, name


def check_parity(regions: list[bytes], counts: list[int]) -> None:
    # every reader of the broker (ReadMode), and regions a failing codec delivered (failed)
    alternate = [i % 2 == 0 for i in range(len(regions))]
    for mode, failed in ((ReadMode.BUFFER, None), (ReadMode.PARTIAL, None),
                         (ReadMode.PARTIAL, alternate), (ReadMode.STREAM, None),
                         (ReadMode.STREAM, alternate)):
        for with_data in (True, False):
            want = parse_py(regions, counts, mode, with_data, failed)
            got = parse_c(regions, counts, mode, with_data, failed)
            assert_same(got, want)


# -- parity -------------------------------------------------------------------------------------


@needs_c
@PARITY
@given(batches_st)
def test_parity_random_batches(batches):
    check_parity([r for r, _ in batches], [c for _, c in batches])


@needs_c
@PARITY
@given(st.lists(st.lists(records_st(), max_size=5), max_size=4))
def test_parity_valid_regions(batches):
    regions = [b"".join(recs) for recs in batches]
    check_parity(regions, [len(recs) for recs in batches])


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), st.integers(-1, 12)), max_size=4))
def test_parity_garbage(batches):
    check_parity([r for r, _ in batches], [c for _, c in batches])


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=24), st.integers(1, 3))
def test_parity_varint_edges(prefix, count):
    # regions made of continuation-heavy bytes exercise the varint limits (5 / 10 bytes)
    region = bytes(b | 0x80 for b in prefix[:-1]) + prefix[-1:]
    check_parity([region, region + b"\x00" * 8], [count, count])


@needs_c
def test_parity_large_region():
    # large enough for the C parser to release the GIL and grow every buffer several times
    rng = np.random.default_rng(7)
    recs = []
    for i in range(3000):
        value = rng.bytes(int(rng.integers(0, 200)))
        headers = [(b"h%d" % (i % 3), None if i % 5 == 0 else b"v" * (i % 7))] * (i % 3)
        recs.append(encode_record(i % 256, i * 1000 - 10**6, i, b"key-%d" % i, value, headers))
    region = b"".join(recs)
    damaged = region[: len(region) // 2]
    check_parity([region, damaged, region], [len(recs), len(recs), len(recs) - 1])


@needs_c
def test_accepts_buffers_and_sequences():
    rec = encode_record(1, 2, 3, b"k", b"value", [(b"h", b"v")])
    want = parse_py([rec, rec], [1, 1])
    for regions in ([bytearray(rec), memoryview(rec)], (rec, rec)):
        assert_same(parse_c(regions, (1, 1), True, True), want)
    assert_same(parse_c([rec, rec], [np.int64(1), True]), want)


@needs_c
def test_bad_arguments():
    with pytest.raises(ValueError, match="same length"):
        parse_c([b""], [0, 0], True, True)
    with pytest.raises(TypeError):
        parse_c(["not bytes"], [1], True, True)
    with pytest.raises(TypeError):
        parse_c([b""], [1.5], True, True)


@needs_c
def test_c_result_arrays_are_writable():
    rec = encode_record(0, 0, 0, b"k", b"v", [])
    got = parse_c([rec], [1], True, True)
    for arr in got:
        if isinstance(arr, np.ndarray):
            arr[...] = arr  # writable, like the reference's copies


# -- large data buffers reused by later parses --------------------------------------------------

def _big_region(seed: int) -> tuple[bytes, int]:
    """2500 records of 2000-byte values: 5 MB of values, above the size whose data buffers the
    C parser keeps for later parses."""
    rng = np.random.default_rng(seed)
    recs = [encode_record(0, i, i, b"k%d" % i, rng.bytes(2000), []) for i in range(2500)]
    return b"".join(recs), len(recs)


def _parse_big(region: bytes, n: int, reserve: int) -> ParsedRecords:
    from kqlab.kafka._crecords import RecordsParser

    parser = RecordsParser(True, reserve)
    parser.add([region], [n], ReadMode.BUFFER)
    return ParsedRecords(*parser.finish())


@needs_c
def test_reused_buffers_never_change_what_is_held():
    """A parse reuses a kept data buffer only when nothing else references it: values still
    held (by the result, or only by a numpy view of its bytes) stay as they were, and every
    parse equals the reference."""
    from kqlab.kafka import _crecords

    _crecords._release_buffers()
    a, n = _big_region(1)
    b, _ = _big_region(2)
    want = {id(a): parse_py([a], [n]), id(b): parse_py([b], [n])}
    held = _parse_big(a, n, len(a))
    only_view = np.frombuffer(_parse_big(a, n, len(a)).value_data, np.uint8)[100:5000]
    for region in (b, a, b, b, a):
        got = _parse_big(region, n, len(region))
        assert_same(got, want[id(region)])
        del got  # its buffers may be reused by the next parse
    assert_same(held, want[id(a)])
    assert only_view.tobytes() == want[id(a)].value_data[100:5000]
    assert _crecords._release_buffers() >= 1  # large buffers were kept


@needs_c
def test_a_reused_buffer_hashes_as_its_bytes():
    """A bytes object's hash is cached on it: a reused buffer must not keep the one of the
    values it held before (the reserve equals the kept size, the one case a resize could be
    skipped)."""
    from kqlab.kafka import _crecords

    _crecords._release_buffers()
    a, n = _big_region(3)
    b, _ = _big_region(4)
    first = _parse_big(a, n, 2500 * 2000)
    hash(first.value_data)
    del first
    second = _parse_big(b, n, 2500 * 2000)
    assert hash(second.value_data) == hash(bytes(bytearray(second.value_data)))
    _crecords._release_buffers()


def test_active_implementation_is_the_requested_one():
    # the C extension is built by `pip install -e .`; KQLAB_PURE_PYTHON=1 forces the reference
    assert parse_c is not None, "kqlab.kafka._crecords is not built (pip install -e .)"
    if os.environ.get("KQLAB_PURE_PYTHON"):
        assert records_parser.IMPLEMENTATION == "python"
        assert records_parser.parse_records is records_parser.parse_records_py
        assert records_parser.scan_batches is records_parser.scan_batches_py
    else:
        assert records_parser.IMPLEMENTATION == "c"


# -- exact cases, one per error kind ------------------------------------------------------------

K = ParseErrorKind
REC = encode_record(0, 5, 0, b"key", b"value", [(b"h", None)])
BODY = REC[1:]  # the prefix of this small record is one byte


def _record_with(*, key: bytes = encode_varint(0), value: bytes = encode_varint(0),
                 headers: bytes = encode_varint(0)) -> bytes:
    body = b"\x00" + encode_varlong(0) + encode_varint(0) + key + value + headers
    return encode_varint(len(body)) + body


CASES = [
    # (id, region, count, mode (True BUFFER, False PARTIAL, 2 STREAM), batch_n, error
    #  [, failed: the region is what a failing codec delivered])
    ("ok", REC * 2, 2, True, 2, None),
    ("ok-empty", b"", 0, True, 0, None),
    ("premature-eof-empty", b"", 1, True, 0, (K.PREMATURE_EOF, 0, 0)),
    ("premature-eof-after-one", REC, 2, False, 1, (K.PREMATURE_EOF, 0, 0)),
    ("premature-eof-in-prefix", REC + b"\x80\x80", 2, True, 1, (K.PREMATURE_EOF, 0, 0)),
    ("size-exceeds", encode_varint(100) + b"\x00" * 5, 1, True, 0,
     (K.SIZE_EXCEEDS_REMAINING, 100, 5)),
    ("size-mismatch", encode_varint(len(BODY) - 1) + BODY, 1, True, 0,
     (K.SIZE_MISMATCH, len(BODY) - 1, len(BODY))),
    ("size-negative", encode_varint(-3) + BODY, 1, True, 0, (K.SIZE_MISMATCH, -3, len(BODY))),
    ("size-ignored-partial", encode_varint(-3) + BODY, 1, False, 1, None),
    ("negative-header-count", _record_with(headers=encode_varint(-4)), 1, False, 0,
     (K.NEGATIVE_HEADER_COUNT, -4, 0)),
    ("header-count-exceeds", _record_with(headers=encode_varint(50)), 1, True, 0,
     (K.HEADER_COUNT_EXCEEDS_REMAINING, 50, 0)),
    ("header-count-exceeds-by-one", _record_with(headers=encode_varint(1)), 1, True, 0,
     (K.HEADER_COUNT_EXCEEDS_REMAINING, 1, 0)),
    ("header-count-at-limit", _record_with(headers=encode_varint(2) + b"\x00\x00"), 1, True, 0,
     (K.INVALID_STRUCTURE, 0, 0)),
    ("header-count-partial", _record_with(headers=encode_varint(50)), 1, False, 0,
     (K.INVALID_STRUCTURE, 0, 0)),
    ("negative-header-key", _record_with(headers=encode_varint(1) + encode_varint(-2)), 1, True,
     0, (K.NEGATIVE_HEADER_KEY, -2, 0)),
    # Kafka: DefaultRecord.readFrom(ByteBuffer) reads the length varint outside its try, and
    # DefaultRecordBatch.uncompressedIterator only catches BufferUnderflowException, so the
    # IllegalArgumentException ("Varint is too long ... converted value: ffffffff") escapes:
    # UNKNOWN_SERVER_ERROR, not "Found invalid record structure" (was INVALID_STRUCTURE here)
    ("varint-too-long-prefix", b"\xff" * 5 + b"\x00", 1, True, 0,
     (K.LENGTH_TOO_LONG, 0xFFFFFFFF, 0)),
    # ... the stream readers catch it (StreamRecordIterator.readNext): premature EOF
    ("varint-too-long-prefix-stream", b"\xff" * 5 + b"\x00", 1, 2, 0, (K.PREMATURE_EOF, 0, 0)),
    ("varint-too-long-prefix-partial", b"\xff" * 5 + b"\x00", 1, False, 0,
     (K.PREMATURE_EOF, 0, 0)),
    ("varlong-too-long", b"\x0c\x00" + b"\xff" * 10 + b"\x00", 1, False, 0,
     (K.INVALID_STRUCTURE, 0, 0)),
    ("no-attributes", encode_varint(0), 1, False, 0, (K.INVALID_STRUCTURE, 0, 0)),
    ("key-past-end-strict", _record_with(key=encode_varint(1000)), 1, True, 0,
     (K.INVALID_STRUCTURE, 0, 0)),
    # DefaultRecord.skipBytes: "... before skipping all bytes. Remaining bytes:<n>" (a = n)
    ("key-past-end-partial", _record_with(key=encode_varint(1000)), 1, False, 0,
     (K.SKIP_EOF, 998, 0)),
    ("value-past-end-partial", _record_with(value=encode_varint(7)), 1, False, 0,
     (K.SKIP_EOF, 6, 0)),
    ("header-value-past-end-partial",
     _record_with(headers=encode_varint(1) + encode_varint(0) + encode_varint(9)), 1, False, 0,
     (K.SKIP_EOF, 9, 0)),
    ("records-remaining", REC + b"\x00", 1, True, 1, (K.RECORDS_REMAINING, 0, 0)),
    ("records-remaining-count-0", REC, 0, False, 0, (K.RECORDS_REMAINING, 0, 0)),
    ("invalid-count", REC, -1, True, 0, (K.INVALID_COUNT, -1, 0)),
    ("invalid-count-huge", REC, -(2**70), False, 0, (K.INVALID_COUNT, -(2**70), 0)),
    ("count-huge", REC, 2**100, True, 1, (K.PREMATURE_EOF, 0, 0)),
    # the stream reader of the rebuild path (DefaultRecord.readFrom(InputStream))
    ("payload-eof-stream", encode_varint(100) + b"\x00" * 5, 1, 2, 0, (K.PAYLOAD_EOF, 100, 5)),
    ("size-negative-stream", encode_varint(-3) + BODY, 1, 2, 0, (K.PREMATURE_EOF, 0, 0)),
    ("body-too-large-stream", encode_varint(2**30) + b"\x00", 1, 2, 0,
     (K.BODY_TOO_LARGE, 2**30, 0)),
    ("key-past-body-stream", _record_with(key=encode_varint(1)), 1, 2, 0,
     (K.INVALID_STRUCTURE, 0, 0)),
    ("size-mismatch-stream", encode_varint(len(BODY) + 1) + BODY + b"\x00", 1, 2, 0,
     (K.SIZE_MISMATCH, len(BODY) + 1, len(BODY))),
    # a region that a failing codec delivered: the next read past it throws
    ("codec-read-stream", REC, 2, 2, 1, (K.CODEC_READ, 0, 0), True),
    ("codec-read-partial", REC + REC[:3], 2, False, 1, (K.CODEC_READ, 0, 0), True),
    ("codec-read-in-body", REC[:-2], 1, 2, 0, (K.CODEC_READ, 0, 0), True),
    ("codec-tail", REC, 1, 2, 1, (K.CODEC_TAIL, 0, 0), True),
    ("codec-remaining-wins", REC + b"\x00", 1, False, 1, (K.RECORDS_REMAINING, 0, 0), True),
]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("region", "count", "strict", "batch_n", "error", "failed"),
                         [pytest.param(*c[1:6], len(c) > 6 and c[6], id=c[0]) for c in CASES])
def test_error_kinds(impl, region, count, strict, batch_n, error, failed):
    for with_data in (True, False):
        # the batch is framed by two good ones, which must be unaffected
        res = impl([REC, region, REC], [1, count, 1], strict, with_data, [False, failed, False])
        assert res.batch_n.tolist() == [1, batch_n, 1]
        assert res.batch_error == [None, error, None]
        assert len(res.ts_delta) == batch_n + 2


def test_every_error_kind_is_covered():
    assert {c[5][0] for c in CASES if c[5] is not None} == set(ParseErrorKind)


@pytest.mark.parametrize("impl", IMPLS)
def test_columns_of_a_known_region(impl):
    region = (encode_record(0x81, -(2**63), 2**31 - 1, None, b"v1", [(b"a", b"x"), (b"a", None)])
              + encode_record(3, 7, -1, b"", None, [], null_len=-9)
              + encode_record(0, 0, 2, b"kk", b"", [(b"", b"")]))
    res = impl([region], [3], True, True)
    assert res.batch_n.tolist() == [3]
    assert res.batch_error == [None]
    assert res.ts_delta.tolist() == [-(2**63), 7, 0]
    assert res.offset_delta.tolist() == [2**31 - 1, -1, 2]
    assert res.attributes.tolist() == [-127, 3, 0]
    assert res.key_length.tolist() == [-1, 0, 2]
    assert res.value_length.tolist() == [2, -1, 0]
    assert res.header_count.tolist() == [2, 0, 1]
    assert res.key_offsets.tolist() == [0, 0, 0, 2]
    assert res.key_data == b"kk"
    assert res.value_offsets.tolist() == [0, 2, 2, 2]
    assert res.value_data == b"v1"
    assert res.header_key_offsets.tolist() == [0, 1, 2, 2]
    assert res.header_key_data == b"aa"
    assert res.header_value_offsets.tolist() == [0, 1, 1, 1]
    assert res.header_value_data == b"x"
    assert res.header_value_length.tolist() == [1, -1, 0]
    bare = impl([region], [3], False, False)
    assert bare[8:] == (None,) * 9
    assert np.array_equal(bare.header_count, res.header_count)
