"""Fuzz seeds: batches kept as fields, so one record field can be corrupted at a time.

Why a module of its own: the in-process differential fuzzer (``scripts/fuzz_validator.py``)
and the broker oracle (``scripts/broker_oracle.py``, :mod:`kqlab.kafka.oracle.fuzzcases`)
build their inputs from the same structure-aware generator.  A :class:`V2Seed` is a v2 batch
whose records are named tokens (``DefaultRecord.writeTo``'s fields); a :class:`LegacySeed` is a
v0/v1 entry.  Encoding recomputes the batch length and CRC; the mutations
(:mod:`~kqlab.kafka.fuzz.mutate`) break them on purpose.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kqlab.kafka import legacy
from kqlab.kafka.batch import V2_HEADER
from kqlab.kafka.builder import Record
from kqlab.kafka.compression import compress
from kqlab.kafka.records_parser import crc32c
from kqlab.kafka.varint import encode_varint, encode_varlong

#: the fixed clock of the in-process fuzzer (its timestamps are placed around it)
NOW = 1_700_000_000_000
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


@dataclass
class V2Seed:
    """A v2 batch kept as fields, so mutations can corrupt one record field at a time.

    ``hdr`` holds the 13 ``V2_HEADER`` values (batch length and CRC are recomputed when
    encoding); each record is ``{"len": None | bytes, "toks": [[name, bytes], ...]}`` where
    ``len`` overrides the length varint (None = the body's true length).
    """

    hdr: list[int]
    codec: int
    recs: list[dict[str, Any]]
    framing: str = "xerial"
    tail: bytes = b""  # bytes after the last record (inside the compressed stream)
    label: str = ""


@dataclass
class LegacySeed:
    """A v0/v1 entry: one plain message or a compressed wrapper around inner messages."""

    magic: int
    codec: int
    msgs: list[tuple[bytes | None, bytes | None, int]]
    base_offset: int = 0
    timestamp_type: int = 0
    inner_magic: int | None = None
    inner_attributes: int = 0
    wrapper_offset: int | None = None
    label: str = ""


Seed = V2Seed | LegacySeed


def record_tokens(rec: Record, offset_delta: int, ts_delta: int) -> dict[str, Any]:
    """``DefaultRecord.writeTo`` as named tokens (``builder.encode_record``'s bytes)."""
    toks: list[list[Any]] = [["attr", bytes([rec.attributes & 0xFF])],
                             ["tsd", encode_varlong(ts_delta)],
                             ["offd", encode_varint(offset_delta)]]
    for name, part in (("k", rec.key), ("v", rec.value)):
        toks.append([name + "len", encode_varint(-1 if part is None else len(part))])
        if part is not None:
            toks.append([name, part])
    toks.append(["hcnt", encode_varint(len(rec.headers))])
    for hk, hv in rec.headers:
        kb = hk.encode() if isinstance(hk, str) else hk
        toks.append(["hklen", encode_varint(len(kb))])
        toks.append(["hk", kb])
        toks.append(["hvlen", encode_varint(-1 if hv is None else len(hv))])
        if hv is not None:
            toks.append(["hv", hv])
    return {"len": None, "toks": toks}


def encode_record(rec: dict[str, Any]) -> bytes:
    body = b"".join(t[1] for t in rec["toks"])
    return (encode_varint(len(body)) if rec["len"] is None else rec["len"]) + body


def make_v2(records: Sequence[Record], *, codec: int = 0, base_timestamp: int = NOW,
            max_timestamp: int | None = None, producer_id: int = -1, producer_epoch: int = -1,
            base_sequence: int = -1, transactional: bool = False, control: bool = False,
            timestamp_type: int = 0, extra_attributes: int = 0, framing: str = "xerial",
            partition_leader_epoch: int = -1, label: str = "") -> V2Seed:
    """A consistent v2 seed (as ``BatchBuilder`` would encode it)."""
    recs = []
    stamps = []
    for i, r in enumerate(records):
        ts = base_timestamp if r.timestamp is None else r.timestamp
        stamps.append(ts)
        recs.append(record_tokens(r, i if r.offset_delta is None else r.offset_delta,
                                  ts - base_timestamp))
    attributes = (codec | (0x08 if timestamp_type else 0) | (0x10 if transactional else 0)
                  | (0x20 if control else 0) | extra_attributes)
    if max_timestamp is None:
        max_timestamp = max(stamps) if stamps else base_timestamp
    n = len(records)
    hdr = [0, 0, partition_leader_epoch, 2, 0, _int16(attributes), n - 1, base_timestamp,
           max_timestamp, producer_id, producer_epoch, base_sequence, n]
    return V2Seed(hdr, codec, recs, framing, label=label)

def _fit(fmt: str, v: int) -> int:
    """``v`` wrapped into ``fmt``'s range (two's complement, as a Java cast would)."""
    bits = 8 * struct.calcsize(fmt)
    v &= (1 << bits) - 1
    if fmt[-1].islower() and v >> (bits - 1):  # signed
        v -= 1 << bits
    return v


def _int16(v: int) -> int:
    v &= 0xFFFF
    return v - 0x10000 if v & 0x8000 else v


_V2_FORMATS = V2_HEADER.format.lstrip(">")


def encode_v2(seed: V2Seed, payload_hook: Callable[[bytes], bytes] | None = None) -> bytes:
    """Encode a v2 seed with a consistent batch length and CRC."""
    payload = b"".join(encode_record(r) for r in seed.recs) + seed.tail
    if seed.codec:
        payload = compress(seed.codec, payload, snappy_framing=seed.framing)
    if payload_hook is not None:
        payload = payload_hook(payload)
    hdr = [_fit(">" + f, v) for f, v in zip(_V2_FORMATS, seed.hdr, strict=True)]
    hdr[1] = V2_HEADER.size - 12 + len(payload)
    hdr[4] = 0
    data = bytearray(V2_HEADER.pack(*hdr)) + payload
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def encode_legacy(seed: LegacySeed, inner_hook: Callable[[bytes], bytes] | None = None) -> bytes:
    """Encode a legacy seed; ``inner_hook`` rewrites a wrapper's inner message set."""
    if seed.codec == 0:
        k, v, ts = seed.msgs[0]
        return legacy.encode_message(seed.base_offset, k, v, magic=seed.magic,
                                     attributes=0x08 if seed.timestamp_type and seed.magic else 0,
                                     timestamp=ts if seed.magic else -1)
    if inner_hook is None:
        return legacy.encode_wrapper(seed.msgs, magic=seed.magic, codec=seed.codec,
                                     base_offset=seed.base_offset,
                                     timestamp_type=seed.timestamp_type,
                                     inner_magic=seed.inner_magic,
                                     inner_attributes=seed.inner_attributes,
                                     wrapper_offset=seed.wrapper_offset)
    inner_magic = seed.magic if seed.inner_magic is None else seed.inner_magic
    parts = []
    for i, (k, v, ts) in enumerate(seed.msgs):
        off = i if seed.magic >= 1 else seed.base_offset + i
        parts.append(legacy.encode_message(off, k, v, magic=inner_magic,
                                           attributes=seed.inner_attributes, timestamp=ts))
    payload = compress(seed.codec, inner_hook(b"".join(parts)))
    attrs = seed.codec | (0x08 if seed.timestamp_type == 1 and seed.magic >= 1 else 0)
    wo = seed.wrapper_offset
    if wo is None:
        wo = seed.base_offset + len(seed.msgs) - 1
    return legacy.encode_message(wo, None, payload, magic=seed.magic, attributes=attrs,
                                 timestamp=max((m[2] for m in seed.msgs), default=-1))


_ENCODED: dict[int, tuple[Seed, bytes]] = {}


def encode_seed(seed: Seed) -> bytes:
    """A seed's bytes (cached: seeds are never changed in place, mutations work on clones)."""
    hit = _ENCODED.get(id(seed))
    if hit is not None and hit[0] is seed:
        return hit[1]
    data = encode_v2(seed) if isinstance(seed, V2Seed) else encode_legacy(seed)
    _ENCODED[id(seed)] = (seed, data)
    return data


