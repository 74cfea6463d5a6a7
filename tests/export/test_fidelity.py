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
    assert main(["export", str(path), "--target", "kroxylicious", "--out",
                 str(tmp_path / "k"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["exports"]["kroxylicious"]["counts"]["not expressible"] == 6
    assert (tmp_path / "k" / "kroxylicious" / "proxy-config.yaml").is_file()
    assert main(["export", str(path), "--target", "all", "--out", str(tmp_path / "all"),
                 "--sample", str(demo / "orders"), "--now", str(NOW)]) == 0
    out = capsys.readouterr().out
    assert "round trip confluent: EQUAL" in out and "round trip tansu: not run" in out
    for name in ("fidelity.json", "fidelity.html", "gate/gate.yaml", "tansu/orders.avsc",
                 "confluent/orders-value.register.json", "kip/kip-940.properties"):
        assert (tmp_path / "all" / name).is_file(), name


def test_cli_bad_target_is_a_usage_error(tmp_path):
    from kqlab.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["export", str(tmp_path / "p.yaml"), "--target", "bogus"])
    assert exc.value.code == 2
