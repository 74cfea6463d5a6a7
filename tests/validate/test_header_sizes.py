"""``EvalContext.headers_size`` (the ``headers_size`` / ``record_size`` rules' input): read
from the flattened columns' offsets when no key or value is null, per header otherwise; both
equal the obvious per-record sum (UTF-8 key bytes + value bytes, a null value counting 0) on
sliced tables, records without headers, null header lists and large types."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kqlab.validate.context import EvalContext

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
headers = st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=5)),
                   max_size=3)


def obvious(rows: list[list[tuple[str, bytes | None]] | None]) -> list[int]:
    return [sum(len(k.encode()) + len(v or b"") for k, v in hs or []) for hs in rows]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | headers, max_size=30), st.integers(0, 30), st.integers(0, 30),
       st.booleans())
def test_headers_size_is_the_per_record_sum(rows, start, stop, large):
    arr = pa.array([None if hs is None else [{"key": k, "value": v} for k, v in hs]
                    for hs in rows], pa.list_(HEADER))
    table = pa.table({"headers": arr})
    if large:
        table = table.cast(pa.schema([("headers", pa.list_(pa.struct(
            [("key", pa.large_string()), ("value", pa.large_binary())])))]))
    sliced = table.slice(min(start, len(rows)), stop)
    for t, want in ((table, rows), (sliced, rows[min(start, len(rows)):][:stop])):
        got = EvalContext(t, 0).headers_size
        assert got.dtype == np.int64
        assert got.tolist() == obvious(want)
