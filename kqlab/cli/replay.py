"""``kqlab replay``: a sample through the broker checks and a policy, summarised.

The local engine writes the verdict tables itself with ``--out``; ``--engine spark`` runs one
Spark task per topic-partition and prints the same summary.  :func:`print_summary` is the
summary for people (tables) that ``kqlab demo`` prints too; every number in it is the verdict
core's (``Verdicts.summary()``), printed as it is.  ``--fail-over SHARE`` makes the replay a
CI gate: exit status 1 when more than that share of the records would not be appended; a
failing sample check of the policy (``checks:``, :mod:`kqlab.validate.sample_checks`) exits 1
too, and the summary lists every check (``checks`` in ``--json``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from kqlab.cli._common import (
    EXIT_FINDING,
    EXIT_OK,
    EXIT_PARTIAL,
    SubParsers,
    add_json_flag,
    add_parser_with_examples,
    load_policy_file,
    share,
    shown_dir,
    write_json,
)
from kqlab.cli._errored import errored_records, print_errored
from kqlab.cli._health import add_strict_flag, rule_findings

if TYPE_CHECKING:
    from kqlab.cli._ui import Progress
    from kqlab.policy.model import Policy
    from kqlab.validate.verdicts import Verdicts

__all__ = ["add_parser", "cmd_replay", "fail_over", "failed_checks", "print_checks",
           "print_summary"]

_EXAMPLES = """\
  kqlab replay orders-0 --policy orders.yaml --now 1763700000000
  kqlab replay data/ --policy orders.yaml --json | jq .outcomes      # a log directory
  kqlab replay orders-0 --policy orders.yaml --out verdicts/         # + Parquet tables
  kqlab replay orders-snap/ --policy orders.yaml --framing linger --linger-ms 5
  kqlab replay orders-0 --policy orders.yaml --fail-over 5%          # CI: exit 1 above 5 %
  kqlab replay data/ --policy orders.yaml --engine spark --master local[2] --out v/

--fail-over counts the records a broker would not append (rejected + collateral) over all
records replayed; a failing sample check (the policy's checks:) exits 1 too; with --engine
spark, status 3 (partitions not read) wins over 1."""


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab replay``."""
    rep = add_parser_with_examples(
        sub, "replay", help="replay a sample through the broker checks and a policy",
        description="Replay a sample (a segment file, partition folder, log directory or "
        "snapshot) through the broker's batch checks and a policy's rules, with the "
        "record-policy KIPs' semantics, and summarise what production would reject and why.",
        examples=_EXAMPLES)
    rep.add_argument("source", help="a segment file (*.log), a partition folder, a log "
                     "directory (of <topic>-<partition> folders) or a snapshot folder "
                     "(kqlab snapshot)")
    rep.add_argument("--policy", required=True, help="the policy file (YAML)")
    rep.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                     help="broker clock (default: the sample's own, its newest batch per "
                     "partition; printed, with a warning when the timestamp bounds reject "
                     "most of the sample)")
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
    rep.add_argument("--fail-over", type=share, default=None, metavar="SHARE",
                     help="exit with status 1 when more than SHARE of the records would not "
                     "be appended (rejected + collateral), e.g. 0.05 or 5%%: a CI gate")
    rep.add_argument("--engine", choices=("local", "spark"), default="local",
                     help="local: in this process; spark: one Spark task per topic-partition "
                     "(same verdicts; for samples that outgrow one process)")
    rep.add_argument("--master", default=None,
                     help="Spark master for --engine spark (default local[*]; e.g. local[2], "
                     "spark://host:7077, yarn)")
    rep.add_argument("--remote", default=None,
                     help="Spark Connect server for --engine spark (sc://host:15002), "
                     "instead of --master")
    rep.add_argument("--ship-env", default=None, metavar="ARCHIVE",
                     help="a packed environment with kqlab (kqlab.spark.ship."
                     "pack_environment, venv-pack, conda-pack) shipped to the executors "
                     "(spark.archives; over --remote a session artifact)")
    rep.add_argument("--overwrite", action="store_true",
                     help="with --engine spark: replace an existing --out folder")
    rep.add_argument("--errors", action="store_true",
                     help="list the records a rule could not judge (evaluation errors: "
                     "failures with status error in records.parquet), one row per rule")
    add_strict_flag(rep)
    add_json_flag(rep)
    rep.set_defaults(run=cmd_replay)


def fail_over(summary: dict[str, Any], threshold: float) -> dict[str, Any]:
    """The ``--fail-over`` verdict on a replay summary: how many records would not be
    appended (the summary's rejected + collateral counts), their share, and whether it is
    above ``threshold``."""
    o = summary["outcomes"]
    not_appended = int(o.get("rejected", 0)) + int(o.get("collateral", 0))
    records = int(summary["records"])
    part = not_appended / records if records else 0.0
    return {"threshold": threshold, "records": not_appended, "share": round(part, 6),
            "exceeded": part > threshold}


def print_summary(summary: dict[str, Any], *, out: TextIO | None = None) -> None:
    """The replay summary for people: outcomes, rules (with their evaluation errors), broker
    errors, partitions, notes and issues, as tables of the summary's own numbers."""
    from kqlab.cli._ui import console, show, styled, table

    c = console(out)
    o = summary["outcomes"]
    total = sum(o.values())
    c.print(styled(f"policy {summary['policy']} ({summary['profile']}, framing "
                   f"{summary['framing']}): {summary['records']:,} records in "
                   f"{summary['batches']:,} batches", "bold"))
    outcomes = [(styled(name, name), n, f"{100 * n / total:.1f} %" if total else "-")
                for name, n in o.items()]
    show(table(("outcome", "records", "share"), outcomes, right=("records", "share")), out=c)
    from kqlab.validate.verdicts import lost_delayed_text

    c.print(lost_delayed_text(summary))
    if summary["by_rule"]:
        by_rule = [(r["rule"], r["kind"], r["mode"], _failed_cell(r),
                    r["rejected_records"], styled(
                        f"{r['evaluation_errors']:,}" + (" (broken)" if r.get("broken") else ""),
                        "error") if r["evaluation_errors"] else 0,
                    "yes" if r["exportable"] else styled("no", "warning"))
                   for r in summary["by_rule"]]
        show(table(("rule", "kind", "mode", "failed", "rejected", "evaluation errors",
                    "exportable"), by_rule, title="by rule",
                   right=("failed", "rejected", "evaluation errors")), out=c)
    if summary["by_error"]:
        by_error = [(name, e["batches"], e["records"])
                    for name, e in sorted(summary["by_error"].items())]
        show(table(("broker error", "batches", "records"), by_error, title="by broker error",
                   right=("batches", "records")), out=c)
    if len(summary["by_partition"]) > 1:
        by_partition = [(f"{p['topic']}-{p['partition']}", p["accepted"], p["rejected"],
                         p["collateral"]) for p in summary["by_partition"]]
        show(table(("partition", "accepted", "rejected", "collateral"), by_partition,
                   title="by partition", right=("accepted", "rejected", "collateral")), out=c)
    for f in summary.get("rule_findings", ()):
        c.print(styled(f"{'error' if summary.get('strict_failed') else 'warning'}: "
                       f"{f['text']}", "error" if summary.get("strict_failed") else "warning"))
    for r in summary["by_rule"]:
        if r["evaluation_errors"] and not r.get("broken"):
            c.print(styled(f"evaluation errors: rule {r['rule']} raised an error on "
                           f"{r['evaluation_errors']:,} record(s) — they are failures with "
                           "status error in the record verdicts (failures.status in "
                           "records.parquet; kqlab replay --errors lists them)", "error"))
    if summary.get("checks"):
        print_checks(summary["checks"], out=out)
    for note in summary["notes"]:
        c.print(styled(f"note: {note}", "note"))
    for issue in summary["issues"]:
        c.print(styled(f"issue: {issue['kind']} at byte {issue['position']}: "
                       f"{issue['message']}", "warning"))


def _failed_cell(row: dict[str, Any]) -> Any:
    """A rule's failed count, marked when it reads a name no record has (its 0 is no
    evidence)."""
    from kqlab.cli._ui import styled

    if row.get("unseen"):
        return styled(f"{row['failed_records']:,} (unseen {row['unseen'][0]['what']})",
                      "warning")
    return row["failed_records"]


def print_checks(checks: list[dict[str, Any]], *, out: TextIO | None = None) -> None:
    """The sample checks: a table of status, observed value and thresholds, then one line
    for each failing or not evaluable check (its worst window, new values, why not)."""
    from kqlab.cli._ui import console, show, styled, table
    from kqlab.validate.sample_checks.results import describe_check

    c = console(out)
    styles = {"pass": "ok", "fail": "FAIL", "not_evaluable": "warning"}

    def number(row: dict[str, Any], value: float | None) -> str:
        if value is None:
            return "-"
        if row["metric"].endswith("_rate"):
            return f"{100 * value:.2f} %"
        return f"{value:,.4g}" if not float(value).is_integer() else f"{int(value):,}"

    rows = [(r["check"], r["kind"], styled(r["status"], styles[r["status"]]),
             number(r, r["observed"]), number(r, r["min"]), number(r, r["max"]),
             f"{r['failing_windows']} / {r['windows']}" if r["windows"] else "-")
            for r in checks]
    show(table(("check", "kind", "status", "observed", "min", "max", "failing"), rows,
               title="sample checks", right=("observed", "min", "max", "failing")), out=c)
    for r in checks:  # what went wrong, and a pass that has something to say (a clock ahead)
        if r["status"] != "pass" or (r.get("params") or {}).get("ahead_ms"):
            c.print(styled(describe_check(r), styles[r["status"]]))


def failed_checks(summary: dict[str, Any]) -> list[str]:
    """Ids of the sample checks that failed (the exit status counts them)."""
    return [r["check"] for r in summary.get("checks", []) if r["status"] == "fail"]


def _print_fail_over(verdict: dict[str, Any]) -> None:
    from kqlab.cli._ui import console, styled

    word = "FAIL" if verdict["exceeded"] else "ok"
    console().print(styled(
        f"fail-over {100 * verdict['threshold']:g} %: {verdict['records']:,} records "
        f"({100 * verdict['share']:.2f} %) would not be appended — {word}",
        "FAIL" if verdict["exceeded"] else "ok"))


def _streamed(args: argparse.Namespace) -> bool:
    """Log segments with exact framing (a log directory, a partition folder or a segment
    file) are replayed chunk by chunk (:func:`~kqlab.validate.stream.replay_stream`: the
    same verdicts, memory bounded by a chunk); snapshots and rebuilt framings are read
    whole."""
    from kqlab.sources.files import is_snapshot

    source = Path(args.source)
    return args.framing == "exact" and source.exists() and not is_snapshot(source)


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "time left unknown"
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d} left" if s >= 3600 else \
        f"{s // 60}:{s % 60:02d} left"


def _replay_streamed(args: argparse.Namespace, policy: Policy, p: Progress
                     ) -> tuple[Verdicts, str]:
    """The streamed local replay, with records, rate and time left on the progress bar (of
    segment bytes read); with where the clock came from, as :func:`_replay_local` says."""
    from kqlab.kafka.log import partition_dirs, segment_files
    from kqlab.validate.stream import StreamProgress, log_clock, log_partitions, replay_stream

    partitions = log_partitions(args.source)
    now, clock = args.now, "given"
    if now is None:  # the log's own clock, as a whole-sample replay reads it
        now = log_clock(partitions)
        clock = "sample" if now is not None else "wall clock"
    folders = len(partition_dirs(args.source))
    what = f"replaying {args.source}" + (f" ({folders} partitions)" if folders else "")
    total = sum(f.stat().st_size for part in partitions for f in segment_files(part))
    p.step(what, total=max(total, 1), count=False)

    def show(sp: StreamProgress) -> None:  # short: an 80-column terminal shows all of it
        p.update(completed=sp.bytes_read, description=(
            f"replaying: {sp.records:,} records, {sp.rate:,.0f} records/s, "
            f"{_eta(sp.eta_seconds)}"))

    return replay_stream(args.source, policy, now=now, profile=args.profile,
                         progress=show, base_dir=Path(args.policy).parent), clock


def _replay_local(args: argparse.Namespace, policy: Policy, p: Progress
                  ) -> tuple[Verdicts, str]:
    """The local replay, stage by stage so the progress display can follow it: read the
    sample, evaluate each rule (results cached), then the broker pass and the verdicts;
    with where the clock came from (``given``, ``sample``, ``wall clock``).  Log segments
    with exact framing stream instead (:func:`_replay_streamed`)."""
    from kqlab.kafka.log import partition_dirs
    from kqlab.validate.replayer import Replayer, with_implicit_rules

    if _streamed(args):
        return _replay_streamed(args, policy, p)
    folders = len(partition_dirs(args.source))  # a log directory: say how much there is
    p.step(f"reading {args.source}" + (f" ({folders} partitions)" if folders else ""))
    replayer = Replayer(args.source, now=args.now, framing=args.framing,
                        linger_ms=args.linger_ms, batch_size=args.batch_size,
                        base_dir=Path(args.policy).parent)
    rules = with_implicit_rules(policy).rules
    p.step(f"evaluating {len(rules)} rule(s)", total=len(rules))
    for rule in rules:
        p.update(description=f"evaluating rule {rule.id}")
        replayer.evaluate(policy.with_rules([rule]))  # cached: run() reuses every result
        p.advance()
    p.step(f"broker checks and verdicts ({replayer.sample.batches.num_rows:,} batches)")
    return replayer.run(policy, profile=args.profile), replayer.clock


def _print_clock(summary: dict[str, Any]) -> None:
    """The clock the timestamps were judged against, and where it came from."""
    import datetime

    when = datetime.datetime.fromtimestamp(summary["now"] / 1000, datetime.UTC)
    how = {"given": "as given (--now)",
           "sample": "the sample's newest batch — pass --now EPOCH_MS to judge against "
                     "another clock",
           "wall clock": "the wall clock"}[summary["clock"]]
    print(f"clock: now = {summary['now']} ({when:%Y-%m-%d %H:%M:%S} UTC), {how}")


def _warn_clock(verdicts: Any) -> None:
    """On stderr: the timestamp bounds reject most of the sample (the clock is suspect)."""
    from kqlab.validate.replayer import clock_warning

    warning = clock_warning(verdicts)
    if warning:
        print(f"kqlab replay: warning: {warning}", file=sys.stderr)


def cmd_replay(args: argparse.Namespace) -> int:
    """``kqlab replay``: the summary, or one JSON document; Parquet tables with ``--out``."""
    import orjson

    from kqlab.cli._ui import progress

    policy = load_policy_file(args.policy)
    if args.engine == "spark":
        return _replay_spark(args, policy)
    with progress() as p:
        verdicts, clock = _replay_local(args, policy, p)
        summary = verdicts.summary()
        summary["clock"] = clock
        if args.fail_over is not None:
            summary["fail_over"] = fail_over(summary, args.fail_over)
        if args.errors:
            summary["errored"] = errored_records(verdicts)
        if args.vet:
            from kqlab.policy import save_policy

            save_policy(verdicts.vet(policy, source=str(args.source)), args.vet)
            summary["vetted_policy"] = str(args.vet)
        if args.out:
            import pyarrow.parquet as pq

            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            tables = [("records", verdicts.records), ("batches", verdicts.batches),
                      ("rules", verdicts.rules)]
            if policy.checks:
                tables += [("checks", verdicts.checks()),
                           ("check_windows", verdicts.check_windows())]
            p.step(f"writing verdict tables to {shown_dir(out)}", total=len(tables) + 1)
            for name, t in tables:
                pq.write_table(t, out / f"{name}.parquet")
                p.advance()
            summary["out"] = str(out)
            (out / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
            p.advance()
    summary["rule_findings"], summary["strict_failed"] = rule_findings(
        "replay", summary["by_rule"], policy, args.strict, quiet=not args.json)
    status = EXIT_FINDING if summary.get("fail_over", {}).get("exceeded") or \
        failed_checks(summary) or summary["strict_failed"] else EXIT_OK
    _warn_clock(verdicts)
    if args.json:
        write_json(summary)
        return status
    print_summary(summary)
    if "errored" in summary:
        print_errored(summary["errored"])
    _print_clock(summary)
    if args.out:
        print(f"verdict tables written to {shown_dir(args.out)}")
    if args.vet:
        print(f"vetted policy (with provenance) written to {args.vet}")
    if "fail_over" in summary:
        _print_fail_over(summary["fail_over"])
    return status


def _replay_spark(args: argparse.Namespace, policy: Policy) -> int:
    """``kqlab replay --engine spark``: verdict Parquet under ``--out`` (or a temporary
    folder), the same summary as the local engine; exit 3 when a unit could not be read,
    else 1 when ``--fail-over`` is exceeded or a sample check failed."""
    from kqlab.cli._ui import progress_enabled
    from kqlab.spark import replay_spark, spark_session

    if args.remote and args.master:
        raise SystemExit("kqlab replay: --master and --remote exclude each other")
    spark = spark_session(args.master, remote=args.remote, environment=args.ship_env) \
        if args.remote or args.ship_env else None
    verdicts = replay_spark(args.source, policy, spark=spark, master=args.master, out=args.out,
                            overwrite=args.overwrite, now=args.now, framing=args.framing,
                            profile=args.profile, linger_ms=args.linger_ms,
                            batch_size=args.batch_size, progress=progress_enabled(),
                            base_dir=Path(args.policy).resolve().parent)
    summary = verdicts.summary()
    summary["clock"] = verdicts.clock  # the sample's own unless --now, as locally
    summary["rule_findings"], summary["strict_failed"] = rule_findings(
        "replay", summary["by_rule"], policy, args.strict, quiet=not args.json)
    _warn_clock(verdicts)
    if args.fail_over is not None:
        summary["fail_over"] = fail_over(summary, args.fail_over)
    if args.errors:
        summary["errored"] = errored_records(verdicts)
    if args.vet:
        from kqlab.policy import save_policy

        save_policy(verdicts.vet(policy, source=str(args.source)), args.vet)
        summary["vetted_policy"] = str(args.vet)
    if args.json:
        write_json(summary)
    else:
        print_summary(summary)
        if "errored" in summary:
            print_errored(summary["errored"])
        _print_clock(summary)
        print(f"engine: spark, {summary['units']} unit(s) in {summary['seconds']:.1f} s; "
              f"verdict Parquet files in {shown_dir(summary['out'])}")
        if args.vet:
            print(f"vetted policy (with provenance) written to {args.vet}")
        if "fail_over" in summary:
            _print_fail_over(summary["fail_over"])
    for e in summary["errors"]:
        print(f"kqlab replay: {e['topic']}-{e['partition']} ({e['path']}) was not replayed: "
              f"{e['error']}: {e['message']}", file=sys.stderr)
    if summary["errors"]:
        return EXIT_PARTIAL
    return EXIT_FINDING if summary.get("fail_over", {}).get("exceeded") or \
        failed_checks(summary) or summary["strict_failed"] else EXIT_OK
