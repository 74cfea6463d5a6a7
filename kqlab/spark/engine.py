"""The Spark engine: plan units on the driver, replay them in executors, keep Parquet.

``replay_spark(source, policy)`` is :func:`kqlab.validate.replay` on Spark:

1. the driver plans units from metadata only (:mod:`kqlab.spark.units`: one per
   topic-partition, with the files and row groups that hold it);
2. one Spark task per unit reads its data and replays it with the local engine's own code
   (:mod:`kqlab.spark.executor`, inside ``mapInArrow``), so verdicts are the same by
   construction and :func:`kqlab.spark.parity.parity_check` proves it on real data;
3. each task writes its unit's record and batch verdicts as Parquet files under ``out``
   (pyarrow, straight from the Python worker) and returns a few small rows (files, rule
   counts, issues, errors); the driver sums those and reads the files back as DataFrames
   (:class:`~kqlab.spark.verdicts.SparkVerdicts`) whose summaries are Spark aggregations.
   Record data never travels through the JVM and nothing per record reaches the driver.

Schemas from a ``mock://`` registry travel to the executors as an image of the registry
(:func:`kqlab.serde.schemas.portable_resolver`); real registries and schema folders are
reached from each executor (cached per worker).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from kqlab.errors import KqlabError
from kqlab.spark.executor import OUTPUT_SCHEMA, Job, map_units
from kqlab.spark.units import Plan, plan_units
from kqlab.spark.verdicts import SparkVerdicts


class SparkReplayError(KqlabError):
    """The Spark replay could not run (output path, cancelled job, ...)."""


class UnitsFailed(SparkReplayError):
    """Every unit of the replay failed (e.g. a source no executor can read): there are no
    verdicts at all, so the run fails instead of summarising 0 records."""


class ReplayCancelled(SparkReplayError):
    """The replay's Spark job was cancelled (from the progress bar or ``cancelJobGroup``)."""


def _output_path(out: str | Path | None, master: str, overwrite: bool) -> tuple[str, bool]:
    """Where the verdict Parquet goes; whether kqlab made it up (a temporary folder)."""
    if out is None:
        if not master.startswith("local"):
            raise SparkReplayError(f"on a cluster ({master}) pass out= a path the driver and "
                                   "every executor can reach (hdfs://, s3a://, a shared "
                                   "mount) for the verdict Parquet files")
        return str(Path(tempfile.mkdtemp(prefix="kqlab-spark-")) / "verdicts"), True
    text = str(out)
    if "://" not in text or text.startswith("file:"):
        p = Path(text.removeprefix("file:"))
        occupied = any(p.iterdir()) if p.is_dir() else p.exists()
        if occupied:
            if not overwrite:
                raise SparkReplayError(f"{p} already exists: pass overwrite=True (CLI: "
                                       "--overwrite) or another folder")
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        return str(p.resolve()), False
    return text, False


def _callback(progress: Any, spark: Any) -> Any:
    if progress is None or progress is False:
        return None
    if progress is True:
        from kqlab.spark.progress import SparkTerminalProgress

        return SparkTerminalProgress()
    if hasattr(progress, "spark") and getattr(progress, "spark", None) is None:
        progress.spark = spark
    return progress


def replay_spark(source: Any, policy: Any, *, spark: Any = None, master: str | None = None,
                 out: str | Path | None = None, overwrite: bool = False,
                 now: int | None = None, framing: str = "exact", profile: str | None = None,
                 linger_ms: int = 5, batch_size: int = 16384, resolver: Any = None,
                 progress: Any = None, base_dir: str | Path | None = None) -> SparkVerdicts:
    """Replay ``source`` (snapshot folder, log directory, partition folder or segment file)
    under ``policy`` on Spark; the verdicts equal :func:`kqlab.validate.replay`'s.

    ``spark`` (a session) or ``master`` (e.g. ``local[2]``) chooses where it runs (default:
    the active session, else ``local[*]``; see :func:`kqlab.spark.spark_session`).  ``out``
    is the folder for the verdict Parquet files (default: a temporary folder; required on a
    cluster).  ``progress``: True for a terminal line, a
    :class:`~kqlab.spark.progress.SparkNotebookProgress`, or any callable
    ``(done, total, failed, seconds)``.  Other arguments are the local engine's
    (``base_dir``: the policy file's folder, which sample checks' baselines are relative
    to).  The policy's sample checks are computed in the same tasks and aggregated by Spark
    (:mod:`kqlab.spark.checks`); ``checks()`` equals the local engine's.
    """
    from kqlab.serde.schemas import SchemaResolver, portable_resolver
    from kqlab.spark.session import spark_session
    from kqlab.validate.loading import check_snapshot_framing
    from kqlab.validate.replayer import with_implicit_rules
    from kqlab.validate.sample import FRAMINGS, ReplayError

    if framing not in FRAMINGS:
        raise ReplayError(f"framing must be one of {', '.join(FRAMINGS)}, not {framing!r}")
    t0 = time.perf_counter()
    plan = plan_units(source)
    if plan.kind == "snapshot":
        check_snapshot_framing(plan.stored_framing, framing, plan.source)
    session = spark_session(master, spark=spark)
    clock = "given"
    if now is None:  # the sample's own clock, as the local engine reads it
        now = _sample_clock(session, plan, framing, linger_ms, batch_size) \
            if plan.units else None
        clock = "sample" if now is not None else "wall clock"
        now = now if now is not None else int(time.time() * 1000)
    profile = profile or policy.enforcement
    effective = with_implicit_rules(policy)
    if resolver is None and policy.value.schemas is not None:
        resolver = SchemaResolver.from_source(policy.value.schemas)
    if resolver is not None:
        resolver = portable_resolver(resolver)
    plans = None
    if any(c.kind in ("drift", "schema_drift") for c in effective.checks):
        from kqlab.spark.checks import baseline_plans

        plans = baseline_plans(effective, now, base_dir, resolver)
    job = Job(effective, now, framing, profile, linger_ms, batch_size, resolver,
              None if base_dir is None else str(base_dir), plans)
    path, _ = _output_path(out, _master(session), overwrite)
    if plan.units:
        from kqlab.spark.reach import needs_probe, probe_output

        if needs_probe(session, _master(session)):  # before any work: shared with executors?
            probe_output(session, path, min(len(plan.units), 2))
    callback = _callback(progress, session)
    rows = _run(session, plan, job, path, callback) if plan.units else []
    label = "exact" if framing == "exact" else f"reconstructed:{framing}"
    verdicts = _collect(session, plan, effective, rows, path, profile, label, now,
                        time.perf_counter() - t0)
    if effective.checks:
        from kqlab.spark.checks import check_results

        payloads = [orjson.loads(r["text"]) for r in rows if r["kind"] == "checks"]
        verdicts.check_results = check_results(session, effective, payloads, path, now,
                                               plans or {}, job.base_dir)
        verdicts.seconds = time.perf_counter() - t0
    verdicts.clock = clock
    return verdicts


def _sample_clock(session: Any, plan: Plan, framing: str, linger_ms: int, batch_size: int
                  ) -> int | None:
    """The sample's clock (the latest of the units' :func:`~kqlab.spark.executor.unit_clock`),
    one small Spark job: the driver may not see the files an executor reads."""
    from kqlab.spark.executor import unit_clock

    stored = plan.stored_framing
    specs = [u.to_json() for u in plan.units]

    def clock(spec: str) -> int | None:
        from kqlab.spark.units import Unit

        try:
            return unit_clock(Unit.from_json(spec), framing, linger_ms, batch_size, stored)
        except Exception:  # an unreadable unit: the replay reports it as that unit's error
            return None

    import pyarrow as pa

    def clocks(batches: Any) -> Any:
        for rb in batches:
            for i in rb.column("id").to_pylist():
                yield pa.RecordBatch.from_pylist([{"clock": clock(specs[i])}],
                                                 schema=pa.schema([("clock", pa.int64())]))

    # spark.range: one row (one task) per unit, no RDD (Spark Connect has none)
    rows = session.range(0, len(specs), 1, len(specs)).mapInArrow(clocks, "clock long")
    got = [r["clock"] for r in rows.collect() if r["clock"] is not None]
    return max(got) if got else None


def is_connect(session: Any) -> bool:
    """A Spark Connect session (no SparkContext, no RDDs, no JVM on this side)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def master_url(session: Any) -> str:
    """The session's master URL (``connect`` when a Connect server does not say); works on
    classic and Connect sessions alike (``sparkContext.master`` does not)."""
    if is_connect(session):
        try:
            return str(session.conf.get("spark.master", "connect"))
        except Exception:
            return "connect"
    return str(session.sparkContext.master)


_master = master_url


def _run(session: Any, plan: Plan, job: Job, path: str, callback: Any) -> list[Any]:
    """One Spark job: a task per unit; returns the tasks' small result rows."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from kqlab.spark.progress import JobWatcher

    n = len(plan.units)
    specs = {u.index: u.to_json() for u in plan.units}
    fn = map_units(job, plan.stored_framing, path)

    def by_index(batches: Any) -> Any:  # unit indexes in, the units' rows out
        import pyarrow as pa

        for rb in batches:
            ids = [specs[i] for i in rb.column("id").to_pylist()]
            yield from fn(iter([pa.RecordBatch.from_pylist([{"spec": t} for t in ids])]))

    # spark.range(n, numPartitions=n): exactly one unit per task, no RDD (Connect has none)
    result = session.range(0, n, 1, n).mapInArrow(by_index, from_arrow_schema(OUTPUT_SCHEMA))
    group = f"kqlab-replay-{uuid.uuid4().hex[:12]}"
    if callback is not None and hasattr(callback, "group"):
        callback.group = group
    if is_connect(session):  # tags, not job groups: cancel with spark.interruptTag
        from kqlab.spark.progress import ConnectProgress

        handler = ConnectProgress(callback) if callback is not None else None
        session.addTag(group)
        if handler is not None:  # the server's progress, streamed with the results
            session.registerProgressHandler(handler)
        try:
            return result.collect()
        except Exception as exc:
            if getattr(callback, "cancelled", False) or "cancel" in str(exc).lower() or \
                    "interrupt" in str(exc).lower():
                raise ReplayCancelled(f"replay of {plan.source} was cancelled; partial "
                                      f"output under {path} is incomplete") from None
            raise
        finally:
            session.removeTag(group)
            if handler is not None:
                session.removeProgressHandler(handler)
                handler.finish()
            if hasattr(callback, "close"):
                callback.close()
    sc = session.sparkContext
    sc.setJobGroup(group, f"kqlab replay of {plan.source} ({n} units)",
                   interruptOnCancel=True)
    watcher = JobWatcher(session, group, callback) if callback is not None else \
        contextlib.nullcontext()
    try:
        with watcher:
            return result.collect()
    except Exception as exc:
        if getattr(callback, "cancelled", False) or "cancelled" in str(exc).lower():
            raise ReplayCancelled(f"replay of {plan.source} was cancelled; partial output "
                                  f"under {path} is incomplete") from None
        raise
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
        if hasattr(callback, "close"):
            callback.close()


def _collect(session: Any, plan: Plan, policy: Any, rows: list[Any], path: str, profile: str,
             framing: str, now: int, seconds: float) -> SparkVerdicts:
    """Aggregate the tasks' rows (rule counts, notes, issues, errors) on the driver."""
    from kqlab.spark.outputs import filesystem, spark_path
    from kqlab.validate.assemble import replay_notes
    from kqlab.validate.rule_table import merge_rule_rows

    got = sorted(((r["unit"], r["kind"], r["seq"], orjson.loads(r["text"])) for r in rows),
                 key=lambda x: (x[0], x[2]))
    rule_parts: list[Any] = []
    files: list[tuple[int, dict[str, Any]]] = []
    issues: list[dict[str, Any]] = list(plan.issues)
    errors: list[dict[str, Any]] = []
    topics: set[str] = set()
    undetermined = 0
    for unit, kind, _, payload in got:
        if kind == "files":
            files.append((unit, payload))
        elif kind == "rules":
            rule_parts.append(payload)
        elif kind == "stats":
            topics.update(payload["topics"])
            undetermined += payload["undetermined"]
        elif kind == "issue":
            issues.append(payload)
        elif kind == "error":
            errors.append(payload)
    rules = merge_rule_rows(policy.rules, rule_parts)  # the local engine's one merge
    notes = replay_notes(policy, sorted(topics), undetermined)
    if errors:
        said = "; ".join(f"{e['topic']}-{e['partition']} ({e['path']}, on {e.get('host', '?')})"
                         f": {e['error']}: {e['message']}" for e in errors[:5])
        if len({u for u, kind, _, _ in got if kind == "error"}) >= len(plan.units):
            raise UnitsFailed(f"none of the {len(plan.units)} unit(s) could be replayed "
                              f"(can every executor read the source?): {said}")
        notes.append(f"{len(errors)} of {len(plan.units)} unit(s) could not be replayed (their "
                     "verdicts are missing): " + said)
    # files of task attempts that did not report (retried or speculative) are not verdicts
    fs, base = filesystem(path)
    from pyarrow import fs as pafs

    kept = {f[k] for _, f in files for k in ("records", "batches")}
    kept |= {c["file"] for _, kind, _, p in got if kind == "checks" for c in p["checks"]}
    for name in ("records", "batches", "checks"):
        for info in fs.get_file_info(pafs.FileSelector(f"{base}/{name}", allow_not_found=True,
                                                       recursive=True)):
            if info.is_file and info.path not in kept:
                fs.delete_file(info.path)
    files.sort(key=lambda x: x[0])
    return SparkVerdicts(
        session, path, [spark_path(f["records"], path) for _, f in files],
        [spark_path(f["batches"], path) for _, f in files], rules, profile, framing, now,
        policy.name, policy.content_hash(), issues, notes, errors, len(plan.units), seconds,
        n_records=sum(f["n_records"] for _, f in files),
        n_batches=sum(f["n_batches"] for _, f in files))
