"""Policies: the versioned YAML file that says which records a topic accepts (ARCHITECTURE §Policy).

The model (:class:`Policy`, :class:`Rule` ...) is frozen data; :func:`load_policy` /
:func:`dump_policy` read and write the file canonically, with one :class:`PolicyError` naming
file, line and key for every mistake; :func:`diff` compares two policies by rule id;
:func:`json_schema` describes the file for editors.  Nothing here imports pyarrow.
"""

from kqlab.policy.catalog import KINDS, kind
from kqlab.policy.diff import PolicyDiff, RuleChange, diff
from kqlab.policy.errors import PolicyError
from kqlab.policy.io import dump_policy, load_policy, loads_policy, save_policy
from kqlab.policy.model import Broker, Format, Policy, Provenance, Rule, SchemaSource, Topics
from kqlab.policy.schema import json_schema

__all__ = [
    "KINDS",
    "Broker",
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
    "save_policy",
]
