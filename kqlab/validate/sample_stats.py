"""Statistics of a sample, by Arrow and numpy kernels: the numbers rule suggestions start from.

:class:`DataView` reads a replay's :class:`~kqlab.validate.context.EvalContext` — the very
columns the replay decodes and judges, so values are decoded once — restricted to the records
a client produced (transaction markers left out: they are the coordinator's, and no record
policy sees them).  The helpers read quantiles without interpolation (observed values only,
so results are deterministic), split a column's values into a value set and the rare values
left out of it (:func:`value_set`), and round bounds to powers of two or ten (head-room a
person would choose).  :mod:`kqlab.validate.rule_suggestion` turns these numbers into rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.context import EvalContext, FlatHeaders

if TYPE_CHECKING:
    from kqlab.sources.files import Snapshot
    from kqlab.validate.replayer import Replayer
    from kqlab.validate.sample import Sample

__all__ = ["DataView", "SampleLike", "ValueSet", "as_number", "data_mask", "pow2_ceil",
           "pow10_ceil", "quantiles", "value_set"]

#: what a sample can be given as: a records table, a replay ``Sample`` or ``Replayer``, a
#: ``Snapshot`` (or its folder), log segments (a segment file or a partition folder) or a log
#: directory of ``<topic>-<partition>`` folders — whatever ``kqlab replay`` reads
SampleLike: TypeAlias = "pa.Table | Sample | Replayer | Snapshot | str | Path"


def data_mask(records: pa.Table, batches: pa.Table | None) -> np.ndarray:
    """True for each record outside a transaction-marker batch (what a client produced)."""
    n = records.num_rows
    if batches is None or not batches.num_rows or "is_control" not in batches.column_names:
        return np.ones(n, dtype=bool)
    control = batches.column("is_control").to_numpy(zero_copy_only=False).astype(bool)
    if not control.any():
        return np.ones(n, dtype=bool)
    from kqlab.validate.sample import record_batch_rows

    return ~control[record_batch_rows(records, batches)]


@dataclass(frozen=True, slots=True)
class WireView:
    """The Confluent header of the kept records: framed or not, and the schema id (-1: none)."""

    framed: np.ndarray
    schema_id: np.ndarray


class DataView:
    """The columns of ``ctx`` the statistics read, for the records ``keep`` selects.

    Every property is computed once from the context's cached columns (sizes, flattened
    headers, the wire header, the decoded value) and filtered, so the replay that later rates
    the suggestions reuses the same decoding.
    """

    def __init__(self, ctx: EvalContext, keep: np.ndarray) -> None:
        if len(keep) != ctx.n:
            raise ValueError(f"keep has {len(keep)} entries for {ctx.n} records")
        self.ctx = ctx
        self.keep = keep.astype(bool)
        self.n = int(self.keep.sum())

    @cached_property
    def key_size(self) -> np.ndarray:
        """Key length in bytes, -1 for a null key."""
        return self.ctx.key_size[self.keep]

    @cached_property
    def value_size(self) -> np.ndarray:
        """Value length in bytes, -1 for a tombstone."""
        return self.ctx.value_size[self.keep]

    @cached_property
    def headers_size(self) -> np.ndarray:
        """Header bytes per record."""
        return self.ctx.headers_size[self.keep]

    @cached_property
    def headers(self) -> FlatHeaders:
        """The kept records' headers, flattened; ``parent`` indexes the kept records."""
        h = self.ctx.headers
        if self.keep.all():
            return h
        rows = self.keep[h.parent]
        renumber = np.cumsum(self.keep) - 1
        sel = pa.array(rows)
        return FlatHeaders(renumber[h.parent[rows]], h.keys.filter(sel), h.values.filter(sel),
                           h.counts[self.keep])

    def wire(self, target: str = "value") -> WireView:
        """Whether each kept value is Confluent-framed, and its schema id (-1 where not)."""
        info = self.ctx.wire(target)
        framed = np.asarray(info.framed.to_numpy(zero_copy_only=False), dtype=bool)
        ids = info.schema_id.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        return WireView(framed[self.keep], ids[self.keep])

    def decoded_values(self, target: str = "value") -> tuple[pa.Array | None, str | None]:
        """The decoded values of the kept records that decoded (no tombstones, no failures),
        or ``(None, why)`` when the values are not typed columns (JSON text fallback)."""
        decoded = self.ctx.decoded(target)
        if decoded.fallback:
            return None, decoded.fallback
        sizes = self.ctx.value_size if target == "value" else self.ctx.key_size
        ok = self.keep & ~self.ctx.decode_failed(target) & (sizes >= 0)
        return decoded.values.filter(pa.array(ok)), None


@dataclass(frozen=True, slots=True)
class ValueSet:
    """A column's values split into the value set a rule would allow and the rare ones left
    out of it (each with how often it was seen and why it is left out)."""

    keep: list[str]
    #: (value, count, reason) per value left out, most frequent first
    left_out: list[tuple[str, int, str]]
    distinct: int
    total: int


def value_set(arr: pa.Array, min_support: int, min_share: float) -> ValueSet:
    """The values of a text column seen at least ``min_support`` times *and* carried by at
    least ``min_share`` of its non-null values, sorted; the others are left out, with why.

    A value that only a sliver of the records carry is more often a defect than a category
    (a planted ``REFUNDED``, a producer writing ``usd`` once): allowing it would bless the
    very records a rule should catch.

    Examples
    --------
    >>> s = value_set(pa.array(["A"] * 60 + ["B"] * 39 + ["C"]), 2, 0.02)
    >>> s.keep, s.left_out
    (['A', 'B'], [('C', 1, 'seen once (fewer than 2 times)')])
    >>> value_set(pa.array(["A"] * 990 + ["B"] * 10), 2, 0.02).left_out
    [('B', 10, 'carried by 1 % of the 1000 values (less than 2 %)')]
    """
    present = arr.drop_null()
    total = len(present)
    counts = pc.value_counts(present)
    values = [str(v) for v in counts.field("values").to_pylist()]
    n = counts.field("counts").to_numpy(zero_copy_only=False).tolist()
    keep: list[str] = []
    left: list[tuple[str, int, str]] = []
    for v, c in sorted(zip(values, n, strict=True), key=lambda vc: (-vc[1], vc[0])):
        if c < min_support:
            seen = "once" if c == 1 else f"{c} times"
            left.append((v, c, f"seen {seen} (fewer than {min_support} times)"))
        elif total and c / total < min_share:
            left.append((v, c, f"carried by {100 * c / total:.2g} % of the {total} values "
                               f"(less than {100 * min_share:g} %)"))
        else:
            keep.append(v)
    return ValueSet(sorted(keep), left, len(values), total)


def pow2_ceil(x: float) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 if x <= 1 else 1 << math.ceil(math.log2(x))


def pow10_ceil(x: float) -> float:
    """The smallest power of ten >= x (x > 0)."""
    return 10.0 ** math.ceil(math.log10(x) - 1e-12)


def as_number(x: float, integral: bool) -> int | float:
    """``x`` as an int when the column is integral or ``x`` is whole (``10`` not ``10.0``)."""
    return int(x) if integral or float(x).is_integer() else float(x)


def quantiles(values: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """The ``qs`` quantiles of ``values``, each an observed value ("inverted_cdf"):
    deterministic, no interpolation artefacts."""
    return [float(v) for v in np.quantile(values, qs, method="inverted_cdf")]
