"""Topic-config policy (KIP-108 ``CreateTopicPolicy`` / ``AlterConfigPolicy``): the topic
settings a policy requires, checked against a live cluster and dry-run through
``create_topics(validate_only=True)``, and enforced by a broker plugin.

A record policy is replayed under topic configs (``broker.configs``: compaction, size limit,
timestamp bounds); production only behaves as the replay predicted while the topics keep those
settings.  KIP-108's admin policies never see records (deployment-targets.md §7), but they can
keep such settings from drifting: :func:`requirements` lists them (each with the rule or check
it protects), :func:`check_topics` compares them with what ``describe_configs`` reports, and
:func:`dry_run` asks the cluster whether a topic created with them would be accepted.

Against Tansu (the test broker) both run, within its documented gaps (test-broker.md):
``DescribeConfigs`` returns only explicitly set keys, so an unset key is judged against
Kafka's default for the policy's broker version and reported as ``default (assumed)``; and
Tansu answers ``validate_only`` by *creating* the topic without validating configs, which
:func:`dry_run` detects (the probe topic appears), undoes and reports.

The export's ``kqlab-topic-policy.properties`` is read by ``io.kqlab.kafka.KqlabTopicPolicy``
(extensions/topic-policy: a ``CreateTopicPolicy`` + ``AlterConfigPolicy`` built by ``make
setup``, :func:`plugin_jar`), which refuses breaking creations and config changes with
POLICY_VIOLATION; :mod:`kqlab.export.roundtrip_topic_policy` proves that in a real broker.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kqlab.export.base import (
    APPROXIMATE,
    DECODE_KEY,
    EXACT,
    NOT_EXPRESSIBLE,
    Export,
    ExportError,
    RuleFidelity,
    comment_block,
    implicit_row,
    implicit_rules,
    provenance,
    provenance_lines,
    rule_lines,
)

__all__ = [
    "FILE_CONFIG",
    "PLUGIN_CLASS",
    "DryRun",
    "Requirement",
    "TopicCheck",
    "build",
    "check_topics",
    "dry_run",
    "plugin_file",
    "plugin_jar",
    "requirements",
]

TITLE = "Topic-config policy (KIP-108 CreateTopicPolicy)"
OPS = ("equals", "contains", "at_most", "at_least")
#: the broker plugin (extensions/topic-policy): its class, jar and the config naming its file
PLUGIN_CLASS = "io.kqlab.kafka.KqlabTopicPolicy"
PLUGIN_JAR = "kqlab-topic-policy-1.jar"
FILE_CONFIG = "kqlab.topic.policy.file"

BEHAVIOUR = (
    "admin-side: checks topic creation and config changes (POLICY_VIOLATION, 44, on the "
    "admin call), never records; it keeps the settings the replay assumed from drifting",
    "CreateTopicPolicy sees only the configs in the request, not broker defaults: a policy "
    "class must treat a missing key as the broker default",
    "the record-level checks these settings drive are the broker's own (R3 keys on compacted "
    "topics, R4 timestamps with INVALID_TIMESTAMP 32, C2 size with MESSAGE_TOO_LARGE 10), "
    "whole batch, per the replay",
)


@dataclass(frozen=True, slots=True)
class Requirement:
    """One topic setting the policy needs: ``config op value``, why, and what it protects."""

    config: str
    op: str
    value: str
    why: str
    protects: tuple[str, ...] = ()

    def holds(self, actual: str | None) -> bool:
        """Whether the setting ``actual`` satisfies the requirement."""
        if actual is None:
            return False
        if self.op == "equals":
            if self.config == "cleanup.policy":
                return _set(actual) == _set(self.value)
            return str(actual).strip() == self.value
        if self.op == "contains":
            return _set(self.value) <= _set(actual)
        try:
            a, v = int(str(actual).strip()), int(self.value)
        except ValueError:
            return False
        return a <= v if self.op == "at_most" else a >= v

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {"config": self.config, "op": self.op, "value": self.value, "why": self.why,
                "protects": list(self.protects)}


def _set(text: str) -> frozenset[str]:
    return frozenset(p.strip().lower() for p in str(text).split(",") if p.strip())


def requirements(policy: Any) -> list[Requirement]:
    """The topic settings ``policy`` requires (see the module docstring).

    Examples
    --------
    >>> from kqlab.policy import loads_policy
    >>> p = loads_policy("kqlab: 1\\nname: p\\ntopics: {names: [t]}\\n"
    ...                  "broker: {configs: {cleanup.policy: compact}}\\n")
    >>> [(r.config, r.op, r.value) for r in requirements(p)]
    [('cleanup.policy', 'equals', 'compact')]
    """
    out: dict[str, Requirement] = {}
    configs = dict(policy.broker.configs)
    for name, value in sorted(configs.items()):
        protects = {"cleanup.policy": ("broker:R3",) if "compact" in _set(str(value)) else (),
                    "max.message.bytes": ("broker:C2",),
                    "message.timestamp.before.max.ms": ("broker:R4",),
                    "message.timestamp.after.max.ms": ("broker:R4",),
                    "message.timestamp.type": ("broker:R4",)}.get(name, ())
        why = "the replay's broker checks ran with this value"
        if name == "cleanup.policy" and "compact" in _set(str(value)):
            why += "; compaction makes the broker reject records without a key (R3)"
        out[name] = Requirement(name, "equals", str(value), why, protects)
    timed = [r.id for r in policy.rules if r.kind == "timestamp_window" and r.mode == "reject"]
    if (timed or any(n.startswith("message.timestamp.") for n in configs)) and \
            "message.timestamp.type" not in out:
        out["message.timestamp.type"] = Requirement(
            "message.timestamp.type", "equals", "CreateTime",
            "timestamps are the producer's: LogAppendTime would overwrite them and skip the "
            "timestamp bounds the replay checked", tuple(timed) or ("broker:R4",))
    for r in policy.rules:
        if r.kind != "timestamp_window" or r.mode != "reject" or r.when or \
                r.param("relative_to") != "now":
            continue
        for param, config in (("before_ms", "message.timestamp.before.max.ms"),
                              ("after_ms", "message.timestamp.after.max.ms")):
            if r.param(param) is not None and config not in out:
                out[config] = Requirement(config, "at_most", str(r.param(param)),
                                          f"the broker's own bound enforces rule {r.id!r} "
                                          "(as INVALID_TIMESTAMP, whole batch)", (r.id,))
    return list(out.values())


def _fidelity(policy: Any, reqs: list[Requirement]) -> list[RuleFidelity]:
    protected = {p for q in reqs for p in q.protects}
    out = []
    for r in policy.rules:
        if r.id in protected:
            out.append(RuleFidelity(rule=r.id, kind=r.kind, status=APPROXIMATE, mode=r.mode,
                                    how="the topic's message.timestamp.*.max.ms bound does the "
                                    "same check broker-side (INVALID_TIMESTAMP, not the policy's "
                                    "error)"))
        elif r.kind in ("value_size", "record_size") and r.mode == "reject":
            out.append(RuleFidelity(rule=r.id, kind=r.kind, status=NOT_EXPRESSIBLE,
                                    mode=r.mode, how="max.message.bytes limits whole (compressed)"
                                    " batches, not single records; set it by hand if wanted"))
        else:
            out.append(RuleFidelity(rule=r.id, kind=r.kind, status=NOT_EXPRESSIBLE, mode=r.mode,
                                    how="admin policies see topic configs, never records"))
    for q in reqs:
        for p in q.protects:
            if p.startswith("broker:") and not any(f.rule == p for f in out):
                out.append(RuleFidelity(rule=p, kind="broker check", status=EXACT,
                                        how=f"keeps {q.config} as the replay assumed"))
    return out


def _implicit(policy: Any) -> list[RuleFidelity]:
    """The implicit rows: admin policies never see a record, so they decode nothing — no
    key, no value, no schema id (not expressible, like every record rule here; the plugin's
    run proves what it does judge, the topic settings)."""
    return [implicit_row(r, NOT_EXPRESSIBLE, "admin policies see topic configs, never "
                         "records" + (": no record is refused for its key (nor is one in "
                                      "the replay)" if r.id == DECODE_KEY else ""))
            for r in implicit_rules(policy)]


def build(policy: Any) -> Export:
    """``requirements.json`` and the broker properties that enable KIP-108 policies."""
    if not policy.topics.names and not policy.topics.patterns:
        raise ExportError(f"policy {policy.name!r} names no topics")
    prov = provenance(policy)
    reqs = requirements(policy)
    fid = _fidelity(policy, reqs)
    doc = {"kqlab": prov, "topics": {"names": list(policy.topics.names),
                                     "patterns": list(policy.topics.patterns)},
           "broker_version": policy.broker.version,
           "requirements": [q.to_dict() for q in reqs]}
    props = comment_block([
        "KIP-108/133 admin policies, exported by kqlab", *provenance_lines(prov),
        *rule_lines(policy.rules, {f.rule: f.status for f in fid}),
        "io.kqlab.kafka.KqlabTopicPolicy (extensions/topic-policy, built by `make setup` into",
        f"extensions/topic-policy/target/{PLUGIN_JAR}) reads kqlab-topic-policy.properties and",
        "refuses creations and config changes that break it with POLICY_VIOLATION (44).",
        "Put the jar on every controller's classpath (KRaft runs the policies there), e.g.",
        f"CLASSPATH=/path/to/{PLUGIN_JAR} bin/kafka-server-start.sh server.properties,",
        "and name the file where you install it:",
    ]) + f"create.topic.policy.class.name={PLUGIN_CLASS}\n" \
        f"alter.config.policy.class.name={PLUGIN_CLASS}\n" \
        f"{FILE_CONFIG}=kqlab-topic-policy.properties\n"
    props += comment_block([f"requires {q.config} {q.op} {q.value}: {q.why}" for q in reqs])
    files = {"topic-policy/requirements.json": json.dumps(doc, indent=2) + "\n",
             "topic-policy/server.properties": props,
             "topic-policy/kqlab-topic-policy.properties": plugin_file(policy, prov)}
    notes = ("check a live cluster with kqlab.export.topic_policy.check_topics(admin, policy) "
             "and dry-run a creation with dry_run(admin, policy)",)
    return Export(target="topic-policy", title=TITLE, policy=policy.name, files=files,
                  fidelity=(*fid, *_implicit(policy)), behaviour=BEHAVIOUR, notes=notes,
                  data=doc)


def _prop(value: str) -> str:
    """A java.util.Properties value (read as UTF-8): backslashes, line breaks, a leading blank."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + out if out[:1] in (" ", "\t") else out


def plugin_file(policy: Any, prov: dict[str, Any] | None = None, *,
                partitions: str | None = None, replication_factor: str | None = None) -> str:
    """The requirements file the broker plugin reads (format: extensions/topic-policy/README.md).

    ``partitions`` / ``replication_factor``: optional bounds such as ``"at_least 3"``.  Every
    required config also gets Kafka's default for the policy's broker version and its broker
    synonym, so the plugin judges a key a request leaves out as the topic will get it.
    """
    from kqlab.kafka.configs import BROKER_SYNONYMS, BrokerRelease

    reqs = requirements(policy)
    lines = comment_block(["kqlab topic policy, read by " + PLUGIN_CLASS,
                           *provenance_lines(prov or provenance(policy))]).splitlines()
    lines += ["format=kqlab-topic-policy/1", "scopes=1", f"scope.0.name={_prop(policy.name)}",
              "scope.0.topics=" + ",".join(policy.topics.names)]
    lines += [f"scope.0.pattern.{i}={_prop(p)}" for i, p in enumerate(policy.topics.patterns)]
    for key, bound in (("partitions", partitions), ("replication.factor", replication_factor)):
        if bound is not None:
            lines.append(f"scope.0.{key}={bound}")
    lines.append(f"scope.0.requirements={len(reqs)}")
    for i, q in enumerate(reqs):
        lines += [f"scope.0.requirement.{i}.config={q.config}",
                  f"scope.0.requirement.{i}.op={q.op}",
                  f"scope.0.requirement.{i}.value={_prop(q.value)}",
                  f"scope.0.requirement.{i}.why={_prop(q.why)}"]
    defaults = BrokerRelease.parse(policy.broker.version).defaults()
    for q in reqs:
        if q.config in defaults:
            lines.append(f"default.{q.config}={_prop(str(defaults[q.config]))}")
        if q.config in BROKER_SYNONYMS:
            lines.append(f"synonym.{q.config}={BROKER_SYNONYMS[q.config]}")
    return "\n".join(lines) + "\n"


def plugin_jar(*, build: bool = True) -> Path:
    """The plugin's jar (``extensions/topic-policy/target``), built with Maven when missing or
    older than its sources and ``build``; ``ExportError`` says how when it cannot be."""
    import shutil
    import subprocess

    root = Path(__file__).resolve().parents[2] / "extensions" / "topic-policy"
    jar = root / "target" / PLUGIN_JAR
    sources = [root / "pom.xml", *root.joinpath("src").rglob("*.java")]
    fresh = jar.exists() and all(p.stat().st_mtime <= jar.stat().st_mtime for p in sources
                                 if p.exists())
    if fresh or not build:
        if not jar.exists():
            raise ExportError(f"the topic-policy plugin jar is not built ({jar}): run `make "
                              "setup` (or mvn -q -f extensions/topic-policy/pom.xml package)")
        return jar
    if not (root / "pom.xml").exists():
        raise ExportError(f"no extensions/topic-policy/pom.xml under {root.parent.parent}: the "
                          "plugin builds from a kqlab source checkout")
    if shutil.which("mvn") is None:
        raise ExportError("building the topic-policy plugin needs Maven and no `mvn` is on "
                          "PATH: install Maven 3.8+ (Debian: apt-get install maven), then run "
                          "mvn -q -f extensions/topic-policy/pom.xml package")
    proc = subprocess.run(["mvn", "-B", "-q", "-f", str(root / "pom.xml"), "package"],
                          capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0 or not jar.exists():
        raise ExportError(f"building the topic-policy plugin failed (exit {proc.returncode}): "
                          f"{(proc.stdout + proc.stderr).strip()[-1500:]}")
    return jar


# ------------------------------------------------------------------------ against a cluster

@dataclass(frozen=True, slots=True)
class TopicCheck:
    """One requirement on one topic: the value found, where it came from, whether it holds."""

    topic: str
    requirement: Requirement
    actual: str | None
    source: str  # "topic" | "default (assumed)" | "missing topic" | "error: ..."
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {"topic": self.topic, **self.requirement.to_dict(), "actual": self.actual,
                "source": self.source, "ok": self.ok}


def check_topics(admin: Any, policy: Any, topics: list[str] | None = None, *,
                 timeout: float = 10.0) -> list[TopicCheck]:
    """Compare each topic's configs (``describe_configs``) with :func:`requirements`.

    A key the broker does not report is judged against Kafka's default for the policy's
    broker version (``source: "default (assumed)"``): Tansu, like a ``CreateTopicPolicy``,
    only knows explicitly set keys.
    """
    from confluent_kafka.admin import ConfigResource, ResourceType

    from kqlab.kafka.configs import BrokerRelease

    reqs = requirements(policy)
    topics = list(topics if topics is not None else policy.topics.names)
    defaults = BrokerRelease.parse(policy.broker.version).defaults()
    existing = set(admin.list_topics(timeout=timeout).topics)
    out: list[TopicCheck] = []
    for topic in topics:
        if topic not in existing:
            out.extend(TopicCheck(topic, q, None, "missing topic", False) for q in reqs)
            continue
        try:
            res = ConfigResource(ResourceType.TOPIC, topic)
            entries = admin.describe_configs([res], request_timeout=timeout)[res].result(timeout)
            found = {k: e.value for k, e in entries.items() if e.value is not None}
            error = None
        except Exception as exc:
            found, error = {}, f"error: {exc}"
        for q in reqs:
            if error:
                out.append(TopicCheck(topic, q, None, error, False))
            elif q.config in found:
                out.append(TopicCheck(topic, q, found[q.config], "topic",
                                      q.holds(found[q.config])))
            else:
                default = defaults.get(q.config)
                actual = None if default is None else str(default)
                out.append(TopicCheck(topic, q, actual, "default (assumed)", q.holds(actual)))
    return out


@dataclass(frozen=True, slots=True)
class DryRun:
    """The outcome of ``create_topics(validate_only=True)`` with the required configs."""

    topic: str
    configs: dict[str, str]
    accepted: bool
    error: str | None
    #: False when the broker created the topic anyway (Tansu): the probe was deleted again
    validate_only_honoured: bool

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {"topic": self.topic, "configs": self.configs, "accepted": self.accepted,
                "error": self.error, "validate_only_honoured": self.validate_only_honoured}


def dry_run(admin: Any, policy: Any, *, topic: str | None = None, partitions: int = 1,
            replication_factor: int = 1, timeout: float = 10.0) -> DryRun:
    """Ask the cluster whether a topic with the required configs would be created.

    The probe topic is ``topic`` (default a fresh ``kqlab-dry-run.<policy topic>.<hex>`` name,
    so an existing topic is never touched).  If the broker ignores ``validate_only`` and
    creates it, it is deleted again and ``validate_only_honoured`` is False.
    """
    from confluent_kafka.admin import NewTopic

    base = (policy.topics.names or ("topic",))[0]
    name = topic or f"kqlab-dry-run.{base}.{uuid.uuid4().hex[:8]}"
    existed = name in admin.list_topics(timeout=timeout).topics
    configs = {q.config: q.value for q in requirements(policy) if q.op == "equals"}
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                        replication_factor=replication_factor, config=configs)],
                              validate_only=True, request_timeout=timeout)[name]
    try:
        fut.result(timeout)
        accepted, error = True, None
    except Exception as exc:
        accepted, error = False, str(exc)
    created = not existed and name in admin.list_topics(timeout=timeout).topics
    if created:
        admin.delete_topics([name], request_timeout=timeout)[name].result(timeout)
    return DryRun(name, configs, accepted, error, validate_only_honoured=not created)
