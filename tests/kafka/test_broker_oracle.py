"""Differential test: the real broker's answer to exact produce bytes vs kqlab's (issue 27).

The broker is the truth (docs/broker-oracle.md).  The cases reuse the spec's byte vectors of
``test_validator_spec`` (V1-V4) and add the first check families; each batch's (error code,
error_message, record_errors) from the broker must equal kqlab's validator
(``source="producer"``) and the replay engine's verdicts.
"""

from __future__ import annotations

import time

from kqlab.kafka.builder import Record, build_batch, rewrite_header
from kqlab.kafka.compression import Codec
from kqlab.kafka.oracle.compare import Case, Oracle
from tests.kafka.test_validator_spec import V1, V2, V3, V4


def _cases() -> list[Case]:
    now = int(time.time() * 1000)
    keyed = [Record(key=b"k%d" % i, value=b"v" * i) for i in range(3)]
    cases = [Case(f"vector-{n}", "vectors", batches=[b]) for n, b in
             (("V1", V1), ("V2", V2), ("V3", V3), ("V4", V4))]
    cases.append(Case("compact-null-key", "compaction", {"cleanup.policy": "compact"},
                      batches=[build_batch([Record(value=b"x"), *keyed], base_timestamp=now)]))
    good = build_batch(keyed, base_timestamp=now)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    cases.append(Case("crc-flip", "crc", batches=[bytes(bad_crc)]))
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD):
        cases.append(Case(f"codec-{codec.label}", "codecs",
                          batches=[build_batch(keyed, codec=codec, base_timestamp=now)]))
    cases.append(Case("count-mismatch", "counts",
                      batches=[rewrite_header(good, records_count=5)]))
    cases.append(Case("too-large", "sizes", {"max.message.bytes": "100"}, batches=[good]))
    # the open question of issue 27, settled by the broker (4.4.0 and 3.9.2 alike): a compressed
    # batch kept in place whose offset deltas are not 0..n-1 gets UNKNOWN_SERVER_ERROR (-1, no
    # message); a topic codec that forces a rebuild accepts it
    dup = [Record(value=b"a", offset_delta=0), Record(value=b"b", offset_delta=0)]
    for codec in (Codec.NONE, Codec.GZIP, Codec.ZSTD):
        zipped = build_batch(dup, base_timestamp=now, codec=codec)
        cases.append(Case(f"deltas-{codec.label}", "offset-deltas", batches=[zipped]))
        cases.append(Case(f"deltas-{codec.label}-to-lz4", "offset-deltas",
                          {"compression.type": "lz4"}, batches=[zipped]))
    return cases


def test_broker_agrees_with_kqlab(kafka_broker) -> None:
    oracle = Oracle(kafka_broker, kafka_broker.version)
    try:
        results = oracle.run(_cases())
    finally:
        oracle.close()
    assert len(results) == len(_cases())
    codes = {r.case: r.broker.error_code for r in results}
    assert codes["deltas-gzip"] == codes["deltas-zstd"] == -1  # the broker's own answer
    assert codes["deltas-gzip-to-lz4"] == codes["deltas-none"] == 0
    bad = [(r.case, r.disagreement) for r in results
           if r.disagreement is not None and r.unknowable is None]
    assert not bad, bad
