"""A sample check's window drill-down: the sample's records one window (group) of a check
read — what a failing window's observed value was computed from.

The group labels and window starts are the checks' own (:func:`kqlab.validate.sample_checks
.columns.group_labels`, ``floor(ts / window) * window``, :func:`~kqlab.validate
.sample_checks.columns.reads` for transaction markers and ``when``), read from the same
cached context the replay judged, so the records listed are exactly those counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.policy.model import Check, Policy
    from kqlab.validate.replayer import Replayer

__all__ = ["WINDOW_RECORD_COLUMNS", "window_records"]

#: the columns of :func:`window_records`' table (``row``: the record's row in the sample;
#: ``decoded``: the value as the policy's format decodes it, null when it does not decode)
WINDOW_RECORD_COLUMNS = ("row", "topic", "partition", "offset", "timestamp", "key", "value",
                         "decoded")


def window_records(replayer: Replayer, policy: Policy, check: Check, group: str | None,
                   start: int | None, end: int | None) -> pa.Table:
    """The records of ``replayer``'s sample that ``check`` read in group ``group`` (None:
    no ``by``) with a timestamp in ``[start, end)`` (None: unbounded), in log order."""
    from kqlab.validate.sample_checks.columns import group_labels, reads

    ctx = replayer.context(policy)
    keep = reads(ctx, replayer.control, check.when)
    ts = ctx.timestamps
    if start is not None:
        keep &= ts >= start
    if end is not None:
        keep &= ts < end
    if check.by is not None:
        labels = ctx.memo(f"check-by:{check.by}", lambda: group_labels(ctx, check.by))
        if isinstance(labels, pa.DictionaryArray):
            labels = labels.dictionary_decode()
        same = pc.is_null(labels) if group is None else pc.equal(labels, group)
        keep &= np.asarray(same.fill_null(False).to_numpy(zero_copy_only=False), bool)
    rows = np.flatnonzero(keep)
    taken = pa.array(rows, pa.int64())
    records = replayer.sample.records.take(taken).select(list(WINDOW_RECORD_COLUMNS[1:-1]))
    records = records.add_column(0, "row", taken)
    return records.append_column("decoded", _decoded(replayer, policy, taken))


def _decoded(replayer: Replayer, policy: Policy, rows: pa.Array) -> pa.Array:
    """The window's values decoded (the replay's cached column); nulls when the policy's
    value format does not decode."""
    from kqlab.validate.rules import decodes

    if not decodes(policy.value) or len(rows) == 0:
        return pa.nulls(len(rows))
    return replayer.context(policy).decoded("value").values.take(rows)
