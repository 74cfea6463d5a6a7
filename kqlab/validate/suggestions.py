"""Rule suggestions as data: a proposed rule with what it would do to the sample it came from.

:func:`kqlab.validate.rule_suggestion.suggest` computes them from a sample (statistics by Arrow
kernels, then the policy with every candidate *replayed*, so each count is the verdict core's
own, the number ``kqlab replay`` prints for that rule); this module holds only the results —
:class:`Suggestion`, :class:`Suggestions`, the rejected :class:`RecordRef` examples, the rare
values a value set left out (:class:`LeftOut`), the candidates the policy already has
(:class:`Duplicate`, found by :func:`equivalent`) — and :func:`accept`, which appends chosen
suggestions to a policy as ordinary rules.  Ids are derived from content
(:func:`suggestion_id`), so the same sample always gives the same ids.  Nothing here imports
pyarrow: a widget or a JSON report can hold suggestions without it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kqlab.policy.model import Policy, Rule, thaw
from kqlab.policy.plain_data import PlainData

__all__ = ["Duplicate", "LeftOut", "RecordRef", "Suggestion", "Suggestions", "accept",
           "equivalent", "suggestion_id"]

#: what a suggestion's id starts with (rule ids of accepted suggestions keep it)
ID_PREFIX = "suggest"
_SLUG = re.compile(r"[^a-z0-9._-]+")


def suggestion_id(kind: str, target: str | None = None) -> str:
    """The stable id of a suggested rule: ``suggest.<kind>[.<target>]``.

    A target that is not already a valid id fragment (uppercase, spaces ...) is slugged and
    suffixed with a short hash of the original, so two fields never share an id.

    Examples
    --------
    >>> suggestion_id("field_range", "amount"), suggestion_id("key_required")
    ('suggest.field_range.amount', 'suggest.key_required')
    >>> suggestion_id("header_required", "Trace ID")
    'suggest.header_required.trace-id-c4cbbc'
    """
    if target is None:
        return f"{ID_PREFIX}.{kind}"
    slug = _SLUG.sub("-", target.lower()).strip("-") or "x"
    if slug != target:
        slug += "-" + hashlib.sha256(target.encode()).hexdigest()[:6]
    return f"{ID_PREFIX}.{kind}.{slug}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordRef:
    """A record a suggestion would reject: where it is, and the message it would get."""

    topic: str
    partition: int
    offset: int
    message: str

    def to_dict(self) -> dict[str, PlainData]:
        """Plain data for JSON output."""
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset,
                "message": self.message}


@dataclass(frozen=True, slots=True, kw_only=True)
class LeftOut:
    """A value a suggested value set does not allow because the sample barely carries it."""

    value: str
    count: int
    reason: str

    def to_dict(self) -> dict[str, PlainData]:
        """Plain data for JSON output."""
        return {"value": self.value, "count": self.count, "reason": self.reason}


@dataclass(frozen=True, slots=True, kw_only=True)
class Duplicate:
    """A candidate not proposed because the policy's rule ``rule`` already checks the same."""

    id: str
    rule: str

    def to_dict(self) -> dict[str, PlainData]:
        """Plain data for JSON output."""
        return {"id": self.id, "rule": self.rule}


@dataclass(frozen=True, slots=True, kw_only=True)
class Suggestion:
    """A proposed rule, with what it would do to the sample it came from.

    ``rule`` is a normal catalog :class:`~kqlab.policy.model.Rule` with a stable id;
    ``source`` says where it came from (``sample``, ``schema`` or ``schema+sample``) and
    ``evidence`` what was observed.  The counts are the replay's, for the policy with the
    suggestions appended (its ``rules`` table, what ``kqlab replay`` prints): ``failed`` of
    the ``records`` replayed fail the rule, ``rejected`` of those were rejected,
    ``evaluation_errors`` could not be judged; ``examples`` are the first failing records in
    log order, with the replay's message.  ``left_out`` lists the rare values a value set
    (``field_in``, ``header_values``, ``schema_id_allowed``) does not allow, and why.
    """

    rule: Rule
    source: str
    evidence: str
    records: int
    rejected: int
    failed: int | None = None
    evaluation_errors: int = 0
    examples: tuple[RecordRef, ...] = ()
    left_out: tuple[LeftOut, ...] = ()

    def __post_init__(self) -> None:
        if self.failed is None:
            object.__setattr__(self, "failed", self.rejected)

    @property
    def id(self) -> str:
        """The rule id (``suggest.<kind>[.<target>]``)."""
        return self.rule.id

    @property
    def rejection_rate(self) -> float:
        """Share of the sample's records this rule would reject (0 for an empty sample)."""
        return self.rejected / self.records if self.records else 0.0

    def to_dict(self) -> dict[str, PlainData]:
        """Plain data for ``kqlab suggest --json``."""
        return {"id": self.id, "rule": thaw(self.rule.to_dict()), "source": self.source,
                "evidence": self.evidence, "records": self.records, "failed": self.failed,
                "rejected": self.rejected, "evaluation_errors": self.evaluation_errors,
                "rejection_rate": round(self.rejection_rate, 6),
                "examples": [e.to_dict() for e in self.examples],
                "left_out": [v.to_dict() for v in self.left_out]}


@dataclass(frozen=True, slots=True)
class Suggestions:
    """The suggestions for one sample, in their fixed order (iterable, indexable by id).

    ``records`` is how many records the replay judged; ``outcomes`` the replay's outcome
    counts for the policy with every suggestion appended and ``baseline`` for the policy as
    given (both ``Verdicts.by_outcome()``); ``duplicates`` the candidates the policy already
    checks; ``notes`` what was measured or dropped, and why.
    """

    items: tuple[Suggestion, ...]
    records: int
    settings: dict[str, PlainData] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    duplicates: tuple[Duplicate, ...] = ()
    outcomes: dict[str, int] = field(default_factory=dict)
    baseline: dict[str, int] = field(default_factory=dict)
    #: the rule table of that replay (rows as dicts): what it found about the policy's own
    #: rules (:mod:`kqlab.validate.rule_health`) is said with the suggestions
    rule_rows: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    def __iter__(self) -> Iterator[Suggestion]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, key: int | str) -> Suggestion:
        if isinstance(key, int):
            return self.items[key]
        for s in self.items:
            if s.id == key:
                return s
        raise KeyError(f"no suggestion {key!r}; suggestions: {', '.join(self.ids)}")

    @property
    def ids(self) -> tuple[str, ...]:
        """The suggested rule ids, in order."""
        return tuple(s.id for s in self.items)

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The suggested rules, in order."""
        return tuple(s.rule for s in self.items)

    def by_rate(self) -> tuple[Suggestion, ...]:
        """The suggestions ranked by rejection rate, highest first (ties: fixed order)."""
        return tuple(sorted(self.items, key=lambda s: -s.rejection_rate))

    def accept(self, policy: Policy, ids: Iterable[str] | None = None) -> Policy:
        """``policy`` with the chosen suggestions (all by default) appended; see :func:`accept`."""
        return accept(policy, self, ids)

    def to_dict(self) -> dict[str, PlainData]:
        """The ``kqlab suggest --json`` document."""
        return {"records": self.records, "settings": dict(self.settings),
                "suggestions": [s.to_dict() for s in self.items],
                "duplicates": [d.to_dict() for d in self.duplicates],
                "outcomes": dict(self.outcomes), "baseline": dict(self.baseline),
                "notes": list(self.notes)}


def accept(policy: Policy, suggestions: Iterable[Suggestion], ids: Iterable[str] | None = None
           ) -> Policy:
    """``policy`` with the chosen suggestions' rules appended, in suggestion order.

    ``ids`` picks suggestions by id (``KeyError`` for an unknown one); rules whose id the policy
    already has are left as the policy has them (accepting twice changes nothing).

    Examples
    --------
    >>> s = Suggestion(rule=Rule(id="suggest.key_required", kind="key_required"),
    ...                source="sample", evidence="every record has a key", records=10,
    ...                rejected=0)
    >>> p = accept(Policy(name="orders"), [s])
    >>> [r.id for r in p.rules], [r.id for r in accept(p, [s]).rules]
    (['suggest.key_required'], ['suggest.key_required'])
    """
    items = list(suggestions)
    if ids is not None:
        wanted = list(ids)
        known = {s.id: s for s in items}
        missing = [i for i in wanted if i not in known]
        if missing:
            raise KeyError(f"no suggestion {', '.join(map(repr, missing))}; suggestions: "
                           f"{', '.join(known)}")
        chosen = set(wanted)
        items = [s for s in items if s.id in chosen]
    have = {r.id for r in policy.rules}
    return policy.with_rules([*policy.rules, *(s.rule for s in items if s.id not in have)])


#: parameters whose value is a set (order and repetition carry no meaning)
_SET_PARAMS = frozenset({"values", "ids"})


def equivalent(a: Rule, b: Rule) -> bool:
    """True when ``a`` and ``b`` check the same thing: same kind, same precondition, same
    parameters (catalog defaults filled in, value sets compared as sets).  Ids, messages,
    severity, mode and examples do not change what is checked.

    Examples
    --------
    >>> status = Rule(id="status-known", kind="field_in",
    ...               params={"field": "status", "values": ["NEW", "PAID"]})
    >>> equivalent(status, Rule(id="suggest.field_in.status", kind="field_in",
    ...                         params={"field": "status", "values": ["PAID", "NEW"]}))
    True
    >>> equivalent(status, Rule(id="x", kind="field_in",
    ...                         params={"field": "status", "values": ["NEW"]}))
    False
    """
    if a.kind != b.kind or (a.when or None) != (b.when or None):
        return False
    names = {p.name for p in a.spec.params} | set(a.params) | set(b.params)
    return all(_same(name, a.param(name), b.param(name)) for name in names)


def _same(name: str, x: PlainData, y: PlainData) -> bool:
    if name in _SET_PARAMS and isinstance(x, list | tuple) and isinstance(y, list | tuple):
        return {repr(v) for v in x} == {repr(v) for v in y}
    if isinstance(x, list | tuple) and isinstance(y, list | tuple):
        return len(x) == len(y) and all(_same("", u, v) for u, v in zip(x, y, strict=True))
    if isinstance(x, bool) or isinstance(y, bool):
        return x is y
    return x == y
