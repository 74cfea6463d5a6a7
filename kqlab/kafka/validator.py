"""The broker's decision procedure for a produced batch, in the broker's order (spec §3-§5).

One :class:`PartitionValidator` plays the leader of one partition: it takes the ``records``
field of a produce request for that partition (normally exactly one batch), runs the request,
replica-manager, log and LogValidator stages in order — the first failing check decides — and
returns the :class:`BatchOutcome` the producer would read in the ProduceResponse: error code and
name, ``record_errors`` (batch index + message) and ``error_message`` rendered exactly as the
broker renders them.  Producer state (epochs, sequences, the last five batches, open
transactions) carries from one call to the next, as it does on a real partition.

``source="log"`` replays batches as a broker *stored* them (segments): the broker rewrote the
base offset and may have set the LogAppendTime bit, so those two are read as the producer sent
them (base offset 0, CreateTime), and control batches are treated as the coordinator's markers.
``source="producer"`` validates bytes exactly as given (the spec's byte vectors).

Each outcome also says which check decided (``check``, e.g. ``"C3"``) and the broker's internal
exception text (``detail``), which Kafka logs but does not return to the client.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from kqlab.kafka import errors as kerr
from kqlab.kafka import legacy
from kqlab.kafka.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    V2_HEADER,
    increment_sequence,
    read_batch_records,
)
from kqlab.kafka.checks import aggregate, request
from kqlab.kafka.checks import record as rchecks
from kqlab.kafka.checks._check import Check
from kqlab.kafka.checks.append import C1, C2, C3, C4
from kqlab.kafka.checks.header import (
    D1,
    D1_MORE,
    D2_A,
    D2_B,
    D2_C,
    D2_D,
    D2_E,
    D2_F,
    D2_G,
    D2_H,
    Z0,
)
from kqlab.kafka.checks.producer import F1, marker_of_batch
from kqlab.kafka.checks.size import E1, E2
from kqlab.kafka.checks.structure import (
    D3_LEGACY,
    D3_LEGACY_CODEC,
    D3_LEGACY_SIZE,
    D3_LEGACY_ZSTD,
    D3_REBUILD,
    D3_REBUILD_PRODUCER,
    rebuild_producer_reason,
)
from kqlab.kafka.checksums import crc32
from kqlab.kafka.compression import Codec
from kqlab.kafka.configs import BrokerRelease, TopicConfig
from kqlab.kafka.producer_state import BatchMetadata, ProducerCheckError, ProducerStateManager
from kqlab.kafka.records_parser import ParsedRecords, crc32c
from kqlab.kafka.varint import to_int64
from kqlab.records import BATCH_VERDICTS_SCHEMA

INTERNAL_TOPICS = request.INTERNAL_TOPICS
LOG_OVERHEAD = request.LOG_OVERHEAD
MIN_RECORD_OVERHEAD = request.MIN_RECORD_OVERHEAD
_OFFSET_LENGTH = struct.Struct(">qi")
INVALID_TIMESTAMP_MESSAGE = aggregate.INVALID_TIMESTAMP_MESSAGE

#: what identifies one record error beyond its wire form: the check that found it (``R3``,
#: ``R4``, ``P`` ...), the policy rule (for ``P``) and the values the check saw
RecordErrorId = tuple[str, str | None, dict[str, str] | None]
#: one collected record error while a batch is read: (code, check, message, rule, params)
_RecordError = tuple[int, str, str, str | None, dict[str, str] | None]


def _params(values: Mapping[str, object]) -> dict[str, str]:
    """A check's parameters as the verdict tables keep them (strings, Java's number form)."""
    return {k: str(v) for k, v in values.items()}


@dataclass(slots=True)
class BatchOutcome:
    """What the broker answers for one partition of a produce request (spec §5.1-§5.2)."""

    error_code: int = 0
    error_name: str = "NONE"
    error_message: str | None = None
    record_errors: list[tuple[int, str]] = field(default_factory=list)
    check: str | None = None
    detail: str | None = None
    whole_request: bool = False
    base_offset: int = -1
    log_append_time: int = -1
    path: str | None = None
    duplicate: bool = False
    batch_offset: int | None = None
    record_count: int | None = None
    position: int | None = None
    #: the values the deciding check saw (its message template's fields), as strings
    params: dict[str, str] | None = None
    #: per entry of ``record_errors``: (check, policy rule or None, parameters)
    record_error_ids: list[RecordErrorId] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        """True when the batch would be appended (or acknowledged as a duplicate)."""
        return self.error_code == 0

    @property
    def retriable(self) -> bool:
        """Whether the Java producer retries this error (spec §6)."""
        return kerr.error_for_code(self.error_code).retriable

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (``--json``)."""
        return {
            "batch_offset": self.batch_offset, "position": self.position,
            "record_count": self.record_count, "error_code": self.error_code,
            "error_name": self.error_name, "error_message": self.error_message,
            "record_errors": [{"batch_index": i, "message": m} for i, m in self.record_errors],
            "record_error_ids": [{"check": c, "rule": r, "params": p}
                                 for c, r, p in self.record_error_ids],
            "check": self.check, "detail": self.detail, "params": self.params,
            "whole_request": self.whole_request,
            "base_offset": self.base_offset, "log_append_time": self.log_append_time,
            "path": self.path, "duplicate": self.duplicate, "retriable": self.retriable,
        }


@dataclass(frozen=True, slots=True)
class PolicyErrors:
    """A record policy's verdict on one batch, merged into LogValidator's record checks.

    ``errors`` maps a record's batch index to the message of the first ``reject`` rule it
    fails.  How it reaches the producer depends on ``profile`` (the seed KIPs):

    * ``kip-940`` (default): each failing record becomes an INVALID_RECORD record error, after
      R3/R4 and only for records without an earlier error; aggregated as in spec §3.D.5.
    * ``kip-729``: the same per-record errors from the validator chain, but only where the
      broker materialises records: KIP-729 does not handle compression, so compressed batches
      appended in place (partial reader) are not validated.
    * ``kip-686``: RecordsPolicy throws PolicyViolationException for the batch: POLICY_VIOLATION
      (44) with the first failing record's message, no record errors (broker record errors win).
    """

    profile: str = "kip-940"
    errors: dict[int, str] = field(default_factory=dict)
    #: the rule behind each entry of ``errors`` (same keys; absent: an unnamed policy)
    rules: dict[int, str] = field(default_factory=dict)


class _Reject(Exception):
    """Internal: a check failed; carries the outcome."""

    def __init__(self, error: kerr.KafkaError, check: str, detail: str | None = None, *,
                 error_message: str | None = None,
                 record_errors: list[tuple[int, str]] | None = None,
                 whole_request: bool = False, params: dict[str, str] | None = None,
                 record_error_ids: list[RecordErrorId] | None = None):
        super().__init__(detail)
        self.outcome = BatchOutcome(
            error_code=error.code, error_name=error.name, error_message=error_message,
            record_errors=record_errors or [], check=check, detail=detail,
            whole_request=whole_request, params=params,
            record_error_ids=record_error_ids or [])

    @classmethod
    def of(cls, check: Check, **params: object) -> _Reject:
        """The rejection by ``check`` with ``params``: its text is rendered from the check's
        template and only logged (``detail``; spec §5.2: a thrown exception's text is not
        returned to the client)."""
        return cls(check.error, check.step, check.render(**params), params=_params(params))


def _whole_request(check: Check, **params: object) -> _Reject:
    """§5.4: a whole-request failure (the text is dropped where the broker drops it)."""
    text = check.render(**params)
    return _Reject(check.error, check.step, text,
                   error_message=request.whole_request_message(check.error, text),
                   whole_request=True, params=_params(params))


@dataclass(slots=True)
class _Batch:
    """A scanned batch within the request."""

    position: int
    data: bytes
    magic: int


class PartitionValidator:
    """Validate produce requests for one topic-partition, carrying producer state.

    Parameters
    ----------
    topic, partition
        The partition (its ``"<topic>-<partition>"`` form appears in broker texts).
    config
        Topic configs (a dict with Kafka's names, or a resolved :class:`TopicConfig`).
    broker_version
        Release to emulate (``"3.9"``, ``"4.0"``...); ignored when ``config`` is resolved.
    now
        Broker clock in ms; ``None`` reads the wall clock once per request, as the broker does.
    source
        ``"log"`` (bytes as stored by a broker) or ``"producer"`` (bytes as sent).
    produce_version
        Produce request version (default 9); versions 0-2 skip the request-stage batch checks
        and, before 4.0, allow v0/v1 message sets.
    acks, client_id, transactional_id_authorized, origin
        Request context (``origin="coordinator"`` validates as the transaction coordinator).
    resync
        After a rejected batch, skip the sequence check of that producer's next batch, as a
        real client re-sequences (default: on for ``source="log"``, off for ``"producer"``).
    marker_transaction_version
        The transaction version (0, 1, 2) the coordinator's end-transaction markers were
        written with (4.2+ judges TV2 markers by KIP-1228's rule); None when unknown, as in a
        replayed log, which the broker judges like a follower does.

    Examples
    --------
    >>> from kqlab.kafka.builder import Record, build_batch
    >>> v = PartitionValidator("t", 0, {"cleanup.policy": "compact"}, source="producer")
    >>> out = v.validate(build_batch([Record(value=b"v")], base_timestamp=1700000000000))
    >>> out.error_code, out.record_errors[0][1]
    (87, 'Compacted topic cannot accept message without key in topic partition t-0')
    """

    def __init__(self, topic: str, partition: int,
                 config: TopicConfig | dict[str, Any] | None = None, *,
                 broker_version: str | BrokerRelease | None = None, now: int | None = None,
                 source: str = "log", produce_version: int = 9, acks: int = -1,
                 client_id: str = "kqlab", transactional_id_authorized: bool = True,
                 origin: str = "client", first_offset: int | None = None,
                 resync: bool | None = None, marker_transaction_version: int | None = None):
        if source not in ("log", "producer"):
            raise ValueError(f"source must be 'log' or 'producer', not {source!r}")
        if origin not in ("client", "coordinator"):
            raise ValueError(f"origin must be 'client' or 'coordinator', not {origin!r}")
        self.topic = topic
        self.partition = partition
        self.tp = f"{topic}-{partition}"
        self.config = config if isinstance(config, TopicConfig) else TopicConfig.from_dict(
            config, broker_version)
        release = self.config.release
        if produce_version <= 2 and not release.legacy_produce:
            raise ValueError(f"Kafka {release.label} refuses produce v{produce_version}; use "
                             "produce_version >= 3 or broker_version 3.9")
        self.now = now
        self.source = source
        self.produce_version = produce_version
        self.acks = acks
        self.client_id = client_id
        self.transactional_id_authorized = transactional_id_authorized
        self.origin = origin
        self.next_offset = first_offset
        self.resync = source == "log" if resync is None else resync
        #: producers whose state depends on a batch the tables could not judge (the table
        #: checks mark their later batches undetermined, across calls on the same partition)
        self.undetermined_producers: set[int] = set()
        self.producers = ProducerStateManager(
            self.tp, broker_version=release.version, epoch_bump_clients=produce_version >= 12,
            marker_transaction_version=marker_transaction_version,
            verification=self.config.transaction_verification)
        self._policy: PolicyErrors | None = None

    # -- public -----------------------------------------------------------------------------
    def validate(self, records: bytes, *, position: int | None = None,
                 policy: PolicyErrors | None = None) -> BatchOutcome:
        """Validate one partition's ``records`` field; update state when it is appended.

        ``policy`` carries a record policy's failures for this batch (see
        :class:`PolicyErrors`); they are judged at the point of the broker's order where a
        record-validation policy runs, so a policy rejection also leaves producer state alone.
        """
        now = self.now if self.now is not None else int(time.time() * 1000)
        first_offset = struct.unpack_from(">q", records, 0)[0] if len(records) >= 8 else None
        self._policy = policy
        try:
            outcome = self._validate(records, now)
        except _Reject as rej:
            outcome = rej.outcome
            self._after_reject(records)
        outcome.position = position
        outcome.batch_offset = first_offset
        if outcome.record_count is None and len(records) >= RECORD_BATCH_OVERHEAD \
                and records[16] == 2:
            outcome.record_count = struct.unpack_from(">i", records, 57)[0]
        return outcome

    def _after_reject(self, records: bytes) -> None:
        """Emulate the client after a failed batch when replaying a log (``resync``).

        The Java producer re-sequences its in-flight batches after a failed one
        (``adjustSequencesDueToFailedBatch``) or bumps its epoch and restarts at 0 (KIP-360), so
        one rejection does not make every later batch of that producer out of order.  The next
        batch of the producer is therefore not sequence-checked.
        """
        if not self.resync or len(records) < RECORD_BATCH_OVERHEAD or records[16] != 2:
            return
        pid = struct.unpack_from(">q", records, 43)[0]
        if pid > -1:
            self.producers.resync(pid)

    # -- the procedure ----------------------------------------------------------------------
    def _scan(self, data: bytes) -> tuple[list[_Batch], tuple[str, str] | None]:
        """Spec §1.1 S0-S5 over the request's records field."""
        batches: list[_Batch] = []
        pos = 0
        end = len(data)
        while True:
            r = end - pos
            if r < LOG_OVERHEAD:
                return batches, None
            _, length = _OFFSET_LENGTH.unpack_from(data, pos)
            if length < MIN_RECORD_OVERHEAD:
                return batches, ("S1", f"Record size {length} is less than the minimum record "
                                       f"overhead ({MIN_RECORD_OVERHEAD})")
            if r < 17:
                return batches, None
            magic = struct.unpack_from(">b", data, pos + 16)[0]
            if magic < 0 or magic > 2:
                return batches, ("S3", f"Invalid magic found in record: {magic}")
            if LOG_OVERHEAD + length > r:
                return batches, None
            stop = pos + LOG_OVERHEAD + length
            batches.append(_Batch(pos, data[pos:stop], magic))
            pos = stop

    def _validate(self, data: bytes, now: int) -> BatchOutcome:
        cfg = self.config
        tp = self.tp
        batches, scan_error = self._scan(data)
        v = self.produce_version

        # ---- stage A: request -----------------------------------------------------------
        if not batches and scan_error is not None:  # A1 peeks at the first batch
            raise _whole_request(request.A1, scan_error=scan_error[1])
        first = batches[0] if batches else None
        if first is not None and first.magic == 2 and len(first.data) > ATTRIBUTES_OFFSET + 1:
            attr = first.data[ATTRIBUTES_OFFSET + 1]
            if attr & TRANSACTIONAL_MASK and not self.transactional_id_authorized:
                raise _whole_request(request.A1_AUTH)
        if v >= 3:
            if first is None:
                raise _Reject.of(request.A4_A, version=v)
            if first.magic != 2:
                raise _Reject.of(request.A4_B, version=v)
            if v < 7 and len(first.data) > ATTRIBUTES_OFFSET + 1:
                codec = first.data[ATTRIBUTES_OFFSET + 1] & 0x07
                if codec == Codec.ZSTD:
                    raise _Reject.of(request.A4_C, version=v)
                if codec > Codec.ZSTD:
                    raise _whole_request(request.A4_C_UNKNOWN, codec=codec)
            if scan_error is not None:
                raise _Reject.of(request.A4_D_SCAN, scan_error=scan_error[1])
            if len(batches) > 1:
                raise _Reject.of(request.A4_D, version=v)

        # ---- stage B: replica manager ---------------------------------------------------
        if first is not None and first.magic == 2 and 26 <= len(first.data) <= 50:
            raise _whole_request(request.B0)
        if self.acks not in (-1, 0, 1):
            raise _Reject.of(request.B3, acks=self.acks)
        if self.topic in INTERNAL_TOPICS and self.client_id != "__admin_client":
            raise _Reject.of(request.B4, topic=self.topic)
        if not batches:
            # produce v0-2 with no batch: LogValidator's "no batches at all"
            raise _Reject.of(D1)

        # ---- stage C: analyzeAndValidateRecords ------------------------------------------
        source_codec = Codec.NONE
        total_size = 0
        for b in batches:
            size = len(b.data)
            total_size += size
            base_offset = _OFFSET_LENGTH.unpack_from(b.data, 0)[0]
            if b.magic >= 2 and base_offset != 0 and self.source == "producer":
                raise _Reject.of(C1, tp=tp, base_offset=base_offset)
            if size > cfg.max_message_bytes:
                raise _Reject.of(C2, tp=tp, size=size,
                                 max_message_bytes=cfg.max_message_bytes)
            if b.magic == 2:
                stored = struct.unpack_from(">I", b.data, 17)[0] if size >= 21 else 0
                valid = size >= RECORD_BATCH_OVERHEAD and \
                    crc32c(memoryview(b.data)[ATTRIBUTES_OFFSET:]) == stored
                codec = b.data[ATTRIBUTES_OFFSET + 1] & 0x07 if size > 22 else 0
            else:
                stored = struct.unpack_from(">I", b.data, 12)[0]
                valid = size >= LOG_OVERHEAD + MIN_RECORD_OVERHEAD and \
                    crc32(b.data[16:]) == stored
                codec = b.data[17] & 0x07
            if not valid:
                raise _Reject.of(C3, stored_crc=stored, tp=tp)
            if codec > Codec.ZSTD:
                raise _Reject.of(C4, codec=codec)
            if codec != Codec.NONE:
                source_codec = Codec(codec)

        # ---- stage D: LogValidator ------------------------------------------------------
        if cfg.compression_type == "producer":
            target = source_codec
        else:
            target = Codec.parse(cfg.compression_type)
        to_magic = cfg.to_magic
        first = batches[0]
        if (first.magic >= 2 or source_codec != Codec.NONE) and len(batches) > 1:
            raise _Reject.of(D1_MORE)
        if source_codec == Codec.NONE and target == Codec.NONE:
            path = "U" if all(b.magic == to_magic for b in batches) else "X"
            in_place = path == "U"
        else:
            path = "Z"
            # Z0 (gone in 4.0, where LogValidator no longer takes an IBP)
            if target == Codec.ZSTD and cfg.inter_broker_protocol < (2, 1) and \
                    cfg.release.version < (4, 0):
                raise _Reject.of(Z0)
            in_place = source_codec == target
            if first.magic != to_magic or to_magic == 0:
                in_place = False
            if source_codec == Codec.NONE and first.magic == 2 and \
                    first.data[ATTRIBUTES_OFFSET + 1] & CONTROL_MASK and \
                    self._control_origin(first):
                in_place = True
        partial_reader = path == "Z" and in_place
        uncompressed_size = 0
        appended: list[tuple[Any, int]] = []  # (header or entry, record count)
        for b in batches:
            if b.magic == 2:
                header, count, in_place_ok, usize = self._validate_v2(
                    b, first, now, to_magic, path, partial_reader)
                appended.append((header, count))
            else:
                entry, count, in_place_ok, usize = self._validate_legacy(
                    b, first, now, to_magic, path, source_codec)
                appended.append((entry, count))
            uncompressed_size += usize
            if not in_place_ok:
                in_place = False
        rebuilt = path == "X" or (path == "Z" and not in_place)
        path_label = path if path != "Z" else ("Z-inplace" if in_place else "Z-rebuild")
        if rebuilt and first.magic == 2:
            h = appended[0][0]
            reason = rebuild_producer_reason(h[9], h[10], h[11], bool(h[5] & TRANSACTIONAL_MASK))
            if reason is not None:
                raise _Reject.of(D3_REBUILD_PRODUCER, reason=reason)

        # ---- stage E: post-validation sizes ---------------------------------------------
        validated_size: int | None = total_size
        if rebuilt:
            validated_size = self._rebuilt_size(batches, target, uncompressed_size)
            if validated_size is not None and validated_size > cfg.max_message_bytes:
                raise _Reject.of(E1, size=validated_size, tp=tp,
                                 max_message_bytes=cfg.max_message_bytes)
        if validated_size is not None and validated_size > cfg.segment_bytes:
            raise _Reject.of(E2, size=validated_size, tp=tp,
                             segment_bytes=cfg.segment_bytes)

        # ---- stage F: producer state ----------------------------------------------------
        base = self.next_offset
        if base is None:
            base = _OFFSET_LENGTH.unpack_from(first.data, 0)[0] if self.source == "log" else 0
        n_total = sum(c for _, c in appended)
        header, _count = appended[0]
        if first.magic == 2 and header[9] > -1:
            pid, epoch, base_seq = header[9], header[10], header[11]
            control = bool(header[5] & CONTROL_MASK)
            transactional = bool(header[5] & TRANSACTIONAL_MASK)
            last_seq = increment_sequence(base_seq, header[6]) if base_seq != -1 else -1
            marker = marker_of_batch(first.data) if control else None
            if not control:
                dup = self.producers.find_duplicate(pid, epoch, base_seq, last_seq)
                if dup is not None:
                    return BatchOutcome(base_offset=dup.first_offset,
                                        log_append_time=dup.max_timestamp, path=path_label,
                                        duplicate=True, record_count=n_total,
                                        check=F1.step, detail=F1.render(), params={})
            try:
                self.producers.check(pid=pid, epoch=epoch, first_seq=base_seq,
                                     first_offset=base, transactional=transactional,
                                     control=control, from_client=not self._control_origin(first),
                                     marker=marker)
            except ProducerCheckError as exc:
                raise _Reject(exc.definition.error, exc.check, exc.message,
                              params=_params(exc.params)) from None
            max_ts = header[8]
            self.producers.append(pid=pid, epoch=epoch, transactional=transactional,
                                  control=control, marker=marker,
                                  meta=BatchMetadata(base_seq, last_seq, base,
                                                     to_int64(base + n_total - 1), max_ts))
        # the log end offset is a Java long: it wraps (a replayed log near Long.MAX_VALUE
        # quotes wrapped offsets in later stage-F texts, as the broker would)
        self.next_offset = to_int64(base + n_total)
        return BatchOutcome(base_offset=base,
                            log_append_time=now if cfg.log_append_time else -1,
                            path=path_label, record_count=n_total)

    def _control_origin(self, b: _Batch) -> bool:
        """Control batches come from the coordinator when replaying a log (or if asked)."""
        if self.origin == "coordinator":
            return True
        return self.source == "log" and bool(b.data[ATTRIBUTES_OFFSET + 1] & CONTROL_MASK)

    # -- v2 ---------------------------------------------------------------------------------
    def _validate_v2(self, b: _Batch, first: _Batch, now: int, to_magic: int, path: str,
                     partial_reader: bool) -> tuple[tuple, int, bool, int]:
        tp = self.tp
        h = V2_HEADER.unpack_from(b.data, 0)
        (base_offset, _len, _ple, magic, _crc, attributes, last_delta, base_ts, max_ts, pid,
         _epoch, base_seq, count) = h
        if self.source == "log":
            base_offset = 0
        attr = attributes & 0xFF
        # D2 (validateBatch)
        if magic != first.magic:
            raise _Reject.of(D2_A, magic=magic, first_magic=first.magic, tp=tp)
        last_offset = to_int64(base_offset + last_delta)
        if self._control_origin(b):
            pass  # validateBatch runs D2.b-f for AppendOrigin.CLIENT only
        elif to_int64(last_offset - base_offset + 1) <= 0:
            raise _Reject.of(D2_B, base_offset=base_offset, last_offset=last_offset, tp=tp)
        elif count <= 0:
            raise _Reject.of(D2_C, count=count, tp=tp)
        elif count != last_delta + 1:
            raise _Reject.of(D2_D, base_offset=base_offset, last_offset=last_offset,
                             count=count, tp=tp)
        elif attr & CONTROL_MASK:
            raise _Reject.of(D2_E, tp=tp)
        elif pid > -1 and base_seq < 0:
            raise _Reject.of(D2_F, sequence=base_seq, producer_id=pid, tp=tp)
        if attr & TRANSACTIONAL_MASK and to_magic < 2:
            raise _Reject.of(D2_G, to_magic=to_magic)
        if pid > -1 and to_magic < 2:
            raise _Reject.of(D2_H, to_magic=to_magic)
        # records (3.D.3): the reader LogValidator picks, over what the codec delivers; a
        # structural error or a codec failure aborts the batch (checks.structure)
        codec = attr & 0x07
        stream = codec != Codec.NONE
        strict = not (partial_reader and stream)
        parsed, region, finding = read_batch_records(
            memoryview(b.data)[RECORD_BATCH_OVERHEAD:], codec, count, in_place=partial_reader)
        if finding is not None:
            raise _Reject.of(finding[0], **finding[1])
        # per-record checks (3.D.4), vectorised; messages only for failing records
        cfg = self.config
        lat = bool(attr & TIMESTAMP_TYPE_MASK) and self.source != "log"
        if lat:
            ts = np.full(count, max_ts, dtype=np.int64)
        else:
            ts = np.int64(base_ts) + parsed.ts_delta
        errors: dict[int, _RecordError] = {}
        if cfg.compacted:
            r3 = (87, rchecks.R3.id, rchecks.R3.render(tp=tp), None, {"tp": tp})
            for i in np.flatnonzero(parsed.key_length < 0).tolist():
                errors[i] = r3
        self._check_timestamps(now, ts, lat, errors, parsed, base_offset, partial=not strict)
        in_place_ok = bool(np.array_equal(parsed.offset_delta,
                                          np.arange(count, dtype=np.int32)))
        self._apply_policy(errors, count, skip_chain=partial_reader and stream)
        if not in_place_ok and partial_reader and stream:
            # in-place assignment turns off, and the batch is rebuilt from the partial reader's
            # records, whose key() throws (LogValidator.buildRecordsAndAssignOffsets)
            raise _Reject.of(D3_REBUILD)
        return h, count, in_place_ok, len(region)

    def _apply_policy(self, errors: dict[int, _RecordError], count: int, *,
                      skip_chain: bool) -> None:
        """Merge the record policy into the batch's record errors, then aggregate (3.D.5)."""
        policy = self._policy
        if policy is not None and policy.errors and policy.profile != "kip-686" and not (
                policy.profile == "kip-729" and skip_chain):
            for i, message in policy.errors.items():
                if 0 <= i < count and i not in errors:
                    errors[i] = (87, rchecks.P.id, message, policy.rules.get(i), None)
        self._raise_record_errors(errors)
        if policy is not None and policy.errors and policy.profile == "kip-686":
            first = min(policy.errors)
            message = policy.errors[first]
            rule = policy.rules.get(first)
            raise _Reject(kerr.POLICY_VIOLATION, rchecks.P_BATCH.step, message,
                          error_message=message,
                          params={"batch_index": str(first)} | ({"rule": rule} if rule else {}))

    def _check_timestamps(self, now: int, ts: np.ndarray, lat: bool,
                          errors: dict[int, _RecordError], parsed: ParsedRecords,
                          base_offset: int, *, partial: bool) -> None:
        """R4 over the batch's records (:mod:`kqlab.kafka.checks.record`)."""
        cfg = self.config
        bad = rchecks.timestamp_out_of_range(ts, now, cfg)
        lat_bad = rchecks.timestamp_type_flagged(ts, bad, lat, cfg)
        lo, hi = rchecks.timestamp_bounds(now, cfg)
        for i in np.flatnonzero(bad).tolist():
            if i in errors:
                continue
            offset = to_int64(base_offset + int(parsed.offset_delta[i]))
            p = {"timestamp": int(ts[i]), "offset": offset, "lower": lo, "upper": hi}
            errors[i] = (32, rchecks.R4.id, rchecks.R4.render(**p), None, _params(p))
        for i in np.flatnonzero(lat_bad).tolist():
            if i in errors:
                continue
            offset = to_int64(base_offset + int(parsed.offset_delta[i]))
            rec = rchecks.render_record(offset, int(ts[i]), int(parsed.key_length[i]),
                                        int(parsed.value_length[i]), partial=partial)
            errors[i] = (32, rchecks.R4_TYPE.id, rchecks.R4_TYPE.render(record=rec), None,
                         {"record": rec})

    def _raise_record_errors(self, errors: dict[int, _RecordError]) -> None:
        """3.D.5: one exception per batch listing every record error in iteration order.

        ``check`` names the spec steps that fired (``"R3+R4"``), in spec order; each record
        error keeps its own check id, rule and parameters beside its text.
        """
        if not errors:
            return
        keys = sorted(errors)
        ordered = [(i, errors[i][2]) for i in keys]
        ids = [(errors[i][1], errors[i][3], errors[i][4]) for i in keys]
        check = "+".join(sorted({rchecks.CHECKS[errors[i][1]].step for i in keys}))
        if any(errors[i][0] == 32 for i in keys):
            raise _Reject(kerr.INVALID_TIMESTAMP, check, INVALID_TIMESTAMP_MESSAGE,
                          error_message=INVALID_TIMESTAMP_MESSAGE, record_errors=ordered,
                          record_error_ids=ids)
        text = aggregate.render_error_list(ordered)
        raise _Reject(kerr.INVALID_RECORD, check, text, error_message=text, record_errors=ordered,
                      record_error_ids=ids)

    # -- legacy v0/v1 -----------------------------------------------------------------------
    def _validate_legacy(self, b: _Batch, first: _Batch, now: int, to_magic: int, path: str,
                         source_codec: Codec) -> tuple[Any, int, bool, int]:
        tp = self.tp
        if b.magic != first.magic:
            raise _Reject.of(D2_A, magic=b.magic, first_magic=first.magic, tp=tp)
        try:
            entry = legacy.open_entry(b.data)
        except legacy.LegacyFormatError as exc:
            raise _Reject.of(D3_LEGACY, reason=f"Found invalid record structure ({exc})"
                             ) from None
        # the deep iterator's constructor reads the whole inner set (checks.structure)
        if entry.error_kind == "zstd":
            raise _Reject.of(D3_LEGACY_ZSTD, magic=entry.wrapper.magic)
        if entry.error_kind == "decompress":
            raise _Reject.of(D3_LEGACY_CODEC, cause=entry.error)
        if entry.error_kind == "corrupt":
            raise _Reject.of(D3_LEGACY_SIZE)
        if entry.error_kind == "invalid" and entry.nested_at is None:
            raise _Reject.of(D3_LEGACY, reason=entry.error)
        w = entry.wrapper
        cfg = self.config
        compressed = entry.inner is not None
        lat_batch = w.magic >= 1 and w.timestamp_type == 1 and self.source != "log"
        errors: dict[int, _RecordError] = {}
        in_place_ok = True
        usize = 0
        for i, m in enumerate(entry.messages):
            usize += m.size + LOG_OVERHEAD
            expected = i if w.magic >= 1 else None
            if expected is not None and compressed and m.offset - entry.messages[0].offset != i:
                in_place_ok = False
            if entry.nested_at == i:
                # the deep iterator throws before LogValidator's own R0 check can see the record
                # (AbstractLegacyRecordBatch.DeepRecordsIterator.makeNext), so R0 never fires
                raise _Reject.of(D3_LEGACY, reason="Inner messages must not be compressed")
            if m.magic != w.magic:
                p = {"record": m.render(), "magic": w.magic, "tp": tp}
                errors[i] = (87, rchecks.R1.id, rchecks.R1.render(**p), None, _params(p))
                continue
            if compressed and not m.crc_valid:
                computed = crc32(legacy.encode_message(0, m.key, m.value, magic=m.magic,
                                                       attributes=m.attributes,
                                                       timestamp=m.timestamp)[16:])
                raise _Reject(kerr.CORRUPT_MESSAGE, "R2", f"Record is corrupt (stored crc = {m.crc}"
                              f", computed crc = {computed}) in topic partition {tp}.")
            if cfg.compacted and m.key is None:
                errors[i] = (87, rchecks.R3.id, rchecks.R3.render(tp=tp), None, {"tp": tp})
                continue
            ts = w.timestamp if lat_batch else m.timestamp
            self._legacy_timestamp(i, m, ts, lat_batch, now, errors)
        self._apply_policy(errors, len(entry.messages), skip_chain=False)
        n = len(entry.messages)
        header = (None,) * 5 + (0,) + (n - 1, -1, w.timestamp, -1, -1, -1, n)
        return header, n, in_place_ok, usize

    def _legacy_timestamp(self, i: int, m: legacy.LegacyMessage, ts: int, lat_batch: bool,
                          now: int, errors: dict[int, _RecordError]) -> None:
        """R4 for one legacy record (the same rule as v2: :mod:`kqlab.kafka.checks.record`)."""
        cfg = self.config
        one = np.array([ts], dtype=np.int64)
        bad = rchecks.timestamp_out_of_range(one, now, cfg)
        if bad[0]:
            lo, hi = rchecks.timestamp_bounds(now, cfg)
            p = {"timestamp": ts, "offset": m.offset, "lower": lo, "upper": hi}
            errors[i] = (32, rchecks.R4.id, rchecks.R4.render(**p), None, _params(p))
        elif rchecks.timestamp_type_flagged(one, bad, lat_batch, cfg)[0]:
            rec = m.render()
            errors[i] = (32, rchecks.R4_TYPE.id, rchecks.R4_TYPE.render(record=rec), None,
                         {"record": rec})

    # -- sizes after a rebuild (E1) ---------------------------------------------------------
    def _rebuilt_size(self, batches: list[_Batch], target: Codec, uncompressed: int
                      ) -> int | None:
        """Size of the batch the broker would write when it re-encodes (paths X, Z-rebuild).

        ``None`` when a cheap upper bound (records + 10 % + framing: no codec expands more)
        already fits both ``max.message.bytes`` and ``segment.bytes``; otherwise the batch is
        re-encoded with the target codec (kqlab's codecs: Java's sizes may differ by a few
        bytes at the boundary).
        """
        bound = RECORD_BATCH_OVERHEAD + int(uncompressed * 1.1) + 1024
        if bound <= min(self.config.max_message_bytes, self.config.segment_bytes):
            return None
        from kqlab.kafka.batch import decode_batches
        from kqlab.kafka.encode import rebuilt_size

        return rebuilt_size(decode_batches([b.data for b in batches]).records, target)


def validate_batches(batches: Iterable[Any], *, topic: str = "", partition: int = -1,
                     config: TopicConfig | dict[str, Any] | None = None,
                     broker_version: str | None = None, now: int | None = None,
                     source: str = "log", **request: Any) -> pa.Table:
    """Validate a stream of one partition's batches; return the batch verdicts table.

    ``batches`` yields raw batch ``bytes`` or objects with ``data`` and ``position``
    (:class:`~kqlab.kafka.log.RawBatch`); log issues in the stream are skipped here (the caller
    reports them).  Producer state carries from batch to batch.
    """
    validator = PartitionValidator(topic, partition, config, broker_version=broker_version,
                                   now=now, source=source, **request)
    outcomes = []
    for item in batches:
        if isinstance(item, bytes | bytearray):
            outcomes.append(validator.validate(bytes(item)))
        elif hasattr(item, "data"):
            outcomes.append(validator.validate(item.data, position=item.position))
    return outcomes_table(outcomes, topic, partition)


def outcomes_table(outcomes: list[BatchOutcome], topic: str, partition: int) -> pa.Table:
    """The batch-verdicts Arrow table (``BATCH_VERDICTS_SCHEMA``) for a list of outcomes."""
    n = len(outcomes)
    return pa.table({
        "topic": pa.array([topic] * n, pa.string()),
        "partition": pa.array([partition] * n, pa.int32()),
        "batch_offset": pa.array([o.batch_offset for o in outcomes], pa.int64()),
        "error_code": pa.array([o.error_code for o in outcomes], pa.int16()),
        "error_name": pa.array([o.error_name for o in outcomes], pa.string()),
        "error_message": pa.array([o.error_message for o in outcomes], pa.string()),
        "record_errors": pa.array(
            [[{"batch_index": i, "message": m, "check": ids[0] or None, "rule": ids[1],
               "params": None if ids[2] is None else list(ids[2].items())}
              for (i, m), ids in zip(o.record_errors, _padded_ids(o), strict=True)]
             for o in outcomes], BATCH_VERDICTS_SCHEMA.field("record_errors").type),
        "check": pa.array([o.check for o in outcomes], pa.string()),
        "detail": pa.array([o.detail for o in outcomes], pa.string()),
        "record_count": pa.array([o.record_count for o in outcomes], pa.int32()),
        "position": pa.array([o.position for o in outcomes], pa.int64()),
        "params": pa.array([None if o.params is None else list(o.params.items())
                            for o in outcomes], BATCH_VERDICTS_SCHEMA.field("params").type),
    }, schema=BATCH_VERDICTS_SCHEMA)


def _padded_ids(outcome: BatchOutcome) -> list[RecordErrorId]:
    """The outcome's record-error ids, one per record error (unknown ones as ``(None...)``:
    a caller that built ``record_errors`` by hand)."""
    ids = outcome.record_error_ids
    missing = len(outcome.record_errors) - len(ids)
    return list(ids) + [("", None, None)] * missing if missing > 0 else list(ids)
