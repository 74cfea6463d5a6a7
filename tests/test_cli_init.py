"""``kqlab init`` (issue 30 item 7): a starter policy for one's own topic, from a log folder, a
snapshot or a live topic on the session's real Kafka broker (Confluent-framed Avro through
confluent-kafka's own serializer and its ``mock://`` registry), driven as a user drives it.

One truth: the replay counts ``init`` prints are those ``kqlab replay`` prints for the written
policy on the same sample.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from kqlab.cli import main
from kqlab.kafka.builder import BatchBuilder, Record

NOW = 1_763_700_000_000
STATUSES = ("new", "paid", "shipped")


def _orders(tmp_path: Path, name: str = "orders-0") -> Path:
    """A partition folder: 120 JSON orders (keys ``o-<n>``) and 2 values that are not JSON,
    one record per batch (a rejected record takes no other with it)."""
    folder = tmp_path / name
    folder.mkdir(parents=True)
    values = [orjson.dumps({"id": i, "amount": round(1 + i * 2.5, 2),
                            "status": STATUSES[i % 3]}) for i in range(120)]
    data = b""
    for i, value in enumerate([*values, b"not json", b"// a comment"]):  # a batch each
        b = BatchBuilder(base_offset=i, base_timestamp=NOW + i)
        b.append(Record(key=f"o-{i}".encode(), value=value))
        data += b.build()
    (folder / "00000000000000000000.log").write_bytes(data)
    return folder


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    status, out, err = _run(capsys, argv)
    assert status == 0, err
    assert out.count("\n") == 1, "--json prints exactly one document"
    doc: dict[str, Any] = json.loads(out)
    return doc


def _replayed(capsys: pytest.CaptureFixture[str], sample: str, policy: str) -> dict[str, int]:
    """What ``kqlab replay`` says of ``policy`` on ``sample``."""
    outcomes: dict[str, int] = _json(capsys, ["replay", sample, "--policy", policy,
                                              "--json"])["outcomes"]
    return outcomes


def test_init_on_a_log_folder_writes_a_policy_kqlab_replay_agrees_with(tmp_path, capsys):
    folder = _orders(tmp_path)
    policy = tmp_path / "orders.policy.yaml"
    doc = _json(capsys, ["init", str(folder), "--out", str(policy), "--json"])
    assert doc["source"] == {"kind": "log", "given": str(folder)}
    assert doc["sampled"] is None and doc["sample"] == str(folder)
    assert (doc["topic"], doc["records"], doc["framing"]) == ("orders", 122, "exact")
    assert (doc["key"]["format"], doc["value"]["format"]) == ("string", "json")
    assert doc["value"]["parsed"] == 120 and "2 do not" in doc["value"]["evidence"]
    ids = {r["id"]: r for r in doc["rules"]}
    assert {"amount-range", "status-known", "key-required"} <= set(ids), sorted(ids)
    assert ids["status-known"]["rule"]["values"] == sorted(STATUSES)
    assert all(r["records"] == 122 for r in doc["rules"])
    # the two values that are not JSON fail the implicit decodable rule: rejected, once
    assert doc["outcomes"] == {"accepted": 120, "rejected": 2, "collateral": 0}
    assert _replayed(capsys, str(folder), str(policy)) == doc["outcomes"]
    text = policy.read_text(encoding="utf-8")
    assert "# sample: status: " in text and "replayed on the sample: 0 of 122" in text
    assert doc["next"][0] == f"kqlab replay {folder} --policy {policy}"
    assert doc["next"][1].startswith(f"kqlab report {folder} --policy {policy} --out ")
    assert f"kqlab.Workbench({str(folder.resolve())!r}" in doc["next"][2]


def test_init_prints_formats_rules_replay_and_the_next_commands(tmp_path):
    """As a user runs it: the console script, in a folder of their own, default --out."""
    folder = _orders(tmp_path / "data")
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    run = subprocess.run([sys.executable, "-m", "kqlab.cli", "init", str(folder)], cwd=work,
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"read 122 records of topic orders from {folder}")
    assert "key: string — 122 keys are UTF-8 text" in run.stdout
    assert "value: json — 120 of 122 values parse as JSON objects or arrays; 2 do not" \
        in run.stdout
    assert any(line.startswith("status-known ") and "field_in" in line for line in lines)
    assert "on the sample: 120 accepted, 2 rejected, 0 collateral" in run.stdout
    nxt = lines[lines.index("next:") + 1:]
    assert [n.split()[:2] for n in nxt] == [["kqlab", "replay"], ["kqlab", "report"],
                                             ["jupyter", "lab"]]
    assert (work / "orders.policy.yaml").is_file()


def test_init_refuses_to_replace_a_policy_without_force(tmp_path, capsys, monkeypatch):
    folder = _orders(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert _run(capsys, ["init", str(folder)])[0] == 0
    before = (tmp_path / "orders.policy.yaml").read_bytes()
    assert _run(capsys, ["init", str(folder)]) == (
        2, "", "kqlab init: error: orders.policy.yaml exists: pass --force to replace it, or "
        "--out another file\n")
    assert (tmp_path / "orders.policy.yaml").read_bytes() == before
    status, out, _ = _run(capsys, ["init", str(folder), "--force"])
    assert status == 0 and "orders.policy.yaml" in out


def test_init_on_a_snapshot_and_force(tmp_path, capsys):
    snap = tmp_path / "orders-snap"
    status, _, err = _run(capsys, ["snapshot", str(_orders(tmp_path)), str(snap)])
    assert status == 0, err
    out = tmp_path / "policies"
    out.mkdir()
    (out / "orders.policy.yaml").write_text("kqlab: 1\n", encoding="utf-8")
    status, _, err = _run(capsys, ["init", str(snap), "--out", f"{out}/", "--json"])
    assert status == 2 and "orders.policy.yaml exists: pass --force" in err
    doc = _json(capsys, ["init", str(snap), "--out", f"{out}/", "--force", "--json"])
    assert doc["source"]["kind"] == "snapshot" and doc["topic"] == "orders"
    assert doc["policy"] == str(out / "orders.policy.yaml")
    assert doc["outcomes"] == _replayed(capsys, str(snap), doc["policy"])
    assert doc["outcomes"]["rejected"] == 2


@pytest.mark.parametrize(("argv", "says"), [
    (["nowhere-0"], "nowhere-0: no such file or folder; pass a log folder"),
    (["127.0.0.1:9092"], "looks like a bootstrap: name the topic too, kqlab init "
                         "127.0.0.1:9092 TOPIC"),
    (["{tmp}", "orders"], "is a local path: TOPIC is only for a live topic"),
    (["{tmp}/empty"], "holds no log segments (*.log), no <topic>-<partition> folders"),
    (["{tmp}"], "holds 2 topics (orders, payments): pass one topic's partition folder"),
    (["127.0.0.1:1", "orders", "--timeout", "2"], "127.0.0.1:1"),
])
def test_init_errors_name_what_to_pass(tmp_path, capsys, argv, says):
    _orders(tmp_path), _orders(tmp_path, "payments-0")
    (tmp_path / "empty").mkdir()
    status, out, err = _run(capsys, ["init", *[a.format(tmp=tmp_path) for a in argv],
                                     "--out", str(tmp_path / "p.yaml")])
    assert status == 2 and out == ""
    assert err.startswith("kqlab init: error: ") and err.count("\n") == 1 and says in err
    assert not (tmp_path / "p.yaml").exists()


def test_init_on_a_live_topic_with_confluent_avro_values(kafka_broker, topic_name, tmp_path,
                                                         capsys, monkeypatch):
    """Avro values framed by confluent-kafka's AvroSerializer (its mock registry), sampled
    from the real broker into the default folder beside the policy; an unknown topic and an
    empty one are refused."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from kqlab.serde.schemas import registry_client

    url = f"mock://kqlab-init-{topic_name}"
    schema = json.dumps({"type": "record", "name": "Pay", "fields": [
        {"name": "id", "type": "string"}, {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string"}]})
    ser = AvroSerializer(registry_client(url), schema)
    kafka_broker.create_topic(topic_name, partitions=2)
    # one batch per partition: the last 20 records start inside it
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 200,
                         "batch.size": 1 << 20})
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    for i in range(60):
        producer.produce(topic_name, key=f"p-{i}".encode(), partition=i % 2, value=ser(
            {"id": f"p-{i}", "amount": 10.0 + i, "currency": ("EUR", "USD")[i % 2]}, ctx))
    assert producer.flush(10) == 0
    del producer
    monkeypatch.chdir(tmp_path)
    doc = _json(capsys, ["init", kafka_broker.bootstrap, topic_name, "--registry", url,
                         "--latest", "20", "--json"])
    sample = f"{topic_name}-sample{os.sep}"
    assert doc["source"] == {"kind": "live", "given": kafka_broker.bootstrap,
                             "topic": topic_name}
    sampled = doc["sampled"]
    assert sampled["partitions"] == [0, 1] and sampled["latest"] == 20
    # a partition whose last 20 records begin inside a batch is read from the batch's start
    assert sampled["widened"] and all(int(o) < 10 for o in sampled["widened"].values())
    n = sum(30 - sampled["widened"].get(str(p), 10) for p in (0, 1))
    assert sampled["records"] == doc["records"] == n
    assert doc["sample"] == doc["sampled"]["snapshot"] == sample
    assert (tmp_path / sample / "snapshot.json").is_file()
    assert doc["policy"] == f"{topic_name}.policy.yaml" and doc["framing"] == "exact"
    v = doc["value"]
    assert (v["format"], v["wire"], v["schemas"]) == (
        "avro", "confluent", {"registry": url, "subject": f"{topic_name}-value"})
    assert sum(v["schema_ids"].values()) == n
    ids = {r["id"]: r for r in doc["rules"]}
    assert ids["currency-known"]["rule"]["values"] == ["EUR", "USD"]
    assert ids["amount-range"]["rule"]["field"] == "amount"
    assert doc["outcomes"] == {"accepted": n, "rejected": 0, "collateral": 0}
    assert _replayed(capsys, sample, doc["policy"]) == doc["outcomes"]

    status, _, err = _run(capsys, ["init", kafka_broker.bootstrap, topic_name, "--registry",
                                   url, "--out", "again.yaml"])
    assert status == 2 and f"{topic_name}-sample exists: pass --force" in err
    status, _, err = _run(capsys, ["init", kafka_broker.bootstrap, f"{topic_name}-nope",
                                   "--timeout", "5"])
    assert status == 2 and err.count("\n") == 1
    assert f"topic '{topic_name}-nope' does not exist on {kafka_broker.bootstrap}" in err
    kafka_broker.create_topic(f"{topic_name}-empty")
    status, _, err = _run(capsys, ["init", kafka_broker.bootstrap, f"{topic_name}-empty"])
    assert status == 2 and err == (f"kqlab init: error: topic {topic_name}-empty on "
                                   f"{kafka_broker.bootstrap} holds no records: produce some "
                                   "first, or pass a log folder or a snapshot that has data\n")
    assert not Path(f"{topic_name}-empty.policy.yaml").exists()
    assert not Path(f"{topic_name}-empty-sample").exists()  # a rerun needs no --force
