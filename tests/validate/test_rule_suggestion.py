"""Rule suggestions: deterministic, rated by the real validator, derived from data and schema."""

from __future__ import annotations

import io
import json
import uuid
from decimal import Decimal

import fastavro
import pyarrow as pa
import pytest

from kqlab.cli import main
from kqlab.policy import dump_policy, load_policy, loads_policy
from kqlab.policy.rule_checks import RULE_ID
from kqlab.records import RECORDS_SCHEMA
from kqlab.sources import demo_topics
from kqlab.sources.demo import demo_policy_path, write_demo_segment
from kqlab.validate import Replayer
from kqlab.validate.rule_suggestion import suggest
from kqlab.validate.suggestions import Suggestions, suggestion_id

NOW = 1_763_700_000_000


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    folder = write_demo_segment(tmp_path_factory.mktemp("demo"), NOW)
    return folder, load_policy(str(demo_policy_path()))


@pytest.fixture(scope="module")
def found(demo):
    folder, policy = demo
    return suggest(folder, policy, now=NOW)


def _value_at(folder, offset):
    from kqlab.kafka.log import read_log

    records = read_log(folder).records
    i = records.column("offset").to_pylist().index(offset)
    return records.column("value")[i].as_py(), records.column("key")[i].as_py()


def test_suggestions_are_deterministic(demo, found):
    folder, policy = demo
    again = suggest(folder, policy, now=NOW)
    assert again.to_dict() == found.to_dict()
    assert json.dumps(found.to_dict())  # plain data
    assert found.ids == tuple(s.rule.id for s in found)


def test_rates_are_the_validators_own(demo, found):
    """Accepting every suggestion and replaying gives, per rule, the counts suggest reported."""
    folder, policy = demo
    accepted = found.accept(policy.with_rules([]))
    verdicts = Replayer(folder, now=NOW).run(accepted)
    by_rule = {r["rule"]: r["failed_records"] for r in verdicts.rules.to_pylist()}
    assert {s.id: s.rejected for s in found} == {i: by_rule[i] for i in found.ids}
    assert sum(s.rejected for s in found) > 0


def test_the_planted_demo_faults_are_what_suggestions_reject(demo, found):
    folder, _ = demo
    size = found["suggest.value_size"]
    assert size.rule.param("max") == 128 and size.rejected == 1
    assert len(_value_at(folder, size.examples[0].offset)[0]) == 70_000
    amount = found["suggest.field_range.amount"]
    assert (amount.rule.param("min"), amount.rule.param("max")) == (0, 1000)
    assert [json.loads(_value_at(folder, e.offset)[0])["amount"] for e in amount.examples] \
        == [-4.99]
    # the policy's status-known allows these very values: not proposed again ...
    assert "suggest.field_in.status" not in found.ids
    assert {d.id: d.rule for d in found.duplicates}["suggest.field_in.status"] == "status-known"
    # ... but proposed from the same sample without the policy's rules
    status = suggest(folder, demo[1].with_rules([]), now=NOW)["suggest.field_in.status"]
    assert status.rule.param("values") == ("CANCELLED", "NEW", "PAID", "SHIPPED")
    assert b'"REFUNDED"' in _value_at(folder, status.examples[0].offset)[0]
    assert [(v.value, v.count) for v in status.left_out] == [("REFUNDED", 1)]
    key = found["suggest.key_required"]
    assert key.rejected == 1 and _value_at(folder, key.examples[0].offset)[1] is None
    assert key.examples[0].message == "record has no key"
    assert 0 < key.rejection_rate == key.rejected / found.records < 0.01
    # the ids never grow an upper bound; every rule id is a legal, prefixed rule id
    assert "max" not in found["suggest.field_range.id"].rule.params
    assert all(RULE_ID.match(i) and i.startswith("suggest.") for i in found.ids)
    kinds = [s.rule.kind for s in found]
    assert kinds.index("key_required") < kinds.index("header_required") < \
        kinds.index("value_size") < kinds.index("field_not_null")


def test_max_rejection_drops_sample_rules_that_reject_more(demo, found):
    folder, policy = demo
    strict = suggest(folder, policy, now=NOW, max_rejection=0.0)
    assert strict.ids and all(s.rejected == 0 for s in strict)
    assert set(strict.ids) < set(found.ids)
    assert all(s.rejection_rate <= 0.01 for s in found if s.source == "sample")
    few = suggest(folder, policy, now=NOW, max_examples=1)
    assert max(len(s.examples) for s in few) == 1
    with pytest.raises(ValueError, match="max_rejection"):
        suggest(folder, policy, max_rejection=2)


def test_accepted_suggestions_are_normal_rules_that_round_trip(demo, found):
    _, policy = demo
    accepted = found.accept(policy, ["suggest.field_range.amount", "suggest.key_required"])
    assert [r.id for r in accepted.rules][-2:] == ["suggest.key_required",
                                                   "suggest.field_range.amount"]
    assert found.accept(accepted, ["suggest.key_required"]) == accepted  # already there
    text = dump_policy(found.accept(policy))
    assert loads_policy(text) == found.accept(policy)
    with pytest.raises(KeyError, match="no suggestion 'nope'"):
        found.accept(policy, ["nope"])
    assert found.by_rate()[0].rejection_rate == max(s.rejection_rate for s in found)


def test_avro_topic_suggestions_include_schema_ids_and_the_registered_schema(tmp_path):
    demo = demo_topics.generate(tmp_path, NOW)
    policy = demo_topics.load_policies()["orders"]
    got = suggest(demo.folders["orders-0"], policy, now=NOW)
    v1, v2 = demo.schema_ids["v1"], demo.schema_ids["v2"]
    allowed = got["suggest.schema_id_allowed"]
    assert allowed.rule.param("ids") == (v1, v2)
    # the policy's own schema-registered rule checks that already: not proposed again
    assert {d.id: d.rule for d in got.duplicates}["suggest.schema_id_registered"] == \
        "schema-registered"
    registered = suggest(demo.folders["orders-0"], policy.with_rules([]), now=NOW)[
        "suggest.schema_id_registered"]
    assert registered.rule.param("subject") == "orders-value"
    assert [e.message for e in registered.examples] == ["schema id 4243 is not registered"]
    # the unregistered id is left out of the allowed ids, and the suggestion says why
    assert [(v.value, v.count) for v in allowed.left_out] == [("4243", 1)]
    assert got["suggest.field_not_null.order_id"].source == "schema+sample"
    assert got["suggest.field_type.amount"].source == "schema"
    assert "suggest.field_type.customer_id" not in got.ids  # nullable: no single type
    negative = got["suggest.field_range.amount"]
    assert negative.rejected == 3 and all("amount=-" in e.message for e in negative.examples)


def _avro_table(schema: dict, datums: list[dict]) -> pa.Table:
    parsed = fastavro.parse_schema(schema)
    rows = []
    for i, d in enumerate(datums):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, d)
        rows.append({"topic": "t", "partition": 0, "offset": i, "timestamp": NOW,
                     "timestamp_type": 0, "key": b"k", "value": buf.getvalue(),
                     "headers": [], "batch_offset": i, "batch_index": 0})
    return pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA)


def test_rules_derived_from_the_schema_types_enums_and_logical_types(tmp_path):
    schema = {"type": "record", "name": "Payment", "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["OK", "KO"]}},
        {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6,
                                   "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "memo", "type": ["null", "string"], "default": None},
        {"name": "card", "type": {"type": "record", "name": "Card", "fields": [
            {"name": "last4", "type": "int"}]}},
    ]}
    (tmp_path / "payment.avsc").write_text(json.dumps(schema))
    datums = [{"id": str(uuid.UUID(int=i)), "state": "OK" if i % 3 else "KO",
               "total": Decimal(f"{i}.25"), "at": NOW + i, "memo": None,
               "card": {"last4": 1000 + i}} for i in range(50)]
    policy = loads_policy(f"kqlab: 1\nname: p\nvalue: {{format: avro, schemas: {{path: "
                          f"'{tmp_path / 'payment.avsc'}'}}}}\n")
    got = suggest(_avro_table(schema, datums), policy, now=NOW)
    rules = {s.id: (s.source, s.rule.params, s.rejected) for s in got}
    assert rules["suggest.field_regex.id"][0] == "schema"
    # the sample sees the same set: the schema's order and word win
    assert rules["suggest.field_in.state"][:2] == ("schema+sample", {"field": "state",
                                                                    "values": ("OK", "KO")})
    assert rules["suggest.field_range.total"][1] == {"field": "total", "min": -10_000,
                                                     "max": 10_000}
    assert rules["suggest.field_type.total"][1]["type"] == "number"
    assert rules["suggest.field_type.card"][1]["type"] == "object"
    assert rules["suggest.field_type.card.last4"][1]["type"] == "integer"
    assert rules["suggest.field_not_null.at"][0] == "schema+sample"
    assert "suggest.field_type.at" not in rules  # a timestamp has no JSON type
    assert "suggest.field_not_null.memo" not in rules  # always null here, and nullable
    assert all(rejected == 0 for _, _, rejected in rules.values())


def test_schema_rules_keep_their_rate_even_above_the_threshold():
    """The latest schema is the contract: data written with an older one is measured against
    it, however much of the sample that rejects."""
    from confluent_kafka.schema_registry import Schema

    from kqlab.serde.schemas import registry_client

    v1 = {"type": "record", "name": "R", "fields": [{"name": "kind", "type": "string"}]}
    v2 = {"type": "record", "name": "R", "fields": [
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A"]}}]}
    client = registry_client("mock://suggest-schema-rate")
    id1 = client.register_schema("r-value", Schema(json.dumps(v1), "AVRO"))
    client.register_schema("r-value", Schema(json.dumps(v2), "AVRO"))
    table = _avro_table(v1, [{"kind": "B"}] * 3 + [{"kind": "A"}])
    framed = pa.array([b"\x00" + id1.to_bytes(4, "big") + v for v in
                       table.column("value").to_pylist()], pa.binary())
    table = table.set_column(table.schema.get_field_index("value"), "value", framed)
    policy = loads_policy("kqlab: 1\nname: p\nvalue: {format: avro, wire: confluent, schemas: "
                          "{registry: 'mock://suggest-schema-rate', subject: r-value}}\n")
    got = suggest(table, policy, now=NOW)
    enum = got["suggest.field_in.kind"]
    assert enum.source == "schema+sample" and enum.rule.param("values") == ("A",)
    assert enum.rejected == 3 and enum.rejection_rate == 0.75


def test_snapshots_and_tables_give_the_same_suggestions(demo, found, tmp_path):
    from kqlab.kafka.log import read_log
    from kqlab.sources.segments import snapshot_from_segments

    folder, policy = demo
    snap = snapshot_from_segments(folder, tmp_path / "snap")
    assert suggest(snap.path, policy, now=NOW).to_dict() == found.to_dict()
    log = read_log(folder)
    # a raw records table has no batches to say which records are transaction markers: the
    # replay (one record per rebuilt batch) judges the 2 markers as data, without headers
    table = suggest(log.records, policy, now=NOW)
    assert table.records == found.records == log.records.num_rows == 352
    assert table.settings["framing"] == "reconstructed:single"
    assert found.settings["framing"] == "exact"
    source = "suggest.header_required.source"
    assert table[source].failed == found[source].failed + 2


def test_empty_sample_and_helpers():
    empty = suggest(RECORDS_SCHEMA.empty_table(), None, now=NOW)
    assert isinstance(empty, Suggestions) and len(empty) == 0 and empty.records == 0
    assert suggestion_id("field_in", "a.b") == "suggest.field_in.a.b"
    assert suggestion_id("field_in", "A") != suggestion_id("field_in", "a")


def test_cli_suggest_json_text_and_write(demo, tmp_path, capsys):
    folder, _ = demo
    policy = str(demo_policy_path())
    assert main(["suggest", str(folder), "--policy", policy, "--now", str(NOW), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ids = [s["id"] for s in doc["suggestions"]]
    # the records the replay judges (transaction markers included), as kqlab replay says
    assert "suggest.value_size" in ids and doc["records"] == 352
    out = tmp_path / "suggested.yaml"
    assert main(["suggest", str(folder), "--policy", policy, "--now", str(NOW),
                 "--write", str(out)]) == 0
    text = capsys.readouterr().out
    assert "would reject orders-0@" in text and "suggest.field_range.amount" in text
    assert [r.id for r in load_policy(out).rules][-len(ids):] == ids


# -- regressions (issue 16): counts from the replay, no duplicates, rare values left out ---------
def test_rules_the_policy_already_has_are_not_proposed_again(demo, found):
    """The demo policy checks trace-id, the status set and the currency's presence: the
    sample suggests the same checks, which are listed as duplicates, not proposed."""
    folder, policy = demo
    dup = {d.id: d.rule for d in found.duplicates}
    assert dup == {"suggest.header_required.trace-id": "trace-id",
                   "suggest.field_in.status": "status-known",
                   "suggest.field_not_null.currency": "has-currency"}
    assert not set(dup) & set(found.ids)
    written = found.accept(policy)
    from kqlab.validate.suggestions import equivalent

    rules = written.rules
    assert not [(a.id, b.id) for i, a in enumerate(rules) for b in rules[i + 1:]
                if equivalent(a, b)]
    # a second round on the written policy proposes nothing new
    again = suggest(folder, written, now=NOW)
    assert again.ids == () and {d.rule for d in again.duplicates} >= set(found.ids)


def test_a_value_carried_by_one_percent_is_left_out_of_the_value_set():
    """A planted defect on 1 % of the records (10 of 1000 say REFUNDED) recurs often enough
    for min_support, but a value set allows only values on at least min_share (2 %) of the
    records: REFUNDED is left out, listed with why, and the rule rejects exactly those 10."""
    statuses = ["NEW", "PAID", "SHIPPED", "CANCELLED"]
    rows = [{"topic": "t", "partition": 0, "offset": i, "timestamp": NOW, "timestamp_type": 0,
             "key": b"k%d" % i, "batch_offset": i, "batch_index": 0, "headers": [],
             "value": json.dumps({"status": "REFUNDED" if i % 100 == 7 else
                                  statuses[i % 4]}).encode()} for i in range(1000)]
    policy = loads_policy("kqlab: 1\nname: p\nvalue: {format: json}")
    got = suggest(pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA), policy, now=NOW)
    status = got["suggest.field_in.status"]
    assert status.rule.param("values") == ("CANCELLED", "NEW", "PAID", "SHIPPED")
    assert [(v.value, v.count) for v in status.left_out] == [("REFUNDED", 10)]
    assert status.left_out[0].reason == "carried by 1 % of the 1000 values (less than 2 %)"
    assert "left out as rare: 'REFUNDED' (carried by 1 %" in status.evidence
    assert status.rejected == status.failed == 10
    assert {e.offset for e in status.examples} <= {i for i in range(1000) if i % 100 == 7}
    # a lower threshold allows it again (the threshold is the caller's)
    loose = suggest(pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA), policy, now=NOW,
                    min_share=0.005)["suggest.field_in.status"]
    assert "REFUNDED" in loose.rule.param("values") and loose.rejected == 0
    with pytest.raises(ValueError, match="min_share"):
        suggest(pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA), policy, min_share=2)


def _orders_logdir(tmp_path):
    """The demo topics' orders partitions as one log directory (docs/demo-defects.md)."""
    demo = demo_topics.generate(tmp_path / "segments", NOW)
    logdir = tmp_path / "orders-logdir"
    logdir.mkdir()
    for name, folder in demo.folders.items():
        if name.startswith("orders-"):
            (logdir / name).symlink_to(folder.resolve(), target_is_directory=True)
    return demo, logdir


def test_suggest_counts_are_the_replays_on_a_log_directory(tmp_path, capsys):
    """kqlab suggest reads a log directory as replay does, and every number it prints is the
    one kqlab replay prints for the written policy: records, outcomes, per rule failed /
    rejected / evaluation errors."""
    demo, logdir = _orders_logdir(tmp_path)
    policy = str(tmp_path / "orders.yaml")
    from kqlab.policy import save_policy

    save_policy(demo_topics.load_policies()["orders"], policy)
    out = tmp_path / "suggested.yaml"
    assert main(["suggest", str(logdir), "--policy", policy, "--now", str(NOW), "--json",
                 "--write", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["replay", str(logdir), "--policy", str(out), "--now", str(NOW), "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert doc["records"] == replayed["records"] == sum(
        n for k, (n, _) in demo.truth.partitions.items() if k.startswith("orders"))
    assert doc["outcomes"] == replayed["outcomes"]
    by_rule = {r["rule"]: r for r in replayed["by_rule"]}
    assert doc["suggestions"], "the orders topic yields suggestions"
    for s in doc["suggestions"]:
        r = by_rule[s["id"]]
        assert (s["failed"], s["rejected"], s["evaluation_errors"]) == (
            r["failed_records"], r["rejected_records"], r["evaluation_errors"]), s["id"]
    # the policy alone, replayed, is the baseline suggest reports
    assert main(["replay", str(logdir), "--policy", policy, "--now", str(NOW), "--json"]) == 0
    assert doc["baseline"] == json.loads(capsys.readouterr().out)["outcomes"]
    # the planted negative amounts (orders.out_of_range, 9 records) fail the suggested range
    amount = next(s for s in doc["suggestions"] if s["id"] == "suggest.field_range.amount")
    assert amount["failed"] == demo.truth.defects["orders.out_of_range"].records == 9


def test_left_out_values_are_listed_short(tmp_path):
    """orders-1 carries the planted ``orders.oversize`` defect: two ~70 KB notes among the
    'gift wrap' ones. The note's value set leaves both out, listed cut to a label's length."""
    demo = demo_topics.generate(tmp_path, NOW)
    got = suggest(demo.folders["orders-1"], demo_topics.load_policies()["orders"], now=NOW)
    note = got["suggest.field_in.note"]
    assert note.rule.param("values") == ("gift wrap",)
    assert len(note.left_out) == demo.truth.defects["orders.oversize"].records == 2
    assert all(v.value.endswith("… (70,000 characters)") and len(v.value) < 90
               for v in note.left_out)
    assert note.failed == 2 and len(note.evidence) < 400
    assert len(json.dumps(got.to_dict())) < 60_000  # no 70 KB value in the document
