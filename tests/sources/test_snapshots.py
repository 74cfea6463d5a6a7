"""Snapshots (kqlab.sources.files) and segment folders as a source (kqlab.sources.segments)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kqlab.kafka import Record, build_batch, decode_batches
from kqlab.kafka.log import read_log
from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA
from kqlab.sources.demo import write_demo_segment
from kqlab.sources.files import Snapshot, SnapshotError, redact_config
from kqlab.sources.segments import open_source, snapshot_from_segments

NOW = 1_700_000_000_000


def _decoded(partition: int, base_offset: int, n_batches: int = 2, per_batch: int = 3,
             topic: str = "t"):
    batches = []
    off = base_offset
    for _ in range(n_batches):
        recs = [Record(key=b"k%d" % (off + i), value=b"v%d" % (off + i), timestamp=NOW + off + i)
                for i in range(per_batch)]
        batches.append(build_batch(recs, base_offset=off, base_timestamp=NOW + off))
        off += per_batch
    return decode_batches(batches, topic=topic, partition=partition)


def _forbid_parquet_reads(monkeypatch):
    """Make any Parquet read fail: metadata questions must be answered from snapshot.json."""
    import pyarrow.dataset as ds

    def boom(*args, **kwargs):
        raise AssertionError("Parquet was read for a metadata question")

    monkeypatch.setattr(pq, "read_table", boom)
    monkeypatch.setattr(pq, "ParquetFile", boom)
    monkeypatch.setattr(ds, "dataset", boom)


def test_create_append_reopen_round_trip(tmp_path, monkeypatch):
    a, b, c = _decoded(0, 0), _decoded(1, 100), _decoded(0, 6, n_batches=1)
    snap = Snapshot.create(tmp_path / "s", topic="t", cluster="prod-eu", method="consumer",
                           ranges={"0": [0, 8], "1": [100, 105]})
    for d in (a, b, c):
        snap.append(d.records, d.batches)
    assert sorted(p.name for p in (tmp_path / "s" / "records").iterdir()) == [
        "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]

    # metadata questions on a re-opened snapshot never touch Parquet
    _forbid_parquet_reads(monkeypatch)
    again = Snapshot.open(tmp_path / "s")
    assert again.num_records == 15 and again.num_batches == 5
    assert again.partitions == [0, 1]
    assert again.offset_ranges() == {0: (0, 8), 1: (100, 105)}
    assert again.timestamp_range == (NOW, NOW + 105)
    meta = again.metadata
    assert meta["partitions"]["0"]["records"] == 9 and meta["partitions"]["0"]["batches"] == 3
    assert meta["partitions"]["1"]["batch_last_offset"] == 105
    assert meta["topic"] == "t" and meta["cluster"] == "prod-eu" and meta["method"] == "consumer"
    assert meta["ranges"] == {"0": [0, 8], "1": [100, 105]}
    assert meta["framing"] == "exact" and meta["compression"] == "zstd"
    assert meta["kqlab_version"] and meta["created_at"].endswith("Z")
    assert "records=15" in repr(again) and len(again.part_files()) == 3
    with pytest.raises(AssertionError, match="Parquet was read"):  # the guard works
        again.records()
    monkeypatch.undo()

    # tables come back exactly as written, in append order, with the exact schemas
    records, batches = again.records(), again.batches()
    assert records.schema.equals(RECORDS_SCHEMA, check_metadata=True)
    assert batches.schema.equals(BATCHES_SCHEMA, check_metadata=True)
    assert records.equals(pa.concat_tables([a.records, b.records, c.records]))
    assert batches.equals(pa.concat_tables([a.batches, b.batches, c.batches]))
    assert pq.read_metadata(tmp_path / "s" / "records" / "part-00000.parquet") \
        .row_group(0).column(0).compression == "ZSTD"
    streamed = list(again.iter_records(batch_size=4))
    assert max(rb.num_rows for rb in streamed) <= 4
    assert pa.Table.from_batches(streamed).equals(records)
    assert [r.num_rows for r, _ in again.iter_parts()] == [6, 6, 3]


def test_append_after_reopen_continues_parts(tmp_path):
    snap = Snapshot.create(tmp_path / "s", topic="t")
    snap.append(_decoded(0, 0).records, _decoded(0, 0).batches)
    again = Snapshot.open(tmp_path / "s")
    d = _decoded(0, 6)
    again.append(d.records, d.batches, issues=[{"kind": "note", "message": "m"}])
    assert [f.name for f in again.part_files()] == ["part-00000.parquet", "part-00001.parquet"]
    assert Snapshot.open(tmp_path / "s").offset_ranges() == {0: (0, 11)}
    assert again.records().num_rows == 12
    assert again.issues == [{"kind": "note", "message": "m"}]
    # no temp files are left behind by the atomic writes
    assert not [p for p in (tmp_path / "s").rglob("*") if ".tmp" in p.name]


def test_reconstructed_framing_refuses_batches(tmp_path):
    d = _decoded(0, 0)
    snap = Snapshot.create(tmp_path / "s", topic="t", framing="reconstructed:linger")
    with pytest.raises(SnapshotError, match="only kept for exact framing"):
        snap.append(d.records, d.batches)
    snap.append(d.records)
    assert snap.batches().num_rows == 0 and snap.records().equals(d.records)
    assert not (tmp_path / "s" / "batches").exists()
    with pytest.raises(SnapshotError, match="framing"):
        Snapshot.create(tmp_path / "x", topic="t", framing="linger")


def test_wrong_schemas_are_refused(tmp_path):
    d = _decoded(0, 0)
    snap = Snapshot.create(tmp_path / "s", topic="t")
    bad = d.records.set_column(1, "partition", d.records.column("partition").cast(pa.int64()))
    with pytest.raises(SnapshotError, match=r"partition: int64 \(expected int32\)"):
        snap.append(bad, d.batches)
    with pytest.raises(SnapshotError, match="missing crc"):
        snap.append(d.records, d.batches.drop_columns(["crc"]))
    with pytest.raises(SnapshotError, match="batches table"):
        snap.append(d.records)  # exact framing needs the batches
    other = _decoded(0, 0, topic="other")
    with pytest.raises(SnapshotError, match="topic"):
        snap.append(other.records, other.batches)
    with pytest.raises(SnapshotError, match=r"pyarrow\.Table"):
        snap.append(d.records.to_pandas(), d.batches)
    assert Snapshot.open(tmp_path / "s").num_records == 0
    assert not list((tmp_path / "s" / "records").iterdir())


def test_secrets_never_stored_or_shown(tmp_path):
    config = {"bootstrap.servers": "broker:9093", "security.protocol": "SASL_SSL",
              "sasl.mechanism": "PLAIN", "sasl.username": "alice",
              "sasl.password": "hunter2-sasl", "ssl.key.password": "hunter2-key",
              "schema.registry.basic.auth.user.info": "bob:hunter2-sr",
              "oauth.token": "hunter2-token", "client.secret": "hunter2-secret",
              "ssl.key.pem": "hunter2-pem"}
    assert redact_config(config) == {"bootstrap.servers": "broker:9093",
                                     "security.protocol": "SASL_SSL"}
    snap = Snapshot.create(tmp_path / "s", topic="t", cluster=config,
                           extra={"consumer": {"sasl.password": "hunter2-nested"}})
    text = (tmp_path / "s" / "snapshot.json").read_text()
    for shown in (text, repr(snap), repr(Snapshot.open(tmp_path / "s")), str(snap.metadata)):
        assert "hunter2" not in shown and "alice" not in shown
    assert snap.cluster == "broker:9093"
    assert snap.metadata["cluster_config"]["security.protocol"] == "SASL_SSL"


def test_overwrite_protection(tmp_path):
    Snapshot.create(tmp_path / "s", topic="t")
    with pytest.raises(SnapshotError, match="overwrite=True"):
        Snapshot.create(tmp_path / "s", topic="t")
    snap = Snapshot.create(tmp_path / "s", topic="u", overwrite=True)
    assert Snapshot.open(tmp_path / "s").topic == "u" and snap.num_records == 0
    # a non-empty folder that is not a snapshot is never deleted, even with overwrite
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(SnapshotError, match="not a snapshot"):
        Snapshot.create(tmp_path / "mine", topic="t", overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    (tmp_path / "empty").mkdir()
    Snapshot.create(tmp_path / "empty", topic="t")  # an empty folder is fine


def test_missing_corrupt_and_newer_metadata(tmp_path):
    with pytest.raises(SnapshotError, match="not a kqlab snapshot") as exc:
        Snapshot.open(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(exc.value)
    Snapshot.create(tmp_path / "s", topic="t")
    meta_file = tmp_path / "s" / "snapshot.json"
    meta = json.loads(meta_file.read_text())
    meta_file.write_text("{not json")
    with pytest.raises(SnapshotError, match="corrupt snapshot metadata") as exc:
        Snapshot.open(tmp_path / "s")
    assert str(meta_file) in str(exc.value)
    meta_file.write_text(json.dumps({k: v for k, v in meta.items() if k != "parts"}))
    with pytest.raises(SnapshotError, match="missing parts"):
        Snapshot.open(tmp_path / "s")
    meta_file.write_text(json.dumps(dict(meta, format=99)))
    with pytest.raises(SnapshotError, match="upgrade kqlab"):
        Snapshot.open(tmp_path / "s")
    meta_file.write_text("[]")
    with pytest.raises(SnapshotError, match="not a JSON object"):
        Snapshot.open(tmp_path / "s")


def test_segments_to_snapshot_equals_read_log(tmp_path):
    folder = write_demo_segment(tmp_path, NOW)
    log = read_log(folder)
    snap = snapshot_from_segments(folder, tmp_path / "snap")
    assert snap.records().equals(log.records) and snap.batches().equals(log.batches)
    again = Snapshot.open(tmp_path / "snap")
    assert again.topic == "orders" and again.partitions == [0] and again.framing == "exact"
    assert again.num_records == log.records.num_rows
    assert again.num_batches == log.batches.num_rows
    assert again.issues == [i.to_dict() for i in log.issues]
    assert [i["kind"] for i in again.issues] == ["truncated_tail"]
    assert again.metadata["method"] == "segments"
    assert len(again.part_files("records")) == 1


def test_segments_stream_in_small_chunks(tmp_path):
    folder = write_demo_segment(tmp_path, NOW)
    log = read_log(folder)
    snap = snapshot_from_segments(folder, tmp_path / "snap", chunk_batches=8)
    n_parts = -(-log.batches.num_rows // 8)
    assert len(snap.part_files("records")) == n_parts == len(snap.part_files("batches"))
    assert all(p["batches"] <= 8 for p in snap.metadata["parts"])
    assert snap.records().equals(log.records) and snap.batches().equals(log.batches)
    assert snap.offset_ranges() == {0: (log.records["offset"][0].as_py(),
                                        log.records["offset"][-1].as_py())}
    assert [i["kind"] for i in snap.issues] == ["truncated_tail"]
    with pytest.raises(SnapshotError, match="overwrite=True"):
        snapshot_from_segments(folder, tmp_path / "snap")


def test_open_source_detection(tmp_path):
    folder = write_demo_segment(tmp_path, NOW)
    snapshot_from_segments(folder, tmp_path / "snap")
    assert open_source(folder) == "segments"
    assert open_source(folder / "00000000000000000000.log") == "segments"
    assert open_source(tmp_path / "snap") == "snapshot"
    assert open_source(tmp_path / "snap" / "snapshot.json") == "snapshot"
    (tmp_path / "topic-3").mkdir()
    assert open_source(tmp_path / "topic-3") == "segments"
    (tmp_path / "other").mkdir()
    with pytest.raises(SnapshotError, match="neither"):
        open_source(tmp_path / "other")
    with pytest.raises(SnapshotError, match="no such"):
        open_source(tmp_path / "missing")


def test_segments_need_a_topic(tmp_path):
    folder = write_demo_segment(tmp_path, NOW)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "00000000000000000000.log").write_bytes(
        (folder / "00000000000000000000.log").read_bytes())
    with pytest.raises(SnapshotError, match="pass topic="):
        snapshot_from_segments(plain, tmp_path / "snap")
    snap = snapshot_from_segments(plain, tmp_path / "snap", topic="orders", partition=0)
    assert snap.records().equals(read_log(folder).records)


def test_replay_reads_a_snapshot_like_its_segments(tmp_path):
    """A snapshot (tables only, no batch bytes) replays to the same verdicts as its segments."""
    from kqlab.policy import load_policy
    from kqlab.sources.demo import demo_policy_path, write_demo_segment
    from kqlab.sources.segments import snapshot_from_segments
    from kqlab.validate import replay

    now = 1_763_700_000_000
    folder = write_demo_segment(tmp_path / "log", now)
    snap = snapshot_from_segments(folder, tmp_path / "snap")
    policy = load_policy(str(demo_policy_path()))
    from_log = replay(folder, policy, now=now)
    from_snapshot = replay(tmp_path / "snap", policy, now=now)
    assert from_snapshot.records.equals(from_log.records)
    assert from_snapshot.batches.equals(from_log.batches)
    assert from_snapshot.summary()["outcomes"] == from_log.summary()["outcomes"]
    assert [i["kind"] if isinstance(i, dict) else i.kind for i in from_snapshot.issues] == [
        "truncated_tail"]
    single = replay(snap, policy, now=now, framing="single")
    assert single.framing == "reconstructed:single"
    batches = snap.batches()
    markers = sum(c for c, ctl in zip(batches.column("record_count").to_pylist(),
                                      batches.column("is_control").to_pylist(), strict=True)
                  if ctl)
    assert markers > 0
    # a consumer never sees transaction markers: the rebuilt framing holds the data records
    assert single.records.num_rows == from_log.records.num_rows - markers
