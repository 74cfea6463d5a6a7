"""E1/E2 measure the batch the broker writes when it re-encodes: ``rebuilt_size`` (vectorised
encoder + the codec) equals the size of the batch ``BatchBuilder`` builds record by record."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.kafka.batch import decode_batches
from kqlab.kafka.builder import BatchBuilder, Record
from kqlab.kafka.compression import Codec
from kqlab.kafka.encode import rebuilt_size

NOW = 1_700_000_000_000

records = st.lists(st.builds(
    Record,
    key=st.one_of(st.none(), st.binary(max_size=20)),
    value=st.one_of(st.none(), st.binary(max_size=300)),
    timestamp=st.integers(NOW - 10**6, NOW + 10**6),
    headers=st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))),
                     max_size=3).map(tuple)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records, st.sampled_from(list(Codec)))
def test_rebuilt_size_is_the_builders(recs, codec):
    # the decoded records of any batch, re-encoded with the target codec
    table = decode_batches([BatchBuilder(base_timestamp=NOW, records=list(recs)).build()]).records
    want = BatchBuilder(codec=codec, records=[
        Record(key=r["key"], value=r["value"], timestamp=r["timestamp"],
               headers=tuple((h["key"], h["value"]) for h in r["headers"]))
        for r in table.to_pylist()]).build()
    assert rebuilt_size(table, codec) == len(want)


@pytest.mark.parametrize("codec", list(Codec))
def test_empty(codec):
    table = decode_batches([]).records
    assert rebuilt_size(table, codec) == len(BatchBuilder(codec=codec, base_timestamp=NOW).build())
