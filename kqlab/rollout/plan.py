"""A staged rollout plan: observe → dead-letter → block, rule by rule, predicted on a sample.

Switching a vetted policy on in production in one step breaks producers nobody warned.  A plan
moves each ``reject`` rule through three stages, and says for every stage what the sample
predicts (every number a replay's, composed as in :mod:`kqlab.rollout.outcome`):

1. **observe** — every rule observed: nothing is refused for the policy (the broker's own
   checks still refuse what they refuse: the baseline), each rule's failures are counted;
2. **dead-letter** (mark) — every rule enforced per record by a gate behind the topic: failing
   records go to the dead-letter topic, consumers stop seeing them, no producer breaks;
3. **block** — rules move to the blocking enforcement point (``block_at``: the broker's record
   policy per KIP, the Kroxylicious proxy or the Confluent serializer) in waves: first every
   rule that refuses nothing more than the baseline on the sample (safe), then the others one
   at a time, the one losing fewest records first.  Rules the blocking point cannot express
   (its exporter's fidelity) stay dead-lettered by the gate, and the plan says so.

Each stage carries its two policies — ``block_policy`` (the rules it blocks reject, the others
are observed) and ``gate_policy`` (the rules it dead-letters reject) — the predicted counts, the
reject rate, the collateral, the producers it breaks first (producer id, and the client named
by a header when the records carry one), and the exported configs of those policies
(:func:`kqlab.export.export`).  Replaying a stage's policies reproduces its numbers exactly.

Examples
--------
>>> import tempfile
>>> from kqlab.policy import loads_policy
>>> from kqlab.sources.demo import write_demo_segment
>>> folder = write_demo_segment(tempfile.mkdtemp(), 1763700000000)
>>> policy = loads_policy("kqlab: 1\\nname: p\\ntopics: {names: [orders]}\\nrules: "
...                       "[{id: trace, kind: header_required, name: trace-id}]")
>>> plan = rollout_plan(policy, folder, now=1763700000000)
>>> [(s.kind, s.counts["refused"] + s.counts["collateral"], s.counts["dead_lettered"])
...  for s in plan.stages]
[('observe', 23, 0), ('dead-letter', 23, 2), ('block', 29, 0)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kqlab.rollout.errors import RolloutError
from kqlab.rollout.html import esc, figure_block, table
from kqlab.rollout.outcome import Outcome
from kqlab.rollout.points import BLOCK_POINTS, Fidelity, fidelity_at, point, staged_rules
from kqlab.rollout.replays import AUTO, SampleReplays
from kqlab.rollout.whatif import deployment_outcome

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from kqlab.export.base import Export
    from kqlab.policy.model import Policy
    from kqlab.validate.loading import SampleSource

__all__ = ["STAGE_KINDS", "RolloutPlan", "RulePlan", "Stage", "plan_figure", "plan_html",
           "rollout_plan"]

STAGE_KINDS = ("observe", "dead-letter", "block")
#: the exporter writing each blocking point's config
_BLOCK_EXPORTER = {"kip-940": "kip", "kip-729": "kip", "kip-686": None,
                   "kroxylicious": "kroxylicious", "confluent": "confluent"}
#: the id the replay's implicit decode rule gets in a plan's policies (a policy file's rule
#: ids are ``[a-z0-9._-]``, so ``decode:value`` cannot be written; its stage must be)
DECODE_RULE = "decode-value"


@dataclass
class RulePlan:
    """One rule's way through the plan: what it fails on the sample, which producers send
    those records, what blocking it alone would cost (beyond the baseline), and the stages at
    which it is dead-lettered and blocked (``block_stage`` None: never, ``note`` says why)."""

    rule: str
    kind: str
    failed_records: int
    producers: dict[str, int]
    solo_refused: int | None
    solo_collateral: int | None
    dead_letter_stage: int
    block_stage: int | None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {"rule": self.rule, "kind": self.kind, "failed_records": self.failed_records,
                "producers": dict(self.producers), "solo_refused": self.solo_refused,
                "solo_collateral": self.solo_collateral,
                "dead_letter_stage": self.dead_letter_stage, "block_stage": self.block_stage,
                "note": self.note}


@dataclass
class Stage:
    """One step of the plan (see the module doc): rule ``modes`` (rule id → observe,
    dead-letter or block), the rules it ``moves``, its two policies, the predicted
    ``outcome``, per producer ``producers`` (with ``new_lost``: records lost beyond the
    previous stage), and the exports of its policies (``skipped``: the exporter's reason)."""

    number: int
    kind: str
    title: str
    modes: dict[str, str]
    moves: list[str]
    block_at: str
    profile: str | None
    block_policy: Policy
    gate_policy: Policy | None
    outcome: Outcome
    producers: list[dict[str, Any]]
    #: records the broker's own checks lose on the sample (the observe stage's ``lost``)
    baseline_lost: int = 0
    exports: dict[str, Export] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        """Predicted records per disposition, ``in_dlq`` and ``lost``."""
        return self.outcome.counts()

    @property
    def policy_lost(self) -> int:
        """Records lost because of the policy: ``lost`` beyond the broker's own checks."""
        return self.counts["lost"] - self.baseline_lost

    @property
    def reject_rate(self) -> float:
        """(refused + collateral) / records."""
        c = self.counts
        return (c["refused"] + c["collateral"]) / c["records"] if c["records"] else 0.0

    @property
    def breaks(self) -> list[dict[str, Any]]:
        """The producers that lose records at this stage they did not lose at the previous
        one, most first."""
        rows = [p for p in self.producers if p["new_lost"] > 0]
        return sorted(rows, key=lambda p: (-p["new_lost"], p["producer"]))

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (file names of the exports, not their text)."""
        from kqlab.rollout.outcome import COLLATERAL, DEAD_LETTERED, REFUSED

        return {"stage": self.number, "kind": self.kind, "title": self.title,
                "modes": dict(self.modes), "moves": list(self.moves),
                "block_at": self.block_at, "profile": self.profile,
                "counts": self.counts, "reject_rate": self.reject_rate,
                "policy_lost": self.policy_lost,
                "refused_by": self.outcome.reasons(REFUSED),
                "collateral_by": self.outcome.reasons(COLLATERAL),
                "dead_lettered_by": self.outcome.reasons(DEAD_LETTERED),
                "answers": [a.to_dict() for a in self.outcome.answers],
                "producers": self.producers, "breaks": self.breaks,
                "sources": list(self.outcome.sources),
                "exports": {k: sorted(e.files) for k, e in self.exports.items()},
                "skipped": dict(self.skipped)}


@dataclass
class RolloutPlan:
    """The staged rollout of one policy on one sample (see the module doc)."""

    policy: str
    policy_hash: str
    block_at: str
    records: int
    batches: int
    now: int
    clock: str
    framing: str
    client_header: str | None
    rules: list[RulePlan]
    stages: list[Stage]
    notes: list[str] = field(default_factory=list)

    @property
    def breaks_first(self) -> list[dict[str, Any]]:
        """The producers of the first stage that breaks any (empty: none breaks)."""
        for s in self.stages:
            if s.breaks:
                return s.breaks
        return []

    def stage(self, number: int) -> Stage:
        """Stage ``number`` (1-based)."""
        return self.stages[number - 1]

    def figure(self) -> go.Figure:
        """Bars per stage: accepted / refused / collateral / dead-lettered."""
        return plan_figure(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (what ``kqlab plan --json`` prints)."""
        return {"policy": self.policy, "policy_hash": self.policy_hash,
                "block_at": self.block_at, "records": self.records, "batches": self.batches,
                "now": self.now, "clock": self.clock, "framing": self.framing,
                "client_header": self.client_header, "notes": list(self.notes),
                "rules": [r.to_dict() for r in self.rules],
                "stages": [s.to_dict() for s in self.stages],
                "breaks_first": self.breaks_first}

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write the plan under ``out_dir``: ``plan.json``, and per stage a folder
        ``stage-<n>-<kind>/`` with its policies (``block-policy.yaml``, ``gate-policy.yaml``)
        and every export's files; the paths written."""
        import orjson

        from kqlab.policy import dump_policy

        root = Path(out_dir)
        root.mkdir(parents=True, exist_ok=True)
        written = []
        for s in self.stages:
            folder = root / f"stage-{s.number}-{s.kind}"
            folder.mkdir(parents=True, exist_ok=True)
            for name, pol in (("block-policy.yaml", s.block_policy),
                              ("gate-policy.yaml", s.gate_policy)):
                if pol is None:
                    continue
                path = folder / name
                path.write_text(dump_policy(pol), encoding="utf-8")
                written.append(path)
            for ex in s.exports.values():
                written += ex.write(folder)
        doc = root / "plan.json"
        doc.write_bytes(orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2) + b"\n")
        written.append(doc)
        return written

    def _repr_html_(self) -> str:
        return plan_html(self, figure=False)


def explicit_policy(policy: Policy) -> Policy:
    """``policy`` with the replay's implicit decode rule written in as rule
    :data:`DECODE_RULE` (same kind and message), so a plan can set its mode and a policy file
    can hold it; unchanged when the replay adds none."""
    from kqlab.validate.replayer import with_implicit_rules

    full = with_implicit_rules(policy)
    if len(full.rules) == len(policy.rules):
        return policy
    implicit = full.rules[0]
    ids = {r.id for r in policy.rules}
    rid, n = DECODE_RULE, 2
    while rid in ids:
        rid, n = f"{DECODE_RULE}-{n}", n + 1
    rule = replace(implicit, id=rid, description="the value decodes with the policy's "
                   "format (the replay's implicit decode rule, written in by kqlab plan)")
    return policy.with_rules((rule, *policy.rules))


def _with_modes(policy: Policy, rejecting: set[str]) -> Policy:
    """``policy`` with exactly the ``reject`` rules in ``rejecting`` rejecting."""
    return policy.with_rules(tuple(
        r if r.mode != "reject" or r.id in rejecting else replace(r, mode="observe")
        for r in policy.rules))


def _producer_rows(outcome: Outcome, replays: SampleReplays,
                   previous: dict[str, int]) -> list[dict[str, Any]]:
    rows = outcome.by_producer(replays.producers)
    for r in rows:
        r["new_lost"] = max(r["lost"] - previous.get(r["producer"], 0), 0)
    return rows


def _rule_failures(replays: SampleReplays, observed: Policy, profile: str
                   ) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Per rule: records failing it on the sample (the replay's rules table) and, per
    producer, how many of them."""
    import pyarrow.compute as pc

    v = replays.run(observed, profile=profile)
    failed = {r["rule"]: int(r["failed_records"]) for r in v.rules.to_pylist()}
    lists = v.records.column("failures").combine_chunks()
    flat = lists.flatten()
    per: dict[str, dict[str, int]] = {rid: {} for rid in failed}
    if len(flat):
        parents = pc.list_parent_indices(lists).to_numpy()
        names = flat.field("rule").to_numpy(zero_copy_only=False)
        code = replays.producers.code
        labels = replays.producers.labels
        for rid in per:
            hit = np.unique(parents[names == rid])
            if len(hit):
                counts = np.bincount(code[hit], minlength=len(labels))
                per[rid] = {labels[i]: int(c) for i, c in
                            sorted(enumerate(counts.tolist()), key=lambda x: -x[1]) if c}
    return failed, per


def _export(stage_policy: Policy, exporter: str, options: dict[str, Any]
            ) -> tuple[Export | None, str | None]:
    from kqlab.export import ExportError, export

    try:
        return export(stage_policy, exporter, **options), None
    except ExportError as exc:
        return None, str(exc)


def rollout_plan(policy: Policy, sample: SampleSource | Sequence[SampleSource] | SampleReplays,
                 *, block_at: str | None = None, now: int | None = None,
                 framing: str = "exact", client_header: str | None = AUTO,
                 export_options: dict[str, Any] | None = None, exports: bool = True,
                 linger_ms: int = 5, batch_size: int = 16384) -> RolloutPlan:
    """The staged rollout plan of ``policy`` on ``sample`` (see the module doc).

    Parameters
    ----------
    block_at
        Where rules are finally blocked: one of :data:`BLOCK_POINTS` (default: the policy's
        enforcement profile, a broker record policy).
    exports
        Build each stage's exported configs (False: the numbers only).
    export_options
        Passed to the exporters (e.g. Confluent's ``schema``).

    The other parameters are :func:`~kqlab.rollout.whatif.what_if`'s.
    """
    block_at = block_at or policy.enforcement
    if block_at not in BLOCK_POINTS:
        raise RolloutError(f"block_at must be one of {', '.join(BLOCK_POINTS)}, not "
                           f"{block_at!r}")
    bp = point(block_at)
    replays = sample if isinstance(sample, SampleReplays) else SampleReplays(
        sample, now=now, framing=framing, linger_ms=linger_ms, batch_size=batch_size,
        client_header=client_header)
    base = explicit_policy(policy)
    notes: list[str] = []
    if base is not policy:
        notes.append(f"the replay's implicit decode rule is written in as rule {DECODE_RULE!r} "
                     "so that its stage can be set")
    staged = staged_rules(base)
    ids = [r.id for r in staged]
    observe_only = [r.id for r in base.rules if r.mode != "reject"]
    if observe_only:
        notes.append("rules observed in the policy stay observed in every stage: "
                     + ", ".join(observe_only))
    options = dict(export_options or {})
    fid: Fidelity = fidelity_at(bp, base, **options)
    if not fid.available:
        raise RolloutError(f"cannot block at {block_at}: {fid.note}")
    blockable = [r for r in ids if r in fid.enforced]
    for rid, why in fid.not_enforced.items():
        notes.append(f"rule {rid} cannot be blocked at {block_at} ({why}): it stays "
                     "dead-lettered by the gate")
    for rid, how in fid.approximate.items():
        notes.append(f"rule {rid} is enforced approximately at {block_at}: {how}")
    profile = bp.profile or base.enforcement

    def outcome(blocked: set[str], dead: set[str]) -> tuple[Policy, Policy | None, Outcome]:
        block_policy = _with_modes(base, blocked)
        gate_policy = _with_modes(base, dead) if dead else None
        if bp.where == "client":
            out = deployment_outcome(replays, base, client=block_policy,
                                     client_rules=frozenset(blocked), gate=gate_policy,
                                     profile=profile)
        else:
            out = deployment_outcome(replays, base, block=block_policy, profile=profile,
                                     gate=gate_policy, who=bp.policy_who)
        return block_policy, gate_policy, out

    # the baseline (the broker's own checks) and each blockable rule blocked alone
    _, _, baseline = outcome(set(), set())
    lost0 = baseline.counts()
    solo: dict[str, tuple[int, int]] = {}
    for rid in blockable:
        c = outcome({rid}, set())[2].counts()
        solo[rid] = (c["refused"] - lost0["refused"], c["collateral"] - lost0["collateral"])
    safe = [r for r in blockable if sum(solo[r]) == 0]
    rest = sorted((r for r in blockable if sum(solo[r]) > 0),
                  key=lambda r: (sum(solo[r]), blockable.index(r)))
    waves: list[tuple[str, list[str]]] = [("observe", []), ("dead-letter", list(ids))]
    if safe:
        waves.append(("block", safe))
    waves += [("block", [r]) for r in rest]

    failed, by_producer = _rule_failures(replays, _with_modes(base, set()), profile)
    block_exporter = _BLOCK_EXPORTER[block_at]
    stages: list[Stage] = []
    blocked: set[str] = set()
    # the observe stage is the baseline: producers the broker's own checks break are not
    # broken by the plan
    previous = {r["producer"]: r["lost"] for r in baseline.by_producer(replays.producers)}
    block_stage: dict[str, int] = {}
    for number, (kind, moved) in enumerate(waves, start=1):
        if kind == "block":
            blocked |= set(moved)
            for r in moved:
                block_stage[r] = number
        dead = set() if kind == "observe" else set(ids) - blocked
        block_policy, gate_policy, out = outcome(blocked, dead)
        modes = {r: "block" if r in blocked else "dead-letter" if r in dead else "observe"
                 for r in ids}
        rows = _producer_rows(out, replays, previous)
        previous = {r["producer"]: r["lost"] for r in rows}
        title = {"observe": "observe only: every rule counted, nothing refused for the policy",
                 "dead-letter": "mark / dead-letter: the gate diverts failing records, no "
                                "producer breaks"}.get(kind) or (
            f"block {', '.join(moved)} at {block_at}" + (" (refuse nothing more than the "
                                                         "baseline on the sample)"
                                                         if moved == safe else ""))
        stage = Stage(number, kind, title, modes, list(moved), block_at,
                      profile if bp.where != "client" else None, block_policy,
                      gate_policy if kind != "observe" else _with_modes(base, set()), out,
                      rows, baseline_lost=lost0["lost"])
        if exports:
            wanted: list[tuple[str, Policy]] = []
            if kind != "dead-letter":
                if block_exporter is None:
                    stage.skipped[block_at] = ("no exporter for KIP-686 (a proposal: the "
                                               "kip export covers KIP-940 and KIP-729)")
                else:
                    wanted.append((block_exporter, block_policy))
            if stage.gate_policy is not None:
                wanted.append(("gate", stage.gate_policy))
            for name, pol in wanted:
                ex, refusal = _export(pol, name, options if name == block_exporter else {})
                if ex is not None:
                    stage.exports[name] = ex
                else:
                    stage.skipped[name] = refusal or "not exported"
        stages.append(stage)

    rules = []
    for r in staged:
        s = solo.get(r.id)
        note = None
        if r.id not in fid.enforced:
            note = fid.not_enforced.get(r.id, f"not enforced at {block_at}")
        elif r.id in fid.approximate:
            note = f"approximate at {block_at}: {fid.approximate[r.id]}"
        rules.append(RulePlan(r.id, r.kind, failed.get(r.id, 0), by_producer.get(r.id, {}),
                              None if s is None else s[0], None if s is None else s[1], 2,
                              block_stage.get(r.id), note))
    return RolloutPlan(policy.name, policy.content_hash(), block_at, replays.records,
                       replays.batches, replays.now, replays.clock, replays.framing,
                       replays.producers.header, rules, stages, notes)


# -- display ------------------------------------------------------------------------------------

def plan_figure(plan: RolloutPlan) -> go.Figure:
    """Per stage of the plan, grouped bars: accepted, refused, collateral and dead-lettered
    records of the sample."""
    labels = [f"{s.number}. {s.kind}" + (f": {', '.join(s.moves)}" if s.kind == "block"
                                         else "") for s in plan.stages]
    from kqlab.rollout.figures import bars_figure  # plotly only when drawn

    return bars_figure(labels, [s.counts for s in plan.stages],
                 f"Rollout of {plan.policy}: observe → dead-letter → block at {plan.block_at}",
                 "stage")


def plan_html(plan: RolloutPlan, *, figure: bool = True) -> str:
    """The rollout plan as HTML: the stages with their predicted numbers and the producers
    they break first, the rules' way through them, and (``figure``) the bars per stage."""
    stages = []
    for s in plan.stages:
        c = s.counts
        breaks = ", ".join(f"{b['producer']} (+{b['new_lost']:,})" for b in s.breaks)
        stages.append([s.number, s.title, c["accepted"], c["refused"], c["collateral"],
                       c["in_dlq"], s.reject_rate, breaks or None,
                       ", ".join(sorted(s.exports)) or None])
    rules = [[r.rule, r.kind, r.failed_records,
              ", ".join(f"{k} ({v:,})" for k, v in r.producers.items()) or None,
              r.solo_refused, r.solo_collateral, r.dead_letter_stage, r.block_stage, r.note]
             for r in plan.rules]
    parts = [f"<p class='sub'>policy {esc(plan.policy)}, blocking at "
             f"{esc(plan.block_at)}, on {plan.records:,} records"
             + (f"; clients named by header {esc(plan.client_header)}"
                if plan.client_header else "") + "</p>",
             table(["stage", "what", "accepted", "refused", "collateral", "dead-lettered",
                     "refused + collateral", "breaks first (records lost beyond the "
                     "previous stage)", "exports"], stages),
             table(["rule", "kind", "fails on the sample", "producers", "blocked alone: "
                     "refused", "blocked alone: collateral", "dead-letter stage",
                     "block stage", "note"], rules)]
    if plan.notes:
        parts.append("<ul class='note'>" + "".join(f"<li>{esc(n)}</li>" for n in plan.notes)
                     + "</ul>")
    if figure:
        parts.append(figure_block(plan.figure(), "kqlab-rollout-plan"))
    return "\n".join(parts)
