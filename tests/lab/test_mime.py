"""kqlab's results as notebook output (issue 20): ``application/vnd.kqlab.verdicts+json``
beside the HTML fallback, built from the verdict core's own numbers, small on disk."""

from __future__ import annotations

import json

import nbformat
import pytest

import kqlab
from kqlab.sources.demo import demo_policy_path, write_demo_segment
from kqlab.validate import mime
from tests.lab.verdicts_notebook import NOW, executed_verdicts_notebook

#: "a few hundred KB" for the demo replay's saved notebook (issue 20's acceptance)
MAX_NOTEBOOK_BYTES = 300_000


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    sample = write_demo_segment(tmp_path_factory.mktemp("demo"), NOW)
    return kqlab.replay(sample, kqlab.load_policy(demo_policy_path()), now=NOW)


def test_replay_bundle_carries_the_verdict_core_numbers(verdicts):
    bundle = verdicts._repr_mimebundle_()
    assert set(bundle) == {mime.MIME_TYPE, "text/html", "text/plain"}
    p = bundle[mime.MIME_TYPE]
    assert p["version"] == mime.PAYLOAD_VERSION and p["kind"] == "replay"
    s = verdicts.summary()
    assert p["summary"]["outcomes"] == s["outcomes"] == verdicts.by_outcome()
    assert p["summary"]["records"] == verdicts.records.num_rows
    assert p["rules"] == verdicts.rules.to_pylist()
    reasons = verdicts.by_reason().to_pylist()
    assert p["reasons"] == reasons[:mime.MAX_REASONS] and p["reasons_total"] == len(reasons)
    assert p["issues_total"] == len(verdicts.issues) >= 1  # the demo's truncated tail
    json.dumps(p, allow_nan=False)  # plain JSON, as the notebook stores it


def test_html_fallback_says_what_the_payload_says(verdicts):
    bundle = verdicts._repr_mimebundle_()
    html = bundle["text/html"]
    for rule in verdicts.rules.column("rule").to_pylist():
        assert f"<td>{rule}</td>" in html
    rejected = verdicts.by_outcome()["rejected"]
    assert f"rejected <b>{rejected:,}</b>" in html
    assert "<script" not in html
    assert bundle["text/plain"].startswith("Verdicts of policy 'orders-quality'")


def test_fidelity_report_bundle():
    report = kqlab.fidelity_report(kqlab.load_policy(demo_policy_path()))
    p = report._repr_mimebundle_()[mime.MIME_TYPE]
    assert p["kind"] == "fidelity" and p["targets"] == list(report.exports)
    assert p["counts"] == report.counts()
    table = report.table()
    assert [r["rule"] for r in p["rows"]] == [r["rule"] for r in table]
    for row, full in zip(p["rows"], table, strict=True):
        assert {t: c["verdict"] for t, c in row["targets"].items()} == \
            {t: c["verdict"] for t, c in full["targets"].items()}


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown kqlab payload kind 'chart'"):
        mime.payload_html({"kind": "chart"})


def test_saved_notebook_with_the_demo_replay_is_small(tmp_path, monkeypatch):
    """Executed by a real kernel and saved: the output holds the MIME payload (equal to the
    one computed here for the same replay) and the notebook weighs a few KB, not MB."""
    path = executed_verdicts_notebook(tmp_path)
    size = path.stat().st_size
    assert size <= MAX_NOTEBOOK_BYTES, f"{size:,} bytes"
    nb = nbformat.read(path, as_version=4)
    outputs = nb.cells[-1].outputs
    assert [o.output_type for o in outputs] == ["execute_result"]
    data = outputs[0].data
    assert {mime.MIME_TYPE, "text/html", "text/plain"} <= set(data)
    monkeypatch.chdir(tmp_path)  # the notebook replayed orders-0 relative to its folder
    here = kqlab.replay("orders-0", kqlab.load_policy(demo_policy_path()), now=NOW)
    assert data[mime.MIME_TYPE] == json.loads(json.dumps(mime.replay_payload(here)))
    assert "widgets" not in nb.metadata
