"""What happens to every record of a sample at one deployment, composed from replays.

A deployment puts enforcement in one of three places relative to the broker, and each is a
composition of the verdict core's own replays — never a second model of the checks:

* **in the produce path, whole batch** (a broker record policy per KIP-940/729/686, the
  Kroxylicious proxy): the replay itself.  :func:`whole_batch` reads its record outcomes
  (``rejected`` → *refused*, ``collateral`` → *collateral*) and batch answers as they are.
* **behind the topic, per record** (the gate, the Spark enforcer): the producers write to a
  raw topic whose broker runs its own checks (the replay of the policy with every rule
  observed), and the records it appends are judged one by one (the replay with
  ``framing="single"``): :func:`behind_gate` dead-letters the appended records the single
  replay rejects and forwards the rest.
* **in front of the producer, per record** (the Confluent serializer's data-contract rules):
  :func:`in_front` refuses, before anything is sent, every record that fails a rule the
  contract enforces (the single replay's failures); the producer sends what is left in the
  sample's batches, and the broker judges them with its own checks (the observe-all replay):
  a batch stays refused only while a record the serializer let through is itself refused
  there (a batch whose only culprits the serializer already removed is appended), and its
  error is the broker's.

Each record ends in one *disposition* (:data:`DISPOSITIONS`): ``accepted`` (consumers of the
topic read it), ``refused`` (its producer gets an error for it), ``collateral`` (refused only
because a sibling failed its batch), ``dead_lettered`` (consumers never see it; the
dead-letter topic holds it), or ``undetermined`` (the tables alone could not judge its batch).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.rollout.replays import align

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.rollout.replays import Producers
    from kqlab.validate.verdicts import Verdicts

__all__ = ["ACCEPTED", "COLLATERAL", "DEAD_LETTERED", "DISPOSITIONS", "NEXT_STEP", "REFUSED",
           "UNDETERMINED", "Answer", "Outcome", "behind_gate", "in_front", "whole_batch"]

#: a record's fate at one deployment (index = code)
DISPOSITIONS = ("accepted", "refused", "collateral", "dead_lettered", "undetermined")
ACCEPTED, REFUSED, COLLATERAL, DEAD_LETTERED, UNDETERMINED = range(5)
#: replay outcome code (accepted, rejected, collateral, undetermined) -> disposition code
_FROM_OUTCOME = np.array([ACCEPTED, REFUSED, COLLATERAL, UNDETERMINED], np.int8)

#: what the producer does next, per action (kafka-validation.md §6 and the serializer)
NEXT_STEP = {
    "appended": "acknowledged: the records are in the topic",
    "duplicate": "treated as success (a batch the broker already appended)",
    "retried": "resends the batch unchanged until delivery.timeout.ms: its records are "
               "delayed, and lost if the cause persists",
    "split": "splits the batch and re-enqueues the halves (not counted as a retry); a "
             "librdkafka producer never splits: it fails every record of the batch",
    "failed": "fails every record of the batch: the listed culprits get their own error, the "
              "others 'part of a batch which had one or more invalid records'; nothing is "
              "resent (KIP-467's client retry was never implemented)",
    "raised": "produce() raises before the record is queued: nothing is sent, the "
              "application decides (skip, log or stop)",
}


@dataclass(frozen=True)
class Answer:
    """What producers are told for some of their batches: who answers, the error (code None:
    no Kafka error, e.g. the serializer raising), whether the Java client retries it, the
    action it takes (:func:`kqlab.validate.verdicts.producer_action`, or ``raised``), and for
    how many batches (None: per record) and records."""

    who: str
    error_code: int | None
    error_name: str
    retriable: bool
    action: str
    batches: int | None
    records: int

    @property
    def next(self) -> str:
        """What the client does next, in words."""
        return NEXT_STEP.get(self.action, self.action)

    def text(self) -> str:
        """One line: ``broker: INVALID_RECORD (87), not retriable → failed``."""
        code = "" if self.error_code is None else f" ({self.error_code})"
        retry = "retriable" if self.retriable else "not retriable"
        return f"{self.who}: {self.error_name}{code}, {retry} → {self.action}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {"who": self.who, "error_code": self.error_code, "error_name": self.error_name,
                "retriable": self.retriable, "action": self.action, "next": self.next,
                "batches": self.batches, "records": self.records}


def _retriable(code: int) -> bool:
    from kqlab.kafka.errors import error_for_code

    try:
        return bool(error_for_code(code).retriable)
    except KeyError:
        return False


def _answers(table: pa.Table) -> list[Answer]:
    """Answers grouped from a table of (who, code, name, action, records) per batch; most
    records first, acknowledgements last."""
    if not table.num_rows:
        return []
    g = table.group_by(["who", "code", "name", "action"], use_threads=False).aggregate(
        [("records", "count"), ("records", "sum")])
    out = [Answer(r["who"], int(r["code"]), r["name"] or "", _retriable(int(r["code"])),
                  r["action"], int(r["records_count"]), int(r["records_sum"] or 0))
           for r in g.to_pylist()]
    return sorted(out, key=lambda a: (a.error_code == 0, -a.records, a.who, a.error_name))


def batch_answers(batches: pa.Table, *, policy_who: str, broker_who: str) -> list[Answer]:
    """The batch verdicts' answers, by who decided (the record policy, check ``P``, or the
    broker's own checks), error and producer action."""
    check = pc.fill_null(batches.column("check"), "")
    by_policy = pc.match_substring_regex(check, r"(^|\+)P($|\+)")
    who = pc.if_else(by_policy, pa.scalar(policy_who), pa.scalar(broker_who))
    return _answers(pa.table({
        "who": who, "code": pc.cast(batches.column("error_code"), pa.int64()),
        "name": batches.column("error_name"), "action": batches.column("producer_action"),
        "records": pc.cast(batches.column("record_count"), pa.int64())}))


@dataclass
class Outcome:
    """Per record of the sample (the upstream replay's record order): its disposition code
    (:data:`DISPOSITIONS`), its reason (index into ``labels``: the rule or ``broker:<check>``
    that refused or dead-lettered it, a collateral record its batch's; -1 none), whether a
    copy went to a dead-letter topic although the producer was refused (``dlq_copy``), what
    producers are told (``answers``) and which replays the numbers come from (``sources``)."""

    disposition: np.ndarray
    reason: np.ndarray
    labels: list[str]
    answers: list[Answer]
    sources: list[str]
    dlq_copy: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    def __post_init__(self) -> None:
        if len(self.dlq_copy) != len(self.disposition):
            self.dlq_copy = np.zeros(len(self.disposition), bool)

    def counts(self) -> dict[str, int]:
        """Records per disposition, ``records`` (all), ``in_dlq`` (records the dead-letter
        topic holds: dead-lettered ones and refused copies) and ``lost`` (refused or
        collateral and in no dead-letter topic: neither consumers nor a DLQ get them);
        ``undetermined`` only when some record is."""
        per = np.bincount(self.disposition.astype(np.int64), minlength=len(DISPOSITIONS))
        out = {"records": len(self.disposition)}
        out.update({d: int(per[i]) for i, d in enumerate(DISPOSITIONS[:4])})
        if per[UNDETERMINED]:
            out["undetermined"] = int(per[UNDETERMINED])
        copies = int(self.dlq_copy.sum())
        out["in_dlq"] = out["dead_lettered"] + copies
        out["lost"] = out["refused"] + out["collateral"] - copies
        return out

    def reasons(self, disposition: int) -> dict[str, int]:
        """Records of one disposition per reason, most first (``(none)`` without one)."""
        mask = self.disposition == disposition
        if not mask.any():
            return {}
        codes = self.reason[mask]
        per = np.bincount(codes + 1, minlength=len(self.labels) + 1)
        rows = [("(none)" if i == 0 else self.labels[i - 1], int(c)) for i, c in
                enumerate(per.tolist()) if c]
        return dict(sorted(rows, key=lambda kv: (-kv[1], kv[0])))

    def by_producer(self, producers: Producers) -> list[dict[str, Any]]:
        """Per producer (:class:`~kqlab.rollout.replays.Producers`): records per disposition
        and ``lost``, the producers losing most records first."""
        n = len(producers.labels)
        if not n or not len(self.disposition):
            return []
        k = len(DISPOSITIONS)
        grid = np.bincount(producers.code * k + self.disposition.astype(np.int64),
                           minlength=n * k).reshape(n, k)
        copies = np.bincount(producers.code, weights=self.dlq_copy, minlength=n).astype(
            np.int64)
        rows = []
        for i in range(n):
            c = grid[i]
            row = producers.row(i)
            row.update({"records": int(c.sum()), **{d: int(c[j]) for j, d in
                                                    enumerate(DISPOSITIONS[:4])}})
            row["lost"] = int(c[REFUSED] + c[COLLATERAL] - copies[i])
            rows.append(row)
        return sorted(rows, key=lambda r: (-r["lost"], -r["dead_lettered"], r["producer"]))


def _merge_labels(base: list[str], extra: Iterable[str]) -> tuple[list[str], np.ndarray]:
    """``base`` extended by the labels of ``extra`` it lacks, and where each of ``extra`` is."""
    labels = list(base)
    where = {x: i for i, x in enumerate(labels)}
    index = []
    for x in extra:
        if x not in where:
            where[x] = len(labels)
            labels.append(x)
        index.append(where[x])
    return labels, np.asarray(index, np.int64)


def whole_batch(verdicts: Verdicts, *, policy_who: str, broker_who: str = "broker",
                source: str) -> Outcome:
    """The replay's own outcomes: a rejected record is refused, a collateral one collateral
    (a failing record rejects its whole batch), with its reason and the batch answers."""
    rr = verdicts.record_reasons()
    return Outcome(_FROM_OUTCOME[rr.outcome.astype(np.int64)], rr.reason.astype(np.int64),
                   list(rr.labels),
                   batch_answers(verdicts.batches, policy_who=policy_who,
                                 broker_who=broker_who),
                   [source])


def behind_gate(upstream: Outcome, keys: pa.Table, gate: Verdicts, *, source: str
                ) -> Outcome:
    """``upstream`` (what the raw topic's broker appended, records keyed by ``keys``) with a
    per-record gate behind it: every appended record the single-framed replay ``gate``
    rejects is dead-lettered (its reason the gate's), the others forwarded.  Records the gate
    never sees (transaction markers) pass."""
    rr = gate.record_reasons()
    at = align(keys, rr.keys)
    seen = at >= 0
    g_out = np.zeros(len(at), np.int64)
    g_out[seen] = rr.outcome[at[seen]]
    dead = (upstream.disposition == ACCEPTED) & (g_out == 1)
    labels, remap = _merge_labels(upstream.labels, rr.labels)
    reason = upstream.reason.copy()
    g_reason = np.full(len(at), -1, np.int64)
    g_reason[seen] = rr.reason[at[seen]]
    has = dead & (g_reason >= 0)
    reason[has] = remap[g_reason[has]]
    disposition = upstream.disposition.copy()
    disposition[dead] = DEAD_LETTERED
    return Outcome(disposition, reason, labels, list(upstream.answers),
                   [*upstream.sources, source], upstream.dlq_copy.copy())


def _first_failure_of(verdicts: Verdicts, rules: set[str]) -> tuple[np.ndarray, list[str]]:
    """Per record of ``verdicts``: the index (into the returned labels) of its first enforced
    failure (code != 0) among ``rules``, -1 when none."""
    n = verdicts.records.num_rows
    out = np.full(n, -1, np.int64)
    lists = verdicts.records.column("failures").combine_chunks()
    flat = lists.flatten()
    if not rules or not len(flat):
        return out, []
    parents = pc.list_parent_indices(lists).to_numpy()
    names = flat.field("rule")
    hit = pc.and_(pc.is_in(names, value_set=pa.array(sorted(rules), pa.string())),
                  pc.not_equal(flat.field("code"), 0))
    idx = np.flatnonzero(pc.fill_null(hit, False).to_numpy(zero_copy_only=False))
    if not len(idx):
        return out, []
    first_parent, first = np.unique(parents[idx], return_index=True)
    enc = pc.dictionary_encode(names.take(pa.array(idx[first])))
    out[first_parent] = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return out, enc.dictionary.to_pylist()


def in_front(client: Verdicts, rules: set[str], broker: Verdicts, keys: pa.Table,
             batch_rows: np.ndarray, *, who: str, error_name: str, dlq: bool,
             source: str, broker_source: str) -> Outcome:
    """A per-record client check in front of the broker: records of the single-framed replay
    ``client`` failing any of ``rules`` are refused before they are sent (their reason: the
    first such rule; copied to a dead-letter topic too with ``dlq``); the rest is sent in the
    sample's batches and judged by ``broker`` (records keyed by ``keys``, ``batch_rows`` their
    batch rows), whose refused batches stay refused only while a record the client let
    through is itself refused there."""
    first, client_labels = _first_failure_of(client, rules)
    at = align(keys, client.records.select(["topic", "partition", "offset"]))
    c_reason = np.full(len(at), -1, np.int64)
    seen = at >= 0
    c_reason[seen] = first[at[seen]]
    refused = c_reason >= 0

    rr = broker.record_reasons()
    base = _FROM_OUTCOME[rr.outcome.astype(np.int64)]
    nb = broker.batches.num_rows
    err = pc.fill_null(broker.batches.column("error_code"), 0).to_numpy().astype(np.int64)
    sent = ~refused
    remaining = np.bincount(batch_rows[sent], minlength=nb)
    culprit = sent & np.isin(base, (REFUSED, UNDETERMINED))
    still = (err != 0) & (np.bincount(batch_rows[culprit], minlength=nb) > 0)
    b_err = err[batch_rows]
    b_still = still[batch_rows]
    disposition = base.copy()
    disposition[sent & (b_err != 0) & ~b_still] = ACCEPTED
    disposition[refused] = REFUSED
    labels, remap = _merge_labels(list(rr.labels), client_labels)
    reason = np.where(sent & (b_err != 0) & b_still, rr.reason, -1).astype(np.int64)
    reason[refused] = remap[c_reason[refused]]

    answers = []
    if refused.any():
        answers.append(Answer(who, None, error_name, False, "raised", None,
                              int(refused.sum())))
    keep = remaining > 0
    if keep.any():
        b = broker.batches
        action = b.column("producer_action").to_numpy(zero_copy_only=False).astype(object)
        name = b.column("error_name").to_numpy(zero_copy_only=False).astype(object)
        code = np.where(still, err, 0)
        action = np.where(still, action, "appended")
        name = np.where(still, name, "NONE")
        k = np.flatnonzero(keep)
        answers += _answers(pa.table({
            "who": pa.array(["broker"] * len(k), pa.string()),
            "code": pa.array(code[k], pa.int64()),
            "name": pa.array(name[k].tolist(), pa.string()),
            "action": pa.array(action[k].tolist(), pa.string()),
            "records": pa.array(remaining[k], pa.int64())}))
    return Outcome(disposition, reason, labels, answers, [source, broker_source],
                   refused & dlq)
