"""The Structured Streaming enforcer killed with SIGKILL at random points while a producer keeps
writing, restarted from its checkpoint each time (the exported ``submit.sh``: spark-submit on
``local[2]``): no record is lost, every record is in exactly one of the clean and dead-letter
topics, the first copies keep each partition's order, and the duplicates are counted — by
reading the topics back and by the enforcer itself (``redelivered``, an upper bound).

The kills (``KQLAB_ENFORCER_CRASHES``, default 10) are spread over a micro-batch's life: a
shuffled schedule names, per kill, either a phase of a random micro-batch of that run —
``planned`` (nothing produced), ``producing`` (a task produced half its records),
``flushed`` (everything delivered, Spark has not committed), ``committed`` — at which the
enforcer SIGKILLs its driver (``KQLAB_ENFORCER_KILL_AT``, :mod:`kqlab.spark.enforcer`), or
``timer``: ``kill -9`` of the driver and its workers from outside, a random time after its
first micro-batch (or before it had one).  The summary line (kills, records, lost,
duplicates) is printed (``pytest -s``) and is in every assertion message.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from kqlab.export import export
from kqlab.policy import loads_policy
from kqlab.spark.enforcer import KILL_PHASES
from tests.gate.conftest import read_topic
from tests.spark.kafka_helpers import NOW, kafka, submit_env

__all__ = ["kafka"]

CRASHES = int(os.environ.get("KQLAB_ENFORCER_CRASHES", "10"))
PARTS = 2
REPORT: list[str] = []
POLICY = """kqlab: 1
name: crash-enforcer
topics: {names: [c.raw]}
rules:
- {id: short, kind: value_size, max: 8}
"""


def _produce(bootstrap: str, stop: threading.Event, sent: list[int]) -> None:
    """Until ``stop``: about 500 records/s; value = the 8-digit id, every 7th padded to 9+
    bytes (invalid); partition = id % PARTS; the id also in a header."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "linger.ms": 5})
    i = 0
    while not stop.is_set():
        for _ in range(50):
            value = b"%08d" % i + (b"!" if i % 7 == 0 else b"")
            p.produce("c.raw", value, partition=i % PARTS, timestamp=NOW,
                      headers=[("id", str(i).encode())])
            i += 1
        p.poll(0)
        time.sleep(0.1)
    assert p.flush(30) == 0
    sent.append(i)


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(entry))
    return out


class Run:
    """One ``submit.sh`` run: its process, its stdout lines, and every process it started
    (watched while it lives), so a kill -9 takes the driver and its local workers down and
    nothing it started outlives it."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path, log: Path):
        self.lines: list[str] = []
        self.seen: dict[int, str | None] = {}
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                         stderr=err, start_new_session=True)
        self._done = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._watch, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.decode())

    def _watch(self) -> None:
        while not self._done.is_set() and self.proc.poll() is None:
            todo = [self.proc.pid]
            while todo:
                for c in _children(todo.pop()):
                    if c not in self.seen:
                        self.seen[c] = _start_time(c)
                    todo.append(c)
            time.sleep(0.1)

    def batches(self) -> list[dict]:
        return [json.loads(x) for x in list(self.lines) if '"event": "batch"' in x]

    def kill(self) -> None:
        """kill -9 the driver's process group, then whatever it started that still runs."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.reap()

    def reap(self) -> None:
        self._done.set()
        self.proc.wait(60)
        for pid, started in self.seen.items():
            if started is not None and _start_time(pid) == started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def setup(kafka, tmp_path):
    for t in ("c.raw", "c.raw.valid", "c.raw.dlq"):
        kafka.create_topic(t, partitions=PARTS)
    export(loads_policy(POLICY), "spark-streaming").write(tmp_path / "export")
    folder = tmp_path / "export" / "spark-streaming"
    cfg = folder / "enforcer.yaml"
    cfg.write_text(cfg.read_text().replace("maxOffsetsPerTrigger: 200000",
                                           "maxOffsetsPerTrigger: 3000"))
    return folder


def _schedule(rng: random.Random) -> list[str]:
    kinds = [*KILL_PHASES, "timer"]
    out = [kinds[k % len(kinds)] for k in range(CRASHES)]
    rng.shuffle(out)
    return out


def test_kill_9_at_random_points_loses_nothing(kafka, setup, tmp_path):
    folder = setup
    rng = random.Random(int(os.environ.get("KQLAB_ENFORCER_CRASH_SEED", "18")))
    stop, sent = threading.Event(), []
    producer = threading.Thread(target=_produce, args=(kafka.bootstrap, stop, sent),
                                daemon=True)
    started = time.monotonic()
    producer.start()
    log = tmp_path / "enforcer.log"
    kill_log = tmp_path / "kills.log"
    ck = tmp_path / "checkpoint"
    cmd = ["sh", str(folder / "submit.sh"), "--json-metrics", "--now", str(NOW)]
    kills: list[str] = []
    for kind in _schedule(rng):
        env = submit_env(kafka.bootstrap, str(ck))
        if kind == "timer":
            run = Run(cmd, env, tmp_path, log)
            # mostly while it forwards (after its first micro-batch), one time in three
            # before it got any (JVM, session, query start)
            busy = rng.random() < 2 / 3
            deadline = time.monotonic() + 120
            while busy and time.monotonic() < deadline and not run.batches():
                time.sleep(0.05)
            delay = rng.uniform(0.0, 1.5) if busy else rng.uniform(2.0, 12.0)
            time.sleep(delay)
            assert run.proc.poll() is None, log.read_text()[-3000:]
            run.kill()
            kills.append(f"timer {'after a micro-batch' if busy else 'at start'} "
                         f"+{delay:.2f}s")
        else:
            n = rng.randint(1, 3)
            env["KQLAB_ENFORCER_KILL_AT"] = f"{kind}:{n}"
            env["KQLAB_ENFORCER_KILL_LOG"] = str(kill_log)
            run = Run(cmd, env, tmp_path, log)
            try:
                run.proc.wait(180)
            except subprocess.TimeoutExpired:
                run.kill()
                raise AssertionError(f"the enforcer never reached {kind}:{n}\n"
                                     + log.read_text()[-3000:]) from None
            run.reap()
            said = kill_log.read_text() if kill_log.exists() else ""
            assert f"KQLAB_ENFORCER_KILL_AT={kind}" in said, log.read_text()[-3000:]
            kill_log.unlink()
            kills.append(f"{kind}:{n}")
        assert run.proc.returncode == -signal.SIGKILL, (kind, run.proc.returncode,
                                                        log.read_text()[-3000:])
    stop.set()
    producer.join(60)
    assert sent, "the producer did not finish"
    total = sent[0]
    final = Run([*cmd, "--available-now"], submit_env(kafka.bootstrap, str(ck)), tmp_path,
                log)
    try:
        final.proc.wait(300)
    finally:
        final.kill()
    assert final.proc.returncode == 0, log.read_text()[-3000:]
    metrics = json.loads(final.lines[-1])
    assert metrics["event"] == "stopped"

    ok = read_topic(kafka.bootstrap, "c.raw.valid", PARTS, expect=1)
    dead = read_topic(kafka.bootstrap, "c.raw.dlq", PARTS, expect=1)
    ids_ok = [int(m.headers()[0][1]) for m in ok]
    ids_dead = [int(m.headers()[0][1]) for m in dead]
    lost = set(range(total)) - set(ids_ok) - set(ids_dead)
    dup_ok, dup_dead = len(ids_ok) - len(set(ids_ok)), len(ids_dead) - len(set(ids_dead))
    duplicates = dup_ok + dup_dead
    by_kind = {k: sum(1 for x in kills if x.split(":")[0].split(" ")[0] == k)
               for k in (*KILL_PHASES, "timer")}
    summary = (f"enforcer crash test: {len(kills)} kill -9 "
               f"({', '.join(f'{k} {v}' for k, v in by_kind.items())}); {total} records "
               f"produced, {len(lost)} lost, {duplicates} duplicates ({duplicates / total:.2%}: "
               f"{dup_ok} in the sink, {dup_dead} in the DLQ), the enforcer reported "
               f"{metrics['redelivered']} redelivered in {metrics['reruns']} re-run "
               f"micro-batches over {metrics['restarts']} restarts; "
               f"{time.monotonic() - started:.0f} s; kill points: {kills}")
    REPORT.append(summary)
    print("\n" + summary)
    assert not lost, f"{len(lost)} lost (first {sorted(lost)[:10]}); {summary}"
    assert set(ids_ok) | set(ids_dead) == set(range(total)), summary
    assert not set(ids_ok) & set(ids_dead), summary  # exactly one of clean or DLQ
    assert all(i % 7 == 0 for i in ids_dead) and all(i % 7 for i in ids_ok), summary
    for msgs in (ok, dead):  # order per partition: first copies ascend
        for p in range(PARTS):
            seq = [int(m.headers()[0][1]) for m in msgs if m.partition() == p]
            firsts = list(dict.fromkeys(seq))
            assert firsts == sorted(firsts), summary
            assert all(i % PARTS == p for i in firsts), summary
    # the duplicates are what re-run micro-batches re-sent, and the enforcer counted them
    assert duplicates <= metrics["redelivered"], summary
    assert 1 <= metrics["restarts"] <= len(kills), summary  # a kill at start may precede it
    if by_kind["flushed"]:  # delivered but not committed: that micro-batch is sent twice
        assert duplicates > 0 and metrics["reruns"] > 0, summary
    # each micro-batch is counted by every attempt that finished: once, or again when the
    # driver died between counting and Spark's commit (then it was re-sent: redelivered)
    assert total <= metrics["records"] <= total + metrics["redelivered"], summary
