"""Policy edits as pure functions: build a rule from loose fields, change one, validate the
result as if it had been loaded from YAML.

The session (:mod:`kqlab.authoring.session`) applies them; nothing here knows a sample, a
widget or an engine, so a script can prepare an edit without either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kqlab.errors import KqlabError
from kqlab.policy.cel import CelSyntaxError, compile_cel
from kqlab.policy.model import Policy, Rule

__all__ = ["RULE_FIELDS", "EditError", "changed_rule", "check_cel", "check_policy",
           "make_rule"]

#: a rule's own fields (everything else given to an edit is a kind parameter)
RULE_FIELDS = frozenset({"id", "kind", "message", "description", "severity", "mode", "when"})


class EditError(KqlabError, ValueError):
    """An edit the session refused (the policy stays as it was); the message says why."""


def check_cel(expr: str) -> str | None:
    """None when ``expr`` compiles, else the compiler's message (with line and column)."""
    try:
        compile_cel(expr)
    except CelSyntaxError as exc:
        return str(exc)
    return None


def check_policy(policy: Policy) -> Policy:
    """``policy`` validated as if loaded from YAML — unknown or ill-typed parameters, missing
    required ones, CEL and field paths against the schemas it declares — plus every CEL
    expression compiled, so an expression that does not compile is a refused edit, not a
    failed replay.  Raises :class:`EditError` (or the loader's ``PolicyError``)."""
    from kqlab.policy import policy_from_dict, policy_to_dict

    checked = policy_from_dict(policy_to_dict(policy), source="editor")
    for rule in policy.rules:
        for expr in (rule.param("expr") if rule.kind == "cel" else None, rule.when):
            if isinstance(expr, str) and expr:
                problem = check_cel(expr)
                if problem:
                    raise EditError(f"rule {rule.id}: {problem}")
    return checked


def make_rule(kind: str, fields: Mapping[str, Any]) -> Rule:
    """A rule of ``kind`` from ``id``, ``params`` (or the parameters inline), ``message``,
    ``when``, ``severity``, ``mode`` and ``description``."""
    loose = dict(fields)
    params = dict(loose.pop("params", {}))
    named = {k: loose.pop(k) for k in list(loose) if k in RULE_FIELDS}
    params.update(loose)
    if "id" not in named:
        raise EditError("a new rule needs an id")
    return Rule(kind=kind, params=params, **named)


def changed_rule(old: Rule, changes: Mapping[str, Any]) -> Rule:
    """``old`` with ``changes``: ``params={...}`` replaces parameters (a value of None drops
    one), other parameters may be given inline; ``message``, ``when``, ``severity``,
    ``mode``, ``description``, ``id`` (rename) and ``kind`` as named.  Its golden examples
    stay with it."""
    changes = dict(changes)
    params = dict(old.params)
    inline = {k: changes.pop(k) for k in list(changes) if k not in RULE_FIELDS | {"params"}}
    for name, value in {**changes.pop("params", {}), **inline}.items():
        if value is None:
            params.pop(name, None)
        else:
            params[name] = value
    return Rule(id=changes.get("id", old.id), kind=changes.get("kind", old.kind),
                params=params, message=changes.get("message", old.message),
                description=changes.get("description", old.description),
                severity=changes.get("severity", old.severity),
                mode=changes.get("mode", old.mode), when=changes.get("when", old.when),
                examples=old.examples)
