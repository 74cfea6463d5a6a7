"""Sample-check kernels against independent references: ``stat`` values of the whole
partial equal each (group, window) cell judged alone, to the bit (the Spark engine judges
cell by cell), with few cells and with many, and equal numpy's statistics; value-keyed
partials of any split merge into the whole's (a Counter's); one baseline is read once."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from kqlab.policy import loads_policy
from kqlab.validate.sample_checks import PARTIAL_SCHEMAS
from kqlab.validate.sample_checks.finish import stat_values

STATS = ("mean", "min", "max", "stddev", "p50", "p95", "p99")


def _partial(n: int, groups: int, windows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    group = rng.integers(0, groups + 1, n)  # the last one: no group (null)
    labels = [f"g{i:03d}" for i in range(groups)]
    return pa.table({
        "group": pa.array([None if g == groups else labels[g] for g in group.tolist()],
                          pa.string()),
        "window": pa.array(rng.integers(0, windows, n) * 60_000 + 1_763_701_200_000),
        # ties and a wide range: sums depend on their order unless values are sorted
        "value": pa.array(np.round(rng.lognormal(3, 2, n), 1))},
        schema=PARTIAL_SCHEMAS["stat"])


@pytest.mark.parametrize(("n", "groups", "windows"), [(20_000, 3, 5), (3_000, 10, 20)])
@pytest.mark.parametrize("stat", STATS)
def test_whole_equals_cell_by_cell_and_numpy(n, groups, windows, stat):
    check = loads_policy("kqlab: 1\nname: p\nvalue: {format: json}\nchecks: [{id: s, "
                         f"kind: stat, stat: {stat}, field: a, window: 1m, by: g, max: 1}}]\n"
                         ).checks[0]
    t = _partial(n, groups, windows, seed=len(stat))
    whole = stat_values(check, t)
    assert whole.column("records").to_numpy().sum() == n
    cells = []
    keys = sorted({(w, g) for g, w in zip(t.column("group").to_pylist(),
                                          t.column("window").to_pylist(), strict=True)},
                  key=lambda k: (k[0], k[1] is None, k[1] or ""))
    group = np.array(t.column("group").to_pylist(), object)
    window = t.column("window").to_numpy()
    values = t.column("value").to_numpy()
    for w, g in keys:
        at = (window == w) & (group == g) if g is not None else \
            (window == w) & np.array([x is None for x in group])
        cells.append(stat_values(check, t.filter(pa.array(at))))
        ref = values[at]
        want = {"mean": np.mean, "min": np.min, "max": np.max,
                "stddev": lambda x: np.std(x, ddof=1) if len(x) > 1 else np.nan,
                "p50": lambda x: np.percentile(x, 50), "p95": lambda x: np.percentile(x, 95),
                "p99": lambda x: np.percentile(x, 99)}[stat](ref)
        got = cells[-1].column("observed")[0].as_py()
        assert got == pytest.approx(want, rel=1e-12, nan_ok=True)
    alone = pa.concat_tables(cells)  # same order, same bits (NaN: one value's stddev)
    assert alone.select(["group", "window", "records"]).equals(
        whole.select(["group", "window", "records"]))
    np.testing.assert_array_equal(alone.column("observed").to_numpy(),
                                  whole.column("observed").to_numpy())


@pytest.mark.parametrize("kind", ["duplicate_rate", "distinct"])
@pytest.mark.parametrize("splits", [1, 2, 7, 40])
@pytest.mark.parametrize("values", [800, None])  # None: every value distinct (keys)
def test_value_keyed_partials_merge_as_the_whole(kind, splits, values):
    """Chunks' partials merged (only cells two chunks share are grouped again) equal the
    whole sample's partial, whatever the split."""
    from kqlab.validate.sample_checks import Partial, merge_partials
    from kqlab.validate.sample_checks.partials import group_aggregate

    rng = np.random.default_rng(splits)
    n = 5_000
    group = pa.array([None if g == 3 else f"p{g}" for g in rng.integers(0, 4, n).tolist()],
                     pa.string())
    window = np.sort(rng.integers(0, 30, n)) * 60_000  # time order: chunks share few cells
    drawn = rng.integers(0, values, n) if values else rng.permutation(n)
    value = pa.array([b"v%d" % v for v in drawn.tolist()], pa.large_binary())
    schema = PARTIAL_SCHEMAS[kind]

    def partial(lo: int, hi: int) -> Partial:
        return Partial(kind, group_aggregate(
            {"group": group[lo:hi], "window": window[lo:hi], "value": value[lo:hi]},
            {"count": ("count", None)}, hi - lo, schema), {"records": hi - lo})

    cuts = [0, *sorted(rng.choice(np.arange(1, n), splits - 1, replace=False).tolist()), n]
    merged = merge_partials(kind, [partial(a, b) for a, b in itertools.pairwise(cuts)])
    whole = partial(0, n)
    order = [("group", "ascending"), ("window", "ascending"), ("value", "ascending")]
    assert merged.table.sort_by(order).equals(whole.table.sort_by(order))
    assert merged.counts == {"records": n}
    counted = Counter(zip(group.to_pylist(), window.tolist(), value.to_pylist(), strict=True))
    assert sorted(zip(*(merged.table.column(c).to_pylist() for c in
                        ("group", "window", "value", "count")), strict=True),
                  key=lambda r: (r[0] or "", r[1], r[2])) == \
        sorted(((*k, c) for k, c in counted.items()), key=lambda r: (r[0] or "", r[1], r[2]))


def test_one_baseline_is_read_once_for_drift_and_schema_drift(tmp_path, monkeypatch):
    import kqlab.validate.loading as loading
    from kqlab.validate import replay
    from tests.validate.test_sample_checks import HEAD, hour, write_log

    write_log(tmp_path / "baseline", {0: hour(0)})
    folder = write_log(tmp_path / "log", {0: hour(0), 1: hour(1)})
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: d, kind: drift, field: amount, baseline: baseline,"
                          " max_psi: 1}\n"
                          "  - {id: s, kind: schema_drift, baseline: baseline}\n")
    reads = []
    load = loading.load_sample
    monkeypatch.setattr(loading, "load_sample", lambda src, *a, **k: (
        reads.append(str(src)), load(src, *a, **k))[1])
    rows = replay(folder, policy, base_dir=tmp_path).checks().to_pylist()
    assert [(r["status"], dict(r["params"])["baseline_records"]) for r in rows] == \
        [("pass", "600"), ("pass", "600")]
    assert reads.count(str(tmp_path / "baseline")) == 1


@pytest.mark.parametrize("keys", ["increasing", "one_repeat", "shuffled"])
@pytest.mark.parametrize("runs", [True, False])
def test_group_aggregate_shortcuts_count_as_a_counter(keys, runs):
    """The shortcuts (a group column in long runs hashed once per run; keys in strictly
    increasing order known distinct without hashing) count what a Counter counts — and a
    single repeated key, or keys out of order, still go through the hash."""
    from kqlab.validate.sample_checks.partials import group_aggregate

    rng = np.random.default_rng(7)
    n = 6_000
    g = np.repeat(np.arange(5), n // 5) if runs else rng.integers(0, 5, n)
    group = pa.array([f"orders-{i}" for i in g.tolist()], pa.string())
    number = np.arange(n)
    if keys == "one_repeat":
        number[n // 2] = number[n // 2 - 1]  # still sorted, no longer strictly
    elif keys == "shuffled":
        number = rng.permutation(n)
    value = pa.array([b"o-%09d" % v for v in number.tolist()], pa.large_binary())
    window = np.zeros(n, np.int64)
    table = group_aggregate({"group": group, "window": window, "value": value},
                            {"count": ("count", None)}, n, PARTIAL_SCHEMAS["duplicate_rate"])
    counted = Counter(zip(group.to_pylist(), window.tolist(), value.to_pylist(), strict=True))
    got = Counter({(r["group"], r["window"], r["value"]): r["count"]
                   for r in table.to_pylist()})
    assert table.num_rows == len(counted) and got == counted


@pytest.mark.parametrize("runs", [True, False])
def test_partition_labels_run_by_run_equal_record_by_record(runs):
    """A chunk in runs of one (topic, partition) is labelled run by run: the same labels
    as record by record, in runs or shuffled."""
    from kqlab.validate.sample_checks.columns import _partition_labels

    rng = np.random.default_rng(3)
    n = 8_000
    pairs = [("orders", 0), ("orders", 1), ("audit", 0), ("orders", 2)]
    at = np.repeat(np.arange(4), n // 4) if runs else rng.integers(0, 4, n)
    topic = pa.array([pairs[i][0] for i in at.tolist()], pa.string())
    part = np.array([pairs[i][1] for i in at.tolist()], np.int64)
    labels = _partition_labels(topic, part)
    assert labels.dictionary_decode().to_pylist() == [f"{t}-{p}" for t, p in
                                                      (pairs[i] for i in at.tolist())]
    assert len(labels.dictionary) == 4


def test_a_baseline_is_read_again_only_when_its_files_change(tmp_path, monkeypatch):
    """Replaying again against the same baseline reuses its plan (no read); a baseline
    rewritten (other records) is read anew and judged by its new content."""
    import kqlab.validate.loading as loading
    from kqlab.validate import replay
    from kqlab.validate.sample_checks.baseline import clear_baseline_cache
    from tests.validate.test_sample_checks import HEAD, hour, write_log

    clear_baseline_cache()
    write_log(tmp_path / "baseline", {0: hour(0)})
    folder = write_log(tmp_path / "log", {0: hour(0)})
    policy = loads_policy(HEAD + "checks:\n"
                          "  - {id: d, kind: drift, field: amount, baseline: baseline,"
                          " max_psi: 0.1}\n")
    reads = []
    load = loading.load_sample
    monkeypatch.setattr(loading, "load_sample", lambda src, *a, **k: (
        reads.append(str(src)), load(src, *a, **k))[1])

    def judged() -> tuple[str, float]:
        row = replay(folder, policy, base_dir=tmp_path).checks().to_pylist()[0]
        return row["status"], row["observed"]

    first = judged()
    assert first == ("pass", 0.0) and judged() == first
    assert reads.count(str(tmp_path / "baseline")) == 1
    import shutil

    shutil.rmtree(tmp_path / "baseline")  # the same place, other amounts: drift
    write_log(tmp_path / "baseline", {0: hour(0, value=lambda p, i: {"amount": i * 3.0})})
    status, observed = judged()
    assert reads.count(str(tmp_path / "baseline")) == 2
    assert status == "fail" and observed > 0.1
    clear_baseline_cache()
    assert judged() == (status, observed)
    assert reads.count(str(tmp_path / "baseline")) == 3
