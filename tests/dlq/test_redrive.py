"""Redrive on the embedded broker: a dry run sends and writes nothing; an executed redrive
sends exactly the records that pass, once, as they were (key, value, headers, timestamp) plus
the marker, to their source partition; a re-run sends nothing; and the redrive log's own
rules (a torn last line, a log in use, a line that is not the log's)."""

from __future__ import annotations

import json

import pytest

from kqlab.dlq import (
    REDRIVE_HEADER,
    DeadLetterError,
    RedriveLog,
    RedriveLogError,
    redrive,
)
from kqlab.policy import loads_policy
from tests.dlq.conftest import NOW, gate_dead_letter, read_all

POLICY = loads_policy("""kqlab: 1
name: orders-v2
value: {format: json}
rules:
- {id: amount-positive, kind: field_range, field: amount, min: 0.01}
""")


def _letters(n: int) -> list[dict]:
    return [dict(gate_dead_letter(i, amount=-1 if i % 5 == 0 else 5), partition=i % 2)
            for i in range(n)]


@pytest.fixture
def topics(kafka, request):
    """A fresh source topic (2 partitions) and its dead-letter topic (2 partitions) holding
    40 gate dead letters, 8 of which still fail the amended policy."""
    name = request.node.name.replace("[", "-").replace("]", "")[:40]
    source, dlq = f"{name}.orders", f"{name}.orders.dlq"
    kafka.create_topic(source, partitions=2)
    kafka.create_topic(dlq, partitions=2)
    letters = [dict(x, headers=[(k, v.replace(b"orders", source.encode()) if k ==
                                 "kqlab.source.topic" else v) for k, v in x["headers"]])
               for x in _letters(40)]
    kafka.produce(dlq, letters)
    return source, dlq


def test_a_dry_run_sends_and_writes_nothing(kafka, topics, tmp_path):
    source, dlq = topics
    log = tmp_path / "r.jsonl"
    result = redrive(kafka.bootstrap, dlq, POLICY, now=NOW, log=log)
    assert result.dry_run and not log.exists()
    s = result.summary()
    assert s["redrive"]["records"] == 32 and s["stay"]["by_why"] == {"fails": 8}
    assert read_all(kafka.bootstrap, source).num_rows == 0
    json.dumps(s)


def test_execute_sends_each_passing_record_once_as_it_was(kafka, topics, tmp_path):
    source, dlq = topics
    log = tmp_path / "r.jsonl"
    result = redrive(kafka.bootstrap, dlq, POLICY, now=NOW, log=log, execute=True,
                     chunk_size=7)
    assert result.ok and result.delivered == 32
    got = read_all(kafka.bootstrap, source).to_pylist()
    assert len(got) == 32
    dead = {(r["partition"], r["offset"]): r for r in read_all(kafka.bootstrap, dlq).to_pylist()}
    for r in got:
        marker = r["headers"][-1]
        assert marker["key"] == REDRIVE_HEADER
        t, p, o = marker["value"].decode().split(":")
        assert t == dlq
        letter = dead[(int(p), int(o))]
        i = int(letter["key"][1:])
        assert i % 5 != 0  # only what passes
        assert r["key"] == letter["key"] and r["value"] == letter["value"]
        assert r["timestamp"] == letter["timestamp"] == NOW + i
        assert r["headers"][:-1] == [{"key": "trace", "value": b"t%d" % i}]  # failure hdrs off
        assert r["partition"] == i % 2  # its source partition
    # the log: a run line, then 5 chunks, each intent written before its done, dones in order
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert events[0]["event"] == "run"
    where = {(e["event"], e["chunk"]): i for i, e in enumerate(events[1:])}
    assert sorted(where) == sorted((k, c) for k in ("intent", "done") for c in range(1, 6))
    assert all(where[("intent", c)] < where[("done", c)] for c in range(1, 6))
    assert [e["chunk"] for e in events if e["event"] == "done"] == [1, 2, 3, 4, 5]
    # a re-run sends nothing more
    again = redrive(kafka.bootstrap, dlq, POLICY, now=NOW, log=log, execute=True)
    assert again.delivered == 0
    assert again.summary()["stay"]["by_why"] == {"redriven": 32, "fails": 8}
    assert read_all(kafka.bootstrap, source).num_rows == 32
    # and a dry run reading the log says the same
    dry = redrive(kafka.bootstrap, dlq, POLICY, now=NOW, log=log)
    assert dry.summary()["redrive"]["records"] == 0


def test_to_another_topic_and_requests_that_are_wrong(kafka, topics, tmp_path):
    source, dlq = topics
    kafka.create_topic(source + ".retry", partitions=3)
    result = redrive(kafka.bootstrap, dlq, POLICY, now=NOW, to=source + ".retry",
                     log=tmp_path / "r.jsonl", execute=True)
    assert result.delivered == 32
    assert read_all(kafka.bootstrap, source + ".retry").num_rows == 32
    with pytest.raises(DeadLetterError, match="does not exist"):
        redrive(kafka.bootstrap, dlq, POLICY, to="no-such-topic", now=NOW)
    with pytest.raises(DeadLetterError, match="needs a redrive log"):
        redrive(kafka.bootstrap, dlq, POLICY, now=NOW, execute=True)


def test_the_redrive_log_drops_a_torn_line_refuses_foreign_lines_and_locks(tmp_path):
    path = tmp_path / "r.jsonl"
    with RedriveLog(path) as log:
        log.start_run("r1", "d", at=1, bootstrap="b", policy="p", to=None,
                      scan_from={"orders": {0: 5}})
        log.intent("r1", 1, "d", [(0, 1, "orders", 0), (0, 2, "orders", -1)])
        log.done("r1", 1, "d", [(0, 1, "orders", 0, 9)], [], [(0, 2, "_MSG_TIMED_OUT")])
        with pytest.raises(RedriveLogError, match="another redrive"):
            RedriveLog(path).open()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"v":1,"event":"intent","run":"r2","chunk":1,"dlq":"d","rec')
    log = RedriveLog(path)
    assert log.notes and "torn" in log.notes[0]
    assert set(log.state("d", "done")) == {(0, 1)}
    assert set(log.state("d", "intent")) == {(0, 2)}  # unknown fate: left to recovery
    assert log.scan_from("r1") == {"orders": {0: 5}}
    with log:
        pass
    assert path.read_bytes() == whole  # the torn tail cut off, nothing else touched
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"v":1,"event":"run","run":"r"}\nhello\n')
    with pytest.raises(RedriveLogError, match=r"bad.jsonl:2: not a kqlab redrive log line"):
        RedriveLog(bad)
    assert bad.read_text().endswith("hello\n")


def test_recovery_settles_an_interrupted_run_sent_by_key(kafka, topics, tmp_path):
    """A log whose run logged intents for 10 dead letters bound for another topic (by key,
    partition -1) and died after 4 of them landed: a dry run says they are pending; the next
    execute finds those 4 by their markers (in whichever partition the key put them), sends
    the other 28 passing ones, and the target holds each passing record once."""
    from confluent_kafka import Producer

    from kqlab.dlq.revalidate import marker_values

    source, dlq = topics
    target = source + ".again"
    kafka.create_topic(target, partitions=3)
    log = tmp_path / "r.jsonl"
    passing = [i for i in range(40) if i % 5]
    # which dead letter (partition, offset) holds letter i: partition i % 2, in produce order
    where = {i: (i % 2, i // 2) for i in range(40)}
    with RedriveLog(log) as rl:
        rl.start_run("dead-run", dlq, at=NOW, bootstrap=kafka.bootstrap, policy="p", to=target,
                     scan_from={target: {0: 0, 1: 0, 2: 0}})
        rl.intent("dead-run", 1, dlq, [(*where[i], target, -1) for i in passing[:10]])
    import numpy as np

    p = Producer({"bootstrap.servers": kafka.bootstrap, "partitioner": "murmur2_random"})
    for i in passing[:4]:  # what the dead run got out before it died
        (m,) = marker_values(dlq, np.array([where[i][0]]), np.array([where[i][1]]))
        p.produce(target, b"v", b"k%d" % i, headers=[(REDRIVE_HEADER, m)])
    assert p.flush(10) == 0

    dry = redrive(kafka.bootstrap, dlq, POLICY, to=target, now=NOW, log=log)
    assert dry.summary()["stay"]["by_why"]["pending"] == 10
    result = redrive(kafka.bootstrap, dlq, POLICY, to=target, now=NOW, log=log, execute=True)
    assert result.recovery.to_dict() == {"pending": 10, "found": 4, "missing": 6,
                                        "scanned": 4}
    assert result.delivered == 28
    markers = [hs[-1]["value"] for hs in read_all(kafka.bootstrap, target)["headers"]
               .to_pylist()]
    assert len(markers) == len(set(markers)) == 32
