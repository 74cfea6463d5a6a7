"""``kqlab replay``: a sample through the broker checks and a policy, summarised.

The local engine writes the verdict tables itself with ``--out``; ``--engine spark`` runs one
Spark task per topic-partition and prints the same summary.  :func:`print_summary` is the
human-readable summary that ``kqlab demo`` prints too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from kqlab.cli._common import (
    EXIT_OK,
    EXIT_PARTIAL,
    SubParsers,
    add_json_flag,
    load_policy_file,
    write_json,
)

if TYPE_CHECKING:
    from kqlab.policy.model import Policy

__all__ = ["add_parser", "cmd_replay", "print_summary"]


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab replay``."""
    rep = sub.add_parser("replay", help="replay a sample through the broker checks and a "
                         "policy", description="Replay a sample (a segment file or partition "
                         "folder) through the broker's batch checks and a policy's rules, with "
                         "the record-policy KIPs' semantics, and summarise what production "
                         "would reject and why.")
    rep.add_argument("source", help="a segment file (*.log), a partition folder, a log "
                     "directory (of <topic>-<partition> folders) or a snapshot folder "
                     "(kqlab snapshot)")
    rep.add_argument("--policy", required=True, help="the policy file (YAML)")
    rep.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                     help="broker clock (default: the wall clock)")
    rep.add_argument("--framing", choices=("exact", "single", "linger"), default="exact",
                     help="batch framing: exact (as read) or rebuilt producer-like batches")
    rep.add_argument("--linger-ms", type=int, default=5, help="for --framing linger")
    rep.add_argument("--batch-size", type=int, default=16384, help="for --framing linger")
    rep.add_argument("--profile", choices=("kip-940", "kip-686", "kip-729"), default=None,
                     help="enforcement profile (default: the policy's)")
    rep.add_argument("--out", default=None, metavar="DIR",
                     help="write records.parquet, batches.parquet, rules.parquet and "
                     "summary.json there (--engine spark: records/ and batches/ folders of "
                     "Parquet files, one per topic-partition)")
    rep.add_argument("--vet", default=None, metavar="FILE",
                     help="write the policy with its provenance (sample, counts, content hash, "
                     "date) to FILE")
    rep.add_argument("--engine", choices=("local", "spark"), default="local",
                     help="local: in this process; spark: one Spark task per topic-partition "
                     "(same verdicts; for samples that outgrow one process)")
    rep.add_argument("--master", default=None,
                     help="Spark master for --engine spark (default local[*]; e.g. local[2], "
                     "spark://host:7077, yarn)")
    rep.add_argument("--overwrite", action="store_true",
                     help="with --engine spark: replace an existing --out folder")
    add_json_flag(rep)
    rep.set_defaults(run=cmd_replay)


def print_summary(summary: dict[str, Any], *, out: TextIO | None = None) -> None:
    """The human-readable replay summary (outcomes, rules, errors, partitions, producer)."""
    w = out or sys.stdout
    o = summary["outcomes"]
    total = sum(o.values()) or 1
    print(f"policy {summary['policy']} ({summary['profile']}, framing {summary['framing']}): "
          f"{summary['records']} records in {summary['batches']} batches", file=w)
    for name in ("accepted", "rejected", "collateral"):
        print(f"  {name:<11} {o[name]:>8}  {100 * o[name] / total:5.1f} %", file=w)
    print(f"  would be lost: {summary['records_lost']} records; delayed (retried): "
          f"{summary['records_delayed']}", file=w)
    if summary["by_rule"]:
        print("  by rule:", file=w)
        for r in summary["by_rule"]:
            flag = "" if r["exportable"] else "  (not exportable)"
            print(f"    {r['rule']:<24} {r['mode']:<8} failed {r['failed_records']:>7}  "
                  f"rejected {r['rejected_records']:>7}{flag}", file=w)
    print("  by broker error:", file=w)
    for name, c in sorted(summary["by_error"].items()):
        print(f"    {name:<30} {c['batches']:>6} batches {c['records']:>8} records", file=w)
    if len(summary["by_partition"]) > 1:
        print("  by partition:", file=w)
        for p in summary["by_partition"]:
            print(f"    {p['topic']}-{p['partition']:<6} accepted {p['accepted']:>7} rejected "
                  f"{p['rejected']:>7} collateral {p['collateral']:>7}", file=w)
    for note in summary["notes"]:
        print(f"  note: {note}", file=w)
    for issue in summary["issues"]:
        print(f"  issue: {issue['kind']} at byte {issue['position']}: {issue['message']}",
              file=w)


def cmd_replay(args: argparse.Namespace) -> int:
    """``kqlab replay``: the summary, or one JSON document; Parquet tables with ``--out``."""
    import orjson

    from kqlab.validate import replay

    policy = load_policy_file(args.policy)
    if args.engine == "spark":
        return _replay_spark(args, policy)
    verdicts = replay(args.source, policy, now=args.now, framing=args.framing,
                      profile=args.profile, linger_ms=args.linger_ms,
                      batch_size=args.batch_size)
    summary = verdicts.summary()
    if args.vet:
        from kqlab.policy import save_policy

        save_policy(verdicts.vet(policy, source=str(args.source)), args.vet)
        summary["vetted_policy"] = str(args.vet)
    if args.out:
        import pyarrow.parquet as pq

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(verdicts.records, out / "records.parquet")
        pq.write_table(verdicts.batches, out / "batches.parquet")
        pq.write_table(verdicts.rules, out / "rules.parquet")
        (out / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
        summary["out"] = str(out)
    if args.json:
        write_json(summary)
        return EXIT_OK
    print_summary(summary)
    if args.out:
        print(f"  verdict tables written to {args.out}/")
    if args.vet:
        print(f"  vetted policy (with provenance) written to {args.vet}")
    return EXIT_OK


def _replay_spark(args: argparse.Namespace, policy: Policy) -> int:
    """``kqlab replay --engine spark``: verdict Parquet under ``--out`` (or a temporary
    folder), the same summary as the local engine; exit 3 when a unit could not be read."""
    from kqlab.spark import replay_spark

    verdicts = replay_spark(args.source, policy, master=args.master, out=args.out,
                            overwrite=args.overwrite, now=args.now, framing=args.framing,
                            profile=args.profile, linger_ms=args.linger_ms,
                            batch_size=args.batch_size, progress=not args.json)
    summary = verdicts.summary()
    if args.vet:
        from kqlab.policy import save_policy

        save_policy(verdicts.vet(policy, source=str(args.source)), args.vet)
        summary["vetted_policy"] = str(args.vet)
    if args.json:
        write_json(summary)
    else:
        print_summary(summary)
        print(f"  engine: spark, {summary['units']} unit(s) in {summary['seconds']:.1f} s; "
              f"verdict Parquet files in {summary['out']}/")
        if args.vet:
            print(f"  vetted policy (with provenance) written to {args.vet}")
    for e in summary["errors"]:
        print(f"kqlab replay: {e['topic']}-{e['partition']} ({e['path']}) was not replayed: "
              f"{e['error']}: {e['message']}", file=sys.stderr)
    return EXIT_PARTIAL if summary["errors"] else EXIT_OK
