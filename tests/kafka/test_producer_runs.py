"""The table pass appends runs of plain in-sequence batches of one producer at once
(``table_producers._runs``): its verdicts and producer state equal the batch-by-batch loop's
on partitions where runs start, break and resume — producers interleaved, a duplicate
resend, a sequence gap, an epoch bump, sequences near 2**31-1 that wrap, transactional and
rejected batches between runs, and a resync (``ProducerStateManager`` state before a run
with cached sequences above the run's)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import kqlab.kafka.table_producers as table_producers
from kqlab.kafka.batch import decode_records
from kqlab.kafka.builder import BatchBuilder, Record
from kqlab.kafka.log import scan_buffer
from kqlab.policy import loads_policy
from kqlab.validate.replayer import Replayer
from kqlab.validate.sample import Sample

NOW = 1_763_700_000_000
POLICY = """
kqlab: 1
name: runs
broker: {version: '4.0', configs: {}}
rules:
- {id: size, kind: value_size, max: 60}
"""


def _partition(seed: int) -> Sample:
    rng = random.Random(seed)
    seqs: dict[int, int] = {1: 0, 2: 2**31 - 40, 3: 0}
    epochs = {1: 0, 2: 0, 3: 0}
    sent: list[tuple[int, int, int, int]] = []  # (pid, epoch, seq, count) of earlier batches
    batches = []
    offset = 0
    for _ in range(160):
        pid = rng.choice([1, 1, 1, 2, 3])
        k = rng.randrange(1, 6)
        seq, epoch = seqs[pid], epochs[pid]
        roll = rng.random()
        if roll < 0.05 and sent:  # a resend of an earlier batch (duplicate or out of order)
            pid, epoch, seq, k = rng.choice(sent)
        elif roll < 0.08:  # a gap
            seq += rng.randrange(2, 5)
        elif roll < 0.10:  # an epoch bump: sequences restart
            epochs[pid] += 1
            epoch, seq = epochs[pid], 0
        big = rng.random() < 0.08  # a record the policy rejects
        b = BatchBuilder(base_offset=offset, base_timestamp=NOW - 1000, producer_id=pid,
                         producer_epoch=epoch, base_sequence=seq)
        for i in range(k):
            b.append(Record(key=b"k", value=b"x" * (100 if big and i == 0 else 10),
                            timestamp=NOW - 1000 + i))
        batches.append(b.build())
        sent.append((pid, epoch, seq, k))
        last = seq + k - 1
        seqs[pid] = last + 1 if last + 1 <= 2**31 - 1 else last + 1 - 2**31
        offset += k
    data = b"".join(batches)
    decoded = decode_records(data, topic="runs", partition=0)
    return Sample(decoded.records, decoded.batches, [bb for _, bb in scan_buffer(data)])


@pytest.mark.parametrize("seed", range(6))
def test_runs_equal_the_batch_by_batch_loop(seed, monkeypatch):
    policy = loads_policy(POLICY)
    sample = _partition(seed)
    used = []
    runs = table_producers._runs

    def spy(*args):
        out = runs(*args)
        used.append(int((out > np.arange(len(out))).sum()))
        return out

    monkeypatch.setattr(table_producers, "_runs", spy)
    fast = Replayer(sample, now=NOW).run(policy)
    assert sum(used) > 0  # runs were appended at once
    monkeypatch.setattr(table_producers, "_runs", lambda plain, *rest: np.arange(len(plain)))
    slow = Replayer(sample, now=NOW).run(policy)
    assert fast.records.equals(slow.records)
    assert fast.batches.equals(slow.batches)
    assert fast.by_outcome() == slow.by_outcome()
