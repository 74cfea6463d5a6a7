"""Every claim of ``exact`` is proven by the target's own engine or withdrawn (issue 17).

The false claims this was built against, each reproduced first: a range over an Avro decimal
exported as CEL that compares a double (Confluent's executor binds a ``Decimal`` and refused
nearly every valid record); a Tansu key schema written for plain string keys (Tansu then
refuses every record); the demo's Tansu round trip reporting DIFFERENT (transaction markers
produced as data) while four rules were marked exact; a range over a timestamp that fails
every record without a word.  Plus the types every CEL-based target must get right —
decimals, bytes, enums, unions with null, timestamps, dates and nested records — and a
planted wrong export whose claim must be withdrawn, with a non-zero exit.
"""

from __future__ import annotations

import datetime
import decimal
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kqlab.export import export
from kqlab.export.base import EXACT
from kqlab.export.fidelity import fidelity_report, roundtrip_tansu
from kqlab.policy import loads_policy, save_policy
from kqlab.policy.model import Rule
from tests.export.conftest import NOW, confluent_avro, write_partition

#: every Avro type whose CEL binding differs from kqlab's, and the plain ones beside them
SCHEMA = {"type": "record", "name": "Payment", "namespace": "kqlab.test", "fields": [
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10,
                                "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CARD", "BANK"]}},
    {"name": "blob", "type": "bytes"},
    {"name": "note", "type": ["null", "string"]},
    {"name": "ref", "type": ["null", "string", "long"]},
    {"name": "payer", "type": {"type": "record", "name": "Payer", "fields": [
        {"name": "age", "type": "int"},
        {"name": "limit", "type": ["null", {"type": "fixed", "name": "Limit", "size": 4,
                                            "logicalType": "decimal", "precision": 8,
                                            "scale": 3}]}]}},
]}
N = 40


def _datum(i: int) -> dict:
    return {"amount": decimal.Decimal(i * 37 % 200 - 20) / 4,
            "at": datetime.datetime(2025, 11, 1, tzinfo=datetime.UTC)
            + datetime.timedelta(days=i),
            "day": datetime.date(2025, 1, 1) + datetime.timedelta(days=i),
            "kind": "CARD" if i % 2 else "BANK", "blob": b"xy" * (i % 3),
            "note": None if i % 3 == 0 else f"n{i}", "ref": [None, "r", i][i % 3],
            "payer": {"age": i - 3, "limit": None if i % 4 == 0 else decimal.Decimal(i) / 8}}


@pytest.fixture(scope="module")
def avro(tmp_path_factory):
    """A partition of Confluent-framed Avro payments and the folder holding their schema."""
    root = tmp_path_factory.mktemp("avro-claims")
    schemas = root / "schemas"
    schemas.mkdir()
    (schemas / "1.avsc").write_text(json.dumps(SCHEMA))
    folder = write_partition(root / "payments-0", [
        {"key": f"p-{i}".encode(), "value": confluent_avro(SCHEMA, _datum(i))}
        for i in range(N)])
    return folder, schemas


def _avro_policy(avro, rules: str, registry: str | None = None):
    _, schemas = avro
    source = f"{{registry: '{registry}'}}" if registry else f"{{path: '{schemas}'}}"
    return loads_policy(f"kqlab: 1\nname: payments\ntopics: {{names: [payments]}}\n"
                        f"key: {{format: string}}\n"
                        f"value: {{format: avro, wire: confluent, schemas: {source}}}\n"
                        f"rules:\n{rules}")


_TYPED_RULES = """\
- {id: amount-range, kind: field_range, field: amount, min: 0.01, max: 30}
- {id: amount-listed, kind: field_in, field: amount, values: [0.25, 3.5, -5]}
- {id: amount-number, kind: field_type, field: amount, type: number}
- {id: card-only, kind: field_in, field: kind, values: [CARD]}
- {id: bank-pattern, kind: field_regex, field: kind, pattern: '^BANK$'}
- {id: blob-set, kind: field_length, field: blob, min: 1}
- {id: note-present, kind: field_not_null, field: note}
- {id: payer-adult, kind: field_range, field: payer.age, min: 0}
- {id: limit-capped, kind: field_range, field: payer.limit, max: 3, allow_null: false}
- {id: ref-r, kind: field_in, field: ref, values: [r]}
"""


def test_every_avro_type_through_every_cel_target(avro):
    """Decimals (bytes and fixed), enums, bytes, unions with null, nested records: each
    rule's claim on Confluent (serializer + CEL executor) and on the gate (its judge, and the
    exported gate run end to end) is proven rule by rule."""
    folder, _ = avro
    policy = _avro_policy(avro, _TYPED_RULES)
    report = fidelity_report(policy, sample=folder, now=NOW, roundtrips=("confluent", "gate"),
                             targets=("confluent", "gate"))
    rows = {r["rule"]: r["targets"] for r in report.table()}
    for rule in policy.rules:
        confluent, gate = rows[rule.id]["confluent"], rows[rule.id]["gate"]
        assert gate["verdict"] == "exact", (rule.id, gate)
        if rule.id == "ref-r":  # a union of several types: kqlab reads its JSON text
            assert confluent["verdict"] == "approximate" and "union" in confluent["why"]
        else:
            assert confluent["verdict"] == "exact", (rule.id, confluent)
    # the rules fail real records, so the proofs are not about nothing
    checks = report.roundtrip("confluent").checks
    assert all(checks[r].expected > 0 for r in ("amount-range", "card-only", "blob-set",
                                                 "note-present", "payer-adult",
                                                 "limit-capped", "amount-listed"))
    gate = report.roundtrip("gate")
    assert gate.ran and gate.whole_equal and gate.refused > 0, gate.to_dict()
    expr = {r["name"]: r["expr"] for r in
            report.exports["confluent"].data["register"]["ruleSet"]["domainRules"]}
    assert "double(message.amount) >= 0.01" in expr["amount-range"]
    assert "type(message.amount) == int" not in expr["amount-range"]


def test_decimal_range_exported_as_a_double_comparison_is_refused_by_confluent(avro):
    """The false claim as it was: the generic form (`type(v) == double && ...`) on a decimal
    makes the serializer refuse nearly every valid record — the reason the typed form exists."""
    from kqlab.export.confluent import _RENAMES, _TYPE_SPELLINGS, rename_cel
    from kqlab.export.roundtrip_confluent import _Contract
    from kqlab.validate.fields import field_rule_to_cel

    policy = _avro_policy(avro, "- {id: amount-range, kind: field_range, field: amount, "
                                "min: 0.01}\n")
    ex = export(policy, "confluent")
    generic = rename_cel(field_rule_to_cel(policy.rules[0]), {**_RENAMES, **_TYPE_SPELLINGS})
    body = json.loads(json.dumps(ex.data["register"]))
    body["ruleSet"]["domainRules"][0]["expr"] = generic
    from confluent_kafka.serialization import MessageField, SerializationContext

    old = _Contract(body, "payments-value", "avro")
    ctx = SerializationContext("payments", MessageField.VALUE)
    valid = [_datum(i) for i in range(N) if _datum(i)["amount"] >= decimal.Decimal("0.01")]
    refused = sum(old.outcome(d, ctx)[0] != "ok" for d in valid)
    assert refused == len(valid)  # every valid record refused
    new = _Contract(ex.data["register"], "payments-value", "avro")
    assert all(new.outcome(d, ctx)[0] == "ok" for d in valid)


def test_a_planted_wrong_export_is_withdrawn_and_the_command_fails(avro, tmp_path, capsys,
                                                                     monkeypatch):
    """Plant the pre-fix translation (the generic CEL on a decimal field, still claimed
    exact): the round trip contradicts the claim, the verdict is 'withdrawn' with one
    sentence and one example record, and `kqlab export` exits 1 — also with
    --accept-approximations, which accepts approximations, not contradictions."""
    from kqlab.cli import main
    from kqlab.export import confluent

    folder, _ = avro
    policy = _avro_policy(avro, "- {id: amount-range, kind: field_range, field: amount, "
                                "min: 0.01, max: 30}\n")
    path = save_policy(policy, tmp_path / "payments.yaml")
    args = ["export", str(path), "--target", "confluent", "--sample", str(folder),
            "--now", str(NOW), "--accept-approximations"]
    assert main([*args, "--out", str(tmp_path / "right")]) == 0
    assert "round trip confluent: EQUAL" in capsys.readouterr().out

    monkeypatch.setattr(confluent, "_typed_field_cel", lambda rule, ft: (None, EXACT, ""))
    report = fidelity_report(policy, sample=folder, now=NOW, roundtrips=("confluent",),
                             targets=("confluent",))
    v = report.verdict("amount-range", "confluent")
    assert v.verdict == "withdrawn", v
    check = report.roundtrip("confluent").checks["amount-range"]
    assert check.only_replay == [] and len(check.only_target) == check.judged - check.expected
    assert "confluent refused" in v.why and "e.g. payments-0@" in v.why and "value {" in v.why
    assert report.problems(accept_approximations=True)
    assert main([*args, "--out", str(tmp_path / "wrong")]) == 1
    captured = capsys.readouterr()
    assert "round trip confluent: DIFFERENT" in captured.out and "withdrawn" in captured.out
    assert "amount-range" in captured.err
    page = (tmp_path / "wrong" / "fidelity.html").read_text()
    assert "withdrawn" in page and "e.g. payments-0@" in page


def test_timestamp_and_date_ranges_warn_and_match_the_replay(avro, tmp_path, capsys):
    """A range over a timestamp or a date is no number comparison in kqlab: every value fails.
    The loader refuses the timestamp case in a file; built in Python it still exports, and the
    export writes what the replay does (every value fails, no day-count comparison on a date)
    — proven — and says so in a warning with the share of the sample it rejects."""
    from kqlab.cli import main

    folder, _ = avro
    policy = _avro_policy(avro, "- {id: day-range, kind: field_range, field: day, min: 0}\n")
    policy = policy.with_rules([*policy.rules, Rule(id="at-range", kind="field_range",
                                                    params={"field": "at", "min": 0})])
    report = fidelity_report(policy, sample=folder, now=NOW, roundtrips=("confluent",),
                             targets=("confluent",))
    for rid, avro_type in (("at-range", "timestamp-millis"), ("day-range", "date")):
        assert report.verdict(rid, "confluent").verdict == "exact"
        check = report.roundtrip("confluent").checks[rid]
        assert check.refused == check.expected == N
        assert avro_type in report.warnings[rid]
        assert f"rejects {N} of the {N} sampled records" in report.warnings[rid]
    assert any("at-range" in w for w in report.exports["confluent"].warnings)
    # the date rule loads from a file: the command prints the warning
    path = save_policy(policy.with_rules(policy.rules[:1]), tmp_path / "p.yaml")
    main(["export", str(path), "--target", "confluent", "--sample", str(folder), "--now",
          str(NOW), "--accept-approximations"])
    assert "WARNING rule day-range: field_range on day, an Avro date" in capsys.readouterr().out


# ------------------------------------------------------------------------------ Tansu keys

_JSON_POLICY = """\
kqlab: 1
name: events
topics: {{names: [events]}}
key: {{format: {key}}}
value: {{format: json}}
rules:
- {{id: keyed, kind: key_required}}
- {{id: size-known, kind: field_in, field: size, values: [S, M, L]}}
"""


@pytest.fixture(scope="module")
def keyed_json(tmp_path_factory):
    """JSON events with plain string keys, JSON-text keys, no key and a bad size."""
    root = tmp_path_factory.mktemp("tansu-keys")
    recs = []
    for i in range(12):
        key = [b"ev-%d" % i, b'"ev-%d"' % i, None][i % 3]
        recs.append({"key": key, "value": json.dumps({"size": "SMLX"[i % 4]}).encode()})
    return write_partition(root / "events-0", recs)


def test_tansu_writes_no_key_schema_for_plain_string_keys(keyed_json):
    """The false claim as it was: a key schema for string keys makes Tansu decode every key
    as JSON and refuse the plain ones.  Now no key schema is written, key_required says why it
    is not expressible, and the key's implicit decoding is proven untouched."""
    policy = loads_policy(_JSON_POLICY.format(key="string"))
    ex = export(policy, "tansu")
    doc = json.loads(ex.files["tansu/events.json"])
    assert "key" not in doc["properties"] and doc["required"] == ["value"]
    assert ex.status_of("keyed").status == "not expressible"
    assert "every record with a plain key" in ex.status_of("keyed").how
    rt = roundtrip_tansu(policy, keyed_json, now=NOW)
    assert rt.equal, rt.to_dict()
    assert rt.checks["decode:key"].refused == 0 and rt.checks["decode:key"].judged == 8
    report = fidelity_report(policy, sample=keyed_json, now=NOW, roundtrips=("tansu",),
                             targets=("tansu",))
    assert report.verdict("decode:key", "tansu").verdict == "exact"
    assert report.verdict("size-known", "tansu").verdict == "exact"


def test_tansu_key_schema_for_json_keys_shows_what_it_refuses(keyed_json, tmp_path, capsys):
    """With JSON keys declared the key schema is written, claimed approximate (Tansu decodes
    the key), and the round trip shows the plain keys it refuses, one example in a sentence;
    the command fails unless approximations are accepted."""
    from kqlab.cli import main

    policy = loads_policy(_JSON_POLICY.format(key="json"))
    ex = export(policy, "tansu")
    assert json.loads(ex.files["tansu/events.json"])["required"] == ["key", "value"]
    assert ex.status_of("keyed").status == "approximate"
    rt = roundtrip_tansu(policy, keyed_json, now=NOW)
    keyed = rt.checks["keyed"]
    assert not keyed.equal and keyed.only_replay == []
    assert len(keyed.only_target) == 4  # the plain keys ev-0, ev-3, ev-6, ev-9
    sentence = keyed.sentences("tansu")[0]
    assert sentence.startswith("tansu refused 4 records the replay accepts for keyed")
    assert 'e.g. events-0@0 key "ev-0" value {"size": "S"}' in sentence
    report = fidelity_report(policy, sample=keyed_json, now=NOW, roundtrips=("tansu",),
                             targets=("tansu",))
    assert report.verdict("keyed", "tansu").verdict == "approximate"
    assert report.verdict("decode:key", "tansu").verdict == "approximate"
    path = save_policy(policy, tmp_path / "events.yaml")
    args = ["export", str(path), "--target", "tansu", "--sample", str(keyed_json)]
    assert main(args) == 1
    assert main([*args, "--accept-approximations"]) == 0
    assert "round trip tansu: DIFFERENT" in capsys.readouterr().out


def test_a_one_rule_policy_whose_round_trip_differs_exits_nonzero(keyed_json, tmp_path,
                                                                  capsys, monkeypatch):
    """Plant a wrong Tansu translation of a claimed-exact rule (the enum loses a value): its
    own check and the whole export differ, the claim is withdrawn, exit 1 whatever flag."""
    from kqlab.cli import main
    from kqlab.export import tansu

    policy = loads_policy(_JSON_POLICY.format(key="none")).with_rules(
        [Rule(id="size-known", kind="field_in", params={"field": "size",
                                                         "values": ["S", "M", "L"]})])
    real = tansu.field_schema

    def wrong(rule):
        schema, status, how = real(rule)
        text = json.dumps(schema).replace('"L", ', "")
        return json.loads(text), status, how

    monkeypatch.setattr(tansu, "field_schema", wrong)
    path = save_policy(policy, tmp_path / "one.yaml")
    assert main(["export", str(path), "--target", "tansu", "--sample", str(keyed_json),
                 "--accept-approximations"]) == 1
    out = capsys.readouterr()
    assert "round trip tansu: DIFFERENT" in out.out
    assert "size-known" in out.err and "claimed exact, but tansu refused 3 records" in out.err


# -------------------------------------------------------------------------------- the demo

def test_demo_tansu_round_trip_is_equal_and_every_exact_claim_is_proven(tmp_path):
    """The demo partition: its transaction markers were produced as data and refused as
    invalid JSON (DIFFERENT, 7 against 5).  Markers are never produced now; every rule the
    Tansu column calls exact ran and agreed."""
    from kqlab.policy import load_policy
    from kqlab.sources.demo import demo_policy_path, write_demo_segment

    folder = write_demo_segment(tmp_path, NOW)
    policy = load_policy(str(demo_policy_path()))
    report = fidelity_report(policy, sample=folder, now=NOW, roundtrips=("tansu",),
                             targets=("tansu",))
    rt = report.roundtrip("tansu")
    assert rt.ran and rt.equal, rt.to_dict()
    assert rt.excluded == {"transaction marker (written by the coordinator, never produced)": 2}
    exact = [r["rule"] for r in report.table() if r["targets"]["tansu"]["verdict"] == "exact"]
    assert exact == ["status-known", "amount-positive", "has-currency", "decode:key"]
    for rid in exact:
        assert rid in rt.checks and rt.checks[rid].equal
        assert report.exports["tansu"].status_of(rid).status == "exact"


# ---------------------------------------------------------------------------- implicit rows

def test_implicit_checks_are_rows_with_a_verdict_per_target(avro, keyed_json):
    """Value decoding, key decoding and the schema-id allowlist appear in every target's
    column, each with its verdict (proven where an engine ran it)."""
    folder, _ = avro
    avro_policy = _avro_policy(avro, "- {id: note-present, kind: field_not_null, "
                                     "field: note}\n")
    report = fidelity_report(avro_policy, sample=folder, now=NOW,
                             roundtrips=("confluent", "gate"), gate_end_to_end=False)
    rows = {r["rule"]: r for r in report.table()}
    mine = {"confluent", "kroxylicious", "schema-id", "tansu", "kip", "topic-policy", "gate"}
    for rid in ("decode:value", "decode:key", "schema-id:value"):
        assert rows[rid]["implicit"] and set(rows[rid]["targets"]) >= mine
    assert rows["decode:value"]["targets"]["gate"]["verdict"] == "exact"
    assert rows["schema-id:value"]["targets"]["gate"]["verdict"] == "exact"
    assert rows["schema-id:value"]["targets"]["tansu"]["verdict"] == "not expressible"
    assert rows["decode:key"]["targets"]["kroxylicious"]["verdict"] == "unverified"
    json_policy = loads_policy(_JSON_POLICY.format(key="string")).with_rules([])
    report = fidelity_report(json_policy, sample=keyed_json, now=NOW, roundtrips=("tansu",),
                             targets=("tansu",))
    rows = {r["rule"]: r for r in report.table()}
    # Tansu refuses null values the replay's decoding passes: approximate, and it ran
    assert rows["decode:value"]["targets"]["tansu"]["verdict"] == "approximate"
    assert "decode:value" in report.roundtrip("tansu").checks


# ------------------------------------------------------------------ files: portable, stable

def test_exports_are_deterministic_and_portable(tmp_path):
    """Two exports of one vetted policy are byte-identical (the report differs only in its
    run section); no file holds an absolute path; the gate folder runs wherever it is copied."""
    import shutil

    from kqlab.cli import main
    from kqlab.gate import load_gate_file
    from kqlab.policy import load_policy
    from kqlab.sources.demo import demo_policy_path, write_demo_segment
    from kqlab.validate.replayer import Replayer

    folder = write_demo_segment(tmp_path / "data", NOW)
    policy = load_policy(str(demo_policy_path()))
    vetted = Replayer(folder, now=NOW).run(policy).vet(policy, source=str(folder.resolve()),
                                                        today="2026-01-02")
    path = save_policy(vetted, tmp_path / "orders.yaml")
    for out in ("one", "two"):
        main(["export", str(path), "--target", "all", "--sample", str(folder), "--now",
              str(NOW), "--out", str(tmp_path / out)])
    one, two = tmp_path / "one", tmp_path / "two"
    mine = ("confluent", "kroxylicious", "schema-id", "tansu", "kip", "topic-policy", "gate")
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file()
                   and (p.parent == one or p.relative_to(one).parts[0] in mine))
    assert Path("gate/policy.yaml") in files and Path("fidelity.html") in files
    for rel in files:
        a, b = (one / rel).read_text(), (two / rel).read_text()
        if rel.name == "fidelity.json":
            a, b = json.loads(a), json.loads(b)
            assert a.pop("run")["exported_at"] and b.pop("run")
        assert a == b, rel
        text = (one / rel).read_text()
        assert str(tmp_path) not in text and "/tmp/" not in text, rel
    today = datetime.date.today().isoformat()
    assert today == "2026-01-02" or not any(today in (one / rel).read_text() for rel in files
                                            if rel.name != "fidelity.json")
    # the gate folder, copied elsewhere, still finds its policy and its hash
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(one / "gate", elsewhere)
    gf = load_gate_file(elsewhere / "gate.yaml")
    assert gf.policy_path == elsewhere / "policy.yaml"
    assert load_policy(str(gf.policy_path)).content_hash() == gf.content_hash == \
        vetted.content_hash()


# ------------------------------------------------------- schemas from a folder, a new process

def test_confluent_avro_export_from_a_schema_folder_in_a_fresh_process(avro, tmp_path):
    _, schemas = avro
    policy = _avro_policy(avro, "- {id: note-present, kind: field_not_null, field: note}\n")
    path = save_policy(policy, tmp_path / "payments.yaml")
    cmd = [sys.executable, "-m", "kqlab.cli", "export", str(path), "--target", "confluent",
           "--out", str(tmp_path / "out"), "--json", "--accept-approximations"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    register = json.loads((tmp_path / "out" / "confluent" /
                           "payments-value.register.json").read_text())
    assert json.loads(register["schema"]) == SCHEMA
    notes = json.loads(done.stdout)["exports"]["confluent"]["notes"]
    assert notes[0] == "schema: 1.avsc, the highest schema id in the policy's schema folder"
    # a mock:// registry is empty in a new process: the error says what to give instead
    mocked = save_policy(_avro_policy(avro, "- {id: note-present, kind: field_not_null, "
                                            "field: note}\n", registry="mock://nobody-filled"),
                         tmp_path / "mocked.yaml")
    cmd[4] = str(mocked)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "in-memory registry" in done.stderr and "--schema FILE.avsc" in done.stderr
    done = subprocess.run([*cmd, "--schema", str(schemas / "1.avsc")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- rule identity

def test_rule_names_descriptions_and_severities_travel(tmp_path):
    policy = loads_policy(_JSON_POLICY.format(key="json"))
    sized = replace(policy.rules[1], description="sizes come from the catalogue",
                    severity="warning", message="unknown size")
    policy = policy.with_rules([policy.rules[0], sized])
    rules = export(policy, "confluent").data["register"]["ruleSet"]["domainRules"]
    assert rules == [{**rules[0], "name": "size-known", "doc": "unknown size",
                      "params": {"kqlab.kind": "field_in", "kqlab.severity": "warning",
                                 "kqlab.description": "sizes come from the catalogue"}}]
    line = "rule size-known (field_in, severity warning, reject)"
    for target, name in (("kroxylicious", "kroxylicious/proxy-config.yaml"),
                         ("gate", "gate/gate.yaml"), ("kip", "kip/kip-940.properties"),
                         ("schema-id", "schema-id/redpanda.properties"),
                         ("topic-policy", "topic-policy/server.properties")):
        text = export(policy, target).files[name]
        assert f"# {line}" in text and "sizes come from the catalogue" in text, target
    doc = json.loads(export(policy, "tansu").files["tansu/events.json"])
    assert doc["properties"]["value"]["$comment"].startswith(line)
