"""Parity: the Spark engine and the local engine give identical verdicts on the same sample.

ARCHITECTURE.md makes engine parity a fidelity contract, so it is an API, not only a test:
:func:`parity_check` replays a sample on both engines and compares every record verdict
(outcome and every failure's rule, code and message), every batch verdict, the rule counts
and the summary.  Row order is compared per topic-partition (log order), because engines may
emit partitions in different orders.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kqlab.errors import KqlabError

#: summary keys only one engine has (how it ran, not what it found)
ENGINE_KEYS = ("engine", "units", "errors", "out", "seconds")


class ParityError(KqlabError, AssertionError):
    """The engines disagree; the message lists the first differences."""


@dataclass
class ParityReport:
    """What :func:`parity_check` compared and found."""

    identical: bool
    records: int
    batches: int
    differences: list[str] = field(default_factory=list)
    local_seconds: float = 0.0
    spark_seconds: float = 0.0
    spark_verdicts: Any = None

    def raise_for_differences(self) -> ParityReport:
        """Raise :class:`ParityError` naming the differences unless identical."""
        if not self.identical:
            raise ParityError("Spark and local verdicts differ:\n  " +
                              "\n  ".join(self.differences[:20]))
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"identical": self.identical, "records": self.records, "batches": self.batches,
                "differences": self.differences, "local_seconds": round(self.local_seconds, 3),
                "spark_seconds": round(self.spark_seconds, 3)}


def _by_partition(t: pa.Table) -> pa.Table:
    """Rows grouped by topic-partition, log order kept inside each (a stable sort)."""
    return t.sort_by([("topic", "ascending"), ("partition", "ascending")]) if t.num_rows else t


def compare_tables(name: str, local: pa.Table, spark: pa.Table, limit: int = 10) -> list[str]:
    """The differences between two verdict tables (empty when equal), first rows first."""
    if local.schema != spark.schema:
        return [f"{name}: schemas differ: {local.schema} vs {spark.schema}"]
    if local.num_rows != spark.num_rows:
        return [f"{name}: {local.num_rows} rows locally, {spark.num_rows} on Spark"]
    a, b = _by_partition(local), _by_partition(spark)
    if a.equals(b):
        return []
    out = []
    for col in a.column_names:
        x, y = a.column(col).to_pylist(), b.column(col).to_pylist()
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            if u != v:
                out.append(f"{name}[{i}] ({x and a.column('topic')[i]}-"
                           f"{a.column('partition')[i]}) {col}: local {u!r} != spark {v!r}")
                if len(out) >= limit:
                    return out
    return out or [f"{name}: tables differ"]


def compare_verdicts(local: Any, spark_local: Any, local_summary: dict[str, Any],
                     spark_summary: dict[str, Any]) -> list[str]:
    """Every difference between a local replay and a (collected) Spark replay."""
    diffs = compare_tables("records", local.records, spark_local.records)
    diffs += compare_tables("batches", local.batches, spark_local.batches)
    if not local.rules.equals(spark_local.rules):
        diffs.append(f"rules: local {local.rules.to_pylist()} != spark "
                     f"{spark_local.rules.to_pylist()}")
    for key in sorted(set(local_summary) | set(spark_summary)):
        if key in ENGINE_KEYS:
            continue
        if local_summary.get(key) != spark_summary.get(key):
            diffs.append(f"summary[{key!r}]: local {local_summary.get(key)!r} != spark "
                         f"{spark_summary.get(key)!r}")
    return diffs


def parity_check(source: Any, policy: Any, *, spark: Any = None, master: str | None = None,
                 now: int | None = None, framing: str = "exact", profile: str | None = None,
                 linger_ms: int = 5, batch_size: int = 16384, resolver: Any = None,
                 out: Any = None, overwrite: bool = False, progress: Any = None
                 ) -> ParityReport:
    """Replay ``source`` under ``policy`` on both engines and compare everything.

    ``now`` defaults to each engine's own default, the sample's clock (so the parity covers
    how each engine reads it; a sample without timestamps falls back to the wall clock, read
    once and shared).  Call
    :meth:`ParityReport.raise_for_differences` to turn a difference into an error.

    Examples
    --------
    >>> from kqlab.spark import parity_check  # doctest: +SKIP
    >>> parity_check("snapshots/orders", policy).raise_for_differences()  # doctest: +SKIP
    ParityReport(identical=True, records=..., ...)
    """
    from kqlab.spark.engine import replay_spark
    from kqlab.validate.replayer import Replayer

    t0 = time.perf_counter()
    replayer = Replayer(source, now=now, framing=framing, linger_ms=linger_ms,
                        batch_size=batch_size, resolver=resolver)
    local = replayer.run(policy, profile=profile)
    local_summary = local.summary()
    t1 = time.perf_counter()
    if replayer.clock == "wall clock":  # no timestamps: one reading for both
        now = replayer.now
    sv = replay_spark(source, policy, spark=spark, master=master, out=out,
                      overwrite=overwrite, progress=progress, now=now, framing=framing,
                      profile=profile, linger_ms=linger_ms, batch_size=batch_size,
                      resolver=resolver)
    spark_summary = sv.summary()
    t2 = time.perf_counter()
    diffs = [f"unit {e['topic']}-{e['partition']} failed on Spark: {e['error']}: "
             f"{e['message']}" for e in sv.errors]
    if local.now != sv.now:
        diffs.append(f"clock: local now={local.now} ({replayer.clock}) != spark now={sv.now} "
                     f"({sv.clock})")
    diffs += compare_verdicts(local, sv.to_local(max_records=None), local_summary,
                              spark_summary)
    return ParityReport(not diffs, local.records.num_rows, local.batches.num_rows, diffs,
                        t1 - t0, t2 - t1, sv)
