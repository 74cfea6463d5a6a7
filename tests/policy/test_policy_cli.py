"""Every command that takes a policy refuses a broken one before doing anything: exit status 2,
one line on stderr naming the file, line, column and key, no traceback, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kqlab.cli import main

NOW = 1763700000000
ORDERS_SCHEMAS = Path(__file__).parent / "corpus" / "schemas" / "orders"

#: broken policies: (text, where the error is, what the message says)
BROKEN = {
    "cel-syntax": (
        "kqlab: 1\nname: orders\nrules:\n  - id: big\n    kind: cel\n    expr: |\n"
        "      value.amount > 100.0 &&\n        value.qty >) 3\n",
        ":8:20: rules[0].expr: CEL expression does not compile"),
    "undeclared-variable": (
        "kqlab: 1\nname: orders\nrules:\n  - {id: k, kind: key_required, when: 'vlaue != null'}\n",
        ":4:40: rules[0].when: undeclared variable 'vlaue' — did you mean 'value'?"),
    "unknown-field": (
        "kqlab: 1\nname: orders\nvalue: {format: avro, wire: confluent, schemas: {path: "
        "'SCHEMAS'}}\nrules:\n  - {id: a, kind: field_range, field: customer.idd, min: 0}\n",
        ":5:48: rules[0].field: value.customer has no field 'idd'"),
    "regex": (
        "kqlab: 1\nname: orders\nrules:\n  - id: src\n    kind: header_pattern\n    name: source\n"
        "    pattern: '^(?!test-)'\n",
        ":7:16: rules[0].pattern: invalid regular expression '^(?!test-)'"),
}

#: every command that takes a policy, with the rest of a request that would otherwise run
COMMANDS = {
    "replay": lambda p, d: ["replay", str(d / "sample"), "--policy", p, "--now", str(NOW),
                            "--out", str(d / "out")],
    "report": lambda p, d: ["report", str(d / "sample"), "--policy", p, "--now", str(NOW),
                            "--out", str(d / "out" / "report.html")],
    "export": lambda p, d: ["export", p, "--target", "all", "--out", str(d / "out")],
    "test": lambda p, d: ["test", p, "--now", str(NOW)],
    "suggest": lambda p, d: ["suggest", str(d / "sample"), "--policy", p, "--now", str(NOW),
                             "--write", str(d / "out" / "suggested.yaml")],
    "gate": lambda p, d: ["gate", "--policy", p, "--source", "orders-raw", "--sink", "orders",
                          "--dlq", "orders-dlq", "--bootstrap", "127.0.0.1:1"],
    "verify": lambda p, d: ["verify", p, "--contract", str(d / "out" / "contract.yaml")],
}


def _broken(tmp_path: Path, name: str) -> str:
    text, _ = BROKEN[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text.replace("SCHEMAS", str(ORDERS_SCHEMAS)), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    from kqlab.sources.demo import write_demo_segment

    return write_demo_segment(tmp_path_factory.mktemp("demo"), NOW)


@pytest.mark.parametrize("broken", sorted(BROKEN))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_a_broken_policy(command, broken, tmp_path, sample, capsys):
    (tmp_path / "sample").symlink_to(sample, target_is_directory=True)
    policy = _broken(tmp_path, broken)
    assert main(COMMANDS[command](policy, tmp_path)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"kqlab {command}: error: {policy}{BROKEN[broken][1]}"), err
    assert not (tmp_path / "out").exists()  # nothing ran: nothing was written


def test_the_console_script_prints_one_paragraph(tmp_path):
    """The real process: exit status 2 and the one line, no traceback."""
    policy = _broken(tmp_path, "cel-syntax")
    done = subprocess.run([sys.executable, "-m", "kqlab.cli", "test", policy],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"kqlab test: error: {policy}:8:20: rules[0].expr: ")


@pytest.mark.parametrize("command", ["replay", "report", "export", "test"])
def test_a_missing_policy_file_is_one_clear_line(tmp_path, command, capsys):
    from kqlab.cli import main

    missing = tmp_path / "nope.yaml"
    args = {"replay": ["replay", str(tmp_path), "--policy", str(missing)],
            "report": ["report", str(tmp_path), "--policy", str(missing)],
            "export": ["export", str(missing), "--target", "gate", "--out", str(tmp_path)],
            "test": ["test", str(missing)]}[command]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{missing}: no such file" in err and "Traceback" not in err
