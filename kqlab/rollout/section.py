"""The report's rollout section: a what-if, a plan, or both, each rendered by itself.

Built from those objects only (whose numbers are the replays'), never from a
:class:`~kqlab.validate.view.VerdictsView`, so :func:`kqlab.report` adds it only when asked
(``rollout=``): a report without it is unchanged, whichever engine replayed.
"""

from __future__ import annotations

from typing import Any

from kqlab.rollout.plan import RolloutPlan, plan_html
from kqlab.rollout.whatif import WhatIf, whatif_html

__all__ = ["rollout_section"]


def rollout_section(rollout: WhatIf | RolloutPlan | tuple[Any, ...] | list[Any]) -> str:
    """The report's rollout section (``<h2>`` headings included) for a what-if, a plan, or
    both (a tuple or list of them)."""
    items = list(rollout) if isinstance(rollout, tuple | list) else [rollout]
    parts = []
    for item in items:
        if isinstance(item, WhatIf):
            parts += ["<h2>What if: per enforcement point</h2>", whatif_html(item)]
        elif isinstance(item, RolloutPlan):
            parts += ["<h2>Staged rollout plan</h2>", plan_html(item)]
        else:
            raise TypeError(f"a rollout section shows a WhatIf or a RolloutPlan, not a "
                            f"{type(item).__name__}")
    return "\n".join(parts)
