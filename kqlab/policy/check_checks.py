"""Checks of a policy's ``checks:`` section (sample-level checks), building the model.

:class:`SampleCheckChecker` turns each item of ``checks:`` into a
:class:`~kqlab.policy.model.Check`, refusing at load time — with the file, line and key, as
for rules — an unknown kind or key, a missing or out-of-range threshold (rates are shares
from 0 to 1; min above max), a window that is not a duration (``10m``) or given to a kind
that is judged over the whole sample, a ``by`` a kind cannot group on, a field path the
declared schema does not have (``field``, ``of``, ``by``), a ``when`` that does not compile,
and a ``reject_rate`` naming a rule the policy does not have.
"""

from __future__ import annotations

from collections.abc import Mapping

from kqlab.policy.check_catalog import (
    BY_FIELD,
    BY_HEADER,
    BY_PARTITION,
    CHECK_KINDS,
    DURATION_UNITS,
    CheckKind,
    duration_ms,
)
from kqlab.policy.model import Check
from kqlab.policy.plain_data import PlainData
from kqlab.policy.positioned_yaml import Position, item_pos, key_pos, pos_of, value_pos
from kqlab.policy.rule_checks import RULE_ID, RuleChecker
from kqlab.policy.shape_checks import describe, did_you_mean, example_text, is_number

__all__ = ["CHECK_FIELDS", "SampleCheckChecker"]

#: the keys of a check besides its kind's parameters, in dump order
CHECK_FIELDS = ("id", "kind", "window", "by", "when", "description")


class SampleCheckChecker(RuleChecker):
    """Checks ``checks:`` (after ``rules:``: a ``reject_rate`` names a rule id)."""

    #: rule ids of the policy (set by the policy checker once the rules are read)
    rule_ids: tuple[str, ...] = ()

    def checks(self, value: object, path: str, at: Position | None) -> tuple[Check, ...]:
        if not isinstance(value, list | tuple):
            self.fail(f"expected a list of checks, got {describe(value)} — start each check "
                      "with '- id: ...'", path, at)
        if not value:
            self.fail("the check list is empty — add a check, e.g. - {id: volume, kind: "
                      "volume, window: 10m, by: partition, min: 1}, or remove checks:", path,
                      at)
        out: list[Check] = []
        seen: dict[str, int] = {}
        for i, item in enumerate(value):
            check_path = f"{path}[{i}]"
            check = self.check(item, check_path, item_pos(value, i) or at)
            id_at = value_pos(item, "id") if isinstance(item, Mapping) else at
            if check.id in seen:
                self.fail(f"duplicate check id {check.id!r} (also {path}[{seen[check.id]}]) — "
                          "check ids must be unique; rename one", f"{check_path}.id", id_at)
            if check.id in self.rule_ids:
                self.fail(f"check id {check.id!r} is also a rule id — ids name one thing in "
                          "the verdicts; rename the check", f"{check_path}.id", id_at)
            seen[check.id] = i
            out.append(check)
        return tuple(out)

    def check(self, value: object, path: str, at: Position | None) -> Check:
        m = self.mapping(value, path, at, "check keys (id, kind, thresholds)",
                         "write the check as - {id: volume, kind: volume, min: 1}")
        at = pos_of(m) or at
        if "id" not in m:
            self.fail("missing the check id — add id: <unique-name>, e.g. id: orders-volume",
                      path, at)
        check_id = self.get(m, "id", "str", path, required=True)
        if not RULE_ID.match(check_id):
            self.fail(f"check id {check_id!r} may only hold lowercase letters, digits, '.', "
                      "'_' and '-', starting with a letter or digit", f"{path}.id",
                      value_pos(m, "id"))
        if "kind" not in m:
            self.fail(f"check {check_id!r} has no kind — add kind: <one of "
                      f"{', '.join(CHECK_KINDS)}>", path, at)
        kind_name = self.get(m, "kind", "str", path, required=True)
        if kind_name not in CHECK_KINDS:
            self.fail(f"unknown check kind {kind_name!r} — "
                      f"{did_you_mean(kind_name, list(CHECK_KINDS))}", f"{path}.kind",
                      value_pos(m, "kind"))
        spec = CHECK_KINDS[kind_name]
        self.known_keys(m, CHECK_FIELDS + tuple(p.name for p in spec.params), path,
                        f"a {kind_name} check")
        params: dict[str, PlainData] = {}
        for p in spec.params:
            if p.name in m:
                key, pat = f"{path}.{p.name}", value_pos(m, p.name)
                if m[p.name] is None:
                    self.fail(f"{p.name} is null — write {p.name}: "
                              f"{example_text(p.name, p.type, p.choices)}", key, pat)
                params[p.name] = self.typed(m[p.name], p.type, p.name, key, pat,
                                            example_text(p.name, p.type, p.choices))
            elif p.required:
                self.fail(f"a {kind_name} check needs {p.name} ({p.doc}) — add {p.name}: "
                          f"{example_text(p.name, p.type, p.choices)}", path, at)
        self.check_params(spec, params, m, path, at)
        window = self.window(spec, m, path)
        by = self.by(spec, m, path)
        if "when" in m:
            self.expression(m, "when", f"{path}.when")
        return Check(id=check_id, kind=kind_name, params=spec.minimal_params(params),
                     window=window, by=by, when=self.get(m, "when", "str", path),
                     description=self.get(m, "description", "str", path))

    def check_params(self, spec: CheckKind, params: Mapping[str, PlainData],
                     m: Mapping[str, object], path: str, at: Position | None) -> None:
        """Thresholds present, in range and in order; choices, rule ids and field paths."""
        for name, value in params.items():
            key, vat = f"{path}.{name}", value_pos(m, name)
            p = spec.param(name)
            assert p is not None
            if p.choices and value not in p.choices:
                self.fail(f"{value!r} is not a valid {name} for a {spec.name} check — "
                          f"{did_you_mean(str(value), p.choices)}", key, vat)
            if isinstance(value, str) and not value.strip():
                self.fail(f"{name} is empty — write {name}: "
                          f"{example_text(name, p.type, p.choices)}", key, vat)
            if name in spec.thresholds or name in ("bins", "now"):
                if is_number(value) and value < 0:
                    self.fail(f"{name} must be 0 or more, got {value}", key, vat)
                if spec.rates and name in ("min", "max") and is_number(value) and value > 1:
                    hint = f" — write {name}: {value / 100:g} for {value:g} %" \
                        if value <= 100 else ""
                    self.fail(f"{name} is a share of records from 0 to 1, got {value}{hint}",
                              key, vat)
            if name == "bins" and is_number(value) and value < 2:
                self.fail(f"bins must be at least 2, got {value}", key, vat)
        if not set(spec.thresholds) & set(params) and \
                not all(spec.param(t) and spec.param(t).default is not None  # type: ignore[union-attr]
                        for t in spec.thresholds):
            first = spec.thresholds[-1]
            p = spec.param(first)
            self.fail(f"a {spec.name} check without {' or '.join(spec.thresholds)} checks "
                      f"nothing — add {first}: {example_text(first, p.type if p else 'number')}",
                      path, at)
        low, high = params.get("min"), params.get("max")
        if is_number(low) and is_number(high) and low > high:
            self.fail(f"min ({low}) is greater than max ({high}) — swap them or fix one",
                      f"{path}.min", value_pos(m, "min"))
        if "rule" in params and params["rule"] not in self.rule_ids:
            known = list(self.rule_ids)
            hint = did_you_mean(str(params["rule"]), known) if known else \
                "add the rule, or remove rule: to gate on the whole policy"
            self.fail(f"reject_rate names rule {params['rule']!r}, which the policy does not "
                      f"have — {hint}", f"{path}.rule", value_pos(m, "rule"))
        if "field" in params:
            self.field_path(spec.name, m, f"{path}.field")
        if isinstance(params.get("of"), str) and params["of"] != "key":
            self.field_path(spec.name, m, f"{path}.of", name="of")

    def window(self, spec: CheckKind, m: Mapping[str, object], path: str) -> str | None:
        """``window: 10m`` (a positive duration) for kinds judged per window."""
        if "window" not in m:
            return None
        key, at = f"{path}.window", value_pos(m, "window")
        if not spec.windowed:
            self.fail(f"a {spec.name} check is judged over the whole sample, not per window "
                      "— remove window", key, key_pos(m, "window"))
        raw = m["window"]
        units = ", ".join(DURATION_UNITS)
        if not isinstance(raw, str) or duration_ms(raw) is None:
            number = f" (milliseconds? write window: {raw}ms)" if is_number(raw) else ""
            self.fail(f"window {describe(raw)} is not a duration{number} — write a positive "
                      f"whole number and a unit ({units}), e.g. window: 10m", key, at)
        return raw.strip()

    def by(self, spec: CheckKind, m: Mapping[str, object], path: str) -> str | None:
        """``by: partition``, ``by: header:<name>`` or ``by: <field path>``."""
        if "by" not in m:
            return None
        key, at = f"{path}.by", value_pos(m, "by")
        if not spec.grouped:
            self.fail(f"a {spec.name} check compares the whole sample with its baseline, "
                      "not groups — remove by", key, key_pos(m, "by"))
        raw = self.get(m, "by", "str", path, example="partition")
        assert raw is not None
        hint = "write by: partition, by: header:<name> or by: <field path>"
        if raw.startswith(BY_HEADER) and not raw[len(BY_HEADER):].strip():
            self.fail(f"by {raw!r} names no header — {hint}", key, at)
        if raw != BY_PARTITION and not raw.startswith(BY_HEADER):
            field = raw[len(BY_FIELD):] if raw.startswith(BY_FIELD) else raw
            if any(not part.strip() for part in field.split(".")):
                self.fail(f"by {raw!r} has an empty path segment — {hint}", key, at)
            if not raw.startswith(BY_FIELD):
                self.field_path(spec.name, m, key, name="by")
        return raw
