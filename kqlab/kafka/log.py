"""Reading batches out of buffers and Kafka log segment files (spec §1.1; ``FileLogInputStream``).

A partition directory (``<topic>-<partition>/``) holds segments named by their base offset
(``00000000000000000000.log``).  Files are streamed batch by batch — a 12-byte log overhead,
then the rest of the batch — so a large segment is never loaded whole.  A truncated tail (a
broker crash mid-write) or an impossible length is reported as a :class:`LogIssue`; nothing is
silently skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from kqlab.errors import LogPathError
from kqlab.kafka.log_issues import (
    STOP_CORRUPT_LENGTH,
    STOP_END,
    STOP_LIMIT,
    LogIssue,
    RawBatch,
    stop_issue,
)

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def scan_buffer(data: bytes, file: str | None = None) -> Iterator[tuple[int, bytes] | LogIssue]:
    """Yield ``(position, batch_bytes)`` for each complete batch in ``data``, then any issue.

    Follows the broker's scanning rules: fewer than 12 (or 17) bytes left ends the scan; a
    length below 14 is corrupt and ends it (there is no way to find the next batch); a batch
    running past the end is a truncated tail.  An invalid magic byte is *yielded* (the decoder
    labels it) because its length still says where the next batch starts.
    """
    from kqlab.kafka.records_parser import scan_batches

    scan = scan_batches(data, 0, len(data))
    for p, n in zip(scan[0].tolist(), scan[1].tolist(), strict=True):
        yield p, bytes(data[p:p + n])
    stop, kind, length = scan[-3:]
    issue = stop_issue(kind, stop, len(data) - stop, length, file)
    if issue is not None:
        yield issue


class _Window:
    """A sliding window over a segment file: ``buf[off:]`` is read but not yet consumed.

    ``buf[0]`` sits at file position ``base``; :meth:`fill` appends the next read to the
    unconsumed tail, so a batch larger than one read simply takes several.
    """

    def __init__(self, fh: BinaryIO):
        self.fh = fh
        self.buf = b""
        self.base = 0
        self.off = 0
        self.eof = False

    def fill(self) -> None:
        more = self.fh.read(READ_CHUNK)
        if more:
            self.buf, self.base, self.off = self.buf[self.off:] + more, self.base + self.off, 0
        else:
            self.eof = True


def segment_files(path: str | Path) -> list[Path]:
    """The ``*.log`` segments of a partition folder in offset order, or ``[path]`` for a file."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.exists():
        raise LogPathError(f"{p}: no such file or directory; pass a segment file (*.log) or a "
                           "partition folder such as /var/lib/kafka/data/orders-0")
    files = sorted(p.glob("*.log"), key=lambda f: (len(f.stem), f.stem))
    if not files:
        raise LogPathError(f"{p}: folder holds no *.log segment files; pass a partition folder "
                           "(<topic>-<partition>) or a single segment file")
    return files


def topic_partition_of(path: str | Path) -> tuple[str, int]:
    """Infer ``(topic, partition)`` from a ``<topic>-<partition>`` folder; ``("", -1)`` if not."""
    p = Path(path)
    folder = p.parent if p.is_file() else p
    m = _PARTITION_DIR.match(folder.name)
    if not m:
        return "", -1
    return m["topic"], int(m["partition"])


def partition_dirs(path: str | Path) -> list[Path]:
    """The ``<topic>-<partition>`` folders (holding ``*.log`` segments) inside a log directory.

    A broker's ``log.dirs`` entry, or a backup of several partitions, is such a folder.  They
    come sorted by topic, then partition number, so every engine walks them in one order.
    Empty when ``path`` is a segment file or itself a partition folder.
    """
    p = Path(path)
    if not p.is_dir() or any(p.glob("*.log")):
        return []
    found = []
    for sub in p.iterdir():
        m = _PARTITION_DIR.match(sub.name)
        if m and sub.is_dir() and any(sub.glob("*.log")):
            found.append((m["topic"], int(m["partition"]), sub))
    return [sub for _, _, sub in sorted(found)]


def iter_log_batches(path: str | Path) -> Iterator[RawBatch | LogIssue]:
    """Stream every batch (and issue) of a segment file or partition folder, in log order."""
    from kqlab.kafka.records_parser import scan_batches

    for f in segment_files(path):
        name = str(f)
        with f.open("rb", buffering=0) as fh:
            w = _Window(fh)
            while True:
                w.fill()
                scan = scan_batches(w.buf, w.off, len(w.buf))
                for p, n in zip(scan[0].tolist(), scan[1].tolist(), strict=True):
                    yield RawBatch(w.base + p, w.buf[p:p + n], name)
                w.off, kind, length = scan[-3:]
                if kind == STOP_CORRUPT_LENGTH or (w.eof and kind != STOP_END):
                    issue = stop_issue(kind, w.base + w.off, len(w.buf) - w.off, length, name)
                    if issue is not None:
                        yield issue
                    break
                if w.eof:
                    break


#: bytes read from a segment per step of :func:`iter_log_tables`
READ_CHUNK = 8 << 20


def iter_log_tables(path: str | Path, *, topic: str | None = None, partition: int | None = None,
                    chunk_batches: int = 4096) -> Iterator:
    """Yield :class:`~kqlab.kafka.batch.Decoded` chunks of at most ``chunk_batches`` batches.

    Segments are read :data:`READ_CHUNK` bytes at a time and decoded in bulk (headers and CRCs
    by one kernel call per chunk), so memory stays bounded whatever the segment size.
    """
    from kqlab.kafka.batch import Decoded, TableBuilder

    t, p = topic_partition_of(path)
    builder = TableBuilder(t if topic is None else topic, p if partition is None else partition)
    issues: list[LogIssue] = []
    yielded = False
    for f in segment_files(path):
        name = str(f)
        with f.open("rb", buffering=0) as fh:
            w = _Window(fh)
            need = True
            while True:
                if need and not w.eof:
                    w.fill()
                w.off, kind, found = builder.add_buffer(
                    w.buf, w.base, start=w.off, final=w.eof, file=name,
                    max_batches=chunk_batches - builder.rows)
                issues.extend(found)
                if builder.rows >= chunk_batches:
                    records, batches = builder.take()
                    yield Decoded(records, batches, issues)
                    issues, yielded = [], True
                if kind == STOP_CORRUPT_LENGTH:  # nothing after it can be found: reported
                    break
                need = kind != STOP_LIMIT
                if need and w.eof:
                    break
    records, batches = builder.take()
    if batches.num_rows or issues or not yielded:
        yield Decoded(records, batches, issues)


def read_log(path: str | Path, *, topic: str | None = None, partition: int | None = None):
    """Decode a segment file or partition folder into one :class:`~kqlab.kafka.batch.Decoded`.

    Examples
    --------
    >>> from kqlab.kafka import read_log  # doctest: +SKIP
    >>> log = read_log("data/orders-0")  # doctest: +SKIP
    >>> log.records.num_rows, log.batches.num_rows, log.issues  # doctest: +SKIP
    """
    import pyarrow as pa

    from kqlab.kafka.batch import Decoded

    parts = list(iter_log_tables(path, topic=topic, partition=partition))
    return Decoded(pa.concat_tables([d.records for d in parts]),
                   pa.concat_tables([d.batches for d in parts]),
                   [i for d in parts for i in d.issues])
