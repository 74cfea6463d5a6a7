"""``kqlab report``: replay a sample under a policy and write the static HTML report.

The report opens with a verdict — the policy passes or fails on this sample against
``--max-reject-rate`` (and ``--max-rejected``) — which the command also prints, and puts in the
``--json`` document (``verdict``) for scripts.  Exit status 0 when the report was written and
its verdict is PASS, 1 when it prints FAIL (the status agrees with the verdict: a CI step can
gate on it), 2 for a wrong request (as every kqlab command).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kqlab.cli._common import (
    EXIT_FINDING,
    EXIT_OK,
    SubParsers,
    add_json_flag,
    add_parser_with_examples,
    load_policy_file,
    output_file,
    prepare_registries,
    share,
    write_json,
)
from kqlab.cli._health import add_strict_flag, rule_findings

__all__ = ["add_parser", "cmd_report"]


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab report``."""
    rep = add_parser_with_examples(
        sub, "report", help="replay a sample and write a static HTML report",
        description="Replay SOURCE (segment file, partition folder, log directory or "
        "snapshot) under the policy and write one HTML file: a verdict (does the policy pass "
        "on this sample, against --max-reject-rate), the figures, the top failures grouped by "
        "rule with their message templates, summaries, the policy and the provenance. Exit "
        "status 1 when the verdict is FAIL (the status agrees with what it prints). It "
        "embeds plotly.js's basic bundle (about 1.3 MB in all) and opens offline; the "
        "policy's sensitive data is masked unless --unmask is given.", examples="""\
  kqlab report orders-0 --policy orders.yaml --now 1763700000000
  kqlab report data/ --policy orders.yaml --out reports/      # reports/<policy>-report.html
  kqlab report snap/ --policy orders.yaml --out q3.html --title "Orders, Q3" --unmask
  kqlab report data/ --policy orders.yaml --max-reject-rate 5%   # the verdict's threshold
  kqlab report data/ --policy orders.yaml --json | jq .verdict.passed
  kqlab report data/ --policy orders.yaml --plotly-js cdn      # a small file, needs the net
  kqlab report data/ --policy orders.yaml --engine spark --json | jq .report""")
    rep.add_argument("source", help="a segment file, partition folder, log directory or "
                     "snapshot")
    rep.add_argument("--policy", required=True, help="the policy file (YAML)")
    rep.add_argument("--out", default=None, metavar="FILE",
                     help="where to write the report (default: <policy name>-report.html); "
                     "a folder (ending with / or existing) gets that file inside it")
    rep.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                     help="the broker clock for timestamp checks (default: the sample's own clock)")
    rep.add_argument("--framing", choices=("exact", "single", "linger"), default="exact")
    rep.add_argument("--title", default=None, help="the report's title")
    rep.add_argument("--max-rows", type=int, default=50, metavar="N",
                     help="rows per table (50)")
    rep.add_argument("--plotly-js", "--plotlyjs", dest="plotlyjs",
                     choices=("inline", "file", "cdn"), default="inline",
                     help="inline: embed plotly.js's basic bundle (default, opens offline); "
                     "file: write it next to the report once; cdn: load it from plotly's CDN")
    rep.add_argument("--max-reject-rate", type=share, default=0.01, metavar="SHARE",
                     help="the verdict's threshold: the policy passes when at most SHARE of "
                     "the records would not be appended (rejected + collateral), e.g. 0.05 "
                     "or 5%% (default 1%%)")
    rep.add_argument("--max-rejected", type=int, default=None, metavar="N",
                     help="and at most N records would not be appended (default: no limit)")
    rep.add_argument("--unmask", action="store_true",
                     help="show the policy's sensitive data in this report (masked by default)")
    rep.add_argument("--engine", choices=("local", "spark"), default="local",
                     help="replay in-process (local) or on Spark: figures, summaries and top "
                     "failures then come from Spark aggregations, for samples of any size")
    rep.add_argument("--master", default=None,
                     help="Spark master for --engine spark (default local[*])")
    add_strict_flag(rep)
    add_json_flag(rep, "print one JSON document: the report's path, size and the summary")
    rep.set_defaults(run=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """``kqlab report SOURCE --policy P``: replay, then write the report and print its path."""
    from kqlab.cli._ui import progress, progress_enabled
    from kqlab.reporting import Thresholds, judge, report
    from kqlab.validate.replayer import Replayer

    thresholds = Thresholds(max_reject_rate=args.max_reject_rate,
                            max_rejected=args.max_rejected)
    policy = load_policy_file(args.policy)
    prepare_registries(policy)
    out = output_file(args.out, f"{policy.name}-report.html")
    with progress() as p:
        if args.engine == "spark":
            from kqlab.spark import replay_spark

            replayer = None
            verdicts = replay_spark(args.source, policy, master=args.master, now=args.now,
                                    framing=args.framing, progress=progress_enabled(),
                                    base_dir=Path(args.policy).parent)
        else:
            p.step(f"reading {args.source}")
            replayer = Replayer(args.source, now=args.now, framing=args.framing,
                                base_dir=Path(args.policy).parent)
            p.step("replaying the policy")
            verdicts = replayer.run(policy)
        p.step(f"writing the report to {out}")
        report(verdicts, policy, sample=replayer, path=out, title=args.title,
               source=str(args.source), unmask=bool(args.unmask),
               max_rows=args.max_rows, plotlyjs=args.plotlyjs, thresholds=thresholds,
               strict=args.strict)
    size = out.stat().st_size
    summary = verdicts.summary()
    verdict = judge(verdicts, thresholds, summary=summary, strict=args.strict, policy=policy)
    summary["rule_findings"], _ = rule_findings("report", summary["by_rule"], policy,
                                                args.strict)
    if args.json:
        doc = {"report": str(out), "bytes": size, "verdict": verdict.to_dict(),
               "summary": summary}
        write_json(doc, default=str)
    else:
        outcomes = verdicts.by_outcome()
        print(f"report written to {out} ({size / 1e6:.1f} MB): "
              f"{sum(outcomes.values()):,} records, "
              + ", ".join(f"{k} {v:,}" for k, v in outcomes.items()))
        print(("PASS: " if verdict.passed else "FAIL: ") + (
            f"{100 * verdict.rate:.2f} % of the records refused, within the "
            f"{100 * thresholds.max_reject_rate:g} % allowed" if verdict.passed
            else "; ".join(verdict.reasons)))
    return EXIT_OK if verdict.passed else EXIT_FINDING
