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
from kqlab.kafka.validator import PartitionValidator, PolicyErrors
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
    raw: list[bytes]
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
    if isinstance(source, str | Path):
        from kqlab.kafka.log import RawBatch, iter_log_batches, read_log

        log = read_log(source)
        raw = [b.data for b in iter_log_batches(source) if isinstance(b, RawBatch)]
        if len(raw) != log.batches.num_rows:  # both walk the same scanner: never expected
            raise ReplayError(f"{source}: {len(raw)} raw batches for {log.batches.num_rows} "
                              "decoded rows")
        sample = Sample(log.records, log.batches, raw, "exact", "log", list(log.issues))
        if framing != "exact":
            # a consumer never sees transaction markers: rebuild from the data records only
            rows = _record_batch_rows(log.records, log.batches)
            control = log.batches.column("is_control").to_numpy(zero_copy_only=False)
            data_records = log.records.filter(pa.array(~control.astype(bool)[rows]))
            rebuilt = reconstruct_framing(data_records, framing, linger_ms=linger_ms,
                                          batch_size=batch_size)
            rebuilt.issues = list(log.issues)
            return rebuilt
        return sample
    if isinstance(source, pa.Table):
        if framing == "exact":
            raise ReplayError("a records table has no batch framing: pass framing='single' or "
                              "'linger' to rebuild producer-like batches")
        return reconstruct_framing(source, framing, linger_ms=linger_ms, batch_size=batch_size)
    raise ReplayError(f"cannot replay a {type(source).__name__}: pass a segment path, a "
                      "records table or a Sample")


def reconstruct_framing(records: pa.Table, strategy: str, *, linger_ms: int = 5,
                        batch_size: int = 16384) -> Sample:
    """Rebuild producer-like batches for records that arrived without their framing.

    * ``single``: every record alone in its batch (a producer with ``linger.ms=0`` and no
      concurrency — the most forgiving framing: one bad record rejects only itself);
    * ``linger``: per partition, consecutive records share a batch while their timestamps stay
      within ``linger_ms`` of the batch's first record and the batch stays under ``batch_size``
      bytes (the Java producer's ``linger.ms`` / ``batch.size``).

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
    # group consecutive records of the same partition into batches
    groups: list[list[int]] = []
    size = 0
    for i in range(n):
        rec_size = 20 + len(keys[i] or b"") + len(values[i] or b"") + sum(
            len(h["key"]) + len(h["value"] or b"") for h in headers[i])
        same = groups and (topic[groups[-1][0]], part[groups[-1][0]]) == (topic[i], part[i])
        if strategy == "linger" and same and ts[i] - ts[groups[-1][0]] <= linger_ms and \
                size + rec_size <= batch_size:
            groups[-1].append(i)
            size += rec_size
        else:
            groups.append([i])
            size = 61 + rec_size
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
    return Sample(out, batches, raw, f"reconstructed:{strategy}", "producer")


# ---------------------------------------------------------------------------------------------

def _record_batch_rows(records: pa.Table, batches: pa.Table) -> np.ndarray:
    """For every record, the row of its batch in ``batches`` (records come in batch order)."""
    n = records.num_rows
    rows = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return rows
    r_off = records.column("batch_offset").to_numpy(zero_copy_only=False)
    r_idx = records.column("batch_index").to_numpy(zero_copy_only=False)
    r_part = records.column("partition").to_numpy(zero_copy_only=False)
    starts = np.flatnonzero((r_idx == 0) | np.r_[True, (r_off[1:] != r_off[:-1]) |
                                                 (r_part[1:] != r_part[:-1])])
    b_off = batches.column("batch_offset").to_pylist()
    b_part = batches.column("partition").to_pylist()
    j = 0
    bounds = [*starts.tolist(), n]
    for k in range(len(starts)):
        s = bounds[k]
        while j < len(b_off) and (b_off[j] != int(r_off[s]) or b_part[j] != int(r_part[s])):
            j += 1
        if j == len(b_off):
            raise ReplayError("records and batches tables do not line up (record at "
                              f"offset {int(r_off[s])} has no batch row)")
        rows[s:bounds[k + 1]] = j
        j += 1
    return rows


@dataclass
class Evaluation:
    """Rule results over a sample (cached per rule so an edited policy re-runs only its edits)."""

    results: dict[str, RuleResult]


class Replayer:
    """Replays one sample under successive policies, caching decoded columns and rule results.

    Examples
    --------
    >>> r = Replayer("data/orders-0", now=1763700000000)  # doctest: +SKIP
    >>> v = r.run(policy)  # doctest: +SKIP
    >>> v2 = r.run(policy.with_rules(edited))  # only the edited rule is evaluated again
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
        results = self.evaluate(policy)
        return _assemble(self.sample, policy, results, self._rows, self.now, profile)


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


def _assemble(sample: Sample, policy: Policy, results: dict[str, RuleResult], rows: np.ndarray,
              now: int, profile: str) -> Verdicts:
    records, batches = sample.records, sample.batches
    n, nb = records.num_rows, batches.num_rows
    first, messages = _policy_errors(policy.rules, results, n)
    batch_index = records.column("batch_index").to_numpy(zero_copy_only=False)
    # policy errors per batch row
    per_batch: dict[int, dict[int, str]] = {}
    for i in np.flatnonzero(first >= 0).tolist():
        per_batch.setdefault(int(rows[i]), {})[int(batch_index[i])] = messages[first[i]]
    # broker pass, partition by partition (producer state is per partition)
    config = TopicConfig.from_dict(dict(policy.broker.configs), policy.broker.version)
    b_topic = batches.column("topic").to_pylist()
    b_part = batches.column("partition").to_pylist()
    b_pos = batches.column("position").to_pylist()
    validators: dict[tuple[str, int], PartitionValidator] = {}
    outcomes = []
    for j in range(nb):
        tp = (b_topic[j], b_part[j])
        v = validators.get(tp)
        if v is None:
            v = validators[tp] = PartitionValidator(tp[0], tp[1], config, now=now,
                                                    source=sample.source)
        errs = per_batch.get(j)
        outcomes.append(v.validate(sample.raw[j], position=b_pos[j],
                                   policy=PolicyErrors(profile, errs) if errs else None))
    batch_codes = np.array([o.error_code for o in outcomes], dtype=np.int64)
    batch_table = _batch_table(batches, outcomes, profile, sample.framing)
    # record outcomes
    rec_codes = batch_codes[rows] if n else np.zeros(0, dtype=np.int64)
    culprit = np.zeros(n, dtype=bool)
    batch_level = np.array([not o.record_errors for o in outcomes], dtype=bool)
    row_start = np.full(nb, -1, dtype=np.int64)
    if n:
        first_of = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        row_start[rows[first_of]] = first_of
    f_rec: list[int] = []
    f_rule: list[str] = []
    f_code: list[int] = []
    f_msg: list[str] = []
    for j, o in enumerate(outcomes):
        if o.error_code == 0:
            continue
        if o.record_errors:
            for bi, msg in o.record_errors:
                if row_start[j] < 0:
                    continue
                r = int(row_start[j] + bi)
                culprit[r] = True
                if first[r] >= 0 and messages[first[r]] == msg:
                    continue  # the policy's own error: listed under its rule below
                timestamp = msg.startswith(("Timestamp", "Invalid timestamp"))
                f_rec.append(r)
                f_rule.append("broker")
                f_code.append(32 if timestamp else 87)
                f_msg.append(msg)
        elif row_start[j] >= 0 and o.check != "P":
            for r in range(int(row_start[j]), n):
                if rows[r] != j:
                    break
                f_rec.append(r)
                f_rule.append(f"broker:{o.check}")
                f_code.append(o.error_code)
                f_msg.append(o.detail or o.error_name)
    # every policy failure (reject and observe) is listed on its record
    rule_rows = []
    for rule in policy.rules:
        res = results[rule.id]
        idx = res.failing
        if rule.mode == "reject":
            code = 44 if profile == "kip-686" else 87
        else:
            code = 0
        f_rec.extend(idx.tolist())
        f_rule.extend([rule.id] * len(idx))
        f_code.extend([code] * len(idx))
        f_msg.extend(res.messages)
        rejected_here = rec_codes[idx] != 0 if len(idx) else np.zeros(0, dtype=bool)
        rule_rows.append({
            "rule": rule.id, "kind": rule.kind, "mode": rule.mode, "severity": rule.severity,
            "exportable": rule.exportable, "failed_records": res.count,
            "rejected_records": int(rejected_here.sum()) if rule.mode == "reject" else 0,
            "rejected_batches": len(np.unique(rows[idx][rejected_here]))
            if rule.mode == "reject" and len(idx) else 0,
            "evaluation_errors": res.errors,
        })
    # KIP-686 rejects the batch (check "P") without record errors: its culprits are the records
    # that failed the policy, the others are collateral
    policy_batch = np.array([o.check == "P" for o in outcomes], dtype=bool)
    if n:
        own = culprit | (batch_level[rows] & ~policy_batch[rows]) | \
            ((first >= 0) & policy_batch[rows])
    else:
        own = culprit
    outcome = np.where(rec_codes == 0, "accepted", np.where(own, "rejected", "collateral"))
    failures = failures_array(n, np.asarray(f_rec, dtype=np.int64), f_rule,
                              np.asarray(f_code, dtype=np.int64), f_msg)
    record_table = pa.table([
        records.column("topic"), records.column("partition"), records.column("offset"),
        records.column("batch_offset"), records.column("batch_index"),
        records.column("timestamp"), pa.array(outcome, pa.string()), failures,
    ], schema=RECORD_VERDICTS_SCHEMA)
    notes = []
    if policy.topics.names or policy.topics.patterns:
        import re

        seen = set(pc.unique(records.column("topic")).to_pylist()) if n else set()
        unbound = [t for t in sorted(seen) if t not in policy.topics.names and not any(
            re.fullmatch(p, t) for p in policy.topics.patterns)]
        if unbound:
            notes.append(f"policy {policy.name!r} does not bind topic(s) {', '.join(unbound)}; "
                         "replayed anyway")
    not_exportable = [r.id for r in policy.rules if not r.exportable]
    if not_exportable:
        notes.append(f"not exportable (Python plugins): {', '.join(not_exportable)}")
    return Verdicts(record_table, batch_table, pa.Table.from_pylist(rule_rows, RULES_SCHEMA),
                    profile, sample.framing, now, policy.name, policy.content_hash(),
                    list(sample.issues), notes)


def _batch_table(batches: pa.Table, outcomes: list[Any], profile: str, framing: str
                 ) -> pa.Table:
    from kqlab.kafka.validator import outcomes_table

    nb = batches.num_rows
    base = outcomes_table(outcomes, "", -1)
    base = base.set_column(0, "topic", batches.column("topic"))
    base = base.set_column(1, "partition", batches.column("partition"))
    base = base.set_column(2, "batch_offset", batches.column("batch_offset"))
    base = base.set_column(base.schema.get_field_index("position"), "position",
                           batches.column("position"))
    actions = [producer_action(o.error_code, o.record_count, o.duplicate) for o in outcomes]
    return pa.table([
        *base.columns,
        batches.column("producer_id"),
        pa.array([profile] * nb, pa.string()),
        pa.array([framing] * nb, pa.string()),
        pa.array(actions, pa.string()),
    ], schema=REPLAY_BATCHES_SCHEMA)
