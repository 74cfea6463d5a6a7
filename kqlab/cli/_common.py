"""What every ``kqlab`` command shares: exit codes, the one-JSON-document output, the clock.

The contract the commands keep (scripts depend on it): with ``--json`` a command prints exactly
one JSON document on stdout and nothing else there (progress and warnings go to stderr);
a wrong *request* exits with :data:`EXIT_REQUEST` and one line on stderr (raised as
:class:`~kqlab.errors.KqlabError` or :class:`ValueError` and rendered by :func:`kqlab.cli.main`);
problems in the *data* are findings, printed in the output with :data:`EXIT_OK`.

Only the standard library is imported here, so building the parser (``kqlab --help``) stays
fast; each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from kqlab.policy.model import Policy

__all__ = [
    "EXIT_FINDING",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "EXIT_REQUEST",
    "Command",
    "SubParsers",
    "add_json_flag",
    "load_policy_file",
    "now_ms",
    "prepare_registries",
    "write_json",
]

#: the command did what was asked (data problems are findings in its output)
EXIT_OK = 0
#: the command ran and its check failed: a golden example misbehaved (``test``), the engines
#: disagreed (``demo --spark``), a gate delivery failed (``gate``)
EXIT_FINDING = 1
#: the request was wrong: a missing path, a bad ``--config``, an invalid policy file
EXIT_REQUEST = 2
#: ``replay --engine spark``: some topic-partitions could not be read (named on stderr)
EXIT_PARTIAL = 3

#: what ``ArgumentParser.add_subparsers`` returns (each command module adds its parser to it)
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
#: a command's body: the parsed arguments in, the exit status out
Command: TypeAlias = Callable[[argparse.Namespace], int]

#: in-memory (mock://) registries the package itself knows how to fill: a fresh process
#: sees them empty, so the demo policies would have no schemas to encode or decode with
_KNOWN_MOCK_REGISTRIES = {"mock://kqlab-demo": "kqlab.sources.demo_topics:register_schemas"}


def add_json_flag(parser: argparse.ArgumentParser, help: str = "print one JSON document"
                  ) -> None:
    """The ``--json`` option every command has (the same name and meaning everywhere)."""
    parser.add_argument("--json", action="store_true", help=help)


def write_json(doc: dict[str, Any], *, default: Callable[[Any], Any] | None = None) -> None:
    """Print ``doc`` as the command's one JSON document: a single line on stdout.

    ``default`` converts what orjson cannot serialise itself (``str`` for paths and the like).
    """
    import orjson

    sys.stdout.write(orjson.dumps(doc, default=default).decode() + "\n")


def now_ms(given: int | None) -> int:
    """The ``--now`` clock in epoch milliseconds, or the wall clock when it was not given."""
    return given if given is not None else int(time.time() * 1000)


def prepare_registries(policy: Policy) -> None:
    """Fill the in-memory schema registries the package knows (the demo's), as its demo does.

    A ``mock://`` registry lives in the process that filled it; a command starts a fresh
    process, so without this the demo policies would find no schemas to decode with.
    """
    import importlib

    for fmt in (policy.key, policy.value):
        url = fmt.schemas.registry if fmt.schemas is not None else None
        target = _KNOWN_MOCK_REGISTRIES.get(url or "")
        if target:
            module, _, name = target.partition(":")
            getattr(importlib.import_module(module), name)(url)


def load_policy_file(path: str) -> Policy:
    """The policy file ``path``, fully checked before the command does anything with it.

    A malformed policy raises :class:`~kqlab.policy.PolicyError` here (``file:line[:column]:
    key: reason``, exit status 2, no traceback), so nothing runs on a broken policy.  A policy
    naming a schema registry is read a second time, after :func:`prepare_registries`, with
    ``contact_registries=True``: its rules are then checked against the registry's schemas
    too (the command reads that registry anyway).
    """
    from kqlab.policy import load_policy

    policy = load_policy(path)
    if any(f.schemas is not None and f.schemas.registry for f in (policy.key, policy.value)):
        prepare_registries(policy)
        policy = load_policy(path, contact_registries=True)
    return policy
