"""``RecordsParser`` (one parse fed piece by piece) and the decoder's bulk ``add_batches``.

The decoder hands the parser whole runs of batches and lets it check each batch's CRC right
before reading its records (one pass over the segment instead of two).  These tests hold the
pieces to what one ``parse_records`` call gives, the C kernel to the pure-Python reference, and
the CRC checks to ``scan_batches``'s.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.kafka import _records_py, _scan_py
from kqlab.kafka._records_py import ParsedRecords, ReadMode
from kqlab.kafka._records_py import parse_records as parse_py
from kqlab.kafka.builder import Record, build_batch
from kqlab.kafka.compression import Codec, read_stream

try:
    from kqlab.kafka import _crecords
except ImportError:  # not built: only the reference can be tested
    _crecords = None  # type: ignore[assignment]

PARITY = settings(max_examples=150, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NOW = 1_700_000_000_000


class _c_parser:  # noqa: N801 - used like the parser classes
    """The C kernel's parser, returning ParsedRecords (records_parser's wrapper is not
    defined when KQLAB_PURE_PYTHON is set)."""

    def __init__(self, with_data: bool = True, reserve: int = 0):
        self._p = _crecords.RecordsParser(with_data, reserve)

    @property
    def batches(self) -> int:
        return self._p.batches

    def add(self, *args) -> None:
        self._p.add(*args)

    def add_batches(self, *args) -> None:
        self._p.add_batches(*args)

    def finish(self) -> ParsedRecords:
        return ParsedRecords(*self._p.finish())


PARSERS = [pytest.param(_records_py.RecordsParser, id="python")]
if _crecords is not None:
    PARSERS.append(pytest.param(_c_parser, id="c"))


def _same(got: ParsedRecords, want: ParsedRecords) -> None:
    for name, g, w in zip(ParsedRecords._fields, got, want, strict=True):
        if isinstance(w, np.ndarray):
            assert isinstance(g, np.ndarray) and g.dtype == w.dtype, name
            assert g.tolist() == w.tolist(), name
        else:
            assert type(g) is type(w) and g == w, name


def _records(n: int, seed: int) -> list[Record]:
    return [Record(key=None if (i + seed) % 4 == 0 else b"key%d" % (i + seed),
                   value=None if (i + seed) % 7 == 0 else b"x" * ((i * 13 + seed) % 90),
                   headers=((f"h{i}", b"v"),) if i % 3 else ()) for i in range(n)]


@st.composite
def regions_st(draw) -> tuple[bytes, int]:
    """A records region (valid, cut or with garbage) and a declared count."""
    n = draw(st.integers(0, 5))
    region = build_batch(_records(n, draw(st.integers(0, 9))), base_timestamp=NOW)[61:]
    how = draw(st.sampled_from(["whole", "whole", "cut", "garbage", "random"]))
    if how == "cut" and region:
        region = region[:draw(st.integers(0, len(region) - 1))]
    elif how == "garbage":
        region += draw(st.binary(min_size=1, max_size=5))
    elif how == "random":
        region = draw(st.binary(max_size=60))
    return region, n + draw(st.sampled_from([0, 0, 1, -1, -n - 2]))


@pytest.mark.parametrize("make", PARSERS)
@PARITY
@given(st.lists(regions_st(), max_size=8), st.lists(st.integers(0, 8), max_size=3),
       st.sampled_from(list(ReadMode)), st.booleans(), st.booleans())
def test_pieces_equal_one_call(make, batches, cuts, mode, with_data, failing):
    """Regions added in pieces (anywhere, empty pieces too) parse as one call parses them."""
    regions = [r for r, _ in batches]
    counts = [c for _, c in batches]
    failed = [failing and i % 2 == 0 for i in range(len(regions))]
    want = parse_py(regions, counts, mode, with_data, failed)
    parser = make(with_data)
    bounds = sorted({0, len(regions), *(min(c, len(regions)) for c in cuts)})
    for a, b in itertools.pairwise(bounds):
        parser.add(regions[a:b], counts[a:b], mode, failed[a:b])
    parser.add([], [], mode)
    assert parser.batches == len(regions)
    _same(parser.finish(), want)


@pytest.mark.parametrize("make", PARSERS)
def test_finished_parser_is_spent(make):
    parser = make()
    parser.add([b""], [0])
    parser.finish()
    with pytest.raises(RuntimeError):
        parser.finish()
    with pytest.raises(RuntimeError):
        parser.add([b""], [0])


@pytest.mark.parametrize("make", PARSERS)
def test_empty_parser_finishes_empty(make):
    for with_data in (True, False):
        _same(make(with_data).finish(), parse_py([], [], ReadMode.BUFFER, with_data))


# -- add_batches ----------------------------------------------------------------------------------

@st.composite
def segments(draw) -> bytes:
    """Consecutive v2 batches (some compressed), some with a bad CRC or damaged records."""
    parts = []
    for b in range(draw(st.integers(0, 6))):
        codec = draw(st.sampled_from([Codec.NONE, Codec.NONE, Codec.GZIP, Codec.LZ4,
                                      Codec.ZSTD, Codec.SNAPPY]))
        raw = bytearray(build_batch(_records(draw(st.integers(0, 5)), b), codec=codec,
                                    base_timestamp=NOW))
        how = draw(st.sampled_from(["whole", "whole", "flip", "count"]))
        if how == "flip" and len(raw) > 61:
            raw[draw(st.integers(61, len(raw) - 1))] ^= 0xFF  # the CRC no longer matches
        elif how == "count":
            raw[57:61] = draw(st.integers(-3, 9)).to_bytes(4, "big", signed=True)
        parts.append(bytes(raw))
    return b"".join(parts)


def _bulk(make, data: bytes, with_data: bool) -> tuple[ParsedRecords, np.ndarray, list[int]]:
    scan = _scan_py.scan_batches(data)
    positions, sizes, crc, attributes, count = scan[0], scan[1], scan[5], scan[6], scan[13]
    codec = (attributes.astype(np.int32) & 0xFF) & 0x07
    calls: list[int] = []

    def read(k: int) -> tuple[bytes, bool]:
        calls.append(k)
        p, s = int(positions[k]), int(sizes[k])
        sr = read_stream(int(codec[k]), data[p + 61:p + s])
        return sr.data, sr.failure is not None

    valid = np.zeros(len(positions), dtype=bool)
    parser = make(with_data)
    parser.add_batches(data, positions, sizes, crc, count, codec, read, valid)
    return parser.finish(), valid, calls


@pytest.mark.skipif(_crecords is None, reason="C extension not built")
@PARITY
@given(segments(), st.booleans())
def test_add_batches_c_equals_reference(data, with_data):
    """The C kernel and the reference: same columns, same CRC checks (scan_batches' own), and
    the exact reader asked about the same batches except zstd ones the fast path decoded."""
    want, want_valid, want_calls = _bulk(_records_py.RecordsParser, data, with_data)
    got, got_valid, got_calls = _bulk(_c_parser, data, with_data)
    _same(got, want)
    assert got_valid.tolist() == want_valid.tolist()
    assert want_valid.tolist() == _scan_py.scan_batches(data)[14].tolist()
    assert set(got_calls) <= set(want_calls)


@pytest.mark.parametrize("make", PARSERS)
def test_add_batches_equals_add_of_the_regions(make):
    data = b"".join(build_batch(_records(n, n), codec=c, base_timestamp=NOW)
                    for n, c in ((3, Codec.NONE), (0, Codec.NONE), (4, Codec.ZSTD)))
    got, valid, _ = _bulk(make, data, True)
    scan = _scan_py.scan_batches(data)
    regions = [data[p + 61:p + s] for p, s in zip(scan[0].tolist(), scan[1].tolist(),
                                                  strict=True)]
    codecs = [4 if i == 2 else 0 for i in range(3)]
    want = parse_py(regions, scan[13].tolist(), [1, 1, 2], True, None, codecs,
                    lambda k: (read_stream(4, regions[k]).data, False))
    _same(got, want)
    assert valid.all()


@pytest.mark.parametrize("make", PARSERS)
@pytest.mark.parametrize(("position", "size"), [(-1, 61), (0, 60), (10, 61), (0, 200)])
def test_add_batches_refuses_batches_outside_the_buffer(make, position, size):
    data = build_batch(_records(1, 0), base_timestamp=NOW)
    assert len(data) < 200
    parser = make()
    with pytest.raises(ValueError, match="not a v2 batch inside the buffer"):
        parser.add_batches(data, np.array([position], np.int64), np.array([size], np.int64),
                           np.zeros(1, np.uint32), np.ones(1, np.int32), np.zeros(1, np.int32),
                           None, np.zeros(1, bool))


@pytest.mark.parametrize("make", PARSERS)
def test_add_batches_needs_a_reader_for_compressed_batches(make):
    data = build_batch(_records(1, 0), codec=Codec.LZ4, base_timestamp=NOW)
    with pytest.raises(ValueError, match="read"):
        make().add_batches(data, np.array([0], np.int64), np.array([len(data)], np.int64),
                           np.zeros(1, np.uint32), np.ones(1, np.int32),
                           np.array([3], np.int32), None, np.zeros(1, bool))


# -- scan_batches(crc=False) -------------------------------------------------------------------

@PARITY
@given(segments())
def test_scan_without_crc_is_the_scan_with_crc_valid_false(data):
    scans = [_scan_py.scan_batches]
    if _crecords is not None:
        scans.append(_crecords.scan_batches)
    want = _scan_py.scan_batches(data)
    for scan in scans:
        got = scan(data, 0, len(data), crc=False)
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            if k == 14:
                assert g.dtype == w.dtype and not g.any()
            elif isinstance(w, np.ndarray):
                assert g.dtype == w.dtype and g.tolist() == w.tolist()
            else:
                assert g == w
