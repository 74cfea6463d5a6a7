"""PolicyEditor driven as a user would (values set, buttons clicked) and through its Python
twins; every count must equal a fresh replay of the edited policy (spec/testing-jupyter.md (b):
no kernel, no browser)."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from kqlab.policy import Rule
from kqlab.validate import Replayer, replay
from kqlab.widgets import CSS, EditError, PolicyEditor
from tests.viz.conftest import NOW


@pytest.fixture
def editor(orders_dir):
    root, policy = orders_dir
    return PolicyEditor(Replayer(root, now=NOW), policy,
                        figures=("reasons", "offsets", "timeline", "impact"))


def fresh_counts(root, policy) -> dict[str, dict[str, int]]:
    """Per rule failed / rejected records of a replay from scratch (no shared cache)."""
    return {r["rule"]: {"failed": r["failed_records"], "rejected": r["rejected_records"]}
            for r in replay(root, policy, now=NOW).rules.to_pylist()}


def shown_counts(editor) -> dict[str, dict[str, int]]:
    return {k: {"failed": v["failed"], "rejected": v["rejected"]}
            for k, v in editor.counts.items()}


def has_class(widget, name: str) -> bool:
    return name in widget._dom_classes


def test_form_edit_re_evaluates_one_rule_and_counts_match_a_fresh_replay(editor, orders_dir):
    root, _ = orders_dir
    before = editor.counts["amount-range"]["failed"]
    evaluations = editor.replayer.evaluations
    editor.rows["amount-range"]["edit"].click()
    assert editor.form.editing == "amount-range" and editor.form.kind.value == "field_range"
    editor.form.fields["min"].value = "50"
    editor.form.apply.click()
    assert editor.replayer.evaluations - evaluations == 1  # only the edited rule ran again
    assert editor.policy.rule("amount-range").params["min"] == 50
    assert editor.counts["amount-range"]["failed"] > before
    assert shown_counts(editor) == fresh_counts(root, editor.policy)
    count = editor.rows["amount-range"]["count"]
    assert has_class(count, "kqlab-rule-count-amount-range")
    assert f"{editor.counts['amount-range']['failed']:,} failed" in count.value
    # the figures follow the edit: impact shows the newly rejected records of that rule
    assert isinstance(editor.figures["reasons"], go.Figure)
    impact = editor.figures["impact"]
    newly = sum(sum(t.x) for t in impact.data if t.x is not None and sum(t.x) > 0)
    assert newly > 0 and "amount-range" in json.dumps(impact.to_plotly_json(), default=str)
    reasons = json.dumps(editor.figures["reasons"].to_plotly_json(), default=str)
    assert "amount-range" in reasons
    views = [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
             for o in editor.figures_out.outputs]
    assert len(views) == 4 and all(views)


def test_add_rule_with_a_cel_field_validated_as_you_type(editor, orders_dir):
    root, _ = orders_dir
    editor.new_kind.value = "cel"
    editor.add_button.click()
    form = editor.form
    assert form.widget.layout.display is None and form.rule_id.value == "cel"
    form.fields["expr"].value = "value.amount >"
    assert not form.cel_ok and "column" in form.cel_status.value
    form.apply.click()  # refused inline; the policy is unchanged
    assert "cel" not in {r.id for r in editor.policy.rules}
    assert "does not compile" in form.error.value
    form.fields["expr"].value = "value.amount < 500.0"
    assert form.cel_ok and "compiles" in form.cel_status.value
    form.when.value = "value.currency =="
    assert not form.cel_ok
    form.when.value = "value.currency == 'EUR'"
    form.apply.click()
    rule = editor.policy.rule("cel")
    assert rule.params["expr"] == "value.amount < 500.0" and rule.when == "value.currency == 'EUR'"
    assert editor.counts["cel"]["failed"] > 0
    assert shown_counts(editor) == fresh_counts(root, editor.policy)
    assert "id: cel" in editor.yaml.value and "value.amount < 500.0" in editor.yaml.value


def test_mode_severity_order_remove_and_enforcement(editor, orders_dir):
    root, policy = orders_dir
    editor.rows["traceparent"]["mode"].value = "observe"
    assert editor.policy.rule("traceparent").mode == "observe"
    assert editor.counts["traceparent"]["rejected"] == 0
    assert editor.counts["traceparent"]["failed"] > 0
    editor.rows["avro"]["severity"].value = "warning"
    assert editor.policy.rule("avro").severity == "warning"
    editor.rows["value-size"]["up"].click()
    ids = [r.id for r in editor.policy.rules]
    assert ids.index("value-size") == [r.id for r in policy.rules].index("value-size") - 1
    editor.rows["customer-present"]["remove"].click()
    assert "customer-present" not in editor.counts
    editor.enforcement.value = "kip-686"
    assert editor.policy.enforcement == "kip-686" and editor.verdicts.profile == "kip-686"
    assert shown_counts(editor) == fresh_counts(root, editor.policy)
    assert "enforcement: kip-686" in editor.yaml.value
    editor.undo()
    assert editor.policy.enforcement == policy.enforcement


def test_invalid_edits_are_inline_errors_and_change_nothing(editor):
    policy = editor.policy
    with pytest.raises(EditError, match="whole number"):
        editor.update_rule("value-size", max="big")
    assert "whole number" in editor.error.value and editor.policy == policy
    with pytest.raises(EditError, match="already a rule"):
        editor.add_rule(Rule(id="avro", kind="key_required"))
    with pytest.raises(EditError, match="no rule"):
        editor.remove_rule("nope")
    editor.rows["amount-range"]["edit"].click()
    editor.form.fields["min"].value = "lots"
    editor.form.apply.click()  # the button swallows the error and shows it
    assert "cannot read" in editor.form.error.value and editor.policy == policy
    editor.yaml.value = "kqlab: 1\nname: x\nrules: [{id: a, kind: nope}]"
    editor.yaml_apply.click()
    assert "unknown rule kind" in editor.error.value or "nope" in editor.error.value
    assert editor.policy == policy
    editor.update_rule("value-size", max=4096)  # a good edit clears the error
    assert editor.error.value == ""


def test_suggestions_show_rates_and_accept_with_one_click(editor, orders_dir):
    root, _ = orders_dir
    editor.suggest_button.click()
    s = editor.suggestions
    assert len(s) > 0
    first = s.by_rate()[0]
    text = " ".join(c.children[1].value for c in editor.suggestions_box.children)
    assert f"{first.rejection_rate:.2%}" in text
    button = editor.suggestion_buttons[first.id]
    assert has_class(button, CSS["accept"].replace("<id>", first.id.replace(".", "-")))
    button.click()
    assert editor.policy.rules[-1].id == first.id
    assert editor.counts[first.id]["failed"] == first.rejected
    assert editor.suggestion_buttons[first.id].disabled
    assert shown_counts(editor) == fresh_counts(root, editor.policy)


def test_key_controls_carry_their_documented_classes(editor):
    assert has_class(editor.add_button, "kqlab-add-rule")
    assert has_class(editor.widget, "kqlab-policy-editor")
    assert has_class(editor.form.apply, "kqlab-form-apply")
    assert has_class(editor.yaml, "kqlab-policy-yaml")
    for rid, row in editor.rows.items():
        assert has_class(row["count"], f"kqlab-rule-count-{rid}")
        assert has_class(row["remove"], f"kqlab-rule-remove-{rid}")
