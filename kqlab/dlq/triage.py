"""Triage of a dead-letter topic: what is in it, why, from where and when.

:func:`read_dead_letters` reads a dead-letter topic (read-only: assign, no group, no commit,
through :func:`kqlab.sources.kafka.sample`) and :class:`DeadLetters` answers the questions
triage asks, each as a small Arrow table: by reason (rule or exception), by family (who
dead-lettered it), by source topic-partition, over time.

The same views as a replay
--------------------------
:attr:`DeadLetters.verdicts` are the dead letters as a replay's verdicts — a real
:class:`~kqlab.validate.verdicts.Verdicts`, hence a
:class:`~kqlab.validate.view.VerdictsView` — so every figure, the report and the explorer
draw them unchanged (``kqlab.viz.rejections_by_reason(dead.verdicts)``,
``rejection_timeline``, ``rejections_by_offset``).  Each dead letter is a ``rejected`` record
with one failure: rule = its reason (a gate or data-contract rule id keeps its colour across
the replay's and the DLQ's figures), code 87 (``INVALID_RECORD``: the record was refused),
kind = its family, message = the failure headers' message, params = the failure headers.  It
sits at its *source* coordinates (topic, partition, offset) when the headers give all three,
so ``rejections_by_offset`` shows where in the source partitions the dead letters came from;
otherwise at its dead-letter coordinates, under the dead-letter topic's name.  Batches are one
per dead letter (``producer_action`` ``dead_lettered``).  ``timeline`` buckets the dead
letters' timestamps (the original records' for the gate, Connect and Streams).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.dlq.headers import FAMILY_NAMES, UNKNOWN_REASON
from kqlab.dlq.parse import DEAD_LETTERS_SCHEMA, parse_dead_letters
from kqlab.errors import KqlabError

if TYPE_CHECKING:
    import threading

    from kqlab.sources.kafka import PartitionRange
    from kqlab.sources.progress import Progress
    from kqlab.validate.verdicts import Verdicts

__all__ = ["DLQ_REASONS_SCHEMA", "DLQ_SOURCES_SCHEMA", "DeadLetterError", "DeadLetters",
           "read_dead_letters"]

#: the code every dead letter's failure carries in :attr:`DeadLetters.verdicts`
DEAD_CODE = 87

#: :meth:`DeadLetters.by_reason`: one row per reason, most dead letters first (then by name)
DLQ_REASONS_SCHEMA = pa.schema([
    ("reason", pa.string()), ("family", pa.string()), ("records", pa.int64()),
    ("share", pa.float64()), ("first_timestamp", pa.int64()), ("last_timestamp", pa.int64()),
    ("source_topics", pa.list_(pa.string())), ("message", pa.string()),
    ("example_partition", pa.int32()), ("example_offset", pa.int64()),
])
#: :meth:`DeadLetters.by_source`: one row per source topic-partition (nulls: not said)
DLQ_SOURCES_SCHEMA = pa.schema([
    ("source_topic", pa.string()), ("source_partition", pa.int32()), ("records", pa.int64()),
    ("first_offset", pa.int64()), ("last_offset", pa.int64()), ("reasons", pa.int64()),
])


class DeadLetterError(KqlabError):
    """A dead-letter request cannot be carried out as asked (the message says what to do)."""


def _np(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(a.to_numpy(zero_copy_only=False))


@dataclass
class DeadLetters:
    """The parsed dead letters of one topic (:data:`~kqlab.dlq.parse.DEAD_LETTERS_SCHEMA`, in
    the topic's partition and offset order) and the tables triage reads."""

    records: pa.Table
    topic: str
    #: when they were read (epoch ms): the clock of :attr:`verdicts`
    read_at: int = field(default_factory=lambda: int(time.time() * 1000))
    #: where they were read from (None: built from a table)
    bootstrap: str | None = None
    ranges: list[PartitionRange] = field(default_factory=list)
    elapsed_s: float = 0.0

    @classmethod
    def from_records(cls, records: pa.Table, topic: str | None = None) -> DeadLetters:
        """Dead letters from a records table read from a dead-letter topic (``RECORDS_SCHEMA``:
        a live sample, a snapshot's records, a log segment's)."""
        if records.num_rows > 1:  # in the topic's order (a read returns it so: keep it then)
            part = _np(records["partition"]).astype(np.int64)
            off = _np(records["offset"]).astype(np.int64)
            dp, do = np.diff(part), np.diff(off)
            if not ((dp > 0) | ((dp == 0) & (do > 0))).all():
                records = records.sort_by([("partition", "ascending"), ("offset", "ascending")])
        name = topic if topic is not None else (
            str(records["topic"][0].as_py()) if records.num_rows else "")
        return cls(parse_dead_letters(records), name)

    # -- counts ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.records.num_rows

    def by_family(self) -> dict[str, int]:
        """Dead letters per family (every family listed, ``none`` last)."""
        counts = dict.fromkeys((*FAMILY_NAMES[1:], FAMILY_NAMES[0]), 0)
        for row in pc.value_counts(self.records.column("family")).to_pylist():
            counts[row["values"]] = row["counts"]
        return counts

    def by_reason(self) -> pa.Table:
        """Per reason (:data:`DLQ_REASONS_SCHEMA`): the family (``mixed`` when several
        producers name it), records and share, first/last timestamp, the source topics, and
        the first dead letter's message and coordinates."""
        t = self.records
        if not t.num_rows:
            return DLQ_REASONS_SCHEMA.empty_table()
        g = t.group_by("reason", use_threads=False).aggregate([
            ("dlq_offset", "count"), ("family", "distinct"), ("timestamp", "min"),
            ("timestamp", "max"), ("source_topic", "distinct"), ("message", "first"),
            ("dlq_partition", "first"), ("dlq_offset", "first")])
        records = g["dlq_offset_count"]
        families = [f[0] if len(f) == 1 else "mixed" for f in g["family_distinct"].to_pylist()]
        topics = pa.array([sorted(x for x in ts if x is not None)
                           for ts in g["source_topic_distinct"].to_pylist()],
                          pa.list_(pa.string()))
        out = pa.table([
            g["reason"], pa.array(families, pa.string()), records,
            pc.divide(pc.cast(records, pa.float64()), float(t.num_rows)),
            g["timestamp_min"], g["timestamp_max"], topics, g["message_first"],
            g["dlq_partition_first"], g["dlq_offset_first"]], schema=DLQ_REASONS_SCHEMA)
        return out.sort_by([("records", "descending"), ("reason", "ascending")])

    def by_source(self) -> pa.Table:
        """Per source topic-partition (:data:`DLQ_SOURCES_SCHEMA`): dead letters, their
        source offset range, distinct reasons; most dead letters first."""
        t = self.records
        if not t.num_rows:
            return DLQ_SOURCES_SCHEMA.empty_table()
        g = t.group_by(["source_topic", "source_partition"], use_threads=False).aggregate([
            ("dlq_offset", "count"), ("source_offset", "min"), ("source_offset", "max"),
            ("reason", "count_distinct")])
        out = pa.table([g["source_topic"], g["source_partition"], g["dlq_offset_count"],
                        g["source_offset_min"], g["source_offset_max"],
                        g["reason_count_distinct"]], schema=DLQ_SOURCES_SCHEMA)
        return out.sort_by([("records", "descending"), ("source_topic", "ascending"),
                            ("source_partition", "ascending")])

    def timeline(self, bucket_ms: int | None = None, max_buckets: int = 300,
                 max_reasons: int = 8) -> tuple[pa.Table, int]:
        """Dead letters per time bucket and top reason: the replay timeline's table
        (``bucket``, ``total``, one column per top reason, ``other``) and the bucket size."""
        return self.verdicts.timeline(bucket_ms, max_buckets, max_reasons)

    def unknown(self) -> pa.Table:
        """The dead letters whose reason is unknown, with their problems (never dropped)."""
        return self.records.filter(pc.equal(self.records.column("reason"), UNKNOWN_REASON))

    def redriven_before(self) -> int:
        """Dead letters whose original record carries a redrive marker: redriven once and
        dead-lettered again (a policy and its enforcement point disagree)."""
        return int(self.records.column("redrive_marker").is_valid().to_numpy(
            zero_copy_only=False).sum())

    # -- the verdicts view -------------------------------------------------------------------
    @cached_property
    def verdicts(self) -> Verdicts:
        """The dead letters as a replay's verdicts (see the module doc): a
        :class:`~kqlab.validate.view.VerdictsView` every figure and the report take."""
        return dead_letter_verdicts(self.records, self.topic, self.read_at)

    # -- one document ------------------------------------------------------------------------
    def summary(self, examples: int = 3) -> dict[str, Any]:
        """Everything triage shows, as one JSON-ready dict (``kqlab dlq inspect --json``)."""
        t = self.records
        ts = _np(t.column("timestamp")).astype(np.int64) if t.num_rows else np.zeros(0)
        known = ts[ts >= 0]
        table, bucket = self.timeline(max_buckets=60) if t.num_rows else (pa.table({}), 0)
        unknown = self.unknown()
        problems: dict[str, int] = {}
        for ps in t.column("problems").to_pylist():
            for p in ps or ():
                problems[p] = problems.get(p, 0) + 1
        ex_rows = unknown.slice(0, examples).select(
            ["dlq_partition", "dlq_offset", "family", "problems", "detail"]).to_pylist()
        for r in ex_rows:
            r["detail"] = dict(r["detail"] or ())
        return {
            "topic": self.topic, "bootstrap": self.bootstrap, "records": t.num_rows,
            "partitions": [r.to_dict() for r in self.ranges],
            "first_timestamp": int(known.min()) if len(known) else None,
            "last_timestamp": int(known.max()) if len(known) else None,
            "by_family": self.by_family(),
            "by_reason": self.by_reason().to_pylist(),
            "by_source": self.by_source().to_pylist(),
            "timeline": {"bucket_ms": bucket, "buckets": table.to_pylist()},
            "unknown_reason": {"records": unknown.num_rows,
                               "problems": dict(sorted(problems.items(),
                                                       key=lambda kv: (-kv[1], kv[0]))),
                               "examples": ex_rows},
            "redriven_before": self.redriven_before(),
            "elapsed_s": round(self.elapsed_s, 3),
        }


def dead_letter_verdicts(records: pa.Table, topic: str, now: int) -> Verdicts:
    """:attr:`DeadLetters.verdicts` of a :data:`~kqlab.dlq.parse.DEAD_LETTERS_SCHEMA` table."""
    from kqlab.validate.assemble import RULES_SCHEMA
    from kqlab.validate.verdict_tables import (
        RECORD_VERDICTS_SCHEMA,
        REPLAY_BATCHES_SCHEMA,
        failures_from_codes,
    )
    from kqlab.validate.verdicts import Verdicts

    n = records.num_rows
    located = pc.and_(pc.and_(records["source_topic"].is_valid(),
                              records["source_partition"].is_valid()),
                      records["source_offset"].is_valid())
    v = pa.table({
        "topic": pc.if_else(located, records["source_topic"],
                            pa.repeat(pa.scalar(topic), n) if n else pa.array([], pa.string())),
        "partition": pc.if_else(located, records["source_partition"], records["dlq_partition"]),
        "offset": pc.if_else(located, records["source_offset"], records["dlq_offset"]),
        "dlq_partition": records["dlq_partition"], "dlq_offset": records["dlq_offset"],
        "row": pa.array(np.arange(n, dtype=np.int64)),
    })
    order = v.sort_by([("topic", "ascending"), ("partition", "ascending"),
                       ("offset", "ascending"), ("dlq_partition", "ascending"),
                       ("dlq_offset", "ascending")])["row"]
    r = records.take(order)
    v = v.take(order)
    reasons = r["reason"].combine_chunks() if n else pa.array([], pa.string())
    enc = pc.dictionary_encode(reasons)
    labels = [str(x) for x in enc.dictionary.to_pylist()]
    codes = _np(enc.indices).astype(np.int64)
    fam = r["family"].to_pylist()
    kinds: list[str | None] = []
    for i in range(len(labels)):
        kinds_i = {fam[k] for k in np.flatnonzero(codes == i)[:1000].tolist()}
        kinds.append(kinds_i.pop() if len(kinds_i) == 1 else "mixed")
    messages = pc.fill_null(r["message"], "(the failure headers give no message)") \
        .combine_chunks() if n else pa.array([], pa.string())
    failures, _ = failures_from_codes(
        n, np.arange(n, dtype=np.int64), codes, labels, np.full(n, DEAD_CODE, np.int64),
        messages, kinds, [None] * len(labels), r["detail"].combine_chunks() if n else None)
    rec = pa.table([v["topic"], v["partition"].cast(pa.int32()), v["offset"].cast(pa.int64()),
                    v["offset"].cast(pa.int64()), pa.repeat(pa.scalar(0, pa.int32()), n),
                    r["timestamp"], pa.repeat(pa.scalar("rejected"), n), failures],
                   schema=RECORD_VERDICTS_SCHEMA)
    errors = pa.StructArray.from_arrays(
        [pa.repeat(pa.scalar(0, pa.int32()), n), messages,
         pa.nulls(n, pa.string()), reasons, pa.nulls(n, pa.map_(pa.string(), pa.string()))],
        fields=list(REPLAY_BATCHES_SCHEMA.field("record_errors").type.value_type))
    record_errors = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), errors)
    batches = pa.table({
        "topic": rec["topic"], "partition": rec["partition"], "batch_offset": rec["offset"],
        "error_code": pa.repeat(pa.scalar(DEAD_CODE, pa.int16()), n),
        "error_name": pa.repeat(pa.scalar("INVALID_RECORD"), n),
        "error_message": messages, "record_errors": record_errors,
        "check": pa.repeat(pa.scalar("dlq"), n), "detail": pa.nulls(n, pa.string()),
        "record_count": pa.repeat(pa.scalar(1, pa.int32()), n),
        "position": pa.repeat(pa.scalar(-1, pa.int64()), n),
        "params": r["detail"].combine_chunks() if n else pa.nulls(0, pa.map_(pa.string(),
                                                                              pa.string())),
        "producer_id": pa.repeat(pa.scalar(-1, pa.int64()), n),
        "profile": pa.repeat(pa.scalar("dlq"), n),
        "framing": pa.repeat(pa.scalar("dead letters"), n),
        "producer_action": pa.repeat(pa.scalar("dead_lettered"), n),
    }, schema=REPLAY_BATCHES_SCHEMA)
    counts = np.bincount(codes, minlength=len(labels))
    rules = pa.Table.from_pylist([
        {"rule": label, "kind": kinds[i], "mode": "reject", "severity": "error",
         "exportable": False, "failed_records": int(counts[i]),
         "rejected_records": int(counts[i]), "rejected_batches": int(counts[i]),
         "evaluation_errors": 0} for i, label in enumerate(labels)], RULES_SCHEMA)
    notes = [f"dead letters of {topic}: each is a rejected record at its source coordinates "
             "(its dead-letter coordinates where the failure headers do not give them)"]
    return Verdicts(rec, batches, rules, "dlq", "dead letters", now, None, None, [], notes)


def read_dead_letters(config_or_bootstrap: str | Mapping[str, Any], topic: str, *,
                      partitions: list[int] | None = None, timeout_s: float = 30.0,
                      progress: Progress | None = None,
                      cancel: threading.Event | None = None) -> DeadLetters:
    """Read the whole dead-letter topic ``topic`` (or ``partitions`` of it) and parse it.

    Read-only, as :func:`kqlab.sources.kafka.sample` (no group, no commit); the end of each
    partition is fixed when reading starts.  The records come through raw Fetch requests
    decoded by kqlab (the same records a consumer delivers, transaction markers dropped, ~5×
    faster on header-heavy dead letters than building each message's header list), or
    through the consumer when the client settings include SASL/SSL options the raw client
    cannot pass on.  An empty topic gives empty dead letters; a
    missing one raises :class:`~kqlab.sources.kafka.UnknownTopicError`.
    """
    from kqlab.sources.kafka import sample

    result = sample(config_or_bootstrap, topic, partitions=partitions, timeout_s=timeout_s,
                    allow_empty=True, progress=progress, cancel=cancel,
                    exact_framing=raw_fetch_possible(config_or_bootstrap))
    dead = DeadLetters.from_records(result.records, topic)
    dead.bootstrap = result.bootstrap
    dead.ranges = list(result.ranges)
    dead.elapsed_s = result.elapsed_s
    return dead


def raw_fetch_possible(config_or_bootstrap: str | Mapping[str, Any]) -> bool:
    """The client settings can be passed to the raw Fetch client (else: read with the
    consumer, which takes every librdkafka setting)."""
    from kqlab.sources.kafka_client import protocol_client_config
    from kqlab.sources.kafka_errors import KafkaSourceError

    try:
        protocol_client_config(config_or_bootstrap)
    except KafkaSourceError:
        return False
    return True


def empty_dead_letters(topic: str) -> DeadLetters:
    """No dead letters (what an empty topic reads as)."""
    return DeadLetters(DEAD_LETTERS_SCHEMA.empty_table(), topic)
