"""DecodeCache: each (sample, format, schema source) is decoded once."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kqlab.policy.model import Format, SchemaSource
from kqlab.serde import DecodeCache, array_fingerprint, decode

from .conftest import ORDER_SCHEMA, avro_bytes, framed, register


class CountingDecoder:
    def __init__(self):
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return decode(*args, **kwargs)


@pytest.fixture
def counting():
    return CountingDecoder()


def test_decodes_once_per_sample_and_format(counting):
    cache = DecodeCache(decoder=counting)
    values = pa.array([b'{"a": 1}', b'{"a": 2}'])
    first = cache.get_or_decode(values, Format(format="json"))
    assert cache.get_or_decode(values, Format(format="json")) is first
    assert counting.calls == 1 and (cache.hits, cache.misses) == (1, 1)
    cache.get_or_decode(values, Format(format="string"))  # another format: decoded again
    cache.get_or_decode(values.slice(1), Format(format="json"))  # another slice: again
    assert counting.calls == 3
    other = pa.array([b'{"a": 1}', b'{"a": 2}'])  # equal content, other buffers: no hit
    cache.get_or_decode(other, Format(format="json"))
    assert counting.calls == 4


def test_explicit_sample_key(counting):
    cache = DecodeCache(decoder=counting)
    fmt = Format(format="string")
    a = cache.get_or_decode(pa.array([b"x"]), fmt, sample_key=("orders", 0, 100))
    b = cache.get_or_decode(pa.array([b"x"]), fmt, sample_key=("orders", 0, 100))
    assert a is b and counting.calls == 1


def test_avro_with_schema_source_shares_a_resolver(registry, counting):
    url, client = registry
    sid = register(client, "orders-value", ORDER_SCHEMA)
    rec = {"id": 1, "customer": "c", "amount": 2.0, "note": None}
    values = pa.array([framed(sid, avro_bytes(ORDER_SCHEMA, rec))])
    fmt = Format(format="avro", wire="confluent",
                 schemas=SchemaSource(registry=url, config={"cache.capacity": 10}))
    cache = DecodeCache(decoder=counting)
    assert cache.get_or_decode(values, fmt).values.to_pylist() == [rec]
    assert cache.get_or_decode(values, fmt).values.to_pylist() == [rec]
    assert counting.calls == 1
    assert cache.resolver_for(fmt) is cache.resolver_for(fmt)
    assert cache.resolver_for(Format(format="json")) is None


def test_lru_eviction_and_clear(counting):
    cache = DecodeCache(maxsize=2, decoder=counting)
    fmt = Format(format="bytes")
    arrays = [pa.array([bytes([i])]) for i in range(3)]
    for a in arrays:
        cache.get_or_decode(a, fmt)
    assert len(cache) == 2
    cache.get_or_decode(arrays[0], fmt)  # evicted: decoded again
    assert counting.calls == 4
    cache.clear()
    assert len(cache) == 0
    with pytest.raises(ValueError, match="maxsize"):
        DecodeCache(maxsize=0)


def test_fingerprint_distinguishes_slices_and_chunks():
    a = pa.array([b"a", b"b", b"c"])
    assert array_fingerprint(a) == array_fingerprint(a)
    assert array_fingerprint(a) != array_fingerprint(a.slice(1))
    chunked = pa.chunked_array([a, a])
    assert array_fingerprint(chunked)[0] == "chunked"
