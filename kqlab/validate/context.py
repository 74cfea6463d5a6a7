"""What a rule evaluates against: one sample's records, plus lazily derived, cached columns.

Derived columns (key/value sizes, flattened headers, the wire-format header, decoded values, the
per-record batch reference timestamp) are computed on first use and kept, so evaluating another
rule — or the same rule after an edit — never decodes twice (ARCHITECTURE principle 5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True, slots=True)
class FlatHeaders:
    """The headers column flattened: one row per header, with its record's index."""

    parent: np.ndarray  # int64[H]: index of the record each header belongs to
    keys: pa.Array  # string[H]
    values: pa.Array  # binary[H] (nullable)
    counts: np.ndarray  # int32[N]: headers per record


@dataclass
class EvalContext:
    """A sample under evaluation: the records table, the broker clock and the formats."""

    records: pa.Table
    now: int
    batches: pa.Table | None = None
    value_format: Any = None  # kqlab.policy.model.Format
    key_format: Any = None
    resolver: Any = None  # kqlab.serde SchemaResolver (for avro and schema-id rules)
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        """Number of records."""
        return self.records.num_rows

    def column(self, name: str) -> pa.Array:
        """A records-table column as one contiguous Arrow array (copied once, then cached)."""
        key = f"column:{name}"
        if key not in self._memo:
            col = self.records.column(name)
            self._memo[key] = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        return self._memo[key]

    def chunked(self, name: str) -> pa.ChunkedArray:
        """A records-table column as it is (kernels that accept chunks need no copy)."""
        return self.records.column(name)

    # -- bytes-level ---------------------------------------------------------------------------
    @cached_property
    def key_size(self) -> np.ndarray:
        """Key length in bytes, -1 for a null key."""
        return _sizes(self.chunked("key"))

    @cached_property
    def value_size(self) -> np.ndarray:
        """Value length in bytes, -1 for a tombstone."""
        return _sizes(self.chunked("value"))

    @cached_property
    def headers(self) -> FlatHeaders:
        """The headers, flattened (vectorised header rules work on this)."""
        lists = self.column("headers")
        counts = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
        counts = counts.astype(np.int32)
        flat = pc.list_flatten(lists)
        parent = np.repeat(np.arange(len(lists), dtype=np.int64), counts)
        return FlatHeaders(parent, flat.field("key"), flat.field("value"), counts)

    @cached_property
    def headers_size(self) -> np.ndarray:
        """Header bytes per record (UTF-8 key bytes + value bytes)."""
        h = self.headers
        per = (_sizes(h.keys).clip(min=0) + _sizes(h.values).clip(min=0)).astype(np.int64)
        return np.bincount(h.parent, weights=per, minlength=self.n).astype(np.int64)

    @cached_property
    def timestamps(self) -> np.ndarray:
        """Record timestamps (ms)."""
        return self.chunked("timestamp").to_numpy()

    @cached_property
    def batch_first_timestamp(self) -> np.ndarray:
        """Per record, the first timestamp of its batch (the ``relative_to: batch`` reference)."""
        idx = self.chunked("batch_index").to_numpy()
        starts = np.flatnonzero(idx == 0)
        ts = self.timestamps
        if len(starts) == 0 or starts[0] != 0:
            starts = np.concatenate([[0], starts]).astype(np.int64)
        group = np.searchsorted(starts, np.arange(self.n), side="right") - 1
        return ts[starts][group]

    # -- wire format and decoding (kqlab.serde) ---------------------------------------------
    def wire(self, target: str = "value") -> Any:
        """The Confluent wire-format header of ``target`` (``kqlab.serde.wire.WireInfo``)."""
        key = f"wire:{target}"
        if key not in self._memo:
            from kqlab.serde.wire import parse_wire

            self._memo[key] = parse_wire(self.column(target))
        return self._memo[key]

    def decoded(self, target: str = "value") -> Any:
        """The decoded column of ``target`` (``kqlab.serde.decode.DecodedColumn``), cached."""
        key = f"decoded:{target}"
        if key not in self._memo:
            from kqlab.policy.model import Format
            from kqlab.serde.decode import decode

            fmt = (self.value_format if target == "value" else self.key_format) or Format()
            self._memo[key] = decode(self.column(target), fmt, self.resolver)
        return self._memo[key]

    def decode_failed(self, target: str = "value") -> np.ndarray:
        """Records whose ``target`` could not be decoded (tombstones are not failures)."""
        key = f"decode_failed:{target}"
        if key not in self._memo:
            errors = self.decoded(target).errors
            self._memo[key] = pc.is_valid(errors).to_numpy(zero_copy_only=False) \
                if len(errors) else np.zeros(0, dtype=bool)
        return self._memo[key]

    def python_values(self, target: str = "value") -> list[Any]:
        """Decoded values as Python objects (for per-record consumers: CEL, plugins)."""
        return self.decoded(target).python_values()


def _sizes(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Byte length of each binary/string value, -1 for null (Arrow kernel, no Python loop)."""
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    lengths = pc.fill_null(pc.binary_length(arr), -1)
    out = lengths.to_numpy() if isinstance(lengths, pa.ChunkedArray) else \
        lengths.to_numpy(zero_copy_only=False)
    return out.astype(np.int64)
