"""A partition judged chunk by chunk, with one validator carried from chunk to chunk, gets
exactly the verdicts of one call over the whole partition: producer state (epochs, sequences,
duplicates, open transactions, markers), the next offset quoted in stage-F texts and the
producers tainted by an undetermined batch all carry over (what the streaming replay needs)."""

from __future__ import annotations

import random
from itertools import pairwise

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.kafka import decode_records
from kqlab.kafka.configs import TopicConfig
from kqlab.kafka.log import scan_buffer
from kqlab.kafka.table_checks import broker_verdicts, records_per_batch
from kqlab.kafka.validator import PartitionValidator
from tests.kafka.test_table_checks import CONFIGS, NOW, REQUESTS, segments


def _chunked(data: bytes, cfg: dict, bv: str | None, cuts: list[int], with_raw: bool,
             **request) -> list[dict]:
    d = decode_records(data, topic="t", partition=0)
    raw = [b for _, b in (x for x in scan_buffer(data) if isinstance(x, tuple))]
    n_r = records_per_batch(d.batches, d.records.num_rows)
    starts = np.concatenate(([0], np.cumsum(n_r)))
    v = PartitionValidator("t", 0, TopicConfig.from_dict(cfg, bv), now=NOW, source="log",
                           **request)
    out: list[pa.Table] = []
    edges = [0, *sorted(set(cuts)), d.batches.num_rows]
    for a, b in pairwise(edges):
        if a >= b:
            continue
        recs = d.records.slice(int(starts[a]), int(starts[b] - starts[a]))
        out.append(broker_verdicts(recs, d.batches.slice(a, b - a), now=NOW,
                                   raw=raw[a:b] if with_raw else None, validator=v))
    return pa.concat_tables(out).to_pylist() if out else []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments(), st.sampled_from(CONFIGS), st.sampled_from(REQUESTS), st.randoms(
    use_true_random=False), st.booleans())
def test_chunks_equal_one_call(data, config, request, rnd, with_raw):
    bv, cfg = config
    d = decode_records(data, topic="t", partition=0)
    nb = d.batches.num_rows
    whole = broker_verdicts(d.records, d.batches, cfg, broker_version=bv, now=NOW,
                            raw=[b for _, b in (x for x in scan_buffer(data)
                                                if isinstance(x, tuple))] if with_raw else None,
                            **request).to_pylist()
    cuts = [rnd.randrange(0, nb + 1) for _ in range(rnd.randrange(0, 4))]
    assert _chunked(data, cfg, bv, cuts, with_raw, **request) == whole


def test_one_batch_per_chunk_on_a_long_idempotent_log():
    rng = random.Random(7)
    from kqlab.kafka.builder import BatchBuilder, Record

    batches, seq = [], {1: 0, 2: 0}
    for i in range(60):
        pid = rng.choice([1, 2, -1])
        n = rng.randrange(1, 4)
        b = BatchBuilder(base_offset=1000 + i * 3, base_timestamp=NOW,
                         producer_id=pid, producer_epoch=0 if pid > 0 else -1,
                         base_sequence=seq.get(pid, -1) if pid > 0 else -1)
        for j in range(n):
            b.append(Record(key=b"k", value=b"v%d" % j))
        if pid > 0:
            seq[pid] += n if rng.random() > 0.1 else n + 1  # some gaps: F4 quotes offsets
        batches.append(b.build())
    data = b"".join(batches)
    whole = broker_verdicts(*_tables(data), {}, now=NOW).to_pylist()
    assert any(r["check"] == "F4" for r in whole)
    assert _chunked(data, {}, None, list(range(61)), False) == whole


def _tables(data: bytes):
    d = decode_records(data, topic="t", partition=0)
    return d.records, d.batches
