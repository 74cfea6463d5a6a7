"""The policy-authoring commands: ``kqlab test`` and ``kqlab suggest``.

Exit status: 0 when every golden example behaves (``test``) or suggestions were made
(``suggest``), 1 when an example misbehaves, 2 for a wrong request (as every kqlab command).
``suggest`` prints the counts of the replay of the policy with its suggestions appended —
what ``kqlab replay`` prints for the policy ``--write`` writes — and, for the policy's
sample checks, thresholds proposed from the sample with the windows each would have failed
(:mod:`kqlab.validate.check_suggestion`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from kqlab.cli._common import (
    EXIT_FINDING,
    EXIT_OK,
    SubParsers,
    add_json_flag,
    add_parser_with_examples,
    load_policy_file,
    prepare_registries,
    share,
    write_json,
)

if TYPE_CHECKING:
    from kqlab.validate.check_suggestion import ThresholdSuggestions
    from kqlab.validate.suggestions import Suggestions

from kqlab.cli._health import add_strict_flag, rule_findings

__all__ = ["add_parser", "cmd_suggest", "cmd_test"]

_TEST_EXAMPLES = """\
  kqlab test orders.yaml                        # every rule's pass/fail examples
  kqlab test orders.yaml --now 1763700000000 --json | jq '.rules[] | select(.ok | not)'"""

_SUGGEST_EXAMPLES = """\
  kqlab suggest orders-0 --policy orders.yaml --now 1763700000000
  kqlab suggest data/ --policy orders.yaml --write orders.suggested.yaml  # a log directory
  kqlab suggest orders-snap/ --policy orders.yaml --max-rejection 0.5% --min-share 5%
  kqlab suggest orders-0 --policy orders.yaml --json | jq '.suggestions[].id'
  kqlab suggest baseline/ --policy orders.yaml --margin 10% --quantile 0.99 \
      --json | jq '.thresholds.proposals[] | {check, threshold, proposed, failing_proposed}'
  kqlab replay data/ --policy orders.suggested.yaml   # prints the counts suggest printed"""


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab test`` and ``kqlab suggest``."""
    tst = add_parser_with_examples(
        sub, "test", help="run a policy's golden examples through the validator",
        description="Run every rule's must-pass and must-fail example records (examples: "
        "{pass: [...], fail: [...]}) through the full validator and report, per rule, whether "
        "each behaved. Exit status 1 when one does not.", examples=_TEST_EXAMPLES)
    tst.add_argument("policy", help="the policy file (YAML)")
    tst.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                     help="clock for relative example timestamps and the broker checks "
                     "(default: the wall clock)")
    add_strict_flag(tst)
    add_json_flag(tst)
    tst.set_defaults(run=cmd_test)

    sug = add_parser_with_examples(
        sub, "suggest", help="propose rules from a sample, with the replay's counts",
        description="Measure a sample (segment file, partition folder, log directory or "
        "snapshot) decoded with the policy's formats and propose rules. The policy with the "
        "suggestions appended is replayed: each suggestion shows the records it fails and "
        "rejects and examples of them, as kqlab replay counts them. Rules the policy already "
        "has are not proposed again; rare values are left out of value sets, and listed. "
        "For the policy's sample checks (checks:), each threshold they set is proposed from "
        "the sample: the windows' value at --quantile (1: the worst window) widened by "
        "--margin, with the windows of the sample it would have failed.",
        examples=_SUGGEST_EXAMPLES)
    sug.add_argument("sample", help="a segment file (*.log), a partition folder, a log "
                     "directory or a snapshot")
    sug.add_argument("--policy", required=True,
                     help="the policy whose key/value formats (and schemas) decode the sample; "
                     "its rules are replayed with the suggestions")
    sug.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                     help="broker clock of the replay (default: the sample's own clock)")
    sug.add_argument("--framing", choices=("exact", "single", "linger"), default=None,
                     help="the replay's framing, as kqlab replay (default: exact; single for a "
                     "snapshot of consumed records)")
    sug.add_argument("--max-rejection", type=share, default=0.01, metavar="SHARE",
                     help="drop sample-derived rules failing more than this share (0.01 or 1%%)")
    sug.add_argument("--min-share", type=share, default=0.02, metavar="SHARE",
                     help="a value set allows only values on at least this share of the "
                     "records that have the field (0.02 or 2%%); rarer ones are left out")
    sug.add_argument("--min-support", type=int, default=2, metavar="N",
                     help="... and seen at least N times (2)")
    sug.add_argument("--max-examples", type=int, default=5, metavar="N",
                     help="failing records named per suggestion (5)")
    sug.add_argument("--no-schema", action="store_true",
                     help="do not derive rules from the registered schema")
    sug.add_argument("--margin", type=share, default=0.2, metavar="SHARE",
                     help="checks: widen the observed value by this share of it (0.2 or 20%%)")
    sug.add_argument("--quantile", type=float, default=1.0, metavar="Q",
                     help="checks: propose from the windows' value at Q for a max, 1-Q for a "
                     "min (0.5 to 1; 1: the worst window, so the sample passes)")
    sug.add_argument("--write", default=None, metavar="FILE",
                     help="write the policy with every suggestion appended (and every "
                     "proposed check threshold set) to FILE")
    add_strict_flag(sug)
    add_json_flag(sug)
    sug.set_defaults(run=cmd_suggest)


def cmd_test(args: argparse.Namespace) -> int:
    """``kqlab test POLICY``: run the golden examples; exit 1 when one misbehaves."""
    from kqlab.validate.golden import check_examples

    policy = load_policy_file(args.policy)
    prepare_registries(policy)
    report = check_examples(policy, now=args.now)
    doc = report.to_dict()
    doc["rule_findings"], failing = rule_findings("test", report.rule_rows, policy,
                                                  args.strict)
    if args.json:
        write_json(doc)
    else:
        print(report.render())
    return EXIT_OK if report.ok and not failing else EXIT_FINDING


def cmd_suggest(args: argparse.Namespace) -> int:
    """``kqlab suggest SAMPLE --policy P``: the suggestions, as tables or one JSON document."""
    from pathlib import Path

    from kqlab.cli._ui import progress
    from kqlab.policy import save_policy
    from kqlab.validate.check_suggestion import suggest_thresholds
    from kqlab.validate.replayer import Replayer
    from kqlab.validate.rule_suggestion import _framing_of, suggest

    if not 0.5 <= args.quantile <= 1:
        raise ValueError(f"--quantile is between 0.5 and 1 (1: the worst window), not "
                         f"{args.quantile}")
    policy = load_policy_file(args.policy)
    prepare_registries(policy)
    with progress() as p:
        # one sample for both: rule suggestions and check thresholds share decoded columns
        replayer = Replayer(args.sample, now=args.now,
                            framing=_framing_of(args.sample, args.framing),
                            base_dir=Path(args.policy).parent)
        found = suggest(replayer, policy, max_rejection=args.max_rejection,
                        max_examples=args.max_examples, min_support=args.min_support,
                        min_share=args.min_share, schema=not args.no_schema,
                        progress=p.step)
        if policy.checks:
            p.step("proposing check thresholds")
        thresholds = suggest_thresholds(replayer, policy, margin=args.margin,
                                        quantile=args.quantile)
    doc = found.to_dict()
    doc["thresholds"] = thresholds.to_dict()
    doc["rule_findings"], failing = rule_findings("suggest", found.rule_rows, policy,
                                                  args.strict)
    status = EXIT_FINDING if failing else EXIT_OK
    if args.write:
        save_policy(thresholds.accept(found.accept(policy)), args.write)
        doc["written"] = str(args.write)
    if args.json:
        write_json(doc)
        return status
    _print_suggestions(found, args)
    _print_thresholds(thresholds)
    return status


def _print_thresholds(found: ThresholdSuggestions) -> None:
    """The proposed check thresholds: one row per threshold, then the notes."""
    from kqlab.cli._ui import console, show, styled, table

    c = console()
    if not found.proposals and not found.notes:
        return
    c.print(styled(f"{len(found)} check threshold(s) proposed (observed value at quantile "
                   f"{found.quantile:g}, margin {100 * found.margin:g} %)", "bold"))
    if len(found):
        rows = [(p.check, p.kind, p.threshold, "—" if p.current is None else f"{p.current:g}",
                 f"{p.proposed:g}", f"{p.basis:.6g}", p.windows, p.failing_now,
                 p.failing_proposed) for p in found]
        show(table(("check", "kind", "threshold", "current", "proposed", "observed",
                    "windows", "failing now", "would fail"), rows,
                   right=("current", "proposed", "observed", "windows", "failing now",
                          "would fail")), out=c)
    for note in found.notes:
        c.print(styled(f"note: {note}", "note"))


def _print_suggestions(found: Suggestions, args: argparse.Namespace) -> None:
    """The suggestions for people: one table, then each one's evidence and examples."""
    import orjson

    from kqlab.cli._ui import console, show, styled, table
    from kqlab.policy.model import thaw

    c = console()
    rejected = found.outcomes.get("rejected", 0) + found.outcomes.get("collateral", 0)
    before = found.baseline.get("rejected", 0) + found.baseline.get("collateral", 0)
    c.print(styled(f"{len(found)} suggestion(s) from {found.records:,} records replayed "
                   f"(framing {found.settings.get('framing')}): with them {rejected:,} "
                   f"records would not be appended, {before:,} with the policy alone",
                   "bold"))
    if len(found):
        rows = [(s.id, s.rule.kind, s.failed, s.rejected,
                 f"{100 * s.rejection_rate:.2f} %", s.evaluation_errors, s.source)
                for s in found]
        show(table(("suggestion", "kind", "failed", "rejected", "share", "evaluation errors",
                    "from"), rows, right=("failed", "rejected", "share", "evaluation errors")),
             out=c)
    for s in found:
        params = ", ".join(f"{k}: {v if isinstance(v, str) else orjson.dumps(v).decode()}"
                           for k, v in thaw(s.rule.to_dict()).items() if k not in ("id", "kind"))
        c.print(styled(s.id, "bold"), styled(f"  {params}", "dim"))
        c.print(f"    {s.source}: {s.evidence}")
        for e in s.examples:
            c.print(f"    would reject {e.topic}-{e.partition}@{e.offset}: {e.message}")
        for v in s.left_out:
            c.print(styled(f"    left out {v.value!r} ({v.count:,} record(s)): {v.reason}",
                           "warning"))
    if found.duplicates:
        c.print(styled("already in the policy (not proposed again): " + ", ".join(
            f"{d.id} = {d.rule}" for d in found.duplicates), "note"))
    for note in found.notes:
        c.print(styled(f"note: {note}", "note"))
    if args.write:
        c.print(f"policy with every suggestion written to {args.write}")
