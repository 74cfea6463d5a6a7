"""Issue 30, item 3: an evaluation error is a status in the verdicts, not a false, and every
errored record is findable — records.parquet (``failures.status``), ``kqlab replay --errors``
and the explorer's "evaluation errors only" filter count the same records as the summary's
``evaluation_errors``, through one query (``RecordQuery(errors=True)``)."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from kqlab.cli import main
from kqlab.cli._common import EXIT_OK

NOW = 1_763_700_000_000


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo partition, the demo policy (eur-only errors on one record, which is refused
    for other reasons) and a copy whose CEL rule reads a field no record has (every
    evaluation errors, on records accepted and refused alike: eur-only observes)."""
    from kqlab.sources.demo import demo_policy_path, write_demo_segment

    root = tmp_path_factory.mktemp("errors")
    folder = write_demo_segment(root, NOW)
    text = demo_policy_path().read_text(encoding="utf-8")
    typo = root / "typo.yaml"
    typo.write_text(text.replace("value.currency == 'EUR'", "value.curency == 'EUR'"),
                    encoding="utf-8")
    return folder, {"demo": demo_policy_path(), "typo": typo}


@pytest.mark.parametrize("which", ["demo", "typo"])
def test_parquet_cli_and_summary_count_the_same_errors(demo, which, capsys, tmp_path):
    folder, policies = demo
    out = tmp_path / "out"
    assert main(["replay", str(folder), "--policy", str(policies[which]), "--now", str(NOW),
                 "--out", str(out), "--errors", "--json"]) == EXIT_OK
    summary = json.loads(capsys.readouterr().out)
    from_summary = {r["rule"]: r["evaluation_errors"] for r in summary["by_rule"]
                    if r["evaluation_errors"]}
    flat = pc.list_flatten(pq.read_table(out / "records.parquet").column("failures"))
    rows = flat.to_pylist()
    assert {r["status"] for r in rows} == {"failed", "error"}
    from_parquet = Counter(r["rule"] for r in rows if r["status"] == "error")
    errored = summary["errored"]
    assert dict(from_parquet) == from_summary == errored["by_rule"]
    assert from_summary["eur-only"] == (1 if which == "demo" else 348)
    assert len(errored["rows"]) == sum(from_summary.values())
    assert errored["records"] == len({(r["partition"], r["offset"]) for r in errored["rows"]})
    # an error reads as one, never as the rule's judgement ("non-EUR order")
    for r in rows:
        if r["status"] == "error":
            assert r["message"].startswith(f"evaluation error in rule {r['rule']}: ")
            assert "Key not found" in r["message"]
        else:
            assert not r["message"].startswith("evaluation error")
    if which == "typo":  # an observe rule's errored records are appended, and still found
        assert Counter(r["outcome"] for r in errored["rows"])["accepted"] > 0


def test_replay_errors_prints_the_errored_records(demo, capsys):
    folder, policies = demo
    assert main(["replay", str(folder), "--policy", str(policies["demo"]), "--now", str(NOW),
                 "--errors"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "evaluation errors: 1 record(s) a rule could not judge (eur-only 1)" in out
    table = out.split("errored records", 1)[1]
    assert "287" in table and 'Key not found in map : "currency"' in table
    assert main(["replay", str(folder), "--policy", str(policies["demo"]), "--now", str(NOW),
                 "--json"]) == EXIT_OK
    assert "errored" not in json.loads(capsys.readouterr().out)  # only when asked


def test_the_explorer_filters_errored_records(demo):
    """The explorer's filter is the same query: its matches equal the summary's count, it
    reaches accepted records, and it keeps a selection only while it matches."""
    from kqlab.policy import load_policy
    from kqlab.validate import Replayer
    from kqlab.widgets import RejectionExplorer

    folder, policies = demo
    replayer = Replayer(folder, now=NOW)
    verdicts = replayer.run(load_policy(policies["typo"]))
    errors = {r["rule"]: r["evaluation_errors"] for r in verdicts.summary()["by_rule"]}
    ex = RejectionExplorer(verdicts, replayer, page_size=50)
    refused = ex.matches
    ex.errors_only.value = True  # the checkbox, as a person ticks it
    assert ex.matches == errors["eur-only"] == 348 and ex.matches > refused
    assert "348 records a rule could not judge" in ex.table.status
    assert {r["outcome"] for r in ex.rows} >= {"accepted"}
    assert ex.set_filter(errors=True, reason="json") == [] and ex.matches == 0
    page = ex.set_filter(errors=True, reason="eur-only")
    assert ex.matches == 348 and all("eur-only" in r["reasons"] for r in page)
    accepted = next(r for r in page if r["outcome"] == "accepted")
    ex.show_record(accepted["partition"], accepted["offset"], topic=accepted["topic"])
    ex.set_filter(errors=True, partition=accepted["partition"])
    assert ex.selected == (accepted["topic"], accepted["partition"], accepted["offset"])
    ex.set_filter()  # every refused record: the accepted one is not among them
    assert ex.matches == refused and ex.selected is None
