"""The sample checks on Spark: each task's partial aggregates as Parquet, merged by Spark.

Each task replays its unit with the local engine and computes the policy's sample checks'
partial aggregates from that pass (:meth:`~kqlab.validate.replayer.Replayer.run_checks`: the
very kernels of the local engine, :mod:`kqlab.validate.sample_checks.compute`).  It writes
every check's partial table (:data:`~kqlab.validate.sample_checks.PARTIAL_SCHEMAS`) as one
Parquet file under ``<out>/checks/c<i>/`` and returns the counters and its time extent in a
small row.  The driver then aggregates the files with Spark, per kind:

* ``volume``, ``freshness``, ``null_rate``, ``reject_rate``, ``drift``, ``schema_drift``
  (keyed by group and window, bin or shape: small, bounded by the windows judged): read
  and merged on the driver by :func:`~kqlab.validate.sample_checks.merge_partials` (a
  group-by with the partial's own merge operations, exact integers), as the local engine
  merges a streamed replay's chunks — no Spark job for a table of a few rows per window;
* ``distinct``, ``duplicate_rate`` (keyed by value: as large as the field's cardinality):
  ``groupBy(check, group, window, value)`` then ``groupBy(check, group, window)`` — values
  and distinct values per window; nothing per value reaches the driver;
* ``stat`` (exact values): ``groupBy(check, group, window).applyInArrow`` — each cell's
  values go to one Python worker, which computes the statistic with the local engine's own
  code (:func:`~kqlab.validate.sample_checks.finish.stat_values`: values sorted, then
  summed or interpolated), so the result is the local engine's to the bit.

The per-window values of the last two go to ``finish_check(values=...)``.  Drift baselines
are read once on the driver (relative to the policy file's folder, as locally) and travel to
the tasks with the job, so executors need not reach the policy's folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from kqlab.policy.model import Check, Policy
    from kqlab.validate.sample_checks import CheckResults, CheckRun

__all__ = ["baseline_plans", "check_results", "unit_check_payload"]

#: kinds whose partial is keyed by group and window (or bin, or shape): merged on the driver
_MERGED = ("volume", "freshness", "null_rate", "reject_rate", "drift", "schema_drift")


def baseline_plans(policy: Policy, now: int, base_dir: str | Path | None,
                   resolver: Any) -> dict[bytes, Any]:
    """The drift checks' baselines, read on the driver (the policy's folder is there), keyed
    as :class:`~kqlab.validate.sample_checks.CheckRun` keys them: the tasks take them as
    they are."""
    from kqlab.validate.sample_checks import CheckRun

    run = CheckRun(policy, now, base_dir=base_dir, resolver=resolver)
    for check in policy.checks:
        run.plan(check)
    return run.plans


def unit_check_payload(run: CheckRun, out: str, unit: int, attempt: str) -> dict[str, Any]:
    """One unit's checks: each partial table written under ``<out>/checks/c<i>/`` (none
    when empty), its counters and the unit's extent (what the task returns)."""
    import pyarrow.parquet as pq

    from kqlab.spark.outputs import filesystem
    from kqlab.validate.sample_checks import merge_partials

    fs, base = filesystem(out)
    checks = []
    for i, check in enumerate(run.policy.checks):
        partial = merge_partials(check.kind, run.partials[check.id])
        path = None
        if partial.table.num_rows:
            folder = f"{base}/checks/c{i:03d}"
            fs.create_dir(folder, recursive=True)
            path = f"{folder}/part-u{unit:05d}-{attempt}.parquet"
            pq.write_table(partial.table, path, filesystem=fs, compression="zstd")
        checks.append({"counts": partial.counts, "file": path})
    e = run.extent
    return {"extent": [e.first, e.last, e.records], "checks": checks}


def check_results(spark: SparkSession, policy: Policy, payloads: list[dict[str, Any]],
                  out: str, now: int, plans: dict[bytes, Any], base_dir: str | Path | None
                  ) -> CheckResults:
    """Every check judged from the units' partials (``payloads``: what
    :func:`unit_check_payload` returned per unit that reported): small partials merged on
    the driver, the others aggregated by Spark (at most two jobs: every ``stat`` check in
    one, every ``distinct`` and ``duplicate_rate`` check in the other)."""
    from kqlab.validate.sample_checks import (
        CHECK_RESULTS_SCHEMA,
        CHECK_WINDOWS_SCHEMA,
        CheckResults,
        CheckRun,
        Extent,
        Partial,
        empty_check_results,
        finish_check,
    )

    if not policy.checks:
        return empty_check_results()
    run = CheckRun(policy, now, base_dir=base_dir, plans=plans)
    extent = Extent()
    for p in payloads:
        first, last, records = p["extent"]
        extent = extent.merge(Extent(first, last, records))
    counts: list[dict[str, int]] = []
    files: list[list[str]] = []
    for i in range(len(policy.checks)):
        c: dict[str, int] = {}
        for p in payloads:
            for name, value in p["checks"][i]["counts"].items():
                c[name] = c.get(name, 0) + value
        counts.append(c)
        files.append([p["checks"][i]["file"] for p in payloads
                      if p["checks"][i]["file"] is not None])
    values = {**_stat_values(spark, policy, files, out),
              **_distinct_values(spark, policy, files, out)}
    rows, windows = [], []
    for i, check in enumerate(policy.checks):
        table = _merged(check, files[i], out) if check.kind in _MERGED else None
        partial = Partial(check.kind, table if table is not None else
                          _empty(check.kind), counts[i])
        row, win = finish_check(check, partial, extent, now, run.plan(check),
                                values=values.get(i))
        rows.append(row)
        if win.num_rows:
            windows.append(win)
    return CheckResults(pa.Table.from_pylist(rows, schema=CHECK_RESULTS_SCHEMA),
                        pa.concat_tables(windows) if windows else
                        CHECK_WINDOWS_SCHEMA.empty_table())


def _empty(kind: str) -> pa.Table:
    from kqlab.validate.sample_checks import PARTIAL_SCHEMAS

    return PARTIAL_SCHEMAS[kind].empty_table()


def _merged(check: Check, files: list[str], out: str) -> pa.Table:
    """A small partial (keyed by group and window, bin or shape): the units' tables read
    and merged on the driver (:func:`~kqlab.validate.sample_checks.merge_partials`, as the
    local engine merges a streamed replay's chunks)."""
    import pyarrow.parquet as pq

    from kqlab.spark.outputs import filesystem
    from kqlab.validate.sample_checks import PARTIAL_SCHEMAS, Partial, merge_partials

    fs, _ = filesystem(out)
    schema = PARTIAL_SCHEMAS[check.kind]
    parts = [Partial(check.kind, pq.read_table(f, filesystem=fs).cast(schema))
             for f in files]
    return merge_partials(check.kind, parts).table


def _frame(spark: SparkSession, policy: Policy, files: list[list[str]], out: str,
           kinds: tuple[str, ...]) -> DataFrame | None:
    """The partial files of every check of ``kinds`` as one DataFrame, with the check's
    index in ``check`` (None: no such check has rows)."""
    from pyspark.sql import functions as sf

    from kqlab.spark.outputs import spark_path
    from kqlab.validate.sample_checks import PARTIAL_SCHEMAS

    frames = []
    for i, check in enumerate(policy.checks):
        if check.kind in kinds and files[i]:
            schema = PARTIAL_SCHEMAS[check.kind]
            df = spark.read.schema(_struct(schema)).parquet(
                *(spark_path(f, out) for f in files[i]))
            frames.append(df.select(sf.lit(i).alias("check"), *schema.names))
    if not frames:
        return None
    union = frames[0]
    for df in frames[1:]:
        union = union.unionByName(df)
    return union


def _per_check(t: pa.Table, policy: Policy, kinds: tuple[str, ...]) -> dict[int, pa.Table]:
    """An aggregate of several checks split by check (every check of ``kinds`` gets a
    table, empty when it had no rows)."""
    import pyarrow.compute as pc

    from kqlab.validate.sample_checks.finish import WINDOW_VALUES_SCHEMA

    out = {}
    for i, check in enumerate(policy.checks):
        if check.kind in kinds:
            mine = t.filter(pc.equal(t.column("check"), i)) if t.num_rows else t
            out[i] = pa.table([mine.column(f.name).cast(f.type) for f in WINDOW_VALUES_SCHEMA],
                              schema=WINDOW_VALUES_SCHEMA)
    return out


def _distinct_values(spark: SparkSession, policy: Policy, files: list[list[str]], out: str
                     ) -> dict[int, pa.Table]:
    """``distinct`` / ``duplicate_rate``: per (check, group, window) the non-null values and
    the distinct ones (values merged across units first), and the window's value — one
    Spark job for all of them; nothing per value reaches the driver."""
    from pyspark.sql import functions as sf

    from kqlab.validate.sample_checks.finish import WINDOW_VALUES_SCHEMA, distinct_observed

    kinds = ("distinct", "duplicate_rate")
    df = _frame(spark, policy, files, out, kinds)
    if df is None:
        return _per_check(WINDOW_VALUES_SCHEMA.empty_table().append_column(
            "check", pa.array([], pa.int32())), policy, kinds)
    per_value = df.groupBy("check", "group", "window", "value").agg(
        sf.sum("count").alias("count"))
    per = per_value.groupBy("check", "group", "window").agg(
        sf.sum("count").cast("long").alias("records"),
        sf.count(sf.lit(1)).cast("long").alias("distinct")).toArrow()
    records = per.column("records").to_numpy()
    distinct = per.column("distinct").to_numpy()
    check = per.column("check").to_numpy()
    observed = distinct.astype("float64")
    for i, c in enumerate(policy.checks):  # the value of each check's kind
        if c.kind in kinds:
            at = check == i
            observed[at] = distinct_observed(c.kind, records[at], distinct[at])
    table = pa.table({"check": per.column("check"), "group": per.column("group"),
                      "window": per.column("window"), "records": pa.array(records),
                      "observed": pa.array(observed)})
    return _per_check(table, policy, kinds)


def _stat_values(spark: SparkSession, policy: Policy, files: list[list[str]], out: str
                 ) -> dict[int, pa.Table]:
    """``stat``: per (check, group, window) the statistic, one Spark job for every stat
    check: each cell's exact values go to one Python worker, which computes the statistic
    with the local engine's own code (so the bits are the local engine's)."""
    from kqlab.validate.sample_checks.finish import WINDOW_VALUES_SCHEMA

    df = _frame(spark, policy, files, out, ("stat",))
    schema = pa.schema([("check", pa.int32()), *WINDOW_VALUES_SCHEMA])
    if df is None:
        return _per_check(schema.empty_table(), policy, ("stat",))
    stats = {i: c for i, c in enumerate(policy.checks) if c.kind == "stat"}
    t = df.groupBy("check", "group", "window").applyInArrow(_stat_cells(stats),
                                                            _struct(schema)).toArrow()
    return _per_check(t, policy, ("stat",))


def _stat_cells(checks: dict[int, Check]) -> Any:
    """The ``applyInArrow`` function: one (check, group, window) cell's exact values in,
    its statistic out (:func:`~kqlab.validate.sample_checks.finish.stat_values`)."""
    def fn(table: pa.Table) -> pa.Table:
        from kqlab.validate.sample_checks import PARTIAL_SCHEMAS
        from kqlab.validate.sample_checks.finish import stat_values

        schema = PARTIAL_SCHEMAS["stat"]
        i = int(table.column("check")[0].as_py())
        values = stat_values(checks[i], table.select(schema.names).cast(schema))
        return pa.table([pa.array([i] * values.num_rows, pa.int32()), *values.columns],
                        names=["check", *values.column_names])
    return fn


def _struct(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
