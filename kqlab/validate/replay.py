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
    RECORD_VERDICTS_SCHEMA,
    REPLAY_BATCHES_SCHEMA,
    Verdicts,
    failures_array,
    producer_action,
)

FRAMINGS = ("exact", "single", "linger")
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
        self.sample = load_sample(source, framing=framing, linger_ms=linger_ms,
                                  batch_size=batch_size)
        self.now = now if now is not None else int(time.time() * 1000)
        self.resolver = resolver
        self._ctx: EvalContext | None = None
        self._ctx_formats: tuple[Any, Any] | None = None
        self._rule_cache: dict[bytes, RuleResult] = {}
        self._rows = _record_batch_rows(self.sample.records, self.sample.batches)
        # transaction markers are the coordinator's, not the client's: no record policy applies
        control = self.sample.batches.column("is_control").to_numpy(zero_copy_only=False)
        self._control = control.astype(bool)[self._rows] if len(self._rows) else \
            np.zeros(0, dtype=bool)
        self.evaluations = 0  # rules evaluated (tests and benchmarks read it)

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
        return _assemble(self.sample, effective, results, self._rows, self.now, profile)


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

def _policy_errors(rules: Sequence[Rule], results: dict[str, RuleResult], n: int
                   ) -> tuple[np.ndarray, list[str]]:
    """Per record, the index (into ``messages``) of its first failing reject rule, or -1."""
    first = np.full(n, -1, dtype=np.int64)
    messages: list[str] = []
    for rule in rules:
        if rule.mode != "reject":
            continue
        res = results[rule.id]
        idx = res.failing
        if not len(idx):
            continue
        fresh = first[idx] < 0
        base = len(messages)
        messages.extend(res.messages)
        first[idx[fresh]] = base + np.flatnonzero(fresh)
    return first, messages


def _broker_pass(sample: Sample, config: TopicConfig, now: int, profile: str,
                 record_messages: np.ndarray, rows: np.ndarray) -> pa.Table:
    """Batch verdicts with the policy injected, partition by partition (producer state is per
    partition), vectorised over the tables; rows the tables cannot judge go to the exact
    byte-level validator (``raw``)."""
    from kqlab.kafka.table_checks import RecordPolicy, broker_verdicts

    records, batches = sample.records, sample.batches
    nb = batches.num_rows
    if nb == 0:
        from kqlab.records import BATCH_VERDICTS_SCHEMA

        return BATCH_VERDICTS_SCHEMA.empty_table()
    keys = pc.binary_join_element_wise(
        pc.cast(batches.column("topic"), pa.string()),
        pc.cast(batches.column("partition"), pa.string()), "\x00")
    groups = pc.unique(keys).to_pylist()
    if len(groups) == 1:
        return broker_verdicts(records, batches, config, now=now, source=sample.source,
                               raw=sample.raw,
                               policy=RecordPolicy(profile, record_messages.tolist()))
    key_np = np.asarray(keys.to_pylist(), dtype=object)
    parts, order = [], []
    for g in groups:
        b_idx = np.flatnonzero(key_np == g)
        r_idx = np.flatnonzero(np.isin(rows, b_idx))
        parts.append(broker_verdicts(
            records.take(pa.array(r_idx)), batches.take(pa.array(b_idx)), config, now=now,
            source=sample.source,
            raw=None if sample.raw is None else [sample.raw[i] for i in b_idx.tolist()],
            policy=RecordPolicy(profile, record_messages[r_idx].tolist())))
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


def _assemble(sample: Sample, policy: Policy, results: dict[str, RuleResult], rows: np.ndarray,
              now: int, profile: str) -> Verdicts:
    records, batches = sample.records, sample.batches
    n, nb = records.num_rows, batches.num_rows
    first, messages = _policy_errors(policy.rules, results, n)
    record_messages = np.full(n, None, dtype=object)
    has = first >= 0
    if has.any():
        record_messages[has] = np.asarray(messages, dtype=object)[first[has]]
    config = TopicConfig.from_dict(dict(policy.broker.configs), policy.broker.version)
    verdicts = _broker_pass(sample, config, now, profile, record_messages, rows)
    # a null code: the tables alone could not decide (a snapshot without batch bytes)
    codes = pc.fill_null(verdicts.column("error_code"), UNDECIDED).to_numpy(
        zero_copy_only=False).astype(np.int64)
    checks = np.asarray(verdicts.column("check").to_pylist(), dtype=object)
    rec_errs = verdicts.column("record_errors").combine_chunks() if nb else \
        pa.array([], verdicts.schema.field("record_errors").type)
    n_rec_errs = pc.list_value_length(rec_errs).to_numpy(zero_copy_only=False)
    policy_batch = checks == "P"
    batch_level = (n_rec_errs == 0) & ~policy_batch & (codes != 0) & (codes != UNDECIDED)
    row_start = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=nb), out=row_start[1:])
    # culprits named in record_errors (KIP-467)
    flat = pc.list_flatten(rec_errs)
    err_row = pc.list_parent_indices(rec_errs).to_numpy(zero_copy_only=False)
    err_idx = flat.field("batch_index").to_numpy(zero_copy_only=False).astype(np.int64) \
        if len(flat) else np.zeros(0, dtype=np.int64)
    err_msg = np.asarray(flat.field("message").to_pylist(), dtype=object) if len(flat) else \
        np.zeros(0, dtype=object)
    culprit_rec = row_start[err_row] + err_idx if len(err_row) else np.zeros(0, dtype=np.int64)
    culprit = np.zeros(n, dtype=bool)
    culprit[culprit_rec] = True
    # failures: broker record errors that are not the policy's own message ...
    broker_own = err_msg != record_messages[culprit_rec] if len(culprit_rec) else \
        np.zeros(0, dtype=bool)
    f_rec = [culprit_rec[broker_own]]
    f_msg = err_msg[broker_own].tolist()
    f_rule = [_record_check(m) for m in f_msg]
    f_code = [np.array([32 if r == "broker:R4" else 87 for r in f_rule], dtype=np.int64)]
    # ... batch-level broker errors on every record of their batch ...
    rec_code = codes[rows] if n else np.zeros(0, dtype=np.int64)
    level_rec = np.flatnonzero(batch_level[rows]) if n else np.zeros(0, dtype=np.int64)
    if len(level_rec):
        details = verdicts.column("detail").to_pylist()
        names = verdicts.column("error_name").to_pylist()
        f_rec.append(level_rec)
        b_of = rows[level_rec].tolist()
        f_rule.extend(f"broker:{checks[b]}" for b in b_of)
        f_code.append(codes[rows[level_rec]])
        f_msg.extend(details[b] or names[b] for b in b_of)
    # ... and every policy failure (reject and observe) on its record
    rule_rows = []
    reject_code = 44 if profile == "kip-686" else 87
    for rule in policy.rules:
        res = results[rule.id]
        idx = res.failing
        f_rec.append(idx)
        f_rule.extend([rule.id] * len(idx))
        # a reject rule's failure carries the code its batch got; 0 where the policy was not
        # enforced (KIP-729 never sees compressed batches kept in place)
        enforced = rec_code[idx] != 0 if len(idx) else np.zeros(0, dtype=bool)
        f_code.append(np.where(enforced, reject_code, 0) if rule.mode == "reject"
                      else np.zeros(len(idx), dtype=np.int64))
        f_msg.extend(res.messages)
        rejected_here = rec_code[idx] != 0 if len(idx) else np.zeros(0, dtype=bool)
        is_reject = rule.mode == "reject"
        rule_rows.append({
            "rule": rule.id, "kind": rule.kind, "mode": rule.mode, "severity": rule.severity,
            "exportable": rule.exportable, "failed_records": res.count,
            "rejected_records": int(rejected_here.sum()) if is_reject else 0,
            "rejected_batches": len(np.unique(rows[idx][rejected_here]))
            if is_reject and len(idx) else 0,
            "evaluation_errors": res.errors,
        })
    # KIP-686 rejects the batch (check "P") without record errors: its culprits are the records
    # that failed the policy, the others are collateral
    if n:
        own = culprit | batch_level[rows] | (has & policy_batch[rows])
    else:
        own = culprit
    # outcome codes -> dictionary -> string (no per-record Python strings)
    outcome_idx = np.where(rec_code == 0, 0, np.where(own, 1, 2)).astype(np.int8)
    outcome_idx[rec_code == UNDECIDED] = 3
    outcome = pa.DictionaryArray.from_arrays(
        pa.array(outcome_idx),
        pa.array(["accepted", "rejected", "collateral", "undetermined"])).cast(pa.string())
    failures = failures_array(n, np.concatenate(f_rec).astype(np.int64) if f_rec else
                              np.zeros(0, np.int64), f_rule,
                              np.concatenate(f_code).astype(np.int64) if f_code else
                              np.zeros(0, np.int64), f_msg)
    record_table = pa.table([
        records.column("topic"), records.column("partition"), records.column("offset"),
        records.column("batch_offset"), records.column("batch_index"),
        records.column("timestamp"), outcome, failures,
    ], schema=RECORD_VERDICTS_SCHEMA)
    seen = pc.unique(records.column("topic")).to_pylist() if n else []
    undetermined = int(sum(1 for c in checks if c == "undetermined"))
    notes = replay_notes(policy, seen, undetermined)
    return Verdicts(record_table, _batch_table(batches, verdicts, profile, sample.framing),
                    pa.Table.from_pylist(rule_rows, RULES_SCHEMA), profile, sample.framing,
                    now, policy.name, policy.content_hash(), list(sample.issues), notes)


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
