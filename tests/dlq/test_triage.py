"""Triage tables and the same views as a replay: the dead letters' verdicts are a
``VerdictsView`` the figures draw unchanged (reasons, timeline, source partition × offset),
with a reason's colour shared with the replay that names the same rule."""

from __future__ import annotations

import json

from kqlab.dlq import DLQ_REASONS_SCHEMA, DLQ_SOURCES_SCHEMA, DeadLetters
from kqlab.gate import records_table
from kqlab.validate.view import REASONS_SCHEMA
from tests.dlq.conftest import NOW, gate_dead_letter


def _dead() -> DeadLetters:
    letters = [gate_dead_letter(i, rule="amount-positive" if i % 3 else "broker:R4")
               for i in range(30)]
    letters += [{"key": None, "value": b"?", "timestamp": NOW + 3_600_000, "headers": []}]
    n = len(letters)
    t = records_table(["orders.dlq"] * n, [i % 2 for i in range(n)], [i // 2 for i in range(n)],
                      [(1, x["timestamp"]) for x in letters], [x["key"] for x in letters],
                      [x["value"] for x in letters], [x["headers"] for x in letters])
    return DeadLetters.from_records(t)


def test_tables_by_reason_source_family():
    dead = _dead()
    reasons = dead.by_reason()
    assert reasons.schema == DLQ_REASONS_SCHEMA
    rows = {r["reason"]: r for r in reasons.to_pylist()}
    assert rows["amount-positive"]["records"] == 20 and rows["broker:R4"]["records"] == 10
    assert rows["unknown reason"]["records"] == 1
    assert rows["amount-positive"]["source_topics"] == ["orders"]
    assert abs(sum(r["share"] for r in rows.values()) - 1) < 1e-9
    src = dead.by_source()
    assert src.schema == DLQ_SOURCES_SCHEMA
    assert {(r["source_partition"], r["records"]) for r in src.to_pylist()} == \
        {(0, 15), (1, 15), (None, 1)}
    assert dead.by_family() == {"kqlab": 30, "confluent": 0, "connect": 0, "streams": 0,
                                "none": 1}
    json.dumps(dead.summary())


def test_the_verdicts_view_is_the_replays():
    dead = _dead()
    v = dead.verdicts
    assert v.by_outcome() == {"accepted": 0, "rejected": 31, "collateral": 0}
    by_reason = v.by_reason()
    assert by_reason.schema == REASONS_SCHEMA
    assert dict(zip(by_reason["reason"].to_pylist(), by_reason["culprit"].to_pylist(),
                    strict=True)) == {"amount-positive": 20, "broker:R4": 10,
                                      "unknown reason": 1}
    # located at their source coordinates (the unknown one at its dead-letter coordinates)
    spans = v.spans(max_points=100)
    assert spans.partitions == ["orders-0", "orders-1", "orders.dlq-0"]
    table, bucket = dead.timeline()
    assert set(table.column_names) >= {"bucket", "total", "amount-positive", "broker:R4"}
    assert sum(table["total"].to_pylist()) == 31 and bucket > 0
    top = v.top_failures(3).to_pylist()
    assert top[0]["code"] == 87 and top[0]["topic"] == "orders"


def test_the_figures_draw_it_with_the_replays_colours():
    import kqlab.viz as viz
    from kqlab.viz._style import RuleColors

    dead = _dead()
    colors = RuleColors(["trace", "amount-positive"])  # a replay's session map
    before = colors["amount-positive"]
    fig = viz.rejections_by_reason(dead.verdicts, colors=colors)
    bars = fig.data[0]
    assert list(bars.y) == ["amount-positive", "broker:R4", "unknown reason"]
    assert bars.marker.color[0] == before
    assert viz.rejection_timeline(dead.verdicts, colors=colors).data
    offsets = viz.rejections_by_offset(dead.verdicts, colors=colors)
    assert any(t.name == "amount-positive" for t in offsets.data)


def test_an_empty_dlq():
    t = records_table([], [], [], [], [], [], [])
    dead = DeadLetters.from_records(t, "empty.dlq")
    assert len(dead) == 0 and dead.by_reason().num_rows == 0 and dead.by_source().num_rows == 0
    s = dead.summary()
    assert s["records"] == 0 and s["topic"] == "empty.dlq"
    json.dumps(s)
