"""Policies: the versioned YAML file that says which records a topic accepts (ARCHITECTURE §Policy).

The model (:class:`Policy`, :class:`Rule` ...) is frozen data; :func:`load_policy` /
:func:`dump_policy` read and write the file canonically, with one :class:`PolicyError` naming
file, line and key for every mistake; :func:`diff` compares two policies by rule id;
:func:`json_schema` describes the file for editors.  Nothing here imports pyarrow.

The modules, bottom-up: ``errors``, ``catalog`` (rule kinds), ``model`` (the frozen objects and
their canonical plain-data form), ``positioned_yaml`` (YAML with line/column marks),
``shape_checks`` / ``rule_checks`` / ``section_checks`` (the checker that builds the model),
``load`` and ``dump`` (text and files), ``changes`` (:func:`diff`), ``schema`` (JSON Schema),
``cel`` (the expression language).  Rule *suggestion* reads samples, so it lives above, in
:mod:`kqlab.validate.rule_suggestion`.
"""

from kqlab.policy.catalog import KINDS, kind
from kqlab.policy.changes import PolicyDiff, RuleChange, diff
from kqlab.policy.dump import dump_policy, save_policy
from kqlab.policy.errors import PolicyError
from kqlab.policy.load import load_policy, loads_policy, policy_from_dict
from kqlab.policy.model import (
    BrokerSettings,
    Format,
    Policy,
    Provenance,
    Rule,
    SchemaSource,
    Topics,
    policy_to_dict,
)
from kqlab.policy.schema import json_schema

__all__ = [
    "KINDS",
    "BrokerSettings",
    "Format",
    "Policy",
    "PolicyDiff",
    "PolicyError",
    "Provenance",
    "Rule",
    "RuleChange",
    "SchemaSource",
    "Topics",
    "diff",
    "dump_policy",
    "json_schema",
    "kind",
    "load_policy",
    "loads_policy",
    "policy_from_dict",
    "policy_to_dict",
    "save_policy",
]
