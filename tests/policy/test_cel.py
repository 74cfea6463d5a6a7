"""``kqlab.policy.cel``: compile errors, activations from the records table, per-record verdicts.

Every behavioural test runs on each importable engine (cel-expr-python, cel-python); one test
checks that the two agree on a table of expressions and activations.
"""

from __future__ import annotations

import datetime
import decimal
import pickle
import threading
import uuid

import pyarrow as pa
import pytest

from kqlab.errors import KqlabError
from kqlab.policy import cel as celmod
from kqlab.policy.cel import (
    CelProgram,
    CelSyntaxError,
    available_engines,
    clear_cache,
    compile_cel,
    default_engine,
    record_activations,
)
from kqlab.records import RECORDS_SCHEMA

ENGINES = available_engines()
BOTH = pytest.mark.skipif(len(ENGINES) < 2, reason="needs both cel-expr-python and cel-python")


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    return request.param


def _table(rows: list[dict]) -> pa.Table:
    base = {"topic": "orders", "partition": 3, "timestamp": 1_700_000_000_000,
            "timestamp_type": 0, "batch_offset": 100, "headers": []}
    full = []
    for i, row in enumerate(rows):
        r = dict(base, offset=100 + i, batch_index=i)
        r.update(row)
        full.append(r)
    return pa.Table.from_pylist(full, schema=RECORDS_SCHEMA)


# ------------------------------------------------------------------------------- compiling

@pytest.mark.parametrize(("expr", "line", "column"), [
    ("value.amount > ", 1, None),
    ("1 +* 2", 1, 4),
    ("value.amount > 0 &&\n  (key == 'x'", 2, None),
    ("value..x", 1, None),
])
def test_bad_syntax_raises_with_position(engine, expr, line, column):
    with pytest.raises(CelSyntaxError) as info:
        compile_cel(expr, engine)
    err = info.value
    assert isinstance(err, KqlabError)
    assert isinstance(err, ValueError)
    assert err.expr == expr
    assert err.line == line
    if column is not None:
        assert err.column == column
    assert err.column is not None
    assert f"line {err.line}, column {err.column}" in str(err)
    assert err.detail  # the engine's own message


def test_syntax_error_pickles():
    err = CelSyntaxError("1 +", "mismatched input", 1, 3)
    again = pickle.loads(pickle.dumps(err))
    assert (again.expr, again.detail, again.line, again.column) == ("1 +", "mismatched input", 1, 3)
    assert str(again) == str(err)


@pytest.mark.skipif("cel-expr-python" not in ENGINES, reason="needs cel-expr-python")
@pytest.mark.parametrize("expr", [
    "nope > 1",               # undeclared variable
    "'x' + 1 == 'x1'",        # no overload
    "offset + 1",             # int result, not bool
    "topic > 3",              # topic is a string
])
def test_checker_errors_are_compile_errors_on_cel_expr_python(expr):
    with pytest.raises(CelSyntaxError) as info:
        compile_cel(expr, "cel-expr-python")
    assert info.value.line == 1


def test_cache_returns_same_program(engine):
    clear_cache()
    first = compile_cel("value.amount > 0", engine)
    assert compile_cel("value.amount > 0", engine) is first
    assert compile_cel("value.amount >= 0", engine) is not first
    assert first.engine == engine
    assert first.expr == "value.amount > 0"
    assert first.variables == frozenset({"value"})


def test_cache_is_shared_between_racing_threads(engine):
    clear_cache()
    seen: list[CelProgram] = []
    barrier = threading.Barrier(8)

    def work():
        barrier.wait()
        seen.append(compile_cel("size(header_list) < 5", engine))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(p) for p in seen}) == 1


def test_default_engine_prefers_cel_expr_python_and_obeys_env(monkeypatch):
    monkeypatch.delenv(celmod.ENGINE_ENV, raising=False)
    assert default_engine() == ENGINES[0]
    monkeypatch.setenv(celmod.ENGINE_ENV, ENGINES[-1])
    assert default_engine() == ENGINES[-1]
    assert compile_cel("true").engine == ENGINES[-1]
    monkeypatch.setenv(celmod.ENGINE_ENV, "jsonata")
    with pytest.raises(KqlabError, match="jsonata"):
        default_engine()


def test_expression_must_be_a_string():
    with pytest.raises(TypeError):
        compile_cel(3)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- activations

def test_record_activations_builds_every_variable():
    table = _table([
        {"key": b"order-1", "value": b"raw",
         "headers": [{"key": "trace", "value": b"a"}, {"key": "trace", "value": b"b"},
                     {"key": "bin", "value": b"\xff\x00"}, {"key": "empty", "value": None}]},
        {"key": b"\x00\xff", "value": None},
        {"key": None, "value": b""},
    ])
    acts = record_activations(table, [{"amount": 5, "items": [1, 2]}, None, "text"])
    a, b, c = acts
    assert a["key"] == "order-1"
    assert a["value"] == {"amount": 5, "items": [1, 2]}
    assert a["headers"] == {"trace": "b", "bin": b"\xff\x00", "empty": None}
    assert a["header_list"] == [{"key": "trace", "value": "a"}, {"key": "trace", "value": "b"},
                                {"key": "bin", "value": b"\xff\x00"},
                                {"key": "empty", "value": None}]
    assert (a["topic"], a["partition"], a["offset"], a["timestamp"], a["timestamp_type"],
            a["batch_offset"], a["batch_index"]) == ("orders", 3, 100, 1_700_000_000_000, 0,
                                                     100, 0)
    assert b["key"] == b"\x00\xff"
    assert b["value"] is None
    assert b["headers"] == {}
    assert b["header_list"] == []
    assert c["key"] is None
    assert c["value"] == "text"
    # without decoded values: the raw bytes
    assert [x["value"] for x in record_activations(table)] == [b"raw", None, b""]


def test_record_activations_checks_the_decoded_length():
    with pytest.raises(ValueError, match="2 items for 1 records"):
        record_activations(_table([{"key": None}]), [1, 2])


CASES = [
    # (expression, expected result per record of the table below)
    ("value.amount > 0 && value.status in ['NEW', 'PAID']", [True, False, None, None]),
    ("type(value) != null_type && has(value.amount)", [True, True, False, False]),
    ("value == null", [False, False, False, True]),
    ("size(value.items) == 2 && value.items[1].sku == 'b'", [True, False, None, None]),
    ("value.customer.tier == 'gold'", [True, False, None, None]),
    ("key == 'order-1'", [True, False, False, False]),
    ("type(key) == bytes && key == b'\\x00\\xff'", [False, True, False, False]),
    ("key == null", [False, False, True, False]),
    ("type(key) == bytes && size(key) == 2", [False, True, False, False]),
    ("headers['trace'] == 'b'", [True, None, None, None]),
    ("'trace' in headers && headers.trace == 'b'", [True, False, False, False]),
    ("size(header_list) == 2 && header_list[0].value == 'a'", [True, False, False, False]),
    ("topic == 'orders' && partition == 3", [True, True, True, True]),
    ("offset - batch_offset == batch_index", [True, True, True, True]),
    ("timestamp > 1600000000000 && timestamp_type == 0", [True, True, True, True]),
    ("offset % 2 == 0", [True, False, True, False]),
    ("value.amount / 0 > 1", [None, None, None, None]),
]


@pytest.fixture(scope="module")
def activations():
    table = _table([
        {"key": b"order-1",
         "headers": [{"key": "trace", "value": b"a"}, {"key": "trace", "value": b"b"}]},
        {"key": b"\x00\xff"},
        {"key": None},
        {"key": b"order-4"},
    ])
    decoded = [
        {"amount": 5, "status": "NEW", "items": [{"sku": "a"}, {"sku": "b"}],
         "customer": {"tier": "gold"}},
        {"amount": -1, "status": "NEW", "items": [], "customer": {"tier": "silver"}},
        {"status": "PAID"},
        None,
    ]
    return record_activations(table, decoded)


@pytest.mark.parametrize(("expr", "expected"), CASES, ids=[c[0] for c in CASES])
def test_evaluate_many_over_record_activations(engine, activations, expr, expected):
    program = compile_cel(expr, engine)
    results, errors = program.evaluate_many(activations)
    assert results == expected
    for result, error in zip(results, errors, strict=True):
        assert (result is None) == (error is not None)
        if error is not None:
            assert isinstance(error, str)
            assert error
    assert [program.evaluate(a) for a in activations] == expected


@pytest.mark.parametrize(("activation", "fragment"), [
    ({"value": {"status": "NEW"}}, "amount"),          # missing key
    ({"value": {"amount": "7"}}, "overload"),          # string > int
    ({"value": None}, ""),                             # select on null
    ({"value": {"amount": object()}}, "object"),       # a value no engine can hold
    ({"value": {"amount": 2**70}}, ""),                # out of CEL's integer range
])
def test_runtime_errors_become_failures_with_text(engine, activation, fragment):
    program = compile_cel("value.amount > 0", engine)
    result, error = program.check(activation)
    assert result is None
    assert fragment in error
    assert program.evaluate(activation) is None
    assert program.evaluate_many([activation, {"value": {"amount": 1}}]) == (
        [None, True], [error, None])


def test_non_bool_result_is_an_error(engine):
    if engine == "cel-expr-python":
        program = compile_cel("value.x == 1 ? value.x : false", engine)  # dyn result
    else:
        program = compile_cel("value.x", engine)
    result, error = program.check({"value": {"x": 1}})
    assert result is None
    assert "not bool" in error


def test_bytes_and_strings_with_nul_are_whole(engine):
    # cel-expr-python 0.1.3 cuts bytes/str at NUL: kqlab hands it bytearray, and NUL
    # strings go to cel-python.
    data = {"key": b"a\x00b", "value": {"s": "x\x00y", "b": b"\x00\x01\x02"}}
    assert compile_cel("size(key) == 3 && key == b'a\\x00b'", engine).check(data) == (True, None)
    assert compile_cel("size(value.b) == 3", engine).check(data) == (True, None)
    assert compile_cel("size(value.s) == 3 && value.s.endsWith('y')", engine).check(data) == (
        True, None)


def test_python_values_are_converted(engine):
    program = compile_cel(
        "value.day == 19723 && value.price > 1.0 && value.id.size() == 36 && "
        "value.pair.size() == 2 && value.at > timestamp('2023-12-31T00:00:00Z') && "
        "value.raw == b'\\x01\\x02'", engine)
    act = {"value": {"day": datetime.date(2024, 1, 1), "price": decimal.Decimal("1.5"),
                     "id": uuid.UUID(int=1), "pair": (1, "x"),
                     "at": datetime.datetime(2024, 1, 1, 12, 0),
                     "raw": bytearray(b"\x01\x02")}}
    assert program.check(act) == (True, None)


def test_has_on_null_differs_between_engines(engine):
    # the CEL spec makes has() on a non-map an error; celpy answers false (documented)
    result = compile_cel("has(value.amount)", engine).evaluate({"value": None})
    assert result is (None if engine == "cel-expr-python" else False)


def test_errors_absorbed_by_logical_operators(engine):
    act = {"value": {}}
    assert compile_cel("has(value.a) && value.a > 0", engine).evaluate(act) is False
    assert compile_cel("value.a > 0 && false", engine).evaluate(act) is False
    assert compile_cel("value.a > 0 || true", engine).evaluate(act) is True


# ------------------------------------------------------------------------------- agreement

AGREE_EXPRS = [
    "value.n > 2",
    "value.n >= 0 && value.n <= 10",
    "value.s.startsWith('ab') || value.s.endsWith('z')",
    "value.s.matches('^[a-c]+[0-9]?$')",
    "value.s.contains('b')",
    "size(value.l) > 1 && value.l[0] == 1",
    "value.l.exists(x, x > 2)",
    "value.l.all(x, x < 100)",
    "value.l.map(x, x * 2)[0] == 2",
    "value.l.filter(x, x % 2 == 0).size() == 1",
    "has(value.m) && type(value.m) == map && has(value.m.k) && value.m.k == 'v'",
    "type(value.n) == int",
    "type(value.f) == double && value.f < 1.5",
    "value.b == true",
    "!value.b",
    "value.n in [1, 2, 3]",
    "value.s in ['abc', 'xyz']",
    "int(value.s2) == 42",
    "string(value.n) == '3'",
    "value.f * 2.0 == 2.5",
    "key == 'k' && headers.h == 'v'",
    "value.missing == 1",
    "value.n / 0 == 1",
    "size(value.s) == 3",
    "value.s + 'x' == 'abcx'",
    "value.n == 3 ? true : false",
    "duration('1s') < duration('2s')",
    "timestamp('2024-01-01T00:00:00Z') < timestamp('2024-01-02T00:00:00Z')",
    "has(value.n) && !has(value.zzz)",
    "value.u > 5u",
]
AGREE_ACTS = [
    {"key": "k", "headers": {"h": "v"},
     "value": {"n": 3, "s": "abc", "l": [1, 2, 3], "m": {"k": "v"}, "f": 1.25, "b": True,
               "s2": "42", "u": 2**63 + 1}},
    {"key": b"\x01", "headers": {},
     "value": {"n": -1, "s": "xyz", "l": [4], "m": {}, "f": 2.5, "b": False, "s2": "x"}},
    {"key": None, "headers": {"h": "w"}, "value": {}},
]


@BOTH
@pytest.mark.parametrize("expr", AGREE_EXPRS)
def test_engines_agree(expr):
    fast = compile_cel(expr, "cel-expr-python")
    slow = compile_cel(expr, "cel-python")
    fast_results, fast_errors = fast.evaluate_many(AGREE_ACTS)
    slow_results, slow_errors = slow.evaluate_many(AGREE_ACTS)
    assert fast_results == slow_results
    assert [e is None for e in fast_errors] == [e is None for e in slow_errors]


@pytest.mark.parametrize("value", [
    {"t": (1, b"\x00"), "d": decimal.Decimal("2.5"), "u": uuid.UUID(int=0)},
    {"t": [1, bytearray(b"\x00")], "d": 2.5, "u": "00000000-0000-0000-0000-000000000000"},
])
def test_nested_values_need_no_fallback(engine, value):
    program = compile_cel("size(value.t) == 2 && value.t[1] == b'\\x00' && value.d == 2.5 && "
                          "value.u.startsWith('0000')", engine)
    assert program.check({"value": value}) == (True, None)
