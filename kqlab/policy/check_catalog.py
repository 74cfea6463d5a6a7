"""The sample-check catalog: every kind of ``checks:`` entry declared once.

Rules judge one record; sample checks judge the sample as a whole (records per window, the
newest record's age, a field's null share, repeated keys, distinct values, a statistic,
the share of records a rule rejects, drift against a baseline sample, new schemas).  As for
rules (:mod:`kqlab.policy.catalog`), the policy layer only *declares* them — which parameters
a kind takes, which thresholds, whether it may be windowed (``window``) and grouped (``by``)
and what its observed value measures — so the loader, the JSON Schema and every engine read
one declaration; :mod:`kqlab.validate.sample_checks` computes them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from kqlab.policy.catalog import Param
from kqlab.policy.plain_data import PlainData

__all__ = ["BY_HEADER", "BY_PARTITION", "CHECK_KINDS", "DURATION", "DURATION_UNITS",
           "STATS", "CheckKind", "by_target", "check_kind", "duration_ms"]

#: ``window: 10m``: a positive whole number and a unit
DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
DURATION = re.compile(r"([0-9]+)(" + "|".join(sorted(DURATION_UNITS, key=len, reverse=True))
                      + r")\Z")
#: ``stat:`` of a ``stat`` check
STATS = ("mean", "min", "max", "stddev", "p50", "p95", "p99")
#: ``by: partition`` groups by topic-partition; ``by: header:<name>`` by a header's value;
#: anything else (``by: customer.country``, or explicitly ``field:customer.country``) by a
#: field of the decoded value
BY_PARTITION = "partition"
BY_HEADER = "header:"
BY_FIELD = "field:"


def duration_ms(text: str) -> int | None:
    """Milliseconds of a duration (``10m`` → 600000); None when it is not one (or is zero).

    Examples
    --------
    >>> duration_ms("10m"), duration_ms("1h"), duration_ms("500ms"), duration_ms("ten")
    (600000, 3600000, 500, None)
    """
    m = DURATION.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    ms = int(m.group(1)) * DURATION_UNITS[m.group(2)]
    return ms if ms > 0 else None


def by_target(by: str) -> tuple[str, str]:
    """What ``by`` groups on: ``("partition", "")``, ``("header", name)`` or
    ``("field", path)``.

    Examples
    --------
    >>> by_target("partition"), by_target("header:region"), by_target("customer.country")
    (('partition', ''), ('header', 'region'), ('field', 'customer.country'))
    """
    if by == BY_PARTITION:
        return "partition", ""
    if by.startswith(BY_HEADER):
        return "header", by[len(BY_HEADER):]
    if by.startswith(BY_FIELD):
        return "field", by[len(BY_FIELD):]
    return "field", by


@dataclass(frozen=True, slots=True)
class CheckKind:
    """A sample-check kind: its parameters (thresholds among them), whether it may be
    windowed and grouped, and the name of what its observed value measures."""

    name: str
    doc: str
    params: tuple[Param, ...]
    #: the threshold parameters; a check must give at least one of them
    thresholds: tuple[str, ...]
    #: what ``observed`` measures (``records``, ``age_ms``, ``null_rate``, ``psi`` ...); for
    #: ``stat`` the statistic's own name
    metric: str
    windowed: bool = True
    grouped: bool = True
    #: thresholds that are shares of records (0 to 1)
    rates: bool = False

    def param(self, name: str) -> Param | None:
        """The parameter called ``name``, or None."""
        return next((p for p in self.params if p.name == name), None)

    def minimal_params(self, params: Mapping[str, PlainData]) -> dict[str, PlainData]:
        """``params`` in catalog order without those equal to their default."""
        out: dict[str, PlainData] = {}
        for p in self.params:
            if p.name in params:
                value = params[p.name]
                if not (value == p.default and type(value) is type(p.default)):
                    out[p.name] = value
        return out


_FIELD = Param("field", "str", required=True,
               doc="dotted path into the decoded value, e.g. customer.id")
_BASELINE = Param("baseline", "str", required=True,
                  doc="the baseline sample: a saved snapshot or a log directory, relative to "
                      "the policy file")


def _rate(name: str, doc: str) -> Param:
    return Param(name, "number", doc=doc + " (a share of records, 0 to 1: 0.05 is 5 %)")


CHECK_KINDS: dict[str, CheckKind] = {k.name: k for k in (
    CheckKind("volume", "Records per window (per by group): a silent partition or a burst.",
              (Param("min", "int", doc="fewest records a window may hold"),
               Param("max", "int", doc="most records a window may hold")),
              ("min", "max"), "records"),
    CheckKind("freshness", "Age of the newest record (per by group) against now: stale data.",
              (Param("now", "int", doc="epoch ms to measure the age against (default: the "
                                       "replay's clock, the sample's own)"),
               Param("max_age_ms", "int", required=True,
                     doc="oldest the newest record may be, in milliseconds")),
              ("max_age_ms",), "age_ms", windowed=False),
    CheckKind("null_rate", "Share of records with the field null or missing.",
              (_FIELD, _rate("min", "smallest allowed share"),
               _rate("max", "largest allowed share")),
              ("min", "max"), "null_rate", rates=True),
    CheckKind("duplicate_rate", "Share of records whose key (of: key) or field repeats a "
                                "record before it in the window.",
              (Param("of", "str", required=True, doc="key, or a dotted path into the decoded "
                                                     "value"),
               _rate("max", "largest allowed share")),
              ("max",), "duplicate_rate", rates=True),
    CheckKind("distinct", "Distinct non-null values of a field.",
              (_FIELD, Param("min", "int", doc="fewest distinct values"),
               Param("max", "int", doc="most distinct values")),
              ("min", "max"), "distinct"),
    CheckKind("stat", "A statistic of a numeric field: mean, min, max, stddev (sample), p50, "
                      "p95, p99 (linear interpolation between exact values).",
              (Param("stat", "str", required=True, doc=" | ".join(STATS), choices=STATS),
               _FIELD, Param("min", "number", doc="smallest allowed statistic"),
               Param("max", "number", doc="largest allowed statistic")),
              ("min", "max"), "stat"),
    CheckKind("reject_rate", "Share of records a named rule fails (any mode), or without "
                             "rule: records the replay refuses (rejected or collateral).",
              (Param("rule", "str", doc="a rule id of the policy (default: the whole policy)"),
               _rate("min", "smallest allowed share"), _rate("max", "largest allowed share")),
              ("min", "max"), "reject_rate", rates=True),
    CheckKind("drift", "Population stability index of a field against a baseline sample "
                       "(numeric: bins at the baseline's quantiles; else categories); new "
                       "categories are listed.",
              (_FIELD, _BASELINE,
               Param("bins", "int", default=10, doc="quantile bins of a numeric field"),
               Param("max_psi", "number", required=True,
                     doc="largest allowed index (0.1: minor shift, 0.25: major)")),
              ("max_psi",), "psi", windowed=False, grouped=False),
    CheckKind("schema_drift", "Schema ids (Confluent framing) or JSON field sets not seen in "
                              "a baseline sample.",
              (_BASELINE,
               Param("max", "int", default=0, doc="new schema ids and field sets allowed")),
              ("max",), "new_shapes", windowed=False, grouped=False),
)}


def check_kind(name: str) -> CheckKind:
    """The declaration of a sample-check kind (``KeyError`` names the known kinds)."""
    try:
        return CHECK_KINDS[name]
    except KeyError:
        raise KeyError(f"unknown check kind {name!r}; kinds: {', '.join(CHECK_KINDS)}") \
            from None
