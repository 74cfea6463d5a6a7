"""Spec §3.F: producer state (``UnifiedLog.analyzeAndValidateProducerState``,
``ProducerAppendInfo``): duplicates, epochs, sequences, open transactions and end-transaction
markers, per producer id, in log order.

The checks' texts changed across releases, so one spec step can have several templates (ids
``F3/2.4``, ``F3/tv``...); :mod:`kqlab.kafka.producer_state` picks the one of the emulated
release.  What each release does is written down, with the Java methods, in
``docs/kafka-4x-producer-state.md``.

The end-transaction marker (the one record of a control batch the coordinator writes) is parsed
here once, as numpy over any number of markers (:func:`parse_end_txn_markers`), so the
byte-level validator (one batch) and the table checks (every control row of a sample) read the
same type and coordinator epoch and refuse the same malformed bytes with the same check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kqlab.kafka import errors as kerr
from kqlab.kafka.checks._check import CHECKS, Check

# --------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------
F1 = CHECKS.add(Check(
    "F1", "3.F", kerr.NONE, "duplicate of a batch already appended",
    "same epoch and (first, last) sequence as one of the producer's last 5 batches: "
    "acknowledged with the original offsets, nothing appended",
    "ProducerStateEntry.findDuplicateBatch"))
F3_EARLY = CHECKS.add(Check(
    "F3", "3.F", kerr.INVALID_PRODUCER_EPOCH,
    "Epoch of producer {producer_id} is {epoch}, which is smaller than the last seen epoch "
    "{current_epoch}",
    "a transactional batch (data or marker) without an ongoing transaction at its epoch, whose "
    "epoch is below the producer's (before the verification guard; KAFKA-19690, in 3.9/4.0/4.1 "
    "patch releases and 4.2)",
    "UnifiedLog.analyzeAndValidateProducerState", id="F3/unified-log"))
F3 = CHECKS.add(Check(
    "F3", "3.F", kerr.INVALID_PRODUCER_EPOCH,
    "Epoch of producer {producer_id} at offset {offset} in {tp} is {epoch}, which is smaller "
    "than the last seen epoch {current_epoch}",
    "a data batch's epoch is below the last seen (2.8-4.1 text)",
    "ProducerAppendInfo.checkProducerEpoch"))
F3_MARKER = CHECKS.add(Check(
    "F3", "3.F", kerr.INVALID_PRODUCER_EPOCH,
    "Epoch of producer {producer_id} at offset {offset} in {tp} is {epoch}, which is smaller "
    "than the last seen epoch {current_epoch}",
    "a transaction marker's epoch is below the last seen (2.8-4.1: the data batches' rule and "
    "text)", "ProducerAppendInfo.checkProducerEpoch", id="F3/marker"))
F3_PRE_28 = CHECKS.add(Check(
    "F3", "3.F", kerr.INVALID_PRODUCER_EPOCH,
    "Producer's epoch at offset {offset} in {tp} is {epoch}, which is smaller than the last "
    "seen epoch {current_epoch}",
    "a data batch's or marker's epoch is below the last seen (2.4-2.7 text)",
    "ProducerStateManager.ProducerAppendInfo.checkProducerEpoch (Scala)", id="F3/2.4"))
F3_TV = CHECKS.add(Check(
    "F3", "3.F", kerr.INVALID_PRODUCER_EPOCH,
    "Epoch of producer {producer_id} at offset {offset} in {tp} is {epoch}, which is "
    "{comparison} the last seen epoch {current_epoch} (TV{transaction_version})",
    "4.2+ (KIP-1228): a data batch's epoch < the last seen (TV-1, unknown), a TV0/1 marker's "
    "epoch < it, a TV2 marker's epoch <= it (unless an idempotent retry: == and no open "
    "transaction)", "ProducerAppendInfo.checkProducerEpoch", id="F3/tv"))
F4_TV2 = CHECKS.add(Check(
    "F4", "3.F", kerr.OUT_OF_ORDER_SEQUENCE_NUMBER,
    "Invalid sequence number for producer {producer_id} at offset {offset} in partition {tp}: "
    "{sequence} (incoming seq. number). Expected sequence 0 for transactions v2 idempotent "
    "producer with no existing state.",
    "4.1+ (KAFKA-18202): a TV2 client's first transactional batch of a transaction, verified, "
    "with no cached batches for the producer, does not start at sequence 0",
    "ProducerAppendInfo.checkSequence", id="F4/tv2"))
F4_EPOCH = CHECKS.add(Check(
    "F4", "3.F", kerr.OUT_OF_ORDER_SEQUENCE_NUMBER,
    "Invalid sequence number for new epoch of producer {producer_id}at offset {offset} in "
    "partition {tp}: {epoch} (request epoch), {sequence} (seq. number), {current_epoch} "
    "(current producer epoch)", "a new epoch whose first sequence is not 0",
    "ProducerAppendInfo.checkSequence", id="F4/epoch"))
F4 = CHECKS.add(Check(
    "F4", "3.F", kerr.OUT_OF_ORDER_SEQUENCE_NUMBER,
    "Out of order sequence number for producer {producer_id} at offset {offset} in partition "
    "{tp}: {sequence} (incoming seq. number), {last_sequence} (current end sequence number)",
    "same epoch and the first sequence does not follow the last (-1 when no batch is cached, "
    "e.g. after an epoch-bumping marker)",
    "ProducerAppendInfo.checkSequence"))
F5 = CHECKS.add(Check(
    "F5", "3.F", kerr.INVALID_TXN_STATE,
    "Expected transactional write from producer {producer_id} at offset {offset_metadata} in "
    "partition {tp}", "a non-transactional batch while the producer has an open transaction "
    "(the offset prints as LogOffsetMetadata.toString)",
    "ProducerAppendInfo.appendDataBatch"))
F6 = CHECKS.add(Check(
    "F6", "3.F", kerr.TRANSACTION_COORDINATOR_FENCED,
    "Invalid coordinator epoch for producerId {producer_id} at offset {offset} in partition "
    "{tp}: {coordinator_epoch} (zombie), {current_coordinator_epoch} (current)",
    "a marker's coordinator epoch is below the one the partition last saw for the producer",
    "ProducerAppendInfo.checkCoordinatorEpoch"))
F7_NULL = CHECKS.add(Check(
    "F7", "3.F", kerr.UNKNOWN_SERVER_ERROR,
    "java.lang.NullPointerException: the marker record's {part} is null",
    "the control record has a null key or value", "EndTransactionMarker.deserialize",
    id="F7/null"))
F7_KEY_SIZE = CHECKS.add(Check(
    "F7", "3.F", kerr.INVALID_RECORD,
    "Invalid value size found for end control record key. Must have at least 4 bytes, but "
    "found only {size}", "the control record key is shorter than 4 bytes",
    "ControlRecordType.parseTypeId", id="F7/key-size"))
F7_KEY_VERSION = CHECKS.add(Check(
    "F7", "3.F", kerr.INVALID_RECORD,
    "Invalid version found for control record: {version}. May indicate data corruption",
    "the control record key's version is negative", "ControlRecordType.parseTypeId",
    id="F7/key-version"))
F7_TYPE = CHECKS.add(Check(
    "F7", "3.F", kerr.UNKNOWN_SERVER_ERROR,
    "Invalid control record type for end transaction marker{control_type}",
    "the control record type is neither ABORT (0) nor COMMIT (1) (IllegalArgumentException)",
    "EndTransactionMarker.ensureTransactionMarkerControlType", id="F7/type"))
F7_VALUE_SIZE = CHECKS.add(Check(
    "F7", "3.F", kerr.INVALID_RECORD,
    "Invalid value size found for end transaction marker. Must have at least 6 bytes, but "
    "found only {size}", "the marker value is shorter than 6 bytes",
    "EndTransactionMarker.deserializeValue", id="F7/value-size"))
F7_VALUE_VERSION = CHECKS.add(Check(
    "F7", "3.F", kerr.INVALID_RECORD,
    "Invalid version found for end transaction marker: {version}. May indicate data "
    "corruption", "the marker value's version is negative",
    "EndTransactionMarker.deserializeValue", id="F7/value-version"))


class ProducerCheckError(Exception):
    """A stage-F rejection by ``definition`` (a :class:`Check`) with the values it saw.

    ``code`` (47, 45, 48, 52, 87, -1), ``check`` (the spec step, ``"F3"``) and ``message`` (the
    broker's exception text, rendered from the check's template) are what verdicts carry;
    ``params`` keeps the values as data.
    """

    def __init__(self, definition: Check, **params: object):
        self.definition = definition
        self.params = params
        self.code = definition.code
        self.check = definition.step
        self.message = definition.render(**params)
        super().__init__(self.message)


class MalformedMarker(ProducerCheckError):
    """An end-transaction marker the broker cannot read (``F7``): it raises this where
    ``ProducerAppendInfo.append`` deserializes the marker, after the earlier stage-F checks."""


# --------------------------------------------------------------------------------------------
# End-transaction markers
# --------------------------------------------------------------------------------------------
ABORT, COMMIT = 0, 1
#: ``ControlRecordType`` names (``fromTypeId``; any other id is ``UNKNOWN``), as the
#: IllegalArgumentException of a non-marker type prints them
CONTROL_TYPE_NAMES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                      4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
KEY_SIZE = 4    # ControlRecordType.CURRENT_CONTROL_RECORD_KEY_SIZE: version int16, type int16
VALUE_SIZE = 6  # EndTransactionMarker v0 value: version int16, coordinator_epoch int32


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """What the partition reads from a marker: ``control_type`` (0 abort, 1 commit) and the
    epoch of the transaction coordinator that wrote it (fences zombie coordinators, F6)."""

    control_type: int
    coordinator_epoch: int

    @property
    def commit(self) -> bool:
        return self.control_type == COMMIT


@dataclass(frozen=True, slots=True)
class MarkerColumns:
    """:func:`parse_end_txn_markers` over ``n`` control records: per record the control type
    and coordinator epoch (valid where ``error`` is None) or the check that refuses it and its
    parameters."""

    control_type: np.ndarray       # int16[n]
    coordinator_epoch: np.ndarray  # int32[n]
    error: list[Check | None]
    params: list[dict[str, object]]

    def marker(self, i: int) -> EndTxnMarker | MalformedMarker:
        """Record ``i`` as the producer-state manager takes it."""
        err = self.error[i]
        if err is not None:
            return MalformedMarker(err, **self.params[i])
        return EndTxnMarker(int(self.control_type[i]), int(self.coordinator_epoch[i]))


def parse_end_txn_markers(keys: pa.Array | pa.ChunkedArray,
                          values: pa.Array | pa.ChunkedArray) -> MarkerColumns:
    """Read the control records' keys and values (binary, nullable) as end-transaction
    markers, in the broker's order of refusal (``EndTransactionMarker.deserialize``, as on the
    spec's 3.9 baseline; the checks ``F7/*``):

    null key or value (NullPointerException, -1) · key < 4 bytes (87) · key version < 0 (87) ·
    type not ABORT/COMMIT (IllegalArgumentException, -1) · value < 6 bytes (87) · value
    version < 0 (87).  A higher key or value version is read as version 0, as the broker does.
    """
    n = len(keys)
    if len(values) != n:
        raise ValueError(f"{n} marker keys but {len(values)} values")
    key_len, key_head = _head(keys, KEY_SIZE)
    val_len, val_head = _head(values, VALUE_SIZE)
    key_version = _int16(key_head[:, 0:2])
    ctype = _int16(key_head[:, 2:4])
    val_version = _int16(val_head[:, 0:2])
    coord = val_head[:, 2:6].copy().view(">i4").reshape(n).astype(np.int32)
    error: list[Check | None] = [None] * n
    params: list[dict[str, object]] = [{} for _ in range(n)]
    # the first refusal per record, in the broker's order; rows decided stay decided
    open_ = np.ones(n, dtype=bool)
    steps: tuple[tuple[np.ndarray, Check, Callable[[int], dict[str, object]]], ...] = (
        (key_len < 0, F7_NULL, lambda i: {"part": "key"}),
        (key_len < KEY_SIZE, F7_KEY_SIZE, lambda i: {"size": int(key_len[i])}),
        (key_version < 0, F7_KEY_VERSION, lambda i: {"version": int(key_version[i])}),
        ((ctype != ABORT) & (ctype != COMMIT), F7_TYPE,
         lambda i: {"control_type": CONTROL_TYPE_NAMES.get(int(ctype[i]), "UNKNOWN")}),
        (val_len < 0, F7_NULL, lambda i: {"part": "value"}),
        (val_len < VALUE_SIZE, F7_VALUE_SIZE, lambda i: {"size": int(val_len[i])}),
        (val_version < 0, F7_VALUE_VERSION, lambda i: {"version": int(val_version[i])}),
    )
    for mask, check, make in steps:
        hit = np.flatnonzero(mask & open_)
        for i in hit.tolist():  # only malformed markers: none in a broker-written log
            error[i] = check
            params[i] = make(i)
        open_[hit] = False
    return MarkerColumns(ctype, coord, error, params)


def parse_end_txn_marker(key: bytes | None, value: bytes | None) -> EndTxnMarker:
    """One marker record (key, value): its type and coordinator epoch, or
    :class:`MalformedMarker` naming the check that refuses it (see
    :func:`parse_end_txn_markers`).

    >>> parse_end_txn_marker(b"\\x00\\x00\\x00\\x01", b"\\x00\\x00\\x00\\x00\\x00\\x07")
    EndTxnMarker(control_type=1, coordinator_epoch=7)
    """
    got = parse_end_txn_markers(pa.array([key], pa.binary()),
                                pa.array([value], pa.binary())).marker(0)
    if isinstance(got, MalformedMarker):
        raise got
    return got


def marker_of_batch(data: bytes) -> EndTxnMarker | MalformedMarker | None:
    """The end-transaction marker of a whole v2 control batch (its first record), as the
    producer-state manager takes it; None when the batch holds no record."""
    kv = first_control_record(data)
    if kv is None:
        return None
    return parse_end_txn_markers(pa.array([kv[0]], pa.binary()),
                                 pa.array([kv[1]], pa.binary())).marker(0)


def _head(arr: pa.Array | pa.ChunkedArray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Each binary entry's length (-1 = null) and its first ``width`` bytes (zero-padded),
    read straight from the Arrow buffers."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    if arr.type not in (pa.binary(), pa.large_binary()):
        arr = arr.cast(pa.binary())
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, width), dtype=np.uint8)
    bufs = arr.buffers()
    off_buf = bufs[1]
    assert off_buf is not None  # a binary array always has offsets
    off_type = "<i8" if arr.type == pa.large_binary() else "<i4"  # Arrow: little-endian
    offs: np.ndarray = np.frombuffer(memoryview(off_buf), dtype=np.dtype(off_type))[
        arr.offset:arr.offset + n + 1].astype(np.int64)
    length = np.diff(offs)
    if arr.null_count:
        length = np.where(arr.is_valid().to_numpy(zero_copy_only=False), length, -1)
    data = np.frombuffer(memoryview(bufs[2]), dtype=np.uint8) if bufs[2] is not None else \
        np.zeros(0, dtype=np.uint8)
    take = np.minimum(np.maximum(length, 0), width)
    cols = np.arange(width)
    idx = offs[:-1, None] + cols
    inside = cols < take[:, None]
    head = np.zeros((n, width), dtype=np.uint8)
    head[inside] = data[idx[inside]]
    return length, head


def _int16(pairs: np.ndarray) -> np.ndarray:
    """Big-endian int16 from an ``(n, 2)`` byte array."""
    return np.ascontiguousarray(pairs).view(">i2").reshape(len(pairs)).astype(np.int16)


def log_offset_metadata(offset: int, version: tuple[int, int]) -> str:
    """``LogOffsetMetadata.toString`` of an offset without segment position, as F5 prints it
    (``firstOffsetMetadataOpt.orElse(new LogOffsetMetadata(batch.baseOffset()))``): the Scala
    case class before 3.5, the Java port's missing separator in 3.5, the fixed form since 3.6."""
    if version < (3, 5):
        return f"(offset={offset} segment=[-1:-1])"
    if version < (3, 6):
        return f"(offset={offset}segment=[-1:-1])"
    return f"(offset={offset}, segment=[-1:-1])"


def first_control_record(data: bytes) -> tuple[bytes | None, bytes | None] | None:
    """The key and value of a v2 control batch's first record (``ProducerAppendInfo.append``
    reads only that one), or None when the batch holds no record (a cleaned transaction: the
    broker skips it).  ``data`` is the whole batch; a compressed batch is decompressed."""
    from kqlab.kafka.batch import records_region
    from kqlab.kafka.records_parser import parse_records

    if len(data) < 61 or int.from_bytes(data[57:61], "big", signed=True) <= 0:
        return None
    region, _ = records_region(memoryview(data)[61:], data[22] & 0x07)
    parsed = parse_records([bytes(region)], [1], True, True)
    if not parsed.batch_n[0]:
        return None
    assert parsed.key_offsets is not None and parsed.value_offsets is not None
    assert parsed.key_data is not None and parsed.value_data is not None
    ko, vo = parsed.key_offsets, parsed.value_offsets
    key = None if parsed.key_length[0] < 0 else parsed.key_data[ko[0]:ko[1]]
    value = None if parsed.value_length[0] < 0 else parsed.value_data[vo[0]:vo[1]]
    return key, value
