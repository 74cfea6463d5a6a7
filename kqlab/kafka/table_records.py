"""Spec §3.D.3-§3.D.5 over the tables: structural errors (from what the decoder's readers
found, kept as data in the batches table), the per-record checks R3/R4 with a record policy
joined after them (KIP-940/729, or KIP-686's batch-level verdict), and their aggregation into
one verdict per batch."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.checks import aggregate
from kqlab.kafka.checks import record as rchecks
from kqlab.kafka.checks._check import CHECKS, ParamsPart, params_column
from kqlab.kafka.configs import LONG_MAX
from kqlab.kafka.table_cascade import (
    CHECK_LABELS,
    column_np,
)
from kqlab.kafka.table_inputs import (
    as_strings,
)
from kqlab.kafka.table_state import VerdictState
from kqlab.kafka.validator import (
    INVALID_TIMESTAMP_MESSAGE,
)
from kqlab.records import RECORD_ERROR_TYPE

#: the pool of the record errors' texts, rebuilt on every edit of a replay: the system
#: allocator, whose pages stay with the process (the default pool's occasional fresh pages
#: made an edit's texts cost 3-5x now and then)
_POOL = pa.system_memory_pool()
#: the check of a record error by kind (0 R3, 1 R4, 2 the policy's own)
_ERROR_CHECK_IDS = pa.array([rchecks.R3.id, rchecks.R4.id, rchecks.P.id], pa.string())


def _texts(pieces: list[pa.Array]) -> pa.Array:
    """The non-empty ``pieces`` (texts: strings, dictionary-encoded or not) as one string
    array, not copied again when there is one."""
    out = []
    for p in pieces:
        if not len(p):
            continue
        if pa.types.is_dictionary(p.type):  # decoded (a take: faster than a cast)
            p = pc.take(p.dictionary, p.indices, memory_pool=_POOL)
        out.append(p if p.type == pa.string() else p.cast(pa.string()))
    return out[0] if len(out) == 1 else pa.concat_arrays(out, memory_pool=_POOL)


class RecordStage(VerdictState):
    """§3.D.3-§3.D.5 on the tables."""

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
            ts = column_np(recs, "timestamp", 0, np.int64)
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
        bidx = column_np(recs, "batch_index", 0, np.int32)[eidx]
        # each record error: the check that found it, the rule (policy errors), the check's
        # parameters, and its text rendered from them (R3, R4) or the policy's own message
        e3 = np.flatnonzero(err3)
        pieces: list[pa.Array] = [pa.repeat(pa.scalar(rchecks.R3.render(tp=tp)), len(e3))]
        params: list[ParamsPart] = []
        at = np.searchsorted(eidx, np.concatenate([e3, e4, ep]))
        params.append((at[:len(e3)], {"tp": tp}))
        if len(e4):
            with np.errstate(over="ignore"):
                odelta = (column_np(recs, "offset", 0, np.int64)[e4]
                          - column_np(recs, "batch_offset", 0, np.int64)[e4])
            r4_params = {"timestamp": ts[e4], "offset": odelta, "lower": lo, "upper": hi}
            pieces.append(rchecks.R4.render_array(r4_params))
            params.append((at[len(e3):len(e3) + len(e4)], r4_params))
        rules: pa.Array = pa.nulls(len(e3) + len(e4), pa.string())
        if len(ep):
            assert self.parr is not None
            pieces.append(self.parr.take(pa.array(ep)))
            rules = _texts([rules, self.prules.take(pa.array(ep)) if self.prules is not None
                            else pa.nulls(len(ep), pa.string())])
        # the pieces (R3, R4, P errors) in record order; already so when one kind is found
        # (a policy's failures alone: no permutation of a million texts)
        in_order = bool((at[1:] > at[:-1]).all())
        msgs = _texts(pieces)
        kind = np.repeat(np.arange(3, dtype=np.int8), [len(e3), len(e4), len(ep)])
        if not in_order:
            inv = np.empty(len(eidx), dtype=np.int64)
            inv[at] = np.arange(len(eidx))
            take = pa.array(inv)
            msgs = pc.take(msgs, take, memory_pool=_POOL)
            rules, kind = pc.take(rules, take, memory_pool=_POOL), kind[inv]
        checks = pc.take(_ERROR_CHECK_IDS, pa.array(kind), memory_pool=_POOL)
        offsets = np.zeros(self.n + 1, dtype=np.int32)
        np.cumsum(n_err, out=offsets[1:])
        struct = pa.StructArray.from_arrays(
            [pa.array(bidx, pa.int32()), msgs, checks, rules,
             params_column(len(eidx), params)], fields=list(RECORD_ERROR_TYPE.value_type))
        self.rec_errors = pa.ListArray.from_arrays(pa.array(offsets), struct,
                                                   type=RECORD_ERROR_TYPE)
        failing = n_err > 0
        labels = CHECK_LABELS[(n_p > 0) * 4 + (n_r3 > 0) * 2 + (n_r4 > 0)]
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
        texts[rows] = as_strings(self.parr.take(pa.array(r[first]))).to_numpy(
            zero_copy_only=False)
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
            vals["rule"] = as_strings(self.prules.take(pick))
        self.cas.params.append((idx, vals))
