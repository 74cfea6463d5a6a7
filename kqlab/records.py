"""The Arrow contracts every stage exchanges (ARCHITECTURE.md, "Contracts").

``RECORDS_SCHEMA`` has one row per record, ``BATCHES_SCHEMA`` one row per record batch as read
from the wire or a log segment.  The first columns of each are the contract; the columns after
``framing`` are kqlab additions that keep corrupt input visible instead of dropping it (file
``position``, the raw ``attributes`` and stored ``crc``, ``decode_error``) and say, as data,
what reading the batch found (``records_decoded`` and the ``decode_*`` / ``inplace_*``
columns, see :data:`DECODE_COLUMNS` and ``docs/architecture-notes.md``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

RECORDS_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.int64()),
    ("timestamp_type", pa.int8()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", HEADER_TYPE),
    ("batch_offset", pa.int64()),
    ("batch_index", pa.int32()),
])

BATCHES_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("batch_offset", pa.int64()),
    ("last_offset_delta", pa.int32()),
    ("magic", pa.int8()),
    ("compression", pa.string()),
    ("timestamp_type", pa.int8()),
    ("is_transactional", pa.bool_()),
    ("is_control", pa.bool_()),
    ("producer_id", pa.int64()),
    ("producer_epoch", pa.int16()),
    ("base_sequence", pa.int32()),
    ("partition_leader_epoch", pa.int32()),
    ("record_count", pa.int32()),
    ("size_bytes", pa.int64()),
    ("first_timestamp", pa.int64()),
    ("max_timestamp", pa.int64()),
    ("crc_valid", pa.bool_()),
    ("framing", pa.string()),
    # kqlab additions (see module docstring)
    ("position", pa.int64()),
    ("attributes", pa.int16()),
    ("crc", pa.uint32()),
    ("decode_error", pa.string()),
    # what reading the batch found, as data (DECODE_COLUMNS)
    ("records_decoded", pa.int32()),
    ("decode_kind", pa.string()),
    ("decode_check", pa.string()),
    ("decode_params", pa.map_(pa.string(), pa.string())),
    ("inplace_check", pa.string()),
    ("inplace_params", pa.map_(pa.string(), pa.string())),
])

#: The batches table's columns that say what reading a batch found, instead of text:
#:
#: * ``records_decoded``: rows this batch contributed to the records table (the records read
#:   before a problem; the declared count when none);
#: * ``decode_kind``: what failed, null when nothing did: ``scan`` (too short for a magic byte),
#:   ``magic`` (unknown magic), ``header`` (a v2 batch shorter than its header), ``codec_id``
#:   (codec 5-7), ``codec`` (the codec failed), ``records`` (a record-structure error),
#:   ``legacy`` (a v0/v1 entry), ``unstructured`` (a snapshot written before these columns);
#: * ``decode_check`` / ``decode_params``: for v2 batches, the broker check
#:   (:mod:`kqlab.kafka.checks.structure` id) and its parameters for what the broker's full
#:   reader finds: the one it uses for uncompressed batches and for compressed batches it
#:   rebuilds; ``decode_error`` is that finding's text;
#: * ``inplace_check`` / ``inplace_params``: the same for the lenient reader the broker uses on
#:   compressed batches it appends in place (for uncompressed batches, the same as
#:   ``decode_*``); null when that reader reads every declared record.
DECODE_COLUMNS = ("records_decoded", "decode_kind", "decode_check", "decode_params",
                  "inplace_check", "inplace_params")


def conform_batches(batches: pa.Table, records: pa.Table | None = None) -> pa.Table:
    """A batches table in the current ``BATCHES_SCHEMA``: columns a table written before
    :data:`DECODE_COLUMNS` existed (an older snapshot) lacks, or that arrive null, are filled.

    ``records_decoded`` follows the decoder's rule where the other columns fix it (v2 batches of
    61+ bytes with a known codec and nothing wrong: their declared count; legacy entries: their
    messages; undecodable rows: none); a v2 row whose decoding went wrong takes the run of
    records that follows it in the (unfiltered, log-ordered) ``records`` table, numbered from
    batch index 0.  Such rows get ``decode_kind = "unstructured"``: what failed was only kept
    as text, which is never parsed back.
    """
    n = batches.num_rows
    have = set(batches.column_names)
    cols = {name: batches.column(name) for name in batches.column_names}
    missing = [name for name in DECODE_COLUMNS if name not in have]
    if not missing and not batches.column("records_decoded").null_count:
        return batches.select([f.name for f in BATCHES_SCHEMA]).cast(BATCHES_SCHEMA)
    err = pc.is_valid(cols["decode_error"]).to_numpy(zero_copy_only=False)
    if "records_decoded" in have:
        known = pc.is_valid(cols["records_decoded"]).to_numpy(zero_copy_only=False)
        decoded = pc.fill_null(cols["records_decoded"], 0).to_numpy().astype(np.int64)
    else:
        known = np.zeros(n, dtype=bool)
        decoded = np.zeros(n, dtype=np.int64)

    def num(name: str, fill: int) -> np.ndarray:
        return pc.fill_null(cols[name], fill).to_numpy().astype(np.int64)

    magic, size, count = num("magic", -128), num("size_bytes", 0), num("record_count", 0)
    codec = num("attributes", 0) & 0x07
    v2 = (magic == 2) & (size >= 61) & (codec <= 4)
    rule = np.where(v2 | (magic == 0) | (magic == 1), np.maximum(count, 0), 0)
    fix = ~known
    unknown = fix & err & v2  # the v2 rows whose record count only the records table tells
    decoded[fix & ~unknown] = rule[fix & ~unknown]
    if unknown.any():
        if records is None:
            raise ValueError("conform_batches needs the records table to fill "
                             "records_decoded of rows with a decode error")
        rec_bo = pc.fill_null(records.column("batch_offset"), -1).to_numpy()
        rec_bi = pc.fill_null(records.column("batch_index"), -1).to_numpy()
        bo = num("batch_offset", -1)
        before = np.cumsum(decoded) - decoded  # records of the known rows before each row
        extra = 0
        for i in np.flatnonzero(unknown).tolist():  # rare rows, in log order
            pos = int(before[i]) + extra
            cnt = max(int(count[i]), 0)
            run = (rec_bo[pos:pos + cnt] == bo[i]) & (rec_bi[pos:pos + cnt]
                                                      == np.arange(len(rec_bi[pos:pos + cnt])))
            k = len(run) if run.all() else int(np.argmin(run))
            decoded[i] = k
            extra += k
    cols["records_decoded"] = pa.array(decoded, pa.int32())
    # the rows that had no findings as data (absent columns read back null)
    kind = (np.asarray(cols["decode_kind"].to_numpy(zero_copy_only=False), dtype=object)
            if "decode_kind" in have else np.full(n, None, dtype=object))
    kind[fix & err] = "unstructured"
    cols["decode_kind"] = pa.array(kind, pa.string())
    for name in ("decode_check", "inplace_check"):
        if name not in have:
            cols[name] = pa.nulls(n, pa.string())
    for name in ("decode_params", "inplace_params"):
        if name not in have:
            cols[name] = pa.nulls(n, BATCHES_SCHEMA.field(name).type)
    return pa.table([cols[f.name] for f in BATCHES_SCHEMA], schema=BATCHES_SCHEMA)

#: The values a check saw when it decided (its message template's fields), as strings: a
#: verdict's identity is data (ARCHITECTURE.md), its text is rendered from these, never the
#: other way round.
PARAMS_TYPE = pa.map_(pa.string(), pa.string())

#: Batch verdicts (one row per batch).  ``check`` (the spec step that decided, e.g. ``"C3"``),
#: ``detail`` (the broker's internal exception text, logged but never sent to the client) and
#: ``params`` (what the deciding check saw) are kqlab additions; ``error_message`` is exactly
#: what the client receives.  Each record error is KIP-467's ``(batch_index, message)`` plus
#: its identity: the check id that found it (``R3``, ``R4``, ``R4/type``, ``P`` ...), the
#: policy rule (for ``P``) and the check's parameters.
RECORD_ERROR_TYPE = pa.list_(pa.struct([
    ("batch_index", pa.int32()), ("message", pa.string()), ("check", pa.string()),
    ("rule", pa.string()), ("params", PARAMS_TYPE)]))

BATCH_VERDICTS_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("batch_offset", pa.int64()),
    ("error_code", pa.int16()),
    ("error_name", pa.string()),
    ("error_message", pa.string()),
    ("record_errors", RECORD_ERROR_TYPE),
    ("check", pa.string()),
    ("detail", pa.string()),
    ("record_count", pa.int32()),
    ("position", pa.int64()),
    ("params", PARAMS_TYPE),
])

