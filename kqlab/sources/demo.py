"""The built-in demo partition: a generated log segment with realistic traffic and known faults.

``make demo`` replays it.  The segment holds several producers (idempotent and transactional),
every codec, and a handful of batches that a broker with the demo topic configs rejects, so the
summary shows each kind of verdict.  Generation is deterministic for a given seed and ``now``.
"""

from __future__ import annotations

import random
from pathlib import Path

from kqlab.kafka.builder import BatchBuilder, Record, control_record, rewrite_header
from kqlab.kafka.compression import Codec

DEMO_TOPIC = "orders"
DEMO_PARTITION = 0
#: topic configs the demo validates against
DEMO_CONFIGS = {
    "cleanup.policy": "compact,delete",
    "message.timestamp.before.max.ms": str(7 * 24 * 3600 * 1000),
    "message.timestamp.after.max.ms": str(3600 * 1000),
    "max.message.bytes": str(64 * 1024),
}
_STATUSES = ("NEW", "PAID", "SHIPPED", "CANCELLED")


def _order(rng: random.Random, i: int) -> Record:
    key = f"order-{rng.randrange(10_000):05d}".encode()
    value = (f'{{"id":{i},"status":"{rng.choice(_STATUSES)}","amount":'
             f'{rng.randrange(1, 50_000) / 100:.2f},"currency":"EUR"}}').encode()
    headers = (("source", b"checkout"), ("trace-id", f"{rng.getrandbits(64):016x}".encode()))
    return Record(value=value, key=key, headers=headers)


#: batch -> (record, what, new value): faults in content, for the demo policy to find
_CONTENT_FAULTS: dict[int, tuple[int, str, object]] = {
    3: (0, "value", b'{"id":3,"status":"REFUNDED","amount":12.50,"currency":"EUR"}'),
    9: (0, "value", b'{"id":9,"status":"NEW","amount":,"currency":"EUR"}'),
    16: (0, "value", b'{"id":16,"status":"PAID","amount":-4.99,"currency":"EUR"}'),
    24: (0, "headers", (("source", b"checkout"),)),
    31: (0, "value", b'{"id":31,"status":"PAID","amount":20.00,"currency":"USD"}'),
    47: (0, "value", b'{"id":47,"status":"SHIPPED","amount":7.25}'),
}


def demo_policy_path():
    """The demo policy shipped with the package (``orders-quality``)."""
    from importlib.resources import files

    return files("kqlab.sources") / "demo_policy.yaml"


def demo_batches(now_ms: int, *, seed: int = 7, batches: int = 60) -> list[bytes]:
    """The demo partition's batches, in log order, as a broker would have stored them."""
    rng = random.Random(seed)
    out: list[bytes] = []
    offset = 0
    seq = {1001: 0, 1002: 0}
    codecs = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
    faults = {7: "no_key", 13: "old_timestamp", 21: "future_timestamp", 29: "sequence_gap",
              37: "bad_crc", 44: "too_large"}
    txn_open = False
    content = _CONTENT_FAULTS
    for i in range(batches):
        pid = 1001 if i % 2 == 0 else 1002
        n = rng.randrange(1, 12)
        ts = now_ms - rng.randrange(60_000, 3_600_000)
        fault = faults.get(i)
        records = [_order(rng, offset + k) for k in range(n)]
        if fault == "no_key":
            records[n // 2] = Record(value=records[n // 2].value, headers=records[n // 2].headers)
        if fault == "old_timestamp":
            ts = now_ms - 30 * 24 * 3600 * 1000
        if fault == "future_timestamp":
            ts = now_ms + 2 * 3600 * 1000
        if fault == "too_large":
            records = [Record(key=b"order-big", value=rng.randbytes(70_000))]
            n = 1
        if fault == "sequence_gap":
            seq[pid] += 5
        if i in content:  # a record-level fault only a policy can see (the RNG is untouched)
            k, field, value = content[i]
            r = records[k]
            if field == "headers":
                records[k] = Record(value=r.value, key=r.key, headers=value)
            else:
                records[k] = Record(value=value, key=r.key, headers=r.headers)
        transactional = pid == 1002 and 20 <= i < 40
        b = BatchBuilder(codec=codecs[i % len(codecs)], base_offset=offset, base_timestamp=ts,
                         producer_id=pid, producer_epoch=0, base_sequence=seq[pid],
                         transactional=transactional, partition_leader_epoch=3)
        for k, r in enumerate(records):
            b.append(Record(value=r.value, key=r.key, headers=r.headers, timestamp=ts + k * 3))
        data = b.build()
        if fault == "bad_crc":
            data = rewrite_header(data, fix_crc=False, max_timestamp=ts + 1)
            data = data[:-3] + bytes(b ^ 0x5A for b in data[-3:])
        out.append(data)
        offset += n
        seq[pid] += n
        txn_open = txn_open or transactional
        if pid == 1002 and txn_open and (i == 39 or (transactional and i % 10 == 9)):
            marker = BatchBuilder(base_offset=offset, base_timestamp=ts + 50, producer_id=1002,
                                  producer_epoch=0, control=True, transactional=True,
                                  partition_leader_epoch=3)
            marker.append(control_record(commit=True, coordinator_epoch=1, timestamp=ts + 50))
            out.append(marker.build())
            offset += 1
            txn_open = False
    return out


def write_demo_segment(directory: str | Path, now_ms: int, *, seed: int = 7,
                       truncated_tail: bool = True) -> Path:
    """Write ``<directory>/orders-0/00000000000000000000.log``; return the partition folder.

    With ``truncated_tail`` the segment ends in half a batch, as after a broker crash.
    """
    folder = Path(directory) / f"{DEMO_TOPIC}-{DEMO_PARTITION}"
    folder.mkdir(parents=True, exist_ok=True)
    data = b"".join(demo_batches(now_ms, seed=seed))
    if truncated_tail:
        tail = demo_batches(now_ms, seed=seed + 1, batches=1)[0]
        data += tail[: len(tail) // 2]
    (folder / "00000000000000000000.log").write_bytes(data)
    return folder
