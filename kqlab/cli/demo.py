"""``kqlab demo``: the demo partition, the demo topics (``--topics``), the engines (``--spark``).

* ``kqlab demo``: generate the demo partition, decode it, replay the demo policy over it.
* ``--topics``: the demo topics with their documented defects (``docs/demo-defects.md``),
  planted defects against what the replay found, then produced into the embedded broker and
  sampled back.
* ``--spark``: every demo topic on Spark and locally, every verdict compared (exit 1 when the
  engines disagree).
* ``--verify``: the demo policy deployed as exported, checked by ``kqlab verify``, then drift
  planted and found (:func:`kqlab.cli.verify.cmd_demo_verify`).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kqlab.cli._common import (
    EXIT_FINDING,
    EXIT_OK,
    SubParsers,
    add_json_flag,
    add_parser_with_examples,
    now_ms,
    write_json,
)
from kqlab.cli.replay import print_summary

if TYPE_CHECKING:
    from kqlab.spark.parity import ParityReport

__all__ = ["add_parser", "cmd_demo"]


_EXAMPLES = """\
  kqlab demo                          # the demo partition: decode, replay the demo policy
  kqlab demo --dir demo/ --now 1763700000000 --json | jq .summary.outcomes
  kqlab demo --topics                 # planted defects (docs/demo-defects.md) vs found
  kqlab demo --spark --master local[2]   # both engines, every verdict compared (exit 1: differ)
  kqlab demo --verify                 # deployed as exported, drift planted and found"""


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab demo``."""
    demo = add_parser_with_examples(
        sub, "demo", help="generate the demo partition, decode and validate it",
        description="Generate the demo data and run kqlab on it: the demo partition through "
        "the demo policy; with --topics the demo topics with their planted defects, replayed "
        "and then produced into the embedded broker; with --spark both engines compared; "
        "with --verify the exported policy deployed, verified, drifted and verified again.",
        examples=_EXAMPLES)
    demo.add_argument("--dir", default=None,
                      help="where to write the demo segment (default: a temporary folder)")
    demo.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                      help="clock for generation and validation (default: now)")
    demo.add_argument("--topics", action="store_true",
                      help="the demo topics (orders: Avro, clicks: JSON) with their documented "
                      "defects: replay every partition, then produce them into the embedded "
                      "broker and sample them back")
    demo.add_argument("--spark", action="store_true",
                      help="the demo topics replayed on Spark and locally: the parity check "
                      "(identical verdicts from both engines)")
    demo.add_argument("--verify", action="store_true",
                      help="the demo policy deployed as exported (in-memory registry, the "
                      "embedded broker, a gate config), verified clean, then drift planted on "
                      "every target and found by kqlab verify")
    demo.add_argument("--master", default=None,
                      help="Spark master for --spark (default local[*])")
    add_json_flag(demo)
    demo.set_defaults(run=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """``kqlab demo``: generate the demo partition, decode it, replay the demo policy over it."""
    import tempfile

    if args.topics:
        return cmd_demo_topics(args)
    if args.spark:
        return cmd_demo_spark(args)
    if args.verify:
        from kqlab.cli.verify import cmd_demo_verify

        return cmd_demo_verify(args)

    from kqlab.cli._ui import progress
    from kqlab.kafka.log import read_log
    from kqlab.policy import load_policy
    from kqlab.sources.demo import DEMO_PARTITION, DEMO_TOPIC, demo_policy_path, write_demo_segment
    from kqlab.validate import replay

    now = now_ms(args.now)
    policy_file = demo_policy_path()
    policy = load_policy(str(policy_file))
    with tempfile.TemporaryDirectory(prefix="kqlab-demo-") as tmp, progress() as p:
        p.step("writing the demo partition")
        folder = write_demo_segment(args.dir or tmp, now)
        p.step("decoding it")
        t0 = time.perf_counter()
        log = read_log(folder)
        t1 = time.perf_counter()
        p.step(f"replaying the policy {policy.name}")
        verdicts = replay(folder, policy, now=now)
        t2 = time.perf_counter()
    summary = verdicts.summary()
    rejected = [b for b in verdicts.batches.to_pylist() if b["error_code"] != 0]
    reasons: Counter[str] = Counter()
    for fs, outcome in zip(verdicts.records.column("failures").to_pylist(),
                           verdicts.records.column("outcome").to_pylist(), strict=True):
        if outcome == "rejected" and fs:
            reasons[fs[0]["rule"]] += 1
    doc = {
        "topic": DEMO_TOPIC, "partition": DEMO_PARTITION, "policy": policy.name,
        "policy_file": str(policy_file), "segment": str(folder) if args.dir else None,
        "records": log.records.num_rows, "batches": log.batches.num_rows,
        "codecs": dict(Counter(log.batches["compression"].to_pylist())),
        "issues": [i.to_dict() for i in log.issues],
        "verdicts": {k: v["batches"] for k, v in summary["by_error"].items()},
        "rejected_by_reason": dict(reasons.most_common()),
        "rejections": [{"batch_offset": b["batch_offset"], "error": b["error_name"],
                        "check": b["check"], "record_errors": len(b["record_errors"]),
                        "why": (b["record_errors"][0]["message"] if b["record_errors"]
                                else b["detail"])} for b in rejected],
        "summary": summary,
        "decode_seconds": round(t1 - t0, 4), "replay_seconds": round(t2 - t1, 4),
    }
    if args.json:
        write_json(doc)
        return EXIT_OK
    print(f"kqlab demo — topic {DEMO_TOPIC}-{DEMO_PARTITION}, a generated log segment")
    print(f"  decoded {doc['records']} records in {doc['batches']} batches "
          f"({', '.join(f'{k}: {v}' for k, v in sorted(doc['codecs'].items()))}) "
          f"in {doc['decode_seconds'] * 1000:.1f} ms")
    print(f"  replayed policy {policy.name!r} ({len(policy.rules)} rules, {policy_file.name}) "
          f"with the broker's checks in {doc['replay_seconds'] * 1000:.1f} ms\n")
    print_summary(summary)
    from kqlab.cli._ui import show, table

    show(table(("first reason", "rejected records"), reasons.most_common(),
               title="rejected records by first reason", right=("rejected records",)),
         table(("batch", "error", "check", "why"),
               [(f"@{r['batch_offset']}", r["error"], r["check"], r["why"])
                for r in doc["rejections"]], title="rejected batches"))
    return EXIT_OK


def cmd_demo_topics(args: argparse.Namespace) -> int:
    """``kqlab demo --topics``: ground truth vs what the replay finds, then the network path."""
    import tempfile

    from kqlab.cli._ui import progress
    from kqlab.embedded import broker
    from kqlab.sources import demo_topics as dt
    from kqlab.sources.kafka import sample
    from kqlab.validate import replay

    now = now_ms(args.now)
    found: Counter[tuple[str, str]] = Counter()
    summaries: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="kqlab-demo-topics-") as tmp, progress() as p:
        p.step("generating the demo topics")
        demo = dt.generate(args.dir or tmp, now)
        policies = dt.load_policies()
        t0 = time.perf_counter()
        p.step("replaying every partition", total=len(demo.folders))
        for name, folder in sorted(demo.folders.items()):
            topic = name.rsplit("-", 1)[0]
            p.update(description=f"replaying {name}")
            v = replay(folder, policies[topic], now=now)
            p.advance()
            summaries[name] = v.summary()["outcomes"]
            for fs, outcome in zip(v.records.column("failures").to_pylist(),
                                   v.records.column("outcome").to_pylist(), strict=True):
                if outcome == "rejected" and fs:
                    found[(topic, fs[0]["rule"])] += 1
        replay_s = time.perf_counter() - t0
        p.step("starting the embedded broker")
        with broker() as b:
            p.step("producing the demo topics")
            produced = dt.produce_to(b, demo)
            sampled: dict[str, dict[str, Any]] = {}
            p.step("sampling them back and replaying", total=len(produced))
            for topic, parts in produced.items():
                p.advance()
                res = sample(b.bootstrap, topic, timeout_s=30)
                v = replay(res.records, policies[topic], now=now, framing="single")
                sampled[topic] = {"produced": sum(parts.values()),
                                  "sampled": res.records.num_rows,
                                  "outcomes": v.by_outcome()}
    rows = [{"defect": k, "topic": d.topic, "caught_by": d.caught_by, "expected": d.records,
             "found": found[(d.topic, d.caught_by)]} for k, d in demo.truth.defects.items()]
    doc = {"now": now, "ground_truth": rows, "partitions": summaries, "broker": sampled,
           "replay_seconds": round(replay_s, 3),
           "all_found": all(r["expected"] == r["found"] for r in rows)}
    if args.json:
        write_json(doc)
        return EXIT_OK
    from kqlab.cli._ui import show, styled, table

    print("kqlab demo --topics — orders (Avro, two schema versions) and clicks (JSON)")
    print(f"replayed {len(summaries)} partitions with their policies in {replay_s:.2f} s")
    show(table(("defect", "topic", "caught by", "expected", "found", ""),
               [(r["defect"], r["topic"], r["caught_by"], r["expected"], r["found"],
                 styled("ok", "ok") if r["expected"] == r["found"] else
                 styled("MISMATCH", "FAIL")) for r in rows],
               title="planted defects (docs/demo-defects.md) vs what the replay found",
               right=("expected", "found")),
         table(("partition", "accepted", "rejected", "collateral"),
               [(name, o["accepted"], o["rejected"], o["collateral"])
                for name, o in summaries.items()], title="outcomes per partition",
               right=("accepted", "rejected", "collateral")),
         table(("topic", "produced", "sampled", *_OUTCOME_COLUMNS),
               [(topic, r["produced"], r["sampled"],
                 *(r["outcomes"].get(k, 0) for k in _OUTCOME_COLUMNS))
                for topic, r in sampled.items()],
               title="through the embedded broker (produced, sampled back, replayed with "
               "rebuilt framing)", right=("produced", "sampled", *_OUTCOME_COLUMNS)))
    return EXIT_OK


_OUTCOME_COLUMNS = ("accepted", "rejected", "collateral")


def cmd_demo_spark(args: argparse.Namespace) -> int:
    """``kqlab demo --spark``: every demo topic on both engines, every verdict compared."""
    import tempfile

    from kqlab.sources import demo_topics as dt
    from kqlab.spark import parity_check, spark_session
    from kqlab.spark.engine import master_url  # Connect sessions have no sparkContext

    now = now_ms(args.now)
    reports: dict[str, tuple[ParityReport, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="kqlab-demo-spark-") as tmp:
        demo = dt.generate(Path(args.dir or tmp) / "segments", now)
        policies = dt.load_policies()
        spark = spark_session(args.master)
        for topic in sorted(policies):
            logdir = Path(tmp) / "by-topic" / topic
            logdir.mkdir(parents=True)
            for name, folder in demo.folders.items():
                if name.rsplit("-", 1)[0] == topic:
                    (logdir / name).symlink_to(folder.resolve(), target_is_directory=True)
            report = parity_check(logdir, policies[topic], spark=spark, now=now,
                                  progress=not args.json)
            reports[topic] = (report, report.spark_verdicts.summary())
    identical = all(r.identical for r, _ in reports.values())
    status = EXIT_OK if identical else EXIT_FINDING
    if args.json:
        write_json({
            "now": now, "master": master_url(spark), "identical": identical,
            "topics": {t: {**r.to_dict(), "outcomes": s["outcomes"], "units": s["units"]}
                       for t, (r, s) in reports.items()}})
        return status
    from kqlab.cli._ui import show, styled, table

    print(f"kqlab demo --spark — the demo topics on Spark ({master_url(spark)}) and "
          "locally, every verdict compared")
    show(table(("topic", "partitions", "records", "batches", *_OUTCOME_COLUMNS, "engines",
                "local s", "spark s"),
               [(topic, s["units"], r.records, r.batches,
                 *(s["outcomes"].get(k, 0) for k in _OUTCOME_COLUMNS),
                 styled("identical", "ok") if r.identical else styled("DIFFERENT", "FAIL"),
                 f"{r.local_seconds:.2f}", f"{r.spark_seconds:.2f}")
                for topic, (r, s) in reports.items()],
               right=("partitions", "records", "batches", *_OUTCOME_COLUMNS, "local s",
                      "spark s")))
    for topic, (r, _) in reports.items():
        for d in r.differences[:5]:
            print(f"  {topic}: {d}")
    return status
