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
                    chunk_batches: int = 4096, keep_bytes: bool = False) -> Iterator:
    """Yield :class:`~kqlab.kafka.batch.Decoded` chunks of at most ``chunk_batches`` batches.

    Segments are read :data:`READ_CHUNK` bytes at a time and decoded in bulk (headers and CRCs
    by one kernel call per chunk), so memory stays bounded whatever the segment size.  With
    ``keep_bytes`` each chunk also carries its batches' bytes (``Decoded.raw``), cut from the
    same reads: the byte-level validator needs them, and reading the files twice costs a
    second scan of every segment.
    """
    from kqlab.kafka.batch import Decoded, TableBuilder

    t, p = topic_partition_of(path)
    builder = TableBuilder(t if topic is None else topic, p if partition is None else partition)
    issues: list[LogIssue] = []
    #: consumed bytes per add_buffer call: (first row, end row, file position, bytes)
    consumed: list[tuple[int, int, int, bytes]] = []
    yielded = False
    for f in segment_files(path):
        name = str(f)
        with f.open("rb", buffering=0) as fh:
            w = _Window(fh)
            need = True
            while True:
                if need and not w.eof:
                    w.fill()
                r0, off0 = builder.rows, w.off
                w.off, kind, found = builder.add_buffer(
                    w.buf, w.base, start=w.off, final=w.eof, file=name,
                    max_batches=chunk_batches - builder.rows)
                if keep_bytes and builder.rows > r0:
                    consumed.append((r0, builder.rows, w.base + off0, w.buf[off0:w.off]))
                issues.extend(found)
                if builder.rows >= chunk_batches:
                    records, batches = builder.take()
                    yield Decoded(records, batches, issues,
                                  _cut(batches, consumed) if keep_bytes else None)
                    issues, consumed, yielded = [], [], True
                if kind == STOP_CORRUPT_LENGTH:  # nothing after it can be found: reported
                    break
                need = kind != STOP_LIMIT
                if need and w.eof:
                    break
    records, batches = builder.take()
    if batches.num_rows or issues or not yielded:
        yield Decoded(records, batches, issues, _cut(batches, consumed) if keep_bytes else None)


def _cut(batches: object, consumed: list[tuple[int, int, int, bytes]]) -> list[bytes]:
    """Each batch row's bytes, cut from the reads that decoded it (rows and their file
    positions come from the batches table: ``position``, ``size_bytes``)."""
    import pyarrow as pa

    assert isinstance(batches, pa.Table)
    pos = batches.column("position").to_pylist()
    size = batches.column("size_bytes").to_pylist()
    out: list[bytes] = []
    for r0, r1, start, data in consumed:
        out.extend(data[p - start:p - start + n] for p, n in zip(pos[r0:r1], size[r0:r1],
                                                                  strict=True))
    if len(out) != len(pos):  # every row comes from one read: never expected
        raise ValueError(f"{len(out)} batch byte strings for {len(pos)} rows")
    return out


def read_log(path: str | Path, *, topic: str | None = None, partition: int | None = None,
             keep_bytes: bool = False):
    """Decode a segment file or partition folder into one :class:`~kqlab.kafka.batch.Decoded`.

    Examples
    --------
    >>> from kqlab.kafka import read_log  # doctest: +SKIP
    >>> log = read_log("data/orders-0")  # doctest: +SKIP
    >>> log.records.num_rows, log.batches.num_rows, log.issues  # doctest: +SKIP
    """
    import pyarrow as pa

    from kqlab.kafka.batch import Decoded

    parts = list(iter_log_tables(path, topic=topic, partition=partition,
                                 keep_bytes=keep_bytes))
    return Decoded(pa.concat_tables([d.records for d in parts]),
                   pa.concat_tables([d.batches for d in parts]),
                   [i for d in parts for i in d.issues],
                   [b for d in parts for b in d.raw or ()] if keep_bytes else None)
