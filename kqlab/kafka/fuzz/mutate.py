"""Fuzz mutations: structural (on a seed's fields before encoding) and on the encoded bytes.

Structural mutations corrupt varints (too long, negative, overflowing), record lengths and
header counts, duplicate / drop / reorder / splice records, overwrite batch-header fields and
corrupt compressed streams; byte mutations flip bits, overwrite header fields, truncate,
extend, insert and splice.  :func:`mutate_seed` may then recompute the CRCs so the input
reaches the deeper checks.  Each mutation appends its name to ``ops`` (what the case is).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from typing import Any

from kqlab.kafka.builder import control_record
from kqlab.kafka.checksums import crc32
from kqlab.kafka.compression import Codec, compress, decompress
from kqlab.kafka.fuzz.seeds import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    NOW,
    Seed,
    V2Seed,
    _fit,
    _int16,
    encode_legacy,
    encode_seed,
    encode_v2,
    make_v2,
)
from kqlab.kafka.records_parser import crc32c
from kqlab.kafka.varint import (
    VarintError,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

TOO_LONG_VARINT = b"\xff\xff\xff\xff\xff\x01"  # continuation bit on the 5th byte
OVERFLOW_VARINT = b"\xfe\xff\xff\xff\x7f"  # 5 bytes whose bits above 32 are dropped
TOO_LONG_VARLONG = b"\xff" * 10 + b"\x01"
VARINT_FIELDS = ["tsd", "offd", "klen", "vlen", "hcnt", "hklen", "hvlen", "len"]
#: (offset, struct format) of the v2 header fields a byte mutation overwrites
V2_FIELDS = [(0, ">q"), (8, ">i"), (12, ">i"), (16, ">b"), (17, ">I"), (21, ">h"), (22, ">B"),
             (23, ">i"), (27, ">q"), (35, ">q"), (43, ">q"), (51, ">h"), (53, ">i"), (57, ">i")]
LEGACY_FIELDS = [(0, ">q"), (8, ">i"), (12, ">I"), (16, ">b"), (17, ">B"), (18, ">q"),
                 (18, ">i"), (26, ">i"), (22, ">i")]
CUT_POINTS = [0, 11, 12, 16, 17, 21, 22, 23, 25, 26, 27, 50, 51, 57, 60, 61, 62, 63]




def _int_values(rng: random.Random, fmt: str, data: bytes) -> int:
    """An interesting value for a header field of format ``fmt`` (current bytes ``data``)."""
    width = struct.calcsize(fmt)
    cur = struct.unpack_from(fmt, data, 0)[0] if len(data) >= width else 0
    if fmt in (">b", ">B"):
        vals = [0, 1, 2, 3, -1, 0x7F, -128, cur ^ (1 << rng.randrange(8))]
        if fmt == ">B":
            vals += [0x05, 0x06, 0x07, 0x20, 0x10, 0x08, 0x40, 0x28, 0x18, 0x30]
    elif fmt == ">h":
        vals = [0, 1, -1, 32767, -32768, 5, 6, 7, 0x20, 0x10, 0x08, 0x18, 0x28, cur + 1, cur - 1]
    else:
        bits = 8 * width
        vals = [0, 1, -1, -(1 << (bits - 1)), (1 << (bits - 1)) - 1, cur + 1, cur - 1, cur * 2,
                rng.randrange(-300, 300), 13, 14, 48, 49, NOW % (1 << 31), NOW - 3_600_001,
                NOW + 3_600_001]
    return _fit(fmt, rng.choice(vals))


def _replacement_varint(rng: random.Random, name: str, cur: int | None) -> bytes:
    if name == "tsd":
        return rng.choice([encode_varlong(LONG_MAX), encode_varlong(LONG_MIN),
                           encode_varlong(-NOW), encode_varlong(3_600_001),
                           encode_varlong(-3_600_001), TOO_LONG_VARLONG,
                           b"\xff" * 9 + b"\x7f", b"\x80", encode_varlong((cur or 0) + 1)])
    c = cur or 0
    return rng.choice([encode_varint(-1), encode_varint(-2), encode_varint(-5),
                       encode_varint(INT_MIN), encode_varint(INT_MAX), encode_varint(c + 1),
                       encode_varint(c - 1), encode_varint(0), encode_varint(c + 64),
                       encode_varint(rng.randrange(-300, 300)), TOO_LONG_VARINT,
                       OVERFLOW_VARINT, b"\x80", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80"])


def _decode_token(name: str, data: bytes) -> int | None:
    try:
        return (decode_varlong if name == "tsd" else decode_varint)(data, 0)[0]
    except VarintError:
        return None


def mutate_v2_struct(s: V2Seed, rng: random.Random, corpus: list[Seed], ops: list[str]
                     ) -> Callable[[bytes], bytes] | None:
    """Apply one structural mutation to ``s`` in place; may return a compressed-stream hook."""
    r = rng.random()
    recs = s.recs
    if recs and r < 0.30:  # corrupt one varint field
        rec = rng.choice(recs)
        cands = [t for t in rec["toks"] if t[0] in VARINT_FIELDS]
        if rng.random() < 0.2 or not cands:
            body_len = len(b"".join(t[1] for t in rec["toks"]))
            rec["len"] = _replacement_varint(rng, "len", body_len)
            ops.append("rec.len")
            return None
        tok = rng.choice(cands)
        tok[1] = _replacement_varint(rng, tok[0], _decode_token(tok[0], tok[1]))
        ops.append(f"varint.{tok[0]}")
        if rng.random() < 0.3:  # keep the old length prefix: a size mismatch as well
            rec["len"] = encode_varint(len(b"".join(t[1] for t in rec["toks"])) + rng.choice(
                [-2, -1, 1, 3]))
            ops.append("rec.len-stale")
        return None
    if recs and r < 0.42:  # negative key/value/header lengths with the bytes still there
        rec = rng.choice(recs)
        cands = [t for t in rec["toks"] if t[0] in ("klen", "vlen", "hklen", "hvlen")]
        if cands:
            tok = rng.choice(cands)
            tok[1] = encode_varint(rng.choice([-1, -2, -100, INT_MIN]))
            ops.append(f"negative.{tok[0]}")
        return None
    if recs and r < 0.50:  # header count off
        rec = rng.choice(recs)
        for t in rec["toks"]:
            if t[0] == "hcnt":
                cur = _decode_token("hcnt", t[1]) or 0
                t[1] = encode_varint(rng.choice([cur + 1, cur - 1, cur + 1000, -1, INT_MAX]))
        ops.append("hcnt")
        return None
    if recs and r < 0.60:  # duplicate / drop / reorder records
        what = rng.choice(["dup", "drop", "swap", "reverse"])
        if what == "dup":
            j = rng.randrange(len(recs))
            recs.insert(j + 1, {"len": recs[j]["len"], "toks": [list(t) for t in recs[j]["toks"]]})
        elif what == "drop":
            del recs[rng.randrange(len(recs))]
        elif what == "swap" and len(recs) > 1:
            i, j = rng.sample(range(len(recs)), 2)
            recs[i], recs[j] = recs[j], recs[i]
        else:
            recs.reverse()
        if rng.random() < 0.5:  # keep count and lastOffsetDelta consistent
            s.hdr[12] = len(recs)
            s.hdr[6] = len(recs) - 1
            ops.append(f"records.{what}+count")
        else:
            ops.append(f"records.{what}")
        return None
    if r < 0.66:  # splice records from another v2 seed, or garbage after the records
        others = [c for c in corpus if isinstance(c, V2Seed) and c.recs]
        if rng.random() < 0.5 and others:
            donor = rng.choice(others)
            k = rng.randrange(len(recs) + 1)
            recs[k:k] = clone(donor).recs[:rng.randrange(1, len(donor.recs) + 1)]
            if rng.random() < 0.5:
                s.hdr[12] = len(recs)
                s.hdr[6] = len(recs) - 1
            ops.append("records.splice")
        else:
            s.tail = rng.choice([b"\x00", b"\x02\x00", bytes(rng.randrange(256)
                                                            for _ in range(rng.randrange(1, 9)))])
            ops.append("records.tail")
        return None
    if r < 0.84:  # header fields
        idx, vals = rng.choice([
            (12, [0, -1, len(recs) + 1, max(len(recs) - 1, 0), INT_MAX, INT_MIN]),
            (6, [-1, -3, 0, 15, len(recs), INT_MAX, INT_MIN]),
            (9, [-1, 0, 5, 2**40, LONG_MAX, LONG_MIN, -2]),
            (10, [-1, 0, 1, 32767, -32768]),
            (11, [-1, -2, 0, 1, INT_MAX, INT_MAX - 1, INT_MIN]),
            (5, [s.hdr[5] ^ 0x08, s.hdr[5] ^ 0x10, s.hdr[5] ^ 0x20, s.hdr[5] ^ 0x40,
                 (s.hdr[5] & ~7) | rng.randrange(8), _int16(s.hdr[5] | 0x7F00)]),
            (7, [-1, 0, LONG_MIN, LONG_MAX, NOW - 3_600_001, NOW + 3_600_001, NOW + 60_001]),
            (8, [-1, 0, LONG_MIN, LONG_MAX, NOW - 7_200_000, NOW]),
            (0, [1, -1, 1000, LONG_MAX]),
            (3, [0, 1, 3, -1, 127]),
            (2, [0, 5, INT_MIN]),
        ])
        s.hdr[idx] = rng.choice(vals)
        ops.append(f"hdr.{idx}")
        return None
    # compressed-stream corruption (re-compressing with another codec for codec none)
    if s.codec == 0:
        s.codec = rng.randrange(1, 5)
        ops.append("codec.payload-only")  # attributes still say none: compressed bytes parsed
        return None
    ops.append(f"stream.{Codec(s.codec).label}")
    return _stream_hook(rng, s.codec, ops)


def _stream_hook(rng: random.Random, codec: int, ops: list[str]) -> Callable[[bytes], bytes]:
    what = rng.choice(["flip", "flip", "truncate", "append", "zero", "other-codec", "special"])
    ops.append(f"stream.{what}")

    def hook(payload: bytes) -> bytes:
        b = bytearray(payload)
        if what == "flip" and b:
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif what == "truncate" and b:
            del b[rng.randrange(len(b)):]
        elif what == "append":
            b += rng.choice([b"\x00", b"\x1f\x8b", bytes(rng.randrange(256) for _ in range(7)),
                             bytes(b[:8])])
        elif what == "zero" and b:
            i = rng.randrange(len(b))
            b[i:i + rng.randrange(1, 9)] = b"\x00" * len(b[i:i + 8])
        elif what == "other-codec":
            other = rng.choice([c for c in range(1, 5) if c != codec])
            b = bytearray(compress(other, decompress(codec, bytes(payload))))
        elif what == "special":
            if codec == 3 and len(b) > 4:  # LZ4 frame: dependent blocks, checksum flags
                b[4] ^= rng.choice([0x20, 0x10, 0x04, 0x08])
            elif codec == 1 and len(b) > 8:  # gzip trailer (CRC-32, ISIZE)
                b[-rng.randrange(1, 9)] ^= 0xFF
            elif codec == 4:  # two frames, or a frame whose content size lies
                b = bytearray(payload[: len(payload) // 2]) + b
            elif codec == 2 and len(b) > 20:  # xerial header / a block length
                struct.pack_into(">i", b, 16, rng.choice([-1, 0, 1 << 30, len(b)]))
        return bytes(b)

    return hook


def fix_crcs(data: bytes) -> bytes:
    """Recompute the CRC of every framed batch (CRC-32C for v2, CRC-32 for legacy)."""
    out = bytearray(data)
    pos = 0
    while len(out) - pos >= 17:
        length = struct.unpack_from(">i", out, pos + 8)[0]
        end = pos + 12 + length
        if length < 14 or end > len(out):
            break
        magic = out[pos + 16]
        if magic == 2 and length >= 49:
            struct.pack_into(">I", out, pos + 17, crc32c(bytes(out[pos + 21:end])))
        elif magic in (0, 1):
            struct.pack_into(">I", out, pos + 12, crc32(bytes(out[pos + 16:end])))
        pos = end
    return bytes(out)


def fix_length(data: bytes) -> bytes:
    """Make the first batch's length field cover the whole input (so scanning frames it)."""
    if len(data) < 12:
        return data
    out = bytearray(data)
    struct.pack_into(">i", out, 8, len(out) - 12)
    return bytes(out)


def mutate_bytes(data: bytes, rng: random.Random, corpus: list[Seed], ops: list[str]) -> bytes:
    """One byte-level mutation."""
    b = bytearray(data)
    r = rng.random()
    if r < 0.25 and b:
        lo = 0 if rng.random() < 0.5 else min(61, len(b) - 1)
        for _ in range(rng.randrange(1, 5)):
            i = rng.randrange(lo, len(b))
            b[i] ^= 1 << rng.randrange(8) if rng.random() < 0.6 else rng.randrange(1, 256)
        ops.append("flip")
    elif r < 0.50 and len(b) >= 17:
        fields = V2_FIELDS if b[16] == 2 else LEGACY_FIELDS
        off, fmt = rng.choice(fields)
        if off + struct.calcsize(fmt) <= len(b):
            struct.pack_into(fmt, b, off, _int_values(rng, fmt, bytes(b[off:])))
            ops.append(f"field@{off}")
    elif r < 0.62:
        cut = rng.choice(CUT_POINTS) if rng.random() < 0.5 else rng.randrange(len(b) + 1)
        del b[cut:]
        ops.append("truncate")
        if rng.random() < 0.5:
            b = bytearray(fix_length(bytes(b)))
            ops.append("fix-length")
    elif r < 0.72:
        b += rng.choice([b"\x00" * rng.randrange(1, 20),
                         bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20))),
                         bytes(b[-rng.randrange(1, 12):])])
        ops.append("extend")
        if rng.random() < 0.5:
            b = bytearray(fix_length(bytes(b)))
            ops.append("fix-length")
    elif r < 0.82 and b:
        i = rng.randrange(len(b) + 1)
        if rng.random() < 0.5:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
            ops.append("insert")
        else:
            del b[i:i + rng.randrange(1, 9)]
            ops.append("delete")
        if rng.random() < 0.5:
            b = bytearray(fix_length(bytes(b)))
            ops.append("fix-length")
    elif r < 0.90 and len(b) > 61:  # duplicate a run of record bytes
        i = rng.randrange(61, len(b))
        j = min(len(b), i + rng.randrange(2, 40))
        b[j:j] = b[i:j]
        b = bytearray(fix_length(bytes(b)))
        ops.append("dup-bytes")
    elif corpus:  # splice with another seed (none to splice with: the batch unchanged)
        other = encode_seed(rng.choice(corpus))
        b = b[:rng.randrange(len(b) + 1)] + bytearray(other[rng.randrange(len(other) + 1):])
        ops.append("splice")
        if rng.random() < 0.6:
            b = bytearray(fix_length(bytes(b)))
            ops.append("fix-length")
    return bytes(b)


def _mutate_legacy_inner(rng: random.Random, ops: list[str]) -> Callable[[bytes], bytes]:
    what = rng.choice(["flip", "truncate", "magic", "attributes", "crc", "extend"])
    ops.append(f"inner.{what}")

    def hook(inner: bytes) -> bytes:
        b = bytearray(inner)
        if not b:
            return inner
        if what == "flip":
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif what == "truncate":
            del b[rng.randrange(len(b)):]
        elif what == "magic" and len(b) > 16:
            b[16] = rng.choice([0, 1, 2, 0xFF])
        elif what == "attributes" and len(b) > 17:
            b[17] = rng.choice([1, 2, 3, 4, 7, 0x08])
        elif what == "crc" and len(b) > 16:
            b[12] ^= 0xFF
        else:
            b += b"\x00" * rng.randrange(1, 30)
        return bytes(b)

    return hook


def clone(seed: V2Seed) -> V2Seed:
    """A copy deep enough for the mutations (faster than ``copy.deepcopy``)."""
    return V2Seed(list(seed.hdr), seed.codec,
                  [{"len": r["len"], "toks": [list(t) for t in r["toks"]]} for r in seed.recs],
                  seed.framing, seed.tail, seed.label)


def mutate_seed(seed: Seed, rng: random.Random, corpus: list[Seed], ops: list[str]) -> bytes:
    """A mutated encoding of ``seed``: structural and/or byte mutations, then maybe a CRC fix."""
    original = encode_seed(seed)
    hook: Any = None
    n_struct = rng.choice([0, 1, 1, 2]) if isinstance(seed, V2Seed) else rng.choice([0, 0, 1])
    if isinstance(seed, V2Seed):
        s = clone(seed)
        for _ in range(n_struct):
            h = mutate_v2_struct(s, rng, corpus, ops)
            hook = h or hook
        data = encode_v2(s, hook) if n_struct else original
    else:
        data = original
        if n_struct and seed.codec:
            data = encode_legacy(seed, _mutate_legacy_inner(rng, ops))
    n_bytes = rng.choice([0, 1, 1, 2, 3]) if n_struct else rng.choice([1, 1, 2, 3])
    for _ in range(n_bytes):
        data = mutate_bytes(data, rng, corpus, ops)
    if rng.random() < 0.5:
        data = fix_crcs(data)
        ops.append("crc-fix")
    else:  # the producer's original CRC: stale wherever a covered byte changed
        out = bytearray(data)
        if len(out) >= 21 and len(original) >= 21 and original[16] == 2 and out[16:17] == b"\x02":
            out[17:21] = original[17:21]
        elif len(out) >= 16 and original[16] in (0, 1):
            out[12:16] = original[12:16]
        data = bytes(out)
    return data


def producer_run(rng: random.Random, corpus: list[Seed], ops: list[str]) -> list[bytes]:
    """Several batches of one producer: sequences continuing, with gaps, duplicates, epoch
    bumps, transactions and markers — what reaches stage F."""
    pid = rng.choice([5, 9, 2**40])
    epoch = rng.choice([0, 1, 32767])
    seq = rng.choice([0, 0, 5, INT_MAX - 2])
    txn = rng.random() < 0.3
    out: list[bytes] = []
    v2 = [c for c in corpus if isinstance(c, V2Seed) and c.recs and not c.hdr[5] & 0x20]
    for _ in range(rng.randrange(2, 6)):
        r = rng.random()
        if out and r < 0.12:
            out.append(out[rng.randrange(len(out))])
            ops.append("run.resend")
            continue
        if r < 0.2:
            marker = make_v2([control_record(commit=rng.random() < 0.7, timestamp=NOW)],
                             producer_id=pid, producer_epoch=epoch - (rng.random() < 0.2),
                             transactional=True, control=True)
            out.append(encode_v2(marker))
            ops.append("run.marker")
            continue
        s = clone(rng.choice(v2))
        if r < 0.3:
            seq += rng.choice([1, 2, -1, 10])
            ops.append("run.gap")
        elif r < 0.38:
            epoch += rng.choice([1, -1])
            seq = rng.choice([0, 0, 3])
            ops.append("run.epoch")
        elif r < 0.45:
            txn = not txn
            ops.append("run.txn-switch")
        n = len(s.recs)
        s.hdr[9], s.hdr[10], s.hdr[11] = pid, _int16(epoch), _fit(">i", seq)
        s.hdr[5] = _int16((s.hdr[5] & ~0x30) | (0x10 if txn else 0))
        data = encode_v2(s)
        if rng.random() < 0.15:
            data = mutate_bytes(data, rng, corpus, ops)
            if rng.random() < 0.5:
                data = fix_crcs(data)
        out.append(data)
        seq += n
        if seq > INT_MAX:  # incrementSequence wraps past 2^31-1 to 0
            seq -= INT_MAX + 1
    return out


def make_case(run_seed: int, index: int, corpus: list[Seed]) -> tuple[bytes, list[str]]:
    """The input of case ``index`` (deterministic in ``run_seed`` and ``index``)."""
    rng = random.Random(f"{run_seed}:{index}")
    ops: list[str] = []
    r = rng.random()
    if r < 0.02:
        ops.append("random-bytes")
        n = rng.choice([0, 5, 12, 17, 40, 61, 90, 300])
        data = bytes(rng.randrange(256) for _ in range(n))
        if rng.random() < 0.5 and n >= 17:  # at least make it look like a batch
            b = bytearray(data)
            struct.pack_into(">qi", b, 0, 0, n - 12)
            b[16] = rng.choice([0, 1, 2])
            data = fix_crcs(bytes(b))
        return data, ops
    if r < 0.10:
        ops.append("clean")
        return encode_seed(rng.choice(corpus)), ops
    if r < 0.80:
        seed = rng.choice(corpus)
        ops.append(f"seed.{seed.label}")
        return mutate_seed(seed, rng, corpus, ops), ops
    if r < 0.90:
        ops.append("producer-run")
        return b"".join(producer_run(rng, corpus, ops)), ops
    ops.append("concat")
    parts = []
    for _ in range(rng.randrange(2, 5)):
        seed = rng.choice(corpus)
        parts.append(mutate_seed(seed, rng, corpus, ops) if rng.random() < 0.5
                     else encode_seed(seed))
    data = b"".join(parts)
    if rng.random() < 0.2:
        data = mutate_bytes(data, rng, corpus, ops)
    return data, ops


