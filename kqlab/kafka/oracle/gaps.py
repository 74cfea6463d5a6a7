"""Disagreements with the broker that are known gaps in kqlab (documented, not yet fixed).

Why a list in code: the oracle must report these, not hide them, and the CI test must fail on
any *other* disagreement.  Each gap is a predicate over (broker release, the batch's bytes, the
broker's answer) as exact as the broker's rule, with the reason it is not fixed yet; see
docs/broker-oracle.md ("Known gaps").
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from kqlab.kafka.oracle.wire import ProduceResult

#: ``Records.SOFT_MAX_ARRAY_LENGTH`` (Integer.MAX_VALUE - 8): the in-place reader's size bound
SOFT_MAX_ARRAY_LENGTH = 2**31 - 1 - 8


@dataclass(frozen=True, slots=True)
class Gap:
    name: str
    why: str
    applies: Callable[[str, dict[str, str], bytes, ProduceResult], bool]


def _inplace_size_bounds(release: str, config: dict[str, str], records: bytes,
                         broker: ProduceResult) -> bool:
    """Kafka 4.x's in-place reader (``DefaultRecord.readPartiallyFrom(..., maxRecordBodySize)``)
    refuses a record whose length varint is negative or above SOFT_MAX_ARRAY_LENGTH
    (InvalidRecordException, 87); 3.9 ignores the length there.  True when the broker said 87
    with no message and the first records' lengths, read as the in-place reader does, break
    that bound before anything else could stop it."""
    if not release.startswith("4.") or broker.error_code != 87 or broker.error_message:
        return False
    if len(records) < 61 or records[16] != 2:
        return False
    codec = struct.unpack_from(">h", records, 21)[0] & 7
    target = config.get("compression.type", "producer")
    if codec == 0 or target not in ("producer", ("none", "gzip", "snappy", "lz4", "zstd")[codec]):
        return False  # not read in place
    from kqlab.kafka.compression import read_stream
    from kqlab.kafka.varint import VarintError, decode_varint, decode_varlong

    data = read_stream(codec, records[61:]).data
    pos = 0
    for _ in range(max(0, struct.unpack_from(">i", records, 57)[0])):
        try:
            size, pos = decode_varint(data, pos)
            if size < 0 or size > SOFT_MAX_ARRAY_LENGTH:
                return True
            pos += 1  # attributes
            _, pos = decode_varlong(data, pos)
            for _field in range(3):  # offset delta, key length (+ key), value length (+ value)
                n, pos = decode_varint(data, pos)
                if _field and n > 0:
                    pos += n
            count, pos = decode_varint(data, pos)
            for _h in range(max(count, 0)):
                n, pos = decode_varint(data, pos)
                pos += max(n, 0)
                n, pos = decode_varint(data, pos)
                pos += max(n, 0)
        except (VarintError, IndexError):
            return False
    return False


KNOWN_GAPS: list[Gap] = [
    Gap("inplace-record-size-bounds-4x",
        "Kafka 4.x's in-place reader bounds a record's length (negative or > 2^31-9: 87); "
        "kqlab's PARTIAL reader (Python and C) ignores the length, as 3.9's does, and is "
        "release-blind: the fix needs a 4.x reading mode in both readers and in the table "
        "decode's in-place findings", _inplace_size_bounds),
]


def known_gap(release: str, config: dict[str, str], records: bytes,
              broker: ProduceResult) -> str | None:
    """The name of the known gap explaining a disagreement on ``records`` (None: none)."""
    for gap in KNOWN_GAPS:
        if gap.applies(release, config, records, broker):
            return gap.name
    return None
