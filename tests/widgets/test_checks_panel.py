"""The sample checks in the workbench (issue 21): the Checks tab shows each check's observed
value against its threshold and status from the session's current verdicts, a typed
threshold is an undoable session edit re-judged from the cached partials (nothing
recomputed), and a failing window drills down to exactly the records it counted, and filters
the rejection explorer to the same partition and time range."""

from __future__ import annotations

import re

import pyarrow.compute as pc
import pytest

from kqlab.authoring import AuthoringSession
from kqlab.policy import loads_policy
from kqlab.validate import replay
from kqlab.widgets import Workbench
from kqlab.widgets._checks import ChecksPanel
from tests.validate.test_sample_checks import HEAD, MINUTE, T0, hour, write_log

POLICY = HEAD + """rules:
  - {id: customer-set, kind: field_not_null, field: customer, mode: reject}
checks:
  - {id: nulls, kind: null_rate, field: customer, window: 10m, by: partition, max: 0.01}
  - {id: vol, kind: volume, window: 1m, by: partition, min: 1}
  - {id: gate, kind: reject_rate, rule: customer-set, max: 0.05}
  - {id: refused, kind: reject_rate, max: 0.5}
"""


@pytest.fixture(scope="module")
def jump(tmp_path_factory):
    """Two partitions over an hour: orders-0's customer null in every 12th record of the
    last ten minutes (0 % before); orders-1 quiet from minute 20 to 30."""
    def value(p: int, i: int) -> dict:
        return {"amount": float(i),
                "customer": None if (p == 0 and i >= 500 and i % 12 == 0) else f"c{i % 9}"}

    root = tmp_path_factory.mktemp("jump")
    return write_log(root / "log", {0: hour(0, value=value),
                                    1: hour(1, skip=lambda i: 200 <= i < 300, value=value)})


def _row(rows, check_id):
    return next(r for r in rows if r["check"] == check_id)


def test_panel_shows_every_check_from_the_current_verdicts(jump):
    session = AuthoringSession(loads_policy(POLICY), jump)
    panel = ChecksPanel(session)
    truth = session.verdicts.checks().to_pylist()
    assert [(r["check"], r["status"], r["observed"], r["min"], r["max"]) for r in panel.rows] \
        == [(r["check"], r["status"], r["observed"], r["min"], r["max"]) for r in truth]
    nulls = _row(panel.rows, "nulls")
    assert nulls["status"] == "fail" and nulls["failing_windows"] == 1
    assert nulls["failing"][0]["group"] == "orders-0"
    assert nulls["failing"][0]["start"] == T0 + 50 * MINUTE
    assert nulls["observed"] == pytest.approx(8 / 100)      # 504, 516 ... 588 of 500..599
    table = panel.table.value
    assert "kqlab-check-status-nulls" in table and "null_rate 8.00%" in table
    assert "max 1.00%" in table and "1 of 11" in table      # 6 x 2, less orders-1 quiet one
    # the sparklines: one panel per check, the failing windows marked where they fail
    fig = panel.figure
    marked = [t for t in fig["data"] if t.get("mode") == "markers"]
    assert sum(len(t["y"]) for t in marked) == sum(r["failing_windows"] for r in panel.rows)
    assert panel.sparklines.to_dict()["data"] == panel.figure["data"]
    # plotly reads it as a figure: one x axis per check, a dashed line per threshold
    from kqlab.viz._checks import check_sparklines

    drawn = check_sparklines(panel.rows, {r["check"]: session.check_windows(r["check"])
                                          for r in panel.rows})
    assert len(drawn.layout.shapes) == sum((r["min"] is not None) + (r["max"] is not None)
                                           for r in panel.rows)
    assert drawn.layout.xaxis4.anchor == "y4"


def test_typed_threshold_is_an_undoable_edit_judged_from_the_cache(jump):
    session = AuthoringSession(loads_policy(POLICY), jump)
    panel = ChecksPanel(session)
    computed = session.replayer.check_evaluations
    panel.select("nulls")
    box = {b.description: b for b in panel.thresholds.children}["max"]
    box.value = "0.1"                                        # typed, then Enter / blur
    assert session.policy.check("nulls").params["max"] == 0.1
    # re-judged, not recomputed (the policy-wide reject rate too: a threshold rejects nothing)
    assert session.replayer.check_evaluations == computed
    fresh_verdicts = replay(jump, session.policy)
    fresh = fresh_verdicts.checks().to_pylist()
    assert _row(panel.rows, "nulls")["status"] == _row(fresh, "nulls")["status"] == "pass"
    # only the checks were judged again (the record verdicts kept): equal to a fresh replay,
    # its summary naming the edited policy
    assert session.verdicts.checks() == fresh_verdicts.checks()
    for check in session.policy.checks:
        assert session.verdicts.check_windows(check.id) == fresh_verdicts.check_windows(check.id)
    assert session.verdicts.summary() == fresh_verdicts.summary()
    assert session.verdicts.policy_hash != replay(jump, loads_policy(POLICY)).policy_hash
    assert panel.windows.options == ()                       # nothing fails any more
    # an empty box opens that side: volume's max stays open, min removed is refused
    # (a check needs a threshold) and the policy is kept
    panel.select("vol")
    box = {b.description: b for b in panel.thresholds.children}["min"]
    box.value = ""
    assert "vol" in panel.error.value and session.policy.check("vol").params["min"] == 1
    panel.select("nulls")
    {b.description: b for b in panel.thresholds.children}["max"].value = "ten"
    assert "must be a number" in panel.error.value
    session.undo()
    assert session.policy.check("nulls").params["max"] == 0.01
    assert _row(panel.rows, "nulls")["status"] == "fail"
    session.redo()
    assert _row(panel.rows, "nulls")["status"] == "pass"


def test_drill_down_lists_the_records_the_window_counted(jump):
    session = AuthoringSession(loads_policy(POLICY), jump)
    panel = ChecksPanel(session)
    panel.select("nulls")
    (_label, (group, start)), = panel.windows.options
    panel.windows.value = (group, start)
    panel.drill_button.click()
    records = panel.last_drill.records
    window = _row(panel.rows, "nulls")["failing"][0]
    assert records.num_rows == window["records"] == 100
    assert set(records.column("partition").to_pylist()) == {0}
    ts = records.column("timestamp")
    assert pc.min(ts).as_py() >= start and pc.max(ts).as_py() < start + 10 * MINUTE
    assert "100 records of orders-0" in panel.records_out.value
    # a quiet window: no record, the drill-down says so
    drill = panel.drill("vol", "orders-1", T0 + 20 * MINUTE)
    assert drill.records.num_rows == 0 and drill.end == T0 + 21 * MINUTE


def test_workbench_checks_tab_and_drill_down_into_the_explorer(jump):
    wb = Workbench(jump, loads_policy(POLICY))
    assert [wb.tabs.get_title(i) for i in range(4)] == ["Policy", "Rejections", "Figures",
                                                         "Checks"]
    wb.tabs.selected_index = 3
    panel = wb.checks
    assert _row(panel.rows, "nulls")["status"] == "fail"
    wb.editor.update_rule("customer-set", mode="observe")   # an edit elsewhere: redrawn
    assert panel.rows is wb.session.checks                  # the current verdicts' rows
    wb.editor.undo()
    panel.select("nulls")
    group, start = panel.windows.options[0][1]
    panel.drill("nulls", group, start)
    assert wb.tabs.selected_index == 1
    ex = wb.explorer
    assert ex.partition.value == "orders-0"
    assert (ex.time_min.value, ex.time_max.value) == (str(start), str(start + 10 * MINUTE - 1))
    # the 8 null customers' batches (10 records each) refused whole: 8 culprits, 72 collateral
    assert ex.matches == 80
    assert {r["partition"] for r in ex.rows} == {0}


def test_drill_down_masks_what_the_policy_calls_sensitive(jump):
    policy = loads_policy(POLICY.replace("rules:", "sensitive: {fields: [customer], key: true}"
                                         "\nrules:"))
    panel = ChecksPanel(AuthoringSession(policy, jump))
    panel.select("nulls")
    panel.drill("nulls", *panel.windows.options[0][1])
    shown = panel.records_out.value
    assert "•••" in shown and "&quot;amount&quot;:500.0" in shown   # the decoded values
    assert "c5" not in shown and "k0-50" not in shown                 # no customer, no key
    # the records themselves are the data (for code), the page shows them masked
    assert panel.last_drill.records.column("key")[0].as_py() == b"k0-500"


GROUPED = HEAD + """rules:
  - {id: customer-set, kind: field_not_null, field: customer, mode: reject}
checks:
  - {id: per-customer, kind: volume, window: 10m, by: customer, min: 20}
  - {id: per-partition, kind: volume, window: 10m, by: partition, min: 200}
"""


def test_group_labels_of_a_sensitive_field_are_pseudonyms_in_every_part_of_the_panel(jump):
    """A check grouped by a sensitive field labels its windows with the field's values: the
    table's line, the failing windows offered, the sparklines and the drill-down's head show
    pseudonyms (distinct per group, the same everywhere); the drill-down still reads the real
    group's records, and a partition label stays as it is."""
    import json

    from kqlab.viz._masking import MASK, Masker

    policy = loads_policy(GROUPED.replace("rules:", "sensitive: {fields: [customer]}\nrules:"))
    session = AuthoringSession(policy, jump)
    panel = ChecksPanel(session)
    real = {f["group"] for f in _row(panel.rows, "per-customer")["failing"]} - {None}
    assert real and all(g.startswith("c") for g in real)           # the data: c0 ... c8
    shown = {f["group"] for f in _row(panel.shown_rows, "per-customer")["failing"]} - {None}
    assert len(shown) == len(real) and all(g.startswith(MASK) for g in shown)
    assert not shown & real
    page = json.dumps([panel.table.value, panel.figure], ensure_ascii=False) + panel.table.value
    words = set(re.findall(r"[\w-]+", page.replace(MASK, " ")))
    assert not words & real, words & real                         # no label anywhere
    drawn = json.dumps(panel.figure["data"], ensure_ascii=False)
    assert any(g in drawn for g in shown)                         # the groups drawn, masked
    panel.select("per-customer")
    labels = {g: label for label, (g, _s) in panel.windows.options}
    assert real <= set(labels) and None in labels          # the null customers' group too
    assert all(labels[g].startswith(MASK) for g in real)
    assert labels[None].startswith("(no value) ·")
    group, start = next(v for _label, v in panel.windows.options if v[0] is not None)
    assert group in real                                          # the value is the real one
    drill = panel.drill("per-customer", group, start)
    window = next(f for f in _row(panel.rows, "per-customer")["failing"]
                  if (f["group"], f["start"]) == (group, start))
    assert drill.records.num_rows == window["records"] > 0
    head = panel.records_out.value.split("<table>")[0]
    assert group not in re.findall(r"[\w-]+", head.replace(MASK, " "))
    assert str(Masker.group_label(group)) in head
    # partitions are no data: shown as they are
    panel.select("per-partition")
    assert any("orders-" in label for label, _ in panel.windows.options)
    # unmasked, the labels are the real ones
    from kqlab.viz import unmasked

    with unmasked():
        plain = ChecksPanel(AuthoringSession(policy, jump))
    assert {f["group"] for f in _row(plain.shown_rows, "per-customer")["failing"]} == real | {None}
