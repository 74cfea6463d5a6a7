"""The JSON Schema (draft 2020-12) of a policy file, built from the model and the rule catalog.

Editors use it to complete and check policy files, e.g. with the YAML language server::

    # yaml-language-server: $schema=<site-packages>/kqlab/policy/policy.schema.json

The package ships the built schema as ``policy.schema.json`` (:data:`SCHEMA_FILE`); a test
keeps it equal to :func:`json_schema`.  Regenerate it after changing the catalog or the model::

    python -c "from kqlab.policy.schema import write_json_schema; write_json_schema()"

The loader (:mod:`kqlab.policy.load`) checks more than the schema can say (regexes compile,
broker configs resolve, rule ids are unique).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from kqlab.policy.catalog import KINDS, Param, RuleKind
from kqlab.policy.check_catalog import CHECK_KINDS, DURATION, STATS, CheckKind
from kqlab.policy.model import (
    ENFORCEMENT_PROFILES,
    FORMATS,
    MODES,
    POLICY_VERSION,
    RELATIVE_TIMESTAMP_UNITS,
    SEVERITIES,
    WIRE_FORMATS,
    BrokerSettings,
    Example,
    Examples,
    Format,
    Policy,
    Provenance,
    SchemaSource,
    Sensitive,
    Topics,
)
from kqlab.policy.plain_data import PlainData

__all__ = ["SCHEMA_FILE", "json_schema", "write_json_schema"]

#: the schema shipped inside the package
SCHEMA_FILE = Path(__file__).with_name("policy.schema.json")
DRAFT = "https://json-schema.org/draft/2020-12/schema"

_SCALAR_TYPES = {"int": "integer", "number": "number", "str": "string", "bool": "boolean"}
_ID_PATTERN = "^[a-z0-9][a-z0-9._-]*$"
_NOT_BLANK = r"\S"
#: patterns for parameters the loader checks beyond their type (kqlab.policy.rule_checks)
_PARAM_PATTERNS = {
    "field": r"^[^.]+(\.[^.]+)*$",
    "callable": r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
}


def _doc(obj: object) -> str:
    """The first paragraph of an object's docstring, on one line."""
    return " ".join((inspect.getdoc(obj) or "").split("\n\n")[0].split())


def _string(description: str, **extra: PlainData) -> dict[str, PlainData]:
    return {"type": "string", "pattern": _NOT_BLANK, "description": description, **extra}


def _count(description: str) -> dict[str, PlainData]:
    return {"type": "integer", "minimum": 0, "description": description}


def _param_schema(p: Param) -> dict[str, PlainData]:
    schema: dict[str, PlainData] = {"description": p.doc or f"{p.name} ({p.type})"}
    if p.type in _SCALAR_TYPES:
        schema["type"] = _SCALAR_TYPES[p.type]
    elif p.type.startswith("list"):
        schema["type"] = "array"
        if p.type != "list":
            item: dict[str, PlainData] = {"type": _SCALAR_TYPES[p.type[5:-1]]}
            if p.type == "list[int]":
                item["minimum"] = 0
            schema["items"] = item
        if p.required:
            schema["minItems"] = 1
    if p.type == "int":
        schema["minimum"] = 0
    if p.type == "str":
        schema["pattern"] = _PARAM_PATTERNS.get(p.name, _NOT_BLANK)
    if p.choices:
        schema["enum"] = list(p.choices)
    if p.name == "pattern":
        schema["format"] = "regex"
    if p.name == "schema":
        schema["type"] = "object"
    if p.default is not None:
        schema["default"] = p.default
    return schema


def _rule_common() -> dict[str, PlainData]:
    return {
        "id": _string("Stable rule identifier: lowercase letters, digits, '.', '_' and '-'; "
                      "unique in the policy.", pattern=_ID_PATTERN),
        "kind": {"enum": sorted(KINDS), "description": "The rule kind (see the catalog)."},
        "message": _string("The failure message a rejected record gets (catalog default "
                           "when left out)."),
        "description": _string("Why the rule exists, for people."),
        "when": _string("CEL precondition: the rule only applies to records for which it is "
                        "true."),
        "severity": {"enum": list(SEVERITIES), "default": "error",
                     "description": "How serious a failure is."},
        "mode": {"enum": list(MODES), "default": "reject",
                 "description": "reject: fail the batch like a broker; observe: only count."},
        "examples": {"$ref": "#/$defs/examples"},
    }


def _examples_defs() -> dict[str, PlainData]:
    """``examples: {pass: [...], fail: [...]}`` and one example record."""
    units = "|".join(RELATIVE_TIMESTAMP_UNITS)
    records: dict[str, PlainData] = {"type": "array", "items": {"$ref": "#/$defs/example"}}
    header_value = {"type": ["string", "null"]}
    return {
        "examples": {
            "type": "object", "description": _doc(Examples), "additionalProperties": False,
            "properties": {
                "pass": {**records, "description": "Records the rule must accept."},
                "fail": {**records, "description": "Records the rule must reject."},
            },
            "anyOf": [{"required": ["pass"], "properties": {"pass": {"minItems": 1}}},
                      {"required": ["fail"], "properties": {"fail": {"minItems": 1}}}],
        },
        "example": {
            "type": "object", "description": _doc(Example), "additionalProperties": False,
            "properties": {
                "name": _string("What the example shows, for people and reports."),
                "key": {"description": "The key: text (string/bytes/none formats) or JSON "
                        "data (json); null or left out: no key."},
                "value": {"description": "The value, encoded with the policy's value format "
                          "(text; JSON data for json; a datum of the schema for avro); null or "
                          "left out: a tombstone."},
                "raw_value": {"type": "string", "description": "The value's bytes verbatim "
                              "(UTF-8 of this text): no encoding, no framing."},
                "headers": {"description": "Headers: a mapping of names to values, or a list "
                            "of [name, value] pairs (order and duplicates kept).",
                            "oneOf": [
                                {"type": "object", "additionalProperties": header_value,
                                 "propertyNames": {"minLength": 1}},
                                {"type": "array", "items": {
                                    "type": "array", "minItems": 2, "maxItems": 2,
                                    "prefixItems": [{"type": "string", "minLength": 1},
                                                    header_value]}},
                            ]},
                "timestamp": {"description": "Epoch milliseconds, or relative to the test "
                              "run's clock: now, now-8d, now+2h (default now).",
                              "oneOf": [{"type": "integer", "minimum": 0},
                                        {"type": "string",
                                         "pattern": f"^now([+-][0-9]+({units}))?$"}]},
                "schema_id": {"type": "integer", "minimum": 0, "description": "Frame the "
                              "value with this schema id (default: the subject's latest)."},
            },
            "not": {"required": ["value", "raw_value"]},
        },
    }


def _rule_schema(spec: RuleKind) -> dict[str, PlainData]:
    properties = _rule_common()
    properties["kind"] = {"const": spec.name, "description": spec.doc}
    properties.update((p.name, _param_schema(p)) for p in spec.params)
    schema: dict[str, PlainData] = {
        "type": "object",
        "description": spec.doc + ("" if spec.exportable else " Not exportable."),
        "required": ["id", "kind", *(p.name for p in spec.params if p.required)],
        "properties": properties,
        "additionalProperties": False,
    }
    # cross-parameter requirements the loader also enforces
    names = {p.name for p in spec.params}
    if {"min", "max"} <= names:
        schema["anyOf"] = [{"required": ["min"]}, {"required": ["max"]}]
    if spec.name == "timestamp_window":
        schema["anyOf"] = [{"required": ["before_ms"]}, {"required": ["after_ms"]}]
    if spec.name == "json_schema":
        schema["oneOf"] = [{"required": ["schema"]}, {"required": ["path"]}]
    return schema


def _check_schema(spec: CheckKind) -> dict[str, PlainData]:
    """One sample-check kind: its keys, thresholds (rates from 0 to 1) and what it may be
    windowed and grouped by (the loader checks the same, and more)."""
    properties: dict[str, PlainData] = {
        "id": _string("Stable check identifier (not also a rule id).", pattern=_ID_PATTERN),
        "kind": {"const": spec.name, "description": spec.doc},
        "when": _string("CEL precondition: the check reads only the records for which it is "
                        "true."),
        "description": _string("Why the check exists, for people."),
    }
    if spec.windowed:
        properties["window"] = _string("Tumbling window on the record timestamp (aligned to "
                                       "the epoch): a whole number and a unit, e.g. 10m.",
                                       pattern="^" + DURATION.pattern.replace(r"\Z", "$"))
    if spec.grouped:
        properties["by"] = _string("Group by: partition, header:<name>, or a field path of "
                                   "the decoded value.")
    for p in spec.params:
        schema = _param_schema(p)
        if spec.rates and p.name in ("min", "max"):
            schema.update(type="number", minimum=0, maximum=1)
        elif p.name in spec.thresholds or p.name in ("now", "bins"):
            schema["minimum"] = 2 if p.name == "bins" else 0
        if p.name == "stat":
            schema["enum"] = list(STATS)
        properties[p.name] = schema
    out: dict[str, PlainData] = {
        "type": "object", "description": spec.doc,
        "required": ["id", "kind", *(p.name for p in spec.params if p.required)],
        "properties": properties, "additionalProperties": False,
    }
    optional = [t for t in spec.thresholds if not (spec.param(t) and (
        spec.param(t).required or spec.param(t).default is not None))]  # type: ignore[union-attr]
    if len(optional) == len(spec.thresholds) and optional:
        out["anyOf"] = [{"required": [t]} for t in optional]
    return out


def _broker_configs() -> dict[str, PlainData]:
    # lazy: kqlab.kafka's package imports pyarrow
    from kqlab.kafka.configs import (
        BROKER_ONLY,
        BROKER_SYNONYMS,
        IGNORED_TOPIC_CONFIGS,
        BrokerRelease,
    )

    value_types = ["string", "integer", "number", "boolean"]
    properties: dict[str, PlainData] = {}
    defaults = {**BrokerRelease.parse("3.9").defaults(), **BrokerRelease.parse("4.0").defaults()}
    for name in sorted(defaults):
        properties[name] = {"type": value_types, "description":
                            f"Topic config (broker synonym {BROKER_SYNONYMS[name]})."}
    for topic_name, broker_name in sorted(BROKER_SYNONYMS.items(), key=lambda kv: kv[1]):
        if broker_name not in properties:
            properties[broker_name] = {"type": value_types,
                                       "description": f"Broker setting behind {topic_name}."}
    for name in sorted(BROKER_ONLY):
        properties[name] = {"type": value_types, "description": "Broker-only setting."}
    for name in sorted(IGNORED_TOPIC_CONFIGS):
        properties[name] = {"type": value_types, "description":
                            "Topic config accepted but not used by produce validation."}
    return {"type": "object", "description": "Kafka config names and values, as for "
            "kafka-configs (unknown names are rejected).",
            "properties": dict(sorted(properties.items())), "additionalProperties": False}


def json_schema() -> dict[str, PlainData]:
    """The JSON Schema of a policy file (a fresh dict).

    Examples
    --------
    >>> schema = json_schema()
    >>> schema["required"], schema["properties"]["kqlab"]["const"]
    (['kqlab', 'name'], 1)
    """
    rule_kinds = sorted(KINDS)
    return {
        "$schema": DRAFT,
        "$id": "urn:kqlab:policy:1",
        "title": "kqlab policy",
        "description": _doc(Policy) + " Written by kqlab.policy.dump_policy, read by "
                       "kqlab.policy.load_policy.",
        "type": "object",
        "required": ["kqlab", "name"],
        "additionalProperties": False,
        "properties": {
            "kqlab": {"const": POLICY_VERSION, "description": "The policy file format version."},
            "name": _string("The policy's name."),
            "description": _string("What the policy is for."),
            "owner": _string("Who to ask about it (team or e-mail)."),
            "topics": {"$ref": "#/$defs/topics"},
            "broker": {"$ref": "#/$defs/broker"},
            "enforcement": {"enum": list(ENFORCEMENT_PROFILES), "default": "kip-940",
                            "description": "Which record-policy KIP's semantics to emulate."},
            "key": {"$ref": "#/$defs/format", "description": "How record keys are encoded."},
            "value": {"$ref": "#/$defs/format",
                      "description": "How record values are encoded."},
            "sensitive": {"$ref": "#/$defs/sensitive"},
            "rules": {"type": "array", "items": {"$ref": "#/$defs/rule"}, "minItems": 1,
                      "description": "The rules, in evaluation order (leave the key out for "
                                     "a policy of broker checks only)."},
            "checks": {"type": "array", "items": {"$ref": "#/$defs/check"}, "minItems": 1,
                       "description": "Sample-level checks (volume, freshness, null rate, "
                                      "duplicates, distinct values, statistics, reject rate, "
                                      "drift, schema drift), judged over the whole sample or "
                                      "per window and group."},
            "strict": {"type": "boolean", "default": False,
                       "description": "Fail every command that replays (exit 1) when a rule "
                                      "reads a field or header no record of the sample has, "
                                      "or every evaluation of a rule errors; else they are "
                                      "warnings."},
            "provenance": {"$ref": "#/$defs/provenance"},
        },
        "$defs": {
            "topics": {
                "type": "object", "description": _doc(Topics), "additionalProperties": False,
                "properties": {
                    "names": {"type": "array", "description": "Exact topic names.",
                              "items": {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$"}},
                    "patterns": {"type": "array", "description": "Regular expressions matched "
                                 "against topic names.",
                                 "items": {"type": "string", "format": "regex", "minLength": 1}},
                },
            },
            "broker": {
                "type": "object", "description": _doc(BrokerSettings),
                "additionalProperties": False,
                "properties": {
                    "version": _string("Kafka release whose broker to emulate (2.4 or later), "
                                       "as text: \"3.9\", \"4.0\".",
                                       pattern=r"^[0-9]+(\.[0-9]+)*",
                                       default=BrokerSettings().version),
                    "configs": _broker_configs(),
                },
            },
            "format": {
                "type": "object", "description": _doc(Format), "additionalProperties": False,
                "properties": {
                    "format": {"enum": list(FORMATS), "default": Format().format,
                               "description": "Payload encoding."},
                    "wire": {"enum": list(WIRE_FORMATS), "default": Format().wire,
                             "description": "raw, or confluent (magic byte and schema id)."},
                    "schemas": {"$ref": "#/$defs/schemas"},
                },
                "allOf": [
                    {"if": {"required": ["format"],
                            "properties": {"format": {"enum": ["avro", "protobuf"]}}},
                     "then": {"required": ["schemas"]}},
                    {"if": {"required": ["wire"], "properties": {"wire": {"const": "confluent"}}},
                     "then": {"required": ["format"],
                              "properties": {"format": {"enum": ["avro", "json", "protobuf"]}}}},
                    {"if": {"required": ["schemas"]},
                     "then": {"required": ["format"],
                              "properties": {"format": {"enum": ["avro", "json", "protobuf"]}}}},
                ],
            },
            "sensitive": {
                "type": "object", "description": _doc(Sensitive), "additionalProperties": False,
                "minProperties": 1,
                "properties": {
                    "fields": {"type": "array", "uniqueItems": True,
                               "description": "Dotted paths into the decoded value (json, "
                               "avro or protobuf), e.g. customer.email.",
                               "items": {"type": "string",
                                         "pattern": _PARAM_PATTERNS["field"]}},
                    "key": {"type": "boolean", "default": False,
                            "description": "Mask the record key."},
                    "value": {"type": "boolean", "default": False,
                              "description": "Mask the whole value (any format)."},
                    "headers": {"type": "array", "uniqueItems": True,
                                "description": "Header names whose values are masked.",
                                "items": {"type": "string", "pattern": _NOT_BLANK}},
                },
                "not": {"required": ["fields", "value"],
                        "properties": {"value": {"const": True}}},
            },
            "schemas": {
                "type": "object", "description": _doc(SchemaSource),
                "additionalProperties": False,
                "properties": {
                    "registry": _string("Schema Registry URL (mock://name in tests).",
                                        pattern="^(mock|https?)://"),
                    "subject": _string("Registry subject."),
                    "path": _string("Folder (or file) of schemas (.avsc, .json, .proto)."),
                    "message": _string("Protobuf: the message type of unframed values, "
                                       "e.g. shop.Order."),
                    "config": {"type": "object", "description": "Registry client settings."},
                },
                "anyOf": [{"required": ["registry"]}, {"required": ["path"]}],
                "dependentRequired": {"subject": ["registry"]},
            },
            "rule": {
                "type": "object",
                "description": "One rule: a catalog kind with its parameters. Kinds: "
                               + "; ".join(f"{k}: {KINDS[k].doc}" for k in rule_kinds),
                "required": ["id", "kind"],
                "properties": {"id": _rule_common()["id"], "kind": _rule_common()["kind"]},
                "allOf": [{"if": {"required": ["kind"], "properties": {"kind": {"const": k}}},
                           "then": {"$ref": f"#/$defs/rule.{k}"}} for k in rule_kinds],
            },
            **{f"rule.{k}": _rule_schema(KINDS[k]) for k in rule_kinds},
            "check": {
                "type": "object",
                "description": "One sample-level check. Kinds: "
                               + "; ".join(f"{k}: {c.doc}" for k, c in CHECK_KINDS.items()),
                "required": ["id", "kind"],
                "properties": {"id": _string("Stable check identifier.", pattern=_ID_PATTERN),
                               "kind": {"enum": list(CHECK_KINDS)}},
                "allOf": [{"if": {"required": ["kind"], "properties": {"kind": {"const": k}}},
                           "then": {"$ref": f"#/$defs/check.{k}"}} for k in CHECK_KINDS],
            },
            **{f"check.{k}": _check_schema(c) for k, c in CHECK_KINDS.items()},
            **_examples_defs(),
            "provenance": {
                "type": "object", "description": _doc(Provenance), "additionalProperties": False,
                "properties": {
                    "sample": {"type": "object", "description": "Sample coordinates (topic, "
                               "partitions, offsets or files)."},
                    "records": _count("Records in the sample."),
                    "batches": _count("Record batches in the sample."),
                    "rejected_records": _count("Records the policy rejected."),
                    "content_hash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$",
                                     "description": "Policy.content_hash() of the vetted "
                                                    "policy."},
                    "vetted_at": _string("ISO date (or date-time) of vetting."),
                },
            },
        },
    }


def write_json_schema(path: str | Path = SCHEMA_FILE) -> Path:
    """Write :func:`json_schema` as indented JSON (the shipped file by default)."""
    path = Path(path)
    path.write_text(json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    return path
