"""Decode each sample once: a small LRU of :class:`~kqlab.serde.decode.DecodedColumn`.

Entries are keyed by the column's identity and the format.  The identity is either an
explicit ``sample_key`` (e.g. the sample's coordinates) or a cheap fingerprint of the Arrow
array — type, offset, length and the address and size of every buffer.  An entry keeps a
reference to the array it was computed from, so those buffers cannot be freed and their
addresses reused by another array while the entry lives.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import orjson
import pyarrow as pa

from kqlab.serde.decode import DecodedColumn, decode
from kqlab.serde.schemas import SchemaResolver

__all__ = ["DecodeCache", "array_fingerprint", "format_key"]


def array_fingerprint(values: pa.Array | pa.ChunkedArray) -> tuple:
    """Identity of an Arrow array's contents without reading them (buffers, offset, length)."""
    if isinstance(values, pa.ChunkedArray):
        return ("chunked", *(array_fingerprint(c) for c in values.chunks))
    return (str(values.type), values.offset, len(values),
            tuple(None if b is None else (b.address, b.size) for b in values.buffers()))


def format_key(fmt: Any) -> tuple:
    """A hashable key for a ``Format`` (its ``SchemaSource`` holds an unhashable mapping)."""
    src = getattr(fmt, "schemas", None)
    source = None if src is None else (
        src.registry, src.subject, src.path, getattr(src, "message", None),
        orjson.dumps(dict(src.config), option=orjson.OPT_SORT_KEYS, default=str))
    return (getattr(fmt, "format", None), getattr(fmt, "wire", None), source)


class DecodeCache:
    """Remembers decoded columns per (sample, format, schema source), least recently used out.

    It also keeps one :class:`SchemaResolver` per schema source, so schemas are fetched and
    parsed once across samples.  ``hits`` and ``misses`` count lookups.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from kqlab.policy.model import Format
    >>> cache = DecodeCache()
    >>> col = pa.array([b"a", b"b"])
    >>> first = cache.get_or_decode(col, Format(format="string"))
    >>> cache.get_or_decode(col, Format(format="string")) is first, cache.hits, cache.misses
    (True, 1, 1)
    """

    def __init__(self, maxsize: int = 32,
                 decoder: Callable[..., DecodedColumn] = decode) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        self._decode = decoder
        self._entries: OrderedDict[Hashable, tuple[Any, DecodedColumn]] = OrderedDict()
        self._resolvers: dict[tuple, SchemaResolver] = {}
        self._lock = threading.RLock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def resolver_for(self, fmt: Any) -> SchemaResolver | None:
        """The shared resolver for ``fmt.schemas`` (``None`` when the format has none)."""
        src = getattr(fmt, "schemas", None)
        if src is None:
            return None
        key = format_key(fmt)[2]
        with self._lock:
            resolver = self._resolvers.get(key)
            if resolver is None:
                resolver = self._resolvers[key] = SchemaResolver.from_source(src)
            return resolver

    def get_or_decode(self, values: pa.Array | pa.ChunkedArray, fmt: Any,
                      resolver: SchemaResolver | None = None, *,
                      sample_key: Hashable | None = None,
                      arrow_type: pa.DataType | None = None) -> DecodedColumn:
        """The decoded column, from the cache or decoded now (then cached)."""
        if resolver is None and getattr(fmt, "format", None) in ("avro", "protobuf"):
            resolver = self.resolver_for(fmt)
        ident = ("key", sample_key) if sample_key is not None else array_fingerprint(values)
        key = (ident, format_key(fmt), None if resolver is None else resolver.cache_key,
               None if arrow_type is None else str(arrow_type))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry[1]
            self.misses += 1
        decoded = self._decode(values, fmt, resolver, arrow_type=arrow_type)
        with self._lock:
            self._entries[key] = (values, decoded)
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return decoded

    def clear(self) -> None:
        """Drop every cached column and resolver."""
        with self._lock:
            self._entries.clear()
            self._resolvers.clear()
