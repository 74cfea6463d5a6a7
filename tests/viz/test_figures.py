"""The views on the demo orders topic (whose planted defects are known) and on a synthetic
million-record replay (their data stays bounded)."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pytest

import kqlab.viz as viz
from kqlab.viz import ViewError


def _points(fig) -> int:
    return sum(len(t.x) for t in fig.data if getattr(t, "x", None) is not None)


def test_reasons_agree_with_the_verdicts(orders):
    _, v, _ = orders
    table = v.by_reason().to_pydict()
    by_reason = dict(zip(table["reason"], zip(table["culprit"], table["collateral"],
                                              table["not_enforced"], strict=True), strict=True))
    # a reject rule's culprits are the records it got rejected (the replay's own count)
    for row in v.rules.to_pylist():
        if row["mode"] == "reject" and row["rejected_records"]:
            assert by_reason[row["rule"]][0] == row["rejected_records"]
    # the observe rule only counts
    assert by_reason["value-size"][:2] == (0, 0) and by_reason["value-size"][2] > 0
    # every collateral record is charged to exactly one reason
    assert sum(table["collateral"]) == v.by_outcome()["collateral"]
    fig = viz.rejections_by_reason(v)
    assert [t.name for t in fig.data] == ["rejected (culprit)",
                                          "collateral (rejected with its batch)",
                                          "failed, not enforced"]
    assert list(fig.data[0].y) == table["reason"]


def test_offset_spans_cover_every_rejected_record(orders):
    _, v, _ = orders
    spans = v.spans()
    assert spans.partitions == ["orders-0", "orders-1", "orders-2"] and not spans.merged
    bad = v.records.filter(pc.not_equal(v.records.column("outcome"), "accepted"))
    label = [f"{t}-{p}" for t, p in zip(bad.column("topic").to_pylist(),
                                        bad.column("partition").to_pylist(), strict=True)]
    row = np.array([spans.partitions.index(x) for x in label])
    off = bad.column("offset").to_numpy()
    inside = (spans.row[None, :] == row[:, None]) & (spans.start[None, :] <= off[:, None]) & \
        (off[:, None] <= spans.end[None, :])
    assert inside.any(axis=1).all()
    assert spans.rejected.sum() + spans.collateral.sum() == len(off)
    fig = viz.rejections_by_offset(v)
    # SVG paths (plotly.js's basic bundle): one per reason, its spans apart by gaps
    assert {t.type for t in fig.data} == {"scatter"}
    assert all(t.connectgaps is False for t in fig.data if t.mode == "lines")
    assert "rejected records" in [t.name for t in fig.data]  # few: drawn one by one


def test_offset_spans_merge_beyond_the_bound(orders):
    _, v, _ = orders
    full = v.spans()
    merged = v.spans(max_spans=5)
    assert merged.merged and len(merged) <= 5 + len(merged.partitions)
    assert merged.rejected.sum() == full.rejected.sum()
    assert "merged" in viz.rejections_by_offset(v, max_spans=5).layout.title.text


def test_timeline_accounts_for_every_record(orders):
    _, v, _ = orders
    table, bucket = v.timeline()
    cols = table.to_pydict()
    assert sum(cols["total"]) == v.records.num_rows
    reasons = [k for k in cols if k not in ("bucket", "total", "collateral")]
    assert sum(sum(cols[k]) for k in reasons) == v.by_outcome()["rejected"]
    assert sum(cols["collateral"]) == v.by_outcome()["collateral"]
    assert all(b % bucket == 0 for b in cols["bucket"])
    fig = viz.rejection_timeline(v, bucket_ms=3_600_000)
    assert "1 h bucket" in fig.layout.title.text


def test_bad_deploy_producer_stands_out(orders):
    r, v, _ = orders
    groups = v.producer_outcomes(r.sample.batches)
    rejected = dict(zip(groups.labels, groups.counts[:, 1].tolist(), strict=True))
    # checkout-b (pid 2002) runs the bad deploy; exact framing gives the epoch
    assert max(rejected, key=rejected.get) == "pid 2002 · epoch 0"
    fig = viz.by_producer(v, r)
    assert fig.layout.title.text == "Records by producer"


def test_unknown_schema_ids_are_rejected(orders):
    r, v, _ = orders
    from kqlab.viz._groups import content_counts, group_table, schema_id_groups

    codes, labels = schema_id_groups(r.sample.records)
    t = group_table(content_counts(v, r.sample.records, codes, labels), labels, 20).to_pydict()
    unknown = [i for i, g in enumerate(t["group"]) if g in ("schema id 4242", "schema id 4243")]
    assert unknown and all(t["accepted"][i] == 0 for i in unknown)
    assert viz.by_schema_id(v, r).data[0].y == tuple(t["group"])


def test_key_patterns_and_content_views_need_the_sample(orders):
    r, v, _ = orders
    fig = viz.by_key_pattern(v, r)
    assert "order-99999" in fig.data[0].y
    with pytest.raises(ViewError, match="pass sample="):
        viz.by_key_pattern(v, None)


def test_record_detail_of_a_policy_rejection(orders):
    r, v, policy = orders
    rows = v.records.filter(pc.equal(v.records.column("outcome"), "rejected"))
    row = next(x for x in rows.to_pylist()
               if any(f["rule"] == "amount-range" for f in x["failures"]))
    d = viz.record_detail(v, r, partition=row["partition"], offset=row["offset"], policy=policy)
    assert d.outcome == "rejected" and isinstance(d.value, dict) and "amount" in d.value
    assert d.value_hex.startswith("00000000  00 00 00 00")  # the Confluent header, in hex
    assert any(f["rule"] == "amount-range" and f["code"] == 87 for f in d.failures)
    assert d.producer_saw["error_code"] == 87
    assert d.producer_saw["this_record"]  # KIP-467: the broker named this record
    assert d.batch["producer_id"] in (2001, 2002) and d.batch["framing"] == "exact"
    assert "What the producer saw" in d.to_html()
    with pytest.raises(ViewError, match="no record at offset"):
        viz.record_detail(v, r, partition=0, offset=10**9, policy=policy)


def test_policy_impact_of_removing_a_rule(orders):
    r, before, policy = orders
    after = r.run(policy.with_rules([x for x in policy.rules if x.id != "traceparent"]))
    t = viz.impact_table(before, after).to_pydict()
    gained = before.by_outcome()["accepted"] - after.by_outcome()["accepted"]
    assert -gained == sum(t["newly_accepted"]) - sum(t["newly_rejected"])
    assert t["reason"][0] == "traceparent" and t["newly_accepted"][0] > 0
    assert t["failed_after"][0] is None
    fig = viz.policy_impact(before, after, policies=(policy, after_policy(policy)))
    assert "removed rules: traceparent" in fig.layout.title.text
    with pytest.raises(ViewError, match="different records"):
        viz.impact_table(before, r.run(policy).__class__(
            before.records.slice(0, 10), before.batches, before.rules, "kip-940", "exact", 0))


def after_policy(policy):
    return policy.with_rules([x for x in policy.rules if x.id != "traceparent"])


def test_policy_impact_unvalidated_equals_plotly_validating_its_spec(orders):
    """policy_impact wraps impact_spec without plotly's validation (the editor draws it on
    every edit): the figure must be what validating the spec gives, with or without a
    change, a subtitle and a session's colour map; and it stays a figure one can edit."""
    import json

    import plotly.graph_objects as go

    from kqlab.viz._impact import impact_spec
    from kqlab.viz._style import RuleColors

    r, before, policy = orders
    removed = after_policy(policy)
    after = r.run(removed)
    colors = RuleColors()
    for old, new, kwargs in [(before, after, {"policies": (policy, removed)}),
                             (after, before, {"colors": colors}), (before, before, {})]:
        fig = viz.policy_impact(old, new, **kwargs)
        validated = go.Figure(impact_spec(old, new, **kwargs))
        assert json.loads(fig.to_json()) == json.loads(validated.to_json())
        assert [t.type for t in fig.data] == ["bar", "bar"]
    with pytest.raises(ValueError, match=r"Invalid value .* 'height' property"):
        fig.update_layout(height="tall")  # validation is on again for later changes


def test_figures_of_a_million_records_stay_bounded(million):
    v, sample = million
    assert v.records.num_rows > 999_000
    figures = {
        "reasons": viz.rejections_by_reason(v),
        "offsets": viz.rejections_by_offset(v),
        "timeline": viz.rejection_timeline(v),
        "producers": viz.by_producer(v, sample),
        "schemas": viz.by_schema_id(v, sample),
        "keys": viz.by_key_pattern(v, sample),
    }
    for name, fig in figures.items():
        assert len(fig.data) <= 12, name
        assert _points(fig) <= 3 * 2000 + 3 * 6 + 1000, name
        assert len(fig.to_json()) < 400_000, name
    # too many rejected records to draw one by one: spans only, and the title says so
    offsets = figures["offsets"]
    assert "rejected records" not in [t.name for t in offsets.data]
    assert "points above" in offsets.layout.title.text
    assert {t.type for t in offsets.data} == {"scatter"}
    # the bad deploy is one band per partition
    band = next(t for t in offsets.data if t.name == "traceparent")
    assert len(band.x) == 3 * 6
    assert len(figures["timeline"].data[0].x) <= 300
    # the aggregate still counts every record
    assert sum(v.by_reason().column("collateral").to_pylist()) == v.by_outcome()["collateral"]
