"""Fuzzed differential cases for the broker oracle, tagged by check family (issue 27 item 3).

Why not the in-process fuzzer's inputs as they are: the real broker judges timestamps against
its wall clock and keeps producer state across a partition's batches, so the cases here are
built around the real ``now`` and give every case that carries a producer id an id of its own
(:class:`PidPool`).  Cases of one topic setup then share a partition (:mod:`.packed`): no case
can see another's producer state, and the broker's throughput is not spent on creating one
partition per case.

:func:`fuzz_cases` is deterministic in ``(seed, index)`` but for the clock: the same seed and
index give the same mutations and the same offsets from ``now``.  Timestamps are placed at
least :data:`MARGIN_MS` away from every bound, so the seconds between kqlab's clock and the
broker's never decide a verdict.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from kqlab.kafka.builder import Record, control_record
from kqlab.kafka.fuzz.corpus import _random_records
from kqlab.kafka.fuzz.mutate import (
    _stream_hook,
    clone,
    fix_crcs,
    fix_length,
    mutate_bytes,
    mutate_v2_struct,
)
from kqlab.kafka.fuzz.seeds import INT_MAX, LONG_MAX, LONG_MIN, V2Seed, _int16, encode_v2, make_v2
from kqlab.kafka.oracle.compare import Ctx

#: topic setups: name -> (topic config, produce version).  Every config is set at creation.
SETUPS: dict[str, tuple[dict[str, str], int]] = {
    "default": ({}, 8),
    "default-v9": ({}, 9),
    "compact": ({"cleanup.policy": "compact"}, 8),
    "compact-lz4": ({"cleanup.policy": "compact", "compression.type": "lz4"}, 8),
    "lat": ({"message.timestamp.type": "LogAppendTime"}, 8),
    "bounds": ({"message.timestamp.before.max.ms": "7200000",
                "message.timestamp.after.max.ms": "3600000"}, 8),
    "lz4": ({"compression.type": "lz4"}, 8),
    "zstd": ({"compression.type": "zstd"}, 8),
    "uncompressed": ({"compression.type": "uncompressed"}, 8),
    "gzip-small": ({"compression.type": "gzip", "max.message.bytes": "1500"}, 8),
    "small": ({"max.message.bytes": "1200"}, 8),
    "txn": ({}, 8),  # transactional producers (one partition each; see packed.py)
}
#: how far from a timestamp bound a fuzzed timestamp stays (the clocks' distance never counts)
MARGIN_MS = 600_000
BEFORE, AFTER = 7_200_000, 3_600_000


class PidPool:
    """Producer ids no other case uses (far above what InitProducerId grants on a fresh
    broker), so packed cases never share producer state."""

    def __init__(self, start: int = 10**12) -> None:
        self.next = start

    def take(self) -> int:
        self.next += 1
        return self.next


@dataclass(slots=True)
class FuzzCase:
    """One case: the batches one producer sends to a (shared) partition, in order."""

    family: str
    setup: str
    batches: list[bytes]
    ops: list[str] = field(default_factory=list)
    index: int = 0
    #: "transactional": run with a granted transactional id (see :mod:`.packed`)
    producer: str | None = None
    #: for transactional cases: steps ("add",), ("produce", fn(pid, epoch) -> bytes), ("end", c)
    steps: list[tuple[object, ...]] = field(default_factory=list)


Gen = Callable[[random.Random, int, PidPool, list[str]], tuple[str, list[bytes]]]


def _seed(rng: random.Random, now: int, *, codec: int | None = None, n: int | None = None,
          keyed: float = 0.8, big: bool = False) -> V2Seed:
    """A clean v2 batch around ``now`` (record timestamps within a few seconds of it)."""
    count = n if n is not None else rng.choice([1, 1, 2, 3, 5, 8])
    recs = [Record(value=r.value, key=r.key, headers=r.headers,
                   timestamp=None if r.timestamp is None else now + rng.randrange(-5000, 5000))
            for r in _random_records(rng, count, keyed=keyed, big=big, ts_base=now)]
    c = rng.randrange(5) if codec is None else codec
    return make_v2(recs, codec=c, base_timestamp=now,
                   framing=rng.choice(["xerial", "xerial", "raw"]))


def _crc(rng: random.Random, now: int, pids: PidPool, ops: list[str]) -> tuple[str, list[bytes]]:
    s = _seed(rng, now)
    data = bytearray(encode_v2(s))
    what = rng.choice(["flip-body", "flip-body", "crc-field", "header-stale", "flip-many"])
    ops.append(f"crc.{what}")
    if what == "crc-field":
        data[17 + rng.randrange(4)] ^= 1 << rng.randrange(8)
    elif what == "header-stale":  # a covered header field changed, CRC left as it was
        data[rng.choice([21, 22, 23, 27, 35, 43, 51, 53, 57])] ^= 1 << rng.randrange(8)
    else:
        for _ in range(1 if what == "flip-body" else rng.randrange(2, 6)):
            data[rng.randrange(61, len(data)) if len(data) > 61 else 21] ^= \
                1 << rng.randrange(8)
    return rng.choice(["default", "lz4", "compact"]), [bytes(data)]


def _sizes(rng: random.Random, now: int, pids: PidPool, ops: list[str]) -> tuple[str, list[bytes]]:
    r = rng.random()
    if r < 0.3:  # batches near and over max.message.bytes
        s = _seed(rng, now, big=True, n=rng.randrange(1, 5))
        ops.append("size.big")
        return rng.choice(["small", "gzip-small", "default"]), [encode_v2(s)]
    s = _seed(rng, now, codec=rng.choice([0, 0, 0, 1, 3, 4]))
    if r < 0.65:  # record-level lengths and varints (structural, CRC fixed)
        hook = None
        for _ in range(rng.choice([1, 1, 2])):  # the varint / length / header-count branches
            hook = mutate_v2_struct(s, _Pinned(rng, rng.random() * 0.5), [], ops) or hook
        data = encode_v2(s, hook)
    else:  # batch-level: truncate, extend, insert, the length field
        data = encode_v2(s)
        for _ in range(rng.choice([1, 2])):
            data = mutate_bytes(data, _Pinned(rng, rng.uniform(0.50, 0.82)), [], ops)
        if rng.random() < 0.3:
            data = fix_length(data)
            ops.append("fix-length")
    if rng.random() < 0.8:
        data = fix_crcs(data)
        ops.append("crc-fix")
    return rng.choice(["default", "default", "lz4", "uncompressed"]), [data]


class _Pinned(random.Random):
    """An RNG whose first ``random()`` answers ``first`` (to pick one branch of a mutator
    written as a chain of ``if r < ...``), then delegates to ``rng``."""

    def __init__(self, rng: random.Random, first: float) -> None:
        super().__init__(rng.random())
        self._first: float | None = first

    def random(self) -> float:
        if self._first is not None:
            v, self._first = self._first, None
            return v
        return super().random()


def _magic(rng: random.Random, now: int, pids: PidPool, ops: list[str]) -> tuple[str, list[bytes]]:
    s = _seed(rng, now)
    what = rng.choice(["magic", "attributes", "attributes", "legacy"])
    ops.append(f"magic.{what}")
    if what == "magic":
        s.hdr[3] = rng.choice([0, 1, 3, -1, 127])
    elif what == "attributes":
        a = s.hdr[5]
        s.hdr[5] = _int16(rng.choice([a ^ 0x08, a ^ 0x10, a ^ 0x20, a | 0x40, a | 0x80,
                                      (a & ~7) | rng.randrange(8), a | 0x7F00, a | 0x30]))
        if s.hdr[5] & 0x10 and rng.random() < 0.5:  # transactional bit with a producer
            s.hdr[9], s.hdr[10], s.hdr[11] = pids.take(), 0, 0
            ops.append("with-pid")
    else:
        from kqlab.kafka import legacy

        magic = rng.randrange(2)
        data = legacy.encode_message(0, b"k", b"value", magic=magic, attributes=0,
                                     timestamp=now if magic else -1)
        return "default", [data]
    data = encode_v2(s)
    return rng.choice(["default", "lz4", "lat"]), [data]


def _codecs(rng: random.Random, now: int, pids: PidPool, ops: list[str]
            ) -> tuple[str, list[bytes]]:
    codec = rng.randrange(1, 5)
    s = _seed(rng, now, codec=codec)
    ops.append(f"codec.{codec}")
    hook = None
    if rng.random() < 0.6:
        hook = _stream_hook(rng, codec, ops)
    elif rng.random() < 0.3:
        s.hdr[5] = _int16((s.hdr[5] & ~7) | rng.choice([c for c in range(5) if c != codec]))
        ops.append("codec.bits-lie")
    data = encode_v2(s, hook)
    return rng.choice(["default", "lz4", "zstd", "uncompressed", "gzip-small"]), [data]


def _timestamps(rng: random.Random, now: int, pids: PidPool, ops: list[str]
                ) -> tuple[str, list[bytes]]:
    inside = [0, -BEFORE + MARGIN_MS, AFTER - MARGIN_MS, -1000, 1000]
    outside = [-BEFORE - MARGIN_MS, AFTER + MARGIN_MS, -10 * BEFORE, 10 * AFTER]
    base = now + rng.choice(inside + outside)
    special = rng.random() < 0.15
    if special:
        base = rng.choice([-1, 0, LONG_MIN, LONG_MAX, -2])
        ops.append("ts.special")
    recs = _random_records(rng, rng.choice([1, 2, 3, 5]), ts_base=now)
    recs = [Record(value=r.value, key=r.key, headers=r.headers,
                   timestamp=None if rng.random() < 0.5 else
                   (base + rng.choice([0, 0, 10, -10])) if not special else
                   rng.choice([base, now, -1]))
            for r in recs]
    lat = rng.random() < 0.2
    s = make_v2(recs, codec=rng.randrange(5), base_timestamp=base, timestamp_type=int(lat))
    if rng.random() < 0.25:
        s.hdr[8] = rng.choice([-1, now, base - 1, now - 10 * BEFORE])
        ops.append("ts.max-lies")
    ops.append("ts.lat-bit" if lat else "ts.create")
    return rng.choice(["default", "bounds", "bounds", "lat"]), [encode_v2(s)]


def _compaction(rng: random.Random, now: int, pids: PidPool, ops: list[str]
                ) -> tuple[str, list[bytes]]:
    s = _seed(rng, now, keyed=rng.choice([1.0, 0.9, 0.5, 0.0]))
    ops.append("compact.keys")
    return rng.choice(["compact", "compact", "compact-lz4", "default"]), [encode_v2(s)]


def _counts(rng: random.Random, now: int, pids: PidPool, ops: list[str]) -> tuple[str, list[bytes]]:
    s = _seed(rng, now, n=rng.choice([1, 2, 3, 5]))
    n = len(s.recs)
    what = rng.choice(["count", "last-delta", "deltas", "deltas", "drop-dup"])
    ops.append(f"counts.{what}")
    if what == "count":
        s.hdr[12] = rng.choice([0, -1, n + 1, n - 1, INT_MAX])
    elif what == "last-delta":
        s.hdr[6] = rng.choice([-1, 0, n, n - 2, INT_MAX])
    elif what == "deltas":
        deltas = rng.choice([[0] * n, list(range(n))[::-1], [rng.randrange(-3, 9) for _ in
                                                             range(n)], [i + 1 for i in range(n)]])
        s = clone(s)
        for rec, d in zip(s.recs, deltas, strict=True):
            from kqlab.kafka.varint import encode_varint

            for t in rec["toks"]:
                if t[0] == "offd":
                    t[1] = encode_varint(d)
    else:
        mutate_v2_struct(s, _Pinned(rng, 0.55), [], ops)
    return rng.choice(["default", "lz4", "uncompressed", "compact"]), [encode_v2(s)]


def _producer(rng: random.Random, now: int, pids: PidPool, ops: list[str]
              ) -> tuple[str, list[bytes]]:
    """Several idempotent batches of one producer: gaps, duplicates, epoch changes, wraps."""
    pid = pids.take()
    epoch = rng.choice([0, 0, 1, 32767, 5])
    seq = rng.choice([0, 0, 0, 5, INT_MAX - 2, INT_MAX])
    out: list[bytes] = []
    for _ in range(rng.randrange(1, 6)):
        r = rng.random()
        if out and r < 0.15:
            out.append(out[rng.randrange(len(out))])
            ops.append("pid.resend")
            continue
        s = _seed(rng, now, n=rng.choice([1, 2, 3]))
        if r < 0.3:
            seq += rng.choice([1, 2, -1, -2, 10])
            ops.append("pid.gap")
        elif r < 0.4:
            epoch += rng.choice([1, -1, 2])
            seq = rng.choice([0, 0, 3])
            ops.append("pid.epoch")
        s.hdr[9], s.hdr[10], s.hdr[11] = pid, _int16(epoch), _fit32(seq)
        out.append(encode_v2(s))
        seq += len(s.recs)
        if seq > INT_MAX:
            seq -= INT_MAX + 1
    return rng.choice(["default", "default", "lz4", "compact"]), out


def _fit32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def _control(rng: random.Random, now: int, pids: PidPool, ops: list[str]
             ) -> tuple[str, list[bytes]]:
    """Control batches sent by a client (the coordinator's job): markers, odd control records."""
    pid = pids.take() if rng.random() < 0.8 else -1
    what = rng.choice(["marker", "marker", "bad-record", "no-txn-bit", "two-records"])
    ops.append(f"control.{what}")
    recs = [control_record(commit=rng.random() < 0.6, coordinator_epoch=rng.randrange(3),
                           timestamp=now)]
    if what == "bad-record":
        recs = [Record(value=b"x", key=rng.choice([b"\x00\x00\x00\x07", b"\x00", None]),
                       timestamp=now)]
    elif what == "two-records":
        recs.append(Record(value=b"not-a-marker", key=b"\x00\x00\x00\x01", timestamp=now))
    s = make_v2(recs, producer_id=pid, producer_epoch=0, base_sequence=-1,
                transactional=what != "no-txn-bit", control=True, base_timestamp=now)
    return rng.choice(["default", "compact"]), [encode_v2(s)]


FAMILIES: dict[str, Gen] = {
    "crc": _crc, "sizes": _sizes, "magic-attributes": _magic, "codecs": _codecs,
    "timestamps": _timestamps, "compaction": _compaction, "counts-deltas": _counts,
    "producer": _producer, "control": _control,
}


def _txn_batch(rng: random.Random, *, seq: int, epoch_delta: int = 0, transactional: bool = True,
               n: int = 2) -> Callable[[Ctx], bytes]:
    """A batch built at send time with the producer id / epoch granted then (EndTxn v5 bumps
    the epoch of a transactions-v2 producer on 4.x, so it is not known when cases are made)."""
    seed = rng.random()

    def build(ctx: Ctx) -> bytes:
        assert ctx.pid is not None
        r = random.Random(seed)
        s = _seed(r, ctx.now, n=n)
        s.hdr[5] = _int16((s.hdr[5] & ~0x30) | (0x10 if transactional else 0))
        s.hdr[9], s.hdr[10], s.hdr[11] = (ctx.pid.producer_id,
                                          _int16(ctx.pid.producer_epoch + epoch_delta), seq)
        return encode_v2(s)

    return build


def _transactions(rng: random.Random, ops: list[str]) -> list[tuple[object, ...]]:
    """Protocol steps of one transactional producer: AddPartitionsToTxn, batches with good
    and bad sequences and epochs, commit or abort (the coordinator's marker), and the batches
    after it: the old epoch (fenced where 4.x bumped it at EndTxn) and a new transaction."""
    steps: list[tuple[object, ...]] = [("add",)]
    first = rng.choice([0, 0, 0, 3])
    ops.append(f"txn.first-seq-{first}")
    steps.append(("produce", _txn_batch(rng, seq=first)))
    nxt = first + 2
    what = rng.choice(["next", "gap", "dup", "old-epoch", "non-txn"])
    ops.append(f"txn.{what}")
    if what == "next":
        steps.append(("produce", _txn_batch(rng, seq=nxt)))
    elif what == "gap":
        steps.append(("produce", _txn_batch(rng, seq=nxt + 3)))
    elif what == "dup":
        steps.append(("produce", _txn_batch(rng, seq=first)))
    elif what == "old-epoch":
        steps.append(("produce", _txn_batch(rng, seq=nxt, epoch_delta=-1)))
    else:
        steps.append(("produce", _txn_batch(rng, seq=nxt, transactional=False)))
    commit = rng.random() < 0.6
    steps.append(("end", commit))
    ops.append("txn.commit" if commit else "txn.abort")
    after = rng.choice(["new-txn", "new-txn", "stale-epoch", "stale-epoch-seq"])
    ops.append(f"txn.after-{after}")
    if after == "new-txn":
        steps += [("add",), ("produce", _txn_batch(rng, seq=rng.choice([0, 0, nxt + 2])))]
        if rng.random() < 0.5:
            steps.append(("end", rng.random() < 0.5))
    else:  # the epoch of before EndTxn (the current one on 3.9, fenced on a bumped 4.x)
        steps += [("add",), ("produce", _txn_batch(rng, seq=0 if after == "stale-epoch"
                                                   else nxt + 2, epoch_delta=-1))]
    return steps


def fuzz_case(seed: int, index: int, now: int, pids: PidPool, *,
              txn_share: float = 0.02) -> FuzzCase:
    """Case ``index`` of the run ``seed``: a family in rotation (every family in every few
    cases), its mutations drawn from ``Random(f"{seed}:{index}")``."""
    rng = random.Random(f"broker-oracle:{seed}:{index}")
    names = sorted(FAMILIES)
    if rng.random() < txn_share:
        ops: list[str] = []
        return FuzzCase("transactions", "txn", [], ops, index, producer="transactional",
                        steps=_transactions(rng, ops))
    family = names[index % len(names)]
    ops = []
    setup, batches = FAMILIES[family](rng, now, pids, ops)
    return FuzzCase(family, setup, batches, ops, index)


def fuzz_cases(seed: int, count: int, now: int, *, start: int = 0,
               txn_share: float = 0.02) -> list[FuzzCase]:
    """``count`` cases from index ``start`` (deterministic in ``seed`` and the index)."""
    pids = PidPool(10**12 + start * 10)
    return [fuzz_case(seed, i, now, pids, txn_share=txn_share)
            for i in range(start, start + count)]
