"""``kqlab dlq inspect`` and ``kqlab dlq redrive`` on the embedded broker: one JSON document
with ``--json`` (before or after the command), tables for people, the exit statuses (0 done,
1 a redriven record was not delivered — sent by the next run, 2 a wrong request)."""

from __future__ import annotations

import json

import pytest

from kqlab.cli import main
from tests.dlq.conftest import NOW, gate_dead_letter, read_all

POLICY = """kqlab: 1
name: orders-v2
value: {format: json}
rules:
- {id: amount-positive, kind: field_range, field: amount, min: 0.01}
"""


@pytest.fixture(scope="module")
def setup(kafka, tmp_path_factory):
    kafka.create_topic("cli.orders", partitions=2)
    kafka.create_topic("cli.orders.dlq", partitions=1)
    letters = [gate_dead_letter(i, source="cli.orders", amount=-1 if i % 4 == 0 else 5)
               for i in range(20)]
    letters.append({"key": b"big", "value": b'{"amount": 5, "pad": "' + b"x" * 5000 + b'"}',
                    "timestamp": NOW, "headers": gate_dead_letter(99, source="cli.orders")
                    ["headers"][1:]})
    letters.append({"key": None, "value": b"?"})  # no failure headers
    kafka.produce("cli.orders.dlq", letters)
    policy = tmp_path_factory.mktemp("cli") / "orders-v2.yaml"
    policy.write_text(POLICY)
    return kafka.bootstrap, str(policy)


def test_inspect_json_and_tables(setup, capsys):
    bootstrap, _ = setup
    assert main(["dlq", "inspect", "cli.orders.dlq", "--bootstrap", bootstrap, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["records"] == 22
    assert doc["by_family"]["kqlab"] == 21 and doc["by_family"]["none"] == 1
    assert doc["unknown_reason"]["records"] == 1
    assert {r["reason"] for r in doc["by_reason"]} == {"amount-positive", "unknown reason"}
    assert main(["dlq", "--json", "inspect", "cli.orders.dlq", "--bootstrap", bootstrap]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 22
    assert main(["dlq", "inspect", "cli.orders.dlq", "--bootstrap", bootstrap]) == 0
    out = capsys.readouterr().out
    assert "by reason" in out and "amount-positive" in out and "unknown reason: 1" in out


def test_redrive_dry_run_execute_a_refused_record_and_wrong_requests(setup, capsys, tmp_path):
    bootstrap, policy = setup
    log = str(tmp_path / "cli.jsonl")
    base = ["dlq", "redrive", "cli.orders.dlq", "--bootstrap", bootstrap, "--policy", policy,
            "--now", str(NOW), "--log", log]
    assert main([*base]) == 0
    out = capsys.readouterr().out
    assert "DRY RUN" in out and "would redrive 16" in out
    # the producer refuses the 5 KB record (message.max.bytes): exit 1, the rest is sent
    assert main([*base, "--execute", "--json", "--config", "message.max.bytes=2000"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["delivered"] == 15 and len(doc["failed"]) == 1
    assert "MSG_SIZE_TOO_LARGE" in doc["failed"][0]["error"]
    assert doc["stay"]["by_why"] == {"fails": 5, "no-target": 1, "failed": 1}
    # the next run sends the refused one, and only it
    assert main([*base, "--execute", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["delivered"] == 1 and doc["stay"]["by_why"]["redriven"] == 15
    assert read_all(bootstrap, "cli.orders").num_rows == 16
    # wrong requests: exit 2, one line on stderr
    assert main([*base, "--to", "no-such-topic"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["dlq", "inspect", "no-such.dlq", "--bootstrap", bootstrap]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("kqlab: 1\nname: x\nrules: []\n")
    assert main(["dlq", "redrive", "cli.orders.dlq", "--bootstrap", bootstrap, "--policy",
                 str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
