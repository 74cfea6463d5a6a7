"""The policy-authoring commands: ``kqlab test`` and ``kqlab suggest``.

Exit status: 0 when every golden example behaves (``test``) or suggestions were made
(``suggest``), 1 when an example misbehaves, 2 for a wrong request (as every kqlab command).
"""

from __future__ import annotations

import argparse

from kqlab.cli._common import (
    EXIT_FINDING,
    EXIT_OK,
    SubParsers,
    add_json_flag,
    load_policy_file,
    prepare_registries,
    write_json,
)

__all__ = ["add_parser", "cmd_suggest", "cmd_test"]


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab test`` and ``kqlab suggest``."""
    tst = sub.add_parser("test", help="run a policy's golden examples through the validator",
                         description="Run every rule's must-pass and must-fail example "
                         "records (examples: {pass: [...], fail: [...]}) through the full "
                         "validator and report, per rule, whether each behaved. Exit status "
                         "1 when one does not.")
    tst.add_argument("policy", help="the policy file (YAML)")
    tst.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                     help="clock for relative example timestamps and the broker checks "
                     "(default: the wall clock)")
    add_json_flag(tst)
    tst.set_defaults(run=cmd_test)

    sug = sub.add_parser("suggest", help="propose rules from a sample, with rejection rates",
                         description="Measure a sample (segment file, partition folder or "
                         "snapshot) decoded with the policy's formats and propose rules, each "
                         "with the share of the sample it would reject and examples of the "
                         "records it would reject.")
    sug.add_argument("sample", help="a segment file (*.log), a partition folder or a snapshot")
    sug.add_argument("--policy", required=True,
                     help="the policy whose key/value formats (and schemas) decode the sample")
    sug.add_argument("--now", type=int, default=None, metavar="EPOCH_MS")
    sug.add_argument("--max-rejection", type=float, default=0.01, metavar="SHARE",
                     help="drop sample-derived rules rejecting more than this share (0.01)")
    sug.add_argument("--max-examples", type=int, default=5, metavar="N",
                     help="rejected records named per suggestion (5)")
    sug.add_argument("--no-schema", action="store_true",
                     help="do not derive rules from the registered schema")
    sug.add_argument("--write", default=None, metavar="FILE",
                     help="write the policy with every suggestion appended to FILE")
    add_json_flag(sug)
    sug.set_defaults(run=cmd_suggest)


def cmd_test(args: argparse.Namespace) -> int:
    """``kqlab test POLICY``: run the golden examples; exit 1 when one misbehaves."""
    from kqlab.validate.golden import check_examples

    policy = load_policy_file(args.policy)
    prepare_registries(policy)
    report = check_examples(policy, now=args.now)
    if args.json:
        write_json(report.to_dict())
    else:
        print(report.render())
    return EXIT_OK if report.ok else EXIT_FINDING


def cmd_suggest(args: argparse.Namespace) -> int:
    """``kqlab suggest SAMPLE --policy P``: the suggestions, as a table or one JSON document."""
    from kqlab.policy import save_policy
    from kqlab.validate.rule_suggestion import suggest

    policy = load_policy_file(args.policy)
    prepare_registries(policy)
    found = suggest(args.sample, policy, now=args.now, max_rejection=args.max_rejection,
                    max_examples=args.max_examples, schema=not args.no_schema)
    doc = found.to_dict()
    if args.write:
        save_policy(found.accept(policy), args.write)
        doc["written"] = str(args.write)
    if args.json:
        write_json(doc)
        return EXIT_OK
    print(f"{len(found)} suggestion(s) from {found.records} records "
          f"(max rejection {args.max_rejection:g}):")
    for s in found:
        params = {k: v for k, v in s.rule.to_dict().items() if k not in ("id", "kind")}
        shown = ", ".join(f"{k}: {v}" for k, v in params.items())
        print(f"  {s.id:<44} {s.rule.kind:<20} {100 * s.rejection_rate:6.2f} % "
              f"({s.rejected:>5})  {shown}")
        print(f"      {s.source}: {s.evidence}")
        for e in s.examples:
            print(f"      would reject {e.topic}-{e.partition}@{e.offset}: {e.message}")
    for note in found.notes:
        print(f"  note: {note}")
    if args.write:
        print(f"  policy with every suggestion written to {args.write}")
    return EXIT_OK
