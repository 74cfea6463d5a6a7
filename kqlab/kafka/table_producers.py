"""Spec §3.F over the tables: producer state in log order.  Sequential per producer, so it
is one Python loop over only the batches that carry a producer id (and the rows delegated to
the byte-level validator, which share the state and the next-offset counter)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kqlab.kafka.batch import increment_sequence
from kqlab.kafka.checks.producer import F1, EndTxnMarker, MalformedMarker, parse_end_txn_markers
from kqlab.kafka.producer_state import BatchMetadata, ProducerCheckError
from kqlab.kafka.table_cascade import (
    UNDET_CODE,
    UNDETERMINED,
)
from kqlab.kafka.table_state import VerdictState
from kqlab.kafka.varint import to_int64


class ProducerStage(VerdictState):
    """§3.F on the tables."""

    def _producer_state(self) -> None:
        """Stage F in log order, plus the delegated rows (they share state and offsets)."""
        cas, v = self.cas, self.v
        pm = v.producers
        undet = cas.decided & (cas.code == UNDET_CODE)
        pass_f = self.v2 & ~cas.decided
        has_pid = self.pid > -1
        ev_f = pass_f & has_pid
        acc_plain = pass_f & ~has_pid
        rejected = self.v2 & cas.decided & (cas.code != 0) & ~undet & has_pid
        events_mask = ev_f | undet
        if v.resync:
            events_mask |= rejected
        events = np.flatnonzero(events_mask).tolist()
        plain_cnt = np.where(acc_plain, self.count, 0)
        before = np.cumsum(plain_cnt) - plain_cnt
        plain_first = int(np.argmax(acc_plain)) if acc_plain.any() else self.n
        if not events:
            self._carry_next_offset(v.next_offset, plain_first, int(plain_cnt.sum()), None, 0,
                                    0)
            return
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
        tainted = v.undetermined_producers  # carried: a later chunk's batches stay tainted
        code, check, detail = cas.code, cas.check, cas.detail
        find_duplicate, check_state, append = pm.find_duplicate, pm.check, pm.append
        meta_type, resync = BatchMetadata, v.resync
        # runs of plain in-sequence batches of one producer (the common case) are appended at
        # once: see _runs
        run_end = _runs(ev_f[ev] & ~self.control[ev] & ~self.transactional[ev]
                        & ~self.ctrl_origin[ev], self.pid[ev], self.epoch[ev], self.seq[ev],
                        self.last_delta[ev])
        last_appended: int | None = None  # the pid the previous event row appended, if any
        k = -1
        while k + 1 < len(events):
            k += 1
            i = events[k]
            kind = kind_l[k]
            pid = pid_l[k]
            if last_appended == pid and run_end[k] > k and pid not in tainted:
                entry = pm.entries[pid]
                if entry.current_txn_first_offset is None and not entry.resync \
                        and entry.epoch == epoch_l[k] \
                        and all(b.last_seq < seq_l[k] for b in entry.batches):
                    # every batch of the run passes §3.F unchanged: F1 cannot match (sequences
                    # only grow past the cached ones), the epoch is the entry's, each sequence
                    # follows the last; the state keeps the run's last five batches
                    m = int(run_end[k])
                    assert ev_first is not None  # row k-1 was appended
                    if first_offset is not None:
                        run_start = first_offset
                    elif plain_first < ev_first:
                        run_start = int(self.batch_offset[plain_first])
                    else:
                        run_start = ev_first_start
                    accs = acc + np.concatenate(([0], np.cumsum(cnt_l[k:m])))
                    for j in range(max(k, m - 5), m):
                        run_base = to_int64(run_start + before_l[j] + int(accs[j - k]))
                        entry.batches.append(meta_type(
                            seq_l[j], increment_sequence(seq_l[j], ld_l[j]), run_base,
                            to_int64(run_base + cnt_l[j] - 1), maxts_l[j]))
                    acc = int(accs[-1])
                    k = m - 1
                    continue
            last_appended = None
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
            next_offset = None if start is None else to_int64(start + before_l[k] + acc)
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
                    n = to_int64(v.next_offset - out.base_offset)
                    if ev_first is None:
                        ev_first, ev_first_start = i, out.base_offset
                    acc += n
                continue
            if pid in tainted:
                code[i], check[i] = UNDET_CODE, UNDETERMINED
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
                   meta=meta_type(base_seq, last_seq, base, to_int64(base + n - 1), maxts_l[k]))
            if ev_first is None:
                ev_first, ev_first_start = i, base
            acc += n
            if not control:
                last_appended = pid
        self._carry_next_offset(first_offset, plain_first, int(plain_cnt.sum()), ev_first,
                                ev_first_start, acc)

    def _carry_next_offset(self, first_offset: int | None, plain_first: int, plain: int,
                           ev_first: int | None, ev_first_start: int, acc: int) -> None:
        """Leave the partition's next offset on the validator (the log end offset after the
        appended batches of these tables), so the next chunk of the partition continues the
        offsets one call over all of it would assign; unknown until something was appended.
        ``first_offset`` is the validator's next offset when the call began."""
        start: int | None
        if first_offset is not None:
            start = first_offset
        elif plain and (ev_first is None or plain_first < ev_first):
            start = int(self.batch_offset[plain_first])
        elif ev_first is not None:
            start = ev_first_start
        else:
            return
        self.v.next_offset = to_int64(start + plain + acc)


def _runs(plain: np.ndarray, pid: np.ndarray, epoch: np.ndarray, seq: np.ndarray,
          last_delta: np.ndarray) -> np.ndarray:
    """Per event row k, the end (exclusive) of the run of rows k, k+1, ... that each follow
    the row before them as the next plain batch of the same producer: a client's data batch
    (not control, not transactional) judged by stage F, same producer id and epoch, its
    first sequence one past the previous batch's last, no sequence wrapping past 2**31-1.
    ``k`` itself when row k does not follow row k-1 so (no run starts there)."""
    n = len(plain)
    ends = np.arange(n, dtype=np.int64)
    if n < 2:
        return ends
    seq64 = seq.astype(np.int64)
    last = seq64 + last_delta.astype(np.int64)
    ok = (seq64 >= 0) & (last_delta >= 0) & (last <= 2**31 - 1)
    follows = np.zeros(n, dtype=bool)
    follows[1:] = plain[1:] & ok[1:] & ok[:-1] & (pid[1:] == pid[:-1]) \
        & (epoch[1:] == epoch[:-1]) & (seq64[1:] == last[:-1] + 1)
    # the first row at or after each k that does not follow its predecessor
    breaks = np.flatnonzero(~follows)
    nxt = np.searchsorted(breaks, np.arange(n), side="right")
    stop = np.where(nxt < len(breaks), breaks[np.minimum(nxt, len(breaks) - 1)], n)
    return np.where(follows, stop, ends)
