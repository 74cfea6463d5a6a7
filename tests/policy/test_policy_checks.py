"""The ``checks:`` section as data: the model's API, the canonical dump, diffs, the content
hash, and errors from plain data (the file corpus covers errors with lines)."""

from __future__ import annotations

import pytest

from kqlab.policy import Check, PolicyError, diff, dump_policy, loads_policy, policy_from_dict
from kqlab.policy.check_catalog import CHECK_KINDS, by_target, duration_ms

TEXT = """kqlab: 1
name: p
value: {format: json}
rules: [{id: size, kind: value_size, max: 100}]
checks:
  - {id: vol, kind: volume, min: 1, by: partition, window: 10m}
  - {id: gate, kind: reject_rate, rule: size, max: 0.05}
"""


def test_model_and_canonical_dump():
    policy = loads_policy(TEXT)
    vol = policy.check("vol")
    assert isinstance(vol, Check) and vol.window_ms == 600_000 and vol.by == "partition"
    assert vol.param("min") == 1 and vol.param("max") is None
    assert vol.spec is CHECK_KINDS["volume"]
    text = dump_policy(policy)
    assert "- id: vol\n  kind: volume\n  window: 10m\n  by: partition\n  min: 1\n" in text
    assert loads_policy(text) == policy and dump_policy(loads_policy(text)) == text
    with pytest.raises(KeyError, match="checks: vol, gate"):
        policy.check("nope")
    assert policy.with_checks([]).checks == ()


def test_checks_count_in_the_hash_and_the_diff():
    a = loads_policy(TEXT)
    b = loads_policy(TEXT.replace("max: 0.05", "max: 0.01"))
    assert a.content_hash() != b.content_hash()
    d = diff(a, b)
    assert d and [k for k, _, _ in d.settings_changed] == ["checks.gate"]
    assert loads_policy(TEXT.replace("min: 1, by", "by: partition, min: 1, by").replace(
        ", by: partition, window", ", window")).content_hash() == a.content_hash()


@pytest.mark.parametrize(("check", "key", "words"), [
    ({"id": "x", "kind": "nope", "min": 1}, "checks[0].kind", "unknown check kind"),
    ({"id": "x", "kind": "volume", "min": "ten"}, "checks[0].min", "expected a whole number"),
    ({"id": "x", "kind": "volume", "min": 1, "window": "0m"}, "checks[0].window",
     "not a duration"),
    ({"id": "x", "kind": "null_rate", "field": "a", "min": -0.1}, "checks[0].min",
     "0 or more"),
    ({"id": "x", "kind": "drift", "field": "a", "baseline": "b", "max_psi": 1, "bins": 1},
     "checks[0].bins", "at least 2"),
    ({"id": "x", "kind": "schema_drift", "baseline": "b", "by": "partition"}, "checks[0].by",
     "remove by"),
    ({"id": "X Y", "kind": "volume", "min": 1}, "checks[0].id", "lowercase"),
])
def test_errors_from_plain_data_name_the_key(check, key, words):
    with pytest.raises(PolicyError) as info:
        policy_from_dict({"kqlab": 1, "name": "p", "checks": [check]}, source="d")
    assert info.value.key == key and words in str(info.value)


def test_helpers():
    assert duration_ms("1d") == 86_400_000 and duration_ms("0s") is None
    assert by_target("field:partition") == ("field", "partition")
