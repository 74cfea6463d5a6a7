"""``kqlab whatif``: one policy on one sample at every enforcement point, side by side.

Per point (the broker's record policy per KIP-940/729/686, the Confluent serializer, the
Kroxylicious proxy, the gate, the Spark enforcer): records accepted, refused, lost as
collateral of a refused batch, dead-lettered; what producers are told (error, retriable or
not, what the Java client does next); and the rules the point cannot express.  Every number is
a replay of the sample (:mod:`kqlab.rollout.whatif`).  Exit status 0 when the what-if was
computed (what it predicts is a finding in the output), 2 for a wrong request.
"""

from __future__ import annotations

import argparse
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
from kqlab.cli._health import add_strict_flag, rule_findings
from kqlab.rollout.errors import RolloutError

if TYPE_CHECKING:
    from kqlab.policy.model import Policy
    from kqlab.rollout.whatif import WhatIf

__all__ = ["add_parser", "add_sample_options", "client_header", "cmd_whatif", "policy_file",
           "print_whatif"]

_EXAMPLES = """\
  kqlab whatif orders.yaml --sample orders-0 --now 1763700000000
  kqlab whatif orders.yaml --sample demo/orders-0 --sample demo/orders-1 --json | jq .targets
  kqlab whatif orders.yaml --sample snap/ --point kip-940 --point gate --client-header app
  kqlab whatif orders.yaml --sample snap/ --framing linger --dlq-topic orders.dlq"""


def add_sample_options(p: argparse.ArgumentParser) -> None:
    """The sample options ``whatif`` and ``plan`` share."""
    p.add_argument("policy", help="the policy file (YAML)")
    p.add_argument("--sample", action="append", required=True, metavar="PATH",
                   help="a segment file, partition folder, log directory or snapshot; repeat "
                   "it to replay several partition folders as one sample")
    p.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                   help="broker clock (default: the sample's own, its newest batch per "
                   "partition)")
    p.add_argument("--framing", choices=("exact", "single", "linger"), default="exact",
                   help="the framing of the whole-batch points (the per-record ones always "
                   "judge each record alone)")
    p.add_argument("--client-header", default="auto", metavar="NAME",
                   help="the header naming the producing client (default auto: client.id, "
                   "source, ... when present; '' for none)")


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab whatif``."""
    from kqlab.rollout.points import POINTS

    wi = add_parser_with_examples(
        sub, "whatif", help="what a policy would do at each enforcement point",
        description="Replay a sample under a policy as each enforcement point would enforce "
        "it — the broker's record policy per KIP-940/729/686 (whole batch), the Confluent "
        "data contract (per record, before the produce), the Kroxylicious proxy, the kqlab "
        "gate and the Spark enforcer (per record, behind the topic) — and show side by side "
        "the records refused, lost as collateral, dead-lettered and accepted, what producers "
        "are told, and which rules each point cannot express (its exporter's fidelity).",
        examples=_EXAMPLES)
    add_sample_options(wi)
    wi.add_argument("--point", action="append", default=None,
                    choices=[p.name for p in POINTS],
                    help="only this enforcement point (repeatable; default: all)")
    wi.add_argument("--dlq-topic", default=None, metavar="TOPIC",
                    help="confluent: the contract copies refused records to TOPIC "
                    "(onFailure DLQ)")
    add_strict_flag(wi)
    add_json_flag(wi)
    wi.set_defaults(run=cmd_whatif)


def policy_file(path: str) -> Policy:
    """The policy file ``path`` (:func:`~kqlab.cli._common.load_policy_file`); a file that
    cannot be read is a wrong request (status 2, one line), not a traceback."""
    try:
        return load_policy_file(path)
    except OSError as exc:
        raise RolloutError(f"policy {path}: {exc.strerror or exc}") from None


def client_header(value: str) -> str | None:
    """``--client-header``: '' means none."""
    return value or None


def cmd_whatif(args: argparse.Namespace) -> int:
    """``kqlab whatif POLICY --sample S``."""
    from kqlab.cli._ui import progress
    from kqlab.rollout.whatif import what_if

    policy = policy_file(args.policy)
    prepare_registries(policy)
    with progress() as shown:
        shown.step(f"replaying {', '.join(args.sample)} at each enforcement point")
        result = what_if(policy, args.sample, now=args.now, framing=args.framing,
                         points=args.point, client_header=client_header(args.client_header),
                         dlq_topic=args.dlq_topic)
    doc = result.to_dict()  # its rule_findings are the library's
    _, failing = rule_findings("whatif", result.rule_rows, policy, args.strict)
    status = EXIT_FINDING if failing else EXIT_OK
    if args.json:
        write_json(doc)
        return status
    print_whatif(result)
    return status


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f} %"


def print_whatif(w: WhatIf) -> None:
    """The what-if for people: the table per point, what producers are told, the rules a
    point cannot express."""
    from kqlab.cli._ui import console, show, styled, table

    c = console()
    c.print(styled(f"policy {w.policy}: {w.records:,} records in {w.batches:,} batches "
                   f"(framing {w.framing}, now={w.now}, {w.clock} clock)", "bold"))
    rows: list[tuple[Any, ...]] = []
    for t in w.targets:
        k = t.counts
        if not t.available:
            rows.append((t.point.name, t.point.where, t.point.granularity,
                         styled("not available", "warning"), "-", "-", "-", "-", "-"))
            continue
        rows.append((t.point.name, t.point.where, t.point.granularity, k["accepted"],
                     styled(f"{k['refused']:,}", "rejected") if k["refused"] else 0,
                     styled(f"{k['collateral']:,}", "collateral") if k["collateral"] else 0,
                     k["in_dlq"], k["lost"], _rate(t.reject_rate)))
    show(table(("point", "where", "per", "accepted", "refused", "collateral",
                "dead-lettered", "lost", "refused + collateral"), rows,
               right=("accepted", "refused", "collateral", "dead-lettered", "lost",
                      "refused + collateral")), out=c)
    answers = [(t.point.name, a.who, a.error_name if a.error_code is None else
                f"{a.error_name} ({a.error_code})", "yes" if a.retriable else "no", a.action,
                a.records)
               for t in w.targets if t.outcome is not None for a in t.outcome.answers
               if a.error_code != 0]
    if answers:
        show(table(("point", "who answers", "error", "retriable", "client does",
                    "records"), answers, title="what producers are told",
                   right=("records",)), out=c)
    for t in w.targets:
        for rid, why in t.fidelity.not_enforced.items():
            c.print(styled(f"{t.point.name}: cannot express rule {rid} — {why}", "warning"))
        for rid, how in t.fidelity.approximate.items():
            c.print(styled(f"{t.point.name}: rule {rid} approximate — {how}", "note"))
        for note in (t.point.caveat, t.fidelity.note):
            if note:
                c.print(styled(f"{t.point.name}: {note}", "note"))
