"""What every command that replays says about the rules themselves: a field or header no
record of the sample has, a rule whose every evaluation errored.

The findings are the verdicts' own (the rule table's ``unseen`` and ``broken`` columns,
computed once by the replay: :mod:`kqlab.validate.rule_health`); this module only words them
the same way in every command and decides the exit status: warnings on stderr, errors (exit
:data:`~kqlab.cli._common.EXIT_FINDING`) with ``--strict`` or the policy's ``strict: true``
— for CI, where a typo in a field name must not pass as "0 failed".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["add_strict_flag", "rule_findings"]


def add_strict_flag(parser: argparse.ArgumentParser) -> None:
    """The ``--strict`` option of every command that replays (the same words everywhere)."""
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when a rule reads a field or header that no record of "
                        "the sample has, or every evaluation of a rule errors (the policy's "
                        "strict: true does the same); without it they are warnings")


def rule_findings(command: str, rules: Any, policy: Any, strict: bool, *,
                  quiet: bool = False) -> tuple[list[dict[str, str]], bool]:
    """The rule findings of a replay's rule table ``rules`` (an Arrow table or its rows) as
    JSON-ready dicts, printed on stderr as ``kqlab COMMAND: warning: ...`` (``error:`` when
    they fail the command) unless ``quiet``; and whether they fail it."""
    from kqlab.validate.rule_health import findings, strict_failures

    rows: Sequence[Mapping[str, Any]] = rules.to_pylist() if hasattr(rules, "to_pylist") \
        else rules
    found = findings(rows)
    failing = bool(strict_failures(policy, rows, strict))
    if not quiet:
        word = "error" if failing else "warning"
        for f in found:
            print(f"kqlab {command}: {word}: {f.text}", file=sys.stderr)
    return [{"rule": f.rule, "kind": f.kind, "text": f.text} for f in found], failing
