"""``kqlab plan``: a staged rollout plan of a policy, predicted on a sample.

Observe → dead-letter (the gate) → block (at ``--block-at``), rule by rule: per stage the
predicted reject rate and collateral, the producers it breaks first (producer id, and the
client named by a header), and with ``--out`` every stage's policies and exported configs
(:mod:`kqlab.rollout.plan`).  Exit status 0 when the plan was made, 2 for a wrong request.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kqlab.cli._common import (
    EXIT_OK,
    SubParsers,
    add_json_flag,
    add_parser_with_examples,
    prepare_registries,
    shown_dir,
    write_json,
)
from kqlab.cli.whatif import add_sample_options, client_header, policy_file

if TYPE_CHECKING:
    from kqlab.rollout.plan import RolloutPlan

__all__ = ["add_parser", "cmd_plan", "print_plan"]

_EXAMPLES = """\
  kqlab plan orders.yaml --sample orders-0 --now 1763700000000
  kqlab plan orders.yaml --sample snap/ --out rollout/       # + each stage's configs
  kqlab plan orders.yaml --sample snap/ --block-at kroxylicious --json | jq .breaks_first
  kqlab plan orders.yaml --sample demo/orders-0 --sample demo/orders-1 --client-header source"""


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab plan``."""
    from kqlab.rollout.points import BLOCK_POINTS

    pl = add_parser_with_examples(
        sub, "plan", help="a staged rollout plan: observe, dead-letter, block",
        description="Propose how to switch a policy on without surprises: first observe "
        "every rule, then dead-letter failing records with the gate (no producer breaks), "
        "then block rules at --block-at in waves (the rules that refuse nothing more than the "
        "broker's own checks first, then one at a time, fewest records lost first). Each "
        "stage shows its predicted reject rate and collateral on the sample, the producers "
        "that would break first, and with --out its policies and exported configs.",
        examples=_EXAMPLES)
    add_sample_options(pl)
    pl.add_argument("--block-at", choices=BLOCK_POINTS, default=None,
                    help="where rules are finally blocked (default: the policy's enforcement "
                    "profile)")
    pl.add_argument("--out", default=None, metavar="DIR",
                    help="write plan.json and, per stage, stage-<n>-<kind>/ with its policies "
                    "and exported configs")
    add_json_flag(pl)
    pl.set_defaults(run=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    """``kqlab plan POLICY --sample S``."""
    from kqlab.cli._ui import progress
    from kqlab.rollout.plan import rollout_plan

    policy = policy_file(args.policy)
    prepare_registries(policy)
    with progress() as shown:
        shown.step(f"replaying {', '.join(args.sample)} stage by stage")
        result = rollout_plan(policy, args.sample, block_at=args.block_at, now=args.now,
                              framing=args.framing,
                              client_header=client_header(args.client_header))
    doc: dict[str, Any] = result.to_dict()
    if args.out:
        doc["written"] = [str(p) for p in result.write(args.out)]
    if args.json:
        write_json(doc)
        return EXIT_OK
    print_plan(result)
    if args.out:
        print(f"wrote the plan and {len(result.stages)} stage folders under "
              f"{shown_dir(args.out)}")
    return EXIT_OK


def print_plan(plan: RolloutPlan) -> None:
    """The plan for people: stages, the producers each breaks first, the rules' way."""
    from kqlab.cli._ui import console, show, styled, table

    c = console()
    c.print(styled(f"rollout of {plan.policy} on {plan.records:,} records, blocking at "
                   f"{plan.block_at}" + (f" (clients by header {plan.client_header})"
                                         if plan.client_header else ""), "bold"))
    rows = []
    for s in plan.stages:
        k = s.counts
        breaks = ", ".join(f"{b['producer']} +{b['new_lost']:,}" for b in s.breaks)
        rows.append((s.number, s.kind, ", ".join(s.moves) if s.kind == "block" else "-",
                     k["accepted"], k["refused"], k["collateral"], k["in_dlq"],
                     f"{100 * s.reject_rate:.2f} %",
                     styled(breaks, "rejected") if breaks else "-"))
    show(table(("stage", "kind", "blocks", "accepted", "refused", "collateral",
                "dead-lettered", "refused + collateral", "breaks first"), rows,
               right=("accepted", "refused", "collateral", "dead-lettered",
                      "refused + collateral")), out=c)
    rules = [(r.rule, r.kind, r.failed_records,
              ", ".join(f"{p} ({n:,})" for p, n in r.producers.items()) or "-",
              "-" if r.solo_refused is None else r.solo_refused,
              "-" if r.solo_collateral is None else r.solo_collateral,
              "-" if r.block_stage is None else r.block_stage)
             for r in plan.rules]
    show(table(("rule", "kind", "fails", "producers", "alone: refused",
                "alone: collateral", "block stage"), rules, title="rules",
               right=("fails", "alone: refused", "alone: collateral", "block stage")), out=c)
    for s in plan.stages:
        for name, why in s.skipped.items():
            c.print(styled(f"stage {s.number}: {name} not exported — {why}", "warning"))
    for note in plan.notes:
        c.print(styled(f"note: {note}", "note"))
