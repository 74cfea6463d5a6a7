"""The sample checks' cell codes (``kqlab.validate.sample_checks.cells``) against the path
that reads the partial tables' columns: each kind's partial computed over a chunk's shared
cell codes equals the group-by of its group, window (and value) columns; partials carrying
their cells merge and judge exactly as the same tables without them (random splits, cells
several chunks share, windows far apart, records without a timestamp)."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

from kqlab.policy import loads_policy
from kqlab.validate import Replayer
from kqlab.validate.context import EvalContext
from kqlab.validate.loading import load_sample
from kqlab.validate.replayer import with_implicit_rules
from kqlab.validate.rules import RuleResult
from kqlab.validate.sample_checks import (
    PARTIAL_LAYOUT,
    PARTIAL_SCHEMAS,
    Chunk,
    Extent,
    Partial,
    extent_of,
    finish_check,
    merge_partials,
    partial_of,
)
from kqlab.validate.sample_checks.cells import cell_index, cells_of
from kqlab.validate.sample_checks.columns import (
    field_values,
    group_labels,
    key_values,
    numeric_values,
    reads,
    to_text,
)
from kqlab.validate.sample_checks.partials import group_aggregate
from tests.validate.test_sample_checks import HEAD, MINUTE, T0, write_log

CHECKS = """checks:
  - {id: vol, kind: volume, window: 1m, by: partition, min: 1}
  - {id: vol-region, kind: volume, window: 10m, by: region, min: 1}
  - {id: fresh, kind: freshness, by: partition, max_age_ms: 60000}
  - {id: nulls, kind: null_rate, field: customer, window: 5m, max: 0.1}
  - {id: rejects, kind: reject_rate, rule: amount, window: 1m, by: partition, max: 0.1}
  - {id: refused, kind: reject_rate, max: 0.5}
  - {id: dups, kind: duplicate_rate, of: key, window: 10m, by: partition, max: 0}
  - {id: dup-customers, kind: duplicate_rate, of: customer, window: 1h, max: 1}
  - {id: regions, kind: distinct, field: region, by: partition, window: 1m, min: 1}
  - {id: p95, kind: stat, stat: p95, field: amount, window: 10m, by: partition, max: 1000000000}
  - {id: mean, kind: stat, stat: mean, field: amount, by: region, max: 1000000000}
  - {id: sd, kind: stat, stat: stddev, field: amount, window: 1d, max: 1000000000}
"""
RULES = "rules:\n  - {id: amount, kind: field_range, field: amount, min: 0, max: 150}\n"


def _records(p: int, seed: int, n: int = 700, spread: int = 1, ordered: bool = False):
    """Partition ``p``'s records: repeated keys and customers, nulls, regions, amounts (some
    negative, some missing), a few without a timestamp; ``spread`` stretches time (windows
    far apart); ``ordered``: keys numbered in order, each once (a producer's order ids)."""
    rng = np.random.default_rng(seed + p)
    out = []
    for i in range(n):
        key = f"o-{i:09d}".encode() if ordered else None if rng.random() < 0.05 else \
            f"k{rng.integers(0, n // 2)}".encode()
        value = {"amount": float(np.round(rng.normal(100, 40), 1)) if rng.random() > 0.1
                 else None,
                 "customer": None if rng.random() < 0.08 else f"c{rng.integers(0, 50)}",
                 "region": None if rng.random() < 0.05 else f"r{rng.integers(0, 4)}"}
        ts = -1 if rng.random() < 0.03 else T0 + int(rng.integers(0, 90 * MINUTE)) * spread
        out.append((key, value if rng.random() > 0.02 else None, ts))
    return out


def _chunk(tmp_path, seed: int, spread: int = 1, ordered: bool = False):
    folder = write_log(tmp_path / f"log{seed}-{spread}",
                       {p: _records(p, seed, spread=spread, ordered=ordered)
                        for p in range(3)}, per_batch=7)
    policy = with_implicit_rules(loads_policy(HEAD + RULES + CHECKS))
    replayer = Replayer(load_sample(folder), now=T0 + 100 * MINUTE * spread)
    verdicts = replayer.run(policy, checks=False)
    chunk = Chunk(replayer.context(policy), replayer.control, replayer.evaluate(policy),
                  verdicts.aggregates.outcome)
    return policy, chunk


def _by_columns(check, chunk) -> Partial:
    """The partial computed from columns alone: each record's group label and window start
    (and value) grouped by :func:`group_aggregate`, as before the cells existed."""
    ctx, kind = chunk.ctx, check.kind
    keep = reads(ctx, chunk.control, check.when)
    ts = ctx.timestamps
    w = check.window_ms
    timed = keep & (ts >= 0) if w is not None or kind == "freshness" else keep
    window = ts // w * w if w is not None else np.zeros(len(ts), np.int64)
    groups = group_labels(ctx, check.by)
    if isinstance(groups, pa.DictionaryArray):
        groups = groups.dictionary_decode()
    counts = {"records": int(keep.sum()), "untimed": int((keep & ~(ts >= 0)).sum())
              if w is not None else 0}
    schema = PARTIAL_SCHEMAS[kind]

    def at(mask):
        rows = pa.array(np.flatnonzero(mask))
        return groups.take(rows), window[mask]

    if kind == "freshness":
        g, _ = at(timed)
        table = group_aggregate({"group": g}, {"newest": ("max", ts[timed]),
                                               "records": ("count", None)},
                                int(timed.sum()), schema)
        return Partial(kind, table, counts)
    if kind in ("volume", "null_rate", "reject_rate"):
        g, win = at(timed)
        values = {"records": ("count", None)}
        if kind == "null_rate":
            values["nulls"] = ("sum", field_values(ctx, "customer").nulls[timed].astype(int))
        if kind == "reject_rate":
            rule = check.param("rule")
            hit = chunk.results[rule].failed if rule else np.isin(chunk.outcome, (1, 2))
            values["rejected"] = ("sum", np.asarray(hit, int)[timed])
        return Partial(kind, group_aggregate({"group": g, "window": win}, values,
                                             int(timed.sum()), schema), counts)
    if kind in ("duplicate_rate", "distinct"):
        of = check.param("of") if kind == "duplicate_rate" else check.param("field")
        values = key_values(ctx) if of == "key" else to_text(field_values(ctx, of).values)
        present = timed & ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
        g, win = at(present)
        table = group_aggregate({"group": g, "window": win,
                                 "value": values.take(pa.array(np.flatnonzero(present)))},
                                {"count": ("count", None)}, int(present.sum()), schema)
        return Partial(kind, table, counts)
    fv = field_values(ctx, check.param("field"))
    valid, numbers, _ = numeric_values(fv)
    counts["non_numeric"] = int((timed & ~fv.nulls & ~valid).sum())
    use = timed & valid
    g, win = at(use)
    return Partial(kind, pa.table({"group": g, "window": pa.array(win),
                                   "value": pa.array(numbers[use])}, schema=schema), counts)


def _consistent(partial: Partial) -> None:
    """A partial's cells describe its table: each row's code names its own group and window,
    every cell holds a row, and the kept per-cell rows and totals are its rows' counts."""
    cells = cells_of(partial)
    assert cells is not None and len(cells.codes) == partial.table.num_rows
    assert cells.keys.take(pa.array(cells.codes)).equals(
        partial.table.select(["group", "window"]).combine_chunks())
    assert set(cells.codes.tolist()) == set(range(cells.keys.num_rows))
    k = cells.keys.num_rows
    if partial.kind == "stat" and cells.rows is not None:  # values per cell
        np.testing.assert_array_equal(cells.rows, np.bincount(cells.codes, minlength=k))
    if partial.kind != "stat":
        assert cells.rows is not None and cells.total is not None
        np.testing.assert_array_equal(cells.rows, np.bincount(cells.codes, minlength=k))
        np.testing.assert_array_equal(cells.total, np.bincount(
            cells.codes, weights=partial.table.column("count").to_numpy(), minlength=k))


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending") for c in table.column_names])


def _judged(check, partial, extent):
    row, windows = finish_check(check, partial, extent, T0 + 200 * MINUTE)
    return row, windows


@pytest.mark.parametrize(("seed", "spread", "ordered"),
                         [(1, 1, False), (2, 1, True), (3, 5_000, False)])
def test_each_kind_over_the_cells_equals_the_group_by_of_its_columns(tmp_path, seed, spread,
                                                                    ordered):
    policy, chunk = _chunk(tmp_path, seed, spread, ordered)
    for check in policy.checks:
        got = partial_of(check, chunk)
        want = _by_columns(check, chunk)
        assert _sorted(got.table).equals(_sorted(want.table)), check.id
        assert {k: v for k, v in got.counts.items() if v} == \
            {k: v for k, v in want.counts.items() if v}, check.id
        if check.kind in ("duplicate_rate", "distinct", "stat"):
            _consistent(got)


@pytest.mark.parametrize(("seed", "ordered"), [(4, False), (5, True)])
@pytest.mark.parametrize("splits", [2, 5, 13])
def test_partials_with_cells_merge_and_judge_as_without(tmp_path, seed, ordered, splits):
    """Chunks cut at random (their cells overlap: every window is in several chunks)
    merged with their cells and without (as read back from Parquet): the same table, the
    same results to the bit."""
    policy, whole = _chunk(tmp_path, seed, ordered=ordered)
    n = whole.n
    rng = np.random.default_rng(seed * splits)
    cuts = [0, *sorted(rng.choice(np.arange(1, n), splits - 1, replace=False).tolist()), n]
    parts = _cut(whole, cuts)
    extent = Extent()
    for c in parts:
        extent = extent.merge(extent_of(c))
    assert extent == extent_of(whole)
    for check in policy.checks:
        pieces = [partial_of(check, c) for c in parts]
        with_cells = merge_partials(check.kind, pieces)
        without = merge_partials(check.kind, [Partial(p.kind, p.table, p.counts)
                                              for p in pieces])
        assert cells_of(without) is None
        assert _sorted(with_cells.table).equals(_sorted(without.table)), check.id
        assert with_cells.counts == without.counts
        assert _judged(check, with_cells, extent) == _judged(check, without, extent), check.id
        # and both equal the whole chunk's partial, judged
        alone = partial_of(check, whole)
        assert _judged(check, alone, extent) == _judged(check, with_cells, extent), check.id
        if check.kind in ("duplicate_rate", "distinct", "stat"):
            _consistent(with_cells)
            assert cells_of(with_cells).keys.num_rows < with_cells.table.num_rows
            # merged again with a partial without cells: by the columns, same table
            again = merge_partials(check.kind, [with_cells, Partial(check.kind,
                                                                    pieces[0].table)])
            twice = merge_partials(check.kind, [without, Partial(check.kind, pieces[0].table)])
            assert _sorted(again.table).equals(_sorted(twice.table))


def _cut(whole: Chunk, cuts: list[int]) -> list[Chunk]:
    """``whole`` as the chunks between ``cuts`` (record positions)."""
    ctx = whole.ctx
    parts = []
    for a, b in itertools.pairwise(cuts):
        sub = EvalContext(ctx.records.slice(a, b - a), ctx.now, ctx.batches,
                          value_format=ctx.value_format, key_format=ctx.key_format)
        parts.append(Chunk(sub, whole.control[a:b],
                           {k: RuleResult(r.failed[a:b], ()) for k, r in whole.results.items()},
                           whole.outcome[a:b]))
    return parts


def test_a_cell_one_chunk_holds_keeps_its_judgement_through_the_merge(tmp_path):
    """Chunks cut at the partitions' ends (700 records each) and once inside partition 1:
    a by-partition cell of partition 0 or 2 is in one chunk, so the merge keeps the
    statistic that chunk computed (``known``) and the value-keyed kinds' per-cell counts,
    and makes no per-row codes until read; partition 1's cells and the cells across
    partitions are computed again from all their values.  Judged, each equals the whole
    chunk's partial and the tables without cells."""
    policy, whole = _chunk(tmp_path, 6)
    assert whole.n == 2100
    parts = _cut(whole, [0, 700, 1000, 1400, 2100])
    extent = extent_of(whole)
    seen_known = set()
    for check in policy.checks:
        if check.kind not in ("duplicate_rate", "distinct", "stat"):
            continue
        pieces = [partial_of(check, c) for c in parts]
        merged = merge_partials(check.kind, pieces)
        cells = cells_of(merged)
        assert cells is not None
        holders: dict[tuple, int] = {}
        for piece in pieces:
            for key in zip(*(cells_of(piece).keys.column(c).to_pylist()
                             for c in ("group", "window")), strict=True):
                holders[key] = holders.get(key, 0) + 1
        keys = list(zip(cells.keys.column("group").to_pylist(),
                        cells.keys.column("window").to_pylist(), strict=True))
        alone = [holders[k] == 1 for k in keys]
        if check.kind == "stat":
            assert cells.known.tolist() == alone, check.id
            seen_known.add((check.id, any(alone), not all(alone)))
        elif not any(holders[k] > 1 for k in keys):  # nothing to group again: codes wait
            assert callable(cells.codes_or_thunk), check.id
        without = merge_partials(check.kind, [Partial(p.kind, p.table, p.counts)
                                              for p in pieces])
        assert _judged(check, merged, extent) == _judged(check, without, extent), check.id
        assert _judged(check, merged, extent) == \
            _judged(check, partial_of(check, whole), extent), check.id
        _consistent(merged)
    # p95 by partition: some cells in one chunk, some in two; mean by region and the
    # daily stddev span the partitions: every cell computed again
    assert seen_known == {("p95", True, True), ("mean", False, True), ("sd", False, True)}
    # cut at the partitions' ends only: duplicate keys by partition share no cell
    dups = next(c for c in policy.checks if c.id == "dups")
    merged = merge_partials(dups.kind, [partial_of(dups, c)
                                        for c in _cut(whole, [0, 700, 1400, 2100])])
    assert callable(cells_of(merged).codes_or_thunk)  # judged without a per-row code
    assert _judged(dups, merged, extent) == _judged(dups, partial_of(dups, whole), extent)
    assert callable(cells_of(merged).codes_or_thunk)
    _consistent(merged)  # read, the codes describe the rows


def test_a_filtered_table_drops_its_codes():
    """Code that replaces a partial's table (a streaming enforcer dropping closed windows)
    leaves codes that no longer apply: they are ignored, the columns are read."""
    groups = pa.array(["a", "b", None, "a"], pa.string())
    ts = np.array([T0, T0 + MINUTE, T0 + 2 * MINUTE, -1])
    index = cell_index(groups, ts, MINUTE)
    assert index.codes[-1] == -1 and index.keys.num_rows == 3
    check = loads_policy(HEAD + "checks: [{id: s, kind: stat, stat: max, field: a, "
                         "window: 1m, by: g, max: 1}]\n").checks[0]
    table = pa.table({"group": groups[:3], "window": pa.array(ts[:3] // MINUTE * MINUTE),
                      "value": pa.array([1.0, 2.0, 3.0])}, schema=PARTIAL_SCHEMAS["stat"])
    from kqlab.validate.sample_checks.cells import Cells

    p = Partial("stat", table, {"records": 3}, Cells(table, index.codes[:3], index.keys))
    assert cells_of(p) is not None
    p.table = table.slice(1)
    assert cells_of(p) is None
    extent = Extent(T0, T0 + 3 * MINUTE, 3)
    assert _judged(check, p, extent) == _judged(check, Partial("stat", table.slice(1),
                                                               {"records": 3}), extent)


def test_layout_kinds_with_cells_are_the_row_kinds():
    """Cells are kept exactly by the kinds whose partial holds rows per value or value read."""
    assert {k for k, (keys, _) in PARTIAL_LAYOUT.items() if "value" in keys and "window"
            in keys} | {"stat"} == {"duplicate_rate", "distinct", "stat"}


@pytest.mark.parametrize("edges", [1, 9, 32, 33])
def test_drift_bins_by_comparisons_equal_searchsorted(edges):
    """The drift kernel's bins (a comparison per edge) equal numpy's binary search (right
    side), values on the edges, signed zeros and extremes included."""
    from kqlab.validate.sample_checks.compute import _bins

    rng = np.random.default_rng(edges)
    inner = np.unique(np.round(rng.normal(0, 10, edges), 1))
    if edges > 1:  # an edge at zero
        inner = np.unique(np.append(inner[1:], 0.0))
    numbers = np.concatenate([rng.normal(0, 12, 5_000), inner, inner - 1e-12, [-0.0, 0.0],
                              [np.finfo(float).max, -np.finfo(float).max, 5e-324]])
    got = _bins(inner, numbers)
    np.testing.assert_array_equal(got, np.searchsorted(inner, numbers, side="right"))


@pytest.mark.parametrize("labels", [["orders-7"], ["é-0", "b"], [None], [None, "a"]])
def test_keys_at_equals_a_take(labels):
    """A partial's group and window columns from its cells' keys: one label repeated is
    written at once, the same array as a take of the codes."""
    from kqlab.validate.sample_checks.cells import CELL_KEYS_SCHEMA, keys_at

    keys = pa.table({"group": pa.array(labels * 3, pa.string()),
                     "window": pa.array(np.arange(3 * len(labels)) * MINUTE)},
                    schema=CELL_KEYS_SCHEMA)
    codes = np.random.default_rng(len(labels)).integers(0, keys.num_rows, 5_000)
    for at in (codes, codes[:0]):
        group, window = keys_at(keys, at)
        assert group.equals(keys.column("group").take(pa.array(at)).combine_chunks())
        assert window.equals(keys.column("window").take(pa.array(at)).combine_chunks())


@pytest.mark.parametrize("runs", [1, 7, 300, 5_000, 50_000])
def test_cell_order_by_runs_equals_a_stable_argsort(runs):
    """The stat finish lays a partial's rows out in cell order run by run: the very order a
    stable sort of the cell codes gives (runs of one cell apart, short runs, long runs)."""
    from kqlab.validate.sample_checks.stats import _cell_order

    rng = np.random.default_rng(runs)
    n = 60_000
    lengths = rng.multinomial(n - runs, np.ones(runs) / runs) + 1
    cell = np.repeat(rng.integers(0, 40, runs), lengths)
    np.testing.assert_array_equal(_cell_order(cell), np.argsort(cell, kind="stable"))
    assert _cell_order(cell[:10]).tolist() == np.argsort(cell[:10], kind="stable").tolist()


@pytest.mark.parametrize("case", ["fixed", "widths", "nul_and_empty", "utf8", "sliced",
                                  "late_value", "many", "long", "nulls", "string",
                                  "fixed_sliced", "fixed_seven", "fixed_one", "fixed_empty"])
def test_short_codes_are_exact_or_declined(case):
    """A column of few short values coded by its bytes as words: codes equal exactly when
    the values do (empty values, NUL bytes, a value that is another's prefix, multi-byte
    text, a slice); a value only after the first 1024 rows, more than 8 values, a value
    of 8 bytes or a null declines (the hash path takes the column)."""
    from kqlab.validate.sample_checks.partials import SHORT_VALUES, short_codes

    rng = np.random.default_rng(len(case))
    pools = {"fixed": [b"EUR", b"USD", b"GBP"], "widths": [b"a", b"ab", b"abc", b"abcdefg"],
             "nul_and_empty": [b"", b"\0", b"\0\0", b"a\0", b"a"],
             "utf8": ["é".encode(), "ü".encode(), b"e", "€".encode()],
             "sliced": [b"x", b"yy", b"zzz"], "late_value": [b"p", b"q"],
             "many": [b"v%d" % i for i in range(SHORT_VALUES + 1)],
             "long": [b"a", b"abcdefgh"], "nulls": [b"a", None], "string": [b"a", b"bc"],
             # one width (read at a stride of it): sliced, the widest, the narrowest, none
             "fixed_sliced": [b"EUR", b"USD", b"\0SD", b"EU\0"],
             "fixed_seven": [b"abcdefg", b"abcdef\0", b"\xff" * 7, b"\0" * 7],
             "fixed_one": [b"a", b"\0", b"\xff"], "fixed_empty": [b""]}
    pool = pools[case]
    drawn = [pool[i] for i in rng.integers(0, len(pool), 5_000).tolist()]
    if case == "late_value":
        drawn[4_000] = b"r"
    typ = pa.string() if case == "string" else pa.large_binary()
    column = pa.array([None if v is None else v.decode() if case == "string" else v
                       for v in drawn], typ)
    if case in ("sliced", "fixed_sliced"):
        column, drawn = column.slice(17, 4_000), drawn[17:4_017]
    got = short_codes(column)
    if case in ("late_value", "many", "long", "nulls"):
        assert got is None
        return
    assert got is not None
    codes, first = got
    values = column.to_pylist()
    # equal values, equal codes; each code's first row holds its value, first of all
    assert len(set(zip(codes.tolist(), values, strict=True))) == len(set(values)) == len(first)
    for code, row in enumerate(first.tolist()):
        assert codes[row] == code and values.index(values[row]) == row


@pytest.mark.parametrize("seed", [1, 2])
def test_record_shapes_equal_each_records_own_field_set(tmp_path, seed):
    """A record's shape is ``fields:`` and its non-null top-level fields, sorted: fields
    every object holds, fields none holds and fields some hold, null values and
    tombstones, as a record-by-record reading of the decoded objects says."""
    from kqlab.validate.sample_checks.shapes import record_shapes

    rng = np.random.default_rng(seed)
    names = ["zeta", "alpha", "always", "never", "mid", "b"]
    recs = []
    for i in range(900):
        doc: dict | None = {"always": i, "never": None}
        for name in ("zeta", "alpha", "mid", "b"):
            r = rng.random()
            if r < 0.3:
                doc[name] = i
            elif r < 0.4:
                doc[name] = None
        if rng.random() < 0.03:
            doc = None  # a tombstone
        recs.append((f"k{i}".encode(), doc, T0 + i))
    folder = write_log(tmp_path / "log", {0: recs})
    policy = loads_policy(HEAD)
    replayer = Replayer(load_sample(folder), now=T0)
    ctx = replayer.context(policy)
    got = record_shapes(ctx)
    if isinstance(got, pa.DictionaryArray):
        got = got.dictionary_decode()
    want = [None if doc is None else "fields:" + ",".join(sorted(
        k for k in names if doc.get(k) is not None)) for _, doc, _ in recs]
    assert [v.decode() if isinstance(v, bytes) else v for v in got.to_pylist()] == want


@pytest.mark.parametrize("case", ["mixed", "same_fields", "wide", "tombstones", "one_field"])
@pytest.mark.parametrize("control", ["none", "random", "all"])
def test_schema_drift_counted_from_field_bits_equals_the_record_shapes(tmp_path, case,
                                                                       control):
    """A schema-drift partial counted from the records' field bits (``shape_counts``) is
    the table counting each record's shape gives (``record_shapes``' dictionary codes),
    row for row and in order, and what a record-by-record reading counts; declined (None)
    where the shapes must be built: more than 20 top-level fields, values that are never
    objects."""
    from collections import Counter

    from kqlab.validate.sample_checks import shapes

    rng = np.random.default_rng(len(case) * 7 + len(control))
    names = {"mixed": ["zeta", "alpha", "always", "never", "mid", "b"],
             "same_fields": ["a", "b", "c"], "wide": [f"f{i:02d}" for i in range(24)],
             "tombstones": ["a"], "one_field": ["only"]}[case]
    recs = []
    for i in range(1_200):
        doc: dict | None = {}
        for j, name in enumerate(names):
            r = rng.random()
            if case == "same_fields" or (case == "mixed" and name == "always"):
                doc[name] = i
            elif case == "mixed" and name == "never":
                doc[name] = None
            elif r < 0.3 + 0.02 * j:
                doc[name] = i
            elif r < 0.45:
                doc[name] = None
        if case == "tombstones" or rng.random() < 0.05:
            doc = None
        recs.append((f"k{i}".encode(), doc, T0 + i))
    folder = write_log(tmp_path / "log", {0: recs})
    policy = loads_policy(HEAD + "checks:\n  - {id: s, kind: schema_drift, baseline: b}\n")
    check = policy.checks[0]
    ctx = Replayer(load_sample(folder), now=T0).context(policy)
    n = ctx.n
    marked = {"none": np.zeros(n, bool), "random": rng.random(n) < 0.3,
              "all": np.ones(n, bool)}[control]
    counted = shapes.shape_counts(ctx, ~marked)
    assert (counted is None) == (case in ("wide", "tombstones"))
    fast = partial_of(check, Chunk(ctx, marked)).table
    saved = shapes.shape_counts
    shapes.shape_counts = lambda ctx, keep: None  # type: ignore[assignment]
    try:
        built = partial_of(check, Chunk(replayer_context(folder, policy), marked)).table
    finally:
        shapes.shape_counts = saved
    assert fast.equals(built), (fast.to_pylist(), built.to_pylist())
    want = Counter("fields:" + ",".join(sorted(k for k in names if doc.get(k) is not None))
                   for (_, doc, _), out in zip(recs, marked.tolist(), strict=True)
                   if doc is not None and not out)
    assert {r["value"].decode(): r["count"] for r in fast.to_pylist()} == dict(want)


def replayer_context(folder: object, policy: object) -> EvalContext:
    """A fresh evaluation context of the log at ``folder`` (nothing memoised yet)."""
    return Replayer(load_sample(folder), now=T0).context(policy)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", ["random", "first_last", "consecutive", "sliced", "nulls",
                                  "dictionary", "string", "many"])
def test_rows_kept_run_by_run_equal_a_filter(case):
    """A mask dropping a few rows applied by concatenating the runs between them gives the
    array Arrow's filter gives (the first and last rows dropped, drops side by side, a
    sliced column, nulls kept, dictionary and string columns; a mask dropping many rows
    goes to the filter)."""
    from kqlab.validate.sample_checks.compute import FEW_DROPPED, _at

    rng = np.random.default_rng(len(case))
    n = 20_000
    words = [b"o-%09d" % i for i in range(n + 50)]
    column: pa.Array = pa.array(words, pa.large_binary())
    if case == "sliced":
        column = column.slice(37, n)
    else:
        column = column.slice(0, n)
    if case == "nulls":
        column = pa.array([None if i % 97 == 0 else w for i, w in enumerate(words[:n])],
                          pa.large_binary())
    elif case == "dictionary":
        column = pa.array([f"g{i % 5}" for i in range(n)]).dictionary_encode()
    elif case == "string":
        column = pa.array([w.decode() for w in words[:n]], pa.string())
    keep = np.ones(n, bool)
    if case == "first_last":
        keep[[0, n - 1]] = False
    elif case == "consecutive":
        keep[100:105] = False
        keep[n - 3:] = False
    elif case == "many":
        keep = rng.random(n) > 0.5
    else:
        keep[rng.choice(n, n // FEW_DROPPED, replace=False)] = False
    got = _at(column, keep)
    want = column.filter(pa.array(keep))
    assert got.type == want.type and got.equals(want)
    assert got.to_pylist() == [v for v, k in zip(column.to_pylist(), keep.tolist(),
                                                  strict=True) if k]


@pytest.mark.parametrize("n", [1, 2, 3, 20, 1_001])
def test_order_stat_of_two_neighbours_equals_a_sort(n):
    """A quantile's two neighbouring order statistics put in place as a sort puts them
    (ties, the last two positions, one value)."""
    from kqlab.validate.sample_checks.stats import _order_stat

    rng = np.random.default_rng(n)
    values = np.round(rng.normal(0, 3, n))  # ties
    for lo in sorted({0, n // 2, max(n - 2, 0), int(0.95 * (n - 1))}):
        kth = sorted({lo, min(lo + 1, n - 1)})
        v = values.copy()
        _order_stat(v, kth)
        assert v[kth].tolist() == np.sort(values)[kth].tolist()
        assert sorted(v.tolist()) == sorted(values.tolist())


@pytest.mark.parametrize("case", ["same", "last_byte", "lengths", "null", "sliced", "empty",
                                  "one"])
def test_one_partition_labels_equal_record_by_record(case):
    """A chunk of one topic-partition is labelled at once when its topic column holds one
    value (told from offsets and bytes): the labels a record-by-record reading gives, and
    a column that differs anywhere (its last byte, a length, a null) is not taken for one."""
    from kqlab.validate.sample_checks.columns import _one_text, _partition_labels

    n = 3_000
    topics = ["orders"] * n
    if case == "last_byte":
        topics[-1] = "orderz"
    elif case == "lengths":
        topics[n // 2] = "orders2"
    elif case == "empty":
        topics = [""] * n
    elif case == "one":
        topics = ["orders"]
    column = pa.array([None if case == "null" and i == 7 else t
                       for i, t in enumerate(topics)], pa.string())
    if case == "sliced":
        column = pa.array(["audit", *topics, "audit"], pa.string()).slice(1, n)
    same = case in ("same", "sliced", "empty", "one")
    assert _one_text(column) is same
    if case == "null":  # a records table's topic is never null
        return
    part = np.full(len(column), 3, np.int64)
    labels = _partition_labels(column, part)
    assert labels.dictionary_decode().to_pylist() == [
        f"{t}-3" for t in column.to_pylist()]


@pytest.mark.parametrize("read_ahead", ["1", "0"])
def test_checks_are_the_same_whichever_thread_computes_them(tmp_path, monkeypatch,
                                                            read_ahead):
    """The streamed replay gives the checks that read the records alone to the reading or
    the judging thread, whichever has had less to do: the results are the same either way,
    and the whole replay's."""
    from kqlab.validate import replay
    from kqlab.validate import stream as stream_mod

    folder = write_log(tmp_path / "log", {p: _records(p, 9) for p in range(3)}, per_batch=7)
    policy = loads_policy(HEAD + RULES + CHECKS)
    monkeypatch.setenv("KQLAB_READ_AHEAD", read_ahead)
    now = T0 + 100 * MINUTE
    whole = replay(folder, policy, now=now).checks()
    for room in (True, False, None):
        if room is not None:
            monkeypatch.setattr(stream_mod._Load, "read_has_room", lambda self, r=room: r)
        else:
            monkeypatch.undo()
            monkeypatch.setenv("KQLAB_READ_AHEAD", read_ahead)
        got = stream_mod.replay_stream(folder, policy, now=now, chunk_batches=13).checks()
        assert got.equals(whole), room


@pytest.mark.parametrize("stat", ["mean", "min", "max", "stddev", "p50", "p95", "p99"])
@pytest.mark.parametrize("runs", [40, 3_000])
def test_stat_cells_by_run_slices_equal_the_sorted_layout(monkeypatch, stat, runs):
    """The stat finish copies a partial's runs of one cell slice by slice when they are
    few: the same rows per cell, the same first row, the same statistic to the bit as the
    layout by a stable sort."""
    from kqlab.validate.sample_checks import stats

    rng = np.random.default_rng(runs)
    n = 60_000
    lengths = rng.multinomial(n - runs, np.ones(runs) / runs) + 1
    cell = np.repeat(rng.integers(0, 30, runs), lengths)
    values = np.round(rng.lognormal(3, 2, n), 1)  # ties; sums depend on their order
    got = stats._stat_cells(stat, cell, values)
    monkeypatch.setattr(stats, "_cell_runs", lambda c: None)
    want = stats._stat_cells(stat, cell, values)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
