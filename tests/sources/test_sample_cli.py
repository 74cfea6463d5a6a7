"""``kqlab sample``: a live topic on a real (embedded) broker into a snapshot, then replayed."""

from __future__ import annotations

import json

import pytest

from kqlab.cli import main
from kqlab.embedded import broker

NOW = 1_700_000_000_000


@pytest.fixture(scope="module")
def live():
    with broker() as b:
        b.create_topic("cli-orders", partitions=2)
        b.produce("cli-orders", [
            {"key": f"k{i}".encode() if i % 5 else None, "value": b"v" * (i % 7),
             "headers": [("trace-id", b"t")], "partition": i % 2, "timestamp": NOW + i}
            for i in range(40)])
        yield b


def test_sample_cli_to_snapshot_then_replay(live, tmp_path, capsys):
    out = tmp_path / "snap"
    assert main(["sample", live.bootstrap, "cli-orders", str(out), "--json", "--exact"]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert (meta["topic"], meta["num_records"], meta["framing"]) == ("cli-orders", 40, "exact")
    policy = tmp_path / "p.yaml"
    policy.write_text("kqlab: 1\nname: p\nrules:\n  - {id: key, kind: key_required}\n")
    assert main(["replay", str(out), "--policy", str(policy), "--now", str(NOW), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # 8 records have no key; each rejects the batch it was produced in
    assert doc["by_rule"][0]["failed_records"] == 8
    assert doc["outcomes"]["rejected"] == 8


def test_sample_cli_latest_and_errors(live, tmp_path, capsys):
    assert main(["sample", live.bootstrap, "cli-orders", str(tmp_path / "s"), "--latest", "3",
                 "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["num_records"] == 6 and meta["framing"].startswith("reconstructed")
    assert main(["sample", live.bootstrap, "no-such-topic", str(tmp_path / "x")]) == 2
    assert "no-such-topic" in capsys.readouterr().err
