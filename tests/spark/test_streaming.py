"""The streaming replay on a real Tansu broker and a real local SparkSession: its verdicts
equal the batch replay's on the same offsets, record for record and batch for batch, however
the micro-batches cut the partitions and across a restart from the checkpoint; the per
micro-batch aggregates a listener receives add up to those verdicts; the stop conditions
(end offsets, a record budget) hold; the notebook view renders what arrived.
"""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest

from kqlab.sources.demo_topics import generate, iter_records, load_policies
from kqlab.sources.kafka import sample
from kqlab.validate import replay
from kqlab.validate.sample import Sample
from tests.spark.kafka_helpers import IDEMPOTENT, NOW, kafka

__all__ = ["kafka"]

TOPICS = {"orders": 3, "clicks": 2}


@pytest.fixture(scope="module")
def demo(kafka, tmp_path_factory):
    """The demo topics (Avro orders on a mock registry, JSON clicks, their planted
    defects), produced with idempotent producers into many small lz4 batches."""
    topics = generate(tmp_path_factory.mktemp("demo"), NOW, scale=0.25)
    for t, parts in TOPICS.items():
        kafka.create_topic(t, partitions=parts)
        recs = list(iter_records(topics, t))
        kafka.produce(t, recs[: len(recs) // 2], config=IDEMPOTENT, timeout=60)
        kafka.produce(t, recs[len(recs) // 2:], config=IDEMPOTENT, timeout=60)
    return kafka.bootstrap


def batch_replay(bootstrap, topic):
    """The local engine on the sampler's exact read of the whole topic."""
    res = sample(bootstrap, topic, exact_framing=True)
    policy = load_policies()[topic]
    return replay(Sample(res.records, res.batches, None, "exact", "log"), policy, now=NOW)


def _assert_same(streamed, local):
    assert streamed.records.equals(local.records)
    assert streamed.batches.drop_columns(["position"]).equals(
        local.batches.drop_columns(["position"]))
    assert streamed.rules.equals(local.rules)


def _run(spark, bootstrap, topic, checkpoint, **kw):
    from kqlab.spark.streaming import StreamingReplay

    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    opts.update(kw.pop("options", {}))
    return StreamingReplay(spark, load_policies()[topic], opts, checkpoint=checkpoint,
                           now=NOW, **kw)


@pytest.mark.parametrize(("topic", "per_trigger"), [("orders", 97), ("clicks", 150)])
def test_streaming_verdicts_equal_the_batch_replay(spark, demo, tmp_path, topic, per_trigger):
    local = batch_replay(demo, topic)
    assert local.by_outcome()["rejected"] > 0  # the planted defects are there
    run = _run(spark, demo, topic, str(tmp_path / "ck"), until="latest",
               options={"maxOffsetsPerTrigger": str(per_trigger)}).start()
    assert run.wait(300)
    assert len(run.batches) > 2  # the partitions were judged across micro-batches
    sv = run.verdicts()
    _assert_same(sv.to_local(), local)
    assert sv.summary()["outcomes"] == local.summary()["outcomes"]
    # the listener's per-micro-batch aggregates add up to the verdicts
    totals = run.totals()
    assert totals["records"] == local.records.num_rows
    assert totals["outcomes"] == local.by_outcome() | {
        o: 0 for o in ("accepted", "rejected", "collateral") if o not in local.by_outcome()}
    fails = pc.list_flatten(local.records.column("failures"))
    rejecting = fails.filter(pc.not_equal(pc.struct_field(fails, "code"), 0))
    want = {r["values"]: r["counts"] for r in
            pc.value_counts(pc.struct_field(rejecting, "rule")).to_pylist()}
    assert totals["by_rule"] == want
    assert run.batches[-1].lag == 0
    assert all(b.seconds >= 0 for b in run.batches)


def test_a_restart_from_the_checkpoint_changes_no_verdict(spark, demo, tmp_path):
    local = batch_replay(demo, "orders")
    ck = str(tmp_path / "ck")
    first = _run(spark, demo, "orders", ck, max_records=300,
                 options={"maxOffsetsPerTrigger": "120"}).start()
    assert first.wait(300)
    assert 300 <= first.records < local.records.num_rows  # stopped by the record budget
    second = _run(spark, demo, "orders", ck, until="latest",
                  options={"maxOffsetsPerTrigger": "500"}).start()
    assert second.wait(300)
    assert second.batches[0].batch_id > first.batches[-1].batch_id  # resumed, not restarted
    assert second.records < local.records.num_rows
    _assert_same(second.verdicts().to_local(), local)
    # producer state was carried in the checkpoint: per partition the state the last
    # micro-batch started from (kept for a re-run of it) and the one it left, no older
    from pathlib import Path

    folders = sorted(Path(ck).glob("kqlab/state/orders/*"))
    assert len(folders) == TOPICS["orders"]
    for f in folders:
        assert 1 <= len(list(f.glob("*.pickle"))) <= 2, sorted(f.iterdir())


def test_end_offsets_stop_the_replay_and_nothing_past_them_is_judged(spark, demo, tmp_path):
    until = {"clicks": {0: 150, 1: 40}}
    run = _run(spark, demo, "clicks", str(tmp_path / "ck"), until=until,
               options={"maxOffsetsPerTrigger": "64"}).start()
    assert run.wait(300)
    assert not run.query.isActive
    ends = run.batches[-1].end_offsets
    assert ends == {"clicks": {0: 150, 1: 40}}
    got = run.verdicts().to_local().records
    # whole batches: the last judged batch of a partition may end past its end offset
    for p, end in until["clicks"].items():
        offs = got.filter(pc.equal(got.column("partition"), p)).column("offset")
        assert pc.min(offs).as_py() == 0 and pc.max(offs).as_py() >= end - 1


def test_a_replay_with_nothing_to_read_stops_at_once(spark, demo, tmp_path):
    run = _run(spark, demo, "clicks", str(tmp_path / "ck"),
               until={"clicks": {0: 0, 1: 0}}).start()
    assert run.wait(60)
    assert run.records == 0


def test_the_view_shows_each_micro_batch(spark, demo, tmp_path):
    pytest.importorskip("ipywidgets")
    run = _run(spark, demo, "clicks", str(tmp_path / "ck"), until="latest",
               options={"maxOffsetsPerTrigger": "200"})
    view = run.view()
    run.start()
    assert run.wait(300)
    assert len(view.rows) == len(run.batches)
    html = view.widget.value
    assert f"{len(run.batches)} micro-batches" in html
    assert f"{run.records:,} records" in html
    top = next(iter(run.totals()["by_rule"]))  # the rule that rejected the most
    assert top in html


def test_render_rows_escapes_and_totals():
    from kqlab.spark.stream_view import render_rows

    rows = [{"batch_id": 0, "records": 10, "accepted": 7, "rejected": 2, "collateral": 1,
             "reject_rate": 0.3, "lag": 5, "by_rule": {"<b>": 2}, "seconds": 0.1}]
    html = render_rows(rows, "t")
    assert "1 micro-batches, 10 records, 3 not appended (30.00%)" in html
    assert "&lt;b&gt; 2" in html and "<b>" not in html.replace("<b>t</b>", "")


def test_micro_batch_metrics_are_json_ready(spark, demo, tmp_path):
    run = _run(spark, demo, "clicks", str(tmp_path / "ck"), until="latest").start()
    assert run.wait(300)
    doc = json.loads(json.dumps([b.to_dict() for b in run.batches]))
    assert sum(d["records"] for d in doc) == run.records
    assert {"outcomes", "by_rule", "reject_rate", "lag"} <= set(doc[0])
