"""The JSON side of the Confluent data contract: the JSON Schema it registers and the rows of
``json_schema`` rules (moved out of :mod:`kqlab.export.confluent`, unchanged)."""

from __future__ import annotations

import json
from typing import Any

from kqlab.export.base import APPROXIMATE, EXACT, NOT_EXPRESSIBLE, RuleFidelity

__all__ = ["DRAFT7", "JSON_INT64", "json_schema_fidelity", "json_schema_of"]

DRAFT7 = "http://json-schema.org/draft-07/schema#"
#: what keeps an expression rule from being exact on JSON values (verified with 2.16.0)
JSON_INT64 = ("; approximate on JSON values: a JSON integer outside the signed 64-bit range "
               "anywhere in the value makes the executor's conversion of the message fail "
               "(ValueError 'overflow'), so the record is refused whatever the rule says")


def json_schema_of(rule: Any) -> Any:
    """The schema of a ``json_schema`` rule (inline, else read from its ``path``), or None."""
    from kqlab.policy.model import thaw

    inline = rule.param("schema")
    if inline is not None:
        return thaw(inline)
    if rule.param("path"):
        try:
            with open(rule.param("path"), encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None
    return None


def _has_key(doc: Any, key: str) -> bool:
    if isinstance(doc, dict):
        return key in doc or any(_has_key(v, key) for v in doc.values())
    if isinstance(doc, list):
        return any(_has_key(v, key) for v in doc)
    return False


def json_schema_fidelity(rule: Any, registered: str | None) -> RuleFidelity:
    """A value-side ``json_schema`` rule of a JSON policy: the JSONSerializer validates every
    value against the *registered* schema (``validate`` is on by default), after the domain
    rules; a second schema has no place in the contract."""
    def row(status: str, how: str) -> RuleFidelity:
        return RuleFidelity(rule=rule.id, kind=rule.kind, status=status, how=how,
                            mode=rule.mode)

    if rule.mode == "observe":
        return row(NOT_EXPRESSIBLE, "observe mode: the serializer refuses every value that "
                   "does not conform to the registered schema and cannot merely count, so this "
                   "schema is not registered")
    if rule.id != registered:
        why = f"rule {registered!r}'s schema is the registered one" if registered else \
            "its schema could not be read"
        return row(NOT_EXPRESSIBLE, "a schema version carries one JSON Schema and " + why +
                   "; the serializer validates against that one only")
    how = ("the registered schema: JSONSerializer validates every value against it "
           "(validate=true, the default), after the domain rules; a refusal is a "
           "SerializationError from jsonschema, not a RuleConditionError")
    if _has_key(json_schema_of(rule), "format"):
        return row(APPROXIMATE, how + "; 'format' is asserted by kqlab (fastjsonschema) but "
                   "only annotated by the serializer (jsonschema without a format checker)")
    return row(EXACT, how)
