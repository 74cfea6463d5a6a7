"""Loading and dumping: canonical output, byte-identical round trips, hash invariance."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqlab.errors import KqlabError
from kqlab.policy import (
    BrokerSettings,
    Format,
    Policy,
    PolicyError,
    Provenance,
    Rule,
    SchemaSource,
    Topics,
    dump_policy,
    load_policy,
    loads_policy,
    policy_from_dict,
    policy_to_dict,
    save_policy,
)

CORPUS = Path(__file__).parent / "corpus"
ORDERS = CORPUS / "good" / "orders.yaml"

HAND_WRITTEN = """\
# a comment that must not matter
name: orders      # trailing comment
kqlab: 1
rules:
  - {kind: field_range, max: 10, id: amount, field: amount}
  - id: key
    mode: observe
    kind: key_required
    allow_empty: true
"""
CANONICAL = """\
kqlab: 1
name: orders
rules:
- id: amount
  kind: field_range
  field: amount
  max: 10
- id: key
  kind: key_required
  mode: observe
"""


def full_policy() -> Policy:
    return Policy(
        name="orders-quality",
        description="Orders must carry a key.",
        owner="team@example.com",
        topics=Topics(names=("orders",), patterns=("orders-.*",)),
        broker=BrokerSettings(version="3.9", configs={"cleanup.policy": "compact",
                                              "max.message.bytes": 2097152}),
        enforcement="kip-686",
        key=Format(format="string"),
        value=Format(format="avro", wire="confluent",
                     schemas=SchemaSource(registry="mock://orders", subject="orders-value")),
        rules=(
            Rule(id="key-present", kind="key_required", message="orders need a key"),
            Rule(id="amount", kind="field_range", params={"field": "amount", "min": 0,
                                                          "max": 100000}, severity="warning"),
            Rule(id="sku", kind="field_regex", params={"field": "sku", "pattern": r"^\d+$"},
                 when="value != null", mode="observe"),
        ),
        provenance=Provenance(sample={"topic": "orders", "partitions": [0, 1]}, records=1000,
                              batches=60, rejected_records=12, vetted_at="2026-11-21"),
    )


def test_dump_load_dump_is_byte_identical():
    text = dump_policy(full_policy())
    assert loads_policy(text) == full_policy()
    assert dump_policy(loads_policy(text)) == text


def test_hand_written_file_becomes_canonical():
    assert dump_policy(loads_policy(HAND_WRITTEN)) == CANONICAL


def test_hand_written_corpus_file_matches_its_golden_canonical_form():
    expected = (CORPUS / "orders.canonical.yaml").read_text(encoding="utf-8")
    assert dump_policy(load_policy(ORDERS)) == expected


def test_dump_has_fixed_key_order_and_no_defaults():
    text = dump_policy(full_policy())
    top = [line.split(":")[0] for line in text.splitlines() if line and line[0].isalpha()]
    assert top == ["kqlab", "name", "description", "owner", "topics", "broker", "enforcement",
                   "key", "value", "rules", "provenance"]
    assert "severity: error" not in text and "mode: reject" not in text
    minimal = dump_policy(Policy(name="m"))
    assert minimal == "kqlab: 1\nname: m\n"


def test_save_and_load(tmp_path):
    path = save_policy(full_policy(), tmp_path / "orders.yaml")
    assert load_policy(path) == full_policy()
    assert path.read_text(encoding="utf-8") == dump_policy(full_policy())


def test_policy_to_dict_and_back():
    data = policy_to_dict(full_policy())
    assert data["kqlab"] == 1
    assert data["rules"][1] == {"id": "amount", "kind": "field_range", "field": "amount",
                                "min": 0, "max": 100000, "severity": "warning"}
    assert policy_from_dict(data) == full_policy()


def test_policy_from_dict_errors_name_the_source_and_key():
    data = policy_to_dict(full_policy())
    data["rules"][1]["max"] = "lots"
    with pytest.raises(PolicyError) as info:
        policy_from_dict(data, source="api")
    assert str(info.value).startswith("api: rules[1].max: expected a number, got 'lots'")
    assert info.value.line is None


def test_dump_refuses_a_policy_that_would_not_load():
    bad = Policy(name="x", rules=(Rule(id="a", kind="field_range", params={"max": 1}),))
    with pytest.raises(PolicyError, match="a field_range rule needs field"):
        dump_policy(bad)


def test_explicit_defaults_are_dropped_and_params_ordered():
    rule = Rule(id="k", kind="value_size", params={"max": 10, "min": 0})
    assert policy_to_dict(Policy(name="p", rules=(rule,)))["rules"] == [
        {"id": "k", "kind": "value_size", "max": 10}]
    loaded = loads_policy("kqlab: 1\nname: p\nrules: [{id: k, kind: value_size, max: 10, "
                          "min: 0}]\n")
    assert dict(loaded.rules[0].params) == {"max": 10}
    assert loaded.rules[0].param("min") == 0


def test_text_fields_are_trimmed_and_dates_stay_text():
    policy = loads_policy("kqlab: 1\nname: p\ndescription: >\n  folded\n  text\n"
                          "provenance: {vetted_at: 2026-11-21}\n")
    assert policy.description == "folded text"
    assert policy.provenance.vetted_at == "2026-11-21"


# ---------------------------------------------------------------------------- content hash
def test_content_hash_ignores_formatting_comments_order_and_provenance():
    base = loads_policy(HAND_WRITTEN)
    reordered = loads_policy("""\
kqlab: 1
name: orders
rules:
- kind: field_range
  field: amount
  id: amount
  max: 10
- {kind: key_required, mode: observe, id: key}   # allow_empty default left out
provenance: {records: 5, vetted_at: '2026-01-01'}
""")
    assert reordered.content_hash() == base.content_hash()
    assert loads_policy(dump_policy(base)).content_hash() == base.content_hash()
    assert base.content_hash().startswith("sha256:") and len(base.content_hash()) == 71


def test_content_hash_ignores_broker_config_order():
    a = Policy(name="p", broker=BrokerSettings(configs={"cleanup.policy": "compact",
                                                "max.message.bytes": 10}))
    b = Policy(name="p", broker=BrokerSettings(configs={"max.message.bytes": 10,
                                                "cleanup.policy": "compact"}))
    assert a.content_hash() == b.content_hash()
    assert dump_policy(a) == dump_policy(b)


@pytest.mark.parametrize("edit", [
    ("max: 10", "max: 11"),
    ("mode: observe", "mode: reject"),
    ("name: orders ", "name: other "),
    ("field: amount", "field: total"),
])
def test_content_hash_changes_with_content(edit):
    changed = HAND_WRITTEN.replace(*edit)
    assert changed != HAND_WRITTEN
    assert loads_policy(changed).content_hash() != loads_policy(HAND_WRITTEN).content_hash()


def test_content_hash_changes_with_rule_order():
    policy = loads_policy(HAND_WRITTEN)
    swapped = policy.with_rules(policy.rules[::-1])
    assert swapped.content_hash() != policy.content_hash()


# ---------------------------------------------------------------------------- PolicyError
def test_policy_error_is_a_kqlab_value_error_with_fields():
    with pytest.raises(PolicyError) as info:
        loads_policy("kqlab: 1\nname: p\nrules:\n  - {id: a, kind: field_range, field: x, "
                     "min: ten}\n", source="orders.yaml")
    err = info.value
    assert isinstance(err, KqlabError) and isinstance(err, ValueError)
    assert (err.file, err.line, err.key) == ("orders.yaml", 4, "rules[0].min")
    assert err.column is not None and err.column > 1
    assert err.reason == "expected a number, got 'ten' — write min: 10"
    assert str(err) == "orders.yaml:4: rules[0].min: expected a number, got 'ten' — write min: 10"


def test_policy_error_pickles():
    err = PolicyError("boom — fix it", file="a.yaml", line=3, column=5, key="rules[0].id")
    again = pickle.loads(pickle.dumps(err))
    assert (again.file, again.line, again.column, again.key, again.reason) == (
        "a.yaml", 3, 5, "rules[0].id", "boom — fix it")
    assert str(again) == str(err)


def test_not_utf8_file(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("kqlab: 1\nname: caf\xe9\n".encode("latin-1"))
    with pytest.raises(PolicyError, match="not UTF-8 text") as info:
        load_policy(path)
    assert "latin1.yaml" in str(info.value)


def test_control_characters():
    with pytest.raises(PolicyError, match=r"^c\.yaml:2: ") as info:
        loads_policy("kqlab: 1\nname: a\x07b\n", source="c.yaml")
    assert "control characters" in str(info.value)


def test_missing_file_is_not_a_policy_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_policy(tmp_path / "nope.yaml")


def test_unknown_rule_key_in_python_dict_is_reported():
    data = {"kqlab": 1, "name": "p", "rules": [{"id": "a", "kind": "key_required", 1: "x"}]}
    with pytest.raises(PolicyError, match="keys are names"):
        policy_from_dict(data)


# ------------------------------------------------------------------------- property tests
_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(message=_text.filter(lambda s: s.strip() == s), values=st.lists(_text, min_size=1,
                                                                        max_size=4),
       limit=st.integers(min_value=0, max_value=2**40))
def test_round_trip_of_arbitrary_text_and_numbers(message, values, limit):
    policy = Policy(name="p", rules=(
        Rule(id="a", kind="header_values", params={"name": "env", "values": values},
             message=message),
        Rule(id="b", kind="value_size", params={"max": limit}),
    ))
    text = dump_policy(policy)
    assert loads_policy(text) == policy
    assert dump_policy(loads_policy(text)) == text
