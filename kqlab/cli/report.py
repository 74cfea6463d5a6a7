"""``kqlab report``: replay a sample under a policy and write the static HTML report.

Exit status 0 when the report was written, 2 for a wrong request (as every kqlab command).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kqlab.cli._common import (
    EXIT_OK,
    SubParsers,
    add_json_flag,
    load_policy_file,
    prepare_registries,
    write_json,
)

__all__ = ["add_parser", "cmd_report"]


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab report``."""
    rep = sub.add_parser("report", help="replay a sample and write a static HTML report",
                         description="Replay SOURCE (segment file, partition folder, log "
                         "directory or snapshot) under the policy and write one HTML file "
                         "with the figures, summaries, top failures, the policy and the "
                         "provenance. It embeds plotly.js and opens offline; the policy's "
                         "sensitive data is masked unless --unmask is given.")
    rep.add_argument("source", help="a segment file, partition folder, log directory or "
                     "snapshot")
    rep.add_argument("--policy", required=True, help="the policy file (YAML)")
    rep.add_argument("--out", default=None, metavar="FILE",
                     help="where to write the report (default: <policy name>-report.html)")
    rep.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                     help="the broker clock for timestamp checks (default: the wall clock)")
    rep.add_argument("--framing", choices=("exact", "single", "linger"), default="exact")
    rep.add_argument("--title", default=None, help="the report's title")
    rep.add_argument("--max-rows", type=int, default=50, metavar="N",
                     help="rows per table (50)")
    rep.add_argument("--plotlyjs", choices=("inline", "file"), default="inline",
                     help="embed plotly.js (inline) or write plotly.min.js next to the report")
    rep.add_argument("--unmask", action="store_true",
                     help="show the policy's sensitive data in this report (masked by default)")
    rep.add_argument("--engine", choices=("local", "spark"), default="local",
                     help="replay in-process (local) or on Spark: figures, summaries and top "
                     "failures then come from Spark aggregations, for samples of any size")
    rep.add_argument("--master", default=None,
                     help="Spark master for --engine spark (default local[*])")
    add_json_flag(rep, "print one JSON document: the report's path, size and the summary")
    rep.set_defaults(run=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """``kqlab report SOURCE --policy P``: replay, then write the report and print its path."""
    from kqlab.reporting import report
    from kqlab.validate.replayer import Replayer

    policy = load_policy_file(args.policy)
    prepare_registries(policy)
    if args.engine == "spark":
        from kqlab.spark import replay_spark

        replayer = None
        verdicts = replay_spark(args.source, policy, master=args.master, now=args.now,
                                framing=args.framing)
    else:
        replayer = Replayer(args.source, now=args.now, framing=args.framing)
        verdicts = replayer.run(policy)
    out = Path(args.out or f"{policy.name}-report.html")
    report(verdicts, policy, sample=replayer, path=out, title=args.title,
           source=str(args.source), unmask=bool(args.unmask),
           max_rows=args.max_rows, plotlyjs=args.plotlyjs)
    size = out.stat().st_size
    if args.json:
        doc = {"report": str(out), "bytes": size, "summary": verdicts.summary()}
        write_json(doc, default=str)
    else:
        outcomes = verdicts.by_outcome()
        print(f"report written to {out} ({size / 1e6:.1f} MB): "
              f"{sum(outcomes.values()):,} records, "
              + ", ".join(f"{k} {v:,}" for k, v in outcomes.items()))
    return EXIT_OK
