"""Replay throughput: byte-level rules + the broker's checks over records already decoded.

Builds one partition of >= 1M records (Confluent-framed ~100-byte values, keys, two headers,
an idempotent producer, ~100 records per batch), decodes it once (not timed: segment decoding
is the decode benchmark's job), then times in one run:

* kqlab: ``Replayer.run(policy)`` — five byte-level rules (key present, value size, header
  present, headers size, schema-id allowlist), the broker's full check order (vectorised,
  policy injected, producer state), and the verdict tables with their summaries;
* pandas: the same five rules written as a data engineer would in pandas (vectorised ``str``
  accessors, ``apply`` for the header lists) — rules only, no broker semantics;
* the limit: the same five rules as one bare pass of Arrow kernels and numpy over the same
  columns (lengths, the flattened headers, the schema id bytes) — no broker checks, no
  messages, no verdict tables: what any vectorised engine pays to look at the bytes at all.

Runs are interleaved and repeated (best of each), so a load spike hits all three.  Prints
records/s for each, the ratio over pandas and kqlab's share of the limit; the last line is
one JSON object.  ``--quick`` uses 200k records and two repetitions.
"""

from __future__ import annotations

import argparse
import os
import random
import struct
import sys
import time

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kqlab.kafka.builder import BatchBuilder, Record
from kqlab.kafka.log import scan_buffer
from kqlab.policy import loads_policy
from kqlab.validate.replayer import Replayer
from kqlab.validate.sample import Sample

NOW = 1_763_700_000_000
POLICY = """
kqlab: 1
name: bench-bytes
broker:
  version: '4.0'
  configs: {cleanup.policy: compact, message.timestamp.before.max.ms: '86400000'}
rules:
- {id: key, kind: key_required}
- {id: size, kind: value_size, max: 120}
- {id: trace, kind: header_required, name: trace-id}
- {id: headers, kind: headers_size, max: 64}
- {id: schema, kind: schema_id_allowed, ids: [1, 2]}
"""


def make_sample(n: int, per_batch: int = 100, seed: int = 3) -> Sample:
    from kqlab.kafka.batch import decode_records

    rng = random.Random(seed)
    batches = []
    offset = seq = 0
    ts = NOW - 600_000
    while offset < n:
        k = min(per_batch, n - offset)
        b = BatchBuilder(base_offset=offset, base_timestamp=ts, producer_id=11,
                         producer_epoch=0, base_sequence=seq, partition_leader_epoch=1)
        for i in range(k):
            sid = 1 if rng.random() < 0.999 else 7  # a few unexpected schema ids
            body = b"x" * rng.randrange(60, 118)
            headers = (("trace-id", b"%016x" % rng.getrandbits(64)), ("source", b"bench"))
            if rng.random() < 0.0005:
                headers = headers[1:]
            b.append(Record(key=b"k%07d" % rng.randrange(10**7),
                            value=b"\0" + struct.pack(">i", sid) + body,
                            headers=headers, timestamp=ts + i))
        batches.append(b.build())
        offset += k
        seq += k
        ts += 50
    data = b"".join(batches)
    decoded = decode_records(data, topic="bench", partition=0)
    raw = [bb for _, bb in scan_buffer(data)]
    return Sample(decoded.records, decoded.batches, raw)


def run_kqlab(sample: Sample, policy) -> int:
    v = Replayer(sample, now=NOW).run(policy)
    v.summary()
    return v.records.num_rows


def run_pandas(df) -> int:
    import numpy as np

    key_missing = df["key"].isna()
    size_bad = df["value"].str.len() > 120
    trace_missing = ~df["headers"].apply(lambda hs: any(h["key"] == "trace-id" for h in hs))
    headers_big = df["headers"].apply(
        lambda hs: sum(len(h["key"]) + len(h["value"] or b"") for h in hs)) > 64
    sid = df["value"].apply(lambda v: int.from_bytes(v[1:5], "big") if v and v[0] == 0 else -1)
    schema_bad = ~sid.isin([1, 2])
    failed = key_missing | size_bad | trace_missing | headers_big | schema_bad
    return int(np.asarray(failed).size)


def run_arrow_limit(records) -> int:
    """The five rules as bare Arrow kernels + numpy: which records fail, nothing else."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = records.num_rows
    key = records.column("key").chunk(0)
    value = records.column("value").chunk(0)
    headers = records.column("headers").chunk(0)
    failed = pc.is_null(key).to_numpy(zero_copy_only=False)
    vlen = pc.binary_length(value).fill_null(-1).to_numpy(zero_copy_only=False)
    failed |= vlen > 120
    flat = pc.list_flatten(headers)
    parent = pc.list_parent_indices(headers).to_numpy(zero_copy_only=False)
    hkey, hval = flat.field("key"), flat.field("value")
    trace = np.zeros(n, dtype=bool)
    trace[parent[pc.equal(hkey, pa.scalar("trace-id")).to_numpy(zero_copy_only=False)]] = True
    failed |= ~trace
    per = pc.add(pc.binary_length(hkey), pc.binary_length(hval).fill_null(0))
    failed |= np.bincount(parent, weights=per.to_numpy(zero_copy_only=False),
                          minlength=n) > 64
    head = pc.binary_slice(value, 0, 5)
    framed = pc.and_(pc.equal(pc.binary_length(head), 5),
                     pc.equal(pc.binary_slice(head, 0, 1), pa.scalar(b"\0", pa.binary())))
    ids = np.frombuffer(pc.if_else(framed, head, pa.scalar(b"\0\0\0\0\0", pa.binary()))
                        .buffers()[2], dtype=np.uint8).reshape(-1, 5)[:, 1:].copy().view(">i4")
    failed |= ~np.isin(ids.reshape(-1), [1, 2]) | ~framed.to_numpy(zero_copy_only=False)
    return int(failed.size)


def best_rates(runs: dict, n: int, reps: int) -> dict[str, float]:
    """records/s of each ``name: (fn, args)``, best of ``reps`` rounds (interleaved)."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(reps):
        for name, (fn, args) in runs.items():
            t0 = time.perf_counter()
            got = fn(*args)
            best[name] = min(best[name], time.perf_counter() - t0)
            if got != n:
                raise AssertionError(f"{name} handled {got} records, expected {n}")
    return {name: n / t for name, t in best.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k records, two repetitions")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--per-batch", type=int, default=100)
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (200_000 if args.quick else 1_000_000)
    reps = args.reps or (2 if args.quick else 3)
    policy = loads_policy(POLICY)
    t0 = time.perf_counter()
    sample = make_sample(n, args.per_batch)
    print(f"built and decoded {n} records in {sample.batches.num_rows} batches "
          f"({time.perf_counter() - t0:.1f} s, not timed)")
    small = make_sample(2000, args.per_batch)
    run_kqlab(small, policy)  # first-use costs
    run_arrow_limit(small.records)
    df = sample.records.to_pandas()
    rates = best_rates({"kqlab": (run_kqlab, (sample, policy)),
                        "limit": (run_arrow_limit, (sample.records,)),
                        "pandas": (run_pandas, (df,))}, n, reps)
    k, lim, p = rates["kqlab"], rates["limit"], rates["pandas"]
    print(f"kqlab replay (5 rules + broker checks + verdicts): {k:>12,.0f} records/s")
    print(f"the limit: the 5 rules as one bare Arrow pass:      {lim:>12,.0f} records/s")
    print(f"pandas, the same 5 rules only:                      {p:>12,.0f} records/s")
    print(f"ratio {k / p:.1f}x pandas, {k / lim:.2f} of the limit; goal >= 5,000,000 records/s "
          f"(load average {os.getloadavg()[0]:.2f})")
    print(orjson.dumps({"benchmark": "replay", "records": n, "batches": sample.batches.num_rows,
                        "kqlab_records_per_s": round(k), "limit_records_per_s": round(lim),
                        "pandas_records_per_s": round(p), "ratio": round(k / p, 2),
                        "limit_ratio": round(k / lim, 3), "goal_records_per_s": 5_000_000,
                        "load_average": round(os.getloadavg()[0], 2)}).decode())


if __name__ == "__main__":
    main()
