"""Turning what a user points at (segment files, log directories, snapshots, records tables)
into a :class:`~kqlab.validate.sample.Sample` with the framing asked for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa

from kqlab.validate.framing import reconstruct_framing
from kqlab.validate.sample import FRAMINGS, ReplayError, Sample, record_batch_rows

if TYPE_CHECKING:  # the sources package is imported where a snapshot is opened
    from kqlab.sources.files import Snapshot

#: what a replay accepts as its sample: a segment file, partition folder, log directory or
#: snapshot (by path or opened), a records table or a Spark DataFrame of Kafka records
#: (``format("kafka")``; framing rebuilt), or a sample already made
SampleSource: TypeAlias = "str | Path | Snapshot | pa.Table | Sample | Any"


def load_sample(source: SampleSource, *, framing: str = "exact", linger_ms: int = 5,
                batch_size: int = 16384) -> Sample:
    """A :class:`Sample` from a segment file/folder, a ``Decoded`` or a records table."""
    if framing not in FRAMINGS:
        raise ReplayError(f"framing must be one of {', '.join(FRAMINGS)}, not {framing!r}")
    if isinstance(source, Sample):
        return source
    from kqlab.sources.files import Snapshot, is_snapshot

    if isinstance(source, Snapshot) or (isinstance(source, str | Path) and is_snapshot(source)):
        snap = source if isinstance(source, Snapshot) else Snapshot.open(source)
        return _sample_from_snapshot(snap, framing, linger_ms, batch_size)
    if isinstance(source, str | Path):
        from kqlab.kafka.log import partition_dirs

        folders = partition_dirs(source) or [Path(source)]
        logs = [_read_segments(f) for f in folders]
        sample = Sample(pa.concat_tables([s.records for s in logs]),
                        pa.concat_tables([s.batches for s in logs]),
                        [b for s in logs for b in s.raw or ()], "exact", "log",
                        [i for s in logs for i in s.issues])
        if framing != "exact":
            # a consumer never sees transaction markers: rebuild from the data records only
            return sample_from_tables(sample.records, sample.batches, framing,
                                      linger_ms=linger_ms, batch_size=batch_size,
                                      issues=sample.issues)
        return sample
    if isinstance(source, pa.Table):
        if framing == "exact":
            raise ReplayError("a records table has no batch framing: pass framing='single' or "
                              "'linger' to rebuild producer-like batches")
        return reconstruct_framing(source, framing, linger_ms=linger_ms, batch_size=batch_size)
    from kqlab.spark.kafka_frames import is_spark_frame

    if is_spark_frame(source):  # spark.read.format("kafka") or ("kqlab-kafka"): reconstructed
        from kqlab.spark.kafka_frames import load_frame

        return load_frame(source, framing, linger_ms, batch_size)
    raise ReplayError(f"cannot replay a {type(source).__name__}: pass a segment path, a "
                      "records table, a Spark DataFrame of Kafka records or a Sample")


def _read_segments(path: str | Path) -> Sample:
    """One segment file or partition folder, decoded, with every batch's bytes."""
    from kqlab.kafka.log import read_log

    log = read_log(path, keep_bytes=True)  # one pass: tables and every batch's bytes
    assert log.raw is not None
    return Sample(log.records, log.batches, log.raw, "exact", "log", list(log.issues))


def _data_records(records: pa.Table, batches: pa.Table) -> pa.Table:
    """The records outside control batches: what a consumer sees (never transaction markers),
    so what framing is rebuilt from."""
    control = batches.column("is_control").to_numpy(zero_copy_only=False).astype(bool)
    return records.filter(pa.array(~control[record_batch_rows(records, batches)]))


def _sample_from_snapshot(snap: Snapshot, framing: str, linger_ms: int, batch_size: int
                          ) -> Sample:
    """A snapshot as a sample: its tables (no raw bytes) or rebuilt producer-like batches."""
    check_snapshot_framing(snap.framing, framing, snap.path)
    return sample_from_tables(snap.records(), snap.batches() if snap.framing == "exact" else
                              None, framing, linger_ms=linger_ms, batch_size=batch_size,
                              issues=list(snap.issues))


def check_snapshot_framing(stored: str, framing: str, where: object) -> None:
    """Refuse exact replay of a snapshot whose batches were not kept (its records came
    through a consumer)."""
    if framing not in FRAMINGS:
        raise ReplayError(f"framing must be one of {', '.join(FRAMINGS)}, not {framing!r}")
    if framing == "exact" and stored != "exact":
        raise ReplayError(f"snapshot {where} has {stored} framing: pass "
                          "framing='single' or 'linger'")


def sample_from_tables(records: pa.Table, batches: pa.Table | None, framing: str, *,
                       linger_ms: int = 5, batch_size: int = 16384,
                       issues: Sequence[Any] = ()) -> Sample:
    """A sample from stored tables (a snapshot, or one partition of it on a Spark executor).

    ``batches`` is the exact batches table, or None when only records were kept; with
    ``framing`` other than ``exact`` the data records are re-framed producer-like.
    """
    if framing == "exact":
        if batches is None:
            raise ReplayError("exact framing needs the batches table: pass framing='single' "
                              "or 'linger'")
        return Sample(records, batches, None, "exact", "log", list(issues))
    if batches is not None:
        records = _data_records(records, batches)
    rebuilt = reconstruct_framing(records, framing, linger_ms=linger_ms, batch_size=batch_size)
    rebuilt.issues = list(issues)
    return rebuilt
