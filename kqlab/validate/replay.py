"""The full batch validator: broker checks plus a policy's rules, with the record-policy KIPs'
semantics (local engine).

``replay(sample, policy)``:

1. evaluates every rule over the whole sample at once (``kqlab.validate.rules``: Arrow kernels,
   decoded columns cached in the :class:`~kqlab.validate.context.EvalContext`);
2. per record, the first failing ``reject`` rule (policy order) is the record's policy error;
   ``observe`` rules are counted and reported but never reject;
3. replays every partition's batches through the broker's ordered checks
   (:class:`~kqlab.kafka.validator.PartitionValidator`) with the policy errors injected where a
   record-validation policy runs (after the key and timestamp checks), so a policy rejection
   rejects the whole batch, reports ``record_errors`` as KIP-467 does, and — because nothing is
   appended — leaves producer state alone exactly as a broker would;
4. assembles the verdict tables (:mod:`kqlab.validate.verdicts`).

Samples read through a consumer have no real batch boundaries: ``framing="single"`` or
``"linger"`` rebuilds producer-like batches (see :func:`reconstruct_framing`), and the verdicts
say which framing was used.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.errors import KqlabError
from kqlab.kafka.configs import TopicConfig
from kqlab.policy.model import Policy, Rule
from kqlab.validate.context import EvalContext
from kqlab.validate.rules import RuleResult, evaluate_rule
from kqlab.validate.verdicts import (
    POOL,
    RECORD_VERDICTS_SCHEMA,
    REPLAY_BATCHES_SCHEMA,
    Verdicts,
    batch_ids,
    failures_from_codes,
    producer_action,
)

FRAMINGS = ("exact", "single", "linger")
#: a record's outcome by code (``Assembler``: 0 accepted, 1 rejected, 2 collateral, 3 undetermined)
_OUTCOME_WORDS = pa.array(["accepted", "rejected", "collateral", "undetermined"], pa.string())
#: stand-in error code of a batch the tables alone could not judge
UNDECIDED = -1000
RULES_SCHEMA = pa.schema([
    ("rule", pa.string()), ("kind", pa.string()), ("mode", pa.string()),
    ("severity", pa.string()), ("exportable", pa.bool_()), ("failed_records", pa.int64()),
    ("rejected_records", pa.int64()), ("rejected_batches", pa.int64()),
    ("evaluation_errors", pa.int64()),
])


class ReplayError(KqlabError):
    """The replay cannot run as asked (no batches and no framing strategy, bad source ...)."""


@dataclass
class Sample:
    """Records to replay, their batches (exact or reconstructed) and the batches' bytes."""

    records: pa.Table
    batches: pa.Table
    raw: list[bytes] | None  # None: a snapshot (tables only; no batch bytes were kept)
    framing: str = "exact"
    source: str = "log"  # "log": stored by a broker; "producer": as a producer sends them
    issues: list[Any] = field(default_factory=list)


def load_sample(source: Any, *, framing: str = "exact", linger_ms: int = 5,
                batch_size: int = 16384) -> Sample:
    """A :class:`Sample` from a segment file/folder, a ``Decoded`` or a records table."""
    if framing not in FRAMINGS:
        raise ReplayError(f"framing must be one of {', '.join(FRAMINGS)}, not {framing!r}")
    if isinstance(source, Sample):
        return source
    from kqlab.sources.files import Snapshot, is_snapshot

    if isinstance(source, Snapshot) or (isinstance(source, str | Path) and is_snapshot(source)):
        snap = source if isinstance(source, Snapshot) else Snapshot.open(source)
        return _sample_from_snapshot(snap, framing, linger_ms, batch_size)
    if isinstance(source, str | Path):
        from kqlab.kafka.log import partition_dirs

        folders = partition_dirs(source) or [Path(source)]
        logs = [_read_segments(f) for f in folders]
        sample = Sample(pa.concat_tables([s.records for s in logs]),
                        pa.concat_tables([s.batches for s in logs]),
                        [b for s in logs for b in s.raw], "exact", "log",
                        [i for s in logs for i in s.issues])
        if framing != "exact":
            # a consumer never sees transaction markers: rebuild from the data records only
            return sample_from_tables(sample.records, sample.batches, framing,
                                      linger_ms=linger_ms, batch_size=batch_size,
                                      issues=sample.issues)
        return sample
    if isinstance(source, pa.Table):
        if framing == "exact":
            raise ReplayError("a records table has no batch framing: pass framing='single' or "
                              "'linger' to rebuild producer-like batches")
        return reconstruct_framing(source, framing, linger_ms=linger_ms, batch_size=batch_size)
    raise ReplayError(f"cannot replay a {type(source).__name__}: pass a segment path, a "
                      "records table or a Sample")


def _read_segments(path: str | Path) -> Sample:
    """One segment file or partition folder, decoded, with every batch's bytes."""
    from kqlab.kafka.log import RawBatch, iter_log_batches, read_log

    log = read_log(path)
    raw = [b.data for b in iter_log_batches(path) if isinstance(b, RawBatch)]
    if len(raw) != log.batches.num_rows:  # both walk the same scanner: never expected
        raise ReplayError(f"{path}: {len(raw)} raw batches for {log.batches.num_rows} "
                          "decoded rows")
    return Sample(log.records, log.batches, raw, "exact", "log", list(log.issues))


def _data_records(records: pa.Table, batches: pa.Table) -> pa.Table:
    """The records outside control batches: what a consumer sees (never transaction markers),
    so what framing is rebuilt from."""
    control = batches.column("is_control").to_numpy(zero_copy_only=False).astype(bool)
    return records.filter(pa.array(~control[_record_batch_rows(records, batches)]))


def _sample_from_snapshot(snap: Any, framing: str, linger_ms: int, batch_size: int) -> Sample:
    """A snapshot as a sample: its tables (no raw bytes) or rebuilt producer-like batches."""
    check_snapshot_framing(snap.framing, framing, snap.path)
    return sample_from_tables(snap.records(), snap.batches() if snap.framing == "exact" else
                              None, framing, linger_ms=linger_ms, batch_size=batch_size,
                              issues=list(snap.issues))


def check_snapshot_framing(stored: str, framing: str, where: Any) -> None:
    """Refuse exact replay of a snapshot whose batches were not kept (its records came
    through a consumer)."""
    if framing not in FRAMINGS:
        raise ReplayError(f"framing must be one of {', '.join(FRAMINGS)}, not {framing!r}")
    if framing == "exact" and stored != "exact":
        raise ReplayError(f"snapshot {where} has {stored} framing: pass "
                          "framing='single' or 'linger'")


def sample_from_tables(records: pa.Table, batches: pa.Table | None, framing: str, *,
                       linger_ms: int = 5, batch_size: int = 16384,
                       issues: Sequence[Any] = ()) -> Sample:
    """A sample from stored tables (a snapshot, or one partition of it on a Spark executor).

    ``batches`` is the exact batches table, or None when only records were kept; with
    ``framing`` other than ``exact`` the data records are re-framed producer-like.
    """
    if framing == "exact":
        if batches is None:
            raise ReplayError("exact framing needs the batches table: pass framing='single' "
                              "or 'linger'")
        return Sample(records, batches, None, "exact", "log", list(issues))
    if batches is not None:
        records = _data_records(records, batches)
    rebuilt = reconstruct_framing(records, framing, linger_ms=linger_ms, batch_size=batch_size)
    rebuilt.issues = list(issues)
    return rebuilt


def reconstruct_framing(records: pa.Table, strategy: str, *, linger_ms: int = 5,
                        batch_size: int = 16384) -> Sample:
    """Rebuild producer-like batches for records that arrived without their framing.

    * ``single``: every record alone in its batch (a producer with ``linger.ms=0`` and no
      concurrency — the most forgiving framing: one bad record rejects only itself);
    * ``linger``: per partition, records join that partition's open batch while their
      timestamps stay within ``linger_ms`` of the batch's first record and the batch stays
      under ``batch_size`` bytes (the Java producer's ``linger.ms`` / ``batch.size``; like its
      accumulator, records of other partitions in between do not close the batch).  The
      returned records are in batch order (unchanged when partitions were not interleaved).

    Batches are re-encoded as a non-idempotent producer would send them (base offset 0,
    CreateTime, no compression), so the broker checks run on real bytes; record offsets keep
    their original values in the verdicts.
    """
    from kqlab.kafka.batch import TableBuilder
    from kqlab.kafka.builder import BatchBuilder, Record

    if strategy not in ("single", "linger"):
        raise ReplayError(f"unknown framing strategy {strategy!r}: use single or linger")
    n = records.num_rows
    topic = records.column("topic").to_pylist()
    part = records.column("partition").to_pylist()
    ts = records.column("timestamp").to_pylist()
    keys = records.column("key").to_pylist()
    values = records.column("value").to_pylist()
    headers = records.column("headers").to_pylist()
    offsets = records.column("offset").to_pylist()
    # a producer keeps one open batch per partition (its RecordAccumulator): a record joins
    # its partition's open batch, whatever other partitions' records came in between
    groups: list[list[int]] = []
    open_batch: dict[tuple[str, int], tuple[int, int]] = {}  # partition -> (group, bytes)
    for i in range(n):
        rec_size = 20 + len(keys[i] or b"") + len(values[i] or b"") + sum(
            len(h["key"]) + len(h["value"] or b"") for h in headers[i])
        tp = (topic[i], part[i])
        cur = open_batch.get(tp)
        if strategy == "linger" and cur is not None and \
                ts[i] - ts[groups[cur[0]][0]] <= linger_ms and cur[1] + rec_size <= batch_size:
            groups[cur[0]].append(i)
            open_batch[tp] = (cur[0], cur[1] + rec_size)
        else:
            groups.append([i])
            open_batch[tp] = (len(groups) - 1, 61 + rec_size)
    raw = []
    batch_offset = np.empty(n, dtype=np.int64)
    batch_index = np.empty(n, dtype=np.int32)
    builder = TableBuilder(framing=f"reconstructed:{strategy}")
    for g in groups:
        b = BatchBuilder(base_timestamp=ts[g[0]])
        for i in g:
            b.append(Record(key=keys[i], value=values[i], timestamp=ts[i],
                            headers=tuple((h["key"], h["value"]) for h in headers[i])))
        data = b.build()
        raw.append(data)
        builder.topic, builder.partition = topic[g[0]], part[g[0]]
        builder.add(None, data)
        for k, i in enumerate(g):
            batch_offset[i] = offsets[g[0]]
            batch_index[i] = k
    _, batches = builder.take()
    batches = batches.set_column(batches.schema.get_field_index("batch_offset"), "batch_offset",
                                 pa.array([offsets[g[0]] for g in groups], pa.int64()))
    out = records.set_column(records.schema.get_field_index("batch_offset"), "batch_offset",
                             pa.array(batch_offset, pa.int64()))
    out = out.set_column(out.schema.get_field_index("batch_index"), "batch_index",
                         pa.array(batch_index, pa.int32()))
    order = np.fromiter((i for g in groups for i in g), dtype=np.int64, count=n)
    if n and (np.diff(order) < 0).any():  # interleaved partitions: records in batch order
        out = out.take(pa.array(order))
    return Sample(out, batches, raw, f"reconstructed:{strategy}", "producer")


# ---------------------------------------------------------------------------------------------

def _record_batch_rows(records: pa.Table, batches: pa.Table) -> np.ndarray:
    """For every record, the row of its batch in ``batches`` (the decoder's own accounting)."""
    from kqlab.kafka.table_checks import records_per_batch

    try:
        n_r = records_per_batch(batches, records.num_rows)
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    return np.repeat(np.arange(batches.num_rows, dtype=np.int64), n_r)


@dataclass
class Evaluation:
    """Rule results over a sample (cached per rule so an edited policy re-runs only its edits)."""

    results: dict[str, RuleResult]


class Replayer:
    """Replays one sample under successive policies, caching decoded columns and rule results.

    Examples
    --------
    >>> import tempfile
    >>> from kqlab.policy import Rule, loads_policy
    >>> from kqlab.sources.demo import write_demo_segment
    >>> folder = write_demo_segment(tempfile.mkdtemp(), 1763700000000)
    >>> policy = loads_policy("kqlab: 1\\nname: p\\nrules: "
    ...                       "[{id: trace, kind: header_required, name: trace-id}]")
    >>> r = Replayer(folder, now=1763700000000)
    >>> r.run(policy).by_outcome()
    {'accepted': 323, 'rejected': 25, 'collateral': 4}
    >>> small = Rule(id="small", kind="value_size", params={"max": 100}, mode="observe")
    >>> _ = r.run(policy.with_rules([*policy.rules, small]))
    >>> r.evaluations  # the unchanged rule came from the cache
    2
    """

    def __init__(self, source: Any, *, now: int | None = None, framing: str = "exact",
                 linger_ms: int = 5, batch_size: int = 16384, resolver: Any = None):
        self.now = now if now is not None else int(time.time() * 1000)
        self.resolver = resolver
        self.evaluations = 0  # rules evaluated (tests and benchmarks read it)
        self.sample = load_sample(source, framing=framing, linger_ms=linger_ms,
                                  batch_size=batch_size)

    @property
    def sample(self) -> Sample:
        """The sample replayed."""
        return self._sample

    @sample.setter
    def sample(self, sample: Sample) -> None:
        # everything cached (decoded columns, rule results, the last broker pass) belongs to
        # the old sample: a new one starts from scratch
        self._sample = sample
        self._ctx: EvalContext | None = None
        self._ctx_formats: tuple[Any, Any] | None = None
        self._rule_cache: dict[bytes, RuleResult] = {}
        self._rows = _record_batch_rows(sample.records, sample.batches)
        # transaction markers are the coordinator's, not the client's: no record policy applies
        control = sample.batches.column("is_control").to_numpy(zero_copy_only=False)
        self._control = control.astype(bool)[self._rows] if len(self._rows) else \
            np.zeros(0, dtype=bool)
        self._assembler: Assembler | None = None

    def _context(self, policy: Policy) -> EvalContext:
        formats = (policy.key, policy.value)
        if self._ctx is None or self._ctx_formats != formats:
            resolver = self.resolver
            if resolver is None and policy.value.schemas is not None:
                from kqlab.serde.schemas import SchemaResolver

                resolver = SchemaResolver.from_source(policy.value.schemas)
            self._ctx = EvalContext(self.sample.records, self.now, self.sample.batches,
                                    value_format=policy.value, key_format=policy.key,
                                    resolver=resolver)
            self._ctx_formats = formats
            self._rule_cache.clear()
        return self._ctx

    def evaluate(self, policy: Policy) -> dict[str, RuleResult]:
        """Every rule's result, reusing cached results for rules that did not change."""
        ctx = self._context(policy)
        out = {}
        for rule in policy.rules:
            key = orjson.dumps(rule.to_dict(), option=orjson.OPT_SORT_KEYS)
            if key not in self._rule_cache:
                self._rule_cache[key] = _without(evaluate_rule(ctx, rule), self._control)
                self.evaluations += 1
            out[rule.id] = self._rule_cache[key]
        return out

    def run(self, policy: Policy, *, profile: str | None = None) -> Verdicts:
        """Replay the sample under ``policy``; see the module docstring for the semantics."""
        profile = profile or policy.enforcement
        effective = with_implicit_rules(policy)
        results = self.evaluate(effective)
        return self.assembler(effective, results, self.now, profile)

    @property
    def assembler(self) -> Assembler:
        """The :class:`Assembler` of this sample (it keeps the last broker pass, so the next
        run re-checks only the batches whose policy messages changed)."""
        if self._assembler is None or self._assembler.sample is not self.sample:
            self._assembler = Assembler(self.sample, self._rows)
        return self._assembler


def with_implicit_rules(policy: Policy) -> Policy:
    """``policy`` with the decode rule first when its value format decodes and it has none.

    A record whose value cannot be decoded as declared is a rejection reason of its own
    (``decode:value``, with the schema id or parse error), whatever rules follow.
    """
    from kqlab.validate.rules import DECODE_KINDS, decodes

    if not decodes(policy.value) or any(r.kind in DECODE_KINDS and r.param("target") != "key"
                                        for r in policy.rules):
        return policy
    implicit = Rule(id="decode:value", kind="decodable",
                    message=f"value cannot be decoded as {policy.value.format}: {{error}}")
    return policy.with_rules((implicit, *policy.rules))


def _without(result: RuleResult, excluded: np.ndarray) -> RuleResult:
    """``result`` with the ``excluded`` records never failing."""
    if not excluded.any() or not result.failed[excluded].any():
        return result
    keep = ~excluded[result.failing]
    return RuleResult(result.failed & ~excluded,
                      tuple(m for m, k in zip(result.messages, keep, strict=True) if k),
                      result.errors)


def replay(source: Any, policy: Policy, *, now: int | None = None, framing: str = "exact",
           profile: str | None = None, linger_ms: int = 5, batch_size: int = 16384,
           resolver: Any = None) -> Verdicts:
    """Replay ``source`` (segment path, records table or :class:`Sample`) under ``policy``."""
    return Replayer(source, now=now, framing=framing, linger_ms=linger_ms,
                    batch_size=batch_size, resolver=resolver).run(policy, profile=profile)


# ---------------------------------------------------------------------------------------------

def _broker_pass(sample: Sample, config: TopicConfig, now: int, profile: str,
                 record_messages: Sequence[str | None] | pa.Array | None, rows: np.ndarray
                 ) -> pa.Table:
    """Batch verdicts with the policy injected, partition by partition (producer state is per
    partition), vectorised over the tables; rows the tables cannot judge go to the exact
    byte-level validator (``raw``).  ``record_messages`` None: no record policy at all."""
    from kqlab.kafka.table_checks import RecordPolicy, broker_verdicts

    records, batches = sample.records, sample.batches
    nb = batches.num_rows
    if nb == 0:
        from kqlab.records import BATCH_VERDICTS_SCHEMA

        return BATCH_VERDICTS_SCHEMA.empty_table()

    def policy_of(msgs: Sequence[str | None] | pa.Array | None) -> RecordPolicy | None:
        return None if msgs is None else RecordPolicy(profile, msgs)

    keys = pc.binary_join_element_wise(
        pc.cast(batches.column("topic"), pa.string()),
        pc.cast(batches.column("partition"), pa.string()), "\x00")
    groups = pc.unique(keys).to_pylist()
    if len(groups) == 1:
        return broker_verdicts(records, batches, config, now=now, source=sample.source,
                               raw=sample.raw, policy=policy_of(record_messages))
    key_np = np.asarray(keys.to_pylist(), dtype=object)
    msgs_arr = None if record_messages is None else record_messages \
        if isinstance(record_messages, pa.Array) else pa.array(record_messages, pa.string())
    parts, order = [], []
    for g in groups:
        b_idx = np.flatnonzero(key_np == g)
        r_idx = np.flatnonzero(np.isin(rows, b_idx))
        parts.append(broker_verdicts(
            records.take(pa.array(r_idx)), batches.take(pa.array(b_idx)), config, now=now,
            source=sample.source,
            raw=None if sample.raw is None else [sample.raw[i] for i in b_idx.tolist()],
            policy=None if msgs_arr is None else policy_of(msgs_arr.take(pa.array(r_idx)))))
        order.append(b_idx)
    merged = pa.concat_tables(parts)
    return merged.take(pa.array(np.argsort(np.concatenate(order), kind="stable")))


def _record_check(message: str) -> str:
    """The broker check behind a record error's text (spec §3.D.4)."""
    if message.startswith(("Timestamp ", "Invalid timestamp type")):
        return "broker:R4"
    if message.startswith("Compacted topic"):
        return "broker:R3"
    if message.startswith("Record ") and "magic does not match" in message:
        return "broker:R1"
    return "broker"


#: the labels :func:`_record_check` gives, in the order of :func:`_record_checks`' codes
_RECORD_CHECKS = ("broker", "broker:R4", "broker:R3", "broker:R1")


def _record_checks(messages: pa.Array) -> np.ndarray:
    """:func:`_record_check` over an Arrow array: per message, an index into
    :data:`_RECORD_CHECKS` (same precedence: R4, then R3, then R1)."""
    def has(mask: Any) -> np.ndarray:
        return pc.fill_null(mask, False).to_numpy(zero_copy_only=False).astype(bool)

    r4 = has(pc.or_(pc.starts_with(messages, "Timestamp "),
                    pc.starts_with(messages, "Invalid timestamp type")))
    r3 = has(pc.starts_with(messages, "Compacted topic"))
    r1 = has(pc.and_(pc.starts_with(messages, "Record "),
                     pc.match_substring(messages, "magic does not match")))
    return np.where(r4, 1, np.where(r3, 2, np.where(r1, 3, 0))).astype(np.int64)


@dataclass
class _PolicyInput:
    """What the broker sees of a policy: per record the index of its first failing reject
    rule's message (-1: none) into ``messages`` (Arrow)."""

    first: np.ndarray
    messages: pa.Array
    #: where each rule's messages start in ``messages``, and the rule results they came from
    bases: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sources: tuple[RuleResult, ...] = ()

    def origin(self, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For message indices ``f`` (all >= 0): the ``id`` of the rule result each came
        from, and its row among that result's failures."""
        seg = np.searchsorted(self.bases, f, side="right") - 1
        ids = np.array([id(s) for s in self.sources], dtype=np.int64)
        return ids[seg], f - self.bases[seg]

    def at(self, rec: np.ndarray) -> pa.Array:
        """The policy message of records ``rec`` (null where they pass)."""
        f = self.first[rec]
        return pc.take(self.messages, pa.array(f, mask=f < 0), memory_pool=POOL)

    def arrow(self) -> pa.Array:
        """The policy message of every record (null where it passes), as the broker checks
        take them."""
        return pc.take(self.messages, pa.array(self.first, mask=self.first < 0),
                       memory_pool=POOL)

    def python(self, rec: np.ndarray | None = None) -> list[str | None]:
        """The policy messages as the broker checks take them (None where a record passes)."""
        f = self.first if rec is None else self.first[rec]
        return self.messages.take(pa.array(f, mask=f < 0)).to_pylist()


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
        self._independent: dict[tuple[TopicConfig, int], bool] = {}
        self._last: _BrokerRun | None = None
        #: batches the broker checks ran on, over every pass (tests and benchmarks read it)
        self.broker_batches = 0

    # -- per-sample facts ---------------------------------------------------------------------
    @property
    def topics(self) -> list[str]:
        """The topics of the sample's records."""
        if self._topics is None:
            self._topics = pc.unique(self.sample.records.column("topic")).to_pylist() \
                if self.n else []
        return self._topics

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
            hit = (res, res.failing, pa.array(res.messages, pa.string()))
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
            hit = s.source == "log" and self.nb > 0 and \
                not pc.any(pc.greater(pc.fill_null(pid, -1), -1)).as_py()
            if hit:
                bare = Sample(s.records, s.batches, None, s.framing, s.source)
                base = _broker_pass(bare, config, now, "kip-940", None, self.rows)
                hit = not pc.any(pc.equal(base.column("check"), "undetermined")).as_py()
            self._independent[key] = bool(hit)
        return hit

    # -- the broker pass ----------------------------------------------------------------------
    def broker(self, config: TopicConfig, now: int, profile: str,
               policy: _PolicyInput) -> pa.Table:
        """The batch verdicts under ``policy``, re-running only changed batches when that is
        exact (see :meth:`independent`)."""
        last = self._last
        verdicts = None
        if last is not None and (last.config, last.now, last.profile) == (config, now, profile) \
                and self.independent(config, now):
            changed = self._changed_batches(last.policy, policy)
            if not len(changed):
                verdicts = last.verdicts
            elif len(changed) <= SPLICE_MAX_SHARE * self.nb and int(
                    (self.row_start[changed + 1] - self.row_start[changed]).sum()
            ) <= SPLICE_MAX_RECORDS:
                verdicts = self._splice(last.verdicts, changed, config, now, profile, policy)
        if verdicts is None:
            verdicts = _broker_pass(self.sample, config, now, profile, policy.arrow(),
                                    self.rows)
            self.broker_batches += self.nb
        self._last = _BrokerRun(config, now, profile, policy, verdicts)
        return verdicts

    def _changed_batches(self, old: _PolicyInput, new: _PolicyInput) -> np.ndarray:
        """Batches holding a record whose policy message differs between ``old`` and ``new``."""
        u = np.flatnonzero((old.first >= 0) | (new.first >= 0))
        if not len(u):
            return np.zeros(0, np.int64)
        fo, fn = old.first[u], new.first[u]
        same = np.zeros(len(u), dtype=bool)
        both = np.flatnonzero((fo >= 0) & (fn >= 0))
        if len(both):
            # the same failure of the same rule result (kept alive by both inputs, so ids are
            # not reused): the same message, without comparing the text
            src_o, row_o = old.origin(fo[both])
            src_n, row_n = new.origin(fn[both])
            same[both] = (src_o == src_n) & (row_o == row_n)
            text = both[~same[both]]
            if len(text):
                rec = u[text]
                same[text] = pc.fill_null(pc.equal(old.at(rec), new.at(rec)), False).to_numpy(
                    zero_copy_only=False).astype(bool)
        return np.unique(self.rows[u[~same]])

    def _splice(self, before: pa.Table, changed: np.ndarray, config: TopicConfig, now: int,
                profile: str, policy: _PolicyInput) -> pa.Table:
        """``before`` with the rows of the ``changed`` batches judged again under ``policy``."""
        s = self.sample
        starts, ends = self.row_start[changed], self.row_start[changed + 1]
        sizes = ends - starts
        rec = np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(int(sizes.sum()))
        sub = Sample(s.records.take(pa.array(rec)), s.batches.take(pa.array(changed)),
                     None if s.raw is None else [s.raw[i] for i in changed.tolist()],
                     s.framing, s.source)
        sub_rows = np.repeat(np.arange(len(changed), dtype=np.int64), sizes)
        part = _broker_pass(sub, config, now, profile, policy.at(rec), sub_rows)
        self.broker_batches += len(changed)
        take = np.arange(self.nb, dtype=np.int64)
        take[changed] = self.nb + np.arange(len(changed))
        return pa.concat_tables([before, part.cast(before.schema)]).take(pa.array(take))

    # -- assembly -----------------------------------------------------------------------------
    def __call__(self, policy: Policy, results: dict[str, RuleResult], now: int,
                 profile: str) -> Verdicts:
        sample = self.sample
        records, batches, rows = sample.records, sample.batches, self.rows
        n, nb = self.n, self.nb
        rules = {rule.id: self._rule(results[rule.id]) for rule in policy.rules}
        self._rules = {id(results[r.id]): self._rules[id(results[r.id])] for r in policy.rules}
        # the policy as the broker sees it: each record's first failing reject rule's message
        first = np.full(n, -1, dtype=np.int64)
        arrows, bases, sources, base = [], [], [], 0
        for rule in policy.rules:
            idx, arrow = rules[rule.id]
            if rule.mode != "reject" or not len(idx):
                continue
            fresh = first[idx] < 0
            first[idx[fresh]] = base + np.flatnonzero(fresh)
            arrows.append(arrow)
            bases.append(base)
            sources.append(results[rule.id])
            base += len(idx)
        pin = _PolicyInput(first, pa.concat_arrays(arrows, POOL) if arrows else
                           pa.array([], pa.string()), np.asarray(bases, dtype=np.int64),
                           tuple(sources))
        has = first >= 0
        config = TopicConfig.from_dict(dict(policy.broker.configs), policy.broker.version)
        verdicts = self.broker(config, now, profile, pin)
        # a null code: the tables alone could not decide (a snapshot without batch bytes)
        codes = pc.fill_null(verdicts.column("error_code"), UNDECIDED).to_numpy(
            zero_copy_only=False).astype(np.int64)
        checks = np.asarray(verdicts.column("check").to_pylist(), dtype=object)
        rec_errs = verdicts.column("record_errors").combine_chunks() if nb else \
            pa.array([], verdicts.schema.field("record_errors").type)
        n_rec_errs = pc.list_value_length(rec_errs).to_numpy(zero_copy_only=False)
        policy_batch = checks == "P"
        batch_level = (n_rec_errs == 0) & ~policy_batch & (codes != 0) & (codes != UNDECIDED)
        # culprits named in record_errors (KIP-467)
        flat = pc.list_flatten(rec_errs)
        err_row = pc.list_parent_indices(rec_errs).to_numpy(zero_copy_only=False)
        if len(flat):
            err_idx = flat.field("batch_index").to_numpy(zero_copy_only=False).astype(np.int64)
            err_msg = flat.field("message")
            culprit_rec = self.row_start[err_row] + err_idx
        else:
            err_idx = culprit_rec = np.zeros(0, dtype=np.int64)
            err_msg = pa.array([], pa.string())
        culprit = np.zeros(n, dtype=bool)
        culprit[culprit_rec] = True
        # failures, as (record, rule label, code, message) segments; labels are coded
        labels: dict[str, int] = {}

        def label(name: str) -> int:
            return labels.setdefault(name, len(labels))

        f_rec: list[np.ndarray] = []
        f_rule: list[np.ndarray] = []
        f_code: list[np.ndarray] = []
        f_msg: list[pa.Array] = []
        # ... broker record errors that are not the policy's own message ...
        if len(culprit_rec):
            mine = pin.at(culprit_rec)
            same = pc.or_(pc.fill_null(pc.equal(err_msg, mine), False),
                          pc.and_(pc.is_null(err_msg), pc.is_null(mine)))
            broker_own = ~same.to_numpy(zero_copy_only=False).astype(bool)
            if broker_own.any():
                own_msg = err_msg.filter(pa.array(broker_own))
                lut = np.array([label(c) for c in _RECORD_CHECKS], dtype=np.int64)
                kind = _record_checks(own_msg)
                f_rec.append(culprit_rec[broker_own])
                f_rule.append(lut[kind])
                f_code.append(np.where(kind == 1, 32, 87).astype(np.int64))
                f_msg.append(own_msg)
        # ... batch-level broker errors on every record of their batch ...
        rec_code = codes[rows] if n else np.zeros(0, dtype=np.int64)
        level_rec = np.flatnonzero(batch_level[rows]) if n else np.zeros(0, dtype=np.int64)
        if len(level_rec):
            details = verdicts.column("detail").to_pylist()
            names = verdicts.column("error_name").to_pylist()
            b_rule = np.zeros(nb, dtype=np.int64)
            b_msg: list[str | None] = [None] * nb
            for b in np.flatnonzero(batch_level).tolist():
                b_rule[b] = label(f"broker:{checks[b]}")
                b_msg[b] = details[b] or names[b]
            b_of = rows[level_rec]
            f_rec.append(level_rec)
            f_rule.append(b_rule[b_of])
            f_code.append(codes[b_of])
            f_msg.append(pa.array(b_msg, pa.string()).take(pa.array(b_of)))
        # ... and every policy failure (reject and observe) on its record
        rule_rows = []
        reject_code = 44 if profile == "kip-686" else 87
        for rule in policy.rules:
            res = results[rule.id]
            idx, arrow = rules[rule.id]
            is_reject = rule.mode == "reject"
            rejected_here = rec_code[idx] != 0 if len(idx) else np.zeros(0, dtype=bool)
            if len(idx):
                f_rec.append(idx)
                f_rule.append(np.full(len(idx), label(rule.id), dtype=np.int64))
                # a reject rule's failure carries the code its batch got; 0 where the policy was
                # not enforced (KIP-729 never sees compressed batches kept in place)
                f_code.append(np.where(rejected_here, reject_code, 0) if is_reject
                              else np.zeros(len(idx), dtype=np.int64))
                f_msg.append(arrow)
            rule_rows.append({
                "rule": rule.id, "kind": rule.kind, "mode": rule.mode, "severity": rule.severity,
                "exportable": rule.exportable, "failed_records": len(idx),
                "rejected_records": int(rejected_here.sum()) if is_reject else 0,
                "rejected_batches": len(np.unique(rows[idx][rejected_here]))
                if is_reject and len(idx) else 0,
                "evaluation_errors": res.errors,
            })
        # KIP-686 rejects the batch (check "P") without record errors: its culprits are the
        # records that failed the policy, the others are collateral
        own = culprit | batch_level[rows] | (has & policy_batch[rows]) if n else culprit
        # outcome codes -> dictionary -> string (no per-record Python strings)
        outcome_idx = np.where(rec_code == 0, 0, np.where(own, 1, 2)).astype(np.int8)
        outcome_idx[rec_code == UNDECIDED] = 3
        outcome = pc.take(_OUTCOME_WORDS, pa.array(outcome_idx), memory_pool=POOL)
        cat = np.concatenate
        failures, flat_failures = failures_from_codes(
            n, cat(f_rec).astype(np.int64) if f_rec else np.zeros(0, np.int64),
            cat(f_rule) if f_rule else np.zeros(0, np.int64), list(labels),
            cat(f_code).astype(np.int64) if f_code else np.zeros(0, np.int64),
            pa.concat_arrays(f_msg, POOL) if f_msg else pa.array([], pa.string()))
        record_table = pa.table([
            records.column("topic"), records.column("partition"), records.column("offset"),
            records.column("batch_offset"), records.column("batch_index"),
            records.column("timestamp"), outcome, failures,
        ], schema=RECORD_VERDICTS_SCHEMA)
        undetermined = int(sum(1 for c in checks if c == "undetermined"))
        notes = replay_notes(policy, self.topics, undetermined)
        out = Verdicts(record_table, _batch_table(batches, verdicts, profile, sample.framing),
                       pa.Table.from_pylist(rule_rows, RULES_SCHEMA), profile, sample.framing,
                       now, policy.name, policy.content_hash(), list(sample.issues), notes)
        # per-record codes the views would derive from these tables again (kqlab.viz reads
        # them, calling the callable ones; equal to what it computes, tests check)
        out._codes = {"table": record_table, "outcome": outcome_idx,
                      "batch_id": self.batch_id, **flat_failures}
        return out


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
