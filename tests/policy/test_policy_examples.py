"""Golden examples in the policy file: model, loader errors, canonical dump, hash, diff, schema."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jsonschema import Draft202012Validator

from kqlab.policy import PolicyError, diff, dump_policy, json_schema, loads_policy, policy_to_dict
from kqlab.policy.model import Example, Examples, Format, Policy, Rule

POLICY = """\
kqlab: 1
name: orders
key: {format: string}
value: {format: json}
rules:
- id: amount
  kind: field_range
  field: amount
  min: 0
  examples:
    pass:
    - {name: ok, key: k1, value: {amount: 10, tags: [a, b]}, headers: {trace-id: abc}}
    - {value: {amount: 0}, timestamp: now-1d}
    fail:
    - {value: {amount: -1}, headers: [[a, x], [a, null]], timestamp: 1763700000000}
- {id: json, kind: json_valid, examples: {fail: [{raw_value: '{"amount": '}]}}
"""


def test_examples_load_into_frozen_value_objects():
    rule = loads_policy(POLICY).rule("amount")
    ex = rule.examples
    assert isinstance(ex, Examples) and len(ex) == 3
    first = ex.passing[0]
    assert (first.name, first.key, first.headers) == ("ok", "k1", (("trace-id", "abc"),))
    assert first.value["tags"] == ("a", "b")  # frozen: read-only mapping, tuples
    with pytest.raises(TypeError):
        first.value["amount"] = 5  # type: ignore[index]
    assert ex.passing[1].timestamp == "now-1d"
    assert ex.failing[0].headers == (("a", "x"), ("a", None))
    assert hash(rule) == hash(loads_policy(POLICY).rule("amount"))


def test_dump_is_canonical_with_one_example_per_line():
    policy = loads_policy(POLICY)
    text = dump_policy(policy)
    lines = text.splitlines()
    assert "    - {name: ok, key: k1, value: {amount: 10, tags: [a, b]}, headers: {trace-id: " \
        "abc}}" in lines
    assert "    - {value: {amount: -1}, headers: [[a, x], [a, null]], timestamp: 1763700000000}" \
        in lines
    again = loads_policy(text)
    assert again == policy and dump_policy(again) == text


def test_examples_built_in_python_dump_like_loaded_ones():
    rule = Rule(id="amount", kind="field_range", params={"field": "amount", "min": 0},
                examples=Examples(passing=(Example(value={"amount": 1}, headers={"h": "v"}),),
                                  failing=(Example(value={"amount": -1}),)))
    text = dump_policy(Policy(name="p", value=Format(format="json"), rules=(rule,)))
    assert loads_policy(text).rule("amount") == rule
    with pytest.raises(PolicyError, match="value format is bytes, so the record's value is text"):
        dump_policy(Policy(name="p", rules=(rule,)))  # checked on the way out too
    assert Rule(id="r", kind="key_required", examples=Examples()).examples is None


def test_content_hash_ignores_examples_and_diff_reports_them():
    policy = loads_policy(POLICY)
    bare = policy.with_rules([r.without_examples() for r in policy.rules])
    assert policy.content_hash() == bare.content_hash()
    d = diff(bare, policy)
    assert not d  # the two behave the same: the diff agrees with the hash ...
    assert d.examples_changed == ("amount", "json")  # ... but says what changed
    assert d.summary() == "changed examples of rules: amount, json"
    assert diff(policy, policy).summary() == "no changes"
    # a behaviour change is still one, with or without examples
    changed = policy.with_rules([replace(policy.rules[0], params={"field": "amount", "min": 1}),
                                 policy.rules[1]])
    assert diff(policy, changed) and policy.content_hash() != changed.content_hash()


def test_examples_validate_against_the_json_schema():
    validator = Draft202012Validator(json_schema())
    data = policy_to_dict(loads_policy(POLICY))
    assert list(validator.iter_errors(data)) == []
    data["rules"][0]["examples"]["pass"][0]["timestamp"] = "tomorrow"
    assert list(validator.iter_errors(data)) != []


@pytest.mark.parametrize(("snippet", "key", "needle"), [
    ("examples: {}", "rules[0].examples",
     "examples without pass or fail test nothing"),
    ("examples: {pass: []}", "rules[0].examples", "examples are empty"),
    ("examples: {pass: {value: x}}", "rules[0].examples.pass",
     "expected a list of example records, got a mapping"),
    ("examples: {passes: [{value: x}]}", "rules[0].examples.passes",
     "unknown key 'passes' in examples — did you mean 'pass'?"),
    ("examples: {pass: [x]}", "rules[0].examples.pass[0]",
     "expected a mapping of example record keys"),
    ("examples: {pass: [{value: 5}]}", "rules[0].examples.pass[0].value",
     "the policy's value format is string, so the record's value is text, got 5 — quote it: "
     "value: '5'"),
    ("examples: {pass: [{value: x, headers: [[a]]}]}", "rules[0].examples.pass[0].headers[0]",
     "expected a [name, value] pair"),
    ("examples: {pass: [{value: x, headers: {a: 1}}]}", "rules[0].examples.pass[0].headers.a",
     "header values are text (or null), got 1 — quote it: a: '1'"),
    ("examples: {pass: [{value: x, schema_id: 3}]}", "rules[0].examples.pass[0].schema_id",
     "schema_id frames the value in the Confluent wire format"),
    ("examples: {pass: [{value: x, timestamp: now-3y}]}", "rules[0].examples.pass[0].timestamp",
     "is neither epoch milliseconds nor relative to now"),
    ("examples: {pass: [{value: x, timestamp: -1}]}", "rules[0].examples.pass[0].timestamp",
     "is neither epoch milliseconds nor relative to now"),
])
def test_malformed_examples_name_file_line_and_key(snippet, key, needle):
    text = ("kqlab: 1\nname: p\nvalue: {format: string}\nrules:\n"
            f"- id: r\n  kind: value_size\n  max: 10\n  {snippet}\n")
    with pytest.raises(PolicyError) as info:
        loads_policy(text, source="p.yaml")
    err = info.value
    assert err.key == key, str(err)
    assert needle in err.reason, str(err)
    assert err.line == 8 and str(err).startswith(f"p.yaml:8: {key}: ")
