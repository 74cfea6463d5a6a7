"""Records grouped for the outcome-bar views: the sample's content (value schema id, key
pattern) per record, lined up with any engine's verdicts through
:meth:`~kqlab.validate.view.VerdictsView.record_reasons`, and the grouped table the bars draw.

Nothing here knows an engine: the verdicts answer per-record outcomes, the sample (a local
records table) gives the content, and the two meet on (topic, partition, offset).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.view import OUTCOME_CODES, ViewError

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.validate.replayer import Replayer
    from kqlab.validate.sample import Sample
    from kqlab.validate.view import VerdictsView

#: what a view accepts as the sample the verdicts were replayed from
SampleLike: TypeAlias = "Sample | Replayer | pa.Table"

__all__ = ["SampleLike", "content_counts", "group_table", "key_pattern_groups",
           "sample_tables", "schema_id_groups"]


def _np(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return arr.to_numpy(zero_copy_only=False)


def sample_tables(sample: SampleLike | None) -> tuple[pa.Table | None, pa.Table | None]:
    """The records and batches tables of ``sample`` (a Sample, a Replayer — its sample — or a
    records table, which has no batches)."""
    from kqlab.validate.replayer import Replayer
    from kqlab.validate.sample import Sample

    if sample is None:
        return None, None
    if isinstance(sample, Replayer):
        sample = sample.sample
    if isinstance(sample, pa.Table):
        return sample, None
    if isinstance(sample, Sample):
        return sample.records, sample.batches
    raise ViewError(f"sample must be a Sample, a Replayer or a records table, not "
                    f"{type(sample).__name__}")


def needs_records(sample: SampleLike | None, what: str) -> pa.Table:
    """The sample's records table, or a :class:`ViewError` saying the view reads ``what``."""
    records, _ = sample_tables(sample)
    if records is None:
        raise ViewError(f"this view reads the records' {what}: pass sample= (the Sample, "
                        "records table or Replayer the verdicts came from)")
    return records


def verdict_rows(keys: pa.Table, records: pa.Table) -> np.ndarray:
    """For every row of ``records``, the row of the same record in ``keys`` (the verdicts'
    topic/partition/offset), -1 when the verdicts do not hold it."""
    n = records.num_rows
    if keys.num_rows == n and n and pc.all(pc.and_(
            pc.equal(keys.column("offset"), records.column("offset")),
            pc.equal(keys.column("partition"), records.column("partition")))).as_py():
        return np.arange(n)  # the usual case: the verdicts of this very sample, row for row
    if n == 0:
        return np.zeros(0, np.int64)
    cols = ["topic", "partition", "offset"]
    left = records.select(cols).cast(pa.schema([("topic", pa.string()),
                                                ("partition", pa.int32()),
                                                ("offset", pa.int64())])).append_column(
        "_r", pa.array(np.arange(n)))
    right = keys.select(cols).append_column("_v", pa.array(np.arange(keys.num_rows)))
    joined = left.join(right, cols, join_type="left outer")
    if joined.num_rows != n:
        raise ViewError("the sample's records do not match the verdicts (duplicate offsets): "
                        "pass the sample the verdicts were replayed from")
    out = np.full(n, -1, np.int64)
    v = joined.column("_v")
    have = _np(pc.is_valid(v)).astype(bool)
    out[_np(joined.column("_r")).astype(np.int64)[have]] = _np(v.filter(pc.is_valid(v)))
    return out


def content_counts(verdicts: VerdictsView, records: pa.Table, codes: np.ndarray,
                   labels: list[str]) -> np.ndarray:
    """Records per outcome per group: ``codes`` gives each row of the sample's ``records``
    a group (index into ``labels``, -1: none), the verdicts give its outcome."""
    reasons = verdicts.record_reasons()
    rows = verdict_rows(reasons.keys, records)
    valid = (codes >= 0) & (rows >= 0)
    outcome = reasons.outcome[rows[valid]].astype(np.int64)
    k = len(labels)
    if not k:
        return np.zeros((0, 4), np.int64)
    return np.bincount(codes[valid] * 4 + outcome, minlength=4 * k).reshape(k, 4)


def schema_id_groups(records: pa.Table) -> tuple[np.ndarray, list[str]]:
    """Per record: a group code for its value's schema id (Confluent wire format)."""
    from kqlab.serde.wire import parse_wire

    info = parse_wire(records.column("value"))
    framed = _np(info.framed).astype(bool)
    ids = _np(pc.fill_null(info.schema_id, 0)).astype(np.int64)
    null = ~info.valid
    uniq, inv = np.unique(ids[framed], return_inverse=True)
    labels = [f"schema id {i}" for i in uniq.tolist()]
    codes = np.full(records.num_rows, -1, np.int64)
    codes[framed] = inv
    if (~framed & ~null).any():
        codes[~framed & ~null] = len(labels)
        labels.append("no wire header")
    if null.any():
        codes[null] = len(labels)
        labels.append("null (tombstone)")
    return codes, labels


def key_pattern_groups(records: pa.Table, *, letters: bool) -> tuple[np.ndarray, list[str]]:
    """Per record: a group code for its key's pattern (see
    :func:`~kqlab.viz._masking.key_shape`)."""
    from kqlab.viz._masking import key_shape

    shapes = key_shape(records.column("key"), letters=letters)
    enc = pc.dictionary_encode(shapes)
    return _np(enc.indices).astype(np.int64), enc.dictionary.to_pylist()


def group_table(counts: np.ndarray, labels: list[str], limit: int) -> pa.Table:
    """Groups (rows of ``counts``: records per :data:`OUTCOME_CODES`) as the grouped views
    show them: the ``limit`` groups with most rejected + collateral records first (then most
    records, then by label), the rest summed as ``other``."""
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
