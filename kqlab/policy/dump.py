"""Writing a policy: the model → canonical YAML text or a file.

Writing is canonical: the plain-data form of :func:`~kqlab.policy.model.policy_to_dict` (a fixed
key order, no defaults, rule parameters in catalog order, broker configs sorted by name), each
golden example on one line.  ``dump → load → dump`` is byte-identical, and the content hash
(:meth:`Policy.content_hash <kqlab.policy.model.Policy.content_hash>`, built on the same form)
ignores formatting, comments, key order and provenance.  A policy is checked before it is
written (:func:`~kqlab.policy.load.policy_from_dict`), so a dumped file always loads back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from kqlab.policy.load import policy_from_dict
from kqlab.policy.model import Policy, policy_to_dict
from kqlab.policy.plain_data import PlainData

__all__ = ["dump_policy", "save_policy"]


class _Flow(dict[str, PlainData]):
    """A mapping written in YAML flow style (``{key: k1, value: {amount: 10}}``)."""


class _Dumper(yaml.SafeDumper):
    """``SafeDumper`` writing :class:`_Flow` mappings on one line (golden examples)."""


_Dumper.add_representer(_Flow, lambda dumper, data: dumper.represent_mapping(
    "tag:yaml.org,2002:map", data.items(), flow_style=True))


def _one_line_examples(rule: PlainData) -> PlainData:
    """A rule's plain data with each golden example record as a one-line flow mapping."""
    if not isinstance(rule, Mapping):
        return rule
    examples = rule.get("examples")
    if not isinstance(examples, Mapping):
        return rule
    flows = {side: [_Flow(item) if isinstance(item, Mapping) else item for item in items]
             for side, items in examples.items() if isinstance(items, list)}
    return {**rule, "examples": flows}


def dump_policy(policy: Policy, *, check: bool = True) -> str:
    """The canonical YAML text of ``policy`` (validated first, so it always loads back;
    ``check=False`` skips that for a policy already checked as loaded, as an authoring
    session's always is).

    Examples
    --------
    >>> from kqlab.policy.model import Rule
    >>> print(dump_policy(Policy(name="orders", rules=(Rule(id="k", kind="key_required"),))))
    kqlab: 1
    name: orders
    rules:
    - id: k
      kind: key_required
    <BLANKLINE>
    """
    data = policy_to_dict(policy)
    if check:
        policy_from_dict(data, source=f"<policy {policy.name!r}>")
    rules = data.get("rules")
    if isinstance(rules, list):
        data["rules"] = [_one_line_examples(rule) for rule in rules]
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=False, width=100)


def save_policy(policy: Policy, path: str | Path) -> Path:
    """Write ``policy`` to ``path`` as canonical YAML; returns the path."""
    path = Path(path)
    path.write_text(dump_policy(policy), encoding="utf-8")
    return path
