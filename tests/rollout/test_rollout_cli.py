"""``kqlab whatif`` and ``kqlab plan``: one JSON document with ``--json`` (the library's own
``to_dict``), tables for people, examples and exit codes in ``--help``, status 2 for a wrong
request; plus the report's optional rollout section and the workbench widget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kqlab.cli import main
from kqlab.cli._common import EXIT_OK, EXIT_REQUEST
from kqlab.rollout import rollout_plan, what_if
from tests.rollout.conftest import AMOUNT, NOW, order, policy, write_log


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """``(policy file, partition folder)``: one bad order in a batch of ten, then five good."""
    from kqlab.policy import dump_policy

    root = tmp_path_factory.mktemp("cli")
    folder = write_log(root / "orders-0", [order(-1 if i == 3 else 5) for i in range(10)],
                       [order(7) for _ in range(5)])
    path = root / "planted.yaml"
    path.write_text(dump_policy(policy(AMOUNT)), encoding="utf-8")
    return str(path), str(folder)


def _json(capsys) -> dict:
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # exactly one document, one line
    return json.loads(out)


def test_whatif_json_is_the_library_document(planted, capsys):
    pol, folder = planted
    assert main(["whatif", pol, "--sample", folder, "--now", str(NOW), "--json"]) == EXIT_OK
    doc = _json(capsys)
    expected = json.loads(json.dumps(what_if(policy(AMOUNT), folder, now=NOW).to_dict()))
    assert doc == expected
    points = {t["point"]: t for t in doc["targets"]}
    assert (points["kip-940"]["counts"]["refused"], points["kip-940"]["counts"]["collateral"]) \
        == (1, 9)
    assert points["gate"]["counts"]["dead_lettered"] == 1


def test_whatif_for_people_and_only_some_points(planted, capsys):
    pol, folder = planted
    assert main(["whatif", pol, "--sample", folder, "--now", str(NOW), "--point", "kip-940",
                 "--point", "kroxylicious"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "kip-940" in out and "kroxylicious" in out and "gate " not in out
    assert "INVALID_RECORD (87)" in out and "cannot express rule amount-positive" in out
    assert "Answer(" not in out and "TargetOutcome(" not in out  # tables, no Python reprs


def test_plan_json_and_out_folder(planted, tmp_path, capsys):
    pol, folder = planted
    out = tmp_path / "rollout"
    assert main(["plan", pol, "--sample", folder, "--now", str(NOW), "--out", str(out),
                 "--json"]) == EXIT_OK
    doc = _json(capsys)
    assert set(doc) >= {"policy", "block_at", "rules", "stages", "breaks_first", "notes",
                        "written"}
    assert [s["kind"] for s in doc["stages"]] == ["observe", "dead-letter", "block", "block"]
    last = doc["stages"][-1]
    assert (last["counts"]["refused"], last["counts"]["collateral"]) == (1, 9)
    assert (out / "plan.json").is_file()
    assert all(Path(p).is_file() for p in doc["written"])
    assert any(p.endswith("gate.yaml") for p in doc["written"])


def test_plan_for_people(planted, capsys):
    pol, folder = planted
    assert main(["plan", pol, "--sample", folder, "--now", str(NOW),
                 "--block-at", "kip-686"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "dead-letter" in out and "amount-positive" in out
    assert "kip-686 not exported" in out  # no exporter for the proposal: said, not hidden


@pytest.mark.parametrize("argv", [
    ["whatif", "{pol}", "--sample", "/no/such/sample"],
    ["plan", "{pol}", "--sample", "/no/such/sample", "--json"],
    ["whatif", "/no/such/policy.yaml", "--sample", "{folder}"],
])
def test_wrong_requests_exit_2_with_one_line(planted, capsys, argv):
    pol, folder = planted
    argv = [a.format(pol=pol, folder=folder) for a in argv]
    assert main(argv) == EXIT_REQUEST
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "error:" in captured.err


@pytest.mark.parametrize("argv", [["whatif", "p.yaml", "--sample", "s", "--point", "nowhere"],
                                  ["plan", "p.yaml", "--sample", "s", "--block-at", "gate"],
                                  ["plan", "p.yaml"]])
def test_bad_options_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == EXIT_REQUEST


@pytest.mark.parametrize("command", ["whatif", "plan"])
def test_help_has_examples_and_exit_statuses(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert f"kqlab {command}" in text.split("examples:", 1)[1]
    assert "exit status" in text and "--json" in text


# -- the report's rollout section and the widget ------------------------------------------
def test_report_gains_the_rollout_section_only_when_asked(planted):
    from kqlab.reporting import report
    from kqlab.validate import replay

    _, folder = planted
    pol = policy(AMOUNT)
    v = replay(folder, pol, now=NOW)
    plain = report(v, pol, plotlyjs="cdn")
    assert report(v, pol, plotlyjs="cdn", rollout=None) == plain
    assert "Staged rollout plan" not in plain
    w = what_if(pol, folder, now=NOW)
    plan = rollout_plan(pol, folder, now=NOW, exports=False)
    text = report(v, pol, plotlyjs="cdn", rollout=(w, plan))
    assert isinstance(text, str)
    assert "What if: per enforcement point" in text and "Staged rollout plan" in text
    assert "kqlab-whatif" in text and "kqlab-rollout-plan" in text
    assert "INVALID_RECORD (87)" in text
    # the rest of the report is unchanged
    head = plain.split("<h2>Rules</h2>")[0]
    assert text.startswith(head)


def test_rollout_view_shows_the_what_if_and_the_plan(planted):
    pytest.importorskip("ipywidgets")
    from kqlab.widgets import ROLLOUT_CSS, RolloutView

    _, folder = planted
    view = RolloutView(policy(AMOUNT), folder, now=NOW)
    assert view.whatif is not None and view.plan is not None
    assert view.whatif.target("gate").counts["dead_lettered"] == 1
    assert "kip-940" in view.whatif_table.value and "dead-letter" in view.plan_table.value
    assert ROLLOUT_CSS["run"] in view.button._dom_classes
    assert {t["type"] for t in view.whatif_figure.to_dict()["data"]} == {"bar"}
    view.block_at.value = "confluent"
    view.button.click()
    assert view.plan.block_at == "confluent"
    assert view.plan.stages[-1].counts["collateral"] == 0  # per record at the serializer
    assert "breaks first" in view.status.value


def test_rollout_view_follows_an_authoring_session(planted):
    pytest.importorskip("ipywidgets")
    from kqlab.authoring import AuthoringSession
    from kqlab.widgets import RolloutView

    _, folder = planted
    session = AuthoringSession(policy(AMOUNT), folder, now=NOW)
    session.replay()
    view = RolloutView(session=session)
    assert view.whatif.target("kip-940").counts["refused"] == 1
    session.set_mode("amount-positive", "observe")  # an edit: the next run sees it
    view.run()
    assert view.whatif.target("kip-940").counts["refused"] == 0
    assert view.plan.breaks_first == []


def test_the_workbench_opens_the_rollout_view_of_its_session(planted):
    pytest.importorskip("ipywidgets")
    from kqlab.widgets import Workbench

    _, folder = planted
    wb = Workbench(folder, policy(AMOUNT), now=NOW)
    view = wb.rollout(block_at="kip-686")
    assert view.session is wb.session and view.plan.block_at == "kip-686"
    assert view.whatif.target("gate").counts["dead_lettered"] == 1
