"""The ``kqlab`` command line, one module per command.

``init`` (:mod:`kqlab.cli.init`: a starter policy for one's own topic), ``inspect``
(:mod:`kqlab.cli.inspect`), ``replay`` (:mod:`~kqlab.cli.replay`), ``sample``
(:mod:`~kqlab.cli.sample`), ``snapshot`` (:mod:`~kqlab.cli.snapshot`), ``demo``
(:mod:`~kqlab.cli.demo`), ``test`` and ``suggest`` (:mod:`~kqlab.cli.policy`), ``report``
(:mod:`~kqlab.cli.report`), ``export`` (:mod:`~kqlab.cli.export`), ``gate``
(:mod:`~kqlab.cli.gate`), ``verify`` (:mod:`~kqlab.cli.verify`), ``import``
(:mod:`~kqlab.cli.import_`), ``whatif`` (:mod:`~kqlab.cli.whatif`), ``plan``
(:mod:`~kqlab.cli.plan`), ``dlq inspect`` / ``dlq redrive`` (:mod:`~kqlab.cli.dlq`).  Each
module adds its parser (``add_parser``) and binds it to its command function
(``set_defaults(run=...)``); :func:`main` only parses and dispatches.

Every command takes ``--json`` and then prints exactly one JSON document on stdout, for scripts;
without it, tables for people (:mod:`kqlab.cli._ui`: colour only on a terminal and without
``NO_COLOR``, progress on stderr while long commands work).  Every ``--help`` ends with examples
and the exit statuses.  Errors in the request (a missing path, a bad ``--config``) exit with
status 2 and one line on stderr; problems in the *data* are findings, reported in the output
with exit status 0 unless a check was asked for (``replay --fail-over``: 1); the table of exit
codes is :data:`kqlab.cli._common.EXIT_CODES`.
"""

from __future__ import annotations

import argparse
import sys

from kqlab._version import __version__
from kqlab.cli import (
    demo,
    dlq,
    export,
    gate,
    import_,
    init,
    inspect,
    plan,
    policy,
    replay,
    report,
    sample,
    snapshot,
    verify,
    whatif,
)
from kqlab.cli._common import EXIT_OK, EXIT_REQUEST, exit_code_table
from kqlab.errors import KqlabError

__all__ = ["build_parser", "main"]

#: the command modules, in the order ``kqlab --help`` lists them
_COMMANDS = (init, inspect, replay, sample, snapshot, demo, policy, report, whatif, plan, export,
             gate, verify, import_, dlq)


_EXAMPLES = """\
examples:
  kqlab init 127.0.0.1:9092 orders                                   # start here: a policy
  kqlab inspect orders-0 --validate --config cleanup.policy=compact   # like kafka-dump-log
  kqlab sample 127.0.0.1:9092 orders snap/ --latest 10000 --exact     # a live topic
  kqlab suggest snap/ --policy orders.yaml --write suggested.yaml    # rules from a sample
  kqlab replay snap/ --policy orders.yaml --fail-over 5%              # CI gate: exit 1
  kqlab report snap/ --policy orders.yaml --out reports/              # one HTML file
  kqlab export orders.yaml --target all --sample snap/ --out export/  # enforce it
  kqlab <command> --help                                              # options, examples

output: tables for people; --json (every command) prints one JSON document on stdout for
scripts. Colour only on a terminal, never with NO_COLOR set; progress on stderr while long
commands work (only when stderr is a terminal).
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``kqlab`` parser with every command's sub-parser (its help ends with examples and
    the exit-code table)."""
    p = argparse.ArgumentParser(
        prog="kqlab", description="Kafka data-quality workbench: sample topics, replay them\n"
        "through the broker's batch checks and a record policy, see what would be rejected\n"
        "and why, export the policy to where it is enforced.",
        epilog=_EXAMPLES + "\n" + exit_code_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"kqlab {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for module in _COMMANDS:
        module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kqlab`` console script."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
        return status
    except (KqlabError, ValueError) as exc:
        print(f"kqlab {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_REQUEST
    except BrokenPipeError:  # pragma: no cover - `kqlab inspect ... | head`
        return EXIT_OK
