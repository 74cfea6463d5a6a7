"""Thresholds for a policy's sample checks (``checks:``), proposed from a baseline sample.

Each check's windows (groups) are judged on the baseline as the replay judges them
(:meth:`~kqlab.validate.view.VerdictsView.check_windows`); a threshold side the check has is
proposed at the observed value with a margin — a ``max`` at the ``quantile`` of the
windows' values plus ``margin`` of its magnitude, a ``min`` at the ``1 - quantile`` one
minus it — rounded outwards (whole numbers for counts, 4 significant digits otherwise,
shares kept within 0–1).  Windows the sample covers only in part are left out of a ``min``
(the replay does not hold them to it).

Then the policy with every proposal is replayed on the same sample (only the thresholds
changed: the replayer re-judges its cached partial aggregates), and each proposal carries
how many of the sample's windows it would have failed, with the count under the current
thresholds beside it: both numbers come from the verdict core, never from arithmetic here.
``quantile`` 1 (the default) proposes thresholds the baseline passes; 0.99 tightens them
to flag the worst 1 % of windows like the baseline's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kqlab.policy.model import Check, Policy

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.validate.replayer import Replayer

__all__ = ["ThresholdProposal", "ThresholdSuggestions", "suggest_thresholds"]


@dataclass(frozen=True)
class ThresholdProposal:
    """One proposed threshold: check ``check``'s ``threshold`` (``min``, ``max``,
    ``max_age_ms``, ``max_psi``) from ``current`` to ``proposed``, based on ``basis`` (the
    windows' value at the quantile); of the sample's ``windows``, ``failing_now`` fail that
    side at its current value and ``failing_proposed`` would fail it at the proposed one
    (the check judged on that side alone: ``status_proposed``)."""

    check: str
    kind: str
    threshold: str
    current: float | int | None
    proposed: float | int
    basis: float
    windows: int
    failing_now: int
    failing_proposed: int
    status_proposed: str

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "kind": self.kind, "threshold": self.threshold,
                "current": self.current, "proposed": self.proposed, "basis": self.basis,
                "windows": self.windows, "failing_now": self.failing_now,
                "failing_proposed": self.failing_proposed,
                "status_proposed": self.status_proposed}


@dataclass(frozen=True)
class ThresholdSuggestions:
    """The proposals for a policy's checks, and why some checks got none (``notes``)."""

    proposals: tuple[ThresholdProposal, ...]
    margin: float
    quantile: float
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.proposals)

    def __iter__(self) -> Any:
        return iter(self.proposals)

    def accept(self, policy: Policy) -> Policy:
        """``policy`` with every proposed threshold set."""
        return _with_thresholds(policy, self.proposals)

    def to_dict(self) -> dict[str, Any]:
        return {"margin": self.margin, "quantile": self.quantile,
                "proposals": [p.to_dict() for p in self.proposals], "notes": list(self.notes)}


def suggest_thresholds(sample: Any, policy: Policy, *, margin: float = 0.2,
                       quantile: float = 1.0, now: int | None = None,
                       framing: str | None = None,
                       base_dir: str | Path | None = None) -> ThresholdSuggestions:
    """Propose thresholds for ``policy``'s checks from the baseline ``sample`` (whatever
    :func:`~kqlab.validate.replay` reads, or a :class:`~kqlab.validate.Replayer` to share its
    decoded columns and cached partials).  See the module docstring."""
    from kqlab.validate.replayer import Replayer
    from kqlab.validate.rule_suggestion import _framing_of

    if margin < 0:
        raise ValueError(f"margin is a share of the observed value, >= 0, not {margin}")
    if not 0.5 <= quantile <= 1:
        raise ValueError(f"quantile is between 0.5 and 1 (1: the worst window), not {quantile}")
    if not policy.checks:
        return ThresholdSuggestions((), margin, quantile,
                                    ("the policy has no checks: add a checks: list",))
    replayer = sample if isinstance(sample, Replayer) else Replayer(
        sample, now=now, framing=_framing_of(sample, framing), base_dir=base_dir)
    current = replayer.run(policy)
    results = {r["check"]: r for r in current.checks().to_pylist()}
    drafts: list[tuple[Check, str, float | int, float]] = []
    notes: list[str] = []
    for check in policy.checks:
        row = results[check.id]
        if row["status"] == "not_evaluable":
            notes.append(f"{check.id}: not evaluable on the sample ({row['reason']}): "
                         "no threshold proposed")
            continue
        windows = current.check_windows(check.id).to_pydict()
        for name in check.spec.thresholds:
            if check.params.get(name) is None:
                continue  # only the sides the check has (add one to have it proposed)
            low = name == "min"
            values = [v for v, partial in zip(windows["observed"], windows["partial"],
                                              strict=True)
                      if v is not None and not (low and partial)]
            if not values and row["observed"] is not None:
                values = [row["observed"]]
            if not values:
                notes.append(f"{check.id}: no window with a value for {name}")
                continue
            basis = float(np.quantile(np.asarray(values, float),
                                      1 - quantile if low else quantile, method="linear"))
            if check.kind == "freshness" and basis <= 0:
                notes.append(f"{check.id}: the newest records are as old as the sample's clock "
                             "(age 0): set max_age_ms from how long the topic may stay quiet")
                continue
            drafts.append((check, name, _proposed(check, name, basis, margin), basis))
    now_counts = _failing_per_side(replayer, policy, [(c.id, n, c.params[n])
                                                      for c, n, _, _ in drafts])
    new_counts = _failing_per_side(replayer, policy, [(c.id, n, v) for c, n, v, _ in drafts])
    out = tuple(ThresholdProposal(
        c.id, c.kind, n, _plain(c.params.get(n)), v, basis, int(results[c.id]["windows"] or 0),
        now_counts[c.id, n][0], new_counts[c.id, n][0], new_counts[c.id, n][1])
        for c, n, v, basis in drafts)
    for p in out:
        if p.threshold == "min" and p.proposed == 0:
            notes.append(f"{p.check}: the sample has a window at 0, so a min of 0 is proposed "
                         "(it holds always): the baseline itself has an empty window")
    return ThresholdSuggestions(out, margin, quantile, tuple(notes))


def _failing_per_side(replayer: Replayer, policy: Policy,
                      sides: list[tuple[str, str, Any]]) -> dict[tuple[str, str], tuple[int, str]]:
    """Per ``(check id, threshold)``: failing windows and status of the check judged with
    that threshold side alone at the given value (its other sides open), by replaying the
    policy once per threshold name — only thresholds differ, so the replayer re-judges its
    cached partials."""
    out: dict[tuple[str, str], tuple[int, str]] = {}
    for name in sorted({n for _, n, _ in sides}):
        values = {cid: v for cid, n, v in sides if n == name}
        checks = [replace(c, params={**{k: v for k, v in c.params.items()
                                        if k not in c.spec.thresholds}, name: values[c.id]})
                  for c in policy.checks if c.id in values]
        judged = replayer.run(policy.with_checks(checks)).checks().to_pylist()
        for r in judged:
            out[r["check"], name] = (int(r["failing_windows"] or 0), r["status"])
    return out


def _proposed(check: Check, name: str, basis: float, margin: float) -> float | int:
    """``basis`` widened by ``margin`` of its magnitude, rounded outwards in the type and
    range the threshold takes."""
    low = name == "min"
    value = basis - margin * abs(basis) if low else basis + margin * abs(basis)
    param = check.spec.param(name)
    if param is not None and param.type == "int":
        return max(0, math.floor(value)) if low else math.ceil(value)
    value = _round(value, up=not low)
    if check.spec.rates:
        value = min(1.0, max(0.0, value))
    return value


def _round(value: float, *, up: bool, digits: int = 4) -> float:
    """``value`` to ``digits`` significant digits, rounded up or down."""
    if value == 0 or not math.isfinite(value):
        return value
    scale = 10 ** (digits - 1 - math.floor(math.log10(abs(value))))
    return (math.ceil if up else math.floor)(value * scale) / scale


def _plain(value: Any) -> float | int | None:
    return value if isinstance(value, int | float) else None


def _with_thresholds(policy: Policy, items: Any) -> Policy:
    """``policy`` with ``items`` (``(check id, threshold, value)`` or proposals) set."""
    changes: dict[str, dict[str, Any]] = {}
    for item in items:
        cid, name, value = (item.check, item.threshold, item.proposed) \
            if isinstance(item, ThresholdProposal) else item
        changes.setdefault(cid, {})[name] = value
    return policy.with_checks([replace(c, params={**c.params, **changes[c.id]})
                               if c.id in changes else c for c in policy.checks])
