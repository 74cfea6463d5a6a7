"""Regression tests of the workbench bugs of issue 16, each driven through the widgets from
Python (values set, buttons clicked) as a user would: the Replay button and the edited
policy, the rule form's kind, golden examples surviving Apply, CEL checked against the
sample as you type, and the replay clock taken from the sample."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from kqlab.authoring import AuthoringSession, EditError
from kqlab.policy import loads_policy
from kqlab.records import RECORDS_SCHEMA
from kqlab.validate import replay
from kqlab.widgets import PolicyEditor, Workbench
from tests.viz.conftest import NOW

#: rejects every record of the demo sample (every value is longer than one byte)
TINY = {"id": "tiny", "max": 1}


def test_replay_button_replays_the_policy_as_edited(orders_dir):
    """Was: *Replay* replayed the policy as loaded, so after an edit that rejects everything
    the panel still showed the old accepted count."""
    root, policy = orders_dir
    wb = Workbench(root, policy, now=NOW)
    accepted = wb.verdicts.by_outcome()["accepted"]
    assert accepted > 0 and f"accepted {accepted:,}" in wb.panel.status.value
    wb.editor.add_rule("value_size", **TINY)
    # the status line follows the edit at once, not only after the next run
    assert "accepted 0," in wb.panel.status.value
    assert f"accepted {accepted:,}" not in wb.panel.status.value
    wb.panel.run_button.click()  # on a thread, as in the page
    assert wb.panel.wait(120) is not None and wb.panel.state == "done"
    fresh = replay(root, wb.policy, now=NOW).by_outcome()
    assert "tiny" in [r.id for r in wb.panel.policy.rules]
    assert fresh["accepted"] == 0
    assert wb.verdicts.by_outcome() == wb.panel.verdicts.by_outcome() == fresh
    assert wb.panel.status.value.startswith("local: ") and "records in" in wb.panel.status.value
    assert "accepted 0," in wb.panel.status.value
    # every view shows the same verdicts
    assert wb.explorer.matches == fresh["rejected"] + fresh["collateral"]
    assert wb.editor.counts["tiny"]["failed"] == sum(fresh.values())


def test_spark_replay_button_is_given_the_edited_policy(orders_dir, monkeypatch):
    """Was: the Spark path replayed the unedited policy.  The engine is stood in for by the
    local replay of what it is given (the real engine: test_session_spark.py)."""
    import kqlab.spark

    root, policy = orders_dir
    given = []

    def engine(source, pol, **kwargs):
        given.append((pol, kwargs["now"]))
        return replay(source, pol, now=kwargs["now"])

    monkeypatch.setattr(kqlab.spark, "replay_spark", engine)
    wb = Workbench(root, policy, now=NOW)
    wb.editor.add_rule("value_size", **TINY)
    wb.panel.engine.value = "spark"
    wb.panel.run_button.click()
    assert wb.panel.wait(120) is not None, wb.panel.error.value
    (pol, now), = given
    assert pol == wb.policy and "tiny" in [r.id for r in pol.rules] and now == NOW
    assert wb.verdicts.by_outcome()["accepted"] == 0
    assert "accepted 0," in wb.panel.status.value


def test_the_form_shows_the_kind_of_the_rule_being_edited(orders_dir):
    """Was: ``unobserve_all("value")`` on the kind dropdown also removed ipywidgets' own
    value -> index sync, so the page (which reads ``index``) kept showing an old kind, e.g.
    ``avro_valid`` for another rule."""
    root, policy = orders_dir
    editor = PolicyEditor(AuthoringSession(policy, root, now=NOW), figures=())
    form = editor.form
    for rid in ("amount-range", "avro", "traceparent", "amount-range", "value-size"):
        editor.rows[rid]["edit"].click()
        kind = policy.rule(rid).kind
        assert form.kind.value == kind
        # what the front-end shows is the synced index
        assert form.kind.get_state()["index"] == list(form.kind.options).index(kind), rid
        assert form.kind.label == kind
        assert set(form.fields) == {p.name for p in policy.rule(rid).spec.params}
    # the page changing the dropdown (it sets the index) rebuilds the parameter inputs
    form.kind.index = list(form.kind.options).index("field_regex")
    assert form.kind.value == "field_regex" and "pattern" in form.fields


def test_apply_keeps_golden_examples_and_their_status_follows(orders_dir):
    """Was: Apply rebuilt the rule without its golden examples (and the status went stale)."""
    root, policy = orders_dir
    editor = PolicyEditor(AuthoringSession(policy, root, now=NOW), figures=())
    examples = policy.rule("amount-range").examples
    assert examples is not None
    assert editor.golden.value == "golden examples: 12 of 12 behave"
    editor.rows["amount-range"]["edit"].click()
    editor.form.fields["min"].value = "50"  # the 'lower bound' pass example (0.01) now fails
    editor.form.apply.click()
    rule = editor.policy.rule("amount-range")
    assert rule.params["min"] == 50 and rule.examples == examples
    assert rule.description == policy.rule("amount-range").description
    assert "golden examples: 1 of 12 do not behave" in editor.golden.value
    assert "amount-range pass[0] (lower bound)" in editor.golden.value
    assert editor.session.examples.failed[0].label == "amount-range pass[0] (lower bound)"
    editor.undo_button.click()
    assert editor.policy.rule("amount-range").params["min"] == 0.01
    assert editor.golden.value == "golden examples: 12 of 12 behave"
    editor.redo_button.click()
    assert "1 of 12 do not behave" in editor.golden.value


@pytest.fixture
def json_orders():
    """``(records table, policy)``: JSON orders with no declared schema, so only the sample
    can tell that ``value.amuont`` does not exist."""
    n = 300
    rng = np.random.default_rng(3)
    values = [json.dumps({"amount": float(a), "currency": c, "status": "NEW"}).encode()
              for a, c in zip(rng.uniform(1, 500, n).round(2),
                              rng.choice(["EUR", "USD"], n), strict=True)]
    table = pa.Table.from_pylist([
        {"topic": "orders", "partition": 0, "offset": i, "timestamp": NOW - 1000 * (n - i),
         "timestamp_type": 0, "key": b"k%d" % i, "value": v, "headers": [],
         "batch_offset": i, "batch_index": 0} for i, v in enumerate(values)],
        schema=RECORDS_SCHEMA)
    policy = loads_policy("kqlab: 1\nname: json-orders\nvalue: {format: json}\nrules:\n"
                          "- {id: positive, kind: field_range, field: amount, min: 0.01}\n")
    return table, policy


def test_a_misspelled_field_is_flagged_as_you_type(json_orders):
    """Was: ``value.amuont > 0`` got a ✓ and then rejected the whole sample."""
    table, policy = json_orders
    editor = PolicyEditor(AuthoringSession(policy, table, now=NOW, framing="single"),
                          figures=())
    editor.new_kind.value = "cel"
    editor.add_button.click()
    form = editor.form
    form.fields["expr"].value = "value.amuont > 0"
    assert not form.cel_ok and "✓" not in form.cel_status.value
    assert "did you mean &#x27;amount&#x27;?" in form.cel_status.value
    assert "the sample" in form.cel_status.value
    form.apply.click()  # refused: the policy is unchanged and the form says why
    assert [r.id for r in editor.policy.rules] == ["positive"]
    assert "amuont" in form.error.value and "amuont" in editor.error.value
    form.fields["expr"].value = "value.currency > 5"  # a type error against the sample
    assert not form.cel_ok and "compare value.currency with a string" in form.cel_status.value
    form.fields["expr"].value = "value.amount > 0"
    assert form.cel_ok and "fits the sample" in form.cel_status.value
    form.when.value = "value.stauts == 'NEW'"
    assert not form.cel_ok and "status" in form.cel_status.value
    form.when.value = "value.status == 'NEW'"
    form.apply.click()
    assert editor.policy.rule("cel").params["expr"] == "value.amount > 0"
    assert editor.counts["cel"]["failed"] == 0
    # a field kind's field path, too
    editor.new_kind.value = "field_in"
    editor.add_button.click()
    form.fields["field"].value = "curency"
    assert not form.cel_ok and "did you mean &#x27;currency&#x27;?" in form.cel_status.value
    form.fields["field"].value = "currency"
    assert form.cel_ok and "fits the sample" in form.cel_status.value
    # the session's own API refuses it as well
    with pytest.raises(EditError, match="did you mean 'amount'"):
        editor.session.add_rule("cel", id="typo", expr="value.amuont > 0")


def test_replay_without_a_clock_judges_against_the_sample(orders_dir):
    """Was: no ``now`` meant the wall clock, so the demo replayed a week later (here: a year)
    rejected everything; and nothing said which clock was used."""
    root, policy = orders_dir
    wb = Workbench(root, policy)  # no now=
    assert wb.session.clock_source == "sample"
    assert wb.verdicts.by_outcome() == replay(root, policy, now=NOW).by_outcome()
    assert "the sample&#x27;s newest batch" in wb.panel.clock.value
    assert str(wb.session.clock) in wb.panel.clock.value
    assert wb.panel.warning.value == ""
    # a clock a month late: the timestamp bounds reject most of the sample, which is said
    late = Workbench(root, policy, now=NOW + 30 * 86_400_000)
    assert late.session.clock_source == "given"
    assert "the timestamp bounds reject" in late.panel.warning.value
    assert "the timestamp bounds reject" in late.editor.warning.value


def test_cli_replay_prints_the_clock_and_warns_about_it(orders_dir, capsys):
    from kqlab.cli import main
    from kqlab.sources import demo_topics

    root, _ = orders_dir
    policy = str(demo_topics.policy_path("orders"))
    assert main(["replay", str(root), "--policy", policy, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["clock"] == "sample" and NOW - 3_600_000 < doc["now"] <= NOW
    assert doc["outcomes"] == replay(root, demo_topics.load_policies()["orders"],
                                     now=NOW).by_outcome()
    assert main(["replay", str(root), "--policy", policy]) == 0
    out = capsys.readouterr()
    assert "clock: now = " in out.out and "the sample's newest batch" in out.out
    assert "warning" not in out.err
    late = str(NOW + 30 * 86_400_000)
    assert main(["replay", str(root), "--policy", policy, "--now", late]) == 0
    out = capsys.readouterr()
    assert "clock: now = " + late in out.out and "as given" in out.out
    assert "warning: the timestamp bounds reject" in out.err
