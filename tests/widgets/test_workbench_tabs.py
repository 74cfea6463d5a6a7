"""The Workbench draws its Figures tab when it is shown (issue 16, browser edit latency): an
edit made in the Policy tab redraws what that tab shows, and the Figures tab — or
``Workbench.figures`` read from Python — is rebuilt from the current verdicts when it is
looked at, never stale."""

from __future__ import annotations

import json

from kqlab.viz import rejections_by_reason
from kqlab.widgets import Workbench
from tests.viz.conftest import NOW


def _shown(wb: Workbench) -> dict[str, dict]:
    """What the Figures tab's views hold (the figure models the page draws)."""
    return {name: view.to_dict() for name, view in wb._figure_view.widgets.items()}


def _plain(fig) -> dict:
    return json.loads(fig.to_json())


def test_figures_are_drawn_when_their_tab_is_shown_and_never_stale(orders_dir):
    root, policy = orders_dir
    wb = Workbench(root, policy, now=NOW)
    assert wb.tabs.selected_index != 2           # the Policy tab first: nothing drawn yet
    assert wb._figure_view.widgets == {}
    wb.tabs.selected_index = 2                   # the page selects the Figures tab
    first = _shown(wb)
    assert set(first) == {"reasons", "offsets", "timeline"}
    assert first["reasons"] == _plain(rejections_by_reason(wb.verdicts, colors=wb.session.colors))

    # edits in the Policy tab: the editor follows, the hidden figures wait
    wb.tabs.selected_index = 0
    models = dict(wb._figure_view.widgets)
    wb.editor.update_rule("amount-range", min=50)
    assert _shown(wb) == first
    # shown again: the figures of the edited verdicts, in the same views (updated in place)
    wb.tabs.selected_index = 2
    edited = _shown(wb)
    assert edited["reasons"] == _plain(rejections_by_reason(wb.verdicts,
                                                            colors=wb.session.colors))
    assert edited["reasons"] != first["reasons"]
    assert wb._figure_view.widgets == models

    # while the tab is shown, every edit redraws it at once
    wb.editor.undo()
    assert _shown(wb)["reasons"] == first["reasons"]

    # Python reads the figures of the current verdicts whatever the page shows
    wb.tabs.selected_index = 1
    wb.editor.update_rule("amount-range", min=60)
    assert _plain(wb.figures["reasons"]) == _plain(
        rejections_by_reason(wb.verdicts, colors=wb.session.colors))
    assert _shown(wb)["reasons"] == _plain(wb.figures["reasons"])  # and the views show them


def test_a_mode_switch_and_its_undo_keep_the_rows_and_edit_once(orders_dir):
    """The rule rows follow a mode or severity change in place (the page re-drew every row
    after the changed one); a control set from the session is no new edit."""
    from kqlab.authoring import AuthoringSession
    from kqlab.widgets import PolicyEditor

    root, policy = orders_dir
    editor = PolicyEditor(AuthoringSession(policy, root, now=NOW))
    rows = editor.rules_box.children
    editor.rows["traceparent"]["mode"].value = "observe"          # the page's click
    assert editor.policy.rule("traceparent").mode == "observe"
    assert len(editor.history) == 1
    assert editor.rules_box.children == rows                      # no row re-rendered
    editor.undo_button.click()
    assert editor.rows["traceparent"]["mode"].value == "reject"   # the toggle follows...
    assert editor.policy.rule("traceparent").mode == "reject"
    assert (len(editor.history), len(editor.session.future)) == (0, 1)   # ...and edits nothing
    editor.redo_button.click()
    assert editor.rows["traceparent"]["mode"].value == "observe"
    editor.rows["avro"]["severity"].value = "warning"
    editor.undo_button.click()
    assert editor.rows["avro"]["severity"].value == "error"
    assert editor.policy.rule("avro").severity == "error"
    assert editor.rules_box.children == rows
    assert len(editor.history) == 1


def test_the_explorer_follows_when_shown_or_read(orders_dir):
    root, policy = orders_dir
    wb = Workbench(root, policy, now=NOW)
    ex = wb._explorer
    assert ex.verdicts is None                  # not shown yet: nothing browsed
    shown = wb.explorer.matches                 # read from Python: brought up to date
    assert shown > 0 and ex.verdicts is wb.verdicts
    wb.editor.update_rule("amount-range", min=50)
    assert ex.matches == shown                  # the hidden Rejections tab waits...
    wb.tabs.selected_index = 1                  # ...until the page shows it
    refused = wb.verdicts.by_outcome()["rejected"] + wb.verdicts.by_outcome()["collateral"]
    assert ex.matches == refused > shown
    assert "amount-range" in ex.reason.options
    wb.editor.undo()                             # shown: every edit updates it at once
    assert ex.matches == shown
    wb.tabs.selected_index = 0
    wb.editor.update_rule("amount-range", min=60)
    assert wb.explorer.matches > shown           # read from Python: the current verdicts
    assert wb.explorer is ex
