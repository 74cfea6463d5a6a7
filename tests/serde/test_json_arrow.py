"""JSON read in bulk (Arrow's JSON reader) equals JSON read record by record (orjson +
``pa.array``): the same column, the same errors word for word, the same objects.

The record-by-record path is the definition (``kqlab.serde.decode._decode_json_objects``,
what ``decode()`` runs with ``BULK_JSON`` off).  Every difference found between the two
readers has a hand-written case here; hypothesis then draws JSON documents (fields that
come and go, ints beside floats, nested objects and lists, date-like strings, big
integers), writes them in several styles and damages some of them.  Small pieces and a
low bisection floor make the tests cross piece boundaries, the thread pool and the
halving of failing pieces on a few hundred values.
"""

from __future__ import annotations

import importlib
import json
import sys

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kqlab.serde.json_arrow as json_arrow
from kqlab.policy.model import Format
from kqlab.serde import decode_datums
from kqlab.serde.decode import decode_pass

from .conftest import framed

#: the module (``kqlab.serde.decode`` the attribute is the function ``decode``)
decode_module = importlib.import_module("kqlab.serde.decode")
JSON = Format(format="json")
FRAMED = Format(format="json", wire="confluent")


@pytest.fixture(autouse=True, params=["c", "arrow"])
def small_pieces(monkeypatch, request):
    """Pieces of a few values, halved down to two: every path on small inputs; each test runs
    with the C parser first (``_cjson``, falling back to Arrow's reader) and with Arrow's
    reader alone."""
    monkeypatch.setattr(json_arrow, "_PIECE_BYTES", 64)
    monkeypatch.setattr(json_arrow, "_MIN_PIECE", 2)
    if request.param == "c" and json_arrow._cjson is None:
        pytest.skip("kqlab.serde._cjson is not built (no C compiler at install)")
    monkeypatch.setattr(json_arrow, "FAST_JSON", request.param == "c")
    monkeypatch.setattr(json_arrow, "_c_threads", lambda: 8)  # pieces merged, on threads
    return request.param


def reference(values, fmt=JSON):
    decode_module.BULK_JSON = False
    try:
        return decode_pass(values, fmt)
    finally:
        decode_module.BULK_JSON = True


def assert_same(values, fmt=JSON, *, bulk_expected=None):
    if not isinstance(values, pa.Array):
        values = pa.array(values, pa.binary())
    want = reference(values, fmt)
    got = decode_pass(values, fmt)
    w, g = want.column, got.column
    assert g.values.type == w.values.type
    assert g.values.equals(w.values), (g.values.to_pylist(), w.values.to_pylist())
    assert g.values.to_pylist() == w.values.to_pylist()
    assert g.errors.to_pylist() == w.errors.to_pylist()
    assert g.fallback == w.fallback
    assert got.stages == want.stages
    assert list(got.datums) == list(want.datums)
    # what the rules read: one record's object (lazily parsed), then all of them
    for i in range(len(values)):
        assert g._python[i] == w._python[i]
    assert g.python_values() == w.python_values()
    if bulk_expected is not None:
        assert isinstance(decode_pass(values, fmt).datums,
                          json_arrow.LazyJsonValues) is bulk_expected
    return got


# -- hand-picked: each difference between Arrow's reader and orjson ------------------------
CASES = {
    "plain": [b'{"a":1,"s":"x"}', b'{"a":2,"s":"y"}'] * 5,
    "ints beside floats": [b'{"a":1}', b'{"a":2.5}', b'{"a":-3}'] * 3,
    "2**53 beside floats": [b'{"a":9007199254740992}', b'{"a":2.5}'] * 3,
    "2**53 + 1 beside floats": [b'{"a":9007199254740993}', b'{"a":2.5}'] * 3,
    "2**60 beside floats": [b'{"a":1152921504606846976}', b'{"a":2.5}'] * 3,
    "beyond int64": [b'{"a":9223372036854775808}', b'{"a":1}'] * 3,
    "beyond uint64": [b'{"a":18446744073709551616}', b'{"a":1}'] * 3,
    "big float literal": [b'{"a":1e20}', b'{"a":2.5}', b'{"a":12345678901234567890.5}'] * 3,
    "overflowing float": [b'{"a":1.7976931348623157e309}', b'{"a":2.5}'] * 3,
    "NaN": [b'{"a":NaN}', b'{"a":2.5}'] * 3,
    "Infinity": [b'{"a":-Infinity}', b'{"a":2.5}', b'{"a":[Infinity]}'] * 3,
    "timestamps": [b'{"t":"2020-01-01","u":"2020-01-01T10:00:00Z"}',
                   b'{"t":"2021-02-03","u":"2020-01-01 10:00:00"}'] * 3,
    "nested timestamps": [b'{"l":[{"t":"2020-01-01T00:00:00"}],"o":{"d":"2020-01-01"}}'] * 4,
    "duplicate keys": [b'{"a":1,"a":2}', b'{"a":3}', b'{"b":1,"a":5,"b":"x"}'] * 3,
    "invalid utf-8": [b'{"a":"\xff"}', b'{"a":"ok"}', b'{"\xc3":1}'] * 3,
    "surrogates": [b'{"a":"\\ud800"}', b'{"a":"\\udc00"}', b'{"a":"\\ud83d\\ude00"}'] * 3,
    "escapes": [b'{"a":"\\u00e9\\n\\t\\"\\\\\\/"}', b'{"a":"\\u0000"}'] * 3,
    "control character": [b'{"a":"x\ty"}', b'{"a":"z"}'] * 3,
    "two documents": [b'{"a":1}{"a":2}', b'{"a":3} {"a":4}', b'{"a":5}'] * 3,
    "unterminated string": [b'{"a":"}', b'{","c":1}', b'{}{}', b'{"a":"x"}'] * 3,
    "trailing comma": [b'{"a":1,}', b'{"a":1}'] * 3,
    "comments": [b'{"a":1}//c', b'{"a":1}/*x*/'] * 3,
    "whitespace": [b' {"a":1}', b'{"a":1} ', b'\n{"a":\n1}\r\n', b'\t{ "a" : 2 }\t', b'  '] * 3,
    "newlines inside": [b'{"a":\n1,\n"b":"x"}', b'{"a":2}'] * 3,
    "numbers orjson refuses": [b'{"a":01}', b'{"a":+1}', b'{"a":.5}', b'{"a":5.}',
                               b'{"a":1e}', b'{"a":-}', b'{"a":2}'] * 2,
    "deep": [b'{"a":' + b"[" * 1023 + b"]" * 1023 + b"}",
             b'{"a":' + b"[" * 1030 + b"]" * 1030 + b"}",
             b'{"a":' + b'{"a":' * 1030 + b"1" + b"}" * 1030 + b"}", b'{"a":[]}'],
    "empty and null documents": [b"", b"null", b" null ", b'{"a":1}', b"{}", b'{"a":{}}'] * 2,
    "not objects": [b'{"a":1}', b"[1,2]", b'"x"', b"7"],
    "only arrays": [b"[1]", b"[2,3]", b"[]"],
    "type conflict": [b'{"a":1}', b'{"a":"one"}'] * 3,
    "bool beside int": [b'{"a":true}', b'{"a":1}'] * 3,
    "list beside object": [b'{"a":[1]}', b'{"a":{"b":1}}'] * 3,
    "fields in new orders": [b'{"b":1}', b'{"a":1,"b":2}', b'{"c":{"y":1}}',
                             b'{"c":{"x":2,"y":3},"a":null}'] * 2,
    "lists of nulls": [b'{"a":[null,null]}', b'{"a":[]}', b'{"a":[null]}'],
    "null then typed": [b'{"a":null,"l":[]}', b'{"a":null,"l":[null]}',
                        b'{"a":{"x":1},"l":[[1.5]]}', b'{"a":"s"}'],
    "empty objects": [b'{"a":{}}', b'{"a":{"b":1}}', b"{}", b'{"a":[{}]}'] * 2,
    "a field only in a value read alone": [b'{"a":1}', b' {"a":2,"z":1}\n', b'{"a":3}'] * 2,
    "tombstones": [b'{"a":1}', None, b'{"a":2}', None, None],
    "all null": [None, None],
    "nothing": [],
}


@pytest.fixture
def deep_compare():
    """Comparing objects 1000 levels deep needs Python's recursion limit raised."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    yield
    sys.setrecursionlimit(limit)


@pytest.mark.parametrize("name", list(CASES))
def test_hand_picked_values_decode_as_record_by_record(name, deep_compare):
    assert_same(CASES[name])


@pytest.mark.parametrize("name", list(CASES))
def test_hand_picked_values_in_confluent_framing(name, deep_compare):
    values = [None if v is None else framed(7, v) for v in CASES[name]]
    assert_same([*values, b'{"a":1}', b"\x00\x00"], FRAMED)


def test_clean_values_are_read_in_bulk_and_parsed_on_demand():
    values = pa.array([orjson.dumps({"id": i, "amount": i / 4, "tags": ["x"] * (i % 3),
                                     "at": "2020-01-01T00:00:00"}) for i in range(500)])
    got = assert_same(values, bulk_expected=True)
    lazy = got.datums
    assert isinstance(lazy, json_arrow.LazyJsonValues)
    fresh = decode_pass(values, JSON).column._python
    assert fresh[3] == {"id": 3, "amount": 0.75, "tags": ["x"] * 0, "at": "2020-01-01T00:00:00"}
    assert len(fresh._known) == 1  # only the record asked for was parsed


def test_sliced_and_chunked_input():
    arr = pa.array([b'{"a":%d}' % i for i in range(40)] + [b"{bad"] * 3)
    assert_same(arr.slice(5, 30))
    assert_same(arr.slice(30))
    got = decode_pass(pa.chunked_array([arr.slice(0, 10), arr.slice(38)]), JSON).column
    assert got.values.to_pylist()[:10] == [{"a": i} for i in range(10)]


def test_large_binary_and_strings():
    vals = [b'{"a":1}', b'{"a":"\xc3\xa9"}', None, b"{x"] * 5
    assert_same(pa.array(vals, pa.large_binary()))
    assert_same(pa.array([None if v is None else v.decode("utf-8", "replace") for v in vals],
                         pa.string()))


def test_decode_datums_unchanged():
    vals = pa.array(CASES["duplicate keys"] + CASES["ints beside floats"] + [None, b"null"])
    got = decode_datums(vals, JSON)
    decode_module.BULK_JSON = False
    try:
        want = decode_datums(vals, JSON)
    finally:
        decode_module.BULK_JSON = True
    assert (got.values, got.errors, got.stages, got.null.tolist()) == \
        (want.values, want.errors, want.stages, want.null.tolist())


# -- hypothesis: random documents, written several ways, some damaged ------------------------
KEYS = st.sampled_from(["a", "b", "c", "amount", "é", "", "x y", "\u0000k"])
SCALARS = (st.none() | st.booleans()
           | st.integers(-(2 ** 63), 2 ** 63 - 1) | st.sampled_from([0, -1, 2 ** 53, 2 ** 53 + 1,
                                                                     -(2 ** 53) - 1, 2 ** 64])
           | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([1e20, -0.0, 5.0])
           | st.text(max_size=6)
           | st.sampled_from(["2020-01-01", "2020-01-01T10:00:00", "2020-01-01 10:00:00.5",
                             "12:00", "x}{y", "NaN"]))
DOCS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(KEYS, inner, max_size=4), max_leaves=8)
#: records that mostly share a shape, as a topic's values do
SHAPED = st.fixed_dictionaries({}, optional={"a": st.integers(-5, 5) | st.floats(-9, 9),
                                             "b": st.text(max_size=3),
                                             "c": st.dictionaries(KEYS, SCALARS, max_size=2),
                                             "l": st.lists(st.integers(0, 9), max_size=3)})


def _write(doc, style: int) -> bytes:
    if style == 0:
        return orjson.dumps(doc)
    if style == 1:  # Python's json: spaces, \\u escapes
        return json.dumps(doc).encode()
    if style == 2:
        return json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8", "surrogatepass")
    return b" " + orjson.dumps(doc) + b"\n"


def _damage(data: bytes, how: int, where: int) -> bytes:
    if not data:
        return data
    at = where % len(data)
    return [data, data[:at], data[:at] + b"\xff" + data[at:], data + data,
            data[:at] + b"}" + data[at:], data[:at] + b"," + data[at:]][how % 6]


@st.composite
def columns(draw):
    shaped = draw(st.booleans())
    docs = draw(st.lists(SHAPED if shaped else DOCS, max_size=25))
    out: list[bytes | None] = []
    for doc in docs:
        if draw(st.integers(0, 12)) == 0:
            out.append(None)
            continue
        try:
            data = _write(doc, draw(st.integers(0, 3)))
        except (TypeError, ValueError, orjson.JSONEncodeError):  # ints orjson cannot write
            data = json.dumps(doc).encode()
        if draw(st.integers(0, 8)) == 0:
            data = _damage(data, draw(st.integers(0, 5)), draw(st.integers(0, 10 ** 6)))
        out.append(data)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(columns())
def test_random_columns_decode_as_record_by_record(values):
    assert_same(values)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(columns())
def test_random_columns_in_confluent_framing(values):
    assert_same([None if v is None else framed(3, v) for v in values], FRAMED)


# -- numbers and objects without lists: the C parser answers these itself ------------------
NUMBER_TEXT = st.builds(
    lambda sign, whole, frac, exp: f"{sign}{whole}{frac}{exp}",
    st.sampled_from(["", "-"]),
    st.sampled_from(["0"]) | st.integers(1, 10 ** 25).map(str),
    st.sampled_from([""]) | st.text("0123456789", min_size=1, max_size=30).map(lambda d: "." + d),
    st.sampled_from([""]) | st.builds(lambda e, x: e + x, st.sampled_from(["e", "E", "e+", "e-"]),
                                      st.integers(0, 340).map(str)))


@settings(max_examples=300, deadline=None)
@given(st.lists(NUMBER_TEXT | st.floats(allow_nan=False, allow_infinity=False).map(repr),
                min_size=1, max_size=8))
def test_numbers_read_as_orjson_reads_them(texts):
    """Doubles correctly rounded (the fast path and strtod), ints and their widening, and the
    texts the parser leaves to orjson (long integers, near the double range)."""
    assert_same([b'{"x":%s,"k":1}' % t.encode() for t in texts])


FLAT = st.fixed_dictionaries({}, optional={
    "a": st.integers(-(2 ** 60), 2 ** 60) | st.floats(allow_nan=False, allow_infinity=False),
    "b": st.text(max_size=5), "t": st.booleans(), "z": st.none(),
    "c": st.dictionaries(KEYS, SCALARS, max_size=3),
    "d": st.fixed_dictionaries({}, optional={"e": st.dictionaries(KEYS, SCALARS, max_size=2)})})


@st.composite
def flat_columns(draw):
    out: list[bytes | None] = []
    for doc in draw(st.lists(FLAT, max_size=25)):
        if draw(st.integers(0, 12)) == 0:
            out.append(None)
            continue
        try:
            data = _write(doc, draw(st.integers(0, 3)))
        except (TypeError, ValueError, orjson.JSONEncodeError):
            data = json.dumps(doc).encode()
        if draw(st.integers(0, 8)) == 0:
            data = _damage(data, draw(st.integers(0, 5)), draw(st.integers(0, 10 ** 6)))
        out.append(data)
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flat_columns())
def test_random_objects_without_lists_decode_as_record_by_record(values):
    assert_same(values)
