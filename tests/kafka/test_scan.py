"""The C batch scanner and CRC-32C (``kqlab.kafka._crecords``) against the pure-Python reference.

``kqlab.kafka._scan_py`` is the specification: on any buffer — valid v2 and legacy batches,
mutated, truncated, garbage, any ``start``/``end`` — ``scan_batches`` must return the same
columns (values and dtypes) and the same stop; ``crc32c`` must equal ``google_crc32c`` on every
input, on the hardware path and on the portable slicing-by-8 fallback.
"""

from __future__ import annotations

import os
import platform
import random
import struct
import threading

import google_crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.kafka import _scan_py
from kqlab.kafka.batch import RecordBatchHeader, batch_crc_valid
from kqlab.kafka.builder import BatchBuilder, Record, rewrite_header
from kqlab.kafka.compression import Codec
from kqlab.kafka.legacy import encode_message
from kqlab.kafka.log import LogIssue, scan_buffer

try:
    from kqlab.kafka import _crecords
except ImportError:  # not built: only the reference can be tested
    _crecords = None

needs_c = pytest.mark.skipif(_crecords is None,
                             reason="C extension kqlab.kafka._crecords not built")

SCANNERS = [pytest.param(_scan_py.scan_batches, id="python")]
CRCS = [pytest.param(_scan_py.crc32c, id="python")]
if _crecords is not None:
    SCANNERS.append(pytest.param(_crecords.scan_batches, id="c"))
    CRCS += [pytest.param(_crecords.crc32c, id="c"),
             pytest.param(_crecords._crc32c_sw, id="c-slicing-by-8")]

INT16 = (-(2**15), 2**15 - 1)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
NAMES = [name for name, _ in _scan_py.COLUMNS]

PARITY = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def ref(buf, start=0, end=None) -> tuple:
    return _scan_py.scan_batches(buf, start, end)


def columns(result: tuple) -> dict[str, np.ndarray]:
    return dict(zip(NAMES, result[:15], strict=True))


def stop(result: tuple) -> tuple[int, int, int]:
    return result[15:]


def assert_same(got: tuple, want: tuple) -> None:
    assert isinstance(got, tuple) and len(got) == len(want) == 18
    for (name, dtype), g, w in zip(_scan_py.COLUMNS, got, want, strict=False):
        assert isinstance(g, np.ndarray), name
        assert g.dtype == w.dtype == np.dtype(dtype), name
        assert g.shape == w.shape and g.ndim == 1, name
        assert np.array_equal(g, w), name
    for g, w in zip(got[15:], want[15:], strict=True):
        assert type(g) is int and g == w


def check(buf, start=0, end=None) -> tuple:
    """The reference result, after holding the C scanner equal to it (when built)."""
    want = ref(buf, start, end)
    if _crecords is not None:
        assert_same(_crecords.scan_batches(buf, start, end), want)
    return want


# -- builders -----------------------------------------------------------------------------------


def v2(n_records: int = 2, **options) -> bytes:
    b = BatchBuilder(base_timestamp=1_700_000_000_000, **options)
    for i in range(n_records):
        b.append(Record(key=b"k%d" % i, value=b"value-%d" % i))
    return b.build()


def head(offset: int, length: int, rest: bytes = b"") -> bytes:
    return struct.pack(">qi", offset, length) + rest


# -- exact cases --------------------------------------------------------------------------------


@pytest.mark.parametrize("scan", SCANNERS)
def test_empty_buffer_and_empty_range(scan):
    res = scan(b"")
    assert stop(res) == (0, _scan_py.STOP_END, -1)
    for (name, dtype), col in zip(_scan_py.COLUMNS, res, strict=False):
        assert col.dtype == np.dtype(dtype) and col.shape == (0,), name
    data = v2() + v2()
    assert stop(scan(data, 5, 5)) == (5, _scan_py.STOP_END, -1)
    assert stop(scan(data, len(data), len(data))) == (len(data), _scan_py.STOP_END, -1)


@pytest.mark.parametrize("scan", SCANNERS)
def test_valid_v2_batches_fields(scan):
    a = v2(3, base_offset=7, partition_leader_epoch=-5, producer_id=12345, producer_epoch=-2,
           base_sequence=2**31 - 1, transactional=True, codec=Codec.ZSTD)
    b = v2(1, base_offset=-(2**63), partition_leader_epoch=2**31 - 1, timestamp_type=1,
           max_timestamp=2**63 - 1)
    data = a + b
    res = scan(data)
    cols = columns(res)
    assert stop(res) == (len(data), _scan_py.STOP_END, -1)
    assert cols["positions"].tolist() == [0, len(a)]
    assert cols["sizes"].tolist() == [len(a), len(b)]
    for i, raw in enumerate((a, b)):
        h = RecordBatchHeader.parse(raw)
        assert cols["magic"][i] == 2
        assert cols["base_offset"][i] == h.base_offset
        assert cols["partition_leader_epoch"][i] == h.partition_leader_epoch
        assert cols["crc"][i] == h.crc
        assert cols["attributes"][i] == h.attributes
        assert cols["last_offset_delta"][i] == h.last_offset_delta
        assert cols["base_timestamp"][i] == h.base_timestamp
        assert cols["max_timestamp"][i] == h.max_timestamp
        assert cols["producer_id"][i] == h.producer_id
        assert cols["producer_epoch"][i] == h.producer_epoch
        assert cols["base_sequence"][i] == h.base_sequence
        assert cols["records_count"][i] == h.records_count
        assert cols["crc_valid"][i]
    check(data)


@pytest.mark.parametrize("scan", SCANNERS)
def test_crc_covers_bytes_from_21(scan):
    good = v2(2)
    for i in range(len(good)):
        bad = bytearray(good)
        bad[i] ^= 0x5A
        if i in (8, 9, 10, 11):  # the length: a different walk, checked by the parity tests
            continue
        cols = columns(scan(bytes(bad)))
        if i == 16:  # magic 2 -> 0x58: not a v2 batch any more
            assert cols["magic"][0] == 2 ^ 0x5A and not cols["crc_valid"][0]
            continue
        # bytes 0..20 (offset, length, epoch, magic, crc itself) are outside the CRC range;
        # a changed crc field no longer matches
        expect = i < 17
        assert bool(cols["crc_valid"][0]) is expect, i
        assert bool(cols["crc_valid"][0]) is batch_crc_valid(bytes(bad))[0], i


@pytest.mark.parametrize("scan", SCANNERS)
def test_stop_short(scan):
    a = v2()
    for tail in range(1, 12):
        data = a + b"\x00" * tail
        res = scan(data)
        assert stop(res) == (len(a), _scan_py.STOP_SHORT, -1)
        assert columns(res)["positions"].tolist() == [0]


@pytest.mark.parametrize("scan", SCANNERS)
@pytest.mark.parametrize("length", [13, 0, -1, -(2**31), 1])
def test_stop_corrupt_length(scan, length):
    a = v2()
    # the length rule comes before the 17-byte rule: 12..16 remaining bytes still say corrupt
    for rest in (b"", b"\x02\x00", b"\x00" * 30):
        data = a + head(99, length, rest)
        res = scan(data)
        assert stop(res) == (len(a), _scan_py.STOP_CORRUPT_LENGTH, length)
        assert columns(res)["sizes"].tolist() == [len(a)]


@pytest.mark.parametrize("scan", SCANNERS)
def test_stop_truncated(scan):
    a, b = v2(), v2(4)
    for cut in range(12, len(b)):
        data = a + b[:cut]
        res = scan(data)
        assert stop(res) == (len(a), _scan_py.STOP_TRUNCATED, len(b) - 12), cut
        assert len(columns(res)["positions"]) == 1
    # a valid length but fewer than 17 bytes in the buffer
    for n in range(12, 17):
        assert stop(scan(head(0, 14, b"\x00" * 30)[:n])) == (0, _scan_py.STOP_TRUNCATED, 14)
    # 14 <= length but 12 + length overflows what is left (and int32 max)
    assert stop(scan(head(0, 2**31 - 1, b"\x00" * 20))) == (0, _scan_py.STOP_TRUNCATED,
                                                            2**31 - 1)
    # the end argument truncates too: end inside the second batch
    data = a + b
    res = scan(data, 0, len(data) - 1)
    assert stop(res) == (len(a), _scan_py.STOP_TRUNCATED, len(b) - 12)


@pytest.mark.parametrize("scan", SCANNERS)
@pytest.mark.parametrize("magic", [3, 127, -1, -128])
def test_invalid_magic_is_returned_as_a_batch(scan, magic):
    a = v2()
    bad = rewrite_header(v2(3), magic=magic)  # CRC recomputed: only the magic is wrong
    data = a + bad + a
    res = scan(data)
    cols = columns(res)
    assert stop(res) == (len(data), _scan_py.STOP_END, -1)
    assert cols["positions"].tolist() == [0, len(a), len(a) + len(bad)]
    assert cols["magic"].tolist() == [2, magic, 2]
    assert cols["base_offset"][1] == RecordBatchHeader.parse(bad).base_offset
    for name in NAMES[4:14]:
        assert cols[name][1] == 0, name
    assert cols["crc_valid"].tolist() == [True, False, True]


@pytest.mark.parametrize("scan", SCANNERS)
def test_legacy_and_short_v2_entries(scan):
    m0 = encode_message(5, b"k", b"v0", magic=0)
    m1 = encode_message(6, None, b"v1", magic=1, timestamp=1_700_000_000_000)
    short_v2 = head(3, 20, b"\xff\xff\xff\xff\x02" + b"\x11" * 15)  # magic 2 but 32 < 61 bytes
    data = m0 + m1 + short_v2
    res = scan(data)
    cols = columns(res)
    assert stop(res) == (len(data), _scan_py.STOP_END, -1)
    assert cols["sizes"].tolist() == [len(m0), len(m1), 32]
    assert cols["magic"].tolist() == [0, 1, 2]
    assert cols["base_offset"].tolist() == [5, 6, 3]
    for name in NAMES[4:]:
        assert not cols[name].any(), name


@pytest.mark.parametrize("scan", SCANNERS)
def test_absolute_positions_and_bounds(scan):
    a, b = v2(1), v2(2)
    prefix = b"\xee" * 37
    data = prefix + a + b + b"junk"
    res = scan(data, len(prefix), len(data) - 4)
    assert columns(res)["positions"].tolist() == [37, 37 + len(a)]
    assert stop(res) == (len(data) - 4, _scan_py.STOP_END, -1)
    res = scan(data, len(prefix) + len(a))
    assert columns(res)["positions"].tolist() == [37 + len(a)]
    assert stop(res) == (len(data) - 4, _scan_py.STOP_SHORT, -1)
    for start, end in [(-1, None), (5, 4), (0, len(data) + 1), (len(data) + 1, None),
                       (0, -1), (2**70, None), (0, 2**70)]:
        with pytest.raises(ValueError, match="start <= end"):
            scan(data, start, end)
    with pytest.raises(TypeError):
        scan(data, 1.0)
    with pytest.raises(TypeError):
        scan("not bytes")


def test_buffer_types():
    a, b = v2(2), v2(3, codec=Codec.GZIP)
    data = b"\x00" * 3 + a + b
    for buf in (data, bytearray(data), memoryview(data), memoryview(bytearray(data))[0:],
                np.frombuffer(data, dtype=np.uint8)):
        res = check(buf, 3)
        assert columns(res)["crc_valid"].tolist() == [True, True]
    # a slice: positions are indices into the slice
    res = check(memoryview(data)[3:])
    assert columns(res)["positions"].tolist() == [0, len(a)]
    # not C-contiguous: scanned as bytes(buf)
    doubled = bytes(x for c in data for x in (c, 0xAB))
    res = check(memoryview(doubled)[::2], 3)
    assert columns(res)["positions"].tolist() == [3, 3 + len(a)]


@needs_c
def test_scan_large_buffer_without_gil():
    rng = random.Random(7)
    parts = []
    for i in range(40):
        b = BatchBuilder(base_offset=i * 100, base_timestamp=1_700_000_000_000,
                         producer_id=i, base_sequence=i)
        for _ in range(rng.randint(1, 8)):
            b.append(Record(value=rng.randbytes(rng.randint(200, 12_000))))
        parts.append(b.build())
    data = bytearray(b"".join(parts))
    data[len(parts[0]) + 100] ^= 1  # break one CRC
    res = check(data)
    assert len(data) > 65536
    assert columns(res)["crc_valid"].sum() == 39 and not columns(res)["crc_valid"][1]
    # the C scan releases the GIL: run it from threads concurrently
    out: list[tuple] = []

    def work():
        out.append(_crecords.scan_batches(data))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in out:
        assert_same(got, res)


@needs_c
def test_result_arrays_are_owned_and_writable():
    data = v2() + v2()
    res = _crecords.scan_batches(data)
    for col in res[:15]:
        assert col.flags.writeable and col.flags.c_contiguous
    res[0][0] = 99  # the column owns its memory; the input is untouched
    assert _crecords.scan_batches(data)[0][0] == 0


# -- parity (hypothesis) ------------------------------------------------------------------------

maybe_bytes = st.none() | st.binary(max_size=20)


@st.composite
def v2_batch_st(draw) -> bytes:
    records = draw(st.lists(st.builds(Record, value=maybe_bytes, key=maybe_bytes,
                                      timestamp=st.none() | st.integers(0, 2**40)),
                            max_size=5))
    b = BatchBuilder(
        codec=draw(st.sampled_from(list(Codec))),
        base_offset=draw(st.integers(*INT64) | st.just(0)),
        base_timestamp=draw(st.none() | st.integers(0, 2**40)),
        max_timestamp=draw(st.none() | st.integers(*INT64)),
        timestamp_type=draw(st.integers(0, 1)),
        producer_id=draw(st.integers(*INT64) | st.just(-1)),
        producer_epoch=draw(st.integers(*INT16)),
        base_sequence=draw(st.integers(*INT32)),
        transactional=draw(st.booleans()),
        control=draw(st.booleans()),
        partition_leader_epoch=draw(st.integers(*INT32)),
        last_offset_delta=draw(st.none() | st.integers(*INT32)),
        records_count=draw(st.none() | st.integers(*INT32)),
        crc=draw(st.none() | st.integers(0, 2**32 - 1)),
        records=records,
    )
    if b.base_timestamp is None and not any(r.timestamp is not None for r in records):
        b.base_timestamp = 1_700_000_000_000
    return b.build()


@st.composite
def legacy_st(draw) -> bytes:
    return encode_message(
        draw(st.integers(*INT64)), draw(maybe_bytes), draw(maybe_bytes),
        magic=draw(st.integers(0, 1)), attributes=draw(st.integers(0, 255)),
        timestamp=draw(st.integers(*INT64)),
        crc=draw(st.none() | st.integers(0, 2**32 - 1)))


@st.composite
def forged_st(draw) -> bytes:
    """A self-consistent entry of any magic (a batch for the walk, whatever its contents)."""
    body = draw(st.binary(min_size=14, max_size=90))
    body = body[:4] + bytes([draw(st.sampled_from([0, 1, 2, 3, 0x80, 0xFF]))]) + body[5:]
    return head(draw(st.integers(*INT64)), len(body), body)


@st.composite
def odd_st(draw) -> bytes:
    """Plain garbage, or a header with any length (usually ends the walk)."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=40))
    length = draw(st.integers(*INT32) | st.integers(10, 80))
    return head(draw(st.integers(*INT64)), length, draw(st.binary(max_size=80)))


part_st = st.one_of(v2_batch_st(), v2_batch_st(), legacy_st(), forged_st())


@st.composite
def buffer_st(draw) -> tuple[bytes, int, int]:
    parts = draw(st.lists(part_st, min_size=draw(st.sampled_from([0, 1, 2, 3])), max_size=6))
    if draw(st.integers(0, 2)) == 0:  # usually last: it tends to end the walk
        at = draw(st.sampled_from([len(parts)] * 3) | st.integers(0, len(parts)))
        parts.insert(at, draw(odd_st()))
    prefix = draw(st.binary(max_size=20))
    data = bytearray(prefix + b"".join(parts))
    bounds = []  # (position, size) of each non-empty part
    pos = len(prefix)
    for p in parts:
        if p:
            bounds.append((pos, len(p)))
        pos += len(p)
    # mutations: at random, or aimed inside / outside the CRC range of a given part
    for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3]))):
        if not data:
            break
        if bounds and draw(st.booleans()):
            p, n = draw(st.sampled_from(bounds))
            # bytes 0..20 lie outside a v2 CRC's range, the rest inside
            i = p + draw(st.integers(0, min(n, 21) - 1) | st.integers(min(n, 21) - 1, n - 1))
        else:
            i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.integers(0, 255))
    if data and draw(st.integers(0, 3)) == 0:  # truncate
        del data[draw(st.integers(0, len(data) - 1)):]
    n = len(data)
    how = draw(st.sampled_from(["prefix"] * 4 + ["part", "any"]))
    if how == "prefix":
        start = min(len(prefix), n)
    elif how == "part" and bounds:
        start = min(draw(st.sampled_from(bounds))[0], n)
    else:
        start = draw(st.integers(0, n))
    how = draw(st.sampled_from(["all"] * 4 + ["part", "any"]))
    ends = [e for e in (p + k for p, k in bounds) if start <= e <= n]
    if how == "all":
        end = n
    elif how == "part" and ends:
        end = draw(st.sampled_from(ends))
    else:
        end = draw(st.integers(start, n))
    return bytes(data), start, end


@needs_c
@PARITY
@given(buffer_st())
def test_parity_random_buffers(case):
    data, start, end = case
    check(data, start, end)
    check(bytearray(data), start, end)


@needs_c
@PARITY
@given(st.lists(part_st, max_size=8), st.none() | odd_st())
def test_parity_and_scan_buffer_agree(parts, tail):
    data = b"".join(parts) + (tail or b"")
    res = check(data)
    cols = columns(res)
    # the same walk as kqlab.kafka.log.scan_buffer
    found, issues = [], []
    for item in scan_buffer(data):
        (issues if isinstance(item, LogIssue) else found).append(item)
    assert cols["positions"].tolist() == [p for p, _ in found]
    assert cols["sizes"].tolist() == [len(b) for _, b in found]
    stop_pos, kind, length = stop(res)
    expected = {_scan_py.STOP_END: None, _scan_py.STOP_SHORT: "truncated_tail",
                _scan_py.STOP_CORRUPT_LENGTH: "corrupt_length",
                _scan_py.STOP_TRUNCATED: "truncated_tail"}[kind]
    assert [i.kind for i in issues] == ([expected] if expected else [])
    if issues:
        assert issues[0].position == stop_pos
    # v2 header fields and CRC as the decoder reads them
    for i, (_, raw) in enumerate(found):
        if cols["magic"][i] == 2 and len(raw) >= 61:
            h = RecordBatchHeader.parse(raw)
            assert cols["crc"][i] == h.crc and cols["records_count"][i] == h.records_count
            assert bool(cols["crc_valid"][i]) is batch_crc_valid(raw)[0]
        else:
            assert not cols["crc_valid"][i]
    if kind in (_scan_py.STOP_CORRUPT_LENGTH, _scan_py.STOP_TRUNCATED):
        assert length == struct.unpack_from(">i", data, stop_pos + 8)[0]
    else:
        assert length == -1


# -- crc32c -------------------------------------------------------------------------------------


@pytest.mark.parametrize("crc", CRCS)
def test_crc32c_known_values(crc):
    assert crc(b"") == 0
    assert crc(b"Some String") == 608512271
    assert crc(b"123456789") == 0xE3069283
    assert crc(b"\x00" * 32) == 0x8A9136AA  # RFC 3720 B.4 test vectors
    assert crc(b"\xff" * 32) == 0x62A8AB43
    assert crc(bytes(range(32))) == 0x46DD794E


@pytest.mark.parametrize("crc", CRCS)
def test_crc32c_small_lengths_and_alignments(crc):
    rng = random.Random(1)
    base = rng.randbytes(400)
    for n in range(301):
        for off in (0, 1, 3, 7):
            piece = base[off:off + n]
            want = google_crc32c.value(piece)
            assert crc(piece) == want, (n, off)
            assert crc(memoryview(base)[off:off + n]) == want, (n, off)
            assert crc(memoryview(bytearray(base))[off:off + n]) == want, (n, off)


@needs_c
@pytest.mark.parametrize("crc", CRCS[1:])
def test_crc32c_interleave_block_boundaries(crc):
    # the hardware path runs three streams of 32768, then of 256 bytes; cover every transition
    rng = random.Random(2)
    base = bytearray(rng.randbytes(3 * 32768 * 2 + 3 * 256 * 2 + 64))
    lengths = {3 * 32768 * k + 3 * 256 * j + e for k in (0, 1, 2) for j in (0, 1, 2)
               for e in (-9, -8, -1, 0, 1, 7, 8, 15)}
    mv = memoryview(base)
    for n in sorted(x for x in lengths if 0 <= x <= len(base) - 8):
        for off in range(8):
            assert crc(mv[off:off + n]) == google_crc32c.value(bytes(mv[off:off + n])), (n, off)


@needs_c
@pytest.mark.parametrize("crc", CRCS[1:])
def test_crc32c_large_buffers(crc):
    data = bytearray(os.urandom(10_000_000))
    assert crc(data) == google_crc32c.value(bytes(data))
    assert crc(memoryview(data)[3:-5]) == google_crc32c.value(bytes(data[3:-5]))
    data[5_000_001] ^= 0x10
    assert crc(bytes(data)) == google_crc32c.value(bytes(data))
    zeros = bytes(1 << 20)
    assert crc(zeros) == google_crc32c.value(zeros)


@needs_c
def test_crc32c_releases_gil_consistently():
    data = os.urandom(2_000_000)
    want = google_crc32c.value(data)
    out: list[int] = []
    threads = [threading.Thread(target=lambda f=f: out.append(f(data)))
               for f in (_crecords.crc32c, _crecords._crc32c_sw) * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [want] * 6


@pytest.mark.parametrize("crc", CRCS)
def test_crc32c_buffer_types(crc):
    arr = np.arange(1000, dtype=np.int32)
    assert crc(arr) == google_crc32c.value(arr.tobytes())
    fortran = np.asfortranarray(np.arange(600, dtype=np.int16).reshape(20, 30))
    assert crc(fortran) == google_crc32c.value(bytes(memoryview(fortran)))
    strided = memoryview(bytes(range(256)))[::3]
    assert crc(strided) == google_crc32c.value(bytes(strided))
    assert crc(memoryview(b"123456789").cast("c")) == 0xE3069283
    for bad in ("text", 5, None):
        with pytest.raises(TypeError):
            crc(bad)


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 15))
def test_crc32c_parity_hypothesis(data, off):
    view = memoryview(data)[min(off, len(data)):]
    want = google_crc32c.value(bytes(view))
    assert _crecords.crc32c(view) == want
    assert _crecords._crc32c_sw(view) == want
    assert _scan_py.crc32c(view) == want


@needs_c
def test_crc32c_hardware_flag():
    assert isinstance(_crecords.CRC32C_HARDWARE, bool)
    if platform.machine() in ("x86_64", "AMD64") and os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as fh:
            has_sse42 = " sse4_2" in fh.read()
        assert _crecords.CRC32C_HARDWARE is has_sse42
