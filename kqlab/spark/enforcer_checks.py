"""The policy's sample checks in the Structured Streaming enforcer: windowed partials per
micro-batch, merged into a checkpointed state, each closed window judged once into an alert
row.

The computation is the replay's (``docs/sample-checks.md``), split where a stream needs it:

* in each task, :class:`TaskChecks` reduces the records the task judged to the checks'
  partial tables with :class:`~kqlab.validate.sample_checks.CheckRun` — the very kernels
  (:func:`~kqlab.validate.sample_checks.partial_of`) over the judge's own evaluation context
  and rule results, ``reject_rate`` from the judge's verdicts (every record alone, as the
  enforcer forwards or dead-letters it) — and counts the records that fall in windows the
  driver already closed (``late``: counted, never merged into a judged window);
* on the driver, :class:`StreamChecks` merges the tasks' partials into its state
  (:func:`~kqlab.validate.sample_checks.merge_partials`), moves the watermark (the newest
  record timestamp seen, less ``lateness_ms``), judges every window whose end it passed with
  :func:`~kqlab.validate.sample_checks.finish_check` — the same observed values as a replay
  of the same records — and drops those windows from the state, so memory holds the open
  windows only.  ``volume`` judges the empty windows of every group it knows (a quiet
  partition); ``freshness`` judges each group at every micro-batch (and, from the state the
  last one left, between them: :meth:`StreamChecks.tick`) against the enforcer's clock and
  alerts when a group's status changes.

Which groups ``volume`` knows: with ``by: partition``, every partition the source reads —
the driver passes each micro-batch's topic-partitions (the source's offsets for it, empty
partitions included) to :meth:`StreamChecks.after` — so a partition silent from the start
is a group from the first micro-batch on, judged in every window from the window of the
first record the enforcer saw (a replay's grid starts at its sample's first timestamp).  A
partition the source starts reading after records were seen joins at the window after the
newest record seen then, or at its first record's window if that is earlier (before, it may
not have existed).  ``kqlab-kafka`` makes one join whenever it discovers a topic-partition:
on ``subscribe`` and ``subscribePattern`` (an enforcer route by ``source_pattern``) it lists
the cluster's topics at every trigger, and a partition added to a subscribed topic, or a
topic created that matches the pattern, is in the next micro-batch's offsets — read from its
earliest offset — and so a group from that micro-batch on
(``tests/spark/test_enforcer_discovery.py``).  Groups by a header or a field
cannot be known before a record names them: they are the groups seen so far, each judged in
every window not yet closed when it is first seen.  A replay knows only the partitions that
have records, so the enforcer's volume alerts equal a replay's failing windows of the same
records *plus* the empty windows of the partitions without records.

The state is kept per micro-batch under ``<checkpoint>/kqlab/checks/<batch id>/`` (one
Parquet file per check's open partial, ``state.json`` written last), and a micro-batch
starts from the state of the one before it: a micro-batch run again after a crash counts
its records once, whatever an earlier attempt had saved.  Alert rows are produced at least
once, keyed ``check|group|window start`` (freshness: ``check|group``), so a consumer — or a
compacted alert topic — drops the repeats of a re-run micro-batch.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.spark.enforcer_config import CheckSettings, check_support

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.gate._judge import Judgement
    from kqlab.policy.model import Check, Policy
    from kqlab.validate.sample_checks import Extent, Partial

__all__ = ["ALERT_FIELDS", "StreamChecks", "TaskChecks", "alert_key", "enforced_checks"]

#: the fields of an alert row (a JSON object, the value of one record on the alert topic)
ALERT_FIELDS = ("check", "kind", "metric", "status", "group", "window_start", "window_end",
                "records", "observed", "min", "max", "partial", "policy", "policy_id",
                "batch_id")


def enforced_checks(policy: Policy) -> tuple[Check, ...]:
    """The checks of ``policy`` the enforcer computes, in policy order
    (:func:`~kqlab.spark.enforcer_config.check_support`)."""
    return tuple(c for c in policy.checks if check_support(c) is None)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _from_ipc(data: bytes | bytearray) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(bytes(data))).read_all()


# -- the task ----------------------------------------------------------------------------
class TaskChecks:
    """One task's part of the enforced checks: their partials over the records it judged,
    and per check the records it read that fall in windows already closed (``closed``: check
    id → the end up to which the driver has judged its windows)."""

    def __init__(self, policy: Policy, closed: dict[str, int]) -> None:
        from kqlab.validate.sample_checks import CheckRun

        self.checks = enforced_checks(policy)
        self.closed = closed
        # the replay's clock is only read by finish_check (freshness), on the driver
        self.run = CheckRun(policy.with_checks(self.checks), 0)
        self.late = [0] * len(self.checks)

    def add(self, verdict: Judgement, n: int) -> None:
        """The partials of one judged records table (``n`` records): the judge's context and
        rule results, its verdicts as outcomes (dead-lettered: rejected)."""
        from kqlab.validate.sample_checks import Chunk
        from kqlab.validate.sample_checks.columns import reads

        ctx = verdict.context
        if ctx is None or not n:
            return
        # the source's consumer never returns transaction markers
        control = np.zeros(n, dtype=bool)
        self.run.add(Chunk(ctx, control, verdict.results, verdict.dead.astype(np.int8)))
        ts = ctx.timestamps
        for i, check in enumerate(self.checks):
            until, w = self.closed.get(check.id), check.window_ms
            if until is None or w is None:
                continue
            late = reads(ctx, control, check.when) & (ts >= 0) & ((ts // w) * w + w <= until)
            self.late[i] += int(late.sum())

    def payload(self) -> tuple[bytes, list[bytes]]:
        """What the task returns: a JSON header (extent, per check its counters and late
        records) and per check its merged partial table as Arrow IPC."""
        from kqlab.validate.sample_checks import merge_partials

        merged = [merge_partials(c.kind, self.run.partials[c.id]) for c in self.checks]
        e = self.run.extent
        head = {"extent": [e.first, e.last, e.records], "counts": [p.counts for p in merged],
                "late": self.late}
        return orjson.dumps(head), [_ipc(p.table) for p in merged]


# -- the driver ----------------------------------------------------------------------------
@dataclass
class CheckState:
    """What the driver keeps between micro-batches (and in the checkpoint)."""

    #: the micro-batch this state follows (-1: none yet)
    batch_id: int = -1
    extent: list[int | None] = field(default_factory=lambda: [None, None, 0])
    #: per check its open windows' partial (counters: over every record read so far)
    partials: dict[str, Partial] = field(default_factory=dict)
    #: per windowed check: windows ending at or before this are judged
    closed: dict[str, int] = field(default_factory=dict)
    #: per volume check: the groups it knows (each judged in every window, empty ones too)
    groups: dict[str, list[str | None]] = field(default_factory=dict)
    #: per volume check: groups that joined after records were seen -> the first window
    #: they are judged in
    since: dict[str, dict[str, int]] = field(default_factory=dict)
    #: per freshness check: [group, status] of its last judgement
    fresh: dict[str, list[list[str | None]]] = field(default_factory=dict)
    #: per check: windows judged, failing, alerts sent, late records
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    watermark: int | None = None


class StreamChecks:
    """The enforced checks' state on the driver: :meth:`before` a micro-batch (what the
    tasks need), :meth:`after` it (merge, close, judge: the alert rows), :meth:`save`."""

    def __init__(self, policy: Policy, location: str, settings: CheckSettings,
                 alert_topic: str, policy_id: str) -> None:
        self.policy = policy
        self.checks = enforced_checks(policy)
        self.location = location.rstrip("/")
        self.settings = settings
        self.alert_topic = alert_topic
        self.policy_id = policy_id
        self.state: CheckState | None = None
        self._keys: dict[str, str] = {}
        #: the last micro-batch's line: alerts sent, late records, watermark
        self.line: dict[str, Any] = {}

    # -- persistence ----------------------------------------------------------------------
    def _fs(self) -> tuple[Any, str]:
        from kqlab.spark.outputs import filesystem

        fs, base = filesystem(self.location)
        return fs, f"{base}/checks"

    def before(self, batch_id: int) -> dict[str, int]:
        """Ready for micro-batch ``batch_id``: the state the micro-batch before it left
        (read from the checkpoint unless it is the one in memory); the closed windows per
        check, for the tasks' late counts."""
        if self.state is None or self.state.batch_id != batch_id - 1:
            self.state = self._load(batch_id)
        return dict(self.state.closed)

    def reset(self) -> None:
        """Forget the state in memory (a micro-batch failed after changing it)."""
        self.state = None

    def _load(self, batch_id: int) -> CheckState:
        """The newest saved state of a micro-batch before ``batch_id`` (a later one belongs
        to an attempt at this micro-batch that did not commit)."""
        import pyarrow.parquet as pq
        from pyarrow import fs as pafs

        from kqlab.validate.sample_checks import PARTIAL_SCHEMAS, Partial

        fs, base = self._fs()
        found = [int(i.base_name) for i in fs.get_file_info(
                     pafs.FileSelector(base, allow_not_found=True))
                 if i.type == pafs.FileType.Directory and i.base_name.isdigit()
                 and int(i.base_name) < batch_id
                 and fs.get_file_info(f"{i.path}/state.json").type == pafs.FileType.File]
        st = CheckState()
        if found:
            folder = f"{base}/{max(found):012d}"
            with fs.open_input_stream(f"{folder}/state.json") as f:
                doc = orjson.loads(f.read())
            st = CheckState(batch_id=doc["batch_id"], extent=doc["extent"],
                            closed=doc["closed"], groups=doc["groups"],
                            since=doc.get("since", {}), fresh=doc["fresh"],
                            stats=doc["stats"], watermark=doc["watermark"])
            for check in self.checks:
                saved = doc["checks"].get(check.id)
                if saved is None or saved.get("key") != self._key(check):
                    self._start_afresh(st, check)
                    continue
                table = PARTIAL_SCHEMAS[check.kind].empty_table()
                if saved["file"]:
                    table = pq.read_table(f"{folder}/{saved['file']}", filesystem=fs
                                          ).cast(PARTIAL_SCHEMAS[check.kind])
                st.partials[check.id] = Partial(check.kind, table, saved["counts"])
        for check in self.checks:
            if check.id not in st.partials:
                st.partials[check.id] = Partial(check.kind,
                                                PARTIAL_SCHEMAS[check.kind].empty_table(), {})
            st.stats.setdefault(check.id, {"windows": 0, "failing": 0, "alerts": 0,
                                           "late": 0})
        return st

    def _key(self, check: Check) -> str:
        """What the check's saved state depends on: the check without its thresholds (its
        kind, field, window, group, when; for ``reject_rate`` what decides a rejection) —
        :func:`~kqlab.validate.sample_checks.partial_key`, as the replayer caches partials."""
        import hashlib

        from kqlab.validate.sample_checks import partial_key

        if check.id not in self._keys:
            self._keys[check.id] = hashlib.sha256(
                partial_key(check, self.policy, "single")).hexdigest()[:16]
        return self._keys[check.id]

    @staticmethod
    def _start_afresh(st: CheckState, check: Check) -> None:
        """A check new to the checkpoint (or changed beyond its thresholds: a policy exported
        again onto the same checkpoint) starts with no records, its windows judged from the
        first one after the newest record seen — never the stream's past, whose records it
        did not read (an empty window there would fail a volume check); records of the
        micro-batches to come that fall before it are counted late."""
        for table in (st.closed, st.groups, st.since, st.fresh):
            table.pop(check.id, None)
        w, newest = check.window_ms, st.extent[1]
        if w is not None and newest is not None:
            st.closed[check.id] = (int(newest) // w + 1) * w

    def save(self) -> None:
        """The state, under its micro-batch's folder (``state.json`` last: a folder without
        it is an attempt that died while saving), and the states older than the one before
        it removed (that one is what a re-run of this micro-batch starts from)."""
        import pyarrow.parquet as pq
        from pyarrow import fs as pafs

        st = self.state
        assert st is not None
        fs, base = self._fs()
        folder = f"{base}/{st.batch_id:012d}"
        with contextlib.suppress(OSError):
            fs.delete_dir(folder)
        fs.create_dir(folder, recursive=True)
        checks = {}
        for i, check in enumerate(self.checks):
            p = st.partials[check.id]
            name = f"c{i:03d}.parquet" if p.table.num_rows else None
            if name:
                pq.write_table(p.table, f"{folder}/{name}", filesystem=fs, compression="zstd")
            checks[check.id] = {"file": name, "counts": p.counts, "key": self._key(check)}
        doc = {"batch_id": st.batch_id, "extent": st.extent, "closed": st.closed,
               "groups": st.groups, "since": st.since, "fresh": st.fresh, "stats": st.stats,
               "watermark": st.watermark, "checks": checks}
        tmp = f"{folder}/.state.{os.getpid()}.tmp"
        with fs.open_output_stream(tmp) as f:
            f.write(orjson.dumps(doc))
        fs.move(tmp, f"{folder}/state.json")
        for info in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True)):
            if info.base_name.isdigit() and int(info.base_name) < st.batch_id - 1:
                with contextlib.suppress(OSError):
                    fs.delete_dir(info.path)

    # -- a micro-batch ----------------------------------------------------------------------
    @property
    def needs_partitions(self) -> bool:
        """Whether a check groups by partition (:meth:`after` then wants the source's
        topic-partitions, to know the partitions that bring no record)."""
        return any(c.kind == "volume" and c.by == "partition" for c in self.checks)

    def after(self, batch_id: int, rows: list[Any], now: int,
              partitions: Mapping[str, Iterable[int]] | None = None
              ) -> list[dict[str, Any]]:
        """Micro-batch ``batch_id`` judged (``rows``: its tasks' rows, payloads on the
        first row of each): partials merged, windows the watermark passed judged and
        dropped, freshness judged against ``now``; the alert rows to send.

        ``partitions``: the topic-partitions the source reads in this micro-batch (``{topic:
        [partition, ...]}``, those without a record too): each is a group of the
        ``by: partition`` volume checks from then on (None: only the partitions that
        brought records are known)."""
        from kqlab.validate.sample_checks import Extent, Partial, merge_partials

        st = self.state
        assert st is not None and st.batch_id == batch_id - 1
        payloads = [(orjson.loads(r["checks"]), [_from_ipc(b) for b in r["partials"]])
                    for r in rows if r["checks"] is not None]
        first, last, records = st.extent
        extent = Extent(first, last, int(records or 0))
        late_now = 0
        for head, _ in payloads:
            extent = extent.merge(Extent(*head["extent"]))
        for i, check in enumerate(self.checks):
            parts = [st.partials[check.id], *(
                Partial(check.kind, tables[i], head["counts"][i]) for head, tables in payloads)]
            merged = merge_partials(check.kind, parts)
            until = st.closed.get(check.id)
            if until is not None and merged.table.num_rows:  # late rows: counted, not judged
                merged.table = merged.table.filter(
                    pc.greater_equal(merged.table.column("window"), until))
            st.partials[check.id] = merged
            late = sum(int(head["late"][i]) for head, _ in payloads)
            st.stats[check.id]["late"] += late
            late_now += late
            if check.kind == "volume" and check.by:
                self._know(check, merged, partitions, st.extent[1])
        st.extent = [extent.first, extent.last, extent.records]
        if extent.last is not None:
            st.watermark = extent.last - self.settings.lateness_ms
        alerts: list[dict[str, Any]] = []
        for check in self.checks:
            alerts += self._freshness(check, extent, now, batch_id) \
                if check.kind == "freshness" else self._close(check, extent, batch_id)
        st.batch_id = batch_id
        self.line = {"watermark": st.watermark, "alerts": len(alerts), "late": late_now}
        return alerts

    def _know(self, check: Check, merged: Partial,
              partitions: Mapping[str, Iterable[int]] | None, newest: int | None) -> None:
        """The groups of volume ``check`` after a micro-batch: those its records named, and
        with ``by: partition`` every partition the source reads.  A partition new to the
        source after records were seen (``newest``: the newest timestamp before this
        micro-batch) is judged from the window after ``newest`` on, or from its first
        record's window if that is earlier: before, it may not have existed."""
        st = self.state
        assert st is not None
        known = st.groups.setdefault(check.id, [])
        have = set(known)
        t = merged.table
        new = set(t.column("group").to_pylist()) - have if t.num_rows else set()
        w = check.window_ms
        if check.by == "partition" and partitions is not None:
            new |= {f"{topic}-{int(p)}" for topic, parts in partitions.items()
                    for p in parts} - have
            if new and newest is not None and w is not None:
                after = (int(newest) // w + 1) * w
                mine = t.filter(pc.is_in(t.column("group"), pa.array(sorted(new), pa.string())))
                seen = mine.group_by("group").aggregate([("window", "min")]).to_pydict()
                first = dict(zip(seen["group"], seen["window_min"], strict=True))
                since = st.since.setdefault(check.id, {})
                for g in new:
                    since[g] = min(after, int(first.get(g, after)))
        known.extend(sorted(new, key=lambda g: (g is None, g)))

    def _close(self, check: Check, extent: Extent, batch_id: int) -> list[dict[str, Any]]:
        """Judge the windows of ``check`` the watermark passed, once; drop them."""
        from kqlab.validate.sample_checks import Extent, Partial, finish_check, merge_partials

        st = self.state
        assert st is not None
        w = check.window_ms
        assert w is not None
        if st.watermark is None or extent.first is None:
            return []
        upto = (st.watermark // w) * w  # every window ending at or before the watermark
        first = st.closed.get(check.id, (extent.first // w) * w)
        if upto <= first:
            return []
        p = st.partials[check.id]
        window = p.table.column("window")
        done = pc.less(window, upto)
        ready = Partial(check.kind, p.table.filter(done), dict(p.counts))
        if check.kind == "volume":  # every group seen, in every window: empty ones too
            have = set(ready.table.column("group").to_pylist())
            missing = [g for g in st.groups.get(check.id, [None] if not check.by else [])
                       if g not in have]
            if missing:
                zeros = pa.table({"group": pa.array(missing, pa.string()),
                                  "window": pa.array([first] * len(missing), pa.int64()),
                                  "records": pa.array([0] * len(missing), pa.int64())})
                ready = merge_partials("volume", [ready, Partial("volume", zeros)])
        # judged as a replay of the same records judges these windows: the stream's first
        # record starts the first (partial) window, the closed span ends at ``upto``
        span = Extent(extent.first if check.id not in st.closed else first, upto - 1,
                      extent.records)
        row, windows = finish_check(check, ready, span, 0)
        st.partials[check.id] = Partial(check.kind, p.table.filter(pc.invert(done)),
                                        p.counts)
        st.closed[check.id] = upto
        windows = windows.filter(pc.greater_equal(windows.column("start"), first))
        since = st.since.get(check.id)
        if since and windows.num_rows:  # partitions that joined later: from their join on
            keep = np.ones(windows.num_rows, dtype=bool)
            groups = windows.column("group")
            starts = windows.column("start").to_numpy()
            for g, s0 in since.items():  # a few partitions, not per window
                mine = np.asarray(pc.fill_null(pc.equal(groups, g), False))
                keep &= ~(mine & (starts < s0))
            windows = windows.filter(pa.array(keep))
        return self._alerts(check, row, windows, batch_id)

    def _freshness(self, check: Check, extent: Extent, now: int, batch_id: int
                   ) -> list[dict[str, Any]]:
        """Each group's age against ``now``; an alert where a group's status changed."""
        from kqlab.validate.sample_checks import finish_check

        st = self.state
        assert st is not None
        row, windows = finish_check(check, st.partials[check.id], extent, now)
        last: dict[str | None, str | None] = {}
        for g, s in st.fresh.get(check.id, []):  # [group, status] pairs (JSON lists)
            last[g] = s
        changed = [i for i, (g, s) in enumerate(zip(windows.column("group").to_pylist(),
                                                    windows.column("status").to_pylist(),
                                                    strict=True)) if last.get(g) != s]
        for g, s in zip(windows.column("group").to_pylist(),
                        windows.column("status").to_pylist(), strict=True):
            last[g] = s
        st.fresh[check.id] = [[g, s] for g, s in last.items()]
        return self._alerts(check, row, windows.take(pa.array(changed, pa.int64())),
                            batch_id, judged=False)

    def _alerts(self, check: Check, row: dict[str, Any], windows: pa.Table, batch_id: int,
                *, judged: bool = True) -> list[dict[str, Any]]:
        """The alert rows of judged ``windows`` (failing ones; passing ones too when the
        config asks), and the check's counters."""
        st = self.state
        assert st is not None
        stats = st.stats[check.id]
        status = windows.column("status").to_pylist()
        if judged:
            stats["windows"] += sum(s != "not_evaluable" for s in status)
            stats["failing"] += status.count("fail")
        send = {"fail", "pass"} if self.settings.alert_passing else {"fail"}
        out = []
        for w in windows.to_pylist():
            if w["status"] not in send:
                continue
            out.append({"check": check.id, "kind": check.kind, "metric": row["metric"],
                        "status": w["status"], "group": w["group"],
                        "window_start": w["start"], "window_end": w["end"],
                        "records": w["records"], "observed": w["observed"],
                        "min": row["min"], "max": row["max"], "partial": w["partial"],
                        "policy": self.policy.name, "policy_id": self.policy_id,
                        "batch_id": batch_id})
        stats["alerts"] += len(out)
        return out

    def tick(self, now: int) -> list[dict[str, Any]]:
        """Between micro-batches (a silent topic runs none): the freshness checks judged
        again against ``now`` from the state the last micro-batch left; alert rows where a
        group's status changed (``batch_id``: that micro-batch's)."""
        from kqlab.validate.sample_checks import Extent

        st = self.state
        if st is None or st.batch_id < 0:
            return []
        first, last, records = st.extent
        extent = Extent(first, last, int(records or 0))
        alerts: list[dict[str, Any]] = []
        for check in self.checks:
            if check.kind == "freshness":
                alerts += self._freshness(check, extent, now, st.batch_id)
        return alerts

    @property
    def has_freshness(self) -> bool:
        """Whether a freshness check is enforced (the clock alone can change its result)."""
        return any(c.kind == "freshness" for c in self.checks)

    def summary(self) -> dict[str, Any]:
        """The checks' counters for the enforcer's metrics."""
        st = self.state
        stats = st.stats if st is not None else {}
        return {"alert_topic": self.alert_topic,
                "watermark": st.watermark if st is not None else None,
                "alerts": sum(s["alerts"] for s in stats.values()),
                "late": sum(s["late"] for s in stats.values()),
                "by_check": {k: dict(v) for k, v in stats.items()}}


def alert_key(alert: dict[str, Any]) -> bytes:
    """The alert record's key: ``check|group|window start`` (freshness: ``check|group``,
    its latest status), so repeats of a re-run micro-batch share a key."""
    parts = [alert["check"], "" if alert["group"] is None else alert["group"]]
    if alert["kind"] != "freshness":
        parts.append(str(alert["window_start"]))
    return "|".join(parts).encode()
