#!/usr/bin/env python3
"""Fuzzed batches on the real Kafka broker vs kqlab's verdicts: the broker oracle (issue 27).

Why: kqlab predicts what a broker answers to a produced batch; the broker is the truth.  This
script starts its own single-node Kafka (``kqlab.embedded.KafkaBroker``, 4.4.0 and/or 3.9.2),
sends structure-aware fuzzed batches (:mod:`kqlab.kafka.oracle.fuzzcases`: every check family,
each case a producer of its own on a shared partition, pipelined) as exact produce bytes, and
compares each answer (error code, error_message, record_errors) with
``PartitionValidator(source="producer")`` and the replay engine (``broker_verdicts``).

Progress goes to stderr; the last stdout line is one JSON object: batches sent, ``agreement``
(share of compared batches where the broker and kqlab agree), per check family, the broker
version(s), batches/s and the first disagreements with the seed and case index that reproduce
them (``--seed S --index I``).

Usage::

    python scripts/broker_oracle.py --quick
    nice -n 10 python scripts/broker_oracle.py --batches 100000 --version 4.4.0
    python scripts/broker_oracle.py --seed 7 --index 1234 --version 3.9.2 -v
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    import kqlab  # noqa: F401
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: cases generated at a time (their timestamps are placed around the clock when generated)
CHUNK = 4000
#: disagreements reported in full
SHOW = 10
QUICK_BATCHES = 1000


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_version(version: str, *, batches: int, seed: int, start: int = 0,
                verbose: bool = False, only: bool = False) -> dict[str, Any]:
    """Start a broker of ``version``, run fuzz cases from index ``start`` until ``batches``
    batches were sent (``only``: case ``start`` alone), stop it."""
    from kqlab.embedded import KafkaBroker
    from kqlab.kafka.oracle.fuzzcases import fuzz_cases
    from kqlab.kafka.oracle.packed import PackedOracle

    t0 = time.monotonic()
    broker = KafkaBroker(version=version)
    broker.start()
    _log(f"[{version}] broker up in {time.monotonic() - t0:.1f} s on {broker.bootstrap}")
    results: list[Any] = []
    meta: dict[int, Any] = {}
    first = start
    try:
        oracle = PackedOracle(broker, version)
        t1 = time.monotonic()
        while len(results) < batches:
            # a case sends 1.2 batches on average: ask for slightly fewer than remain
            n = 1 if only else max(1, min(CHUNK, int((batches - len(results)) / 1.25)))
            chunk = fuzz_cases(seed, n, int(time.time() * 1000), start=first)
            first += n
            meta.update((c.index, c) for c in chunk)
            results += oracle.run(chunk)
            rate = len(results) / max(time.monotonic() - t1, 1e-9)
            bad = sum(1 for r in results if r.disagreement and r.unknowable is None)
            _log(f"[{version}] cases {first - start}, batches {len(results)}/{batches}, "
                 f"{rate:.0f}/s, disagreements {bad}")
            if only:
                break
        seconds = time.monotonic() - t1
        oracle.close()
    finally:
        broker.stop()
    from kqlab.kafka.oracle.compare import summary

    out = summary(results, version=version, seconds=seconds)
    out["seed"] = seed
    out["cases"] = first - start
    out["replay_compared"] = sum(1 for r in results if r.replay is not None)
    out["disagreements"] = [_describe(r, meta[int(r.case)], seed, verbose)
                            for r in results if r.disagreement and r.unknowable is None][:SHOW]
    return out


def _describe(r: Any, case: Any, seed: int, verbose: bool) -> dict[str, Any]:
    """One disagreement, with what reproduces it."""
    d: dict[str, Any] = {"seed": seed, "index": case.index, "batch": r.index,
                         "family": case.family, "setup": case.setup, "ops": case.ops,
                         "what": r.disagreement,
                         "broker": [r.broker.error_code, r.broker.error_message],
                         "kqlab_check": r.validator.get("check")}
    if verbose:
        d["records"] = r.records.hex()
    return d


def combine(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One JSON object for one or both versions."""
    if len(parts) == 1:
        return parts[0]
    compared = sum(p["compared"] for p in parts)
    agree = sum(round(p["agreement"] * p["compared"]) for p in parts if p["compared"])
    return {"batches": sum(p["batches"] for p in parts), "compared": compared,
            "agreement": round(agree / compared, 6) if compared else None,
            "broker_version": [p["broker_version"] for p in parts],
            "versions": {p["broker_version"]: p for p in parts}}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_BATCHES} batches per version (under a minute)")
    ap.add_argument("--batches", type=int, default=None,
                    help="batches per version (cases until at least this many were sent)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--index", type=int, default=None, help="run only this case index")
    ap.add_argument("--version", default="4.4.0", choices=["4.4.0", "3.9.2", "both"])
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="disagreements with their exact bytes (hex)")
    args = ap.parse_args(argv)
    batches = QUICK_BATCHES if args.quick or args.batches is None else args.batches
    start = args.index if args.index is not None else 0
    versions = ["4.4.0", "3.9.2"] if args.version == "both" else [args.version]
    parts = [run_version(v, batches=batches, seed=args.seed, start=start,
                         verbose=args.verbose, only=args.index is not None)
             for v in versions]
    print(json.dumps(combine(parts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
