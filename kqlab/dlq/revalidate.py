"""Which dead letters would pass an amended policy now, and where each would go: a
:class:`RedrivePlan`, before anything is sent.

Each dead letter's original record (key, value, headers without the failure headers, its
timestamp) is replayed exactly as a redrive would produce it — to its target topic, with the
``kqlab.redrive`` marker header added (a header allow-list rule must see it, as the gate
downstream will) — through :func:`kqlab.validate.replay` with ``framing="single"``: every
record alone in its batch, as the gate judges it, so one failing record never makes another
collateral.  The broker checks judge it at ``now`` (a record whose timestamp is older than
``message.timestamp.before.max.ms`` stays).

The rebuilt batches go through the vectorised table checks
(:attr:`kqlab.validate.sample.Sample.judged_as`), not the byte-level validator batch by batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.dlq.headers import REDRIVE_HEADER
from kqlab.dlq.triage import DeadLetters
from kqlab.records import HEADER_TYPE, RECORDS_SCHEMA

if TYPE_CHECKING:
    from kqlab.dlq.redrive_log import LogEntry
    from kqlab.policy.model import Policy
    from kqlab.serde.schemas import SchemaResolver
    from kqlab.validate.verdicts import Verdicts

__all__ = ["PLAN_SCHEMA", "WHY", "RedrivePlan", "marker_values", "revalidate"]

#: why a dead letter is redriven or stays, as data (the ``why`` column) and for people
WHY = {
    "passes": "passes the policy now",
    "fails": "still fails the policy",
    "undetermined": "the replay could not judge it",
    "no-target": "no source topic in the failure headers: pass --to TOPIC",
    "target-missing": "the target topic does not exist",
    "redriven": "redriven earlier (in the log)",
    "pending": "an interrupted redrive may have sent it: the next --execute checks the target",
    "failed": "the broker refused it on redrive",
    "unknown": "its delivery timed out: the next --execute checks the target",
}

#: the ``why`` codes revalidate computes with (0: passes)
_WHY_CODES = ("passes", "fails", "undetermined", "no-target", "target-missing", "redriven",
              "pending")
_WHY_CODE = {w: i for i, w in enumerate(_WHY_CODES)}

#: one row per dead letter, in the dead-letter topic's order: its coordinates and reason,
#: where it would go (``target_partition`` -1: the producer's partitioner, by key; null:
#: nowhere), ``decision`` (``redrive`` or ``stay``), ``why`` (a :data:`WHY` key) and, for
#: a record that still fails, the first enforced failure's ``rule`` and ``message``
PLAN_SCHEMA = pa.schema([
    ("dlq_partition", pa.int32()), ("dlq_offset", pa.int64()), ("reason", pa.string()),
    ("target_topic", pa.string()), ("target_partition", pa.int32()),
    ("decision", pa.string()), ("why", pa.string()), ("rule", pa.string()),
    ("message", pa.string()),
])


def _np(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(a.to_numpy(zero_copy_only=False))


def marker_values(dlq_topic: str, partitions: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    """The ``kqlab.redrive`` header value of each dead letter: ``<topic>:<partition>:<offset>``
    (Kafka topic names hold no ``:``)."""
    return marker_array(dlq_topic, partitions, offsets).to_pylist()


def marker_array(dlq_topic: str, partitions: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """:func:`marker_values` as an Arrow binary array (built column-wise)."""
    n = len(partitions)
    text = pc.binary_join_element_wise(
        pa.repeat(pa.scalar(dlq_topic), n), pa.array(partitions, pa.int64()).cast(pa.string()),
        pa.array(offsets, pa.int64()).cast(pa.string()), ":")
    return text.cast(pa.binary())


@dataclass
class RedrivePlan:
    """What a redrive would do: :attr:`decisions` (:data:`PLAN_SCHEMA`) for every dead letter
    of :attr:`dead`, and the re-validation's own verdicts (a
    :class:`~kqlab.validate.view.VerdictsView` of the records that were replayed: the same
    figures show what still fails and why)."""

    dead: DeadLetters
    decisions: pa.Table
    verdicts: Verdicts | None
    policy_name: str
    policy_hash: str
    now: int
    to: str | None
    notes: list[str] = field(default_factory=list)

    def rows(self, decision: str) -> np.ndarray:
        """Row numbers (into :attr:`dead` ``.records``) with ``decision``."""
        return np.flatnonzero(_np(pc.equal(self.decisions["decision"], decision)))

    def summary(self, examples: int = 5) -> dict[str, Any]:
        """The plan as one JSON-ready dict: counts by target, by why, by still-failing rule."""
        d = self.decisions
        go = d.filter(pc.equal(d["decision"], "redrive"))
        stay = d.filter(pc.equal(d["decision"], "stay"))

        def counts(t: pa.Table, col: str) -> dict[str, int]:
            vc = pc.value_counts(t[col]).to_pylist() if t.num_rows else []
            return dict(sorted(((str(r["values"]), int(r["counts"])) for r in vc),
                               key=lambda kv: (-kv[1], kv[0])))

        fails = stay.filter(pc.equal(stay["why"], "fails"))
        ex = stay.slice(0, examples).select(
            ["dlq_partition", "dlq_offset", "reason", "why", "rule", "message"]).to_pylist()
        return {
            "policy": self.policy_name, "policy_hash": self.policy_hash, "now": self.now,
            "to": self.to, "read": d.num_rows,
            "redrive": {"records": go.num_rows, "by_target": counts(go, "target_topic"),
                        "by_reason": counts(go, "reason")},
            "stay": {"records": stay.num_rows, "by_why": counts(stay, "why"),
                     "by_rule": counts(fails, "rule"), "examples": ex},
            "notes": list(self.notes),
        }


def _target_partitions(dead: pa.Table, target: pa.Array,
                       partitions: Mapping[str, int] | None) -> np.ndarray:
    """Per record: its source partition when it goes back to its source topic and that
    partition exists there (the record lands where it was); else -1 (the partitioner, by key,
    murmur2 like the Java client)."""
    n = dead.num_rows
    src_t = dead["source_topic"]
    src_p = _np(pc.fill_null(dead["source_partition"], -1)).astype(np.int64)
    same = _np(pc.fill_null(pc.equal(target, src_t), False)).astype(bool)
    out = np.where(same & (src_p >= 0), src_p, -1)
    if partitions is not None and n:
        names = list(partitions)
        where = _np(pc.fill_null(pc.index_in(target, value_set=pa.array(names, pa.string())),
                                 -1)).astype(np.int64)
        sizes = np.array([*(partitions[t] for t in names), 0], dtype=np.int64)
        out = np.where(out < sizes[where], out, -1)  # -1 (absent) reads the trailing 0
    return out


def revalidate(dead: DeadLetters, policy: Policy, *, to: str | None = None,
               now: int | None = None, partitions: Mapping[str, int] | None = None,
               done: Mapping[tuple[int, int], LogEntry] | None = None,
               pending: Mapping[tuple[int, int], LogEntry] | None = None,
               resolver: SchemaResolver | None = None) -> RedrivePlan:
    """The redrive plan of ``dead`` under ``policy`` (see the module doc).

    ``to``: send every record there instead of its source topic.  ``partitions``: the target
    topics' partition counts (a topic absent from it does not exist; None: not checked).
    ``done`` / ``pending``: dead letters the redrive log says were redriven, or may have been
    (they stay).  ``now``: the broker clock (default: the wall clock).
    """
    import time

    from kqlab.validate.framing import reconstruct_framing
    from kqlab.validate.replayer import replay

    now = int(time.time() * 1000) if now is None else int(now)
    t = dead.records
    n = t.num_rows
    target = pa.repeat(pa.scalar(to, pa.string()), n) if to is not None else \
        t["source_topic"].combine_chunks() if n else pa.array([], pa.string())
    tpart = _target_partitions(t, target, partitions)
    dparts = _np(t["dlq_partition"]).astype(np.int64) if n else np.zeros(0, np.int64)
    doffs = _np(t["dlq_offset"]).astype(np.int64) if n else np.zeros(0, np.int64)

    # why, as codes into _WHY_CODES (0: passes, so far)
    why = np.zeros(n, dtype=np.int8)
    has_target = _np(target.is_valid()).astype(bool) if n else np.zeros(0, bool)
    why[~has_target] = _WHY_CODE["no-target"]
    if partitions is not None and n:
        exists = _np(pc.fill_null(pc.is_in(target, value_set=pa.array(list(partitions),
                                                                      pa.string())), False))
        why[has_target & ~exists.astype(bool)] = _WHY_CODE["target-missing"]
    for table, label in ((done, "redriven"), (pending, "pending")):
        if table:
            hit = np.array([(p, o) in table for p, o in zip(dparts.tolist(), doffs.tolist(),
                                                               strict=True)], dtype=bool)
            why[hit & (why == 0)] = _WHY_CODE[label]
    cand = np.flatnonzero(why == 0)

    rule: list[Any] = [None] * n
    message: list[Any] = [None] * n
    verdicts: Verdicts | None = None
    notes: list[str] = []
    if len(cand):
        table = _replay_table(t, cand, target, tpart, dead.topic, dparts, doffs, now)
        sample = reconstruct_framing(table, "single")
        verdicts = replay(sample, policy, now=now, resolver=resolver)
        notes += verdicts.notes
        vr = verdicts.records
        row = cand[_np(vr["offset"]).astype(np.int64)]
        outcome = _np(pc.index_in(vr["outcome"], value_set=pa.array(
            ["accepted", "rejected", "collateral"]))).astype(np.float64)  # NaN: other
        refused = np.flatnonzero(outcome != 0)
        why[row[refused]] = np.where(np.isin(outcome[refused], (1, 2)), _WHY_CODE["fails"],
                                     _WHY_CODE["undetermined"])
        if len(refused):
            first_rule, first_msg = _first_enforced(vr["failures"].take(pa.array(refused)))
            for j, r in enumerate(row[refused].tolist()):
                rule[r], message[r] = first_rule[j], first_msg[j]
    codes = pa.array(why.astype(np.int32))
    decision = pa.array(["redrive", *["stay"] * (len(_WHY_CODES) - 1)]).take(codes)
    why_arr = pa.array(list(_WHY_CODES), pa.string()).take(codes)
    if not n:
        tp_arr = pa.array([], pa.int32())
    else:
        tp_arr = pa.array(tpart, pa.int32(), mask=~has_target)
    decisions = pa.table([
        t["dlq_partition"], t["dlq_offset"], t["reason"], target, tp_arr,
        decision, why_arr, pa.array(rule, pa.string()), pa.array(message, pa.string()),
    ], schema=PLAN_SCHEMA)
    from kqlab.dlq.parse import family_of

    streams = family_of("streams")
    if streams is not None and n and pc.any(pc.equal(t["family"], streams.name)).as_py():
        notes.append("Kafka Streams' DLQ does not keep the original headers: its records are "
                     "redriven without them")
    if n and pc.any(pc.equal(t["family"], "confluent")).as_py():
        notes.append("Confluent rule DLQ records written on WRITE hold the JSON form of the "
                     "object, not the serialized bytes: a policy expecting the wire format "
                     "refuses them (decode:value)")
    return RedrivePlan(dead, decisions, verdicts, policy.name, policy.content_hash(), now, to,
                       notes)


def _replay_table(t: pa.Table, cand: np.ndarray, target: pa.Array, tpart: np.ndarray,
                  dlq_topic: str, dparts: np.ndarray, doffs: np.ndarray, now: int) -> pa.Table:
    """The candidates as a ``RECORDS_SCHEMA`` table, exactly as a redrive produces them:
    target topic and partition (0 where the partitioner decides), row number as offset,
    original timestamp (``now`` where it has none, as the producer would stamp it), original
    headers + the marker."""
    k = len(cand)
    take = pa.array(cand)
    sub = t.select(["timestamp", "key", "value", "headers"]).take(take)
    ts = _np(sub["timestamp"]).astype(np.int64)
    ts = np.where(ts >= 0, ts, now)
    headers = _with_marker(sub["headers"].combine_chunks(),
                           marker_array(dlq_topic, dparts[cand], doffs[cand]))
    table = pa.table([
        target.take(take), pa.array(np.maximum(tpart[cand], 0), pa.int32()),
        pa.array(np.arange(k, dtype=np.int64)), pa.array(ts, pa.int64()),
        pa.array(np.zeros(k, np.int8)), sub["key"], sub["value"], headers,
        pa.array(np.arange(k, dtype=np.int64)), pa.array(np.zeros(k, np.int32)),
    ], schema=RECORDS_SCHEMA)
    return table.sort_by([("topic", "ascending"), ("partition", "ascending"),
                          ("offset", "ascending")])


def _with_marker(headers: pa.Array, markers: pa.Array) -> pa.Array:
    """Each record's header list with one ``kqlab.redrive`` header appended."""
    lists = cast(pa.ListArray, headers)
    k = len(lists)
    counts = _np(pc.fill_null(pc.list_value_length(lists), 0)).astype(np.int64)
    flat = cast(pa.StructArray, pc.list_flatten(lists))
    parent = _np(pc.list_parent_indices(lists)).astype(np.int64)
    new_counts = counts + 1
    offsets = np.zeros(k + 1, np.int32)
    offsets[1:] = np.cumsum(new_counts)
    # position of each old entry and of each marker in the new flat array
    old_pos = np.arange(len(flat), dtype=np.int64) + parent  # shifted by the markers before
    marker_pos = offsets[1:] - 1
    size = int(offsets[-1])
    src = np.empty(size, dtype=np.int64)
    src[old_pos] = np.arange(len(flat))
    src[marker_pos] = len(flat) + np.arange(k)
    mk = pa.StructArray.from_arrays(
        [pa.repeat(pa.scalar(REDRIVE_HEADER), k), markers],
        fields=list(HEADER_TYPE.value_type))
    both = pa.concat_arrays([flat.cast(HEADER_TYPE.value_type), mk])
    return pa.ListArray.from_arrays(pa.array(offsets), both.take(pa.array(src)),
                                    type=HEADER_TYPE)


def _first_enforced(failures: pa.ChunkedArray | pa.Array) -> tuple[list[Any], list[Any]]:
    """Per record: the rule and message of its first enforced failure (code != 0), else of
    its first failure, else None."""
    arr = failures.combine_chunks() if isinstance(failures, pa.ChunkedArray) else failures
    n = len(arr)
    rules: list[Any] = [None] * n
    msgs: list[Any] = [None] * n
    flat = cast(pa.StructArray, pc.list_flatten(arr))
    if not len(flat):
        return rules, msgs
    parent = _np(pc.list_parent_indices(arr)).astype(np.int64)
    code = _np(pc.fill_null(flat.field("code"), 0)).astype(np.int64)
    r, m = flat.field("rule").to_pylist(), flat.field("message").to_pylist()
    enforced = np.zeros(n, dtype=bool)
    for i, p in enumerate(parent.tolist()):
        if code[i] != 0 and not enforced[p]:
            enforced[p] = True
            rules[p], msgs[p] = r[i], m[i]
        elif rules[p] is None:
            rules[p], msgs[p] = r[i], m[i]
    return rules, msgs
