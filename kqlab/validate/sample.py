"""A sample to replay: records, their batches (exact or reconstructed) and the batches' bytes.

The replay judges *batches* (a failing record rejects its whole batch), so a sample always
carries a batches table beside its records, and the bytes of each batch when it has them (log
segments); :func:`record_batch_rows` is the one place that maps records to their batch rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from kqlab.errors import KqlabError
from kqlab.kafka.table_checks import records_per_batch

FRAMINGS = ("exact", "single", "linger")


class ReplayError(KqlabError):
    """The replay cannot run as asked (no batches and no framing strategy, bad source ...)."""


@dataclass
class Sample:
    """Records to replay, their batches (exact or reconstructed) and the batches' bytes."""

    records: pa.Table
    batches: pa.Table
    raw: list[bytes] | None  # None: a snapshot (tables only; no batch bytes were kept)
    framing: str = "exact"
    source: str = "log"  # "log": stored by a broker; "producer": as a producer sends them
    issues: list[Any] = field(default_factory=list)

    @property
    def judged_as(self) -> str:
        """How the broker checks read the batches: ``source``, except that batches rebuilt
        from a consumer's records (``reconstructed:*`` framing: non-idempotent, uncompressed,
        CreateTime, base offset 0) read the same as producer bytes and as stored bytes, so
        they take the vectorised table checks (``source="log"``) rather than the byte-level
        validator batch by batch (tests hold the two equal)."""
        return "log" if self.framing.startswith("reconstructed") else self.source


def record_batch_rows(records: pa.Table, batches: pa.Table) -> np.ndarray:
    """For every record, the row of its batch in ``batches`` (the decoder's own accounting)."""
    try:
        n_r = records_per_batch(batches, records.num_rows)
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    return np.repeat(np.arange(batches.num_rows, dtype=np.int64), n_r)

