"""The broker's produce-path verdicts computed over the decoded Arrow tables, vectorised.

:func:`broker_verdicts` answers, for every row of a batches table (``BATCHES_SCHEMA``) and its
records table (``RECORDS_SCHEMA``) as :class:`~kqlab.kafka.batch.TableBuilder` /
:func:`~kqlab.kafka.log.read_log` produce them, exactly what
:func:`kqlab.kafka.validator.validate_batches` answers for the same batches' bytes: the
``BATCH_VERDICTS_SCHEMA`` table, row for row, for ``source="log"`` and produce version >= 3.

Stages A-E (spec §3.A-§3.E) are numpy/pyarrow masks over all batches and records at once, in
the broker's order (the first failing check decides a batch).  Stage F (producer state) is
sequential per producer; it runs as one Python loop over only the batches that carry a producer
id (and over rejected ones, for ``resync``), with
:class:`~kqlab.kafka.producer_state.ProducerStateManager` holding the state.

What the tables cannot say
--------------------------
The tables do not keep every byte, so a few rows cannot be judged from them alone:

* LogAppendTime-flagged v2 batches on a CreateTime topic with finite timestamp bounds (the
  decoder reports ``maxTimestamp`` for their records; the broker, replaying a log, range-checks
  ``baseTimestamp + delta``);
* compressed batches with a record-structure error that the broker would read with its lenient
  in-place ("partial") reader (the decoder's strict parse may differ);
* v2 batches of 51-60 bytes (no stored CRC in the table), and 23-50 bytes when the
  transactional-id authorization or a produce version < 7 needs their attributes;
* batches shorter than 17 bytes, and legacy batches whose wrapper offset the table lost.

With ``raw`` (the batches' bytes, same order as the rows) those rows are handed to a
:class:`~kqlab.kafka.validator.PartitionValidator` that shares the producer state and the
next-offset counter, in log order, so later producer checks stay exact.  Without ``raw`` they
are marked: ``error_code``/``error_name`` null, ``check = "undetermined"`` and ``detail`` saying
why; later batches of the same producer that reach stage F are marked the same way (their state
depends on the unknown outcome), and an undetermined batch counts as not appended for the
offsets quoted in later stage-F texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka import errors as kerr
from kqlab.kafka.batch import increment_sequence
from kqlab.kafka.checks import aggregate
from kqlab.kafka.checks import record as rchecks
from kqlab.kafka.checks._check import CHECKS, Check, ParamsPart, params_column
from kqlab.kafka.checks.append import C2, C3, C4
from kqlab.kafka.checks.header import D2_B, D2_C, D2_D, D2_E, D2_F, D2_G, D2_H, Z0
from kqlab.kafka.checks.producer import F1, EndTxnMarker, MalformedMarker, parse_end_txn_markers
from kqlab.kafka.checks.request import (
    A1,
    A1_AUTH,
    A4_B,
    A4_C,
    A4_C_UNKNOWN,
    B0,
    B3,
    B4,
    S3,
    whole_request_message,
)
from kqlab.kafka.checks.size import E1, E2
from kqlab.kafka.checks.structure import D3_REBUILD
from kqlab.kafka.compression import Codec
from kqlab.kafka.configs import LONG_MAX, TopicConfig
from kqlab.kafka.producer_state import BatchMetadata, ProducerCheckError
from kqlab.kafka.validator import (
    INTERNAL_TOPICS,
    INVALID_TIMESTAMP_MESSAGE,
    PartitionValidator,
    PolicyErrors,
    outcomes_table,
)
from kqlab.records import BATCH_VERDICTS_SCHEMA, RECORD_ERROR_TYPE

__all__ = ["UNDETERMINED", "broker_verdicts"]

#: ``check`` of rows the tables alone cannot judge (see the module docstring)
UNDETERMINED = "undetermined"
_UNDET = 10_000  # internal code for undetermined rows
_V2_MIN = 61
#: ``check`` of a batch with record errors, by which kinds it has (bits: P 4, R3 2, R4 1)
_CHECK_LABELS = np.array(["+".join(c for c, bit in (("P", 4), ("R3", 2), ("R4", 1)) if k & bit)
                          for k in range(8)], dtype=object)


def _np(table: pa.Table, name: str, fill: Any, dtype: Any) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        col = pc.fill_null(col, fill)
    return np.asarray(col.to_numpy(), dtype=dtype)


class _Cascade:
    """Per-batch verdict arrays filled in the broker's order: the first decision sticks."""

    def __init__(self, n: int):
        self.decided = np.zeros(n, dtype=bool)
        self.code = np.zeros(n, dtype=np.int32)
        self.check: np.ndarray = np.full(n, None, dtype=object)
        self.detail: np.ndarray = np.full(n, None, dtype=object)
        self.message: np.ndarray = np.full(n, None, dtype=object)
        #: the parameters of every decision made with a :class:`Check` (the ``params`` column)
        self.params: list[ParamsPart] = []

    def open(self, mask: np.ndarray) -> np.ndarray:
        """Indices of ``mask`` rows not decided yet."""
        return np.flatnonzero(mask & ~self.decided)

    def decide(self, mask: np.ndarray, code: int, check: str, detail: Any,
               message: Any = None) -> np.ndarray:
        """Decide the open rows of ``mask``; ``detail``/``message`` are a str, f(i) -> str or
        an object array with one entry per batch (only the decided rows' entries are read)."""
        idx = self.open(mask)
        if not len(idx):
            return idx
        self.decided[idx] = True
        self.code[idx] = code
        self.check[idx] = check
        done: dict[int, list] = {}
        for arr, val in ((self.detail, detail), (self.message, message)):
            if isinstance(val, np.ndarray):
                arr[idx] = val[idx]
            elif callable(val):
                if id(val) not in done:
                    done[id(val)] = [val(i) for i in idx.tolist()]
                arr[idx] = done[id(val)]
            elif val is not None:
                arr[idx] = val
        return idx

    def by(self, mask: np.ndarray, check: Check, params: dict[str, object] | None = None, *,
           whole_request: bool = False) -> np.ndarray:
        """Decide the open rows of ``mask`` with ``check``: the detail text is rendered from
        the check's template and ``params`` (scalars, or arrays with one entry per batch row),
        which the verdict keeps as data; ``whole_request`` also returns the text as the
        client's ``error_message`` where §5.4 keeps it."""
        idx = self.open(mask)
        if not len(idx):
            return idx
        vals = {k: (v[idx] if isinstance(v, np.ndarray) else v)
                for k, v in (params or {}).items()}
        texts = check.render_array(vals).to_numpy(zero_copy_only=False)
        if len(texts) != len(idx):  # no per-row parameter: one text for all
            texts = np.full(len(idx), texts[0], dtype=object)
        self.decided[idx] = True
        self.code[idx] = check.code
        self.check[idx] = check.step
        self.detail[idx] = texts
        if whole_request:
            self.message[idx] = [whole_request_message(check.error, t) for t in texts.tolist()]
        self.params.append((idx, vals))
        return idx

    def undetermined(self, mask: np.ndarray, why: str) -> None:
        self.decide(mask, _UNDET, UNDETERMINED, why)


def broker_verdicts(records: pa.Table, batches: pa.Table,
                    config: TopicConfig | dict[str, Any] | None = None, *,
                    broker_version: str | None = None, now: int, source: str = "log",
                    topic: str | None = None, partition: int | None = None,
                    raw: Sequence[bytes] | None = None, produce_version: int = 9,
                    acks: int = -1, client_id: str = "kqlab",
                    transactional_id_authorized: bool = True, origin: str = "client",
                    first_offset: int | None = None, resync: bool | None = None,
                    policy: RecordPolicy | None = None,
                    marker_transaction_version: int | None = None) -> pa.Table:
    """Batch verdicts (``BATCH_VERDICTS_SCHEMA``, one row per ``batches`` row, same order).

    ``policy`` injects a record policy's per-record failures where the broker would run it,
    with the semantics of :class:`~kqlab.kafka.validator.PolicyErrors`.

    ``records``/``batches`` are one partition's decoded tables in log order, unfiltered (as
    :func:`~kqlab.kafka.log.read_log` returns them).  The result equals
    ``validate_batches(<the same batches' bytes>, ...)`` with the same ``config``,
    ``broker_version``, ``now`` and request parameters (``produce_version``, ``acks``,
    ``client_id``, ``transactional_id_authorized``, ``origin``, ``first_offset``, ``resync``;
    see :class:`~kqlab.kafka.validator.PartitionValidator`).  ``topic``/``partition`` default
    to the tables' own.  ``raw`` (each row's batch bytes) lets rows the tables cannot judge be
    validated exactly; other source / version combinations need ``raw`` for every row.

    Examples
    --------
    >>> from kqlab.kafka import build_batch, decode_batches, Record
    >>> d = decode_batches([build_batch([Record(value=b"v")], base_timestamp=0)], topic="t",
    ...                    partition=0)
    >>> out = broker_verdicts(d.records, d.batches, {"cleanup.policy": "compact"}, now=0)
    >>> out["error_code"][0].as_py(), out["check"][0].as_py()
    (87, 'R3')
    """
    nb = batches.num_rows
    if topic is None:
        topic = batches["topic"][0].as_py() if nb else ""
        topic = topic or ""
    if partition is None:
        p = batches["partition"][0].as_py() if nb else None
        partition = -1 if p is None else p
    cfg = config if isinstance(config, TopicConfig) else TopicConfig.from_dict(
        config, broker_version)
    validator = PartitionValidator(
        topic, partition, cfg, now=now, source=source, produce_version=produce_version,
        acks=acks, client_id=client_id, transactional_id_authorized=transactional_id_authorized,
        origin=origin, first_offset=first_offset, resync=resync,
        marker_transaction_version=marker_transaction_version)
    if raw is not None and len(raw) != nb:
        raise ValueError(f"raw has {len(raw)} batches but the batches table {nb} rows")
    if source != "log" or produce_version < 3:
        if raw is None:
            raise ValueError("broker_verdicts judges source='log' with produce_version >= 3 "
                             "from the tables; pass raw= (the batches' bytes) for other cases")
        per_batch = _policy_by_batch(records, batches, policy)
        positions = batches["position"].to_pylist()
        outs = [validator.validate(bytes(b), position=p, policy=per_batch[i])
                for i, (b, p) in enumerate(zip(raw, positions, strict=True))]
        return outcomes_table(outs, topic, partition)
    return _Verdicts(records, batches, cfg, validator, now, raw, policy).run()


@dataclass(frozen=True)
class RecordPolicy:
    """A record policy's verdict per record: the message of its first failing reject rule.

    ``messages`` has one entry per records-table row (None = the record passes), as a Python
    sequence or an Arrow string array (null = the record passes); ``profile`` is ``kip-940``,
    ``kip-729`` or ``kip-686`` (see :class:`PolicyErrors`).
    """

    profile: str
    messages: Sequence[str | None] | pa.Array | pa.ChunkedArray
    #: the rule behind each message (same length; None: not named), so a verdict names its
    #: rule as data instead of being matched back by its text
    rules: Sequence[str | None] | pa.Array | pa.ChunkedArray | None = None


def _messages_array(messages: Any) -> pa.Array:
    """A policy's messages as one Arrow ``string`` array (null = the record passes)."""
    if isinstance(messages, pa.ChunkedArray):
        messages = messages.combine_chunks()
    if not isinstance(messages, pa.Array):
        messages = pa.array(messages, pa.string())
    return messages if messages.type == pa.string() else messages.cast(pa.string())


def records_per_batch(batches: pa.Table, n_records: int) -> np.ndarray:
    """How many rows of the records table each batch row contributed: the decoder's
    ``records_decoded`` column (``kqlab.records.DECODE_COLUMNS``)."""
    col = batches["records_decoded"]
    if col.null_count:
        raise ValueError("the batches table has rows without records_decoded: pass it through "
                         "kqlab.records.conform_batches (a table written by an older kqlab)")
    n_r = np.asarray(col.to_numpy(), dtype=np.int64)
    total = int(n_r.sum())
    if total != n_records:
        raise ValueError(f"the records table has {n_records} rows but the batches table "
                         f"accounts for {total}: pass both tables unfiltered, as the decoder "
                         "returned them")
    return n_r


def _policy_by_batch(records: pa.Table, batches: pa.Table, policy: RecordPolicy | None
                     ) -> list[PolicyErrors | None]:
    """The policy split per batch row."""
    nb = batches.num_rows
    out: list[PolicyErrors | None] = [None] * nb
    if policy is None:
        return out
    arr = _messages_array(policy.messages)
    if arr.null_count == len(arr):
        return out
    messages = arr.to_pylist()
    rules = [None] * len(messages) if policy.rules is None else \
        _strings(_rules_array(policy.rules)).to_pylist()
    n_r = records_per_batch(batches, records.num_rows).tolist()
    start = 0
    for row, k in enumerate(n_r):
        errors = {i: m for i, m in enumerate(messages[start:start + k]) if m is not None}
        if errors:
            named = {i: r for i, r in enumerate(rules[start:start + k])
                     if r is not None and i in errors}
            out[row] = PolicyErrors(policy.profile, errors, named)
        start += k
    return out


def _rules_array(rules: Any) -> pa.Array:
    """A policy's rule ids as one Arrow array, kept dictionary-encoded when given so (taking
    a few failing records' rules from a million-row column stays cheap)."""
    if isinstance(rules, pa.ChunkedArray):
        rules = rules.combine_chunks()
    if isinstance(rules, pa.Array) and pa.types.is_dictionary(rules.type):
        return rules
    return _messages_array(rules)


def _strings(arr: pa.Array) -> pa.Array:
    """Rule ids as plain strings (the replay hands them over dictionary-encoded)."""
    return arr.cast(pa.string()) if pa.types.is_dictionary(arr.type) else arr


class _Verdicts:
    """One call of :func:`broker_verdicts` (``source="log"``, produce version >= 3)."""

    def __init__(self, records: pa.Table, batches: pa.Table, cfg: TopicConfig,
                 validator: PartitionValidator, now: int, raw: Sequence[bytes] | None,
                 policy: RecordPolicy | None = None):
        self.records = records
        self.policy = policy
        #: the policy's messages (Arrow, null = the record passes) and where they are set
        self.parr = None if policy is None else _messages_array(policy.messages)
        self.prules = None if policy is None or policy.rules is None else \
            _rules_array(policy.rules)
        if self.parr is not None and len(self.parr) != records.num_rows:
            raise ValueError(f"the policy has {len(self.parr)} messages but the records table "
                             f"{records.num_rows} rows")
        self.pmask = np.zeros(records.num_rows, dtype=bool) if self.parr is None else \
            pc.is_valid(self.parr).to_numpy(zero_copy_only=False)
        self.batches = batches
        self.cfg = cfg
        self.v = validator
        self.tp = validator.tp
        self.now = now
        self.raw = raw
        self.positions = batches["position"]
        n = batches.num_rows
        self.n = n
        self.cas = _Cascade(n)
        b = batches
        self.magic = _np(b, "magic", -128, np.int64)
        self.size = _np(b, "size_bytes", 0, np.int64)
        self.attr = _np(b, "attributes", 0, np.int64) & 0xFF
        self.codec = self.attr & 0x07
        self.pid = _np(b, "producer_id", -1, np.int64)
        self.epoch = _np(b, "producer_epoch", -1, np.int64)
        self.seq = _np(b, "base_sequence", -1, np.int64)
        self.count = _np(b, "record_count", 0, np.int64)
        self.count_known = b["record_count"].is_valid().to_numpy(zero_copy_only=False)
        self.last_delta = _np(b, "last_offset_delta", 0, np.int64)
        self.lod_known = b["last_offset_delta"].is_valid().to_numpy(zero_copy_only=False)
        self.batch_offset = _np(b, "batch_offset", 0, np.int64)
        self.max_ts = _np(b, "max_timestamp", -1, np.int64)
        self.crc_valid = _np(b, "crc_valid", False, bool)
        self.crc = _np(b, "crc", 0, np.int64)
        self.control = _np(b, "is_control", False, bool) & (self.magic == 2)
        self.transactional = _np(b, "is_transactional", False, bool) & (self.magic == 2)
        self.lat = (self.attr & 0x08) != 0
        #: rows the decoder found a problem in (kqlab.records.DECODE_COLUMNS)
        self.decode_found = pc.is_valid(b["decode_kind"]).to_numpy(zero_copy_only=False)
        self.v2 = (self.magic == 2) & (self.size >= _V2_MIN)
        self.ctrl_origin = np.full(n, validator.origin == "coordinator") | self.control
        self.rec_errors: pa.Array | None = None
        #: KIP-686's pending batch decisions: (records failing the policy, their batch rows)
        self._kip686: tuple[np.ndarray, np.ndarray] | None = None
        self.delegated: dict[int, Any] = {}
        self._rec_batch: np.ndarray | None = None

    @property
    def rec_batch(self) -> np.ndarray:
        """The batch row of every records-table row (computed once)."""
        if self._rec_batch is None:
            self._rec_batch = np.repeat(np.arange(self.n), self.n_r)
        return self._rec_batch

    def _batch_policy(self, i: int) -> PolicyErrors | None:
        """The policy's failures inside batch ``i`` (for rows delegated to the validator)."""
        if self.policy is None or self.parr is None:
            return None
        start, k = int(self.n_r[:i].sum()), int(self.n_r[i])
        errors = {j: m for j, m in enumerate(self.parr.slice(start, k).to_pylist())
                  if m is not None}
        if not errors:
            return None
        rules = {} if self.prules is None else {
            j: r for j, r in enumerate(_strings(self.prules.slice(start, k)).to_pylist())
            if r is not None and j in errors}
        return PolicyErrors(self.policy.profile, errors, rules)

    # -- records <-> batches -------------------------------------------------------------------
    def _record_counts(self) -> np.ndarray:
        """Rows of the records table each batch contributed (TableBuilder's rules)."""
        return records_per_batch(self.batches, self.records.num_rows)

    # -- the procedure ---------------------------------------------------------------------------
    def run(self) -> pa.Table:
        cas, cfg, tp, v = self.cas, self.cfg, self.tp, self.v
        pv = v.produce_version
        magic, size, codec = self.magic, self.size, self.codec
        is_v2 = magic == 2
        short_v2 = is_v2 & (size < _V2_MIN)
        n_r = self._record_counts()
        self.n_r = n_r

        # ---- stage A --------------------------------------------------------------------
        cas.undetermined(size < 17, "batch shorter than 17 bytes: its bytes are needed")
        bad_magic = (magic < 0) | (magic > 2)
        cas.by(bad_magic, A1, {"scan_error": S3.render_array({"magic": magic})
                               .to_numpy(zero_copy_only=False)}, whole_request=True)
        legacy = (magic == 0) | (magic == 1)
        # the raw wrapper offset of a legacy entry is first-inner + lastOffsetDelta
        cas.undetermined(legacy & self.count_known & ~self.lod_known,
                         "legacy entry whose wrapper offset the table does not keep")
        if not v.transactional_id_authorized or pv < 7:
            cas.undetermined(short_v2 & (size > 22),
                             "short v2 batch: its attributes are not in the table")
        if not v.transactional_id_authorized:
            cas.by(self.v2 & self.transactional, A1_AUTH, whole_request=True)
        cas.by(legacy, A4_B, {"version": pv})
        if pv < 7:
            cas.by(self.v2 & (codec == Codec.ZSTD), A4_C, {"version": pv})
            cas.by(self.v2 & (codec > Codec.ZSTD), A4_C_UNKNOWN, {"codec": codec},
                   whole_request=True)

        # ---- stage B --------------------------------------------------------------------
        cas.by(is_v2 & (size >= 26) & (size <= 50), B0, whole_request=True)
        every = np.ones(self.n, dtype=bool)
        if v.acks not in (-1, 0, 1):
            cas.by(every, B3, {"acks": v.acks})
        if v.topic in INTERNAL_TOPICS and v.client_id != "__admin_client":
            cas.by(every, B4, {"topic": v.topic})

        # ---- stage C --------------------------------------------------------------------
        mmb = cfg.max_message_bytes
        cas.by(size > mmb, C2, {"tp": tp, "size": size, "max_message_bytes": mmb})
        cas.undetermined(short_v2, "v2 batch shorter than its 61-byte header: its stored CRC "
                                   "is not in the table")
        cas.by(self.v2 & ~self.crc_valid, C3, {"stored_crc": self.crc, "tp": tp})
        cas.by(self.v2 & (codec > Codec.ZSTD), C4, {"codec": codec})

        # ---- stage D --------------------------------------------------------------------
        v2 = self.v2
        if cfg.compression_type == "producer":
            target = codec
        else:
            target = np.full(self.n, int(Codec.parse(cfg.compression_type)))
        to_magic = cfg.to_magic
        if cfg.inter_broker_protocol < (2, 1) and cfg.release.version < (4, 0):
            cas.by(v2 & (target == Codec.ZSTD), Z0)
        path_z = (codec != 0) | (target != 0)
        in_place_z = (codec == target) & (to_magic == 2)
        in_place_z |= (codec == 0) & self.control & self.ctrl_origin
        partial_reader = path_z & in_place_z
        self.partial_reader = partial_reader
        # D2 (validateBatch): b-f for client-origin batches only
        client = v2 & ~self.ctrl_origin
        ld, cnt, pid, seq = self.last_delta, self.count, self.pid, self.seq
        cas.by(client & (ld < 0), D2_B, {"base_offset": 0, "last_offset": ld, "tp": tp})
        cas.by(client & (cnt <= 0), D2_C, {"count": cnt, "tp": tp})
        cas.by(client & (cnt != ld + 1), D2_D, {"base_offset": 0, "last_offset": ld,
                                                "count": cnt, "tp": tp})
        cas.by(client & self.control, D2_E, {"tp": tp})
        cas.by(client & (pid > -1) & (seq < 0), D2_F, {"sequence": seq, "producer_id": pid,
                                                       "tp": tp})
        if to_magic < 2:
            cas.by(v2 & self.transactional, D2_G, {"to_magic": to_magic})
            cas.by(v2 & (pid > -1), D2_H, {"to_magic": to_magic})
        # D3: structural errors, as the decoder recorded them
        if self.decode_found.any():
            self._structural(v2, partial_reader)
        # D4/D5 per-record checks
        self._record_checks(v2)
        # ---- stage E --------------------------------------------------------------------
        self._sizes(v2, path_z, in_place_z, target)
        # ---- stage F, and rows delegated to the exact validator ---------------------------
        self._producer_state()
        return self._table()

    def _structural(self, v2: np.ndarray, partial_reader: np.ndarray) -> None:
        """3.D.3: what the reader the broker uses finds, as the decoder stored it: the full
        reader's check (``decode_check``) or, for compressed batches appended in place, the
        lenient reader's (``inplace_check``), with their parameters."""
        cas, b = self.cas, self.batches
        in_place = partial_reader & (self.codec != 0)
        full = b["decode_check"].to_numpy(zero_copy_only=False)
        lenient = b["inplace_check"].to_numpy(zero_copy_only=False)
        found = np.where(in_place, lenient, full)
        has = np.array([c is not None for c in found.tolist()], dtype=bool) & v2
        kind = b["decode_kind"].to_numpy(zero_copy_only=False)
        cas.undetermined(v2 & self.decode_found & (kind == "unstructured"),
                         "batches table written before kqlab kept decode findings as data "
                         "(re-read the batch, or pass raw=)")
        # the full reader stops early but the lenient one reads every record: the broker reads
        # them in place, and the records table does not hold them all
        cas.undetermined(v2 & in_place & pc.is_valid(b["decode_check"]).to_numpy(
            zero_copy_only=False) & ~has, "compressed batch read in place by the broker's "
            "lenient reader, which reads records the decoder's full reader could not")
        rows = cas.open(has)
        if not len(rows):
            return
        params_col = pa.chunked_array([
            b["inplace_params"].combine_chunks().take(pa.array(rows)),
            b["decode_params"].combine_chunks().take(pa.array(rows))])
        picked = [ip if use else dp for use, ip, dp in zip(
            in_place[rows].tolist(), params_col.chunk(0).to_pylist(),
            params_col.chunk(1).to_pylist(), strict=True)]
        ids = found[rows]
        for cid in dict.fromkeys(ids.tolist()):  # one decision per check (few rows)
            check = CHECKS[cid]
            sel = rows[ids == cid]
            mask = np.zeros(self.n, dtype=bool)
            mask[sel] = True
            values: dict[str, np.ndarray] = {}
            for j, r in zip(np.flatnonzero(ids == cid).tolist(), sel.tolist(), strict=True):
                for k, v in picked[j] or []:
                    values.setdefault(k, np.full(self.n, None, dtype=object))[r] = v
            cas.by(mask, check, dict(values))

    def _record_checks(self, v2: np.ndarray) -> None:
        cas, cfg, tp = self.cas, self.cfg, self.tp
        stage_r = v2 & ~cas.decided
        if cfg.release.before_after_timestamps:
            r4 = not cfg.log_append_time and not (cfg.before_max_ms == LONG_MAX
                                                  and cfg.after_max_ms == LONG_MAX)
        else:
            r4 = not cfg.log_append_time and cfg.difference_max_ms != LONG_MAX
        if r4:
            # the table holds maxTimestamp for LogAppendTime-flagged batches' records
            cas.undetermined(stage_r & self.lat, "LogAppendTime-flagged batch on a CreateTime "
                                                 "topic: its records' own timestamps are needed")
            stage_r = v2 & ~cas.decided
        if not (cfg.compacted or r4 or self.pmask.any()) or not stage_r.any():
            return
        recs = self.records
        nrec = recs.num_rows
        rec_batch = self.rec_batch
        active = np.repeat(stage_r, self.n_r)
        err3 = np.zeros(nrec, dtype=bool)
        if cfg.compacted:
            err3 = active & recs["key"].is_null().to_numpy(zero_copy_only=False)
        err4 = np.zeros(nrec, dtype=bool)
        now = self.now
        if r4:
            ts = _np(recs, "timestamp", 0, np.int64)
            lo, hi = rchecks.timestamp_bounds(now, cfg)
            err4 = active & rchecks.timestamp_out_of_range(ts, now, cfg) & ~err3
        # the record policy, after R3/R4 and only for records without an earlier error
        profile = self.policy.profile if self.policy is not None else "kip-940"
        errp = active & self.pmask & ~err3 & ~err4
        if profile == "kip-729":  # validators never see records of batches kept in place
            errp &= ~np.repeat(self.partial_reader & (self.codec != 0), self.n_r)
        if profile == "kip-686":
            p686, errp = errp, np.zeros(nrec, dtype=bool)
        errs = err3 | err4 | errp
        eidx = np.flatnonzero(errs)
        if profile == "kip-686" and p686.any():
            self._kip686 = (p686, rec_batch)
        if not len(eidx):
            self._decide_kip686()
            return
        eb = rec_batch[eidx]
        n_err = np.bincount(eb, minlength=self.n)
        e4 = np.flatnonzero(err4)
        ep = np.flatnonzero(errp)
        n_r4 = np.bincount(rec_batch[e4], minlength=self.n)
        n_p = np.bincount(rec_batch[ep], minlength=self.n)
        n_r3 = n_err - n_r4 - n_p
        bidx = _np(recs, "batch_index", 0, np.int32)[eidx]
        # each record error: the check that found it, the rule (policy errors), the check's
        # parameters, and its text rendered from them (R3, R4) or the policy's own message
        e3 = np.flatnonzero(err3)
        pieces: list[pa.Array] = [pa.repeat(pa.scalar(rchecks.R3.render(tp=tp)), len(e3))]
        params: list[ParamsPart] = []
        at = np.searchsorted(eidx, np.concatenate([e3, e4, ep]))
        params.append((at[:len(e3)], {"tp": tp}))
        if len(e4):
            with np.errstate(over="ignore"):
                odelta = (_np(recs, "offset", 0, np.int64)[e4]
                          - _np(recs, "batch_offset", 0, np.int64)[e4])
            r4_params = {"timestamp": ts[e4], "offset": odelta, "lower": lo, "upper": hi}
            pieces.append(rchecks.R4.render_array(r4_params))
            params.append((at[len(e3):len(e3) + len(e4)], r4_params))
        rules: pa.Array = pa.nulls(len(e3) + len(e4), pa.string())
        if len(ep):
            assert self.parr is not None
            pieces.append(self.parr.take(pa.array(ep)))
            rules = pa.concat_arrays([rules, _strings(self.prules.take(pa.array(ep)))
                                      if self.prules is not None else
                                      pa.nulls(len(ep), pa.string())])
        inv = np.empty(len(eidx), dtype=np.int64)
        inv[at] = np.arange(len(eidx))
        take = pa.array(inv)
        msgs = pa.concat_arrays([p.cast(pa.string()) for p in pieces]).take(take)
        checks = pa.array(np.repeat(np.array([rchecks.R3.id, rchecks.R4.id, rchecks.P.id],
                                             dtype=object), [len(e3), len(e4), len(ep)]),
                          pa.string()).take(take)
        offsets = np.zeros(self.n + 1, dtype=np.int32)
        np.cumsum(n_err, out=offsets[1:])
        struct = pa.StructArray.from_arrays(
            [pa.array(bidx, pa.int32()), msgs, checks, rules.take(take),
             params_column(len(eidx), params)], fields=list(RECORD_ERROR_TYPE.value_type))
        self.rec_errors = pa.ListArray.from_arrays(pa.array(offsets), struct,
                                                   type=RECORD_ERROR_TYPE)
        failing = n_err > 0
        labels = _CHECK_LABELS[(n_p > 0) * 4 + (n_r3 > 0) * 2 + (n_r4 > 0)]
        ts_fail = failing & (n_r4 > 0)
        idx = cas.decide(ts_fail, 32, "R4", INVALID_TIMESTAMP_MESSAGE, INVALID_TIMESTAMP_MESSAGE)
        cas.check[idx] = labels[idx]
        rendered = aggregate.render_error_lists(n_err, offsets, bidx, msgs, cas.open(failing))
        idx = cas.decide(failing, 87, "R3", rendered, rendered)
        cas.check[idx] = labels[idx]
        self._decide_kip686()

    def _decide_kip686(self) -> None:
        """KIP-686: a batch with no broker record error but a policy failure: 44 for the batch."""
        pending = self._kip686
        if pending is None:
            return
        p686, rec_batch = pending
        self._kip686 = None
        assert self.parr is not None
        # the first policy failure of each batch (records are in batch order)
        r = np.flatnonzero(p686)
        b = rec_batch[r]
        first = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))
        rows = b[first]
        texts = np.full(self.n, None, dtype=object)
        texts[rows] = self.parr.take(pa.array(r[first])).to_numpy(zero_copy_only=False)
        mask = np.zeros(self.n, dtype=bool)
        mask[rows] = True
        idx = self.cas.decide(mask, 44, rchecks.P_BATCH.step, texts, texts)
        # the KIP-686 verdict names its first failing record (and rule) as data
        where = np.zeros(self.n, dtype=np.int64)
        where[rows] = r[first]
        pick = pa.array(where[idx])
        bidx = self.records["batch_index"].take(pick).to_numpy(zero_copy_only=False)
        vals: dict[str, object] = {"batch_index": np.asarray(bidx, dtype=np.int64)}
        if self.prules is not None:
            vals["rule"] = _strings(self.prules.take(pick))
        self.cas.params.append((idx, vals))

    def _sizes(self, v2: np.ndarray, path_z: np.ndarray, in_place_z: np.ndarray,
               target: np.ndarray) -> None:
        cas, cfg, tp = self.cas, self.cfg, self.tp
        mmb, seg = cfg.max_message_bytes, cfg.segment_bytes
        stage_e = v2 & ~cas.decided
        if not stage_e.any():
            return
        path_x = ~path_z & (cfg.to_magic != 2)
        rebuilt = stage_e & (path_x | (path_z & ~in_place_z))
        check_offsets = stage_e & path_z & in_place_z
        starts = np.zeros(self.n, dtype=np.int64)
        np.cumsum(self.n_r[:-1], out=starts[1:])
        if check_offsets.any():
            # in place only while every record's offset delta is its position (3.D.0)
            recs = self.records
            with np.errstate(over="ignore"):
                delta = _np(recs, "offset", 0, np.int64) - _np(recs, "batch_offset", 0, np.int64)
            moved = (delta != _np(recs, "batch_index", 0, np.int64)) & \
                np.repeat(check_offsets, self.n_r)
            moved_b = np.bincount(self.rec_batch[moved], minlength=self.n) > 0
            # read in place by the partial reader, the batch cannot be rebuilt (D3.rebuild);
            # an uncompressed control batch (full records) is
            cas.by(check_offsets & moved_b & (self.codec != 0), D3_REBUILD)
            rebuilt |= check_offsets & moved_b & (self.codec == 0)
        size = self.size
        cas.by(stage_e & ~rebuilt & (size > seg), E2, {"size": size, "tp": tp,
                                                       "segment_bytes": seg})
        if not rebuilt.any():
            return
        # PartitionValidator._rebuilt_size: skip when records + 10 % + framing fits both limits
        usize = np.where(self.codec == 0, size - _V2_MIN, 0).astype(np.float64)
        comp = rebuilt & (self.codec != 0)
        if comp.any():
            usize += self._uncompressed_upper_bound(comp)
        limit = min(mmb, seg)
        # int(x * 1.1) as Python computes it (x >= 0: truncation is the floor)
        fits = _V2_MIN + np.trunc(usize * 1.1) + 1024 <= limit
        for i in np.flatnonzero(rebuilt & ~fits).tolist():
            n = self._rebuilt_size(int(starts[i]), int(self.n_r[i]), Codec(int(target[i])))
            one = np.zeros(self.n, dtype=bool)
            one[i] = True
            if n > mmb:
                cas.by(one, E1, {"size": n, "tp": tp, "max_message_bytes": mmb})
            elif n > seg:
                cas.by(one, E2, {"size": n, "tp": tp, "segment_bytes": seg})

    def _uncompressed_upper_bound(self, which: np.ndarray) -> np.ndarray:
        """Per batch, at least the decompressed records' length (varints at their widest)."""
        recs = self.records
        rec_batch = self.rec_batch
        per = 41 + pc.binary_length(pc.fill_null(recs["key"], b"")).to_numpy().astype(np.int64)
        per += pc.binary_length(pc.fill_null(recs["value"], b"")).to_numpy().astype(np.int64)
        headers = recs["headers"].combine_chunks()
        hcount = pc.list_value_length(headers).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = headers.flatten()
        if len(flat):
            hk = pc.binary_length(flat.field("key").cast(pa.binary())).to_numpy(
                zero_copy_only=False)
            hv = pc.binary_length(pc.fill_null(flat.field("value"), b"")).to_numpy(
                zero_copy_only=False)
            owner = np.repeat(np.arange(len(hcount)), hcount)
            per += np.bincount(owner, weights=10 + hk + hv,
                               minlength=len(hcount)).astype(np.int64)
        out = np.bincount(rec_batch, weights=per, minlength=self.n)
        return np.where(which, out, 0)

    def _rebuilt_size(self, start: int, n: int, target: Codec) -> int:
        from kqlab.kafka.builder import BatchBuilder, Record

        builder = BatchBuilder(codec=target)
        for row in self.records.slice(start, n).to_pylist():
            builder.append(Record(value=row["value"], key=row["key"],
                                  headers=tuple((h["key"], h["value"]) for h in row["headers"]),
                                  timestamp=row["timestamp"]))
        return len(builder.build())

    def _producer_state(self) -> None:
        """Stage F in log order, plus the delegated rows (they share state and offsets)."""
        cas, v = self.cas, self.v
        pm = v.producers
        undet = cas.decided & (cas.code == _UNDET)
        pass_f = self.v2 & ~cas.decided
        has_pid = self.pid > -1
        ev_f = pass_f & has_pid
        acc_plain = pass_f & ~has_pid
        rejected = self.v2 & cas.decided & (cas.code != 0) & ~undet & has_pid
        events_mask = ev_f | undet
        if v.resync:
            events_mask |= rejected
        events = np.flatnonzero(events_mask).tolist()
        if not events:
            return
        plain_cnt = np.where(acc_plain, self.count, 0)
        before = np.cumsum(plain_cnt) - plain_cnt
        plain_first = int(np.argmax(acc_plain)) if acc_plain.any() else self.n
        # per-event values as plain Python lists
        ev = np.asarray(events)
        pid_l = self.pid[ev].tolist()
        epoch_l = self.epoch[ev].tolist()
        seq_l = self.seq[ev].tolist()
        ld_l = self.last_delta[ev].tolist()
        cnt_l = self.count[ev].tolist()
        bo_l = self.batch_offset[ev].tolist()
        maxts_l = self.max_ts[ev].tolist()
        ctrl_l = self.control[ev].tolist()
        txn_l = self.transactional[ev].tolist()
        corig_l = self.ctrl_origin[ev].tolist()
        kind_l = np.where(ev_f[ev], 0, np.where(undet[ev], 2, 1)).tolist()
        before_l = before[ev].tolist()
        # each control row's end-transaction marker (its first record), parsed at once;
        # a control row without records has none (the broker skips it)
        markers: dict[int, EndTxnMarker | MalformedMarker] = {}
        crow = ev[self.control[ev] & ev_f[ev] & (self.n_r[ev] > 0)]
        if len(crow):
            first_rec = pa.array((np.cumsum(self.n_r) - self.n_r)[crow])
            cols = parse_end_txn_markers(self.records["key"].take(first_rec),
                                         self.records["value"].take(first_rec))
            markers = {r: cols.marker(j) for j, r in enumerate(crow.tolist())}
        first_offset = v.next_offset  # the caller's first_offset, or None
        acc = 0  # records appended by event rows so far
        ev_first: int | None = None  # index of the first appended event row
        ev_first_start = 0
        tainted: set[int] = set()
        code, check, detail = cas.code, cas.check, cas.detail
        find_duplicate, check_state, append = pm.find_duplicate, pm.check, pm.append
        meta_type, resync = BatchMetadata, v.resync
        for k, i in enumerate(events):
            kind = kind_l[k]
            pid = pid_l[k]
            if kind == 1:  # rejected before stage F: the client re-sequences (resync)
                pm.resync(pid)
                continue
            # the partition's next offset before this batch
            if first_offset is not None:
                start: int | None = first_offset
            elif plain_first < i and (ev_first is None or plain_first < ev_first):
                start = int(self.batch_offset[plain_first])
            elif ev_first is not None:
                start = ev_first_start
            else:
                start = None
            next_offset = None if start is None else start + before_l[k] + acc
            if kind == 2:
                if self.raw is None:
                    if self.v2[i] and pid > -1:
                        tainted.add(pid)
                    continue
                v.next_offset = next_offset
                out = v.validate(bytes(self.raw[i]), position=self.positions[i].as_py(),
                                 policy=self._batch_policy(i))
                self.delegated[i] = out
                if out.error_code == 0 and not out.duplicate:
                    assert v.next_offset is not None  # set by the append just judged
                    n = v.next_offset - out.base_offset
                    if ev_first is None:
                        ev_first, ev_first_start = i, out.base_offset
                    acc += n
                continue
            if pid in tainted:
                code[i], check[i] = _UNDET, UNDETERMINED
                detail[i] = "producer state depends on an undetermined earlier batch"
                continue
            base = bo_l[k] if next_offset is None else next_offset
            epoch, base_seq, control = epoch_l[k], seq_l[k], ctrl_l[k]
            last_seq = increment_sequence(base_seq, ld_l[k]) if base_seq != -1 else -1
            if not control:
                dup = find_duplicate(pid, epoch, base_seq, last_seq)
                if dup is not None:
                    check[i], detail[i] = F1.step, F1.render()
                    cas.params.append((np.array([i]), {}))
                    continue
            marker = markers.get(i) if control else None
            try:
                check_state(pid=pid, epoch=epoch, first_seq=base_seq, first_offset=base,
                            transactional=txn_l[k], control=control, from_client=not corig_l[k],
                            marker=marker)
            except ProducerCheckError as exc:
                code[i], check[i], detail[i] = exc.code, exc.check, exc.message
                cas.params.append((np.array([i]), exc.params))
                if resync:
                    pm.resync(pid)
                continue
            n = cnt_l[k]
            append(pid=pid, epoch=epoch, transactional=txn_l[k], control=control, marker=marker,
                   meta=meta_type(base_seq, last_seq, base, base + n - 1, maxts_l[k]))
            if ev_first is None:
                ev_first, ev_first_start = i, base
            acc += n

    def _table(self) -> pa.Table:
        cas, n = self.cas, self.n
        code = cas.code
        undet = code == _UNDET
        uniq, inv = np.unique(code, return_inverse=True)
        names = np.array([kerr.error_for_code(c).name if c != _UNDET else None
                          for c in uniq.tolist()], dtype=object)
        error_name = names[inv]
        code_arr = pa.array(code, pa.int16(), mask=undet) if undet.any() else \
            pa.array(code, pa.int16())
        # record_count: the declared count of v2 batches of 61+ bytes (BatchOutcome rules)
        rc = pa.array(self.count, pa.int32(), mask=~self.v2)
        # batch_offset: the batch's first 8 bytes (the wrapper offset for legacy entries)
        legacy = ((self.magic == 0) | (self.magic == 1)) & self.count_known & self.lod_known
        with np.errstate(over="ignore"):
            bo = np.where(legacy, self.batch_offset + self.last_delta, self.batch_offset)
        bo_arr = pa.array(bo, pa.int64(), mask=~self.batches["batch_offset"].is_valid()
                          .to_numpy(zero_copy_only=False))
        rec_errors = self.rec_errors if self.rec_errors is not None else pa.ListArray.from_arrays(
            pa.array(np.zeros(n + 1, dtype=np.int32)),
            pa.array([], RECORD_ERROR_TYPE.value_type), type=RECORD_ERROR_TYPE)
        cols = {
            "topic": pa.repeat(pa.scalar(self.v.topic, pa.string()), n),
            "partition": pa.repeat(pa.scalar(self.v.partition, pa.int32()), n),
            "batch_offset": bo_arr,
            "error_code": code_arr,
            "error_name": pa.array(error_name, pa.string()),
            "error_message": pa.array(cas.message, pa.string()),
            "record_errors": rec_errors,
            "check": pa.array(cas.check, pa.string()),
            "detail": pa.array(cas.detail, pa.string()),
            "record_count": rc,
            "position": self.positions.combine_chunks().cast(pa.int64()),
            "params": params_column(n, cas.params),
        }
        table = pa.table(cols, schema=BATCH_VERDICTS_SCHEMA)
        if self.delegated:
            # rows the byte-level validator judged: its outcomes, in their places
            rows = sorted(self.delegated)
            judged = outcomes_table([self.delegated[i] for i in rows], self.v.topic,
                                    self.v.partition)
            take = np.arange(n, dtype=np.int64)
            take[rows] = n + np.arange(len(rows))
            table = pa.concat_tables([table, judged]).take(pa.array(take))
        return table
