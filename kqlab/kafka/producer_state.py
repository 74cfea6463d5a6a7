"""Per-partition producer state: epochs, sequences, duplicates, open transactions (spec §3.F).

Mirrors ``ProducerStateManager``/``ProducerAppendInfo``/``ProducerStateEntry``: the broker keeps
for each producer id its epoch, the metadata of its last five batches (to answer an exact resend
as a duplicate) and whether a transaction is open.  State changes only when a batch is appended.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What the broker remembers of an appended batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    """One producer id's state."""

    epoch: int = -1
    #: the next batch's sequence is not checked (client re-sequenced after a failure)
    resync: bool = False
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        """Last sequence appended, -1 when nothing is remembered."""
        return self.batches[-1].last_seq if self.batches else -1


class ProducerCheckError(Exception):
    """A stage-F rejection: ``code`` (47, 45, 48) and the broker's exception text."""

    def __init__(self, code: int, check: str, message: str):
        super().__init__(message)
        self.code = code
        self.check = check
        self.message = message


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """``nextSeq == lastSeq + 1`` in 64-bit, or 0 after Integer.MAX_VALUE."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """Producer state of one partition."""

    def __init__(self, tp: str):
        self.tp = tp
        self.entries: dict[int, ProducerEntry] = {}

    def find_duplicate(self, pid: int, epoch: int, first_seq: int, last_seq: int
                       ) -> BatchMetadata | None:
        """F1: the cached batch an exact resend matches, or None."""
        entry = self.entries.get(pid)
        if entry is None or entry.epoch != epoch:
            return None
        for b in entry.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def resync(self, pid: int) -> None:
        """Accept the producer's next sequence whatever it is (see the validator's ``resync``)."""
        entry = self.entries.get(pid)
        if entry is not None:
            entry.resync = True

    def check(self, *, pid: int, epoch: int, first_seq: int, first_offset: int,
              transactional: bool, control: bool, from_client: bool) -> None:
        """Raise :class:`ProducerCheckError` for F3/F4/F5; do not change state."""
        entry = self.entries.get(pid) or ProducerEntry()
        if control:
            if epoch < entry.epoch:
                raise ProducerCheckError(47, "F3", f"Producer's epoch at offset {first_offset} "
                                         f"in {self.tp} is {epoch}, which is smaller than the "
                                         f"last seen epoch {entry.epoch}")
            return
        if epoch < entry.epoch:
            raise ProducerCheckError(47, "F3", f"Epoch of producer {pid} at offset "
                                     f"{first_offset} in {self.tp} is {epoch}, which is smaller "
                                     f"than the last seen epoch {entry.epoch}")
        if from_client and not entry.resync:
            if epoch != entry.epoch:
                if first_seq != 0 and entry.epoch != -1:
                    raise ProducerCheckError(
                        45, "F4", f"Invalid sequence number for new epoch of producer {pid}at "
                        f"offset {first_offset} in partition {self.tp}: {epoch} (request "
                        f"epoch), {first_seq} (seq. number), {entry.epoch} (current producer "
                        "epoch)")
            else:
                last = entry.last_seq
                if not (entry.epoch == -1 or in_sequence(last, first_seq)):
                    raise ProducerCheckError(
                        45, "F4", f"Out of order sequence number for producer {pid} at offset "
                        f"{first_offset} in partition {self.tp}: {first_seq} (incoming seq. "
                        f"number), {last} (current end sequence number)")
        if entry.current_txn_first_offset is not None and not transactional:
            raise ProducerCheckError(48, "F5", f"Expected transactional write from producer "
                                     f"{pid} at offset {first_offset} in partition {self.tp}")

    def append(self, *, pid: int, epoch: int, meta: BatchMetadata, transactional: bool,
               control: bool) -> None:
        """Record an appended batch (or an end-transaction marker for control batches)."""
        entry = self.entries.setdefault(pid, ProducerEntry())
        if control:
            entry.current_txn_first_offset = None
            if epoch > entry.epoch:
                entry.epoch = epoch
            return
        if epoch != entry.epoch:
            entry.batches.clear()
            entry.epoch = epoch
        entry.resync = False
        entry.batches.append(meta)
        if transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = meta.first_offset
