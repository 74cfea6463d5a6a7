"""diff(a, b): rules added, removed, changed, moved, settings changed; provenance ignored."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kqlab.policy import (
    BrokerSettings,
    Format,
    Policy,
    PolicyDiff,
    Provenance,
    Rule,
    RuleChange,
    diff,
)

KEY = Rule(id="key", kind="key_required")
AMOUNT = Rule(id="amount", kind="field_range", params={"field": "amount", "max": 100})
SKU = Rule(id="sku", kind="field_regex", params={"field": "sku", "pattern": "^[A-Z]+$"})
BASE = Policy(name="orders", rules=(KEY, AMOUNT, SKU))


def test_identical_policies_have_no_diff():
    d = diff(BASE, BASE)
    assert not d
    assert d == PolicyDiff()
    assert d.summary() == "no changes"


def test_added_and_removed():
    new = BASE.with_rules([KEY, SKU, Rule(id="value", kind="value_required")])
    d = diff(BASE, new)
    assert d.added == ("value",)
    assert d.removed == ("amount",)
    assert d.changed == () and d.moved == ()
    assert d


def test_changed_parameters_and_fields():
    amount = replace(AMOUNT, params={"field": "amount", "max": 50, "min": 0},
                     severity="warning")
    d = diff(BASE, BASE.with_rules([KEY, amount, SKU]))
    assert d.changed == (RuleChange(id="amount", fields=(
        ("severity", "error", "warning"), ("min", None, 0), ("max", 100, 50))),)
    assert "changed rule amount: severity error -> warning; min (none) -> 0; max 100 -> 50" \
        in d.summary()


def test_kind_change_lists_kind_and_parameters():
    d = diff(BASE, BASE.with_rules([replace(KEY, kind="value_required"), AMOUNT, SKU]))
    (change,) = d.changed
    names = [name for name, _, _ in change.fields]
    assert names[0] == "kind"


def test_explicit_default_is_not_a_change():
    explicit = replace(KEY, params={"allow_empty": True})
    assert not diff(BASE, BASE.with_rules([explicit, AMOUNT, SKU]))


def test_moved_rules():
    d = diff(BASE, BASE.with_rules([AMOUNT, KEY, SKU]))
    assert len(d.moved) == 1 and d.moved[0] in ("key", "amount")
    assert not d.added and not d.removed and not d.changed
    d = diff(BASE, BASE.with_rules([SKU, KEY, AMOUNT]))
    assert d.moved == ("sku",)
    assert "moved rules: sku" in d.summary()


def test_additions_do_not_count_as_moves():
    d = diff(BASE, BASE.with_rules([Rule(id="first", kind="value_required"), KEY, AMOUNT, SKU]))
    assert d.added == ("first",) and d.moved == ()


def test_settings_changed():
    new = replace(BASE, enforcement="kip-686", broker=BrokerSettings(configs={"cleanup.policy":
                                                                      "compact"}),
                  value=Format(format="json"))
    d = diff(BASE, new)
    assert {k: (a, b) for k, a, b in d.settings_changed} == {
        "enforcement": ("kip-940", "kip-686"),
        "broker.configs.cleanup.policy": (None, "compact"),
        "value.format": ("bytes", "json"),
    }
    assert "changed setting enforcement: kip-940 -> kip-686" in d.summary()


def test_provenance_is_ignored():
    vetted = replace(BASE, provenance=Provenance(records=10, vetted_at="2026-01-01"))
    assert not diff(BASE, vetted)


@pytest.mark.parametrize("other", [
    BASE.with_rules([KEY, AMOUNT]),
    BASE.with_rules([AMOUNT, KEY, SKU]),
    BASE.with_rules([KEY, replace(AMOUNT, message="too big"), SKU]),
    replace(BASE, description="now documented"),
    replace(BASE, provenance=Provenance(records=1)),
    BASE,
])
def test_diff_agrees_with_the_content_hash(other):
    assert bool(diff(BASE, other)) == (BASE.content_hash() != other.content_hash())


def test_summary_lists_everything():
    new = replace(BASE.with_rules([SKU, replace(KEY, mode="observe"),
                                   Rule(id="v", kind="value_required")]), owner="me")
    text = diff(BASE, new).summary()
    assert text.splitlines() == [
        "added rules: v",
        "removed rules: amount",
        "changed rule key: mode reject -> observe",
        "moved rules: sku",
        "changed setting owner: (none) -> me",
    ]
