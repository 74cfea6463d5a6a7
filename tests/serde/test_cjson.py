"""The C JSON parser (``kqlab.serde._cjson``) answers on its own wherever it models the
column: objects, nested objects, scalars, invalid values (orjson's messages), nulls and
tombstones, fields that come and go, ints widened to doubles, whitespace and escapes.  The
columns, errors and objects equal the record-by-record definition
(``tests/serde/test_json_arrow.py`` holds both readers to it on every case and on random
columns); here Arrow's reader is taken away, so a case the C parser silently handed on
would fail.
"""

from __future__ import annotations

import pytest

import kqlab.serde.json_arrow as json_arrow

from .conftest import framed
from .test_json_arrow import CASES, FRAMED, assert_same

pytestmark = pytest.mark.skipif(json_arrow._cjson is None,
                                reason="kqlab.serde._cjson is not built (no C compiler)")


class _NoArrow:
    def __init__(self, *args):
        raise AssertionError("the C parser should have answered without Arrow's reader")


@pytest.fixture(autouse=True)
def c_only(monkeypatch):
    monkeypatch.setattr(json_arrow, "_PIECE_BYTES", 64)
    monkeypatch.setattr(json_arrow, "_MIN_PIECE", 2)
    monkeypatch.setattr(json_arrow, "FAST_JSON", True)
    monkeypatch.setattr(json_arrow, "_c_threads", lambda: 8)
    monkeypatch.setattr(json_arrow, "_Decoder", _NoArrow)


EXTRA = {
    "empty objects, no lists": [b'{"a":{}}', b'{"a":{"b":1}}', b"{}", b'{"a":null}'] * 2,
    "null documents": [b"", b"null", b" null ", b'{"a":1}', b"{}", b"  "] * 2,
    "nested fields in new orders": [b'{"o":{"x":1}}', b'{"o":null,"p":true}',
                                    b'{"p":false,"o":{"y":"s","x":2.5}}', b'{"o":{}}'] * 2,
    "escaped keys": [b'{"\\u0061":1,"b\\n":2}', b'{"a":3,"b\\n":4}'] * 2,
    "unicode": ['{"s":"é😀 ü","k":"ключ"}'.encode(), b'{"s":"\\u00e9\\ud83d\\ude00"}'] * 2,
}
C_CASES = {name: CASES[name] for name in [
    "plain", "ints beside floats", "2**53 beside floats", "big float literal", "invalid utf-8",
    "surrogates", "escapes", "control character", "two documents", "unterminated string",
    "trailing comma", "comments", "whitespace", "newlines inside", "numbers orjson refuses",
    "fields in new orders", "a field only in a value read alone", "tombstones", "all null"]}
C_CASES.update(EXTRA)


@pytest.mark.parametrize("name", list(C_CASES))
def test_c_parser_answers_columns_it_models(name):
    assert_same(C_CASES[name], bulk_expected=True)
    assert_same([None if v is None else framed(7, v) for v in C_CASES[name]], FRAMED)


def test_a_big_column_in_pieces_on_threads(monkeypatch):
    monkeypatch.setattr(json_arrow, "_PIECE_BYTES", 1 << 12)
    monkeypatch.setattr(json_arrow, "_MIN_PIECE", 64)
    values = [b'{"id":%d,"amount":%s,"note":"%s"}'
              % (i, b"%d.25" % i if i % 7 else b"3", b"x" * (i % 30)) for i in range(5000)]
    values[1234] = b'{"id":1234,'
    values[4321] = None
    assert_same(values, bulk_expected=True)
    monkeypatch.setattr(json_arrow, "_c_threads", lambda: 1)  # one piece, no merge
    assert_same(values, bulk_expected=True)
