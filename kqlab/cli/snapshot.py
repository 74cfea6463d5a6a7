"""``kqlab snapshot``: keep log segments as a snapshot (Parquet tables + ``snapshot.json``).

A snapshot replays anywhere, without the broker's data directory; the segments are streamed
into it, so memory stays bounded.
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

_EXAMPLES = """\
  kqlab snapshot /var/lib/kafka/data/orders-0 orders-snap/
  kqlab snapshot orders-0/00000000000000000000.log snap/ --topic orders --partition 0
  kqlab snapshot orders-0 snap/ --overwrite --json | jq .num_records
  kqlab replay orders-snap/ --policy orders.yaml      # replays like the segments"""

__all__ = ["add_parser", "cmd_snapshot"]


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab snapshot``."""
    snap = add_parser_with_examples(
        sub, "snapshot", help="save log segments as a snapshot (Parquet + metadata) that "
        "replays anywhere", description="Stream a segment file or partition folder into a "
        "snapshot folder (Parquet tables + snapshot.json, exact framing) that kqlab replay, "
        "report and suggest read without the broker's data directory.", examples=_EXAMPLES)
    snap.add_argument("path", help="a segment file (*.log) or a partition folder")
    snap.add_argument("out", help="the snapshot folder to create")
    snap.add_argument("--topic", default=None, help="topic (default: from the folder name)")
    snap.add_argument("--partition", type=int, default=None, help="partition (default: from "
                      "the folder name)")
    snap.add_argument("--overwrite", action="store_true",
                      help="replace an existing snapshot at OUT")
    add_json_flag(snap)
    snap.set_defaults(run=cmd_snapshot)


def cmd_snapshot(args: argparse.Namespace) -> int:
    """``kqlab snapshot``: stream segments into a snapshot folder; print its metadata."""
    from kqlab.cli._ui import progress
    from kqlab.sources.segments import snapshot_from_segments

    with progress() as p:
        p.step(f"writing {args.path} into the snapshot {shown_dir(args.out)}")
        snap = snapshot_from_segments(args.path, args.out, topic=args.topic,
                                      partition=args.partition, overwrite=args.overwrite)
    meta = snap.metadata
    if args.json:
        write_json(meta)
        return EXIT_OK
    print(f"snapshot {shown_dir(args.out)}: topic {meta['topic']}, {meta['num_records']:,} "
          f"records in {meta['num_batches']:,} batches, framing {meta['framing']}")
    for issue in meta.get("issues", []):
        print(f"  issue: {issue['kind']} at byte {issue['position']}: {issue['message']}")
    return EXIT_OK
