"""What-if per enforcement point: one policy, one sample, every place it could be enforced.

For each :data:`~kqlab.rollout.points.POINTS` entry, side by side: the records refused, the
records lost as collateral of a refused batch, what each producer is told (error code,
retriable or not, what the Java client does next), what reaches the topic's consumers and what
reaches a dead-letter topic — and which of the policy's rules the point cannot express (its
exporter's fidelity), which it enforces only approximately.

Every number is a replay's (:mod:`kqlab.rollout.outcome` says how each point composes them):

=================  ========================================================================
``kip-940/729/686`` the sample replayed under that profile, rules the point cannot express
                    observed (the broker's record policy, whole batch)
``kroxylicious``    the sample replayed under kip-940 with only the filter's rules enforced
                    (the proxy answers INVALID_RECORD for the whole request; a sample knows
                    batches, not requests, so per batch: the least the proxy refuses)
``confluent``       the single-framed replay's rule failures refuse records before the
                    produce; the broker's own checks judge the rest in the sample's batches
``gate``            the raw topic's broker (the observe-all replay), then every appended
                    record judged alone (the single-framed replay): forwarded or
                    dead-lettered
``spark-enforcer``  as the gate (the same verdict core per record inside ``mapInArrow``)
=================  ========================================================================

Examples
--------
>>> import tempfile
>>> from kqlab.policy import loads_policy
>>> from kqlab.sources.demo import write_demo_segment
>>> folder = write_demo_segment(tempfile.mkdtemp(), 1763700000000)
>>> policy = loads_policy("kqlab: 1\\nname: p\\ntopics: {names: [orders]}\\nrules: "
...                       "[{id: trace, kind: header_required, name: trace-id}]")
>>> w = what_if(policy, folder, now=1763700000000, points=("kip-940", "gate"))
>>> [(t.point.name, t.counts["refused"], t.counts["collateral"], t.counts["dead_lettered"])
...  for t in w.targets]
[('kip-940', 25, 4, 0), ('gate', 23, 0, 2)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kqlab.rollout.html import esc, figure_block, table
from kqlab.rollout.outcome import (
    COLLATERAL,
    DEAD_LETTERED,
    REFUSED,
    Outcome,
    behind_gate,
    in_front,
    whole_batch,
)
from kqlab.rollout.points import (
    POINTS,
    EnforcementPoint,
    Fidelity,
    enforced_policy,
    fidelity_at,
    observe_all,
    point,
)
from kqlab.rollout.replays import AUTO, SampleReplays

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from kqlab.policy.model import Policy
    from kqlab.validate.loading import SampleSource

__all__ = ["TargetOutcome", "WhatIf", "deployment_outcome", "point_outcome", "what_if",
           "whatif_figure", "whatif_html"]

#: the columns of :meth:`WhatIf.table`
TABLE_COLUMNS = ("point", "where", "granularity", "available", "records", "accepted",
                 "refused", "collateral", "dead_lettered", "lost", "reject_rate",
                 "producer_sees", "not_enforced", "approximate")


@dataclass
class TargetOutcome:
    """One enforcement point's what-if: its fidelity and, when available, the outcome."""

    point: EnforcementPoint
    fidelity: Fidelity
    outcome: Outcome | None
    producers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def available(self) -> bool:
        """False when the point cannot take this policy (``fidelity.note`` says why)."""
        return self.outcome is not None

    @property
    def counts(self) -> dict[str, int]:
        """Records per disposition, ``in_dlq`` and ``lost`` (empty when unavailable)."""
        return {} if self.outcome is None else self.outcome.counts()

    @property
    def reject_rate(self) -> float | None:
        """Share of the records the producers lose or are refused: (refused + collateral) /
        records."""
        c = self.counts
        if not c:
            return None
        return (c["refused"] + c["collateral"]) / c["records"] if c["records"] else 0.0

    def producer_sees(self) -> list[str]:
        """What the producers are told, one line per distinct answer that is not an
        acknowledgement (with the records it concerns)."""
        if self.outcome is None:
            return []
        return [f"{a.text()} ({a.records:,} records)" for a in self.outcome.answers
                if a.error_code != 0]

    def row(self) -> dict[str, Any]:
        """One row of :meth:`WhatIf.table`."""
        c = self.counts
        return {"point": self.point.name, "where": self.point.where,
                "granularity": self.point.granularity, "available": self.available,
                "records": c.get("records"), "accepted": c.get("accepted"),
                "refused": c.get("refused"), "collateral": c.get("collateral"),
                "dead_lettered": c.get("in_dlq"), "lost": c.get("lost"),
                "reject_rate": self.reject_rate,
                "producer_sees": "; ".join(self.producer_sees()) or (
                    "acknowledged" if self.available else None),
                "not_enforced": ", ".join(self.fidelity.not_enforced) or None,
                "approximate": ", ".join(self.fidelity.approximate) or None}

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        o = self.outcome
        return {"point": self.point.name, "title": self.point.title,
                "where": self.point.where, "granularity": self.point.granularity,
                "caveat": self.point.caveat,
                "available": self.available, "fidelity": self.fidelity.to_dict(),
                "counts": self.counts, "reject_rate": self.reject_rate,
                "refused_by": {} if o is None else o.reasons(REFUSED),
                "collateral_by": {} if o is None else o.reasons(COLLATERAL),
                "dead_lettered_by": {} if o is None else o.reasons(DEAD_LETTERED),
                "answers": [] if o is None else [a.to_dict() for a in o.answers],
                "producers": self.producers,
                "sources": [] if o is None else list(o.sources),
                "behaviour": [] if self.fidelity.export is None else
                list(self.fidelity.export.behaviour)}


@dataclass
class WhatIf:
    """The what-if of one policy on one sample, per enforcement point (:attr:`targets`)."""

    policy: str
    policy_hash: str
    records: int
    batches: int
    now: int
    clock: str
    framing: str
    client_header: str | None
    targets: list[TargetOutcome]
    #: the rule table of the sample's replay under the policy (rows as dicts): what it found
    #: about the rules themselves (:mod:`kqlab.validate.rule_health`)
    rule_rows: tuple[dict[str, Any], ...] = ()

    def target(self, name: str) -> TargetOutcome:
        """The outcome at the point called ``name``."""
        for t in self.targets:
            if t.point.name == name:
                return t
        raise KeyError(f"no enforcement point {name!r} in this what-if")

    def table(self) -> pa.Table:
        """One row per point (:data:`TABLE_COLUMNS`): the numbers side by side."""
        rows = [t.row() for t in self.targets]
        return pa.Table.from_pylist(rows) if rows else pa.table(
            {c: pa.array([], pa.string()) for c in TABLE_COLUMNS})

    def figure(self) -> go.Figure:
        """Grouped bars per point: accepted / refused / collateral / dead-lettered."""
        return whatif_figure(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (what ``kqlab whatif --json`` prints)."""
        return {"policy": self.policy, "policy_hash": self.policy_hash,
                "records": self.records, "batches": self.batches, "now": self.now,
                "clock": self.clock, "framing": self.framing,
                "client_header": self.client_header,
                "targets": [t.to_dict() for t in self.targets],
                "rule_findings": _finding_dicts(self.rule_rows)}

    def _repr_html_(self) -> str:
        return whatif_html(self, figure=False)


def _finding_dicts(rows: Any) -> list[dict[str, str]]:
    """The replay's rule findings as the CLI's JSON documents carry them."""
    from kqlab.validate.rule_health import findings

    return [{"rule": f.rule, "kind": f.kind, "text": f.text} for f in findings(rows)]


def deployment_outcome(replays: SampleReplays, policy: Policy, *,
                       block: Policy | None = None, profile: str | None = None,
                       gate: Policy | None = None, client: Policy | None = None,
                       client_rules: frozenset[str] = frozenset(), dlq: bool = False,
                       who: str = "broker: record policy") -> Outcome:
    """The outcome of one deployment, composed from replays of the sample:

    * ``block`` (default: ``policy`` with every rule observed, the broker's own checks only)
      replayed whole-batch under ``profile`` — the topic's broker, with the record policy or
      proxy in front of it;
    * or ``client`` replayed single-framed, refusing the records that fail ``client_rules``
      before the produce, then the broker's own checks on the rest;
    * then ``gate`` (when given) replayed single-framed behind it, dead-lettering.
    """
    profile = profile or policy.enforcement
    keys = replays.upstream.sample.records.select(["topic", "partition", "offset"])
    if client is not None:
        base = replays.run(observe_all(policy), profile=profile)
        c = replays.run(client, single=True)
        out = in_front(
            c, set(client_rules), base, keys, replays.batch_rows, who="client: serializer",
            error_name="SerializationError (RuleConditionError)", dlq=dlq,
            source=f"replay framing=single: records failing {len(client_rules)} "
                   "contract rule(s) refused before the produce",
            broker_source=f"replay profile={profile} framing={replays.framing}, every rule "
                          "observed: the broker's own checks on the rest")
    else:
        blocked = block if block is not None else observe_all(policy)
        v = replays.run(blocked, profile=profile)
        n = sum(r.mode == "reject" for r in blocked.rules)
        out = whole_batch(v, policy_who=who, source=f"replay profile={profile} framing="
                          f"{replays.framing}, {n} rule(s) rejecting")
    if gate is not None:
        g = replays.run(gate, single=True)
        n = sum(r.mode == "reject" for r in gate.rules)
        out = behind_gate(out, keys, g, source=f"replay framing=single, {n} rule(s) "
                          "rejecting: the gate dead-letters what it rejects")
    return out


def point_outcome(replays: SampleReplays, policy: Policy, p: EnforcementPoint,
                  fidelity: Fidelity, *, dlq_topic: str | None = None) -> Outcome | None:
    """The outcome of ``policy`` deployed at ``p`` alone (None: ``p`` cannot take it)."""
    if not fidelity.available:
        return None
    eff = enforced_policy(policy, fidelity.enforced)
    if p.where == "client":
        rules = frozenset(r.id for r in eff.rules if r.mode == "reject")
        return deployment_outcome(replays, policy, client=eff, client_rules=rules,
                                  dlq=dlq_topic is not None)
    if p.dead_letters:
        return deployment_outcome(replays, policy, gate=eff)
    return deployment_outcome(replays, policy, block=eff, profile=p.profile,
                              who=p.policy_who)


def what_if(policy: Policy, sample: SampleSource | Sequence[SampleSource] | SampleReplays, *,
            now: int | None = None, framing: str = "exact",
            points: Sequence[str] | None = None, client_header: str | None = AUTO,
            dlq_topic: str | None = None, export_options: dict[str, Any] | None = None,
            linger_ms: int = 5, batch_size: int = 16384) -> WhatIf:
    """The what-if of ``policy`` on ``sample`` at every enforcement point (or ``points``).

    Parameters
    ----------
    sample
        What :class:`~kqlab.rollout.replays.SampleReplays` reads (a path, a list of partition
        folders, a snapshot, a records table), or one already loaded (its clock and framing
        are then its own).
    now, framing, linger_ms, batch_size
        The replay's clock and the framing of the whole-batch points (as ``kqlab replay``).
    client_header
        The header naming the producing client (``auto``: the first common one present).
    dlq_topic
        Confluent: the contract copies refused records to this topic (``onFailure: DLQ``).
    export_options
        Passed to the exporters whose fidelity is read (e.g. Confluent's ``schema``).
    """
    replays = sample if isinstance(sample, SampleReplays) else SampleReplays(
        sample, now=now, framing=framing, linger_ms=linger_ms, batch_size=batch_size,
        client_header=client_header)
    chosen = [point(n) for n in points] if points is not None else list(POINTS)
    targets = []
    for p in chosen:
        options = dict(export_options or {})
        if p.exporter == "confluent" and dlq_topic:
            options["dlq_topic"] = dlq_topic
        fid = fidelity_at(p, policy, **options)
        out = point_outcome(replays, policy, p, fid, dlq_topic=dlq_topic)
        targets.append(TargetOutcome(p, fid, out, [] if out is None else
                                     out.by_producer(replays.producers)))
    return WhatIf(policy.name, policy.content_hash(), replays.records, replays.batches,
                  replays.now, replays.clock, replays.framing, replays.producers.header,
                  targets, tuple(replays.run(policy).rules.to_pylist()))


# -- display ------------------------------------------------------------------------------------

def whatif_figure(whatif: WhatIf) -> go.Figure:
    """Per enforcement point (available ones), grouped bars: accepted, refused, collateral
    and dead-lettered records of the sample."""
    shown = [t for t in whatif.targets if t.available]
    from kqlab.rollout.figures import bars_figure  # plotly only when drawn

    return bars_figure([t.point.name for t in shown], [t.counts for t in shown],
                 f"What if {whatif.policy} were enforced at … ({whatif.records:,} records)",
                 "enforcement point")


def whatif_html(whatif: WhatIf, *, figure: bool = True) -> str:
    """The what-if as HTML: the table per enforcement point, what producers are told, which
    rules a point cannot express, and (``figure``) the grouped bars."""
    rows = []
    for t in whatif.targets:
        c = t.counts
        rows.append([t.point.name, t.point.where, t.point.granularity,
                     c.get("accepted"), c.get("refused"), c.get("collateral"),
                     c.get("in_dlq"), t.reject_rate,
                     "; ".join(t.producer_sees()) or ("acknowledged" if t.available else
                                                      f"not available: {t.fidelity.note}"),
                     ", ".join(t.fidelity.not_enforced) or None,
                     ", ".join(t.fidelity.approximate) or None])
    parts = [f"<p class='sub'>policy {esc(whatif.policy)} on {whatif.records:,} records in "
             f"{whatif.batches:,} batches (framing {esc(whatif.framing)}, clock "
             f"{whatif.now}, {esc(whatif.clock)}); every number is a replay of the sample"
             "</p>",
             table(["point", "where", "per", "accepted", "refused", "collateral",
                     "dead-lettered", "refused + collateral", "producer sees",
                     "cannot express", "approximate"], rows)]
    notes = [f"{t.point.name}: {n}" for t in whatif.targets
             for n in (t.point.caveat, t.fidelity.note) if n]
    if notes:
        parts.append("<ul class='sub'>" + "".join(f"<li>{esc(n)}</li>" for n in notes)
                     + "</ul>")
    if figure:
        parts.append(figure_block(whatif.figure(), "kqlab-whatif"))
    return "\n".join(parts)
