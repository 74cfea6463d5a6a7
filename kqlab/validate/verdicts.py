"""Verdict tables and their summaries (ARCHITECTURE.md, "Verdicts").

Record verdicts say for every record whether production would have ``accepted`` it,
``rejected`` it (it failed itself, or its whole batch failed a batch-level check) or rejected it
as ``collateral`` (it was fine, but a sibling in its batch failed), with every failure that
applies (policy rules, ``observe`` rules included, and broker checks).  Batch verdicts are the
broker's answer per batch plus the enforcement profile and what the Java producer does with it
(spec §6: retried, split, or failed — records that are *delayed* versus *lost*).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.errors import error_for_code
from kqlab.records import BATCH_VERDICTS_SCHEMA, PARAMS_TYPE
from kqlab.validate.aggregates import LocalView, RecordCodes

#: one failure of a record: the rule id (a policy rule's ``id``, or ``broker:<step>`` for a
#: broker check), its Kafka error code (0: not enforced), the human message, and its
#: identity as data: ``kind`` (the rule kind, or ``broker``), ``step`` (the spec step of a
#: broker check, e.g. ``R4`` or ``C3``; null for policy rules) and ``params`` (what the check
#: saw: the fields of its message template).  Views group by the data, never by the text.
FAILURE_TYPE = pa.list_(pa.struct([("rule", pa.string()), ("code", pa.int16()),
                                   ("message", pa.string()), ("kind", pa.string()),
                                   ("step", pa.string()), ("params", PARAMS_TYPE)]))

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


def producer_action(error_code: int, record_count: int | None, duplicate: bool = False) -> str:
    """What the Java producer does with a batch's answer (spec §6).

    ``appended`` / ``duplicate`` (acknowledged), ``split`` (MESSAGE_TOO_LARGE with more than one
    record: halves re-enqueued), ``retried`` (a retriable error: the batch is resent unchanged
    until delivery.timeout.ms, so its records are *delayed*, and lost only if the cause
    persists), ``failed`` (not retriable: the records are *lost* to the application's callback).
    """
    if error_code == 0:
        return "duplicate" if duplicate else "appended"
    if error_code == 10 and (record_count or 0) > 1:
        return "split"
    try:
        retriable = error_for_code(error_code).retriable
    except KeyError:
        retriable = False
    return "retried" if retriable else "failed"


@dataclass
class Verdicts(LocalView):
    """The outcome of a replay: record and batch verdicts, rule results, and how it was run.

    Its views (reasons, spans, timeline, ...: :class:`~kqlab.validate.view.VerdictsView`)
    come from :class:`~kqlab.validate.aggregates.LocalView`; ``codes`` are the per-record
    codes the replay computed while building the tables (None: derived when needed)."""

    records: pa.Table
    batches: pa.Table
    rules: pa.Table
    profile: str
    framing: str
    now: int
    policy_name: str | None = None
    policy_hash: str | None = None
    issues: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    codes: RecordCodes | None = field(default=None, repr=False, compare=False)

    # -- summaries (Arrow group-bys, no per-record Python) ------------------------------------
    def by_outcome(self) -> dict[str, int]:
        """Records per outcome (every outcome listed, zeros included; ``undetermined`` only
        when some batch could not be judged from the tables alone)."""
        counts = dict.fromkeys(OUTCOMES, 0)
        codes = self.codes
        if codes is not None and codes.table is self.records:
            # the replay's own outcome codes (0-3: OUTCOMES, then undetermined)
            per = np.bincount(codes.outcome, minlength=4)
            counts = {o: int(c) for o, c in zip(OUTCOMES, per[:3], strict=True)}
            if per[3]:
                counts["undetermined"] = int(per[3])
            return counts
        vc = pc.value_counts(self.records.column("outcome"))
        for item in vc.to_pylist():
            counts[item["values"]] = item["counts"]
        return counts

    def by_error(self) -> dict[str, dict[str, int]]:
        """Per broker error name: batches and records."""
        t = self.batches.group_by("error_name").aggregate([("record_count", "sum"),
                                                           ("record_count", "count")])
        return {r["error_name"]: {"batches": r["record_count_count"],
                                  "records": r["record_count_sum"] or 0}
                for r in t.to_pylist()}

    def by_partition(self) -> pa.Table:
        """Per topic-partition: records by outcome."""
        return _pivot(self.records, ["topic", "partition"])

    def by_time(self, bucket_ms: int = 60_000) -> pa.Table:
        """Per time bucket (record timestamp floored to ``bucket_ms``): records by outcome."""
        ts = self.records.column("timestamp")
        bucket = pc.multiply(pc.divide(ts, pa.scalar(bucket_ms, pa.int64())),
                             pa.scalar(bucket_ms, pa.int64()))
        return _pivot(self.records.append_column("bucket", bucket), ["bucket"])

    def by_producer(self) -> pa.Table:
        """Per producer id: batches, rejected batches, and records per producer action."""
        b = self.batches
        rejected = pc.not_equal(b.column("error_code"), 0)
        t = b.append_column("rejected", pc.cast(rejected, pa.int64()))
        out = t.group_by("producer_id").aggregate([
            ("record_count", "count"), ("rejected", "sum"), ("record_count", "sum"),
        ])
        names = {"record_count_count": "batches", "rejected_sum": "rejected_batches",
                 "record_count_sum": "records"}
        out = out.rename_columns([names.get(n, n) for n in out.column_names])
        return out.select(["producer_id", "batches", "rejected_batches", "records"]).sort_by(
            "producer_id")

    def by_action(self) -> dict[str, int]:
        """Records per producer action: how many would be appended, delayed (retried/split) or
        lost (failed)."""
        t = self.batches.group_by("producer_action").aggregate([("record_count", "sum")])
        return {r["producer_action"]: r["record_count_sum"] or 0 for r in t.to_pylist()}

    def vet(self, policy: Any, *, source: str | None = None, today: str | None = None) -> Any:
        """``policy`` with its provenance: where it was replayed, the counts, its content hash.

        Write the result with :func:`kqlab.policy.save_policy`; the hash lets anyone check the
        rules are the ones that were vetted (it ignores the provenance itself).
        """
        r = self.records
        parts = []
        if r.num_rows:
            for row in r.group_by(["topic", "partition"]).aggregate(
                    [("offset", "min"), ("offset", "max")]).sort_by(
                    [("topic", "ascending"), ("partition", "ascending")]).to_pylist():
                parts.append({"topic": row["topic"], "partition": row["partition"],
                              "offsets": [row["offset_min"], row["offset_max"]]})
        return vetted(policy, framing=self.framing, now=self.now, profile=self.profile,
                      partitions=parts, records=r.num_rows, batches=self.batches.num_rows,
                      rejected=self.by_outcome()["rejected"], source=source, today=today)

    def summary(self) -> dict[str, Any]:
        """Everything above as one JSON-ready dict (what ``kqlab replay --json`` prints)."""
        return summary_of(self, self.records.num_rows, self.batches.num_rows)


def summary_of(v: Any, records: int, batches: int) -> dict[str, Any]:
    """The summary dict of any engine's verdicts ``v`` (its ``by_*`` methods answer it):
    one definition, so the engines' summaries cannot drift apart."""
    actions = v.by_action()
    return {
        "policy": v.policy_name, "policy_hash": v.policy_hash,
        "profile": v.profile, "framing": v.framing, "now": v.now,
        "records": records, "batches": batches,
        "outcomes": v.by_outcome(),
        "by_rule": v.rules.to_pylist(),
        "by_error": v.by_error(),
        "by_partition": v.by_partition().to_pylist(),
        "by_producer": v.by_producer().to_pylist(),
        "producer_actions": actions,
        "records_lost": actions.get("failed", 0),
        "records_delayed": actions.get("retried", 0) + actions.get("split", 0),
        "issues": [i.to_dict() if hasattr(i, "to_dict") else dict(i) for i in v.issues],
        "notes": v.notes,
    }


def vetted(policy: Any, *, framing: str, now: int, profile: str,
           partitions: list[dict[str, Any]], records: int, batches: int, rejected: int,
           source: str | None = None, today: str | None = None) -> Any:
    """``policy`` with the provenance of a replay (every engine's ``vet`` ends here)."""
    import datetime
    from dataclasses import replace

    from kqlab.policy.model import Provenance

    sample: dict[str, Any] = {"framing": framing, "now": now, "profile": profile}
    if source is not None:
        sample["source"] = source
    if partitions:
        sample["partitions"] = partitions
    provenance = Provenance(
        sample=sample, records=records, batches=batches, rejected_records=rejected,
        content_hash=policy.content_hash(),
        vetted_at=today or datetime.date.today().isoformat())
    return replace(policy, provenance=provenance)


def _pivot(records: pa.Table, keys: list[str]) -> pa.Table:
    t = records.select([*keys, "outcome"])
    outcomes: tuple[str, ...] = OUTCOMES
    if pc.any(pc.equal(t.column("outcome"), "undetermined")).as_py():
        outcomes = (*OUTCOMES, "undetermined")
    cols = {}
    for outcome in outcomes:
        cols[outcome] = pc.cast(pc.equal(t.column("outcome"), outcome), pa.int64())
    t = t.drop_columns(["outcome"])
    for name, col in cols.items():
        t = t.append_column(name, col)
    out = t.group_by(keys).aggregate([(o, "sum") for o in outcomes])
    out = out.rename_columns([n[:-4] if n.endswith("_sum") else n for n in out.column_names])
    return out.select([*keys, *outcomes]).sort_by([(k, "ascending") for k in keys])


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
    order = np.argsort(record_idx, kind="stable")
    counts = np.bincount(record_idx, minlength=n) if len(record_idx) else np.zeros(n, np.int64)
    offsets = np.zeros(n + 1, dtype=np.int32)
    offsets[1:] = np.cumsum(counts)
    take = pa.array(order)
    sorted_codes = rule_codes[order]
    rule_arr = pc.take(pa.array(list(labels), pa.string()), pa.array(sorted_codes),
                       memory_pool=POOL)
    code_arr = pa.array(codes[order], pa.int16())
    msg_arr = pc.take(messages, take, memory_pool=POOL)
    label_codes = pa.array(sorted_codes)
    kind_arr = pc.take(pa.array(list(kinds) if kinds is not None else [None] * len(labels),
                                pa.string()), label_codes, memory_pool=POOL)
    step_arr = pc.take(pa.array(list(steps) if steps is not None else [None] * len(labels),
                                pa.string()), label_codes, memory_pool=POOL)
    param_arr = pc.take(params, take, memory_pool=POOL) if params is not None else \
        pa.nulls(len(order), PARAMS_TYPE)
    struct = pa.StructArray.from_arrays([rule_arr, code_arr, msg_arr, kind_arr, step_arr,
                                         param_arr], fields=list(FAILURE_TYPE.value_type))
    column = pa.ListArray.from_arrays(pa.array(offsets), struct, type=FAILURE_TYPE)
    flat: dict[str, Any] = {}
    if len(order):
        # reasons in order of first appearance (what pc.unique over the rule field gives)
        # (the first row of each code present, one pass a label: labels are few, rows many)
        present = np.flatnonzero(np.bincount(sorted_codes, minlength=len(labels)))
        at = np.array([int(np.argmax(sorted_codes == c)) for c in present.tolist()],
                      dtype=np.int64)
        appearance = present[np.argsort(at, kind="stable")]
        lut = np.zeros(len(labels), dtype=np.int64)
        lut[appearance] = np.arange(len(appearance))
        flat = {"failures": (record_idx[order].astype(np.int64), rule_arr,
                              code_arr.to_numpy(zero_copy_only=False).astype(np.int64), msg_arr),
                "reason_labels": [labels[i] for i in appearance.tolist()],
                "rule_codes": lut[sorted_codes]}
    return column, flat


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
