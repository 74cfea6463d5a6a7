"""The Structured Streaming enforcer on a route by pattern (``source_pattern``): a topic
created while it runs is read (``subscribePattern``), routed to the pattern's sink, and its
partitions become groups of the ``volume`` checks by partition from the window after the
newest record seen when they joined — the join rule of :mod:`kqlab.spark.enforcer_checks`,
now driven by ``kqlab-kafka`` itself.  One in-process enforcer on the real Tansu broker.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from kqlab.policy import loads_policy
from kqlab.spark.enforcer_config import CheckSettings, EnforcerConfigError, Route
from tests.spark.kafka_helpers import kafka

__all__ = ["kafka"]

NOW = 1_763_700_000_000
T0 = NOW - 1_800_000  # a window boundary
W = 10_000
POLICY = """kqlab: 1
name: pattern-volume
topics: {patterns: ["^po-"]}
checks:
- {id: vol, kind: volume, window: 10s, by: partition, min: 1}
"""


def _records(n: int, first_ms: int, partitions: int = 1) -> list[dict]:
    """``n`` records one second apart from ``first_ms``, partitions in turn."""
    return [{"value": b"r%d" % i, "timestamp": first_ms + i * 1000, "partition": i % partitions}
            for i in range(n)]


def test_a_pattern_route_reads_and_routes_a_topic_created_mid_run(spark, kafka, tmp_path):
    from kqlab.spark.enforcer import Enforcer, EnforcerSettings
    from tests.gate.conftest import read_topic

    for t, n in (("po-a", 1), ("po.valid", 2), ("po.dlq", 2), ("po.alerts", 1)):
        kafka.create_topic(t, partitions=n)
    kafka.produce("po-a", _records(60, T0))  # windows 0-5
    e = Enforcer(spark, loads_policy(POLICY), EnforcerSettings(
        routes=(Route("^po-", "po.valid", "po.dlq", pattern=True),),
        bootstrap=kafka.bootstrap, checkpoint=str(tmp_path / "ck"), now=NOW,
        trigger_seconds=0.2, checks=CheckSettings(alert_topic="po.alerts", lateness_ms=0)))
    run = threading.Thread(target=e.run, daemon=True)

    def enforced(n: int) -> None:
        deadline = time.monotonic() + 90
        while e.metrics["records"] < n and time.monotonic() < deadline and run.is_alive():
            time.sleep(0.05)
        assert e.metrics["records"] == n, (e.metrics["records"], n)

    run.start()
    try:
        enforced(60)
        # po-b appears: records in partition 0, windows 6-9; partition 1 stays empty.  Once
        # they are read (the watermark, lateness 0, at T0+99 s: windows 6-8 closed, po-a
        # silent in them), po-a goes on to window 11, its records in windows 6-8 late, and
        # moves the watermark past window 10
        kafka.create_topic("po-b", partitions=2)
        kafka.produce("po-b", [dict(r, partition=0) for r in _records(40, T0 + 60_000)])
        enforced(100)  # po-b found and read before po-a moves on: it joins at window 6
        kafka.produce("po-a", _records(60, T0 + 60_000))
        enforced(160)
    finally:
        e.stop()
        run.join(60)
    assert e.source_partitions(len(e.batches) - 1) == {"po-a": [0], "po-b": [0, 1]}
    # po-b's records went where the pattern routes them, partition kept
    # expect=: what must be there at least (a first fetch on a busy machine can take longer
    # than the idle time; an idle read alone then returns nothing)
    valid = read_topic(kafka.bootstrap, "po.valid", 2, expect=160, idle_s=0.5)
    assert sorted((m.partition(), m.value()) for m in valid if m.partition() == 0
                  and m.timestamp()[1] >= T0 + 60_000) == sorted(
        [(0, b"r%d" % i) for i in range(40)] + [(0, b"r%d" % i) for i in range(60)])
    # po-b joined after records up to T0+59 s were seen: judged from window 6 on, to the
    # watermark's (T0+119 s: windows up to [T0+100 s, T0+110 s) closed); po-a was silent in
    # windows 6-8 when they closed (its records there came late: counted, not merged)
    want = {("po-b-0", T0 + 100_000, 0)} | {("po-b-1", T0 + s, 0)
                                            for s in range(60_000, 110_000, W)} | \
        {("po-a-0", T0 + s, 0) for s in range(60_000, 90_000, W)}
    alerts = [json.loads(m.value()) for m in read_topic(kafka.bootstrap, "po.alerts", 1,
                                                        expect=len(want), idle_s=0.5)]
    got = {(a["group"], a["window_start"], a["records"]) for a in alerts}
    assert got == want
    assert e.metrics["checks"]["late"] == 30  # po-a's records of windows 6-8
    assert e.checks.state.since == {"vol": {"po-b-0": T0 + 60_000, "po-b-1": T0 + 60_000}}


def test_a_pattern_route_in_the_config_and_its_checks(kafka, tmp_path):
    from kqlab.spark.enforcer import Enforcer, EnforcerError, EnforcerSettings
    from kqlab.spark.enforcer_config import load_enforcer_file, source_pattern

    f = tmp_path / "enforcer.yaml"
    f.write_text("kqlab_spark_enforcer: 1\npolicy: {path: p.yaml}\n"
                 "topics: [{source_pattern: '^lp-', sink: lp.valid, dlq: lp.dlq},\n"
                 "         {source: legacy, sink: l.valid, dlq: l.dlq}]\n"
                 "source: {failOnDataLoss: 'false'}\n")
    cfg = load_enforcer_file(f)
    assert cfg.routes == (Route("^lp-", "lp.valid", "lp.dlq", pattern=True),
                          Route("legacy", "l.valid", "l.dlq"))
    assert cfg.source == {"failOnDataLoss": "false"}
    assert source_pattern(cfg.routes) == "(?:^lp-)|^legacy$"
    f.write_text("kqlab_spark_enforcer: 1\npolicy: {path: p.yaml}\n"
                 "topics: [{source_pattern: 'lp-([', sink: a, dlq: b}]\n")
    with pytest.raises(EnforcerConfigError, match=r"source_pattern 'lp-\(\[' is not a valid"):
        load_enforcer_file(f)
    # a first route by pattern has no topic to name the alert topic after
    with pytest.raises(EnforcerConfigError, match=r"checks\.alert_topic"):
        Enforcer(None, loads_policy(POLICY), EnforcerSettings(
            routes=cfg.routes[:1], bootstrap=kafka.bootstrap, checkpoint=str(tmp_path / "c")))

    def checked(route: Route) -> None:
        Enforcer(None, loads_policy(POLICY), EnforcerSettings(
            routes=(route,), bootstrap=kafka.bootstrap, checkpoint=str(tmp_path / "d"),
            checks=CheckSettings(alert_topic="lp.alerts"))).check_topics()

    for t, n in (("lp-a", 3), ("lp.valid", 2), ("lp.dlq", 3), ("lp.alerts", 1)):
        kafka.create_topic(t, partitions=n)
    # a pattern that finds the enforcer's own output would read it back
    with pytest.raises(EnforcerError, match=r"pattern 'lp' matches the enforcer's own output "
                                            r"topic\(s\) lp.alerts, lp.dlq, lp.valid"):
        checked(Route("lp", "lp.valid", "lp.dlq", pattern=True))
    # partitioning same: the sink needs the partitions of every topic matching now
    with pytest.raises(EnforcerError, match=r"'lp.valid' has 2 partition\(s\), source 'lp-a' "
                                            r"has 3"):
        checked(Route("^lp-", "lp.valid", "lp.dlq", pattern=True))
    checked(Route("^lp-", "lp.dlq", "lp.dlq", pattern=True))
