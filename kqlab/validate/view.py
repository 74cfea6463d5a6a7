"""One interface to a replay's verdicts, whichever engine produced them.

The local engine (:class:`~kqlab.validate.verdicts.Verdicts`: Arrow tables in this process)
and the Spark engine (:class:`~kqlab.spark.verdicts.SparkVerdicts`: Parquet files read by
Spark) each compute every count and aggregate natively — numpy/Arrow over per-record codes
on one side, Spark aggregations on the other — behind :class:`VerdictsView`.  The views
(:mod:`kqlab.viz`), the HTML report and the widgets take a ``VerdictsView`` and never ask
which engine produced it: ``engine`` is for display only.  Every answer is small (bounded by
reasons, partitions, buckets, spans or a page), except :meth:`VerdictsView.record_reasons`,
the one record-level answer, which the views that compare or regroup records one by one
(policy impact, groups read from the sample's content) ask for.

The tables the methods return, documented once
----------------------------------------------
``by_reason()`` — :data:`REASONS_SCHEMA`, one row per reason (a rule id or
``broker:<check>``), most rejected records first (then most not-enforced failures, then by
name): ``culprit`` records that failed it enforced, ``collateral`` records rejected with a
batch it rejected, ``not_enforced`` failures (observe rules, or a policy the broker would not
apply).  A record's *reason* is its first enforced failure (``code != 0``); a collateral
record's reason is its batch's: the reason of the batch's first culprit.

``timeline(bucket_ms)`` — ``bucket`` (int64, epoch ms of the bucket start), ``total``
records, then one int64 column per top reason (rejected records, the reason's name), then
``other`` and ``collateral`` when non-zero; with the bucket size used.

``top_failures(limit, masked)`` — :data:`TOP_FAILURES_SCHEMA`: the most frequent (rule,
code, message) with ``records`` and one example record (the first in log order).

``examples(rule, limit)`` — the record verdict columns plus ``example_rule``: up to ``limit``
failing records per rule, in log order.

``find(query, start, limit)`` — :class:`RecordPage`: a page of record verdict rows (the
record verdict columns) and how many records match, in the query's order
(:data:`RECORD_ORDERS`: log order by default, or by timestamp, offset or outcome, ties in log
order; either direction) — the explorer's table sorts through it, page by page.

``checks()`` — :data:`~kqlab.validate.sample_checks.CHECK_RESULTS_SCHEMA`: one row per
sample check (``checks:``) with its status (pass, fail, not_evaluable and why), observed
value, thresholds and failing windows; ``check_windows(check)`` — every judged window
(:data:`~kqlab.validate.sample_checks.CHECK_WINDOWS_SCHEMA`).

``by_partition()``, ``by_time(bucket_ms)``, ``by_producer()``, ``by_outcome()``,
``by_error()``, ``by_action()``, ``summary()`` — as documented on
:class:`~kqlab.validate.verdicts.Verdicts` (the same dict and tables from both engines).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from kqlab.errors import KqlabError

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.policy.model import Policy

__all__ = ["OUTCOME_CODES", "REASONS_SCHEMA", "RECORD_ORDERS", "TOP_FAILURES_SCHEMA",
           "OutcomeGroups",
           "RecordLookup", "RecordPage", "RecordQuery", "RecordReasons", "Spans",
           "VerdictsView", "ViewError", "coarsen_spans", "empty_spans", "nice_bucket"]

#: outcome codes of every per-record array (index = code; ``undetermined``: the tables alone
#: could not judge the batch)
OUTCOME_CODES = ("accepted", "rejected", "collateral", "undetermined")
#: the orders :meth:`VerdictsView.find` lists records in: ``log`` (the replay's order), or by
#: ``timestamp``, ``offset`` or ``outcome`` (rejected before collateral), ties in log order
RECORD_ORDERS = ("log", "timestamp", "offset", "outcome")

_REASONS: list[tuple[str, pa.DataType]] = [
    ("reason", pa.string()), ("culprit", pa.int64()), ("collateral", pa.int64()),
    ("not_enforced", pa.int64())]
REASONS_SCHEMA = pa.schema(_REASONS)

_TOP_FAILURES: list[tuple[str, pa.DataType]] = [
    ("rule", pa.string()), ("code", pa.int16()), ("message", pa.string()),
    ("records", pa.int64()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64())]
TOP_FAILURES_SCHEMA = pa.schema(_TOP_FAILURES)

_NICE_MS = (1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000, 1_800_000, 3_600_000,
            3 * 3_600_000, 6 * 3_600_000, 12 * 3_600_000, 86_400_000, 7 * 86_400_000)


class ViewError(KqlabError, ValueError):
    """A view cannot be built from what was given (it needs the sample, or the record is not
    in these verdicts)."""


def nice_bucket(span_ms: int, max_buckets: int) -> int:
    """The smallest round bucket size (1 s, 5 s, ... 1 week, then whole weeks) that cuts
    ``span_ms`` into at most ``max_buckets`` buckets (both engines' timelines choose with it).

    Examples
    --------
    >>> nice_bucket(3_600_000, 100), nice_bucket(10**12, 50) // 86_400_000
    (60000, 238)
    """
    for ms in _NICE_MS:
        if span_ms // ms + 1 <= max_buckets:
            return ms
    week = _NICE_MS[-1]
    return week * (-(-span_ms // (week * max(max_buckets - 1, 1))))


@dataclass
class Spans:
    """Runs of rejected batches per partition, one row per span (the partition × offset view),
    with what the view draws around them.

    A span is a run of consecutive batches of one partition (in offset order, no accepted
    batch in between) that were rejected for one reason (a batch's reason is its first
    culprit's).  Beyond the bound the closest spans of a partition are merged (``merged``);
    merged spans of different reasons get reason -1.
    """

    row: np.ndarray  # partition row (index into ``partitions``)
    start: np.ndarray  # first offset
    end: np.ndarray  # last offset
    reason: np.ndarray  # index into ``labels``, or -1 (no reason known, or mixed when merged)
    batches: np.ndarray
    rejected: np.ndarray
    collateral: np.ndarray
    partitions: list[str]  # ``topic-partition``, sorted
    extent: np.ndarray  # per partition row: (first offset, last offset) of the sample
    merged: bool  # spans were coarsened to stay within the bound
    #: every reason among the failures, in order of first appearance (log order)
    labels: list[str] = field(default_factory=list)
    #: per label: rejected and collateral records charged to it
    reason_records: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: rejected records (culprits) in the sample
    culprits: int = 0
    #: (offset, partition row) of every culprit in log order, when asked for and at most
    #: ``max_points`` of them; else None
    points: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.start)

    def top_reasons(self, limit: int) -> list[int]:
        """Indexes into :attr:`labels` of the ``limit`` reasons charged with the most records
        (ties: first appearance)."""
        counts = self.reason_records
        order = np.argsort(-counts, kind="stable")
        return [int(i) for i in order[:limit] if counts[i] > 0]


def empty_spans(partitions: list[str], extent: np.ndarray, labels: list[str],
                reason_records: np.ndarray, culprits: int = 0,
                points: tuple[np.ndarray, np.ndarray] | None = None) -> Spans:
    """Spans without any run (nothing rejected, or no records)."""
    z = np.zeros(0, np.int64)
    return Spans(z, z, z, z, z, z, z, partitions=partitions, extent=extent, merged=False,
                 labels=labels, reason_records=reason_records, culprits=culprits,
                 points=points)


def coarsen_spans(spans: dict[str, np.ndarray], max_spans: int) -> dict[str, np.ndarray]:
    """Merge neighbouring spans of a partition across the smallest offset gaps until at most
    ``max_spans`` remain (plus one per partition at worst); merged reasons become -1 when
    they differ.  ``spans`` holds the :class:`Spans` arrays ``row`` ... ``collateral``, sorted
    by (row, start); both engines coarsen with this one function."""
    row, start, end = spans["row"], spans["start"], spans["end"]
    same = row[1:] == row[:-1]
    gaps = np.where(same, start[1:] - end[:-1], np.iinfo(np.int64).max)
    need = len(start) - max_spans
    finite = np.flatnonzero(same)
    if need <= 0 or not len(finite):
        return spans
    k = min(need, len(finite)) - 1
    threshold = np.partition(gaps[finite], k)[k]
    join = same & (gaps <= threshold)
    new = np.r_[True, ~join]
    sid = np.cumsum(new) - 1
    ns = int(sid[-1]) + 1
    first = np.flatnonzero(new)
    last = np.r_[first[1:], len(start)] - 1
    reason = spans["reason"]
    rmin = np.full(ns, np.iinfo(np.int64).max)
    rmax = np.full(ns, np.iinfo(np.int64).min)
    np.minimum.at(rmin, sid, reason)
    np.maximum.at(rmax, sid, reason)
    return {
        "row": row[first], "start": start[first], "end": end[last],
        "reason": np.where(rmin == rmax, rmin, -1),
        "batches": np.bincount(sid, weights=spans["batches"], minlength=ns).astype(np.int64),
        "rejected": np.bincount(sid, weights=spans["rejected"], minlength=ns).astype(np.int64),
        "collateral": np.bincount(sid, weights=spans["collateral"], minlength=ns).astype(
            np.int64),
    }


@dataclass
class OutcomeGroups:
    """Records per outcome per group (e.g. per producer): ``counts[i, j]`` records of group
    ``labels[i]`` with outcome :data:`OUTCOME_CODES` ``[j]`` (shape ``(len(labels), 4)``)."""

    labels: list[str]
    counts: np.ndarray


@dataclass
class RecordReasons:
    """Per record, in the engine's log order: its coordinates (``keys``: topic, partition,
    offset), ``outcome`` (int8 index into :data:`OUTCOME_CODES`) and ``reason`` (int64 index
    into ``labels``, -1 for accepted records and rejections without an enforced failure)."""

    keys: pa.Table
    outcome: np.ndarray
    reason: np.ndarray
    labels: list[str]


@dataclass(frozen=True)
class RecordQuery:
    """Which refused (rejected or collateral) records to list: failing ``reason`` (a rule id
    or ``broker:<check>``, any enforcement), ``collateral`` only, one ``topic`` and/or
    ``partition``, inclusive ``offsets`` and ``time`` (epoch ms) ranges (None: open); and in
    which ``order`` (:data:`RECORD_ORDERS`), ``descending`` or not.

    ``errors``: instead the records a rule could not judge (a failure whose ``status`` is
    ``error``; of rule ``reason`` when given), whatever their outcome — an observe rule's
    errored records are appended, and are still to be found."""

    reason: str | None = None
    collateral: bool = False
    errors: bool = False
    topic: str | None = None
    partition: int | None = None
    offsets: tuple[int | None, int | None] = (None, None)
    time: tuple[int | None, int | None] = (None, None)
    order: str = "log"
    descending: bool = False

    def __post_init__(self) -> None:
        if self.order not in RECORD_ORDERS:
            raise ViewError(f"unknown order {self.order!r}: one of {', '.join(RECORD_ORDERS)}")

    def unordered(self) -> RecordQuery:
        """The same filters in log order (what the number of matches depends on)."""
        return replace(self, order="log", descending=False)


@dataclass
class RecordPage:
    """One page of :meth:`VerdictsView.find`: record verdict rows in log order, and how many
    records match the query in all."""

    rows: pa.Table
    matches: int


@dataclass
class RecordLookup:
    """One record's verdict (a row of the record verdicts, as a dict), its batch's verdict
    (None when the batch verdicts do not hold it) and the failures of every record of its
    batch (``rule``, ``code``, ``message``, ...: the broker's batch answer repeats them, so a
    view masking one rule's messages must know them all)."""

    record: dict[str, Any]
    batch: dict[str, Any] | None
    batch_failures: list[dict[str, Any]]


class VerdictsView(Protocol):
    """A replay's verdicts as the views, the report, the widgets and the exports read them
    (see the module doc for every table's columns).  Both engines implement it natively;
    consumers never branch on :attr:`engine`."""

    rules: pa.Table
    profile: str
    framing: str
    now: int
    policy_name: str | None
    policy_hash: str | None
    issues: list[Any]
    notes: list[str]

    @property
    def engine(self) -> str:
        """``local`` or ``spark``: for display only."""
        ...

    # -- counts ------------------------------------------------------------------------------
    def count(self) -> tuple[int, int]:
        """``(records, batches)``."""
        ...

    def by_outcome(self) -> dict[str, int]:
        """Records per outcome (every outcome listed; ``undetermined`` only when present)."""
        ...

    def by_error(self) -> dict[str, dict[str, int]]:
        """Per broker error name: ``batches`` and ``records``."""
        ...

    def by_action(self) -> dict[str, int]:
        """Records per producer action (appended, duplicate, retried, split, failed)."""
        ...

    def summary(self) -> dict[str, Any]:
        """Everything as one JSON-ready dict (``kqlab replay --json``)."""
        ...

    # -- sample checks -----------------------------------------------------------------------
    def checks(self) -> pa.Table:
        """The sample checks' results, one row per check in policy order
        (:data:`~kqlab.validate.sample_checks.CHECK_RESULTS_SCHEMA`; empty: no checks)."""
        ...

    def check_windows(self, check: str | None = None) -> pa.Table:
        """Every judged window of the sample checks, or of ``check``
        (:data:`~kqlab.validate.sample_checks.CHECK_WINDOWS_SCHEMA`)."""
        ...

    # -- group-bys ---------------------------------------------------------------------------
    def by_partition(self) -> pa.Table:
        """Per topic-partition: records by outcome."""
        ...

    def by_time(self, bucket_ms: int = 60_000) -> pa.Table:
        """Per time bucket: records by outcome."""
        ...

    def by_producer(self) -> pa.Table:
        """Per producer id: batches, rejected batches, records."""
        ...

    def by_reason(self) -> pa.Table:
        """The reasons table (:data:`REASONS_SCHEMA`)."""
        ...

    def spans(self, max_spans: int = 2000, max_points: int = 0) -> Spans:
        """The partition × offset spans; culprit points when at most ``max_points``."""
        ...

    def timeline(self, bucket_ms: int | None = None, max_buckets: int = 300,
                 max_reasons: int = 8) -> tuple[pa.Table, int]:
        """Records per bucket and top reason; ``bucket_ms=None`` picks a round bucket from
        the 0.1–99.9 % timestamp range (the full range when that leaves too many buckets)."""
        ...

    def producer_outcomes(self, sample_batches: pa.Table | None = None) -> OutcomeGroups:
        """Records per outcome per producer (``pid N``, ``pid N · epoch E`` when the sample's
        exact batches give the epoch, ``no producer id``, ``unknown batch``)."""
        ...

    def record_reasons(self) -> RecordReasons:
        """Per record: coordinates, outcome and reason (the one record-level answer)."""
        ...

    # -- the report and the explorer ---------------------------------------------------------
    def top_failures(self, limit: int = 50, masked: Mapping[str, str] | None = None
                     ) -> pa.Table:
        """The most frequent failures (:data:`TOP_FAILURES_SCHEMA`); ``masked`` maps a rule id
        to the message shown instead of its failures' own (sensitive data)."""
        ...

    def examples(self, rule: str | None = None, limit: int = 10) -> pa.Table:
        """Up to ``limit`` failing records per rule (or of ``rule``)."""
        ...

    def find(self, query: RecordQuery, start: int = 0, limit: int = 20) -> RecordPage:
        """Refused records matching ``query``, ``limit`` of them from ``start``."""
        ...

    def lookup(self, partition: int, offset: int, topic: str | None = None
               ) -> RecordLookup | None:
        """The verdicts of one record and its batch (None: no such record)."""
        ...

    def vet(self, policy: Policy, *, source: str | None = None, today: str | None = None
            ) -> Policy:
        """``policy`` with the provenance of this replay."""
        ...
