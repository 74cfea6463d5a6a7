"""Producer-like batches rebuilt for records that arrived without their framing (a consumer's
sample): ``single`` and ``linger`` (see :func:`reconstruct_framing`).

Both the grouping and the encoding are vectorised: the ``linger`` accumulator is a greedy scan
(each partition's open batch grows until a record is too late or too big), computed for every
possible batch start at once with a sparse table of timestamp maxima and a prefix sum of sizes,
then followed from the first record by pointer doubling; the bytes come from
:func:`kqlab.kafka.encode.encode_batches`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.batch import RECORD_BATCH_OVERHEAD
from kqlab.kafka.encode import encode_batches
from kqlab.validate.sample import ReplayError, Sample

_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min
#: the accumulator's estimate of a record's bytes beyond its key, value and headers
_RECORD_ESTIMATE = 20
#: batch starts examined per pass of the timestamp search (bounds its memory)
_CHUNK = 1 << 16


def reconstruct_framing(records: pa.Table, strategy: str, *, linger_ms: int = 5,
                        batch_size: int = 16384) -> Sample:
    """Rebuild producer-like batches for records that arrived without their framing.

    * ``single``: every record alone in its batch (a producer with ``linger.ms=0`` and no
      concurrency — the most forgiving framing: one bad record rejects only itself);
    * ``linger``: per partition, records join that partition's open batch while their
      timestamps stay within ``linger_ms`` of the batch's first record and the batch stays
      under ``batch_size`` bytes (the Java producer's ``linger.ms`` / ``batch.size``; like its
      accumulator, records of other partitions in between do not close the batch).  The
      returned records are in batch order (unchanged when partitions were not interleaved).

    Batches are re-encoded as a non-idempotent producer would send them (base offset 0,
    CreateTime, no compression), so the broker checks run on real bytes; record offsets keep
    their original values in the verdicts.
    """
    if strategy not in ("single", "linger"):
        raise ReplayError(f"unknown framing strategy {strategy!r}: use single or linger")
    n = records.num_rows
    ts_col = records.column("timestamp")
    if ts_col.null_count:
        raise ReplayError("records without a timestamp cannot be framed: give every record "
                          "its timestamp")
    if strategy == "single" or n == 0:
        order = np.arange(n, dtype=np.int64)
        starts = np.arange(n, dtype=np.int64)
    else:
        ts = ts_col.to_numpy().astype(np.int64)
        order, starts = _linger_batches(records, ts, linger_ms, batch_size)
    interleaved = bool(n) and bool((np.diff(order) < 0).any())
    in_order = records.take(pa.array(order)) if interleaved else records
    framing = f"reconstructed:{strategy}"
    try:
        encoded = encode_batches(in_order, starts, framing=framing)
    except ValueError as exc:
        raise ReplayError(f"cannot rebuild batches: {exc}") from None
    sizes = np.diff(np.append(starts, n))
    which = np.repeat(np.arange(len(starts)), sizes)
    first = pa.array(starts[which], pa.int64())
    out = in_order.set_column(in_order.schema.get_field_index("batch_offset"), "batch_offset",
                              in_order.column("offset").take(first).cast(pa.int64()))
    out = out.set_column(out.schema.get_field_index("batch_index"), "batch_index",
                         pa.array(np.arange(n, dtype=np.int64) - starts[which], pa.int32()))
    return Sample(out, encoded.batches, encoded.raw(), framing, "producer")


# -- the linger accumulator -----------------------------------------------------------------------

def _record_estimates(records: pa.Table) -> np.ndarray:
    """The accumulator's size of each record: 20 + key + value bytes + per header its key's
    characters and its value's bytes."""
    def nbytes(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
        return pc.fill_null(pc.binary_length(col), 0).to_numpy().astype(np.int64)

    size = _RECORD_ESTIMATE + nbytes(records.column("key")) + nbytes(records.column("value"))
    lists = records.column("headers").combine_chunks()
    entries = lists.flatten()
    if len(entries):
        if entries.null_count:
            raise ReplayError("a record has a null header: only its value may be null")
        hkey, hvalue = entries.flatten()
        if hkey.null_count:
            raise ReplayError("a record has a header with a null key")
        entry = pc.utf8_length(hkey).to_numpy().astype(np.int64) + nbytes(hvalue)
        counts = pc.fill_null(pc.list_value_length(lists), 0).to_numpy().astype(np.int64)
        cum = np.zeros(len(entry) + 1, dtype=np.int64)
        np.cumsum(entry, out=cum[1:])
        ends = np.cumsum(counts)
        size += cum[ends] - cum[ends - counts]
    return size


def _partition_keys(records: pa.Table) -> np.ndarray:
    """One int64 per record that is equal exactly when (topic, partition) is (nulls too)."""
    topic = records.column("topic").combine_chunks()
    if pa.types.is_dictionary(topic.type):
        topic = topic.cast(topic.type.value_type)
    codes = pc.dictionary_encode(topic, null_encoding="encode").indices
    part = records.column("partition").combine_chunks()
    valid = pc.is_valid(part).to_numpy(zero_copy_only=False).astype(np.int64)
    p = pc.fill_null(part, 0).to_numpy().astype(np.int64) & 0xFFFFFFFF
    return (codes.to_numpy().astype(np.int64) << 33) | (valid << 32) | p


def _sat_add(a: np.ndarray, b: int) -> np.ndarray:
    """``a + b`` clamped to int64 (exact: no wrap-around), for any Python int ``b``."""
    out = a.copy()
    while b:
        step = max(min(b, _INT64_MAX), _INT64_MIN)
        b -= step
        if step > 0:
            over = out > _INT64_MAX - step
            out = np.where(over, _INT64_MAX, out + np.where(over, 0, step))
        else:
            under = out < _INT64_MIN - step
            out = np.where(under, _INT64_MIN, out + np.where(under, 0, step))
    return out


def _first_late(ts: np.ndarray, lim: np.ndarray, linger_ms: int) -> np.ndarray:
    """For every start ``k``: the first ``j`` in ``(k, lim[k])`` with ``ts[j] - ts[k] >
    linger_ms`` (exact integers), else ``lim[k]``.

    Binary lifting over a sparse table of maxima (``levels[l][i] = max(ts[i:i + 2^l])``),
    built per chunk of starts over just the window those starts can reach.
    """
    n = len(ts)
    # ts[j] - ts[k] > L  <=>  ts[j] > ts[k] + L  (L >= 0)  <=>  ts[j] >= ts[k] + L + 1  (L < 0):
    # the clamped threshold keeps each form exact
    strict = linger_ms >= 0
    thr = _sat_add(ts, linger_ms if strict else linger_ms + 1)
    out = np.empty(n, dtype=np.int64)
    reach = lim - np.arange(n) - 1  # records after k that could still join
    chunk = max(_CHUNK, int(reach.max()) if n else 0)
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        k = np.arange(a, b, dtype=np.int64)
        hi = int(lim[a:b].max())
        base = a + 1
        levels = [ts[base:hi]]
        for lvl in range(1, max(int(reach[a:b].max()), 0).bit_length()):
            prev = levels[-1]
            half = 1 << (lvl - 1)
            levels.append(np.maximum(prev[:-half], prev[half:]) if len(prev) > half
                          else prev[:0])
        pos = k + 1
        t, lk = thr[a:b], lim[a:b]
        for lvl in range(len(levels) - 1, -1, -1):
            table = levels[lvl]
            if not len(table):
                continue
            step = 1 << lvl
            seen = table[np.minimum(pos - base, len(table) - 1)]
            early = seen <= t if strict else seen < t
            pos += step * ((pos + step <= lk) & early)
        out[a:b] = pos
    return out


def _chain(nxt: np.ndarray) -> np.ndarray:
    """Which nodes the chain ``0, nxt[0], nxt[nxt[0]] ...`` visits (``nxt[k] > k``; ``n`` ends
    it), by pointer doubling: the nodes within ``2^(t+1)`` steps are those within ``2^t`` and
    their ``2^t``-th successors, so ``log2`` of the chain's length passes suffice."""
    n = len(nxt)
    jump = np.append(nxt, n)
    on = np.zeros(n + 1, dtype=bool)
    on[0] = True
    while True:
        more = on.copy()
        more[jump[on]] = True
        if np.array_equal(more, on):
            return on[:n]
        on = more
        jump = jump[jump]


def _linger_batches(records: pa.Table, ts: np.ndarray, linger_ms: int, batch_size: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The linger grouping: ``(order, starts)``, the rows in batch order (batches ordered by
    their first row, rows in row order within a batch) and where each batch begins.

    The producer's accumulator, per partition: a record joins the open batch when
    ``ts - ts[first] <= linger_ms`` and ``open bytes + its size <= batch_size`` (a new batch
    opens at 61 + its first record's size); otherwise it opens the next batch.
    """
    n = records.num_rows
    size = _record_estimates(records)
    keys = _partition_keys(records)
    perm = np.argsort(keys, kind="stable")  # partition by partition, row order within
    keys_p, ts_p, size_p = keys[perm], ts[perm], size[perm]
    # where each record's partition run ends
    change = np.flatnonzero(keys_p[1:] != keys_p[:-1]) + 1
    run_end = np.append(change, n)
    pend = np.repeat(run_end, np.diff(np.append(0, run_end)))
    # the first record that would overflow a batch opened at k: 61 + C[j+1] - C[k] > batch_size
    cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(size_p, out=cum[1:])
    room = max(min(batch_size - RECORD_BATCH_OVERHEAD, 1 << 62), -(1 << 62))
    k = np.arange(n, dtype=np.int64)
    full = np.maximum(np.searchsorted(cum, cum[:-1] + room, side="right") - 1, k + 1)
    lim = np.minimum(full, pend)
    nxt = _first_late(ts_p, lim, linger_ms)
    opens = _chain(nxt)  # the records that open a batch, in partition order
    first_p = np.flatnonzero(opens)
    batch_p = np.cumsum(opens) - 1
    # batches ordered by their first row (the order the accumulator opened them)
    rank = np.empty(len(first_p), dtype=np.int64)
    rank[np.argsort(perm[first_p], kind="stable")] = np.arange(len(first_p))
    order_p = np.argsort(rank[batch_p], kind="stable")
    order = perm[order_p]
    counts = np.bincount(rank[batch_p], minlength=len(first_p))
    starts = np.zeros(len(first_p), dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return order, starts
