"""The ``kqlab gate`` command: run the validating gate (:mod:`kqlab.gate`) until SIGTERM/SIGINT.

Exit status: 0 after a graceful stop (the batch in flight finished, flushed and committed), 1
when a delivery failed (that batch was not committed; restart to retry it), 2 for a wrong
request (missing policy, edited policy under a gate.yaml, topics missing ...).

Output: metric lines on stderr every ``--log-interval`` seconds; ``--json-metrics`` prints them
as JSON lines on stdout instead (one per interval, for log shippers); ``--json`` prints one
JSON document on stdout when the gate stops: the final metrics, with ``"event": "stopped"``
(or ``"failed"`` and the ``error`` after a failed delivery).
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from kqlab.cli._common import (
    EXIT_FINDING,
    EXIT_OK,
    SubParsers,
    add_parser_with_examples,
    load_policy_file,
    prepare_registries,
    write_json,
)

__all__ = ["add_parser", "cmd_gate"]


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab gate``."""
    g = add_parser_with_examples(
        sub, "gate", help="consume, validate, forward valid records, dead-letter the rest",
        description="The validating gate: consume the source topic in a consumer group, judge "
        "every record with the policy (the replay's rules plus the record-level broker "
        "checks), forward valid records unchanged to the sink and invalid ones to the "
        "dead-letter topic with failure headers; commit only after delivery. Stops gracefully "
        "on SIGTERM/SIGINT.", examples="""\
  kqlab gate --policy orders.yaml --source orders-raw --sink orders --dlq orders-dlq \\
        --bootstrap broker:9092
  kqlab gate --config export/gate/gate.yaml --bootstrap broker:9092 -X security.protocol=SSL
  kqlab gate --config gate.yaml --bootstrap broker:9092 --json-metrics | my-log-shipper""")
    g.add_argument("--policy", default=None, help="the policy file (YAML); with --config: "
                   "overrides the file's policy.path (the content hash is still checked)")
    g.add_argument("--source", default=None, help="the raw topic to consume")
    g.add_argument("--sink", default=None, help="the clean topic for valid records")
    g.add_argument("--dlq", default=None, help="the dead-letter topic for invalid records")
    g.add_argument("--bootstrap", required=True, help="bootstrap servers, e.g. 127.0.0.1:9092")
    g.add_argument("--group", default=None,
                   help="consumer group id (default kqlab-gate-<policy name>); start more "
                   "gates with the same group to scale out")
    g.add_argument("--config", default=None, metavar="GATE_YAML",
                   help="the gate.yaml from `kqlab export --target gate` (policy + topics)")
    g.add_argument("-X", "--client-config", action="append", default=[], metavar="KEY=VALUE",
                   help="librdkafka setting for both clients (security, client.id ...); "
                   "prefix consumer. or producer. for one of them; repeatable")
    g.add_argument("--partitioning", choices=("same", "key"), default="same",
                   help="same: keep each record's partition (default; per-partition order); "
                   "key: the producer's partitioner")
    g.add_argument("--batch-max", type=int, default=20_000,
                   help="most records per poll batch (one judge, flush and commit each)")
    g.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                   help="fixed clock for the timestamp check (default: the wall clock)")
    g.add_argument("--health-port", type=int, default=None, metavar="PORT",
                   help="serve /health, /metrics, /metrics.json on 127.0.0.1:PORT (0: any)")
    g.add_argument("--log-interval", type=float, default=10.0, metavar="S",
                   help="seconds between metric lines (0: only the final one)")
    out = g.add_mutually_exclusive_group()
    out.add_argument("--json-metrics", action="store_true",
                     help="metric lines as JSON objects on stdout (the last one at exit)")
    out.add_argument("--json", action="store_true",
                     help="print one JSON document at exit: the final metrics (metric lines "
                     "stay on stderr)")
    g.set_defaults(run=cmd_gate)


def _client_settings(items: list[str]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    both: dict[str, str] = {}
    cons: dict[str, str] = {}
    prod: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"-X expects KEY=VALUE, got {item!r}")
        if key.startswith("consumer."):
            cons[key.removeprefix("consumer.")] = value
        elif key.startswith("producer."):
            prod[key.removeprefix("producer.")] = value
        else:
            both[key] = value
    return both, cons, prod


def cmd_gate(args: argparse.Namespace) -> int:
    """``kqlab gate ...``: build the gate, install the signal handlers, run it."""
    from kqlab.gate import Gate, GateError, GateSettings, Route, load_gate_file

    routes: tuple[Route, ...] = ()
    policy_path = args.policy
    content_hash = None
    if args.config:
        gf = load_gate_file(args.config)
        routes, content_hash = gf.routes, gf.content_hash
        policy_path = policy_path or str(gf.policy_path)
    if policy_path is None:
        raise ValueError("--policy or --config is required")
    policy = load_policy_file(policy_path)
    if content_hash and policy.content_hash() != content_hash:
        raise GateError(f"policy {policy_path} has content hash {policy.content_hash()[:16]}… "
                        f"but the gate config expects {content_hash[:16]}…: the policy was "
                        "edited after export; vet and export it again")
    given = (args.source, args.sink, args.dlq)
    if any(given):
        if not all(given):
            raise ValueError("--source, --sink and --dlq go together")
        routes = (Route(source=args.source, sink=args.sink, dlq=args.dlq),)
    if not routes:
        raise ValueError("no topics: pass --source/--sink/--dlq or a --config with topics")
    prepare_registries(policy)  # the demo's in-memory schema registry, as every command fills it
    both, cons, prod = _client_settings(args.client_config)
    settings = GateSettings(
        routes=routes, bootstrap=args.bootstrap,
        group=args.group or f"kqlab-gate-{policy.name}", client=both, consumer=cons,
        producer=prod, batch_max=args.batch_max, partitioning=args.partitioning, now=args.now,
        health_port=args.health_port, log_interval=args.log_interval,
        json_metrics=args.json_metrics)
    gate = Gate(policy, settings)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        gate.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        final = gate.run()
    except GateError as exc:
        if not gate.subscribed:  # a startup problem: a wrong request
            raise
        print(f"kqlab gate: error: {exc}", file=sys.stderr)
        if args.json:
            write_json({"event": "failed", "error": str(exc), **gate.metrics.snapshot()})
        return EXIT_FINDING
    if args.json:
        write_json({"event": "stopped", **final})
    return EXIT_OK
