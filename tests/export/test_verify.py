"""``kqlab verify``: what is deployed against the vetted policy, on real parts.

The contract lives in confluent-kafka's ``mock://`` registry (registered from what ``kqlab
export --target confluent`` writes), topic configs on the embedded Tansu broker (whose
DescribeConfigs reports only explicitly set keys), the gate's config as the gate export
writes it.  Drift is planted the way it happens in production: a contract re-registered by
hand, a topic setting altered, the gate's policy file edited.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from confluent_kafka.schema_registry import Schema

from kqlab.cli import main
from kqlab.export import export
from kqlab.export.confluent import register_contract
from kqlab.export.topic_policy import requirements
from kqlab.export.verify import VerifyError, verify
from kqlab.policy import Policy, load_policy
from kqlab.serde.schemas import registry_client
from kqlab.sources.demo import demo_policy_path

from .conftest import TODAY

POLICY_FILE = Path(str(demo_policy_path()))


@pytest.fixture(scope="module")
def policy():
    return load_policy(POLICY_FILE)


class Deployment:
    """The demo policy deployed as exported: a registry URL, a topic, a gate file."""

    def __init__(self, policy, broker, tmp_path: Path):
        self.policy = policy
        self.broker = broker
        self.url = f"mock://kqlab-verify-{uuid.uuid4().hex[:8]}"
        self.registry = registry_client(self.url)
        self.contract = export(policy, "confluent", today=TODAY)
        register_contract(self.registry, self.contract)
        self.topic = f"verify-orders-{uuid.uuid4().hex[:8]}"
        broker.create_topic(self.topic, config={q.config: q.value for q in
                                                requirements(policy) if q.op == "equals"})
        export(policy, "gate", policy_path="orders.yaml", today=TODAY).write(tmp_path)
        self.policy_copy = tmp_path / "gate" / "orders.yaml"
        self.policy_copy.write_text(POLICY_FILE.read_text(encoding="utf-8"), encoding="utf-8")
        self.gate_file = tmp_path / "gate" / "gate.yaml"

    def args(self, *extra: str) -> list[str]:
        return ["verify", str(POLICY_FILE), "--registry", self.url, "--bootstrap",
                self.broker.bootstrap, "--topic", self.topic, "--gate-config",
                str(self.gate_file), *extra]

    def reregister(self, edit) -> None:
        """A new contract version, edited by hand (what the latest version then runs)."""
        body = copy.deepcopy(self.contract.data["register"])
        edit(body["ruleSet"]["domainRules"])
        self.registry.register_schema(self.contract.data["subject"], Schema.from_dict(body))

    def alter_topic(self, name: str, value: str) -> None:
        res = ConfigResource(ResourceType.TOPIC, self.topic, incremental_configs=[ConfigEntry(
            name, value, incremental_operation=AlterConfigOpType.SET)])
        self.broker.admin().incremental_alter_configs([res])[res].result(10)

    def close(self) -> None:
        self.broker.admin().delete_topics([self.topic])[self.topic].result(10)


@pytest.fixture
def deployed(policy, broker, tmp_path):
    d = Deployment(policy, broker, tmp_path)
    yield d
    d.close()


def run(capsys, argv: list[str]) -> tuple[int, dict]:
    status = main(argv)
    out = capsys.readouterr().out
    return status, json.loads(out)


def test_no_drift_exits_0(deployed, capsys):
    status, doc = run(capsys, deployed.args("--json"))
    assert status == 0
    assert doc["drift"] is False and doc["differences"] == []
    assert doc["content_hash"] == deployed.policy.content_hash()
    assert doc["checked"] == [
        "confluent orders-value version 1 (schema id 1)", f"topic {deployed.topic}",
        f"gate {deployed.gate_file} (policy file {deployed.policy_copy})"]
    # every requirement was set explicitly, so nothing had to be assumed
    assert doc["notes"] == []


def test_planted_drift_is_found_one_line_per_difference(deployed, capsys):
    def edit(rules):
        rules[:] = [r for r in rules if r["name"] != "has-currency"]  # a rule removed
        for r in rules:
            if r["name"] == "amount-positive":
                r["expr"] = "message.amount > 0.0"  # an expression changed
            if r["name"] == "eur-only":
                r["onFailure"] = "ERROR"  # observe became reject
            if r["name"] == "status-known":
                r["onFailure"] = "NONE"  # reject became observe

    deployed.reregister(edit)
    deployed.alter_topic("max.message.bytes", "1048588")
    deployed.alter_topic("cleanup.policy", "delete")
    status, doc = run(capsys, deployed.args("--json"))
    assert status == 1 and doc["drift"] is True
    found = {(d["target"], d["item"], d["what"]): d for d in doc["differences"]}
    assert set(found) == {
        ("confluent", "rule has-currency", "missing rule"),
        ("confluent", "rule amount-positive", "expression"),
        ("confluent", "rule eur-only", "mode"),
        ("confluent", "rule status-known", "mode"),
        ("topics", "max.message.bytes", "topic config"),
        ("topics", "cleanup.policy", "topic config"),
    }
    d = found[("confluent", "rule amount-positive", "expression")]
    assert d["policy"].startswith("`!(type(message) == map && has(message.amount))")
    assert d["deployed"] == "`message.amount > 0.0`"
    assert found[("confluent", "rule eur-only", "mode")]["policy"] == "observe (onFailure NONE)"
    assert found[("confluent", "rule eur-only", "mode")]["deployed"] == \
        "reject (onFailure ERROR)"
    assert found[("confluent", "rule has-currency", "missing rule")]["deployed"] is None
    t = found[("topics", "max.message.bytes", "topic config")]
    assert (t["policy"], t["deployed"]) == ("65536", "1048588")
    assert found[("topics", "cleanup.policy", "topic config")]["deployed"] == "delete"
    assert all(x["line"].count("policy says") == 1 and "; deployed " in x["line"]
               for x in doc["differences"])
    # the human form: one line per difference, exit status 1 as well
    assert main(deployed.args()) == 1
    text = capsys.readouterr().out
    assert "DRIFT: 6 difference(s)" in text
    assert ("confluent orders-value: rule eur-only: mode: policy says observe (onFailure "
            "NONE); deployed reject (onFailure ERROR)") in text
    assert (f"topics {deployed.topic}: max.message.bytes: topic config: policy says 65536; "
            "deployed 1048588") in text


def test_an_extra_rule_a_disabled_rule_and_changed_settings(deployed, policy):
    def edit(rules):
        rules.append({"name": "by-hand", "kind": "CONDITION", "mode": "WRITE", "type": "CEL",
                      "expr": "message.id > 0", "onFailure": "ERROR"})
        rules[0]["disabled"] = True
        rules[1]["mode"] = "READ"

    deployed.reregister(edit)
    report = verify(policy, registry=deployed.registry)
    found = {(d.item, d.what): d for d in report.differences}
    assert set(found) == {("rule by-hand", "extra rule"), ("rule status-known", "mode"),
                          ("rule amount-positive", "setting")}
    assert found[("rule by-hand", "extra rule")].policy is None
    assert found[("rule status-known", "mode")].deployed == "disabled"
    assert found[("rule amount-positive", "setting")].line().endswith(
        "policy says mode WRITE; deployed mode READ")


def test_a_dlq_deployment_is_not_drift_unless_asked(deployed, policy):
    dlq = export(policy, "confluent", dlq_topic="orders-dlq", today=TODAY)
    register_contract(deployed.registry, dlq)
    assert not verify(policy, registry=deployed.registry).drift
    assert not verify(policy, registry=deployed.registry, dlq_topic="orders-dlq").drift
    other = verify(policy, registry=deployed.registry, dlq_topic="orders-dead")
    assert {d.what for d in other.differences} == {"setting"}
    assert all("orders-dead" in d.policy for d in other.differences)


def test_the_content_hash_in_the_contract_metadata(deployed, policy):
    edited = policy.with_rules(policy.rules[:-1])  # the vetted policy changed since the export
    report = verify(edited, registry=deployed.registry)
    found = {d.item: d for d in report.differences}
    assert found["metadata kqlab.content_hash"].policy == edited.content_hash()
    assert found["metadata kqlab.content_hash"].deployed == policy.content_hash()


def test_the_gate_pins_and_runs_the_policy(deployed, policy):
    assert not verify(policy, gate_file=deployed.gate_file).drift
    text = deployed.policy_copy.read_text(encoding="utf-8")
    deployed.policy_copy.write_text(text.replace("  mode: observe\n", "", 1), encoding="utf-8")
    report = verify(policy, gate_file=deployed.gate_file)
    found = {(d.item, d.what): d for d in report.differences}
    assert set(found) == {("policy file hash", "policy hash"), ("rule eur-only", "mode")}
    assert found[("rule eur-only", "mode")].line().endswith(
        "policy says mode observe; deployed mode reject")
    assert "refuses" in found[("policy file hash", "policy hash")].deployed
    # a gate config pinning another hash, with a route for a topic the policy does not name
    gate = deployed.gate_file.read_text(encoding="utf-8")
    gate = gate.replace(policy.content_hash(), "sha256:" + "0" * 64)
    gate = gate.replace("- source: orders\n", "- source: payments\n")
    deployed.gate_file.write_text(gate, encoding="utf-8")
    found = {(d.item, d.what) for d in verify(policy, gate_file=deployed.gate_file).differences}
    assert {("policy.content_hash", "policy hash"), ("route orders", "route"),
            ("route payments", "route")} <= found


# issue 27: not yet green on Apache Kafka: deployed '1048588' != '1048588 (the default)'
def test_tansu_reports_only_set_keys_the_rest_is_judged_as_kafkas_default(policy, tansu_broker):
    broker = tansu_broker
    topic = f"verify-bare-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, config={"cleanup.policy": "compact,delete"})
    try:
        report = verify(policy, admin=broker.admin(), topics=[topic, "verify-nowhere"])
    finally:
        broker.admin().delete_topics([topic])[topic].result(10)
    found = {(d.where, d.item): d for d in report.differences}
    size = found[(topic, "max.message.bytes")]
    assert (size.policy, size.deployed) == ("65536", "1048588 (the default)")
    assert (topic, "cleanup.policy") not in found
    assert any("max.message.bytes is not reported by the broker" in n for n in report.notes)
    assert found[("verify-nowhere", "topic")].what == "missing topic"
    assert sum(1 for d in report.differences if d.where == "verify-nowhere") == 1


def test_an_avro_contract_ignores_schema_evolution(policies):
    """The orders topic's contract (Avro): a new writer schema is the producers' business."""
    orders = policies["orders"]
    url = f"mock://kqlab-verify-{uuid.uuid4().hex[:8]}"
    client = registry_client(url)
    ex = export(orders, "confluent", today=TODAY)
    register_contract(client, ex)
    assert not verify(orders, registry=client).drift
    body = copy.deepcopy(ex.data["register"])
    schema = json.loads(body["schema"])
    schema["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
    body["schema"] = json.dumps(schema)
    client.register_schema(ex.data["subject"], Schema.from_dict(body))
    report = verify(orders, registry=client)
    assert not report.drift and report.checked == (
        f"confluent {ex.data['subject']} version 2 (schema id 2)",)


def test_a_contract_file_kept_in_git(policy, tmp_path, capsys):
    export(policy, "confluent", today=TODAY).write(tmp_path)
    register = tmp_path / "confluent" / "orders-value.register.json"
    config = tmp_path / "confluent" / "orders-value.config.json"
    for path in (register, config):
        status, doc = run(capsys, ["verify", str(POLICY_FILE), "--contract", str(path),
                                   "--json"])
        assert status == 0 and not doc["drift"], path
    body = json.loads(config.read_text())
    body["defaultRuleSet"]["domainRules"][0]["expr"] = "true"
    config.write_text(json.dumps(body))
    status, doc = run(capsys, ["verify", str(POLICY_FILE), "--contract", str(config), "--json"])
    assert status == 1
    assert [(d["item"], d["what"], d["deployed"]) for d in doc["differences"]] == [
        ("rule status-known", "expression", "`true`")]


def test_what_cannot_be_read_is_an_error_not_a_clean_bill(policy, capsys, tmp_path):
    url = f"mock://kqlab-verify-empty-{uuid.uuid4().hex[:8]}"
    with pytest.raises(VerifyError, match="subject 'orders-value' is not registered"):
        verify(policy, registry=registry_client(url))
    assert main(["verify", str(POLICY_FILE), "--registry", url]) == 2
    assert "not registered" in capsys.readouterr().err
    assert main(["verify", str(POLICY_FILE)]) == 2
    assert "nothing to verify" in capsys.readouterr().err
    assert main(["verify", str(POLICY_FILE), "--gate-config", str(tmp_path / "no.yaml")]) == 2
    assert "cannot read the gate config" in capsys.readouterr().err
    with pytest.raises(VerifyError, match="has no data contract"):
        verify(Policy(name="bytes-only"), registry=registry_client(url))


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "--json" in text and "exit status" in text


def test_demo_verify_finds_every_planted_difference(capsys):
    status, doc = run(capsys, ["demo", "--verify", "--json"])
    assert status == 0 and doc["ok"] is True
    assert doc["clean"]["drift"] is False and doc["not_found"] == []
    assert len(doc["drifted"]["differences"]) >= len(doc["planted"])


def test_a_json_contract_validates_against_the_policys_schema(deployed, policy):
    """For JSON the serializer validates every value against the registered schema: a
    schema swapped by hand changes what producers may write."""
    body = copy.deepcopy(deployed.contract.data["register"])
    body["schema"] = json.dumps({"type": "object", "required": ["type"]})
    deployed.registry.register_schema("orders-value", Schema.from_dict(body))
    (d,) = verify(policy, registry=deployed.registry).differences
    assert (d.item, d.what, d.policy) == ("schema", "schema", "{}")
    assert json.loads(d.deployed) == {"type": "object", "required": ["type"]}


def test_apache_kafka_reports_every_key_so_nothing_is_assumed(policy, kafka_broker, topic_name):
    """Apache Kafka reports unset keys with their defaults: the bare topic's max.message.bytes
    is the broker's own answer (1048588), and nothing is noted as unreported."""
    kafka_broker.create_topic(topic_name, config={"cleanup.policy": "compact,delete"})
    admin = kafka_broker.admin()
    try:
        report = verify(policy, admin=admin, topics=[topic_name, f"{topic_name}-nowhere"])
    finally:
        admin.delete_topics([topic_name])[topic_name].result(10)
    found = {(d.where, d.item): d for d in report.differences}
    size = found[(topic_name, "max.message.bytes")]
    assert (size.policy, size.deployed) == ("65536", "1048588")
    assert (topic_name, "cleanup.policy") not in found
    assert not any("is not reported by the broker" in n for n in report.notes)
    assert found[(f"{topic_name}-nowhere", "topic")].what == "missing topic"
