"""Run differential cases on a real broker and on kqlab; compare the answers batch by batch.

A :class:`Case` is one partition's story: the batches a producer sends (exact bytes), and for
producer-state cases the protocol steps around them (a producer id from InitProducerId, a
partition added to a transaction, the transaction ended).  Cases with the same topic config
share one topic, one partition each, so producer state never leaks from case to case.

For every produced batch three answers are compared with the broker's (error code,
``error_message``, ``record_errors``):

* ``validator`` — :class:`~kqlab.kafka.validator.PartitionValidator` with
  ``source="producer"`` (what ``kqlab inspect --validate --source producer`` runs), fed the
  same steps (the coordinator's markers included) with the wall clock at the send as ``now``;
* ``replay`` — :func:`~kqlab.kafka.table_checks.broker_verdicts`, the replay's batch-verdict
  engine, over the decoded tables of the partition's batches (``raw=`` the bytes).

The broker's bounds in a timestamp message depend on its clock at the millisecond, so the
numbers inside ``[lower, upper]`` are compared within :data:`CLOCK_SLACK_MS`.  Cases a replay
cannot know the answer of carry ``unknowable`` (a reason, documented in docs/broker-oracle.md):
they are run and reported, not counted as disagreements.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kqlab.kafka.oracle.wire import ProduceResult, ProducerId, WireClient

#: how far kqlab's clock at the send may be from the broker's when it checked a timestamp
CLOCK_SLACK_MS = 5_000
_BOUNDS = re.compile(r"\[(-?\d+), (-?\d+)\]")


@dataclass(slots=True)
class Ctx:
    """What a case's builder may use: the granted producer id, the partition, the clock."""

    topic: str
    partition: int
    now: int
    pid: ProducerId | None = None
    transactional_id: str | None = None


#: one step: ("produce", bytes) | ("add",) | ("end", commit)
Step = tuple[Any, ...]


@dataclass
class Case:
    """One partition's differential case.

    ``batches`` are sent as given; ``build`` (for cases that need the granted producer id or
    the clock) returns the steps instead.  ``producer`` asks for an ``"idempotent"`` or
    ``"transactional"`` id before ``build`` runs.
    """

    name: str
    family: str
    config: dict[str, str] = field(default_factory=dict)
    batches: Sequence[bytes] = ()
    build: Callable[[Ctx], list[Step]] | None = None
    producer: str | None = None
    produce_version: int = 8
    acks: int = -1
    #: why the broker's answer depends on what a replay cannot know (None: it must agree)
    unknowable: str | None = None


@dataclass(slots=True)
class BatchResult:
    """One produced batch: the broker's answer, kqlab's, and whether they agree."""

    case: str
    family: str
    index: int
    broker: ProduceResult
    validator: dict[str, Any]
    replay: dict[str, Any] | None = None
    disagreement: str | None = None
    unknowable: str | None = None
    records: bytes = b""
    #: the known kqlab gap (:mod:`.gaps`) that explains ``disagreement`` (None: none does)
    known_gap: str | None = None


def _close(a: str | None, b: str | None) -> bool:
    """Texts equal, with the numbers of timestamp bounds allowed :data:`CLOCK_SLACK_MS`."""
    if a == b:
        return True
    if a is None or b is None:
        return False
    ma, mb = list(_BOUNDS.finditer(a)), list(_BOUNDS.finditer(b))
    if len(ma) != len(mb) or not ma:
        return False
    if _BOUNDS.sub("[]", a) != _BOUNDS.sub("[]", b):
        return False
    return all(abs(int(x.group(i)) - int(y.group(i))) <= CLOCK_SLACK_MS
               for x, y in zip(ma, mb, strict=True) for i in (1, 2))


def differs(broker: ProduceResult, kq: dict[str, Any]) -> str | None:
    """What differs between the broker's answer and one kqlab answer (None: they agree)."""
    if broker.error_code != kq["error_code"]:
        return f"error_code {broker.error_code} vs kqlab {kq['error_code']} ({kq.get('check')})"
    if not _close(broker.error_message, kq["error_message"]):
        return f"error_message {broker.error_message!r} vs kqlab {kq['error_message']!r}"
    theirs = [(e["batch_index"], e["message"]) for e in kq["record_errors"]]
    if len(theirs) != len(broker.record_errors) or not all(
            i == j and _close(m, n) for (i, m), (j, n) in zip(broker.record_errors, theirs,
                                                            strict=True)):
        return f"record_errors {broker.record_errors!r} vs kqlab {theirs!r}"
    return None


def _marker(pid: ProducerId, commit: bool, now: int) -> bytes:
    """The end-transaction marker the coordinator appends (what the validator is fed)."""
    from kqlab.kafka.builder import build_batch, control_record

    return build_batch([control_record(commit=commit, timestamp=now)], control=True,
                       transactional=True, producer_id=pid.producer_id,
                       producer_epoch=pid.producer_epoch, base_timestamp=now)


class Oracle:
    """Runs cases on one broker (``bootstrap``, release ``version`` such as ``"4.4.0"``)."""

    def __init__(self, broker: Any, version: str) -> None:
        self.broker = broker
        self.version = version
        self.release = ".".join(version.split(".")[:2])
        self.client = WireClient(broker.bootstrap)
        self._topics = 0
        self._txn = 0

    def close(self) -> None:
        self.client.close()

    def run(self, cases: Sequence[Case], *, replay: bool = True) -> list[BatchResult]:
        """Run ``cases``, grouped by topic config (one topic per group); results in order."""
        groups: dict[tuple[tuple[str, str], ...], list[int]] = {}
        for i, c in enumerate(cases):
            groups.setdefault(tuple(sorted(c.config.items())), []).append(i)
        out: dict[int, list[BatchResult]] = {}
        for key, members in groups.items():
            for start in range(0, len(members), 200):
                chunk = members[start:start + 200]
                self._topics += 1
                topic = f"oracle-{self.release}-{self._topics}"
                self.broker.create_topic(topic, partitions=len(chunk), config=dict(key))
                for p, i in enumerate(chunk):
                    out[i] = self.run_case(cases[i], topic, p, replay=replay)
        return [r for i in range(len(cases)) for r in out[i]]

    def run_case(self, case: Case, topic: str, partition: int, *, replay: bool = True
                 ) -> list[BatchResult]:
        """One case on ``topic``/``partition``: every step on the broker and on kqlab."""
        from kqlab.kafka.validator import PartitionValidator

        v = PartitionValidator(topic, partition, case.config, broker_version=self.release,
                               source="producer", produce_version=case.produce_version,
                               acks=case.acks)
        ctx = Ctx(topic, partition, int(time.time() * 1000))
        if case.producer == "idempotent":
            ctx.pid = self.client.init_producer_id()
        elif case.producer == "transactional":
            self._txn += 1
            ctx.transactional_id = f"oracle-{self.release}-{self._txn}-{time.time_ns()}"
            ctx.pid = self.client.init_producer_id(ctx.transactional_id)
        steps = case.build(ctx) if case.build is not None else \
            [("produce", b) for b in case.batches]
        results: list[BatchResult] = []
        sent: list[bytes] = []
        first_now = ctx.now
        for step in steps:
            if step[0] == "add":
                assert ctx.transactional_id is not None and ctx.pid is not None
                code = self.client.add_partitions_to_txn(ctx.transactional_id, ctx.pid, topic,
                                                         partition)
                if code:
                    raise RuntimeError(f"AddPartitionsToTxn failed: {code} ({case.name})")
                continue
            if step[0] == "end":
                self._end(case, ctx, v, bool(step[1]))
                continue
            records = step[1]
            now = int(time.time() * 1000)
            v.now = now
            if not sent:
                first_now = now
            broker = self._produce(case, ctx, records)
            kq = v.validate(records).to_dict()
            res = BatchResult(case.name, case.family, len(results), broker, kq,
                              unknowable=case.unknowable, records=records)
            res.disagreement = differs(broker, kq)
            results.append(res)
            sent.append(records)
        if replay and sent:
            self._replay(case, topic, partition, sent, results, first_now)
        return results

    def _produce(self, case: Case, ctx: Ctx, records: bytes) -> ProduceResult:
        """Send; resent while a new partition's leader is not ready yet (3, 6: a fresh
        topic's first moments, never a verdict on the bytes)."""
        for _ in range(100):
            broker = self.client.produce(ctx.topic, ctx.partition, records,
                                         version=case.produce_version, acks=case.acks,
                                         transactional_id=ctx.transactional_id)
            if broker.error_code not in (3, 6):
                return broker
            time.sleep(0.05)
        return broker

    def _end(self, case: Case, ctx: Ctx, v: Any, commit: bool) -> None:
        """EndTxn on the broker; the coordinator's marker into kqlab's partition."""
        assert ctx.transactional_id is not None and ctx.pid is not None
        code, bumped = self.client.end_txn(ctx.transactional_id, ctx.pid, commit=commit)
        if code:
            raise RuntimeError(f"EndTxn failed: {code} ({case.name})")
        now = int(time.time() * 1000)
        v.now, v.origin = now, "coordinator"
        try:
            v.validate(_marker(bumped or ctx.pid, commit, now))
        finally:
            v.origin = "client"
        if bumped is not None:
            ctx.pid = bumped

    def _replay(self, case: Case, topic: str, partition: int, sent: list[bytes],
                results: list[BatchResult], now: int) -> None:
        """The replay engine's verdicts over the partition's batches (markers excluded: a
        case with markers is judged by the validator alone)."""
        if case.producer == "transactional":
            return
        from kqlab.kafka.batch import decode_batches
        from kqlab.kafka.table_checks import broker_verdicts

        decoded = decode_batches(sent, topic=topic, partition=partition)
        if decoded.batches.num_rows != len(sent):
            return
        table = broker_verdicts(decoded.records, decoded.batches, case.config,
                                broker_version=self.release, now=now, source="producer", raw=sent,
                                produce_version=case.produce_version, acks=case.acks)
        for res, row in zip(results, table.to_pylist(), strict=True):
            res.replay = row
            if res.disagreement is None:
                d = differs(res.broker, row)
                if d is not None:
                    res.disagreement = f"replay: {d}"


def summary(results: Sequence[BatchResult], *, version: str, seconds: float) -> dict[str, Any]:
    """The JSON line of a run: batches, agreement, per family, broker version, batches/s.

    ``agreement`` counts every compared batch (a known gap's disagreement is a disagreement);
    ``agreement_outside_known_gaps`` leaves the known gaps' batches out."""
    fam: dict[str, Counter[str]] = {}
    for r in results:
        c = fam.setdefault(r.family, Counter())
        c["batches"] += 1
        if r.unknowable is not None:
            c["unknowable"] += 1
            continue
        c["compared"] += 1
        if r.disagreement is None:
            c["agree"] += 1
        elif r.known_gap is not None:
            c["known_gap"] += 1
    total: Counter[str] = sum(fam.values(), Counter())
    compared, agree, gaps = total["compared"], total["agree"], total["known_gap"]
    return {
        "batches": len(results), "compared": compared,
        "agreement": round(agree / compared, 6) if compared else None,
        "known_gaps": gaps,
        "agreement_outside_known_gaps": round(agree / (compared - gaps), 6)
        if compared - gaps else None,
        "families": {k: {"batches": c["batches"], "compared": c["compared"],
                         "agreement": round(c["agree"] / c["compared"], 6)
                         if c["compared"] else None, "known_gaps": c["known_gap"],
                         "unknowable": c["unknowable"]}
                     for k, c in sorted(fam.items())},
        "broker_version": version, "seconds": round(seconds, 1),
        "batches_per_s": round(len(results) / seconds, 1) if seconds else None,
    }
