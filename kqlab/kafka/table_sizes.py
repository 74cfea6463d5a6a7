"""Spec §3.E over the tables: batches the broker re-encodes are measured again (E1), every
batch against the segment size (E2); the re-encoded size is estimated cheaply and computed
exactly only where the estimate comes near a limit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.checks.size import E1, E2
from kqlab.kafka.checks.structure import D3_REBUILD, D3_REBUILD_PRODUCER
from kqlab.kafka.compression import Codec
from kqlab.kafka.table_cascade import (
    V2_MIN,
    column_np,
)
from kqlab.kafka.table_state import VerdictState


class SizeStage(VerdictState):
    """§3.E on the tables."""

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
                delta = (column_np(recs, "offset", 0, np.int64)
                         - column_np(recs, "batch_offset", 0, np.int64))
            moved = (delta != column_np(recs, "batch_index", 0, np.int64)) & \
                np.repeat(check_offsets, self.n_r)
            moved_b = np.bincount(self.rec_batch[moved], minlength=self.n) > 0
            # read in place by the partial reader, the batch cannot be rebuilt (D3.rebuild);
            # an uncompressed control batch (full records) is
            cas.by(check_offsets & moved_b & (self.codec != 0), D3_REBUILD)
            rebuilt |= check_offsets & moved_b & (self.codec == 0)
        self._rebuild_producer(rebuilt)
        size = self.size
        cas.by(stage_e & ~rebuilt & (size > seg), E2, {"size": size, "tp": tp,
                                                       "segment_bytes": seg})
        if not rebuilt.any():
            return
        # PartitionValidator._rebuilt_size: skip when records + 10 % + framing fits both limits
        usize = np.where(self.codec == 0, size - V2_MIN, 0).astype(np.float64)
        comp = rebuilt & (self.codec != 0)
        if comp.any():
            usize += self._uncompressed_upper_bound(comp)
        limit = min(mmb, seg)
        # int(x * 1.1) as Python computes it (x >= 0: truncation is the floor)
        fits = V2_MIN + np.trunc(usize * 1.1) + 1024 <= limit
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

    def _rebuild_producer(self, rebuilt: np.ndarray) -> None:
        """Rebuilt batches whose producer fields ``MemoryRecordsBuilder`` refuses (the
        byte validator's ``rebuild_producer_reason``, in its order)."""
        pid, has_pid = self.pid, self.pid != -1
        for mask, reason in (
                (self.transactional & (pid == -1),
                 "Cannot write transactional messages without a valid producer ID"),
                (has_pid & (self.epoch == -1), "Invalid negative producer epoch"),
                (has_pid & (self.seq < 0), "Invalid negative sequence number used")):
            self.cas.by(rebuilt & self.v2 & mask, D3_REBUILD_PRODUCER, {"reason": reason})

    def _rebuilt_size(self, start: int, n: int, target: Codec) -> int:
        """The re-encoded batch's size (the byte-level validator's function)."""
        from kqlab.kafka.encode import rebuilt_size

        return rebuilt_size(self.records.slice(start, n), target)
