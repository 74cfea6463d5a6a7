"""What a rule evaluates against: one sample's records, plus lazily derived, cached columns.

Derived columns (key/value sizes, flattened headers, the wire-format header, decoded values, the
per-record batch reference timestamp) are computed on first use and kept, so evaluating another
rule — or the same rule after an edit — never decodes twice (ARCHITECTURE principle 5).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from kqlab.policy.model import Format
    from kqlab.serde.decode import DecodedColumn
    from kqlab.serde.schemas import SchemaResolver
    from kqlab.serde.wire import WireInfo

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FlatHeaders:
    """The headers column flattened: one row per header, with its record's index."""

    parent: np.ndarray  # int64[H]: index of the record each header belongs to
    keys: pa.StringArray  # string[H]
    values: pa.BinaryArray  # binary[H] (nullable)
    counts: np.ndarray  # int32[N]: headers per record


@dataclass
class EvalContext:
    """A sample under evaluation: the records table, the broker clock and the formats."""

    records: pa.Table
    now: int
    batches: pa.Table | None = None
    value_format: Format | None = None
    key_format: Format | None = None
    resolver: SchemaResolver | None = None  # for avro and schema-id rules
    _memo: dict[str, object] = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        """Number of records."""
        return self.records.num_rows

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """The value cached under ``key``, computed on first use.

        What evaluators derive from the sample alone (a column's special rows, a header's
        positions) lives here, so an edited rule reuses it; each key holds one type, which
        its users agree on by name (``"column:value"``, ``"cel:header:trace"``).
        """
        if key not in self._memo:
            self._memo[key] = compute()
        return cast(T, self._memo[key])

    def column(self, name: str) -> pa.Array:
        """A records-table column as one contiguous Arrow array (cached; copied only when it
        has several chunks: Arrow's ``combine_chunks`` copies even a single one)."""
        def combined() -> pa.Array:
            col = self.records.column(name)
            return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()

        return self.memo(f"column:{name}", combined)

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
        counts = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False)
        counts = counts.astype(np.int32)
        flat = pc.list_flatten(lists)
        parent = np.repeat(np.arange(len(lists), dtype=np.int64), counts)
        if not isinstance(flat, pa.StructArray):  # pyarrow-stubs: list_flatten gives a list
            raise TypeError(f"headers of type {lists.type}, not list<struct<key, value>>")
        # string and binary children, as the records table's contract says
        keys = cast(pa.StringArray, flat.field("key"))
        values = cast(pa.BinaryArray, flat.field("value"))
        return FlatHeaders(parent, keys, values, counts)

    @cached_property
    def headers_size(self) -> np.ndarray:
        """Header bytes per record (UTF-8 key bytes + value bytes)."""
        h = self.headers
        if not h.keys.null_count and not h.values.null_count:
            # a record's headers lie side by side in the flattened columns: its bytes are the
            # offsets past its last header less those at its first (no per-header sizes)
            bounds = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(h.counts, out=bounds[1:])
            return np.diff((_offsets(h.keys) + _offsets(h.values))[bounds])
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
    def wire(self, target: str = "value") -> WireInfo:
        """The Confluent wire-format header of ``target``."""
        def parse() -> WireInfo:
            from kqlab.serde.wire import parse_wire

            return parse_wire(self.column(target))

        return self.memo(f"wire:{target}", parse)

    def decoded(self, target: str = "value") -> DecodedColumn:
        """The decoded column of ``target``, cached."""
        def decode() -> DecodedColumn:
            from kqlab.policy.model import Format
            from kqlab.serde.decode import decode

            fmt = (self.value_format if target == "value" else self.key_format) or Format()
            return decode(self.column(target), fmt, self.resolver)

        return self.memo(f"decoded:{target}", decode)

    def decode_failed(self, target: str = "value") -> np.ndarray:
        """Records whose ``target`` could not be decoded (tombstones are not failures)."""
        def failed() -> np.ndarray:
            errors = self.decoded(target).errors
            return errors.is_valid().to_numpy(zero_copy_only=False) if len(errors) else \
                np.zeros(0, dtype=bool)

        return self.memo(f"decode_failed:{target}", failed)

    def python_values(self, target: str = "value") -> list[object]:
        """Decoded values as Python objects (for per-record consumers: CEL, plugins)."""
        return self.decoded(target).python_values()


def _offsets(arr: pa.BinaryArray | pa.StringArray) -> np.ndarray:
    """The ``len(arr) + 1`` value offsets of a binary/string array (int64, its slice's)."""
    odt = np.int64 if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type) \
        else np.int32
    buf = arr.buffers()[1]
    if buf is None or len(arr) == 0:
        return np.zeros(len(arr) + 1, dtype=np.int64)
    return np.frombuffer(buf, dtype=odt)[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)


def _sizes(arr: pa.ChunkedArray | pa.BinaryArray | pa.StringArray) -> np.ndarray:
    """Byte length of each binary/string value, -1 for null (Arrow kernel, no Python loop)."""
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    lengths = pc.binary_length(arr)
    if isinstance(lengths, pa.ChunkedArray):
        out = lengths.fill_null(pa.scalar(-1)).to_numpy()
    else:
        out = lengths.fill_null(-1).to_numpy(zero_copy_only=False)
    return out.astype(np.int64)
