"""The gate's verdict on one poll batch: policy rules + the record-level broker checks, per
record, vectorised over an Arrow records table.

Why not call :func:`kqlab.validate.replay` per poll?  The replay judges the *producer's
batches* (a failing record rejects its whole batch, producer sequences, CRCs, batch framing);
a gate downstream of the raw topic sees records whose batches the raw topic's broker already
accepted, and it forwards or dead-letters each record on its own.  So the gate runs the same
rule kernels (:func:`kqlab.validate.rules.evaluate_rule` over an
:class:`~kqlab.validate.context.EvalContext`, the implicit ``decode:value`` rule included) and
the broker checks that judge a record in isolation, in the broker's order:

* ``broker:C2`` — the record alone in a batch would exceed ``max.message.bytes`` (the size of
  a one-record uncompressed v2 batch; the raw topic's broker checked the producer's batch,
  which may have been compressed or the raw topic may allow more);
* ``broker:R3`` — a compacted topic (``cleanup.policy`` contains ``compact``) refuses a record
  without a key;
* ``broker:R4`` — a CreateTime record whose timestamp lies outside ``[now - before.max.ms,
  now + after.max.ms]`` (or the pre-3.6 symmetric ``difference.max.ms``), against the gate's
  clock (``now``), as the broker would judge it had the record been produced at that moment;
* then the policy's ``reject`` rules in policy order; the first failing one names the record's
  rule.  ``observe`` rules are counted, never dead-letter.

That is exactly the replay with ``framing="single"`` (every record alone in its batch), which
the tests check record for record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.checks import record as record_checks
from kqlab.kafka.checks.append import C2
from kqlab.kafka.configs import TopicConfig
from kqlab.policy.model import Policy
from kqlab.validate.context import EvalContext
from kqlab.validate.replayer import with_implicit_rules
from kqlab.validate.rules import RuleResult, evaluate_rule

__all__ = ["Judge", "Judgement"]

R3_RULE, R4_RULE = record_checks.R3.rule, record_checks.R4.rule
C2_RULE = C2.rule


@dataclass
class Judgement:
    """What the gate does with each record of one poll batch."""

    #: bool[N]: the record goes to the dead-letter topic
    dead: np.ndarray
    #: per dead record (aligned with ``np.flatnonzero(dead)``): rule id and message
    rules: list[str]
    messages: list[str]
    #: failures per rule id in this batch (reject rules: records they dead-lettered first;
    #: observe rules: records that failed them)
    by_rule: dict[str, int] = field(default_factory=dict)
    observed: dict[str, int] = field(default_factory=dict)
    #: the evaluation context the rules read (decoded columns, cached) and every rule's
    #: result by rule id: what the Structured Streaming enforcer computes the policy's
    #: sample checks from, in the same pass (nothing decoded twice)
    context: EvalContext | None = None
    results: dict[str, RuleResult] = field(default_factory=dict)


class Judge:
    """Judges records tables against one policy; build once per gate, call per poll batch."""

    def __init__(self, policy: Policy, *, now: int | None = None, resolver: Any = None):
        self.policy = with_implicit_rules(policy)
        self.config = TopicConfig.from_dict(dict(policy.broker.configs), policy.broker.version)
        #: a fixed broker clock (ms) for reproducible runs; None: the wall clock per batch
        self.now = now
        self.resolver = resolver
        if resolver is None and policy.value.schemas is not None:
            from kqlab.serde.schemas import SchemaResolver

            self.resolver = SchemaResolver.from_source(policy.value.schemas)
        self._r4 = record_checks.timestamp_checked(self.config)

    def __call__(self, records: pa.Table, now: int | None = None) -> Judgement:
        """The verdicts for ``records`` (``RECORDS_SCHEMA``; ``batch_index`` 0 everywhere:
        each record is its own batch)."""
        import time

        n = records.num_rows
        now = now if now is not None else (self.now if self.now is not None
                                           else int(time.time() * 1000))
        first = np.full(n, -1, dtype=np.int64)  # index into rules/messages below
        rules: list[str] = []
        messages: list[str] = []
        by_rule: dict[str, int] = {}
        observed: dict[str, int] = {}
        results: dict[str, RuleResult] = {}

        def claim(mask: np.ndarray, rule: str, texts: Any) -> None:
            idx = np.flatnonzero(mask)
            if not len(idx):
                return
            fresh = first[idx] < 0
            if not fresh.any():
                return
            base = len(messages)
            if isinstance(texts, str):
                k = int(fresh.sum())
                messages.extend([texts] * k)
                rules.extend([rule] * k)
            else:
                picked = [t for t, f in zip(texts, fresh.tolist(), strict=True) if f]
                messages.extend(picked)
                rules.extend([rule] * len(picked))
            first[idx[fresh]] = base + np.arange(int(fresh.sum()))
            by_rule[rule] = by_rule.get(rule, 0) + int(fresh.sum())

        cfg = self.config
        ctx = EvalContext(records, now, None, value_format=self.policy.value,
                          key_format=self.policy.key, resolver=self.resolver)
        def tp(idx: np.ndarray) -> pa.Array:
            take = pa.array(idx)
            return pc.binary_join_element_wise(
                records.column("topic").take(take),
                records.column("partition").take(take).cast(pa.string()), "-")

        # the broker checks that judge a record alone, from kafka/checks (the broker's order)
        if n:
            size = single_batch_size(ctx)
            big = size > cfg.max_message_bytes
            if big.any():
                idx = np.flatnonzero(big)
                claim(big, C2_RULE, C2.render_array({
                    "tp": tp(idx), "size": size[idx],
                    "max_message_bytes": cfg.max_message_bytes}).to_pylist())
        if cfg.compacted and n:
            nokey = records.column("key").is_null().to_numpy(zero_copy_only=False)
            if nokey.any():
                idx = np.flatnonzero(nokey)
                claim(nokey, R3_RULE, record_checks.R3.render_array({"tp": tp(idx)}).to_pylist())
        if self._r4 and n:
            ts = records.column("timestamp").to_numpy()
            ts_type = records.column("timestamp_type").to_numpy()
            bad = record_checks.timestamp_out_of_range(ts, now, cfg)
            bad &= ts_type != 1  # LogAppendTime records carry the broker's own clock
            if bad.any():
                lo, hi = record_checks.timestamp_bounds(now, cfg)
                claim(bad, R4_RULE, record_checks.R4.render_array({
                    "timestamp": ts[bad], "offset": 0, "lower": lo, "upper": hi}).to_pylist())
        if n:
            for rule in self.policy.rules:
                res = results[rule.id] = evaluate_rule(ctx, rule)
                if not res.failed.any():
                    continue
                if rule.mode == "reject":
                    claim(res.failed, rule.id, list(res.messages))
                else:
                    observed[rule.id] = observed.get(rule.id, 0) + res.count
        dead = first >= 0
        order = first[dead]
        return Judgement(dead, [rules[i] for i in order.tolist()],
                         [messages[i] for i in order.tolist()], by_rule, observed, ctx,
                         results)


def _varint_size(v: np.ndarray) -> np.ndarray:
    """Bytes of Kafka's zigzag varint encoding of each int64 in ``v``."""
    zz = np.where(v >= 0, v * 2, -v * 2 - 1).astype(np.uint64)
    size = np.ones(len(v), dtype=np.int64)
    zz = zz >> np.uint64(7)
    while zz.any():
        size += zz > 0
        zz = zz >> np.uint64(7)
    return size


def single_batch_size(ctx: EvalContext) -> np.ndarray:
    """Per record, the bytes of a v2 batch holding only that record (uncompressed, timestamp
    and offset deltas 0): what ``max.message.bytes`` is checked against when every record is
    its own batch."""
    ks, vs = ctx.key_size, ctx.value_size
    h = ctx.headers
    from kqlab.validate.context import _sizes

    hk, hv = _sizes(h.keys), _sizes(h.values)
    per_header = _varint_size(hk) + hk.clip(min=0) + _varint_size(hv) + hv.clip(min=0)
    headers = np.bincount(h.parent, weights=per_header, minlength=ctx.n).astype(np.int64)
    body = (1 + 1 + 1 + _varint_size(ks) + ks.clip(min=0) + _varint_size(vs) + vs.clip(min=0)
            + _varint_size(h.counts.astype(np.int64)) + headers)
    return 61 + _varint_size(body) + body
