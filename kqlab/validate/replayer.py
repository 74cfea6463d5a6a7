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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa

from kqlab.policy.model import Policy, Rule
from kqlab.validate.assemble import Assembler
from kqlab.validate.context import EvalContext
from kqlab.validate.loading import SampleSource, load_sample
from kqlab.validate.rules import RuleResult, evaluate_rule
from kqlab.validate.sample import Sample, record_batch_rows
from kqlab.validate.sample_checks.partials import Partial
from kqlab.validate.view import VerdictsView

if TYPE_CHECKING:
    from pathlib import Path

    from kqlab.serde.schemas import SchemaResolver
    from kqlab.validate.sample_checks import CheckRun
from kqlab.validate.verdicts import (
    Verdicts,
)


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

    def __init__(self, source: SampleSource, *, now: int | None = None,
                 framing: str = "exact", linger_ms: int = 5, batch_size: int = 16384,
                 resolver: SchemaResolver | None = None,
                 base_dir: str | Path | None = None):
        self.resolver = resolver
        #: the policy file's folder: sample checks' baselines are relative to it (None: the
        #: working directory)
        self.base_dir = base_dir
        self.check_evaluations = 0  # sample checks computed (not from the cache)
        self.evaluations = 0  # rules evaluated (tests and benchmarks read it)
        self.sample = load_sample(source, framing=framing, linger_ms=linger_ms,
                                  batch_size=batch_size)
        # no clock given: the sample's own (a replay a week after sampling must not judge
        # every timestamp against today); :attr:`clock` says which one was used
        sampled = sample_clock(self.sample.batches) if now is None else None
        self.clock = "given" if now is not None else (
            "sample" if sampled is not None else "wall clock")
        self.now = now if now is not None else (
            sampled if sampled is not None else int(time.time() * 1000))

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
        self._check_cache: dict[bytes, Partial] = {}
        self._check_plans: dict[bytes, Any] = {}
        self._rows = record_batch_rows(sample.records, sample.batches)
        # transaction markers are the coordinator's, not the client's: no record policy applies
        control = sample.batches.column("is_control").to_numpy(zero_copy_only=False)
        self._control = control.astype(bool)[self._rows] if len(self._rows) else \
            np.zeros(0, dtype=bool)
        self._assembler: Assembler | None = None

    @property
    def control(self) -> np.ndarray:
        """Per record of the sample: whether it is a transaction marker (no policy reads it)."""
        return self._control

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
            self._check_cache.clear()
        return self._ctx

    def context(self, policy: Policy) -> EvalContext:
        """The evaluation context of ``policy``'s key/value formats (decoded columns cached
        with the sample): rule suggestion reads its statistics here, so the replay that rates
        the suggestions decodes nothing twice."""
        return self._context(policy)

    def evaluate(self, policy: Policy) -> dict[str, RuleResult]:
        """Every rule's result, reusing cached results for rules that did not change."""
        ctx = self._context(policy)
        out = {}
        for rule in policy.rules:
            key = orjson.dumps(rule.to_dict(), option=orjson.OPT_SORT_KEYS)
            if key not in self._rule_cache:
                self._rule_cache[key] = _with_health(
                    ctx, rule, _without(evaluate_rule(ctx, rule), self._control),
                    self._control)
                self.evaluations += 1
            out[rule.id] = self._rule_cache[key]
        return out

    def run(self, policy: Policy, *, profile: str | None = None, checks: bool = True
            ) -> Verdicts:
        """Replay the sample under ``policy``; see the module docstring for the semantics.
        ``checks=False`` leaves the sample checks out (a streamed replay merges them over its
        chunks itself, :meth:`run_checks`)."""
        profile = profile or policy.enforcement
        effective = with_implicit_rules(policy)
        results = self.evaluate(effective)
        verdicts = self.assembler(effective, results, self.now, profile)
        if checks and policy.checks:
            verdicts.check_results = self.run_checks(effective, results, verdicts).finish()
        return verdicts

    def prepare_checks(self, policy: Policy, profile: str) -> None:
        """Compute ahead, into the cache :meth:`run_checks` reads, the partials of the
        checks that depend on the records alone (not on a rule's result, a ``when``
        expression or a baseline): a streamed replay calls this on its read-ahead thread,
        so they are computed while the chunk before is judged.  The same partials as
        :meth:`run_checks` would compute (same function, same key)."""
        from kqlab.validate.sample_checks import Chunk, partial_key
        from kqlab.validate.sample_checks.compute import partial_of

        if not policy.checks:
            return
        chunk = Chunk(self._context(policy), self._control)
        for check in policy.checks:
            if check.kind not in _RECORDS_ONLY_KINDS or check.when:
                continue
            key = partial_key(check, policy, profile)
            if key not in self._check_cache:
                self._check_cache[key] = partial_of(check, chunk)
                self.check_evaluations += 1

    def run_checks(self, policy: Policy, results: dict[str, RuleResult],
                   verdicts: Verdicts) -> CheckRun:
        """The sample checks of ``policy`` over this sample, fed from this replay's pass
        (decoded columns, rule results, outcomes); not yet finished, so a streamed replay
        merges the chunks' runs.  A check whose partial cannot have changed (only a
        threshold was edited) comes from the cache."""
        from kqlab.validate.sample_checks import CheckRun, Chunk, partial_key

        run = CheckRun(policy, self.now, base_dir=self.base_dir, resolver=self.resolver,
                       plans=self._check_plans)
        ctx = self._context(policy)
        chunk = Chunk(ctx, self._control, results, verdicts.aggregates.outcome)
        partials = {}
        for check in policy.checks:
            key = partial_key(check, policy, verdicts.profile)
            if key not in self._check_cache:
                self._check_cache[key] = run.partial(check, chunk)
                self.check_evaluations += 1
            partials[check.id] = self._check_cache[key]
        run.add(chunk, partials)
        return run

    @property
    def assembler(self) -> Assembler:
        """The :class:`Assembler` of this sample (it keeps the last broker pass, so the next
        run re-checks only the batches whose policy messages changed)."""
        if self._assembler is None or self._assembler.sample is not self.sample:
            self._assembler = Assembler(self.sample, self._rows)
        return self._assembler


#: check kinds whose partial reads the records alone (no rule result, no baseline)
_RECORDS_ONLY_KINDS = frozenset({"volume", "freshness", "null_rate", "duplicate_rate",
                                 "distinct", "stat"})


def sample_clock(batches: pa.Table) -> int | None:
    """The clock a sample was taken at, from its batches: per partition the newest batch's
    ``max_timestamp`` (the last batch in log order), the latest of those; None when no batch
    has a timestamp.

    The last batch, not the largest timestamp: one producer with a clock hours ahead would
    otherwise move "now" into its future and accept the very records the broker refused.  A
    LogAppendTime batch's timestamp is the broker's own clock, so it counts as it is.
    """
    import pyarrow.compute as pc

    if batches.num_rows == 0:
        return None
    last = batches.select(["topic", "partition", "max_timestamp"]).group_by(
        ["topic", "partition"], use_threads=False).aggregate([("max_timestamp", "last")])
    newest = pc.max(last.column("max_timestamp_last")).as_py()
    return None if newest is None else int(newest)


#: share of a sample's records whose batches the timestamp bounds reject, above which
#: :func:`clock_warning` suspects the clock rather than the data
CLOCK_WARNING_SHARE = 0.5


def clock_warning(verdicts: VerdictsView) -> str | None:
    """A warning when the broker's timestamp checks (R4, ``INVALID_TIMESTAMP``) reject most of
    a sample: then the replay clock, not the data, is the likely culprit.  ``verdicts`` is any
    engine's :class:`~kqlab.validate.view.VerdictsView`; None when all is well."""
    import datetime

    records = verdicts.count()[0]
    timed_out = verdicts.by_error().get("INVALID_TIMESTAMP", {}).get("records", 0)
    if not records or timed_out / records <= CLOCK_WARNING_SHARE:
        return None
    when = datetime.datetime.fromtimestamp(verdicts.now / 1000, datetime.UTC)
    return (f"the timestamp bounds reject {timed_out:,} of {records:,} records "
            f"({timed_out / records:.0%}) against now={verdicts.now} "
            f"({when:%Y-%m-%d %H:%M:%S} UTC) — if the sample was taken at another time, "
            "replay with that clock (--now / now=)")


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


def _with_health(ctx: EvalContext, rule: Rule, result: RuleResult, control: np.ndarray
                 ) -> RuleResult:
    """``result`` with what the replay knows about the rule itself, computed once with it
    (:mod:`kqlab.validate.rule_health`): how many records it judged, and the fields and
    headers it reads that none of them has."""
    from dataclasses import replace

    from kqlab.validate.rule_health import unseen_names
    from kqlab.validate.rules import rule_judges

    judged = rule_judges(ctx, rule)
    if len(control) == ctx.n:
        judged = judged & ~control
    return replace(result, judged=int(judged.sum()),
                   unseen=unseen_names(ctx, rule, control))


def _without(result: RuleResult, excluded: np.ndarray) -> RuleResult:
    """``result`` with the ``excluded`` records never failing."""
    if not excluded.any() or not result.failed[excluded].any():
        return result
    keep = ~excluded[result.failing]
    errors = None if result.error_mask is None else result.error_mask & ~excluded
    return RuleResult(result.failed & ~excluded,
                      tuple(m for m, k in zip(result.messages, keep, strict=True) if k),
                      0 if errors is None else int(errors.sum()), errors)


def replay(source: SampleSource, policy: Policy, *, now: int | None = None,
           framing: str = "exact",
           profile: str | None = None, linger_ms: int = 5, batch_size: int = 16384,
           resolver: SchemaResolver | None = None,
           base_dir: str | Path | None = None) -> Verdicts:
    """Replay ``source`` (segment path, records table or :class:`Sample`) under ``policy``;
    ``base_dir``: the policy file's folder (its sample checks' baselines are relative to
    it)."""
    return Replayer(source, now=now, framing=framing, linger_ms=linger_ms,
                    batch_size=batch_size, resolver=resolver,
                    base_dir=base_dir).run(policy, profile=profile)

