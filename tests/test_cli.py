"""The ``kqlab`` command line: inspect (dump, --records, --validate, --json) and demo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kqlab.cli import main
from kqlab.kafka.builder import BatchBuilder, Record, rewrite_header
from kqlab.kafka.compression import Codec

NOW = 1_700_000_000_000


def _segment(tmp_path: Path) -> Path:
    """orders-3/00000000000000000000.log: good, no-key, stale-CRC batches and a torn tail."""
    folder = tmp_path / "orders-3"
    folder.mkdir()
    batches = []
    b = BatchBuilder(base_offset=0, base_timestamp=NOW, codec=Codec.LZ4)
    b.append(Record(key=b"k1", value=b"v1", headers=(("h", b"x"), ("h", None))))
    b.append(Record(key=b"k2", value=None))
    batches.append(b.build())
    b = BatchBuilder(base_offset=2, base_timestamp=NOW)
    b.append(Record(key=None, value=b"no key"))
    batches.append(b.build())
    b = BatchBuilder(base_offset=3, base_timestamp=NOW)
    b.append(Record(key=b"k4", value=b"v4"))
    batches.append(rewrite_header(b.build(), fix_crc=False, last_offset_delta=7))
    data = b"".join(batches) + batches[0][:20]
    (folder / "00000000000000000000.log").write_bytes(data)
    return folder


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1, "--json prints exactly one document"
    return json.loads(out)


def test_inspect_json_dumps_every_batch_and_the_torn_tail(tmp_path, capsys):
    doc = _json(capsys, ["inspect", str(_segment(tmp_path)), "--json"])
    assert (doc["topic"], doc["partition"]) == ("orders", 3)
    assert [b["batch_offset"] for b in doc["batches"]] == [0, 2, 3]
    assert [b["compression"] for b in doc["batches"]] == ["lz4", "none", "none"]
    assert [b["crc_valid"] for b in doc["batches"]] == [True, True, False]
    assert doc["batches"][0]["last_offset"] == 1
    assert [i["kind"] for i in doc["issues"]] == ["truncated_tail"]
    assert doc["totals"]["records"] == 4 and doc["totals"]["crc_invalid"] == 1
    assert "records" not in doc["batches"][0]


def test_inspect_records_lists_sizes_and_headers(tmp_path, capsys):
    doc = _json(capsys, ["inspect", str(_segment(tmp_path)), "--records", "--json"])
    recs = doc["batches"][0]["records"]
    assert [(r["offset"], r["key_size"], r["value_size"]) for r in recs] == [(0, 2, 2), (1, 2, -1)]
    assert recs[0]["headers"] == [{"key": "h", "value_size": 1}, {"key": "h", "value_size": -1}]
    assert recs[0]["timestamp"] == NOW


def test_inspect_validate_reports_broker_verdicts(tmp_path, capsys):
    doc = _json(capsys, ["inspect", str(_segment(tmp_path)), "--validate", "--json",
                         "--config", "cleanup.policy=compact", "--now", str(NOW)])
    verdicts = [b["verdict"] for b in doc["batches"]]
    assert [v["error_name"] for v in verdicts] == ["NONE", "INVALID_RECORD", "CORRUPT_MESSAGE"]
    assert verdicts[1]["record_errors"] == [{
        "batch_index": 0,
        "message": "Compacted topic cannot accept message without key in topic partition "
                   "orders-3"}]
    assert verdicts[2]["check"] == "C3" and verdicts[2]["error_message"] is None
    assert doc["totals"]["rejected_batches"] == 2
    assert doc["totals"]["by_error"] == {"CORRUPT_MESSAGE": 1, "INVALID_RECORD": 1}


def test_inspect_text_output_reads_like_dump_log(tmp_path, capsys):
    assert main(["inspect", str(_segment(tmp_path)), "--records", "--validate", "--now",
                 str(NOW), "--config", "message.timestamp.after.max.ms=0"]) == 0
    out = capsys.readouterr().out
    assert "baseOffset: 0 lastOffset: 1 count: 2" in out
    assert "isvalid: false" in out
    assert "| offset: 1 CreateTime: 1700000000000 keySize: 2 valueSize: -1" in out
    assert "verdict: CORRUPT_MESSAGE (2) at C3" in out
    assert "issue: truncated_tail" in out


def _shared_base_offsets(tmp_path: Path, undecodable: bool) -> Path:
    """orders-0 where batches share base offsets: a batch rewritten at offset 0 (two records,
    then three others) and, at offset 2, the valid batch that replaced an undecodable one
    (unknown codec: no records) when ``undecodable``."""
    folder = tmp_path / "orders-0"
    folder.mkdir()
    batches = []
    for keys in ([b"a", b"aa"], [b"bbbbb", b"bbbbbb", b"bbbbbbb"]):
        b = BatchBuilder(base_offset=0, base_timestamp=NOW)
        for k in keys:
            b.append(Record(key=k, value=b"v" * len(k)))
        batches.append(b.build())
    if undecodable:
        b = BatchBuilder(base_offset=2, base_timestamp=NOW)
        b.append(Record(key=b"cccc", value=b"c"))
        batches.append(rewrite_header(b.build(), attributes=7))  # compression id 7
    b = BatchBuilder(base_offset=2, base_timestamp=NOW)
    b.append(Record(key=b"ddddddddd", value=b"d"))
    batches.append(b.build())
    (folder / "00000000000000000000.log").write_bytes(b"".join(batches))
    return folder


@pytest.mark.parametrize("undecodable", [False, True])
def test_inspect_records_of_batches_sharing_a_base_offset(tmp_path, capsys, undecodable):
    """Each batch lists only the records decoded from it, even when its base offset repeats."""
    folder = _shared_base_offsets(tmp_path, undecodable)
    want = [[(0, 1), (1, 2)], [(0, 5), (1, 6), (2, 7)], *([[]] if undecodable else []),
            [(2, 9)]]
    doc = _json(capsys, ["inspect", str(folder), "--records", "--json"])
    assert [b["batch_offset"] for b in doc["batches"]] == [0, 0, *([2] if undecodable else []), 2]
    assert [[(r["offset"], r["key_size"]) for r in b["records"]]
            for b in doc["batches"]] == want
    if undecodable:
        assert "Unknown compression type id 7" in doc["batches"][2]["decode_error"]

    assert main(["inspect", str(folder), "--records"]) == 0
    lines = capsys.readouterr().out.splitlines()
    batch_lines = [i for i, line in enumerate(lines) if line.startswith("baseOffset: ")]
    assert len(batch_lines) == len(want)
    shown = []
    for start, end in zip(batch_lines, [*batch_lines[1:], len(lines)], strict=True):
        shown.append([int(line.split("keySize: ")[1].split()[0]) for line in lines[start:end]
                      if line.startswith("| offset: ")])
    assert shown == [[k for _, k in batch] for batch in want]


@pytest.mark.parametrize(("argv", "needle"), [
    (["inspect", "{tmp}/missing"], "no such file or directory"),
    (["inspect", "{tmp}", "--validate", "--config", "cleanup.polcy=compact"],
     "did you mean 'cleanup.policy'"),
    (["inspect", "{tmp}", "--validate", "--config", "novalue"], "write it as KEY=VALUE"),
    (["inspect", "{tmp}", "--config", "cleanup.policy=compact"], "only apply with --validate"),
    (["inspect", "{tmp}", "--validate", "--broker-version", "1.1"], "predates KIP-467"),
])
def test_bad_requests_exit_2_with_one_clear_line(tmp_path, capsys, argv, needle):
    folder = _segment(tmp_path)
    argv = [a.replace("{tmp}", str(folder)) if a.startswith("{tmp}") else a for a in argv]
    argv = [a.replace(str(folder) + "/missing", str(tmp_path / "missing")) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_empty_folder_is_a_clear_error(tmp_path, capsys):
    assert main(["inspect", str(tmp_path)]) == 2
    assert "holds no *.log segment files" in capsys.readouterr().err


def test_demo_json_shows_every_planted_fault(capsys):
    doc = _json(capsys, ["demo", "--json", "--now", str(NOW)])
    # broker faults (one of each) plus the policy's content faults (INVALID_RECORD, check P)
    assert doc["verdicts"] == {"CORRUPT_MESSAGE": 1, "INVALID_RECORD": 6,
                               "INVALID_TIMESTAMP": 2, "MESSAGE_TOO_LARGE": 1, "NONE": 51,
                               "OUT_OF_ORDER_SEQUENCE_NUMBER": 1}
    assert set(doc["codecs"]) == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert [i["kind"] for i in doc["issues"]] == ["truncated_tail"]
    checks = sorted(r["check"] for r in doc["rejections"])
    assert checks == ["C2", "C3", "F4", "P", "P", "P", "P", "P", "R3", "R4", "R4"]
    assert doc["rejected_by_reason"] == {
        "broker:R4": 13, "broker:F4": 7, "broker:R3": 1, "broker:C3": 7, "trace-id": 1, "json": 1,
        "status-known": 1, "amount-positive": 1, "has-currency": 1, "broker:C2": 1}
    s = doc["summary"]
    assert s["outcomes"] == {"accepted": 295, "rejected": 34, "collateral": 23}
    rules = {r["rule"]: (r["mode"], r["failed_records"]) for r in s["by_rule"]}
    assert rules["eur-only"] == ("observe", 2) and rules["trace-id"] == ("reject", 2)


def test_replay_cli_text_json_and_parquet(tmp_path, capsys):
    import pyarrow.parquet as pq

    from kqlab.sources.demo import demo_policy_path, write_demo_segment

    folder = write_demo_segment(tmp_path, NOW)
    policy = str(demo_policy_path())
    out = tmp_path / "out"
    doc = _json(capsys, ["replay", str(folder), "--policy", policy, "--now", str(NOW),
                         "--json", "--out", str(out)])
    assert doc["outcomes"] == {"accepted": 295, "rejected": 34, "collateral": 23}
    assert doc["profile"] == "kip-940" and doc["framing"] == "exact"
    assert pq.read_table(out / "records.parquet").num_rows == 352
    assert pq.read_table(out / "batches.parquet").num_rows == 62
    assert {"summary.json", "rules.parquet"} <= {p.name for p in out.iterdir()}
    assert main(["replay", str(folder), "--policy", policy, "--now", str(NOW),
                 "--profile", "kip-686"]) == 0
    text = capsys.readouterr().out
    assert "policy orders-quality (kip-686, framing exact)" in text
    assert "POLICY_VIOLATION" in text and "would be lost" in text


def test_replay_cli_bad_policy_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "p.yaml"
    bad.write_text("kqlab: 1\nname: x\nrules:\n  - {id: a, kind: key_requird}\n")
    assert main(["replay", str(tmp_path), "--policy", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "p.yaml:4" in err and "key_required" in err and err.count("\n") == 1


def test_console_script_runs(tmp_path):
    folder = _segment(tmp_path)
    out = subprocess.run([sys.executable, "-m", "kqlab.cli", "inspect", str(folder), "--json"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["totals"]["batches"] == 3


def test_replay_vet_writes_provenance_that_round_trips(tmp_path, capsys):
    from kqlab.policy import diff, load_policy
    from kqlab.sources.demo import demo_policy_path, write_demo_segment

    folder = write_demo_segment(tmp_path, NOW)
    vetted = tmp_path / "vetted.yaml"
    assert main(["replay", str(folder), "--policy", str(demo_policy_path()), "--now", str(NOW),
                 "--vet", str(vetted)]) == 0
    assert "vetted policy (with provenance) written to" in capsys.readouterr().out
    original = load_policy(str(demo_policy_path()))
    got = load_policy(str(vetted))
    p = got.provenance
    assert (p.records, p.batches, p.rejected_records) == (352, 62, 34)
    assert p.content_hash == original.content_hash() == got.content_hash()
    from kqlab.policy.model import thaw

    assert thaw(p.sample["partitions"]) == [{"topic": "orders", "partition": 0,
                                             "offsets": [0, 351]}]
    assert p.sample["now"] == NOW and p.sample["framing"] == "exact"
    assert not diff(original, got)  # provenance is not content


def test_snapshot_cli_then_replay_the_snapshot(tmp_path, capsys):
    from kqlab.sources.demo import demo_policy_path, write_demo_segment

    folder = write_demo_segment(tmp_path, NOW)
    meta = _json(capsys, ["snapshot", str(folder), str(tmp_path / "snap"), "--json"])
    assert (meta["topic"], meta["num_records"], meta["num_batches"]) == ("orders", 352, 62)
    assert meta["framing"] == "exact"
    assert main(["snapshot", str(folder), str(tmp_path / "snap")]) == 2  # no silent overwrite
    assert "snap" in capsys.readouterr().err
    doc = _json(capsys, ["replay", str(tmp_path / "snap"), "--policy", str(demo_policy_path()),
                         "--now", str(NOW), "--json"])
    assert doc["outcomes"] == {"accepted": 295, "rejected": 34, "collateral": 23}


def test_demo_topics_finds_every_planted_defect_and_round_trips_the_broker(capsys):
    doc = _json(capsys, ["demo", "--topics", "--json", "--now", str(NOW)])
    assert doc["all_found"] is True
    assert {r["defect"] for r in doc["ground_truth"]} >= {"orders.missing_key", "clicks.bad_crc"}
    assert all(r["expected"] > 0 and r["found"] == r["expected"] for r in doc["ground_truth"])
    for topic, r in doc["broker"].items():
        assert r["sampled"] == r["produced"] > 0, topic
        assert sum(r["outcomes"].values()) == r["sampled"]


def test_every_command_takes_json():
    """``--json`` is the same option on every command (scripts rely on it)."""
    import argparse

    from kqlab.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [name for name, p in sub.choices.items()
               if "--json" not in {o for a in p._actions for o in a.option_strings}]
    assert missing == []


def test_gate_json_and_json_metrics_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["gate", "--bootstrap", "127.0.0.1:1", "--json", "--json-metrics"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_gate_json_prints_one_document_with_the_final_metrics(tmp_path):
    """``kqlab gate --json`` on the embedded broker: SIGTERM once every record was judged;
    stdout holds exactly one JSON document, the final metrics."""
    import signal
    import time
    import urllib.request

    from kqlab.embedded import broker, free_port

    policy = tmp_path / "p.yaml"
    policy.write_text("kqlab: 1\nname: short\nrules:\n  - {id: short, kind: value_size, max: 4}\n")
    port = free_port()
    with broker() as b:
        for topic in ("g.raw", "g.valid", "g.dlq"):
            b.create_topic(topic, partitions=1)
        b.produce("g.raw", [{"value": v, "partition": 0, "timestamp": NOW}
                            for v in (b"ok", b"fine", b"too long", b"x", b"far too long")])
        gate = subprocess.Popen(
            [sys.executable, "-m", "kqlab.cli", "gate", "--policy", str(policy), "--source",
             "g.raw", "--sink", "g.valid", "--dlq", "g.dlq", "--bootstrap", b.bootstrap,
             "--group", "cli-json", "--log-interval", "0", "--health-port", str(port),
             "--now", str(NOW), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            judged = 0
            while judged < 5 and gate.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics.json",
                                                timeout=1) as r:
                        judged = json.loads(r.read())["records"]
                except OSError:
                    pass
            gate.send_signal(signal.SIGTERM)
            out, err = gate.communicate(timeout=60)
        finally:
            if gate.poll() is None:
                gate.kill()
    assert gate.returncode == 0, err
    assert out.count("\n") == 1, out
    doc = json.loads(out)
    assert doc["event"] == "stopped" and doc["state"] == "stopped"
    assert (doc["records"], doc["forwarded"], doc["dead_lettered"]) == (5, 3, 2)
    assert doc["by_rule"] == {"short": 2}
