"""Per-partition producer state: epochs, sequences, duplicates, open transactions and the
end-transaction markers that close them (spec §3.F).

Mirrors ``ProducerStateManager``/``ProducerAppendInfo``/``ProducerStateEntry`` (and the epoch
check ``UnifiedLog.analyzeAndValidateProducerState`` runs first): the broker keeps for each
producer id its epoch, the metadata of its last five batches (to answer an exact resend as a
duplicate), the first offset of its open transaction and the epoch of the transaction
coordinator that wrote its last marker.  State changes only when a batch is appended.

A marker is appended like the broker's ``ProducerStateEntry.update``: a marker whose producer
epoch differs from the entry's (transactions v2, KIP-890: the coordinator bumps the epoch on
every commit/abort) drops the cached batches, so the next transaction starts at sequence 0;
a same-epoch marker (TV0/TV1) keeps them, so the sequence continues and duplicates of the last
five batches are still recognised.  ``docs/kafka-4x-producer-state.md`` lists each behaviour
with its Java method.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kqlab.kafka.checks import producer as fchecks
from kqlab.kafka.checks._check import Check
from kqlab.kafka.checks.producer import (
    EndTxnMarker,
    MalformedMarker,
    ProducerCheckError,
    log_offset_metadata,
)

__all__ = [
    "BatchMetadata", "EndTxnMarker", "MalformedMarker", "ProducerCheckError", "ProducerEntry",
    "ProducerStateManager", "in_sequence",
]

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1
#: ``TransactionVersion.TV_UNKNOWN``: what 4.2+ passes for data batches (and prints as ``TV-1``)
TV_UNKNOWN = -1


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
    """One producer id's state (``ProducerStateEntry``)."""

    epoch: int = -1
    #: the next batch's sequence is not checked (client re-sequenced after a failure)
    resync: bool = False
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    current_txn_first_offset: int | None = None
    #: epoch of the coordinator that wrote the producer's last marker (-1: none seen)
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        """Last sequence appended, -1 when nothing is remembered."""
        return self.batches[-1].last_seq if self.batches else -1

    def bump_epoch(self, epoch: int) -> None:
        """``maybeUpdateProducerEpoch``: a different epoch forgets the cached batches."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """``nextSeq == lastSeq + 1`` in 64-bit, or 0 after Integer.MAX_VALUE."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """Producer state of one partition.

    Parameters
    ----------
    tp
        ``"<topic>-<partition>"`` as the broker's texts print it.
    broker_version
        Release to emulate, ``(major, minor)``: picks the epoch texts (2.4-2.7, 2.8-4.1, 4.2+),
        the KIP-1228 marker epoch rule (4.2+), the TV2 sequence-0 rule (4.1+) and the early
        epoch check of ``analyzeAndValidateProducerState`` (3.9+, the KAFKA-19690 patch
        releases).
    marker_transaction_version
        The transaction version (``transaction.version`` feature, 0-2) the coordinator writes
        markers with (WriteTxnMarkers v2's ``TransactionVersion``); ``None`` = unknown, as when
        replaying a log (a marker does not record it): markers are then judged by the TV0/TV1
        rule a follower applies (epoch >= the last seen), which every valid TV2 marker passes.
    epoch_bump_clients
        The producers are TV2 clients (produce v12+, ``TransactionSupportedOperation``
        ``supportsEpochBump``): their first transactional batch of a transaction is verified
        with epoch-bump support, which brings the 4.1+ sequence-0 rule.
    verification
        ``transaction.partition.verification.enable`` (KIP-890 part 1): only with it does a
        verification state exist for the TV2 sequence-0 rule.
    """

    def __init__(self, tp: str, *, broker_version: tuple[int, int] = (4, 0),
                 marker_transaction_version: int | None = None,
                 epoch_bump_clients: bool = False, verification: bool = True):
        self.tp = tp
        self.broker_version = (int(broker_version[0]), int(broker_version[1]))
        self.marker_transaction_version = marker_transaction_version
        self.epoch_bump_clients = epoch_bump_clients
        self.verification = verification
        self.entries: dict[int, ProducerEntry] = {}

    @property
    def marker_transaction_version(self) -> int | None:
        """See the class docstring (0, 1, 2 or None)."""
        return self._marker_tv

    @marker_transaction_version.setter
    def marker_transaction_version(self, value: int | None) -> None:
        if value is not None and value not in (0, 1, 2):
            raise ValueError(f"marker_transaction_version must be 0, 1, 2 or None (unknown), "
                             f"not {value!r}")
        self._marker_tv = value

    # -- queries ----------------------------------------------------------------------------
    def find_duplicate(self, pid: int, epoch: int, first_seq: int, last_seq: int
                       ) -> BatchMetadata | None:
        """F1: the cached batch an exact resend matches, or None (``findDuplicateBatch``)."""
        entry = self.entries.get(pid)
        if entry is None or entry.epoch != epoch:
            return None
        for b in entry.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def has_ongoing_transaction(self, pid: int, epoch: int) -> bool:
        """``UnifiedLog.hasOngoingTransaction``: an open transaction at exactly this epoch."""
        entry = self.entries.get(pid)
        return entry is not None and entry.current_txn_first_offset is not None \
            and entry.epoch == epoch

    def resync(self, pid: int) -> None:
        """Accept the producer's next sequence whatever it is (see the validator's ``resync``)."""
        entry = self.entries.get(pid)
        if entry is not None:
            entry.resync = True

    # -- the checks -------------------------------------------------------------------------
    def check(self, *, pid: int, epoch: int, first_seq: int, first_offset: int,
              transactional: bool, control: bool, from_client: bool,
              marker: EndTxnMarker | MalformedMarker | None = None) -> None:
        """Raise :class:`ProducerCheckError` as stage F would; do not change state.

        For a control batch, ``marker`` is its first record read by
        :func:`~kqlab.kafka.checks.producer.parse_end_txn_markers` (a
        :class:`MalformedMarker` is raised where the broker deserializes it), or None when the
        batch holds no record (the broker then checks nothing past the early epoch check).
        Duplicates (F1) are the caller's first step (:meth:`find_duplicate`).
        """
        entry = self.entries.get(pid)
        current = entry if entry is not None else ProducerEntry()
        # UnifiedLog.analyzeAndValidateProducerState: for client and coordinator appends, a
        # transactional batch outside an ongoing transaction at its epoch is epoch-checked
        # before the verification guard (KAFKA-19690)
        if self.broker_version >= (3, 9) and transactional and entry is not None \
                and not self.has_ongoing_transaction(pid, epoch) and epoch < entry.epoch:
            raise ProducerCheckError(fchecks.F3_EARLY, producer_id=pid, epoch=epoch,
                                     current_epoch=entry.epoch)
        if control:
            if marker is None:  # ProducerAppendInfo.append: an empty control batch is skipped
                return
            if isinstance(marker, MalformedMarker):
                raise marker
            self._check_marker_epoch(pid, epoch, first_offset, current)
            if current.coordinator_epoch > marker.coordinator_epoch:
                raise ProducerCheckError(
                    fchecks.F6, producer_id=pid, offset=first_offset, tp=self.tp,
                    coordinator_epoch=marker.coordinator_epoch,
                    current_coordinator_epoch=current.coordinator_epoch)
            return
        if epoch < current.epoch:
            check, extra = self._epoch_text(control=False)
            raise ProducerCheckError(check, producer_id=pid, offset=first_offset, tp=self.tp,
                                     epoch=epoch, current_epoch=current.epoch, **extra)
        if from_client and not current.resync:
            self._check_sequence(pid, epoch, first_seq, first_offset, transactional, current)
        if current.current_txn_first_offset is not None and not transactional:
            raise ProducerCheckError(
                fchecks.F5, producer_id=pid, tp=self.tp,
                offset_metadata=log_offset_metadata(first_offset, self.broker_version))

    def _check_sequence(self, pid: int, epoch: int, first_seq: int, first_offset: int,
                        transactional: bool, entry: ProducerEntry) -> None:
        """``ProducerAppendInfo.checkSequence`` (client appends)."""
        # 4.1+ (KAFKA-18202): a verified first write of a TV2 transaction with no cached batch
        # must start at 0; verification state exists only for a transactional batch outside
        # an ongoing transaction, with verification on
        if self.broker_version >= (4, 1) and self.verification and transactional \
                and self.epoch_bump_clients and first_seq != 0 \
                and not entry.batches and not self.has_ongoing_transaction(pid, epoch):
            raise ProducerCheckError(fchecks.F4_TV2, producer_id=pid, offset=first_offset,
                                     tp=self.tp, sequence=first_seq)
        if epoch != entry.epoch:
            if first_seq != 0 and entry.epoch != -1:
                raise ProducerCheckError(
                    fchecks.F4_EPOCH, producer_id=pid, offset=first_offset, tp=self.tp,
                    epoch=epoch, sequence=first_seq, current_epoch=entry.epoch)
            return
        last = entry.last_seq
        if not (entry.epoch == -1 or in_sequence(last, first_seq)):
            raise ProducerCheckError(fchecks.F4, producer_id=pid, offset=first_offset,
                                     tp=self.tp, sequence=first_seq, last_sequence=last)

    def _check_marker_epoch(self, pid: int, epoch: int, offset: int,
                            entry: ProducerEntry) -> None:
        """``checkProducerEpoch`` for a marker: before 4.2 the data batches' rule (epoch >=
        current); 4.2+ (KIP-1228) a TV2 marker must bump the epoch (epoch > current), except
        an idempotent retry (== current, no open transaction; KAFKA-19999), which is written."""
        tv = self.marker_transaction_version
        current = entry.epoch
        if self.broker_version >= (4, 2) and tv is not None and tv >= 2:
            if epoch > current or (epoch == current and entry.current_txn_first_offset is None):
                return
        elif epoch >= current:
            return
        check, extra = self._epoch_text(control=True)
        raise ProducerCheckError(check, producer_id=pid, offset=offset, tp=self.tp,
                                 epoch=epoch, current_epoch=current, **extra)

    def _epoch_text(self, *, control: bool) -> tuple[Check, dict[str, object]]:
        """The epoch check's template of the emulated release (and its 4.2+ extra fields)."""
        v = self.broker_version
        if v < (2, 8):
            return fchecks.F3_PRE_28, {}
        if v < (4, 2):
            return (fchecks.F3_MARKER if control else fchecks.F3), {}
        if not control:
            return fchecks.F3_TV, {"comparison": "<", "transaction_version": TV_UNKNOWN}
        # a leader takes the marker's version from WriteTxnMarkers; unknown reads as TV0
        tv = self.marker_transaction_version or 0
        return fchecks.F3_TV, {"comparison": "<=" if tv >= 2 else "<",
                               "transaction_version": tv}

    # -- state changes ----------------------------------------------------------------------
    def append(self, *, pid: int, epoch: int, meta: BatchMetadata, transactional: bool,
               control: bool, marker: EndTxnMarker | MalformedMarker | None = None) -> None:
        """Record an appended batch, or a control batch's end-transaction ``marker``.

        A marker (``ProducerStateEntry.update(epoch, coordinatorEpoch, timestamp)``) closes the
        open transaction, records the coordinator epoch and takes the marker's producer epoch;
        a different epoch drops the cached batches (the TV2 bump).  A control batch without a
        record (``marker=None``) changes nothing; a malformed one is never appended (:meth:`check`
        refuses it).
        """
        if isinstance(marker, MalformedMarker):
            raise ValueError(f"a malformed marker is refused, not appended: {marker.message}")
        entry = self.entries.get(pid)
        if entry is None:  # (setdefault would build an entry and its deque on every append)
            entry = self.entries[pid] = ProducerEntry()
        if control:
            if marker is None:
                return
            entry.bump_epoch(epoch)
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.current_txn_first_offset = None
            return
        entry.bump_epoch(epoch)
        entry.resync = False
        entry.batches.append(meta)
        if transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = meta.first_offset
