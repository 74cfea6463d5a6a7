"""RejectionExplorer, ReplayPanel and Workbench driven through their controls: filters agree
with the verdict table, a row's button opens that record's detail, sensitive data stays
masked, and the workbench follows every edit."""

from __future__ import annotations

import time

import pyarrow.compute as pc
import pytest

from kqlab.validate import Replayer, replay
from kqlab.widgets import RejectionExplorer, ReplayPanel, Workbench
from tests.viz.conftest import NOW
from tests.widgets.conftest import SECRETS


def test_filters_and_pages_agree_with_the_verdicts(orders_dir):
    root, policy = orders_dir
    r = Replayer(root, now=NOW)
    v = r.run(policy)
    ex = RejectionExplorer(v, r, policy, page_size=7)
    rec = v.records
    refused = pc.sum(pc.not_equal(rec.column("outcome"), "accepted")).as_py()
    assert ex.matches == refused and len(ex.rows) == 7
    ex.reason.value = "traceparent"  # the dropdown filters at once
    want = {(x["partition"], x["offset"]) for x in rec.to_pylist()
            if any(f["rule"] == "traceparent" for f in x["failures"])}
    got = set()
    page = ex.rows
    while True:
        got |= {(x["partition"], x["offset"]) for x in page}
        nxt = ex.next_page()
        if nxt is page or not nxt or (nxt[0]["partition"], nxt[0]["offset"]) in got:
            break
        page = nxt
    assert got == want and all("traceparent" in x["reasons"] for x in ex.rows)
    lo, hi = sorted(o for _, o in want)[0], sorted(o for _, o in want)[-1]
    rows = ex.set_filter(reason="traceparent", partition=0, offsets=(lo, hi))
    assert all(x["partition"] == 0 and lo <= x["offset"] <= hi for x in rows)
    ex.set_filter(reason="(collateral)")
    assert ex.rows and {x["outcome"] for x in ex.rows} == {"collateral"}
    t = ex.rows[0]["timestamp"]
    ex.set_filter(time=(t, t))
    assert ex.matches >= 1 and all(x["timestamp"] == t for x in ex.rows)
    ex.time_min.value = "yesterday"
    ex.apply_button.click()
    assert "not a time" in ex.error.value


def test_row_click_opens_the_record_detail(orders_dir):
    root, policy = orders_dir
    r = Replayer(root, now=NOW)
    v = r.run(policy)
    ex = RejectionExplorer(v, r, policy)
    ex.set_filter(reason="amount-range")
    first = ex.rows[0]
    button = ex.table.children[0].children[0]
    assert f"kqlab-record-{first['partition']}-{first['offset']}" in button._dom_classes
    button.click()
    d = ex.detail
    assert (d.partition, d.offset) == (first["partition"], first["offset"])
    assert any(f["rule"] == "amount-range" for f in d.failures)
    assert len(ex.detail_out.outputs) == 1
    assert "amount-range" in ex.detail_out.outputs[0]["data"]["text/html"]


def test_sensitive_data_stays_masked_in_the_table_and_the_detail(secrets_sample):
    table, policy = secrets_sample
    r = Replayer(table, framing="single", now=NOW)
    ex = RejectionExplorer(r.run(policy), r, policy, page_size=500)
    assert ex.matches > 0
    shown = repr(ex.rows) + "".join(c.children[1].value for c in ex.table.children)
    assert "•••" in shown
    for secret in SECRETS:
        assert secret not in shown
    secret_row = next(x for x in ex.rows if x["offset"] % 7 == 0 and x["reasons"])
    ex.show_record(secret_row["partition"], secret_row["offset"], topic="customers")
    page = ex.detail_out.outputs[0]["data"]["text/html"] + repr(ex.detail.to_dict())
    for secret in SECRETS:
        assert secret not in page


def test_replay_panel_runs_cancels_and_reports_errors(orders_dir):
    root, policy = orders_dir
    panel = ReplayPanel(policy, {"orders": root}, now=NOW)
    v = panel.run()
    assert panel.state == "done" and panel.progress.value == panel.progress.max == 3
    assert v.by_outcome() == replay(root, policy, now=NOW).by_outcome()
    assert "records in" in panel.status.value
    # the button runs in the background; Cancel stops it between phases
    panel.run_button.click()
    panel.cancel_button.click()
    panel.wait(60)
    assert panel.state in ("cancelled", "done")  # a fast run may finish before the click
    panel.cancel()
    with pytest.raises(Exception, match="cancelled"):
        panel._step(1, "x")
    panel.source.value = "(path below)"
    panel.path.value = str(root / "no-such-partition")
    panel.run_button.click()
    panel.wait(60)
    assert panel.state == "failed" and panel.error.value


def test_workbench_follows_edits_and_writes_a_report(orders_dir, tmp_path):
    root, policy = orders_dir
    wb = Workbench(root, policy, now=NOW)
    assert set(wb.figures) == {"reasons", "offsets", "timeline"}
    before = wb.explorer.matches
    wb.editor.update_rule("amount-range", min=50)
    fresh = replay(root, wb.policy, now=NOW)
    refused = fresh.by_outcome()["rejected"] + fresh.by_outcome()["collateral"]
    assert wb.explorer.matches == refused > before
    assert wb.verdicts.by_outcome() == fresh.by_outcome()
    assert "amount-range" in wb.explorer.reason.options
    wb.explorer.set_filter(reason="amount-range")
    assert wb.explorer.rows
    path = wb.report(tmp_path / "report.html")
    assert path.exists() and "amount-range" in path.read_text()
    t0 = time.perf_counter()
    wb.replay()  # replaying again keeps the edited policy
    assert wb.editor.policy.rule("amount-range").params["min"] == 50
    assert time.perf_counter() - t0 < 30
