"""Spec §3.F: producer state (``UnifiedLog.analyzeAndValidateProducerState``,
``ProducerAppendInfo``): duplicates, epochs, sequences and open transactions, per producer id,
in log order."""

from __future__ import annotations

from kqlab.kafka import errors as kerr
from kqlab.kafka.checks._check import CHECKS, Check

F1 = CHECKS.add(Check(
    "F1", "3.F", kerr.NONE, "duplicate of a batch already appended",
    "same epoch and (first, last) sequence as one of the producer's last 5 batches: "
    "acknowledged with the original offsets, nothing appended",
    "ProducerStateEntry.findDuplicateBatch"))
F3 = CHECKS.add(Check(
    "F3", "3.F", kerr.INVALID_PRODUCER_EPOCH,
    "Epoch of producer {producer_id} at offset {offset} in {tp} is {epoch}, which is smaller "
    "than the last seen epoch {current_epoch}", "a data batch's epoch is below the last seen",
    "ProducerAppendInfo.checkProducerEpoch"))
F3_MARKER = CHECKS.add(Check(
    "F3'", "3.F", kerr.INVALID_PRODUCER_EPOCH,
    "Producer's epoch at offset {offset} in {tp} is {epoch}, which is smaller than the last "
    "seen epoch {current_epoch}", "a transaction marker's epoch is below the last seen",
    "ProducerAppendInfo.checkProducerEpoch"))
F4_EPOCH = CHECKS.add(Check(
    "F4'", "3.F", kerr.OUT_OF_ORDER_SEQUENCE_NUMBER,
    "Invalid sequence number for new epoch of producer {producer_id}at offset {offset} in "
    "partition {tp}: {epoch} (request epoch), {sequence} (seq. number), {current_epoch} "
    "(current producer epoch)", "a new epoch whose first sequence is not 0",
    "ProducerAppendInfo.checkSequence"))
F4 = CHECKS.add(Check(
    "F4", "3.F", kerr.OUT_OF_ORDER_SEQUENCE_NUMBER,
    "Out of order sequence number for producer {producer_id} at offset {offset} in partition "
    "{tp}: {sequence} (incoming seq. number), {last_sequence} (current end sequence number)",
    "same epoch and the first sequence does not follow the last",
    "ProducerAppendInfo.checkSequence"))
F5 = CHECKS.add(Check(
    "F5", "3.F", kerr.INVALID_TXN_STATE,
    "Expected transactional write from producer {producer_id} at offset {offset} in partition "
    "{tp}", "a non-transactional batch while the producer has an open transaction",
    "ProducerAppendInfo.append"))
