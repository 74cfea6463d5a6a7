"""The policy-authoring commands of the ``kqlab`` CLI: ``kqlab test`` and ``kqlab suggest``.

Kept apart from :mod:`kqlab.cli` (which registers them with :func:`add_parsers` and dispatches
to :func:`run`) so the authoring commands and the replay/sampling commands evolve separately.
Exit status: 0 when every golden example behaves (``test``) or suggestions were made
(``suggest``), 1 when an example misbehaves, 2 for a wrong request (as every kqlab command).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["COMMANDS", "add_parsers", "cmd_suggest", "cmd_test", "run"]

COMMANDS = ("test", "suggest")
#: in-memory (mock://) registries the package itself knows how to fill: a fresh process
#: sees them empty, so the demo policies would have no schemas to encode or decode with
_KNOWN_MOCK_REGISTRIES = {"mock://kqlab-demo": "kqlab.sources.demo_topics:register_schemas"}


def add_parsers(sub: Any) -> None:
    """Add the ``test`` and ``suggest`` sub-commands to ``kqlab``'s sub-parsers."""
    tst = sub.add_parser("test", help="run a policy's golden examples through the validator",
                         description="Run every rule's must-pass and must-fail example "
                         "records (examples: {pass: [...], fail: [...]}) through the full "
                         "validator and report, per rule, whether each behaved. Exit status "
                         "1 when one does not.")
    tst.add_argument("policy", help="the policy file (YAML)")
    tst.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                     help="clock for relative example timestamps and the broker checks "
                     "(default: the wall clock)")
    tst.add_argument("--json", action="store_true", help="print one JSON document")

    sug = sub.add_parser("suggest", help="propose rules from a sample, with rejection rates",
                         description="Profile a sample (segment file, partition folder or "
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
    sug.add_argument("--json", action="store_true", help="print one JSON document")


def _prepare(policy: Any) -> None:
    """Fill the in-memory registries the package knows (the demo's), as its demo does."""
    import importlib

    for fmt in (policy.key, policy.value):
        url = fmt.schemas.registry if fmt.schemas is not None else None
        target = _KNOWN_MOCK_REGISTRIES.get(url or "")
        if target:
            module, _, name = target.partition(":")
            getattr(importlib.import_module(module), name)(url)


def cmd_test(args: argparse.Namespace) -> int:
    """``kqlab test POLICY``: run the golden examples; exit 1 when one misbehaves."""
    import orjson

    from kqlab.policy.io import load_policy
    from kqlab.validate.golden import test_policy

    policy = load_policy(args.policy)
    _prepare(policy)
    report = test_policy(policy, now=args.now)
    if args.json:
        sys.stdout.write(orjson.dumps(report.to_dict()).decode() + "\n")
    else:
        print(report.render())
    return 0 if report.ok else 1


def cmd_suggest(args: argparse.Namespace) -> int:
    """``kqlab suggest SAMPLE --policy P``: the suggestions, as a table or one JSON document."""
    import orjson

    from kqlab.policy.io import load_policy, save_policy
    from kqlab.policy.suggest import suggest

    policy = load_policy(args.policy)
    _prepare(policy)
    found = suggest(args.sample, policy, now=args.now, max_rejection=args.max_rejection,
                    max_examples=args.max_examples, schema=not args.no_schema)
    doc = found.to_dict()
    if args.write:
        save_policy(found.accept(policy), args.write)
        doc["written"] = str(args.write)
    if args.json:
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
        return 0
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
    return 0


def run(args: argparse.Namespace) -> int:
    """Dispatch one of :data:`COMMANDS`."""
    return cmd_test(args) if args.command == "test" else cmd_suggest(args)
