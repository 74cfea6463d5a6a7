"""The load-time checks behind "nothing runs on a broken policy" (issue 17): positions inside
YAML scalars, one RE2 check for every pattern, CEL compiled and typed against the declared
schema — refusing what fails every record, and nothing that can pass.

The malformed-file corpus (``test_policy_corpus.py``) pins exact messages and locations; these
tests hold the properties those cases are instances of."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from kqlab.policy import PolicyError, dump_policy, load_policy, loads_policy, policy_from_dict
from kqlab.policy.cel import CelSyntaxError, compile_cel
from kqlab.policy.expression_checks import expression_problem
from kqlab.policy.patterns import pattern_problem
from kqlab.policy.positioned_yaml import read_yaml, scalar_of
from kqlab.policy.scalar_offsets import file_position, value_origins
from kqlab.policy.value_shapes import avro_shape, json_schema_shape

CORPUS = Path(__file__).parent / "corpus"
ORDERS = CORPUS / "schemas" / "orders"
CLICKS = CORPUS / "schemas" / "clicks"


def _orders_shape():
    return avro_shape(json.loads((ORDERS / "2.avsc").read_text(encoding="utf-8")))


def _policy(rules: str, value: str = "") -> str:
    return f"kqlab: 1\nname: orders\n{value}rules:\n{rules}"


# ------------------------------------------------------------------ positions inside scalars
SCALARS = [
    "e: value.amount > 0\n",
    "e: plain text\n  continued here\n\n  and more\n",
    "e: 'value.c == ''EUR'' &&\n   b'\n",
    "e: 'multi\n\n  line'\n",
    'e: "v == \\"q\\" \\t \\u00e9 \\\n    && y\n\n   z"\n',
    'e: "\\x41\\U0001F600b"\n',
    "e: |\n  line one\n    more\n\n  three\n",
    "e: |-\n   x > 1 &&\n   y\n",
    "e: |2\n    two extra\n   one extra\n",
    "e: |  # a comment\n  x\n",
    "e: >\n  line one\n  line two\n\n  three\n    indented\n  back\n",
    "- id: r\n  e: >-\n    value.a >\n    1\n",
    "rules:\n  - {id: x, e: \"value.a\n      > 1\"}\n",
    "e: \"tab\\there\"   # a comment\n",
]


def _scalar(text: str):
    data = read_yaml(text, "t.yaml")
    mapping = data[0] if isinstance(data, list) else data
    if "rules" in mapping:
        mapping = mapping["rules"][0]
    return mapping["e"], scalar_of(mapping, "e")


@pytest.mark.parametrize("text", SCALARS, ids=range(len(SCALARS)))
def test_every_character_of_a_value_maps_to_where_it_is_written(text):
    value, span = _scalar(text)
    origins = value_origins(span, value)
    assert origins is not None
    assert len(origins) in (len(value), len(value.rstrip("\n")))
    for offset, origin in enumerate(origins):
        char, written = value[offset], text[origin]
        if char in " \n":  # folded line breaks map to the break they came from
            assert written in " \n\t", (offset, char, written)
        else:  # an escape or a doubled quote maps to its first character
            assert written == char or written in "\\'", (offset, char, written)
    line, column = file_position(span, value, len(value.rstrip("\n")))
    assert text.split("\n")[line - 1][column - 2] == value.rstrip("\n")[-1]  # just past the end


def test_a_position_is_never_guessed():
    """A span the replay cannot rebuild (here: the wrong style) gives no position at all."""
    value, span = _scalar("e: 'it''s'\n")
    assert file_position(span, value, 2) == (1, 7)
    assert file_position(span._replace(style=None), value, 2) is None
    assert file_position(None, value, 0) is None


# -------------------------------------------------------------------------------- patterns
UNPORTABLE = {
    "^(?!test-).*": 1, "(?<=a)b": 0, "(?<!a)b": 0, "a(?=b)": 1, "(a)\\1": 3,
    "(?P<x>a)(?P=x)": 8, "\\k<x>": 0, "a*+": 1, "[0-9]{2}+": 7, "(?>ab)": 0, "(?(1)a|b)": 0,
    "a\\Z": 1, "a\\z": 1, "(?x) a": 0, "(?#note)a": 0, "[a-": 0, "(a": 0, "x{2,1}": 1,
    "\\p{L}": 0, "(?<n>a)": 1,
}
#: a rule of each kind holding a pattern, and the line the pattern is on
KINDS_WITH_PATTERNS = {
    "header_pattern": ("  - {{id: r, kind: header_pattern, name: h, pattern: '{p}'}}\n", 4),
    "field_regex": ("  - id: r\n    kind: field_regex\n    field: sku\n    pattern: '{p}'\n",
                    7),
    "cel matches()": ("  - id: r\n    kind: cel\n    expr: |\n      value.sku.matches(r'{p}')\n",
                      7),
}


def _pattern_rule(kind: str, pattern: str) -> str:
    template, _ = KINDS_WITH_PATTERNS[kind]
    # single-quoted YAML doubles quotes; the block scalar of the CEL rule takes text as is
    return template.format(p=pattern if kind == "cel matches()" else pattern.replace("'", "''"))


@pytest.mark.parametrize("kind", sorted(KINDS_WITH_PATTERNS))
@pytest.mark.parametrize("pattern", sorted(UNPORTABLE))
def test_every_kind_refuses_the_same_patterns(kind, pattern):
    """One function decides for every kind (header_pattern used to accept look-around)."""
    problem = pattern_problem(pattern)
    assert problem is not None and problem.offset == UNPORTABLE[pattern], problem
    text = _policy(_pattern_rule(kind, pattern))
    with pytest.raises(PolicyError) as info:
        loads_policy(text, source="p.yaml")
    err = info.value
    assert problem.message in str(err)
    assert err.line == KINDS_WITH_PATTERNS[kind][1] and err.inside  # inside the pattern


@pytest.mark.parametrize("kind", sorted(KINDS_WITH_PATTERNS))
@pytest.mark.parametrize("pattern", ["^[A-Z]{3}-\\d{4}$", "(?i)^eur|usd$", "^[^]a]+$",
                                     "(?P<year>[0-9]{4})-[0-9]{2}", "a{,3}", "[(?=]x",
                                     "^\\w+@\\w+\\.[a-z]{2,}$"])
def test_portable_patterns_load_in_every_kind(kind, pattern):
    assert pattern_problem(pattern) is None
    loads_policy(_policy(_pattern_rule(kind, pattern)))


def test_the_located_column_is_the_construct_in_the_file():
    text = _policy("  - id: r\n    kind: header_pattern\n    name: h\n"
                   "    pattern: \"^\\\\d+(?!x)\"\n")
    with pytest.raises(PolicyError) as info:
        loads_policy(text, source="p.yaml")
    line = text.split("\n")[info.value.line - 1]
    assert line[info.value.column - 1:].startswith("(?!x)")
    assert str(info.value).startswith(f"p.yaml:{info.value.line}:{info.value.column}: ")


# ----------------------------------------------------------------------------- expressions
SOUND = [
    "value.amount > 0", "value.amount > 0.5", "value.qty == 1.0", "value.qty > 1.5",
    "value.currency in ['EUR', 'USD']", "has(value.note) && value.note != null",
    "value.note == null", "value.customer.id.startsWith('c-')",
    "value.items.exists(i, i.sku == 'x' && i.price > 1.0)", "value.attrs.color == 'red'",
    "value.attrs['any-key'] == 'x'", "size(value.items) > 0", "value.items.size() < 100",
    "!(value.amount < 0.0)", "value.amount * 2.0 > 10.0", "value.qty * 2 > 10",
    "type(value.amount) == double", "value.created > timestamp('2020-01-01T00:00:00Z')",
    "value.created.getFullYear() >= 2020", "headers.source == 'checkout'",
    "'trace' in headers", "key == 'k'", "timestamp > 0", "offset % 7 != 3",
    "value.currency.matches('^[A-Z]{3}$')", "value.items[0].sku == 'a'",
    "value['amount'] > 1", "value.items.all(i, i.price > 0.0)",
    "value.items.map(i, i.price).exists(p, p > 1.0)", "value.amount > 0.0 ? true : false",
    "'amount' in value", "header_list.exists(h, h.key == 'x' && h.value != null)",
    "value.note.size() > 0", "int(value.amount) > 1", "dyn(value.amount) == 'x'",
    "value.status in ['NEW', 'PAID']", "value.customer.email == null || "
    "value.customer.email.contains('@')", "string(value.qty) == '3'",
    "value.items.filter(i, i.price > 10.0).size() == 0", "value != null",
]


@pytest.mark.parametrize("expr", SOUND)
def test_sound_expressions_are_not_refused(expr):
    """Only what fails every record is refused: numbers compare across int and double,
    null with anything, and dyn values are never judged."""
    assert expression_problem(expr, _orders_shape()) is None


def test_fields_are_not_checked_without_a_declared_schema(tmp_path):
    policy = loads_policy(_policy("  - {id: a, kind: cel, expr: 'value.amout > 0'}\n"
                                  "  - {id: b, kind: field_range, field: no.such, min: 0}\n",
                                  "value: {format: json}\n"))
    assert [r.id for r in policy.rules] == ["a", "b"]
    # a declared folder that is not there claims nothing either: the replay reports it
    loads_policy(_policy("  - {id: a, kind: cel, expr: 'value.amout > 0'}\n",
                         f"value: {{format: avro, schemas: {{path: '{tmp_path / 'none'}'}}}}\n"))


def test_a_field_of_any_schema_version_is_known(tmp_path):
    """``note`` exists only in version 2: a sample may hold either version."""
    (tmp_path / "1.avsc").write_text((ORDERS / "1.avsc").read_text(encoding="utf-8"))
    value = f"value: {{format: avro, wire: confluent, schemas: {{path: '{tmp_path}'}}}}\n"
    rule = "  - {id: n, kind: cel, expr: 'has(value.note)'}\n"
    with pytest.raises(PolicyError, match="no field 'note'"):
        loads_policy(_policy(rule, value))
    (tmp_path / "2.avsc").write_text((ORDERS / "2.avsc").read_text(encoding="utf-8"))
    loads_policy(_policy(rule, value))


def test_json_schema_shapes():
    shape = json_schema_shape(json.loads((CLICKS / "clicks.json").read_text(encoding="utf-8")))
    assert shape.closed and set(shape.fields) == {"user", "page", "ms", "score", "tags"}
    assert shape.fields["score"].describe() == "int, double or null"
    assert expression_problem("value.score > 1 && value.ms >= 0.5", shape) is None
    assert expression_problem("value.tags.exists(t, t == 'x')", shape) is None
    assert expression_problem("value.tags.exists(t, t > 1)", shape) is not None
    opened = json_schema_shape({"type": "object", "properties": {"a": {"type": "string"}},
                                "additionalProperties": True})
    assert expression_problem("value.b == 1", opened) is None  # not closed: no claim


def test_a_network_registry_is_only_read_when_asked(tmp_path):
    """Loading never waits on a remote service; the CLI asks (it reads the registry anyway),
    and a registry that does not answer claims nothing."""
    text = _policy("  - {id: a, kind: cel, expr: 'value.amout > 0'}\n",
                   "value: {format: avro, wire: confluent, schemas: {registry: "
                   "'http://127.0.0.1:9', subject: orders-value, config: {max.retries: 0}}}\n")
    loads_policy(text)
    loads_policy(text, contact_registries=True)


def test_a_400_kb_expression_is_never_echoed():
    expr = " || ".join(f"value.qty == {i}" for i in range(26000))  # ~400 KB, one line
    assert len(expr) > 400_000
    with pytest.raises(PolicyError) as info:
        loads_policy(_policy(f"  - id: big\n    kind: cel\n    expr: {expr} ||\n"), "big.yaml")
    message = str(info.value)
    assert len(message) < 500, message[:1000]
    assert message.startswith("big.yaml:6: rules[0].expr: CEL expression does not compile: ")
    with pytest.raises(CelSyntaxError) as raw:  # the engine's own error is cut as well
        compile_cel(expr + " ||")
    assert len(str(raw.value)) < 1000 and raw.value.expr == expr + " ||"


def test_a_long_expression_is_located_and_cut():
    expr = " || ".join(f"value.qty == {i}" for i in range(4000))  # ~70 KB: compiled
    with pytest.raises(PolicyError) as info:
        loads_policy(_policy(f"  - id: big\n    kind: cel\n    expr: '{expr} || )'\n"),
                     "big.yaml")
    err = info.value
    assert (err.line, err.column, err.inside) == (6, 11 + len(expr) + 5, True)
    assert len(str(err)) < 500


# -------------------------------------------------------------------------- rules and dicts
def test_an_empty_rule_list_is_refused_but_no_rules_key_is_a_broker_only_policy():
    with pytest.raises(PolicyError, match="the rule list is empty"):
        loads_policy("kqlab: 1\nname: p\nrules: []\n")
    assert loads_policy("kqlab: 1\nname: p\n").rules == ()


def test_plain_data_and_dumps_are_checked_the_same_way():
    with pytest.raises(PolicyError) as info:
        policy_from_dict({"kqlab": 1, "name": "p", "rules": [
            {"id": "a", "kind": "cel", "expr": "value.amount >"}]}, source="editor")
    assert "does not compile" in str(info.value) and info.value.line is None
    policy = load_policy(CORPUS / "good" / "orders.yaml")
    assert loads_policy(dump_policy(policy)) == policy


def test_errors_inside_a_value_pickle_with_their_column():
    err = PolicyError("bad", file="a.yaml", line=3, column=9, key="rules[0].expr", inside=True)
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) == "a.yaml:3:9: rules[0].expr: bad"
    assert again.inside


def test_a_json_schema_from_a_registry_subject_named_after_the_topic():
    """No subject given: the TopicNameStrategy's ``<topic>-value`` is read."""
    from confluent_kafka.schema_registry import Schema

    from kqlab.serde.schemas import registry_client

    client = registry_client("mock://kqlab-load-checks")
    client.register_schema("clicks-value",
                           Schema((CLICKS / "clicks.json").read_text(encoding="utf-8"), "JSON"))
    value = "value: {format: json, schemas: {registry: 'mock://kqlab-load-checks'}}\n"
    rule = "  - {id: p, kind: field_in, field: user.plna, values: [pro]}\n"
    with pytest.raises(PolicyError, match="did you mean 'plan'"):
        loads_policy(f"kqlab: 1\nname: clicks\ntopics: {{names: [clicks]}}\n{value}rules:\n"
                     f"{rule}")
    # another topic's subject is not registered: nothing is claimed
    loads_policy(f"kqlab: 1\nname: clicks\ntopics: {{names: [views]}}\n{value}rules:\n{rule}")


def test_the_walk_is_linear_in_the_expression():
    """Each node is typed once: a chain of 300 conditions (nested 300 deep) checks at once."""
    chain = " || ".join(f"(value.qty == {i} && !value.currency.startsWith('X'))"
                        for i in range(300))
    assert expression_problem(chain, _orders_shape()) is None
    assert expression_problem(chain + " || value.qty > 'x'", _orders_shape()) is not None


def test_a_very_deep_expression_is_left_to_the_engine():
    """Deeper than Python's recursion allows: compiled and checked by the engine only."""
    chain = " || ".join(["key == 'a'"] * 1500)
    assert expression_problem(chain, _orders_shape()) is None
    assert expression_problem(chain + " || nope", _orders_shape()) is not None
