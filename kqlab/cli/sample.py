"""``kqlab sample``: a bounded sample of a live topic into a snapshot folder.

Read-only on the cluster: the sampler assigns partitions itself, never joins a group and never
commits (see :mod:`kqlab.sources.kafka`).  Progress goes to stderr, so ``--json`` leaves stdout
to the snapshot's metadata.
"""

from __future__ import annotations

import argparse

from kqlab.cli._common import (
    EXIT_OK,
    SubParsers,
    add_json_flag,
    add_parser_with_examples,
    shown_dir,
    write_json,
)

__all__ = ["add_parser", "cmd_sample"]


_EXAMPLES = """\
  kqlab sample 127.0.0.1:9092 orders orders-snap/ --latest 10000 --exact
  kqlab sample broker:9093 orders snap/ --max 50000 --fraction 0.1 --seed 7 \\
        --config security.protocol=SASL_SSL --config sasl.mechanism=PLAIN
  kqlab sample 127.0.0.1:9092 orders snap/ --partitions 0,2 --start 1000 --end 2000 --json
  kqlab replay orders-snap/ --policy orders.yaml      # then replay the snapshot"""


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab sample``."""
    smp = add_parser_with_examples(
        sub, "sample", help="sample a live topic into a snapshot",
        description="Read a bounded sample of a live topic (assign only: never joins a group, "
        "never commits) into a snapshot folder that kqlab replay reads.", examples=_EXAMPLES)
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
    from kqlab.cli._ui import progress
    from kqlab.kafka.configs import parse_assignments
    from kqlab.sources.kafka_snapshot import sample_to_snapshot
    from kqlab.sources.progress import format_progress

    config = {"bootstrap.servers": args.bootstrap, **parse_assignments(args.config)}
    parts = [int(p) for p in args.partitions.split(",")] if args.partitions else None
    with progress() as p:
        p.step(f"sampling {args.topic}", total=len(parts) if parts else None)

        def report(records: int, nbytes: int, done: int, rate: float) -> None:
            p.update(completed=done, description=f"sampling {args.topic}: "
                     + format_progress(records, nbytes, done, rate, len(parts or ()) or None))

        snap = sample_to_snapshot(
            config, args.topic, args.out, exact_framing=args.exact, overwrite=args.overwrite,
            partitions=parts, start_offset=args.start, end_offset=args.end,
            latest=args.latest, max_records=args.max_records, random_fraction=args.fraction,
            seed=args.seed, timeout_s=args.timeout, progress=report)
    meta = snap.metadata
    if args.json:
        write_json(meta)
        return EXIT_OK
    print(f"snapshot {shown_dir(args.out)}: topic {meta['topic']}, {meta['num_records']:,} "
          f"records, framing {meta['framing']}, partitions "
          f"{', '.join(map(str, snap.partitions))}")
    return EXIT_OK
