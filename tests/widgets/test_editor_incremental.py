"""The editor's fast refresh shows what a full refresh would: after every kind of edit its
counts, verdicts and figures equal a fresh replay of the same policy, the figure views are
updated in place (same widgets), and the rule rows are rebuilt only when the rules' layout
changes."""

from __future__ import annotations

import json
from dataclasses import replace

import plotly.graph_objects as go
import pytest

from kqlab.policy import dump_policy
from kqlab.policy.model import BrokerSettings, Rule
from kqlab.validate import Replayer, replay
from kqlab.viz import policy_impact, rejections_by_offset, rejections_by_reason
from kqlab.widgets import PolicyEditor
from kqlab.widgets._common import FigureView, slug, update_figure_widget
from kqlab.widgets._editor import _box_order
from kqlab.widgets._plot import PlotlyFigure
from tests.validate.test_incremental import (
    ENV,
    KEY,
    NOW,
    SIZE,
    TRACE,
    assert_same,
    policy,
    write_log,
)

FIGURES = ("reasons", "offsets", "timeline", "impact")


def plain(fig: go.BaseFigure) -> dict:
    """A figure's JSON without the trace uids a widget assigns."""
    d = json.loads(fig.to_json())
    for t in d.get("data", []):
        t.pop("uid", None)
    return d


def shown_rows(editor: PolicyEditor) -> list:
    """The rule rows the page shows, in its order (a hidden row is in the box, not shown)."""
    return [row for row in editor.rules_box.children if row.layout.display != "none"]


def check_rows(editor: PolicyEditor) -> None:
    """The page shows one row per rule of the policy, in policy order, each row holding the
    controls of :attr:`PolicyEditor.rows`; no rule id has two rows in the box."""
    rules = [r.id for r in editor.policy.rules]
    shown = shown_rows(editor)
    assert [row._dom_classes[0] for row in shown] == [f"kqlab-rule-{slug(r)}" for r in rules]
    assert list(editor.rows) == rules
    for rid, row in zip(rules, shown, strict=True):
        assert row.children[1] is editor.rows[rid]["count"]
        assert row.children[-1] is editor.rows[rid]["remove"]
    boxed = [row._dom_classes[0] for row in editor.rules_box.children]
    assert len(boxed) == len(set(boxed))


def check(editor: PolicyEditor, source, widgets_before: dict | None = None) -> None:
    """The editor's state equals a fresh replay of its policy; the views show its figures."""
    check_rows(editor)
    fresh = replay(source, editor.policy, now=NOW)
    assert_same(editor.verdicts, fresh)
    assert editor.counts == {r["rule"]: {"failed": r["failed_records"],
                                         "rejected": r["rejected_records"],
                                         "rejected_batches": r["rejected_batches"]}
                             for r in fresh.rules.to_pylist()}
    for rule in editor.policy.rules:
        c = editor.counts.get(rule.id)
        if c is not None:
            assert f"{c['failed']:,} failed" in editor.rows[rule.id]["count"].value
    o = fresh.by_outcome()
    assert f"<b>rejected</b> {o['rejected']:,}" in editor.outcomes.value
    assert editor.yaml.value == dump_policy(editor.policy)
    # the figures are those of the fresh verdicts (in the session's colours: a rule keeps its
    # colour across edits), and the views show exactly them
    colors = editor.session.colors
    assert plain(editor.figures["reasons"]) == plain(rejections_by_reason(fresh, colors=colors))
    assert plain(editor.figures["offsets"]) == plain(rejections_by_offset(fresh, colors=colors))
    view = editor._figure_view.widgets
    assert list(view) == list(editor.figures)
    for name, fig in editor.figures.items():
        assert isinstance(fig, go.Figure) and isinstance(view[name], PlotlyFigure)
        assert plain(view[name]) == plain(fig), name
        if widgets_before and name in widgets_before:
            assert view[name] is widgets_before[name], f"{name} was rebuilt"
    shown = [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
             for o in editor.figures_out.outputs]
    assert shown == [view[n].model_id for n in view]


def run_edits(editor: PolicyEditor, source) -> None:
    check(editor, source)
    steps = [
        lambda: editor.update_rule("size", max=100),
        lambda: editor.add_rule(KEY),
        lambda: editor.move_rule("key", -2),
        lambda: editor.set_mode("trace", "observe"),
        lambda: editor.update_rule("size", max=40),
        lambda: editor.set_severity("size", "warning"),
        lambda: editor.remove_rule("key"),
        lambda: editor.set_policy(replace(editor.policy, broker=BrokerSettings(
            version="4.0", configs={"cleanup.policy": "compact"}))),
        lambda: editor.set_enforcement("kip-686"),
        lambda: editor.update_rule("size", max=120),
        lambda: editor.apply_yaml(dump_policy(editor.policy).replace("max: 120", "max: 60")),
        lambda: editor.set_mode("trace", "reject"),
        lambda: editor.undo(),
        lambda: editor.set_policy(replace(editor.policy, broker=BrokerSettings(version="3.9"))),
    ]
    for step in steps:
        widgets = dict(editor._figure_view.widgets)
        step()
        check(editor, source, widgets)


def test_edits_on_independent_batches_equal_fresh_replays(tmp_path):
    log = write_log(tmp_path / "log")
    editor = PolicyEditor(Replayer(log, now=NOW), policy(TRACE, SIZE), figures=FIGURES)
    editor.update_rule("size", max=200)  # the impact figure appears: views are re-shown
    run_edits(editor, log)
    assert editor.replayer.assembler.broker_batches < \
        16 * editor.replayer.sample.batches.num_rows, "the splice path must have run"


def test_edits_with_producer_state_equal_fresh_replays(tmp_path):
    log = write_log(tmp_path / "log", producer_id=500)
    editor = PolicyEditor(Replayer(log, now=NOW), policy(TRACE, SIZE), figures=FIGURES)
    editor.update_rule("size", max=200)
    run_edits(editor, log)


def test_demo_orders_edits_equal_fresh_replays(orders_dir):
    root, pol = orders_dir
    editor = PolicyEditor(Replayer(root, now=NOW), pol, figures=FIGURES)
    editor.update_rule("amount-range", min=50)
    check(editor, root)
    for step in (lambda: editor.update_rule("amount-range", max=500),
                 lambda: editor.set_mode("traceparent", "observe"),
                 lambda: editor.move_rule("value-size", -5),
                 lambda: editor.remove_rule("customer-present")):
        widgets = dict(editor._figure_view.widgets)
        step()
        check(editor, root, widgets)


def test_rule_rows_are_rebuilt_only_when_the_rules_layout_changes(tmp_path):
    log = write_log(tmp_path / "log")
    editor = PolicyEditor(Replayer(log, now=NOW), policy(TRACE, SIZE), figures=("reasons",))
    row = editor.rows["size"]["count"]
    editor.update_rule("size", max=50)
    assert editor.rows["size"]["count"] is row  # only the count text changed
    assert f"{editor.counts['size']['failed']:,} failed" in row.value
    editor.set_mode("size", "observe")
    assert editor.rows["size"]["count"] is row  # a mode switch re-renders no row either
    assert editor.rows["size"]["mode"].value == "observe"
    assert editor.policy.rule("size").mode == "observe"
    editor.rows["size"]["mode"].value = "reject"  # the rebuilt toggles are wired
    assert editor.policy.rule("size").mode == "reject"


def test_removing_and_re_adding_a_rule_keeps_every_other_row_in_the_page(tmp_path):
    """ipywidgets' box view re-creates the view of every child after the first one that
    changed: a removed rule's row stays in the box, hidden, and shows again on undo, so the
    box's children — what the page renders — do not change."""
    log = write_log(tmp_path / "log")
    editor = PolicyEditor(Replayer(log, now=NOW), policy(TRACE, SIZE, KEY), figures=FIGURES)
    children = editor.rules_box.children
    trace_row = children[0]
    count = editor.rows["size"]["count"]
    editor.remove_rule("trace")                       # the first rule
    assert editor.rules_box.children == children      # no view re-created in the page
    assert trace_row.layout.display == "none"
    assert "trace" not in editor.rows and "trace" not in editor.counts
    check(editor, log)
    editor.undo()                                     # the rule back where it was
    assert editor.rules_box.children == children
    assert trace_row.layout.display is None
    assert editor.rows["size"]["count"] is count
    check(editor, log)
    editor.redo()                                     # removed again, then back in observe:
    editor.set_policy(replace(editor.policy, rules=(replace(TRACE, mode="observe"),
                                                    *editor.policy.rules)))
    assert editor.rules_box.children == children
    assert editor.rows["trace"]["mode"].value == "observe"   # the row follows its rule
    check(editor, log)
    # the policy's last rule removed, then a new rule: the new row comes after the hidden one
    editor.remove_rule("key")
    editor.add_rule(ENV)
    assert editor.rules_box.children[:3] == children
    check(editor, log)
    # the same id with another kind: one row per id (the page finds a rule by its class)
    editor.replace_rule("size", Rule(id="size", kind="key_required"))
    check(editor, log)
    assert "key_required" in shown_rows(editor)[1].children[0].value
    editor.undo()
    check(editor, log)


def test_a_moved_rule_lays_out_the_rows_from_its_place(tmp_path):
    log = write_log(tmp_path / "log")
    editor = PolicyEditor(Replayer(log, now=NOW), policy(TRACE, SIZE, KEY), figures=FIGURES)
    children = editor.rules_box.children
    editor.remove_rule("trace")
    editor.move_rule("key", -1)
    check(editor, log)
    assert editor.rules_box.children[0] is children[0]   # the hidden row before them stays
    editor.add_rule(TRACE)                               # back, at the end this time
    check(editor, log)
    assert [r.id for r in editor.policy.rules] == ["key", "size", "trace"]
    editor.undo()
    editor.undo()
    editor.undo()
    check(editor, log)
    assert [r.id for r in editor.policy.rules] == ["trace", "size", "key"]


def test_hidden_rows_are_bounded():
    a, b = ("a", "cel"), ("b", "cel")
    hidden = tuple((f"h{i}", "cel") for i in range(3))
    assert _box_order((*hidden, a, b), (a, b), hidden_max=3) == (*hidden, a, b)
    assert _box_order((*hidden, a, b), (a, b), hidden_max=2) == (a, b)
    # the removed first rule stays in front (hidden); re-added, nothing moves
    assert _box_order((a, b), (b,), hidden_max=2) == (a, b)
    assert _box_order((a, b), (a, b), hidden_max=2) == (a, b)
    # a rule that comes back elsewhere ends the kept prefix; rows after it follow in order
    assert _box_order((a, b), (b, a), hidden_max=2) == (b, a)
    assert _box_order((a, *hidden, b), (b, a), hidden_max=9) == (b, a)
    # another kind under the same id: the old row goes
    assert _box_order((a, b), (("a", "field_range"), b), hidden_max=2) == \
        (("a", "field_range"), b)


def test_a_new_replayer_in_the_editor_refreshes_from_its_sample(tmp_path):
    a, b = write_log(tmp_path / "a", seed=1), write_log(tmp_path / "b", seed=5, batches=20)
    editor = PolicyEditor(Replayer(a, now=NOW), policy(TRACE, SIZE), figures=("reasons",))
    editor.replayer = Replayer(b, now=NOW)
    editor.previous = None
    editor._refresh()
    assert_same(editor.verdicts, replay(b, editor.policy, now=NOW))
    editor.update_rule("size", max=20)
    assert_same(editor.verdicts, replay(b, editor.policy, now=NOW))


@pytest.mark.parametrize("change", ["traces", "layout", "template"])
def test_update_figure_widget_equals_a_new_widget(change, tmp_path):
    log = write_log(tmp_path / "log")
    r = Replayer(log, now=NOW)
    v1 = r.run(policy(TRACE, SIZE))
    v2 = r.run(policy(TRACE, replace(SIZE, params={"max": 30}), KEY))
    first = rejections_by_reason(v1)
    second = {"traces": rejections_by_reason(v2),
              "layout": policy_impact(v1, v2),
              "template": rejections_by_reason(v2).update_layout(
                  template="plotly_dark", showlegend=False)}[change]
    widget = go.FigureWidget(first)
    update_figure_widget(widget, second)
    assert plain(widget) == plain(go.FigureWidget(second))


def test_figure_view_reshows_only_when_the_figures_change(tmp_path):
    import ipywidgets as w

    log = write_log(tmp_path / "log")
    v = Replayer(log, now=NOW).run(policy(TRACE))
    view = FigureView(w.Output())
    view.show({"reasons": rejections_by_reason(v)})
    outputs = view.out.outputs
    view.show({"reasons": rejections_by_reason(v)})
    assert view.out.outputs is outputs
    view.show({"reasons": rejections_by_reason(v), "offsets": rejections_by_offset(v)})
    assert len(view.out.outputs) == 2


def test_fast_template_figures_equal_validated_ones():
    from kqlab.viz._figures import _figure

    a = _figure().update_layout(title={"text": "t"}, height=300)
    b = go.Figure().update_layout(template="kqlab", title={"text": "t"}, height=300)
    assert a.to_plotly_json() == b.to_plotly_json()
    with pytest.raises(ValueError, match="height"):  # validation is on after the template
        a.update_layout(height="tall")
    a.layout.template.layout.paper_bgcolor = "red"  # a copy: the registered one is unchanged
    assert _figure().layout.template.layout.paper_bgcolor == "rgba(0,0,0,0)"


def test_an_edit_in_the_policy_tab_builds_no_record_table(tmp_path):
    """The Workbench on its Policy tab: an edit redraws the counts, the outcome and status
    lines and the impact figure from the verdicts' codes, never building the record table
    (a million outcome strings and failure lists); the Rejections tab, once shown, reads it."""
    from kqlab.widgets import Workbench

    log = write_log(tmp_path / "log")
    wb = Workbench(log, policy(TRACE, SIZE, KEY), now=NOW)
    for edit in (lambda s: s.set_mode("trace", "observe"), lambda s: s.remove_rule("key"),
                 lambda s: s.undo(), lambda s: s.update_rule("size", max=100)):
        edit(wb.session)
        assert not wb.session.verdicts.records_ref().built
        assert "impact" in wb.editor.figures
    wb.tabs.selected_index = 1  # the explorer's table pages read the records
    assert wb.session.verdicts.records_ref().built
    assert_same(wb.session.verdicts, replay(log, wb.session.policy, now=NOW))
