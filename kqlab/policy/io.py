"""Policy files: YAML in and out, validated so every mistake names its file, line and key.

Reading composes the YAML with a ``SafeLoader`` subclass that remembers where each key and value
sits, then checks the whole document — version, keys, types, enums, rule ids, rule parameters
against the catalog, broker configs against :class:`kqlab.kafka.configs.TopicConfig` — and builds
the frozen :mod:`kqlab.policy.model` objects.  Anything wrong raises one
:class:`~kqlab.policy.errors.PolicyError`.

Writing is canonical: a fixed key order, no defaults, rule parameters in catalog order, broker
configs sorted by name.  ``dump → load → dump`` is byte-identical, and the content hash
(:meth:`Policy.content_hash`, built on :func:`policy_to_dict`) ignores formatting, comments, key
order and provenance.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields, is_dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import yaml

from kqlab.errors import ConfigError
from kqlab.policy.catalog import KINDS, Param, RuleKind
from kqlab.policy.errors import PolicyError
from kqlab.policy.model import (
    ENFORCEMENT_PROFILES,
    FORMATS,
    MODES,
    POLICY_VERSION,
    RELATIVE_TIMESTAMP_UNITS,
    SEVERITIES,
    WIRE_FORMATS,
    Broker,
    Example,
    Examples,
    Format,
    Policy,
    Provenance,
    Rule,
    SchemaSource,
    Sensitive,
    Topics,
    thaw,
)

__all__ = ["dump_policy", "load_policy", "loads_policy", "policy_from_dict", "policy_to_dict",
           "save_policy"]

#: rule ids: stable, lowercase, usable in metric names and file names
RULE_ID = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")
#: Kafka's legal topic names (``Topic.validate``)
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}\Z")
PLUGIN_CALLABLE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")
CONTENT_HASH = re.compile(r"sha256:[0-9a-f]{64}\Z")
REGISTRY_SCHEMES = ("mock://", "http://", "https://")
#: the keys of a rule besides its kind's parameters, in dump order
RULE_FIELDS = ("id", "kind", "message", "description", "when", "severity", "mode", "examples")
#: the keys of one golden example, in dump order (``kqlab.policy.model.Example``)
EXAMPLE_KEYS = tuple(f.name for f in fields(Example))
#: an example's timestamp relative to the test run's clock: now, now-8d, now+90s ...
RELATIVE_TIMESTAMP = re.compile(r"now(?:([+-])([0-9]+)(" + "|".join(RELATIVE_TIMESTAMP_UNITS)
                                + r"))?\Z")
#: value/key formats whose examples are text (everything else takes JSON-shaped data)
TEXT_FORMATS = ("none", "bytes", "string")
#: top-level keys, in dump order
TOP_KEYS = ("kqlab", *(f.name for f in fields(Policy) if f.name != "version"))
#: free-text fields whose surrounding whitespace is formatting (YAML ``>`` adds a newline)
PROSE = ("name", "description", "owner", "message", "when", "expr")
#: formats whose payload can carry the Confluent wire header / be described by a schema
SCHEMA_FORMATS = ("avro", "json")
#: old format version -> function upgrading that shape to the next version (none yet)
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}

_DUMP_OPTIONS = {"sort_keys": False, "allow_unicode": True, "default_flow_style": False,
                 "width": 100}
_LONG = 2**63


# --------------------------------------------------------------------------------------- YAML
class _Map(dict):
    """A mapping read from YAML that remembers where it, its keys and its values start."""

    __slots__ = ("at", "duplicates", "keys_at", "values_at")


class _Seq(list):
    """A sequence read from YAML that remembers where it and its items start."""

    __slots__ = ("at", "items_at")


class _Loader(yaml.SafeLoader):
    """``SafeLoader`` recording 1-based (line, column) marks; dates stay text."""


def _mark(mark: yaml.Mark) -> tuple[int, int]:
    return mark.line + 1, mark.column + 1


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    out = _Map()
    out.at, out.keys_at, out.values_at, out.duplicates = _mark(node.start_mark), {}, {}, []
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            text = key_node.value if isinstance(key_node, yaml.ScalarNode) else key
            raise yaml.constructor.ConstructorError(
                None, None, f"key {text!r} is read as {_describe_type(key)}, not as a name — "
                f"quote it: '{text}':", key_node.start_mark)
        if key in out:
            out.duplicates.append((key, _mark(key_node.start_mark)))
            continue
        out[key] = loader.construct_object(value_node, deep=True)
        out.keys_at[key] = _mark(key_node.start_mark)
        out.values_at[key] = _mark(value_node.start_mark)
    return out


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> _Seq:
    out = _Seq(loader.construct_object(child, deep=True) for child in node.value)
    out.at = _mark(node.start_mark)
    out.items_at = [_mark(child.start_mark) for child in node.value]
    return out


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)
# vetted_at: 2026-11-21 is a date to YAML 1.1; a policy keeps it as the text it is
_Loader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: node.value)

#: hints for PyYAML problems people actually hit
_SYNTAX_HINTS = (
    ("cannot start any token", "indent with spaces, not tabs, and quote values starting with "
                               "@ or `"),
    ("mapping values are not allowed here", "quote values that contain ': ', and check the "
                                            "indentation of the line"),
    ("expected <block end>", "check the indentation: keys of one mapping line up exactly"),
    ("could not find expected ':'", "every key needs a ': ' after it; quote text containing "
                                    "':' or '#'"),
    ("expected a single document", "a policy file holds one document; remove the '---' "
                                   "separators after the first"),
    ("could not determine a constructor", "policy files hold plain YAML data; remove the tag"),
    ("found undefined alias", "define the anchor (&name) before using it (*name)"),
    ("while parsing a flow", "close the bracket or brace opened there, and separate items "
                             "with commas"),
)


def _read_yaml(text: str, source: str) -> Any:
    """The YAML document in ``text`` as positioned maps/lists (``PolicyError`` on bad YAML)."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem and exc.context_mark is not None:
            context = f"{exc.context} on line {exc.context_mark.line + 1}"
            problem = f"{context}, {problem}" if problem.startswith("but ") else \
                f"{problem} ({context})"
        hint = next((h for needle, h in _SYNTAX_HINTS if needle in str(exc)), None)
        reason = f"YAML syntax error: {problem}" + (f" — {hint}" if hint else "")
        if problem.startswith("key "):  # our own non-text key message
            reason = problem
        line, column = _mark(mark) if mark is not None else (None, None)
        raise PolicyError(reason, file=source, line=line, column=column) from None
    except yaml.YAMLError as exc:  # ReaderError: control characters, bad encoding
        position = getattr(exc, "position", None)
        line = text.count("\n", 0, position) + 1 if position is not None else None
        raise PolicyError(f"not a YAML text file: {exc} — remove control characters and save "
                          "the file as UTF-8", file=source, line=line) from None


# ---------------------------------------------------------------------------------- helpers
def _describe_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _describe(value: Any) -> str:
    """How a value reads back to the user in an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:57] + "...")
    return repr(value)


def _yaml_scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix(
        "\n...").removesuffix("...").strip()


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _at(obj: Any) -> tuple[int, int] | None:
    return getattr(obj, "at", None)


def _key_at(mapping: Any, name: str) -> tuple[int, int] | None:
    return getattr(mapping, "keys_at", {}).get(name) or _at(mapping)


def _value_at(mapping: Any, name: str) -> tuple[int, int] | None:
    return getattr(mapping, "values_at", {}).get(name) or _at(mapping)


def _item_at(seq: Any, index: int) -> tuple[int, int] | None:
    items = getattr(seq, "items_at", None)
    return items[index] if items else _at(seq)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and not isinstance(value, bool)


#: parameter type -> (test, noun for messages)
_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "int": (_is_int, "a whole number"),
    "number": (_is_number, "a number"),
    "str": (lambda v: isinstance(v, str), "text"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "list[str]": (lambda v: isinstance(v, list | tuple), "a list of text"),
    "list[int]": (lambda v: isinstance(v, list | tuple), "a list of whole numbers"),
    "list": (lambda v: isinstance(v, list | tuple), "a list"),
    "map": (lambda v: isinstance(v, Mapping), "a mapping"),
    "any": (lambda v: True, "plain data"),
}
#: example values for hints, by parameter name then by type
_EXAMPLES = {
    "field": "customer.id", "name": "trace-id", "pattern": "'^[0-9a-f-]+$'",
    "expr": "'value.amount > 0'", "callable": "my_package.checks:validate", "values": "[a, b]",
    "names": "[a, b]", "ids": "[1, 2]", "before_ms": "604800000", "after_ms": "3600000",
    "subject": "orders-value", "path": "schemas/orders.json", "schema": "{type: object}",
    "id": "amount-range", "version": '"4.0"', "registry": "mock://orders", "message":
    "'amount must be positive'", "when": "'value != null'", "records": "1000",
    "content_hash": "sha256:<64 hex digits>", "vetted_at": "'2026-11-21'",
}
_TYPE_EXAMPLES = {"int": "10", "number": "10", "str": "text", "bool": "true", "list[str]": "[a, b]",
                  "list[int]": "[1, 2]", "list": "[a, b]", "map": "{}", "any": "{}"}


def _example(name: str, type_: str, choices: tuple[str, ...] = ()) -> str:
    if choices:
        return choices[0]
    return _EXAMPLES.get(name) or _TYPE_EXAMPLES.get(type_, "...")


def _did_you_mean(word: str, options: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"use one of: {', '.join(options)}"


def _default_of(f: Any) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


# ---------------------------------------------------------------------------------- checker
class _Checker:
    """Validates one document (positioned or plain) and builds the model, failing fast."""

    def __init__(self, source: str) -> None:
        self.source = source
        # the policy's formats, known before its rules (examples are checked against them)
        self.formats: dict[str, Format] = {"key": Format(), "value": Format()}

    def fail(self, reason: str, key: str | None = None,
             at: tuple[int, int] | None = None) -> NoReturn:
        line, column = at if at else (None, None)
        raise PolicyError(reason, file=self.source, line=line, column=column, key=key or None)

    # --- generic shapes --------------------------------------------------------------------
    def mapping(self, value: Any, path: str, at: Any, what: str,
                hint: str | None = None) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            hint = f" — {hint}" if hint else ""
            self.fail(f"expected a mapping of {what}, got {_describe(value)}{hint}", path, at)
        for key, key_at in getattr(value, "duplicates", ()):
            self.fail(f"duplicate key {key!r} — YAML would keep only one of them; remove or "
                      "rename the other", _join(path, key), key_at)
        return value

    def known_keys(self, mapping: Mapping[str, Any], allowed: tuple[str, ...], path: str,
                   what: str) -> None:
        for name in mapping:
            if not isinstance(name, str):
                self.fail(f"keys are names, got {_describe(name)} — quote it", path,
                          _at(mapping))
            if name not in allowed:
                self.fail(f"unknown key {name!r} in {what} — {_did_you_mean(name, allowed)}",
                          _join(path, name), _key_at(mapping, name))

    def typed(self, value: Any, type_: str, name: str, path: str, at: Any,
              example: str | None = None, item_of: str | None = None) -> Any:
        """``value`` if it has ``type_``; otherwise fail with a hint how to write it."""
        test, noun = _TYPES[type_]
        example = example or _example(name, type_)
        if item_of is not None and not test(value):
            self.fail(f"expected {noun}, got {_describe(value)} — every item of {name} is "
                      f"{noun}, e.g. {name}: {_example(name, item_of)}", path, at)
        if value is None:
            self.fail(f"expected {noun}, got null — write {name}: {example}, or remove "
                      f"{name} to use its default", path, at)
        if not test(value):
            self.fail(f"expected {noun}, got {_describe(value)} — "
                      f"{self._type_hint(value, type_, name, example)}", path, at)
        if type_ == "number" and isinstance(value, float) and not math.isfinite(value):
            self.fail(f"expected a finite number, got {_describe(value)} — remove {name} to "
                      "leave that side open", path, at)
        if type_ in ("int", "number") and _is_int(value) and not -_LONG <= value < _LONG:
            self.fail(f"{value} does not fit in 64 bits", path, at)
        if type_ in ("list[str]", "list[int]"):
            item_type = type_[5:-1]
            for i, item in enumerate(value):
                self.typed(item, item_type, name, f"{path}[{i}]", _item_at(value, i) or at,
                           item_of=type_)
        if type_ in ("list", "any", "map"):
            self.plain(value, path, at)
        return value

    @staticmethod
    def _type_hint(value: Any, type_: str, name: str, example: str) -> str:
        if type_ in ("int", "number") and isinstance(value, str):
            try:
                number = int(value.replace("_", ""))
            except ValueError:
                try:
                    number = float(value)
                except ValueError:
                    return f"write {name}: {example}"
            if type_ == "int" and isinstance(number, float):
                return f"write a whole number, e.g. {name}: {int(number)}"
            return f"write {name}: {_yaml_scalar(number)} (a number, not text)"
        if type_ == "int" and isinstance(value, float):
            if value.is_integer():
                return f"write {name}: {int(value)} (no decimal point)"
            return f"write a whole number, e.g. {name}: {round(value)}"
        if type_ == "bool" and isinstance(value, str) and value.lower() in ("true", "false"):
            return f"write {name}: {value.lower()} (without quotes)"
        if type_ == "str" and isinstance(value, bool | int | float):
            return f"quote it: {name}: '{_yaml_scalar(value)}'"
        if type_.startswith("list") and not isinstance(value, Mapping):
            return f"write {name}: [{_yaml_scalar(value)}]"
        return f"write {name}: {example}"

    def plain(self, value: Any, path: str, at: Any) -> None:
        """Free-form data (samples, inline schemas, plugin options) is JSON-shaped."""
        if isinstance(value, Mapping):
            self.mapping(value, path, at, "values", f"write {path.rsplit('.', 1)[-1]}: {{}}")
            for key, item in value.items():
                if not isinstance(key, str):
                    self.fail(f"keys are names, got {_describe(key)} — quote it", path, at)
                self.plain(item, _join(path, key), _value_at(value, key) or at)
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                self.plain(item, f"{path}[{i}]", _item_at(value, i) or at)
        elif _is_int(value):
            if not -_LONG <= value < _LONG:
                self.fail(f"{value} does not fit in 64 bits", path, at)
        elif isinstance(value, float):
            if not math.isfinite(value):
                self.fail(f"expected a finite number, got {value!r} — JSON has no NaN or "
                          "infinity", path, at)
        elif not (value is None or isinstance(value, str | bool)):
            self.fail(f"expected plain data (text, numbers, true/false, lists, mappings), got "
                      f"{type(value).__name__} — remove the YAML tag", path, at)

    def get(self, mapping: Mapping[str, Any], name: str, type_: str, path: str, *,
            required: bool = False, choices: tuple[str, ...] = (), default: Any = None,
            nonempty: bool = True, example: str | None = None) -> Any:
        """The checked value of ``mapping[name]`` (``default`` when absent)."""
        key = _join(path, name)
        example = example or _example(name, type_, choices)
        if name not in mapping:
            if required:
                self.fail(f"missing required key {name!r} — add {name}: {example}", path,
                          _at(mapping))
            return default
        value, at = mapping[name], _value_at(mapping, name)
        self.typed(value, type_, name, key, at, example)
        if choices and value not in choices:
            self.fail(f"{value!r} is not a valid {name} — {_did_you_mean(value, choices)}",
                      key, at)
        if nonempty and type_ == "str" and not value.strip():
            self.fail(f"{name} is empty — write {name}: {example}, or remove it", key, at)
        if type_ == "int" and value < 0:
            self.fail(f"{name} must be 0 or more, got {value}", key, at)
        return value.strip() if name in PROSE else value

    # --- sections ------------------------------------------------------------------------
    def policy(self, data: Any) -> Policy:
        if data is None:
            self.fail(f"the policy is empty — start it with kqlab: {POLICY_VERSION} and name: "
                      "my-policy", None, (1, 1))
        data = self.mapping(data, "", _at(data), "policy keys (kqlab, name, rules, ...)")
        if "kqlab" in data:
            data = self.version(data)
        self.known_keys(data, TOP_KEYS, "", "a policy")
        if "kqlab" not in data:
            self.fail(f"missing the policy format version — add kqlab: {POLICY_VERSION} as the "
                      "first line", "kqlab", _at(data))
        if "name" not in data:
            self.fail("missing the policy name — add name: orders-quality (a short identifier)",
                      "name", _at(data))
        values: dict[str, Any] = {
            "name": self.get(data, "name", "str", "", example="orders-quality"),
            "description": self.get(data, "description", "str", "",
                                    example="'what the policy is for'"),
            "owner": self.get(data, "owner", "str", "", example="team@example.com"),
            "enforcement": self.get(data, "enforcement", "str", "", choices=ENFORCEMENT_PROFILES,
                                    default="kip-940"),
        }
        sections: dict[str, Callable[[Any, str, Any], Any]] = {
            "topics": self.topics, "broker": self.broker, "key": self.format,
            "value": self.format, "sensitive": self.sensitive, "rules": self.rules,
            "provenance": self.provenance,
        }
        for name, build in sections.items():
            if name in data:
                values[name] = build(data[name], name, _value_at(data, name))
                if name in self.formats:
                    self.formats[name] = values[name]
        return Policy(**values)

    def version(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        at = _value_at(data, "kqlab")
        version = data["kqlab"]
        if not _is_int(version):
            self.fail(f"expected a whole number, got {_describe(version)} — write kqlab: "
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

    def topics(self, value: Any, path: str, at: Any) -> Topics:
        m = self.mapping(value, path, at, "names and patterns",
                         "write topics: {names: [orders], patterns: ['orders-.*']}")
        self.known_keys(m, tuple(f.name for f in fields(Topics)), path, "topics")
        names = self.get(m, "names", "list[str]", path, default=())
        for i, name in enumerate(names):
            if not TOPIC_NAME.match(name) or name in (".", ".."):
                self.fail(f"{name!r} is not a legal Kafka topic name (letters, digits, '.', '_' "
                          "and '-', at most 249) — put regular expressions under patterns",
                          f"{path}.names[{i}]", _item_at(names, i))
        patterns = self.get(m, "patterns", "list[str]", path, default=())
        for i, pattern in enumerate(patterns):
            self.regex(pattern, f"{path}.patterns[{i}]", _item_at(patterns, i))
        return Topics(names=tuple(names), patterns=tuple(patterns))

    def regex(self, pattern: str, key: str, at: Any) -> None:
        try:
            re.compile(pattern)
        except re.error as exc:
            self.fail(f"invalid regular expression {pattern!r}: {exc} — fix the pattern (quote "
                      "it in single quotes so backslashes stay as written)", key, at)

    def broker(self, value: Any, path: str, at: Any) -> Broker:
        # lazy: kqlab.kafka's package imports pyarrow; only policies with a broker section pay
        from kqlab.kafka.configs import BrokerProfile, TopicConfig

        m = self.mapping(value, path, at, "version and configs",
                         "write broker: {version: '4.0', configs: {cleanup.policy: compact}}")
        self.known_keys(m, tuple(f.name for f in fields(Broker)), path, "broker")
        version = Broker().version
        if "version" in m:
            raw, vat = m["version"], _value_at(m, "version")
            if isinstance(raw, float | int) and not isinstance(raw, bool):
                self.fail(f"expected the version as text, got the number {raw!r} — quote it: "
                          f"version: \"{raw}\" (as a number 3.10 would read as 3.1)",
                          f"{path}.version", vat)
            version = self.get(m, "version", "str", path)
            try:
                BrokerProfile.parse(version)
            except ConfigError as exc:
                self.fail(str(exc), f"{path}.version", vat)
        configs: dict[str, Any] = {}
        if "configs" in m:
            cm = self.mapping(m["configs"], f"{path}.configs", _value_at(m, "configs"),
                              "Kafka config names to values")
            for name in sorted(cm):
                key, vat = f"{path}.configs.{name}", _value_at(cm, name)
                config = cm[name]
                if config is None or not isinstance(config, str | int | float | bool):
                    self.fail(f"expected a config value (text, number or true/false), got "
                              f"{_describe(config)} — write {name}: <value>", key, vat)
                try:
                    TopicConfig.from_dict({name: config}, version)
                except ConfigError as exc:
                    self.fail(f"{exc}", key, _key_at(cm, name))
                configs[name] = config
            try:
                TopicConfig.from_dict(configs, version)
            except ConfigError as exc:
                self.fail(f"{exc}", f"{path}.configs", _value_at(m, "configs"))
        return Broker(version=version, configs=configs)

    def format(self, value: Any, path: str, at: Any) -> Format:
        example = value if value in FORMATS else "string"
        m = self.mapping(value, path, at, "format, wire and schemas",
                         f"write {path}: {{format: {example}}}")
        self.known_keys(m, tuple(f.name for f in fields(Format)), path, f"the {path} format")
        fmt = self.get(m, "format", "str", path, choices=FORMATS, default=Format().format)
        wire = self.get(m, "wire", "str", path, choices=WIRE_FORMATS, default=Format().wire)
        schemas = None
        if "schemas" in m:
            schemas = self.schemas(m["schemas"], f"{path}.schemas", _value_at(m, "schemas"))
            if fmt not in SCHEMA_FORMATS:
                self.fail(f"schemas are only read for {' and '.join(SCHEMA_FORMATS)} formats, "
                          f"not {fmt} — remove schemas or set format: avro",
                          f"{path}.schemas", _key_at(m, "schemas"))
        if fmt == "avro" and schemas is None:
            self.fail(f"an avro {path} needs a schema source — add schemas: {{registry: "
                      f"mock://{path}s, subject: my-topic-{path}}} or schemas: {{path: "
                      "schemas/}", f"{path}.format", _value_at(m, "format"))
        if wire == "confluent" and fmt not in SCHEMA_FORMATS:
            self.fail(f"wire: confluent frames avro or json payloads, not {fmt} — use wire: raw "
                      "or format: avro", f"{path}.wire", _value_at(m, "wire"))
        return Format(format=fmt, wire=wire, schemas=schemas)

    def schemas(self, value: Any, path: str, at: Any) -> SchemaSource:
        m = self.mapping(value, path, at, "registry, subject, path and config",
                         "write schemas: {registry: mock://orders, subject: orders-value}")
        self.known_keys(m, tuple(f.name for f in fields(SchemaSource)), path, "schemas")
        registry = self.get(m, "registry", "str", path)
        if registry is not None and not registry.startswith(REGISTRY_SCHEMES):
            self.fail(f"registry {registry!r} is not a URL — write registry: mock://name (tests) "
                      "or https://host:8081", f"{path}.registry", _value_at(m, "registry"))
        subject = self.get(m, "subject", "str", path)
        folder = self.get(m, "path", "str", path)
        config = self.get(m, "config", "map", path, default={})
        if registry is None and folder is None:
            self.fail("a schema source needs registry: <url> or path: <folder> — add registry: "
                      "mock://orders or path: schemas/", path, at)
        if subject is not None and registry is None:
            self.fail("subject is only used with a registry — add registry: <url> or remove "
                      "subject", f"{path}.subject", _key_at(m, "subject"))
        return SchemaSource(registry=registry, subject=subject, path=folder, config=config)

    def rules(self, value: Any, path: str, at: Any) -> tuple[Rule, ...]:
        if not isinstance(value, list | tuple):
            self.fail(f"expected a list of rules, got {_describe(value)} — start each rule with "
                      "'- id: ...'", path, at)
        rules: list[Rule] = []
        seen: dict[str, int] = {}
        for i, item in enumerate(value):
            rule_path = f"{path}[{i}]"
            rule = self.rule(item, rule_path, _item_at(value, i) or at)
            if rule.id in seen:
                self.fail(f"duplicate rule id {rule.id!r} (also {path}[{seen[rule.id]}]) — rule "
                          "ids must be unique; rename one", f"{rule_path}.id",
                          _value_at(item, "id"))
            seen[rule.id] = i
            rules.append(rule)
        return tuple(rules)

    def rule(self, value: Any, path: str, at: Any) -> Rule:
        example = value if isinstance(value, str) and value in KINDS else "key_required"
        m = self.mapping(value, path, at, "rule keys (id, kind, parameters)",
                         f"write the rule as - {{id: my-rule, kind: {example}}}")
        at = _at(m) or at
        if "id" not in m:
            self.fail("missing the rule id — add id: <unique-name>, e.g. id: amount-range", path,
                      at)
        rule_id = self.get(m, "id", "str", path)
        if not RULE_ID.match(rule_id):
            slug = re.sub(r"[^a-z0-9._-]+", "-", rule_id.lower()).strip("-._") or "my-rule"
            self.fail(f"rule id {rule_id!r} may only hold lowercase letters, digits, '.', '_' and "
                      f"'-', starting with a letter or digit — write id: {slug}", f"{path}.id",
                      _value_at(m, "id"))
        if "kind" not in m:
            self.fail(f"rule {rule_id!r} has no kind — add kind: <one of "
                      f"{', '.join(sorted(KINDS))}>", path, at)
        kind_name = self.get(m, "kind", "str", path)
        if kind_name not in KINDS:
            self.fail(f"unknown rule kind {kind_name!r} — "
                      f"{_did_you_mean(kind_name, sorted(KINDS))}", f"{path}.kind",
                      _value_at(m, "kind"))
        spec = KINDS[kind_name]
        allowed = RULE_FIELDS + tuple(p.name for p in spec.params)
        self.known_keys(m, allowed, path, f"a {kind_name} rule")
        params = {p.name: self.param(spec, p, m, path) for p in spec.params if p.name in m}
        for p in spec.params:
            if p.required and p.name not in m:
                self.fail(f"a {kind_name} rule needs {p.name}"
                          f"{f' ({p.doc})' if p.doc else ''} — add {p.name}: "
                          f"{_example(p.name, p.type, p.choices)}", path, at)
        self.rule_constraints(spec, params, m, path, at)
        return Rule(
            id=rule_id, kind=kind_name, params=_minimal_params(spec, params),
            message=self.get(m, "message", "str", path),
            description=self.get(m, "description", "str", path),
            when=self.get(m, "when", "str", path),
            severity=self.get(m, "severity", "str", path, choices=SEVERITIES, default="error"),
            mode=self.get(m, "mode", "str", path, choices=MODES, default="reject"),
            examples=self.examples(m["examples"], f"{path}.examples", _value_at(m, "examples"))
            if "examples" in m else None,
        )

    # --- golden examples -------------------------------------------------------------------
    def examples(self, value: Any, path: str, at: Any) -> Examples:
        """``examples: {pass: [...], fail: [...]}``: records the rule must accept / reject."""
        hint = "write examples: {pass: [{value: ...}], fail: [{value: ...}]}"
        m = self.mapping(value, path, at, "pass and fail examples", hint)
        self.known_keys(m, ("pass", "fail"), path, "examples")
        if not m:
            self.fail(f"examples without pass or fail test nothing — {hint}", path, at)
        out: dict[str, tuple[Example, ...]] = {}
        for name in ("pass", "fail"):
            items = m.get(name, [])
            item_path, item_at = f"{path}.{name}", _value_at(m, name)
            if not isinstance(items, list | tuple):
                self.fail(f"expected a list of example records, got {_describe(items)} — start "
                          f"each example with '- value: ...' (or write {name}: [{{value: ...}}])",
                          item_path, item_at)
            out[name] = tuple(self.example(item, f"{item_path}[{i}]", _item_at(items, i) or
                                           item_at) for i, item in enumerate(items))
        if not (out["pass"] or out["fail"]):
            self.fail(f"examples are empty — {hint}", path, at)
        return Examples(passing=out["pass"], failing=out["fail"])

    def example(self, value: Any, path: str, at: Any) -> Example:
        m = self.mapping(value, path, at, "example record keys (key, value, headers, ...)",
                         "write the example as - {key: k1, value: {amount: 10}}")
        at = _at(m) or at
        self.known_keys(m, EXAMPLE_KEYS, path, "an example record")
        name = self.get(m, "name", "str", path)
        key = self.payload(m, "key", path)
        val = self.payload(m, "value", path)
        raw_value = self.get(m, "raw_value", "str", path, nonempty=False)
        if "value" in m and "raw_value" in m:
            self.fail("give value (encoded with the policy's value format) or raw_value (the "
                      "bytes as written), not both — remove one", f"{path}.raw_value",
                      _key_at(m, "raw_value"))
        headers = self.example_headers(m, path) if "headers" in m else ()
        timestamp = None
        if "timestamp" in m:
            timestamp, tat = m["timestamp"], _value_at(m, "timestamp")
            ok = (_is_int(timestamp) and 0 <= timestamp < _LONG) or (
                isinstance(timestamp, str) and RELATIVE_TIMESTAMP.match(timestamp))
            if not ok:
                self.fail(f"timestamp {_describe(timestamp)} is neither epoch milliseconds nor "
                          "relative to now — write timestamp: 1763700000000, or now-8d, "
                          f"now+2h (units {', '.join(RELATIVE_TIMESTAMP_UNITS)})",
                          f"{path}.timestamp", tat)
        schema_id = self.get(m, "schema_id", "int", path)
        if schema_id is not None and self.formats["value"].wire != "confluent":
            self.fail("schema_id frames the value in the Confluent wire format, but the "
                      "policy's value has wire: raw — remove schema_id or set value.wire: "
                      "confluent", f"{path}.schema_id", _key_at(m, "schema_id"))
        if schema_id is not None and "value" not in m:
            self.fail("schema_id frames an encoded value — add value: {...} (raw_value is "
                      "written as is, unframed)", f"{path}.schema_id", _key_at(m, "schema_id"))
        return Example(name=name, key=key, value=val, raw_value=raw_value, headers=headers,
                       timestamp=timestamp, schema_id=schema_id)

    def payload(self, m: Mapping[str, Any], name: str, path: str) -> Any:
        """An example's key or value: text for text formats, JSON-shaped data otherwise."""
        if name not in m or m[name] is None:
            return None
        value, key, at = m[name], f"{path}.{name}", _value_at(m, name)
        fmt = self.formats[name].format
        if fmt in TEXT_FORMATS and not isinstance(value, str):
            what = "the record's key" if name == "key" else "the record's value"
            self.fail(f"the policy's {name} format is {fmt}, so {what} is text, got "
                      f"{_describe(value)} — quote it: {name}: '{_yaml_scalar(thaw(value))}'"
                      if not isinstance(value, Mapping | list | tuple) else
                      f"the policy's {name} format is {fmt}, so {what} is text, got "
                      f"{_describe(value)} — write the text, or set {name}.format: json",
                      key, at)
        self.plain(value, key, at)
        return value

    def example_headers(self, m: Mapping[str, Any], path: str) -> tuple[tuple[str, Any], ...]:
        """Headers as ``{name: value}`` or a list of ``[name, value]`` pairs (duplicates)."""
        value, key, at = m["headers"], f"{path}.headers", _value_at(m, "headers")
        hint = "write headers: {trace-id: abc} or headers: [[trace-id, abc], [trace-id, def]]"
        if isinstance(value, Mapping):
            self.mapping(value, key, at, "header names to values", hint)
            pairs = [(k, value[k], _value_at(value, k)) for k in value]
        elif isinstance(value, list | tuple):
            pairs = []
            for i, item in enumerate(value):
                if not (isinstance(item, list | tuple) and len(item) == 2 and
                        isinstance(item[0], str)):
                    self.fail(f"expected a [name, value] pair, got {_describe(item)} — {hint}",
                              f"{key}[{i}]", _item_at(value, i) or at)
                pairs.append((item[0], item[1], _item_at(value, i) or at))
        else:
            self.fail(f"expected a mapping of header names to values, got {_describe(value)} "
                      f"— {hint}", key, at)
        out = []
        for name, item, item_at in pairs:
            if not name:
                self.fail(f"a header name is empty — {hint}", key, item_at)
            if item is not None and not isinstance(item, str):
                self.fail(f"header values are text (or null), got {_describe(item)} — quote "
                          f"it: {name}: '{_yaml_scalar(item)}'", _join(key, name), item_at)
            out.append((name, item))
        return tuple(out)

    def param(self, spec: RuleKind, p: Param, m: Mapping[str, Any], path: str) -> Any:
        key, at = f"{path}.{p.name}", _value_at(m, p.name)
        value = m[p.name]
        if value is None:
            default = "" if p.default is None else f" (default {_yaml_scalar(p.default)})"
            self.fail(f"{p.name} is null — write {p.name}: {_example(p.name, p.type, p.choices)}"
                      f", or remove it to use the default{default}", key, at)
        self.typed(value, p.type, p.name, key, at, _example(p.name, p.type, p.choices))
        if p.choices and value not in p.choices:
            self.fail(f"{value!r} is not a valid {p.name} for a {spec.name} rule — "
                      f"{_did_you_mean(value, p.choices)}", key, at)
        if p.type == "int" and value < 0:
            self.fail(f"{p.name} must be 0 or more, got {value}", key, at)
        if p.type == "list[int]":
            for i, item in enumerate(value):
                if item < 0:
                    self.fail(f"{p.name} must be 0 or more, got {item}", f"{key}[{i}]",
                              _item_at(value, i) or at)
        if p.type == "str" and not value.strip():
            self.fail(f"{p.name} is empty — write {p.name}: "
                      f"{_example(p.name, p.type, p.choices)}", key, at)
        if p.type.startswith("list") and p.required and not value:
            self.fail(f"{p.name} is empty, so every record would fail — list at least one "
                      "allowed value", key, at)
        if p.name == "pattern":
            self.regex(value, key, at)
        if p.name == "field" and any(not part.strip() for part in value.split(".")):
            self.fail(f"field {value!r} has an empty path segment — write a dotted path such as "
                      "customer.id", key, at)
        if p.name == "callable" and not PLUGIN_CALLABLE.match(value):
            self.fail(f"callable {value!r} is not 'module:attribute' — write callable: "
                      "my_package.checks:validate", key, at)
        if spec.name == "json_schema" and p.name == "schema" and not isinstance(value, Mapping):
            self.fail(f"expected the JSON Schema as a mapping, got {_describe(value)} — write "
                      "schema: {type: object, required: [id]}, or use path: for a file", key, at)
        return value.strip() if p.name == "expr" else value

    def rule_constraints(self, spec: RuleKind, params: dict[str, Any], m: Mapping[str, Any],
                         path: str, at: Any) -> None:
        """Checks across parameters: bounds in order, at least one bound, one schema source."""
        if spec.param("min") is not None and spec.param("max") is not None:
            low = params.get("min", spec.param("min").default)
            high = params.get("max")
            if low is not None and high is not None and low > high:
                name = "min" if "min" in params else "max"
                self.fail(f"min ({low}) is greater than max ({high}) — swap them or fix one",
                          f"{path}.{name}", _value_at(m, name))
            if "min" not in params and "max" not in params:
                self.fail(f"a {spec.name} rule without min or max checks nothing — add max: "
                          f"{_example('max', spec.param('max').type)} (and min if needed)",
                          path, at)
        if spec.name == "timestamp_window" and not {"before_ms", "after_ms"} & set(params):
            self.fail("a timestamp_window rule without before_ms or after_ms checks nothing — "
                      "add before_ms: 604800000 and/or after_ms: 3600000", path, at)
        if spec.name == "json_schema":
            given = [n for n in ("schema", "path") if n in params]
            if not given:
                self.fail("a json_schema rule needs schema: {...} (inline) or path: <file> — "
                          "add one of them", path, at)
            if len(given) == 2:
                self.fail("give the JSON Schema inline (schema) or as a file (path), not both — "
                          "remove one", f"{path}.path", _key_at(m, "path"))

    def sensitive(self, value: Any, path: str, at: Any) -> Sensitive:
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
                key, item_at = f"{path}.{name}[{i}]", _item_at(items, i) or _value_at(m, name)
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
            self.fail(f"sensitive fields are paths into a decoded json or avro value, but the "
                      f"policy's value format is {fmt} — mask the whole value with value: true, "
                      "or set value.format: json", f"{path}.fields", _key_at(m, "fields"))
        if names["fields"] and value_masked:
            self.fail("value: true already masks the whole value, fields included — remove "
                      "fields or value", f"{path}.fields", _key_at(m, "fields"))
        return Sensitive(fields=names["fields"], key=key_masked, value=value_masked,
                         headers=names["headers"])

    def provenance(self, value: Any, path: str, at: Any) -> Provenance:
        m = self.mapping(value, path, at, "sample, counts, content_hash and vetted_at",
                         "write provenance: {records: 1000, vetted_at: '2026-11-21'}")
        self.known_keys(m, tuple(f.name for f in fields(Provenance)), path, "provenance")
        counts = {name: self.get(m, name, "int", path)
                  for name in ("records", "batches", "rejected_records")}
        if None not in (counts["records"], counts["rejected_records"]) and \
                counts["rejected_records"] > counts["records"]:
            self.fail(f"rejected_records ({counts['rejected_records']}) exceeds records "
                      f"({counts['records']})", f"{path}.rejected_records",
                      _value_at(m, "rejected_records"))
        content_hash = self.get(m, "content_hash", "str", path)
        if content_hash is not None and not CONTENT_HASH.match(content_hash):
            self.fail(f"content_hash {content_hash!r} is not 'sha256:' and 64 hex digits — copy "
                      "it from Policy.content_hash()", f"{path}.content_hash",
                      _value_at(m, "content_hash"))
        vetted_at = self.get(m, "vetted_at", "str", path)
        if vetted_at is not None:
            try:
                datetime.fromisoformat(vetted_at)
            except ValueError:
                self.fail(f"vetted_at {vetted_at!r} is not an ISO date — write vetted_at: "
                          "'2026-11-21' or '2026-11-21T10:00:00Z'", f"{path}.vetted_at",
                          _value_at(m, "vetted_at"))
        return Provenance(sample=self.get(m, "sample", "map", path, default={}),
                          content_hash=content_hash, vetted_at=vetted_at, **counts)


def _minimal_params(spec: RuleKind, params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters in catalog order without those equal to their default (others kept last)."""
    out: dict[str, Any] = {}
    for p in spec.params:
        if p.name in params:
            value = params[p.name]
            if not (value == p.default and type(value) is type(p.default)):
                out[p.name] = value
    out.update((k, v) for k, v in params.items() if spec.param(k) is None)
    return out


# ------------------------------------------------------------------------------ public API
def loads_policy(text: str, source: str = "<string>") -> Policy:
    """Read a policy from YAML text; ``source`` names it in error messages.

    Raises
    ------
    PolicyError
        For any malformation, naming ``source``, the line and the key.

    Examples
    --------
    >>> policy = loads_policy("kqlab: 1\\nname: orders\\nrules: [{id: k, kind: key_required}]\\n")
    >>> policy.rule("k").kind
    'key_required'
    """
    return _Checker(source).policy(_read_yaml(text, source))


def load_policy(path: str | Path) -> Policy:
    """Read a policy file (UTF-8 YAML); errors name the file, line and key."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"not UTF-8 text ({exc.reason} at byte {exc.start}) — save the file "
                          "as UTF-8", file=str(path)) from None
    return loads_policy(text, source=str(path))


def policy_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> Policy:
    """Build a policy from the plain-data form :func:`policy_to_dict` returns (validated)."""
    return _Checker(source).policy(data)


def _minimal(value: Any) -> Any:
    """A model object as plain data: fields in declaration order, defaults left out."""
    if not is_dataclass(value):
        return thaw(value)
    out = {}
    for f in fields(value):
        item = getattr(value, f.name)
        if item == _default_of(f):
            continue
        data = _minimal(item)
        if data == {} or data == []:
            continue
        out[f.name] = data
    return out


def policy_to_dict(policy: Policy) -> dict[str, Any]:
    """The canonical plain-data form of ``policy`` (what the YAML file holds, no defaults).

    Examples
    --------
    >>> policy_to_dict(Policy(name="orders", rules=(Rule(id="k", kind="key_required"),)))
    {'kqlab': 1, 'name': 'orders', 'rules': [{'id': 'k', 'kind': 'key_required'}]}
    """
    out: dict[str, Any] = {"kqlab": policy.version}
    for f in fields(Policy):
        value = getattr(policy, f.name)
        if f.name == "version" or value == _default_of(f):
            continue
        if f.name == "rules":
            data = [_canonical_rule(r).to_dict() for r in value]
        elif f.name == "broker":
            data = _minimal(value)
            if "configs" in data:
                data["configs"] = dict(sorted(data["configs"].items()))
        else:
            data = _minimal(value)
        if data == {} or data == []:
            continue
        out[f.name] = data
    return out


def _canonical_rule(rule: Rule) -> Rule:
    spec = KINDS.get(rule.kind)
    if spec is None:
        return rule
    params = _minimal_params(spec, rule.params)
    if list(params.items()) == list(rule.params.items()):
        return rule
    return Rule(id=rule.id, kind=rule.kind, params=params, message=rule.message,
                description=rule.description, severity=rule.severity, mode=rule.mode,
                when=rule.when, examples=rule.examples)


def dump_policy(policy: Policy) -> str:
    """The canonical YAML text of ``policy`` (validated first, so it always loads back).

    Examples
    --------
    >>> print(dump_policy(Policy(name="orders", rules=(Rule(id="k", kind="key_required"),))))
    kqlab: 1
    name: orders
    rules:
    - id: k
      kind: key_required
    <BLANKLINE>
    """
    data = policy_to_dict(policy)
    policy_from_dict(data, source=f"<policy {policy.name!r}>")
    for rule in data.get("rules", ()):
        for items in rule.get("examples", {}).values():  # one example record, one line
            items[:] = [_Flow(item) for item in items]
    return yaml.dump(data, Dumper=_Dumper, **_DUMP_OPTIONS)


class _Flow(dict):
    """A mapping written in YAML flow style (``{key: k1, value: {amount: 10}}``)."""


class _Dumper(yaml.SafeDumper):
    """``SafeDumper`` writing :class:`_Flow` mappings on one line (golden examples)."""


_Dumper.add_representer(_Flow, lambda dumper, data: dumper.represent_mapping(
    "tag:yaml.org,2002:map", data.items(), flow_style=True))


def save_policy(policy: Policy, path: str | Path) -> Path:
    """Write ``policy`` to ``path`` as canonical YAML; returns the path."""
    path = Path(path)
    path.write_text(dump_policy(policy), encoding="utf-8")
    return path
