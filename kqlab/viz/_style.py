"""The look every figure shares: one colour per rule across all figures of a replay, a
template without backgrounds (so a figure sits on JupyterLab's light or dark theme, a VS Code
notebook or the report's page without a white box), and no fixed size.

Colours
-------
A *reason* (a policy rule id, ``broker:<step>``, or an implicit reason like ``decode:value``)
gets its colour from :class:`RuleColors`, and every figure colours a reason through it:

* policy rules in the policy's order (``verdicts.rules``), from :data:`RULE_PALETTE` — the
  order a replay was run with, so the reasons figure, the offsets bands, the timeline and the
  impact bars of one replay agree, and an edit that appends a rule keeps the others' colours;
* broker checks from their own muted palette (:data:`BROKER_PALETTE`), by the step's place in
  the validation spec, so ``broker:R4`` is the same colour in every replay and every report;
* anything else (implicit reasons) from :data:`EXTRA_PALETTE`, by a stable hash of its name.

Figures take ``colors=`` to share one map across replays (e.g. a session that keeps colours
while rules are removed and re-added); by default they build it from the verdicts.

Theme
-----
The figures carry :data:`TEMPLATE` (registered with plotly as ``"kqlab"``): transparent paper
and plot, a grey for text and grid lines legible on white and on near-black, and the rule
palette as colorway.  The widgets' figure view (:mod:`kqlab.widgets`) goes further and sets
text and grid colours from the page's own theme (:data:`THEMES`) when it draws; nothing here
assumes a background.  Widths are never fixed: plotly fills its container (``autosize``) and
the views pass ``responsive`` so figures follow the notebook's width.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.validate.view import VerdictsView

__all__ = ["BROKER_PALETTE", "COLORS", "CONFIG", "EXTRA_PALETTE", "OTHER", "RULE_PALETTE",
           "TEMPLATE", "TEMPLATE_NAME", "THEMES", "RuleColors", "register_template",
           "rule_colors"]

#: outcome colours, shared by every figure (mid-lightness: legible on light and dark pages)
COLORS = {"accepted": "#4c9a6a", "rejected": "#c0392b", "collateral": "#e6a23c",
          "undetermined": "#8e8e8e", "not_enforced": "#9aa7b8"}
#: the policy's rules, in policy order (colour-blind friendly first, then distinct hues; none
#: is the outcome red or orange, nor black or white, so every one shows on either theme)
RULE_PALETTE = ("#0072B2", "#CC79A7", "#009E73", "#56B4E9", "#9467BD", "#D55E00", "#17BECF",
                "#BCBD22", "#E377C2", "#2CA02C")
#: broker checks: muted earth and slate tones, apart from the rules' hues
BROKER_PALETTE = ("#8C564B", "#7F7F9F", "#A6761D", "#6B8E9B", "#B5838D", "#8A8A5C",
                  "#9C6B4E", "#5F7A99")
#: implicit reasons (``decode:value``...): neither a policy rule nor a broker check
EXTRA_PALETTE = ("#AD8BC9", "#7BA05B", "#C98B5A", "#5AA5A0")
#: "other reasons" and mixed spans
OTHER = "#8a8a8a"

#: the broker's steps in spec order (``kqlab.kafka.checks.CHECKS``), written out so that
#: drawing a figure does not import the broker checks; a test keeps the two equal
BROKER_STEPS = ("S1", "S3", "A1", "A1'", "A4.a", "A4.b", "A4.c", "A4.d", "B0", "B3", "B4",
                "C1", "C2", "C3", "C4", "Z0", "D1", "D2.a", "D2.b", "D2.c", "D2.d", "D2.e",
                "D2.f", "D2.g", "D2.h", "D3", "D3.codec", "D3.varint", "D3.alloc",
                "D3.rebuild", "D3.corrupt", "R1", "R3", "R4", "D5", "E1", "E2", "F1", "F3",
                "F4", "F5", "F6", "F7", "P")
_STEP_INDEX = {s: i for i, s in enumerate(BROKER_STEPS)}

#: text and grid colours per page theme; the static template uses ``neutral``, the widgets'
#: figure view picks ``light`` or ``dark`` from the page it is drawn in
THEMES: dict[str, dict[str, str]] = {
    "neutral": {"text": "#7c828c", "grid": "rgba(128,128,128,0.22)",
                "zero": "rgba(128,128,128,0.45)"},
    "light": {"text": "#2a3240", "grid": "rgba(0,0,0,0.09)", "zero": "rgba(0,0,0,0.25)"},
    "dark": {"text": "#d5d9e0", "grid": "rgba(255,255,255,0.12)",
             "zero": "rgba(255,255,255,0.3)"},
}

TEMPLATE_NAME = "kqlab"


def _axis(theme: Mapping[str, str]) -> dict[str, Any]:
    return {"gridcolor": theme["grid"], "linecolor": theme["grid"],
            "zerolinecolor": theme["zero"], "ticks": "", "automargin": True,
            "title": {"standoff": 10}}


#: the layout of the ``kqlab`` template: no backgrounds, neutral greys, the rule colorway
TEMPLATE: dict[str, Any] = {"layout": {
    "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)",
    "font": {"color": THEMES["neutral"]["text"]},
    "colorway": list(RULE_PALETTE),
    "autosize": True,
    "hovermode": "closest", "hoverlabel": {"align": "left"},
    "legend": {"bgcolor": "rgba(0,0,0,0)"},
    "xaxis": _axis(THEMES["neutral"]), "yaxis": _axis(THEMES["neutral"]),
}}

#: the plotly config every view passes: fill the container and follow its resizes
CONFIG = {"displaylogo": False, "responsive": True}


def register_template() -> str:
    """Register :data:`TEMPLATE` with plotly as ``"kqlab"`` (once) and return the name."""
    import plotly.graph_objects as go
    import plotly.io as pio

    if TEMPLATE_NAME not in pio.templates:
        pio.templates[TEMPLATE_NAME] = go.layout.Template(TEMPLATE)
    return TEMPLATE_NAME


class RuleColors:
    """Reason -> colour, the same in every figure that uses one map.

    Policy rules take :data:`RULE_PALETTE` in the order they are added (first added, first
    colour; the palette repeats beyond ten rules); a rule keeps its colour once it has one.
    Broker checks and implicit reasons do not depend on the order (see the module doc).

    Examples
    --------
    >>> c = RuleColors(["trace-id", "amount"])
    >>> c["trace-id"], c["amount"], c["broker:R4"] == RuleColors()["broker:R4"]
    ('#0072B2', '#CC79A7', True)
    """

    def __init__(self, rules: Iterable[str] = ()):
        self._rules: dict[str, str] = {}
        self.add(rules)

    def add(self, rules: Iterable[str]) -> RuleColors:
        """Give every new policy rule id of ``rules`` the next colour; returns ``self``."""
        for rule in rules:
            if rule not in self._rules and not _fixed(rule):
                self._rules[rule] = RULE_PALETTE[len(self._rules) % len(RULE_PALETTE)]
        return self

    def keep(self, rules: Iterable[str]) -> RuleColors:
        """Give every new policy rule id of ``rules`` (a policy's current rules) the next
        *free* colour; returns ``self``.

        What an authoring session calls after every edit: a rule keeps the colour it has for
        the map's life (so removing a rule shifts nobody's colour, and undoing the removal
        brings the same colour back), and a new rule takes the first palette colour no rule
        ever had, then — once all ten were handed out — the first one no rule of ``rules``
        shows, so two rules on screen share a colour only when more than ten are."""
        rules = list(rules)
        for rule in rules:
            if rule in self._rules or _fixed(rule):
                continue
            given = set(self._rules.values())
            shown = {self._rules[r] for r in rules if r in self._rules}
            free = [c for c in RULE_PALETTE if c not in given] or \
                [c for c in RULE_PALETTE if c not in shown]
            self._rules[rule] = free[0] if free else \
                RULE_PALETTE[len(self._rules) % len(RULE_PALETTE)]
        return self

    def follow(self, verdicts: VerdictsView) -> RuleColors:
        """Add the rules of ``verdicts`` (policy order); returns ``self``."""
        return self.add(verdicts.rules.column("rule").to_pylist())

    def __getitem__(self, reason: str) -> str:
        fixed = _fixed(reason)
        if fixed:
            return fixed
        if reason not in self._rules:  # a rule the map was not told about: next colour
            self.add([reason])
        return self._rules[reason]

    def __contains__(self, reason: object) -> bool:
        return reason in self._rules

    def as_dict(self) -> dict[str, str]:
        """The policy rules' colours so far."""
        return dict(self._rules)


def _fixed(reason: str) -> str | None:
    """The order-free colour of a broker check or an implicit reason (None: a policy rule)."""
    if reason.startswith("broker:"):
        step = reason[len("broker:"):]
        i = _STEP_INDEX.get(step)
        if i is None:
            i = zlib.crc32(step.encode())
        return BROKER_PALETTE[i % len(BROKER_PALETTE)]
    if ":" in reason:  # decode:value, decode:key...
        return EXTRA_PALETTE[zlib.crc32(reason.encode()) % len(EXTRA_PALETTE)]
    return None


def rule_colors(verdicts: VerdictsView, colors: RuleColors | None = None) -> RuleColors:
    """``colors`` (a session's map) following ``verdicts``, or a new map of their rules."""
    return (colors if colors is not None else RuleColors()).follow(verdicts)
