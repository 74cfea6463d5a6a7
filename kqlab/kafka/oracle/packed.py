"""Run fuzzed cases on a real broker fast: many cases per partition, pipelined produce requests.

Why: one partition per case (:meth:`Oracle.run`) costs the broker a log directory per case and
a round trip per batch; 100 000 batches that way take hours.  Cases of one topic setup share
a partition instead — each case's producer id is its own (:class:`~.fuzzcases.PidPool`), so no
case sees another's producer state — and up to ``window`` produce requests are written before
the first answer is read (the broker answers one connection's requests in order).  One
:class:`~kqlab.kafka.validator.PartitionValidator` per partition follows the partition as the
broker does; the replay engine (``broker_verdicts``) judges each window's batches, carrying its
state from window to window (``validator=``), with that window's clock.

Transactional cases (InitProducerId, AddPartitionsToTxn, EndTxn and the coordinator's markers)
run step by step on partitions of their own; the replay engine is not asked about them (it
cannot see the coordinator's markers), the validator is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kqlab.kafka.oracle.compare import BatchResult, Ctx, _marker, differs
from kqlab.kafka.oracle.fuzzcases import SETUPS, FuzzCase
from kqlab.kafka.oracle.gaps import known_gap
from kqlab.kafka.oracle.wire import WireClient

#: batches per partition (bounds how long a partition's run takes: its clock drift)
PER_PARTITION = 2000
#: produce requests in flight per connection
WINDOW = 200


@dataclass(slots=True)
class _Partition:
    """One partition's judges: the validator, the replay's carried validator, the setup."""

    topic: str
    partition: int
    config: dict[str, str]
    produce_version: int
    validator: Any
    replay: Any


class PackedOracle:
    """Runs :class:`~.fuzzcases.FuzzCase` lists on one broker (``version`` like ``"4.4.0"``)."""

    def __init__(self, broker: Any, version: str, *, window: int = WINDOW,
                 per_partition: int = PER_PARTITION, replay: bool = True) -> None:
        self.broker = broker
        self.version = version
        self.release = ".".join(version.split(".")[:2])
        self.client = WireClient(broker.bootstrap)
        self.window = window
        self.per_partition = per_partition
        self.replay = replay
        self._topics = 0
        self._txn = 0

    def close(self) -> None:
        self.client.close()

    def run(self, cases: Sequence[FuzzCase],
            progress: Callable[[int], None] | None = None) -> list[BatchResult]:
        """Every case's batches, on partitions shared by setup; results in case order."""
        by_setup: dict[str, list[FuzzCase]] = {}
        for c in cases:
            by_setup.setdefault(c.setup, []).append(c)
        out: dict[int, list[BatchResult]] = {}
        for setup, members in by_setup.items():
            chunks = self._chunks(members)
            parts = self._partitions(setup, len(chunks))
            for part, chunk in zip(parts, chunks, strict=True):
                self._run_partition(part, chunk, out)
                if progress is not None:
                    progress(sum(len(c.batches) or 1 for c in chunk))
        return [r for c in cases for r in out.get(c.index, [])]

    def _chunks(self, members: list[FuzzCase]) -> list[list[FuzzCase]]:
        """Cases split into partitions of at most :attr:`per_partition` batches (a
        transactional case counts 4); transactional cases 25 to a partition."""
        chunks: list[list[FuzzCase]] = [[]]
        size = 0
        for c in members:
            n = 4 if c.producer else len(c.batches)
            if chunks[-1] and size + n > self.per_partition:
                chunks.append([])
                size = 0
            chunks[-1].append(c)
            size += n
        return chunks

    def _partitions(self, setup: str, n: int) -> list[_Partition]:
        """A topic of ``n`` partitions with the setup's config; each partition warmed up
        (a fresh partition may answer NOT_LEADER_OR_FOLLOWER before it serves)."""
        from kqlab.kafka.builder import Record, build_batch
        from kqlab.kafka.validator import PartitionValidator

        config, pv = SETUPS[setup]
        self._topics += 1
        topic = f"oracle-fuzz-{self.release}-{setup}-{self._topics}-{time.time_ns() % 10**9}"
        self.broker.create_topic(topic, partitions=n, config=config)
        parts = []
        # only transactional producers' requests carry a transactional id; without one the
        # broker refuses any transactional batch (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        def judge(p: int) -> PartitionValidator:
            return PartitionValidator(topic, p, config, broker_version=self.release,
                                      source="producer", produce_version=pv,
                                      transactional_id_authorized=setup == "txn")

        for p in range(n):
            v, r = judge(p), judge(p)
            warm = build_batch([Record(key=b"warm", value=b"up")],
                               base_timestamp=int(time.time() * 1000))
            for _ in range(200):
                res = self.client.produce(topic, p, warm, version=pv)
                if res.error_code not in (3, 6):
                    break
                time.sleep(0.05)
            if res.error_code != 0:
                raise RuntimeError(f"warm-up produce to {topic}-{p} failed: {res.error_code}")
            now = int(time.time() * 1000)
            v.now = r.now = now
            v.validate(warm)
            r.validate(warm)
            parts.append(_Partition(topic, p, config, pv, v, r))
        return parts

    def _run_partition(self, part: _Partition, cases: list[FuzzCase],
                       out: dict[int, list[BatchResult]]) -> None:
        pending: list[tuple[FuzzCase, bytes]] = []
        for c in cases:
            if c.producer == "transactional":
                self._flush(part, pending, out)
                pending = []
                out[c.index] = self._run_txn(part, c)
                continue
            pending.extend((c, b) for b in c.batches)
            if len(pending) >= self.window:
                self._flush(part, pending, out)
                pending = []
        self._flush(part, pending, out)

    def _flush(self, part: _Partition, pending: list[tuple[FuzzCase, bytes]],
               out: dict[int, list[BatchResult]]) -> None:
        """Send ``pending`` pipelined; judge each batch with the validator and the replay."""
        if not pending:
            return
        batches = [b for _, b in pending]
        now = int(time.time() * 1000)
        answers = self.client.produce_many(part.topic, part.partition, list(batches),
                                           version=part.produce_version)
        part.validator.now = now
        results = []
        for (case, records), broker in zip(pending, answers, strict=True):
            kq = part.validator.validate(records).to_dict()
            lst = out.setdefault(case.index, [])
            res = BatchResult(f"{case.index}", case.family, len(lst), broker, kq,
                              records=records)
            res.disagreement = differs(broker, kq)
            lst.append(res)
            results.append(res)
        if self.replay:
            self._replay(part, batches, results, now)
        for res in results:
            if res.disagreement is not None:
                res.known_gap = known_gap(self.release, part.config, res.records, res.broker)

    def _replay(self, part: _Partition, batches: list[bytes], results: list[BatchResult],
                now: int) -> None:
        """``broker_verdicts`` over the window (state carried in ``part.replay``).  A window
        whose inputs do not each decode to one batch is judged piece by piece; a piece that
        is not one batch is skipped (the broker rejects it whole: v2 requests carry one batch;
        if it did not, the replay stops following that partition)."""
        from kqlab.kafka.batch import decode_batches

        if part.replay is None:
            return
        decoded = decode_batches(batches, topic=part.topic, partition=part.partition)
        if decoded.batches.num_rows == len(batches):
            self._judge(part, decoded, batches, results, now)
            return
        for b, res in zip(batches, results, strict=True):
            one = decode_batches([b], topic=part.topic, partition=part.partition)
            if one.batches.num_rows == 1:
                self._judge(part, one, [b], [res], now)
            elif res.broker.error_code == 0:
                part.replay = None
                return

    def _judge(self, part: _Partition, decoded: Any, raw: list[bytes],
               results: list[BatchResult], now: int) -> None:
        from kqlab.kafka.table_checks import broker_verdicts

        part.replay.now = now  # the rows it judges byte by byte use the carried validator
        table = broker_verdicts(decoded.records, decoded.batches, part.config,
                                broker_version=self.release, now=now, source="producer",
                                raw=raw, produce_version=part.produce_version,
                                transactional_id_authorized=False, validator=part.replay)
        for res, row in zip(results, table.to_pylist(), strict=True):
            res.replay = row
            if res.disagreement is None:
                d = differs(res.broker, row)
                if d is not None:
                    res.disagreement = f"replay: {d}"

    # -- transactional producers ------------------------------------------------------------
    def _run_txn(self, part: _Partition, case: FuzzCase) -> list[BatchResult]:
        """One transactional producer's steps, the validator fed the coordinator's markers."""
        self._txn += 1
        tid = f"oracle-fuzz-{self.release}-{self._txn}-{time.time_ns()}"
        ctx = Ctx(part.topic, part.partition, int(time.time() * 1000))
        ctx.transactional_id = tid
        ctx.pid = self.client.init_producer_id(tid)
        v = part.validator
        results: list[BatchResult] = []
        unknowable: str | None = None
        for step in case.steps:
            if step[0] == "add":
                code = self.client.add_partitions_to_txn(tid, ctx.pid, part.topic,
                                                         part.partition)
                if code:  # the coordinator's state, which no replay sees
                    unknowable = f"AddPartitionsToTxn answered {code}"
            elif step[0] == "end":
                code = self._end(ctx, v, bool(step[1]))
                if code:
                    unknowable = f"EndTxn answered {code}"
            else:
                build = step[1]
                assert callable(build)
                ctx.now = int(time.time() * 1000)
                records = build(ctx)
                broker = self.client.produce(part.topic, part.partition, records,
                                             version=part.produce_version,
                                             transactional_id=tid)
                v.now = ctx.now
                kq = v.validate(records).to_dict()
                res = BatchResult(f"{case.index}", case.family, len(results), broker, kq,
                                  records=records, unknowable=unknowable)
                res.disagreement = differs(broker, kq)
                results.append(res)
        part.replay = None  # markers the replay never saw: it cannot follow this partition
        return results

    def _end(self, ctx: Ctx, v: Any, commit: bool) -> int:
        """EndTxn; on success the coordinator's marker into the validator.  Its error code."""
        assert ctx.transactional_id is not None and ctx.pid is not None
        code, bumped = self.client.end_txn(ctx.transactional_id, ctx.pid, commit=commit)
        if code:
            return code
        now = int(time.time() * 1000)
        v.now, v.origin = now, "coordinator"
        try:
            v.validate(_marker(bumped or ctx.pid, commit, now))
        finally:
            v.origin = "client"
        if bumped is not None:
            ctx.pid = bumped
        return 0

