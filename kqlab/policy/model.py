"""The policy model: frozen, hashable value objects built with keywords.

A policy is data (ARCHITECTURE principle 2): the YAML file is its source of truth
(``kqlab.policy.io`` reads and writes it), the validator runs it, exporters translate it.  These
classes hold exactly what the file says, with defaults applied; they know nothing about bytes on
the wire or about how rules are executed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

import orjson

from kqlab.policy.catalog import NEEDS, kind

POLICY_VERSION = 1
SEVERITIES = ("error", "warning", "info")
MODES = ("reject", "observe")
ENFORCEMENT_PROFILES = ("kip-940", "kip-686", "kip-729")
FORMATS = ("none", "bytes", "string", "json", "avro")
WIRE_FORMATS = ("raw", "confluent")


def _freeze(value: Any) -> Any:
    """Recursively turn dicts/lists into read-only, hashable equivalents."""
    if isinstance(value, dict | MappingProxyType):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The plain-Python (dict/list) form of a frozen value, for YAML/JSON output."""
    if isinstance(value, MappingProxyType | dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(v) for v in value]
    return value


def _canonical(value: Any) -> bytes:
    return orjson.dumps(thaw(value), option=orjson.OPT_SORT_KEYS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One rule: a catalog ``kind`` with its parameters, message, severity and mode."""

    id: str
    kind: str
    params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    message: str | None = None
    description: str | None = None
    severity: str = "error"
    mode: str = "reject"
    when: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _freeze(dict(self.params)))

    def __hash__(self) -> int:
        return hash(_canonical(self.to_dict()))

    @property
    def spec(self):  # -> catalog.RuleKind
        """The catalog declaration of this rule's kind."""
        return kind(self.kind)

    @property
    def exportable(self) -> bool:
        """False for Python plugins: no enforcement target can run them."""
        return self.spec.exportable

    @property
    def needs(self) -> frozenset[str]:
        """What the rule reads (plus ``metadata`` for a ``when`` precondition)."""
        extra = {"decoded_value", "key", "headers", "metadata"} if self.when else set()
        return self.spec.needs | extra

    def param(self, name: str) -> Any:
        """The parameter's value, or its catalog default."""
        if name in self.params:
            return self.params[name]
        p = self.spec.param(name)
        return None if p is None else p.default

    def render_message(self, **values: Any) -> str:
        """The failure message: the rule's own, or the catalog default filled in."""
        template = self.message or self.spec.message
        fill = {p.name: self.param(p.name) for p in self.spec.params}
        # an open bound reads as infinity, not None
        if fill.get("min", 0) is None:
            fill["min"] = "-inf"
        if fill.get("max", 0) is None:
            fill["max"] = "inf"
        fill.update(values)
        fill.setdefault("rule", self.id)
        try:
            return template.format(**fill)
        except (KeyError, IndexError, ValueError):
            return template

    def to_dict(self) -> dict[str, Any]:
        """The YAML shape: ``id``, ``kind``, the parameters inline, then the rest (no defaults)."""
        out: dict[str, Any] = {"id": self.id, "kind": self.kind}
        out.update(thaw(self.params))
        for name in ("message", "description", "when"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.severity != "error":
            out["severity"] = self.severity
        if self.mode != "reject":
            out["mode"] = self.mode
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaSource:
    """Where writer schemas come from: a registry URL (``mock://`` in tests) or a folder."""

    registry: str | None = None
    subject: str | None = None
    path: str | None = None
    config: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", _freeze(dict(self.config)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Format:
    """How a key or value is encoded: ``format`` (none/bytes/string/json/avro), ``wire``."""

    format: str = "bytes"
    wire: str = "raw"
    schemas: SchemaSource | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Topics:
    """The topics a policy binds to: exact names and regular-expression patterns."""

    names: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Broker:
    """The topic/broker settings the broker checks use: Kafka config names and a release."""

    version: str = "4.0"
    configs: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", _freeze(dict(self.configs)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Provenance:
    """Where a vetted policy was tested: sample coordinates, counts, content hash, date."""

    sample: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    records: int | None = None
    batches: int | None = None
    rejected_records: int | None = None
    content_hash: str | None = None
    vetted_at: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sample", _freeze(dict(self.sample)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """A record-validation policy (the YAML file's content)."""

    name: str
    description: str | None = None
    owner: str | None = None
    topics: Topics = field(default_factory=Topics)
    broker: Broker = field(default_factory=Broker)
    enforcement: str = "kip-940"
    key: Format = field(default_factory=Format)
    value: Format = field(default_factory=Format)
    rules: tuple[Rule, ...] = ()
    provenance: Provenance | None = None
    version: int = POLICY_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))

    def rule(self, rule_id: str) -> Rule:
        """The rule with this id (``KeyError`` names the known ids)."""
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(f"no rule {rule_id!r} in policy {self.name!r}; rules: "
                       f"{', '.join(r.id for r in self.rules)}")

    def content_hash(self) -> str:
        """sha256 of the canonical content (formatting, key order and provenance ignored)."""
        from kqlab.policy.io import policy_to_dict

        body = policy_to_dict(self)
        body.pop("provenance", None)
        return "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()

    def introspection_hints(self) -> frozenset[str]:
        """KIP-940 introspection hints: what any rule of the policy reads (``NEEDS`` names)."""
        needs: set[str] = set()
        for r in self.rules:
            needs |= r.needs
        if self.value.format in ("json", "avro", "string"):
            needs.add("decoded_value")  # replay decodes the value (the implicit decode rule)
        return frozenset(n for n in NEEDS if n in needs)

    def with_rules(self, rules: tuple[Rule, ...] | list[Rule]) -> Policy:
        """A copy with other rules (policies are immutable)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["rules"] = tuple(rules)
        return Policy(**values)
