"""The gate as a process (``kqlab gate --config gate.yaml``): killed with SIGKILL at random
points while a producer keeps writing, restarted each time — no record is lost, duplicates are
counted and reported, order per partition holds; SIGTERM stops it cleanly (exit 0, everything
committed); an edited policy is refused.

The kills (``KQLAB_GATE_CRASHES``, default the issue's 20) are spread over the gate's cycle: a
shuffled schedule names, per kill, either a phase of a random poll batch — ``polled`` (records
fetched, nothing produced), ``producing`` (half produced), ``produced`` (before the flush),
``flushed`` (delivered, not committed), ``committed`` — which the gate reaches and SIGKILLs
itself at (``KQLAB_GATE_KILL_AT``, kqlab.gate._gate), or ``timer``: ``kill -9`` from outside a
random time after its first records (or before it got any).  The summary line (kills per
phase, records, lost, duplicates) is printed in pytest's terminal summary.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from kqlab.embedded import free_port
from kqlab.export.gate import build
from kqlab.gate._gate import KILL_PHASES
from kqlab.policy import loads_policy
from tests.gate.conftest import read_topic

CRASHES = int(os.environ.get("KQLAB_GATE_CRASHES", "20"))
PARTS = 2
#: the summary lines pytest prints at the end (tests/gate/conftest.py)
REPORT: list[str] = []
POLICY = """kqlab: 1
name: crash-gate
topics: {names: [c.raw]}
rules:
- {id: short, kind: value_size, max: 8}
"""


def _gate_cmd(config: Path, bootstrap: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kqlab.cli", "gate", "--config", str(config),
            "--bootstrap", bootstrap, "--group", "crash-gate", "--batch-max", "500",
            "-X", "consumer.session.timeout.ms=6000", "-X", "consumer.heartbeat.interval.ms=200",
            "--log-interval", "0", "--json-metrics", *extra]


def _records(port: int) -> int:
    """Records the gate behind ``port`` has judged so far (0 while it is not serving)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics.json", timeout=1) as r:
            return int(json.loads(r.read())["records"])
    except OSError:
        return 0


def _start(cmd: list[str], log: Path, env: dict[str, str] | None = None
           ) -> subprocess.Popen[bytes]:
    with open(log, "ab") as err:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=True, env=env)


def _produce(bootstrap: str, stop: threading.Event, sent: list[int]) -> None:
    """Until ``stop``: about 1000 records/s; value = the 8-digit id, every 7th padded to 9+
    bytes (invalid); partition = id % PARTS.  ``sent[0]`` = how many were produced."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "linger.ms": 5})
    i = 0
    while not stop.is_set():
        for _ in range(100):
            value = b"%08d" % i + (b"!" if i % 7 == 0 else b"")
            p.produce("c.raw", value, partition=i % PARTS, headers=[("id", str(i).encode())])
            i += 1
        p.poll(0)
        time.sleep(0.1)
    assert p.flush(30) == 0
    sent.append(i)


@pytest.fixture
def files(tmp_path):
    policy_file = tmp_path / "crash-gate.yaml"
    policy_file.write_text(POLICY)
    export = build(loads_policy(POLICY), policy_path=str(policy_file))
    config = tmp_path / "gate.yaml"
    config.write_text(export.files["gate/gate.yaml"])
    return config, policy_file


@pytest.fixture
def setup(kafka, files):
    for t in ("c.raw", "c.raw.valid", "c.raw.dlq"):
        kafka.create_topic(t, partitions=PARTS)
    return files


def _schedule(rng: random.Random) -> list[str]:
    """``CRASHES`` kill points, every kind as evenly as the count allows, shuffled."""
    kinds = [*KILL_PHASES, "timer"]
    out = [kinds[k % len(kinds)] for k in range(CRASHES)]
    rng.shuffle(out)
    return out


def test_kill_9_at_random_points_loses_nothing(kafka, setup, tmp_path):
    config, _ = setup
    rng = random.Random(int(os.environ.get("KQLAB_GATE_CRASH_SEED", "8")))
    stop, sent = threading.Event(), []
    producer = threading.Thread(target=_produce, args=(kafka.bootstrap, stop, sent),
                                daemon=True)
    started = time.monotonic()
    producer.start()
    log = tmp_path / "gate.log"
    cmd = _gate_cmd(config, kafka.bootstrap)
    kills: list[str] = []
    for kind in _schedule(rng):
        port = free_port()
        env = dict(os.environ)
        env.pop("KQLAB_GATE_KILL_AT", None)
        if kind == "timer":
            proc = _start([*cmd, "--health-port", str(port)], log, env)
            # mostly while it forwards (a random moment after its first records), one time in
            # three before it got any (joining the group, first fetch)
            busy = rng.random() < 2 / 3
            deadline = time.monotonic() + 30
            while busy and time.monotonic() < deadline and _records(port) == 0:
                time.sleep(0.02)
            delay = rng.uniform(0.0, 0.5) if busy else rng.uniform(0.0, 1.5)
            time.sleep(delay)
            assert proc.poll() is None, log.read_text()[-2000:]
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills.append(f"timer {'after first records' if busy else 'at start'} "
                         f"+{delay:.2f}s")
        else:
            batch = rng.randint(1, 4)
            env["KQLAB_GATE_KILL_AT"] = f"{kind}:{batch}"
            proc = _start([*cmd, "--health-port", str(port)], log, env)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise AssertionError(f"the gate never reached {kind}:{batch}\n"
                                     + log.read_text()[-2000:]) from None
            assert f"KQLAB_GATE_KILL_AT={kind}:{batch}: SIGKILL" in log.read_text(), \
                log.read_text()[-2000:]
            kills.append(f"{kind}:{batch}")
        assert proc.returncode == -signal.SIGKILL, (kind, proc.returncode)
    stop.set()
    producer.join(60)
    assert sent, "the producer did not finish"
    n = sent[0]
    final = _start(cmd, log)
    try:
        def counted() -> int:
            ok = read_topic(kafka.bootstrap, "c.raw.valid", PARTS, idle_s=0.3)
            dead = read_topic(kafka.bootstrap, "c.raw.dlq", PARTS, idle_s=0.3)
            return len({m.headers()[0][1] for m in ok + dead})

        deadline = time.monotonic() + 60
        while counted() < n and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        final.send_signal(signal.SIGTERM)
        out, _ = final.communicate(timeout=30)
    assert final.returncode == 0, log.read_text()[-2000:]
    last = json.loads(out.decode().strip().splitlines()[-1])
    assert last["event"] == "stopped"

    ok = read_topic(kafka.bootstrap, "c.raw.valid", PARTS, expect=1)
    dead = read_topic(kafka.bootstrap, "c.raw.dlq", PARTS, expect=1)
    ids_ok = [int(m.headers()[0][1]) for m in ok]
    ids_dead = [int(m.headers()[0][1]) for m in dead]
    lost = set(range(n)) - set(ids_ok) - set(ids_dead)
    dup_ok, dup_dead = len(ids_ok) - len(set(ids_ok)), len(ids_dead) - len(set(ids_dead))
    duplicates = dup_ok + dup_dead
    by_kind = {k: sum(1 for x in kills if x.split(":")[0].split(" ")[0] == k)
               for k in (*KILL_PHASES, "timer")}
    kinds = ", ".join(f"{k} {v}" for k, v in by_kind.items())
    summary = (f"gate crash test: {len(kills)} kill -9 ({kinds}); "
               f"{n} records produced, {len(lost)} lost, {duplicates} duplicates "
               f"({duplicates / n:.2%}: {dup_ok} in the sink, {dup_dead} in the DLQ); "
               f"{time.monotonic() - started:.0f} s; kill points: {kills}")
    REPORT.append(summary)
    print("\n" + summary)
    # zero lost, each in the right topic
    assert not lost, f"{len(lost)} lost (first {sorted(lost)[:10]}); {summary}"
    assert set(ids_ok) | set(ids_dead) == set(range(n)), summary
    assert not set(ids_ok) & set(ids_dead), summary
    assert all(i % 7 == 0 for i in ids_dead) and all(i % 7 for i in ids_ok), summary
    # order per partition: each partition's records, first occurrences only, ascend
    for msgs in (ok, dead):
        for p in range(PARTS):
            seq = [int(m.headers()[0][1]) for m in msgs if m.partition() == p]
            firsts = list(dict.fromkeys(seq))
            assert firsts == sorted(firsts), summary
            assert all(i % PARTS == p for i in firsts), summary
    # a kill between the flush and the commit re-forwards that whole batch: duplicates are
    # certain then, and they must be what the count above found (not deduplicated away)
    if by_kind["flushed"]:
        assert duplicates > 0, summary
    # everything was committed by the graceful stop: a new member would re-read nothing
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "crash-gate"})
    try:
        committed = c.committed([TopicPartition("c.raw", p) for p in range(PARTS)], timeout=10)
    finally:
        c.close()
    assert sum(tp.offset for tp in committed) == n, summary


def test_an_edited_policy_is_refused(files, kafka):
    config, policy_file = files
    policy_file.write_text(POLICY.replace("max: 8", "max: 9"))
    r = subprocess.run(_gate_cmd(config, kafka.bootstrap), capture_output=True, timeout=60)
    assert r.returncode == 2
    assert b"edited after export" in r.stderr
