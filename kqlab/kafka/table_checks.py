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
from typing import Any

import numpy as np
import pyarrow as pa

from kqlab.kafka import errors as kerr
from kqlab.kafka.checks._check import params_column
from kqlab.kafka.checks.append import C2, C3, C4
from kqlab.kafka.checks.header import D2_B, D2_C, D2_D, D2_E, D2_F, D2_G, D2_H, Z0
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
)
from kqlab.kafka.compression import Codec
from kqlab.kafka.configs import TopicConfig
from kqlab.kafka.table_cascade import (
    UNDET_CODE,
    UNDETERMINED,
    V2_MIN,
)
from kqlab.kafka.table_inputs import (
    RecordPolicy,
    policy_by_batch,
    records_per_batch,
)
from kqlab.kafka.table_producers import ProducerStage
from kqlab.kafka.table_records import RecordStage
from kqlab.kafka.table_sizes import SizeStage
from kqlab.kafka.validator import (
    INTERNAL_TOPICS,
    PartitionValidator,
    outcomes_table,
)
from kqlab.records import BATCH_VERDICTS_SCHEMA, RECORD_ERROR_TYPE

__all__ = [
    "UNDETERMINED", "RecordPolicy", "broker_verdicts", "policy_by_batch", "records_per_batch",
]


def broker_verdicts(records: pa.Table, batches: pa.Table,
                    config: TopicConfig | dict[str, Any] | None = None, *,
                    broker_version: str | None = None, now: int, source: str = "log",
                    topic: str | None = None, partition: int | None = None,
                    raw: Sequence[bytes] | None = None, produce_version: int = 9,
                    acks: int = -1, client_id: str = "kqlab",
                    transactional_id_authorized: bool = True, origin: str = "client",
                    first_offset: int | None = None, resync: bool | None = None,
                    policy: RecordPolicy | None = None,
                    marker_transaction_version: int | None = None,
                    validator: PartitionValidator | None = None) -> pa.Table:
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

    ``validator`` continues a partition judged in pieces: the tables are the next batches of
    the partition that ``validator`` (a :class:`PartitionValidator` returned in an earlier
    call's ``validator``, or made for it) has judged so far — its producer state and next
    offset carry over, so judging a partition chunk by chunk gives exactly the verdicts of
    one call over all of it.  The request parameters are then the validator's own.

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
    if validator is not None:
        cfg, source, produce_version = validator.config, validator.source, \
            validator.produce_version
        topic, partition = validator.topic, validator.partition
    else:
        cfg = config if isinstance(config, TopicConfig) else TopicConfig.from_dict(
            config, broker_version)
        validator = PartitionValidator(
            topic, partition, cfg, now=now, source=source, produce_version=produce_version,
            acks=acks, client_id=client_id,
            transactional_id_authorized=transactional_id_authorized, origin=origin,
            first_offset=first_offset, resync=resync,
            marker_transaction_version=marker_transaction_version)
    if raw is not None and len(raw) != nb:
        raise ValueError(f"raw has {len(raw)} batches but the batches table {nb} rows")
    if source != "log" or produce_version < 3:
        if raw is None:
            raise ValueError("broker_verdicts judges source='log' with produce_version >= 3 "
                             "from the tables; pass raw= (the batches' bytes) for other cases")
        per_batch = policy_by_batch(records, batches, policy)
        positions = batches["position"].to_pylist()
        outs = [validator.validate(bytes(b), position=p, policy=per_batch[i])
                for i, (b, p) in enumerate(zip(raw, positions, strict=True))]
        return outcomes_table(outs, topic, partition)
    return _Verdicts(records, batches, cfg, validator, now, raw, policy).run()


class _Verdicts(RecordStage, SizeStage, ProducerStage):
    """One call of :func:`broker_verdicts`: the procedure in the broker's order."""

    def run(self) -> pa.Table:
        cas, cfg, tp, v = self.cas, self.cfg, self.tp, self.v
        pv = v.produce_version
        magic, size, codec = self.magic, self.size, self.codec
        is_v2 = magic == 2
        short_v2 = is_v2 & (size < V2_MIN)
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

    def _table(self) -> pa.Table:
        cas, n = self.cas, self.n
        code = cas.code
        undet = code == UNDET_CODE
        uniq, inv = np.unique(code, return_inverse=True)
        names = np.array([kerr.error_for_code(c).name if c != UNDET_CODE else None
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
