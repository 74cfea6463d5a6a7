"""``kqlab inspect``: dump (and optionally validate) the record batches of log segments.

Reads like Kafka's ``kafka-dump-log``: one line per batch, with ``--records`` one line per
record, with ``--validate`` the broker's verdict per batch.  The path is streamed in chunks of
:data:`CHUNK` batches, so memory stays bounded on segments of any size.

Records are attached to the batch *row* they were decoded from, not looked up by base offset:
a log can hold several batches with the same base offset (a rewritten batch, a reconstructed
sample), and each must show only its own records (see :func:`records_per_row`).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kqlab.cli._common import (
    EXIT_OK,
    SubParsers,
    add_json_flag,
    add_parser_with_examples,
    now_ms,
    write_json,
)
from kqlab.errors import KqlabError

if TYPE_CHECKING:
    import pyarrow as pa

    from kqlab.kafka.log import LogIssue, RawBatch
    from kqlab.kafka.validator import BatchOutcome

__all__ = ["CHUNK", "add_parser", "cmd_inspect", "record_rows", "records_per_row"]

#: batches decoded (and printed) per step
CHUNK = 2048

_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}

_EXAMPLES = """\
  kqlab inspect /var/lib/kafka/data/orders-0                 # one line per batch
  kqlab inspect orders-0/00000000000000000000.log --records  # plus one line per record
  kqlab inspect orders-0 --validate --config cleanup.policy=compact \\
        --config message.timestamp.before.max.ms=86400000 --now 1763700000000
  kqlab inspect orders-0 --validate --json | jq .totals      # one JSON document"""


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab inspect``."""
    ins = add_parser_with_examples(
        sub, "inspect", help="dump (and optionally validate) log segment batches",
        description="Dump the record batches of a log segment file or a partition folder, "
        "like Kafka's kafka-dump-log; with --validate, say what a broker with the given topic "
        "configs would answer if each batch were produced now.", examples=_EXAMPLES)
    ins.add_argument("path", help="a segment file (*.log) or a partition folder (<topic>-<n>)")
    ins.add_argument("--records", action="store_true",
                     help="also list each record: offset, timestamp, key/value sizes, headers")
    ins.add_argument("--validate", action="store_true",
                     help="run the broker's batch validation on every batch")
    ins.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                     help="topic/broker config for --validate, Kafka's names "
                     "(e.g. cleanup.policy=compact); repeatable")
    ins.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                     help="broker clock for timestamp checks (default: the wall clock)")
    ins.add_argument("--broker-version", default="4.0", metavar="V",
                     help="broker release to emulate, e.g. 3.9 or 4.0 (default 4.0)")
    ins.add_argument("--produce-version", type=int, default=9, metavar="N",
                     help="produce request version (default 9; 0-2 allow v0/v1 message sets "
                     "on brokers before 4.0)")
    ins.add_argument("--source", choices=("log", "producer"), default="log",
                     help="'log': bytes as a broker stored them (base offsets and the "
                     "LogAppendTime bit were set by the broker); 'producer': bytes as sent")
    ins.add_argument("--topic", default=None, help="topic name (default: from the folder name)")
    ins.add_argument("--partition", type=int, default=None,
                     help="partition (default: from the folder name)")
    add_json_flag(ins)
    ins.set_defaults(run=cmd_inspect)


def record_rows(records: pa.Table, counts: list[int]) -> list[list[dict[str, Any]]]:
    """The record summaries of each batch row: ``counts[i]`` records belong to row ``i``.

    ``records`` is in batch-row order (as :class:`~kqlab.kafka.batch.TableBuilder` emits it),
    so row ``i`` owns the slice after the first ``sum(counts[:i])`` records.  Sizes are
    computed with Arrow kernels.
    """
    import pyarrow.compute as pc

    assert sum(counts) == records.num_rows, (records.num_rows, sum(counts))
    if records.num_rows == 0:
        return [[] for _ in counts]
    key_size = pc.fill_null(pc.binary_length(records["key"]), -1).to_pylist()
    value_size = pc.fill_null(pc.binary_length(records["value"]), -1).to_pylist()
    offsets = records["offset"].to_pylist()
    ts = records["timestamp"].to_pylist()
    tstype = records["timestamp_type"].to_pylist()
    batch_index = records["batch_index"].to_pylist()
    headers = records["headers"].to_pylist()
    out: list[list[dict[str, Any]]] = []
    start = 0
    for n in counts:
        out.append([{
            "offset": offsets[i], "batch_index": batch_index[i], "timestamp": ts[i],
            "timestamp_type": tstype[i], "key_size": key_size[i], "value_size": value_size[i],
            "headers": [{"key": h["key"],
                         "value_size": -1 if h["value"] is None else len(h["value"])}
                        for h in headers[i]],
        } for i in range(start, start + n)])
        start += n
    return out


def records_per_row(records: pa.Table, batches: pa.Table) -> list[int] | None:
    """How many of ``records`` (in log order) each batch row decoded to, from the rows alone.

    A row decoded without error holds its ``record_count`` records; the counts are then
    checked against the records themselves (each row's first record has ``batch_index`` 0
    and the row's base offset).  ``None`` when a row has a decode error (it may have
    decoded only part of its records) or the check fails: the caller must decode the rows
    one by one to know (:func:`_decode_one_by_one`).
    """
    import numpy as np
    import pyarrow.compute as pc

    if batches.num_rows == 0:
        return [] if records.num_rows == 0 else None
    if batches.column("decode_error").null_count != batches.num_rows:
        return None
    counts = pc.fill_null(batches.column("record_count"), 0).to_numpy().astype(np.int64)
    if counts.sum() != records.num_rows:
        return None
    starts = (np.cumsum(counts) - counts)[counts > 0]
    first_index = records.column("batch_index").to_numpy()[starts]
    first_offset = records.column("batch_offset").to_numpy()[starts]
    row_offset = batches.column("batch_offset").to_numpy(zero_copy_only=False)[counts > 0]
    if (first_index != 0).any() or (first_offset != row_offset).any():
        return None
    return counts.tolist()


def _decode_one_by_one(topic: str, partition: int, raw: list[RawBatch]
                       ) -> tuple[pa.Table, list[int]]:
    """The records of ``raw`` and how many each batch decoded to, decoding one batch at a
    time (slower than in bulk, so only for chunks where :func:`records_per_row` cannot tell)."""
    from kqlab.kafka.batch import TableBuilder

    builder = TableBuilder(topic, partition)
    counts = []
    for item in raw:
        before = builder.records_added
        builder.add(item.position, item.data)
        builder.flush()
        counts.append(builder.records_added - before)
    records, _ = builder.take()
    return records, counts


def _inspect_chunks(args: argparse.Namespace
                    ) -> Iterator[tuple[list[dict[str, Any]], list[LogIssue]]]:
    """Stream the path in chunks: yield (batch dicts, issues) — memory stays bounded."""
    from kqlab.kafka.batch import TableBuilder
    from kqlab.kafka.configs import parse_assignments
    from kqlab.kafka.log import LogIssue, iter_log_batches, topic_partition_of
    from kqlab.kafka.validator import PartitionValidator

    t, p = topic_partition_of(args.path)
    topic = t if args.topic is None else args.topic
    partition = p if args.partition is None else args.partition
    validator = None
    if args.validate:
        validator = PartitionValidator(
            topic, partition, parse_assignments(args.config),
            broker_version=args.broker_version, now=now_ms(args.now),
            source=args.source, produce_version=args.produce_version)
    elif args.config or args.now is not None:
        raise KqlabError("--config and --now only apply with --validate")
    builder = TableBuilder(topic, partition)
    outcomes: list[BatchOutcome] = []
    issues: list[LogIssue] = []
    #: with --records: the chunk's batches, in case they must be decoded one by one
    raw: list[RawBatch] = []

    def drain() -> tuple[list[dict[str, Any]], list[LogIssue]]:
        records, batches = builder.take()
        rows = batches.to_pylist()
        per_row: list[list[dict[str, Any]]] = []
        if args.records:
            counts = records_per_row(records, batches)
            if counts is None:
                records, counts = _decode_one_by_one(topic, partition, raw)
            per_row = record_rows(records, counts)
        for i, row in enumerate(rows):
            row["last_offset"] = (None if row["batch_offset"] is None or
                                  row["last_offset_delta"] is None else
                                  row["batch_offset"] + row["last_offset_delta"])
            if args.records:
                row["records"] = per_row[i]
            if validator is not None:
                row["verdict"] = outcomes[i].to_dict()
        outcomes.clear()
        raw.clear()
        return rows, issues[:]

    pending = 0
    for item in iter_log_batches(args.path):
        if isinstance(item, LogIssue):
            issues.append(item)
            continue
        builder.add(item.position, item.data)
        if args.records:
            raw.append(item)
        if validator is not None:
            outcomes.append(validator.validate(item.data, position=item.position))
        pending += 1
        if pending >= CHUNK:
            yield drain()
            issues.clear()
            pending = 0
    yield drain()


def _fmt_batch(row: dict[str, Any]) -> str:
    tstype = _TIMESTAMP_TYPES.get(row["timestamp_type"], "NoTimestamp")
    parts = [f"baseOffset: {row['batch_offset']}", f"lastOffset: {row['last_offset']}",
             f"count: {row['record_count']}", f"baseSequence: {row['base_sequence']}",
             f"producerId: {row['producer_id']}", f"producerEpoch: {row['producer_epoch']}",
             f"partitionLeaderEpoch: {row['partition_leader_epoch']}",
             f"isTransactional: {str(row['is_transactional']).lower()}",
             f"isControl: {str(row['is_control']).lower()}", f"position: {row['position']}",
             f"{tstype}: {row['max_timestamp']}", f"size: {row['size_bytes']}",
             f"magic: {row['magic']}", f"compresscodec: {row['compression']}",
             f"crc: {row['crc']}", f"isvalid: {str(row['crc_valid']).lower()}"]
    line = " ".join(parts)
    if row["decode_error"]:
        line += f"\n  decode error: {row['decode_error']}"
    return line


def _fmt_verdict(v: dict[str, Any]) -> str:
    if v["error_code"] == 0:
        return f"  verdict: accepted ({v['path']}{', duplicate' if v['duplicate'] else ''})"
    lines = [f"  verdict: {v['error_name']} ({v['error_code']}) at {v['check']}"]
    if v["error_message"] is not None:
        lines.append(f"    error_message: {v['error_message']}")
    for e in v["record_errors"][:10]:
        lines.append(f"    record_error[{e['batch_index']}]: {e['message']}")
    if len(v["record_errors"]) > 10:
        lines.append(f"    ... {len(v['record_errors']) - 10} more record errors")
    if v["detail"] and v["detail"] != v["error_message"]:
        lines.append(f"    broker log: {v['detail']}")
    return "\n".join(lines)


def _fmt_record(r: dict[str, Any]) -> str:
    """One record line, as kafka-dump-log prints it (``headerKeys: [a,b]``, not a Python
    list's repr)."""
    tstype = _TIMESTAMP_TYPES.get(r["timestamp_type"], "NoTimestamp")
    keys = ",".join(str(h["key"]) for h in r["headers"])
    return (f"| offset: {r['offset']} {tstype}: {r['timestamp']} keySize: {r['key_size']} "
            f"valueSize: {r['value_size']} headerKeys: [{keys}]")


def _totals(rows: list[dict[str, Any]], issues: list[LogIssue], validated: bool
            ) -> dict[str, Any]:
    totals: dict[str, Any] = {
        "batches": len(rows),
        "records": sum(r["record_count"] or 0 for r in rows),
        "bytes": sum(r["size_bytes"] or 0 for r in rows),
        "crc_invalid": sum(1 for r in rows if r["crc_valid"] is False),
        "decode_errors": sum(1 for r in rows if r["decode_error"]),
        "issues": len(issues),
    }
    if validated:
        codes = Counter(r["verdict"]["error_name"] for r in rows)
        totals["accepted_batches"] = codes.pop("NONE", 0)
        totals["rejected_batches"] = sum(codes.values())
        totals["rejected_records"] = sum(r["record_count"] or 0 for r in rows
                                         if r["verdict"]["error_code"] != 0)
        totals["by_error"] = dict(sorted(codes.items()))
    return totals


def cmd_inspect(args: argparse.Namespace) -> int:
    """``kqlab inspect``: stream the batches, printing as it goes (or one JSON document)."""
    from kqlab.kafka.log import segment_files, topic_partition_of

    files = segment_files(args.path)  # raises a clear error for a bad path
    t, p = topic_partition_of(args.path)
    all_rows: list[dict[str, Any]] = []
    all_issues: list[LogIssue] = []
    if not args.json:
        print(f"Dumping {', '.join(str(f) for f in files)}")
    for rows, issues in _inspect_chunks(args):
        all_issues.extend(issues)
        if args.json:
            all_rows.extend(rows)
            continue
        for row in rows:
            print(_fmt_batch(row))
            for r in row.get("records", []):
                print(_fmt_record(r))
            if "verdict" in row:
                print(_fmt_verdict(row["verdict"]))
        all_rows.extend({k: row[k] for k in ("record_count", "size_bytes", "crc_valid",
                                             "decode_error", "verdict") if k in row}
                        for row in rows)
    totals = _totals(all_rows, all_issues, args.validate)
    if args.json:
        doc = {"path": str(args.path), "files": [str(f) for f in files],
               "topic": args.topic if args.topic is not None else t,
               "partition": args.partition if args.partition is not None else p,
               "batches": all_rows, "issues": [i.to_dict() for i in all_issues],
               "totals": totals}
        if args.validate:
            doc["validation"] = {"broker_version": args.broker_version, "now": args.now,
                                 "source": args.source, "configs": args.config,
                                 "produce_version": args.produce_version}
        write_json(doc)
        return EXIT_OK
    for issue in all_issues:
        print(f"issue: {issue.kind} at position {issue.position} of {issue.file}: "
              f"{issue.message}")
    _print_totals(totals)
    return EXIT_OK


#: the totals' labels for people, in the order printed
_TOTALS = (("batches", "batches"), ("records", "records"), ("bytes", "bytes"),
           ("crc_invalid", "CRC invalid"), ("decode_errors", "decode errors"),
           ("issues", "issues"), ("accepted_batches", "accepted batches"),
           ("rejected_batches", "rejected batches"), ("rejected_records", "rejected records"))


def _print_totals(totals: dict[str, Any]) -> None:
    """The totals as tables for people (``--json`` has them as data)."""
    from kqlab.cli._ui import show, table

    rows = [(label, totals[key]) for key, label in _TOTALS if key in totals]
    tables = [table(("total", "count"), rows, title="totals", right=("count",))]
    if totals.get("by_error"):
        tables.append(table(("broker error", "batches"), list(totals["by_error"].items()),
                            title="rejected batches by broker error", right=("batches",)))
    show(*tables)
