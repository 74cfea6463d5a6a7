"""Latency of a rule edit in the PolicyEditor, to refreshed counts and figures, on a decoded
1M-record sample — beside Great Expectations re-validating the equivalent expectation.

Builds the Avro orders sample of ``benchmarks/edit.py`` (one partition, real v2 batches),
opens a :class:`kqlab.widgets.PolicyEditor` on it with the six-rule policy (not timed:
decoding and the first evaluation of every rule), then makes 20 edits through the editor's
Python API (what the form's Apply button calls), a realistic mix cycling through six kinds:

* ``range-max`` / ``range-min``: a bound of the ``amount`` range rule
  (``update_rule("amount", max=...)`` / ``min=...``), new values each time;
* ``message``: the message of the ``amount`` reject rule (every failing record's policy
  message changes, so the broker's checks see new input);
* ``mode``: switching the ``currency`` rule reject ↔ observe (its failures join or leave the
  policy the broker enforces);
* ``add-rule`` / ``remove-rule``: adding a ``field_range`` rule on ``quantity`` (a tighter
  bound each cycle), then removing it.

Most kinds change what the broker's checks see, so the edit pays for the broker pass over
the Arrow tables, not only for the rule's re-evaluation.  Each timed edit covers everything
the analyst waits for: validating the edited policy, re-evaluating the changed rule over the
cached columns (at most one per edit), the broker pass and verdict tables, the per-rule
counts, the rule list, the YAML view and the figures (rejections by reason and the
policy-impact diff) as figure widgets.

The peer: Great Expectations (ephemeral context, pandas) re-validating the equivalent
expectation on a DataFrame of the same decoded columns (built once, not timed):
``ExpectColumnValuesToBeBetween`` on ``amount`` (range, message edits) or ``quantity``
(rule added), ``ExpectColumnValuesToBeInSet`` on ``currency`` (mode switch).  A removed rule
has no GX equivalent to re-validate; those edits are left out of the GX side.

The last line is one JSON object: median and p95 (ms) of both, the editor's CPU time per edit
(``editor_cpu_*``: the process's, less noisy than wall time on a shared machine), ``ratio`` (GX
p95 / kqlab p95; above 1 means the editor is faster), ``by_kind`` (per kind: edits, median
and p95 of the editor, wall and CPU, and, where it has one, of GX) and the load average.
Goal: editor p95 ≤ 300 ms.  ``--quick`` uses 200k records and 10 edits.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.cel import NOW, make_values, register
from benchmarks.edit import POLICY, make_sample, percentile

KINDS = ("range-max", "range-min", "message", "mode", "add-rule", "remove-rule")
CURRENCIES = ["EUR", "USD", "GBP"]


def gx_batch(decoded):
    """A GX batch over a DataFrame of the decoded value columns (not timed)."""
    import great_expectations as gx
    import pandas as pd

    df = pd.DataFrame({f.name: col.to_pandas() for f, col in
                       zip(decoded.values.type, decoded.values.flatten(), strict=True)})
    context = gx.get_context(mode="ephemeral")
    source = context.data_sources.add_pandas("bench")
    asset = source.add_dataframe_asset("orders")
    batch_def = asset.add_batch_definition_whole_dataframe("all")
    return batch_def.get_batch(batch_parameters={"dataframe": df})


def gx_expectation(spec: tuple):
    """The GX expectation equivalent to an edited rule (``spec`` from :func:`plan`)."""
    import great_expectations.expectations as gxe

    what, *args = spec
    if what == "between":
        column, lo, hi, meta = args
        return gxe.ExpectColumnValuesToBeBetween(column=column, min_value=lo, max_value=hi,
                                                 meta=meta)
    (column, values) = args
    return gxe.ExpectColumnValuesToBeInSet(column=column, value_set=values)


def gx_edit(batch, spec: tuple) -> int:
    """Re-validate the edited expectation; the records it fails."""
    result = batch.validate(gx_expectation(spec), result_format="SUMMARY")
    return int(result.result.get("unexpected_count", 0))


def plan(count: int) -> list[tuple[str, dict, tuple | None]]:
    """``count`` edits: (kind, editor call, GX expectation spec or None)."""
    lo, hi, msg, mode = 0, 10000, None, "reject"
    out = []
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        gx: tuple | None
        if kind == "range-max":
            hi = 495 - i
            call = {"op": "update", "rule": "amount", "max": hi}
        elif kind == "range-min":
            lo = (i + 1) / 10
            call = {"op": "update", "rule": "amount", "min": lo}
        elif kind == "message":
            msg = f"amount {{value}} outside the allowed range (edit {i})"
            call = {"op": "update", "rule": "amount", "message": msg}
        elif kind == "mode":
            mode = "observe" if mode == "reject" else "reject"
            call = {"op": "mode", "rule": "currency", "mode": mode}
        elif kind == "add-rule":
            qmax = 8 - i // len(KINDS)
            call = {"op": "add", "rule": "qty", "max": qmax}
        else:
            call = {"op": "remove", "rule": "qty"}
        if kind in ("range-max", "range-min", "message"):
            gx = ("between", "amount", lo, hi, {"message": msg})
        elif kind == "mode":
            gx = ("in_set", "currency", CURRENCIES)
        elif kind == "add-rule":
            gx = ("between", "quantity", 1, call["max"], None)
        else:
            gx = None
        out.append((kind, call, gx))
    return out


def apply(editor, call: dict) -> None:
    op, rule = call["op"], call["rule"]
    if op == "update":
        editor.update_rule(rule, **{k: v for k, v in call.items() if k not in ("op", "rule")})
    elif op == "mode":
        editor.set_mode(rule, call["mode"])
    elif op == "add":
        editor.add_rule("field_range", id=rule, field="quantity", min=1, max=call["max"])
    else:
        editor.remove_rule(rule)


def stats(xs: list[float]) -> dict:
    return {"median_ms": round(statistics.median(xs), 1),
            "p95_ms": round(percentile(xs, 0.95), 1)}


def main() -> None:
    from kqlab.policy import loads_policy
    from kqlab.validate.replayer import Replayer
    from kqlab.widgets import PolicyEditor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k records, 10 edits")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--edits", type=int, default=None)
    ap.add_argument("--no-gx", action="store_true",
                    help="the editor alone (no Great Expectations side, no ratio)")
    args = ap.parse_args()
    n = args.records or (200_000 if args.quick else 1_000_000)
    count = args.edits or (10 if args.quick else 20)
    logging.getLogger("great_expectations").setLevel(logging.ERROR)

    t0 = time.perf_counter()
    sample = make_sample(make_values(n, register()))
    policy = loads_policy(POLICY)
    replayer = Replayer(sample, now=NOW)
    editor = PolicyEditor(replayer, policy, figures=("reasons", "impact"))
    editor.update_rule("amount", max=10001)  # warm: first figure widgets, first impact
    editor.update_rule("amount", max=10000)
    print(f"{n:,} Avro records: built, decoded, first replayed and shown in "
          f"{time.perf_counter() - t0:.1f} s")

    edits = plan(count)
    kq_ms: list[float] = []
    kq_cpu: list[float] = []  # the process's CPU time: on a shared machine, less noisy
    for kind, call, _ in edits:
        before = replayer.evaluations
        t1, c1 = time.perf_counter(), time.process_time()
        apply(editor, call)
        kq_ms.append((time.perf_counter() - t1) * 1000)
        kq_cpu.append((time.process_time() - c1) * 1000)
        assert replayer.evaluations <= before + 1, "an edit re-evaluates at most one rule"
        assert set(editor.figures) == {"reasons", "impact"}
        assert ("qty" in editor.counts) == (kind == "add-rule")

    gx_ms: list[float | None] = [None] * len(edits)
    if not args.no_gx:
        decoded = replayer._context(policy).decoded("value")
        batch = gx_batch(decoded)
        gx_edit(batch, ("between", "amount", 0, 10001, None))  # warm
        for i, (_, _, spec) in enumerate(edits):
            if spec is not None:
                t1 = time.perf_counter()
                gx_edit(batch, spec)
                gx_ms[i] = (time.perf_counter() - t1) * 1000

    gx_done = [t for t in gx_ms if t is not None]
    kq_p95 = percentile(kq_ms, 0.95)
    gx_p95 = percentile(gx_done, 0.95) if gx_done else None
    by_kind = {}
    for kind in KINDS:
        mine = [t for (k, _, _), t in zip(edits, kq_ms, strict=True) if k == kind]
        if not mine:
            continue
        theirs = [t for (k, _, _), t in zip(edits, gx_ms, strict=True)
                  if k == kind and t is not None]
        cpu = [t for (k, _, _), t in zip(edits, kq_cpu, strict=True) if k == kind]
        by_kind[kind] = {"edits": len(mine), **stats(mine),
                         **{f"cpu_{k}": v for k, v in stats(cpu).items()}}
        if theirs:
            by_kind[kind]["gx"] = stats(theirs)
        print(f"  {kind:12s} {len(mine)} edits: median {by_kind[kind]['median_ms']} ms, "
              f"p95 {by_kind[kind]['p95_ms']} ms (CPU median "
              f"{by_kind[kind]['cpu_median_ms']} ms)")
    out = {
        "benchmark": "widgets", "records": n, "edits": count,
        "editor_median_ms": round(statistics.median(kq_ms), 1),
        "editor_p95_ms": round(kq_p95, 1),
        "editor_cpu_median_ms": round(statistics.median(kq_cpu), 1),
        "editor_cpu_p95_ms": round(percentile(kq_cpu, 0.95), 1),
        "gx_median_ms": round(statistics.median(gx_done), 1) if gx_done else None,
        "gx_p95_ms": None if gx_p95 is None else round(gx_p95, 1),
        "goal_p95_ms": 300, "goal_met": kq_p95 <= 300,
        "ratio": None if gx_p95 is None else round(gx_p95 / kq_p95, 2),
        "by_kind": by_kind,
        "load": [round(x, 2) for x in os.getloadavg()],
    }
    print(orjson.dumps(out).decode())


if __name__ == "__main__":
    main()
