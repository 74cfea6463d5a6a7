"""The topic-policy export run by the engine that enforces it: the plugin jar of
extensions/topic-policy in a real Apache Kafka broker (KRaft, combined mode: the controller
loads the policies), with the exported requirements file."""

from __future__ import annotations

from pathlib import Path

import pytest

from kqlab.export.fidelity import fidelity_report
from kqlab.export.roundtrip_topic_policy import run_probes
from kqlab.export.topic_policy import FILE_CONFIG, PLUGIN_CLASS, build, plugin_jar, requirements
from kqlab.policy import load_policy

DEMO = Path(__file__).resolve().parents[2] / "kqlab" / "sources" / "demo_policy.yaml"


@pytest.fixture(scope="module")
def policy():
    return load_policy(DEMO)


@pytest.fixture(scope="module")
def probes(policy, tmp_path_factory):
    from kqlab.embedded import KafkaBroker

    file = tmp_path_factory.mktemp("policy") / "kqlab-topic-policy.properties"
    file.write_text(build(policy).files["topic-policy/kqlab-topic-policy.properties"])
    configs = {"create.topic.policy.class.name": PLUGIN_CLASS,
               "alter.config.policy.class.name": PLUGIN_CLASS, FILE_CONFIG: str(file)}
    with KafkaBroker(configs=configs, classpath=[plugin_jar()]) as broker:
        yield run_probes(policy, broker)


def test_compliant_creates_pass(probes):
    compliant = [p for p in probes if p.config is None]
    assert [p.name for p in compliant] == ["create (validate_only) compliant", "create compliant"]
    assert all(not p.refused and p.code == "" for p in compliant)


def test_every_violation_refused_with_the_policys_message(policy, probes):
    reqs = requirements(policy)
    violating = [p for p in probes if p.config is not None]
    # per requirement: create, create dry, incremental alter (+dry), legacy alter (+dry)
    assert len(violating) == 6 * len(reqs) == 30
    for p in violating:
        assert p.code == "POLICY_VIOLATION", p.to_dict()
        assert p.message.startswith("kqlab topic policy orders-quality refuses "), p.message
        q = next(q for q in reqs if q.config == p.config)
        assert f"{q.config} must " in p.message and q.value in p.message, p.message
    kinds = {p.name.split(" ")[0] for p in violating}
    assert kinds == {"create", "incremental_alter_configs", "alter_configs"}


def test_validate_only_answers_the_same(probes):
    def key(p):
        return p.name.replace(" (validate_only)", "")

    real = {key(p): (p.code, p.message) for p in probes if "validate_only" not in p.name}
    dry = {key(p): (p.code, p.message) for p in probes if "validate_only" in p.name}
    assert set(dry) == set(real) and dry == real


def test_fidelity_rows_proven_by_the_run(policy):
    report = fidelity_report(policy, sample=None, targets=("topic-policy",))
    assert report.verdict("broker:R3", "topic-policy").verdict == "unverified"  # nothing ran
    from kqlab.export.roundtrip_topic_policy import roundtrip_topic_policy

    report.roundtrips.append(roundtrip_topic_policy(policy))
    for rid in ("broker:R3", "broker:C2", "broker:R4"):
        v = report.verdict(rid, "topic-policy")
        assert v.verdict == "exact", v.why
        assert "admin requests as the replay predicts" in v.why
