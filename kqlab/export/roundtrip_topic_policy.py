"""Round trip of the topic policy: the exported plugin run by the real Apache Kafka broker.

The topic-policy export is admin-side (KIP-108 ``CreateTopicPolicy``, KIP-133
``AlterConfigPolicy``): it refuses no record, it keeps the topic settings the replay's broker
checks ran with.  Its proof is therefore a set of admin requests, not the sample: a
:class:`~kqlab.embedded.KafkaBroker` of its own starts with the plugin jar on its classpath
(combined mode, so the controller — where KRaft runs the policies — loads it) and the
exported requirements file, and is asked

* to create a topic of the policy with every required setting (must pass),
* per requirement, to create one with that setting broken, to break it on an existing topic
  with ``incremental_alter_configs`` and with the legacy ``alter_configs`` — each both for
  real and as a ``validate_only`` dry run (each must be refused with POLICY_VIOLATION and a
  message naming the setting).

Each ``broker:`` row (the broker check a setting drives) is compared over the probes of the
requirements that protect it (:class:`~kqlab.export.roundtrip.RuleCheck` with ``unit`` admin
requests): refused where the exported requirements predict a refusal, and nowhere else.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from kqlab.export.roundtrip import RoundTrip, RuleCheck, SampleView

__all__ = ["Probe", "roundtrip_topic_policy", "run_probes", "violating_value"]

_UNIT = "admin requests"


def violating_value(q: Any) -> str:
    """A value of ``q.config`` that breaks requirement ``q`` (and Kafka accepts as a value)."""
    if q.config == "cleanup.policy":
        return "compact" if {p.strip() for p in q.value.split(",")} == {"delete"} else "delete"
    if q.config == "message.timestamp.type":
        return "LogAppendTime" if q.value == "CreateTime" else "CreateTime"
    if q.config == "compression.type":
        return "gzip" if q.value != "gzip" else "lz4"
    if q.op == "contains":
        return "delete" if "compact" in q.value else "compact"
    n = int(q.value)
    return str(n - 1 if q.op == "at_least" else n + 1)


class Probe:
    """One admin request: what it asked, whether a refusal was predicted, what came back."""

    def __init__(self, name: str, config: str | None, expect_refused: bool) -> None:
        self.name, self.config, self.expect_refused = name, config, expect_refused
        self.refused = False
        self.code = ""
        self.message = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {"probe": self.name, "config": self.config, "expect_refused": self.expect_refused,
                "refused": self.refused, "code": self.code, "message": self.message}


def _outcome(probe: Probe, fut: Any, timeout: float) -> Probe:
    try:
        fut.result(timeout)
    except Exception as exc:
        err: Any = exc.args[0] if exc.args else None
        probe.code = err.name() if hasattr(err, "name") else type(exc).__name__
        probe.message = err.str() if hasattr(err, "str") else str(exc)
        probe.refused = probe.code == "POLICY_VIOLATION" and \
            (probe.config is None or probe.config in probe.message)
    return probe


def run_probes(policy: Any, broker: Any, *, timeout: float = 30.0) -> list[Probe]:
    """Every probe of the module docstring against ``broker`` (started with the plugin)."""
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    from kqlab.export.topic_policy import requirements

    admin = broker.admin()
    reqs = requirements(policy)
    good = {q.config: q.value for q in reqs}
    if not policy.topics.names:
        raise ValueError(f"policy {policy.name!r} binds topics by pattern only: the probes "
                         "need a topic name it binds")
    base = policy.topics.names[0]
    probes: list[Probe] = []

    def create(name: str, config: str | None, configs: dict[str, str], dry: bool) -> Probe:
        probe = Probe(f"create{' (validate_only)' if dry else ''} {config or 'compliant'}",
                      config, config is not None)
        fut = admin.create_topics([NewTopic(name, 1, 1, config=configs)], validate_only=dry,
                                  request_timeout=timeout)[name]
        return _outcome(probe, fut, timeout)

    # the policy binds its topics by name: the probes are about that very topic (a refused
    # or dry-run creation creates nothing; the compliant one then does, for the alters)
    existing = base
    probes.append(create(existing, None, good, True))
    for q in reqs:
        for dry in (False, True):
            probes.append(create(existing, q.config, {**good, q.config: violating_value(q)},
                                 dry))
    probes.append(create(existing, None, good, False))
    for q in reqs:
        bad = violating_value(q)
        for dry in (False, True):
            res = ConfigResource(ResourceType.TOPIC, existing, incremental_configs=[
                ConfigEntry(q.config, bad, incremental_operation=AlterConfigOpType.SET)])
            p = Probe(f"incremental_alter_configs{' (validate_only)' if dry else ''} "
                      f"{q.config}={bad}", q.config, True)
            probes.append(_outcome(p, admin.incremental_alter_configs(
                [res], validate_only=dry, request_timeout=timeout)[res], timeout))
            res = ConfigResource(ResourceType.TOPIC, existing, set_config={**good,
                                                                           q.config: bad})
            p = Probe(f"alter_configs{' (validate_only)' if dry else ''} {q.config}={bad}",
                      q.config, True)
            with warnings.catch_warnings():  # the legacy API is the point of this probe
                warnings.simplefilter("ignore", DeprecationWarning)
                fut = admin.alter_configs([res], validate_only=dry,
                                          request_timeout=timeout)[res]
            probes.append(_outcome(p, fut, timeout))
    return probes


def roundtrip_topic_policy(policy: Any, sample: Any = None, *, now: int | None = None,
                           view: SampleView | None = None, timeout: float = 30.0) -> RoundTrip:
    """The round trip of the module docstring (``sample`` and ``view`` are not needed: an
    admin policy judges requests, not records)."""
    from kqlab.embedded import KafkaBroker
    from kqlab.embedded._process import EmbeddedBrokerError
    from kqlab.export.base import ExportError
    from kqlab.export.topic_policy import FILE_CONFIG, PLUGIN_CLASS, build, plugin_jar

    started = time.perf_counter()
    rt = RoundTrip(target="topic-policy", ran=True, serializer="Apache Kafka " +
                   "controller + kqlab topic policy plugin")
    ex = build(policy)
    if not policy.topics.names:
        return RoundTrip(target="topic-policy", ran=False, reason=(
            "the policy binds topics by pattern only (" + ", ".join(policy.topics.patterns) +
            "): the probes need a topic name it binds"))
    try:
        jar = plugin_jar()
    except ExportError as exc:
        return RoundTrip(target="topic-policy", ran=False, reason=str(exc))
    with tempfile.TemporaryDirectory(prefix="kqlab-topic-policy-") as tmp:
        file = Path(tmp) / "kqlab-topic-policy.properties"
        file.write_text(ex.files["topic-policy/kqlab-topic-policy.properties"], encoding="utf-8")
        configs = {"create.topic.policy.class.name": PLUGIN_CLASS,
                   "alter.config.policy.class.name": PLUGIN_CLASS, FILE_CONFIG: str(file)}
        try:
            broker = KafkaBroker(configs=configs, classpath=[jar])
            with broker:
                probes = run_probes(policy, broker, timeout=timeout)
                version = broker.describe_version()
        except EmbeddedBrokerError as exc:
            return RoundTrip(target="topic-policy", ran=False, reason=str(exc))
    _fill(rt, ex, probes)
    rt.notes.append(f"Apache Kafka {version} (KRaft, combined broker+controller) started with "
                    f"{jar.name} on its classpath and the exported requirements file; "
                    f"{len(probes)} admin requests: " + "; ".join(
                        f"{p.name}: {'refused ' + p.code if p.code else 'accepted'}"
                        for p in probes))
    rt.seconds = time.perf_counter() - started
    return rt


def _fill(rt: RoundTrip, ex: Any, probes: list[Probe]) -> None:
    """Per ``broker:`` row, the probes of the requirements protecting it as a RuleCheck."""
    protects: dict[str, set[str]] = {}
    for q in ex.data["requirements"]:
        for p in q["protects"]:
            protects.setdefault(p, set()).add(q["config"])
    coords = [("admin", 0, i) for i in range(len(probes))]
    rt.records = rt.judged = len(probes)
    rt.refused = sum(p.refused for p in probes)
    rt.expected = sum(p.expect_refused for p in probes)
    rt.only_target = [coords[i] for i, p in enumerate(probes) if p.refused and
                      not p.expect_refused]
    rt.only_replay = [coords[i] for i, p in enumerate(probes) if p.expect_refused and
                      not p.refused]
    rt.agree = rt.refused - len(rt.only_target)
    rt.by_rule = {"POLICY_VIOLATION (44)": sum(p.code == "POLICY_VIOLATION" for p in probes)}
    for f in ex.fidelity:
        if not f.rule.startswith("broker:") or f.rule not in protects:
            continue
        mine = [i for i, p in enumerate(probes) if p.config is None or
                p.config in protects[f.rule]]
        check = RuleCheck(rule=f.rule, judged=len(mine), unit=_UNIT,
                          refused=sum(probes[i].refused for i in mine),
                          expected=sum(probes[i].expect_refused for i in mine),
                          only_target=[coords[i] for i in mine if probes[i].refused and
                                       not probes[i].expect_refused],
                          only_replay=[coords[i] for i in mine if probes[i].expect_refused and
                                       not probes[i].refused])
        for side, coord in (("target", check.only_target), ("replay", check.only_replay)):
            if coord:
                p = probes[coord[0][2]]
                check.examples[side] = {"where": p.name, "value": p.message or "accepted"}
        rt.checks[f.rule] = check
        rt.rules.append(f.rule)
