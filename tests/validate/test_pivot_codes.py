"""Per-partition and per-time summaries from the replay's outcome codes equal the ones from
the outcome strings (the codes path is what every summary of a fresh replay takes)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kqlab.validate.verdicts import _pivot
from kqlab.validate.view import OUTCOME_CODES


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["orders", "clicks", "a"]), st.integers(0, 3),
                          st.integers(0, 3), st.integers(0, 200_000)), max_size=60),
       st.booleans())
def test_pivot_from_codes_equals_pivot_from_strings(rows, undetermined):
    codes = np.array([c if undetermined else c % 3 for _, _, c, _ in rows], dtype=np.int8)
    records = pa.table({
        "topic": pa.array([t for t, _, _, _ in rows], pa.string()),
        "partition": pa.array([p for _, p, _, _ in rows], pa.int32()),
        "outcome": pa.array([OUTCOME_CODES[c] for c in codes.tolist()], pa.string()),
        "bucket": pa.array([ts // 60_000 * 60_000 for _, _, _, ts in rows], pa.int64()),
    })
    for keys in (["topic", "partition"], ["bucket"]):
        want = _pivot(records, keys)
        got = _pivot(records, keys, codes)
        assert got.schema == want.schema
        assert got.equals(want), (got.to_pylist(), want.to_pylist())
