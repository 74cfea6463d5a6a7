"""Sample-check edits as pure functions: build a check from loose fields, change one.

The session (:mod:`kqlab.authoring.session`) applies them and validates the result as if
loaded from YAML (:func:`kqlab.authoring.policy_edits.check_policy`: unknown keys, bad or
missing thresholds, min > max, bad windows), so nothing here repeats the loader's checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kqlab.authoring.policy_edits import EditError
from kqlab.policy.model import Check

__all__ = ["CHECK_FIELDS", "changed_check", "make_check"]

#: a check's own fields (everything else given to an edit is a kind parameter)
CHECK_FIELDS = frozenset({"id", "kind", "window", "by", "when", "description"})


def make_check(kind: str, fields: Mapping[str, Any]) -> Check:
    """A check of ``kind`` from ``id``, ``window``, ``by``, ``when``, ``description`` and its
    parameters (inline or as ``params``)."""
    loose = dict(fields)
    params = dict(loose.pop("params", {}))
    named = {k: loose.pop(k) for k in list(loose) if k in CHECK_FIELDS}
    params.update(loose)
    if "id" not in named:
        raise EditError("a new check needs an id")
    return Check(kind=kind, params=params, **named)


def changed_check(old: Check, changes: Mapping[str, Any]) -> Check:
    """``old`` with ``changes``: parameters inline or as ``params={...}`` (a value of None
    drops one: ``max=None`` opens that side), ``window``/``by``/``when``/``description``
    (None removes it), ``id`` (rename) and ``kind`` as named."""
    changes = dict(changes)
    params = dict(old.params)
    inline = {k: changes.pop(k) for k in list(changes) if k not in CHECK_FIELDS | {"params"}}
    for name, value in {**changes.pop("params", {}), **inline}.items():
        if value is None:
            params.pop(name, None)
        else:
            params[name] = value
    return Check(id=changes.get("id", old.id), kind=changes.get("kind", old.kind),
                 params=params,
                 **{k: changes.get(k, getattr(old, k))
                    for k in ("window", "by", "when", "description")})
