"""Failures grouped the way a person reads them: one row per rule (and error code) with the
rule's message *template*, how many records failed it that way, and one real example.

A failure's message is rendered from its rule and the values the rule saw (the broker's
check templates, the policy rule's ``message``); a timestamp or an amount in the text makes
every record's message different, so grouping by text lists one rule thirteen times.  Here
each engine groups by ``(rule, code, template)`` itself — the templates are passed as
:meth:`~kqlab.validate.view.VerdictsView.top_failures`' ``masked`` map, the same mechanism
that hides sensitive messages — and the example is the first failing record in log order
(:meth:`~kqlab.validate.view.VerdictsView.examples`), so the answer is equal, byte for byte,
whichever engine replayed.  Templates come from data (the check catalog, the policy), never
from reading messages back.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kqlab.viz._masking import masker

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.policy.model import Policy, Rule
    from kqlab.validate.view import VerdictsView

__all__ = ["FailureGroup", "failure_groups", "message_templates"]

#: shown for reasons whose messages have no template kqlab knows (implicit reasons such as
#: ``decode:value``, or a replay without its policy): their group is the rule itself
VARIES = "(the message varies: see the example)"


class _Keep(dict):  # type: ignore[type-arg]
    """Format fill that keeps unknown fields as ``{name}`` (what varies per record)."""

    def __missing__(self, name: str) -> str:
        return "{" + name + "}"


def _rule_template(rule: Rule) -> str:
    """A policy rule's message with its own parameters filled and the per-record values left
    as ``{value}``-style fields."""
    template = rule.message or rule.spec.message
    fill = _Keep({p.name: rule.param(p.name) for p in rule.spec.params})
    if "min" in fill and fill["min"] is None:
        fill["min"] = "-inf"
    if "max" in fill and fill["max"] is None:
        fill["max"] = "inf"
    fill["rule"] = rule.id
    try:
        return string.Formatter().vformat(template, (), fill)
    except (IndexError, ValueError, AttributeError, TypeError):
        return template


def _broker_checks() -> dict[str, list[tuple[str, frozenset[str]]]]:
    """``broker:<step>`` -> the (template, parameter names) of each of the step's checks."""
    from kqlab.kafka.checks import CHECKS

    by_step: dict[str, list[tuple[str, frozenset[str]]]] = {}
    for check in CHECKS:
        texts = by_step.setdefault(check.rule, [])
        if all(t != check.template for t, _ in texts):
            texts.append((check.template, frozenset(check.params)))
    return by_step


def _broker_templates() -> dict[str, str]:
    """``broker:<step>`` -> the step's message template (several checks of one step: their
    templates joined; :func:`failure_groups` shows the one its example's parameters name)."""
    return {rule: " · or · ".join(t for t, _ in texts)
            for rule, texts in _broker_checks().items()}


def message_templates(policy: Policy | None, reasons: Iterable[str]) -> dict[str, str]:
    """Reason -> its message template, for every reason of ``reasons`` (rule ids of
    ``policy``, ``broker:<step>``; anything else gets :data:`VARIES`)."""
    rules = {r.id: r for r in policy.rules} if policy is not None else {}
    broker: dict[str, str] | None = None
    out = {}
    for reason in reasons:
        if reason in rules:
            out[reason] = _rule_template(rules[reason])
        elif reason.startswith("broker:"):
            broker = broker if broker is not None else _broker_templates()
            out[reason] = broker.get(reason, VARIES)
        else:
            out[reason] = VARIES
    return out


@dataclass(frozen=True)
class FailureGroup:
    """Records that failed ``rule`` with ``code``, told by ``template``; ``example`` is the
    message of the first of them in log order, at ``where`` (topic, partition, offset).
    ``texts`` > 1: the broker step has that many templates, ``template`` is the example's."""

    rule: str
    code: int
    template: str
    records: int
    example: str | None
    where: tuple[str, int, int]
    texts: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"rule": self.rule, "code": self.code, "template": self.template,
                "records": self.records, "example": self.example, "texts": self.texts,
                "topic": self.where[0], "partition": self.where[1], "offset": self.where[2]}


def failure_groups(verdicts: VerdictsView, policy: Policy | None = None, *, limit: int = 50,
                   unmask: bool | None = None) -> list[FailureGroup]:
    """The most frequent failures grouped by rule, code and template, each with one example
    (masked per the policy's sensitive section, like every view)."""
    m = masker(policy, unmask)
    reasons = {*verdicts.rules.column("rule").to_pylist(),
               *verdicts.by_reason().column("reason").to_pylist()}
    templates = message_templates(policy, sorted(reasons))
    hidden = m.templates()
    shown_as = {**templates, **hidden}
    table = verdicts.top_failures(limit, shown_as).to_pylist()
    if not table:
        return []
    firsts = _first_failures(verdicts, table)
    checks = _broker_checks() if any(r["rule"].startswith("broker:") for r in table) else {}
    out = []
    for row in table:
        where = (row["topic"], row["partition"], row["offset"])
        failure = firsts.get((row["rule"], *where))
        if failure is None:  # the rule's first record had another code: look it up
            found = verdicts.lookup(row["partition"], row["offset"], row["topic"])
            failures = found.record["failures"] if found is not None else []
            failure = next((f for f in failures or []
                            if f["rule"] == row["rule"] and f["code"] == row["code"]), None)
        template, texts = row["message"], 1
        step_texts = checks.get(row["rule"], [])
        if len(step_texts) > 1 and row["rule"] not in hidden:
            texts = len(step_texts)
            names = frozenset(k for k, _ in (failure or {}).get("params") or [])
            fits = [t for t, params in step_texts if params == names]
            if len(fits) == 1:  # the check the example's parameters name
                template = fits[0]
        example = failure["message"] if failure is not None else None
        out.append(FailureGroup(rule=row["rule"], code=int(row["code"]), template=template,
                                records=int(row["records"]),
                                example=m.message(row["rule"], example), where=where,
                                texts=texts))
    return out


def _first_failures(verdicts: VerdictsView, groups: list[Mapping[str, Any]]
                    ) -> dict[tuple[str, str, int, int], dict[str, Any]]:
    """(rule, topic, partition, offset) -> the rule's failure on that record, for the first
    failing record of every rule (one query for all rules)."""
    wanted = {g["rule"] for g in groups}
    out = {}
    for rec in verdicts.examples(limit=1).to_pylist():
        rule = rec["example_rule"]
        if rule not in wanted:
            continue
        for f in rec["failures"] or []:
            if f["rule"] == rule:
                out[(rule, rec["topic"], rec["partition"], rec["offset"])] = f
                break
    return out
