"""One colour per rule across replays and edits (issue 16), driven through the widgets.

The figures take a shared rule -> colour map, and the :class:`~kqlab.authoring
.AuthoringSession` owns one for its whole life.  Was: the Workbench and the editor built a
fresh map from each replay's verdicts, so removing the first rule gave every later rule the
colour of the one before it — the analyst's "amount-range is light blue" went stale on
every edit.  Here the edits are the widgets' own buttons (the rule row's trash, the form's
Apply, Undo), and every figure either widget draws is read back from the page's models.
"""

from __future__ import annotations

import pytest

from kqlab.authoring import AuthoringSession
from kqlab.viz._style import RULE_PALETTE, RuleColors
from kqlab.widgets import Workbench
from tests.viz.conftest import NOW
from tests.viz.test_style import _reason_colors

_FOLDED = ("collateral", "other", "all refused", "sampled offsets")


def _drawn(wb: Workbench) -> dict[str, set[str]]:
    """Reason -> every colour any figure of the workbench shows for it, read from the figure
    models the page draws (the workbench's figures and the editor's impact figure)."""
    import plotly.graph_objects as go

    out: dict[str, set[str]] = {}
    views = [*wb._figure_view.widgets.values(), *wb.editor._figure_view.widgets.values()]
    assert views
    for view in views:
        fig = go.Figure(view.to_dict())
        for reason, colors in _reason_colors(fig).items():
            if reason not in _FOLDED:
                out.setdefault(reason, set()).update(colors)
    return out


def _one_each(drawn: dict[str, set[str]]) -> dict[str, str]:
    assert all(len(c) == 1 for c in drawn.values()), drawn  # one colour in every figure
    return {reason: next(iter(c)) for reason, c in drawn.items()}


@pytest.fixture
def workbench(orders_dir):
    root, policy = orders_dir
    wb = Workbench(root, policy, now=NOW)
    wb.tabs.selected_index = 2  # the Figures tab shown, as the page does: drawn on every edit
    return wb


def test_removing_adding_and_undoing_rules_never_shifts_a_colour(workbench):
    wb = workbench
    rules = [r.id for r in wb.policy.rules]
    first = _one_each(_drawn(wb))
    shown_rules = [r for r in rules if r in first]
    assert len(shown_rules) >= 4, first      # several rules drawn, each in its policy colour
    for rule in shown_rules:
        assert first[rule] == RULE_PALETTE[rules.index(rule)]

    # the first rule's trash button: every other rule keeps its colour (a map built from the
    # new verdicts would have moved each one up the palette)
    wb.editor.rows[rules[0]]["remove"].click()
    assert rules[0] not in [r.id for r in wb.policy.rules]
    after = _one_each(_drawn(wb))
    kept = [r for r in shown_rules[1:] if r in after]
    assert len(kept) >= 3, after
    assert {r: after[r] for r in kept} == {r: first[r] for r in kept}
    fresh = RuleColors().follow(wb.verdicts)   # what the widgets did before
    assert any(fresh[r] != first[r] for r in kept)

    # a new rule through the form: the next free colour, none that a rule ever had
    wb.editor.new_rule("cel")
    wb.editor.form.rule_id.value = "big-order"
    wb.editor.form.fields["expr"].value = "value.amount <= 500.0"
    wb.editor.form.apply.click()
    assert "big-order" in [r.id for r in wb.policy.rules]
    added = _one_each(_drawn(wb))
    assert "big-order" in added, added
    assert added["big-order"] == RULE_PALETTE[len(rules)]
    assert added["big-order"] not in {first[r] for r in shown_rules}
    assert {r: added[r] for r in kept if r in added} == {r: first[r] for r in kept if r in added}

    # Undo twice: the removed rule comes back in its own colour, the others still unchanged
    wb.editor.undo_button.click()
    wb.editor.undo_button.click()
    assert [r.id for r in wb.policy.rules] == rules
    back = _one_each(_drawn(wb))
    assert {r: back[r] for r in shown_rules} == {r: first[r] for r in shown_rules}

    # a replay (the panel's Replay) keeps the session's map too
    wb.editor.rows[rules[0]]["remove"].click()
    wb.panel.run_button.click()
    wb.panel.wait(120)
    replayed = _one_each(_drawn(wb))
    assert {r: replayed[r] for r in kept if r in replayed} == {r: first[r] for r in kept
                                                               if r in replayed}


def test_the_session_hands_out_free_colours_and_keeps_them(orders_dir):
    root, policy = orders_dir
    session = AuthoringSession(policy, root, now=NOW)
    ids = [r.id for r in policy.rules]
    assert session.colors.as_dict() == dict(zip(ids, RULE_PALETTE, strict=False))
    assert session.figure_context()["colors"] is session.colors
    session.remove_rule(ids[1])
    session.add_rule("cel", id="new-one", expr="value.amount > 0.0")
    colours = session.colors.as_dict()
    assert colours[ids[1]] == RULE_PALETTE[1]            # remembered, not reused
    assert colours["new-one"] == RULE_PALETTE[len(ids)]  # the first one nobody had
    # once the palette is handed out, a new rule takes a colour no current rule shows
    many = [f"extra-{i}" for i in range(len(RULE_PALETTE))]
    for rid in many:
        session.add_rule("cel", id=rid, expr="value.amount > 0.0")
    current = [r.id for r in session.policy.rules]
    assert len(current) > len(RULE_PALETTE)               # more rules than colours: repeats
    assert {session.colors[r] for r in current} == set(RULE_PALETTE)
    now = session.colors.as_dict()
    assert {r: now[r] for r in colours} == colours        # nobody's colour moved


def test_keep_prefers_colours_not_on_screen():
    colors = RuleColors().keep([f"r{i}" for i in range(len(RULE_PALETTE))])
    # r3 left the policy; a new rule takes its colour, the only one free on screen
    current = [f"r{i}" for i in range(len(RULE_PALETTE)) if i != 3]
    colors.keep([*current, "late"])
    assert colors["late"] == RULE_PALETTE[3]
    assert colors["r0"] == RULE_PALETTE[0]
    assert colors["broker:R4"] == RuleColors()["broker:R4"]  # broker checks: fixed
