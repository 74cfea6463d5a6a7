"""``VerdictsView.find`` in the query's order (issue 16: the explorer's table sorts page by
page through it): every order equals a plain-Python sort of the matching records with ties in
log order, descending is the mirror with ties still in log order, and the number of matches
does not depend on the order.  :func:`check_orders` is run on the Spark engine too
(``tests/spark/test_find_order_on_spark.py``)."""

from __future__ import annotations

import pytest

from kqlab.validate.replayer import Replayer
from kqlab.validate.view import RECORD_ORDERS, RecordQuery, ViewError
from tests.viz import conftest as shared
from tests.viz.conftest import NOW

# the view tests' samples (fixtures are looked up by module attribute)
demo, policies, orders = shared.demo, shared.policies, shared.orders
sensitive_sample = shared.sensitive_sample

OUTCOME_RANK = {"rejected": 1, "collateral": 2, "undetermined": 3}


def _expected(rows: list[dict], query: RecordQuery) -> list[tuple[str, int, int]]:
    """The refused records matching ``query``'s filters, sorted as it asks (reference)."""
    lo, hi = query.time
    keep = [(i, r) for i, r in enumerate(rows) if r["outcome"] != "accepted"
            and (query.reason is None or any(f["rule"] == query.reason
                                             for f in r["failures"] or []))
            and (lo is None or r["timestamp"] >= lo) and (hi is None or r["timestamp"] <= hi)]

    def key(item: tuple[int, dict]) -> object:
        r = item[1]
        return {"log": 0, "timestamp": r["timestamp"], "offset": r["offset"],
                "outcome": OUTCOME_RANK[r["outcome"]]}[query.order]

    if query.order == "log":
        ordered = keep[::-1] if query.descending else keep
    else:  # ties in log order, in either direction
        ordered = sorted(keep, key=lambda it: (-key(it) if query.descending else key(it), it[0]))
    return [(r["topic"], r["partition"], r["offset"]) for _, r in ordered]


def _all_pages(view, query: RecordQuery, size: int) -> tuple[list[tuple[str, int, int]], int]:
    got, start, matches = [], 0, None
    while True:
        page = view.find(query, start, size)
        matches = page.matches if matches is None else matches
        assert page.matches == matches
        got += [(r["topic"], r["partition"], r["offset"]) for r in page.rows.to_pylist()]
        start += size
        if start >= page.matches:
            return got, matches


def check_orders(view, rows: list[dict], reason: str) -> None:
    """Every order, both directions, with and without filters, paged: equal to the reference."""
    refused = sum(r["outcome"] != "accepted" for r in rows)
    times = sorted(r["timestamp"] for r in rows if r["outcome"] != "accepted")
    window = (times[len(times) // 4], times[3 * len(times) // 4])
    for order in RECORD_ORDERS:
        for descending in (False, True):
            for filters in ({}, {"reason": reason}, {"time": window}):
                q = RecordQuery(order=order, descending=descending, **filters)
                got, matches = _all_pages(view, q, 37)
                want = _expected(rows, q)
                assert got == want, (order, descending, filters)
                assert matches == len(want)
                assert matches == view.find(q.unordered(), 0, 1).matches
    assert view.find(RecordQuery(order="timestamp"), 0, 5).matches == refused
    # sorting changes the first page: the latest record first
    latest = view.find(RecordQuery(order="timestamp", descending=True), 0, 1).rows.to_pylist()
    assert latest[0]["timestamp"] == times[-1]


def test_find_sorts_every_way_on_the_local_engine(orders):
    _, v, _ = orders
    check_orders(v, v.records.to_pylist(), "amount-range")


def test_unknown_orders_are_refused():
    with pytest.raises(ViewError, match="unknown order 'key'"):
        RecordQuery(order="key")
    q = RecordQuery(reason="x", order="timestamp", descending=True)
    assert q.unordered() == RecordQuery(reason="x")


def test_sorted_pages_of_a_synthetic_sample(sensitive_sample):
    table, policy = sensitive_sample
    v = Replayer(table, framing="single", now=NOW).run(policy)
    check_orders(v, v.records.to_pylist(), "amount")
