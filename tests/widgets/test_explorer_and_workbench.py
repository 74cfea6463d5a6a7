"""RejectionExplorer, ReplayPanel and Workbench driven through their controls: filters and
sorted pages agree with the verdict table, a row's click opens that record's detail and the
pane always matches the selection, values and errors read for people, sensitive data stays
masked, and the workbench follows every edit."""

from __future__ import annotations

import json
import re
import time

import pyarrow.compute as pc
import pytest

from kqlab.validate import Replayer, replay
from kqlab.validate.view import RECORD_ORDERS, RecordQuery, ViewError
from kqlab.widgets import RejectionExplorer, ReplayPanel, Workbench
from tests.viz import conftest as shared
from tests.viz.conftest import NOW
from tests.widgets.conftest import SECRETS

# the view tests' full demo sample (fixtures are looked up by module attribute)
demo, policies, orders = shared.demo, shared.policies, shared.orders


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


def _row_id(row: dict) -> str:
    return f"{row['topic']}|{row['partition']}|{row['offset']}"


def test_row_click_opens_the_record_detail(orders_dir):
    root, policy = orders_dir
    r = Replayer(root, now=NOW)
    v = r.run(policy)
    ex = RejectionExplorer(v, r, policy)
    ex.set_filter(reason="amount-range")
    first = ex.rows[0]
    shown = ex.table.rows[0]  # what the page draws: one <tr> per row, with its CSS class
    assert f"kqlab-record-{first['partition']}-{first['offset']}" in shown["cls"].split()
    assert "kqlab-rejected-table" in ex.table._dom_classes
    ex.table.selected = shown["id"]  # the page's click sets the selection
    d = ex.detail
    assert (d.partition, d.offset) == (first["partition"], first["offset"])
    assert ex.selected == (first["topic"], first["partition"], first["offset"])
    assert any(f["rule"] == "amount-range" for f in d.failures)
    assert len(ex.detail_out.outputs) == 1
    assert "amount-range" in ex.detail_out.outputs[0]["data"]["text/html"]


def test_headers_sort_every_page_through_the_verdicts(orders_dir):
    root, policy = orders_dir
    r = Replayer(root, now=NOW)
    v = r.run(policy)
    ex = RejectionExplorer(v, r, policy, page_size=9)
    sortable = {c["sort"] for c in ex.table.columns if c["sort"]}
    assert sortable == set(RECORD_ORDERS)
    ex.table.sort = {"key": "timestamp", "descending": True}  # the page's header click
    assert ex.page == 0 and len(ex.rows) == 9
    want = v.find(RecordQuery(order="timestamp", descending=True), 0, 10**6).rows.to_pylist()
    got = list(ex.rows)
    while ex.page + 1 < ex.table.pages:
        got += ex.next_page()
    assert [(x["partition"], x["offset"]) for x in got] == [
        (x["partition"], x["offset"]) for x in want]
    assert got[0]["timestamp"] == max(x["timestamp"] for x in want)
    # sorting keeps the filter; the Python twin sorts the same way
    ex.set_filter(reason="traceparent")
    rows = ex.sort_by("offset", descending=True)
    assert [x["offset"] for x in rows] == sorted((x["offset"] for x in rows), reverse=True)
    assert all("traceparent" in x["reasons"] for x in rows)
    assert ex.table.sort == {"key": "offset", "descending": True}
    with pytest.raises(ValueError, match="unknown order"):
        ex.sort_by("key")


def test_the_detail_pane_always_matches_the_selection(orders_dir):
    root, policy = orders_dir
    r = Replayer(root, now=NOW)
    v = r.run(policy)
    ex = RejectionExplorer(v, r, policy, page_size=5)
    assert "Select a record" in ex.detail_out.outputs[0]["data"]["text/html"]
    ex.set_filter(reason="amount-range")
    pick = ex.rows[1]
    ex.show_record(pick["partition"], pick["offset"], topic=pick["topic"])
    assert ex.table.selected == _row_id(pick)
    # a filter that still lists the record keeps it selected, detail included
    ex.set_filter(reason="amount-range", partition=pick["partition"])
    assert ex.selected == (pick["topic"], pick["partition"], pick["offset"])
    assert ex.detail.offset == pick["offset"] and ex.table.selected == _row_id(pick)
    # paging away keeps the selection (it still matches), the table marks no row of the page
    ex.set_filter(partition=pick["partition"])
    while any(_row_id(x) == _row_id(pick) for x in ex.rows) and ex.page + 1 < ex.table.pages:
        ex.next_page()
    assert ex.detail is not None and ex.detail.offset == pick["offset"]
    # a filter that leaves it out clears selection and pane (was: a stale detail)
    other = next(x for x in ex.set_filter(reason="traceparent")
                 if "amount-range" not in x["reasons"]) if ex.matches else None
    assert other is not None
    assert ex.selected is None and ex.detail is None and ex.table.selected == ""
    assert "Select a record" in ex.detail_out.outputs[0]["data"]["text/html"]
    # the page's row click, then a selection cleared from the page
    ex.table.selected = _row_id(other)
    assert ex.detail.offset == other["offset"]
    ex.table.selected = ""
    assert ex.detail is None and ex.selected is None
    # new verdicts redraw the selected record's detail from them
    ex.show_record(other["partition"], other["offset"], topic=other["topic"])
    relaxed = r.run(policy.with_rules([x for x in policy.rules if x.id != "traceparent"]))
    ex.set_verdicts(relaxed, r, policy)
    still = relaxed.lookup(other["partition"], other["offset"], other["topic"])
    if still.record["outcome"] == "accepted":
        assert ex.detail is None and ex.selected is None
    else:
        assert ex.detail.outcome == still.record["outcome"]


def test_values_are_shown_for_people(orders):
    r, v, policy = orders  # the full demo sample: amounts with float noise in their messages
    ex = RejectionExplorer(v, r, policy, page_size=500)
    ex.set_filter(reason="amount-range")
    cells = [x["cells"]["message"] for x in ex.table.rows]
    raw = [m for x in ex.rows for m in x["messages"] if "amount" in m]
    assert any(re.search(r"\d\.\d{15,}", m) for m in raw)  # the verdicts' exact texts...
    assert not any(re.search(r"\d\.\d{15,}", c) for c in cells)  # ...shown without noise
    assert all("\ufffd" not in x["cells"]["key"] for x in ex.table.rows)
    # time as ISO, offsets grouped, the full message as the cell's tooltip
    row = ex.table.rows[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", row["cells"]["time"])
    assert row["titles"]["message"].startswith(row["cells"]["message"].rstrip("…"))


def test_a_detail_that_cannot_be_shown_says_why_in_one_line(orders_dir):
    root, policy = orders_dir
    v = Replayer(root, now=NOW).run(policy)
    ex = RejectionExplorer(v, None, policy)  # no sample (as for a Spark replay)
    row = ex.table.rows[0]
    ex.table.selected = row["id"]  # the page's click: no exception escapes to the page
    assert ex.detail is None and "pass sample=" in ex.detail_error
    assert "\n" not in ex.detail_error and "Traceback" not in ex.detail_error
    pane = ex.detail_out.outputs[0]["data"]["text/plain"] + repr(ex.detail_out.outputs)
    assert "pass sample=" in pane and "Traceback" not in pane
    with pytest.raises(ViewError, match="pass sample="):  # the Python twin raises
        ex.show_record(row["partition"], row["offset"], topic=row["topic"])
    ex.time_min.value = "yesterday"
    assert ex.error.value.count("⚠") == 1 and "not a time" in ex.error.value


def test_sensitive_data_stays_masked_in_the_table_and_the_detail(secrets_sample):
    table, policy = secrets_sample
    r = Replayer(table, framing="single", now=NOW)
    ex = RejectionExplorer(r.run(policy), r, policy, page_size=500)
    assert ex.matches > 0
    # everything the page receives, and the Python rows
    shown = repr(ex.rows) + json.dumps(ex.table.get_state(), default=str)
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
