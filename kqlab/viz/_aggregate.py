"""The small tables behind every figure, aggregated from verdicts with Arrow and numpy.

Figures must stay responsive on million-record samples, so nothing here hands a figure one
row per record: every view is a group-by (``np.bincount`` over integer codes, Arrow
``group_by``) whose size depends on the number of reasons, partitions, buckets or spans —
never on the number of records.  :class:`Aggregates` computes the per-record codes once
(outcome, primary reason, batch) and derives every table from them.

A record's *reason* is its first enforced failure (code != 0) — the rule or broker check that
made production reject it.  A collateral record's reason is its batch's: the reason of the
batch's first culprit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.errors import KqlabError
from kqlab.validate.verdicts import OUTCOMES, batch_ids

__all__ = ["Aggregates", "ViewError", "group_table", "nice_bucket"]

#: outcome codes used in every per-record array (``undetermined``: the tables alone could not
#: judge the batch)
OUTCOME_CODES = (*OUTCOMES, "undetermined")
_NICE_MS = (1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000, 1_800_000, 3_600_000,
            3 * 3_600_000, 6 * 3_600_000, 12 * 3_600_000, 86_400_000, 7 * 86_400_000)


class ViewError(KqlabError, ValueError):
    """A view cannot be built from what was given (it needs the sample, or exact framing)."""


def nice_bucket(span_ms: int, max_buckets: int) -> int:
    """The smallest round bucket size (1 s, 5 s, ... 1 week, then whole weeks) that cuts
    ``span_ms`` into at most ``max_buckets`` buckets.

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


def _np(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return arr.to_numpy(zero_copy_only=False)


@dataclass
class Spans:
    """Runs of rejected batches per partition: one row per span (the partition × offset view)."""

    row: np.ndarray  # partition row (index into ``partitions``)
    start: np.ndarray  # first offset
    end: np.ndarray  # last offset
    reason: np.ndarray  # index into the reason labels, or -1 for merged spans of mixed reasons
    batches: np.ndarray
    rejected: np.ndarray
    collateral: np.ndarray
    partitions: list[str]
    extent: np.ndarray  # per partition row: (first offset, last offset) of the sample
    merged: bool  # spans were coarsened to stay within the bound

    def __len__(self) -> int:
        return len(self.start)


class Aggregates:
    """Per-record codes of one replay and the small tables the views draw.

    ``verdicts`` is a local :class:`~kqlab.validate.verdicts.Verdicts`; ``records`` (the
    sample's records table, with key/value/headers) is needed only for the views that read
    record content (schema id, key pattern), and ``sample_batches`` for producer epochs.
    """

    def __init__(self, verdicts: Any, records: pa.Table | None = None,
                 sample_batches: pa.Table | None = None) -> None:
        self.verdicts = verdicts
        self.table: pa.Table = verdicts.records
        self._records = records
        self.sample_batches = sample_batches

    @property
    def n(self) -> int:
        return self.table.num_rows

    # -- per-record codes -----------------------------------------------------------------------
    @cached_property
    def outcome(self) -> np.ndarray:
        """int8 per record: index into :data:`OUTCOME_CODES`."""
        idx = pc.index_in(self.table.column("outcome"), value_set=pa.array(OUTCOME_CODES))
        return _np(pc.fill_null(idx, 3)).astype(np.int8)

    @cached_property
    def _failures(self) -> tuple[np.ndarray, pa.Array, np.ndarray, pa.Array]:
        """Flattened failures: parent record, rule, code, message."""
        col = self.table.column("failures")
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        flat = pc.list_flatten(arr)
        parents = _np(pc.list_parent_indices(arr)).astype(np.int64)
        if not len(flat):
            return parents, pa.array([], pa.string()), np.zeros(0, np.int64), \
                pa.array([], pa.string())
        return (parents, flat.field("rule"), _np(pc.fill_null(flat.field("code"), 0))
                .astype(np.int64), flat.field("message"))

    @cached_property
    def reason_labels(self) -> list[str]:
        """Every rule or check that appears among the failures, as shown on the figures."""
        _, rules, _, _ = self._failures
        return [r if r is not None else "(unnamed)" for r in pc.unique(rules).to_pylist()]

    @cached_property
    def _rule_codes(self) -> np.ndarray:
        """Per flattened failure: index into :attr:`reason_labels`."""
        _, rules, _, _ = self._failures
        labels = pa.array(self.reason_labels, pa.string())
        return _np(pc.fill_null(pc.index_in(pc.fill_null(rules, "(unnamed)"),
                                            value_set=labels), 0)).astype(np.int64)

    @cached_property
    def batch_id(self) -> np.ndarray:
        """int64 per record: its batch, numbered in record order (records arrive batch by
        batch, so a change of topic, partition or batch offset starts the next one)."""
        return batch_ids(self.table)

    @cached_property
    def reason(self) -> np.ndarray:
        """int64 per record: its primary reason (index into :attr:`reason_labels`), -1 for
        accepted records; collateral records get their batch's culprit reason."""
        parents, _, codes, _ = self._failures
        out = np.full(self.n, -1, dtype=np.int64)
        enforced = codes != 0
        if enforced.any():
            p = parents[enforced]
            first_rec, first_at = _first_of_runs(p)
            out[first_rec] = self._rule_codes[enforced][first_at]
        out[self.outcome == 0] = -1
        own = (self.outcome == 1) & (out >= 0)
        if own.any() and (self.outcome == 2).any():
            bid = self.batch_id
            batches, first = _first_of_runs(bid[own])
            batch_reason = np.full(int(bid[-1]) + 1, -1, dtype=np.int64)
            batch_reason[batches] = out[own][first]
            coll = self.outcome == 2
            out[coll] = batch_reason[bid[coll]]
        return out

    # -- tables ---------------------------------------------------------------------------------
    def outcomes(self) -> dict[str, int]:
        """Records per outcome."""
        counts = np.bincount(self.outcome, minlength=len(OUTCOME_CODES))
        return {o: int(c) for o, c in zip(OUTCOME_CODES, counts, strict=True)
                if o != "undetermined" or c}

    def by_reason(self) -> pa.Table:
        """Per reason: ``culprit`` records (an enforced failure of it), ``collateral`` records
        (rejected with a batch it rejected), ``not_enforced`` failures (observe rules, or
        policies a broker would not apply), sorted by rejected records."""
        parents, _, codes, _ = self._failures
        k = len(self.reason_labels)
        if k == 0:
            return pa.table({"reason": pa.array([], pa.string()),
                             "culprit": pa.array([], pa.int64()),
                             "collateral": pa.array([], pa.int64()),
                             "not_enforced": pa.array([], pa.int64())})
        rc = self._rule_codes
        enforced = codes != 0
        # a culprit counts once per reason even when the same rule failed it twice
        pairs = _distinct(parents[enforced] * k + rc[enforced])
        culprit = np.bincount(pairs % k, minlength=k)
        coll = (self.outcome == 2) & (self.reason >= 0)
        collateral = np.bincount(self.reason[coll], minlength=k)
        not_enforced = np.bincount(rc[~enforced], minlength=k)
        # ties by name: every engine (the Spark aggregation too) draws the same order
        by_name = np.argsort(np.argsort(np.asarray(self.reason_labels, dtype=object)))
        order = np.lexsort((by_name, -not_enforced, -(culprit + collateral)))
        return pa.table({
            "reason": pa.array([self.reason_labels[i] for i in order], pa.string()),
            "culprit": pa.array(culprit[order], pa.int64()),
            "collateral": pa.array(collateral[order], pa.int64()),
            "not_enforced": pa.array(not_enforced[order], pa.int64()),
        })

    def top_reasons(self, limit: int) -> list[int]:
        """Indexes of the ``limit`` reasons rejecting the most records."""
        counts = np.bincount(self.reason[self.reason >= 0], minlength=len(self.reason_labels))
        order = np.argsort(-counts, kind="stable")
        return [int(i) for i in order[:limit] if counts[i] > 0]

    def timeline(self, bucket_ms: int | None = None, max_buckets: int = 300,
                 max_reasons: int = 8) -> tuple[pa.Table, int]:
        """Records per time bucket: ``total``, then rejected records per top reason (columns
        named after the reasons, the rest as ``other``) and ``collateral``; and the bucket size.

        The bucket size is chosen from the 0.1–99.9 % timestamp range, so a few records from a
        skewed clock do not squash the timeline into one bucket; the outliers keep their own
        buckets, and if there are many the full range decides.
        """
        ts = _np(self.table.column("timestamp")).astype(np.int64)
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

    def by_group(self, codes: np.ndarray, labels: list[str], limit: int = 20
                 ) -> pa.Table:
        """Records per outcome for a per-record group code (-1: no group), the ``limit``
        largest groups by rejected + collateral records first, the rest summed as ``other``."""
        k = len(labels)
        valid = codes >= 0
        counts = np.bincount(codes[valid] * 4 + self.outcome[valid],
                             minlength=4 * k).reshape(k, 4) if k else np.zeros((0, 4), np.int64)
        return group_table(counts, labels, limit)

    # -- per batch ------------------------------------------------------------------------------
    @cached_property
    def batch_rows(self) -> dict[str, np.ndarray]:
        """Per batch (in :attr:`batch_id` order): first record row, records, first/last
        offset, rejected and collateral records, partition key."""
        bid = self.batch_id
        nbatch = int(bid[-1]) + 1 if len(bid) else 0
        first = np.flatnonzero(np.r_[True, bid[1:] != bid[:-1]]) if len(bid) else \
            np.zeros(0, np.int64)
        count = np.bincount(bid, minlength=nbatch)
        offsets = _np(self.table.column("offset")).astype(np.int64)
        last_row = first + count - 1
        return {
            "first_row": first, "records": count,
            "start": offsets[first] if nbatch else np.zeros(0, np.int64),
            "end": offsets[last_row] if nbatch else np.zeros(0, np.int64),
            "rejected": np.bincount(bid[self.outcome == 1], minlength=nbatch),
            "collateral": np.bincount(bid[self.outcome == 2], minlength=nbatch),
        }

    def spans(self, max_spans: int = 2000) -> Spans:
        """Runs of consecutive rejected batches with one reason, per partition, merged across
        the smallest gaps when there are more than ``max_spans`` (then ``merged`` is true and
        merged spans of different reasons get reason -1)."""
        b = self.batch_rows
        t = self.table
        n = self.n
        if n == 0:
            return Spans(*(np.zeros(0, np.int64) for _ in range(7)), partitions=[],
                         extent=np.zeros((0, 2), np.int64), merged=False)
        first = b["first_row"]
        topic = t.column("topic").take(pa.array(first))
        part = t.column("partition").take(pa.array(first))
        label = pc.binary_join_element_wise(pc.cast(topic, pa.string()), "-",
                                            pc.cast(part, pa.string()), "")
        labels = pc.unique(label)
        sort_idx = pc.array_sort_indices(labels)
        labels = labels.take(sort_idx)
        row = _np(pc.index_in(label, value_set=labels)).astype(np.int64)
        partitions = labels.to_pylist()
        # extent of each partition in the sample
        starts, ends = b["start"], b["end"]
        extent = np.zeros((len(partitions), 2), np.int64)
        extent[:, 0] = np.iinfo(np.int64).max
        np.minimum.at(extent[:, 0], row, starts)
        np.maximum.at(extent[:, 1], row, ends)
        bad = (b["rejected"] + b["collateral"]) > 0
        reason = self.reason[first]
        # a batch's reason: its first record's if rejected, else its first culprit's
        culprit_rows = np.flatnonzero((self.outcome == 1) & (self.reason >= 0))
        if len(culprit_rows):
            cb, at = np.unique(self.batch_id[culprit_rows], return_index=True)
            reason = reason.copy()
            reason[cb] = self.reason[culprit_rows[at]]
        idx = np.flatnonzero(bad)
        if not len(idx):
            return Spans(*(np.zeros(0, np.int64) for _ in range(7)), partitions=partitions,
                         extent=extent, merged=False)
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
            spans, merged = _coarsen(spans, max_spans), True
        return Spans(**spans, partitions=partitions, extent=extent, merged=merged)

    # -- record content -------------------------------------------------------------------------
    def records_column(self, name: str) -> pa.ChunkedArray:
        """A column of the sample's records, aligned with the verdict rows."""
        if self._records is None:
            raise ViewError(f"this view reads the records' {name}: pass sample= (the Sample, "
                            "records table or Replayer the verdicts came from)")
        return self._aligned.column(name)

    @cached_property
    def _aligned(self) -> pa.Table:
        """The sample's records in verdict order (joined on topic/partition/offset when the
        two tables are not already row-aligned)."""
        rec = self._records
        t = self.table
        if rec.num_rows == t.num_rows and rec.num_rows and pc.all(pc.and_(
                pc.equal(rec.column("offset"), t.column("offset")),
                pc.equal(rec.column("partition"), t.column("partition")))).as_py():
            return rec
        if rec.num_rows == 0 and t.num_rows == 0:
            return rec
        keys = ["topic", "partition", "offset"]
        left = t.select(keys).append_column("_row", pa.array(np.arange(t.num_rows)))
        joined = left.join(rec, keys, join_type="left outer").sort_by("_row")
        if joined.num_rows != t.num_rows:
            raise ViewError("the sample's records do not match the verdicts (duplicate "
                            "offsets): pass the sample the verdicts were replayed from")
        return joined

    def schema_ids(self) -> tuple[np.ndarray, list[str]]:
        """Per record: a group code for its value's schema id (Confluent wire format)."""
        from kqlab.serde.wire import parse_wire

        value = self.records_column("value")
        info = parse_wire(value)
        framed = _np(info.framed).astype(bool)
        ids = _np(pc.fill_null(info.schema_id, 0)).astype(np.int64)
        null = ~info.valid
        uniq, inv = np.unique(ids[framed], return_inverse=True)
        labels = [f"schema id {i}" for i in uniq.tolist()]
        codes = np.full(self.n, -1, np.int64)
        codes[framed] = inv
        if (~framed & ~null).any():
            codes[~framed & ~null] = len(labels)
            labels.append("no wire header")
        if null.any():
            codes[null] = len(labels)
            labels.append("null (tombstone)")
        return codes, labels

    def key_patterns(self, *, letters: bool) -> tuple[np.ndarray, list[str]]:
        """Per record: a group code for its key's pattern (see :func:`key_shape`)."""
        from kqlab.viz._masking import key_shape

        shapes = key_shape(self.records_column("key"), letters=letters)
        enc = pc.dictionary_encode(shapes)
        return _np(enc.indices).astype(np.int64), enc.dictionary.to_pylist()

    def producers(self) -> tuple[np.ndarray, list[str], bool]:
        """Per record: a group code for its batch's producer (``pid 2001 · epoch 0`` when the
        sample's exact batches give the epoch), and whether the framing was exact."""
        batches = self.verdicts.batches
        exact = self.verdicts.framing == "exact"
        pid_col = batches.column("producer_id")
        epoch_col = pa.nulls(batches.num_rows, pa.int16())
        sb = self.sample_batches
        # a replay's batch verdicts are its sample's batches, row for row
        if exact and sb is not None and "producer_epoch" in sb.column_names and \
                sb.num_rows == batches.num_rows:
            epoch_col = sb.column("producer_epoch")
        pid = pc.cast(pid_col, pa.string())
        epoch = pc.cast(epoch_col, pa.string())
        label = pc.if_else(pc.fill_null(pc.less(pid_col, 0), True),
                           pa.scalar("no producer id"),
                           pc.if_else(pc.is_null(epoch),
                                      pc.binary_join_element_wise("pid ", pid, ""),
                                      pc.binary_join_element_wise("pid ", pid, " · epoch ",
                                                                  epoch, "")))
        bid = self.batch_id
        if len(bid) and int(bid[-1]) + 1 == batches.num_rows:
            per_record = pc.take(label, pa.array(bid))  # records arrive batch by batch
        else:  # not the replay's own order: match on the batch coordinates, first match wins
            keys = ["topic", "partition", "batch_offset"]
            t = self.table
            left = t.select(keys).append_column("_row", pa.array(np.arange(t.num_rows)))
            right = batches.select(keys).append_column("_label", label)
            joined = left.join(right, keys, join_type="left outer").sort_by("_row")
            _, first = np.unique(_np(joined.column("_row")), return_index=True)
            per_record = joined.column("_label").take(pa.array(first))
        enc = pc.dictionary_encode(pc.fill_null(per_record, "unknown batch").combine_chunks()
                                   if isinstance(per_record, pa.ChunkedArray) else
                                   pc.fill_null(per_record, "unknown batch"))
        return _np(enc.indices).astype(np.int64), enc.dictionary.to_pylist(), exact


def group_table(counts: np.ndarray, labels: list[str], limit: int) -> pa.Table:
    """Groups (rows of ``counts``: records per :data:`OUTCOME_CODES`) as the grouped views
    show them: the ``limit`` groups with most rejected + collateral records first (then most
    records, then by label), the rest summed as ``other``.  Shared by the local views and
    their Spark aggregations, so both engines draw the same bars."""
    counts = np.asarray(counts, dtype=np.int64).reshape(len(labels), 4)
    bad = counts[:, 1] + counts[:, 2]
    by_label = np.argsort(np.argsort(np.asarray(labels, dtype=object))) if labels else \
        np.zeros(0, np.int64)
    order = np.lexsort((by_label, -counts.sum(axis=1), -bad))
    keep, rest = order[:limit], order[limit:]
    names = [labels[i] for i in keep]
    rows = counts[keep]
    if len(rest):
        names.append(f"other ({len(rest)})")
        rows = np.vstack([rows, counts[rest].sum(axis=0)])
    return pa.table({"group": pa.array(names, pa.string()),
                     **{o: pa.array(rows[:, j] if len(rows) else [], pa.int64())
                        for j, o in enumerate(OUTCOME_CODES)
                        if o != "undetermined" or rows[:, j].any()}})


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


def _coarsen(spans: dict[str, np.ndarray], max_spans: int) -> dict[str, np.ndarray]:
    """Merge neighbouring spans of a partition across the smallest offset gaps until at most
    ``max_spans`` remain (plus one per partition at worst); merged reasons become -1 when
    they differ."""
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
