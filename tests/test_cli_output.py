"""The command line for people and for scripts (issue 16): tables without Python reprs, colour
only on a terminal and never with NO_COLOR, progress on stderr, examples and exit codes in
every --help (and the README), ``replay --fail-over`` for CI, and the CLI bugs: evaluation
errors missing from the summary, ``--out dir/`` printed with a double slash, ``report --out
dir/`` writing a file named ``dir``."""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kqlab.cli import _ui as ui
from kqlab.cli import build_parser, main
from kqlab.cli._common import EXIT_CODES, EXIT_FINDING, EXIT_OK, EXIT_REQUEST

NOW = 1_763_700_000_000
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
README = Path(__file__).resolve().parents[1] / "README.md"


class _Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from kqlab.sources.demo import demo_policy_path, write_demo_segment

    folder = write_demo_segment(tmp_path_factory.mktemp("demo"), NOW)
    return folder, str(demo_policy_path())


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


# -- the bugs --------------------------------------------------------------------------------
def test_replay_summary_shows_each_rules_evaluation_errors(demo, capsys):
    """eur-only (`value.currency == 'EUR'`) raises on the one record of the demo partition
    that decodes without a currency (the undecodable values and tombstones are not its to
    judge, so they are not its evaluation errors): the verdicts' rules table says so, and so
    must the text."""
    folder, policy = demo
    assert main(["replay", str(folder), "--policy", policy, "--now", str(NOW), "--json"]) == 0
    rules = {r["rule"]: r for r in json.loads(capsys.readouterr().out)["by_rule"]}
    assert rules["eur-only"]["evaluation_errors"] == 1
    assert not rules["eur-only"]["broken"] and rules["eur-only"]["judged_records"] > 300
    assert main(["replay", str(folder), "--policy", policy, "--now", str(NOW)]) == 0
    out = capsys.readouterr().out
    assert "evaluation errors" in out
    row = next(line for line in out.splitlines() if line.startswith("eur-only "))
    assert row.split()[-2:] == ["1", "yes"]  # ... evaluation errors, exportable
    assert "evaluation errors: rule eur-only raised an error on 1 record(s)" in out
    clean = next(line for line in out.splitlines() if line.startswith("trace-id "))
    assert clean.split()[-2:] == ["0", "yes"]


def test_inspect_prints_no_python_reprs(demo, capsys):
    folder, _ = demo
    assert main(["inspect", str(folder), "--records", "--validate", "--now", str(NOW),
                 "--config", "cleanup.policy=compact"]) == 0
    out = capsys.readouterr().out
    assert "{'" not in out and "['" not in out and "': " not in out, "a Python repr"
    assert "headerKeys: [source,trace-id]" in out  # as kafka-dump-log prints them
    lines = out.splitlines()
    totals = lines.index("totals")
    assert re.fullmatch(r"batches\s+62", lines[totals + 3].strip())
    assert any(re.fullmatch(r"CORRUPT_MESSAGE\s+1", line.strip()) for line in lines[totals:])
    # the data is in --json
    assert main(["inspect", str(folder), "--validate", "--json", "--now", str(NOW),
                 "--config", "cleanup.policy=compact"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["by_error"]["CORRUPT_MESSAGE"] == 1


def test_out_folder_with_a_trailing_slash_is_printed_with_one(demo, tmp_path, capsys):
    folder, policy = demo
    out = f"{tmp_path / 'verdicts'}/"
    assert main(["replay", str(folder), "--policy", policy, "--now", str(NOW), "--out",
                 out]) == 0
    text = capsys.readouterr().out
    assert f"verdict tables written to {tmp_path / 'verdicts'}/\n" in text
    assert "//" not in text
    assert (tmp_path / "verdicts" / "records.parquet").is_file()
    assert main(["snapshot", str(folder), f"{tmp_path / 'snap'}/"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"snapshot {tmp_path / 'snap'}/: topic orders") and "//" not in text


@pytest.mark.parametrize("how", ["slash", "existing"])
def test_report_out_folder_writes_inside_it(demo, tmp_path, capsys, how):
    """`--out rdir/` (or an existing folder) is a folder: the report goes inside it, named
    after the policy; it used to be written as a file named `rdir`."""
    folder, policy = demo
    rdir = tmp_path / "rdir"
    if how == "existing":
        rdir.mkdir()
    given = f"{rdir}/" if how == "slash" else str(rdir)
    assert main(["report", str(folder), "--policy", policy, "--now", str(NOW), "--out", given,
                 "--json"]) == EXIT_FINDING  # the demo fails the 1 % threshold
    doc = json.loads(capsys.readouterr().out)
    written = rdir / "orders-quality-report.html"
    assert rdir.is_dir() and written.is_file()
    assert doc["report"] == str(written) and doc["bytes"] == written.stat().st_size
    # a file name is still a file name
    assert main(["report", str(folder), "--policy", policy, "--now", str(NOW), "--out",
                 str(tmp_path / "r.html")]) == EXIT_FINDING
    assert (tmp_path / "r.html").is_file()
    assert f"report written to {tmp_path / 'r.html'} (" in capsys.readouterr().out


# -- --fail-over -----------------------------------------------------------------------------
@pytest.mark.parametrize(("threshold", "status"), [("5%", EXIT_FINDING), ("0.2", EXIT_OK),
                                                   ("16%", EXIT_FINDING), ("17%", EXIT_OK)])
def test_fail_over_fails_a_ci_job_above_the_threshold(demo, capsys, threshold, status):
    """The demo replay: 34 rejected + 23 collateral of 352 records (16.19 %) would not be
    appended; the summary's own counts decide."""
    folder, policy = demo
    argv = ["replay", str(folder), "--policy", policy, "--now", str(NOW), "--fail-over",
            threshold]
    assert main([*argv, "--json"]) == status
    doc = json.loads(capsys.readouterr().out)
    o = doc["outcomes"]
    assert doc["fail_over"]["records"] == o["rejected"] + o["collateral"] == 57
    assert doc["fail_over"]["share"] == round(57 / 352, 6)
    assert doc["fail_over"]["exceeded"] is (status == EXIT_FINDING)
    assert main(argv) == status
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("fail-over ") and "57 records (16.19 %) would not be appended" in last
    assert last.endswith("FAIL" if status == EXIT_FINDING else "ok")


@pytest.mark.parametrize("bad", ["150%", "lots", "-0.1"])
def test_fail_over_refuses_what_is_not_a_share(demo, capsys, bad):
    folder, policy = demo
    with pytest.raises(SystemExit) as exc:
        main(["replay", str(folder), "--policy", policy, f"--fail-over={bad}"])
    assert exc.value.code == EXIT_REQUEST
    assert "share" in capsys.readouterr().err


# -- colour, tables, progress ----------------------------------------------------------------
def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    rows = [(ui.styled("rejected", "rejected"), 3)]

    def render(stream: io.StringIO) -> str:
        ui.show(ui.table(("outcome", "records"), rows), out=ui.console(stream))
        return stream.getvalue()

    assert ANSI.search(render(_Terminal())), "a terminal gets colour"
    assert not ANSI.search(render(io.StringIO())), "a pipe gets plain text"
    monkeypatch.setenv("NO_COLOR", "1")
    plain = render(_Terminal())
    assert not ANSI.search(plain) and "rejected" in plain
    monkeypatch.setenv("NO_COLOR", "")  # https://no-color.org: set *and not empty*
    assert ANSI.search(render(_Terminal()))


def test_the_commands_colour_a_terminal_but_not_with_no_color(demo, monkeypatch):
    folder, policy = demo
    argv = ["replay", str(folder), "--policy", policy, "--now", str(NOW)]
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    for env, coloured in ((None, True), ("1", False)):
        if env is not None:
            monkeypatch.setenv("NO_COLOR", env)
        out = _Terminal()
        monkeypatch.setattr(sys, "stdout", out)
        assert main(argv) == 0
        assert bool(ANSI.search(out.getvalue())) is coloured
        assert "would be lost" in ANSI.sub("", out.getvalue())


def test_text_in_brackets_is_printed_not_parsed_as_markup(capsys):
    ui.show(ui.table(("message",), [("[bold]not markup[/bold] [source,trace-id]",)]))
    assert "[bold]not markup[/bold] [source,trace-id]" in capsys.readouterr().out


def test_progress_is_drawn_on_a_terminals_stderr_only(demo, monkeypatch, capsys):
    """With stderr a terminal, replay shows its stages on stderr while stdout keeps exactly
    one JSON document; with stderr a pipe (CI), nothing at all is drawn."""
    folder, policy = demo
    argv = ["replay", str(folder), "--policy", policy, "--now", str(NOW), "--json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.count("\n") == 1
    monkeypatch.delenv("NO_COLOR", raising=False)
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    stages: list[list[str]] = []
    real = ui.Progress.__exit__

    def spy(self, *exc):
        stages.append(self.steps)
        return real(self, *exc)

    monkeypatch.setattr(ui.Progress, "__exit__", spy)
    assert main(argv) == 0
    assert capsys.readouterr().out.count("\n") == 1
    # log segments with exact framing stream: one stage, its bar follows the bytes read and
    # says how many records, how fast and how long is left
    assert stages == [[f"replaying {folder}"]]
    drawn = ANSI.sub("", term.getvalue())
    assert re.search(r"replaying: 352 records, [\d,]+ records/s, 0:00 left", drawn), drawn
    assert "0/?" not in drawn and "/35" not in drawn  # no byte counts beside the bar
    # a rebuilt framing reads the sample whole, stage by stage
    stages.clear()
    term.seek(0)
    term.truncate()
    assert main([*argv, "--framing", "linger"]) == 0
    batches = json.loads(capsys.readouterr().out)["batches"]
    assert stages == [[f"reading {folder}", "evaluating 7 rule(s)",
                       f"broker checks and verdicts ({batches} batches)"]]
    drawn = ANSI.sub("", term.getvalue())
    assert f"broker checks and verdicts ({batches} batches)" in drawn and "0/?" not in drawn


def test_suggest_reports_its_stages_to_the_progress_display(demo, monkeypatch, capsys):
    folder, policy = demo
    seen: list[list[str]] = []
    real = ui.Progress.__exit__

    def spy(self, *exc):
        seen.append(self.steps)
        return real(self, *exc)

    monkeypatch.setattr(ui.Progress, "__exit__", spy)
    assert main(["suggest", str(folder), "--policy", policy, "--now", str(NOW), "--json"]) == 0
    assert seen == [["reading the sample", "measuring the sample",
                     "evaluating the candidate rules",
                     "replaying the policy with the suggestions"]]
    json.loads(capsys.readouterr().out)


def test_suggest_text_is_tables_with_left_out_values_and_duplicates(demo, capsys):
    folder, policy = demo
    assert main(["suggest", str(folder), "--policy", policy, "--now", str(NOW)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("13 suggestion(s) from 352 records replayed")
    assert re.search(r"^suggest\.value_size\s+value_size\s+1\s+1\s+0\.28 %\s+0\s+sample$", out,
                     re.M)
    assert "left out 'USD' (1 record(s)): seen once (fewer than 2 times)" in out
    assert "already in the policy (not proposed again): suggest.header_required.trace-id = " \
           "trace-id" in out
    assert "allow_empty: false" in out and "False" not in out  # YAML words, not Python's


# -- help, exit codes, README ----------------------------------------------------------------
def test_every_command_help_has_examples_and_exit_statuses():
    for name, parser in _subparsers().items():
        text = parser.format_help()
        assert "examples:" in text, name
        examples = text.split("examples:", 1)[1]
        assert f"kqlab {name}" in examples, name
        assert "exit status" in text, name


def test_kqlab_help_prints_the_exit_code_table(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    table = text.split("exit status:\n", 1)[1]
    codes = [int(m) for m in re.findall(r"^  (\d)  ", table, re.M)]
    assert codes == [code for code, _ in EXIT_CODES] == [0, 1, 2, 3]
    flat = " ".join(table.split())
    assert all(" ".join(meaning.split()) in flat for _, meaning in EXIT_CODES)
    assert "NO_COLOR" in text and "--json" in text and "--fail-over" in text


def test_the_readme_documents_the_same_exit_codes():
    text = README.read_text(encoding="utf-8")
    for code, meaning in EXIT_CODES:
        assert f"| {code} | {meaning} |" in text, code
    assert "--fail-over" in text and "NO_COLOR" in text


def test_rich_is_not_imported_by_kqlab_or_the_parser():
    code = ("import sys, kqlab; from kqlab.cli import build_parser; build_parser(); "
            "print('rich' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
