"""The workbench's ReplayPanel and Workbench on the Spark engine (a real local SparkSession):
the Spark verdicts equal the local engine's, the panel's bar follows the Spark tasks, the
workbench shows the Spark result in its explorer and figures (through the verdicts
interface, nothing collected), and *Cancel* stops a running Spark job through its job
group."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from kqlab.policy import Rule
from kqlab.sources import demo_topics
from kqlab.validate import replay
from kqlab.widgets import ReplayPanel, Workbench

NOW = 1_763_700_000_000


def _data(fig):
    return json.loads(fig.to_json())["data"]


@pytest.fixture(scope="module")
def clicks(tmp_path_factory):
    root = tmp_path_factory.mktemp("panel")
    demo = demo_topics.generate(root / "all", NOW, scale=0.5)
    folder = root / "clicks"
    folder.mkdir()
    for name, src in demo.folders.items():
        if name.startswith("clicks-"):
            (folder / name).symlink_to(src)
    return folder, demo_topics.load_policies()["clicks"]


def test_panel_spark_run_equals_local(spark, clicks):
    folder, policy = clicks
    panel = ReplayPanel(policy, {"clicks": str(folder)}, now=NOW, master=spark.sparkContext.master)
    seen = []
    panel.on_result(lambda p: seen.append(p.engine.value))
    panel.engine.value = "spark"
    panel.run_button.click()  # the button runs on a thread; wait like the notebook would
    verdicts = panel.wait(timeout=300)
    assert panel.state == "done", panel.error.value
    assert seen == ["spark"] and panel.replayer is None  # no local sample on the Spark path
    assert type(verdicts).__name__ == "SparkVerdicts"
    units = len(list(folder.iterdir()))
    assert panel.progress.max == units and panel.progress.value == units
    local = replay(str(folder), policy, now=NOW)
    assert verdicts.by_outcome() == local.by_outcome()
    assert verdicts.summary()["by_rule"] == local.summary()["by_rule"]
    assert panel.status.value.startswith("spark: ") and f"{local.records.num_rows:,}" in \
        panel.status.value
    assert not panel.run_button.disabled and panel.cancel_button.disabled


def test_workbench_shows_a_spark_replay(spark, clicks, tmp_path):
    folder, policy = clicks
    wb = Workbench(str(folder), policy, now=NOW)
    local = wb.verdicts.by_outcome()
    local_figures = {k: _data(f) for k, f in wb.figures.items()}
    assert wb.editor is not None and wb.panel.engine.value == "local"
    wb.panel.master = spark.sparkContext.master
    result = wb.replay(engine="spark")
    assert type(result).__name__ == "SparkVerdicts" and wb.verdicts is result
    assert result.by_outcome() == local
    # the explorer browses the collected record verdicts
    wb.explorer.set_filter()
    assert wb.explorer.matches == local["rejected"] + local["collateral"]
    assert wb.explorer.rows[0]["outcome"] in ("rejected", "collateral")
    # every figure: reasons and timeline from Spark aggregations, offsets from the collected
    # verdicts; each equal to the local replay's
    assert set(wb.figures) == set(local_figures) == {"reasons", "offsets", "timeline"}
    for name, data in local_figures.items():
        assert _data(wb.figures[name]) == data, name
    assert sum(sum(t["x"]) for t in local_figures["reasons"]) > 0
    assert wb.report(tmp_path / "spark.html").stat().st_size > 10_000
    # an edit supersedes the Spark result: the editor's local verdicts again
    wb.editor.set_mode(policy.rules[0].id, "observe")
    assert wb.verdicts is wb.editor.verdicts


def test_workbench_browses_a_spark_replay_without_collecting_it(spark, clicks, monkeypatch):
    """The explorer pages a Spark replay with Spark filters and every figure is a Spark
    aggregation, whatever the sample size: no record verdict reaches the driver (an explore
    limit used to cut the workbench down to two aggregated figures above it)."""
    from kqlab.spark.verdicts import SparkVerdicts
    from kqlab.validate.view import RecordQuery
    from kqlab.viz import ViewError

    folder, policy = clicks
    wb = Workbench(str(folder), policy, now=NOW)
    local = wb.verdicts
    wb.panel.master = spark.sparkContext.master

    def refuse(*_args, **_kwargs):
        raise AssertionError("the workbench collected record verdicts")

    monkeypatch.setattr(SparkVerdicts, "to_local", refuse)
    monkeypatch.setattr(SparkVerdicts, "record_reasons", refuse)
    result = wb.replay(engine="spark")
    assert wb.verdicts is result and set(wb.figures) == {"reasons", "offsets", "timeline"}
    rule = local.by_reason().column("reason")[0].as_py()  # the reason refusing the most
    size = wb.explorer.page_size
    pages = [wb.explorer.set_filter(reason=rule), wb.explorer.next_page()]
    want = [local.find(RecordQuery(reason=rule), start, size) for start in (0, size)]
    assert wb.explorer.matches == want[0].matches > size
    for got, page in zip(pages, want, strict=True):
        assert [(r["partition"], r["offset"]) for r in got] == [
            (r["partition"], r["offset"]) for r in page.rows.to_pylist()]
    first = pages[0][0]
    with pytest.raises(ViewError, match="pass sample="):  # a detail reads the record's bytes
        wb.explorer.show_record(first["partition"], first["offset"], topic=first["topic"])


def test_cancel_stops_a_running_spark_job(spark, clicks):
    folder, policy = clicks
    slow = dataclasses.replace(policy, rules=(
        Rule(id="slow", kind="plugin", params={"callable": "tests.spark.slow_plugin:slow_accept"},
             mode="observe"), *policy.rules))
    assert any(r.id == "slow" for r in slow.rules)
    panel = ReplayPanel(slow, {"clicks": str(folder)}, now=NOW, master=spark.sparkContext.master)
    panel.engine.value = "spark"
    t0 = time.monotonic()
    panel.run(wait=False)
    while panel.progress.max <= 1 and time.monotonic() - t0 < 120:  # the job's tasks are known
        time.sleep(0.05)
    assert panel.state == "running"
    panel.cancel_button.click()
    assert panel.wait(timeout=120) is None
    assert panel.state == "cancelled" and panel.verdicts is None
    assert panel.error.value == ""
    assert not spark.sparkContext.statusTracker().getActiveJobsIds()
    # the session is still usable and the same panel replays again
    again = panel.run(engine="local", policy=policy)
    assert panel.state == "done" and again.by_outcome()["rejected"] > 0


def test_a_spark_only_session_judges_by_the_samples_clock(spark, clicks):
    """No clock given and no local sample: the session's Spark verdicts (first run and the
    re-judging after an edit) use the sample's own clock, as a local session would."""
    from kqlab.authoring import AuthoringSession
    from kqlab.validate.replayer import Replayer

    folder, policy = clicks
    session = AuthoringSession(policy)
    session.replay(str(folder), engine="spark", master=spark.sparkContext.master)
    local = Replayer(str(folder))
    assert session.replayer is None and local.clock == "sample"
    assert session.clock == local.now and session.clock_source == "sample"
    assert "the sample's newest batch" in session.clock_text()
    rule = policy.rules[-1].id
    session.set_mode(rule, "observe")
    assert session.clock == local.now and session.clock_source == "sample"
    assert session.verdicts.by_outcome() == local.run(session.policy).by_outcome()
