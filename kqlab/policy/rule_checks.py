"""Checks of a policy's rules: ids, kinds, parameters against the catalog, and golden examples.

:class:`RuleChecker` turns each item of ``rules:`` into a :class:`~kqlab.policy.model.Rule`
whose parameters are checked against the kind's catalog declaration
(:mod:`kqlab.policy.catalog`: types, choices, required, non-negative, patterns that compile,
bounds in order, one schema source) and kept in canonical form (catalog order, defaults left
out).  A rule's ``examples`` are checked against the policy's key/value formats, which is why
the checker knows them (:attr:`RuleChecker.formats`) before it reads the rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields

from kqlab.policy.catalog import KINDS, Param, RuleKind
from kqlab.policy.content_checks import ContentChecker
from kqlab.policy.model import (
    MODES,
    RELATIVE_TIMESTAMP_UNITS,
    SEVERITIES,
    Example,
    Examples,
    Rule,
)
from kqlab.policy.plain_data import PlainData
from kqlab.policy.positioned_yaml import Position, item_pos, key_pos, pos_of, value_pos
from kqlab.policy.shape_checks import (
    INT64_LIMIT,
    describe,
    did_you_mean,
    example_text,
    is_int,
    is_number,
    join_key,
    yaml_scalar,
)

__all__ = ["EXAMPLE_KEYS", "PLUGIN_CALLABLE", "RELATIVE_TIMESTAMP", "RULE_FIELDS", "RULE_ID",
           "TEXT_FORMATS", "RuleChecker"]

#: rule ids: stable, lowercase, usable in metric names and file names
RULE_ID = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")
#: a plugin rule's ``callable``: ``module.path:attribute``
PLUGIN_CALLABLE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")
#: the keys of a rule besides its kind's parameters, in dump order
RULE_FIELDS = ("id", "kind", "message", "description", "when", "severity", "mode", "examples")
#: the keys of one golden example, in dump order (``kqlab.policy.model.Example``)
EXAMPLE_KEYS = tuple(f.name for f in fields(Example))
#: an example's timestamp relative to the test run's clock: now, now-8d, now+90s ...
RELATIVE_TIMESTAMP = re.compile(r"now(?:([+-])([0-9]+)(" + "|".join(RELATIVE_TIMESTAMP_UNITS)
                                + r"))?\Z")
#: value/key formats whose examples are text (everything else takes JSON-shaped data)
TEXT_FORMATS = ("none", "bytes", "string")


class RuleChecker(ContentChecker):
    """Checks ``rules:`` and builds the :class:`~kqlab.policy.model.Rule` objects.

    The policy's formats (:attr:`formats`) are known before its rules: golden examples are
    checked against them, and field paths and expressions against their declared schemas.
    """

    def rules(self, value: object, path: str, at: Position | None) -> tuple[Rule, ...]:
        if not isinstance(value, list | tuple):
            self.fail(f"expected a list of rules, got {describe(value)} — start each rule with "
                      "'- id: ...'", path, at)
        if not value:
            self.fail("the rule list is empty, so the policy checks nothing — add a rule, e.g. "
                      "- {id: key-present, kind: key_required}, or remove rules: to replay the "
                      "broker checks only", path, at)
        rules: list[Rule] = []
        seen: dict[str, int] = {}
        for i, item in enumerate(value):
            rule_path = f"{path}[{i}]"
            rule = self.rule(item, rule_path, item_pos(value, i) or at)
            if rule.id in seen:
                self.fail(f"duplicate rule id {rule.id!r} (also {path}[{seen[rule.id]}]) — rule "
                          "ids must be unique; rename one", f"{rule_path}.id",
                          value_pos(item, "id"))
            seen[rule.id] = i
            rules.append(rule)
        return tuple(rules)

    def rule(self, value: object, path: str, at: Position | None) -> Rule:
        example = value if isinstance(value, str) and value in KINDS else "key_required"
        m = self.mapping(value, path, at, "rule keys (id, kind, parameters)",
                         f"write the rule as - {{id: my-rule, kind: {example}}}")
        at = pos_of(m) or at
        if "id" not in m:
            self.fail("missing the rule id — add id: <unique-name>, e.g. id: amount-range", path,
                      at)
        rule_id = self.get(m, "id", "str", path, required=True)
        if not RULE_ID.match(rule_id):
            slug = re.sub(r"[^a-z0-9._-]+", "-", rule_id.lower()).strip("-._") or "my-rule"
            self.fail(f"rule id {rule_id!r} may only hold lowercase letters, digits, '.', '_' and "
                      f"'-', starting with a letter or digit — write id: {slug}", f"{path}.id",
                      value_pos(m, "id"))
        if "kind" not in m:
            self.fail(f"rule {rule_id!r} has no kind — add kind: <one of "
                      f"{', '.join(sorted(KINDS))}>", path, at)
        kind_name = self.get(m, "kind", "str", path, required=True)
        if kind_name not in KINDS:
            self.fail(f"unknown rule kind {kind_name!r} — "
                      f"{did_you_mean(kind_name, sorted(KINDS))}", f"{path}.kind",
                      value_pos(m, "kind"))
        spec = KINDS[kind_name]
        allowed = RULE_FIELDS + tuple(p.name for p in spec.params)
        self.known_keys(m, allowed, path, f"a {kind_name} rule")
        params = {p.name: self.param(spec, p, m, path) for p in spec.params if p.name in m}
        for p in spec.params:
            if p.required and p.name not in m:
                self.fail(f"a {kind_name} rule needs {p.name}"
                          f"{f' ({p.doc})' if p.doc else ''} — add {p.name}: "
                          f"{example_text(p.name, p.type, p.choices)}", path, at)
        self.rule_constraints(spec, params, m, path, at)
        if "field" in params:
            self.field_path(kind_name, m, f"{path}.field")
        if "expr" in params:
            self.expression(m, "expr", f"{path}.expr")
        if "when" in m:
            self.expression(m, "when", f"{path}.when")
        return Rule(
            id=rule_id, kind=kind_name, params=spec.minimal_params(params),
            message=self.get(m, "message", "str", path),
            description=self.get(m, "description", "str", path),
            when=self.get(m, "when", "str", path),
            severity=self.get(m, "severity", "str", path, choices=SEVERITIES, default="error"),
            mode=self.get(m, "mode", "str", path, choices=MODES, default="reject"),
            examples=self.examples(m["examples"], f"{path}.examples", value_pos(m, "examples"))
            if "examples" in m else None,
        )

    # --- parameters ----------------------------------------------------------------------
    def param(self, spec: RuleKind, p: Param, m: Mapping[str, object], path: str) -> PlainData:
        """The checked value of parameter ``p`` (present in ``m``)."""
        key, at = f"{path}.{p.name}", value_pos(m, p.name)
        if m[p.name] is None:
            default = "" if p.default is None else f" (default {yaml_scalar(p.default)})"
            self.fail(f"{p.name} is null — write {p.name}: "
                      f"{example_text(p.name, p.type, p.choices)}, or remove it to use the "
                      f"default{default}", key, at)
        value = self.typed(m[p.name], p.type, p.name, key, at,
                           example_text(p.name, p.type, p.choices))
        if p.choices and value not in p.choices:
            self.fail(f"{value!r} is not a valid {p.name} for a {spec.name} rule — "
                      f"{did_you_mean(str(value), p.choices)}", key, at)
        if p.type == "int" and is_int(value) and value < 0:
            self.fail(f"{p.name} must be 0 or more, got {value}", key, at)
        if p.type == "list[int]" and isinstance(value, list | tuple):
            for i, item in enumerate(value):
                if is_int(item) and item < 0:
                    self.fail(f"{p.name} must be 0 or more, got {item}", f"{key}[{i}]",
                              item_pos(value, i) or at)
        if p.type == "str" and isinstance(value, str) and not value.strip():
            self.fail(f"{p.name} is empty — write {p.name}: "
                      f"{example_text(p.name, p.type, p.choices)}", key, at)
        if p.type.startswith("list") and p.required and not value:
            self.fail(f"{p.name} is empty, so every record would fail — list at least one "
                      "allowed value", key, at)
        if p.name == "pattern" and isinstance(value, str):
            self.pattern(m, p.name, key)
        if p.name == "field" and isinstance(value, str) and \
                any(not part.strip() for part in value.split(".")):
            self.fail(f"field {value!r} has an empty path segment — write a dotted path such as "
                      "customer.id", key, at)
        if p.name == "callable" and isinstance(value, str) and not PLUGIN_CALLABLE.match(value):
            self.fail(f"callable {value!r} is not 'module:attribute' — write callable: "
                      "my_package.checks:validate", key, at)
        if spec.name == "json_schema" and p.name == "schema" and not isinstance(value, Mapping):
            self.fail(f"expected the JSON Schema as a mapping, got {describe(value)} — write "
                      "schema: {type: object, required: [id]}, or use path: for a file", key, at)
        return value.strip() if p.name == "expr" and isinstance(value, str) else value

    def rule_constraints(self, spec: RuleKind, params: Mapping[str, PlainData],
                         m: Mapping[str, object], path: str, at: Position | None) -> None:
        """Checks across parameters: bounds in order, at least one bound, one schema source."""
        low_param, high_param = spec.param("min"), spec.param("max")
        if low_param is not None and high_param is not None:
            low = params.get("min", low_param.default)
            high = params.get("max")
            if is_number(low) and is_number(high) and low > high:
                name = "min" if "min" in params else "max"
                self.fail(f"min ({low}) is greater than max ({high}) — swap them or fix one",
                          f"{path}.{name}", value_pos(m, name))
            if "min" not in params and "max" not in params:
                self.fail(f"a {spec.name} rule without min or max checks nothing — add max: "
                          f"{example_text('max', high_param.type)} (and min if needed)",
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
                          "remove one", f"{path}.path", key_pos(m, "path"))

    # --- golden examples -------------------------------------------------------------------
    def examples(self, value: object, path: str, at: Position | None) -> Examples:
        """``examples: {pass: [...], fail: [...]}``: records the rule must accept / reject."""
        hint = "write examples: {pass: [{value: ...}], fail: [{value: ...}]}"
        m = self.mapping(value, path, at, "pass and fail examples", hint)
        self.known_keys(m, ("pass", "fail"), path, "examples")
        if not m:
            self.fail(f"examples without pass or fail test nothing — {hint}", path, at)
        out: dict[str, tuple[Example, ...]] = {}
        for name in ("pass", "fail"):
            items = m.get(name, [])
            item_path, item_at = f"{path}.{name}", value_pos(m, name)
            if not isinstance(items, list | tuple):
                self.fail(f"expected a list of example records, got {describe(items)} — start "
                          f"each example with '- value: ...' (or write {name}: [{{value: ...}}])",
                          item_path, item_at)
            out[name] = tuple(self.example(item, f"{item_path}[{i}]", item_pos(items, i) or
                                           item_at) for i, item in enumerate(items))
        if not (out["pass"] or out["fail"]):
            self.fail(f"examples are empty — {hint}", path, at)
        return Examples(passing=out["pass"], failing=out["fail"])

    def example(self, value: object, path: str, at: Position | None) -> Example:
        m = self.mapping(value, path, at, "example record keys (key, value, headers, ...)",
                         "write the example as - {key: k1, value: {amount: 10}}")
        at = pos_of(m) or at
        self.known_keys(m, EXAMPLE_KEYS, path, "an example record")
        name = self.get(m, "name", "str", path)
        key = self.payload(m, "key", path)
        val = self.payload(m, "value", path)
        raw_value = self.get(m, "raw_value", "str", path, nonempty=False)
        if "value" in m and "raw_value" in m:
            self.fail("give value (encoded with the policy's value format) or raw_value (the "
                      "bytes as written), not both — remove one", f"{path}.raw_value",
                      key_pos(m, "raw_value"))
        headers = self.example_headers(m, path) if "headers" in m else ()
        timestamp: int | str | None = None
        if "timestamp" in m:
            raw, tat = m["timestamp"], value_pos(m, "timestamp")
            if (is_int(raw) and 0 <= raw < INT64_LIMIT) or \
                    (isinstance(raw, str) and RELATIVE_TIMESTAMP.match(raw)):
                timestamp = raw
            else:
                self.fail(f"timestamp {describe(raw)} is neither epoch milliseconds nor "
                          "relative to now — write timestamp: 1763700000000, or now-8d, "
                          f"now+2h (units {', '.join(RELATIVE_TIMESTAMP_UNITS)})",
                          f"{path}.timestamp", tat)
        schema_id = self.get(m, "schema_id", "int", path)
        if schema_id is not None and self.formats["value"].wire != "confluent":
            self.fail("schema_id frames the value in the Confluent wire format, but the "
                      "policy's value has wire: raw — remove schema_id or set value.wire: "
                      "confluent", f"{path}.schema_id", key_pos(m, "schema_id"))
        if schema_id is not None and "value" not in m:
            self.fail("schema_id frames an encoded value — add value: {...} (raw_value is "
                      "written as is, unframed)", f"{path}.schema_id", key_pos(m, "schema_id"))
        return Example(name=name, key=key, value=val, raw_value=raw_value, headers=headers,
                       timestamp=timestamp, schema_id=schema_id)

    def payload(self, m: Mapping[str, object], name: str, path: str) -> PlainData:
        """An example's key or value: text for text formats, JSON-shaped data otherwise."""
        if name not in m or m[name] is None:
            return None
        value, key, at = m[name], f"{path}.{name}", value_pos(m, name)
        fmt = self.formats[name].format
        if fmt in TEXT_FORMATS and not isinstance(value, str):
            what = "the record's key" if name == "key" else "the record's value"
            self.fail(f"the policy's {name} format is {fmt}, so {what} is text, got "
                      f"{describe(value)} — quote it: {name}: '{yaml_scalar(value)}'"
                      if not isinstance(value, Mapping | list | tuple) else
                      f"the policy's {name} format is {fmt}, so {what} is text, got "
                      f"{describe(value)} — write the text, or set {name}.format: json",
                      key, at)
        return self.plain(value, key, at)

    def example_headers(self, m: Mapping[str, object], path: str
                        ) -> tuple[tuple[str, str | None], ...]:
        """Headers as ``{name: value}`` or a list of ``[name, value]`` pairs (duplicates)."""
        value, key, at = m["headers"], f"{path}.headers", value_pos(m, "headers")
        hint = "write headers: {trace-id: abc} or headers: [[trace-id, abc], [trace-id, def]]"
        pairs: list[tuple[str, object, Position | None]] = []
        if isinstance(value, Mapping):
            self.mapping(value, key, at, "header names to values", hint)
            pairs = [(k, value[k], value_pos(value, k)) for k in value]
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                if not (isinstance(item, list | tuple) and len(item) == 2 and
                        isinstance(item[0], str)):
                    self.fail(f"expected a [name, value] pair, got {describe(item)} — {hint}",
                              f"{key}[{i}]", item_pos(value, i) or at)
                pairs.append((item[0], item[1], item_pos(value, i) or at))
        else:
            self.fail(f"expected a mapping of header names to values, got {describe(value)} "
                      f"— {hint}", key, at)
        out: list[tuple[str, str | None]] = []
        for name, item, item_at in pairs:
            if not name:
                self.fail(f"a header name is empty — {hint}", key, item_at)
            if item is not None and not isinstance(item, str):
                self.fail(f"header values are text (or null), got {describe(item)} — quote "
                          f"it: {name}: '{yaml_scalar(item)}'", join_key(key, name), item_at)
            out.append((name, item))
        return tuple(out)
