"""The ``kqlab export`` command: a vetted policy to the configuration of an enforcement target.

``--target all`` writes every target plus the fidelity report (``fidelity.json`` +
``fidelity.html``).  With ``--sample`` the requested targets whose engine runs here
(Confluent's serializer, the embedded Tansu broker, the kqlab gate) are run on that sample and
every claim of ``exact`` is proven, withdrawn or left ``unverified``
(:mod:`kqlab.export.fidelity`).

Exit status: 0 when the export enforces the policy as vetted; 1 when a round trip contradicts
a claim (always), or a requested target enforces a ``reject`` rule only approximately or not
at all (unless ``--accept-approximations``); 2 for a wrong request.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

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
from kqlab.cli._health import add_strict_flag, rule_findings

__all__ = ["add_parser", "cmd_export"]


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab export``."""
    from kqlab.export import TARGETS

    ex = add_parser_with_examples(
        sub, "export", help="export a policy to an enforcement target's config",
        description="Translate a (vetted) policy into the configuration one enforcement "
        "target takes, with per-rule fidelity (exact / approximate / not expressible) and the "
        "policy's provenance embedded. --target all writes every target and the fidelity "
        "report (HTML + JSON). With --sample, the targets that can run here are run on the "
        "sample and each claim of exact is proven or withdrawn. Exits 1 when a claim is "
        "contradicted or a reject rule is not enforced exactly.", examples="""\
  kqlab export orders.vetted.yaml --target confluent --out export/
  kqlab export orders.vetted.yaml --target all --sample snap/ --out export/   # proven claims
  kqlab export orders.yaml --target kroxylicious --accept-approximations --json
  kqlab export orders.yaml --target confluent --dlq-topic orders-dlq --schema orders.avsc""")
    ex.add_argument("policy", help="the policy file (YAML)")
    ex.add_argument("--target", required=True, choices=[*TARGETS, "all"],
                    help="the enforcement target, or all")
    ex.add_argument("--out", default=None, metavar="DIR",
                    help="write the files under DIR (default: print a summary only)")
    add_strict_flag(ex)
    add_json_flag(ex)
    ex.add_argument("--sample", default=None, metavar="PATH",
                    help="run the targets' own engines on this sample (segment file, "
                    "partition folder or snapshot) and prove or withdraw every claim")
    ex.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                    help="clock for the round trips' replay (default: the sample's own clock)")
    ex.add_argument("--dlq-topic", default=None, metavar="TOPIC",
                    help="confluent: failing rules copy the record to TOPIC (onFailure DLQ)")
    ex.add_argument("--schema", default=None, metavar="FILE.avsc",
                    help="the Avro writer schema of the value (default: from the policy's "
                    "schema source, registry or folder)")
    ex.add_argument("--accept-approximations", action="store_true",
                    help="exit 0 although a requested target enforces some reject rule only "
                    "approximately or not at all (contradicted claims still exit 1)")
    ex.set_defaults(run=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    """``kqlab export POLICY --target T``: write the files, print what each rule became."""
    from kqlab.export import TARGETS
    from kqlab.export.fidelity import fidelity_report

    policy = load_policy_file(args.policy)
    prepare_registries(policy)  # the demo's in-memory registry, filled as its demo does
    options: dict[str, Any] = {}
    if args.dlq_topic:
        options["dlq_topic"] = args.dlq_topic
    if args.schema:
        try:
            options["schema"] = Path(args.schema).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"--schema {args.schema}: {exc.strerror}") from None
    targets = list(TARGETS) if args.target == "all" else [args.target]
    from kqlab.cli._ui import progress

    with progress() as shown:
        shown.step(f"exporting to {args.target}" + (f", round trips on {args.sample}"
                                                     if args.sample else ""))
        sample: Any = args.sample
        rule_rows: list[dict[str, Any]] = []
        if sample is not None:  # one replay: its rule table here, its decodes for the trips
            from kqlab.validate.replayer import Replayer

            sample = Replayer(args.sample, now=args.now)
            rule_rows = sample.run(policy).rules.to_pylist()
        report = fidelity_report(policy, sample=sample, now=args.now,
                                 targets=tuple(targets), **options)
    if args.target != "all" and args.target in report.skipped:
        from kqlab.export import ExportError

        raise ExportError(report.skipped[args.target])
    problems = report.problems(targets, accept_approximations=args.accept_approximations)
    doc: dict[str, Any] = {"policy": policy.name, "target": args.target,
                           "exports": {n: e.to_dict() for n, e in report.exports.items()},
                           "verdicts": report.counts(), "skipped": report.skipped,
                           "warnings": report.warnings,
                           "roundtrips": [r.to_dict() for r in report.roundtrips],
                           "problems": problems}
    if args.out:
        written = [str(p) for e in report.exports.values() for p in e.write(args.out)]
        if "topic-policy" in report.exports and not args.json:
            _plugin_jar(Path(args.out))
        if args.target == "all" or args.sample:
            written += [str(p) for p in report.write(args.out)]
        doc["written"] = written
    doc["rule_findings"], failing = rule_findings("export", rule_rows, policy, args.strict)
    status = EXIT_FINDING if problems or failing else EXIT_OK
    if args.json:
        write_json(doc)
        return status
    _print(report, doc)
    for p in problems:
        print(f"kqlab export: {p}", file=sys.stderr)
    return status


def _plugin_jar(out: Path) -> list[str]:
    """The topic-policy broker plugin, built if needed; the line saying where it is (it stays
    in the source tree: an export folder holds text only), or, when it cannot be built, how
    to build it, on stderr.  ``out`` is the export folder the line refers to."""
    from kqlab.export import ExportError
    from kqlab.export.topic_policy import plugin_jar

    try:
        jar = plugin_jar()
    except ExportError as exc:
        print(f"kqlab export: topic-policy: the plugin jar was not built: {exc}", file=sys.stderr)
        return []
    print(f"  topic-policy plugin: {jar} (put it on every controller's classpath, with "
          f"{out / 'topic-policy' / 'server.properties'})")
    return [str(jar)]


def _print(report: Any, doc: dict[str, Any]) -> None:
    from kqlab.export.fidelity import verdict_of

    for rid, why in report.warnings.items():
        print(f"WARNING rule {rid}: {why}")
    for name, e in report.exports.items():
        rt = report.roundtrip(name)
        c = doc["verdicts"][name]
        print(f"{name}: {e.title} — " + ", ".join(f"{v} {k}" for k, v in c.items() if v))
        for f in e.fidelity:
            v = verdict_of(f, name, rt)
            label = f.rule + (" (implicit)" if f.implicit else "")
            print(f"  {label:<28} {v.verdict:<16} {v.why}")
    for name, why in report.skipped.items():
        print(f"{name}: not exported — {why}")
    for rt in report.roundtrips:
        if not rt.ran:
            print(f"round trip {rt.target}: not run — {rt.reason}")
            continue
        verdict = "EQUAL" if rt.equal else "DIFFERENT"
        print(f"round trip {rt.target}: {verdict} — target refused {rt.refused}, replay "
              f"rejected {rt.expected} of {rt.judged} judged records"
              + (f", {rt.attribution_differs} under another rule" if rt.attribution_differs
                 else ""))
        for rid, check in rt.checks.items():
            said = "; ".join(check.sentences(rt.target)) or \
                f"refused {check.refused} = rejected {check.expected} of {check.judged}"
            print(f"  {rid:<28} {'EQUAL' if check.equal else 'DIFFERENT':<10} {said}")
    for path in doc.get("written", ()):
        print(f"  wrote {Path(path)}")
