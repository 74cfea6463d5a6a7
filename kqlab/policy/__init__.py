"""Policies: the versioned YAML file that says which records a topic accepts (ARCHITECTURE §Policy).

The model (:class:`Policy`, :class:`Rule` ...) is frozen data; :func:`load_policy` /
:func:`dump_policy` read and write the file canonically, with one :class:`PolicyError` naming
file, line and key for every mistake; :func:`diff` compares two policies by rule id;
:func:`json_schema` describes the file for editors.  Nothing here imports pyarrow.

The modules, bottom-up: ``errors``, ``catalog`` (rule kinds), ``model`` (the frozen objects and
their canonical plain-data form), ``positioned_yaml`` (YAML with line/column marks) and
``scalar_offsets`` (a character of a value → its file line and column), ``cel`` (the expression
language), ``patterns`` (the one RE2/Python check of every pattern), ``value_shapes`` /
``declared_schemas`` (what the declared Avro / JSON Schemas say values hold),
``expression_checks`` (CEL compiled, its variables and types checked at load),
``shape_checks`` / ``content_checks`` / ``rule_checks`` / ``section_checks`` (the checker that
builds the model, refusing a broken policy at load time), ``load`` and ``dump`` (text and
files), ``changes`` (:func:`diff`), ``schema`` (JSON Schema).  Rule *suggestion* reads
samples, so it lives above, in :mod:`kqlab.validate.rule_suggestion`.
"""

from kqlab.policy.catalog import KINDS, kind
from kqlab.policy.changes import PolicyDiff, RuleChange, diff
from kqlab.policy.check_catalog import CHECK_KINDS
from kqlab.policy.dump import dump_policy, save_policy
from kqlab.policy.errors import PolicyError
from kqlab.policy.load import load_policy, loads_policy, policy_from_dict
from kqlab.policy.model import (
    BrokerSettings,
    Check,
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
    "CHECK_KINDS",
    "KINDS",
    "BrokerSettings",
    "Check",
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
