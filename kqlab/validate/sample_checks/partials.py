"""Mergeable partial aggregates of the sample checks: what one chunk of records contributes.

A check's state is never "the records": it is a small Arrow table per check whose rows are
keyed by group and window (and by value where values must be told apart) and whose other
columns merge by a fixed operation (:data:`PARTIAL_LAYOUT`), plus a few counters that merge
by sum.  Merging the partials of any split of a sample — the chunks of a streamed replay,
the partitions of a Spark job — and merging the whole sample's gives the same table (a
group-by over the concatenation), so a chunked replay's results equal the whole replay's
and any engine that can compute these tables (a ``groupBy`` with ``sum``/``max``/``count``)
feeds the same :func:`~kqlab.validate.sample_checks.finish.finish_check`.

Tables, per kind (``group``: string, null without ``by``; ``window``: int64 epoch-ms start
of the window, 0 without ``window``; ``value``: large_binary canonical text, see
:mod:`.columns`):

=================  ===========================  =============================================
kind               keys                         merged columns
=================  ===========================  =============================================
volume             group, window                records: sum
freshness          group                        newest: max (epoch ms), records: sum
null_rate          group, window                records: sum, nulls: sum
duplicate_rate     group, window, value         count: sum (non-null values only)
distinct           group, window, value         count: sum (non-null values only)
stat               — (rows kept)                group, window, value: float64 (exact values:
                                                quantiles and sums come out the same for any
                                                split, summed in sorted order)
reject_rate        group, window                records: sum, rejected: sum
drift              bin, value                   count: sum (bin: numeric bin index, -1 for a
                                                category; value: the category, null numeric)
schema_drift       value                        count: sum (``schema:<id>``,
                                                ``fields:<a,b,...>``)
=================  ===========================  =============================================

Counters: ``records`` (records the check read, after ``when``), ``untimed`` (read records
without a timestamp, left out of windows), ``non_numeric`` (values that were not numbers),
``not_scalar`` (1: the field holds objects/lists).  The sample's time extent (first and last
timestamp of every record but transaction markers) is one more partial, :class:`Extent`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa

__all__ = ["PARTIAL_LAYOUT", "PARTIAL_SCHEMAS", "Extent", "Partial", "merge_partials"]

_G = ("group", pa.string())
_W = ("window", pa.int64())
_V = ("value", pa.large_binary())

#: per kind: the key columns and how every other column merges (``keep``: rows are kept)
PARTIAL_LAYOUT: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "volume": (("group", "window"), {"records": "sum"}),
    "freshness": (("group",), {"newest": "max", "records": "sum"}),
    "null_rate": (("group", "window"), {"records": "sum", "nulls": "sum"}),
    "duplicate_rate": (("group", "window", "value"), {"count": "sum"}),
    "distinct": (("group", "window", "value"), {"count": "sum"}),
    "stat": ((), {"group": "keep", "window": "keep", "value": "keep"}),
    "reject_rate": (("group", "window"), {"records": "sum", "rejected": "sum"}),
    "drift": (("bin", "value"), {"count": "sum"}),
    "schema_drift": (("value",), {"count": "sum"}),
}

#: the partial table's schema per kind (what every engine must produce)
PARTIAL_SCHEMAS: dict[str, pa.Schema] = {
    "volume": pa.schema([_G, _W, ("records", pa.int64())]),
    "freshness": pa.schema([_G, ("newest", pa.int64()), ("records", pa.int64())]),
    "null_rate": pa.schema([_G, _W, ("records", pa.int64()), ("nulls", pa.int64())]),
    "duplicate_rate": pa.schema([_G, _W, _V, ("count", pa.int64())]),
    "distinct": pa.schema([_G, _W, _V, ("count", pa.int64())]),
    "stat": pa.schema([_G, _W, ("value", pa.float64())]),
    "reject_rate": pa.schema([_G, _W, ("records", pa.int64()), ("rejected", pa.int64())]),
    "drift": pa.schema([("bin", pa.int64()), _V, ("count", pa.int64())]),
    "schema_drift": pa.schema([_V, ("count", pa.int64())]),
}


@dataclass
class Partial:
    """One check's partial aggregate: its table (:data:`PARTIAL_SCHEMAS` of its kind) and
    counters."""

    kind: str
    table: pa.Table
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, kind: str) -> Partial:
        """Nothing read yet."""
        return cls(kind, PARTIAL_SCHEMAS[kind].empty_table(), {})


@dataclass
class Extent:
    """The sample's time extent: first and last record timestamp (None: no timestamp) and
    records (transaction markers left out); merges by min, max and sum."""

    first: int | None = None
    last: int | None = None
    records: int = 0

    def merge(self, other: Extent) -> Extent:
        """Both extents as one."""
        firsts = [t for t in (self.first, other.first) if t is not None]
        lasts = [t for t in (self.last, other.last) if t is not None]
        return Extent(min(firsts) if firsts else None, max(lasts) if lasts else None,
                      self.records + other.records)


def merge_partials(kind: str, partials: Iterable[Partial]) -> Partial:
    """The partials of several chunks as one: tables concatenated and grouped by their keys
    (:data:`PARTIAL_LAYOUT`), counters summed.  Rows come out sorted by the keys, so the
    merged table does not depend on the order of the chunks."""
    items = list(partials)
    counts: dict[str, int] = {}
    for p in items:
        for name, value in p.counts.items():
            counts[name] = counts.get(name, 0) + value
    schema = PARTIAL_SCHEMAS[kind]
    tables = [p.table for p in items if p.table.num_rows]
    if not tables:
        return Partial(kind, schema.empty_table(), counts)
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    keys, merged = PARTIAL_LAYOUT[kind]
    if keys and (len(tables) > 1 or len(items) > 1):
        out = table.group_by(list(keys), use_threads=False).aggregate(
            [(name, op) for name, op in merged.items()])
        out = out.rename_columns([n.rsplit("_", 1)[0] if n.endswith(("_sum", "_max"))
                                  else n for n in out.column_names])
        table = out.select(schema.names).cast(schema)
    if keys:
        table = table.sort_by([(k, "ascending") for k in keys])
    return Partial(kind, table, counts)
