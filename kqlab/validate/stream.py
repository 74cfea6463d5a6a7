"""Replaying a log directory in bounded memory: partitions and chunks of batches flow through
decode → broker checks + rules → verdicts, and only the verdicts are kept.

:func:`replay` holds the whole sample (every record's key, value and headers, its decoded
columns, the batches' bytes) until the verdicts are built: about 1.5 KB a record, so ten
million records do not fit a laptop.  :func:`replay_stream` reads each partition's segments
:func:`~kqlab.kafka.log.iter_log_tables` chunk by chunk (whole batches, so a failing record
still rejects its whole batch), judges each chunk with the same :class:`Replayer` and carries
every partition's producer state and next offset from chunk to chunk
(``broker_verdicts(validator=...)``), so the verdicts are exactly :func:`replay`'s, record for
record (tests hold the two equal).  What stays in memory is the verdict tables (about 60 bytes
a record) and one chunk.

Rules see one chunk at a time; every built-in rule kind judges a record on its own, so that
changes nothing (a plugin that compares records with each other would see chunks).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.log import (
    RawBatch,
    iter_log_batches,
    iter_log_tables,
    partition_dirs,
    segment_files,
)
from kqlab.kafka.validator import PartitionValidator
from kqlab.policy.model import Policy
from kqlab.serde.schemas import SchemaResolver
from kqlab.validate.assemble import replay_notes
from kqlab.validate.replayer import Replayer, with_implicit_rules
from kqlab.validate.rule_table import merge_rule_rows
from kqlab.validate.sample import ReplayError, Sample
from kqlab.validate.sample_checks import CheckRun
from kqlab.validate.verdicts import Verdicts

#: batches judged together (a chunk of a partition); the default keeps a chunk of typical
#: 16 KB batches well under 100 MB
CHUNK_BATCHES = 4096
_MAX_TS = struct.Struct(">q")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StreamProgress:
    """Where a streamed replay is: records judged so far, bytes read of all segment bytes,
    seconds since it started (a progress bar shows records, rate and time left)."""

    records: int
    bytes_read: int
    bytes_total: int
    seconds: float

    @property
    def rate(self) -> float:
        """Records per second so far."""
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        """Seconds left at the rate so far (None before anything was read)."""
        if not self.bytes_read or self.seconds <= 0:
            return None
        return self.seconds * (self.bytes_total - self.bytes_read) / self.bytes_read


def log_partitions(source: str | Path) -> list[Path]:
    """The partition folders (or the one segment file / folder) a streamed replay reads, in
    topic, partition order."""
    p = Path(source)
    if not p.exists():
        raise ReplayError(f"{p}: no such file or directory; pass a log directory, a partition "
                          "folder (<topic>-<partition>) or a segment file (*.log)")
    return partition_dirs(p) or [p]


def log_clock(partitions: list[Path]) -> int | None:
    """The clock a log was written at, as :func:`~kqlab.validate.replayer.sample_clock` reads
    it from a whole sample: per partition the ``max_timestamp`` of its last v2 batch (only the
    last segment is read), the latest of those; None when no batch has one."""
    newest: int | None = None
    for part in partitions:
        last: bytes | None = None
        for item in iter_log_batches(segment_files(part)[-1]):
            if isinstance(item, RawBatch) and len(item.data) >= 43 and item.data[16] == 2:
                last = item.data
        if last is not None:
            ts = _MAX_TS.unpack_from(last, 35)[0]
            newest = ts if newest is None else max(newest, ts)
    return newest


def replay_stream(source: str | Path, policy: Policy, *, now: int | None = None,
                  profile: str | None = None, chunk_batches: int = CHUNK_BATCHES,
                  resolver: SchemaResolver | None = None,
                  progress: Callable[[StreamProgress], None] | None = None,
                  base_dir: str | Path | None = None) -> Verdicts:
    """Replay a log directory, partition folder or segment file under ``policy`` chunk by
    chunk; the verdicts equal :func:`~kqlab.validate.replay` on the same source.

    ``now`` defaults to the log's own clock (:func:`log_clock`), as a whole-sample replay
    defaults to its sample's; ``progress`` is called after every chunk.  The policy's sample
    checks are computed in the same pass: each chunk's partial aggregates, merged at the end
    (:mod:`kqlab.validate.sample_checks`), equal to the whole replay's; ``base_dir`` is the
    policy file's folder (baselines are relative to it).
    """
    if chunk_batches < 1:
        raise ReplayError(f"chunk_batches must be at least 1, not {chunk_batches}")
    partitions = log_partitions(source)
    if now is None:
        now = log_clock(partitions)
        if now is None:
            now = int(time.time() * 1000)
    if resolver is None and policy.value.schemas is not None:
        resolver = SchemaResolver.from_source(policy.value.schemas)
    profile = profile or policy.enforcement
    effective = with_implicit_rules(policy)
    total = sum(f.stat().st_size for part in partitions for f in segment_files(part))
    validators: dict[tuple[str, int], PartitionValidator] = {}
    parts = _Parts()
    started = time.perf_counter()
    done_bytes = 0
    checks: CheckRun | None = None
    plans: dict[bytes, object] = {}  # baselines, read once for every chunk
    load = _Load()
    prepared = _prepared(_chunks(partitions, chunk_batches), policy, now, resolver, base_dir,
                         effective, profile, load)
    ahead = read_ahead_pays()
    baselines = _BaselinesAhead(effective, now, base_dir, resolver, plans) if ahead else None
    for replayer in (_read_ahead(prepared) if ahead else prepared):
        spent = time.perf_counter()
        sample = replayer.sample
        replayer.assembler.validators = validators
        replayer._check_plans = plans
        chunk_verdicts = replayer.run(policy, profile=profile, checks=False)
        if policy.checks:
            if baselines is not None:
                baselines.wait()
            run = replayer.run_checks(effective, replayer.evaluate(effective), chunk_verdicts)
            if checks is None:
                checks = run
            else:
                checks.merge(run)
        load.judged += time.perf_counter() - spent
        parts.add(chunk_verdicts)
        done_bytes += int(pc.sum(sample.batches.column("size_bytes")).as_py() or 0)
        if progress is not None:
            progress(StreamProgress(parts.records, done_bytes, total,
                                    time.perf_counter() - started))
    verdicts = parts.verdicts(effective, profile, now)
    if policy.checks:
        if baselines is not None:
            baselines.wait()
        if checks is None:  # an empty log: nothing read, every check judged on nothing
            checks = CheckRun(effective, now, base_dir=base_dir, resolver=resolver,
                              plans=plans)  # type: ignore[arg-type]
        verdicts.check_results = checks.finish()
    return verdicts


class _BaselinesAhead:
    """The baselines of the policy's drift and schema-drift checks read on a thread of their
    own while the first chunk is read (into ``plans``, the dict every chunk's
    :class:`CheckRun` reads them from): the judging thread has nothing to do until that
    chunk is ready, so a one-shot replay reads its baseline in time it would spend waiting
    (``benchmarks/sample_checks.py``, 1 M records and a 100k-record baseline read: 1.33x
    the replay without checks read in turn, 1.24x so).  :meth:`wait` before the first
    check is computed;
    an error raised while reading is raised there (a baseline that cannot be read is a
    not-evaluable plan, not an error)."""

    def __init__(self, policy: Policy, now: int, base_dir: str | Path | None,
                 resolver: SchemaResolver | None, plans: dict[bytes, object]) -> None:
        import threading

        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        wanted = [c for c in policy.checks if c.kind in ("drift", "schema_drift")]
        if not wanted:
            return

        def read() -> None:
            try:
                run = CheckRun(policy, now, base_dir=base_dir, resolver=resolver,
                               plans=plans)  # type: ignore[arg-type]
                for check in wanted:
                    run.plan(check)
            except BaseException as exc:  # raised on the judging thread, in wait()
                self._error = exc

        self._thread = threading.Thread(target=read, name="kqlab-baselines", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until the baselines are read (at once after the first time)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self._error is not None:
                raise self._error


class _Parts:
    """The chunks' verdicts, kept small: their verdict tables and rule counts only."""

    def __init__(self) -> None:
        self.records_tables: list[pa.Table] = []
        self.batch_tables: list[pa.Table] = []
        self.rule_parts: list[list[dict[str, object]]] = []
        self.issues: list[object] = []
        self.topics: dict[str, None] = {}
        self.records = 0

    def add(self, v: Verdicts) -> None:
        self.records_tables.append(v.records)
        self.batch_tables.append(v.batches)
        self.issues.extend(v.issues)
        self.records += v.records.num_rows
        for t in v.records.column("topic").unique().to_pylist():
            self.topics[t] = None
        self.rule_parts.append(v.rules.to_pylist())

    def verdicts(self, policy: Policy, profile: str, now: int) -> Verdicts:
        from kqlab.records import BATCH_VERDICTS_SCHEMA
        from kqlab.validate.verdict_tables import RECORD_VERDICTS_SCHEMA, REPLAY_BATCHES_SCHEMA

        records = pa.concat_tables(self.records_tables) if self.records_tables else \
            RECORD_VERDICTS_SCHEMA.empty_table()
        batches = pa.concat_tables(self.batch_tables) if self.batch_tables else \
            REPLAY_BATCHES_SCHEMA.empty_table()
        assert BATCH_VERDICTS_SCHEMA.names == REPLAY_BATCHES_SCHEMA.names[
            :len(BATCH_VERDICTS_SCHEMA)]
        rules = merge_rule_rows(policy.rules, self.rule_parts)
        undetermined = int(pc.sum(pc.equal(
            batches.column("check"), "undetermined")).as_py() or 0) if batches.num_rows else 0
        notes = replay_notes(policy, list(self.topics), undetermined)
        return Verdicts(records, batches, rules, profile,
                        "exact", now, policy.name, policy.content_hash(), list(self.issues),
                        notes)


def _chunks(partitions: list[Path], chunk_batches: int) -> Iterator[Sample]:
    """The samples a streamed replay judges, partition after partition, in log order."""
    for part in partitions:
        for chunk in iter_log_tables(part, chunk_batches=chunk_batches, keep_bytes=True):
            yield Sample(chunk.records, chunk.batches, chunk.raw, "exact", "log",
                         list(chunk.issues))


@dataclass
class _Load:
    """Seconds the chunks so far kept the reading thread busy (reading, decoding and the
    checks computed there) and the judging thread (rules, broker checks, verdicts and the
    checks computed there), each by the clock on the wall, its waits for the other thread
    left out.  Wall, not thread CPU: the reading thread's decode hands a JSON chunk to
    worker threads and waits for them, so its own CPU time (0.30 s of 1 M records) says it
    is lighter than the judging thread (0.26 s) when it is the one the replay waits on
    (0.55 s busy): balanced by CPU the checks went to the reading thread and cost 1.25x
    the replay without them, by the wall 1.17x."""

    read: float = 0.0
    judged: float = 0.0

    def read_has_room(self) -> bool:
        """Whether the next chunk's checks that read the records alone go to the reading
        thread: when it has been the less busy one so far (an Avro topic's decode is light,
        many rules make the judging heavier), so neither thread waits for the other more
        than it must.  Either thread computes the very same partials (same function, same
        cache key): this only balances the two."""
        return self.read < self.judged


def _prepared(samples: Iterator[Sample], policy: Policy, now: int,
              resolver: SchemaResolver | None, base_dir: str | Path | None,
              effective: Policy | None = None, profile: str | None = None,
              load: _Load | None = None) -> Iterator[Replayer]:
    """A :class:`Replayer` of each chunk with its values already decoded (on the reading
    thread, see :func:`_read_ahead`): a replay decodes every value when the policy's value
    format decodes (the implicit ``decode:value`` rule), and this is the very call the rules
    make (``EvalContext.decoded``, cached in the replayer's context for this policy).  Given
    the ``effective`` policy and ``profile``, the sample checks that read the records alone
    are computed here as well (:meth:`Replayer.prepare_checks`) when ``load`` says this
    thread had the lighter last chunk (else the judging thread computes them)."""
    from kqlab.validate.rules import decodes

    decode = decodes(policy.value)
    spent = time.perf_counter()  # the chunk's reading and parsing count too
    for sample in samples:
        replayer = Replayer(sample, now=now, resolver=resolver, base_dir=base_dir)
        if decode:
            replayer.context(policy).decoded("value")
        if effective is not None and profile is not None and (
                load is None or load.read_has_room()):
            # the sample checks that read the records alone, computed here too
            replayer.prepare_checks(effective, profile)
        if load is not None:
            load.read += time.perf_counter() - spent
        yield replayer  # the wait to hand it over is not counted
        spent = time.perf_counter()


def read_ahead_pays() -> bool:
    """Whether to read the next chunk on a thread while this one is judged: yes unless
    ``KQLAB_READ_AHEAD=0`` (reading and judging in turn, one thread).  On two cores the
    threads overlap; on a machine whose cores are all taken, A/B runs (2 cores, load 11)
    went either way by ~10%, within the noise, so the overlap is kept.  Either way the
    verdicts are the same."""
    return os.environ.get("KQLAB_READ_AHEAD", "").strip() != "0"


def _read_ahead(chunks: Iterator[T]) -> Iterator[T]:
    """``chunks``, each read on a thread of its own while the one before it is judged.

    Reading (file reads, decompression, the record parser, the values' decode) and judging
    (rules, broker checks, Arrow kernels) both release the GIL for much of their time, so
    on two cores they overlap; one chunk waits at most (memory: two chunks, not one).  Order
    is kept, an error while reading is raised here, and stopping early stops the reader.
    """
    import contextlib
    import queue
    import threading

    ready: queue.Queue[tuple[str, object]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def read() -> None:
        try:
            for chunk in chunks:
                while not stop.is_set():
                    try:
                        ready.put(("chunk", chunk), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ready.put(("end", None))
        except BaseException as ex:  # handed to the judging thread, raised there
            ready.put(("error", ex))
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:  # a generator stopped early closes its segment files
                close()

    reader = threading.Thread(target=read, name="kqlab-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            kind, item = ready.get()
            if kind == "end":
                return
            if kind == "error":
                assert isinstance(item, BaseException)
                raise item
            yield cast(T, item)
    finally:
        stop.set()
        while reader.is_alive():  # let a blocked put see the stop
            with contextlib.suppress(queue.Empty):
                ready.get_nowait()
            reader.join(timeout=0.05)
