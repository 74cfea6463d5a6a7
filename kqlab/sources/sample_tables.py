"""Table-level steps of sampling: which records to keep, and how much they weigh.

Pure functions over ``RECORDS_SCHEMA`` / ``BATCHES_SCHEMA`` tables, shared by the consumer
read (:mod:`kqlab.sources.kafka_consume`), the raw Fetch read (:mod:`kqlab.sources.fetch`)
and streaming into a snapshot (:mod:`kqlab.sources.kafka_snapshot`), so every path filters,
caps and counts the same way.

**Seeded random sampling** (:func:`keep_mask`): a record is kept when a hash of
``(seed, partition, offset)`` falls below the fraction, so the same seed over the same range
always gives the same records, whatever order the broker delivers them in.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "cap_table",
    "filter_batches_to_records",
    "keep_mask",
    "payload_bytes",
    "split_cap",
    "time_filter",
]


def payload_bytes(records: pa.Table) -> int:
    """Key + value + header key/value bytes (what ``SampleResult.bytes`` counts)."""
    if not records.num_rows:
        return 0
    total = 0
    for name in ("key", "value"):
        total += pc.sum(pc.binary_length(records.column(name))).as_py() or 0
    hdr = pc.list_flatten(records.column("headers"))
    if len(hdr):
        total += pc.sum(pc.binary_length(pc.struct_field(hdr, "key"))).as_py() or 0
        total += pc.sum(pc.binary_length(pc.struct_field(hdr, "value"))).as_py() or 0
    return int(total)


def filter_batches_to_records(batches: pa.Table, records: pa.Table) -> pa.Table:
    """The batch rows that still hold at least one record of ``records`` (after sampling)."""
    if not batches.num_rows:
        return batches
    key = pc.add(pc.multiply(pc.cast(records.column("partition"), pa.int64()), 1 << 40),
                 records.column("batch_offset"))
    bkey = pc.add(pc.multiply(pc.cast(batches.column("partition"), pa.int64()), 1 << 40),
                  batches.column("batch_offset"))
    return batches.filter(pc.is_in(bkey, value_set=pc.unique(key.combine_chunks())))


def time_filter(records: pa.Table, lo: int | None, hi: int | None) -> pa.Table:
    """The records with ``lo <= timestamp < hi`` (an open end where ``None``)."""
    if not records.num_rows or (lo is None and hi is None):
        return records
    ts = records.column("timestamp")
    masks = ([pc.greater_equal(ts, lo)] if lo is not None else []) + (
        [pc.less(ts, hi)] if hi is not None else [])
    mask = masks[0] if len(masks) == 1 else pc.and_(*masks)
    return records.filter(mask)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised (uint64 wraps silently)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def keep_mask(table: pa.Table, fraction: float, seed: int) -> np.ndarray:
    """Deterministic per-record keep mask: hash(seed, partition, offset) < fraction."""
    part = table.column("partition").to_numpy().astype(np.uint64)
    off = table.column("offset").to_numpy().astype(np.uint64)
    with np.errstate(over="ignore"):
        s = _mix(np.full(len(off), np.uint64(seed & 0xFFFFFFFFFFFFFFFF)))
        h = _mix(s ^ _mix(part + np.uint64(0x9E3779B97F4A7C15)) ^ off)
    u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return u < fraction


def split_cap(cap: int, avail: dict[int, int]) -> dict[int, int]:
    """Split ``cap`` over partitions as evenly as their sizes allow (deterministic; lowest
    partitions first for the remainder).

    >>> split_cap(10, {0: 2, 1: 100, 2: 100})
    {0: 2, 1: 4, 2: 4}
    """
    share = dict.fromkeys(avail, 0)
    left = cap
    open_parts = sorted(p for p, n in avail.items() if n > 0)
    while left > 0 and open_parts:
        each, extra = divmod(left, len(open_parts))
        for i, p in enumerate(open_parts):
            share[p] += min(each + (1 if i < extra else 0), avail[p] - share[p])
        left = cap - sum(share.values())
        open_parts = [p for p in open_parts if share[p] < avail[p]]
    return share


def cap_table(table: pa.Table, parts: list[int], cap: int) -> pa.Table:
    """At most ``cap`` records, split over ``parts`` by :func:`split_cap`, the earliest of
    each partition (``table`` is sorted by partition, then offset)."""
    pcol = table.column("partition").to_numpy()
    avail = {p: int((pcol == p).sum()) for p in parts}
    shares = split_cap(cap, avail)
    rank = np.zeros(len(pcol), dtype=np.int64)
    for p in parts:  # rows are sorted by (partition, offset): rank within the partition
        idx = np.flatnonzero(pcol == p)
        rank[idx] = np.arange(len(idx))
    limit = np.array([shares.get(int(p), 0) for p in pcol], dtype=np.int64)
    return table.filter(pa.array(rank < limit))
