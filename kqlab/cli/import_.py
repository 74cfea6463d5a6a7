"""``kqlab import``: a policy from another tool's format (today: Open Data Contract Standard v3).

``kqlab import odcs contract.yaml --out orders.yaml`` reads an ODCS contract — one that
``kqlab export --target odcs`` wrote comes back as the identical policy (same content hash);
one from another tool becomes the rules its schema and quality rules mean, and everything
without a kqlab meaning is listed, not dropped silently (:mod:`kqlab.export.odcs`).  Without
``--out`` the policy's YAML goes to stdout.  Exit status 0, or 2 for a file that is not a
usable contract.
"""

from __future__ import annotations

import argparse
import sys

from kqlab.cli._common import EXIT_OK, SubParsers, add_json_flag, exit_code_table, write_json

__all__ = ["add_parser", "cmd_import"]

_EXAMPLES = """\
examples:
  kqlab import odcs export/odcs/orders-quality.odcs.yaml --out orders.yaml
  kqlab import odcs contract.yaml --schema orders          # one schema object of several
  kqlab import odcs contract.yaml --json | jq .skipped     # what had no kqlab meaning
  kqlab import odcs contract.yaml > orders.yaml            # the policy's YAML on stdout
"""

#: the formats ``kqlab import`` reads
FORMATS = ("odcs",)


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab import``."""
    im = sub.add_parser("import", help="a policy from another format (ODCS v3)",
                        description="Read a policy from another tool's format. odcs: an Open "
                        "Data Contract Standard v3 contract; one written by `kqlab export "
                        "--target odcs` comes back identical (same content hash).",
                        epilog=_EXAMPLES + "\n" + exit_code_table(),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    im.add_argument("format", choices=FORMATS, help="the file's format")
    im.add_argument("file", help="the contract file")
    im.add_argument("--schema", default=None, metavar="NAME",
                    help="the schema object to read when the contract has several")
    im.add_argument("--out", default=None, metavar="POLICY.yaml",
                    help="write the policy here (default: print its YAML)")
    add_json_flag(im, help="print one JSON document (policy name, hash, rules, skipped, the "
                  "policy as data)")
    im.set_defaults(run=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    """``kqlab import odcs FILE``: the policy, and what the contract held without a kqlab
    meaning."""
    from pathlib import Path

    from kqlab.export.odcs import OdcsError, import_odcs
    from kqlab.policy import dump_policy, policy_to_dict, save_policy

    path = Path(args.file)
    if not path.is_file():
        raise OdcsError(f"no contract file at {path}")
    result = import_odcs(path, schema=args.schema)
    written = str(save_policy(result.policy, args.out)) if args.out else None
    if args.json:
        write_json({**result.to_dict(), "written": written,
                    "data": policy_to_dict(result.policy)}, default=str)
        return EXIT_OK
    out = sys.stderr if not args.out else sys.stdout
    if args.out:
        print(f"kqlab import odcs — policy {result.policy.name!r} "
              f"({len(result.policy.rules)} rules, {result.policy.content_hash()[:19]}…) "
              f"written to {written}")
    else:
        sys.stdout.write(dump_policy(result.policy))
    for line in result.skipped:
        print(f"  skipped: {line}", file=out)
    for line in result.notes:
        print(f"  note: {line}", file=out)
    return EXIT_OK
