"""Work units: the pieces of a source that Spark tasks replay independently.

A unit is one topic-partition, because that is Kafka's unit of order: producer state
(idempotent sequences, epochs) lives per partition, and a partition's batches must be
judged in log order.  Partitions are independent of each other, so units run in parallel
with nothing shared.

Planning reads metadata only, never records: a snapshot's ``snapshot.json`` and its Parquet
footers (each row group's min/max ``partition`` says which units must read it), or a log
directory's folder names.  The records themselves are read by the executors (pyarrow for
Parquet, kqlab's codec for segments), so a month of segments replays without a Python driver
loop over data and without pushing record bytes through the JVM.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kqlab.errors import KqlabError


class UnitPlanError(KqlabError):
    """The source cannot be split into units (not a snapshot or segment folder ...)."""


@dataclass(frozen=True)
class Unit:
    """One topic-partition of a source, and where its data lies.

    ``records`` / ``batches`` list ``(parquet file, row groups)`` for snapshots; ``path`` is
    the partition folder (or segment file) for segments.
    """

    index: int
    kind: str  # "snapshot" | "segments"
    topic: str
    partition: int
    path: str = ""
    records: list[tuple[str, list[int] | None]] = field(default_factory=list)
    batches: list[tuple[str, list[int] | None]] = field(default_factory=list)
    #: what the plan knows of the size (records for snapshots, bytes for segments)
    size: int = 0

    def to_json(self) -> str:
        return orjson.dumps(asdict(self)).decode()

    @classmethod
    def from_json(cls, text: str) -> Unit:
        d = orjson.loads(text)
        d["records"] = [(f, g) for f, g in d["records"]]
        d["batches"] = [(f, g) for f, g in d["batches"]]
        return cls(**d)


@dataclass
class Plan:
    """The units of a source, plus what the driver knows of it as a whole."""

    source: str
    kind: str
    units: list[Unit]
    stored_framing: str = "exact"
    #: issues recorded in a snapshot's metadata (segment issues come from the executors)
    issues: list[dict[str, Any]] = field(default_factory=list)


def plan_units(source: str | Path) -> Plan:
    """Split a snapshot folder, a log directory, a partition folder or a segment file."""
    from kqlab.sources.files import Snapshot, SnapshotError, is_snapshot

    if isinstance(source, Snapshot):
        return _plan_snapshot(source)
    if not isinstance(source, str | Path):
        raise UnitPlanError(f"the Spark engine replays files, not a {type(source).__name__}: "
                            "pass a snapshot folder, a log directory, a partition folder or a "
                            "segment file (save tables in memory with Snapshot.create first)")
    # absolute before it is shipped: an executor's working directory is not the driver's
    p = Path(source).expanduser().resolve()
    if is_snapshot(p):
        try:
            return _plan_snapshot(Snapshot.open(p))
        except SnapshotError as exc:
            raise UnitPlanError(str(exc)) from None
    if p.exists():
        return _plan_segments(p)
    raise UnitPlanError(f"{p}: no such file or folder; pass a snapshot folder, a log directory "
                        "(of <topic>-<partition> folders), a partition folder or a segment file")


def _row_groups(files: list[Path], partitions: list[int], held: list[set[int] | None]
                ) -> dict[int, list[tuple[str, list[int] | None]]]:
    """Per partition, the files and row groups that may hold it.

    ``held`` is each file's partitions from the snapshot metadata (None for snapshots written
    before kqlab recorded it).  Row-group statistics narrow the reads further.  A file whose
    footer cannot be read goes to every unit it may concern with ``None`` (read it all): the
    executor then meets the damage and reports it as that unit's error, instead of the
    planner failing the whole replay or units silently skipping a file.
    """
    import pyarrow.parquet as pq

    out: dict[int, list[tuple[str, list[int] | None]]] = {p: [] for p in partitions}
    for f, has in zip(files, held, strict=True):
        wanted = [p for p in partitions if has is None or p in has]
        try:
            meta = pq.ParquetFile(f).metadata
        except (OSError, ValueError):
            for p in wanted:
                out[p].append((str(f), None))
            continue
        col = meta.schema.names.index("partition")
        spans = []
        for rg in range(meta.num_row_groups):
            if meta.row_group(rg).num_rows == 0:
                continue
            stats = meta.row_group(rg).column(col).statistics
            if stats is not None and stats.has_min_max:
                spans.append((rg, stats.min, stats.max))
            else:  # no statistics: every unit must look
                spans.append((rg, min(partitions, default=0), max(partitions, default=0)))
        for p in wanted:
            groups = [rg for rg, lo, hi in spans if lo <= p <= hi]
            if groups:
                out[p].append((str(f), groups))
    return out


def _plan_snapshot(snap: Any) -> Plan:
    parts = snap.partitions
    held = [set(e["partitions"]) if "partitions" in e else None
            for e in snap.metadata["parts"]]
    records = _row_groups(snap.part_files("records"), parts, held)
    batches = _row_groups(snap.part_files("batches"), parts, held) \
        if snap.framing == "exact" else {}
    sizes = {int(p): e.get("records", 0) for p, e in snap.metadata["partitions"].items()}
    units = [Unit(i, "snapshot", snap.topic, p, str(snap.path), records[p],
                  batches.get(p, []), sizes.get(p, 0))
             for i, p in enumerate(sorted(parts))]
    return Plan(str(snap.path), "snapshot", units, snap.framing, list(snap.issues))


def _plan_segments(p: Path) -> Plan:
    from kqlab.kafka.log import partition_dirs, topic_partition_of
    from kqlab.sources.segments import open_source

    folders = partition_dirs(p)
    if not folders:
        open_source(p)  # raises a clear error for a folder that holds no segments
        folders = [p]
    units = []
    for i, f in enumerate(folders):
        topic, partition = topic_partition_of(f)
        files = [f] if f.is_file() else list(f.glob("*.log"))
        units.append(Unit(i, "segments", topic, partition, str(f),
                          size=sum(x.stat().st_size for x in files if x.is_file())))
    return Plan(str(p), "segments", units)
