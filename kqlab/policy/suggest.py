"""Rule suggestion: propose a starting policy from a sample, each rule with its rejection rate.

:func:`suggest` profiles a sample (a records table, a :class:`~kqlab.validate.Sample`, a
snapshot folder or log segments) decoded with a policy's key/value formats and proposes
catalog rules — the sample's invariants, each *evaluated with the real validator* on that same
sample so it carries the number of records it would reject and up to ``max_examples`` of them
(partition, offset, message).  With an Avro schema source it also derives rules from the
registered schema (non-null fields, types, enums, logical types).  :meth:`Suggestions.accept`
appends the chosen ones to a policy as normal rules.

What is proposed, and the thresholds (the defaults; all are parameters):

* **presence** — ``key_required`` (``allow_empty: false`` when no key is empty) and
  ``value_required`` when at most ``max_rejection`` of the records lack one;
* **wire** — ``magic_byte`` when values are Confluent-framed, ``schema_id_registered`` (with
  a schema source) and ``schema_id_allowed`` listing the ids seen at least ``min_support``
  times (and registered, when a source can say);
* **headers** — ``header_required`` for every header name on all but ``max_rejection`` of the
  records; ``header_values`` for headers with at most ``max_categories`` values that recur;
* **sizes** — ``key_size`` / ``value_size`` / ``headers_size`` with ``max`` = twice the
  (1 - ``max_rejection``) quantile rounded up to a power of two: head-room for growth, while
  the rare outliers (a 70 KB value among 100-byte ones) are exactly what it rejects;
* **fields** (JSON/Avro values) — ``field_not_null`` when at most ``max_rejection`` are null
  or absent; ``field_range`` with ``min: 0`` when at most ``max_rejection`` of the values are
  negative (else minus the power of ten below the ``max_rejection`` quantile) and ``max`` =
  the next power of ten above the (1 - ``max_rejection``) quantile — an order of magnitude of
  head-room, so only unit mix-ups and corrupt values fail — and no ``max`` for identifiers and
  times (names like ``*_id``, ``*_at``, ``ts``, or integers above 1e9), which only grow;
  ``field_in`` for text fields whose values seen at least ``min_support`` times number at
  most ``max_categories``;
* **schema** (Avro) — ``field_not_null`` for non-nullable fields, ``field_type`` for
  non-nullable fields (a nullable one cannot say "string or null"), ``field_in`` for enums,
  ``field_regex`` for ``uuid``, ``field_range`` for ``decimal``; dates and times decode to
  temporal values that have no JSON type, so they get ``field_not_null`` only.

A sample-derived suggestion that would reject more than ``max_rejection`` of the sample is
dropped: such a rule describes a different population, not a defect.  Schema-derived ones are
kept whatever their rate (the schema is the contract; the rate says how far the data is from
it).  Order is fixed — presence, wire, headers, sizes, then fields by path — and ids are
derived from content (``suggest.field_range.amount``), so the same sample always gives the
same suggestions, in the same order, with the same numbers.

The profiling runs on Arrow (``kqlab.validate.profile``, imported on first use so this
module, like the rest of ``kqlab.policy``, does not import pyarrow).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kqlab.policy.model import Policy, Rule, thaw

__all__ = ["RecordRef", "Suggestion", "Suggestions", "accept", "suggest", "suggestion_id"]

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

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset,
                "message": self.message}


@dataclass(frozen=True, slots=True, kw_only=True)
class Suggestion:
    """A proposed rule, with what it would do to the sample it came from.

    ``rule`` is a normal catalog :class:`~kqlab.policy.model.Rule` with a stable id;
    ``source`` says where it came from (``sample``, ``schema`` or ``schema+sample``) and
    ``evidence`` what was observed; ``rejected`` of ``records`` fail it (evaluated by the
    validator's own rule kernels), ``examples`` are the first of them in sample order.
    """

    rule: Rule
    source: str
    evidence: str
    records: int
    rejected: int
    examples: tuple[RecordRef, ...] = ()

    @property
    def id(self) -> str:
        """The rule id (``suggest.<kind>[.<target>]``)."""
        return self.rule.id

    @property
    def rejection_rate(self) -> float:
        """Share of the sample's records this rule would reject (0 for an empty sample)."""
        return self.rejected / self.records if self.records else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``kqlab suggest --json``."""
        return {"id": self.id, "rule": thaw(self.rule.to_dict()), "source": self.source,
                "evidence": self.evidence, "records": self.records, "rejected": self.rejected,
                "rejection_rate": round(self.rejection_rate, 6),
                "examples": [e.to_dict() for e in self.examples]}


@dataclass(frozen=True, slots=True)
class Suggestions:
    """The suggestions for one sample, in their fixed order (iterable, indexable by id)."""

    items: tuple[Suggestion, ...]
    records: int
    settings: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

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

    def to_dict(self) -> dict[str, Any]:
        """The ``kqlab suggest --json`` document."""
        return {"records": self.records, "settings": dict(self.settings),
                "suggestions": [s.to_dict() for s in self.items], "notes": list(self.notes)}


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


def suggest(sample: Any, policy: Policy | None = None, *, now: int | None = None,
            resolver: Any = None, max_rejection: float = 0.01, max_examples: int = 5,
            max_categories: int = 20, min_support: int = 2, schema: bool = True
            ) -> Suggestions:
    """Propose rules from ``sample`` decoded with ``policy``'s formats (see the module doc).

    Parameters
    ----------
    sample
        A records table, a :class:`~kqlab.validate.Sample`, a snapshot folder, or a log
        segment file / partition folder.  Records of transaction-marker batches are left out.
    policy
        Supplies the key/value formats (and schema source) the values are decoded with;
        ``None``: bytes, nothing decoded (no field suggestions).
    now
        The clock for rules that read it (default: the wall clock).
    resolver
        A :class:`~kqlab.serde.SchemaResolver` (default: from ``policy.value.schemas``).
    max_rejection
        Sample-derived suggestions that would reject a larger share are dropped.
    max_examples
        How many rejected records each suggestion names.
    max_categories, min_support
        ``field_in`` / ``header_values`` / ``schema_id_allowed`` list values seen at least
        ``min_support`` times, and only when there are at most ``max_categories`` of them.
    schema
        Also derive rules from the registered Avro schema.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from kqlab.policy import loads_policy
    >>> from kqlab.records import RECORDS_SCHEMA
    >>> rows = [{"topic": "t", "partition": 0, "offset": i, "timestamp": 0,
    ...          "timestamp_type": 0, "key": b"k%d" % i, "batch_offset": i, "batch_index": 0,
    ...          "value": b'{"amount": %d, "status": "%s"}' % (i - (i == 7) * 50, b"NEW"),
    ...          "headers": []} for i in range(200)]
    >>> table = pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA)
    >>> found = suggest(table, loads_policy("kqlab: 1\\nname: p\\nvalue: {format: json}"))
    >>> s = found["suggest.field_range.amount"]
    >>> s.rule.to_dict(), s.rejected, [(e.offset, e.message) for e in s.examples]
    ({'id': 'suggest.field_range.amount', 'kind': 'field_range', 'field': 'amount', 'min': 0,\
 'max': 1000}, 1, [(7, 'amount=-43 is outside [0, 1000]')])
    """
    from kqlab.validate.profile import propose

    if not 0 <= max_rejection <= 1:
        raise ValueError(f"max_rejection is a share of the sample, 0 to 1, not {max_rejection}")
    if max_examples < 0 or max_categories < 1 or min_support < 1:
        raise ValueError("max_examples must be >= 0, max_categories and min_support >= 1")
    return propose(sample, policy or Policy(name="suggested"), now=now, resolver=resolver,
                   max_rejection=max_rejection, max_examples=max_examples,
                   max_categories=max_categories, min_support=min_support, schema=schema)
