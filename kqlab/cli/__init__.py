"""The ``kqlab`` command line, one module per command.

``inspect`` (:mod:`kqlab.cli.inspect`), ``replay`` (:mod:`~kqlab.cli.replay`), ``sample``
(:mod:`~kqlab.cli.sample`), ``snapshot`` (:mod:`~kqlab.cli.snapshot`), ``demo``
(:mod:`~kqlab.cli.demo`), ``test`` and ``suggest`` (:mod:`~kqlab.cli.policy`), ``report``
(:mod:`~kqlab.cli.report`), ``export`` (:mod:`~kqlab.cli.export`), ``gate``
(:mod:`~kqlab.cli.gate`), ``verify`` (:mod:`~kqlab.cli.verify`), ``import``
(:mod:`~kqlab.cli.import_`).  Each module adds its parser (``add_parser``) and binds it to its
command function (``set_defaults(run=...)``); :func:`main` only parses and dispatches.

Every command takes ``--json`` and then prints exactly one JSON document on stdout, for scripts.
Errors in the request (a missing path, a bad ``--config``) exit with status 2 and one line on
stderr; problems in the *data* are findings, reported in the output with exit status 0 (see
:mod:`kqlab.cli._common` for the exit codes).
"""

from __future__ import annotations

import argparse
import sys

from kqlab._version import __version__
from kqlab.cli import (
    demo,
    export,
    gate,
    import_,
    inspect,
    policy,
    replay,
    report,
    sample,
    snapshot,
    verify,
)
from kqlab.cli._common import EXIT_OK, EXIT_REQUEST
from kqlab.errors import KqlabError

__all__ = ["build_parser", "main"]

#: the command modules, in the order ``kqlab --help`` lists them
_COMMANDS = (inspect, replay, sample, snapshot, demo, policy, report, export, gate, verify,
             import_)


def build_parser() -> argparse.ArgumentParser:
    """The ``kqlab`` parser with every command's sub-parser."""
    p = argparse.ArgumentParser(prog="kqlab", description="Kafka data-quality workbench.")
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
