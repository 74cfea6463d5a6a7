"""``kqlab sample``: a bounded sample of a live topic into a snapshot folder.

Read-only on the cluster: the sampler assigns partitions itself, never joins a group and never
commits (see :mod:`kqlab.sources.kafka`).  Progress goes to stderr, so ``--json`` leaves stdout
to the snapshot's metadata.
"""

from __future__ import annotations

import argparse
import sys

from kqlab.cli._common import EXIT_OK, SubParsers, add_json_flag, write_json

__all__ = ["add_parser", "cmd_sample"]


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab sample``."""
    smp = sub.add_parser("sample", help="sample a live topic into a snapshot",
                         description="Read a bounded sample of a live topic (assign only: "
                         "never joins a group, never commits) into a snapshot folder that "
                         "kqlab replay reads.")
    smp.add_argument("bootstrap", help="bootstrap servers, e.g. 127.0.0.1:9092")
    smp.add_argument("topic")
    smp.add_argument("out", help="the snapshot folder to create")
    smp.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                     help="librdkafka client config (SASL/SSL included; never stored)")
    smp.add_argument("--partitions", default=None, help="comma-separated partitions")
    smp.add_argument("--start", type=int, default=None, help="first offset (every partition)")
    smp.add_argument("--end", type=int, default=None, help="end offset, exclusive")
    smp.add_argument("--latest", type=int, default=None, help="the last N records per partition")
    smp.add_argument("--max", type=int, default=None, dest="max_records",
                     help="cap on records (spread over partitions)")
    smp.add_argument("--fraction", type=float, default=None,
                     help="seeded random fraction of the range (0-1]")
    smp.add_argument("--seed", type=int, default=0)
    smp.add_argument("--exact", action="store_true",
                     help="fetch raw batches for exact framing (producer ids, codecs, CRCs)")
    smp.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    smp.add_argument("--overwrite", action="store_true", help="replace a snapshot at OUT")
    add_json_flag(smp)
    smp.set_defaults(run=cmd_sample)


def cmd_sample(args: argparse.Namespace) -> int:
    """``kqlab sample``: a live topic into a snapshot, with progress on stderr."""
    from kqlab.kafka.configs import parse_assignments
    from kqlab.sources.kafka_snapshot import sample_to_snapshot

    config = {"bootstrap.servers": args.bootstrap, **parse_assignments(args.config)}
    parts = [int(p) for p in args.partitions.split(",")] if args.partitions else None

    def progress(records: int, nbytes: int, done: int, rate: float) -> None:
        if not args.json:
            print(f"\r  {records} records, {nbytes / 1e6:.1f} MB, {done} partition(s) done, "
                  f"{rate:,.0f} records/s", end="", file=sys.stderr, flush=True)

    snap = sample_to_snapshot(
        config, args.topic, args.out, exact_framing=args.exact, overwrite=args.overwrite,
        partitions=parts, start_offset=args.start, end_offset=args.end, latest=args.latest,
        max_records=args.max_records, random_fraction=args.fraction, seed=args.seed,
        timeout_s=args.timeout, progress=progress)
    meta = snap.metadata
    if args.json:
        write_json(meta)
        return EXIT_OK
    print(f"\nsnapshot {args.out}: topic {meta['topic']}, {meta['num_records']} records, "
          f"framing {meta['framing']}, partitions {snap.partitions}")
    return EXIT_OK
