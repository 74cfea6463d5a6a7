"""The figures' shared look (issue 16): one colour per rule in every figure, no white box on a
dark page, no fixed width, timelines that break where no records were sampled, and only the
trace types of the vendored plotly.js basic bundle."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import kqlab.viz as viz
from kqlab.viz import _plotlyjs
from kqlab.viz._figures import TRACE_TYPES, gapped
from kqlab.viz._style import BROKER_PALETTE, BROKER_STEPS, CONFIG, RULE_PALETTE, RuleColors


def _reason_colors(fig) -> dict[str, set[str]]:
    """Reason -> every colour a figure gives it: bars by their y label, lines by name."""
    out: dict[str, set[str]] = {}
    for t in fig.data:
        color = t.marker.color if t.type == "bar" else t.line.color
        if t.type == "bar" and t.y is not None and not isinstance(color, str):
            for label, c in zip(t.y, color, strict=True):
                out.setdefault(label, set()).add(c)
        elif t.type == "scatter" and t.mode and "lines" in t.mode and t.name:
            out.setdefault(t.name, set()).add(color)
    return out


def test_a_rule_has_one_colour_in_every_figure(orders):
    r, v, policy = orders
    after = r.run(policy.with_rules([x for x in policy.rules if x.id != "value-size"]))
    figures = {
        "reasons": viz.rejections_by_reason(v),
        "offsets": viz.rejections_by_offset(v),
        "timeline": viz.rejection_timeline(v),
        "impact": viz.policy_impact(after, v),
    }
    seen: dict[str, dict[str, set[str]]] = {}
    for name, fig in figures.items():
        for reason, colors in _reason_colors(fig).items():
            seen.setdefault(reason, {})[name] = colors
    rules = [x.id for x in policy.rules]
    shared = [x for x in seen if len(seen[x]) >= 2 and (x in rules or x.startswith("broker:"))]
    assert len(shared) >= 4, seen  # the policy's rules and broker checks in several figures
    for reason in shared:
        colors = set().union(*seen[reason].values())
        assert len(colors) == 1, (reason, seen[reason])  # was: a different colour per figure
    # policy rules take the palette in policy order; broker checks their own palette
    for i, rule in enumerate(rules):
        if rule in seen:
            assert set().union(*seen[rule].values()) == {RULE_PALETTE[i]}, rule
    brokers = [x for x in seen if x.startswith("broker:")]
    assert brokers and all(set().union(*seen[b].values()) <= set(BROKER_PALETTE)
                           for b in brokers)
    # different rules, different colours
    by_rule = {x: next(iter(set().union(*seen[x].values()))) for x in seen if x in rules}
    assert len(set(by_rule.values())) == len(by_rule)


def test_a_session_map_keeps_colours_across_replays(orders):
    r, v, policy = orders
    session = RuleColors()
    first = viz.rejection_timeline(v, colors=session)
    # drop the first rule: a fresh map would shift every other rule's colour, the session's not
    fewer = r.run(policy.with_rules(policy.rules[1:]))
    second = viz.rejection_timeline(fewer, colors=session)
    a, b = _reason_colors(first), _reason_colors(second)
    common = [x for x in a if x in b and x not in ("collateral", "other", "all refused")]
    assert common and all(a[x] == b[x] for x in common)
    fresh = _reason_colors(viz.rejection_timeline(fewer))
    assert any(fresh[x] != a[x] for x in common if x in fresh)


def test_broker_colours_follow_the_spec_order():
    from kqlab.kafka.checks import CHECKS

    assert list(BROKER_STEPS) == list(dict.fromkeys(c.step for c in CHECKS))
    c = RuleColors(["a-rule"])
    assert c["broker:R4"] == RuleColors()["broker:R4"] == BROKER_PALETTE[
        BROKER_STEPS.index("R4") % len(BROKER_PALETTE)]
    assert c["broker:R3"] != c["broker:R4"]
    assert c["decode:value"] == RuleColors(["x", "y"])["decode:value"]


def test_timeline_lines_break_at_buckets_without_records(orders):
    _, v, _ = orders
    bucket = 60_000
    table, _ = v.timeline(bucket)
    starts = np.asarray(table.column("bucket").to_pylist())
    missing = int(((np.diff(starts) // bucket) - 1).clip(0).sum())
    assert missing > 0  # the demo sample has minutes without records
    fig = viz.rejection_timeline(v, bucket_ms=bucket)
    lines = [t for t in fig.data if t.mode.startswith("lines")]
    assert lines
    for t in lines:
        assert t.connectgaps is False
        assert fig.layout.xaxis.type == "date"
        x = np.asarray(t.x, dtype=np.float64).astype(np.int64)  # epoch ms
        y = np.asarray(t.y, dtype=np.float64)
        shown = ~np.isnan(y)
        # every drawn segment joins neighbouring buckets: no diagonal across a gap
        joined = shown[1:] & shown[:-1]
        assert (np.diff(x)[joined] == bucket).all(), t.name
        assert (~shown).sum() >= (np.diff(starts) > bucket).sum()
    # a bucket alone between gaps is drawn as a dot (a line of one point shows nothing)
    sizes = np.asarray(lines[0].marker.size)
    assert sizes.max() > 0 and (sizes == 0).any()


def test_gapped_inserts_one_null_per_gap():
    x, rows = gapped(np.array([0, 10, 20, 50, 90, 100]), 10)
    assert x.tolist() == [0, 10, 20, 30, 50, 60, 90, 100]
    assert rows.tolist() == [0, 1, 2, -1, 3, -1, 4, 5]
    assert gapped(np.array([5]), 10)[1].tolist() == [0]


def _all_figures(v, sample, policy=None):
    return {
        "reasons": viz.rejections_by_reason(v),
        "offsets": viz.rejections_by_offset(v),
        "timeline": viz.rejection_timeline(v),
        "producers": viz.by_producer(v, sample),
        "schemas": viz.by_schema_id(v, sample),
        "keys": viz.by_key_pattern(v, sample, policy=policy),
        "impact": viz.policy_impact(v, v),
    }


@pytest.mark.parametrize("which", ["orders", "million"])
def test_no_fixed_width_no_background_basic_traces_only(which, orders, million):
    if which == "orders":
        r, v, policy = orders
        figures = _all_figures(v, r, policy)
    else:
        v, sample = million
        figures = _all_figures(v, sample)
    for name, fig in figures.items():
        layout = fig.layout
        assert layout.width is None, name  # was: 700 px wide whatever the notebook's width
        assert layout.paper_bgcolor is None and layout.plot_bgcolor is None, name
        template = layout.template.layout
        # was: plotly_white, a white box on JupyterLab's dark theme
        assert template.paper_bgcolor == template.plot_bgcolor == "rgba(0,0,0,0)", name
        assert template.autosize is True, name
        assert {t.type for t in fig.data} <= TRACE_TYPES <= _plotlyjs.TRACES, name
    assert CONFIG["responsive"] is True


def test_the_vendored_bundle_is_plotly_basic_of_plotly_pys_version():
    from plotly.offline import get_plotlyjs_version

    text = _plotlyjs.bundle_text()
    head = text[:300]
    assert f"plotly.js (basic - minified) v{_plotlyjs.VERSION}" in head
    assert "MIT" in head
    # figures are written for the plotly.js plotly.py targets: the same major.minor
    assert get_plotlyjs_version().split(".")[:2] == _plotlyjs.VERSION.split(".")[:2]
    # the basic bundle registers scatter and bar (and pie), nothing WebGL
    for trace in ("scatter", "bar"):
        assert re.search(rf'name:\s*"{trace}"', text) or f'"{trace}"' in text
    assert len(text.encode()) < 1_300_000


def test_widget_figures_share_one_plotly_js(orders):
    from kqlab.widgets._plot import PlotlyFigure, PlotlyJs, plotly_js

    _, v, _ = orders
    a = PlotlyFigure(viz.rejections_by_reason(v))
    b = PlotlyFigure(viz.rejection_timeline(v))
    assert isinstance(plotly_js(), PlotlyJs) and a._plotly is b._plotly is plotly_js()
    assert plotly_js().source == _plotlyjs.bundle_text()  # gzip + base64 in the model
    assert len(plotly_js().source_gz) < 600_000
    # each figure's own state is its JSON and a few kB of module, not plotly.js
    for fig in (a, b):
        state = json.dumps(fig.get_state(), default=str)
        assert len(state) < 200_000 and "plotly.js (basic" not in state
    assert a.config["responsive"] is True
    assert set(a.themes) == {"neutral", "light", "dark"}
    # an update keeps the view and shows the new figure
    model = a.model_id
    a.update(viz.rejection_timeline(v))
    assert a.model_id == model and json.loads(a.to_json()) == a.figure == b.figure
