"""What every ``kqlab`` command shares: exit codes, the one-JSON-document output, the clock,
output paths, and the help's examples and exit-code table.

The contract the commands keep (scripts depend on it): with ``--json`` a command prints exactly
one JSON document on stdout and nothing else there (progress and warnings go to stderr);
a wrong *request* exits with :data:`EXIT_REQUEST` and one line on stderr (raised as
:class:`~kqlab.errors.KqlabError` or :class:`ValueError` and rendered by :func:`kqlab.cli.main`);
problems in the *data* are findings, printed in the output with :data:`EXIT_OK` — unless the
command was asked to check them (``replay --fail-over``, ``test``, ``export``, ``verify``),
which then exits with :data:`EXIT_FINDING`.  :data:`EXIT_CODES` is the one table of these
codes: ``kqlab --help`` prints it and the README repeats it (a test holds them equal).

Only the standard library is imported here, so building the parser (``kqlab --help``) stays
fast; each command imports what it needs when it runs (``rich`` for people: :mod:`._ui`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeAlias

# a command reads its policy file as every caller of kqlab does (re-exported for the commands)
from kqlab.sources.policy_files import load_policy_file as _load_policy_file
from kqlab.sources.policy_files import prepare_registries

__all__ = [
    "EXIT_CODES",
    "EXIT_FINDING",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "EXIT_REQUEST",
    "Command",
    "SubParsers",
    "add_json_flag",
    "add_parser_with_examples",
    "exit_code_table",
    "load_policy_file",
    "now_ms",
    "output_file",
    "prepare_registries",
    "share",
    "shown_dir",
    "write_json",
]

#: the command did what was asked (data problems are findings in its output)
EXIT_OK = 0
#: the command ran and the check it was asked for failed: more records rejected than
#: ``replay --fail-over`` allows, a golden example misbehaved (``test``), a claim or a reject
#: rule not enforced exactly (``export``), drift (``verify``), the engines disagreed
#: (``demo --spark``), a gate delivery failed (``gate``), a redriven record was not delivered
#: (``dlq redrive``; the next run sends it)
EXIT_FINDING = 1
#: the request was wrong: a missing path, a bad ``--config``, an invalid policy file
EXIT_REQUEST = 2
#: ``replay --engine spark``: some topic-partitions could not be read (named on stderr)
EXIT_PARTIAL = 3

#: every exit status with what it means: ``kqlab --help`` prints this table, the README
#: repeats it word for word
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "done; problems in the data are findings in the output"),
    (EXIT_FINDING, "the check asked for failed: replay --fail-over exceeded or a sample check "
                   "of the policy failed, the report's verdict is FAIL (report), a rule reads "
                   "a field or header no record has or every evaluation of it errored "
                   "(--strict or strict: true), a golden example "
                   "misbehaved (test), a claim contradicted or a reject rule not enforced "
                   "exactly (export), drift (verify), engines disagree (demo --spark), a gate "
                   "delivery failed (gate), a redriven record not delivered (dlq redrive)"),
    (EXIT_REQUEST, "the request was wrong: a missing path, a bad option or --config, an "
                   "invalid policy (one line on stderr, nothing written)"),
    (EXIT_PARTIAL, "replay --engine spark: some topic-partitions could not be read (named on "
                   "stderr); the others were replayed"),
)


def exit_code_table() -> str:
    """:data:`EXIT_CODES` as the help's plain-text table (meanings wrapped under themselves)."""
    import textwrap

    return "exit status:\n" + "\n".join(
        textwrap.fill(meaning, width=92, initial_indent=f"  {code}  ", subsequent_indent="     ")
        for code, meaning in EXIT_CODES)


def add_parser_with_examples(sub: SubParsers, name: str, *, help: str, description: str,
                             examples: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A command's parser whose ``--help`` ends with ``examples`` (kept as written) and the
    exit statuses: every command shows how it is used and what its status means."""
    import textwrap

    epilog = "examples:\n" + examples.strip("\n") + "\n\n" + exit_code_table()
    text = "\n\n".join(textwrap.fill(para, width=92) for para in description.split("\n\n"))
    return sub.add_parser(name, help=help, description=text, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)

#: what ``ArgumentParser.add_subparsers`` returns (each command module adds its parser to it)
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
#: a command's body: the parsed arguments in, the exit status out
Command: TypeAlias = Callable[[argparse.Namespace], int]



def add_json_flag(parser: argparse.ArgumentParser, help: str = "print one JSON document"
                  ) -> None:
    """The ``--json`` option every command has (the same name and meaning everywhere)."""
    parser.add_argument("--json", action="store_true", help=help)


def load_policy_file(path: str) -> Any:
    """The policy file ``path`` as every command reads it
    (:func:`kqlab.sources.policy_files.load_policy_file`), then linted: a rule message that
    writes a parameter's value by hand (``[0.01, 100000]`` instead of ``[{min}, {max}]``) is
    a warning on stderr naming file, line and key — it would go stale at the next edit."""
    from pathlib import Path

    from kqlab.policy.message_params import message_lints

    policy = _load_policy_file(path)
    try:
        text: str | None = Path(path).read_text(encoding="utf-8-sig")
    except OSError:
        text = None
    for line in message_lints(policy, text, str(path)):
        print(f"kqlab: warning: {line}", file=sys.stderr)
    return policy


def write_json(doc: dict[str, Any], *, default: Callable[[Any], Any] | None = None) -> None:
    """Print ``doc`` as the command's one JSON document: a single line on stdout.

    ``default`` converts what orjson cannot serialise itself (``str`` for paths and the like).
    """
    import orjson

    sys.stdout.write(orjson.dumps(doc, default=default).decode() + "\n")


def share(text: str) -> float:
    """An argparse type: a share of the records, ``0.05`` or ``5%`` (0 to 1)."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share: write 0.05 or 5%") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1 (0% and "
                                         "100%)")
    return value


def output_file(given: str | None, default_name: str) -> Path:
    """Where a command writes its one output file: ``given``, or ``default_name`` inside it
    when ``given`` names a folder — it ends with a path separator or is an existing directory
    (``--out reports/`` writes ``reports/<default_name>``, creating the folder) — or
    ``default_name`` in the working directory when nothing was given."""
    if not given:
        return Path(default_name)
    path = Path(given)
    if given.endswith(("/", os.sep)) or path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        return path / default_name
    return path


def shown_dir(path: str | Path) -> str:
    """A folder as printed for people: normalised, with exactly one trailing separator
    (``--out dir/`` and ``--out dir`` both print ``dir/``)."""
    return str(Path(path)) + os.sep


def now_ms(given: int | None) -> int:
    """The ``--now`` clock in epoch milliseconds, or the wall clock when it was not given."""
    return given if given is not None else int(time.time() * 1000)


