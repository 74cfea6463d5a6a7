"""Assembling verdicts: the broker checks with a policy's failures injected where a
record-validation policy runs, then record and batch verdict tables (local engine).

:class:`Assembler` keeps what does not depend on the policy and the last broker pass, so an
edited policy re-judges only the batches whose policy messages changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.checks import CHECKS
from kqlab.kafka.checks import record as record_checks
from kqlab.kafka.configs import TopicConfig
from kqlab.kafka.validator import PartitionValidator
from kqlab.policy.model import Policy
from kqlab.records import PARAMS_TYPE
from kqlab.validate.aggregates import (
    COORDINATES,
    DeferredRecords,
    FlatFailures,
    RecordCodes,
)
from kqlab.validate.rule_table import RULES_SCHEMA, health_row
from kqlab.validate.rules import RuleResult
from kqlab.validate.sample import Sample
from kqlab.validate.verdict_tables import SortedFailures
from kqlab.validate.verdicts import (
    POOL,
    RECORD_VERDICTS_SCHEMA,
    REPLAY_BATCHES_SCHEMA,
    DeferredVerdicts,
    Verdicts,
    batch_ids,
    producer_action,
)

#: a record's outcome by code (``Assembler``: 0 accepted, 1 rejected, 2 collateral, 3 undetermined)
_OUTCOME_WORDS = pa.array(["accepted", "rejected", "collateral", "undetermined"], pa.string())
#: stand-in error code of a batch the tables alone could not judge
UNDECIDED = -1000


def _broker_pass(sample: Sample, config: TopicConfig, now: int, profile: str,
                 record_messages: Sequence[str | None] | pa.Array | None, rows: np.ndarray,
                 record_rules: pa.Array | None = None,
                 validators: dict[tuple[str, int], PartitionValidator] | None = None
                 ) -> pa.Table:
    """Batch verdicts with the policy injected, partition by partition (producer state is per
    partition), vectorised over the tables; rows the tables cannot judge go to the exact
    byte-level validator (``raw``).  ``record_messages`` None: no record policy at all;
    ``record_rules`` names the rule behind each message (so verdicts carry it as data).
    ``validators`` (one per topic-partition, created here when missing) carry each partition's
    producer state and next offset into the next chunk of a streamed replay."""
    from kqlab.kafka.table_checks import RecordPolicy, broker_verdicts

    records, batches = sample.records, sample.batches
    nb = batches.num_rows
    if nb == 0:
        from kqlab.records import BATCH_VERDICTS_SCHEMA

        return BATCH_VERDICTS_SCHEMA.empty_table()

    def policy_of(msgs: Sequence[str | None] | pa.Array | None,
                  rules: pa.Array | None) -> RecordPolicy | None:
        return None if msgs is None else RecordPolicy(profile, msgs, rules)

    keys = pc.binary_join_element_wise(
        pc.cast(batches.column("topic"), pa.string()),
        pc.cast(batches.column("partition"), pa.string()), "\x00")
    groups = pc.unique(keys).to_pylist()
    def validator_of(b_idx: int) -> PartitionValidator | None:
        if validators is None:
            return None
        topic = batches.column("topic")[b_idx].as_py() or ""
        part = batches.column("partition")[b_idx].as_py()
        key = (topic, -1 if part is None else part)
        if key not in validators:
            validators[key] = PartitionValidator(key[0], key[1], config, now=now,
                                                 source=sample.judged_as)
        return validators[key]

    if len(groups) == 1:
        return broker_verdicts(records, batches, config, now=now, source=sample.judged_as,
                               raw=sample.raw, policy=policy_of(record_messages, record_rules),
                               validator=validator_of(0))
    key_np = np.asarray(keys.to_pylist(), dtype=object)
    msgs_arr = None if record_messages is None else record_messages \
        if isinstance(record_messages, pa.Array) else pa.array(record_messages, pa.string())
    parts, order = [], []
    for g in groups:
        b_idx = np.flatnonzero(key_np == g)
        b0, b1 = int(b_idx[0]), int(b_idx[-1]) + 1
        if b1 - b0 == len(b_idx):
            # a partition's batches side by side (a log directory, a snapshot part): its
            # records are one run too (records come in batch order), so slices, no copies
            r0, r1 = (int(x) for x in np.searchsorted(rows, [b0, b1]))
            part_records, part_batches = records.slice(r0, r1 - r0), batches.slice(b0, b1 - b0)
            part_msgs = None if msgs_arr is None else msgs_arr.slice(r0, r1 - r0)
            part_rules = None if record_rules is None else record_rules.slice(r0, r1 - r0)
            part_raw = None if sample.raw is None else sample.raw[b0:b1]
        else:
            r_idx = pa.array(np.flatnonzero(np.isin(rows, b_idx)))
            part_records, part_batches = records.take(r_idx), batches.take(pa.array(b_idx))
            part_msgs = None if msgs_arr is None else msgs_arr.take(r_idx)
            part_rules = None if record_rules is None else record_rules.take(r_idx)
            part_raw = None if sample.raw is None else [sample.raw[i] for i in b_idx.tolist()]
        parts.append(broker_verdicts(
            part_records, part_batches, config, now=now, source=sample.judged_as, raw=part_raw,
            policy=None if part_msgs is None else policy_of(part_msgs, part_rules),
            validator=validator_of(b0)))
        order.append(b_idx)
    merged = pa.concat_tables(parts)
    return merged.take(pa.array(np.argsort(np.concatenate(order), kind="stable")))


@dataclass
class _PolicyInput:
    """What the broker sees of a policy: per record the index of its first failing reject
    rule's message (-1: none) into ``messages`` (Arrow)."""

    first: np.ndarray
    messages: pa.Array
    #: where each rule's messages start in ``messages``, and the rule results they came from
    bases: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sources: tuple[RuleResult, ...] = ()
    #: the rule id behind each entry of ``messages`` (dictionary-encoded: one id per rule)
    rules: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))
    #: (rule id, id of its result) of each source: equal for two inputs made of the same
    made_of: tuple[tuple[str, int], ...] = ()
    _keys: np.ndarray | None = field(default=None, repr=False)
    #: how many records fail and the keys' sum: inputs that differ mostly differ here
    _digest: tuple[int, int] | None = field(default=None, repr=False)
    _failing: np.ndarray | None = field(default=None, repr=False)
    _arrow_first: pa.Array | None = field(default=None, repr=False)

    def keys(self, uid: dict[tuple[int, str], int]) -> np.ndarray:
        """Per record, what its policy verdict is made of, as one int64: the rule result and
        rule name its message came from (``uid`` numbers them) and its row among that
        result's failures; -1 where the record passes.  Two inputs with the same key for a
        record give it the same message and rule (the inputs keep their results alive, so an
        id is never reused while compared); computed once per input."""
        if self._keys is None:
            names = self.rules.dictionary.to_pylist() if len(self.sources) else []
            codes = np.array([uid.setdefault((id(s), name), len(uid))
                              for s, name in zip(self.sources, names, strict=True)],
                             dtype=np.int64)
            keys = np.full(len(self.first), -1, dtype=np.int64)
            has = np.flatnonzero(self.first >= 0)
            if len(has):
                f = self.first[has]
                seg = np.searchsorted(self.bases, f, side="right") - 1
                keys[has] = (codes[seg] << 32) | (f - self.bases[seg])
            self._keys = keys
            self._digest = (len(has), int(keys.sum()))
        return self._keys

    def forget_keys(self) -> None:
        """Drop the keys (their numbering starts again)."""
        self._keys = self._digest = None

    def same_keys(self, other: _PolicyInput, uid: dict[tuple[int, str], int]) -> bool:
        """Whether ``other`` has this input's key for every record (:meth:`keys`); the
        digests are compared first, so two inputs that differ cost no array comparison."""
        if other is self:
            return True
        mine, theirs = self.keys(uid), other.keys(uid)
        return self._digest == other._digest and np.array_equal(mine, theirs)

    @property
    def failing(self) -> np.ndarray:
        """Per record, whether a reject rule fails it (made once per input)."""
        if self._failing is None:
            self._failing = self.first >= 0
        return self._failing

    def at(self, rec: np.ndarray) -> pa.Array:
        """The policy message of records ``rec`` (null where they pass)."""
        f = self.first[rec]
        return pc.take(self.messages, pa.array(f, mask=f < 0), memory_pool=POOL)

    def arrow(self) -> pa.Array:
        """The policy message of every record (null where it passes), as the broker checks
        take them: dictionary-encoded, indices into ``messages`` (the broker pass decodes
        only the failing records' texts; taking a million strings out first cost ~15 ms)."""
        return pa.DictionaryArray.from_arrays(self._indices(), self.messages)

    def rules_at(self, rec: np.ndarray | None = None) -> pa.Array:
        """The rule behind the policy message of records ``rec`` (all: None)."""
        f = self._indices() if rec is None else _masked(self.first[rec])
        return pc.take(self.rules, f, memory_pool=POOL)

    def _indices(self) -> pa.Array:
        """``first`` as Arrow indices, null where a record passes (made once per input)."""
        if self._arrow_first is None:
            self._arrow_first = _masked(self.first, self.failing)
        return self._arrow_first

    def python(self, rec: np.ndarray | None = None) -> list[str | None]:
        """The policy messages as the broker checks take them (None where a record passes)."""
        f = self.first if rec is None else self.first[rec]
        return self.messages.take(pa.array(f, mask=f < 0)).to_pylist()


def _masked(first: np.ndarray, failing: np.ndarray | None = None) -> pa.Array:
    """Indices into a policy input's messages, null where the record passes (-1, or not
    ``failing``): the values are ``first``'s own buffer (not copied; the input never changes
    it), the validity bits packed from the mask."""
    first = np.ascontiguousarray(first, dtype=np.int64)
    if failing is None:
        failing = first >= 0
    valid = int(np.count_nonzero(failing))
    if valid == len(first):
        return pa.array(first)
    bits = np.packbits(failing, bitorder="little")
    return pa.Array.from_buffers(pa.int64(), len(first), [pa.py_buffer(bits),
                                                          pa.py_buffer(first)],
                                 null_count=len(first) - valid)


@dataclass
class _BrokerRun:
    """The last broker pass: its inputs and its batch verdicts."""

    config: TopicConfig
    now: int
    profile: str
    policy: _PolicyInput
    verdicts: pa.Table


class _BatchIds:
    """:func:`~kqlab.validate.verdicts.batch_ids` of a sample, computed once when first
    called; keeps only the three columns it reads (which the verdict tables share)."""

    def __init__(self, records: pa.Table):
        self._table: pa.Table | None = records.select(["topic", "partition", "batch_offset"])
        self._ids: np.ndarray | None = None

    def __call__(self) -> np.ndarray:
        if self._ids is None:
            assert self._table is not None
            self._ids, self._table = batch_ids(self._table), None
        return self._ids


#: above this share of changed batches, or this many records in them, the broker checks re-run
#: over the whole sample (taking the changed batches' records out costs more than it saves:
#: the vectorised full pass runs at ~25 ns a record, taking records out at ~300 ns)
SPLICE_MAX_SHARE = 0.6
SPLICE_MAX_RECORDS = 50_000
#: broker passes an :class:`Assembler` keeps for the batches of later edits (an undo, a mode
#: switched back); each holds its per-record policy input (two int64 arrays a record)
BROKER_RUNS_KEPT = 4
#: rule results numbered for :meth:`_PolicyInput.keys` before the numbering starts again
_UIDS_MAX = 4096


class Assembler:
    """Assembles the verdict tables of one sample under successive policies.

    What does not depend on the policy is computed once (the record → batch accounting, the
    topics seen, batch ids, each rule result's failing rows and messages as Arrow); the
    broker checks re-run only on the batches whose records' policy messages changed since the
    last pass, when the batches are independent of each other (see :meth:`independent`) —
    else over the whole sample.  Either way the result equals a fresh :func:`replay`.
    """

    def __init__(self, sample: Sample, rows: np.ndarray):
        self.sample = sample
        self.rows = rows
        self.n = sample.records.num_rows
        self.nb = sample.batches.num_rows
        counts = np.bincount(rows, minlength=self.nb) if self.nb else np.zeros(0, np.int64)
        self.row_start = np.zeros(self.nb + 1, dtype=np.int64)
        np.cumsum(counts, out=self.row_start[1:])
        self._rules: dict[int, tuple[RuleResult, np.ndarray, pa.Array]] = {}
        self._topics: list[str] | None = None
        self._batch_id: _BatchIds | None = None
        self._coordinates: pa.Table | None = None
        self._independent: dict[tuple[TopicConfig, int], bool] = {}
        #: the last broker passes, oldest first (:data:`BROKER_RUNS_KEPT`), and the numbers
        #: of the rule results their policy inputs came from (:meth:`_PolicyInput.keys`)
        self._runs: list[_BrokerRun] = []
        self._uid: dict[tuple[int, str], int] = {}
        #: batches the broker checks ran on, over every pass (tests and benchmarks read it)
        self.broker_batches = 0
        #: a streamed replay's partition validators, carried from chunk to chunk (None: the
        #: sample is the whole input, and edits may re-judge only changed batches)
        self.validators: dict[tuple[str, int], PartitionValidator] | None = None

    # -- per-sample facts ---------------------------------------------------------------------
    @property
    def topics(self) -> list[str]:
        """The topics of the sample's records."""
        if self._topics is None:
            self._topics = pc.unique(self.sample.records.column("topic")).to_pylist() \
                if self.n else []
        return self._topics

    @property
    def coordinates(self) -> pa.Table:
        """The sample's record coordinates (:data:`~kqlab.validate.aggregates.COORDINATES`),
        the first columns of every record verdicts table of this sample: one table, so the
        views of successive edits read the same columns."""
        if self._coordinates is None:
            self._coordinates = pa.table(
                [self.sample.records.column(c) for c in COORDINATES],
                schema=pa.schema([RECORD_VERDICTS_SCHEMA.field(c) for c in COORDINATES]))
        return self._coordinates

    @property
    def batch_id(self) -> _BatchIds:
        """:func:`~kqlab.validate.verdicts.batch_ids` of the sample's records, computed when
        first called (by a view: a replay that is never drawn does not pay for it)."""
        if self._batch_id is None:
            self._batch_id = _BatchIds(self.sample.records)
        return self._batch_id

    def _rule(self, res: RuleResult) -> tuple[np.ndarray, pa.Array]:
        """A rule result's failing rows and messages (Arrow), computed once."""
        hit = self._rules.get(id(res))
        if hit is None or hit[0] is not res:
            hit = (res, res.failing, pa.array(res.messages, pa.string(), memory_pool=POOL))
            self._rules[id(res)] = hit
        return hit[1], hit[2]

    def independent(self, config: TopicConfig, now: int) -> bool:
        """Whether every batch's verdict depends on that batch alone, whatever the policy.

        True when the sample is a log (``source="log"``), no batch carries a producer id
        (stage F keeps no producer state), and the tables alone judge every batch without a
        policy (so no batch goes to the byte-level validator, whose offsets run across
        batches).  A policy only decides batches that reached the record checks, so it cannot
        make a batch undetermined."""
        key = (config, now)
        hit = self._independent.get(key)
        if hit is None:
            s = self.sample
            pid = s.batches.column("producer_id")
            hit = s.judged_as == "log" and self.nb > 0 and \
                not pc.any(pc.greater(pc.fill_null(pid, -1), -1)).as_py()
            if hit:
                bare = Sample(s.records, s.batches, None, s.framing, s.source)
                base = _broker_pass(bare, config, now, "kip-940", None, self.rows)
                hit = not pc.any(pc.equal(base.column("check"), "undetermined")).as_py()
            self._independent[key] = bool(hit)
        return hit

    @property
    def _last(self) -> _BrokerRun | None:
        """The last broker pass."""
        return self._runs[-1] if self._runs else None

    # -- the broker pass ----------------------------------------------------------------------
    def broker(self, config: TopicConfig, now: int, profile: str,
               policy: _PolicyInput) -> pa.Table:
        """The batch verdicts under ``policy``, re-running only changed batches when that is
        exact (see :meth:`independent`): an input equal to one of the passes kept
        (:data:`BROKER_RUNS_KEPT`) takes that pass's verdicts — an edit undone, or a rule
        switched back, re-checks nothing — and otherwise a batch whose input equals the last
        pass's or the one before takes that verdict."""
        runs = [r for r in self._runs if (r.config, r.now, r.profile) == (config, now, profile)]
        verdicts = None
        if self.validators is None and runs and self.independent(config, now):
            verdicts = self._reuse(runs, config, now, profile, policy)
        if verdicts is None:
            verdicts = _broker_pass(self.sample, config, now, profile, policy.arrow(),
                                    self.rows, policy.rules_at(), self.validators)
            self.broker_batches += self.nb
        if len(self._uid) > _UIDS_MAX:  # numbers of results long gone: start again
            self._runs, self._uid = [], {}
            policy.forget_keys()
        self._runs = [*self._runs, _BrokerRun(config, now, profile, policy, verdicts)][
            -BROKER_RUNS_KEPT:]
        return verdicts

    def _reuse(self, runs: list[_BrokerRun], config: TopicConfig, now: int, profile: str,
               policy: _PolicyInput) -> pa.Table | None:
        """The verdicts under ``policy`` from earlier passes (``runs``, oldest first, same
        settings) and a pass over the batches none of them judged with this input; None when
        those are too many to take out (a full pass costs less)."""
        last = runs[-1]
        keys = policy.keys(self._uid)
        for run in reversed(runs):  # the same input as a pass kept: its verdicts as they are
            if run.policy.same_keys(policy, self._uid):
                return run.verdicts
        if self._too_many(self._surely_changed(runs[-2:], policy)):
            return None  # known before the texts are compared (an edit of most batches)
        changed = self._changed_batches(last.policy, policy)
        if not len(changed):
            return last.verdicts
        # (verdicts, the batches taken from them, their rows there)
        picks: list[tuple[pa.Table, np.ndarray, np.ndarray]] = []
        if len(runs) > 1:
            differs = np.zeros(self.nb, dtype=bool)
            # the pass before the last only: an edit that takes back part of the last one
            # (more passes would cost a key comparison each on every edit that misses)
            for run in runs[-2:-1]:
                differs[:] = False
                differs[self.rows[np.flatnonzero(run.policy.keys(self._uid) != keys)]] = True
                same = ~differs[changed]
                if same.any():
                    picks.append((run.verdicts, changed[same], changed[same]))
                    changed = changed[~same]
                    if not len(changed):
                        break
        if self._too_many(changed):
            return None
        if len(changed):
            picks.append((self._pass_on(changed, config, now, profile, policy), changed,
                          np.arange(len(changed))))
        before = last.verdicts
        take = np.arange(self.nb, dtype=np.int64)
        tables, at = [before], self.nb
        for table, batches, rows in picks:
            tables.append(table.cast(before.schema) if table.schema != before.schema else table)
            take[batches] = at + rows
            at += table.num_rows
        return pa.concat_tables(tables).take(pa.array(take))

    def _too_many(self, changed: np.ndarray) -> bool:
        """Whether the ``changed`` batches are too many to take out of the sample
        (:data:`SPLICE_MAX_SHARE`, :data:`SPLICE_MAX_RECORDS`): a full pass costs less."""
        return len(changed) > SPLICE_MAX_SHARE * self.nb or int(
            (self.row_start[changed + 1] - self.row_start[changed]).sum()) > SPLICE_MAX_RECORDS

    def _surely_changed(self, runs: list[_BrokerRun], policy: _PolicyInput) -> np.ndarray:
        """Batches that no pass of ``runs`` judged with the input ``keys``, found from the
        records alone whose policy verdict flips (fails in one input, passes in the other):
        a lower bound of what :meth:`_reuse` re-checks, cheap enough to skip its text
        comparisons when a full pass is due anyway (a bound changed on most batches, a rule
        removed)."""
        surely = np.ones(self.nb, dtype=bool)
        for run in runs:
            flips = np.zeros(self.nb, dtype=bool)
            flips[self.rows[np.flatnonzero(run.policy.failing != policy.failing)]] = True
            surely &= flips
        return np.flatnonzero(surely)

    def _changed_batches(self, old: _PolicyInput, new: _PolicyInput) -> np.ndarray:
        """Batches holding a record whose policy message differs between ``old`` and ``new``."""
        ko, kn = old.keys(self._uid), new.keys(self._uid)
        diff = np.flatnonzero(ko != kn)
        if not len(diff):
            return np.zeros(0, np.int64)
        # the same failure of the same rule result (:meth:`_PolicyInput.keys`) is the same
        # verdict; another result's failure only if both its text and its rule are the same
        # (a renamed rule changes the verdict's identity)
        both = (ko[diff] >= 0) & (kn[diff] >= 0)
        same = np.zeros(len(diff), dtype=bool)
        if both.any():
            rec = diff[both]
            same[both] = pc.fill_null(pc.and_(
                pc.equal(old.at(rec), new.at(rec)),
                pc.equal(old.rules_at(rec).cast(pa.string()),
                         new.rules_at(rec).cast(pa.string()))), False).to_numpy(
                zero_copy_only=False).astype(bool)
        rows = self.rows[diff[~same]]  # non-decreasing: records come batch by batch
        return rows[np.r_[True, rows[1:] != rows[:-1]]] if len(rows) else rows

    def _pass_on(self, changed: np.ndarray, config: TopicConfig, now: int, profile: str,
                 policy: _PolicyInput) -> pa.Table:
        """The verdicts of the ``changed`` batches alone under ``policy`` (one row each)."""
        s = self.sample
        starts, ends = self.row_start[changed], self.row_start[changed + 1]
        sizes = ends - starts
        rec = np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(int(sizes.sum()))
        sub = Sample(s.records.take(pa.array(rec)), s.batches.take(pa.array(changed)),
                     None if s.raw is None else [s.raw[i] for i in changed.tolist()],
                     s.framing, s.source)
        sub_rows = np.repeat(np.arange(len(changed), dtype=np.int64), sizes)
        part = _broker_pass(sub, config, now, profile, policy.at(rec), sub_rows,
                            policy.rules_at(rec))
        self.broker_batches += len(changed)
        return part

    # -- assembly -----------------------------------------------------------------------------
    def _policy_input(self, policy: Policy, results: dict[str, RuleResult],
                      rules: dict[str, tuple[np.ndarray, pa.Array]]) -> _PolicyInput:
        """The policy as the broker sees it: each record's first failing reject rule's
        message.  Made of the reject rules that fail a record, in policy order, each by its
        id and its result: a kept pass's input made of the same (a mode switched back, an
        edit undone) is that input, its keys and Arrow indices already made."""
        made_of = tuple((rule.id, id(results[rule.id])) for rule in policy.rules
                        if rule.mode == "reject" and len(rules[rule.id][0]))
        for run in reversed(self._runs):  # their results are alive: an id names one result
            if run.policy.made_of == made_of:
                return run.policy
        first = np.full(self.n, -1, dtype=np.int64)
        arrows, bases, sources, names, base = [], [], [], [], 0
        for rule in policy.rules:
            idx, arrow = rules[rule.id]
            if rule.mode != "reject" or not len(idx):
                continue
            fresh = first[idx] < 0
            first[idx[fresh]] = base + np.flatnonzero(fresh)
            arrows.append(arrow)
            bases.append(base)
            sources.append(results[rule.id])
            names.append((rule.id, len(idx)))
            base += len(idx)
        empty = pa.array([], pa.string())
        rule_of = pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(len(names), dtype=np.int32), [k for _, k in names])),
            pa.array([r for r, _ in names], pa.string()))
        return _PolicyInput(first, pa.concat_arrays(arrows, POOL) if arrows else empty,
                            np.asarray(bases, dtype=np.int64), tuple(sources), rule_of,
                            made_of)

    def __call__(self, policy: Policy, results: dict[str, RuleResult], now: int,
                 profile: str) -> Verdicts:
        sample = self.sample
        batches, rows = sample.batches, self.rows
        n, nb = self.n, self.nb
        rules = {rule.id: self._rule(results[rule.id]) for rule in policy.rules}
        # the Arrow messages of this policy's results and of those the kept passes hold (an
        # undo brings them back), no others
        keep = {id(results[r.id]) for r in policy.rules} | {
            id(src) for run in self._runs for src in run.policy.sources}
        self._rules = {k: v for k, v in self._rules.items() if k in keep}
        pin = self._policy_input(policy, results, rules)
        has = pin.failing
        config = TopicConfig.from_dict(dict(policy.broker.configs), policy.broker.version)
        verdicts = self.broker(config, now, profile, pin)
        # a null code: the tables alone could not decide (a snapshot without batch bytes)
        codes = pc.fill_null(verdicts.column("error_code"), UNDECIDED).to_numpy(
            zero_copy_only=False).astype(np.int64)
        checks = np.asarray(verdicts.column("check").to_pylist(), dtype=object)
        rec_errs = _one_array(verdicts.column("record_errors")) if nb else \
            pa.array([], verdicts.schema.field("record_errors").type)
        n_rec_errs = pc.list_value_length(rec_errs).to_numpy(zero_copy_only=False)
        policy_batch = checks == "P"
        batch_level = (n_rec_errs == 0) & ~policy_batch & (codes != 0) & (codes != UNDECIDED)
        # culprits named in record_errors (KIP-467)
        flat = pc.list_flatten(rec_errs)
        err_row = pc.list_parent_indices(rec_errs).to_numpy(zero_copy_only=False)
        if len(flat):
            err_idx = flat.field("batch_index").to_numpy(zero_copy_only=False).astype(np.int64)
            culprit_rec = self.row_start[err_row] + err_idx
        else:
            err_idx = culprit_rec = np.zeros(0, dtype=np.int64)
        culprit = np.zeros(n, dtype=bool)
        culprit[culprit_rec] = True
        # failures, as (record, rule label, code, message, params) segments; labels are
        # coded, and each label has its kind and spec step
        labels: dict[str, int] = {}
        kinds: list[str | None] = []
        steps: list[str | None] = []

        def label(name: str, kind: str | None = "broker", step: str | None = None) -> int:
            if name not in labels:
                labels[name] = len(labels)
                kinds.append(kind)
                steps.append(step)
            return labels[name]

        f_rec: list[np.ndarray] = []
        f_rule: list[np.ndarray] = []
        f_code: list[np.ndarray] = []
        f_msg: list[pa.Array] = []
        f_params: list[pa.Array] = []
        # ... broker record errors (each names its check: the policy's own are ``P``) ...
        if len(culprit_rec):
            err_check = flat.field("check")
            own_mask = pc.fill_null(pc.not_equal(err_check, CHECKS_P), True)
            broker_own = own_mask.to_numpy(zero_copy_only=False).astype(bool)
            if broker_own.any():
                sel = pa.array(broker_own)
                own_checks = pc.fill_null(err_check.filter(sel), "")
                found = pc.unique(own_checks).to_pylist()
                lut = np.array([label(*_record_error_label(c)) for c in found], np.int64)
                code_lut = np.array([_record_error_code(c) for c in found], np.int64)
                which = pc.index_in(own_checks, value_set=pa.array(found, pa.string())
                                    ).to_numpy(zero_copy_only=False).astype(np.int64)
                f_rec.append(culprit_rec[broker_own])
                f_rule.append(lut[which])
                f_code.append(code_lut[which])
                f_msg.append(flat.field("message").filter(sel))
                f_params.append(flat.field("params").filter(sel))
        # ... batch-level broker errors on every record of their batch ...
        rejected_batch = codes != 0
        level_rec = np.flatnonzero(batch_level[rows]) if n and batch_level.any() else \
            np.zeros(0, dtype=np.int64)
        if len(level_rec):
            details = verdicts.column("detail").to_pylist()
            names = verdicts.column("error_name").to_pylist()
            b_rule = np.zeros(nb, dtype=np.int64)
            b_msg: list[str | None] = [None] * nb
            for b in np.flatnonzero(batch_level).tolist():
                b_rule[b] = label(f"broker:{checks[b]}", "broker", checks[b])
                b_msg[b] = details[b] or names[b]
            b_of = rows[level_rec]
            f_rec.append(level_rec)
            f_rule.append(b_rule[b_of])
            f_code.append(codes[b_of])
            f_msg.append(pa.array(b_msg, pa.string()).take(pa.array(b_of)))
            f_params.append(_one_array(verdicts.column("params")).take(pa.array(b_of)))
        # ... and every policy failure (reject and observe) on its record
        rule_rows = []
        reject_code = 44 if profile == "kip-686" else 87
        for rule in policy.rules:
            res = results[rule.id]
            idx, arrow = rules[rule.id]
            is_reject = rule.mode == "reject"
            batch_of = rows[idx]  # non-decreasing: records come batch by batch
            rejected_here = rejected_batch[batch_of]
            if len(idx):
                f_rec.append(idx)
                f_rule.append(np.full(len(idx), label(rule.id, rule.kind), dtype=np.int64))
                # a reject rule's failure carries the code its batch got; 0 where the policy was
                # not enforced (KIP-729 never sees compressed batches kept in place)
                f_code.append(np.where(rejected_here, reject_code, 0) if is_reject
                              else np.zeros(len(idx), dtype=np.int64))
                f_msg.append(arrow)
                f_params.append(_status_params(res, idx))
            rule_rows.append({
                "rule": rule.id, "kind": rule.kind, "mode": rule.mode, "severity": rule.severity,
                "exportable": rule.exportable, "failed_records": len(idx),
                "rejected_records": int(rejected_here.sum()) if is_reject else 0,
                "rejected_batches": _distinct_sorted(batch_of[rejected_here])
                if is_reject and len(idx) else 0,
                "evaluation_errors": res.errors,
                **health_row(res.unseen, res.judged, res.errors),
            })
        # KIP-686 rejects the batch (check "P") without record errors: its culprits are the
        # records that failed the policy, the others are collateral
        own = culprit
        if n and batch_level.any():
            own = own | batch_level[rows]
        if n and policy_batch.any():
            own = own | (has & policy_batch[rows])
        # outcome codes; the strings (Arrow, from a dictionary) only with the table
        # per batch 0 (accepted), 2 (rejected: collateral unless the record is its own
        # culprit, 1) or 3 (undetermined), spread to its records
        per_batch = np.where(rejected_batch, 2, 0).astype(np.int8)
        per_batch[codes == UNDECIDED] = 3
        outcome_idx = per_batch[rows] if n else np.zeros(0, dtype=np.int8)
        outcome_idx[own & (outcome_idx == 2)] = 1
        cat = np.concatenate
        sorted_failures = SortedFailures.of(
            n, cat(f_rec).astype(np.int64) if f_rec else np.zeros(0, np.int64),
            cat(f_rule) if f_rule else np.zeros(0, np.int64), list(labels),
            cat(f_code).astype(np.int64) if f_code else np.zeros(0, np.int64))
        built: dict[str, Any] = {}

        def texts() -> dict[str, Any]:
            """The failures column and its texts, made once (the table and the flattened
            failures share them)."""
            if not built:
                column, rule_arr, msg_arr = sorted_failures.column(
                    pa.concat_arrays(f_msg, POOL) if f_msg else pa.array([], pa.string()),
                    kinds, steps, pa.concat_arrays(f_params, POOL) if f_params else None)
                built.update(column=column, rules=rule_arr, messages=msg_arr)
            return built

        def table() -> pa.Table:
            outcome = pc.take(_OUTCOME_WORDS, pa.array(outcome_idx), memory_pool=POOL)
            return pa.table([*self.coordinates.columns, outcome, texts()["column"]],
                            schema=RECORD_VERDICTS_SCHEMA)

        def flat_failures() -> FlatFailures:
            t = texts()
            return sorted_failures.parents, t["rules"], sorted_failures.codes, t["messages"]

        record_table = DeferredRecords(self.coordinates, table)
        undetermined = int(sum(1 for c in checks if c == "undetermined"))
        notes = replay_notes(policy, self.topics, undetermined)
        out = DeferredVerdicts(
            record_table, _batch_table(batches, verdicts, profile, sample.framing),
            pa.Table.from_pylist(rule_rows, RULES_SCHEMA), profile, sample.framing, now,
            policy.name, policy.content_hash(), list(sample.issues), notes)
        # per-record codes the views would derive from these tables again (equal to what
        # they compute, tests check; the batch ids are computed when first needed, the
        # failures' texts with the table)
        some = len(sorted_failures.order) > 0
        out.codes = RecordCodes(
            record_table, outcome_idx, self.batch_id, failures=flat_failures if some else None,
            reason_labels=sorted_failures.reason_labels if some else None,
            rule_codes=sorted_failures.rule_codes if some else None,
            parents=sorted_failures.parents if some else None,
            failure_codes=sorted_failures.codes if some else None)
        return out


#: a failure's ``params`` when the rule could not judge the record: an evaluation error is a
#: status of its own (``failures.params['status'] == 'error'``, from which the failure's
#: ``status`` column is made: ``verdict_tables.failure_status``)
ERROR_STATUS = "error"


def _status_params(res: RuleResult, idx: np.ndarray) -> pa.Array:
    """The ``params`` of a rule's failure rows: ``{status: error}`` where its evaluation
    errored, null where the record simply failed it."""
    if res.error_mask is None or not len(idx):
        return pa.nulls(len(idx), PARAMS_TYPE)
    errored = res.error_mask[idx]
    if not errored.any():
        return pa.nulls(len(idx), PARAMS_TYPE)
    one = pa.array([[("status", ERROR_STATUS)]], PARAMS_TYPE)
    return one.take(pa.array(np.zeros(len(idx), np.int64), mask=~errored))


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """A column as one array: its chunk when it has one (``combine_chunks`` copies even then:
    a million-record pass's record errors, ~4 ms)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _distinct_sorted(values: np.ndarray) -> int:
    """How many distinct values a non-decreasing array holds."""
    return int(np.count_nonzero(values[1:] != values[:-1])) + 1 if len(values) else 0


#: the check id of a record error that is the policy's own (KIP-940/729)
CHECKS_P = record_checks.P.id


def _record_error_label(check_id: str) -> tuple[str, str, str | None]:
    """A broker record error's failure label, kind and step from the check that found it
    (``R4/type`` is step ``R4``); an unnamed check (an outcome built by hand) is ``broker``."""
    if not check_id:
        return "broker", "broker", None
    step = CHECKS[check_id].step
    return f"broker:{step}", "broker", step


def _record_error_code(check_id: str) -> int:
    """The error code a record error carries (its check's: R4 32, the others 87)."""
    return CHECKS[check_id].code if check_id else 87


def _assemble(sample: Sample, policy: Policy, results: dict[str, RuleResult], rows: np.ndarray,
              now: int, profile: str) -> Verdicts:
    """One assembly of ``sample``'s verdicts (a :class:`Replayer` keeps its
    :class:`Assembler` between runs instead)."""
    return Assembler(sample, rows)(policy, results, now, profile)


def replay_notes(policy: Policy, topics: Sequence[str], undetermined: int) -> list[str]:
    """The notes a replay's summary carries, from what every engine can count: the topics
    seen, the batches the tables alone could not judge, and the policy itself."""
    notes = []
    if policy.topics.names or policy.topics.patterns:
        import re

        unbound = [t for t in sorted(set(topics)) if t not in policy.topics.names and not any(
            re.fullmatch(p, t) for p in policy.topics.patterns)]
        if unbound:
            notes.append(f"policy {policy.name!r} does not bind topic(s) {', '.join(unbound)}; "
                         "replayed anyway")
    if undetermined:
        notes.append(f"{undetermined} batch(es) could not be judged from the tables alone "
                     "(the sample kept no batch bytes): their verdict is 'undetermined'")
    not_exportable = [r.id for r in policy.rules if not r.exportable]
    if not_exportable:
        notes.append(f"not exportable (Python plugins): {', '.join(not_exportable)}")
    return notes


def _batch_table(batches: pa.Table, verdicts: pa.Table, profile: str, framing: str
                 ) -> pa.Table:
    nb = batches.num_rows
    codes = verdicts.column("error_code").to_pylist()
    counts = verdicts.column("record_count").to_pylist()
    checks = verdicts.column("check").to_pylist()
    actions = ["undetermined" if c is None else producer_action(c, k, ch == "F1")
               for c, k, ch in zip(codes, counts, checks, strict=True)]
    return pa.table([
        *verdicts.columns,
        batches.column("producer_id"),
        pa.array([profile] * nb, pa.string()),
        pa.array([framing] * nb, pa.string()),
        pa.array(actions, pa.string()),
    ], schema=REPLAY_BATCHES_SCHEMA)

