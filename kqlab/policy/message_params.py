"""Rule messages that name parameters, and hand-written ones that would go stale.

A rule's message may name its parameters (``"amount must be within [{min}, {max}], got
{value}"``): :meth:`~kqlab.policy.model.Rule.render_message` fills them from the rule's
*current* parameters at verdict time, so an edit of ``min`` changes every rejection's text
and every exported contract's.  A message that writes a parameter's value out by hand
(``"[0.01, 100000]"``) does not follow an edit: it tells producers the old range.  This
module finds such literals — :func:`literal_params` for a load-time lint
(:func:`message_lints`, naming file, line and key), :func:`stale_literals` when an edit
changes a parameter its message still quotes — and renders a message's parameters for the
exports (:func:`params_filled`), keeping the per-record placeholders (``{value}``).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kqlab.policy.model import Policy, Rule

__all__ = ["StaleLiteral", "literal_params", "message_lints", "params_filled", "stale_literals"]

#: parameters whose value is what the rule reads, not a bound a message would quote
_NOT_QUOTED = frozenset({"field", "name", "expr", "target", "relative_to", "callable"})


def _texts(value: object) -> list[str]:
    """How a parameter value may be written in a message (``100000.0`` as ``100000`` too)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, float) and value.is_integer():
        return [repr(value), str(int(value))]
    if isinstance(value, int | float):
        return [str(value)]
    if isinstance(value, str) and len(value) >= 2:
        return [value]
    return []


def _plain_text(template: str) -> str:
    """``template`` without its placeholders (their names are not literals)."""
    try:
        return "".join(lit for lit, *_ in string.Formatter().parse(template))
    except ValueError:
        return template


def _quotes(text: str, literal: str) -> bool:
    """Whether ``literal`` stands in ``text`` as a token of its own (``10`` is not in
    ``100``, ``0.01`` not in ``10.015``)."""
    return re.search(rf"(?<![\w.]){re.escape(literal)}(?![\w]|\.\d)", text) is not None


def literal_params(rule: Rule) -> list[tuple[str, str]]:
    """``(parameter, literal)`` for every parameter whose current value the rule's own
    message writes out by hand (the catalog's default messages name them as placeholders).

    Examples
    --------
    >>> from kqlab.policy.model import Rule
    >>> literal_params(Rule(id="a", kind="field_range", message="within [0.01, 100000]: {value}",
    ...                     params={"field": "amount", "min": 0.01, "max": 100000}))
    [('min', '0.01'), ('max', '100000')]
    >>> literal_params(Rule(id="a", kind="field_range", message="within [{min}, {max}]",
    ...                     params={"field": "amount", "min": 0.01, "max": 100000}))
    []
    """
    if not rule.message:
        return []
    text = _plain_text(rule.message)
    out = []
    for name, value in rule.params.items():
        if name in _NOT_QUOTED:
            continue
        hit = next((t for t in _texts(value) if _quotes(text, t)), None)
        if hit is not None:
            out.append((name, hit))
    return out


@dataclass(frozen=True, slots=True)
class StaleLiteral:
    """A parameter's old value that a rule's hand-written message still says after an edit."""

    rule: str
    param: str
    literal: str
    now: object

    @property
    def text(self) -> str:
        """What is stale and what to write instead."""
        return (f"rule {self.rule}: the message still says {self.param}'s old value "
                f"{self.literal} ({self.param} is now {self.now}) — write {{{self.param}}} "
                "in the message so it follows every edit")


def stale_literals(old: Rule, new: Rule, prior: tuple[StaleLiteral, ...] = ()
                   ) -> tuple[StaleLiteral, ...]:
    """What an edit from ``old`` to ``new`` leaves stale: each changed parameter whose old
    value ``new``'s hand-written message still quotes; and of ``prior`` (what earlier edits
    of the rule left stale) those the message still quotes.

    Examples
    --------
    >>> from kqlab.policy.model import Rule
    >>> old = Rule(id="amount-range", kind="field_range", message="within [0.01, 100000]",
    ...            params={"field": "amount", "min": 0.01, "max": 100000})
    >>> new = Rule(id="amount-range", kind="field_range", message="within [0.01, 100000]",
    ...            params={"field": "amount", "min": 10, "max": 100000})
    >>> [s.text for s in stale_literals(old, new)]  # doctest: +NORMALIZE_WHITESPACE
    ["rule amount-range: the message still says min's old value 0.01 (min is now 10) —
      write {min} in the message so it follows every edit"]
    """
    if not new.message:
        return ()
    text = _plain_text(new.message)
    out: dict[tuple[str, str], StaleLiteral] = {}
    for s in prior:
        current = new.param(s.param)
        if _quotes(text, s.literal) and s.literal not in _texts(current):
            out[(s.param, s.literal)] = StaleLiteral(new.id, s.param, s.literal, current)
    for name, before in old.params.items():
        if name in _NOT_QUOTED or new.params.get(name) == before:
            continue
        hit = next((t for t in _texts(before) if _quotes(text, t)), None)
        if hit is not None:
            out[(name, hit)] = StaleLiteral(new.id, name, hit, new.param(name))
    return tuple(out.values())


def params_filled(rule: Rule) -> str | None:
    """The rule's own message with its parameters filled in (the current values, an open
    bound as ``-inf``/``inf``) and the per-record placeholders (``{value}``) kept: what an
    export writes into a contract.  None when the rule has no message of its own.

    Examples
    --------
    >>> from kqlab.policy.model import Rule
    >>> params_filled(Rule(id="a", kind="field_range", message="[{min}, {max}], got {value}",
    ...                    params={"field": "amount", "min": 10, "max": 100000}))
    '[10, 100000], got {value}'
    """
    if not rule.message:
        return None
    names = {p.name for p in rule.spec.params} | set(rule.params)
    try:
        parts = list(string.Formatter().parse(rule.message))
    except ValueError:
        return rule.message
    out = []
    for literal, field, spec, conv in parts:
        out.append(literal)
        if field is None:
            continue
        root = re.split(r"[.\[]", field, maxsplit=1)[0]
        piece = "{" + field + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
        if root in names:
            value = rule.param(root)
            if value is None and root in ("min", "max"):
                value = "-inf" if root == "min" else "inf"
            try:
                out.append(piece.format(**{root: value}))
                continue
            except (KeyError, IndexError, ValueError, AttributeError, TypeError):
                pass
        out.append(piece)
    return "".join(out)


def message_lints(policy: Policy, text: str | None, source: str) -> list[str]:
    """One warning per rule whose hand-written message quotes a parameter's current value —
    ``file:line: rules[i].message: ...`` (the line from ``text``, the policy's YAML, when
    given) — so the literal is replaced by a placeholder before an edit makes it wrong."""
    positions: dict[int, int] = {}
    if text is not None:
        from kqlab.policy.positioned_yaml import read_yaml, value_pos

        try:
            doc = read_yaml(text, source)
        except Exception:  # the loader already read it; no positions is no reason to fail
            doc = None
        rules = doc.get("rules") if isinstance(doc, dict) else None
        for i, item in enumerate(rules if isinstance(rules, list) else []):
            at = value_pos(item, "message") if isinstance(item, dict) else None
            if at is not None:
                positions[i] = at[0]
    out = []
    for i, rule in enumerate(policy.rules):
        found = literal_params(rule)
        if not found:
            continue
        where = f"{source}:{positions[i]}" if i in positions else source
        said = ", ".join(f"{name}'s value {lit}" for name, lit in found)
        fix = ", ".join(f"{{{name}}}" for name, _ in found)
        out.append(f"{where}: rules[{i}].message: rule {rule.id}: the message writes "
                   f"{said} by hand — write {fix} instead, so an edit of the rule changes "
                   "its rejections' text and its exported contracts' too")
    return out
