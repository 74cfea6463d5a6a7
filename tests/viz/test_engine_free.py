"""The views, the report and the widgets take :class:`kqlab.validate.view.VerdictsView` and
never ask which engine produced the verdicts: their source names no engine internals, and
the verdict core names nothing of the views."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONSUMERS = sorted([*(ROOT / "kqlab" / "viz").glob("*.py"), ROOT / "kqlab" / "reporting.py",
                    *(ROOT / "kqlab" / "widgets").glob("*.py")])

#: what asking for the engine looks like: Spark verdicts' internals, collecting them,
#: capability probes, engine-specific twins of a view, or branching on the display name
ENGINE_CHECKS = {
    "record_files": r"record_files",
    "to_local": r"to_local",
    "_spark_ twins": r"_spark_",
    "raw DataFrames": r"raw_(records|batches)",
    "Spark's record count": r"n_records",
    "the Spark type": r"SparkVerdicts",
    "capability probes": r"\bhasattr\(",
    "type checks on verdicts": r"isinstance\(\s*(verdicts|before|after|sv)\b",
    "branching on the engine name": r"\.engine\s*(==|!=|\bin\b)",
    "cached-property seeding": r"__dict__",
}


@pytest.mark.parametrize("path", CONSUMERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_views_report_and_widgets_never_ask_for_the_engine(path):
    text = path.read_text(encoding="utf-8")
    found = {name: [n for n, line in enumerate(text.splitlines(), 1) if re.search(rx, line)]
             for name, rx in ENGINE_CHECKS.items()}
    assert not {k: v for k, v in found.items() if v}, path


def test_the_consumers_are_all_scanned():
    names = {str(p.relative_to(ROOT)) for p in CONSUMERS}
    assert {"kqlab/reporting.py", "kqlab/viz/_figures.py", "kqlab/widgets/_explorer.py",
            "kqlab/widgets/_workbench.py", "kqlab/widgets/_common.py"} <= names


def test_the_verdict_core_names_nothing_of_the_views():
    for path in sorted((ROOT / "kqlab" / "validate").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"kqlab\.viz\._|from kqlab\.viz|_viz_aggregates", text), path
        assert not re.search(r"\b_codes\b", text), path  # no side channel on the verdicts
