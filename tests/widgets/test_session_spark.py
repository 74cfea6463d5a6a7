"""The Workbench's Spark path on a real local SparkSession (issue 16): *Replay* on Spark
replays the policy as edited, every view shows the Spark verdicts, and the next edit re-judges
the same sample locally."""

from __future__ import annotations

from kqlab.validate import replay
from kqlab.widgets import Workbench
from tests.spark.conftest import spark  # noqa: F401  (the session-wide SparkSession fixture)
from tests.viz.conftest import NOW


def test_spark_replay_button_replays_the_edited_policy(spark, orders_dir):  # noqa: F811
    root, policy = orders_dir
    wb = Workbench(str(root), policy, now=NOW)
    wb.panel.master = spark.sparkContext.master
    wb.editor.add_rule("value_size", id="tiny", max=1)  # rejects every record
    wb.panel.engine.value = "spark"
    wb.panel.run_button.click()
    assert wb.panel.wait(300) is not None, wb.panel.error.value
    fresh = replay(root, wb.policy, now=NOW).by_outcome()
    assert fresh["accepted"] == 0
    assert wb.verdicts.engine == "spark" and wb.verdicts.by_outcome() == fresh
    assert wb.panel.status.value.startswith("spark: ") and "accepted 0," in \
        wb.panel.status.value
    assert wb.editor.counts["tiny"]["failed"] == sum(fresh.values())
    assert wb.explorer.matches == fresh["rejected"] + fresh["collateral"]
    # the same source: the local sample stays, and the next edit re-judges it locally
    wb.editor.remove_rule("tiny")
    assert wb.verdicts.engine == "local"
    assert wb.verdicts.by_outcome() == replay(root, policy, now=NOW).by_outcome()
    assert "re-judged after 1 edit" in wb.panel.status.value
