"""``kqlab.validate.fields``: field rules vectorised on Arrow == per record in Python == their CEL.

The property tests draw records whose nested fields are present, absent or null, of one type
per field (what an Arrow struct column holds) or of any type (JSON; the Python fallback), and
check that every field kind gives the same pass/fail on all paths.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.policy.cel import available_engines, compile_cel
from kqlab.policy.model import Rule
from kqlab.validate.fields import (
    JSON_TYPES,
    NULLABLE_KINDS,
    FieldRuleError,
    evaluate_field_rule,
    evaluate_python_values,
    field_rule_to_cel,
)


def _rule(kind: str, **params) -> Rule:
    # these table-driven cases pin the strict reading (a null/absent field fails the value
    # checks); the default (allow_null: true) is covered by test_null_and_absent_pass_by_default
    if kind in NULLABLE_KINDS:
        params.setdefault("allow_null", False)
    return Rule(id=f"r-{kind}", kind=kind, params=params)


def _cel_failed(rule: Rule, values: list, engine: str | None = None) -> list[bool]:
    program = compile_cel(field_rule_to_cel(rule), engine)
    results, _ = program.evaluate_many({"value": v} for v in values)
    return [r is not True for r in results]


ROWS = [
    {"id": 1, "a": {"b": 5, "s": "abc", "l": [1, 2], "f": 1.5, "t": True}},
    {"id": 2, "a": {"b": -3, "s": "XYZ", "l": [], "f": float("nan"), "t": False}},
    {"id": 3, "a": {"b": None, "s": None, "l": None, "f": None, "t": None}},
    {"id": 4, "a": None},
    None,
    {"id": 6, "a": {"b": 10, "s": "", "l": [1, 2, 3, 4], "f": 10.0, "t": True}},
]
COLUMN = pa.array(ROWS)

CASES = [
    (_rule("field_not_null", field="a.b"), [0, 0, 1, 1, 1, 0]),
    (_rule("field_not_null", field="id"), [0, 0, 0, 0, 1, 0]),
    (_rule("field_not_null", field="a.zzz"), [1, 1, 1, 1, 1, 1]),
    (_rule("field_not_null", field="id.x"), [1, 1, 1, 1, 1, 1]),
    (_rule("field_range", field="a.b", min=0, max=10), [0, 1, 1, 1, 1, 0]),
    (_rule("field_range", field="a.b", max=5), [0, 0, 1, 1, 1, 1]),
    (_rule("field_range", field="a.f", min=1.5), [0, 1, 1, 1, 1, 0]),
    (_rule("field_range", field="a.s", min=0), [1, 1, 1, 1, 1, 1]),
    (_rule("field_range", field="a.t", min=0), [1, 1, 1, 1, 1, 1]),
    (_rule("field_in", field="a.s", values=["abc", ""]), [0, 1, 1, 1, 1, 0]),
    (_rule("field_in", field="a.s", values=["abc", None]), [0, 1, 0, 0, 0, 1]),
    (_rule("field_in", field="a.b", values=[5.0, 10]), [0, 1, 1, 1, 1, 0]),
    (_rule("field_in", field="a.f", values=[10]), [1, 1, 1, 1, 1, 0]),
    (_rule("field_in", field="a.t", values=[True]), [0, 1, 1, 1, 1, 0]),
    (_rule("field_in", field="a.b", values=[True, "5"]), [1, 1, 1, 1, 1, 1]),
    (_rule("field_regex", field="a.s", pattern="^[a-z]+$"), [0, 1, 1, 1, 1, 1]),
    (_rule("field_regex", field="a.s", pattern="B|Y"), [1, 0, 1, 1, 1, 1]),
    (_rule("field_regex", field="a.b", pattern="5"), [1, 1, 1, 1, 1, 1]),
    (_rule("field_length", field="a.s", min=1, max=3), [0, 0, 1, 1, 1, 1]),
    (_rule("field_length", field="a.l", max=2), [0, 0, 1, 1, 1, 1]),
    (_rule("field_length", field="a.b", max=2), [1, 1, 1, 1, 1, 1]),
    (_rule("field_type", field="a.b", type="integer"), [0, 0, 1, 1, 1, 0]),
    (_rule("field_type", field="a.b", type="number"), [0, 0, 1, 1, 1, 0]),
    (_rule("field_type", field="a.f", type="integer"), [1, 1, 1, 1, 1, 1]),
    (_rule("field_type", field="a.f", type="number"), [0, 0, 1, 1, 1, 0]),
    (_rule("field_type", field="a", type="object"), [0, 0, 0, 1, 1, 0]),
    (_rule("field_type", field="a.l", type="array"), [0, 0, 1, 1, 1, 0]),
    (_rule("field_type", field="a.t", type="boolean"), [0, 0, 1, 1, 1, 0]),
    (_rule("field_type", field="a.s", type="string"), [0, 0, 1, 1, 1, 0]),
    (_rule("field_type", field="a.b", type="null"), [1, 1, 0, 0, 0, 1]),
    (_rule("field_type", field="nope", type="null"), [0, 0, 0, 0, 0, 0]),
]


@pytest.mark.parametrize(("rule", "expected"), CASES,
                         ids=[f"{r.kind}-{dict(r.params)}" for r, _ in CASES])
def test_table_driven_cases_on_every_path(rule, expected):
    expected = [bool(x) for x in expected]
    vectorised = evaluate_field_rule(rule, COLUMN)
    assert vectorised.failed.dtype == np.bool_
    assert vectorised.failed.tolist() == expected
    assert len(vectorised.observed) == len(ROWS)
    assert evaluate_python_values(rule, ROWS).failed.tolist() == expected
    assert evaluate_field_rule(rule, ROWS).failed.tolist() == expected  # a list → Python
    assert _cel_failed(rule, ROWS) == expected


def test_cel_form_of_field_range_matches_the_documented_shape():
    cel = field_rule_to_cel(_rule("field_range", field="a.b", min=0, max=10))
    assert cel == ("type(value) == map && has(value.a) && type(value.a) == map && "
                   "has(value.a.b) && (type(value.a.b) == int || type(value.a.b) == uint || "
                   "type(value.a.b) == double) && double(value.a.b) >= 0.0 && "
                   "double(value.a.b) <= 10.0")


def test_non_identifier_steps_use_index_syntax():
    rule = _rule("field_not_null", field='in.x-y."q"')
    cel = field_rule_to_cel(rule)
    assert '"in" in value' in cel
    assert 'value["in"]["x-y"]["\\"q\\""]' in cel
    values = [{"in": {"x-y": {'"q"': 1}}}, {"in": {"x-y": {}}}]
    assert _cel_failed(rule, values) == [False, True]
    assert evaluate_field_rule(rule, pa.array(values)).failed.tolist() == [False, True]


def test_messages_only_for_failing_rows():
    result = evaluate_field_rule(_rule("field_range", field="a.b", min=0, max=6), COLUMN)
    assert result.messages() == [None, "a.b=-3 is outside [0, 6]", "a.b=null is outside [0, 6]",
                                 "a.b=null is outside [0, 6]", "a.b=null is outside [0, 6]",
                                 "a.b=10 is outside [0, 6]"]
    assert result.failed_count == 5
    length = evaluate_field_rule(_rule("field_length", field="a.s", max=2), COLUMN)
    assert length.messages()[0] == "a.s has length 3, outside [0, 2]"
    assert length.messages()[1] == "a.s has length 3, outside [0, 2]"
    assert length.messages()[5] is None
    regex = evaluate_field_rule(
        Rule(id="r", kind="field_regex", params={"field": "a.s", "pattern": "^a"},
             message="bad {field}: {value}"), COLUMN)
    assert regex.messages()[1] == 'bad a.s: "XYZ"'


def test_chunked_and_dictionary_columns():
    rule = _rule("field_in", field="s", values=["x"])
    chunked = pa.chunked_array([pa.array([{"s": "x"}]), pa.array([{"s": "y"}, None])])
    assert evaluate_field_rule(rule, chunked).failed.tolist() == [False, True, True]
    dict_struct = pa.StructArray.from_arrays(
        [pa.array(["x", "y", None]).dictionary_encode()], names=["s"])
    assert evaluate_field_rule(rule, dict_struct).failed.tolist() == [False, True, True]


def test_non_struct_column_falls_back_to_python():
    rule = _rule("field_range", field="n", min=0)
    values = pa.array(['{"n": 1}', "x", None])  # not decoded objects: every row fails
    assert evaluate_field_rule(rule, values).failed.tolist() == [True, True, True]
    mixed = [{"n": 1}, {"n": "1"}, {"n": [1]}, 5, None, {"n": 2.5}]
    result = evaluate_field_rule(rule, mixed)
    assert result.failed.tolist() == [False, True, True, True, True, False]
    assert result.observed.type == pa.string()  # mixed values shown as JSON text
    assert result.messages()[1] == 'n="1" is outside [0, inf]'


def test_map_column_falls_back_to_python():
    col = pa.array([[("k", 1)], [("j", 2)]], pa.map_(pa.string(), pa.int64()))
    rule = _rule("field_not_null", field="k")
    assert evaluate_field_rule(rule, pa.StructArray.from_arrays([col], ["m"])).failed.tolist() \
        == [True, True]
    nested = _rule("field_not_null", field="m.k")
    assert evaluate_field_rule(nested, pa.StructArray.from_arrays([col], ["m"])
                               ).failed.tolist() == [False, True]


@pytest.mark.parametrize(("rule", "match"), [
    (_rule("field_regex", field="a", pattern="a(?=b)"), "RE2"),
    (_rule("field_regex", field="a", pattern="(unclosed"), "RE2"),
    (_rule("field_range", field="a", min=float("nan")), "finite"),
    (_rule("field_range", field="a", max="10"), "finite"),
    (_rule("field_in", field="a", values=[float("inf")]), "inf"),
    (_rule("field_in", field="a", values=[[1]]), "strings, numbers"),
    (_rule("field_in", field="a", values="abc"), "list"),
    (_rule("field_type", field="a", type="float"), "type must be one of"),
    (_rule("field_not_null", field="a..b"), "dotted path"),
    (_rule("field_not_null", field=""), "dotted path"),
    (_rule("cel", expr="true"), "not a field check"),
])
def test_bad_parameters_raise(rule, match):
    with pytest.raises(FieldRuleError, match=match):
        field_rule_to_cel(rule)
    with pytest.raises(FieldRuleError, match=match):
        evaluate_field_rule(rule, COLUMN)


# ------------------------------------------------------------------------------ properties

ABSENT = object()

_texts = st.text(alphabet="ab1 é\x00XZ", max_size=5)
_floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
_ints = st.one_of(st.integers(-20, 20), st.integers(-(2**63), 2**63 - 1))
LEAVES = {
    "int": _ints,
    "float": _floats,
    "string": _texts,
    "bool": st.booleans(),
    "list": st.lists(st.integers(-5, 5), max_size=4),
    "struct": st.fixed_dictionaries({"c": st.integers(-5, 5)}),
}


def _maybe(strategy):
    # present first: hypothesis favours early branches, and the checks need values
    return st.one_of(strategy, st.none(), st.just(ABSENT))


def _drop_absent(obj):
    if isinstance(obj, dict):
        return {k: _drop_absent(v) for k, v in obj.items() if v is not ABSENT}
    return obj


@st.composite
def uniform_records(draw):
    """Records whose a.b (and top-level x) each have one type: an Arrow struct column."""
    leaf = LEAVES[draw(st.sampled_from(sorted(LEAVES)))]
    x_leaf = LEAVES[draw(st.sampled_from(sorted(LEAVES)))]
    record = st.fixed_dictionaries({
        "id": st.integers(0, 9),
        "x": _maybe(x_leaf),
        "a": _maybe(st.fixed_dictionaries({"b": _maybe(leaf)})),
    })
    rows = draw(st.lists(st.one_of(record, st.none()), min_size=1, max_size=8))
    return [_drop_absent(r) for r in rows]


_any_leaf = st.one_of(*LEAVES.values(), st.binary(max_size=3),
                      st.integers(2**63, 2**64 - 1))


@st.composite
def mixed_records(draw):
    """JSON-like records: a.b of any type per record (the Python fallback)."""
    deep = st.fixed_dictionaries({"a": _maybe(st.fixed_dictionaries({"b": _maybe(_any_leaf)})),
                                  "x": _maybe(_any_leaf)})
    record = st.one_of(deep, st.fixed_dictionaries({"a": _any_leaf}), _any_leaf, st.none())
    rows = draw(st.lists(record, min_size=1, max_size=8))
    return [_drop_absent(r) for r in rows]


_bound = st.one_of(st.none(), st.integers(-10, 10), st.floats(-10, 10, allow_nan=False))
_scalar = st.one_of(st.none(), st.integers(-5, 5), st.integers(-(2**63), 2**64 - 1),
                    st.floats(-5, 5, allow_nan=False), st.sampled_from([1.0, 0.5, -0.0]),
                    st.booleans(), _texts)


@st.composite
def field_rules(draw):
    """One rule of every kind (every JSON type for field_type) on one drawn path."""
    field = draw(st.sampled_from(["a.b", "a.b", "a.b", "a", "x", "a.b.c", "id", "zz"]))
    rules = [
        Rule(id="nn", kind="field_not_null", params={"field": field}),
        Rule(id="range", kind="field_range",
             params={"field": field, "min": draw(_bound), "max": draw(_bound)}),
        Rule(id="in", kind="field_in",
             params={"field": field, "values": draw(st.lists(_scalar, max_size=4))}),
        Rule(id="re", kind="field_regex", params={"field": field, "pattern": draw(
            st.sampled_from(["^a", "b+", "[0-9]", "^$", "é", "^.{2,}$", "\\x00", "(?i)x|Z",
                             "\\d"]))}),
        Rule(id="len", kind="field_length", params={
            "field": field, "min": draw(st.one_of(st.none(), st.integers(0, 3))),
            "max": draw(st.one_of(st.none(), st.integers(0, 5)))}),
    ]
    rules += [Rule(id=f"type-{t}", kind="field_type", params={"field": field, "type": t})
              for t in JSON_TYPES]
    return rules


_PROPERTY = settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


@_PROPERTY
@given(rows=uniform_records(), rules=field_rules())
def test_vectorised_equals_cel_on_struct_columns(rows, rules):
    column = pa.array(rows)
    values = column.to_pylist()  # what the column holds (missing keys read back as null)
    for rule in rules:
        vectorised = evaluate_field_rule(rule, column)
        expected = _cel_failed(rule, values)
        assert vectorised.failed.tolist() == expected, field_rule_to_cel(rule)
        assert evaluate_python_values(rule, values).failed.tolist() == expected
        assert evaluate_python_values(rule, rows).failed.tolist() == expected  # absent == null


@_PROPERTY
@given(rows=mixed_records(), rules=field_rules())
def test_python_fallback_equals_cel_on_mixed_values(rows, rules):
    for rule in rules:
        result = evaluate_field_rule(rule, rows)
        assert result.failed.tolist() == _cel_failed(rule, rows), field_rule_to_cel(rule)
        messages = result.messages()
        assert [m is not None for m in messages] == result.failed.tolist()


@pytest.mark.skipif("cel-python" not in available_engines(), reason="needs cel-python")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=mixed_records(), rules=field_rules())
def test_field_cel_is_portable_to_cel_python(rows, rules):
    for rule in rules:
        expected = evaluate_python_values(rule, rows).failed.tolist()
        assert _cel_failed(rule, rows, "cel-python") == expected, field_rule_to_cel(rule)


def test_nan_and_signed_zero():
    values = [{"v": float("nan")}, {"v": -0.0}, {"v": math.inf}]
    in_rule = _rule("field_in", field="v", values=[0])
    range_rule = _rule("field_range", field="v", min=-1)
    for rule, expected in ((in_rule, [True, False, True]), (range_rule, [True, False, False])):
        assert evaluate_field_rule(rule, pa.array(values)).failed.tolist() == expected
        assert _cel_failed(rule, values) == expected


@pytest.mark.parametrize(("kind", "params"), [
    ("field_range", {"min": 0, "max": 10}),
    ("field_in", {"values": ["NEW"]}),
    ("field_regex", {"pattern": "^[A-Z]+$"}),
    ("field_length", {"max": 3}),
])
def test_null_and_absent_pass_by_default(kind, params):
    # value checks skip nulls (presence is field_not_null's job); allow_null: false fails them
    rows = [{"a": {"x": None}}, {"a": {}}, {"b": 1}, None, {"a": {"x": "NOPE-TOO-LONG"}}]
    lenient = Rule(id="r", kind=kind, params={"field": "a.x", **params})
    strict = Rule(id="r", kind=kind, params={"field": "a.x", "allow_null": False, **params})
    for rule, want in ((lenient, [False, False, False, False, True]),
                       (strict, [True, True, True, True, True])):
        assert evaluate_python_values(rule, rows).failed.tolist() == want
        struct = pa.array([{"a": {"x": None}}, {"a": {"x": None}}, {"a": None}, None,
                           {"a": {"x": "NOPE-TOO-LONG"}}])
        assert evaluate_field_rule(rule, struct).failed.tolist() == want
        program = compile_cel(field_rule_to_cel(rule))
        got = [program.evaluate({"value": r}) is not True for r in rows]
        assert got == want


def test_json_verdicts_and_messages_follow_each_records_own_types():
    """Arrow widens a JSON field holding 5 and 2.5 to double; a record's verdict and message
    must not change with what else is in the sample (e.g. one partition per Spark task)."""
    from kqlab.policy.model import Format
    from kqlab.serde.decode import decode

    fmt = Format(format="json")
    rules = [Rule(id="t", kind="field_type", params={"field": "a", "type": "integer"}),
             Rule(id="r", kind="field_range", params={"field": "a", "min": 0}),
             Rule(id="i", kind="field_in", params={"field": "a", "values": [1, 2]})]
    alone = decode(pa.array([b'{"a": -3}', b'{"a": 7}']), fmt)
    mixed = decode(pa.array([b'{"a": -3}', b'{"a": 7}', b'{"a": 2.5}', b'{"a": 4.0}']), fmt)
    assert pa.types.is_floating(mixed.values.type.field("a").type)  # widened
    for rule in rules:
        a = evaluate_field_rule(rule, alone.values, alone.python_values())
        m = evaluate_field_rule(rule, mixed.values, mixed.python_values())
        assert m.failed[:2].tolist() == a.failed.tolist(), rule.id
        assert m.messages()[:2] == a.messages(), rule.id
    m = evaluate_field_rule(rules[0], mixed.values, mixed.python_values())
    assert m.failed.tolist() == [False, False, True, True]  # 4.0 was written as a float
    assert evaluate_field_rule(rules[1], mixed.values, mixed.python_values()).messages()[0] \
        == "a=-3 is outside [0, inf]"


@pytest.mark.parametrize("message", [
    None,  # the catalog's template
    "{rule}: {value} / {value} (max {max})",
    "{value!r} at most {max}",  # a conversion: every value rendered in full
    "{value:>12}|",  # a format spec: the same
    "{field} {value[0]}",  # an item of the value (its text): the same
    "{value} of length {length}",
    "no placeholder at all",
    "{broken",  # not a template: the text as it is
])
def test_float_messages_rendered_once_per_value_equal_the_per_record_ones(message):
    """A float column's failing values are shown once per distinct value (with a fraction)
    through the template filled once: the texts are those each record's own value gives
    (JSON ints widened to double still show as written)."""
    from kqlab.policy.model import Format
    from kqlab.serde.decode import decode

    raw = [b'{"a": 2.5}', b'{"a": 7}', b'{"a": 4.0}', b'{"a": null}', b'{"a": -0.25}',
           b'{"a": 1e20}', b'{"a": 1.5e-7}', b'{"a": 2.5}', b'{}', b'{"a": 123456789.125}',
           b'{"a": -3}', b'{"a": 0.1}']
    decoded = decode(pa.array(raw), Format(format="json"))
    assert pa.types.is_floating(decoded.values.type.field("a").type)
    rows = decoded.python_values()
    for params in ({"min": 1e9}, {"max": -1}, {"min": 0, "allow_null": False}):
        rule = Rule(id="r", kind="field_range", message=message,
                    params={"field": "a", **params})
        got = evaluate_field_rule(rule, decoded.values, rows).messages()
        want = evaluate_python_values(rule, rows).messages()
        assert got == want, (message, params)
    # Avro-like: a double column with no JSON behind it (non-finite values too)
    col = pa.array([{"a": v} for v in (0.5, math.inf, -math.inf, float("nan"), 3.0, 0.5,
                                       None, 1e-300)])
    rule = Rule(id="r", kind="field_range", message=message, params={"field": "a", "max": 0})
    got = evaluate_field_rule(rule, col, col.to_pylist()).messages()
    assert got == evaluate_python_values(rule, col.to_pylist()).messages()
