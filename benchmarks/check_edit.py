"""A sample check's threshold typed in the workbench's Checks panel: the session re-judges
the cached partial aggregates and the panel redraws — against a full replay of the same
policy on the same sample, in one run.

Data: ``_spark_data``'s log directory (8 partitions of JSON order records, the seven-rule
policy) with seven windowed or grouped checks (volume per partition per second, null rate,
duplicate keys, p95 per partition, reject rates of a rule and of the policy, distinct).  A
:class:`kqlab.AuthoringSession` loads it once; then each edit sets a new threshold through
:meth:`kqlab.widgets.ChecksPanel.set_threshold` (the panel live, as in the Checks tab),
cycling over the checks.  Timed per edit: the session's re-judging (verdicts and check
results) and the panel's redraw (table, sparklines), and whether any check was recomputed
(it must not be: ``recomputed`` 0).  ``ratio`` = edit p95 over one full replay
(``kqlab.replay``).  ``--quick``: 200k records, 12 edits; default 1M, 30 edits.  The last line
is one JSON object.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import _spark_data as data

CHECKS = """
checks:
- {id: volume, kind: volume, window: 1s, by: partition, min: 1}
- {id: customer-null, kind: null_rate, field: customer, window: 10s, max: 0.01}
- {id: dup-keys, kind: duplicate_rate, of: key, window: 10s, by: partition, max: 0}
- {id: amount-p95, kind: stat, stat: p95, field: amount, window: 10s, by: partition, max: 10000}
- {id: amount-rejects, kind: reject_rate, rule: amount, max: 0.01}
- {id: refused, kind: reject_rate, window: 10s, max: 0.05}
- {id: currencies, kind: distinct, field: currency, min: 3}
"""
#: (check, threshold, values to cycle through)
EDITS = (("customer-null", "max", (0.02, 0.005, 0.01)), ("volume", "min", (5, 2, 1)),
         ("amount-p95", "max", (900.0, 5000.0, 10000.0)), ("refused", "max", (0.1, 0.01, 0.05)),
         ("dup-keys", "max", (0.01, 0.0)), ("currencies", "min", (4, 3)))


def p95(xs: list[float]) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, round(0.95 * (len(ys) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k records, 12 edits")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--edits", type=int, default=None)
    args = ap.parse_args()
    n = args.records or (200_000 if args.quick else 1_000_000)
    count = args.edits or (12 if args.quick else 30)

    import kqlab
    from kqlab.policy import loads_policy
    from kqlab.widgets import ChecksPanel

    root = data.log_dir(n)
    policy = loads_policy(data.POLICY + CHECKS)
    t = time.perf_counter()
    session = kqlab.AuthoringSession(policy, root, now=data.NOW)
    load_s = time.perf_counter() - t
    panel = ChecksPanel(session)
    judge, draw, total = [], [], []
    original = session._judged
    spent: dict[str, float] = {}

    def judged(p: object) -> object:
        t0 = time.perf_counter()
        out = original(p)  # type: ignore[arg-type]
        spent["judge"] = time.perf_counter() - t0
        return out

    session._judged = judged  # type: ignore[method-assign]
    computed = session.replayer.check_evaluations  # type: ignore[union-attr]
    plan = [(c, name, v) for c, name, values in EDITS for v in values]
    for i in range(count):
        check, name, value = plan[i % len(plan)]
        t0 = time.perf_counter()
        panel.set_threshold(check, **{name: value})
        total.append(time.perf_counter() - t0)
        judge.append(spent["judge"])
        draw.append(total[-1] - spent["judge"])
        row = next(r for r in panel.rows if r["check"] == check)
        assert row[name if name in ("min", "max") else "max"] == float(value), (check, row)
    recomputed = session.replayer.check_evaluations - computed  # type: ignore[union-attr]
    t = time.perf_counter()
    fresh = kqlab.replay(root, session.policy, now=data.NOW)
    replay_s = time.perf_counter() - t
    columns = ["check", "status", "observed", "failing_windows"]
    assert fresh.checks().select(columns).to_pylist() == \
        [{k: r[k] for k in columns} for r in session.checks], "the panel differs from a replay"
    out = {"benchmark": "check_edit", "records": n, "edits": count, "checks": len(policy.checks),
           "windows": sum(len(session.check_windows(c.id)) for c in policy.checks),
           "load_s": round(load_s, 2), "replay_s": round(replay_s, 3),
           "edit_p95_ms": round(1000 * p95(total), 1),
           "edit_median_ms": round(1000 * sorted(total)[len(total) // 2], 1),
           "judge_p95_ms": round(1000 * p95(judge), 1), "draw_p95_ms": round(1000 * p95(draw), 1),
           "recomputed": recomputed, "ratio": round(p95(total) / replay_s, 3),
           "load_avg": round(os.getloadavg()[0], 2)}
    print(orjson.dumps(out).decode())


if __name__ == "__main__":
    main()
