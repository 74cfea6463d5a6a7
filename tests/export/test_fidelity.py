"""Round-trip proofs, provenance, secrets, the fidelity report and the CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kqlab.export import TARGETS, ExportError, export, export_all
from kqlab.export.base import Export, check_no_secrets
from kqlab.export.fidelity import fidelity_report, roundtrip_confluent, roundtrip_tansu
from tests.export.conftest import NOW, TODAY

FAKE_PASSWORD = "Fake-Passw0rd-4242"


def test_roundtrip_confluent_refuses_what_the_replay_rejects(vetted, replayers):
    """(a): every sampled orders record through AvroSerializer with the exported rules."""
    rt = roundtrip_confluent(vetted["orders"], replayers["orders"])
    assert rt.ran, rt.reason
    assert rt.rules == ["amount-range", "customer-present"]
    assert rt.refused > 0 and rt.equal, rt.to_dict()
    assert rt.only_target == [] and rt.only_replay == []
    assert rt.by_rule.keys() == {"amount-range", "customer-present"}
    assert sum(rt.by_rule.values()) == rt.refused
    assert rt.by_rule == rt.expected_by_rule  # each refusal names the same first rule
    # the replay's own per-rule counts, over the records the serializer could be given
    results = replayers["orders"].evaluate(vetted["orders"])
    assert rt.expected == int((results["amount-range"].failed |
                               results["customer-present"].failed).sum())
    # every excluded record is one the replay's decode rules reject (cannot be serialized)
    assert rt.judged + sum(rt.excluded.values()) == rt.records
    assert sum(rt.excluded.values()) == int(results["avro"].failed.sum())


def test_roundtrip_tansu_on_raw_json_values(vetted, replayers):
    """(b): the clicks sample produced into Tansu started with the exported schema file."""
    rt = roundtrip_tansu(vetted["clicks"], replayers["clicks"])
    assert rt.ran, rt.reason
    assert set(rt.rules) == {"json", "event-type"}
    assert rt.judged == rt.records
    assert rt.refused > 0 and rt.equal, rt.to_dict()
    assert rt.other_errors == {}


def test_roundtrip_tansu_cannot_run_on_confluent_framed_values(vetted, replayers):
    rt = roundtrip_tansu(vetted["orders"], replayers["orders"])
    assert not rt.ran and not rt.equal
    assert "Confluent wire format" in rt.reason


@pytest.fixture(scope="module")
def secret_policy(policies, replayers):
    """The orders policy whose schema source carries credentials, vetted (the content hash
    covers the schema source, so it is vetted with them)."""
    p = policies["orders"]
    schemas = replace(p.value.schemas, config={"basic.auth.user.info": f"alice:{FAKE_PASSWORD}",
                                               "basic.auth.credentials.source": "USER_INFO"})
    p = replace(p, value=replace(p.value, schemas=schemas))
    return replayers["orders"].run(p).vet(p, source="demo/orders", today=TODAY)


def test_exports_embed_provenance_and_no_secrets(secret_policy):
    prov = secret_policy.provenance
    assert prov is not None and prov.content_hash == secret_policy.content_hash()
    exports = export_all(secret_policy, today=TODAY)
    assert set(exports) == set(TARGETS)
    for name, ex in exports.items():
        text = "\n".join(ex.files.values()) + json.dumps(ex.data, default=str)
        assert FAKE_PASSWORD not in text and "alice" not in text, name
        for f, body in ex.files.items():
            if f.endswith(".py"):
                continue  # scripts: code, the provenance sits in the files they apply
            assert secret_policy.name in body, (name, f)
            assert prov.content_hash in body, (name, f)
            if name != "gate":  # the gate names its policy by hash, the rest the vetting
                assert prov.vetted_at in body, (name, f)
                # sample coordinates: as text in comments, as data in JSON documents
                assert "orders-0@" in body or '"offsets"' in body, (name, f)
                assert str(prov.records) in body, (name, f)


def test_check_no_secrets_refuses_a_leaking_export(secret_policy):
    leaking = Export(target="x", title="x", policy="p", fidelity=(),
                     files={"x.yaml": f"password: {FAKE_PASSWORD}\n"})
    with pytest.raises(ExportError, match="secret"):
        check_no_secrets(leaking, secret_policy)


def test_registry_credentials_in_the_url_are_stripped(vetted):
    p = vetted["orders"]
    schemas = replace(p.value.schemas, registry=f"https://bob:{FAKE_PASSWORD}@sr.example:8081")
    p = replace(p, value=replace(p.value, schemas=schemas))
    ex = export(p, "schema-id", today=TODAY)
    assert FAKE_PASSWORD not in json.dumps(ex.data)
    assert ex.data["cluster"]["confluent-server"]["server.properties"][
        "confluent.schema.registry.url"] == "https://sr.example:8081"


def test_fidelity_report_html_and_json(vetted, replayers, tmp_path):
    report = fidelity_report(vetted["clicks"], sample=replayers["clicks"], today=TODAY,
                             roundtrips=("tansu",))
    paths = report.write(tmp_path)
    doc = json.loads((tmp_path / "fidelity.json").read_text())
    html = (tmp_path / "fidelity.html").read_text()
    assert [p.name for p in paths] == ["fidelity.json", "fidelity.html"]
    assert set(doc["targets"]) == set(TARGETS)
    rows = {r["rule"]: r for r in doc["table"]}
    assert rows["event-type"]["targets"]["tansu"]["status"] == "exact"
    assert rows["source"]["targets"]["confluent"]["status"] == "not expressible"
    assert doc["roundtrips"][0]["equal"] is True
    assert "proposed API, not in Apache Kafka" in html and "EQUAL" in html
    assert doc["provenance"]["vetted"] is True


def test_cli_export_one_target_and_all(vetted, demo, tmp_path, capsys):
    from kqlab.cli import main
    from kqlab.policy import save_policy

    path = save_policy(vetted["orders"], tmp_path / "orders.yaml")
    # the proxy cannot express most of the policy's reject rules: a finding (exit 1) ...
    assert main(["export", str(path), "--target", "kroxylicious", "--out",
                 str(tmp_path / "k"), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["exports"]["kroxylicious"]["counts"]["not expressible"] == 6
    assert doc["problems"] and "kroxylicious" in doc["problems"][0]
    assert (tmp_path / "k" / "kroxylicious" / "proxy-config.yaml").is_file()
    # ... unless approximations are accepted explicitly
    assert main(["export", str(path), "--target", "kroxylicious", "--json",
                 "--accept-approximations"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == []
    assert main(["export", str(path), "--target", "all", "--out", str(tmp_path / "all"),
                 "--sample", str(demo / "orders"), "--now", str(NOW),
                 "--accept-approximations"]) == 0
    out = capsys.readouterr().out
    assert "round trip confluent: EQUAL" in out and "round trip tansu: not run" in out
    assert "round trip gate: EQUAL" in out
    for name in ("fidelity.json", "fidelity.html", "gate/gate.yaml", "gate/policy.yaml",
                 "tansu/orders.avsc", "confluent/orders-value.register.json",
                 "kip/kip-940.properties"):
        assert (tmp_path / "all" / name).is_file(), name
    table = {r["rule"]: r for r in json.loads((tmp_path / "all" / "fidelity.json")
                                              .read_text())["table"]}
    assert table["amount-range"]["targets"]["confluent"]["verdict"] == "exact"
    assert table["amount-range"]["targets"]["kip"]["verdict"] == "unverified"
    assert table["traceparent"]["targets"]["gate"]["verdict"] == "exact"


def test_cli_bad_target_is_a_usage_error(tmp_path):
    from kqlab.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["export", str(tmp_path / "p.yaml"), "--target", "bogus"])
    assert exc.value.code == 2


# ------------------------------------------------------------ (a) with JSON values

#: the clicks contract: the shipped clicks policy plus a JSON Schema and expression rules the
#: demo clicks break (the shipped policy's only expressible rule, event-type, never fails)
_CLICKS_SCHEMA = {"type": "object", "required": ["event_id", "session", "type", "page", "ts"],
                  "properties": {"page": {"type": "string", "maxLength": 8},
                                 "ts": {"type": "integer"}}}


@pytest.fixture(scope="module")
def clicks_contract(policies):
    from kqlab.policy.model import Rule

    p = policies["clicks"]
    return p.with_rules([*p.rules,
        Rule(id="recent", kind="field_range", params={"field": "ts", "min": NOW - 5 * 3600_000}),
        Rule(id="cart-needs-user", kind="cel",
             params={"expr": "value.type != 'add_to_cart' || value.user_id != null"}),
        Rule(id="page-known", kind="field_regex",
             params={"field": "page", "pattern": "^/(|cart|checkout|search|p/[0-9]+)$"}),
        Rule(id="shape", kind="json_schema", params={"schema": _CLICKS_SCHEMA})])


def test_roundtrip_confluent_json_values(clicks_contract, replayers):
    """(a) for JSON: every sampled clicks record through JSONSerializer with the exported rules
    and the registered JSON Schema; same records refused, each for the same first rule."""
    rt = roundtrip_confluent(clicks_contract, replayers["clicks"])
    assert rt.ran and rt.serializer == "JSONSerializer", rt.reason
    assert rt.rules == ["event-type", "recent", "cart-needs-user", "page-known", "shape"]
    assert rt.equal, rt.to_dict()
    assert rt.refused > 0 and rt.other_errors == {}
    # per rule: the serializer stops at the first failing rule, the schema comes after them
    assert rt.by_rule == rt.expected_by_rule, rt.to_dict()
    assert set(rt.by_rule) == {"recent", "cart-needs-user", "page-known", "shape"}
    results = replayers["clicks"].evaluate(clicks_contract)
    assert rt.expected == int(sum(results[r].failed for r in rt.rules).astype(bool).sum())
    # the excluded records are exactly the truncated JSON the replay's json rule rejects
    assert rt.excluded == {"not valid JSON (cannot be serialized)":
                           int(results["json"].failed.sum())}
    assert rt.judged + 5 == rt.records


def test_roundtrip_confluent_json_shipped_clicks_policy(vetted, replayers):
    """The shipped clicks policy runs too: nothing to refuse, nothing refused."""
    rt = roundtrip_confluent(vetted["clicks"], replayers["clicks"])
    assert rt.ran and rt.equal and rt.rules == ["event-type"] and rt.refused == 0


_EDGE_VALUES = [
    b'{"n": 5, "s": "abc", "t": 1, "a": {"b": 1}}',
    b'{"n": 5.5, "s": "x", "t": 1.0, "a": {"b": null}}',
    b'{"n": true, "s": "\\u0663\\u0664", "t": true, "a": 3}',       # RE2 \\w is ASCII
    b'{"n": "7", "s": "\\ud83d\\ude00\\ud83d\\ude00", "t": "1"}',   # 2 code points
    b'{"n": null, "s": null, "t": null, "a": {}}',
    b'{"n": 9007199254740993, "s": "ab\\ncd", "t": 2.5}',
    b'{"n": 18446744073709551615, "s": "ABC", "t": 2}',            # > int64: overflow
    b'{"n": -1e400, "s": "", "t": 1e0}',                           # not JSON for orjson
    b'{"n": 1e308, "s": "\\u00e9t\\u00e9", "t": -0.0}',
    b'{"x-y": 1, "n": 0, "s": "a1", "t": 0}',
    b'{"x-y": "z", "n": 100, "s": "a\\u00a01", "t": 10000000000000000000}',  # > int64
    b'[1, 2]', b'"just a string"', b'42', b'null',
    b'{"n": 3, "s": "abc", "t": 3, "list": [1, 2, 3]}',
    b'{"n": 3, "s": "abc", "t": 3, "list": []}',
]
_OVERFLOW = {6, 10}

_EDGE_POLICY = """
kqlab: 1
name: json-edges
topics: {names: [edge]}
key: {format: none}
value: {format: json}
rules:
- {id: n-range, kind: field_range, field: n, min: 0, max: 100}
- {id: t-in, kind: field_in, field: t, values: [1, 2.5, 3, 9223372036854775807]}
- {id: s-regex, kind: field_regex, field: s, pattern: '^\\\\w+\\\\d?$'}
- {id: s-len, kind: field_length, field: s, min: 1, max: 3}
- {id: ab-present, kind: field_not_null, field: a.b}
- {id: t-int, kind: field_type, field: t, type: integer}
- {id: n-num, kind: field_type, field: n, type: number}
- {id: xy-str, kind: field_type, field: x-y, type: string}
- {id: list-len, kind: field_length, field: list, min: 1}
"""


@pytest.fixture(scope="module")
def edges():
    import pyarrow as pa

    from kqlab.policy import loads_policy
    from kqlab.records import RECORDS_SCHEMA
    from kqlab.validate.replayer import Replayer

    n = len(_EDGE_VALUES)
    table = pa.table({
        "topic": ["edge"] * n, "partition": [0] * n, "offset": list(range(n)),
        "timestamp": [NOW] * n, "timestamp_type": [0] * n, "key": [None] * n,
        "value": _EDGE_VALUES, "headers": [[] for _ in range(n)],
        "batch_offset": list(range(n)), "batch_index": [0] * n}, schema=RECORDS_SCHEMA)
    return loads_policy(_EDGE_POLICY, "edges"), Replayer(table, framing="single", now=NOW)


def test_roundtrip_confluent_json_edge_values_each_field_kind(edges):
    """Each field kind alone on JSON edge values (types, nulls, non-objects, Unicode, odd
    keys): the serializer agrees record for record, except exactly where the fidelity row
    says it cannot - integers outside int64 refuse the record whatever the rule."""
    policy, replayer = edges
    for rule in policy.rules:
        rt = roundtrip_confluent(policy.with_rules([rule]), replayer)
        assert rt.ran and rt.rules == [rule.id], rule.id
        assert rt.only_replay == [], (rule.id, rt.to_dict())
        assert {c[2] for c in rt.only_target} <= _OVERFLOW, (rule.id, rt.to_dict())
        overflow = [k for k in rt.other_errors if k.startswith("ValueError overflow")]
        assert len(overflow) == 1 and rt.other_errors[overflow[0]] == len(_OVERFLOW), rule.id
        assert rt.excluded == {"not valid JSON (cannot be serialized)": 1,
                               "JSON null (serializes to a tombstone, no rule runs)": 1}
    from kqlab.export.confluent import build

    rows = [f for f in build(policy).fidelity if not f.implicit]
    assert [f.rule for f in rows] == [r.id for r in policy.rules]
    for f in rows:
        assert f.status == "approximate" and "64-bit" in f.how, f


def test_roundtrip_confluent_json_cel_equality_difference_is_reported(edges):
    """cel-python (the Python client's engine) has no heterogeneous equality: `int != null`
    raises and the serializer refuses; kqlab's engine answers.  The row says approximate and
    the round trip shows the disagreement with its cause instead of hiding it."""
    from kqlab.export.confluent import build
    from kqlab.policy.model import Rule

    policy, replayer = edges
    p = policy.with_rules([Rule(id="n-set", kind="cel",
                                params={"expr": "has(value.n) && value.n != null"})])
    row = build(p).fidelity[0]
    assert row.status == "approximate" and "cel-python" in row.how
    rt = roundtrip_confluent(p, replayer)
    assert not rt.equal and rt.only_replay == []
    # records whose n is a number: kqlab passes them, cel-python raises comparing with null
    assert {c[2] for c in rt.only_target} == {0, 1, 5, 8, 9, 15, 16} | _OVERFLOW
    assert rt.other_errors["CELEvalError (a rule raised instead of answering)"] == 7


def test_confluent_json_schema_fidelity(policies):
    from kqlab.export.confluent import build
    from kqlab.policy.model import Rule

    p = policies["clicks"]
    fmt = {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}}}
    one = Rule(id="one", kind="json_schema", params={"schema": _CLICKS_SCHEMA})
    two = Rule(id="two", kind="json_schema", params={"schema": fmt})
    rows = {f.rule: f for f in build(p.with_rules([*p.rules, one, two])).fidelity}
    assert rows["one"].status == "exact" and rows["two"].status == "not expressible"
    ex = build(p.with_rules([*p.rules, two]))
    assert {f.rule: f for f in ex.fidelity}["two"].status == "approximate"  # format
    body = json.loads(ex.data["register"]["schema"])
    assert body["$schema"] == "http://json-schema.org/draft-07/schema#"  # kqlab's draft
    observe = Rule(id="obs", kind="json_schema", mode="observe", params={"schema": fmt})
    ex = build(p.with_rules([*p.rules, observe]))
    assert ex.data["schema_rule"] is None and json.loads(ex.data["register"]["schema"]) == {}
    assert {f.rule: f for f in ex.fidelity}["obs"].status == "not expressible"


@pytest.mark.parametrize("sample", [
    {"files": ["orders-0/00000000000000000000.log"], "note": "hand-written"},
    {"partitions": "all", "source": "snapshot"},
    {"partitions": [{"topic": "orders", "offsets": 5}, 3]},
])
def test_a_hand_written_provenance_sample_exports_as_written(vetted, sample):
    """The schema asks only for an object: a sample written by hand (not by ``--vet``) is
    shown as written in every export's provenance, never a crash or silently dropped."""
    p = vetted["orders"]
    p = replace(p, provenance=replace(p.provenance, sample=sample))
    exports = export_all(p, today=TODAY)
    assert set(exports) == set(TARGETS)
    texts = {name: "\n".join(ex.files.values()) for name, ex in exports.items()}
    commented = [n for n, t in texts.items() if "sample:" in t]
    assert commented, "no export carries the sample as a comment line"
    for name in commented:
        line = next(x for x in texts[name].splitlines() if "sample:" in x)
        for key in sample:
            assert key in line or key == "partitions", (name, line)
