"""``kqlab init``: a starter policy for one's own topic, and the next three commands.

A newcomer has a topic nobody described yet.  ``kqlab init`` takes what they have — a live
topic (``BOOTSTRAP TOPIC``: sampled first, read-only, into a snapshot beside the policy), a
log folder (a ``<topic>-<partition>`` folder or a folder of them) or a snapshot — infers the
key and value formats from the bytes (:func:`kqlab.serde.infer.infer_format`), runs the rule
suggestions on the sample and writes the policy with each rule's evidence as a comment
(:func:`kqlab.authoring.starter.start_policy`).  The replay counts it prints are those of the
written file replayed on the sample: ``kqlab replay`` on the same sample prints the same.

An existing policy (or sample folder) is never replaced without ``--force``: one line on
stderr, exit status 2, nothing sampled or written.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kqlab.cli._common import (
    EXIT_OK,
    SubParsers,
    add_json_flag,
    add_parser_with_examples,
    shown_dir,
    write_json,
)
from kqlab.errors import KqlabError

if TYPE_CHECKING:
    from kqlab.authoring.starter import InitResult

__all__ = ["DEFAULT_LATEST", "InitSourceError", "add_parser", "cmd_init"]

#: records sampled per partition of a live topic unless ``--latest`` says otherwise
DEFAULT_LATEST = 10_000

_EXAMPLES = """\
  kqlab init 127.0.0.1:9092 orders                  # a live topic: sampled, then a policy
  kqlab init 127.0.0.1:9092 payments --registry http://127.0.0.1:8081 --latest 5000
  kqlab init data/orders-0                          # a partition folder (or a log folder)
  kqlab init orders-snap/ --out policies/orders.yaml --force
  kqlab init data/orders-0 --json | jq .outcomes     # for scripts

A live topic is sampled into --sample-dir (default: <topic>-sample/ beside the policy);
the policy goes to --out (default: <topic>.policy.yaml here)."""

#: ``host:port`` (a comma-separated list of them): a bootstrap, not a path
_BOOTSTRAP = re.compile(r"^\[?[\w.:-]+\]?:\d+(,\[?[\w.:-]+\]?:\d+)*$")


class InitSourceError(KqlabError, ValueError):
    """``SOURCE [TOPIC]`` names nothing ``kqlab init`` can read; the message says what to
    pass."""


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab init``."""
    p = add_parser_with_examples(
        sub, "init", help="write a starter policy for a topic (live, a log folder or a "
        "snapshot)",
        description="Start a policy for one's own topic: sample it if it is live, infer the "
        "key and value formats (Confluent framing and the registry's schema types, JSON, "
        "text, bytes), run the rule suggestions on the sample and write the policy with each "
        "rule's evidence and counts as comments; then print the next three commands.",
        examples=_EXAMPLES)
    p.add_argument("source", help="a bootstrap host:port (with TOPIC), a log folder (a "
                   "<topic>-<partition> folder or a folder of them) or a snapshot folder")
    p.add_argument("topic", nargs="?", default=None, help="the live topic (with a bootstrap)")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="the policy file to write (default: <topic>.policy.yaml here)")
    p.add_argument("--registry", default=None, metavar="URL",
                   help="the Schema Registry of Confluent-framed keys/values (their Avro, "
                   "Protobuf or JSON Schema types are read from it)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing policy file (and sample folder)")
    live = p.add_argument_group("a live topic")
    live.add_argument("--latest", type=int, default=DEFAULT_LATEST, metavar="N",
                      help=f"sample the last N records of each partition (default "
                      f"{DEFAULT_LATEST:,})")
    live.add_argument("--sample-dir", default=None, metavar="DIR",
                      help="the snapshot folder to sample into (default: <topic>-sample/ "
                      "beside the policy)")
    live.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                      help="librdkafka client config (SASL/SSL included; never stored)")
    live.add_argument("--timeout", type=float, default=15.0, metavar="S",
                      help="seconds per broker request (default 15)")
    p.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                   help="broker clock (default: the sample's newest batch)")
    add_json_flag(p)
    p.set_defaults(run=cmd_init)


def _local_kind(source: str) -> str:
    """``snapshot`` or ``log`` for an existing path; :class:`InitSourceError` otherwise."""
    from kqlab.kafka.log import partition_dirs
    from kqlab.sources.files import is_snapshot

    path = Path(source)
    if not path.exists():
        if _BOOTSTRAP.match(source):
            raise InitSourceError(f"{source} looks like a bootstrap: name the topic too, "
                                  f"kqlab init {source} TOPIC")
        raise InitSourceError(f"{source}: no such file or folder; pass a log folder (a "
                              "<topic>-<partition> folder or a folder of them), a snapshot "
                              "(kqlab sample) or a live topic: BOOTSTRAP TOPIC")
    if not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
        raise InitSourceError(f"{source} is not readable (permission denied): pass a folder "
                              "you may read, or run as a user who may")
    if is_snapshot(path):
        return "snapshot"
    if path.is_file() or any(path.glob("*.log")) or partition_dirs(path):
        return "log"
    raise InitSourceError(f"{source} holds no log segments (*.log), no <topic>-<partition> "
                          "folders and no snapshot.json: pass a partition folder, a log "
                          "folder or a snapshot (kqlab sample)")


def _topic_of(source: str, kind: str) -> str:
    """The topic a local source holds, from its names (for the default ``--out``)."""
    from kqlab.kafka.log import partition_dirs

    path = Path(source)
    if kind == "snapshot":
        from kqlab.sources.files import Snapshot

        return str(Snapshot.open(path).metadata.get("topic") or path.name)
    dirs = partition_dirs(path)
    topics = sorted({d.name.rsplit("-", 1)[0] for d in dirs})
    if len(topics) > 1:
        raise InitSourceError(f"{source} holds {len(topics)} topics ({', '.join(topics)}): "
                              f"pass one topic's partition folder, e.g. kqlab init {dirs[0]}")
    folder = dirs[0] if dirs else (path.parent if path.is_file() else path)
    name = folder.resolve().name
    return name.rsplit("-", 1)[0] if re.search(r"-\d+$", name) else name


def _refuse_existing(path: Path, what: str, flag: str) -> None:
    from kqlab.authoring.starter import PolicyExistsError

    if path.exists():
        raise PolicyExistsError(f"{path} exists: pass --force to replace it, or {flag} "
                                f"another {what}")


def _sample_live(args: argparse.Namespace, out: Path) -> tuple[str, dict[str, Any]]:
    """Sample the live topic into the snapshot folder; (its path as shown, what was read)."""
    from kqlab.authoring.starter import EmptySampleError
    from kqlab.cli._ui import progress
    from kqlab.kafka.configs import parse_assignments
    from kqlab.sources.kafka_errors import EmptyRangeError
    from kqlab.sources.kafka_snapshot import sample_to_snapshot
    from kqlab.sources.progress import format_progress

    folder = Path(args.sample_dir) if args.sample_dir else out.parent / f"{args.topic}-sample"
    if not args.force:
        _refuse_existing(folder, "folder", "--sample-dir")
    if args.latest is not None and args.latest < 1:
        raise InitSourceError(f"--latest {args.latest}: sample at least 1 record per partition")
    config = {"bootstrap.servers": args.source, **parse_assignments(args.config)}
    with progress() as p:
        p.step(f"sampling {args.topic} from {args.source}")

        def report(records: int, nbytes: int, done: int, rate: float) -> None:
            p.update(completed=done, description=f"sampling {args.topic}: "
                     + format_progress(records, nbytes, done, rate, None))

        def read(**ranges: Any) -> Any:
            return sample_to_snapshot(config, args.topic, folder, exact_framing=True,
                                      overwrite=args.force or bool(ranges),
                                      timeout_s=args.timeout, progress=report, **ranges)

        created = not folder.exists()
        try:
            snap = read(latest=args.latest)
        except BaseException as exc:
            if created:  # nothing of this run left behind: the next run needs no --force
                shutil.rmtree(folder, ignore_errors=True)
            if not isinstance(exc, EmptyRangeError):
                raise
            raise EmptySampleError(f"topic {args.topic} on {args.source} holds no records: "
                                   "produce some first, or pass a log folder or a snapshot "
                                   "that has data") from None
        widened, cut = _whole_batches(snap.metadata)
        if cut:
            p.step(f"sampling {args.topic} again from the first batches' starts")
            snap = read(**widened)
    meta = snap.metadata
    shown = shown_dir(folder)
    return shown, {"bootstrap": args.source, "topic": args.topic, "snapshot": shown,
                   "records": int(meta["num_records"]), "partitions": list(snap.partitions),
                   "latest": args.latest, "framing": meta["framing"],
                   "widened": {str(k): v for k, v in sorted(cut.items())}}


def _whole_batches(meta: dict[str, Any]) -> tuple[dict[str, Any], dict[int, int]]:
    """The ranges that start each partition at its first batch's base offset, and the
    partitions whose last N records began inside a batch with that offset (both empty when
    none did).

    A broker judges whole batches, and an exact-framed replay needs every record of each
    batch it holds; ``--latest N`` cuts the first batch of a partition whose batches hold
    many records.  Sampling from that batch's start (up to the same end) keeps it whole.
    """
    parts = meta.get("partitions", {})
    cut = {int(p): int(v["batch_first_offset"]) for p, v in parts.items()
           if v.get("records") and int(v["batch_first_offset"]) < int(v["first_offset"])}
    if not cut:
        return {}, {}
    ranges = {int(r["partition"]): r for r in meta["ranges"]}
    return {"partitions": sorted(ranges),
            "start_offset": {p: cut.get(p, int(r["start"])) for p, r in ranges.items()},
            "end_offset": {p: int(r["end"]) for p, r in ranges.items()}}, cut


def _resolve(args: argparse.Namespace) -> tuple[str, str, Path]:
    """(kind, topic, policy path) of the request, refused early when wrong."""
    if args.topic is not None:
        if Path(args.source).exists():
            raise InitSourceError(f"{args.source} is a local path: TOPIC is only for a live "
                                  f"topic (kqlab init BOOTSTRAP TOPIC); run kqlab init "
                                  f"{args.source}")
        if not _BOOTSTRAP.match(args.source):
            raise InitSourceError(f"{args.source} is not a bootstrap host:port (e.g. "
                                  "127.0.0.1:9092) and not an existing path")
        kind, topic = "live", args.topic
    else:
        kind = _local_kind(args.source)
        topic = _topic_of(args.source, kind)
    out = Path(args.out) if args.out else Path(f"{_file_stem(topic)}.policy.yaml")
    if args.out and (args.out.endswith(("/", os.sep)) or out.is_dir()):
        out = out / f"{_file_stem(topic)}.policy.yaml"
    if not args.force:
        _refuse_existing(out, "file", "--out")
    return kind, topic, out


def _file_stem(topic: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", topic).strip("-.") or "topic"


def cmd_init(args: argparse.Namespace) -> int:
    """``kqlab init``: sample if live, infer, suggest, write; the summary or one JSON doc."""
    from kqlab.authoring.starter import start_policy

    kind, _, out = _resolve(args)
    sampled: dict[str, Any] | None = None
    if kind == "live":
        sample, sampled = _sample_live(args, out)
    else:
        sample = args.source
    result = start_policy(sample, out, shown_sample=sample, registry=args.registry,
                          now=args.now, force=args.force)
    source = {"kind": kind, "given": args.source, **({"topic": args.topic} if args.topic
                                                      else {})}
    if args.json:
        write_json({"source": source, "sampled": sampled, **result.to_dict()})
        return EXIT_OK
    _print(result, kind, sampled)
    return EXIT_OK


def _print(result: InitResult, kind: str, sampled: dict[str, Any] | None) -> None:
    """For people: what was read, the formats and why, the rules, the replay, what next."""
    from kqlab.cli._ui import console, show, styled, table

    c = console()
    if sampled is not None:
        parts = ", ".join(map(str, sampled["partitions"]))
        plural = "s" if len(sampled["partitions"]) > 1 else ""
        c.print(f"sampled {sampled['records']:,} records of {sampled['topic']} from "
                f"{sampled['bootstrap']} (the last {sampled['latest']:,} of partition{plural} "
                f"{parts}) into {sampled['snapshot']}")
        for part, start in sampled["widened"].items():
            c.print(f"  partition {part} from offset {start:,}: its first batch whole (a "
                    "broker judges whole batches)")
    c.print(f"read {result.records:,} records of topic {result.topic} from {result.sample}"
            f" ({'snapshot' if kind != 'log' else 'log segments'}, framing {result.framing})")
    for guess in (result.key, result.value):
        c.print(styled(f"{guess.role}: {guess.format}", "bold"), f"— {guess.evidence}")
    rows = [(r["id"], r["kind"], r["failed"], r["rejected"], r["evidence"])
            for r in result.rules]
    show(table(("rule", "kind", "failed", "rejected", "evidence"), rows,
               title=f"{len(rows)} rule(s) written to {result.policy_path}",
               right=("failed", "rejected")), out=c)
    o = result.outcomes
    c.print(f"replay of {result.policy_path} on the sample: {o.get('accepted', 0):,} accepted, "
            f"{o.get('rejected', 0):,} rejected, {o.get('collateral', 0):,} collateral")
    for note in result.notes:
        c.print(styled(f"note: {note}", "note"))
    c.print(styled("next:", "bold"))
    for cmd in result.next_commands:
        print(f"  {cmd}")
    sys.stdout.flush()
