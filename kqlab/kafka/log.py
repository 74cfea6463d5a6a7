"""Reading batches out of buffers and Kafka log segment files (spec §1.1; ``FileLogInputStream``).

A partition directory (``<topic>-<partition>/``) holds segments named by their base offset
(``00000000000000000000.log``).  Files are streamed batch by batch — a 12-byte log overhead,
then the rest of the batch — so a large segment is never loaded whole.  A truncated tail (a
broker crash mid-write) or an impossible length is reported as a :class:`LogIssue`; nothing is
silently skipped.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kqlab.errors import LogPathError

LOG_OVERHEAD = 12
HEADER_SIZE_UP_TO_MAGIC = 17
MIN_RECORD_OVERHEAD = 14  # LegacyRecord.RECORD_OVERHEAD_V0
_OFFSET_LENGTH = struct.Struct(">qi")
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
#: read segment files through a buffer this large
READ_BUFFER = 1 << 20


@dataclass(frozen=True, slots=True)
class LogIssue:
    """Something the scan could not turn into a batch: where, what, and how many bytes."""

    kind: str  # "truncated_tail" | "corrupt_length" | "empty"
    position: int
    message: str
    bytes: int = 0
    file: str | None = None

    def to_dict(self) -> dict[str, object]:
        """Plain-dict form for ``--json`` output."""
        return {"kind": self.kind, "file": self.file, "position": self.position,
                "bytes": self.bytes, "message": self.message}


@dataclass(frozen=True, slots=True)
class RawBatch:
    """One batch's complete bytes and where it was found."""

    position: int
    data: bytes
    file: str | None = None


def scan_buffer(data: bytes, file: str | None = None) -> Iterator[tuple[int, bytes] | LogIssue]:
    """Yield ``(position, batch_bytes)`` for each complete batch in ``data``, then any issue.

    Follows the broker's scanning rules: fewer than 12 (or 17) bytes left ends the scan; a
    length below 14 is corrupt and ends it (there is no way to find the next batch); a batch
    running past the end is a truncated tail.  An invalid magic byte is *yielded* (the decoder
    labels it) because its length still says where the next batch starts.
    """
    pos = 0
    end = len(data)
    while True:
        r = end - pos
        if r == 0:
            return
        if r < LOG_OVERHEAD:
            yield LogIssue("truncated_tail", pos, f"{r} trailing bytes are too few for a batch "
                           "header (12 bytes)", r, file)
            return
        _, length = _OFFSET_LENGTH.unpack_from(data, pos)
        if length < MIN_RECORD_OVERHEAD:
            yield LogIssue("corrupt_length", pos, f"Record size {length} is less than the "
                           f"minimum record overhead ({MIN_RECORD_OVERHEAD})", r, file)
            return
        if r < HEADER_SIZE_UP_TO_MAGIC or LOG_OVERHEAD + length > r:
            yield LogIssue("truncated_tail", pos, f"batch declares {LOG_OVERHEAD + length} "
                           f"bytes but only {r} remain (truncated tail)", r, file)
            return
        stop = pos + LOG_OVERHEAD + length
        yield pos, data[pos:stop]
        pos = stop


def _scan_file(path: Path) -> Iterator[RawBatch | LogIssue]:
    name = str(path)
    with path.open("rb", buffering=READ_BUFFER) as fh:
        pos = 0
        while True:
            head = fh.read(LOG_OVERHEAD)
            if not head:
                return
            if len(head) < LOG_OVERHEAD:
                yield LogIssue("truncated_tail", pos, f"{len(head)} trailing bytes are too few "
                               "for a batch header (12 bytes)", len(head), name)
                return
            _, length = _OFFSET_LENGTH.unpack(head)
            if length < MIN_RECORD_OVERHEAD:
                rest = len(fh.read())
                yield LogIssue("corrupt_length", pos, f"Record size {length} is less than the "
                               f"minimum record overhead ({MIN_RECORD_OVERHEAD})",
                               LOG_OVERHEAD + rest, name)
                return
            body = fh.read(length)
            if len(body) < length:
                yield LogIssue("truncated_tail", pos, f"batch declares {LOG_OVERHEAD + length} "
                               f"bytes but only {LOG_OVERHEAD + len(body)} remain (truncated "
                               "tail)", LOG_OVERHEAD + len(body), name)
                return
            yield RawBatch(pos, head + body, name)
            pos += LOG_OVERHEAD + length


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


def iter_log_batches(path: str | Path) -> Iterator[RawBatch | LogIssue]:
    """Stream every batch (and issue) of a segment file or partition folder, in log order."""
    for f in segment_files(path):
        yield from _scan_file(f)


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
            buf, base, off = b"", 0, 0  # buf[0] is at file position base; off = consumed
            eof, need = False, True
            while True:
                if need and not eof:
                    more = fh.read(READ_CHUNK)
                    if more:
                        buf, base, off = buf[off:] + more, base + off, 0
                    else:
                        eof = True
                off, kind, found = builder.add_buffer(
                    buf, base, start=off, final=eof, file=name,
                    max_batches=chunk_batches - builder.rows)
                issues.extend(found)
                if builder.rows >= chunk_batches:
                    records, batches = builder.take()
                    yield Decoded(records, batches, issues)
                    issues, yielded = [], True
                if kind == 2:  # a length we cannot step over: the rest is reported, not read
                    break
                need = kind != -1
                if need and eof:
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
