"""``kqlab dlq redrive --execute`` as a process, killed with SIGKILL in the middle — from
outside right after it logged its first intent, and at every point of a chunk's cycle
(``KQLAB_REDRIVE_KILL_AT``: intent logged / half produced / produced / flushed / done
logged) — and re-run each time: in the end every record that passes is in the target exactly
once (the target is read back and the markers counted), nothing that fails is, and the log
shows recovery finding some interrupted sends in the target and re-sending the others."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

from kqlab.dlq import KILL_PHASES, REDRIVE_HEADER
from tests.dlq.conftest import NOW, gate_dead_letter, read_all

N, PARTS, CHUNK = 600, 2, 40
POLICY = """kqlab: 1
name: orders-v2
value: {format: json}
rules:
- {id: amount-positive, kind: field_range, field: amount, min: 0.01}
"""


def _cmd(bootstrap: str, policy, log) -> list[str]:
    return [sys.executable, "-m", "kqlab.cli", "dlq", "redrive", "crash.orders.dlq",
            "--bootstrap", bootstrap, "--policy", str(policy), "--execute", "--log", str(log),
            "--chunk", str(CHUNK), "--now", str(NOW), "--json"]


def _lines(log) -> int:
    try:
        return log.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_kill_9_in_the_middle_then_rerun_redrives_every_passing_record_once(kafka, tmp_path):
    kafka.create_topic("crash.orders", partitions=PARTS)
    kafka.create_topic("crash.orders.dlq", partitions=PARTS)
    letters = [dict(gate_dead_letter(i, source="crash.orders", parts=PARTS,
                                     amount=-1 if i % 5 == 0 else 5), partition=i % PARTS)
               for i in range(N)]
    kafka.produce("crash.orders.dlq", letters)
    policy = tmp_path / "orders-v2.yaml"
    policy.write_text(POLICY)
    log = tmp_path / "redrive.jsonl"
    cmd = _cmd(kafka.bootstrap, policy, log)
    stderr = tmp_path / "stderr.log"
    kills: list[str] = []

    # 1. from outside: SIGKILL as soon as the run logged its first intent
    for _ in range(2):
        before = _lines(log)
        with open(stderr, "ab") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                                    env={k: v for k, v in os.environ.items()
                                         if k != "KQLAB_REDRIVE_KILL_AT"})
        deadline = time.monotonic() + 60
        while _lines(log) < before + 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert proc.returncode == -signal.SIGKILL, stderr.read_text()[-2000:]
        kills.append("outside")

    # 2. at every point of a chunk's cycle
    for phase in KILL_PHASES:
        env = {**os.environ, "KQLAB_REDRIVE_KILL_AT": f"{phase}:2"}
        with open(stderr, "ab") as err:
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                  timeout=120, check=False)
        assert proc.returncode == -signal.SIGKILL, (phase, stderr.read_text()[-2000:])
        assert f"KQLAB_REDRIVE_KILL_AT={phase}:2: SIGKILL" in stderr.read_text()
        kills.append(phase)

    # 3. a clean re-run finishes the job; one more sends nothing
    env = {k: v for k, v in os.environ.items() if k != "KQLAB_REDRIVE_KILL_AT"}
    done = subprocess.run(cmd, capture_output=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    final = json.loads(done.stdout.decode().strip().splitlines()[-1])
    again = subprocess.run(cmd, capture_output=True, env=env, timeout=120, check=False)
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    assert json.loads(again.stdout)["delivered"] == 0

    # every passing record exactly once, nothing that fails
    target = read_all(kafka.bootstrap, "crash.orders")
    markers = Counter()
    for hs in target.column("headers").to_pylist():
        mine = [h["value"].decode() for h in hs if h["key"] == REDRIVE_HEADER]
        assert len(mine) == 1
        markers[mine[0]] += 1
    dead = read_all(kafka.bootstrap, "crash.orders.dlq").to_pylist()
    passing = {f"crash.orders.dlq:{r['partition']}:{r['offset']}" for r in dead
               if int(r["key"][1:]) % 5}
    assert len(passing) == N - N // 5
    duplicates = {m: c for m, c in markers.items() if c > 1}
    assert not duplicates, f"sent twice: {sorted(duplicates)[:10]}"
    assert set(markers) == passing, (len(markers), len(passing))
    assert final["stay"]["by_why"] == {"redriven": len(passing) - final["delivered"],
                                       "fails": N // 5}

    # recovery found interrupted sends in the target and re-sent what was not there
    events = [json.loads(line) for line in log.read_text().splitlines()]
    recovered = [e for e in events if e["event"] == "recovered"]
    assert sum(len(e["found"]) for e in recovered) > 0, kills
    assert sum(len(e["missing"]) for e in recovered) > 0, kills
    print(f"\nredrive crash test: {len(kills)} kill -9 ({', '.join(kills)}); "
          f"{len(recovered)} recoveries: {sum(len(e['found']) for e in recovered)} found in "
          f"the target, {sum(len(e['missing']) for e in recovered)} re-sent; "
          f"{len(passing)} passing records, each once in the target")
