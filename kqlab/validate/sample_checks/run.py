"""A replay's sample checks from start to end: partials per chunk, merged, judged.

:class:`CheckRun` is fed by the replay's own pass — the whole-sample replay calls
:meth:`CheckRun.add` once, the streamed replay once per chunk, right after judging the
chunk's records (its decoded columns and rule results are at hand, nothing is read twice) —
and :meth:`CheckRun.finish` merges every check's partials and judges them
(:func:`~kqlab.validate.sample_checks.finish.finish_check`).  Baselines are read once, on
first use.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa

from kqlab.policy.model import Check, Policy
from kqlab.validate.sample_checks.baseline import BaselinePlan, baseline_plan
from kqlab.validate.sample_checks.compute import Chunk, extent_of, partial_of
from kqlab.validate.sample_checks.finish import finish_check
from kqlab.validate.sample_checks.partials import Extent, Partial, merge_partials
from kqlab.validate.sample_checks.results import (
    CHECK_RESULTS_SCHEMA,
    CHECK_WINDOWS_SCHEMA,
    CheckResults,
    empty_check_results,
)

__all__ = ["COMPACT_EVERY", "CheckRun", "partial_key", "run_checks"]

#: a streamed replay merges a check's partials once this many chunks have added theirs
COMPACT_EVERY = 32


def partial_key(check: Check, policy: Policy, profile: str) -> bytes:
    """What a check's partial depends on: the check without its thresholds (editing a
    threshold re-judges, it does not recompute), and for ``reject_rate`` what decides a
    rejection (the named rule, or the whole policy and profile)."""
    spec = check.spec
    body = check.to_dict()
    for name in spec.thresholds:
        body.pop(name, None)
    body.pop("id", None)
    body.pop("description", None)
    extra: object = None
    if check.kind == "reject_rate":
        rule = check.param("rule")
        # the whole policy less its checks: a threshold edited elsewhere rejects nothing
        extra = policy.rule(str(rule)).to_dict() if rule is not None else \
            [policy.with_checks(()).content_hash(), profile]
    return orjson.dumps([body, extra], option=orjson.OPT_SORT_KEYS)


class CheckRun:
    """The sample checks of ``policy`` over one replay's pass.

    ``base_dir`` is the policy file's folder (baselines are relative to it; the working
    directory when None); ``now`` the replay's clock (freshness measures against it).
    """

    def __init__(self, policy: Policy, now: int, *, base_dir: str | Path | None = None,
                 resolver: object = None, plans: dict[bytes, BaselinePlan] | None = None
                 ) -> None:
        self.policy = policy
        self.now = now
        self.base_dir = None if base_dir is None else Path(base_dir)
        self.resolver = resolver
        self.extent = Extent()
        self.partials: dict[str, list[Partial]] = {c.id: [] for c in policy.checks}
        #: baselines read, by what they depend on (shared across runs: a replayer's edits)
        self.plans: dict[bytes, BaselinePlan] = {} if plans is None else plans
        #: baselines read and decoded, by path, while the plans are made (the first chunk)
        self._loaded: dict[str, object] = {}

    def plan(self, check: Check) -> BaselinePlan | None:
        """The check's baseline, read once (None: the kind has none)."""
        if check.kind not in ("drift", "schema_drift"):
            return None
        key = orjson.dumps([str(self.base_dir), check.kind, check.param("field"),
                            check.param("baseline"), check.param("bins"), check.when,
                            repr(self.policy.key), repr(self.policy.value)])
        if key not in self.plans:
            self.plans[key] = baseline_plan(check, self.policy, self.base_dir, self.now,
                                            self.resolver, self._loaded)
        return self.plans[key]

    def merge(self, other: CheckRun) -> None:
        """Take in another run's partials and extent (the next chunk of a streamed
        replay)."""
        self.extent = self.extent.merge(other.extent)
        for check in self.policy.checks:
            parts = self.partials[check.id]
            parts.extend(other.partials[check.id])
            if len(parts) >= COMPACT_EVERY:  # a long stream: keep one table, not thousands
                self.partials[check.id] = [merge_partials(check.kind, parts)]

    def add(self, chunk: Chunk, partials: dict[str, Partial] | None = None) -> None:
        """One chunk's (or the whole sample's) contribution; ``partials`` given by id are
        taken as they are (a replayer's cache of unchanged checks)."""
        self.extent = self.extent.merge(extent_of(chunk))
        for check in self.policy.checks:
            given = None if partials is None else partials.get(check.id)
            self.partials[check.id].append(given if given is not None else
                                           self.partial(check, chunk))
        self._loaded.clear()  # every plan is made: the decoded baselines can go

    def partial(self, check: Check, chunk: Chunk) -> Partial:
        """The check's partial over ``chunk`` (a drift check skips the work when its
        baseline cannot be read)."""
        plan = self.plan(check)
        if plan is not None and plan.reason is not None and plan.reason != "baseline_empty":
            return Partial.empty(check.kind)
        return partial_of(check, chunk, plan)

    def finish(self) -> CheckResults:
        """Every check judged (policy order) — the results and windows tables."""
        if not self.policy.checks:
            return empty_check_results()
        rows, windows = [], []
        for check in self.policy.checks:
            merged = merge_partials(check.kind, self.partials[check.id])
            row, win = finish_check(check, merged, self.extent, self.now, self.plan(check))
            rows.append(row)
            if win.num_rows:
                windows.append(win)
        results = pa.Table.from_pylist(rows, schema=CHECK_RESULTS_SCHEMA)
        window_table = pa.concat_tables(windows) if windows else \
            CHECK_WINDOWS_SCHEMA.empty_table()
        return CheckResults(results, window_table)


def run_checks(policy: Policy, chunk: Chunk, now: int, *,
               base_dir: str | Path | None = None) -> CheckResults:
    """The sample checks of ``policy`` over one whole sample."""
    run = CheckRun(policy, now, base_dir=base_dir)
    run.add(chunk)
    return run.finish()
