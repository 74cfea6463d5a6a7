"""The ``kqlab export`` command: a vetted policy to the configuration of an enforcement target.

``--target all`` writes every target plus the fidelity report (``fidelity.json`` +
``fidelity.html``); with ``--sample`` the report also runs the round-trip proofs on that
sample.  Exit status 0 on success, 2 for a wrong request.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kqlab.cli._common import (
    EXIT_OK,
    SubParsers,
    add_json_flag,
    load_policy_file,
    prepare_registries,
    write_json,
)

__all__ = ["add_parser", "cmd_export"]


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab export``."""
    from kqlab.export import TARGETS

    ex = sub.add_parser("export", help="export a policy to an enforcement target's config",
                        description="Translate a (vetted) policy into the configuration one "
                        "enforcement target takes, with per-rule fidelity (exact / approximate "
                        "/ not expressible) and the policy's provenance embedded. --target all "
                        "writes every target and the fidelity report (HTML + JSON).")
    ex.add_argument("policy", help="the policy file (YAML)")
    ex.add_argument("--target", required=True, choices=[*TARGETS, "all"],
                    help="the enforcement target, or all")
    ex.add_argument("--out", default=None, metavar="DIR",
                    help="write the files under DIR (default: print a summary only)")
    add_json_flag(ex)
    ex.add_argument("--sample", default=None, metavar="PATH",
                    help="with --target all: run the round-trip proofs on this sample "
                    "(segment file, partition folder or snapshot)")
    ex.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                    help="clock for the round trips' replay (default: the wall clock)")
    ex.add_argument("--dlq-topic", default=None, metavar="TOPIC",
                    help="confluent: failing rules copy the record to TOPIC (onFailure DLQ)")
    ex.set_defaults(run=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    """``kqlab export POLICY --target T``: write the files, print what each rule became."""
    from kqlab.export import export
    from kqlab.export.fidelity import fidelity_report

    policy = load_policy_file(args.policy)
    prepare_registries(policy)  # the demo's in-memory registry, filled as its demo does
    options: dict[str, Any] = {"policy_path": str(args.policy)}
    if args.dlq_topic:
        options["dlq_topic"] = args.dlq_topic
    doc: dict[str, Any] = {"policy": policy.name, "target": args.target}
    if args.target == "all":
        report = fidelity_report(policy, sample=args.sample, now=args.now, **options)
        exports = report.exports
        doc["exports"] = {n: e.to_dict() for n, e in exports.items()}
        doc["skipped"] = report.skipped
        doc["roundtrips"] = [r.to_dict() for r in report.roundtrips]
        if args.out:
            written = [str(p) for e in exports.values() for p in e.write(args.out)]
            written += [str(p) for p in report.write(args.out)]
            doc["written"] = written
    else:
        import inspect

        from kqlab.export import TARGETS

        fn = __import__(TARGETS[args.target].module, fromlist=["build"]).build
        accepted = inspect.signature(fn).parameters
        e = export(policy, args.target, **{k: v for k, v in options.items() if k in accepted})
        exports = {args.target: e}
        doc["exports"] = {args.target: e.to_dict()}
        if args.out:
            doc["written"] = [str(p) for p in e.write(args.out)]
    if args.json:
        write_json(doc)
        return EXIT_OK
    for name, e in exports.items():
        c = e.counts()
        print(f"{name}: {e.title} — {c['exact']} exact, {c['approximate']} approximate, "
              f"{c['not expressible']} not expressible")
        for f in e.fidelity:
            print(f"  {f.rule:<24} {f.status:<16} {f.how}")
    for name, why in doc.get("skipped", {}).items():
        print(f"{name}: not exported — {why}")
    for rt in doc.get("roundtrips", ()):
        if rt["ran"]:
            verdict = "EQUAL" if rt["equal"] else "DIFFERENT"
            print(f"round trip {rt['target']}: {verdict} — target refused {rt['refused']}, "
                  f"replay rejected {rt['expected']} of {rt['judged']} judged records")
        else:
            print(f"round trip {rt['target']}: not run — {rt['reason']}")
    for path in doc.get("written", ()):
        print(f"  wrote {Path(path)}")
    return EXIT_OK
