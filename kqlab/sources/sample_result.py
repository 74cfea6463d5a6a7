"""What live sampling returns: the records plus how they were obtained.

Kept apart from :mod:`kqlab.sources.kafka` (which builds it) so the errors that carry a
partial result (:class:`~kqlab.sources.kafka_errors.SampleCancelled`) can name it without an
import circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from kqlab.kafka.log import LogIssue

__all__ = ["FRAMING", "PartitionRange", "SampleResult"]

#: the framing label of records read with the consumer: it hands over records, not batches,
#: so every record is treated as its own batch (``batch_offset = offset``, ``batch_index = 0``)
FRAMING = "reconstructed:single"


@dataclass(frozen=True)
class PartitionRange:
    """What was asked of one partition and what came back (``end`` is exclusive)."""

    partition: int
    low: int       # earliest offset on the broker
    high: int      # high watermark when sampling started
    start: int     # first offset read
    end: int       # one past the last offset read
    records: int   # records returned (after the random filter)

    def to_dict(self) -> dict[str, int]:
        """The range as a snapshot stores it (``records`` is the snapshot's own count)."""
        return {"partition": self.partition, "low": self.low, "high": self.high,
                "start": self.start, "end": self.end}


@dataclass(frozen=True, repr=False)
class SampleResult:
    """The sampled records plus how they were obtained."""

    records: pa.Table
    topic: str
    bootstrap: str
    ranges: list[PartitionRange]
    framing: str = FRAMING
    group_id: str = ""
    bytes: int = 0
    elapsed_s: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)  # redacted
    #: with ``exact_framing=True``: the real batches (``BATCHES_SCHEMA``), else ``None``
    batches: pa.Table | None = None
    #: with ``exact_framing=True``: what the batch parser reported
    issues: list[LogIssue] = field(default_factory=list)

    @property
    def counts(self) -> dict[int, int]:
        """Records per partition."""
        return {r.partition: r.records for r in self.ranges}

    def __repr__(self) -> str:
        return (f"SampleResult(topic={self.topic!r}, bootstrap={self.bootstrap!r}, "
                f"records={self.records.num_rows}, partitions={len(self.ranges)}, "
                f"framing={self.framing!r})")
