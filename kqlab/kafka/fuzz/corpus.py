"""The fuzz corpus: seeds spanning the spec's space, built deterministically.

Every kind of batch the checks are about — v2 with every codec, idempotent, transactional and
control batches, timestamps at the bounds, the LogAppendTime bit, odd offset deltas, unused
attribute bits, empty batches, legacy v0/v1 plain messages and compressed wrappers — so the
mutations (:mod:`~kqlab.kafka.fuzz.mutate`) start from every corner.
"""

from __future__ import annotations

import random

from kqlab.kafka.builder import Record, control_record
from kqlab.kafka.fuzz.seeds import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    NOW,
    LegacySeed,
    Seed,
    make_v2,
)

TS_BASES = [NOW, NOW, NOW, NOW - 1000, NOW + 1000, NOW - 1001, NOW + 1001, NOW - 3_600_000,
            NOW - 3_600_001, NOW + 3_600_001, NOW - 60_001, NOW + 60_001, NOW - 600_001,
            -1, 0, LONG_MIN, LONG_MAX, LONG_MAX - 5, LONG_MIN + 5]
TS_DELTAS = [0, 0, 0, 1, -1, 999, -1001, 60_001, -3_600_001, 5_000]
#: header keys; a non-UTF-8 one (Java decodes it to U+FFFD) is rare, as in real data
_KEYS: list[str | bytes] = ["trace-id", "a", "", "ключ", b"k\x00"]
HEADER_KEYS: list[str | bytes] = _KEYS * 4 + [b"\xff\xfe"]


def _random_records(rng: random.Random, n: int, *, keyed: float = 0.7, big: bool = False,
                    ts_base: int = NOW) -> list[Record]:
    recs = []
    for _ in range(n):
        key = None if rng.random() > keyed else rng.choice([b"", b"k",
                                                            b"key-%d" % rng.randrange(99)])
        if rng.random() < 0.12:
            value = None
        elif big:
            value = b"payload-" * rng.randrange(20, 120)
        else:
            value = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 24)))
        headers: tuple[tuple[str | bytes, bytes | None], ...] = ()
        if rng.random() < 0.35:
            headers = tuple((rng.choice(HEADER_KEYS), rng.choice([None, b"", b"v", b"x" * 9]))
                            for _ in range(rng.randrange(1, 4)))
        ts = None if rng.random() < 0.5 else _wrap64(ts_base + rng.choice(TS_DELTAS))
        recs.append(Record(value=value, key=key, headers=headers, timestamp=ts))
    return recs


def _wrap64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def build_corpus(seed: int = 0xC0FFEE, size: int = 360) -> list[Seed]:
    """Seeds spanning the spec's space, built deterministically (the same on every run)."""
    rng = random.Random(seed)
    corpus: list[Seed] = []
    kinds = ["plain", "codec", "idempotent", "transactional", "control", "timestamps", "lat",
             "big", "offsets", "attrs", "empty", "legacy", "legacy-wrapper"]
    while len(corpus) < size:
        kind = kinds[len(corpus) % len(kinds)]
        codec = rng.randrange(5)
        framing = rng.choice(["xerial", "xerial", "raw"])
        n = rng.choice([1, 1, 2, 3, 5, 8])
        if kind == "plain":
            corpus.append(make_v2(_random_records(rng, n), label="plain"))
        elif kind == "codec":
            corpus.append(make_v2(_random_records(rng, n), codec=rng.randrange(1, 5),
                                  framing=framing, label="codec"))
        elif kind == "idempotent":
            pid = rng.choice([0, 5, 5, 2**40, LONG_MAX])
            corpus.append(make_v2(_random_records(rng, n), codec=codec, framing=framing,
                                  producer_id=pid, producer_epoch=rng.choice([0, 0, 1, 32767]),
                                  base_sequence=rng.choice([0, 0, 1, 7, INT_MAX, INT_MAX - 1]),
                                  label="idempotent"))
        elif kind == "transactional":
            corpus.append(make_v2(_random_records(rng, n), codec=codec, framing=framing,
                                  producer_id=rng.choice([5, 9, -1]), producer_epoch=0,
                                  base_sequence=rng.choice([0, 3]), transactional=True,
                                  label="transactional"))
        elif kind == "control":
            recs = [control_record(commit=rng.random() < 0.6,
                                   coordinator_epoch=rng.randrange(3), timestamp=NOW)]
            if rng.random() < 0.2:
                recs.append(Record(value=b"not-a-marker", key=b"\x00\x00\x00\x01"))
            corpus.append(make_v2(recs, producer_id=rng.choice([5, 9]), producer_epoch=0,
                                  base_sequence=-1, transactional=True, control=True,
                                  label="control"))
        elif kind == "timestamps":
            base = rng.choice(TS_BASES)
            corpus.append(make_v2(_random_records(rng, n, ts_base=base), codec=codec,
                                  framing=framing, base_timestamp=base,
                                  max_timestamp=rng.choice([None, -1, base]),
                                  label="timestamps"))
        elif kind == "lat":
            corpus.append(make_v2(_random_records(rng, n), codec=codec, framing=framing,
                                  timestamp_type=1,
                                  max_timestamp=rng.choice([NOW, -1, NOW - 7_200_000, LONG_MAX]),
                                  label="lat"))
        elif kind == "big":
            corpus.append(make_v2(_random_records(rng, rng.randrange(1, 4), big=True),
                                  codec=codec, framing=framing, label="big"))
        elif kind == "offsets":
            recs = _random_records(rng, max(n, 2))
            deltas = rng.choice([[0] * len(recs), list(range(len(recs)))[::-1],
                                 [rng.randrange(-3, 9) for _ in recs]])
            recs = [Record(value=r.value, key=r.key, headers=r.headers, timestamp=r.timestamp,
                           offset_delta=d) for r, d in zip(recs, deltas, strict=True)]
            corpus.append(make_v2(recs, codec=codec, framing=framing, label="offsets"))
        elif kind == "attrs":
            corpus.append(make_v2(_random_records(rng, n), codec=codec, framing=framing,
                                  extra_attributes=rng.choice([0x40, 0x80, 0x100, 0xFF00]),
                                  partition_leader_epoch=rng.choice([0, 7, INT_MIN]),
                                  label="attrs"))
        elif kind == "empty":
            s = make_v2([], codec=0, producer_id=rng.choice([-1, 1324]), producer_epoch=10,
                        base_sequence=984, transactional=rng.random() < 0.5, label="empty")
            s.hdr[6] = rng.choice([-1, 0, 5])
            corpus.append(s)
        elif kind == "legacy":
            magic = rng.randrange(2)
            corpus.append(LegacySeed(magic, 0, [(rng.choice([None, b"k"]),
                                                 rng.choice([None, b"value"]),
                                                 rng.choice([NOW, NOW - 5_000, -1]))],
                                     timestamp_type=rng.choice([0, 0, 1]), label="legacy"))
        else:
            magic = rng.randrange(2)
            msgs = [(rng.choice([None, b"k"]), rng.choice([b"v" * rng.randrange(9), None]),
                     rng.choice([NOW, NOW + i, NOW - 2_000]))
                    for i in range(rng.choice([1, 2, 3, 20]))]
            corpus.append(LegacySeed(
                magic, rng.choice([1, 2, 3, 1, 4]) if magic else rng.choice([1, 2]), msgs,
                base_offset=rng.choice([0, 0, 100]), timestamp_type=rng.choice([0, 0, 1]),
                inner_magic=rng.choice([None, None, None, 1 - magic]),
                inner_attributes=rng.choice([0, 0, 0, 0, 1, 0x08]),
                wrapper_offset=rng.choice([None, None, 0, 1]), label="legacy-wrapper"))
    return corpus


