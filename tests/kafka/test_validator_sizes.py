"""Stage E after a rebuild: E1/E2 judge the re-encoded batch, never a size estimate."""

from __future__ import annotations

import pytest

from kqlab.kafka.builder import Record, build_batch
from kqlab.kafka.compression import Codec
from kqlab.kafka.validator import PartitionValidator


def _gzip_batch() -> bytes:
    return build_batch([Record(key=b"k", value=b"v" * 50) for _ in range(3)], base_timestamp=1,
                       codec=Codec.GZIP)


def _validate(data: bytes, **configs: object):
    cfg = {"compression.type": "zstd", **{k.replace("_", "."): v for k, v in configs.items()}}
    return PartitionValidator("t", 0, cfg, broker_version="3.9", now=1,
                              source="producer").validate(data)


def test_small_segment_bytes_compares_the_rebuilt_size():
    data = _gzip_batch()
    out = _validate(data, segment_bytes=200)  # far below the cheap bound, above the real size
    assert (out.error_code, out.path) == (0, "Z-rebuild")


@pytest.mark.parametrize(("limit", "code", "check"), [(60, 18, "E2"), (1 << 20, 0, None)])
def test_e2_on_the_rebuilt_batch(limit, code, check):
    out = _validate(_gzip_batch(), segment_bytes=limit)
    assert (out.error_code, out.check) == (code, check)
    if code:
        assert out.detail.startswith("Message batch size is ")
        assert out.detail.endswith(f"exceeds the maximum configured segment size of {limit}.")


def test_e1_when_recompression_grows_the_batch():
    # incompressible values: the lz4 batch fits max.message.bytes exactly, the same records
    # re-encoded with the topic's gzip come out larger
    import random

    rng = random.Random(3)
    records = [Record(key=b"k", value=rng.randbytes(4000)) for _ in range(4)]
    data = build_batch(records, base_timestamp=1, codec=Codec.LZ4)
    rebuilt = build_batch(records, base_timestamp=1, codec=Codec.GZIP)
    assert len(rebuilt) > len(data)  # precondition of the scenario
    limit = len(data)  # C2 passes (size == limit)
    out = PartitionValidator("t", 0, {"compression.type": "gzip", "max.message.bytes": limit},
                             now=1, source="producer").validate(data)
    assert (out.error_code, out.error_name, out.check) == (10, "MESSAGE_TOO_LARGE", "E1")
    assert out.detail == (f"Message batch size is {len(rebuilt)} bytes in append topartition "
                          f"t-0 which exceeds the maximum configured size of {limit}.")
    # the same batch on a topic that keeps the producer's codec is appended in place
    same = PartitionValidator("t", 0, {"max.message.bytes": limit}, now=1,
                              source="producer").validate(data)
    assert (same.error_code, same.path) == (0, "Z-inplace")
