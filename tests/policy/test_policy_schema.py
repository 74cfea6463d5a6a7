"""The JSON Schema: shipped file equals the built one; good files pass, malformed ones fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from kqlab.policy import KINDS, json_schema, load_policy, policy_to_dict
from kqlab.policy.positioned_yaml import read_yaml
from kqlab.policy.schema import SCHEMA_FILE, write_json_schema

CORPUS = Path(__file__).parent / "corpus"
GOOD = sorted((CORPUS / "good").glob("*.yaml"))

#: malformed corpus files the schema alone already rejects (the loader checks more)
SCHEMA_REJECTS = (
    "broker-config-typo", "broker-unknown-key", "enforcement-typo", "format-avro-no-schemas",
    "format-confluent-string", "format-unknown", "name-missing", "param-bad-regex",
    "param-int-bool", "param-int-float", "param-int-negative", "param-json-schema-both",
    "param-json-schema-none", "param-number-quoted", "param-number-text", "param-size-no-bounds",
    "param-target-typo", "param-values-empty", "param-window-no-bounds", "provenance-hash",
    "provenance-negative", "rule-id-spaces", "rule-kind-typo", "rule-missing-id",
    "rule-missing-param", "rule-severity", "rule-unknown-param", "schemas-no-source",
    "schemas-registry-not-url", "schemas-with-string", "topics-illegal-name", "unknown-top-key",
    "version-missing", "version-newer", "version-text", "param-cel-empty",
    "param-field-empty-segment", "param-plugin-callable", "schemas-subject-without-registry",
    "name-empty", "rule-when-empty", "examples-unknown-key", "examples-value-and-raw",
    "examples-timestamp", "rules-empty-list",
    "check-kind-typo", "check-no-threshold", "check-rate-percent", "check-window-number",
    "check-window-on-drift", "check-unknown-key", "check-freshness-no-max",
)


@pytest.fixture(scope="module")
def validator():
    schema = json_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def test_shipped_schema_equals_the_built_one():
    shipped = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert shipped == json_schema(), (
        "policy.schema.json is stale; regenerate it with python -c \"from kqlab.policy.schema "
        "import write_json_schema; write_json_schema()\"")


def test_write_json_schema(tmp_path):
    path = write_json_schema(tmp_path / "s.json")
    assert path.read_text(encoding="utf-8") == SCHEMA_FILE.read_text(encoding="utf-8")


def test_schema_declares_every_rule_kind_and_parameter():
    schema = json_schema()
    for name, spec in KINDS.items():
        rule = schema["$defs"][f"rule.{name}"]
        assert rule["additionalProperties"] is False
        assert {p.name for p in spec.params} <= set(rule["properties"])
        assert {p.name for p in spec.params if p.required} <= set(rule["required"])
    assert schema["$defs"]["rule"]["properties"]["kind"]["enum"] == sorted(KINDS)


def test_schema_declares_every_check_kind_and_parameter():
    from kqlab.policy.check_catalog import CHECK_KINDS

    schema = json_schema()
    for name, spec in CHECK_KINDS.items():
        check = schema["$defs"][f"check.{name}"]
        assert check["additionalProperties"] is False
        assert {p.name for p in spec.params} <= set(check["properties"])
        assert ("window" in check["properties"]) == spec.windowed
        assert ("by" in check["properties"]) == spec.grouped
    assert schema["$defs"]["check"]["properties"]["kind"]["enum"] == list(CHECK_KINDS)


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_good_files_validate(validator, path):
    raw = read_yaml(path.read_text(encoding="utf-8"), str(path))
    assert list(validator.iter_errors(raw)) == []
    assert list(validator.iter_errors(policy_to_dict(load_policy(path)))) == []


@pytest.mark.parametrize("name", SCHEMA_REJECTS)
def test_malformed_files_fail_the_schema_too(validator, name):
    raw = read_yaml((CORPUS / "bad" / f"{name}.yaml").read_text(encoding="utf-8"), name)
    assert list(validator.iter_errors(raw)) != []
