"""The redrive log: what a redrive sent, so that a re-run never sends a dead letter twice —
even after ``kill -9`` between a send and its log line.

Why this shape
--------------
A send and a log write cannot be one atomic step.  So every chunk of records is written
**intent → send → acknowledged → done**:

1. an ``intent`` line names every dead letter of the chunk (and where it goes) and is
   ``fsync``-ed *before* the first send;
2. the records are produced (idempotent producer: no duplicates from its own retries), each
   carrying the marker header ``kqlab.redrive: <dlq topic>:<partition>:<offset>``;
3. the delivery reports say the broker acknowledged every one of them (``acks=all``);
   chunks are pipelined — the next chunk is logged and produced while earlier ones are in
   flight — and settled in order;
4. a ``done`` line (``fsync``-ed) records where each landed, and which failed.

A kill before (1) completes sent nothing; a kill after (4) completes lost nothing.  A kill
in between leaves an intent without its done: some of those records may be in the target,
some not.  The next ``--execute`` run therefore first *recovers*: it reads the target
partitions from the offsets noted when the interrupted run started (``run`` line,
``scan_from``; ListOffsets, which can only be low — Tansu's is, never high) to their end,
finds the records whose last ``kqlab.redrive`` header names a pending intent, marks those
done (``recovered``: ``found``) and the rest ``missing`` — sent again by this run.  Failed
deliveries the broker definitely refused are ``failed`` (sent again next time); ones whose
fate is unknown (a timeout) stay intents and go through recovery.

One residual window: bytes already in the dead process's socket buffer reach the broker a
moment after the kill.  Recovery starts after the restart (a new process), by which time the
broker has long written them; a restart within milliseconds of a kill could miss one.

The file is JSON lines (``jq`` reads it), append-only, one line per event, versioned (``v``).
A torn last line — the kill hit while it was being written, before its ``fsync`` returned —
is dropped on the next open (and said so): a torn intent sent nothing; a torn done or
recovered line leaves intents the next recovery settles.  Any other line
that does not parse is an error: the log is not touched then.  The file is locked while a
redrive uses it (one redrive per log at a time).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kqlab.errors import KqlabError

__all__ = ["LOG_VERSION", "LogEntry", "RedriveLog", "RedriveLogError"]

LOG_VERSION = 1
#: the states a dead letter can be in, per the log
STATES = ("intent", "done", "failed", "missing")


class RedriveLogError(KqlabError):
    """The redrive log cannot be read or written (the message names the file and the fix)."""


@dataclass(slots=True)
class LogEntry:
    """What the log says about one dead letter (its latest event)."""

    state: str  # one of STATES
    run: str
    target_topic: str
    target_partition: int  # -1: the producer's partitioner chose
    target_offset: int | None = None
    error: str | None = None


Key = tuple[str, int, int]  # (dlq topic, partition, offset)


class RedriveLog:
    """One redrive log file: read on construction, appended to (locked) by :meth:`open`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.entries: dict[Key, LogEntry] = {}
        #: run id -> its ``run`` line
        self.runs: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self._torn_at: int | None = None
        self._fh: IO[bytes] | None = None
        self._load()

    # -- reading ---------------------------------------------------------------------------
    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise RedriveLogError(f"cannot read the redrive log {self.path}: {exc}") from None
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a torn last line: its fsync never returned
            self._torn_at = end
            self.notes.append(f"dropped a torn last line of {self.path} (an interrupted run "
                              "was killed while writing it)")
        for no, line in enumerate(data[:end].splitlines(), start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
                self._apply(event)
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise RedriveLogError(
                    f"{self.path}:{no}: not a kqlab redrive log line ({exc}); point --log at "
                    "the log the earlier redrives wrote, or at a new file") from None

    def _apply(self, e: Mapping[str, Any]) -> None:
        if e.get("v") != LOG_VERSION:
            raise ValueError(f"unknown log version {e.get('v')!r}")
        kind, run, dlq = e["event"], str(e["run"]), str(e.get("dlq", ""))
        if kind == "run":
            self.runs[run] = dict(e)
        elif kind == "intent":
            for p, o, tt, tp in e["records"]:
                self.entries[(dlq, int(p), int(o))] = LogEntry("intent", run, str(tt), int(tp))
        elif kind in ("done", "recovered"):
            entries = self.entries
            for p, o, tt, tp, to in e.get("delivered", e.get("found", [])):
                key = (dlq, int(p), int(o))
                old = entries.get(key)
                if old is not None and old.run == run:  # its intent: update it in place
                    old.state, old.target_partition, old.target_offset = "done", tp, to
                else:
                    entries[key] = LogEntry("done", run, str(tt), int(tp), int(to))
            for p, o, err in e.get("failed", []):
                old = self.entries.get((dlq, int(p), int(o)))
                self.entries[(dlq, int(p), int(o))] = LogEntry(
                    "failed", run, old.target_topic if old else "",
                    old.target_partition if old else -1, None, str(err))
            for p, o in e.get("missing", []):
                old = self.entries.get((dlq, int(p), int(o)))
                self.entries[(dlq, int(p), int(o))] = LogEntry(
                    "missing", run, old.target_topic if old else "",
                    old.target_partition if old else -1)
            # "unknown" deliveries stay intents: recovery decides
        else:
            raise ValueError(f"unknown event {kind!r}")

    def state(self, dlq_topic: str, state: str) -> dict[tuple[int, int], LogEntry]:
        """``{(partition, offset): entry}`` of ``dlq_topic``'s dead letters in ``state``."""
        return {(p, o): v for (t, p, o), v in self.entries.items()
                if t == dlq_topic and v.state == state}

    def scan_from(self, run: str) -> dict[str, dict[int, int]]:
        """Where recovery starts reading each target partition for ``run``'s intents."""
        raw = self.runs.get(run, {}).get("scan_from", {})
        return {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}

    # -- writing ---------------------------------------------------------------------------
    def open(self) -> RedriveLog:
        """Lock the file for this process and get it ready to append (a torn last line is
        cut off).  Raises :class:`RedriveLogError` when another redrive holds it."""
        if self._fh is not None:
            return self
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise RedriveLogError(f"cannot write the redrive log {self.path}: {exc}") from None
        try:
            import fcntl

            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # pragma: no cover - not POSIX: no lock, one redrive at a time
            pass
        except OSError:
            fh.close()
            raise RedriveLogError(f"another redrive is using the log {self.path}: wait for it "
                                  "to finish (one redrive per log at a time)") from None
        if self._torn_at is not None:
            fh.truncate(self._torn_at)
            fh.flush()
            os.fsync(fh.fileno())
            self._torn_at = None
        self._fh = fh
        return self

    def close(self) -> None:
        """Release the file (and its lock)."""
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None

    def __enter__(self) -> RedriveLog:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _append(self, event: dict[str, Any]) -> None:
        """One event, on disk (``fsync``) before this returns."""
        if self._fh is None:
            raise RedriveLogError(f"the redrive log {self.path} is not open for writing")
        event = {"v": LOG_VERSION, **event}
        self._fh.write(json.dumps(event, separators=(",", ":")).encode() + b"\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._apply(event)

    def start_run(self, run: str, dlq_topic: str, *, at: int, bootstrap: str,
                  policy: str, to: str | None, scan_from: Mapping[str, Mapping[int, int]]
                  ) -> None:
        """A run starts: where recovery would read each target partition from."""
        self._append({"event": "run", "run": run, "dlq": dlq_topic, "at": at,
                      "bootstrap": bootstrap, "policy": policy, "to": to,
                      "scan_from": {t: {str(p): int(o) for p, o in parts.items()}
                                    for t, parts in scan_from.items()}})

    def intent(self, run: str, chunk: int, dlq_topic: str,
               records: Iterable[tuple[int, int, str, int]]) -> None:
        """Chunk ``chunk`` is about to be sent: ``(partition, offset, target topic, target
        partition)`` per dead letter."""
        self._append({"event": "intent", "run": run, "chunk": chunk, "dlq": dlq_topic,
                      "records": list(records)})

    def done(self, run: str, chunk: int, dlq_topic: str,
             delivered: Iterable[tuple[int, int, str, int, int]],
             failed: Iterable[tuple[int, int, str]] = (),
             unknown: Iterable[tuple[int, int, str]] = ()) -> None:
        """Chunk ``chunk`` was acknowledged: where each record landed, which the broker refused
        (``failed``: sent again next time) and which may or may not have landed
        (``unknown``: left to recovery)."""
        self._append({"event": "done", "run": run, "chunk": chunk, "dlq": dlq_topic,
                      "delivered": list(delivered), "failed": list(failed),
                      "unknown": list(unknown)})

    def recovered(self, run: str, dlq_topic: str,
                  found: Iterable[tuple[int, int, str, int, int]],
                  missing: Iterable[tuple[int, int]]) -> None:
        """Recovery's findings on interrupted intents: found in the target, or not."""
        self._append({"event": "recovered", "run": run, "dlq": dlq_topic,
                      "found": list(found), "missing": list(missing)})
