"""``kqlab test``: golden examples run through the real validator (per rule pass/fail)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kqlab.cli import main
from kqlab.policy import load_policy, loads_policy
from kqlab.policy.model import Example
from kqlab.sources import demo_topics
from kqlab.sources.demo import demo_policy_path
from kqlab.validate.golden import ExampleError, check_examples, encode_example

NOW = 1_763_700_000_000
SHIPPED = [demo_policy_path(), demo_topics.policy_path("orders"),
           demo_topics.policy_path("clicks")]
GOOD_CORPUS = Path(__file__).parents[1] / "policy" / "corpus" / "good" / "examples.yaml"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: Path(str(p)).stem)
def test_shipped_demo_policies_pass_their_own_examples(path):
    demo_topics.register_schemas()
    policy = load_policy(str(path))
    report = check_examples(policy, now=NOW)
    assert report.ok, report.render()
    tested = {r.rule for r in report.rules}
    assert len(tested) >= 3
    # every example of every rule ran, and each fail example names its rule's message
    assert report.examples == sum(len(r.examples) for r in policy.rules if r.examples)
    for r in report.rules:
        for e in r.examples:
            if e.expect == "fail":
                assert (r.rule, e.message.split(": ", 1)[1]) in e.failures


def test_a_wrong_example_fails_with_the_reason():
    policy = loads_policy("""
kqlab: 1
name: p
value: {format: json}
rules:
- id: status
  kind: field_in
  field: status
  values: [NEW, PAID]
  examples:
    pass: [{value: {status: NEW}}, {name: typo, value: {status: NEU}}]
    fail: [{value: {status: GONE}}, {name: wrongly expected, value: {status: PAID}}]
- {id: sized, kind: value_size, max: 16, mode: observe}
""")
    report = check_examples(policy, now=NOW)
    assert not report.ok
    assert [e.label for e in report.failed] == ["status pass[1] (typo)",
                                                "status fail[1] (wrongly expected)"]
    typo, wrong = report.failed
    assert typo.message == ('expected rule status to accept this record; it rejected it: '
                            'status="NEU" is not one of the allowed values')
    assert typo.outcome == "rejected"
    # the other rules' findings are context: the observe rule flags the longer values
    assert wrong.message == ("expected rule status to reject this record; it accepted it "
                             "(record accepted; other failures: sized: value size 17 bytes is "
                             "outside [0, 16])")
    doc = report.to_dict()
    assert (doc["ok"], doc["examples"], doc["failed"]) == (False, 4, 2)
    assert json.loads(json.dumps(doc)) == doc


def test_examples_cover_headers_timestamps_and_broker_checks():
    report = check_examples(load_policy(GOOD_CORPUS), now=NOW)
    assert report.ok, report.render()
    # 25 h ahead: the broker's own check (4.0's one-hour default) rejects it too, as context
    late = report.rule("recent").examples[2]
    assert late.expect == "fail" and late.ok
    assert [r for r, _ in late.failures] == ["broker:R4", "recent"]
    assert report.rule("recent").examples[0].outcome == "accepted"


def test_avro_examples_are_encoded_with_the_registered_schema():
    ids = demo_topics.register_schemas()
    policy = demo_topics.load_policies()["orders"]
    datum = {"order_id": "o-1", "customer_id": None, "amount": 1.0, "currency": "EUR",
             "status": "NEW", "created_at": NOW}
    row = encode_example(policy, Example(value=datum), now=NOW)
    assert row["value"][:5] == b"\x00" + ids["v2"].to_bytes(4, "big")  # the latest version
    row = encode_example(policy, Example(value=datum, schema_id=ids["v1"]), now=NOW)
    assert row["value"][:5] == b"\x00" + ids["v1"].to_bytes(4, "big")
    with pytest.raises(ExampleError, match="does not fit Avro schema"):
        encode_example(policy, Example(value={"order_id": 5}), now=NOW)


def test_an_example_that_cannot_be_built_is_an_error_and_the_rest_still_run():
    demo_topics.register_schemas()
    text = demo_topics.policy_path("orders").read_text().replace(
        "- {name: customer_id null, key: order-00002, value: {order_id: o-0000001,",
        "- {name: not an order, key: order-00002, value: {amount: nope}}\n"
        "    - {name: customer_id null, key: order-00002, value: {order_id: o-0000001,")
    policy = loads_policy(text)
    report = check_examples(policy, now=NOW)
    assert [e.label for e in report.failed] == ["customer-present fail[0] (not an order)"]
    bad = report.failed[0]
    assert bad.error and bad.outcome is None
    assert bad.message.startswith("cannot build the record: the value does not fit Avro schema")
    assert report.examples == 13


def test_relative_timestamps_follow_the_clock():
    policy = loads_policy("kqlab: 1\nname: p\n")
    rows = [encode_example(policy, Example(timestamp=t), now=NOW)["timestamp"]
            for t in ("now", "now-8d", "now+2h", "now-90s", "now+5ms", 17)]
    assert rows == [NOW, NOW - 8 * 86_400_000, NOW + 7_200_000, NOW - 90_000, NOW + 5, 17]


def test_a_policy_without_examples_tests_nothing():
    report = check_examples(loads_policy("kqlab: 1\nname: p\nrules: [{id: k, kind: key_required}]"),
                            now=NOW)
    assert report.ok and report.examples == 0
    assert "no golden examples" in report.notes[0]


def test_cli_test_exit_codes(tmp_path, capsys):
    assert main(["test", str(demo_policy_path()), "--now", str(NOW)]) == 0
    assert "all examples behave" in capsys.readouterr().out
    # a fresh process knows how to fill the demo's in-memory registry (orders are Avro)
    assert main(["test", str(demo_topics.policy_path("orders")), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    broken = tmp_path / "broken.yaml"
    broken.write_text(Path(str(demo_policy_path())).read_text().replace(
        "{name: zero, key: order-00017, value: {id: 17, status: PAID, amount: 0,",
        "{name: zero, key: order-00017, value: {id: 17, status: PAID, amount: 1,"))
    assert main(["test", str(broken), "--now", str(NOW)]) == 1
    out = capsys.readouterr().out
    assert "FAIL amount-positive" in out and "fail[1] (zero): expected rule amount-positive " \
        "to reject this record; it accepted it" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("kqlab: 1\nname: p\nrules: [{id: r, kind: key_required, examples: {}}]\n")
    assert main(["test", str(bad)]) == 2
    assert "bad.yaml:3: rules[0].examples: examples without pass or fail" in \
        capsys.readouterr().err


DECIMAL_ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10,
                                "scale": 2}},
    {"name": "tip", "type": ["null", {"type": "bytes", "logicalType": "decimal",
                                      "precision": 6, "scale": 2}], "default": None}]}


def _decimal_policy(folder: Path) -> str:
    schemas = f"{{path: '{folder}'}}"
    return f"""
kqlab: 1
name: decimals
value: {{format: avro, wire: confluent, schemas: {schemas}}}
rules:
- id: amount-positive
  kind: field_range
  field: amount
  min: 0.01
  examples:
    pass: [{{value: {{id: a, amount: 25.5, tip: 1}}}}, {{value: {{id: b, amount: '0.01'}}}}]
    fail: [{{value: {{id: c, amount: -3.25, tip: null}}, name: negative}}]
"""


def test_avro_decimal_examples_from_a_schema_folder_need_no_schema_id(tmp_path):
    """An Avro ``decimal`` written in YAML as a number (or numeric text) is encoded as the
    Decimal it says — not refused with "a bytes-like object is required, not 'float'" — and
    a folder of ``<id>.avsc`` files frames examples with its latest (highest) id."""
    folder = tmp_path / "schemas"
    folder.mkdir()
    old = {**DECIMAL_ORDER, "fields": DECIMAL_ORDER["fields"][:2]}
    (folder / "3.avsc").write_text(json.dumps(old))
    (folder / "7.avsc").write_text(json.dumps(DECIMAL_ORDER))
    policy = loads_policy(_decimal_policy(folder))
    row = encode_example(policy, policy.rules[0].examples.passing[0], now=NOW)
    assert row["value"][:5] == b"\x00" + (7).to_bytes(4, "big")
    report = check_examples(policy, now=NOW)
    assert report.ok, report.render()
    assert report.examples == 3 and not any(e.error for r in report.rules for e in r.examples)
    negative = report.rule("amount-positive").examples[2]
    assert negative.outcome == "rejected" and negative.failures[0][0] == "amount-positive"
    # more places than the schema's scale: an error naming it, never a silent rounding
    with pytest.raises(ExampleError, match="does not fit Avro schema 7"):
        encode_example(policy, Example(value={"id": "d", "amount": 1.005}), now=NOW)
    # an explicit schema_id still wins
    row = encode_example(policy, Example(value={"id": "e", "amount": 2}, schema_id=3), now=NOW)
    assert row["value"][:5] == b"\x00" + (3).to_bytes(4, "big")

