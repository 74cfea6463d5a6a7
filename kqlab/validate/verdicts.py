"""Verdict tables and their summaries (ARCHITECTURE.md, "Verdicts").

Record verdicts say for every record whether production would have ``accepted`` it,
``rejected`` it (it failed itself, or its whole batch failed a batch-level check) or rejected it
as ``collateral`` (it was fine, but a sibling in its batch failed), with every failure that
applies (policy rules, ``observe`` rules included, and broker checks).  Batch verdicts are the
broker's answer per batch plus the enforcement profile and what the Java producer does with it
(spec §6: retried, split, or failed — records that are *delayed* versus *lost*); the summary
also counts them for a librdkafka producer, which never splits (docs/producer-outcomes.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.errors import error_for_code
from kqlab.policy.model import Policy
from kqlab.validate.aggregates import DeferredRecords, LocalView, RecordCodes
from kqlab.validate.sample_checks.results import CheckResults, empty_check_results
from kqlab.validate.verdict_tables import (  # noqa: F401 - the verdict contracts, re-exported
    FAILURE_TYPE,
    OUTCOMES,
    POOL,
    RECORD_VERDICTS_SCHEMA,
    REPLAY_BATCHES_SCHEMA,
    batch_ids,
    failures_array,
    failures_from_codes,
)

#: the producer clients whose next step kqlab knows: the Java client (spec §6, read from its
#: source) and librdkafka (confluent-kafka and the other librdkafka bindings: measured against the
#: real broker, docs/producer-outcomes.md)
PRODUCER_CLIENTS = ("java", "librdkafka")


def producer_action(error_code: int, record_count: int | None, duplicate: bool = False,
                    client: str = "java") -> str:
    """What a producer ``client`` does with a batch's answer — the one home of that mapping.

    ``appended`` / ``duplicate`` (acknowledged), ``split`` (Java only: MESSAGE_TOO_LARGE with
    more than one record, halves re-enqueued), ``retried`` (a retriable error: the batch is
    resent unchanged until delivery.timeout.ms / message.timeout.ms, so its records are
    *delayed*, and lost only if the cause persists), ``failed`` (not retriable: the records are
    *lost* to the application's callback).  Both clients retry the same codes (librdkafka's
    ``rd_kafka_err_action``: CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
    NOT_ENOUGH_REPLICAS); librdkafka never splits a batch, so a MESSAGE_TOO_LARGE batch of
    several records is ``failed`` there — measured with confluent-kafka 2.16 on Kafka 4.4.0.
    """
    if client not in PRODUCER_CLIENTS:
        raise ValueError(f"unknown producer client {client!r}: choose one of "
                         f"{', '.join(PRODUCER_CLIENTS)}")
    if error_code == 0:
        return "duplicate" if duplicate else "appended"
    if error_code == 10 and (record_count or 0) > 1 and client == "java":
        return "split"
    try:
        retriable = error_for_code(error_code).retriable
    except KeyError:
        retriable = False
    return "retried" if retriable else "failed"


def client_outcomes(actions: dict[str, int]) -> dict[str, dict[str, int]]:
    """Records lost and delayed per producer client, from the Java actions' record counts
    (:meth:`Verdicts.by_action`): the two clients differ only where Java splits (librdkafka
    fails those records), so every engine's counts answer both."""
    failed, retried, split = (actions.get(a, 0) for a in ("failed", "retried", "split"))
    return {"java": {"lost": failed, "delayed": retried + split},
            "librdkafka": {"lost": failed + split, "delayed": retried}}


def librdkafka_counts(summary: Mapping[str, Any]) -> dict[str, int] | None:
    """A librdkafka producer's ``{"lost", "delayed"}`` when they differ from the Java
    producer's (it fails the batches Java splits), else None: the one test every view of the
    summary uses before it names the second client."""
    rd = (summary.get("producer_clients") or {}).get("librdkafka")
    if not rd or (rd["lost"], rd["delayed"]) == (summary.get("records_lost", 0),
                                                 summary.get("records_delayed", 0)):
        return None
    return dict(rd)


def lost_delayed_text(summary: dict[str, Any]) -> str:
    """The summary's "would be lost / delayed" sentence: the Java producer's counts, and a
    librdkafka producer's when they differ (it fails the batches Java splits)."""
    text = (f"would be lost: {summary['records_lost']:,} records; delayed (retried or split): "
            f"{summary['records_delayed']:,} (Java producer)")
    rd = librdkafka_counts(summary)
    if rd:
        text += (f"; a librdkafka producer (confluent-kafka), which never splits a batch: lost "
                 f"{rd['lost']:,}, delayed {rd['delayed']:,}")
    return text


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
    #: the policy's sample checks (None: it has none) — :meth:`checks`, :meth:`check_windows`
    check_results: CheckResults | None = field(default=None, repr=False, compare=False)

    def checks(self) -> pa.Table:
        """The sample checks' results, one row per check in policy order
        (:data:`~kqlab.validate.sample_checks.CHECK_RESULTS_SCHEMA`)."""
        return (self.check_results or empty_check_results()).results

    def check_windows(self, check: str | None = None) -> pa.Table:
        """Every judged window of the sample checks (of ``check``), in (start, group) order
        (:data:`~kqlab.validate.sample_checks.CHECK_WINDOWS_SCHEMA`)."""
        windows = (self.check_results or empty_check_results()).windows
        return windows if check is None else windows.filter(
            pc.equal(windows.column("check"), check))

    # -- summaries (Arrow group-bys, no per-record Python) ------------------------------------
    def by_outcome(self) -> dict[str, int]:
        """Records per outcome (every outcome listed, zeros included; ``undetermined`` only
        when some batch could not be judged from the tables alone)."""
        counts = dict.fromkeys(OUTCOMES, 0)
        codes = self.codes
        if codes is not None and codes.table is self.records_ref():
            # the replay's own outcome codes (0-3: OUTCOMES, then undetermined)
            # four counts over int8 codes (a bincount would widen a million of them first)
            per = [int(np.count_nonzero(codes.outcome == k)) for k in range(4)]
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
        return _pivot(self.records, ["topic", "partition"], self._outcome_codes())

    def by_time(self, bucket_ms: int = 60_000) -> pa.Table:
        """Per time bucket (record timestamp floored to ``bucket_ms``): records by outcome."""
        ts = self.records.column("timestamp")
        bucket = pc.multiply(pc.divide(ts, pa.scalar(bucket_ms, pa.int64())),
                             pa.scalar(bucket_ms, pa.int64()))
        return _pivot(self.records.append_column("bucket", bucket), ["bucket"],
                      self._outcome_codes())

    def _outcome_codes(self) -> np.ndarray | None:
        """The replay's per-record outcome codes when they describe this very table."""
        codes = self.codes
        return codes.outcome if codes is not None and codes.table is self.records_ref() \
            else None

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

    def vet(self, policy: Policy, *, source: str | None = None,
            today: str | None = None) -> Policy:
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

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """In a notebook: the kqlab MIME payload (rendered by the kqlab-lab extension, kept in
        the saved notebook) beside its HTML fallback (:mod:`kqlab.validate.mime`)."""
        from kqlab.validate import mime

        payload = mime.replay_payload(self)
        return mime.bundle(payload, mime.replay_text(payload))


def summary_of(v: Any, records: int, batches: int) -> dict[str, Any]:
    """The summary dict of any engine's verdicts ``v`` (its ``by_*`` methods answer it):
    one definition, so the engines' summaries cannot drift apart."""
    actions = v.by_action()
    clients = client_outcomes(actions)
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
        "records_lost": clients["java"]["lost"],
        "records_delayed": clients["java"]["delayed"],
        "producer_clients": clients,
        "issues": [i.to_dict() if hasattr(i, "to_dict") else dict(i) for i in v.issues],
        "notes": v.notes,
        "checks": CheckResults(v.checks(), v.check_windows()).to_dicts(),
    }


def vetted(policy: Policy, *, framing: str, now: int, profile: str,
           partitions: list[dict[str, Any]], records: int, batches: int, rejected: int,
           source: str | None = None, today: str | None = None) -> Policy:
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


def _pivot(records: pa.Table, keys: list[str], codes: np.ndarray | None = None) -> pa.Table:
    """Records per ``keys`` and outcome, one column per outcome (``undetermined`` only when
    some record is).  With the replay's outcome ``codes`` (int8, ``OUTCOME_CODES`` order) it
    groups by the codes instead of comparing outcome strings: the same table, in half the
    time (what every summary pays)."""
    if codes is not None:
        return _pivot_codes(records, keys, codes)
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


def _pivot_codes(records: pa.Table, keys: list[str], codes: np.ndarray) -> pa.Table:
    """:func:`_pivot` from outcome codes: one group-by of (keys, code), pivoted in Python
    (a row per key and outcome seen: partitions or time buckets, not records)."""
    outcomes: tuple[str, ...] = OUTCOMES
    if records.num_rows and bool((codes == len(OUTCOMES)).any()):
        outcomes = (*OUTCOMES, "undetermined")
    t = records.select(keys).append_column("_code", pa.array(codes, pa.int8()))
    counted = t.group_by([*keys, "_code"], use_threads=False).aggregate([([], "count_all")])
    rows: dict[tuple[Any, ...], list[int]] = {}
    cols = [counted.column(k).to_pylist() for k in keys]
    for i, (code, count) in enumerate(zip(counted.column("_code").to_pylist(),
                                          counted.column("count_all").to_pylist(),
                                          strict=True)):
        rows.setdefault(tuple(c[i] for c in cols), [0] * len(outcomes))[code] = count
    out = {k: pa.array([key[j] for key in rows], records.schema.field(k).type)
           for j, k in enumerate(keys)}
    for j, outcome in enumerate(outcomes):
        out[outcome] = pa.array([v[j] for v in rows.values()], pa.int64())
    return pa.table(out).sort_by([(k, "ascending") for k in keys])


class DeferredVerdicts(Verdicts):
    """:class:`Verdicts` whose record table is a :class:`~kqlab.validate.aggregates
    .DeferredRecords`, built when ``records`` is first read: what an edit's re-judging
    returns (:class:`~kqlab.validate.assemble.Assembler`).  Counts, outcomes and every view
    that needs only the records' coordinates and codes never build it; anything that reads
    ``records`` gets the same table a replay from scratch makes."""

    @property
    def records(self) -> pa.Table:
        ref = self.__dict__["_records"]
        return ref.table() if isinstance(ref, DeferredRecords) else ref

    @records.setter
    def records(self, value: pa.Table | DeferredRecords) -> None:
        self.__dict__["_records"] = value

    def records_ref(self) -> pa.Table | DeferredRecords:
        return self.__dict__["_records"]

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its table built (the builder is a closure over the replay)."""
        state = dict(self.__dict__)
        state["_records"] = self.records
        state["codes"] = state["_aggregates"] = None
        return state
