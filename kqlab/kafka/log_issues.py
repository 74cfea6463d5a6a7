"""What a scan of concatenated batches reports besides batches (spec §1.1): where it stopped
and why, as a :class:`LogIssue`, and the complete batches' bytes (:class:`RawBatch`).

Shared by the segment reader (:mod:`kqlab.kafka.log`) and the bulk decoder
(:class:`kqlab.kafka.batch.TableBuilder`), which both stop where the broker's scanner stops.
"""

from __future__ import annotations

from dataclasses import dataclass

LOG_OVERHEAD = 12
MIN_RECORD_OVERHEAD = 14  # LegacyRecord.RECORD_OVERHEAD_V0


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


# how a scan stopped (the scan kernel's stop kinds; see kqlab.kafka._scan_py)
STOP_END, STOP_SHORT, STOP_CORRUPT_LENGTH, STOP_TRUNCATED = 0, 1, 2, 3
#: more batches follow, but the caller's limit was reached (TableBuilder.add_buffer)
STOP_LIMIT = -1


def stop_issue(kind: int, position: int, remaining: int, length: int,
               file: str | None = None) -> LogIssue | None:
    """The :class:`LogIssue` for a scan that stopped with ``kind`` at ``position``, if any."""
    if kind == STOP_CORRUPT_LENGTH:
        return LogIssue("corrupt_length", position, f"Record size {length} is less than the "
                        f"minimum record overhead ({MIN_RECORD_OVERHEAD})", remaining, file)
    if kind == STOP_SHORT:
        return LogIssue("truncated_tail", position, f"{remaining} trailing bytes are too few "
                        "for a batch header (12 bytes)", remaining, file)
    if kind == STOP_TRUNCATED:
        return LogIssue("truncated_tail", position, f"batch declares {LOG_OVERHEAD + length} "
                        f"bytes but only {remaining} remain (truncated tail)", remaining, file)
    return None
