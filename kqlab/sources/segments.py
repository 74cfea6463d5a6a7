"""Kafka log segment folders as a source, and turning them into snapshots.

A partition folder (``<topic>-<partition>/`` holding ``*.log`` segments) or a single segment
file can be replayed directly (:func:`kqlab.kafka.log.read_log`) or streamed into a
:class:`~kqlab.sources.files.Snapshot` with exact framing by :func:`snapshot_from_segments`,
which holds at most ``chunk_batches`` decoded batches in memory at a time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from kqlab.sources.files import METADATA_FILE, Snapshot, SnapshotError

_PARTITION_DIR = re.compile(r"^.+-\d+$")


def open_source(path: str | Path) -> Literal["snapshot", "segments"]:
    """What kind of on-disk source ``path`` is.

    A folder holding ``snapshot.json`` (or that file itself) is a ``"snapshot"``; a ``*.log``
    segment file, a folder holding ``*.log`` files or a ``<topic>-<partition>`` folder is
    ``"segments"``.  Anything else raises :class:`SnapshotError` saying what was expected.
    """
    p = Path(path)
    if not p.exists():
        raise SnapshotError(f"{p}: no such file or folder; pass a snapshot folder or a log "
                            "segment file / partition folder")
    if p.is_file():
        if p.name == METADATA_FILE:
            return "snapshot"
        if p.suffix == ".log":
            return "segments"
        raise SnapshotError(f"{p}: not a log segment (*.log) nor a snapshot folder")
    if (p / METADATA_FILE).is_file():
        return "snapshot"
    if any(p.glob("*.log")) or _PARTITION_DIR.match(p.name):
        return "segments"
    raise SnapshotError(f"{p}: folder holds neither {METADATA_FILE} (a snapshot) nor *.log "
                        "segment files (a partition folder such as orders-0)")


def snapshot_from_segments(path: str | Path, out: str | Path, *, topic: str | None = None,
                           partition: int | None = None, chunk_batches: int = 4096,
                           cluster: str | Mapping[str, Any] | None = None,
                           overwrite: bool = False) -> Snapshot:
    """Stream a segment file or partition folder into a new exact-framing snapshot at ``out``.

    ``topic``/``partition`` default to the ``<topic>-<partition>`` folder name (``topic`` is
    required when the folder is not named so).  Each decoded chunk of at most
    ``chunk_batches`` batches becomes one Parquet part; the scan's issues (a truncated tail,
    a corrupt length) are kept in the snapshot metadata.

    Examples
    --------
    >>> import tempfile
    >>> from kqlab.sources.demo import write_demo_segment
    >>> tmp = tempfile.mkdtemp()
    >>> snap = snapshot_from_segments(write_demo_segment(tmp, 1_700_000_000_000), tmp + "/s")
    >>> snap.topic, snap.partitions, [i["kind"] for i in snap.issues]
    ('orders', [0], ['truncated_tail'])
    """
    from kqlab.kafka.log import iter_log_tables, segment_files, topic_partition_of

    if chunk_batches < 1:
        raise SnapshotError(f"chunk_batches must be at least 1, not {chunk_batches}")
    files = segment_files(path)  # LogPathError with a clear message when there are none
    t, p = topic_partition_of(path)
    topic = t if topic is None else topic
    partition = p if partition is None else partition
    if not topic:
        raise SnapshotError(f"{path}: cannot tell the topic from the path (not a "
                            "<topic>-<partition> folder); pass topic=")
    snap = Snapshot.create(
        out, topic=topic, cluster=cluster, method="segments",
        ranges={"partition": partition, "segments": [f.name for f in files]},
        framing="exact", extra={"source_path": str(Path(path).resolve())},
        overwrite=overwrite)
    for chunk in iter_log_tables(path, topic=topic, partition=partition,
                                 chunk_batches=chunk_batches):
        snap.append(chunk.records, chunk.batches, chunk.issues)
    return snap


__all__ = ["open_source", "snapshot_from_segments"]
