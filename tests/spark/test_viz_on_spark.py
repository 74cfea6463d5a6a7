"""The views that accept SparkVerdicts aggregate in Spark and draw what the local verdicts
draw (the figure data is compared trace by trace)."""

from __future__ import annotations

import json

from kqlab.sources import demo_topics
from kqlab.spark import replay_spark
from kqlab.validate import replay
from tests.spark.test_parity import DEMO_NOW, demo  # noqa: F401  (the module fixture)


def _data(fig) -> list:
    return json.loads(fig.to_json())["data"]


def test_reason_timeline_and_producer_views_match_local(spark, demo):  # noqa: F811
    from kqlab import viz

    _, folders, _ = demo
    policy = demo_topics.load_policies()["orders"]
    local = replay(folders["orders"], policy, now=DEMO_NOW)
    sv = replay_spark(folders["orders"], policy, spark=spark, now=DEMO_NOW)
    got, want = _data(viz.rejections_by_reason(sv)), _data(viz.rejections_by_reason(local))
    assert got == want and any(sum(t["x"]) > 0 for t in want)
    got = _data(viz.rejection_timeline(sv, bucket_ms=3_600_000))
    assert got == _data(viz.rejection_timeline(local, bucket_ms=3_600_000))
    # the bucket chosen for the data (0.1-99.9 % range; far-past and future records included)
    auto = viz.rejection_timeline(sv)
    assert _data(auto) == _data(viz.rejection_timeline(local))
    assert auto.layout.title.text == viz.rejection_timeline(local).layout.title.text
    # records per outcome per producer id, joined to their batches by Spark
    assert _data(viz.by_producer(sv)) == _data(viz.by_producer(local))
    assert {t["name"] for t in _data(viz.by_producer(sv))} >= {"accepted", "rejected"}
