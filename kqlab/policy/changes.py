"""What changed between two policies: rules added, removed, changed or moved, and settings.

Rules are matched by their stable ``id``.  Values are compared *effectively* (a parameter left
out equals its catalog default, ``severity`` defaults to ``error``), so a diff is false exactly
when the two policies behave the same; provenance is ignored, as in the content hash.  Golden
examples (tests of the policy, left out of the content hash for the same reason) are listed in
``examples_changed`` and in the summary, but do not make the diff true; so is the ``sensitive``
section (what views mask, not what the policy does): ``sensitive_changed``.

(The module is called ``changes`` so that ``kqlab.policy.diff`` names one thing: the function.)
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields, is_dataclass
from typing import TYPE_CHECKING

from kqlab.policy.catalog import KINDS
from kqlab.policy.model import Policy, Rule, thaw
from kqlab.policy.plain_data import PlainData

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["PolicyDiff", "RuleChange", "diff"]

_RULE_FIELDS = ("kind", "message", "description", "when", "severity", "mode")
_SKIP = ("rules", "provenance", "version", "sensitive")


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleChange:
    """One rule present in both policies with different values: ``(name, old, new)`` each."""

    id: str
    fields: tuple[tuple[str, PlainData, PlainData], ...]

    def summary(self) -> str:
        """``amount-range: max 100000 -> 50000; severity error -> warning``."""
        parts = "; ".join(f"{name} {_show(old)} -> {_show(new)}" for name, old, new in self.fields)
        return f"{self.id}: {parts}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyDiff:
    """The difference from policy ``a`` to policy ``b``; false when they behave the same.

    ``examples_changed`` names the rules (in both policies) whose golden examples differ; it
    is reported by :meth:`summary` but, like the content hash, does not count in ``bool``;
    ``sensitive_changed`` (``(name, old, new)`` per field of the ``sensitive`` section) alike.
    """

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[RuleChange, ...] = ()
    moved: tuple[str, ...] = ()
    settings_changed: tuple[tuple[str, PlainData, PlainData], ...] = ()
    examples_changed: tuple[str, ...] = ()
    sensitive_changed: tuple[tuple[str, PlainData, PlainData], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed or self.moved
                    or self.settings_changed)

    def summary(self) -> str:
        """A short human-readable report, one line per kind of change."""
        if not self and not self.examples_changed and not self.sensitive_changed:
            return "no changes"
        lines = []
        if self.added:
            lines.append(f"added rules: {', '.join(self.added)}")
        if self.removed:
            lines.append(f"removed rules: {', '.join(self.removed)}")
        lines.extend(f"changed rule {change.summary()}" for change in self.changed)
        if self.moved:
            lines.append(f"moved rules: {', '.join(self.moved)}")
        lines.extend(f"changed setting {name}: {_show(old)} -> {_show(new)}"
                     for name, old, new in self.settings_changed)
        if self.examples_changed:
            lines.append(f"changed examples of rules: {', '.join(self.examples_changed)}")
        lines.extend(f"changed masking sensitive.{name}: {_show(old)} -> {_show(new)}"
                     for name, old, new in self.sensitive_changed)
        return "\n".join(lines)


def _show(value: PlainData) -> str:
    return "(none)" if value is None else repr(value) if isinstance(value, str) and (
        " " in value or not value) else str(value)


def _rule_view(rule: Rule) -> dict[str, PlainData]:
    """Every field and parameter of ``rule`` with its effective (default-filled) value."""
    view: dict[str, PlainData] = {name: getattr(rule, name) for name in _RULE_FIELDS}
    spec = KINDS.get(rule.kind)
    names = [p.name for p in spec.params] if spec else []
    names += [n for n in rule.params if n not in names]
    view.update((n, thaw(rule.param(n) if spec else rule.params.get(n))) for n in names)
    return view


def _rule_changes(a: Rule, b: Rule) -> tuple[tuple[str, PlainData, PlainData], ...]:
    va, vb = _rule_view(a), _rule_view(b)
    names = list(va) + [n for n in vb if n not in va]
    return tuple((n, va.get(n), vb.get(n)) for n in names if va.get(n) != vb.get(n))


def _settings(policy: Policy) -> dict[str, PlainData]:
    """Non-rule sections flattened to dotted keys, with effective (default-filled) values."""
    out: dict[str, PlainData] = {}

    def walk(prefix: str, value: DataclassInstance | PlainData) -> None:
        if is_dataclass(value):
            for f in fields(value):
                walk(f"{prefix}.{f.name}" if prefix else f.name, getattr(value, f.name))
            return
        plain = thaw(value)
        if isinstance(plain, dict) and plain:
            for key, item in plain.items():
                walk(f"{prefix}.{key}", item)
        elif plain is not None and plain != {}:
            out[prefix] = plain

    for f in fields(Policy):
        if f.name == "checks":  # one setting per sample check, by id
            for check in policy.checks:
                out[f"checks.{check.id}"] = check.to_dict()
        elif f.name not in _SKIP:
            walk(f.name, getattr(policy, f.name))
    return out


def diff(a: Policy, b: Policy) -> PolicyDiff:
    """The changes from ``a`` to ``b`` (rules by id, then settings; provenance ignored).

    Examples
    --------
    >>> old = Policy(name="o", rules=(Rule(id="r", kind="field_range", params={"field": "x",
    ...                                                                         "max": 10}),))
    >>> new = old.with_rules([Rule(id="r", kind="field_range", params={"field": "x", "max": 5}),
    ...                       Rule(id="k", kind="key_required")])
    >>> print(diff(old, new).summary())
    added rules: k
    changed rule r: max 10 -> 5
    """
    ids_a, ids_b = [r.id for r in a.rules], [r.id for r in b.rules]
    by_id_a, by_id_b = {r.id: r for r in a.rules}, {r.id: r for r in b.rules}
    common_a = [i for i in ids_a if i in by_id_b]
    common_b = [i for i in ids_b if i in by_id_a]
    matcher = difflib.SequenceMatcher(a=common_a, b=common_b, autojunk=False)
    in_order = {common_a[block.a + k] for block in matcher.get_matching_blocks()
                for k in range(block.size)}
    changed = []
    for rule_id in common_b:
        fields_changed = _rule_changes(by_id_a[rule_id], by_id_b[rule_id])
        if fields_changed:
            changed.append(RuleChange(id=rule_id, fields=fields_changed))
    sa, sb = _settings(a), _settings(b)
    keys = list(sa) + [k for k in sb if k not in sa]
    return PolicyDiff(
        added=tuple(i for i in ids_b if i not in by_id_a),
        removed=tuple(i for i in ids_a if i not in by_id_b),
        changed=tuple(changed),
        moved=tuple(i for i in common_b if i not in in_order),
        settings_changed=tuple((k, sa.get(k), sb.get(k)) for k in keys if sa.get(k) != sb.get(k)),
        examples_changed=tuple(i for i in common_b
                               if by_id_a[i].examples != by_id_b[i].examples),
        sensitive_changed=tuple((f.name, thaw(getattr(a.sensitive, f.name)),
                                 thaw(getattr(b.sensitive, f.name)))
                                for f in fields(a.sensitive)
                                if getattr(a.sensitive, f.name) != getattr(b.sensitive, f.name)),
    )
