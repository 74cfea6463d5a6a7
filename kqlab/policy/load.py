"""Reading a policy: YAML text, a file or plain data → the frozen model, or one precise error.

Reading composes the YAML with positions (:mod:`kqlab.policy.positioned_yaml`), then checks the
whole document — version, keys, types, enums, rule ids, rule parameters against the catalog,
broker configs against :class:`kqlab.kafka.configs.TopicConfig`, and what rules say: CEL that
compiles and fits the declared schema, patterns every engine runs, field paths that exist
(:class:`~kqlab.policy.section_checks.PolicyChecker`, :mod:`kqlab.policy.content_checks`) — and
builds the frozen :mod:`kqlab.policy.model` objects.  Anything wrong raises one
:class:`~kqlab.policy.errors.PolicyError` naming the file, the line and the key (and the column,
for a mistake inside an expression or a pattern): nothing runs on a broken policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kqlab.policy.errors import PolicyError
from kqlab.policy.model import Policy
from kqlab.policy.positioned_yaml import read_yaml
from kqlab.policy.section_checks import PolicyChecker

__all__ = ["load_policy", "loads_policy", "policy_from_dict"]


def loads_policy(text: str, source: str = "<string>", *,
                 contact_registries: bool = False) -> Policy:
    """Read a policy from YAML text; ``source`` names it in error messages.

    Rules are checked against the schemas the policy declares when they can be read without
    the network (a folder, an in-process ``mock://`` registry); ``contact_registries=True``
    also reads an ``http(s)://`` registry (:mod:`kqlab.policy.declared_schemas`).

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
    checker = PolicyChecker(source)
    checker.contact_registries = contact_registries
    return checker.policy(read_yaml(text, source))


def load_policy(path: str | Path, *, contact_registries: bool = False) -> Policy:
    """Read a policy file (UTF-8 YAML); errors name the file, line and key (and the column,
    inside a CEL expression or a pattern).  ``contact_registries``: see :func:`loads_policy`."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"not UTF-8 text ({exc.reason} at byte {exc.start}) — save the file "
                          "as UTF-8", file=str(path)) from None
    return loads_policy(text, source=str(path), contact_registries=contact_registries)


def policy_from_dict(data: Mapping[str, object], source: str = "<dict>") -> Policy:
    """Build a policy from the plain-data form :func:`~kqlab.policy.model.policy_to_dict`
    returns (validated like a file: one :class:`PolicyError` naming ``source`` and the key)."""
    return PolicyChecker(source).policy(data)
