"""What runs inside a Spark task: replay one unit with the local engine, write its verdicts.

The same functions as the local engine (:class:`~kqlab.validate.replayer.Replayer`) judge each
unit, so the two engines cannot disagree on semantics; this module only reads a unit's data
(pyarrow for snapshots, kqlab's codec for segments), writes the unit's record and batch
verdicts as Parquet files straight from the task (pyarrow, no detour through the JVM), and
returns a few small rows to the driver (:data:`OUTPUT_SCHEMA`): the files written, the rule
counts, what the summary notes need, and the log issues.

A unit that fails (an unreadable file, a corrupt Parquet part) becomes an ``error`` row,
never a failed task: one bad segment must not throw away the verdicts of every other
partition.  Each task attempt writes its own file names; the driver keeps only the files of
the attempts whose rows it received.  Schema resolvers are cached per Python worker (Spark
reuses workers across tasks), so each executor asks the registry once per schema id.
"""

from __future__ import annotations

import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.spark.units import Unit
from kqlab.validate.verdicts import RECORD_VERDICTS_SCHEMA, REPLAY_BATCHES_SCHEMA

#: what a task returns to the driver: small rows only (the verdicts go to Parquet files)
OUTPUT_SCHEMA = pa.schema([
    ("unit", pa.int32()),
    ("kind", pa.string()),  # files | rules | stats | checks | issue | error
    ("seq", pa.int32()),
    ("text", pa.string()),  # JSON
])
#: the verdict files: the contract's columns after the unit and the row's place in it
RECORD_FILE_SCHEMA = pa.schema([("unit", pa.int32()), ("seq", pa.int64()),
                                *RECORD_VERDICTS_SCHEMA])
BATCH_FILE_SCHEMA = pa.schema([("unit", pa.int32()), ("seq", pa.int64()),
                               *REPLAY_BATCHES_SCHEMA])


@dataclass(frozen=True)
class Job:
    """Everything a task needs besides its unit (pickled once into the task closure)."""

    policy: Any  # the effective Policy (implicit rules included)
    now: int
    framing: str
    profile: str
    linger_ms: int
    batch_size: int
    resolver: Any  # a portable SchemaResolver, or None
    #: the policy file's folder (sample checks' baselines are relative to it) and the
    #: baselines the driver read (:func:`kqlab.spark.checks.baseline_plans`)
    base_dir: str | None = None
    check_plans: dict[bytes, Any] | None = None


_RESOLVERS: dict[Any, Any] = {}


def _cached_resolver(resolver: Any) -> Any:
    """One resolver per source per worker process: schema lookups are cached across tasks."""
    if resolver is None:
        return None
    client = resolver._client
    key = (resolver.cache_key if client is None or not hasattr(client, "image")
           else ("image", client.image.url, resolver.subject, hash(orjson.dumps(
               client.image.subjects))))
    hit = _RESOLVERS.get(key)
    if hit is None:
        _RESOLVERS[key] = hit = resolver
    return hit


def read_unit_tables(unit: Unit) -> tuple[pa.Table, pa.Table | None]:
    """A snapshot unit's records and (exact framing) batches, in append order."""
    import pyarrow.parquet as pq

    from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA, conform_batches

    def read(parts: list[tuple[str, list[int] | None]], schema: pa.Schema) -> pa.Table:
        tables = []
        for f, groups in parts:
            pf = pq.ParquetFile(f)
            t = pf.read() if groups is None else pf.read_row_groups(groups)
            t = t.filter(pc.equal(t.column("partition"), unit.partition))
            for field in schema:  # columns an older snapshot lacks arrive null
                if field.name not in t.column_names:
                    t = t.append_column(field, pa.nulls(t.num_rows, field.type))
            tables.append(t.select(schema.names).cast(schema))
        return pa.concat_tables(tables) if tables else schema.empty_table()

    records = read(unit.records, RECORDS_SCHEMA)
    batches = read(unit.batches, BATCHES_SCHEMA) if unit.batches or not unit.records else None
    if batches is not None and batches["records_decoded"].null_count:
        batches = conform_batches(batches, records)  # a snapshot written before the columns
    return records, batches


def replay_unit(unit: Unit, job: Job, stored_framing: str = "exact") -> Any:
    """The local engine's verdicts for one unit (sample checks left to the driver)."""
    return replay_unit_checks(unit, job, stored_framing)[0]


def replay_unit_checks(unit: Unit, job: Job, stored_framing: str = "exact"
                       ) -> tuple[Any, Any]:
    """The local engine's verdicts for one unit, and its sample checks' partials (a
    :class:`~kqlab.validate.sample_checks.CheckRun` from the same pass; None without
    checks)."""
    from kqlab.validate.loading import load_sample, sample_from_tables
    from kqlab.validate.replayer import Replayer

    if unit.kind == "snapshot":
        records, batches = read_unit_tables(unit)
        sample = sample_from_tables(records, batches if stored_framing == "exact" else None,
                                    job.framing, linger_ms=job.linger_ms,
                                    batch_size=job.batch_size)
    else:
        sample = load_sample(unit.path, framing=job.framing, linger_ms=job.linger_ms,
                             batch_size=job.batch_size)
    replayer = Replayer(sample, now=job.now, resolver=_cached_resolver(job.resolver),
                        base_dir=job.base_dir)
    verdicts = replayer.run(job.policy, profile=job.profile, checks=False)
    if not job.policy.checks:
        return verdicts, None
    if job.check_plans is not None:  # the driver's baselines: executors need not read them
        replayer._check_plans = dict(job.check_plans)
    from kqlab.validate.replayer import with_implicit_rules

    effective = with_implicit_rules(job.policy)
    return verdicts, replayer.run_checks(effective, replayer.evaluate(effective), verdicts)


def unit_clock(unit: Unit, framing: str, linger_ms: int, batch_size: int,
               stored_framing: str = "exact") -> int | None:
    """The clock of one unit's sample (one partition), as the local engine reads it
    (:func:`~kqlab.validate.replayer.sample_clock`); the replay's default "now" is the latest
    over all units.  Cheap where the framing is the log's own: a log reads only its last
    segment's batch headers (:func:`~kqlab.validate.stream.log_clock`), a snapshot only its
    batches' timestamps; rebuilt framing must rebuild the batches to know the last one."""
    import pyarrow.parquet as pq

    from kqlab.validate.loading import load_sample, sample_from_tables
    from kqlab.validate.replayer import sample_clock
    from kqlab.validate.stream import log_clock

    if unit.kind != "snapshot":
        if framing == "exact":
            from pathlib import Path

            return log_clock([Path(unit.path)])
        sample = load_sample(unit.path, framing=framing, linger_ms=linger_ms,
                             batch_size=batch_size)
        return sample_clock(sample.batches)
    if framing == "exact":
        columns = ["topic", "partition", "max_timestamp"]
        tables = []
        for f, groups in unit.batches:
            pf = pq.ParquetFile(f)
            t = pf.read(columns=columns) if groups is None else \
                pf.read_row_groups(groups, columns=columns)
            tables.append(t.filter(pc.equal(t.column("partition"), unit.partition)))
        return sample_clock(pa.concat_tables(tables)) if tables else None
    records, batches = read_unit_tables(unit)
    sample = sample_from_tables(records, batches if stored_framing == "exact" else None,
                                framing, linger_ms=linger_ms, batch_size=batch_size)
    return sample_clock(sample.batches)


def _row(unit: Unit, kind: str, payload: Any, seq: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([unit.index], pa.int32()), pa.array([kind]), pa.array([seq], pa.int32()),
         pa.array([orjson.dumps(payload).decode()])], schema=OUTPUT_SCHEMA)


def _write(table: pa.Table, schema: pa.Schema, unit: Unit, out: str, name: str,
           attempt: str) -> str:
    """One unit's verdicts as one Parquet file, written by this task (not through the JVM)."""
    import pyarrow.parquet as pq

    from kqlab.spark.outputs import filesystem

    n = table.num_rows
    t = pa.table([pa.array(np.full(n, unit.index, np.int32)), pa.array(np.arange(n)),
                  *table.columns], schema=schema)
    fs, base = filesystem(out)
    path = f"{base}/{name}/part-u{unit.index:05d}-{attempt}.parquet"
    fs.create_dir(f"{base}/{name}", recursive=True)
    pq.write_table(t, path, filesystem=fs, compression="zstd")
    return path


def _attempt() -> str:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return f"a{ctx.taskAttemptId()}" if ctx is not None else f"x{uuid.uuid4().hex[:12]}"


def unit_rows(unit: Unit, job: Job, stored_framing: str, out: str
              ) -> Iterator[pa.RecordBatch]:
    """Replay one unit, write its verdict files, return the small rows; an exception is an
    ``error`` row (the unit's verdicts are missing and the driver says so)."""
    try:
        v, check_run = replay_unit_checks(unit, job, stored_framing)
        attempt = _attempt()
        files = {"records": _write(v.records, RECORD_FILE_SCHEMA, unit, out, "records",
                                   attempt),
                 "batches": _write(v.batches, BATCH_FILE_SCHEMA, unit, out, "batches",
                                   attempt),
                 "n_records": v.records.num_rows, "n_batches": v.batches.num_rows}
        if check_run is not None:
            from kqlab.spark.checks import unit_check_payload

            checks = unit_check_payload(check_run, out, unit.index, attempt)
    except Exception as exc:  # a failed unit is a verdict of its own, not a failed job
        last = traceback.extract_tb(exc.__traceback__)[-1:]
        where = f"{last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno}" if last else ""
        import socket  # the host says which machine could not read the unit's files

        yield _row(unit, "error", {"error": type(exc).__name__, "message": str(exc),
                                   "where": where, "topic": unit.topic,
                                   "partition": unit.partition, "path": unit.path,
                                   "host": socket.gethostname()})
        return
    yield _row(unit, "files", files)
    if check_run is not None:
        yield _row(unit, "checks", checks)
    yield _row(unit, "rules", v.rules.to_pylist())
    checks = v.batches.column("check")
    yield _row(unit, "stats", {
        "topics": sorted(set(v.records.column("topic").to_pylist())),
        "undetermined": int(pc.sum(pc.equal(checks, "undetermined")).as_py()
                            or 0) if len(checks) else 0})
    for k, issue in enumerate(v.issues):
        yield _row(unit, "issue", issue.to_dict() if hasattr(issue, "to_dict") else
                   dict(issue), seq=k)


def map_units(job: Job, stored_framing: str, out: str):
    """The ``mapInArrow`` function: unit specs in, small result rows out."""
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            for spec in rb.column("spec").to_pylist():
                yield from unit_rows(Unit.from_json(spec), job, stored_framing, out)
    return fn
