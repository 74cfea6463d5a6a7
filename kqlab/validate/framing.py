"""Producer-like batches rebuilt for records that arrived without their framing (a consumer's
sample): ``single`` and ``linger`` (see :func:`reconstruct_framing`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kqlab.kafka.batch import TableBuilder
from kqlab.kafka.builder import BatchBuilder, Record
from kqlab.validate.sample import ReplayError, Sample


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
    topic = records.column("topic").to_pylist()
    part = records.column("partition").to_pylist()
    ts = records.column("timestamp").to_pylist()
    keys = records.column("key").to_pylist()
    values = records.column("value").to_pylist()
    headers = records.column("headers").to_pylist()
    offsets = records.column("offset").to_pylist()
    # a producer keeps one open batch per partition (its RecordAccumulator): a record joins
    # its partition's open batch, whatever other partitions' records came in between
    groups: list[list[int]] = []
    open_batch: dict[tuple[str, int], tuple[int, int]] = {}  # partition -> (group, bytes)
    for i in range(n):
        rec_size = 20 + len(keys[i] or b"") + len(values[i] or b"") + sum(
            len(h["key"]) + len(h["value"] or b"") for h in headers[i])
        tp = (topic[i], part[i])
        cur = open_batch.get(tp)
        if strategy == "linger" and cur is not None and \
                ts[i] - ts[groups[cur[0]][0]] <= linger_ms and cur[1] + rec_size <= batch_size:
            groups[cur[0]].append(i)
            open_batch[tp] = (cur[0], cur[1] + rec_size)
        else:
            groups.append([i])
            open_batch[tp] = (len(groups) - 1, 61 + rec_size)
    raw = []
    batch_offset = np.empty(n, dtype=np.int64)
    batch_index = np.empty(n, dtype=np.int32)
    builder = TableBuilder(framing=f"reconstructed:{strategy}")
    for g in groups:
        b = BatchBuilder(base_timestamp=ts[g[0]])
        for i in g:
            b.append(Record(key=keys[i], value=values[i], timestamp=ts[i],
                            headers=tuple((h["key"], h["value"]) for h in headers[i])))
        data = b.build()
        raw.append(data)
        builder.topic, builder.partition = topic[g[0]], part[g[0]]
        builder.add(None, data)
        for k, i in enumerate(g):
            batch_offset[i] = offsets[g[0]]
            batch_index[i] = k
    _, batches = builder.take()
    batches = batches.set_column(batches.schema.get_field_index("batch_offset"), "batch_offset",
                                 pa.array([offsets[g[0]] for g in groups], pa.int64()))
    out = records.set_column(records.schema.get_field_index("batch_offset"), "batch_offset",
                             pa.array(batch_offset, pa.int64()))
    out = out.set_column(out.schema.get_field_index("batch_index"), "batch_index",
                         pa.array(batch_index, pa.int32()))
    order = np.fromiter((i for g in groups for i in g), dtype=np.int64, count=n)
    if n and (np.diff(order) < 0).any():  # interleaved partitions: records in batch order
        out = out.take(pa.array(order))
    return Sample(out, batches, raw, f"reconstructed:{strategy}", "producer")
