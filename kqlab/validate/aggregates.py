"""The local engine's side of :class:`~kqlab.validate.view.VerdictsView`: every aggregate
computed with numpy and Arrow from per-record integer codes.

Views must stay responsive on million-record samples, so nothing here hands back one row per
record (except :meth:`LocalAggregates.record_reasons`, arrays of codes): every table is a
group-by (``np.bincount`` over integer codes, Arrow ``group_by``) whose size depends on the
number of reasons, partitions, buckets or spans — never on the number of records.
:class:`LocalAggregates` computes the per-record codes once (outcome, primary reason, batch)
and derives every table from them; a replay hands over the codes it computed while building
the tables (:class:`RecordCodes`, ``Verdicts.codes``), so they are not derived again.

A record's *reason* is its first enforced failure (code != 0) — the rule or broker check that
made production reject it.  A collateral record's reason is its batch's: the reason of the
batch's first culprit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.verdict_tables import ERROR, RECORD_VERDICTS_SCHEMA, batch_ids
from kqlab.validate.view import (
    OUTCOME_CODES,
    REASONS_SCHEMA,
    TOP_FAILURES_SCHEMA,
    OutcomeGroups,
    RecordLookup,
    RecordPage,
    RecordQuery,
    RecordReasons,
    Spans,
    coarsen_spans,
    empty_spans,
    nice_bucket,
)

__all__ = ["DeferredRecords", "LocalAggregates", "LocalView", "RecordCodes"]

#: flattened failures: parent record, rule, code, message (one entry per failure)
FlatFailures = tuple[np.ndarray, pa.Array, np.ndarray, pa.Array]

#: the record verdict columns a sample has before any policy: each record's coordinates
COORDINATES = ("topic", "partition", "offset", "batch_offset", "batch_index", "timestamp")


class DeferredRecords:
    """A record verdicts table built when first read.

    Its coordinate columns (:data:`COORDINATES`) are the sample's own and there at once;
    ``build()`` makes the whole table (the ``outcome`` strings and the ``failures`` lists)
    the first time it is asked for.  An edit's views read counts, outcomes and per-record
    codes (:class:`RecordCodes`): building a million outcome strings and failure lists per
    edit for a table nobody reads cost more than the rest of the re-judging."""

    def __init__(self, coords: pa.Table, build: Callable[[], pa.Table]):
        self.coords = coords
        self._build: Callable[[], pa.Table] | None = build
        self._table: pa.Table | None = None

    @property
    def num_rows(self) -> int:
        return self.coords.num_rows

    @property
    def built(self) -> bool:
        """Whether the table was asked for (tests and benchmarks read it)."""
        return self._table is not None

    def table(self) -> pa.Table:
        """The whole record verdicts table (built now on the first call)."""
        if self._table is None:
            assert self._build is not None
            self._table, self._build = self._build(), None
        return self._table


def records_of(ref: pa.Table | DeferredRecords) -> pa.Table:
    """The record verdicts table ``ref`` is or will build."""
    return ref.table() if isinstance(ref, DeferredRecords) else ref


def coordinates_of(ref: pa.Table | DeferredRecords) -> pa.Table:
    """A table with at least the :data:`COORDINATES` columns of ``ref``'s records, without
    building a deferred table."""
    return ref.coords if isinstance(ref, DeferredRecords) else ref


@dataclass(frozen=True)
class RecordCodes:
    """Per-record codes a replay computed while assembling ``table`` (its record verdicts),
    equal to what :class:`LocalAggregates` would derive from the table (tests check): the
    views start from them instead of deriving them again after every edit.

    ``batch_id`` may be a callable computing the ids on first use (most edits never need
    them), and so may ``failures`` (their rule and message texts), whose ``parents`` and
    ``failure_codes`` (per flattened failure: record, error code) come at once; ``table`` may
    be a :class:`DeferredRecords`.  ``failures``, ``reason_labels`` and ``rule_codes`` are
    None when the replay had no failures to flatten (they are then derived, which costs
    nothing)."""

    table: pa.Table | DeferredRecords
    outcome: np.ndarray  # int8 per record: index into OUTCOME_CODES
    batch_id: np.ndarray | Callable[[], np.ndarray]
    failures: FlatFailures | Callable[[], FlatFailures] | None = None
    reason_labels: list[str] | None = None
    rule_codes: np.ndarray | None = None  # per flattened failure: index into reason_labels
    parents: np.ndarray | None = None  # per flattened failure: its record
    failure_codes: np.ndarray | None = None  # per flattened failure: its error code (int64)

    def batch_ids(self) -> np.ndarray:
        """The batch ids (computed now if the replay left a callable)."""
        return self.batch_id() if callable(self.batch_id) else self.batch_id

    def flat_failures(self) -> FlatFailures | None:
        """The flattened failures (built now if the replay left a callable)."""
        return self.failures() if callable(self.failures) else self.failures


def _np(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return arr.to_numpy(zero_copy_only=False)


def _combined(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


class LocalAggregates:
    """Per-record codes of one local replay and every small table the views read.

    ``records`` and ``batches`` are the record and batch verdicts (the records may be a
    :class:`DeferredRecords`, built only when a table needs more than the coordinates);
    ``codes`` what the replay computed while building them (None: derive everything from the
    tables)."""

    def __init__(self, records: pa.Table | DeferredRecords, batches: pa.Table, framing: str,
                 codes: RecordCodes | None = None) -> None:
        #: the records as given (compared by identity to tell when they were replaced)
        self.ref = records
        self.batches = batches
        self.framing = framing
        #: the codes given (compared by identity to tell when they were replaced)
        self.given = codes
        self.codes = codes if codes is not None and codes.table is records else None
        self._query: tuple[RecordQuery, np.ndarray] | None = None

    @property
    def table(self) -> pa.Table:
        """The record verdicts (built now if they were deferred)."""
        return records_of(self.ref)

    @property
    def coords(self) -> pa.Table:
        """The records' coordinate columns (:data:`COORDINATES`), never building a deferred
        table."""
        return coordinates_of(self.ref)

    @property
    def n(self) -> int:
        return self.ref.num_rows

    # -- per-record codes -----------------------------------------------------------------------
    @cached_property
    def outcome(self) -> np.ndarray:
        """int8 per record: index into :data:`OUTCOME_CODES`."""
        if self.codes is not None:
            return self.codes.outcome
        idx = pc.index_in(self.table.column("outcome"), value_set=pa.array(OUTCOME_CODES))
        return _np(idx.fill_null(3)).astype(np.int8)

    @cached_property
    def failures(self) -> FlatFailures:
        """Flattened failures: parent record, rule, code, message (read by field name)."""
        if self.codes is not None:
            given = self.codes.flat_failures()
            if given is not None:
                return given
        arr = _combined(self.table.column("failures"))
        flat = cast(pa.StructArray, pc.list_flatten(arr))
        parents = _np(pc.list_parent_indices(arr)).astype(np.int64)
        if not len(flat):
            return parents, pa.array([], pa.string()), np.zeros(0, np.int64), \
                pa.array([], pa.string())
        return (parents, flat.field("rule"), _np(flat.field("code").fill_null(0))
                .astype(np.int64), flat.field("message"))

    @cached_property
    def failure_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Per flattened failure: its record and its error code (int64), without the texts
        of :attr:`failures` when the replay handed them over."""
        c = self.codes
        if c is not None and c.parents is not None and c.failure_codes is not None:
            return c.parents, c.failure_codes
        parents, _, codes, _ = self.failures
        return parents, codes

    @cached_property
    def reason_labels(self) -> list[str]:
        """Every rule or check among the failures (first appearance), as the views show it."""
        if self.codes is not None and self.codes.reason_labels is not None:
            return self.codes.reason_labels
        _, rules, _, _ = self.failures
        return [r if r is not None else "(unnamed)" for r in pc.unique(rules).to_pylist()]

    @cached_property
    def rule_codes(self) -> np.ndarray:
        """Per flattened failure: index into :attr:`reason_labels`."""
        if self.codes is not None and self.codes.rule_codes is not None:
            return self.codes.rule_codes
        _, rules, _, _ = self.failures
        labels = pa.array(self.reason_labels, pa.string())
        idx = pc.index_in(rules.fill_null(pa.scalar("(unnamed)")), value_set=labels)
        return _np(idx.fill_null(0)).astype(np.int64)

    @cached_property
    def batch_id(self) -> np.ndarray:
        """int64 per record: its batch, numbered in record order (records arrive batch by
        batch, so a change of topic, partition or batch offset starts the next one)."""
        if self.codes is not None:
            return self.codes.batch_ids()
        return batch_ids(self.coords)

    @cached_property
    def reason(self) -> np.ndarray:
        """int64 per record: its primary reason (index into :attr:`reason_labels`), -1 for
        accepted records; collateral records get their batch's culprit reason."""
        parents, codes = self.failure_rows
        out = np.full(self.n, -1, dtype=np.int64)
        enforced = np.flatnonzero(codes != 0)
        if len(enforced):
            first_rec, first_at = _first_of_runs(parents[enforced])
            out[first_rec] = self.rule_codes[enforced[first_at]]
        outcome = self.outcome
        out[outcome == 0] = -1
        own = np.flatnonzero((outcome == 1) & (out >= 0))
        coll = outcome == 2
        if len(own) and coll.any():
            # whole-array gathers and a select: cheaper than masked indexing when most
            # records are collateral (a batch rejected for one record)
            bid = self.batch_id
            batches, first = _first_of_runs(bid[own])
            batch_reason = np.full(int(bid[-1]) + 1, -1, dtype=np.int64)
            batch_reason[batches] = out[own[first]]
            out = np.where(coll, batch_reason[bid], out)
        return out

    # -- tables ---------------------------------------------------------------------------------
    def by_reason(self) -> pa.Table:
        """The reasons table (:data:`~kqlab.validate.view.REASONS_SCHEMA`); kept, since the
        figure and the explorer's reason list of one refresh both read it."""
        return self._reasons

    @cached_property
    def _reasons(self) -> pa.Table:
        parents, codes = self.failure_rows
        k = len(self.reason_labels)
        if k == 0:
            return REASONS_SCHEMA.empty_table()
        rc = self.rule_codes
        enforced = codes != 0
        # a culprit counts once per reason even when the same rule failed it twice
        pairs = _distinct(parents[enforced] * k + rc[enforced])
        culprit = np.bincount(pairs % k, minlength=k)
        coll = (self.outcome == 2) & (self.reason >= 0)
        collateral = np.bincount(self.reason[coll], minlength=k)
        not_enforced = np.bincount(rc[~enforced], minlength=k)
        # ties by name: the Spark aggregation draws the same order
        by_name = np.argsort(np.argsort(np.asarray(self.reason_labels, dtype=object)))
        order = np.lexsort((by_name, -not_enforced, -(culprit + collateral)))
        return pa.table({
            "reason": pa.array([self.reason_labels[i] for i in order], pa.string()),
            "culprit": pa.array(culprit[order], pa.int64()),
            "collateral": pa.array(collateral[order], pa.int64()),
            "not_enforced": pa.array(not_enforced[order], pa.int64()),
        }, schema=REASONS_SCHEMA)

    def timeline(self, bucket_ms: int | None = None, max_buckets: int = 300,
                 max_reasons: int = 8) -> tuple[pa.Table, int]:
        """Records per time bucket: ``total``, rejected records per top reason (the rest as
        ``other``) and ``collateral``; and the bucket size (chosen from the 0.1–99.9 %
        timestamp range when not given, so a few records from a skewed clock do not squash
        the timeline into one bucket; if the outliers leave too many buckets, the full range
        decides)."""
        ts = _np(self.coords.column("timestamp")).astype(np.int64)
        if not len(ts):
            return pa.table({"bucket": pa.array([], pa.int64()),
                             "total": pa.array([], pa.int64())}), bucket_ms or 60_000
        if bucket_ms is None:
            lo, hi = np.percentile(ts, [0.1, 99.9]).astype(np.int64)
            bucket_ms = nice_bucket(int(hi - lo), max_buckets)
            if len(np.unique(ts // bucket_ms)) > 2 * max_buckets:
                bucket_ms = nice_bucket(int(ts.max() - ts.min()), max_buckets)
        buckets, inverse = np.unique(ts // bucket_ms, return_inverse=True)
        nb = len(buckets)
        rejected = self.outcome == 1
        # the series shown: reasons by the rejected records they account for, ties by name
        # (the Spark aggregation ranks the same way)
        k = len(self.reason_labels)
        mine = self.reason[rejected & (self.reason >= 0)]
        rej_counts = np.bincount(mine, minlength=k)
        by_name = np.argsort(np.argsort(np.asarray(self.reason_labels, dtype=object)))
        top = [int(i) for i in np.lexsort((by_name, -rej_counts))[:max_reasons]
               if rej_counts[i] > 0]
        group = np.full(k + 1, len(top), dtype=np.int64)  # "other"
        group[top] = np.arange(len(top))
        cols: dict[str, Any] = {"bucket": pa.array(buckets * bucket_ms, pa.int64()),
                                "total": pa.array(np.bincount(inverse, minlength=nb), pa.int64())}
        sel = rejected & (self.reason >= 0)
        g = group[self.reason[sel]]
        counts = np.bincount(inverse[sel] * (len(top) + 1) + g,
                             minlength=nb * (len(top) + 1)).reshape(nb, len(top) + 1)
        for j, i in enumerate(top):
            cols[self.reason_labels[i]] = pa.array(counts[:, j], pa.int64())
        other = counts[:, len(top)] + np.bincount(inverse[rejected & (self.reason < 0)],
                                                   minlength=nb)
        if other.any():
            cols["other"] = pa.array(other, pa.int64())
        coll = np.bincount(inverse[self.outcome == 2], minlength=nb)
        if coll.any():
            cols["collateral"] = pa.array(coll, pa.int64())
        return pa.table(cols), bucket_ms

    # -- per batch ------------------------------------------------------------------------------
    @cached_property
    def batch_rows(self) -> dict[str, np.ndarray]:
        """Per batch (in :attr:`batch_id` order): first record row, records, first/last
        offset, rejected and collateral records."""
        bid = self.batch_id
        nbatch = int(bid[-1]) + 1 if len(bid) else 0
        first = np.flatnonzero(np.r_[True, bid[1:] != bid[:-1]]) if len(bid) else \
            np.zeros(0, np.int64)
        count = np.bincount(bid, minlength=nbatch)
        offsets = _np(self.coords.column("offset")).astype(np.int64)
        last_row = first + count - 1
        return {
            "first_row": first, "records": count,
            "start": offsets[first] if nbatch else np.zeros(0, np.int64),
            "end": offsets[last_row] if nbatch else np.zeros(0, np.int64),
            "rejected": np.bincount(bid[self.outcome == 1], minlength=nbatch),
            "collateral": np.bincount(bid[self.outcome == 2], minlength=nbatch),
        }

    def spans(self, max_spans: int = 2000, max_points: int = 0) -> Spans:
        """Runs of consecutive rejected batches with one reason, per partition, merged across
        the smallest gaps when there are more than ``max_spans``; the culprits as points when
        there are at most ``max_points``."""
        labels = self.reason_labels
        charged = np.bincount(self.reason[self.reason >= 0], minlength=len(labels))
        culprit_rows = np.flatnonzero(self.outcome == 1)
        if self.n == 0:
            return empty_spans([], np.zeros((0, 2), np.int64), labels, charged)
        b = self.batch_rows
        t = self.coords
        first = b["first_row"]
        label = _partition_labels(t.column("topic").take(first), t.column("partition").take(first))
        partitions_arr = pc.unique(label)
        partitions_arr = partitions_arr.take(pc.array_sort_indices(partitions_arr))
        row = _np(pc.index_in(label, value_set=partitions_arr)).astype(np.int64)
        partitions = [str(x) for x in partitions_arr.to_pylist()]
        points = None
        if 0 < len(culprit_rows) <= max_points:
            points = (_np(t.column("offset").take(culprit_rows)).astype(np.int64),
                      row[self.batch_id[culprit_rows]])
        # extent of each partition in the sample
        starts, ends = b["start"], b["end"]
        extent = np.zeros((len(partitions), 2), np.int64)
        extent[:, 0] = np.iinfo(np.int64).max
        np.minimum.at(extent[:, 0], row, starts)
        np.maximum.at(extent[:, 1], row, ends)
        bad = (b["rejected"] + b["collateral"]) > 0
        reason = self.reason[first]
        # a batch's reason: its first record's if rejected, else its first culprit's
        culprit_reason = np.flatnonzero((self.outcome == 1) & (self.reason >= 0))
        if len(culprit_reason):
            cb, at = np.unique(self.batch_id[culprit_reason], return_index=True)
            reason = reason.copy()
            reason[cb] = self.reason[culprit_reason[at]]
        idx = np.flatnonzero(bad)
        if not len(idx):
            return empty_spans(partitions, extent, labels, charged, len(culprit_rows), points)
        # batches are in record order; sort rejected ones by (partition, start offset)
        idx = idx[np.lexsort((starts[idx], row[idx]))]
        r, rs = row[idx], reason[idx]
        # a new span where the partition or reason changes, or a good batch lies in between
        rank_all = np.lexsort((starts, row))  # every batch by (partition, offset)
        place = np.empty_like(rank_all)
        place[rank_all] = np.arange(len(rank_all))
        p = place[idx]
        new = np.ones(len(idx), dtype=bool)
        new[1:] = (r[1:] != r[:-1]) | (rs[1:] != rs[:-1]) | (p[1:] != p[:-1] + 1)
        sid = np.cumsum(new) - 1
        ns = int(sid[-1]) + 1
        span_first = np.flatnonzero(new)
        span_last = np.r_[span_first[1:], len(idx)] - 1
        spans = {
            "row": r[span_first], "start": starts[idx][span_first],
            "end": ends[idx][span_last], "reason": rs[span_first],
            "batches": np.bincount(sid, minlength=ns),
            "rejected": np.bincount(sid, weights=b["rejected"][idx], minlength=ns).astype(
                np.int64),
            "collateral": np.bincount(sid, weights=b["collateral"][idx], minlength=ns).astype(
                np.int64),
        }
        merged = False
        if ns > max_spans:
            spans, merged = coarsen_spans(spans, max_spans), True
        return Spans(**spans, partitions=partitions, extent=extent, merged=merged,
                     labels=labels, reason_records=charged, culprits=len(culprit_rows),
                     points=points)

    def producer_outcomes(self, sample_batches: pa.Table | None = None) -> OutcomeGroups:
        """Records per outcome per producer: each record's batch's producer id (and epoch when
        the framing is exact and the sample's batches, row for row the batch verdicts, give
        it)."""
        batches = self.batches
        exact = self.framing == "exact"
        pid_col = batches.column("producer_id")
        epoch_col: pa.Array | pa.ChunkedArray = pa.nulls(batches.num_rows, pa.int16())
        sb = sample_batches
        if exact and sb is not None and "producer_epoch" in sb.column_names and \
                sb.num_rows == batches.num_rows:
            epoch_col = sb.column("producer_epoch")
        label = producer_labels(pid_col, epoch_col)
        bid = self.batch_id
        per_record: pa.Array | pa.ChunkedArray
        if len(bid) and int(bid[-1]) + 1 == batches.num_rows:
            per_record = label.take(bid)  # records arrive batch by batch
        else:  # not the replay's own order: match on the batch coordinates, first match wins
            keys = ["topic", "partition", "batch_offset"]
            t = self.coords
            left = t.select(keys).append_column("_row", pa.array(np.arange(t.num_rows)))
            right = batches.select(keys).append_column("_label", label)
            joined = left.join(right, keys, join_type="left outer").sort_by("_row")
            _, first = np.unique(_np(joined.column("_row")), return_index=True)
            per_record = joined.column("_label").take(first)
        enc = cast(pa.DictionaryArray, pc.dictionary_encode(
            _combined(per_record.fill_null(pa.scalar("unknown batch")))))
        codes = _np(enc.indices).astype(np.int64)
        labels = [str(x) for x in enc.dictionary.to_pylist()]
        k = len(labels)
        counts = np.bincount(codes * 4 + self.outcome, minlength=4 * k).reshape(k, 4) \
            if k else np.zeros((0, 4), np.int64)
        return OutcomeGroups(labels, counts)

    def record_reasons(self) -> RecordReasons:
        """Per record: coordinates, outcome code and reason code (the arrays above)."""
        return RecordReasons(self.coords.select(["topic", "partition", "offset"]),
                             self.outcome, self.reason, self.reason_labels)

    # -- the report and the explorer ------------------------------------------------------------
    def top_failures(self, limit: int = 50, masked: Mapping[str, str] | None = None
                     ) -> pa.Table:
        """The most frequent (rule, code, message), grouped by Arrow; ``masked``: rule id ->
        the message shown instead (replaced before grouping)."""
        parents, rules, codes, messages = self.failures
        if not len(rules):
            return TOP_FAILURES_SCHEMA.empty_table()
        shown: pa.Array | pa.ChunkedArray = messages
        if masked:
            hidden = sorted(masked)
            idx = pc.index_in(rules, value_set=pa.array(hidden, pa.string()))
            replaced = pc.take(pa.array([masked[r] for r in hidden], pa.string()), idx)
            shown = pc.if_else(pc.is_null(idx), messages, replaced)
        t = pa.table({"rule": rules, "code": pa.array(codes, pa.int16()), "message": shown,
                      "row": pa.array(parents)})
        g = t.group_by(["rule", "code", "message"]).aggregate([("row", "count"), ("row", "min")])
        g = g.sort_by([("row_count", "descending"), ("rule", "ascending"), ("code", "ascending"),
                       ("message", "ascending")]).slice(0, limit)
        first = g.column("row_min")
        rec = self.coords
        return pa.table([g.column("rule"), g.column("code"), g.column("message"),
                         g.column("row_count"), rec.column("topic").take(first),
                         rec.column("partition").take(first), rec.column("offset").take(first)],
                        schema=TOP_FAILURES_SCHEMA)

    def examples(self, rule: str | None = None, limit: int = 10) -> pa.Table:
        """Up to ``limit`` failing records per rule (or of ``rule``) in log order: the record
        verdict columns plus ``example_rule``, ordered by rule then log order."""
        schema = pa.schema([*RECORD_VERDICTS_SCHEMA, ("example_rule", pa.string())])
        parents, rules, _, _ = self.failures
        valid = pc.is_valid(rules) if len(rules) else pa.array([], pa.bool_())
        if rule is not None:
            same = pc.equal(rules, pa.scalar(rule)).fill_null(False)
            valid = pc.and_(valid, cast(pa.BooleanArray, same))
        keep = _np(valid).astype(bool)
        if not keep.any():
            return schema.empty_table()
        enc = cast(pa.DictionaryArray, pc.dictionary_encode(rules.filter(pa.array(keep))))
        names = [str(x) for x in enc.dictionary.to_pylist()]
        rank = np.argsort(np.argsort(np.asarray(names, dtype=object)))
        code = rank[_np(enc.indices).astype(np.int64)]
        key = np.unique(code * max(self.n, 1) + parents[keep])  # distinct, by (rule, record)
        code, rows = key // max(self.n, 1), key % max(self.n, 1)
        start = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
        pos = np.arange(len(code)) - np.repeat(start, np.diff(np.r_[start, len(code)]))
        take = pos < limit
        by_rank = sorted(names)
        out = self.table.select(RECORD_VERDICTS_SCHEMA.names).take(rows[take])
        example = pa.array([by_rank[i] for i in code[take].tolist()], pa.string())
        return out.append_column("example_rule", example).cast(schema)

    def find(self, query: RecordQuery, start: int = 0, limit: int = 20) -> RecordPage:
        """Refused records matching ``query`` in its order (an Arrow mask over the verdicts,
        then a stable sort of the matching rows; kept for the next page of the same query)."""
        if self._query is None or self._query[0] != query:
            self._query = (query, self._ordered(query, self._select(query)))
        selected = self._query[1]
        idx = selected[start:start + limit]
        return RecordPage(self.table.take(idx), len(selected))

    def _ordered(self, query: RecordQuery, rows: np.ndarray) -> np.ndarray:
        """``rows`` (in log order) in the query's order; ties stay in log order."""
        if query.order == "log":
            return rows[::-1] if query.descending else rows
        if query.order == "outcome":
            keys = self.outcome[rows].astype(np.int64)
        else:
            t = self.coords if query.order in COORDINATES else self.table
            keys = _np(t.column(query.order).take(pa.array(rows))).astype(np.int64)
        return rows[np.lexsort((rows, -keys if query.descending else keys))]

    def errored(self, rule: str | None = None) -> np.ndarray:
        """bool per record: a failure of it (of ``rule`` when given) has status ``error``
        (read from the record verdicts' ``failures.status``, the column records.parquet
        carries)."""
        hit = np.zeros(self.n, dtype=bool)
        column = _combined(self.table.column("failures"))
        flat = pc.list_flatten(column)
        if not len(flat):
            return hit
        cond = pc.equal(pc.struct_field(flat, "status"), pa.scalar(ERROR))
        if rule is not None:
            cond = pc.and_(cond, pc.equal(pc.struct_field(flat, "rule"), pa.scalar(rule)))
        parents = _np(pc.list_parent_indices(column))
        hit[parents[_np(cond.fill_null(False)).astype(bool)]] = True
        return hit

    def _select(self, query: RecordQuery) -> np.ndarray:
        outcome = self.outcome
        mask = (outcome == 2) if query.collateral else (outcome != 0)
        if query.errors:
            mask = self.errored(query.reason) & (mask if query.collateral else True)
        elif query.reason is not None and not query.collateral:
            parents, rules, _, _ = self.failures
            hit = np.zeros(self.n, dtype=bool)
            if len(rules):
                same = pc.equal(rules, pa.scalar(query.reason)).fill_null(False)
                hit[parents[_np(same).astype(bool)]] = True
            mask &= hit
        conds: list[pc.Expression] = []
        if query.topic is not None:
            conds.append(pc.field("topic") == query.topic)
        if query.partition is not None:
            conds.append(pc.field("partition") == query.partition)
        for column, (lo, hi) in (("offset", query.offsets), ("timestamp", query.time)):
            if lo is not None:
                conds.append(pc.field(column) >= lo)
            if hi is not None:
                conds.append(pc.field(column) <= hi)
        if conds:
            where = conds[0]
            for cond in conds[1:]:
                where = where & cond
            # only the rows the outcome and reason kept are compared (usually few)
            rows = np.flatnonzero(mask)
            kept = self.coords.select(["topic", "partition", "offset", "timestamp"]).take(rows)
            kept = kept.append_column("_row", pa.array(rows, pa.int64()))
            return _np(kept.filter(where).column("_row")).astype(np.int64)
        return np.flatnonzero(mask)

    def lookup(self, partition: int, offset: int, topic: str | None = None
               ) -> RecordLookup | None:
        """One record's verdict, its batch's, and the failures of its batch (Arrow filters)."""
        cond = (pc.field("partition") == partition) & (pc.field("offset") == offset)
        if topic is not None:
            cond = cond & (pc.field("topic") == topic)
        record = _first(self.table, cond)
        if record is None:
            return None
        where = (pc.field("topic") == record["topic"]) & \
            (pc.field("partition") == record["partition"]) & \
            (pc.field("batch_offset") == record["batch_offset"])
        batch = _first(self.batches, where)
        siblings = self.table.filter(where)
        flat = pc.list_flatten(_combined(siblings.column("failures")))
        return RecordLookup(record, batch, [f for f in flat.to_pylist() if f is not None])


def producer_labels(pid: pa.Array | pa.ChunkedArray, epoch: pa.Array | pa.ChunkedArray
                    ) -> pa.Array | pa.ChunkedArray:
    """Per batch: ``pid 2001 · epoch 0`` (``pid 2001`` without an epoch, ``no producer id``
    for -1 or null) — the producer groups' labels, the same in both engines."""
    pid_s = pc.cast(pid, pa.string())
    epoch_s = pc.cast(epoch, pa.string())
    text = _join("pid ", pid_s)
    with_epoch = _join("pid ", pid_s, " · epoch ", epoch_s)
    return pc.if_else(pc.less(pid, pa.scalar(0)).fill_null(True), pa.scalar("no producer id"),
                      pc.if_else(pc.is_null(epoch_s), text, with_epoch))


class LocalView:
    """The :class:`~kqlab.validate.view.VerdictsView` methods of the local engine's
    :class:`~kqlab.validate.verdicts.Verdicts` (a base class of it): each answers from one
    :class:`LocalAggregates` kept with the verdicts, so every view of a replay — and the next
    edit's impact diff, which reads the previous verdicts again — shares the per-record work.
    """

    engine = "local"
    records: pa.Table
    batches: pa.Table
    framing: str
    codes: RecordCodes | None
    _aggregates: LocalAggregates | None = None

    def records_ref(self) -> pa.Table | DeferredRecords:
        """The record verdicts as held: the table, or a :class:`DeferredRecords` not built
        yet (reading it does not build it)."""
        return self.records

    @property
    def aggregates(self) -> LocalAggregates:
        """The per-record codes and tables of these verdicts (rebuilt if the tables were
        replaced)."""
        agg = self._aggregates
        ref = self.records_ref()
        if agg is None or agg.ref is not ref or agg.batches is not self.batches \
                or agg.given is not self.codes:
            agg = LocalAggregates(ref, self.batches, self.framing, self.codes)
            self._aggregates = agg
        return agg

    def count(self) -> tuple[int, int]:
        """``(records, batches)``."""
        return self.records_ref().num_rows, self.batches.num_rows

    def by_reason(self) -> pa.Table:
        """The reasons table (see :mod:`kqlab.validate.view`)."""
        return self.aggregates.by_reason()

    def spans(self, max_spans: int = 2000, max_points: int = 0) -> Spans:
        """The partition × offset spans (see :class:`~kqlab.validate.view.Spans`)."""
        return self.aggregates.spans(max_spans, max_points)

    def timeline(self, bucket_ms: int | None = None, max_buckets: int = 300,
                 max_reasons: int = 8) -> tuple[pa.Table, int]:
        """Records per bucket and top reason, and the bucket size."""
        return self.aggregates.timeline(bucket_ms, max_buckets, max_reasons)

    def producer_outcomes(self, sample_batches: pa.Table | None = None) -> OutcomeGroups:
        """Records per outcome per producer."""
        return self.aggregates.producer_outcomes(sample_batches)

    def record_reasons(self) -> RecordReasons:
        """Per record: coordinates, outcome and reason."""
        return self.aggregates.record_reasons()

    def top_failures(self, limit: int = 50, masked: Mapping[str, str] | None = None
                     ) -> pa.Table:
        """The most frequent failures."""
        return self.aggregates.top_failures(limit, masked)

    def examples(self, rule: str | None = None, limit: int = 10) -> pa.Table:
        """Up to ``limit`` failing records per rule (or of ``rule``)."""
        return self.aggregates.examples(rule, limit)

    def find(self, query: RecordQuery, start: int = 0, limit: int = 20) -> RecordPage:
        """A page of the refused records matching ``query``."""
        return self.aggregates.find(query, start, limit)

    def lookup(self, partition: int, offset: int, topic: str | None = None
               ) -> RecordLookup | None:
        """The verdicts of one record and its batch."""
        return self.aggregates.lookup(partition, offset, topic)


def _partition_labels(topic: pa.Array | pa.ChunkedArray,
                      partition: pa.Array | pa.ChunkedArray) -> pa.Array:
    return _join(pc.cast(topic, pa.string()), "-", pc.cast(partition, pa.string()))


def _join(*parts: str | pa.Array | pa.ChunkedArray) -> pa.Array:
    """String columns and constants concatenated element-wise (constants as columns: one
    array type for Arrow's join, which the type stubs require; the columns are per batch,
    so the constants cost little)."""
    n = next(len(p) for p in parts if not isinstance(p, str))
    cols = [pa.repeat(pa.scalar(p), n) if isinstance(p, str) else _combined(p) for p in parts]
    return pc.binary_join_element_wise(*cols, pa.repeat(pa.scalar(""), n))


def _first(table: pa.Table, where: pc.Expression) -> dict[str, Any] | None:
    rows = table.filter(where)
    return rows.slice(0, 1).to_pylist()[0] if rows.num_rows else None


def _first_of_runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_index=True)``, in one pass when ``values`` is already sorted
    (failure parents and batch ids are: they follow record order)."""
    if len(values) and not (values[1:] >= values[:-1]).all():
        return np.unique(values, return_index=True)
    at = np.flatnonzero(np.r_[True, values[1:] != values[:-1]]) if len(values) else \
        np.zeros(0, np.int64)
    return values[at], at


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)``; the values are (parent * k + rule) of failures in record order,
    nearly sorted already, which a stable (run-merging) sort handles in about one pass."""
    s = np.sort(values, kind="stable")
    return s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s
