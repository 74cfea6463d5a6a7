"""Open Data Contract Standard v3: ``import(export(p)) == p``, the standard's own lint, and
contracts kqlab did not write.

The exported document is checked three ways: against the ODCS JSON Schema shipped in the
``open-data-contract-standard`` package, by ``datacontract lint`` (datacontract-cli, in a
virtualenv of its own that ``scripts/setup-datacontract`` creates on demand under
``~/.cache/kqlab``), and by reading it back into the identical policy.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.cli import main
from kqlab.export import export
from kqlab.export.odcs import API_VERSION, OdcsError, import_odcs
from kqlab.policy import KINDS, Policy, Rule, load_policy, loads_policy, policy_to_dict
from kqlab.policy.model import Format, SchemaSource
from kqlab.sources.demo import demo_policy_path

from .conftest import TODAY

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "policy" / "corpus" / "good"

#: every JSON-value rule kind, with the variants a rule can have (when, mode, severity,
#: message, description, examples, non-default parameters, ids ODCS ids cannot hold) and
#: every policy section (topics with patterns, broker, enforcement, masking, provenance)
EVERY_JSON_KIND = """\
kqlab: 1
name: every-kind.json
description: every rule kind that reads JSON values, with the variants a rule can have
owner: dq-team@example.com
topics: {names: [clicks, clicks-eu], patterns: ['clicks-.*']}
broker:
  version: '3.9'
  configs: {cleanup.policy: compact, max.message.bytes: 2097152,
            message.timestamp.before.max.ms: '86400000'}
enforcement: kip-686
key: {format: string}
value: {format: json}
sensitive: {fields: [user.email, user.address.zip], headers: [auth], key: true}
rules:
- {id: key, kind: key_required, allow_empty: false, message: a click needs a key}
- {id: value, kind: value_required, allow_tombstones: true}
- {id: key-size, kind: key_size, min: 1, max: 64, severity: warning}
- {id: value-size, kind: value_size, max: 4096, mode: observe}
- {id: headers-size, kind: headers_size, max: 1024}
- {id: record-size, kind: record_size, max: 8192}
- {id: trace, kind: header_required, name: traceparent}
- {id: source, kind: header_values, name: source, values: [web, app], required: true}
- {id: version.header, kind: header_pattern, name: schema-version, pattern: '^v[0-9]+$'}
- {id: unique-headers, kind: headers_unique, names: [traceparent]}
- {id: fresh, kind: timestamp_window, before_ms: 86400000, after_ms: 3600000}
- {id: batch-window, kind: timestamp_window, before_ms: 1000, relative_to: batch, severity: info}
- {id: decodes, kind: decodable}
- {id: json, kind: json_valid}
- id: shape
  kind: json_schema
  schema: {type: object, required: [type],
           properties: {type: {type: string}, n: {type: integer, minimum: 0}}}
- {id: user-id, kind: field_not_null, field: user.id}
- {id: amount, kind: field_range, field: amount, min: 0, max: 1000.5, allow_null: false}
- {id: type, kind: field_in, field: type, values: [click, view, 3, true]}
- {id: email, kind: field_regex, field: user.email, pattern: '^[^@]+@[^@]+$',
   when: "has(value.user)"}
- {id: page-len, kind: field_length, field: page, min: 1, max: 2048}
- {id: tags-len, kind: field_length, field: tags, max: 10}
- {id: page-type, kind: field_type, field: page, type: string}
- {id: n-type, kind: field_type, field: n, type: integer}
- {id: nothing, kind: field_type, field: deprecated, type: 'null', mode: observe}
- {id: zip, kind: field_regex, field: user.address.zip, pattern: '^[0-9]{5}$', allow_null: false}
- id: cel-headers
  kind: cel
  expr: "headers['source'] == 'web' || value.type == 'view'"
  description: web clicks or views
  when: "'source' in headers"
  examples:
    pass:
    - {key: k1, value: {type: view}, headers: {source: app}}
    fail:
    - {name: an app click, key: k2, value: {type: click, n: null},
       headers: {source: app, x: null}, timestamp: now-1h}
- {id: plugin, kind: plugin, callable: 'kqlab_plugins.fraud:check',
   options: {threshold: 0.9, lists: [a, b]}}
provenance:
  sample: {source: demo/clicks, partitions: [{topic: clicks, partition: 0, offsets: [0, 99]}]}
  records: 100
  batches: 7
  rejected_records: 3
  content_hash: sha256:0000000000000000000000000000000000000000000000000000000000000000
  vetted_at: '2026-11-21'
"""

#: the wire-format and Avro kinds, key-side variants, a schema file path
EVERY_AVRO_KIND = """\
kqlab: 1
name: every-kind-avro
topics: {names: [orders]}
key: {format: json}
value:
  format: avro
  wire: confluent
  schemas: {registry: 'https://sr.example.com:8081', subject: orders-value,
            config: {basic.auth.credentials.source: USER_INFO}}
rules:
- {id: magic, kind: magic_byte}
- {id: ids, kind: schema_id_allowed, ids: [1, 2, 7]}
- {id: registered, kind: schema_id_registered, subject: orders-value}
- {id: key-registered, kind: schema_id_registered, target: key}
- {id: avro, kind: avro_valid}
- {id: key-json, kind: json_valid, target: key}
- {id: key-decodes, kind: decodable, target: key}
- {id: key-shape, kind: json_schema, path: schemas/key.json, target: key}
- {id: customer, kind: field_not_null, field: customer.id, severity: warning}
- {id: qty, kind: cel, expr: "value.items.all(i, i.qty > 0)", message: every item has a qty}
"""


@pytest.fixture(scope="module")
def every_kind():
    return {"json": loads_policy(EVERY_JSON_KIND, "every-kind.json"),
            "avro": loads_policy(EVERY_AVRO_KIND, "every-kind-avro")}


def odcs_text(policy: Policy) -> str:
    ex = export(policy, "odcs", today=TODAY)
    (text,) = ex.files.values()
    return text


def assert_round_trip(policy: Policy) -> None:
    back = import_odcs(odcs_text(policy))
    assert back.policy == policy
    assert back.policy.content_hash() == policy.content_hash()
    assert policy_to_dict(back.policy) == policy_to_dict(policy)
    assert back.skipped == () and back.notes == ()


@pytest.fixture(scope="session")
def datacontract():
    """The ``datacontract`` executable from its own virtualenv (created on first use)."""
    script = ROOT / "scripts" / "setup-datacontract"
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, f"scripts/setup-datacontract failed:\n{done.stderr[-3000:]}"
    exe = done.stdout.strip().splitlines()[-1]
    assert os.access(exe, os.X_OK), exe
    return exe


def lint(datacontract: str, path: Path, tmp_path: Path) -> dict:
    report = tmp_path / f"{path.stem}.lint.json"
    done = subprocess.run([datacontract, "lint", str(path), "--all-errors", "--output-format",
                           "json", "--output", str(report)], capture_output=True, text=True,
                          timeout=300, check=False)
    doc = json.loads(report.read_text())
    doc["returncode"] = done.returncode
    return doc


# ------------------------------------------------------------------------------ round trips

def test_demo_policy_round_trips():
    assert_round_trip(load_policy(Path(str(demo_policy_path()))))


def test_demo_topic_policies_round_trip(policies):
    for policy in policies.values():
        assert_round_trip(policy)


def test_vetted_policies_round_trip_with_their_provenance(vetted):
    for policy in vetted.values():
        assert policy.provenance is not None
        assert_round_trip(policy)


def test_every_rule_kind_round_trips(every_kind):
    covered = {r.kind for p in every_kind.values() for r in p.rules}
    assert covered == set(KINDS)
    for policy in every_kind.values():
        assert_round_trip(policy)


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.yaml")), ids=lambda p: p.stem)
def test_policy_corpus_round_trips(path):
    policy = load_policy(path)
    notes = export(policy, "odcs", today=TODAY).notes
    if not any("credentials left out" in n for n in notes):
        assert_round_trip(policy)
        return
    # wire.yaml holds registry credentials: everything but them comes back
    back = import_odcs(odcs_text(policy)).policy
    assert replace(back, key=policy.key, value=policy.value) == policy
    for side in ("key", "value"):
        got, had = getattr(back, side).schemas, getattr(policy, side).schemas
        if had is not None:
            assert dict(got.config).items() < dict(had.config).items() or \
                dict(got.config) == dict(had.config)


_paths = st.lists(st.text("abcxyz_-", min_size=1, max_size=4), min_size=1, max_size=3).map(
    ".".join)
_numbers = st.one_of(st.integers(-10**6, 10**6),
                     st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))


@st.composite
def field_rules(draw) -> list[Rule]:
    rules = []
    for i in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["field_range", "field_in", "field_length",
                                     "field_not_null", "field_regex", "field_type"]))
        params: dict = {"field": draw(_paths)}
        if kind == "field_range":
            lo, hi = sorted([draw(_numbers), draw(_numbers)])
            params.update({"min": lo, "max": hi} if draw(st.booleans()) else {"min": lo})
        elif kind == "field_in":
            ints = st.integers(-2**63, 2**63 - 1)  # what a policy's values may hold
            params["values"] = draw(st.lists(st.one_of(st.text(max_size=5), ints,
                                                       st.booleans()),
                                             min_size=1, max_size=4, unique_by=repr))
        elif kind == "field_length":
            lo = draw(st.integers(0, 5))
            params.update({"min": lo, "max": lo + draw(st.integers(0, 50))})
        elif kind == "field_regex":
            params["pattern"] = draw(st.sampled_from(["^a+$", "[0-9]{3}", "x|y"]))
        elif kind == "field_type":
            params["type"] = draw(st.sampled_from(["string", "number", "integer", "boolean",
                                                   "object", "array", "null"]))
        if kind != "field_not_null" and kind != "field_type" and draw(st.booleans()):
            params["allow_null"] = False
        rules.append(Rule(id=f"r{i}", kind=kind, params=params,
                          mode=draw(st.sampled_from(["reject", "observe"])),
                          when=draw(st.sampled_from([None, "has(value.a)"]))))
    return rules


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field_rules())
def test_random_field_rules_round_trip(rules):
    """Fields sharing paths, bounds of every numeric type, conflicting implied types."""
    policy = loads_policy("kqlab: 1\nname: p\nvalue: {format: json}\n").with_rules(rules)
    policy = loads_policy(yaml.safe_dump(policy_to_dict(policy)))  # canonical, checked
    assert_round_trip(policy)


def test_characters_yaml_reads_as_line_breaks_survive():
    """Found by the test above: PyYAML writes U+0085 raw and reads it back as a break."""
    rule = Rule(id="r", kind="field_in", params={"field": "f", "values": ["\x85", "é", "\u2028"]})
    policy = loads_policy("kqlab: 1\nname: p\nvalue: {format: json}\n").with_rules([rule])
    assert_round_trip(policy)
    assert "é" in odcs_text(loads_policy("kqlab: 1\nname: p\ndescription: café\n"))


# ---------------------------------------------------------------------------- the standard

def test_the_document_is_the_standards_model(every_kind):
    """The standard's pydantic model reads the file back field for field (its schema.json
    is checked by datacontract lint below: the copy in the pydantic package lacks a
    ``required: [logicalType]`` the upstream schema has, and would demand ``map`` on every
    property without a logical type)."""
    from open_data_contract_standard.model import OpenDataContractStandard

    for policy in [*every_kind.values(), load_policy(Path(str(demo_policy_path())))]:
        text = odcs_text(policy)
        doc = yaml.safe_load(text)
        assert doc["apiVersion"] == API_VERSION and doc["kind"] == "DataContract"
        model = OpenDataContractStandard.from_string(text)
        assert model.model_dump(by_alias=True, exclude_none=True) == doc


def test_datacontract_lint_passes(every_kind, datacontract, tmp_path):
    demo = load_policy(Path(str(demo_policy_path())))
    for policy in [demo, *every_kind.values()]:
        path = tmp_path / f"{policy.name}.odcs.yaml"
        path.write_text(odcs_text(policy), encoding="utf-8")
        doc = lint(datacontract, path, tmp_path)
        assert doc["returncode"] == 0 and doc["result"] == "passed", doc["checks"]
        assert [c["result"] for c in doc["checks"]] == ["passed"]
        assert API_VERSION in doc["checks"][0]["name"]
    # the lint is not vacuous: a dimension outside the standard's list fails it
    text = odcs_text(demo).replace("dimension: conformity", "dimension: validity", 1)
    bad = tmp_path / "bad.odcs.yaml"
    bad.write_text(text, encoding="utf-8")
    doc = lint(datacontract, bad, tmp_path)
    assert doc["returncode"] != 0 and doc["result"] == "failed"


def test_what_the_standard_expresses_is_its_own(every_kind):
    doc = yaml.safe_load(odcs_text(every_kind["json"]))
    (obj,) = doc["schema"]
    assert (obj["name"], obj["physicalType"]) == ("every-kind.json", "topic")
    props = {p["name"]: p for p in obj["properties"]}
    user = {p["name"]: p for p in props["user"]["properties"]}
    assert user["id"]["required"] is True
    assert user["id"]["quality"][0] | {"customProperties": None} == {
        "id": "user-id", "name": "user-id", "severity": "error", "dimension": "completeness",
        "type": "library", "metric": "nullValues", "mustBe": 0, "customProperties": None}
    assert user["email"]["classification"] == "sensitive"
    (t,) = props["type"]["quality"]
    assert (t["metric"], t["arguments"]) == ("invalidValues",
                                             {"validValues": ["click", "view", 3, True]})
    assert props["amount"]["logicalType"] == "number"
    assert props["amount"]["logicalTypeOptions"] == {"minimum": 0, "maximum": 1000.5}
    assert props["page"]["logicalType"] == "string"
    assert props["page"]["logicalTypeOptions"] == {"minLength": 1, "maxLength": 2048}
    top = {q["name"]: q for q in obj["quality"]}
    # kqlab-only kinds: custom rules with their CEL text, or their parameters
    assert top["cel-headers"]["engine"] == "kqlab"
    assert top["cel-headers"]["implementation"] == \
        "headers['source'] == 'web' || value.type == 'view'"
    assert top["trace"]["implementation"] == {"kind": "header_required", "name": "traceparent"}
    assert "id" not in top["version.header"]  # not an ODCS stable id; the name carries it
    (amount,) = props["amount"]["quality"]
    # allow_null: false, so the CEL demands the field
    assert amount["implementation"].startswith("type(value) == map && has(value.amount) && ")
    # every rule is stated exactly (build() read its own output back); `how` says in whose
    # vocabulary
    ex = export(every_kind["json"], "odcs", today=TODAY)
    assert {f.status for f in ex.fidelity} == {"exact"}
    assert ex.status_of("user-id").how.startswith("ODCS library metric nullValues")
    assert "`when` precondition rides in kqlabRule" in ex.status_of("email").how
    assert "allow_null: false rides in kqlabRule" in ex.status_of("zip").how
    assert "other ODCS tools show it but do not run it" in ex.status_of("trace").how
    assert "Python plugin" in ex.status_of("plugin").how


def test_credentials_never_reach_the_contract(every_kind):
    p = every_kind["avro"]
    secret = "s3cret-passw0rd"
    schemas = SchemaSource(registry=f"https://bob:{secret}@sr.example.com:8081",
                           subject="orders-value",
                           config={"basic.auth.user.info": f"bob:{secret}",
                                   "basic.auth.credentials.source": "USER_INFO"})
    leaky = replace(p, value=Format(format="avro", wire="confluent", schemas=schemas))
    ex = export(leaky, "odcs", today=TODAY)
    (text,) = ex.files.values()
    assert secret not in text and "bob" not in text
    assert any("credentials left out of value.schemas" in n for n in ex.notes)
    back = import_odcs(text).policy
    assert back.value.schemas.registry == "https://sr.example.com:8081"
    assert dict(back.value.schemas.config) == {"basic.auth.credentials.source": "USER_INFO"}
    assert back.rules == p.rules


# ------------------------------------------------------------------------------ the CLI

def test_export_and_import_commands(tmp_path, capsys):
    demo = Path(str(demo_policy_path()))
    assert main(["export", str(demo), "--target", "odcs", "--out", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (written,) = doc["written"]
    assert written.endswith("odcs/orders-quality.odcs.yaml")
    out = tmp_path / "orders.yaml"
    assert main(["import", "odcs", written, "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policy"] == "orders-quality" and doc["skipped"] == []
    assert doc["content_hash"] == load_policy(demo).content_hash()
    assert load_policy(out) == load_policy(demo)
    assert main(["import", "odcs", written]) == 0  # the policy's YAML on stdout
    assert load_policy(demo) == loads_policy(capsys.readouterr().out)
    assert main(["import", "odcs", str(tmp_path / "missing.yaml")]) == 2
    assert "no contract file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["import", "--help"])
    assert "examples:" in capsys.readouterr().out


# ------------------------------------------------------------- contracts kqlab did not write

FOREIGN = """\
apiVersion: v3.1.0
kind: DataContract
id: urn:datacontract:checkout:orders
name: orders
version: 2.1.0
status: active
team: {name: checkout}
description: {purpose: Orders placed in the web shop.}
schema:
- name: orders
  physicalType: topic
  physicalName: shop.orders.v2
  quality:
  - {type: library, metric: rowCount, mustBeGreaterThan: 0}
  - {type: sql, query: "SELECT COUNT(*) FROM orders WHERE total < 0", mustBe: 0}
  - {name: Lines Are Priced, type: custom, engine: cel,
     implementation: "value.lines.all(l, l.price >= 0.0)"}
  properties:
  - name: order_id
    logicalType: string
    required: true
    logicalTypeOptions: {pattern: '^ORD-[0-9]+$', maxLength: 20}
  - name: total
    logicalType: number
    logicalTypeOptions: {minimum: 0, exclusiveMaximum: 100000}
    quality:
    - {type: library, metric: nullValues, mustBeLessThan: 10, unit: percent}
  - name: status
    quality:
    - {type: library, metric: invalidValues, mustBe: 0,
       arguments: {validValues: [placed, paid, shipped]}, severity: warning}
  - name: customer
    logicalType: object
    classification: restricted
    properties:
    - name: email
      logicalType: string
      quality:
      - {type: library, metric: missingValues, mustBe: 0}
    - {name: since, logicalType: date}
  - name: lines
    logicalType: array
    logicalTypeOptions: {minItems: 1}
"""


def test_a_foreign_contract_becomes_the_rules_it_means():
    result = import_odcs(FOREIGN)
    p = result.policy
    assert (p.name, p.owner, p.description) == ("orders", "checkout", "Orders placed in the "
                                                "web shop.")
    assert p.topics.names == ("shop.orders.v2",) and p.value.format == "json"
    assert p.sensitive.fields == ("customer",)
    got = {r.id: (r.kind, dict(r.params)) for r in p.rules}
    assert got == {
        "lines-are-priced": ("cel", {"expr": "value.lines.all(l, l.price >= 0.0)"}),
        "status-field_in": ("field_in", {"field": "status",
                                         "values": ("placed", "paid", "shipped")}),
        "customer.email-field_not_null": ("field_not_null", {"field": "customer.email"}),
        "order_id-required": ("field_not_null", {"field": "order_id"}),
        "order_id-type": ("field_type", {"field": "order_id", "type": "string"}),
        "order_id-length": ("field_length", {"field": "order_id", "max": 20}),
        "order_id-pattern": ("field_regex", {"field": "order_id", "pattern": "^ORD-[0-9]+$"}),
        "total-type": ("field_type", {"field": "total", "type": "number"}),
        "total-range": ("field_range", {"field": "total", "min": 0}),
        "customer.email-type": ("field_type", {"field": "customer.email", "type": "string"}),
        "lines-type": ("field_type", {"field": "lines", "type": "array"}),
        "lines-length": ("field_length", {"field": "lines", "min": 1}),
    }
    assert p.rule("status-field_in").severity == "warning"
    # data-set metrics with a tolerance are sample checks (issue 21): rows > 0 is at least one
    # record; "< 10 %" null totals a null rate, its strict bound said in the notes
    assert {c.id: (c.kind, dict(c.params)) for c in p.checks} == {
        "volume": ("volume", {"min": 1}),
        "total-null_rate": ("null_rate", {"field": "total", "max": 0.1})}
    assert any("strict bound read as kqlab's inclusive" in n for n in result.notes)
    skipped = "\n".join(result.skipped)
    for why in ("sql", "customer.since: logicalType date",
                "total: logicalTypeOptions.exclusiveMaximum"):
        assert why in skipped, why
    assert len(result.skipped) == 3
    assert any("value format: json assumed" in n for n in result.notes)
    # the imported policy runs: its golden-example-free rules judge records like any other
    assert loads_policy(yaml.safe_dump(policy_to_dict(p))) == p


def test_several_schema_objects_need_a_choice(tmp_path):
    doc = yaml.safe_load(FOREIGN)
    doc["schema"].append({"name": "refunds", "physicalType": "topic"})
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(OdcsError, match=r"2 schema objects \(orders, refunds\).*--schema"):
        import_odcs(path)
    assert import_odcs(path, schema="refunds").policy.topics.names == ("refunds",)
    with pytest.raises(OdcsError, match="no schema object named 'nope'"):
        import_odcs(path, schema="nope")


def test_a_hand_edited_field_rule_cel_is_refused():
    doc = yaml.safe_load(odcs_text(load_policy(Path(str(demo_policy_path())))))
    amount = next(p for p in doc["schema"][0]["properties"] if p["name"] == "amount")
    q = amount["quality"][0]
    q["implementation"] = q["implementation"].replace(">= 0.01", ">= 1.0")
    edited = yaml.safe_dump(doc, sort_keys=False)
    with pytest.raises(OdcsError, match="'amount-positive': its implementation is not the CEL"):
        import_odcs(edited)


def test_edits_of_the_kqlab_parameters_import_and_say_so():
    text = odcs_text(load_policy(Path(str(demo_policy_path()))))
    edited = text.replace("message: non-EUR order", "message: not in euro", 1)
    result = import_odcs(edited)
    assert result.policy.rule("eur-only").message == "not in euro"
    assert any("edited after the export" in n for n in result.notes)


def test_not_a_contract():
    with pytest.raises(OdcsError, match="not an ODCS contract"):
        import_odcs("apiVersion: v3.1.0\nkind: DataContract\nid: x\nunknown_key: 1\n")
    with pytest.raises(OdcsError, match="kind is 'DataProduct'"):
        import_odcs("apiVersion: v3.1.0\nkind: DataProduct\nid: x\n")
    with pytest.raises(OdcsError, match="neither name nor id"):
        import_odcs("apiVersion: v3.1.0\nkind: DataContract\nversion: '1'\n")
