"""The production loop's first steps (ARCHITECTURE "Revisions"): what-if per enforcement point,
then a staged rollout plan — all numbers from the verdict core.

This layer sits above :mod:`kqlab.validate` (it replays the sample) and :mod:`kqlab.export`
(each point's exporter says which rules it can express; a plan's stages are exported):

* :func:`what_if` — one policy on one sample at every enforcement point side by side: the
  broker's record policy per KIP-940/729/686 (whole batch), the Confluent serializer's data
  contract (per record, before the produce), the Kroxylicious proxy (whole request), the gate
  and the Spark enforcer (per record, behind the topic: forward or dead-letter).  Records
  refused, collateral, what producers are told, what reaches consumers and the DLQ, and which
  rules a point cannot express (:mod:`kqlab.rollout.whatif`);
* :func:`rollout_plan` — observe → dead-letter → block, rule by rule, each stage with its
  predicted reject rate and collateral, the producers it breaks first and its exported configs
  (:mod:`kqlab.rollout.plan`);
* :func:`rollout_section` — both as the HTML report's section; figures in
  :mod:`kqlab.rollout.figures` (drawn by each object's ``figure()``).

Names are imported on first use (``import kqlab.rollout`` loads no pyarrow).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "what_if": "kqlab.rollout.whatif",
    "WhatIf": "kqlab.rollout.whatif",
    "TargetOutcome": "kqlab.rollout.whatif",
    "rollout_plan": "kqlab.rollout.plan",
    "RolloutPlan": "kqlab.rollout.plan",
    "RulePlan": "kqlab.rollout.plan",
    "Stage": "kqlab.rollout.plan",
    "POINTS": "kqlab.rollout.points",
    "EnforcementPoint": "kqlab.rollout.points",
    "SampleReplays": "kqlab.rollout.replays",
    "RolloutError": "kqlab.rollout.errors",
    "Outcome": "kqlab.rollout.outcome",
    "Answer": "kqlab.rollout.outcome",
    "whatif_figure": "kqlab.rollout.whatif",
    "plan_figure": "kqlab.rollout.plan",
    "rollout_section": "kqlab.rollout.section",
}

__all__ = ["POINTS", "Answer", "EnforcementPoint", "Outcome", "RolloutError", "RolloutPlan",
           "RulePlan", "SampleReplays", "Stage", "TargetOutcome", "WhatIf", "plan_figure",
           "rollout_plan", "rollout_section", "what_if", "whatif_figure"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kqlab.rollout' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # pragma: no cover
    from kqlab.rollout.errors import RolloutError
    from kqlab.rollout.outcome import Answer, Outcome
    from kqlab.rollout.plan import RolloutPlan, RulePlan, Stage, plan_figure, rollout_plan
    from kqlab.rollout.points import POINTS, EnforcementPoint
    from kqlab.rollout.replays import SampleReplays
    from kqlab.rollout.section import rollout_section
    from kqlab.rollout.whatif import TargetOutcome, WhatIf, what_if, whatif_figure
