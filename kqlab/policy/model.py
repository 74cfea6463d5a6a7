"""The policy model: frozen, hashable value objects built with keywords.

A policy is data (ARCHITECTURE principle 2): the YAML file is its source of truth
(:mod:`kqlab.policy.load` reads it, :mod:`kqlab.policy.dump` writes it), the validator runs it,
exporters translate it.  These classes hold exactly what the file says, with defaults applied;
they know nothing about bytes on the wire or about how rules are executed.

The canonical plain-data form (:func:`policy_to_dict`: fixed key order, no defaults, rule
parameters in catalog order, broker configs sorted) lives here too, beside the model it
describes: the content hash is built on it, the dump writes it and the loader reads it back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, overload

import orjson

from kqlab.policy.catalog import KINDS, NEEDS, RuleKind, kind
from kqlab.policy.check_catalog import CHECK_KINDS, CheckKind, check_kind, duration_ms
from kqlab.policy.plain_data import ParamValue, PlainData

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

POLICY_VERSION = 1
SEVERITIES = ("error", "warning", "info")
MODES = ("reject", "observe")
ENFORCEMENT_PROFILES = ("kip-940", "kip-686", "kip-729")
FORMATS = ("none", "bytes", "string", "json", "avro", "protobuf")
WIRE_FORMATS = ("raw", "confluent")


def _freeze(value: PlainData) -> PlainData:
    """Recursively turn dicts/lists into read-only, hashable equivalents."""
    if isinstance(value, dict | MappingProxyType):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


@overload
def thaw(value: Mapping[str, PlainData]) -> dict[str, PlainData]: ...
@overload
def thaw(value: PlainData) -> PlainData: ...
def thaw(value: PlainData) -> PlainData:
    """The plain-Python (dict/list) form of a frozen value, for YAML/JSON output."""
    if isinstance(value, MappingProxyType | dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(v) for v in value]
    return value


def _canonical(value: PlainData) -> bytes:
    return orjson.dumps(thaw(value), option=orjson.OPT_SORT_KEYS)


#: ``timestamp`` of an example relative to the clock of the test run: ``now``, ``now-8d`` ...
RELATIVE_TIMESTAMP_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True, kw_only=True)
class Example:
    """One golden record of a rule: what it holds, as a person writes it in the policy file.

    ``key`` and ``value`` are *decoded* content, encoded with the policy's key/value formats
    when the example runs (text for ``string``/``bytes``/``none``, any JSON-shaped data for
    ``json``, a datum of the writer schema for ``avro``, framed with the Confluent header when
    ``wire: confluent``); ``None`` means no key / a tombstone.  ``raw_value`` gives the value's
    bytes verbatim instead (the UTF-8 of the text: no encoding, no framing), for examples that
    must not decode.  ``headers`` keep order and duplicates; a header value of ``None`` is a
    null header value.  ``timestamp`` is epoch milliseconds, or relative to the run's clock
    (``now``, ``now-8d``, ``now+2h``; units ms, s, m, h, d); left out, it is ``now``.
    ``schema_id`` frames the value with that id (default: the subject's latest schema).
    """

    name: str | None = None
    key: PlainData = None
    value: PlainData = None
    raw_value: str | None = None
    headers: tuple[tuple[str, str | None], ...] = ()
    timestamp: int | str | None = None
    schema_id: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", _freeze(self.key))
        object.__setattr__(self, "value", _freeze(self.value))
        items = self.headers.items() if isinstance(self.headers, dict | MappingProxyType) \
            else self.headers
        object.__setattr__(self, "headers", tuple((str(k), v) for k, v in items))

    def __hash__(self) -> int:
        return hash(_canonical(self.to_dict()))

    def to_dict(self) -> dict[str, PlainData]:
        """The YAML shape: fields in declaration order, defaults left out; headers as a
        mapping when their names are unique (else a list of ``[name, value]`` pairs)."""
        out: dict[str, PlainData] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value == ():
                continue
            if f.name == "headers":
                names = [k for k, _ in value]
                out["headers"] = dict(value) if len(set(names)) == len(names) else \
                    [[k, v] for k, v in value]
            else:
                out[f.name] = thaw(value)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Examples:
    """A rule's golden examples: records it must accept (``pass``) and reject (``fail``).

    ``kqlab test`` (:func:`kqlab.validate.golden.check_examples`) replays them through the real
    validator: a ``pass`` example must not fail the rule, a ``fail`` example must.  They are
    tests *of* the policy, not part of what it does to records, so they do not count in
    :meth:`Policy.content_hash` (see there).
    """

    passing: tuple[Example, ...] = ()
    failing: tuple[Example, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "passing", tuple(self.passing))
        object.__setattr__(self, "failing", tuple(self.failing))

    def __bool__(self) -> bool:
        return bool(self.passing or self.failing)

    def __len__(self) -> int:
        return len(self.passing) + len(self.failing)

    def to_dict(self) -> dict[str, PlainData]:
        """The YAML shape ``{pass: [...], fail: [...]}`` (empty lists left out)."""
        out: dict[str, PlainData] = {}
        if self.passing:
            out["pass"] = [e.to_dict() for e in self.passing]
        if self.failing:
            out["fail"] = [e.to_dict() for e in self.failing]
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One rule: a catalog ``kind`` with its parameters, message, severity and mode.

    ``examples`` are the rule's golden records (:class:`Examples`), run by ``kqlab test``.
    """

    id: str
    kind: str
    params: Mapping[str, PlainData] = field(default_factory=lambda: MappingProxyType({}))
    message: str | None = None
    description: str | None = None
    severity: str = "error"
    mode: str = "reject"
    when: str | None = None
    examples: Examples | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _freeze(dict(self.params)))
        if self.examples is not None and not self.examples:
            object.__setattr__(self, "examples", None)  # no examples: one canonical form

    def __hash__(self) -> int:
        return hash(_canonical(self.to_dict()))

    @property
    def spec(self) -> RuleKind:
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

    def param(self, name: str) -> ParamValue:
        """The parameter's value, or its catalog default."""
        if name in self.params:
            return self.params[name]
        p = self.spec.param(name)
        return None if p is None else p.default

    def render_message(self, **values: object) -> str:
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

    def to_dict(self) -> dict[str, PlainData]:
        """The YAML shape: ``id``, ``kind``, the parameters inline, then the rest (no defaults)."""
        out: dict[str, PlainData] = {"id": self.id, "kind": self.kind}
        out.update(thaw(self.params))
        for name in ("message", "description", "when"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.severity != "error":
            out["severity"] = self.severity
        if self.mode != "reject":
            out["mode"] = self.mode
        if self.examples:
            out["examples"] = self.examples.to_dict()
        return out

    def without_examples(self) -> Rule:
        """This rule without its golden examples (what it does to records, nothing more)."""
        if self.examples is None:
            return self
        return Rule(id=self.id, kind=self.kind, params=self.params, message=self.message,
                    description=self.description, severity=self.severity, mode=self.mode,
                    when=self.when)


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One sample-level check (``checks:``): a :data:`~kqlab.policy.check_catalog.CHECK_KINDS`
    kind with its parameters (thresholds among them), judged over the whole sample or per
    ``window`` (``10m``) and ``by`` group (``partition``, ``header:<name>`` or a field), over
    the records ``when`` (CEL) holds for.

    Rules say whether a record is acceptable; checks say whether the sample is (volume,
    freshness, completeness, uniqueness, drift).  They change no record's verdict: a replay
    reports each as pass, fail or not evaluable beside the record verdicts.
    """

    id: str
    kind: str
    params: Mapping[str, PlainData] = field(default_factory=lambda: MappingProxyType({}))
    window: str | None = None
    by: str | None = None
    when: str | None = None
    description: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _freeze(dict(self.params)))

    def __hash__(self) -> int:
        return hash(_canonical(self.to_dict()))

    @property
    def spec(self) -> CheckKind:
        """The catalog declaration of this check's kind."""
        return check_kind(self.kind)

    @property
    def window_ms(self) -> int | None:
        """The window in milliseconds (None: the whole sample)."""
        return None if self.window is None else duration_ms(self.window)

    def param(self, name: str) -> ParamValue:
        """The parameter's value, or its catalog default."""
        if name in self.params:
            return self.params[name]
        p = self.spec.param(name)
        return None if p is None else p.default

    def to_dict(self) -> dict[str, PlainData]:
        """The YAML shape: ``id``, ``kind``, ``window``, ``by``, the parameters inline, then
        ``when`` and ``description`` (defaults left out)."""
        out: dict[str, PlainData] = {"id": self.id, "kind": self.kind}
        for name in ("window", "by"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        spec = CHECK_KINDS.get(self.kind)
        out.update(thaw(spec.minimal_params(self.params) if spec else self.params))
        for name in ("when", "description"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaSource:
    """Where writer schemas come from: a registry URL (``mock://`` in tests) or a folder.

    ``message`` (protobuf) names the message type of unframed values (``shop.Order``); framed
    values name theirs by their message indexes.
    """

    registry: str | None = None
    subject: str | None = None
    path: str | None = None
    message: str | None = None
    config: Mapping[str, PlainData] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", _freeze(dict(self.config)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Format:
    """How a key or value is encoded: ``format`` (none/bytes/string/json/avro/protobuf),
    ``wire``."""

    format: str = "bytes"
    wire: str = "raw"
    schemas: SchemaSource | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Topics:
    """The topics a policy binds to: exact names and regular-expression patterns."""

    names: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerSettings:
    """The topic/broker settings the broker checks use: Kafka config names and a release.

    The policy file's ``broker:`` section — settings, not a broker: the embedded broker
    process is :class:`kqlab.embedded.Broker`, and the behaviour of a release is
    :class:`kqlab.kafka.configs.BrokerRelease`.
    """

    version: str = "4.0"
    configs: Mapping[str, str | int | float | bool] = field(
        default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", _freeze(dict(self.configs)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Sensitive:
    """What views, reports and exported examples must mask: value fields, the key, the whole
    value, header values.

    ``fields`` are dotted paths into the decoded value (``customer.email``); masking a path
    masks everything under it, and a parent of a sensitive path (``customer``) is shown with
    the sensitive part masked.  ``key`` / ``value`` mask the whole key / value (text and raw
    bytes alike); ``headers`` names headers whose *values* are masked (names stay visible).
    Masking is presentation only: rules still read the real data, so a replay's verdicts do
    not depend on this section and it stays out of :meth:`Policy.content_hash`.
    """

    fields: tuple[str, ...] = ()
    key: bool = False
    value: bool = False
    headers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "headers", tuple(self.headers))

    def __bool__(self) -> bool:
        return bool(self.fields or self.key or self.value or self.headers)

    def covers_field(self, path: str) -> bool:
        """True when ``path`` is, holds or lies under a sensitive field (or the whole value is
        sensitive): showing it would show sensitive data.

        Examples
        --------
        >>> s = Sensitive(fields=("customer.email",))
        >>> s.covers_field("customer.email"), s.covers_field("customer"), s.covers_field("amount")
        (True, True, False)
        """
        if self.value:
            return True
        return any(path == f or f.startswith(path + ".") or path.startswith(f + ".")
                   for f in self.fields)


@dataclass(frozen=True, slots=True, kw_only=True)
class Provenance:
    """Where a vetted policy was tested: sample coordinates, counts, content hash, date."""

    sample: Mapping[str, PlainData] = field(default_factory=lambda: MappingProxyType({}))
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
    broker: BrokerSettings = field(default_factory=BrokerSettings)
    enforcement: str = "kip-940"
    key: Format = field(default_factory=Format)
    value: Format = field(default_factory=Format)
    sensitive: Sensitive = field(default_factory=Sensitive)
    rules: tuple[Rule, ...] = ()
    checks: tuple[Check, ...] = ()
    #: a rule reading a field or header that no record of the replayed sample has, or one
    #: whose every evaluation errors, fails every command that replays (exit 1) instead of
    #: being a warning (:mod:`kqlab.validate.rule_health`); for CI
    strict: bool = False
    provenance: Provenance | None = None
    version: int = POLICY_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "checks", tuple(self.checks))

    def rule(self, rule_id: str) -> Rule:
        """The rule with this id (``KeyError`` names the known ids)."""
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(f"no rule {rule_id!r} in policy {self.name!r}; rules: "
                       f"{', '.join(r.id for r in self.rules)}")

    def check(self, check_id: str) -> Check:
        """The sample check with this id (``KeyError`` names the known ids)."""
        for c in self.checks:
            if c.id == check_id:
                return c
        raise KeyError(f"no check {check_id!r} in policy {self.name!r}; checks: "
                       f"{', '.join(c.id for c in self.checks)}")

    def with_checks(self, checks: tuple[Check, ...] | list[Check]) -> Policy:
        """A copy with other sample checks."""
        return replace(self, checks=tuple(checks))

    def content_hash(self) -> str:
        """sha256 of the canonical content (formatting, key order and provenance ignored).

        Golden examples are left out too: the hash names what the policy *does* to records
        — what a vetting's provenance certifies, what exporters translate and what a replay's
        verdicts record — and examples change none of that.  Adding or fixing a test of the
        policy must not make a vetted policy look unvetted (:func:`kqlab.policy.diff` agrees: an
        examples-only change is reported, but the diff stays false).  The ``sensitive``
        section is left out for the same reason: it says what views and reports mask, and
        changes no verdict, so marking a field sensitive keeps a vetted policy vetted.
        """
        what_it_does = replace(self, provenance=None,
                               sensitive=Sensitive(),  # presentation only: changes no verdict
                               rules=tuple(r.without_examples() for r in self.rules))
        body = policy_to_dict(what_it_does)
        return "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()

    def introspection_hints(self) -> frozenset[str]:
        """KIP-940 introspection hints: what any rule of the policy reads (``NEEDS`` names)."""
        needs: set[str] = set()
        for r in self.rules:
            needs |= r.needs
        if self.value.format in ("json", "avro", "protobuf", "string"):
            needs.add("decoded_value")  # replay decodes the value (the implicit decode rule)
        return frozenset(n for n in NEEDS if n in needs)

    def with_rules(self, rules: tuple[Rule, ...] | list[Rule]) -> Policy:
        """A copy with other rules (policies are immutable)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["rules"] = tuple(rules)
        return Policy(**values)


# ------------------------------------------------------------------- canonical plain data
def _default_of(f: Field[object]) -> object:
    """The default a dataclass field takes when left out (``MISSING`` when it has none)."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _minimal(value: DataclassInstance | PlainData) -> PlainData:
    """A model object as plain data: fields in declaration order, defaults left out."""
    return _minimal_fields(value) if is_dataclass(value) else thaw(value)


def _minimal_fields(obj: DataclassInstance) -> dict[str, PlainData]:
    """The fields of a model object that differ from their defaults, as plain data."""
    out: dict[str, PlainData] = {}
    for f in fields(obj):
        item = getattr(obj, f.name)
        if item == _default_of(f):
            continue
        data = _minimal(item)
        if data == {} or data == []:
            continue
        out[f.name] = data
    return out


def canonical_rule(rule: Rule) -> Rule:
    """``rule`` with its parameters in catalog order and defaults left out (unknown kinds as
    they are)."""
    spec = KINDS.get(rule.kind)
    if spec is None:
        return rule
    params = spec.minimal_params(rule.params)
    if list(params.items()) == list(rule.params.items()):
        return rule
    return Rule(id=rule.id, kind=rule.kind, params=params, message=rule.message,
                description=rule.description, severity=rule.severity, mode=rule.mode,
                when=rule.when, examples=rule.examples)


def policy_to_dict(policy: Policy) -> dict[str, PlainData]:
    """The canonical plain-data form of ``policy`` (what the YAML file holds, no defaults).

    Examples
    --------
    >>> policy_to_dict(Policy(name="orders", rules=(Rule(id="k", kind="key_required"),)))
    {'kqlab': 1, 'name': 'orders', 'rules': [{'id': 'k', 'kind': 'key_required'}]}
    """
    out: dict[str, PlainData] = {"kqlab": policy.version}
    for f in fields(Policy):
        value = getattr(policy, f.name)
        if f.name == "version" or value == _default_of(f):
            continue
        data: PlainData
        if f.name == "rules":
            data = [canonical_rule(r).to_dict() for r in value]
        elif f.name == "checks":
            data = [c.to_dict() for c in value]
        elif f.name == "broker":
            data = _minimal_fields(value)
            if "configs" in data:  # sorted by name: the file reads (and diffs) stably
                data["configs"] = dict(sorted(thaw(value.configs).items()))
        else:
            data = _minimal(value)
        if data == {} or data == []:
            continue
        out[f.name] = data
    return out
