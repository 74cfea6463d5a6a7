"""The enforcement points a policy can be deployed to, and which of its rules each enforces.

An enforcement point is where records are judged (the broker, a proxy, the producer's
serializer, a gate behind the topic, a Spark stream), at which granularity (a whole batch, or
each record alone), and which of the policy's rules it can express.  That last part is never
assumed: it is the fidelity the point's exporter declares (:mod:`kqlab.export`), rule by rule —
a rule the export marks ``not expressible`` is not enforced there (the what-if counts it as
observed and says so), an ``approximate`` one is enforced as the replay runs it and flagged.
Points whose enforcement *is* kqlab's validator (the KIP-940/729 broker plugin, the gate, the
Spark enforcer) fall back to every rule when their export cannot be built (e.g. a policy
naming no topics); points run by other engines (Confluent's serializer, Kroxylicious) are then
unavailable, with the exporter's reason.

This module imports nothing heavy (the command line's parser lists the points from it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kqlab.rollout.errors import RolloutError

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.export.base import Export
    from kqlab.policy.model import Policy

__all__ = ["BLOCK_POINTS", "POINTS", "EnforcementPoint", "Fidelity", "enforced_policy",
           "fidelity_at", "observe_all", "point", "staged_rules"]


@dataclass(frozen=True)
class EnforcementPoint:
    """One place a policy can be enforced.

    ``where``: broker, proxy, client, gate or stream; ``granularity``: ``batch`` (a failing
    record refuses its batch) or ``record``; ``exporter``: the :data:`kqlab.export.TARGETS`
    name whose fidelity says which rules it enforces; ``profile``: the enforcement profile the
    replay emulates it with (whole-batch points); ``own_validator``: it runs kqlab's validator
    (so every rule holds when no export can be built); ``dead_letters``: it diverts refused
    records to a dead-letter topic instead of refusing the producer."""

    name: str
    title: str
    where: str
    granularity: str
    exporter: str | None
    profile: str | None = None
    own_validator: bool = False
    dead_letters: bool = False
    #: who answers the producer when the policy refuses a batch (whole-batch points)
    policy_who: str = "broker"
    #: what the sample cannot tell about this point (shown beside its numbers)
    caveat: str | None = None


#: every enforcement point of the what-if, in the order its table lists them
POINTS: tuple[EnforcementPoint, ...] = (
    EnforcementPoint("kip-940", "broker record policy, KIP-940 (INVALID_RECORD 87 with "
                     "per-record errors)", "broker", "batch", "kip", "kip-940",
                     own_validator=True, policy_who="broker: record policy"),
    EnforcementPoint("kip-729", "broker record validator, KIP-729 (INVALID_RECORD 87; "
                     "records of compressed batches appended in place are not seen)",
                     "broker", "batch", "kip", "kip-729", own_validator=True,
                     policy_who="broker: record validator"),
    EnforcementPoint("kip-686", "broker records policy, KIP-686 (POLICY_VIOLATION 44, the "
                     "first failing record's message)", "broker", "batch", None, "kip-686",
                     own_validator=True, policy_who="broker: records policy"),
    EnforcementPoint("confluent", "Confluent data contract (the serializer's rules, per "
                     "record, before the produce)", "client", "record", "confluent",
                     caveat="only producers serializing with the contract's rules are "
                     "checked: one writing raw bytes bypasses them"),
    EnforcementPoint("kroxylicious", "Kroxylicious RecordValidation filter (proxy, the whole "
                     "request)", "proxy", "batch", "kroxylicious", "kip-940",
                     policy_who="proxy",
                     caveat="judged per batch: a ProduceRequest can carry several batches "
                     "(and partitions), all refused with it, so the proxy refuses at least "
                     "this much"),
    EnforcementPoint("gate", "kqlab validating gate (per record, behind the raw topic: "
                     "forwards or dead-letters)", "gate", "record", "gate",
                     own_validator=True, dead_letters=True),
    EnforcementPoint("spark-enforcer", "Spark Structured Streaming enforcer (the gate's "
                     "judge in each micro-batch's tasks, per record)", "stream", "record",
                     "spark-streaming", own_validator=True, dead_letters=True),
)


#: the points a rollout plan can block at (whole batch in the produce path, or the client)
BLOCK_POINTS = ("kip-940", "kip-729", "kip-686", "kroxylicious", "confluent")


def point(name: str) -> EnforcementPoint:
    """The :class:`EnforcementPoint` called ``name``; :class:`RolloutError` lists them."""
    for p in POINTS:
        if p.name == name:
            return p
    raise RolloutError(f"unknown enforcement point {name!r}; one of "
                       f"{', '.join(p.name for p in POINTS)}")


@dataclass
class Fidelity:
    """Which rules a point enforces: ``enforced`` (reject rules it expresses, the implicit
    ``decode:value`` included), ``approximate`` (rule → how), ``not_enforced`` (reject rules
    it cannot express: rule → why), the export it came from (None: no exporter, or it could
    not be built: ``note`` says which), and ``available`` (False: the point cannot take the
    policy at all, ``note`` says why)."""

    enforced: frozenset[str]
    approximate: dict[str, str] = field(default_factory=dict)
    not_enforced: dict[str, str] = field(default_factory=dict)
    export: Export | None = None
    note: str | None = None
    available: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {"available": self.available, "enforced": sorted(self.enforced),
                "approximate": dict(self.approximate), "not_enforced": dict(self.not_enforced),
                "exporter": None if self.export is None else self.export.target,
                "note": self.note}


def staged_rules(policy: Policy) -> list[Any]:
    """The rules a deployment can switch: the policy's ``reject`` rules, after the replay's
    implicit ``decode:value`` rule when it adds one (a value that does not decode is refused
    whatever follows)."""
    from kqlab.validate.replayer import with_implicit_rules

    return [r for r in with_implicit_rules(policy).rules if r.mode == "reject"]


def enforced_policy(policy: Policy, enforced: frozenset[str] | set[str] | None) -> Policy:
    """``policy`` (the implicit decode rule written in) with only the ``reject`` rules in
    ``enforced`` still rejecting (None: all of them); the others are observed, so their
    failures stay counted but refuse nothing."""
    from kqlab.validate.replayer import with_implicit_rules

    full = with_implicit_rules(policy)
    rules = tuple(r if r.mode != "reject" or enforced is None or r.id in enforced
                  else replace(r, mode="observe") for r in full.rules)
    return full.with_rules(rules)


def observe_all(policy: Policy) -> Policy:
    """``policy`` with every rule observed: what a broker without a record policy does (its
    own checks only), the rules' failures still counted."""
    return enforced_policy(policy, frozenset())


def fidelity_at(p: EnforcementPoint, policy: Policy, **options: Any) -> Fidelity:
    """Which of ``policy``'s reject rules ``p`` enforces, from its exporter's fidelity
    (``options`` go to the exporter, e.g. ``dlq_topic`` or ``schema`` for Confluent)."""
    from kqlab.export import APPROXIMATE, NOT_EXPRESSIBLE, ExportError, export

    rules = {r.id for r in staged_rules(policy)}
    if p.exporter is None:
        return Fidelity(frozenset(rules), note=f"no exporter for {p.name}: every rule as the "
                        f"replay's {p.profile} profile runs it")
    try:
        ex = export(policy, p.exporter, **options)
    except ExportError as exc:
        if p.own_validator:
            return Fidelity(frozenset(rules), note=f"the {p.exporter} export cannot be built "
                            f"({exc}); it runs kqlab's validator, so every rule as the replay "
                            "runs it")
        return Fidelity(frozenset(), note=str(exc), available=False)
    enforced, approx, missing = set(), {}, {}
    for f in ex.fidelity:
        if f.rule not in rules:
            continue  # observe rules, and the implicit rows the replay never runs
        if f.status == NOT_EXPRESSIBLE:
            missing[f.rule] = f.how
            continue
        enforced.add(f.rule)
        if f.status == APPROXIMATE:
            approx[f.rule] = f.how
    note = "as the gate: the same verdict core per record" if p.name == "spark-enforcer" \
        else None
    return Fidelity(frozenset(enforced), approx, missing, ex, note)
