"""The static HTML report: the demo topics' report parses, holds every figure, loads plotly.js
from itself (no CDN), and stays small on a million-record replay; ``kqlab report`` writes it."""

from __future__ import annotations

import json
import re

import pytest
from bs4 import BeautifulSoup
from plotly.offline import get_plotlyjs

from kqlab.cli import main
from kqlab.reporting import PLOTLY_FILE, ReportError, report
from kqlab.validate.replayer import Replayer

from .viz import conftest as shared
from .viz.conftest import NOW, topic_dir

# the view tests' samples, shared (fixtures are looked up by module attribute)
demo, policies, orders, million = shared.demo, shared.policies, shared.orders, shared.million

PLOTLY_JS = len(get_plotlyjs().encode())
FIGURES = ("kqlab-reasons", "kqlab-offsets", "kqlab-timeline", "kqlab-producers",
           "kqlab-schemas", "kqlab-keys")


def _offline(html: str) -> BeautifulSoup:
    """Parse; every script is inline except a local plotly.min.js, nothing loads from a URL."""
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup.find_all(src=True) + soup.find_all(href=True):
        url = tag.get("src") or tag.get("href")
        assert not re.match(r"(https?:)?//", url), url
    scripts = soup.find_all("script")
    plotly = [s for s in scripts if "plotly.js" in (s.string or "")[:400] or
              s.get("src") == PLOTLY_FILE]
    assert len(plotly) == 1  # plotly.js exactly once
    rest = "".join(s.string or "" for s in scripts if s not in plotly)
    assert "cdn." not in rest and "cdn." not in soup.get_text()
    return soup


@pytest.fixture(scope="module", params=["orders", "clicks"])
def demo_report(request, demo, policies, tmp_path_factory):
    topic = request.param
    folder = topic_dir(demo, topic, tmp_path_factory.mktemp(f"{topic}-only"))
    r = Replayer(folder, now=NOW)
    v = r.run(policies[topic])
    path = report(v, policies[topic], sample=r, source=str(folder),
                  path=tmp_path_factory.mktemp("report") / f"{topic}.html")
    return topic, v, path


def test_demo_topics_report(demo_report):
    topic, v, path = demo_report
    html = path.read_text(encoding="utf-8")
    soup = _offline(html)
    for div in FIGURES:
        assert soup.find("div", id=div) is not None, div
        assert f'"{div}"' in html  # and a Plotly.newPlot call drawing it
    assert html.count("Plotly.newPlot(") == len(FIGURES)
    text = soup.get_text()
    assert f"demo-{topic}" in text and v.policy_hash in text
    assert "Top failures" in text and "Provenance" in text and "kqlab: 1" in text
    # the report's numbers are the replay's
    assert f"{v.by_outcome()['rejected']:,}" in text
    assert path.stat().st_size < PLOTLY_JS + 600_000


def test_million_record_report_stays_small(million, tmp_path):
    v, sample = million
    path = report(v, None, sample=sample, path=tmp_path / "big.html")
    size = path.stat().st_size
    soup = _offline(path.read_text(encoding="utf-8"))
    assert all(soup.find("div", id=d) is not None for d in FIGURES)
    assert size - PLOTLY_JS < 1_000_000, f"{size - PLOTLY_JS:,} bytes beside plotly.js"
    # tables are capped
    assert len(soup.find_all("table")[1].find_all("tr")) <= 51


def test_plotly_as_a_file_next_to_the_report(orders, tmp_path):
    r, v, policy = orders
    path = report(v, policy, sample=r, path=tmp_path / "a.html", plotlyjs="file")
    assert (tmp_path / PLOTLY_FILE).stat().st_size == PLOTLY_JS
    assert path.stat().st_size < 600_000
    _offline(path.read_text(encoding="utf-8"))
    with pytest.raises(ReportError, match="pass path="):
        report(v, policy, plotlyjs="file")
    with pytest.raises(ReportError, match="'inline' or 'file'"):
        report(v, policy, path=tmp_path / "b.html", plotlyjs="cdn")


def test_cli_report(demo, tmp_path, capsys):
    from kqlab.sources.demo_topics import policy_path

    folder = topic_dir(demo, "orders", tmp_path / "orders-only")
    out = tmp_path / "out" / "orders.html"
    code = main(["report", str(folder), "--policy", str(policy_path("orders")), "--now",
                 str(NOW), "--out", str(out), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["report"] == str(out) and doc["bytes"] == out.stat().st_size
    assert doc["summary"]["policy"] == "demo-orders"
    _offline(out.read_text(encoding="utf-8"))
    assert main(["report", str(tmp_path / "missing"), "--policy",
                 str(policy_path("orders"))]) == 2
    assert "kqlab report: error:" in capsys.readouterr().err
