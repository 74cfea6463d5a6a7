"""Rule suggestions as data: a proposed rule with what it would do to the sample it came from.

:func:`kqlab.validate.rule_suggestion.suggest` computes them from a sample (statistics by Arrow
kernels, then the policy with every candidate *replayed*, so each count is the verdict core's
own, the number ``kqlab replay`` prints for that rule); this module holds only the results —
:class:`Suggestion`, :class:`Suggestions`, the rejected :class:`RecordRef` examples, the rare
values a value set left out (:class:`LeftOut`), the candidates the policy already has
(:class:`Duplicate`, found by :func:`equivalent`) — and :func:`accept`, which appends chosen
suggestions to a policy as ordinary rules, or makes the edit one proposes.

A candidate for what a policy rule already checks — same kind, same field or header (or,
for kinds with no target, same kind), no precondition — with other parameters is not a
second rule but an **edit** of that rule (:func:`covering`): the suggestion's rule is the
policy's, id, message and mode kept, with the new parameters; ``edits`` names it, ``before``
is the rule as it is and ``before_failed``/``before_rejected`` its counts, so a view shows
the diff (:meth:`Suggestion.diff`) with both counts.  A new rule's id is one a person would
choose (:func:`human_id`: ``amount-range``, ``key-required``), unique in the policy; ids are
derived from content, so the same sample and policy always give the same ids.  Nothing here
imports pyarrow: a widget or a JSON report can hold suggestions without it.
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
           "covering", "equivalent", "human_id", "suggestion_id", "target_of"]

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


#: the id words of the kinds that have no target
_PLAIN = {"key_required": "key-required", "value_required": "value-required",
          "magic_byte": "magic-byte", "schema_id_registered": "schema-registered",
          "schema_id_allowed": "schema-ids", "key_size": "key-size",
          "value_size": "value-size", "headers_size": "headers-size",
          "record_size": "record-size"}
#: the suffix after a field's (or header's) name
_SUFFIX = {"field_not_null": "present", "field_type": "type", "field_range": "range",
           "field_in": "known", "field_regex": "format", "field_length": "length",
           "header_required": "header", "header_values": "values"}


def human_id(rule: Rule, taken: set[str]) -> str:
    """The id a person would give ``rule`` (``amount-range``), unique among ``taken`` (to
    which it is added): what an accepted suggestion is called, never ``suggest.<kind>``.

    Examples
    --------
    >>> human_id(Rule(id="suggest.field_range.amount", kind="field_range",
    ...               params={"field": "customer.Amount"}), set())
    'customer-amount-range'
    >>> human_id(Rule(id="suggest.key_required", kind="key_required"), {"key-required"})
    'key-required-2'
    """
    target = target_of(rule)
    if rule.kind in _PLAIN or target is None:
        base = _PLAIN.get(rule.kind, rule.kind.replace("_", "-"))
    else:
        slug = re.sub(r"[^a-z0-9]+", "-", target.lower()).strip("-") or "field"
        base = f"{slug}-{_SUFFIX.get(rule.kind, rule.kind.replace('_', '-'))}"
    out, n = base, 2
    while out in taken:
        out, n = f"{base}-{n}", n + 1
    taken.add(out)
    return out


def target_of(rule: Rule) -> str | None:
    """What a rule checks within its kind: its ``field`` (field kinds) or header ``name``;
    None for kinds with no target (sizes, key/value presence, the wire checks)."""
    target = rule.params.get("field", rule.params.get("name"))
    return target if isinstance(target, str) else None


def covering(policy_rules: Iterable[Rule], candidate: Rule) -> Rule | None:
    """The policy rule a candidate would be a second copy of: the first without a ``when``
    precondition of the same kind and target (:func:`target_of`).  A suggestion for it is an
    edit of that rule, not another rule; a conditional rule checks something narrower and
    covers nothing.

    >>> amount = Rule(id="amount-positive", kind="field_range",
    ...               params={"field": "amount", "min": 0.01})
    >>> covering([amount], Rule(id="x", kind="field_range",
    ...                         params={"field": "amount", "min": 0, "max": 1000})).id
    'amount-positive'
    >>> covering([amount], Rule(id="y", kind="field_range", params={"field": "qty"})) is None
    True
    """
    target = target_of(candidate)
    return next((r for r in policy_rules if r.kind == candidate.kind and r.when is None
                 and target_of(r) == target), None)


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

    An edit of a policy rule (``edits``: its id, the suggestion's id too) carries the rule as
    it is (``before``) and its counts in the replay of the policy as given
    (``before_failed``, ``before_rejected``); :meth:`diff` is what changes.
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
    edits: str | None = None
    before: Rule | None = None
    before_failed: int = 0
    before_rejected: int = 0

    def __post_init__(self) -> None:
        if self.failed is None:
            object.__setattr__(self, "failed", self.rejected)

    @property
    def id(self) -> str:
        """The rule id: a new rule's (:func:`human_id`), or the id of the rule it edits."""
        return self.rule.id

    def diff(self) -> dict[str, tuple[PlainData, PlainData]]:
        """An edit's changed parameters: name -> (old, new), None where one side has none
        ({} for a new rule)."""
        if self.before is None:
            return {}
        old, new = thaw(dict(self.before.params)), thaw(dict(self.rule.params))
        return {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new))
                if old.get(k) != new.get(k)}

    def diff_text(self) -> str:
        """``min: 0.01 → 0, max: (none) → 1000`` (empty for a new rule)."""
        def one(v: PlainData) -> str:
            return "(none)" if v is None else str(v)

        return ", ".join(f"{k}: {one(a)} → {one(b)}" for k, (a, b) in self.diff().items())

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
                "left_out": [v.to_dict() for v in self.left_out],
                "edits": self.edits,
                "diff": {k: list(v) for k, v in self.diff().items()} if self.edits else None,
                "before": {"failed": self.before_failed, "rejected": self.before_rejected}
                if self.edits else None}


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
    """``policy`` with the chosen suggestions' rules appended, in suggestion order, and the
    chosen edits made (the edited rule takes the suggestion's parameters where it stands).

    ``ids`` picks suggestions by id (``KeyError`` for an unknown one); new rules whose id the
    policy already has are left as the policy has them (accepting twice changes nothing).

    Examples
    --------
    >>> s = Suggestion(rule=Rule(id="key-required", kind="key_required"),
    ...                source="sample", evidence="every record has a key", records=10,
    ...                rejected=0)
    >>> p = accept(Policy(name="orders"), [s])
    >>> [r.id for r in p.rules], [r.id for r in accept(p, [s]).rules]
    (['key-required'], ['key-required'])
    >>> old = Rule(id="size", kind="value_size", params={"max": 100})
    >>> e = Suggestion(rule=Rule(id="size", kind="value_size", params={"max": 512}),
    ...                source="sample", evidence="", records=10, rejected=0, edits="size",
    ...                before=old)
    >>> [thaw(r.to_dict()) for r in accept(Policy(name="o", rules=(old,)), [e]).rules]
    [{'id': 'size', 'kind': 'value_size', 'max': 512}]
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
    edits = {s.edits: s.rule for s in items if s.edits is not None}
    rules = [edits.get(r.id, r) for r in policy.rules]
    have = {r.id for r in policy.rules}
    return policy.with_rules([*rules, *(s.rule for s in items
                                        if s.edits is None and s.id not in have)])


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
