"""Verify what is deployed against the vetted policy: the loop back from production (issue 17).

An export is only as good as what production runs *today*.  Contracts get re-registered by
hand, a rule is "temporarily" switched to ``onFailure: NONE``, a topic's
``max.message.bytes`` is raised, the gate is pointed at an edited policy file: each silently
makes the replay's predictions wrong.  :func:`verify` reads what is deployed on each
enforcement point and diffs it against what the exporters would write for the policy, one
:class:`Difference` per finding, each saying what the policy says and what is deployed:

=================  ==========================================================================
``confluent``      the subject's latest version in a Schema Registry (or a register-body file
                   kept in git): ``ruleSet.domainRules`` rule by rule (missing, extra, changed
                   expression, mode / ``onFailure``, other settings), the ``kqlab.*`` metadata
                   and, for JSON, the schema the serializer validates against
``topics``         ``describe_configs`` of every topic against the settings the replay assumed
                   (:func:`kqlab.export.topic_policy.check_topics`; keys a broker does not
                   report, as Tansu, are judged against Kafka's default and say so)
``gate``           the gate's config file (:func:`kqlab.gate.load_gate_file`): the policy hash
                   it pins, its routes, and the policy file it runs, rule by rule
=================  ==========================================================================

The expected side is always the exporter's own output (:func:`kqlab.export.confluent.build`,
:func:`kqlab.export.topic_policy.requirements`, :func:`kqlab.export.gate.gate_config`), so
verify and export cannot disagree about a format.  Deployment choices that are not the
policy's are not drift: the schema-registry URL, a DLQ topic (``onFailure: DLQ`` still refuses
the record, like ``ERROR``), the gate's sink and dead-letter topic names, the export date.

Only the standard library is imported at module level; the Kafka client and the gate are
imported by the readers that need them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kqlab.export.base import ExportError

__all__ = [
    "Difference",
    "VerifyError",
    "VerifyReport",
    "confluent_differences",
    "contract_from_file",
    "contract_from_registry",
    "gate_differences",
    "topic_differences",
    "verify",
]


class VerifyError(ExportError):
    """What is deployed could not be read (unreachable registry, unknown subject, unreadable
    file): the message names the target and what to check.  Not a finding: a verify that
    cannot read a target must not report "no drift"."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Difference:
    """One way the deployment differs from the policy.

    ``target`` is the enforcement point (``confluent`` | ``topics`` | ``gate``), ``where`` the
    deployed object (a subject, a topic, a gate file), ``item`` the rule id or setting,
    ``what`` the kind of drift (``missing rule``, ``extra rule``, ``expression``, ``mode``,
    ``setting``, ``metadata``, ``schema``, ``topic config``, ``missing topic``, ``policy
    hash``, ``route``, ``policy file``), and ``policy`` / ``deployed`` the two sides as text
    (``None``: absent on that side).
    """

    target: str
    where: str
    item: str
    what: str
    policy: str | None
    deployed: str | None

    def line(self) -> str:
        """One line: ``confluent orders-value: rule amount-range: expression: policy says …;
        deployed …``."""
        return (f"{self.target} {self.where}: {self.item}: {self.what}: policy says "
                f"{_side(self.policy)}; deployed {_side(self.deployed)}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (with the rendered ``line``)."""
        return {"target": self.target, "where": self.where, "item": self.item,
                "what": self.what, "policy": self.policy, "deployed": self.deployed,
                "line": self.line()}


def _side(text: str | None) -> str:
    return "nothing" if text is None else text


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyReport:
    """The outcome of one :func:`verify`: what was read, and every difference found."""

    policy: str
    content_hash: str
    #: one line per deployed object read ("confluent orders-value version 3 (schema id 7)")
    checked: tuple[str, ...] = ()
    differences: tuple[Difference, ...] = ()
    #: what a reader had to assume (a broker's default standing for an unreported config)
    notes: tuple[str, ...] = ()

    @property
    def drift(self) -> bool:
        """True when anything deployed differs from the policy."""
        return bool(self.differences)

    def lines(self) -> list[str]:
        """One line per difference."""
        return [d.line() for d in self.differences]

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape ``kqlab verify --json`` prints."""
        return {"policy": self.policy, "content_hash": self.content_hash,
                "drift": self.drift, "checked": list(self.checked),
                "differences": [d.to_dict() for d in self.differences],
                "notes": list(self.notes)}


# -------------------------------------------------------------------------------- confluent

#: the Rule fields the comparison reads, with the value an absent field means (the wire
#: model's defaults, deployment-targets.md §2.2)
_RULE_DEFAULTS: dict[str, Any] = {"kind": "CONDITION", "mode": "WRITE", "type": None,
                                  "expr": None, "onSuccess": "NONE", "onFailure": "ERROR",
                                  "disabled": False, "params": {}, "tags": [], "doc": None}
#: the metadata properties that identify the policy (the rest, e.g. the export date, are not
#: the policy's content)
_IDENTITY = ("kqlab.policy", "kqlab.content_hash")


@dataclass(frozen=True, slots=True)
class DeployedContract:
    """A data contract as deployed: the register body shape (``Schema.to_dict()``) and where
    it was read (``subject`` plus a label such as ``version 3 (schema id 7)``)."""

    subject: str
    body: Mapping[str, Any]
    label: str


def contract_from_registry(client: Any, subject: str) -> DeployedContract:
    """The latest version of ``subject`` in a confluent-kafka ``SchemaRegistryClient``.

    The latest version is what producers serialising with ``use.latest.version`` run, and
    it already merges a subject's ``defaultRuleSet``.
    """
    try:
        latest = client.get_latest_version(subject)
    except Exception as exc:
        if getattr(exc, "http_status_code", None) == 404:
            raise VerifyError(f"subject {subject!r} is not registered: the contract was never "
                              "deployed there (export --target confluent, then register it), "
                              "or give --subject") from None
        raise VerifyError(f"cannot read subject {subject!r} from the schema registry: "
                          f"{type(exc).__name__}: {exc}") from None
    return DeployedContract(subject, latest.schema.to_dict(),
                            f"version {latest.version} (schema id {latest.schema_id})")


def contract_from_file(path: str | Path, subject: str | None = None) -> DeployedContract:
    """A register body (``<subject>.register.json``) or subject config
    (``<subject>.config.json``: ``defaultRuleSet`` / ``defaultMetadata``) kept as the record of
    what is deployed, e.g. in a GitOps repository."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise VerifyError(f"cannot read the deployed contract {p}: {exc}") from None
    if not isinstance(doc, dict):
        raise VerifyError(f"{p}: a contract file is a JSON object (a register body or a "
                          "subject config)")
    if "defaultRuleSet" in doc or "overrideRuleSet" in doc:
        doc = {"ruleSet": doc.get("overrideRuleSet") or doc.get("defaultRuleSet"),
               "metadata": doc.get("overrideMetadata") or doc.get("defaultMetadata")}
    name = subject or p.name.split(".register.json")[0].split(".config.json")[0]
    return DeployedContract(name, doc, f"file {p}")


def _rule_view(rule: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: rule.get(k, d) for k, d in _RULE_DEFAULTS.items()}
    for k, d in _RULE_DEFAULTS.items():
        if out[k] is None:
            out[k] = d
    return out


def _failure_mode(on_failure: str) -> str:
    """The kqlab mode a write-side ``onFailure`` action amounts to."""
    write = str(on_failure).split(",")[0].strip().upper()
    return "observe" if write == "NONE" else "reject"


def _show_rule(view: Mapping[str, Any]) -> str:
    return f"{view['type']} {view['kind']} `{view['expr']}` (onFailure {view['onFailure']})"


def confluent_differences(policy: Any, deployed: DeployedContract, *,
                          dlq_topic: str | None = None) -> list[Difference]:
    """The differences between the contract :mod:`kqlab.export.confluent` writes for
    ``policy`` and the ``deployed`` one.

    Rules are matched by name (the kqlab rule id).  ``onFailure`` ``DLQ`` on a rule the policy
    rejects with is not drift (the serializer still raises) unless ``dlq_topic`` is given, in
    which case the DLQ topic is compared too.
    """
    from kqlab.export import confluent

    body = deployed.body
    # a subject config carries rules and metadata, no schema: nothing to compare there
    has_schema = "schema" in body
    schema_type = str(body.get("schemaType") or "AVRO").upper() if has_schema else \
        ("JSON" if policy.value.format == "json" else "AVRO")
    # the deployed schema text stands in for the writer schema: schema evolution is the
    # producers' business, not the policy's (for JSON the expected schema is compared below)
    given = None if schema_type == "JSON" else str(body.get("schema") or "{}")
    expected = confluent.build(policy, subject=deployed.subject, schema=given,
                               dlq_topic=dlq_topic).data["register"]
    where = deployed.subject
    out: list[Difference] = []

    def diff(item: str, what: str, pol: str | None, dep: str | None) -> None:
        out.append(Difference(target="confluent", where=where, item=item, what=what,
                              policy=pol, deployed=dep))

    want = {r["name"]: _rule_view(r) for r in expected["ruleSet"]["domainRules"]}
    got_rules = ((body.get("ruleSet") or {}).get("domainRules") or [])
    got = {str(r.get("name")): _rule_view(r) for r in got_rules}
    for name, w in want.items():
        g = got.get(name)
        if g is None:
            diff(f"rule {name}", "missing rule", _show_rule(w), None)
            continue
        if g["expr"] != w["expr"]:
            diff(f"rule {name}", "expression", f"`{w['expr']}`", f"`{g['expr']}`")
        w_mode, g_mode = _failure_mode(w["onFailure"]), _failure_mode(g["onFailure"])
        if g["disabled"] and not w["disabled"]:
            diff(f"rule {name}", "mode", f"{w_mode} (enabled)", "disabled")
        elif w_mode != g_mode:
            diff(f"rule {name}", "mode", f"{w_mode} (onFailure {w['onFailure']})",
                 f"{g_mode} (onFailure {g['onFailure']})")
        elif dlq_topic and g["onFailure"] != w["onFailure"]:
            diff(f"rule {name}", "setting", f"onFailure {w['onFailure']}",
                 f"onFailure {g['onFailure']}")
        for key in ("kind", "mode", "type", "onSuccess", "doc"):
            if g[key] != w[key]:
                diff(f"rule {name}", "setting", f"{key} {w[key]}", f"{key} {g[key]}")
        w_params = dict(w["params"] or {})
        g_params = dict(g["params"] or {})
        if not dlq_topic:  # the DLQ topic is a deployment choice unless asked about
            g_params.pop("dlq.topic", None)
        if g_params != w_params:
            diff(f"rule {name}", "setting", f"params {json.dumps(w_params, sort_keys=True)}",
                 f"params {json.dumps(g_params, sort_keys=True)}")
    for name, g in got.items():
        if name not in want:
            diff(f"rule {name}", "extra rule", None, _show_rule(g))
    common_want = [n for n in want if n in got]
    common_got = [n for n in got if n in want]
    if common_want != common_got:  # the executor runs rules in order: the first failure raises
        diff("rule order", "setting", ", ".join(common_want), ", ".join(common_got))
    want_props = expected["metadata"]["properties"]
    got_props = ((body.get("metadata") or {}).get("properties") or {})
    for key in _IDENTITY:
        if got_props.get(key) != want_props.get(key):
            diff(f"metadata {key}", "metadata", want_props.get(key), got_props.get(key))
    if not has_schema:
        pass
    elif schema_type != expected["schemaType"]:
        diff("schemaType", "schema", expected["schemaType"], schema_type)
    elif schema_type == "JSON":
        try:
            same = json.loads(expected["schema"]) == json.loads(str(body.get("schema") or ""))
        except ValueError:
            same = False
        if not same:
            diff("schema", "schema", expected["schema"], str(body.get("schema")))
    return out


# ----------------------------------------------------------------------------------- topics

def topic_differences(admin: Any, policy: Any, topics: Sequence[str] | None = None, *,
                      timeout: float = 10.0) -> tuple[list[Difference], list[str], list[str]]:
    """Each topic's configs against the settings the replay assumed: ``(differences, checked,
    notes)``; a note names every key judged against Kafka's default because the broker did
    not report it."""
    from kqlab.export.topic_policy import check_topics

    if topics is None and policy.topics.patterns:
        import re

        names = list(policy.topics.names)
        names += sorted(t for t in admin.list_topics(timeout=timeout).topics
                        if t not in names and any(re.fullmatch(p, t)
                                                  for p in policy.topics.patterns))
        topics = names
    checks = check_topics(admin, policy, list(topics) if topics is not None else None,
                          timeout=timeout)
    out: list[Difference] = []
    notes: list[str] = []
    checked: list[str] = []
    for c in checks:
        if f"topic {c.topic}" not in checked:
            checked.append(f"topic {c.topic}")
        q = c.requirement
        want = q.value if q.op == "equals" else f"{q.op.replace('_', ' ')} {q.value}"
        if c.source == "missing topic":
            if not any(d.where == c.topic and d.what == "missing topic" for d in out):
                out.append(Difference(target="topics", where=c.topic, item="topic",
                                      what="missing topic", policy="the topic exists",
                                      deployed=None))
            continue
        if c.source.startswith("error"):
            raise VerifyError(f"cannot read the configs of topic {c.topic!r}: {c.source}")
        if c.source == "default (assumed)":
            notes.append(f"topic {c.topic}: {q.config} is not reported by the broker; judged "
                         f"as Kafka's default ({c.actual})")
        if not c.ok:
            actual = c.actual if c.source == "topic" else f"{c.actual} (the default)"
            out.append(Difference(target="topics", where=c.topic, item=q.config,
                                  what="topic config", policy=want, deployed=actual))
    return out, checked, notes


# ------------------------------------------------------------------------------------- gate

def gate_differences(policy: Any, gate_file: str | Path) -> tuple[list[Difference], list[str]]:
    """The gate's config file against the policy: the content hash it pins, its routes (one
    per policy topic; sink and dead-letter names are the deployment's), and the policy file
    it runs, rule by rule.  ``(differences, checked)``."""
    from kqlab.export.gate import gate_config
    from kqlab.gate import GateError, load_gate_file
    from kqlab.policy import PolicyError, diff, load_policy

    try:
        gf = load_gate_file(gate_file)
    except GateError as exc:
        raise VerifyError(f"cannot read the gate config: {exc}") from None
    where = str(gate_file)
    out: list[Difference] = []

    def add(item: str, what: str, pol: str | None, dep: str | None) -> None:
        out.append(Difference(target="gate", where=where, item=item, what=what, policy=pol,
                              deployed=dep))

    want_hash = policy.content_hash()
    if gf.content_hash != want_hash:
        add("policy.content_hash", "policy hash", want_hash, gf.content_hash)
    want_sources = [t["source"] for t in gate_config(policy)["topics"]]
    got_sources = [r.source for r in gf.routes]
    for t in want_sources:
        if t not in got_sources:
            add(f"route {t}", "route", f"topic {t} is gated", None)
    for r in gf.routes:
        if r.source not in want_sources:
            add(f"route {r.source}", "route", None, f"{r.source} -> {r.sink} (dlq {r.dlq})")
    checked = [f"gate {where} (policy file {gf.policy_path})"]
    try:
        running = load_policy(str(gf.policy_path))
    except (OSError, PolicyError) as exc:
        add("policy.path", "policy file", "a readable policy file",
            f"{gf.policy_path} ({type(exc).__name__}: {str(exc).splitlines()[0]})")
        return out, checked
    running_hash = running.content_hash()
    if running_hash != want_hash:
        note = " (the gate refuses it: its config pins another hash)" \
            if running_hash != gf.content_hash else ""
        add("policy file hash", "policy hash", want_hash, running_hash + note)
    d = diff(policy, running)
    for rule_id in d.removed:
        add(f"rule {rule_id}", "missing rule", _rule_text(policy.rule(rule_id)), None)
    for rule_id in d.added:
        add(f"rule {rule_id}", "extra rule", None, _rule_text(running.rule(rule_id)))
    for change in d.changed:
        for name, old, new in change.fields:
            what = "expression" if name in ("expr", "when") else \
                "mode" if name == "mode" else "setting"
            add(f"rule {change.id}", what, f"{name} {_plain(old)}", f"{name} {_plain(new)}")
    if d.moved:
        add("rule order", "setting", ", ".join(r.id for r in policy.rules),
            ", ".join(r.id for r in running.rules))
    for name, old, new in d.settings_changed:
        add(name, "setting", _plain(old), _plain(new))
    return out, checked


def _plain(value: Any) -> str:
    from kqlab.policy.model import thaw

    plain = thaw(value)
    return "(none)" if plain is None else json.dumps(plain) if not isinstance(plain, str) \
        else plain


def _rule_text(rule: Any) -> str:
    params = ", ".join(f"{k}={_plain(v)}" for k, v in rule.params.items())
    return f"{rule.kind}({params}) mode {rule.mode}"


# ----------------------------------------------------------------------------------- verify

@dataclass(slots=True)
class _Acc:
    checked: list[str] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def verify(policy: Any, *, registry: Any = None, subject: str | None = None,
           contract_file: str | Path | None = None, admin: Any = None,
           topics: Sequence[str] | None = None, gate_file: str | Path | None = None,
           dlq_topic: str | None = None, timeout: float = 10.0) -> VerifyReport:
    """Diff what is deployed against ``policy`` on every target given.

    ``registry``: a confluent-kafka ``SchemaRegistryClient`` (``mock://`` in tests) whose
    ``subject`` (default: the exporter's, the policy's value subject) holds the contract;
    ``contract_file``: a register body / subject config file instead; ``admin``: an
    ``AdminClient`` whose ``topics`` (default: the policy's topic names) are checked;
    ``gate_file``: the gate's config.  At least one target is required.

    Examples
    --------
    >>> from kqlab.policy import loads_policy
    >>> verify(loads_policy("kqlab: 1\\nname: p\\n"))
    Traceback (most recent call last):
    ...
    kqlab.export.verify.VerifyError: nothing to verify: give a schema registry, a contract \
file, an admin client or a gate config
    """
    if registry is None and contract_file is None and admin is None and gate_file is None:
        raise VerifyError("nothing to verify: give a schema registry, a contract file, an "
                          "admin client or a gate config")
    acc = _Acc()
    if registry is not None or contract_file is not None:
        from kqlab.export import confluent

        if subject is None:
            try:
                subject = confluent.build(policy, schema="{}").data["subject"]
            except ExportError as exc:
                raise VerifyError(f"the policy has no data contract to verify: {exc}") from None
        contracts = []
        if registry is not None:
            contracts.append(contract_from_registry(registry, subject))
        if contract_file is not None:
            contracts.append(contract_from_file(contract_file, subject))
        for c in contracts:
            acc.checked.append(f"confluent {c.subject} {c.label}")
            acc.differences += confluent_differences(policy, c, dlq_topic=dlq_topic)
    if admin is not None:
        diffs, checked, notes = topic_differences(admin, policy, topics, timeout=timeout)
        acc.differences += diffs
        acc.checked += checked
        acc.notes += notes
    if gate_file is not None:
        diffs, checked = gate_differences(policy, gate_file)
        acc.differences += diffs
        acc.checked += checked
    return VerifyReport(policy=policy.name, content_hash=policy.content_hash(),
                        checked=tuple(acc.checked), differences=tuple(acc.differences),
                        notes=tuple(acc.notes))
