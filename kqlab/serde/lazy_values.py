"""A column's decoded objects, each made when first asked for and then kept.

A bulk decoder (JSON into Arrow columns, Avro field by field) does not need the per-record
objects, and the replay reads few of them (a failing record's message, a widened column's
check, CEL's per-record fallbacks); a whole pass (CEL per record, the export's datums) reads
every one once.  Subclasses say how one record's object is made (:meth:`LazyValues._load`)
and may make them all at once faster (:meth:`LazyValues._load_all`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

__all__ = ["LazyValues"]


class LazyValues(Sequence[object]):
    """``n`` records' objects; ``known`` holds those made already (by the bulk decoder or by
    an earlier read), the rest are made by :meth:`_load` on first read."""

    def __init__(self, n: int, known: dict[int, object]) -> None:
        self._n = n
        self._known = known
        self._all: list[object] | None = None

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> object: ...

    @overload
    def __getitem__(self, i: slice) -> list[object]: ...

    def __getitem__(self, i: int | slice) -> object:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self._all is not None:
            return self._all[i]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("record index out of range")
        if i in self._known:
            return self._known[i]
        obj = self._load(i)
        if obj is not None:
            self._known[i] = obj
        return obj

    def _load(self, i: int) -> object:
        """Record ``i``'s object (None where there is none to make)."""
        raise NotImplementedError

    def _load_all(self) -> list[object]:
        """Every record's object, in order."""
        return [self[i] for i in range(self._n)]

    def __iter__(self) -> Iterator[object]:
        return iter(self.tolist())

    def tolist(self) -> list[object]:
        """Every record's object (made once, then kept)."""
        if self._all is None:
            self._all = self._load_all()
        return self._all
