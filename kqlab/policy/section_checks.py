"""Checks of a whole policy document and its sections, building the frozen model.

:class:`PolicyChecker` reads a document (positioned YAML from
:func:`~kqlab.policy.positioned_yaml.read_yaml`, or a plain dict) top-down: the format version
(upgrading older shapes), the known top-level keys, then each section — ``topics`` (legal Kafka
names, patterns that compile), ``broker`` (a known release, configs Kafka knows, resolved with
:class:`kqlab.kafka.configs.TopicConfig`), ``key`` / ``value`` formats and schema sources,
``sensitive``, ``rules`` (:class:`~kqlab.policy.rule_checks.RuleChecker`), ``checks``
(:class:`~kqlab.policy.check_checks.SampleCheckChecker`) and ``provenance``
— and builds :class:`~kqlab.policy.model.Policy`.  The first mistake raises one
:class:`~kqlab.policy.errors.PolicyError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import fields
from datetime import datetime
from typing import TypeVar

from kqlab.errors import ConfigError
from kqlab.policy.check_checks import SampleCheckChecker
from kqlab.policy.model import (
    ENFORCEMENT_PROFILES,
    FORMATS,
    POLICY_VERSION,
    WIRE_FORMATS,
    BrokerSettings,
    Format,
    Policy,
    Provenance,
    Rule,
    SchemaSource,
    Sensitive,
    Topics,
)
from kqlab.policy.positioned_yaml import Position, item_pos, key_pos, pos_of, value_pos
from kqlab.policy.shape_checks import describe, is_int

__all__ = ["CONTENT_HASH", "REGISTRY_SCHEMES", "SCHEMA_FORMATS", "TOPIC_NAME", "TOP_KEYS",
           "UPGRADES", "PolicyChecker"]

#: Kafka's legal topic names (``Topic.validate``)
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}\Z")
CONTENT_HASH = re.compile(r"sha256:[0-9a-f]{64}\Z")
REGISTRY_SCHEMES = ("mock://", "http://", "https://")
#: top-level keys, in dump order
TOP_KEYS = ("kqlab", *(f.name for f in fields(Policy) if f.name != "version"))
#: formats whose payload can carry the Confluent wire header / be described by a schema
SCHEMA_FORMATS = ("avro", "json", "protobuf")
#: old format version -> function upgrading that shape to the next version (none yet)
UPGRADES: dict[int, Callable[[dict[str, object]], dict[str, object]]] = {}
T = TypeVar("T")


class PolicyChecker(SampleCheckChecker):
    """Validates one policy document (positioned or plain) and builds the model, failing fast."""

    def policy(self, document: object) -> Policy:
        """The policy ``document`` describes (one :class:`PolicyError` for its first mistake).

        Sections are read in file order — topics, broker, key, value, sensitive, rules,
        provenance — so the formats are known before the rules' golden examples.
        """
        if document is None:
            self.fail(f"the policy is empty — start it with kqlab: {POLICY_VERSION} and name: "
                      "my-policy", None, (1, 1))
        data = self.mapping(document, "", pos_of(document),
                            "policy keys (kqlab, name, rules, ...)")
        if "kqlab" in data:
            data = self.version(data)
        self.known_keys(data, TOP_KEYS, "", "a policy")
        if "kqlab" not in data:
            self.fail(f"missing the policy format version — add kqlab: {POLICY_VERSION} as the "
                      "first line", "kqlab", pos_of(data))
        if "name" not in data:
            self.fail("missing the policy name — add name: orders-quality (a short identifier)",
                      "name", pos_of(data))
        name = self.get(data, "name", "str", "", required=True, example="orders-quality")
        description = self.get(data, "description", "str", "",
                               example="'what the policy is for'")
        owner = self.get(data, "owner", "str", "", example="team@example.com")
        enforcement = self.get(data, "enforcement", "str", "", choices=ENFORCEMENT_PROFILES,
                               default="kip-940")

        def section(key: str, build: Callable[[object, str, Position | None], T], default: T
                    ) -> T:
            return build(data[key], key, value_pos(data, key)) if key in data else default

        topics = section("topics", self.topics, Topics())
        self.topic_names = topics.names  # registry subjects to try: <topic>-value
        broker = section("broker", self.broker, BrokerSettings())
        self.formats["key"] = section("key", self.format, Format())
        self.formats["value"] = section("value", self.format, Format())
        sensitive = section("sensitive", self.sensitive, Sensitive())
        rules: tuple[Rule, ...] = section("rules", self.rules, ())
        self.rule_ids = tuple(r.id for r in rules)
        return Policy(name=name, description=description, owner=owner, enforcement=enforcement,
                      topics=topics, broker=broker, key=self.formats["key"],
                      value=self.formats["value"],
                      sensitive=sensitive, rules=rules,
                      checks=section("checks", self.checks, ()),
                      strict=self.get(data, "strict", "bool", "", default=False,
                                      example="true"),
                      provenance=section("provenance", self.provenance, None))

    def version(self, data: Mapping[str, object]) -> Mapping[str, object]:
        at = value_pos(data, "kqlab")
        version = data["kqlab"]
        if not is_int(version):
            self.fail(f"expected a whole number, got {describe(version)} — write kqlab: "
                      f"{POLICY_VERSION}", "kqlab", at)
        if version > POLICY_VERSION:
            self.fail(f"policy format version {version} is newer than this kqlab reads "
                      f"(version {POLICY_VERSION}) — upgrade kqlab: pip install -U kqlab",
                      "kqlab", at)
        if version < 1:
            self.fail(f"there is no policy format version {version} — write kqlab: "
                      f"{POLICY_VERSION}", "kqlab", at)
        while version < POLICY_VERSION:  # pragma: no cover - no older shapes exist yet
            data = UPGRADES[version](dict(data))
            version += 1
        return data

    def topics(self, value: object, path: str, at: Position | None) -> Topics:
        m = self.mapping(value, path, at, "names and patterns",
                         "write topics: {names: [orders], patterns: ['orders-.*']}")
        self.known_keys(m, tuple(f.name for f in fields(Topics)), path, "topics")
        names = self.get(m, "names", "list[str]", path, default=())
        for i, name in enumerate(names):
            if not TOPIC_NAME.match(name) or name in (".", ".."):
                self.fail(f"{name!r} is not a legal Kafka topic name (letters, digits, '.', '_' "
                          "and '-', at most 249) — put regular expressions under patterns",
                          f"{path}.names[{i}]", item_pos(names, i))
        patterns = self.get(m, "patterns", "list[str]", path, default=())
        for i, pattern in enumerate(patterns):
            self.regex(pattern, f"{path}.patterns[{i}]", item_pos(patterns, i))
        return Topics(names=tuple(names), patterns=tuple(patterns))

    def broker(self, value: object, path: str, at: Position | None) -> BrokerSettings:
        # lazy: kqlab.kafka's package imports pyarrow; only policies with a broker section pay
        from kqlab.kafka.configs import BrokerRelease, TopicConfig

        m = self.mapping(value, path, at, "version and configs",
                         "write broker: {version: '4.0', configs: {cleanup.policy: compact}}")
        self.known_keys(m, tuple(f.name for f in fields(BrokerSettings)), path, "broker")
        version = BrokerSettings().version
        if "version" in m:
            raw, vat = m["version"], value_pos(m, "version")
            if isinstance(raw, float | int) and not isinstance(raw, bool):
                self.fail(f"expected the version as text, got the number {raw!r} — quote it: "
                          f"version: \"{raw}\" (as a number 3.10 would read as 3.1)",
                          f"{path}.version", vat)
            version = self.get(m, "version", "str", path, default=version)
            try:
                BrokerRelease.parse(version)
            except ConfigError as exc:
                self.fail(str(exc), f"{path}.version", vat)
        configs: dict[str, str | int | float | bool] = {}
        if "configs" in m:
            cm = self.mapping(m["configs"], f"{path}.configs", value_pos(m, "configs"),
                              "Kafka config names to values")
            for name in sorted(cm):
                key, vat = f"{path}.configs.{name}", value_pos(cm, name)
                config = cm[name]
                if config is None or not isinstance(config, str | int | float | bool):
                    self.fail(f"expected a config value (text, number or true/false), got "
                              f"{describe(config)} — write {name}: <value>", key, vat)
                try:
                    TopicConfig.from_dict({name: config}, version)
                except ConfigError as exc:
                    self.fail(f"{exc}", key, key_pos(cm, name))
                configs[name] = config
            try:
                TopicConfig.from_dict(configs, version)
            except ConfigError as exc:
                self.fail(f"{exc}", f"{path}.configs", value_pos(m, "configs"))
        return BrokerSettings(version=version, configs=configs)

    def format(self, value: object, path: str, at: Position | None) -> Format:
        example = value if value in FORMATS else "string"
        m = self.mapping(value, path, at, "format, wire and schemas",
                         f"write {path}: {{format: {example}}}")
        self.known_keys(m, tuple(f.name for f in fields(Format)), path, f"the {path} format")
        fmt = self.get(m, "format", "str", path, choices=FORMATS, default=Format().format)
        wire = self.get(m, "wire", "str", path, choices=WIRE_FORMATS, default=Format().wire)
        schemas = None
        if "schemas" in m:
            schemas = self.schemas(m["schemas"], f"{path}.schemas", value_pos(m, "schemas"))
            if fmt not in SCHEMA_FORMATS:
                self.fail(f"schemas are only read for {', '.join(SCHEMA_FORMATS[:-1])} and "
                          f"{SCHEMA_FORMATS[-1]} formats, "
                          f"not {fmt} — remove schemas or set format: avro",
                          f"{path}.schemas", key_pos(m, "schemas"))
        if schemas is not None and schemas.message is not None and fmt != "protobuf":
            self.fail(f"schemas.message names a protobuf message type, but {path} is {fmt} — "
                      "remove message or set format: protobuf", f"{path}.schemas.message",
                      key_pos(m["schemas"], "message") or at)
        if fmt in ("avro", "protobuf") and schemas is None:
            article = "an" if fmt == "avro" else "a"
            self.fail(f"{article} {fmt} {path} needs a schema source — add schemas: {{registry: "
                      f"mock://{path}s, subject: my-topic-{path}}} or schemas: {{path: "
                      "schemas/}", f"{path}.format", value_pos(m, "format"))
        if wire == "confluent" and fmt not in SCHEMA_FORMATS:
            self.fail(f"wire: confluent frames avro, json or protobuf payloads, not {fmt} — use "
                      "wire: raw or format: avro", f"{path}.wire", value_pos(m, "wire"))
        return Format(format=fmt, wire=wire, schemas=schemas)

    def schemas(self, value: object, path: str, at: Position | None) -> SchemaSource:
        m = self.mapping(value, path, at, "registry, subject, path and config",
                         "write schemas: {registry: mock://orders, subject: orders-value}")
        self.known_keys(m, tuple(f.name for f in fields(SchemaSource)), path, "schemas")
        registry = self.get(m, "registry", "str", path)
        if registry is not None and not registry.startswith(REGISTRY_SCHEMES):
            self.fail(f"registry {registry!r} is not a URL — write registry: mock://name (tests) "
                      "or https://host:8081", f"{path}.registry", value_pos(m, "registry"))
        subject = self.get(m, "subject", "str", path)
        folder = self.get(m, "path", "str", path)
        config = self.get(m, "config", "map", path, default={})
        message = self.get(m, "message", "str", path)
        if registry is None and folder is None:
            self.fail("a schema source needs registry: <url> or path: <folder> — add registry: "
                      "mock://orders or path: schemas/", path, at)
        if subject is not None and registry is None:
            self.fail("subject is only used with a registry — add registry: <url> or remove "
                      "subject", f"{path}.subject", key_pos(m, "subject"))
        return SchemaSource(registry=registry, subject=subject, path=folder, message=message,
                            config=config)

    def sensitive(self, value: object, path: str, at: Position | None) -> Sensitive:
        """``sensitive: {fields: [customer.email], key: true, value: false, headers: [...]}``."""
        hint = "write sensitive: {fields: [customer.email], key: true, headers: [authorization]}"
        m = self.mapping(value, path, at, "fields, key, value and headers", hint)
        self.known_keys(m, tuple(f.name for f in fields(Sensitive)), path, "sensitive")
        if not m:
            self.fail(f"sensitive is empty, so nothing is masked — {hint}, or remove it", path,
                      at)
        names: dict[str, tuple[str, ...]] = {}
        for name, what, example in (("fields", "value field", "customer.email"),
                                    ("headers", "header name", "authorization")):
            items = self.get(m, name, "list[str]", path, default=(),
                             example=f"[{example}]")
            seen: dict[str, int] = {}
            for i, item in enumerate(items):
                key, item_at = f"{path}.{name}[{i}]", item_pos(items, i) or value_pos(m, name)
                if not item.strip():
                    self.fail(f"an empty {what} masks nothing — write {name}: [{example}]",
                              key, item_at)
                if name == "fields" and any(not part.strip() for part in item.split(".")):
                    self.fail(f"field {item!r} has an empty path segment — write a dotted path "
                              "into the decoded value, such as customer.email", key, item_at)
                if item in seen:
                    self.fail(f"{what} {item!r} is listed twice (also {path}.{name}"
                              f"[{seen[item]}]) — remove one", key, item_at)
                seen[item] = i
            names[name] = tuple(items)
        key_masked = self.get(m, "key", "bool", path, default=False)
        value_masked = self.get(m, "value", "bool", path, default=False)
        fmt = self.formats["value"].format
        if names["fields"] and fmt not in SCHEMA_FORMATS:
            self.fail(f"sensitive fields are paths into a decoded json, avro or protobuf value, "
                      "but the "
                      f"policy's value format is {fmt} — mask the whole value with value: true, "
                      "or set value.format: json", f"{path}.fields", key_pos(m, "fields"))
        if names["fields"] and value_masked:
            self.fail("value: true already masks the whole value, fields included — remove "
                      "fields or value", f"{path}.fields", key_pos(m, "fields"))
        return Sensitive(fields=names["fields"], key=key_masked, value=value_masked,
                         headers=names["headers"])

    def provenance(self, value: object, path: str, at: Position | None) -> Provenance:
        m = self.mapping(value, path, at, "sample, counts, content_hash and vetted_at",
                         "write provenance: {records: 1000, vetted_at: '2026-11-21'}")
        self.known_keys(m, tuple(f.name for f in fields(Provenance)), path, "provenance")
        records = self.get(m, "records", "int", path)
        batches = self.get(m, "batches", "int", path)
        rejected = self.get(m, "rejected_records", "int", path)
        if records is not None and rejected is not None and rejected > records:
            self.fail(f"rejected_records ({rejected}) exceeds records ({records})",
                      f"{path}.rejected_records", value_pos(m, "rejected_records"))
        content_hash = self.get(m, "content_hash", "str", path)
        if content_hash is not None and not CONTENT_HASH.match(content_hash):
            self.fail(f"content_hash {content_hash!r} is not 'sha256:' and 64 hex digits — copy "
                      "it from Policy.content_hash()", f"{path}.content_hash",
                      value_pos(m, "content_hash"))
        vetted_at = self.get(m, "vetted_at", "str", path)
        if vetted_at is not None:
            try:
                datetime.fromisoformat(vetted_at)
            except ValueError:
                self.fail(f"vetted_at {vetted_at!r} is not an ISO date — write vetted_at: "
                          "'2026-11-21' or '2026-11-21T10:00:00Z'", f"{path}.vetted_at",
                          value_pos(m, "vetted_at"))
        return Provenance(sample=self.get(m, "sample", "map", path, default={}),
                          content_hash=content_hash, vetted_at=vetted_at, records=records,
                          batches=batches, rejected_records=rejected)
