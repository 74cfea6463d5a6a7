"""Spec §3.D.5: how a batch's record errors become one response (``processRecordErrors``,
``RecordValidationException``): INVALID_TIMESTAMP wins the top-level code when any record has
it, else INVALID_RECORD with the first three errors rendered as Java renders them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka import errors as kerr
from kqlab.kafka.checks._check import CHECKS, Check

D5_TIMESTAMP = CHECKS.add(Check(
    "D5", "3.D.5", kerr.INVALID_TIMESTAMP,
    "One or more records have been rejected due to invalid timestamp",
    "some record error of the batch is INVALID_TIMESTAMP", "LogValidator.processRecordErrors",
    "error_message", id="D5/timestamp"))
D5_RECORD = CHECKS.add(Check(
    "D5", "3.D.5", kerr.INVALID_RECORD,
    "One or more records have been rejected due to {count} record errors in total, and only "
    "showing the first three errors at most: [{shown}]",
    "a batch has record errors, none of them INVALID_TIMESTAMP",
    "LogValidator.processRecordErrors", "error_message"))

INVALID_TIMESTAMP_MESSAGE = D5_TIMESTAMP.template


def render_record_error(batch_index: int, message: str | None) -> str:
    """``ProduceResponse.RecordError.toString``: a null message prints as ``message=null``."""
    shown = "null" if message is None else f"'{message}'"
    return f"RecordError(batchIndex={batch_index}, message={shown})"


def render_error_list(errors: Sequence[tuple[int, str | None]]) -> str:
    """The INVALID_RECORD top-level text for one batch's record errors (in iteration order)."""
    shown = ", ".join(render_record_error(i, m) for i, m in errors[:3])
    return D5_RECORD.render(count=len(errors), shown=shown)


def render_error_lists(n_err: np.ndarray, offsets: np.ndarray, batch_index: np.ndarray,
                       messages: pa.Array, rows: np.ndarray) -> np.ndarray:
    """:func:`render_error_list` for many batches at once.

    ``offsets`` (n + 1) cut the flat per-record-error arrays ``batch_index``/``messages`` into
    batches; ``n_err`` is each batch's error count; only the batches at ``rows`` are rendered
    (an object array with one entry per batch, None elsewhere)."""
    out = np.full(len(n_err), None, dtype=object)
    if not len(rows):
        return out
    k = np.minimum(3, n_err[rows])
    ends = np.cumsum(k)
    pos = np.repeat(offsets[rows].astype(np.int64) - (ends - k), k) + np.arange(int(ends[-1]))
    msgs = messages.take(pa.array(pos))
    quoted = pc.binary_join_element_wise("'", msgs, "'", "")
    shown = pc.binary_join_element_wise(
        "RecordError(batchIndex=", pa.array(batch_index[pos], pa.int32()).cast(pa.string()),
        ", message=", pc.fill_null(quoted, "null"), ")", "")
    lists = pa.ListArray.from_arrays(pa.array(np.concatenate(([0], ends)), pa.int32()), shown)
    text = D5_RECORD.render_array({
        "count": pa.array(n_err[rows], pa.int64()), "shown": pc.binary_join(lists, ", ")})
    out[rows] = text.to_numpy(zero_copy_only=False)
    return out
