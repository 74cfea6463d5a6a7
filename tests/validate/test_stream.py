"""The streamed replay equals the whole-sample replay verdict for verdict, whatever the chunk
size: batches, transactions and producer state spanning chunk boundaries, JSON and Avro values,
every enforcement profile; and it holds only a chunk's records at a time."""

from __future__ import annotations

import tempfile
from itertools import pairwise
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.sources import demo_topics
from kqlab.validate import replay
from kqlab.validate.stream import StreamProgress, log_clock, log_partitions, replay_stream
from tests.spark.strategies import NOW, log_dirs, policies, write_log_dir

DEMO_NOW = 1_763_700_000_000


def assert_same(streamed, whole) -> None:
    """Every record and batch verdict, every rule count, the notes and the clock."""
    assert streamed.records.equals(whole.records.cast(streamed.records.schema)), \
        _first_difference(streamed.records, whole.records)
    assert streamed.batches.to_pylist() == whole.batches.to_pylist()
    assert streamed.rules.to_pylist() == whole.rules.to_pylist()
    assert streamed.by_outcome() == whole.by_outcome()
    assert streamed.notes == whole.notes
    assert (streamed.now, streamed.profile, streamed.framing) == \
        (whole.now, whole.profile, whole.framing)


def _first_difference(a: pa.Table, b: pa.Table) -> str:
    for i, (x, y) in enumerate(zip(a.to_pylist(), b.to_pylist(), strict=False)):
        if x != y:
            return f"record {i}: {x} != {y}"
    return f"{a.num_rows} vs {b.num_rows} rows"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    return demo_topics.generate(root / "all", DEMO_NOW)


@pytest.mark.parametrize("topic", ["orders", "clicks"])  # Avro (registry) and JSON values
@pytest.mark.parametrize("chunk", [1, 7, 4096])
@pytest.mark.parametrize("read_ahead", ["1", "0"])  # chunks read on a thread, or in turn
def test_demo_topics(demo, tmp_path, topic, chunk, read_ahead, monkeypatch):
    import shutil

    monkeypatch.setenv("KQLAB_READ_AHEAD", read_ahead)

    folder = tmp_path / topic
    folder.mkdir()
    for name, src in demo.folders.items():
        if name.rsplit("-", 1)[0] == topic:
            shutil.copytree(src, folder / name)
    policy = demo_topics.load_policies()[topic]
    seen: list[StreamProgress] = []
    streamed = replay_stream(folder, policy, now=DEMO_NOW, chunk_batches=chunk,
                             progress=seen.append)
    whole = replay(folder, policy, now=DEMO_NOW)
    assert_same(streamed, whole)
    assert whole.by_outcome()["rejected"] > 0
    assert seen and seen[-1].records == whole.records.num_rows
    assert seen[-1].bytes_read == seen[-1].bytes_total
    assert all(a.records <= b.records for a, b in pairwise(seen))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log_dirs(), policies(), st.sampled_from([1, 2, 3, 5]))
def test_generated_logs(logs, policy, chunk):
    # idempotent and transactional producers with gaps, duplicates, epoch bumps and markers,
    # compression, stale CRCs, timestamps at the bounds: chunk boundaries anywhere
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_log_dir(Path(tmp), logs)
        assert_same(replay_stream(folder, policy, now=NOW, chunk_batches=chunk),
                    replay(folder, policy, now=NOW))


def test_the_default_clock_is_the_logs(demo):
    folder = next(iter(demo.folders.values())).parent
    policy = demo_topics.load_policies()["orders"]
    clock = log_clock(log_partitions(folder))
    assert clock is not None and abs(clock - DEMO_NOW) < 7 * 86_400_000
    whole = replay(folder, policy)  # a whole-sample replay reads the same clock
    assert replay_stream(folder, policy).now == whole.now == clock


#: writes a 200k-record partition of ~950-byte JSON values; prints the values' bytes
WRITE_SCRIPT = r"""
import sys
import numpy as np, pyarrow as pa
from pathlib import Path
from kqlab.kafka.encode import encode_batches
from kqlab.records import RECORDS_SCHEMA

folder, n = Path(sys.argv[1]) / "orders-0", int(sys.argv[2])
folder.mkdir()
pad = "x" * 900
values = pa.array([('{"amount": %d, "currency": "EUR", "note": "%s"}' % (i % 5000 - 10, pad))
                   .encode() for i in range(n)], pa.binary())
table = pa.table({
    "topic": pa.array(["orders"] * n), "partition": pa.array(np.zeros(n, np.int32)),
    "offset": pa.array(np.arange(n, dtype=np.int64)),
    "timestamp": pa.array(np.full(n, 1_763_700_000_000, np.int64)),
    "timestamp_type": pa.array(np.zeros(n, np.int8)), "key": pa.nulls(n, pa.binary()),
    "value": values, "headers": pa.array([[]] * n, RECORDS_SCHEMA.field("headers").type),
    "batch_offset": pa.array(np.arange(n, dtype=np.int64)),
    "batch_index": pa.array(np.zeros(n, np.int32))}, schema=RECORDS_SCHEMA)
enc = encode_batches(table, np.arange(0, n, 15))
(folder / "00000000000000000000.log").write_bytes(enc.data.tobytes())
print(len(values.buffers()[2]))
"""

#: replays it (streamed or whole) in a fresh process; prints how much the process grew
REPLAY_SCRIPT = r"""
import json, resource, sys
from pathlib import Path
from kqlab.policy import loads_policy
from kqlab.validate import replay
from kqlab.validate.stream import replay_stream

folder, how, chunk = Path(sys.argv[1]) / "orders-0", sys.argv[2], int(sys.argv[3])
policy = loads_policy(
    "kqlab: 1\nname: mem\nvalue: {format: json}\nrules:\n"
    "- {id: amount, kind: field_range, field: amount, min: 0}\n"
    "- {id: currency, kind: field_in, field: currency, values: [EUR, USD]}\n")
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if how == "stream":
    v = replay_stream(folder, policy, now=1_763_700_000_000, chunk_batches=chunk)
else:
    v = replay(folder, policy, now=1_763_700_000_000)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"records": v.records.num_rows, "rejected": v.by_outcome()["rejected"],
                  "grown_kb": peak - base}))
"""


def test_memory_is_bounded_by_the_chunk_not_the_sample(tmp_path):
    """Partitions of ~950-byte JSON values replayed in chunks of 100 batches, each in a fresh
    process: going from 100k to 300k records, the process grows by the verdicts alone
    (tens of bytes a record), never by the values it judged (a whole-sample replay holds
    every value and its decoded columns: over 1.5 KB a record)."""
    import json
    import subprocess
    import sys

    def run(*args: str) -> str:
        return subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True,
                              timeout=600, check=True).stdout.strip().splitlines()[-1]

    grown = {}
    for n in (100_000, 300_000):
        folder = tmp_path / str(n)
        folder.mkdir()
        value_bytes = int(run(WRITE_SCRIPT, str(folder), str(n)))
        got = json.loads(run(REPLAY_SCRIPT, str(folder), "stream", "100"))
        assert got["records"] == n and got["rejected"] == n // 500
        grown[n] = got["grown_kb"] * 1024
    per_record = (grown[300_000] - grown[100_000]) / 200_000
    assert per_record < 0.25 * value_bytes / 300_000, (grown, value_bytes)
