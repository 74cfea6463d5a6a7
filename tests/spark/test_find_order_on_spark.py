"""The Spark engine's ``find`` sorts as the local engine's (tests/validate/test_find_order.py):
the same reference, through the same assertions, on the demo orders topic."""

from __future__ import annotations

from kqlab.sources import demo_topics
from kqlab.spark import replay_spark
from kqlab.validate.replayer import Replayer
from tests.spark.test_parity import DEMO_NOW, demo  # noqa: F401  (the module fixture)
from tests.validate.test_find_order import check_orders


def test_find_sorts_every_way_on_spark(spark, demo):  # noqa: F811
    _, folders, _ = demo
    policy = demo_topics.load_policies()["orders"]
    local = Replayer(folders["orders"], now=DEMO_NOW).run(policy)
    sv = replay_spark(folders["orders"], policy, spark=spark, now=DEMO_NOW)
    check_orders(sv, local.records.to_pylist(), "amount-range")
