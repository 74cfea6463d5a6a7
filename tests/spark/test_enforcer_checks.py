"""The Structured Streaming enforcer computes the policy's sample checks (issue 21): on a
planted topic (a partition quiet for four windows, a null-rate jump, repeated keys, one
region only, an amount spike, a burst of refused records, a stale partition), the alert
rows equal the failing windows of a replay of the same records (``framing="single"``: the
enforcer judges each record alone), kind by kind; a micro-batch run again after a crash
neither loses nor double-counts a window; a late record is counted, not judged.

The first tests drive the enforcer's own task and driver halves
(:class:`~kqlab.spark.enforcer_checks.TaskChecks`, :class:`StreamChecks`) on the records
split as Spark splits them (one task per partition range, micro-batch after micro-batch);
the last runs the exported ``submit.sh`` against a real Tansu broker, killed once between
sending its alerts and Spark's commit.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import kqlab
from kqlab.export import export
from kqlab.gate import Judge
from kqlab.policy import loads_policy
from kqlab.records import RECORDS_SCHEMA
from kqlab.spark.enforcer import single_records
from kqlab.spark.enforcer_checks import StreamChecks, TaskChecks, alert_key, enforced_checks
from kqlab.spark.enforcer_config import CheckSettings
from tests.spark.kafka_helpers import kafka

__all__ = ["kafka"]

NOW = 1_763_700_000_000
T0 = NOW - 1_800_000  # the first record; windows of 10 s from there
W = 10_000
LATENESS = 60_000  # the default: partitions read in proportion drift ~40 s apart here
PARTS = 2
TOPIC = "k.raw"
POLICY = f"""kqlab: 1
name: stream-checks
topics: {{names: [{TOPIC}]}}
value: {{format: json}}
rules:
- {{id: positive, kind: field_range, field: amount, min: 0}}
checks:
- {{id: vol, kind: volume, window: 10s, by: partition, min: 1}}
- {{id: nulls, kind: null_rate, field: customer, window: 10s, max: 0.1}}
- {{id: dups, kind: duplicate_rate, of: key, window: 10s, max: 0}}
- {{id: regions, kind: distinct, field: region, window: 10s, min: 2}}
- {{id: top, kind: stat, stat: max, field: amount, window: 10s, max: 500}}
- {{id: refused, kind: reject_rate, window: 10s, max: 0.2}}
- {{id: negative, kind: reject_rate, rule: positive, window: 10s, by: partition, max: 0.25}}
- {{id: fresh, kind: freshness, by: partition, max_age_ms: 1420000}}
- {{id: us-top, kind: stat, stat: max, field: amount, window: 20s, max: 90,
   when: value.region == "us"}}
- {{id: whole-nulls, kind: null_rate, field: customer, max: 0.5}}
"""
#: the windowed checks, each with the failing windows it must report
WINDOWED = ("vol", "nulls", "dups", "regions", "top", "refused", "negative", "us-top")


def planted(n_windows: int = 40) -> list[dict]:
    """Records every 250 ms, partitions alternating, JSON values; planted: partition 1 quiet
    in windows 8-11 and from window 36 on (stale), customer null in half of window 15, one
    key repeated in window 20, one region only in window 25, an amount of 900 in window 30,
    negative amounts in a third of window 32."""
    out = []
    for i in range(n_windows * 40):
        ts = T0 + i * 250
        win = (ts - T0) // W
        part = i % PARTS
        if part == 1 and (8 <= win <= 11 or win >= 36):
            continue
        value = {"customer": None if (win == 15 and i % 2) or i % 97 == 0 else f"c{i % 13}",
                 "region": "eu" if win == 25 else ("eu", "us", "ap")[i % 3],
                 "amount": 900 if (win == 30 and i % 40 == 7) else
                 (-5 if win == 32 and i % 3 == 0 else i % 89)}
        key = b"k-rep" if win == 20 and i % 4 == 0 else b"k%06d" % i
        out.append({"key": key, "value": json.dumps(value).encode(), "timestamp": ts,
                    "partition": part})
    return out


def records_table(rows: list[dict], topic: str = TOPIC) -> pa.Table:
    """Rows as kqlab's records table, offsets per partition in order."""
    offsets = dict.fromkeys(range(PARTS), 0)
    cols: dict[str, list] = {n: [] for n in RECORDS_SCHEMA.names}
    for r in rows:
        o = offsets[r["partition"]]
        offsets[r["partition"]] += 1
        for name, v in (("topic", topic), ("partition", r["partition"]), ("offset", o),
                        ("timestamp", r["timestamp"]), ("timestamp_type", 0),
                        ("key", r["key"]), ("value", r["value"]), ("headers", []),
                        ("batch_offset", o), ("batch_index", 0)):
            cols[name].append(v)
    return pa.table(cols, schema=RECORDS_SCHEMA)


def replay_failing(records: pa.Table, policy, watermark: int) -> dict[str, set]:
    """Per windowed check, the replay's failing windows that end at or before the
    watermark, as (group, start, end, records, observed)."""
    v = kqlab.replay(records, policy, framing="single", now=NOW)
    out = {}
    for cid in WINDOWED:
        w = v.check_windows(cid).to_pylist()
        out[cid] = {(x["group"], x["start"], x["end"], x["records"], x["observed"])
                    for x in w if x["status"] == "fail" and x["end"] <= watermark}
    return out


def alert_windows(alerts: list[dict]) -> dict[str, set]:
    out: dict[str, set] = {cid: set() for cid in WINDOWED}
    out["vol2"] = set()
    for a in alerts:
        if a["kind"] != "freshness":
            out[a["check"]].add((a["group"], a["window_start"], a["window_end"],
                                 a["records"], a["observed"]))
    return out


class Stream:
    """The enforcer's check halves over a records table, as Spark runs them: per
    micro-batch, one task per partition over its range, the ranges cut by the source's own
    :func:`~kqlab.spark.kafka_source.cap_offsets` (``maxOffsetsPerTrigger`` shared in
    proportion to what each partition has waiting)."""

    def __init__(self, policy, location: str, per_batch: int = 180,
                 alert_passing: bool = False) -> None:
        self.policy = policy
        self.alert_passing = alert_passing
        self.judge = Judge(policy, now=NOW)
        self.location = location
        self.per_batch = per_batch
        self.driver = self._driver()
        self.alerts: list[dict] = []

    def _driver(self) -> StreamChecks:
        return StreamChecks(self.policy, self.location,
                            CheckSettings(lateness_ms=LATENESS,
                                          alert_passing=self.alert_passing),
                            "k.alerts", "p@x")

    def task(self, records: pa.Table, closed: dict[str, int]) -> dict:
        tc = TaskChecks(self.policy, closed)
        # the source hands a task its range in several Arrow batches
        for rb in records.to_batches(max_chunksize=37):
            t = single_records(rb)
            tc.add(self.judge(t), t.num_rows)
        head, partials = tc.payload()
        return {"checks": head, "partials": partials}

    def micro_batch(self, batch_id: int, parts: list[pa.Table]) -> list[dict]:
        closed = self.driver.before(batch_id)
        rows = [self.task(p, closed) for p in parts if p.num_rows]
        alerts = self.driver.after(batch_id, rows, NOW)
        self.driver.save()
        return alerts

    def batches(self, records: pa.Table) -> list[list[pa.Table]]:
        from kqlab.spark.kafka_source import cap_offsets

        per = [records.filter(pc.equal(records.column("partition"), p)) for p in range(PARTS)]
        latest = {TOPIC: {p: t.num_rows for p, t in enumerate(per)}}
        at = dict.fromkeys(range(PARTS), 0)
        out = []
        while any(at[p] < t.num_rows for p, t in enumerate(per)):
            end = cap_offsets({TOPIC: at}, latest, self.per_batch)[TOPIC]
            out.append([t.slice(at[p], end[p] - at[p]) for p, t in enumerate(per)])
            at = dict(end)
        return out


@pytest.fixture(scope="module")
def policy():
    return loads_policy(POLICY)


def test_enforced_checks_and_the_reasons_for_the_others(policy):
    from kqlab.spark.enforcer_config import check_support

    assert [c.id for c in enforced_checks(policy)] == [*WINDOWED[:7], "fresh", "us-top"]
    assert "whole sample" in check_support(policy.check("whole-nulls"))


def test_the_config_names_the_alert_topic_and_the_lateness(policy, tmp_path):
    from kqlab.spark.enforcer_config import (
        DEFAULT_LATENESS_MS,
        EnforcerConfigError,
        load_enforcer_file,
    )

    export(policy, "spark-streaming").write(tmp_path)
    path = tmp_path / "spark-streaming" / "enforcer.yaml"
    cfg = load_enforcer_file(path)
    assert cfg.checks == CheckSettings(f"{TOPIC}.alerts", DEFAULT_LATENESS_MS, False)
    text = path.read_text()
    for bad, why in (("lateness_ms: 60000", "lateness_ms: -1"),
                     ("alert_passing: false", "alert_passing: 'no'"),
                     ("lateness_ms: 60000", "lateness: 5")):
        path.write_text(text.replace(bad, why))
        with pytest.raises(EnforcerConfigError, match=r"enforcer.yaml: checks"):
            load_enforcer_file(path)
    path.write_text(text[:text.index("\nchecks:")] + "\n")
    assert load_enforcer_file(path).checks == CheckSettings()  # the defaults


def test_alert_rows_equal_the_replays_failing_windows(policy, tmp_path):
    records = records_table(planted())
    s = Stream(policy, str(tmp_path / "ck"))
    for b, parts in enumerate(s.batches(records)):
        s.alerts += s.micro_batch(b, parts)
    summary = s.driver.summary()
    assert summary["late"] == 0
    mark = summary["watermark"]
    assert mark == int(records.column("timestamp").to_numpy().max()) - LATENESS
    want = replay_failing(records, policy, mark)
    got = alert_windows(s.alerts)
    for cid in WINDOWED:
        assert got[cid] == want[cid], cid
        assert want[cid], f"{cid}: nothing planted fails"
    # the planted windows, by hand: partition 1 quiet in windows 8-11
    assert {(g, (st - T0) // W) for g, st, *_ in got["vol"]} == \
        {(f"{TOPIC}-1", k) for k in range(8, 12)}
    assert {(st - T0) // W for _, st, *_ in got["nulls"]} == {15}
    assert {(st - T0) // W for _, st, *_ in got["dups"]} == {20}
    assert {(st - T0) // W for _, st, *_ in got["regions"]} == {25}
    assert {(st - T0) // W for _, st, *_ in got["top"]} == {30}
    assert {(st - T0) // W for _, st, *_ in got["refused"]} == {32}
    # each alert once (no window judged twice), every one of the check's kind and policy
    keys = [alert_key(a) for a in s.alerts if a["kind"] != "freshness"]
    assert len(keys) == len(set(keys))
    assert all(a["policy"] == "stream-checks" and a["status"] == "fail" for a in s.alerts)
    # closed windows are dropped: the state holds the open ones only
    st = s.driver.state
    for check in enforced_checks(policy):
        if check.window_ms:
            t = st.partials[check.id].table
            assert not t.num_rows or pc.min(t.column("window")).as_py() >= \
                st.closed[check.id] - 0
    # freshness: per partition, its status after the last micro-batch equals the replay's
    # at the same clock; alerts where it changed (both partitions were stale at first)
    v = kqlab.replay(records, policy, framing="single", now=NOW)
    fresh = {w["group"]: w["status"] for w in v.check_windows("fresh").to_pylist()}
    assert fresh == {f"{TOPIC}-0": "pass", f"{TOPIC}-1": "fail"}
    assert dict(map(tuple, st.fresh["fresh"])) == fresh
    assert [(a["group"], a["status"]) for a in s.alerts if a["kind"] == "freshness"] == \
        [(f"{TOPIC}-0", "fail"), (f"{TOPIC}-1", "fail")]
    passing = Stream(policy, str(tmp_path / "passing"), alert_passing=True)
    for b, parts in enumerate(passing.batches(records)):
        passing.alerts += passing.micro_batch(b, parts)
    assert [(a["group"], a["status"]) for a in passing.alerts if a["kind"] == "freshness"] \
        == [(f"{TOPIC}-0", "fail"), (f"{TOPIC}-1", "fail"), (f"{TOPIC}-0", "pass")]
    # with passing windows sent too: every closed window once, the failing ones as before
    judged = [a for a in passing.alerts if a["kind"] != "freshness"]
    assert alert_windows([a for a in judged if a["status"] == "fail"]) == got
    per = passing.driver.summary()["by_check"]
    assert all(per[c]["alerts"] == per[c]["windows"] for c in WINDOWED)


def test_a_re_run_micro_batch_counts_its_records_once(policy, tmp_path):
    """A micro-batch run again (the driver died after saving its state, before Spark's
    commit) starts from the state of the one before: the same alerts, once per window."""
    records = records_table(planted())
    ck = str(tmp_path / "ck")
    s = Stream(policy, ck)
    batches = s.batches(records)
    for b, parts in enumerate(batches):
        s.alerts += s.micro_batch(b, parts)
        if b in (5, 9):  # a crash after the save: a new driver runs micro-batch b again
            s.driver = s._driver()
            again = s.micro_batch(b, parts)
            assert again == s.alerts[len(s.alerts) - len(again):]
    once = Stream(policy, str(tmp_path / "once"))
    for b, parts in enumerate(batches):
        once.alerts += once.micro_batch(b, parts)
    assert s.driver.summary() == once.driver.summary()
    unique = {alert_key(a): a for a in s.alerts}
    assert sorted(unique) == sorted(alert_key(a) for a in once.alerts)


def test_a_late_record_is_counted_and_not_judged(policy, tmp_path):
    records = records_table(planted(20))
    s = Stream(policy, str(tmp_path / "ck"))
    batches = s.batches(records)
    for b, parts in enumerate(batches):
        s.alerts += s.micro_batch(b, parts)
    before = s.driver.summary()
    assert before["late"] == 0
    late = records_table([{"key": b"late", "value": b'{"customer": null, "amount": 1}',
                           "timestamp": T0 + 5, "partition": 0}])
    alerts = s.micro_batch(len(batches), [late])
    after = s.driver.summary()
    per = after["by_check"]
    # every windowed check read it (us-top's when is false for it: not read)
    assert {c: per[c]["late"] for c in WINDOWED} == \
        {**dict.fromkeys(WINDOWED, 1), "us-top": 0}
    assert after["late"] == 7 and not [a for a in alerts if a["kind"] != "freshness"]
    assert np.all([per[c]["windows"] == before["by_check"][c]["windows"] for c in WINDOWED])


# -- end to end: the exported enforcer, a real broker, a crash before Spark's commit ----------
def _submit(folder: Path, bootstrap: str, checkpoint: Path, *args: str,
            **env: str) -> subprocess.CompletedProcess[bytes]:
    from tests.spark.kafka_helpers import submit_env

    return subprocess.run(["sh", str(folder / "submit.sh"), "--json-metrics", "--now",
                           str(NOW), *args],
                          env=submit_env(bootstrap, str(checkpoint), **env),
                          cwd=checkpoint.parent, capture_output=True, timeout=300,
                          start_new_session=True)  # a kill takes its process group


def _alerts(bootstrap: str) -> list[dict]:
    from tests.gate.conftest import read_topic

    return [{**json.loads(m.value()), "key": m.key()}
            for m in read_topic(bootstrap, "k.raw.alerts", 1, idle_s=0.5)]


def test_the_exported_enforcer_sends_the_replays_failing_windows(kafka, policy, tmp_path):
    rows = planted()
    for t, n in ((TOPIC, PARTS), ("k.raw.valid", PARTS), ("k.raw.dlq", PARTS),
                 ("k.raw.alerts", 1)):
        kafka.create_topic(t, partitions=n)
    kafka.produce(TOPIC, rows, timeout=60)
    ex = export(policy, "spark-streaming")
    assert [(c.check, c.status) for c in ex.checks] == \
        [(c.id, "enforced") for c in enforced_checks(policy)[:7]] + \
        [("fresh", "enforced"), ("us-top", "enforced"), ("whole-nulls", "not enforced")]
    ex.write(tmp_path / "export")
    folder = tmp_path / "export" / "spark-streaming"
    cfg = folder / "enforcer.yaml"
    text = cfg.read_text()
    assert "alert_topic: k.raw.alerts" in text and "lateness_ms: 60000" in text
    cfg.write_text(text.replace("maxOffsetsPerTrigger: 200000", "maxOffsetsPerTrigger: 300"))
    ck = tmp_path / "ck"
    kill_log = tmp_path / "kills.log"
    # killed after its second micro-batch sent its alerts and saved its state, before
    # Spark's commit: the restart runs that micro-batch again
    first = _submit(folder, kafka.bootstrap, ck, KQLAB_ENFORCER_KILL_AT="flushed:2",
                    KQLAB_ENFORCER_KILL_LOG=str(kill_log))
    assert kill_log.exists() and "KQLAB_ENFORCER_KILL_AT=flushed:2" in kill_log.read_text(), \
        first.stdout.decode()[-2000:] + first.stderr.decode()[-3000:]
    # and, behind the rest, a record for a window closed long ago: counted late by every
    # check that reads it, judged in no window (the replay below leaves it out)
    kafka.produce(TOPIC, [{"key": b"late", "value": b'{"customer": null, "amount": 1}',
                           "timestamp": T0 + 5, "partition": 0}])
    second = _submit(folder, kafka.bootstrap, ck, "--available-now")
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    final = json.loads(second.stdout.decode().splitlines()[-1])
    assert final["event"] == "stopped" and final["reruns"] == 1
    assert final["records"] == len(rows) + 1
    checks = final["checks"]
    assert checks["alert_topic"] == "k.raw.alerts"
    assert checks["late"] == 7
    assert {c: checks["by_check"][c]["late"] for c in WINDOWED} == \
        {**dict.fromkeys(WINDOWED, 1), "us-top": 0}
    records = records_table(rows)
    mark = checks["watermark"]
    assert mark == int(records.column("timestamp").to_numpy().max()) - LATENESS
    alerts = _alerts(kafka.bootstrap)
    # at least once: the re-run micro-batch sent its alerts again, the very same rows
    by_key: dict[bytes, dict] = {}
    for a in alerts:
        assert by_key.setdefault(a["key"], a) == a or a["kind"] == "freshness"
    unique = list(by_key.values())
    assert len(alerts) > len(unique)
    got = alert_windows(unique)
    want = replay_failing(records, policy, mark)
    for cid in WINDOWED:
        assert got[cid] == want[cid], cid
    assert all(a["policy_id"].startswith("stream-checks@") for a in unique)
    assert checks["alerts"] == len(unique)  # the state counts the re-run's alerts once


def test_a_check_changed_on_the_same_checkpoint_starts_afresh_at_the_watermark(policy,
                                                                              tmp_path):
    """A policy exported again with a check's window changed (and a check added) runs on
    the old checkpoint: the unchanged checks go on from their state, the changed and new
    ones start with no records after the newest record seen — never judging the past they
    did not read (an empty window there would fail)."""
    records = records_table(planted())
    ck = str(tmp_path / "ck")
    s = Stream(policy, ck)
    batches = s.batches(records)
    half = len(batches) // 2
    for b in range(half):
        s.alerts += s.micro_batch(b, batches[b])
    newest = s.driver.state.extent[1]
    text = POLICY.replace("id: nulls, kind: null_rate, field: customer, window: 10s",
                          "id: nulls, kind: null_rate, field: customer, window: 20s")
    text += "- {id: vol2, kind: volume, window: 10s, min: 1}\n"
    edited = loads_policy(text)
    s2 = Stream(edited, ck)
    for b in range(half, len(batches)):
        s2.alerts += s2.micro_batch(b, batches[b])
    once = Stream(policy, str(tmp_path / "once"))
    for b, parts in enumerate(batches):
        once.alerts += once.micro_batch(b, parts)
    unchanged = ("vol", "dups", "regions", "top", "refused", "negative", "us-top")
    both = alert_windows(s.alerts + s2.alerts)
    ref = alert_windows(once.alerts)
    assert {c: both[c] for c in unchanged} == {c: ref[c] for c in unchanged}
    per = s2.driver.summary()["by_check"]
    assert per["vol2"]["failing"] == 0 and per["vol2"]["windows"] > 0
    assert s2.driver.state.closed["vol2"] > newest
    # the null-rate jump (window 15) came before the switch: the 20 s nulls check never saw it
    assert not alert_windows(s2.alerts)["nulls"] and (newest - T0) // W > 15
    assert all(v["late"] == 0 for v in s2.driver.summary()["by_check"].values())


def test_a_silent_topic_goes_stale_between_micro_batches(spark, kafka, tmp_path):
    """No record, no micro-batch: the driver judges freshness again every trigger interval
    against the wall clock, and alerts when a partition's newest record grows too old."""
    import threading
    import time

    from confluent_kafka import Consumer, TopicPartition

    from kqlab.spark.enforcer import Enforcer, EnforcerSettings
    from kqlab.spark.enforcer_config import Route

    fresh = loads_policy("""kqlab: 1
name: fresh-only
topics: {names: [f.raw]}
checks:
- {id: fresh, kind: freshness, by: partition, max_age_ms: 1000}
""")
    for t, n in (("f.raw", 2), ("f.raw.valid", 2), ("f.raw.dlq", 2), ("f.raw.alerts", 1)):
        kafka.create_topic(t, partitions=n)
    e = Enforcer(spark, fresh, EnforcerSettings(
        routes=(Route("f.raw", "f.raw.valid", "f.raw.dlq"),), bootstrap=kafka.bootstrap,
        checkpoint=str(tmp_path / "ck"), trigger_seconds=0.5))
    run = threading.Thread(target=e.run, daemon=True)
    run.start()

    def batches(n: int) -> None:
        deadline = time.monotonic() + 90
        while len(e.batches) < n and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(e.batches) >= n, "the enforcer ran no micro-batch"

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "f-test"})
    c.assign([TopicPartition("f.raw.alerts", 0, 0)])
    alerts: list[dict] = []
    try:
        # partition 1 stamped an hour ahead (never stale here): the workers start on it
        kafka.produce("f.raw", [{"value": b"x", "partition": 1,
                                 "timestamp": int(time.time() * 1000) + 3_600_000}])
        batches(1)
        # partition 0 stamped 6 s ahead: fresh when its micro-batch judges it, stale 7 s on
        kafka.produce("f.raw", [{"value": b"x", "partition": 0,
                                 "timestamp": int(time.time() * 1000) + 6_000}])
        batches(2)
        deadline = time.monotonic() + 60
        while not alerts and time.monotonic() < deadline:
            alerts += [json.loads(m.value()) for m in c.consume(10, 0.5) if not m.error()]
    finally:
        c.close()
        e.stop()
        run.join(60)
    assert len(e.batches) == 2 and [b["checks"]["alerts"] for b in e.batches] == [0, 0]
    assert [(a["group"], a["status"], a["batch_id"]) for a in alerts] == \
        [("f.raw-0", "fail", e.batches[1]["batch_id"])]
    assert alerts[0]["observed"] > 1000


# -- volume by partition: every partition the source reads, the silent ones too -------------
SILENT = """kqlab: 1
name: silent-partition
topics: {names: [q.raw]}
checks:
- {id: vol, kind: volume, window: 10s, by: partition, min: 1}
- {id: vol-all, kind: volume, window: 10s, min: 1}
"""


def empty_windows(group: str, first: int, upto: int) -> set:
    """The failing windows of a partition without a record, by hand: every window from the
    one holding the first record the enforcer saw to the watermark's, 0 records each (the
    grid of a replay starts at its sample's first timestamp; ``first`` is aligned here, so
    no window is partial)."""
    assert first % W == 0
    return {(group, s, s + W, 0, 0.0) for s in range(first, upto, W)}


def test_a_partition_without_any_record_is_alerted_silent(spark, kafka, tmp_path):
    """A topic of three partitions, records in two: the enforcer knows the third from the
    source's offsets and alerts every one of its closed windows, the replay's failing
    windows of the same records plus that partition's empty ones."""
    from kqlab.spark.enforcer import Enforcer, EnforcerSettings
    from kqlab.spark.enforcer_config import Route
    from tests.gate.conftest import read_topic

    policy = loads_policy(SILENT)
    rows = planted(20)  # partitions 0 and 1; 1 quiet in windows 8-11
    for t, n in (("q.raw", 3), ("q.raw.valid", 3), ("q.raw.dlq", 3), ("q.raw.alerts", 1)):
        kafka.create_topic(t, partitions=n)
    kafka.produce("q.raw", rows, timeout=60)
    e = Enforcer(spark, policy, EnforcerSettings(
        routes=(Route("q.raw", "q.raw.valid", "q.raw.dlq"),), bootstrap=kafka.bootstrap,
        checkpoint=str(tmp_path / "ck"), now=NOW, available_now=True,
        source={"maxOffsetsPerTrigger": "200"}, checks=CheckSettings(lateness_ms=LATENESS)))
    final = e.run()
    assert final["records"] == len(rows) and final["micro_batches"] >= 3
    assert e.source_partitions(0) == {"q.raw": [0, 1, 2]}
    mark = final["checks"]["watermark"]
    records = records_table(rows, "q.raw")
    assert mark == int(records.column("timestamp").to_numpy().max()) - LATENESS
    alerts = [json.loads(m.value()) for m in read_topic(kafka.bootstrap, "q.raw.alerts", 1,
                                                        idle_s=0.5)]
    got: dict[str, set] = {"vol": set(), "vol-all": set()}
    for a in alerts:
        got[a["check"]].add((a["group"], a["window_start"], a["window_end"], a["records"],
                             a["observed"]))
    v = kqlab.replay(records, policy, framing="single", now=NOW)
    replayed = {(x["group"], x["start"], x["end"], x["records"], x["observed"])
                for x in v.check_windows("vol").to_pylist()
                if x["status"] == "fail" and x["end"] <= mark}
    assert {g for g, *_ in replayed} == {"q.raw-1"}  # the replay knows no partition 2
    silent = empty_windows("q.raw-2", T0, (mark // W) * W)
    assert len(silent) == mark // W - T0 // W >= 10
    assert got["vol"] == replayed | silent
    assert not got["vol-all"]  # the topic as a whole never went quiet
    assert final["checks"]["by_check"]["vol"]["failing"] == len(replayed | silent)


def test_a_partition_the_source_reads_later_joins_from_then_on(policy, tmp_path):
    """Driven as Spark runs it, with the source's partitions per micro-batch: partition 2
    known (empty) from the first micro-batch is judged from the first window; a partition
    3 the source starts reading halfway is judged from the window after the newest record
    seen then, never for the windows before it joined."""
    records = records_table(planted())
    s = Stream(policy, str(tmp_path / "ck"))
    batches = s.batches(records)
    half = len(batches) // 2
    newest = None
    for b, parts in enumerate(batches):
        if b == half:
            newest = s.driver.state.extent[1]
        known = {TOPIC: [0, 1, 2] + ([3] if b >= half else [])}
        closed = s.driver.before(b)
        rows = [s.task(p, closed) for p in parts if p.num_rows]
        s.alerts += s.driver.after(b, rows, NOW, known)
        s.driver.save()
        if b == half:  # a re-run from the checkpoint keeps who joined when
            s.driver = s._driver()
            closed = s.driver.before(b)
            rows = [s.task(p, closed) for p in parts if p.num_rows]
            again = s.driver.after(b, rows, NOW, known)
            s.driver.save()
            assert again == s.alerts[len(s.alerts) - len(again):]
    mark = s.driver.summary()["watermark"]
    upto = (mark // W) * W
    got = alert_windows(s.alerts)["vol"]
    want = replay_failing(records, policy, mark)["vol"]
    joined = (newest // W + 1) * W
    assert T0 < joined < upto
    assert got == want | empty_windows(f"{TOPIC}-2", T0, upto) | \
        empty_windows(f"{TOPIC}-3", joined, upto)
    assert s.driver.state.since == {"vol": {f"{TOPIC}-3": joined}}
    # without the source's partitions (None): only the partitions with records, as before
    plain = Stream(policy, str(tmp_path / "plain"))
    for b, parts in enumerate(batches):
        plain.alerts += plain.micro_batch(b, parts)
    assert alert_windows(plain.alerts)["vol"] == want


def test_the_source_partitions_come_from_sparks_offset_log(tmp_path):
    """The driver reads a micro-batch's partitions from Spark's write-ahead offset log; a
    missing or unreadable entry fails the micro-batch with what to check, never guesses."""
    from kqlab.spark.enforcer import Enforcer, EnforcerError, EnforcerSettings
    from kqlab.spark.enforcer_config import Route

    e = Enforcer(None, loads_policy(SILENT), EnforcerSettings(
        routes=(Route("q.raw", "q.raw.valid", "q.raw.dlq"),), bootstrap="127.0.0.1:1",
        checkpoint=str(tmp_path / "ck")))
    log = tmp_path / "ck" / "spark" / "offsets"
    log.mkdir(parents=True)
    (log / "4").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n'
                           '{"q.raw":{"0":12,"1":0,"2":7}}')
    assert e.source_partitions(4) == {"q.raw": [0, 1, 2]}
    with pytest.raises(EnforcerError, match=r"micro-batch 5 from Spark's offset log .*"
                       r"offsets/5.*volume checks by partition"):
        e.source_partitions(5)
    (log / "6").write_text('v1\n{}\n["q.raw"]')
    with pytest.raises(EnforcerError, match=r"micro-batch 6"):
        e.source_partitions(6)
