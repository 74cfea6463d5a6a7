"""Vectorised encoding of magic v2 record batches from a records table (no per-record Python).

:class:`~kqlab.kafka.builder.BatchBuilder` encodes one record at a time, which is right for
fixtures and malformed test batches but costs tens of microseconds per record.  Rebuilding the
framing of a whole sample (:func:`kqlab.validate.framing.reconstruct_framing`) needs producer-like
batches for every record, so this module writes the same bytes column by column:

* the small fields (length prefixes, zig-zag varints and varlongs) of all rows at once, as a
  ``[rows, width]`` uint8 matrix plus byte counts, packed into an Arrow binary array;
* keys, values, header keys and header values are never copied by Python: Arrow's
  ``binary_join_element_wise`` assembles each header entry, then each record, from those
  columns; as entries and records come out back to back, a record's headers and a batch's
  records are contiguous ranges of the joined buffer (regrouped by offsets, not copied);
* the 61-byte batch headers come from a big-endian numpy structured array, joined in front
  of each batch's first record (every size is known before any byte is assembled), so one
  join writes every batch whole; the CRC-32C is then one C call per batch over a view of that
  buffer, patched in place.

The result is byte for byte what ``BatchBuilder`` writes for the same records (base offset 0,
base timestamp = the first record's, CreateTime, no compression, no producer id), and the
batches-table rows are computed from what the encoder already knows instead of decoding the
bytes again.  Offsets everywhere are 64-bit (large binary/list types), so a sample bigger than
2 GiB encodes too; only a single batch is bounded (its length field is an int32).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    V2_HEADER,
    codec_label,
    decode_batches,
)
from kqlab.kafka.compression import Codec
from kqlab.kafka.records_parser import crc32c
from kqlab.records import BATCHES_SCHEMA

#: The v2 batch header as numpy writes it (spec §1.2), the layout of ``V2_HEADER``.
HEADER_DTYPE = np.dtype([
    ("base_offset", ">i8"), ("batch_length", ">i4"), ("partition_leader_epoch", ">i4"),
    ("magic", "i1"), ("crc", ">u4"), ("attributes", ">i2"), ("last_offset_delta", ">i4"),
    ("base_timestamp", ">i8"), ("max_timestamp", ">i8"), ("producer_id", ">i8"),
    ("producer_epoch", ">i2"), ("base_sequence", ">i4"), ("records_count", ">i4"),
])
assert HEADER_DTYPE.itemsize == V2_HEADER.size == RECORD_BATCH_OVERHEAD

_INT32_MAX = 2**31 - 1
_EMPTY = pa.scalar(b"", pa.large_binary())
_SHIFTS = np.arange(10, dtype=np.uint64) * np.uint64(7)
_LIMITS = np.uint64(1) << _SHIFTS  # a varint needs byte k when the value is >= 2^(7k)

# the byte matrix of one small field: [rows, width] uint8 and the bytes used per row
_Bytes = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class EncodedBatches:
    """Batches encoded back to back: ``data[bounds[i]:bounds[i + 1]]`` is batch ``i``."""

    data: np.ndarray  # uint8, every batch's bytes in batch order
    bounds: np.ndarray  # int64, len = batches + 1
    batches: pa.Table  # BATCHES_SCHEMA, one row per batch

    def raw(self) -> list[bytes]:
        """Each batch's bytes as its own ``bytes`` object (what a :class:`Sample` carries)."""
        view = self.data.data  # a memoryview: slices are views, tobytes copies once
        b = self.bounds.tolist()
        return [view[s:e].tobytes() for s, e in pairwise(b)]


# -- small fields, a whole column at a time ------------------------------------------------------

def _zigzag(values: np.ndarray) -> np.ndarray:
    """Zig-zag of int64 values as uint64 (for int32 values the result fits 32 bits, as
    ``ByteUtils.writeVarint`` sees it)."""
    v = values.astype(np.int64, copy=False)
    return (v.view(np.uint64) << np.uint64(1)) ^ (v >> np.int64(63)).view(np.uint64)


def _varint(values: np.ndarray, width: int) -> _Bytes:
    """LEB128 bytes of zig-zagged ``values`` (``width`` 5 for varints, 10 for varlongs): a
    matrix only as wide as the longest encoding, and each row's byte count."""
    u = _zigzag(values)
    lens = np.ones(len(u), dtype=np.int64)
    for k in range(1, width):
        more = u >= _LIMITS[k]
        if not more.any():
            break
        lens += more
    used = int(lens.max()) if len(lens) else 1
    groups = (u[:, None] >> _SHIFTS[:used]) & np.uint64(0x7F)
    if used > 1:  # the continuation bit on all but each row's last byte
        groups[:, :-1] |= (np.arange(used - 1) < (lens - 1)[:, None]).astype(np.uint64) << 7
    return groups.astype(np.uint8), lens


def _pack(parts: Sequence[_Bytes]) -> pa.Array:
    """Concatenate small per-row byte strings row by row, as a large binary array.

    Byte column ``c`` of a part lands at its row's cursor + ``c`` for the rows that use it
    (every row uses the first), so each write is one 1-D scatter.
    """
    total = np.zeros(len(parts[0][1]), dtype=np.int64)
    for _, lens in parts:
        total += lens
    flat = np.empty(int(total.sum()), dtype=np.uint8)
    cursor = np.zeros(len(total), dtype=np.int64)
    np.cumsum(total[:-1], out=cursor[1:])
    for mat, lens in parts:
        flat[cursor] = mat[:, 0]
        for c in range(1, mat.shape[1]):
            used = lens > c
            flat[cursor[used] + c] = mat[used, c]
        cursor += lens
    return _large_binary(flat, total)


def _large_binary(data: np.ndarray, lengths: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary(), len(lengths),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _offsets(arr: pa.Array) -> np.ndarray:
    """The int64 offsets of a large binary array (a view)."""
    return np.frombuffer(arr.buffers()[1], dtype=np.int64, count=len(arr) + 1,
                         offset=arr.offset * 8)


def _regroup(items: pa.Array, bounds: np.ndarray) -> pa.Array:
    """``items[bounds[i]:bounds[i + 1]]`` joined, for every ``i``: the same bytes, fewer and
    longer elements (no copy: items of a large binary array are back to back)."""
    return pa.Array.from_buffers(pa.large_binary(), len(bounds) - 1, [
        None, pa.py_buffer(np.ascontiguousarray(_offsets(items)[bounds])), items.buffers()[2]])


def _bytes_column(column: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A binary column as large binary without nulls (a null is empty) and its lengths
    (-1 = null).  The data buffer is shared, not copied: only the offsets are widened."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_large_binary(arr.type) or pa.types.is_binary(arr.type):
        width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
        offsets = np.frombuffer(arr.buffers()[1], dtype=width, count=len(arr) + 1,
                                offset=arr.offset * np.dtype(width).itemsize)
        lens = np.diff(offsets).astype(np.int64)
        data = arr.buffers()[2] or pa.py_buffer(b"")
        if arr.null_count:
            null = ~pc.is_valid(arr).to_numpy(zero_copy_only=False)
            if lens[null].any():  # a null slot that spans bytes: copy, dropping them
                arr = pc.fill_null(arr, pa.scalar(b"", arr.type))
                return _bytes_column(arr)[0], np.where(null, -1, lens)
            lens[null] = -1
        return pa.Array.from_buffers(pa.large_binary(), len(arr), [
            None, pa.py_buffer(offsets.astype(np.int64)), data]), lens
    return _bytes_column(arr.cast(pa.large_binary()))


def _as_binary(strings: pa.Array) -> pa.Array:
    """The UTF-8 bytes of a string array, without copying (the layouts are the same)."""
    if pa.types.is_string(strings.type):
        return strings.view(pa.binary())
    if pa.types.is_large_string(strings.type):
        return strings.view(pa.large_binary())
    return strings.cast(pa.large_binary())


# -- records and headers ----------------------------------------------------------------------

def _headers(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """Per record: the header count, the encoded headers (entries back to back) and their size.

    A null header list encodes as no headers; a null header or header key cannot be encoded
    (``BatchBuilder`` fails on them too) and raises ``ValueError``.
    """
    lists = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(lists)
    counts = pc.fill_null(pc.list_value_length(lists), 0).to_numpy().astype(np.int64)
    entries = lists.flatten()  # respects slicing and skips null lists
    if len(entries) == 0:
        none = np.zeros(n, np.int64)
        return counts, _large_binary(np.zeros(0, np.uint8), none), none
    if entries.null_count:
        raise ValueError("a record has a null header: only its value may be null")
    hkey, hvalue = entries.flatten()
    if hkey.null_count:
        raise ValueError("a record has a header with a null key: only its value may be null")
    key_bytes, klen = _bytes_column(_as_binary(hkey))  # header keys are written as UTF-8
    value_bytes, vlen = _bytes_column(hvalue)
    entry = pc.binary_join_element_wise(_pack([_varint(klen, 5)]), key_bytes,
                                        _pack([_varint(vlen, 5)]), value_bytes, _EMPTY)
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    joined = _regroup(entry, bounds)
    return counts, joined, np.diff(_offsets(joined))


# -- batches ------------------------------------------------------------------------------------

def _starts(starts: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    s = np.asarray(starts, dtype=np.int64)
    if n == 0:
        if len(s):
            raise ValueError("batch starts given for an empty records table")
        return s
    if not len(s) or s[0] != 0 or (np.diff(s) <= 0).any() or s[-1] >= n:
        raise ValueError("batch starts must be increasing row indexes beginning at 0")
    return s


def encode_batches(records: pa.Table, starts: Sequence[int] | np.ndarray, *,
                   framing: str = "reconstructed") -> EncodedBatches:
    """Encode ``records`` (``RECORDS_SCHEMA`` columns, in batch order) as v2 batches.

    Batch ``i`` holds rows ``starts[i]`` up to the next start (``starts`` begins at 0 and
    increases).  The bytes are those of ``BatchBuilder(base_timestamp=<the batch's first
    timestamp>)`` with one ``Record(key, value, timestamp, headers)`` per row: base offset 0,
    CreateTime, uncompressed, no producer id, offset deltas 0.., so a broker sees them as a
    non-idempotent producer sends them.  The batches table describes each batch with the
    ``topic``, ``partition`` and ``offset`` of its first row (``batch_offset``: the records
    keep their offsets) and ``framing``; its other columns are what decoding those bytes gives.

    Raises ``ValueError`` for what ``BatchBuilder`` cannot encode either: a null timestamp
    (it would take the current time), a null header or header key, a batch over 2 GiB.
    """
    n = records.num_rows
    s = _starts(starts, n)
    m = len(s)
    if m == 0:
        none = np.zeros(0, np.int64)
        table = _batches_table(records, s, framing, none, none, none, none,
                               np.zeros(0, np.uint32))
        return EncodedBatches(np.zeros(0, np.uint8), np.zeros(1, np.int64),
                              BATCHES_SCHEMA.empty_table() if table is None else table)
    ts_col = records.column("timestamp")
    if ts_col.null_count:
        raise ValueError("records without a timestamp cannot be framed: BatchBuilder would "
                         "stamp them with the current time")
    ts = ts_col.to_numpy().astype(np.int64)
    count = np.diff(np.append(s, n))
    which = np.repeat(np.arange(m), count)
    # -- every record's fields and size (DefaultRecord.writeTo), before any byte is assembled
    key, klen = _bytes_column(records.column("key"))
    value, vlen = _bytes_column(records.column("value"))
    hcount, hblob, hsize = _headers(records.column("headers"))
    ts_v = _varint(ts - ts[s][which], 10)  # the delta wraps like Java's long arithmetic
    off_v = _varint(np.arange(n, dtype=np.int64) - s[which], 5)
    klen_v, vlen_v, hcount_v = _varint(klen, 5), _varint(vlen, 5), _varint(hcount, 5)
    body = (1 + ts_v[1] + off_v[1] + klen_v[1] + np.maximum(klen, 0) + vlen_v[1]
            + np.maximum(vlen, 0) + hcount_v[1] + hsize)
    length_v = _varint(body, 5)
    sizes = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(length_v[1] + body, out=sizes[1:])
    region_size = sizes[np.append(s[1:], n)] - sizes[s]
    batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + region_size
    if batch_length.max() > _INT32_MAX:
        raise ValueError("a batch would be longer than 2^31 - 1 bytes")
    # -- the batch headers (CRC later), written before each batch's first record
    first_ts = ts[s]
    max_ts = np.maximum.reduceat(ts, s)
    header = np.zeros(m, dtype=HEADER_DTYPE)
    header["batch_length"] = batch_length
    header["partition_leader_epoch"] = -1
    header["magic"] = 2
    header["last_offset_delta"] = count - 1
    header["base_timestamp"] = first_ts
    header["max_timestamp"] = max_ts
    header["producer_id"] = -1
    header["producer_epoch"] = -1
    header["base_sequence"] = -1
    header["records_count"] = count
    opens = np.zeros(n, dtype=np.int64)
    opens[s] = RECORD_BATCH_OVERHEAD
    heads = _large_binary(header.view(np.uint8), opens)  # empty but before a batch's first
    attributes = (np.zeros((n, 1), dtype=np.uint8), np.ones(n, dtype=np.int64))
    prefix = _pack([length_v, attributes, ts_v, off_v, klen_v])
    joined = pc.binary_join_element_wise(heads, prefix, key, _pack([vlen_v]), value,
                                         _pack([hcount_v]), hblob, _EMPTY)
    # -- the batches are back to back in the joined buffer: checksum each, in a writable copy
    bounds = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(batch_length + LOG_OVERHEAD, out=bounds[1:])
    offsets = _offsets(joined)
    data = np.frombuffer(joined.buffers()[2], dtype=np.uint8, count=int(offsets[-1]),
                         offset=int(offsets[0])).copy()
    assert len(data) == bounds[-1]
    view = data.data
    crc = np.fromiter((crc32c(view[p + ATTRIBUTES_OFFSET:e])
                       for p, e in pairwise(bounds.tolist())), dtype=np.uint32, count=m)
    data[bounds[:-1, None] + (CRC_OFFSET + np.arange(4))] = \
        crc.astype(">u4").view(np.uint8).reshape(m, 4)
    table = _batches_table(records, s, framing, count, region_size, first_ts, max_ts, crc)
    if table is None:  # BATCHES_SCHEMA has a column this module does not know yet
        table = _decoded_table(records, s, framing, EncodedBatches(
            data, bounds, BATCHES_SCHEMA.empty_table()))
    return EncodedBatches(data, bounds, table)


#: Batches-table columns that are the same for every rebuilt batch (well formed, uncompressed,
#: CreateTime, non-idempotent, in no file, read whole: kqlab.records.DECODE_COLUMNS all clear).
_CONSTANT_COLUMNS: dict[str, object] = {
    "magic": 2, "compression": codec_label(Codec.NONE), "timestamp_type": 0,
    "is_transactional": False, "is_control": False, "producer_id": -1, "producer_epoch": -1,
    "base_sequence": -1, "partition_leader_epoch": -1, "crc_valid": True, "position": None,
    "attributes": 0, "decode_error": None, "decode_kind": None, "decode_check": None,
    "decode_params": None, "inplace_check": None, "inplace_params": None,
}


def _batches_table(records: pa.Table, s: np.ndarray, framing: str, count: np.ndarray,
                   region_size: np.ndarray, first_ts: np.ndarray, max_ts: np.ndarray,
                   crc: np.ndarray) -> pa.Table | None:
    """The batches table a decoder gives for these well-formed batches (see
    :class:`~kqlab.kafka.batch.TableBuilder`), built from what the encoder knows, for the
    columns ``BATCHES_SCHEMA`` has when it runs; None when it has one not known here."""
    m = len(s)
    take = pa.array(s, pa.int64())
    varying: dict[str, pa.Array | pa.ChunkedArray | np.ndarray] = {
        "topic": records.column("topic").take(take),
        "partition": records.column("partition").take(take),
        "batch_offset": records.column("offset").take(take),
        "last_offset_delta": count - 1,
        "record_count": count,
        "size_bytes": region_size + RECORD_BATCH_OVERHEAD,
        "first_timestamp": first_ts,
        "max_timestamp": max_ts,
        "crc": crc,
        "records_decoded": count,
    }
    arrays = []
    for f in BATCHES_SCHEMA:
        if f.name in varying:
            col = varying[f.name]
            arr = pa.array(col, f.type) if isinstance(col, np.ndarray) else col
            arrays.append(arr if arr.type == f.type else arr.cast(f.type))
        elif f.name in _CONSTANT_COLUMNS or f.name == "framing":
            value = framing if f.name == "framing" else _CONSTANT_COLUMNS[f.name]
            arrays.append(pa.repeat(pa.scalar(value, f.type), m))
        else:
            return None
    return pa.Table.from_arrays(arrays, schema=BATCHES_SCHEMA)


def _decoded_table(records: pa.Table, s: np.ndarray, framing: str,
                   encoded: EncodedBatches) -> pa.Table:
    """The slow, always-right batches table: decode the bytes (per batch, with its topic and
    partition), then give each row its first record's offset as ``batch_offset``."""
    topics = records.column("topic").take(pa.array(s, pa.int64())).to_pylist()
    parts = records.column("partition").take(pa.array(s, pa.int64())).to_pylist()
    tables = []
    for (topic, part), raw in zip(zip(topics, parts, strict=True), encoded.raw(), strict=True):
        t = decode_batches([raw], topic=topic, partition=part).batches
        tables.append(t)
    table = pa.concat_tables(tables) if tables else BATCHES_SCHEMA.empty_table()
    i = table.schema.get_field_index
    table = table.set_column(i("framing"), BATCHES_SCHEMA.field("framing"),
                             pa.repeat(pa.scalar(framing, pa.string()), len(s)))
    return table.set_column(i("batch_offset"), BATCHES_SCHEMA.field("batch_offset"),
                            records.column("offset").take(pa.array(s, pa.int64())))


def rebuilt_size(records: pa.Table, target: Codec | int) -> int:
    """The size of the one batch the broker writes when it re-encodes ``records`` (LogValidator's
    rebuild: paths X and Z-rebuild, spec §3.D.6) with the ``target`` codec, for E1/E2 — the
    records encoded as a fresh batch (timestamps kept, offsets from 0), the records region
    compressed as :class:`~kqlab.kafka.builder.BatchBuilder` compresses it.  kqlab's codecs:
    Java's compressed sizes may differ by a few bytes at a limit's boundary."""
    from kqlab.kafka.compression import compress

    payload = b""
    if records.num_rows:
        encoded = encode_batches(records, [0])
        payload = encoded.data[RECORD_BATCH_OVERHEAD:int(encoded.bounds[1])].tobytes()
    codec = Codec(int(target))
    if codec is not Codec.NONE:
        payload = compress(codec, payload)
    return RECORD_BATCH_OVERHEAD + len(payload)
