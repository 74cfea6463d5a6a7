"""The Structured Streaming enforcer end to end, run as it is deployed: ``kqlab export
--target spark-streaming`` writes the folder, its ``submit.sh`` runs ``spark-submit`` on
``local[2]`` against a real Tansu broker.  Every input record lands in exactly one of the
clean and dead-letter topics, unchanged (key, value, headers, timestamp, partition), in
order per partition, dead letters with the gate's failure headers, exactly where the gate's
judge puts it; a restart resumes from the checkpoint; an edited policy is refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from kqlab.export import export
from kqlab.gate import Judge
from kqlab.gate._gate import failure_headers, policy_id
from kqlab.policy import loads_policy
from kqlab.sources.kafka import sample
from kqlab.spark.enforcer import single_records
from tests.gate.conftest import read_topic
from tests.spark.kafka_helpers import NOW, kafka, produce_varied, submit_env

__all__ = ["kafka"]

PARTS, N = 3, 1500
POLICY = """kqlab: 1
name: enforce-test
topics: {names: [e.raw]}
broker:
  configs: {message.timestamp.before.max.ms: '3500000'}
rules:
- {id: short, kind: value_size, max: 40}
- {id: keyed, kind: key_required}
- {id: tiny, kind: value_size, max: 20, mode: observe}
"""


@pytest.fixture(scope="module")
def raw(kafka):
    produce_varied(kafka, "e.raw", N, PARTS)
    return kafka.bootstrap


@pytest.fixture
def exported(tmp_path):
    policy = loads_policy(POLICY)
    export(policy, "spark-streaming").write(tmp_path / "export")
    return tmp_path / "export" / "spark-streaming", policy


def _submit(folder: Path, bootstrap: str, checkpoint: Path, *args: str,
            timeout: float = 300) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["sh", str(folder / "submit.sh"), "--json-metrics", *args],
                          env=submit_env(bootstrap, str(checkpoint)), cwd=checkpoint.parent,
                          capture_output=True, timeout=timeout)


def expected(bootstrap: str, policy) -> tuple[dict, dict, object]:
    """Per partition, what the clean and dead-letter topics must hold, in order: the gate's
    judge on the source records, the gate's failure headers on the dead ones."""
    records = sample(bootstrap, "e.raw", exact_framing=True, end_offset=N // PARTS).records
    verdict = Judge(policy, now=NOW)(single_records(records))
    pid = policy_id(policy)
    clean: dict[int, list] = {p: [] for p in range(PARTS)}
    dead: dict[int, list] = {p: [] for p in range(PARTS)}
    k = 0
    rows = records.to_pylist()
    for row, is_dead in zip(rows, verdict.dead.tolist(), strict=True):
        h = [(x["key"], x["value"]) for x in row["headers"]] or None
        if is_dead:
            h = failure_headers(h, verdict.rules[k], verdict.messages[k], row["topic"],
                                row["partition"], row["offset"], pid)
            k += 1
        (dead if is_dead else clean)[row["partition"]].append(
            (row["key"], row["value"], h, row["timestamp"]))
    return clean, dead, verdict


def _got(bootstrap: str, topic: str) -> dict[int, list]:
    out: dict[int, list] = {p: [] for p in range(PARTS)}
    for m in read_topic(bootstrap, topic, PARTS, idle_s=0.5):
        out[m.partition()].append((m.key(), m.value(), m.headers(), m.timestamp()[1]))
    return out


def test_every_record_lands_once_unchanged_in_order(kafka, raw, exported, tmp_path):
    folder, policy = exported
    for t in ("e.raw.valid", "e.raw.dlq"):
        kafka.create_topic(t, partitions=PARTS)
    r = _submit(folder, raw, tmp_path / "ck", "--available-now", "--now", str(NOW))
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    lines = [json.loads(x) for x in r.stdout.decode().splitlines() if x.startswith("{")]
    final = lines[-1]
    assert final["event"] == "stopped"
    want_clean, want_dead, verdict = expected(raw, policy)
    n_dead = sum(len(v) for v in want_dead.values())
    assert 0 < n_dead < N
    assert final["records"] == N and final["dead_lettered"] == n_dead
    assert final["forwarded"] == N - n_dead and final["redelivered"] == 0
    assert final["by_rule"] == verdict.by_rule and final["observed"] == verdict.observed
    assert {"short", "keyed", "broker:R4"} <= set(final["by_rule"])
    assert _got(raw, "e.raw.valid") == want_clean  # same partition, same order, unchanged
    assert _got(raw, "e.raw.dlq") == want_dead     # ... with the gate's failure headers
    assert all(line["rerun"] is False for line in lines[:-1])


def test_a_restart_resumes_from_the_checkpoint(kafka, raw, exported, tmp_path):
    folder, _ = exported
    cfg = folder / "enforcer.yaml"
    cfg.write_text(cfg.read_text().replace("source: e.raw", "source: e.again")
                   .replace("e.raw.valid", "e.again.valid").replace("e.raw.dlq", "e.again.dlq")
                   .replace("maxOffsetsPerTrigger: 200000", "maxOffsetsPerTrigger: 300"))
    produce_varied(kafka, "e.again", N, PARTS)
    for t in ("e.again.valid", "e.again.dlq"):
        kafka.create_topic(t, partitions=PARTS)
    ck = tmp_path / "ck"
    first = _submit(folder, raw, ck, "--available-now", "--now", str(NOW))
    assert first.returncode == 0, first.stderr.decode()[-3000:]
    batches = [json.loads(x) for x in first.stdout.decode().splitlines() if '"batch"' in x]
    assert len(batches) >= N // 300  # maxOffsetsPerTrigger from the config
    kafka.produce("e.again", [{"value": b"late", "partition": p, "key": b"k",
                               "timestamp": NOW} for p in range(PARTS)])
    second = _submit(folder, raw, ck, "--available-now", "--now", str(NOW))
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    final = json.loads(second.stdout.decode().splitlines()[-1])
    assert final["restarts"] == 1 and final["records"] == N + PARTS  # only the new ones
    assert final["redelivered"] == 0
    got = _got(raw, "e.again.valid")
    for p in range(PARTS):
        values = [v for _, v, _, _ in got[p]]
        assert values[-1] == b"late" and values.count(b"late") == 1


def test_an_edited_policy_is_refused(exported, tmp_path):
    folder, _ = exported
    (folder / "policy.yaml").write_text((folder / "policy.yaml").read_text()
                                        .replace("max: 40", "max: 41"))
    r = subprocess.run([sys.executable, "-m", "kqlab.spark.enforcer", "--config",
                        str(folder / "enforcer.yaml"), "--bootstrap", "127.0.0.1:1",
                        "--checkpoint", str(tmp_path / "ck")],
                       capture_output=True, timeout=120)
    assert r.returncode == 2
    assert b"edited after export" in r.stderr


def test_sinks_with_fewer_partitions_are_refused(spark, kafka, raw, tmp_path):
    from kqlab.spark.enforcer import Enforcer, EnforcerError, EnforcerSettings
    from kqlab.spark.enforcer_config import Route

    kafka.create_topic("e.small", partitions=1)
    e = Enforcer(spark, loads_policy(POLICY), EnforcerSettings(
        routes=(Route("e.raw", "e.small", "e.small"),), bootstrap=raw,
        checkpoint=str(tmp_path / "ck")))
    with pytest.raises(EnforcerError, match="has 1 partition"):
        e.check_topics()


def test_the_native_connector_path_judges_the_same(spark, raw, exported):
    """``connector: spark`` hands Spark's Kafka sink the rows :func:`judge_for_sink` makes;
    the connector jar is not here, so its judging runs on the records this source reads."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from kqlab.spark.enforcer import SINK_SCHEMA, EnforceJob, judge_for_sink
    from tests.spark.kafka_helpers import reader

    _, policy = exported
    job = EnforceJob(policy, {"e.raw": ("e.raw.valid", "e.raw.dlq")}, {}, "same", NOW,
                     policy_id(policy))
    df = reader(spark, raw, subscribe="e.raw", endingOffsets=json.dumps(
        {"e.raw": {str(p): N // PARTS for p in range(PARTS)}}))
    rows = df.mapInArrow(judge_for_sink(job), from_arrow_schema(SINK_SCHEMA)).toArrow()
    _, want_dead, _ = expected(raw, policy)
    dlq = rows.filter(pc.equal(rows.column("topic"), "e.raw.dlq"))
    assert dlq.num_rows == sum(len(v) for v in want_dead.values())
    for p in range(PARTS):
        mine = dlq.filter(pc.equal(dlq.column("partition"), p)).to_pylist()
        assert [[(h["key"], h["value"]) for h in r["headers"]] for r in mine] == \
            [h for _, _, h, _ in want_dead[p]]


def test_every_attempt_at_a_micro_batch_counts_toward_redelivered(tmp_path):
    """A micro-batch killed twice before Spark commits it is sent up to three times: the
    attempt that finishes reports its records once per earlier attempt (crash test: the
    duplicates read back never exceed ``redelivered``)."""
    from kqlab.spark.enforcer import Enforcer, EnforcerSettings
    from kqlab.spark.enforcer_config import Route

    def enforcer() -> Enforcer:
        return Enforcer(None, loads_policy(POLICY), EnforcerSettings(
            routes=(Route("e.raw", "e.ok", "e.dlq"),), bootstrap="127.0.0.1:1",
            checkpoint=str(tmp_path / "ck")))

    first = enforcer()
    assert [first._attempts(7) for _ in range(3)] == [0, 1, 2]
    assert first._attempts(8) == 0
    row = {"topic": "e.raw", "partition": 0, "first_offset": 0, "last_offset": 9,
           "records": 10, "dead_lettered": 3, "by_rule": '{"r": 3}', "observed": "{}",
           "skipped": 0}
    first._account(8, [row], 0, 0.1)
    again = enforcer()  # a restart reads the markers and the counters back
    assert again.metrics["restarts"] == 1
    assert again._attempts(7) == 3
    again._account(7, [row], 3, 0.1)
    assert again.batches[-1]["redelivered"] == 30 and again.batches[-1]["attempt"] == 4
    m = enforcer().metrics
    assert (m["records"], m["reruns"], m["redelivered"], m["dead_lettered"]) == (20, 1, 30, 6)
    (tmp_path / "ck" / "kqlab" / "attempts" / f"{9:012d}").write_text("1764000000.5")
    assert enforcer()._attempts(9) == 1  # a marker of an older kqlab: one attempt
