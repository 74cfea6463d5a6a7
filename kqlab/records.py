"""The Arrow contracts every stage exchanges (ARCHITECTURE.md, "Contracts").

``RECORDS_SCHEMA`` has one row per record, ``BATCHES_SCHEMA`` one row per record batch as read
from the wire or a log segment.  The first columns of each are the contract; the columns after
``framing`` are kqlab additions that keep corrupt input visible instead of dropping it (file
``position``, the raw ``attributes`` and stored ``crc``, and ``decode_error``).
"""

from __future__ import annotations

import pyarrow as pa

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
])

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

