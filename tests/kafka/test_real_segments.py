"""Log segments written by real Kafka brokers (``shared/fixtures/real-segments``, see its README).

Expected per the README: every batch decodes, every CRC is valid, record counts and offsets are
continuous.  The fixtures live beside the repository (``<repo>/../shared``); a missing folder is a
broken checkout, so the tests fail rather than skip.
"""

from __future__ import annotations

import collections
import itertools
from pathlib import Path

import pyarrow as pa
import pytest

from kqlab.kafka import (
    PartitionValidator,
    decode_records,
    iter_log_batches,
    read_log,
    validate_batches,
)
from kqlab.kafka.errors import error_for_code
from kqlab.kafka.log import LogIssue, RawBatch, iter_log_tables, segment_files, topic_partition_of
from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "real-segments"


def _root() -> Path:
    if not REAL.is_dir():
        pytest.fail(f"real-segment fixtures not found at {REAL}: the repository must be checked "
                    "out with the shared/ folder beside it (shared/fixtures/real-segments)")
    return REAL


def _sources() -> list[Path]:
    """Every partition folder and loose segment file under the fixtures root."""
    if not REAL.is_dir():
        return [REAL / "<missing>"]
    out = []
    for group in sorted(p for p in REAL.iterdir() if p.is_dir()):
        for item in sorted(group.iterdir()):
            if item.is_dir() or item.suffix == ".log":
                out.append(item)
    return out


SOURCES = _sources()
IDS = [f"{p.parent.name}/{p.name}" for p in SOURCES]


def test_fixture_inventory() -> None:
    root = _root()
    assert (root / "README.md").is_file()
    names = {p.name for p in SOURCES}
    assert {"TestTopicPatient-0", "__cluster_metadata-0", "__consumer_offsets-6"} <= names
    assert sum(1 for p in SOURCES if p.suffix == ".log") >= 2


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_every_batch_decodes(source: Path) -> None:
    _root()
    log = read_log(source)
    assert log.records.schema == RECORDS_SCHEMA
    assert log.batches.schema == BATCHES_SCHEMA
    assert log.issues == [], log.issues
    b = log.batches.to_pylist()
    assert b, "no batches decoded"
    assert [r for r in b if r["decode_error"] is not None] == []
    assert all(r["crc_valid"] for r in b)
    assert {r["magic"] for r in b} == {2}
    # record counts: the header count, the offset range and the decoded rows agree
    per_batch = collections.Counter(log.records.column("batch_offset").to_pylist())
    for r in b:
        assert r["record_count"] == r["last_offset_delta"] + 1 or r["is_control"], r
        assert per_batch[r["batch_offset"]] == r["record_count"], r
    assert log.records.num_rows == sum(r["record_count"] for r in b)
    # offsets are continuous across batches
    for prev, nxt in itertools.pairwise(b):
        assert nxt["batch_offset"] == prev["batch_offset"] + prev["last_offset_delta"] + 1
    # positions tile the (single) segment file without gaps
    (f,) = segment_files(source)
    assert b[0]["position"] == 0
    ends = [r["position"] + r["size_bytes"] for r in b]
    assert ends[-1] == f.stat().st_size
    assert [r["position"] for r in b[1:]] == ends[:-1]
    # records: offsets strictly increase and sit inside their batch's range
    offsets = log.records.column("offset").to_pylist()
    assert offsets == sorted(set(offsets))
    first = b[0]["batch_offset"]
    last = b[-1]["batch_offset"] + b[-1]["last_offset_delta"]
    assert offsets[0] >= first and offsets[-1] <= last
    # the max timestamp a broker stores is the max of its CreateTime records
    by_batch: dict[int, list[int]] = collections.defaultdict(list)
    for off, ts in zip(log.records.column("batch_offset").to_pylist(),
                       log.records.column("timestamp").to_pylist(), strict=True):
        by_batch[off].append(ts)
    for r in b:
        if r["timestamp_type"] == 0:
            assert max(by_batch[r["batch_offset"]]) == r["max_timestamp"]
            assert min(by_batch[r["batch_offset"]]) >= r["first_timestamp"]


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_streaming_and_buffer_decoding_agree(source: Path) -> None:
    _root()
    whole = read_log(source)
    parts = list(iter_log_tables(source, chunk_batches=3))
    assert pa.concat_tables([p.records for p in parts]).equals(whole.records)
    assert pa.concat_tables([p.batches for p in parts]).equals(whole.batches)
    assert all(p.batches.num_rows <= 3 for p in parts)
    raw = list(iter_log_batches(source))
    assert all(isinstance(x, RawBatch) for x in raw)
    assert len(raw) == whole.batches.num_rows
    (f,) = segment_files(source)
    buf = decode_records(f.read_bytes(), topic=whole.batches["topic"][0].as_py(),
                         partition=whole.batches["partition"][0].as_py())
    assert buf.records.equals(whole.records)
    assert buf.batches.equals(whole.batches)


@pytest.mark.parametrize(("name", "expected"), [
    ("TestTopicPatient-0", ("TestTopicPatient", 0)),
    ("__cluster_metadata-0", ("__cluster_metadata", 0)),
    ("__consumer_offsets-6", ("__consumer_offsets", 6)),
])
def test_topic_partition_inference(name: str, expected: tuple[str, int]) -> None:
    folder = _root() / "ldi-poc" / name
    assert topic_partition_of(folder) == expected
    assert topic_partition_of(folder / "00000000000000000000.log") == expected
    log = read_log(folder)
    assert set(log.batches.column("topic").to_pylist()) == {expected[0]}
    assert set(log.batches.column("partition").to_pylist()) == {expected[1]}
    assert set(log.records.column("topic").to_pylist()) == {expected[0]}
    # explicit names override the folder
    other = read_log(folder, topic="x", partition=9)
    assert set(other.records.column("topic").to_pylist()) == {"x"}


def test_loose_segment_files_have_no_topic() -> None:
    for f in sorted((_root() / "codecrafters").glob("*.log")):
        assert topic_partition_of(f) == ("", -1)
        log = read_log(f)
        assert set(log.batches.column("partition").to_pylist()) == {-1}


def _now(source: Path) -> int:
    return max(read_log(source).batches.column("max_timestamp").to_pylist())


def _verdicts(source: Path, **kw) -> list[dict]:
    topic, partition = topic_partition_of(source)
    table = validate_batches(iter_log_batches(source), topic=topic or "replay",
                             partition=partition, now=_now(source), source="log", **kw)
    rows = table.to_pylist()
    for r in rows:
        err = error_for_code(r["error_code"])
        assert err.name == r["error_name"]
    return rows


def test_user_topic_all_accepted() -> None:
    source = _root() / "ldi-poc" / "TestTopicPatient-0"
    rows = _verdicts(source)
    assert len(rows) == read_log(source).batches.num_rows == 3
    assert [(r["error_code"], r["check"]) for r in rows] == [(0, None)] * 3
    assert [r["batch_offset"] for r in rows] == [0, 1, 2]
    assert [r["position"] for r in rows] == read_log(source).batches["position"].to_pylist()


def test_user_topic_producer_replay() -> None:
    """Replaying idempotent batches twice: the second pass is all duplicates (spec §3.F F1)."""
    source = _root() / "ldi-poc" / "TestTopicPatient-0"
    v = PartitionValidator("TestTopicPatient", 0, None, now=_now(source), source="log")
    batches = [x for x in iter_log_batches(source) if isinstance(x, RawBatch)]
    first = [v.validate(b.data, position=b.position) for b in batches]
    assert all(o.accepted and not o.duplicate for o in first), first
    again = [v.validate(b.data) for b in batches]
    assert all(o.accepted for o in again)
    pids = read_log(source).batches.column("producer_id").to_pylist()
    assert [o.duplicate for o in again] == [p >= 0 for p in pids]


def test_user_topic_timestamps_far_from_now_rejected() -> None:
    source = _root() / "ldi-poc" / "TestTopicPatient-0"
    topic, partition = topic_partition_of(source)
    day = 86_400_000
    table = validate_batches(iter_log_batches(source), topic=topic, partition=partition,
                             now=_now(source) + 30 * day, source="log",
                             config={"message.timestamp.before.max.ms": day})
    assert set(table.column("error_code").to_pylist()) == {32}
    table = validate_batches(iter_log_batches(source), topic=topic, partition=partition,
                             now=_now(source) - 30 * day, source="log")
    assert set(table.column("error_code").to_pylist()) == {32}  # 4.0 default: after = 1 h


def test_consumer_offsets_is_internal() -> None:
    source = _root() / "ldi-poc" / "__consumer_offsets-6"
    n = read_log(source).batches.num_rows
    rows = _verdicts(source)
    assert len(rows) == n
    assert {(r["error_code"], r["error_name"], r["check"]) for r in rows} == {
        (17, "INVALID_TOPIC_EXCEPTION", "B4")}
    admin = _verdicts(source, client_id="__admin_client")
    assert [r["error_code"] for r in admin] == [0] * n


def test_consumer_offsets_compacted_config_accepts_keyed_commits() -> None:
    source = _root() / "ldi-poc" / "__consumer_offsets-6"
    log = read_log(source)
    assert log.records.column("key").null_count == 0
    rows = _verdicts(source, client_id="__admin_client", config={"cleanup.policy": "compact"})
    assert {r["error_code"] for r in rows} == {0}


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_generous_replay_accepts_everything(source: Path) -> None:
    _root()
    rows = _verdicts(source, client_id="__admin_client",
                     config={"message.timestamp.after.max.ms": 2**63 - 1})
    codes = collections.Counter(r["error_code"] for r in rows)
    assert codes == {0: len(rows)}, [r for r in rows if r["error_code"]][:3]


def test_metadata_log_has_control_batches() -> None:
    source = _root() / "ldi-poc" / "__cluster_metadata-0"
    log = read_log(source)
    control = [r for r in log.batches.to_pylist() if r["is_control"]]
    assert control, "KRaft metadata logs start with control records (leader change, snapshot)"
    assert all(r["decode_error"] is None and r["crc_valid"] for r in control)


def test_issue_free_scan() -> None:
    for source in SOURCES:
        assert not [x for x in iter_log_batches(source) if isinstance(x, LogIssue)]
