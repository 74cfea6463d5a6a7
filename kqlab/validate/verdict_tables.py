"""The verdict tables' schemas and the helpers that build them from flat per-failure rows
(one place: the replay builds them, the local views read them, the Spark engine writes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.records import BATCH_VERDICTS_SCHEMA, PARAMS_TYPE

#: one failure of a record: the rule id (a policy rule's ``id``, or ``broker:<step>`` for a
#: broker check), its Kafka error code (0: not enforced), the human message, and its
#: identity as data: ``kind`` (the rule kind, or ``broker``), ``step`` (the spec step of a
#: broker check, e.g. ``R4`` or ``C3``; null for policy rules) and ``params`` (what the check
#: saw: the fields of its message template).  Views group by the data, never by the text.
#: ``status`` says what the failure is: ``failed`` (the check judged the record and it
#: failed) or ``error`` (the check could not judge it: an evaluation error, which fails the
#: record too but is not a false) — the one column every view counts errored records from.
FAILURE_TYPE = pa.list_(pa.struct([("rule", pa.string()), ("code", pa.int16()),
                                   ("message", pa.string()), ("kind", pa.string()),
                                   ("step", pa.string()), ("params", PARAMS_TYPE),
                                   ("status", pa.string())]))

#: the values of a failure's ``status``
FAILED, ERROR = "failed", "error"

RECORD_VERDICTS_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("batch_offset", pa.int64()),
    ("batch_index", pa.int32()),
    ("timestamp", pa.int64()),
    ("outcome", pa.string()),
    ("failures", FAILURE_TYPE),
])

#: the broker's verdict columns, then kqlab's replay columns
REPLAY_BATCHES_SCHEMA = pa.schema([
    *BATCH_VERDICTS_SCHEMA,
    ("producer_id", pa.int64()),
    ("profile", pa.string()),
    ("framing", pa.string()),
    ("producer_action", pa.string()),
])

OUTCOMES = ("accepted", "rejected", "collateral")


def failures_array(n: int, record_idx: np.ndarray, rules: Sequence[str] | pa.Array,
                   codes: np.ndarray, messages: Sequence[str] | pa.Array) -> pa.Array:
    """The ``failures`` list column from flat (record, rule, code, message) rows (kind, step
    and params unknown: null)."""
    rules = rules if isinstance(rules, pa.Array) else pa.array(list(rules), pa.string())
    labels = pc.unique(rules)
    coded = pc.index_in(rules, value_set=labels).to_numpy(zero_copy_only=False)
    messages = messages if isinstance(messages, pa.Array) else \
        pa.array(list(messages), pa.string())
    column, _ = failures_from_codes(n, np.asarray(record_idx, dtype=np.int64),
                                    np.asarray(coded, dtype=np.int64), labels.to_pylist(),
                                    np.asarray(codes, dtype=np.int64), messages)
    return column


#: the pool of the large per-replay buffers (per-record messages, failures, outcomes): the
#: system allocator, whose pages stay with the process between an editor's replays, where
#: the default (mimalloc) pool hands large blocks back to the OS and pays the page faults
#: again on every edit (measured: a 1M-record add-rule edit 346 -> 190 ms)
POOL = pa.system_memory_pool()


def failures_from_codes(n: int, record_idx: np.ndarray, rule_codes: np.ndarray,
                        labels: Sequence[str], codes: np.ndarray, messages: pa.Array,
                        kinds: Sequence[str | None] | None = None,
                        steps: Sequence[str | None] | None = None,
                        params: pa.Array | None = None
                        ) -> tuple[pa.Array, dict[str, Any]]:
    """The ``failures`` list column from flat rows whose rule is a code into ``labels``
    (distinct names), without one Python string per failure; and the flattened column as
    the views read it (the ``failures``, ``reason_labels`` and ``rule_codes`` of
    :class:`~kqlab.validate.aggregates.RecordCodes`), so a replay hands them over instead of
    having them derived again.

    ``kinds``/``steps`` give each label's kind and spec step (None: unknown), ``params`` each
    row's parameters (a ``map<string, string>`` array aligned with the rows, or None).
    Rows keep their given order within a record (a stable sort by record)."""
    rows = SortedFailures.of(n, record_idx, rule_codes, labels, codes)
    column, rule_arr, msg_arr = rows.column(messages, kinds, steps, params)
    flat: dict[str, Any] = {}
    if len(rows.order):
        flat = {"failures": (rows.parents, rule_arr, rows.codes, msg_arr),
                "reason_labels": rows.reason_labels, "rule_codes": rows.rule_codes}
    return column, flat


class SortedFailures:
    """Flat failure rows sorted by record (stable): the numeric part of
    :func:`failures_from_codes`, computed at once, and the column with its texts
    (:meth:`column`), which a replay builds only when its record table is read."""

    def __init__(self, n: int, labels: Sequence[str], order: np.ndarray,
                 sorted_codes: np.ndarray, parents: np.ndarray, codes: np.ndarray,
                 reason_labels: list[str], rule_codes: np.ndarray):
        self.n, self.labels, self.order = n, labels, order
        #: per sorted row: its label (index into ``labels``), record, error code (int64)
        self.sorted_codes, self.parents, self.codes = sorted_codes, parents, codes
        #: the labels present in order of first appearance, and each row's index into them
        self.reason_labels, self.rule_codes = reason_labels, rule_codes

    @classmethod
    def of(cls, n: int, record_idx: np.ndarray, rule_codes: np.ndarray,
           labels: Sequence[str], codes: np.ndarray) -> SortedFailures:
        order = np.argsort(record_idx, kind="stable")
        sorted_codes = rule_codes[order]
        # the codes as int16 and back, as the column stores them
        codes_sorted = codes[order].astype(np.int16).astype(np.int64)
        reason_labels: list[str] = []
        lut_codes = np.zeros(0, np.int64)
        if len(order):
            # reasons in order of first appearance (what pc.unique over the rule field gives)
            # (the first row of each code present, one pass a label: labels are few, rows
            # many)
            present = np.flatnonzero(np.bincount(sorted_codes, minlength=len(labels)))
            at = np.array([int(np.argmax(sorted_codes == c)) for c in present.tolist()],
                          dtype=np.int64)
            appearance = present[np.argsort(at, kind="stable")]
            lut = np.zeros(len(labels), dtype=np.int64)
            lut[appearance] = np.arange(len(appearance))
            reason_labels = [labels[i] for i in appearance.tolist()]
            lut_codes = lut[sorted_codes]
        return cls(n, labels, order, sorted_codes,
                   record_idx[order].astype(np.int64), codes_sorted, reason_labels, lut_codes)

    def column(self, messages: pa.Array, kinds: Sequence[str | None] | None = None,
               steps: Sequence[str | None] | None = None, params: pa.Array | None = None
               ) -> tuple[pa.Array, pa.Array, pa.Array]:
        """The ``failures`` list column, and its rule and message texts per sorted row."""
        labels, order, sorted_codes = self.labels, self.order, self.sorted_codes
        take = pa.array(order)
        rule_arr = pc.take(pa.array(list(labels), pa.string()), pa.array(sorted_codes),
                           memory_pool=POOL)
        code_arr = pa.array(self.codes, pa.int16())
        msg_arr = pc.take(messages, take, memory_pool=POOL)
        label_codes = pa.array(sorted_codes)
        kind_arr = pc.take(pa.array(list(kinds) if kinds is not None else [None] * len(labels),
                                    pa.string()), label_codes, memory_pool=POOL)
        step_arr = pc.take(pa.array(list(steps) if steps is not None else [None] * len(labels),
                                    pa.string()), label_codes, memory_pool=POOL)
        param_arr = pc.take(params, take, memory_pool=POOL) if params is not None else \
            pa.nulls(len(order), PARAMS_TYPE)
        struct = pa.StructArray.from_arrays([rule_arr, code_arr, msg_arr, kind_arr, step_arr,
                                             param_arr, failure_status(param_arr)],
                                            fields=list(FAILURE_TYPE.value_type))
        counts = np.bincount(self.parents, minlength=self.n) if len(self.parents) else \
            np.zeros(self.n, np.int64)
        offsets = np.zeros(self.n + 1, dtype=np.int32)
        offsets[1:] = np.cumsum(counts)
        column = pa.ListArray.from_arrays(pa.array(offsets), struct, type=FAILURE_TYPE)
        return column, rule_arr, msg_arr


def failure_status(params: pa.Array) -> pa.Array:
    """Each failure's ``status`` from its ``params``: ``error`` where the check marked that
    it could not judge the record (``params['status'] == 'error'``, set where the rule's
    evaluation errored), else ``failed``."""
    n = len(params)
    # all ``failed`` made from its buffers (an editor's million-failure pass: ~2 ms, where
    # pa.repeat takes ~250 ms and fill_null ~50 ms); errors, when there are any, on top
    width = len(FAILED)
    failed = pa.StringArray.from_buffers(
        n, pa.py_buffer((np.arange(n + 1, dtype=np.int32) * width).tobytes()),
        pa.py_buffer(FAILED.encode() * n))
    if not n or params.null_count == n:
        return failed
    said = pc.map_lookup(params, pa.scalar("status"), "first")
    errored = pc.fill_null(pc.equal(said, pa.scalar(ERROR)), False)
    if not pc.any(errored).as_py():
        return failed
    return pc.if_else(errored, pa.scalar(ERROR), failed)


def batch_ids(records: pa.Table) -> np.ndarray:
    """int64 per record: its batch, numbered in record order (records arrive batch by batch,
    so a change of topic, partition or batch offset starts the next one).  Reads the
    ``topic``, ``partition`` and ``batch_offset`` columns of a records or record-verdicts
    table (the same values in both)."""
    n = records.num_rows
    if n == 0:
        return np.zeros(0, np.int64)
    col = records.column("topic")
    topic = pc.dictionary_encode(col).combine_chunks().indices.to_numpy(zero_copy_only=False) \
        if col.num_chunks else np.zeros(n, np.int64)
    part = records.column("partition").to_numpy(zero_copy_only=False).astype(np.int64)
    boff = records.column("batch_offset").to_numpy(zero_copy_only=False).astype(np.int64)
    new = np.ones(n, dtype=bool)
    new[1:] = (topic[1:] != topic[:-1]) | (part[1:] != part[:-1]) | (boff[1:] != boff[:-1])
    return np.cumsum(new) - 1
