"""``kqlab dlq``: triage a dead-letter topic (``inspect``) and redrive what an amended policy
passes (``redrive``), on top of :mod:`kqlab.dlq`.

``inspect`` is read-only (assign, no group, no commit).  ``redrive`` is a dry run unless
``--execute`` is given; executing writes a redrive log (``--log``, default
``<topic>.redrive.jsonl`` in the working directory) so that a re-run — also after a crash —
never sends a dead letter twice.  Exit status 1: some redriven records were not delivered
(named in the output; the next run retries them); 2: the request was wrong (a missing topic,
an invalid policy, a log another redrive holds).
"""

from __future__ import annotations

import argparse
import datetime
from typing import TYPE_CHECKING, Any

from kqlab.cli._common import (
    EXIT_FINDING,
    EXIT_OK,
    SubParsers,
    add_json_flag,
    add_parser_with_examples,
    load_policy_file,
    prepare_registries,
    write_json,
)

if TYPE_CHECKING:
    from kqlab.cli._ui import Progress
    from kqlab.dlq import DeadLetters, RedriveResult

__all__ = ["add_parser", "cmd_inspect", "cmd_redrive"]

_EXAMPLES = """\
  kqlab dlq inspect orders.dlq --bootstrap 127.0.0.1:9092            # why, from where, when
  kqlab dlq inspect orders.dlq --bootstrap broker:9093 --config security.protocol=SSL --json
  kqlab dlq redrive orders.dlq --bootstrap 127.0.0.1:9092 --policy orders-v2.yaml   # dry run
  kqlab dlq redrive orders.dlq --bootstrap 127.0.0.1:9092 --policy orders-v2.yaml --execute
  kqlab dlq redrive orders.dlq --bootstrap 127.0.0.1:9092 --policy orders-v2.yaml \\
        --to orders.retry --execute --log redrives/orders.jsonl --json"""

_INSPECT_EXAMPLES = """\
  kqlab dlq inspect orders.dlq --bootstrap 127.0.0.1:9092
  kqlab dlq inspect orders.dlq --bootstrap broker:9093 --config sasl.mechanism=PLAIN --json
  kqlab dlq inspect orders.dlq --bootstrap 127.0.0.1:9092 --partitions 0,2 --examples 10"""

_REDRIVE_EXAMPLES = """\
  kqlab dlq redrive orders.dlq --bootstrap 127.0.0.1:9092 --policy orders-v2.yaml   # dry run
  kqlab dlq redrive orders.dlq --bootstrap 127.0.0.1:9092 --policy orders-v2.yaml --execute
  kqlab dlq redrive orders.dlq --bootstrap 127.0.0.1:9092 --policy orders-v2.yaml \\
        --to orders.retry --execute --log redrives/orders.jsonl --json
  kqlab dlq redrive orders.dlq --bootstrap 127.0.0.1:9092 --policy p.yaml --now 1763700000000"""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", help="the dead-letter topic")
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT",
                   help="bootstrap servers of the cluster holding it")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="librdkafka client setting for every client (SASL/SSL...; repeatable; "
                   "never printed)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="per request, and without new records while reading (default 30)")
    # the group parser has --json too: `kqlab dlq --json inspect T` and `... inspect T --json`
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print one JSON document")


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab dlq`` with its ``inspect`` and ``redrive`` commands."""
    dlq = add_parser_with_examples(
        sub, "dlq", help="triage a dead-letter topic and redrive what now passes",
        description="Read a dead-letter topic and understand its failure headers (kqlab's "
        "gate, Confluent's rule DLQ, Kafka Connect, Kafka Streams; anything else is 'unknown "
        "reason'): `inspect` groups the dead letters by reason, source partition and time. "
        "`redrive` re-validates them against an amended policy and sends the ones that pass "
        "back to their source topic (or --to TOPIC): a dry run unless --execute, exactly once "
        "across re-runs and crashes (a redrive log).", examples=_EXAMPLES)
    add_json_flag(dlq)
    cmds = dlq.add_subparsers(dest="dlq_command", required=True, metavar="{inspect,redrive}")

    ins = add_parser_with_examples(
        cmds, "inspect", help="why the dead letters failed, from where, when",
        description="Read the whole dead-letter topic (read-only: no group, no commit) and "
        "show the dead letters by family (who dead-lettered them), by reason (rule or "
        "exception), by source topic-partition and over time; dead letters whose failure "
        "headers are missing or malformed are counted as 'unknown reason' with what was "
        "wrong.", examples=_INSPECT_EXAMPLES)
    _common(ins)
    ins.add_argument("--partitions", default=None, metavar="P,P",
                     help="comma-separated partitions of the dead-letter topic (default all)")
    ins.add_argument("--examples", type=int, default=3, metavar="N",
                     help="unknown-reason dead letters shown in full (default 3)")
    ins.set_defaults(run=cmd_inspect)

    red = add_parser_with_examples(
        cmds, "redrive", help="re-validate and send back what an amended policy passes",
        description="Re-validate every dead letter's original record (key, value, headers "
        "without the failure headers, timestamp) against --policy, as the redrive would "
        "produce it, and send the ones that pass to their source topic (from the failure "
        "headers; their source partition) or to --to TOPIC. Dry run by default: nothing is "
        "sent and nothing written. --execute sends with an idempotent producer, adds the "
        "header kqlab.redrive=<dlq topic>:<partition>:<offset> and keeps a redrive log "
        "(--log): a re-run never sends a dead letter twice, and after a crash the next run "
        "checks the target for what the interrupted one sent.", examples=_REDRIVE_EXAMPLES)
    _common(red)
    red.add_argument("--policy", required=True, help="the amended policy file (YAML)")
    red.add_argument("--to", default=None, metavar="TOPIC",
                     help="send every passing record here instead of its source topic")
    red.add_argument("--execute", action="store_true",
                     help="send (default: a dry run that sends and writes nothing)")
    red.add_argument("--log", default=None, metavar="FILE",
                     help="the redrive log (JSON lines; default <topic>.redrive.jsonl here); "
                     "a dry run reads it if it exists")
    red.add_argument("--now", type=int, default=None, metavar="MS",
                     help="the broker clock for timestamp checks, epoch ms (default: now)")
    red.add_argument("--chunk", type=int, default=10_000, metavar="N",
                     help="records per logged chunk (intent, send, acknowledged, done; "
                     "default 10000)")
    red.add_argument("--examples", type=int, default=5, metavar="N",
                     help="dead letters that stay shown with why (default 5)")
    red.set_defaults(run=cmd_redrive)


def _client(args: argparse.Namespace) -> dict[str, Any]:
    from kqlab.kafka.configs import parse_assignments

    return {**parse_assignments(args.config), "bootstrap.servers": args.bootstrap}


def _iso(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S")


class _StageProgress:
    """:mod:`kqlab.dlq`'s ``progress(stage, done, total)`` drawn as the CLI's progress: a new
    stage (the text before any ``:``) starts a bar or spinner, the same stage updates it."""

    def __init__(self, p: Progress) -> None:
        self.p = p
        self.key: str | None = None

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        key = stage.split(":", 1)[0]
        if key != self.key:
            self.key = key
            self.p.step(stage, total=total)
        self.p.update(completed=done, total=total, description=stage)


# ------------------------------------------------------------------------------- inspect
def cmd_inspect(args: argparse.Namespace) -> int:
    """``kqlab dlq inspect TOPIC``: read, parse and show the dead letters."""
    from kqlab.cli._ui import progress
    from kqlab.dlq import read_dead_letters

    parts = [int(p) for p in args.partitions.split(",")] if args.partitions else None
    with progress() as p:
        p.step(f"reading {args.topic}")

        def report(records: int, nbytes: int, done: int, rate: float) -> None:
            p.update(description=f"reading {args.topic}: {records:,} dead letters")

        dead = read_dead_letters(_client(args), args.topic, partitions=parts,
                                 timeout_s=args.timeout, progress=report)
    if getattr(args, "json", False):
        write_json(dead.summary(examples=args.examples))
        return EXIT_OK
    _show_inspect(dead, args.examples)
    return EXIT_OK


def _show_inspect(dead: DeadLetters, examples: int) -> None:
    from kqlab.cli._ui import show, styled, table
    from kqlab.dlq import FAMILIES

    s = dead.summary(examples=examples)
    n = s["records"]
    parts = len(s["partitions"])
    head = (f"kqlab dlq inspect {dead.topic} — {n:,} dead letter(s) on {dead.bootstrap} "
            f"({parts} partition(s))")
    if n:
        head += f", {_iso(s['first_timestamp'])} … {_iso(s['last_timestamp'])} UTC"
    show(head)
    if not n:
        show("  the topic holds no records")
        return
    labels = {f.name: f.label for f in FAMILIES}
    fams = [f"{labels.get(k, 'no known failure headers')} {v:,}"
            for k, v in s["by_family"].items() if v]
    show("  by family: " + " · ".join(fams), "")
    rows = [[styled(r["reason"], "warning" if r["reason"] == "unknown reason" else None),
             r["family"], r["records"], f"{100 * r['share']:.1f}%", _iso(r["first_timestamp"]),
             _iso(r["last_timestamp"]), ", ".join(r["source_topics"]) or "-",
             (r["message"] or "-")[:80]] for r in s["by_reason"]]
    show(table(["reason", "family", "records", "share", "first", "last", "source topics",
                "message (first)"], rows, title="by reason", right=["records", "share"]), "")
    src = [[r["source_topic"] or "(not said)",
            "-" if r["source_partition"] is None else r["source_partition"], r["records"],
            "-" if r["first_offset"] is None else f"{r['first_offset']:,}–{r['last_offset']:,}",
            r["reasons"]] for r in s["by_source"]]
    show(table(["source topic", "partition", "records", "source offsets", "reasons"], src,
               title="by source", right=["partition", "records", "reasons"]), "")
    tl, bucket_ms = dead.timeline(max_buckets=24)
    if tl.num_rows:
        cols = [c for c in tl.column_names if c not in ("bucket", "total")][:5]
        rows = [[_iso(r["bucket"]), r["total"], *[r[c] for c in cols]] for r in tl.to_pylist()]
        show(table(["bucket (UTC)", "dead letters", *cols], rows,
                   title=f"over time ({_bucket_words(bucket_ms)} buckets, record timestamps)",
                   right=["dead letters", *cols]), "")
    unk = s["unknown_reason"]
    if unk["records"]:
        show(styled(f"unknown reason: {unk['records']:,} dead letter(s) (kept, shown here)",
                    "warning"))
        for text, count in list(unk["problems"].items())[:8]:
            show(f"  {count:>8,}  {text}")
        for ex in unk["examples"]:
            show(f"  e.g. {dead.topic}[{ex['dlq_partition']}]@{ex['dlq_offset']} "
                 f"({ex['family']}): {'; '.join(ex['problems']) or '-'}")
    if s["redriven_before"]:
        show(f"redriven before: {s['redriven_before']:,} dead letter(s) carry a kqlab.redrive "
             "marker (redriven once and dead-lettered again)")


def _bucket_words(ms: int) -> str:
    for unit, size in (("day", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


# ------------------------------------------------------------------------------- redrive
def cmd_redrive(args: argparse.Namespace) -> int:
    """``kqlab dlq redrive TOPIC --policy P``: plan (and with --execute, send)."""
    from kqlab.cli._ui import progress
    from kqlab.dlq import redrive
    from kqlab.dlq.redrive import default_log_path

    policy = load_policy_file(args.policy)
    prepare_registries(policy)
    log = args.log
    if log is None:
        default = default_log_path(args.topic)
        log = str(default) if args.execute or default.exists() else None
    with progress() as p:
        result = redrive(_client(args), args.topic, policy, to=args.to, execute=args.execute,
                         log=log, now=args.now, chunk_size=args.chunk,
                         timeout_s=args.timeout, progress=_StageProgress(p))
    status = EXIT_OK if result.ok else EXIT_FINDING
    if getattr(args, "json", False):
        write_json(result.summary(examples=args.examples))
        return status
    _show_redrive(result, args.examples)
    return status


def _show_redrive(result: RedriveResult, examples: int) -> None:
    from kqlab.cli._ui import show, styled, table
    from kqlab.dlq import WHY

    s = result.summary(examples=examples)
    mode = styled("DRY RUN: nothing sent, nothing written (add --execute to send)", "note") \
        if result.dry_run else styled("EXECUTED", "ok" if result.ok else "FAIL")
    show(f"kqlab dlq redrive {s['dlq']} — policy {s['policy']} ({s['policy_hash'][:19]}…)")
    show(mode)
    show(f"  read {s['read']:,} dead letter(s)")
    rec = s["recovered"]
    if rec["pending"]:
        show(f"  recovered an interrupted redrive: {rec['found']:,} of {rec['pending']:,} "
             f"found in the target (done), {rec['missing']:,} not found (sent again now)")
    go = s["redrive"]
    verb = "would redrive" if result.dry_run else "redrove"
    targets = ", ".join(f"{t} {c:,}" for t, c in go["by_target"].items()) or "-"
    show(f"  {verb} {go['records']:,} → {targets}")
    stay = s["stay"]
    if stay["records"]:
        rows = [[WHY.get(w, w), c] for w, c in stay["by_why"].items()]
        show(table(["stay: why", "records"], rows, title=f"stay {stay['records']:,}",
                   right=["records"]), "")
        if stay["by_rule"]:
            show(table(["still fails", "records"], [[r, c] for r, c in stay["by_rule"].items()],
                       right=["records"]), "")
        ex = [[f"[{e['dlq_partition']}]@{e['dlq_offset']}", e["reason"], WHY.get(e["why"],
               e["why"]), e["rule"] or "-", (e["message"] or "-")[:80]] for e in stay["examples"]]
        show(table(["dead letter", "reason", "why", "rule", "message"], ex,
                   title="e.g."), "")
    for f in s["failed"][:examples]:
        show(styled(f"  not delivered: [{f['partition']}]@{f['offset']}: {f['error']}", "error"))
    for f in s["unknown"][:examples]:
        show(styled(f"  delivery unknown: [{f['partition']}]@{f['offset']}: {f['error']}",
                    "warning"))
    if s["log"]:
        run = f" (run {s['run']})" if s["run"] else ""
        show(f"  log: {s['log']}{run}")
    if s["records_per_s"]:
        show(f"  sent at {s['records_per_s']:,.0f} records/s")
    for note in s["notes"]:
        show(f"  note: {note}")
