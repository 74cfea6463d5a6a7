"""Issue 30, item 1: a field or header that no record of the sample has, and a rule whose
every evaluation errors, are said by every command that replays (with the nearest name seen
and how many records were looked at), from the one place the replay computes them (the
verdicts' rule table); ``--strict`` / ``strict: true`` make them an error for CI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kqlab.cli import main
from kqlab.cli._common import EXIT_FINDING, EXIT_OK

NOW = 1_763_700_000_000


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo partition and a copy of the demo policy with three typos: a field kind's
    field, a CEL field and a header name."""
    from kqlab.sources.demo import demo_policy_path, write_demo_segment

    root = tmp_path_factory.mktemp("health")
    folder = write_demo_segment(root, NOW)
    text = demo_policy_path().read_text(encoding="utf-8")
    typo = (text.replace("field: amount\n", "field: amuont\n", 1)
            .replace("value.currency == 'EUR'", "value.curency == 'EUR'")
            .replace("  name: trace-id\n", "  name: trace-idd\n", 1))
    assert typo.count("amuont") == 1 and "curency" in typo and "trace-idd" in typo
    policy = root / "typo.yaml"
    policy.write_text(typo, encoding="utf-8")
    return folder, policy


def _rules(out: str) -> dict[str, dict]:
    return {r["rule"]: r for r in json.loads(out)["by_rule"]}


def test_replay_names_unseen_fields_and_broken_rules(demo, capsys):
    folder, policy = demo
    assert main(["replay", str(folder), "--policy", str(policy), "--now", str(NOW),
                 "--json"]) == EXIT_OK
    doc_out = capsys.readouterr().out
    rules = _rules(doc_out)
    amount = rules["amount-positive"]
    assert amount["failed_records"] == 0
    assert amount["unseen"] == [{"what": "field", "name": "amuont", "nearest": "amount",
                                 "looked_at": amount["judged_records"]}]
    assert amount["judged_records"] > 300 and not amount["broken"]
    eur = rules["eur-only"]
    assert eur["broken"] and eur["evaluation_errors"] == eur["judged_records"] > 300
    assert eur["unseen"][0]["name"] == "curency" and eur["unseen"][0]["nearest"] == "currency"
    trace = rules["trace-id"]
    assert trace["unseen"][0]["what"] == "header"
    assert trace["unseen"][0]["nearest"] == "trace-id"
    assert trace["unseen"][0]["looked_at"] == trace["judged_records"]
    assert rules["status-known"]["unseen"] == [] and not rules["status-known"]["broken"]
    texts = [f["text"] for f in json.loads(doc_out)["rule_findings"]]
    assert any("'amuont'" in t and "did you mean 'amount'" in t for t in texts)
    # for people: the rule rows say it, and the lines say it (warnings: exit 0)
    assert main(["replay", str(folder), "--policy", str(policy), "--now", str(NOW)]) \
        == EXIT_OK
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("amount-positive "))
    assert "unseen field" in row
    assert f"warning: rule amount-positive: field 'amuont' is in none of the " \
        f"{amount['judged_records']:,} decoded records looked at — did you mean 'amount'?" in out
    assert "rule eur-only is broken: every one of its" in out
    # for CI: --strict makes them an error
    assert main(["replay", str(folder), "--policy", str(policy), "--now", str(NOW),
                 "--strict"]) == EXIT_FINDING
    assert "error: rule amount-positive" in capsys.readouterr().out


def test_the_demo_policy_has_no_findings(demo, capsys):
    from kqlab.sources.demo import demo_policy_path

    folder, _ = demo
    assert main(["replay", str(folder), "--policy", str(demo_policy_path()), "--now",
                 str(NOW), "--strict", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["rule_findings"] == []


def test_strict_policy_key_fails_the_replay(demo, capsys, tmp_path):
    folder, policy = demo
    strict = tmp_path / "strict.yaml"
    strict.write_text(policy.read_text(encoding="utf-8") + "strict: true\n", encoding="utf-8")
    assert main(["replay", str(folder), "--policy", str(strict), "--now", str(NOW)]) \
        == EXIT_FINDING
    capsys.readouterr()


def test_streamed_and_whole_replays_agree_on_the_rule_table(demo):
    """A log replayed chunk by chunk merges its chunks' findings into the same table as the
    whole sample replayed at once (one merge, :func:`merge_rule_rows`)."""
    from kqlab.policy import load_policy
    from kqlab.validate import replay
    from kqlab.validate.stream import replay_stream

    folder, policy_path = demo
    policy = load_policy(policy_path)
    whole = replay(folder, policy, now=NOW)
    streamed = replay_stream(folder, policy, now=NOW, chunk_batches=7)
    assert streamed.rules.to_pylist() == whole.rules.to_pylist()
    assert any(r["unseen"] for r in whole.rules.to_pylist())


def test_unseen_python_objects_and_nested_paths():
    """Values kept as Python objects (mixed types) and nested paths: the first step no record
    has is named, with the path to it."""
    import numpy as np
    import pyarrow as pa

    from kqlab.policy.model import Format, Rule
    from kqlab.records import RECORDS_SCHEMA
    from kqlab.validate.context import EvalContext
    from kqlab.validate.rule_health import referenced, unseen_names

    values = [b'{"customer": {"id": 1}, "n": 1}', b'{"customer": {"id": 2}, "n": "x"}']
    rows = [{"topic": "t", "partition": 0, "offset": i, "timestamp": 0, "batch_offset": 0,
             "batch_index": i, "headers": [], "value": v} for i, v in enumerate(values)]
    ctx = EvalContext(pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA), 0,
                      value_format=Format(format="json"))
    rule = Rule(id="c", kind="cel", params={"expr": "value.customer.idd > 0 && "
                                                    "value.n != null"})
    assert referenced(rule) == [("field", ("customer", "idd")), ("field", ("n",))]
    found = unseen_names(ctx, rule, np.zeros(2, dtype=bool))
    assert [(u.name, u.nearest, u.looked_at) for u in found] == \
        [("customer.idd", "customer.id", 2)]


def test_report_and_suggest_say_the_same(demo, capsys, tmp_path):
    """The report and suggest read the same rule table: the same finding texts, and
    --strict fails them too."""
    folder, policy = demo
    assert main(["replay", str(folder), "--policy", str(policy), "--now", str(NOW),
                 "--json"]) == EXIT_OK
    expected = [f["text"] for f in json.loads(capsys.readouterr().out)["rule_findings"]]
    assert main(["report", str(folder), "--policy", str(policy), "--now", str(NOW),
                 "--out", str(tmp_path / "r.html")]) in (EXIT_OK, EXIT_FINDING)
    err = capsys.readouterr().err
    assert [line.split(": ", 2)[2] for line in err.splitlines()
            if line.startswith("kqlab report: warning: ")] == expected
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "did you mean &#x27;amount&#x27;" in html or "did you mean 'amount'" in html
    assert main(["suggest", str(folder), "--policy", str(policy), "--now", str(NOW),
                 "--strict", "--json"]) == EXIT_FINDING
    doc = json.loads(capsys.readouterr().out)
    assert [f["text"] for f in doc["rule_findings"]] == expected
    assert Path(policy).exists()


def test_report_exit_status_follows_its_verdict(demo, capsys, tmp_path):
    """Issue 30, item 4: FAIL exits 1, PASS 0; the headline's "refused most by" counts what
    the Top failures table counts (records that failed it themselves) and both say that
    collateral is not included."""
    from kqlab.sources.demo import demo_policy_path

    folder, _ = demo
    out = tmp_path / "v.html"
    args = ["report", str(folder), "--policy", str(demo_policy_path()), "--now", str(NOW),
            "--out", str(out)]
    assert main(args) == EXIT_FINDING
    printed = capsys.readouterr().out
    assert "FAIL: it refuses" in printed
    assert main([*args, "--max-reject-rate", "100%"]) == EXIT_OK
    assert "PASS: " in capsys.readouterr().out
    assert main([*args, "--json"]) == EXIT_FINDING
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    from kqlab.policy import load_policy
    from kqlab.validate import replay

    v = replay(folder, load_policy(demo_policy_path()), now=NOW)
    culprits = {r["reason"]: r["culprit"] for r in v.by_reason().to_pylist()}
    assert verdict["top"] and all(t["records"] == culprits[t["reason"]] and
                                  t["collateral_included"] is False for t in verdict["top"])
    assert verdict["collateral"] == v.by_outcome()["collateral"] > 0
    html = out.read_text(encoding="utf-8")
    assert "collateral not included" in html
    assert "collateral (records refused only because a sibling in their batch failed) " \
        "is not included" in html


def _texts(doc: dict) -> list[str]:
    return [f["text"] for f in doc["rule_findings"]]


def test_whatif_export_and_test_say_the_same(demo, capsys, tmp_path):
    """whatif, export --sample and test (the golden examples' replay) read their replay's
    rule table like replay does; --strict fails each."""
    folder, policy = demo
    assert main(["replay", str(folder), "--policy", str(policy), "--now", str(NOW),
                 "--json"]) == EXIT_OK
    expected = _texts(json.loads(capsys.readouterr().out))
    assert len(expected) == 4  # amuont, curency (unseen + broken), trace-idd
    assert main(["whatif", str(policy), "--sample", str(folder), "--now", str(NOW),
                 "--point", "kip-940", "--json"]) == EXIT_OK
    assert _texts(json.loads(capsys.readouterr().out)) == expected
    assert main(["whatif", str(policy), "--sample", str(folder), "--now", str(NOW),
                 "--point", "kip-940", "--strict", "--json"]) == EXIT_FINDING
    capsys.readouterr()
    assert main(["export", str(policy), "--target", "odcs", "--sample", str(folder),
                 "--now", str(NOW), "--out", str(tmp_path / "x"), "--strict", "--json"]) \
        == EXIT_FINDING
    assert _texts(json.loads(capsys.readouterr().out)) == expected
    # the golden examples are a sample too: no example record has amuont or curency
    assert main(["test", str(policy), "--now", str(NOW), "--json"]) == EXIT_FINDING
    captured = capsys.readouterr()
    texts = _texts(json.loads(captured.out))
    assert any("field 'amuont' is in none of the" in t for t in texts)
    assert "kqlab test: warning: rule amount-positive: field 'amuont'" in captured.err


def test_evaluation_errors_are_a_status_in_records_parquet(demo, capsys, tmp_path):
    """Issue 30, item 3: every errored record is in records.parquet with its failure's
    status ``error`` (not a false), and the count equals the rule table's."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from kqlab.sources.demo import demo_policy_path

    folder, typo = demo
    for policy, rule in ((demo_policy_path(), "eur-only"), (typo, "eur-only")):
        out = tmp_path / Path(policy).stem
        assert main(["replay", str(folder), "--policy", str(policy), "--now", str(NOW),
                     "--out", str(out), "--json"]) == EXIT_OK
        errors = _rules(capsys.readouterr().out)[rule]["evaluation_errors"]
        flat = pc.list_flatten(pq.read_table(out / "records.parquet").column("failures"))
        mine = flat.filter(pc.equal(pc.struct_field(flat, "rule"), rule)).to_pylist()
        errored = [f for f in mine if dict(f["params"] or []).get("status") == "error"]
        assert errors >= 1 and len(errored) == errors
        assert all(f["message"].startswith(f"evaluation error in rule {rule}: ")
                   for f in errored)
        assert all("non-EUR order" not in f["message"] for f in errored)


def test_the_workbench_rule_row_says_it(demo):
    """The editor's rule row reads the same finding (no green '0 failed'), and an edit that
    fixes the field clears it."""
    from kqlab.policy import load_policy
    from kqlab.validate import Replayer
    from kqlab.widgets import PolicyEditor

    folder, policy_path = demo
    editor = PolicyEditor(Replayer(folder, now=NOW), load_policy(policy_path))
    row = editor.rows["amount-positive"]["count"].value
    assert "field &#x27;amuont&#x27; is in none of the" in row and "0 failed" not in row
    assert "did you mean &#x27;amount&#x27;" in row
    assert editor.session.rule_findings["amount-positive"][0].startswith(
        "rule amount-positive: field 'amuont'")
    editor.update_rule("amount-positive", params={"field": "amount", "min": 0.01})
    fixed = editor.rows["amount-positive"]["count"].value
    assert "failed" in fixed and "amuont" not in fixed
    assert editor.session.rule_findings["amount-positive"] == []


def test_workbench_takes_paths(demo, tmp_path):
    """Issue 30, item 8: kqlab.Workbench('data/orders-0', 'policy.yaml') — str and Path —
    works; anything else fails with one line naming what to pass."""
    import kqlab
    from kqlab.widgets import EditError

    folder, policy_path = demo
    for src, pol in ((str(folder), str(policy_path)), (Path(folder), Path(policy_path))):
        wb = kqlab.Workbench(src, pol)
        assert wb.session.policy.name == "orders-quality"
        assert wb.session.verdicts is not None and wb.session.verdicts.count()[0] == 352
    with pytest.raises(EditError, match=r"pass 'policy\.yaml'"):
        kqlab.Workbench(str(folder), 42)
