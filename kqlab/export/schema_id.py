"""Broker-side schema-ID validation: topic configs for Confluent Server, Redpanda and WarpStream
(deployment-targets.md §3, §4, §8), and the ``AdminClient`` calls that apply them.

The three brokers check that a record's key/value carries the Confluent framing (magic byte 0
and a 4-byte schema id) and that the id is registered under the subject its subject-name
strategy derives; WarpStream also decodes the payload with that schema.  None of them looks at
fields, headers, sizes or timestamps.  Only the switches are exported — the registry the broker
talks to is broker/cluster configuration, written as a placeholder when the policy's registry
is in-memory (``mock://``) and never with credentials.  None of these brokers can run here, so
the exported ``AdminClient`` calls are data (:func:`admin_calls`) and a script; applying them
with :func:`apply` works against any Kafka-protocol broker that takes arbitrary topic configs
(Tansu stores them silently — with no effect).
"""

from __future__ import annotations

import json
from typing import Any

from kqlab.export.base import (
    APPROXIMATE,
    DECODE_KEY,
    DECODE_VALUE,
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
    public_url,
    rule_lines,
)

__all__ = ["VENDORS", "admin_calls", "apply", "build", "topic_configs"]

TITLE = "Schema-ID validation (Confluent Server, Redpanda, WarpStream)"
VENDORS = ("confluent-server", "redpanda", "warpstream")
_STRATEGY_CLASS = "io.confluent.kafka.serializers.subject."
_PLACEHOLDER_URL = "http://schema-registry:8081"

BEHAVIOUR = (
    "broker-side: every producer is checked, whatever client it uses",
    "Confluent Server: INVALID_RECORD (87) with per-record errors ('rejected by the record "
    "interceptor ... RecordSchemaValidator'); null keys/values (tombstones) pass",
    "Redpanda: the whole batch fails with INVALID_RECORD (87); a null key/value fails when "
    "that part is validated (source reading) — tombstones are rejected, unlike the replay",
    "WarpStream: also decodes the payload against the schema (Avro, JSON Schema) and can run "
    "warning-only (warpstream.schema.validation.warning.only=true: metrics, no rejection); "
    "the error code seen by the producer is not documented",
    "ids only: no field, header, size or timestamp checks; the subject comes from the "
    "subject-name strategy, so a policy subject other than <topic>-value needs "
    "RecordNameStrategy or TopicRecordNameStrategy",
)


def _parts(policy: Any) -> dict[str, dict[str, Any]]:
    """``{"key"|"value": {"subject": ..., "rules": [...]}}`` for the parts schema-id rules check."""
    out: dict[str, dict[str, Any]] = {}
    for r in policy.rules:
        if r.kind in ("schema_id_registered", "schema_id_allowed", "magic_byte") and \
                r.mode == "reject" and r.when is None:
            part = r.param("target") or "value"
            entry = out.setdefault(part, {"subject": None, "rules": []})
            entry["rules"].append(r.id)
            if r.kind == "schema_id_registered" and r.param("subject"):
                entry["subject"] = r.param("subject")
    return out


def _strategy(topic: str, part: str, subject: str | None) -> tuple[str, str | None]:
    """``(strategy name, note)`` for the subject a rule names."""
    if subject is None or subject == f"{topic}-{part}":
        return "TopicNameStrategy", None
    return "TopicNameStrategy", (f"rule subject {subject!r} is not {topic}-{part}: choose "
                                 "RecordNameStrategy or TopicRecordNameStrategy if the "
                                 "subject is a record name")


def topic_configs(policy: Any, topic: str) -> dict[str, dict[str, str]]:
    """Vendor → the topic configs that switch schema-ID validation on for ``topic``.

    Examples
    --------
    >>> from kqlab.policy import loads_policy
    >>> p = loads_policy("kqlab: 1\\nname: p\\ntopics: {names: [t]}\\nvalue: {format: avro, "
    ...     "wire: confluent, schemas: {registry: 'mock://x'}}\\n"
    ...     "rules: [{id: s, kind: schema_id_registered}]")
    >>> topic_configs(p, "t")["redpanda"]  # doctest: +NORMALIZE_WHITESPACE
    {'redpanda.value.schema.id.validation': 'true',
     'redpanda.value.subject.name.strategy': 'TopicNameStrategy'}
    """
    out: dict[str, dict[str, str]] = {v: {} for v in VENDORS}
    for part, entry in sorted(_parts(policy).items()):
        strategy, _ = _strategy(topic, part, entry["subject"])
        out["confluent-server"][f"confluent.{part}.schema.validation"] = "true"
        out["confluent-server"][f"confluent.{part}.subject.name.strategy"] = \
            _STRATEGY_CLASS + strategy
        out["redpanda"][f"redpanda.{part}.schema.id.validation"] = "true"
        out["redpanda"][f"redpanda.{part}.subject.name.strategy"] = strategy
        out["warpstream"][f"warpstream.{part}.schema.validation"] = "true"
        out["warpstream"][f"warpstream.{part}.subject.name.strategy"] = strategy
    if any(out.values()):
        out["warpstream"]["warpstream.schema.validation.warning.only"] = "false"
    return out


def _fidelity(policy: Any, rules: Any = None) -> list[RuleFidelity]:
    parts = _parts(policy)
    out = []
    for r in (policy.rules if rules is None else rules):
        def row(status: str, how: str, r: Any = r) -> RuleFidelity:
            return RuleFidelity(rule=r.id, kind=r.kind, status=status, how=how, mode=r.mode)

        part = (r.param("target") or "value") if r.spec.param("target") else "value"
        in_parts = part in parts and r.id in parts[part]["rules"]
        if r.kind == "schema_id_registered" and in_parts:
            subj = r.param("subject")
            names = policy.topics.names or ("<topic>",)
            odd = [t for t in names if subj and subj != f"{t}-{part}"]
            how = (f"{part}: id present and registered under the strategy's subject "
                   "(Confluent Server exact; Redpanda also rejects null "
                   f"{part}s; WarpStream also decodes the payload)")
            out.append(row(APPROXIMATE if odd else EXACT,
                           how + (f"; subject {subj!r} differs from TopicNameStrategy's"
                                  if odd else "")))
        elif r.kind == "schema_id_allowed" and in_parts:
            out.append(row(APPROXIMATE, "any id registered under the subject passes, not only "
                           f"the listed ids {list(r.param('ids'))}"))
        elif r.kind == "magic_byte" and in_parts:
            out.append(row(APPROXIMATE, "implied and stricter: the framing must also carry a "
                           "registered id"))
        elif r.kind in ("avro_valid", "decodable", "json_schema") and parts:
            out.append(row(APPROXIMATE, "WarpStream only (it decodes the payload with the "
                           "framed schema); Confluent Server and Redpanda check ids only"))
        elif r.mode == "observe" and r.kind.startswith("schema_id"):
            out.append(row(NOT_EXPRESSIBLE, "observe-only rule: only WarpStream has a warning "
                           "mode, and it applies to the whole topic"))
        elif r.kind == "plugin":
            out.append(row(NOT_EXPRESSIBLE, "Python plugin: never exportable"))
        else:
            out.append(row(NOT_EXPRESSIBLE, "schema-ID validation checks the wire framing and "
                           f"the registered id only, not {r.spec.category} rules"))
    return out


def admin_calls(policy: Any, vendor: str) -> list[dict[str, Any]]:
    """The ``AdminClient`` calls that apply ``vendor``'s configs, one per topic, as data:
    ``{"call": "incremental_alter_configs", "resource": {...}, "set": {...}}``."""
    if vendor not in VENDORS:
        raise ExportError(f"vendor must be one of {', '.join(VENDORS)}, not {vendor!r}")
    calls = []
    for topic in policy.topics.names:
        configs = topic_configs(policy, topic)[vendor]
        if configs:
            calls.append({"call": "incremental_alter_configs",
                          "resource": {"type": "TOPIC", "name": topic},
                          "set": dict(configs)})
    return calls


def apply(admin: Any, policy: Any, vendor: str, *, timeout: float = 10.0) -> dict[str, Any]:
    """Apply :func:`admin_calls` with a confluent-kafka ``AdminClient``
    (``incremental_alter_configs``, SET per key); returns ``{topic: None | error text}``."""
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    resources = []
    for call in admin_calls(policy, vendor):
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in call["set"].items()]
        resources.append(ConfigResource(ResourceType.TOPIC, call["resource"]["name"],
                                        incremental_configs=entries))
    if not resources:
        return {}
    out: dict[str, Any] = {}
    for res, fut in admin.incremental_alter_configs(resources, request_timeout=timeout).items():
        try:
            fut.result(timeout)
            out[res.name] = None
        except Exception as exc:
            out[res.name] = str(exc)
    return out


def _registry_url(policy: Any) -> tuple[str, str | None]:
    src = policy.value.schemas or policy.key.schemas
    url = src.registry if src is not None else None
    if not url or url.startswith("mock://"):
        return _PLACEHOLDER_URL, (f"the policy's registry {url!r} is in-memory: replace "
                                  f"{_PLACEHOLDER_URL} with the production registry"
                                  if url else "replace the registry URL placeholder")
    return public_url(url) or _PLACEHOLDER_URL, None


def _implicit(policy: Any) -> list[RuleFidelity]:
    """The implicit rows (:func:`~kqlab.export.base.implicit_rules`) for schema-ID validation."""
    parts = _parts(policy)
    out = []
    for r in implicit_rules(policy):
        if r.id == DECODE_VALUE:
            f = _fidelity(policy, [r])[0]
            out.append(implicit_row(r, f.status, f.how))
        elif r.id == DECODE_KEY:
            if "key" in parts:
                out.append(implicit_row(r, APPROXIMATE, "key validation is on: every key must "
                                        "carry a registered schema id, which the replay never "
                                        "asks of keys"))
            else:
                out.append(implicit_row(r, EXACT, "key validation stays off: no key is "
                                        "checked, as in the replay"))
        elif "value" in parts:
            out.append(implicit_row(r, APPROXIMATE, "the id must be registered under the "
                                    "strategy's subject; the replay accepts any id its schema "
                                    "source knows (Redpanda also rejects null values)"))
        else:
            out.append(implicit_row(r, NOT_EXPRESSIBLE, "no schema_id_registered / "
                                    "schema_id_allowed / magic_byte reject rule switches value "
                                    "validation on"))
    return out


def build(policy: Any) -> Export:
    """Per-vendor topic/broker configs (JSON), a properties file per vendor and the
    ``AdminClient`` script that applies them."""
    if not policy.topics.names:
        raise ExportError(f"policy {policy.name!r} names no topics: topic configs need names")
    prov = provenance(policy)
    fid = _fidelity(policy)
    url, url_note = _registry_url(policy)
    per_topic = {t: topic_configs(policy, t) for t in policy.topics.names}
    notes = [n for n in (url_note,) if n]
    for part, entry in sorted(_parts(policy).items()):
        for t in policy.topics.names:
            _, note = _strategy(t, part, entry["subject"])
            if note:
                notes.append(f"{t}: {note}")
    if not _parts(policy):
        notes.append("the policy has no schema_id_registered / schema_id_allowed / magic_byte "
                     "reject rule: nothing to switch on")
    cluster = {
        "confluent-server": {"server.properties": {"confluent.schema.registry.url": url}},
        "redpanda": {"cluster": {"enable_schema_id_validation": "redpanda"},
                     "note": "Enterprise licence; Redpanda's built-in Schema Registry must be "
                             "enabled and hold the schemas"},
        "warpstream": {"agent": "configure the agent's schema registry connection "
                                f"({url}) as the WarpStream docs describe"},
    }
    doc = {"kqlab": prov, "cluster": cluster,
           "topics": dict(per_topic),
           "admin_calls": {v: admin_calls(policy, v) for v in VENDORS}}
    head = [*provenance_lines(prov), *rule_lines(policy.rules, {f.rule: f.status for f in fid})]
    files = {"schema-id/schema-id-validation.json": json.dumps(doc, indent=2) + "\n"}
    for vendor in VENDORS:
        lines = [f"{vendor} schema-ID validation, exported by kqlab", *head]
        body = []
        for t, cfg in per_topic.items():
            body.append(f"# topic {t}")
            body.extend(f"{k}={v}" for k, v in cfg[vendor].items())
        cli = _cli(vendor, per_topic, url)
        files[f"schema-id/{vendor}.properties"] = comment_block(lines) + \
            comment_block(cli) + "\n".join(body) + "\n"
    files["schema-id/apply_configs.py"] = _script(per_topic, prov)
    return Export(target="schema-id", title=TITLE, policy=policy.name, files=files,
                  fidelity=(*fid, *_implicit(policy)), behaviour=BEHAVIOUR, notes=tuple(notes),
                  data=doc)


def _cli(vendor: str, per_topic: dict[str, dict[str, dict[str, str]]], url: str) -> list[str]:
    out = ["apply with:"]
    for t, cfg in per_topic.items():
        pairs = ",".join(f"{k}={v}" for k, v in cfg[vendor].items())
        if not pairs:
            continue
        if vendor == "redpanda":
            flags = " ".join(f"--topic-config {k}={v}" for k, v in cfg[vendor].items())
            out.append("  rpk cluster config set enable_schema_id_validation redpanda")
            out.append(f"  rpk topic alter-config {t} --set " + " --set ".join(
                f"{k}={v}" for k, v in cfg[vendor].items()) + f"   (or create: {flags})")
        else:
            if vendor == "confluent-server":
                out.append(f"  server.properties: confluent.schema.registry.url={url}")
            out.append(f"  kafka-configs --bootstrap-server BROKER --alter --entity-type topics "
                       f"--entity-name {t} --add-config {pairs}")
    return out


def _script(per_topic: dict[str, dict[str, dict[str, str]]], prov: dict[str, Any]) -> str:
    configs = json.dumps(per_topic, indent=4)
    return f'''"""Apply the schema-ID validation of kqlab policy {prov['policy']!r}
({prov['content_hash']}).

Run: python apply_configs.py BOOTSTRAP VENDOR   (VENDOR: {" | ".join(VENDORS)})
Uses confluent-kafka's AdminClient.incremental_alter_configs (SET per key).
"""
import sys

from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ResourceType)

CONFIGS = {configs}

admin = AdminClient({{"bootstrap.servers": sys.argv[1]}})
vendor = sys.argv[2]
resources = [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
    ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
    for k, v in cfg[vendor].items()]) for topic, cfg in CONFIGS.items() if cfg[vendor]]
for res, fut in admin.incremental_alter_configs(resources).items():
    fut.result()
    print("set", res.name)
'''
