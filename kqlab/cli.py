"""The ``kqlab`` command line: ``inspect``, ``sample``, ``snapshot``, ``replay``, ``demo``, and
``test``, ``suggest`` (those two in :mod:`kqlab.cli_policy`), ``report`` (in
:mod:`kqlab.cli_report`), ``export`` (in :mod:`kqlab.cli_export`), ``gate`` (in
:mod:`kqlab.cli_gate`).

Every command takes ``--json`` and then prints exactly one JSON document on stdout, for scripts.
Errors in the request (a missing path, a bad ``--config``) exit with status 2 and one line on
stderr; problems in the *data* are findings, reported in the output with exit status 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kqlab._version import __version__
from kqlab.errors import KqlabError

_CHUNK = 2048


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kqlab", description="Kafka data-quality workbench.")
    p.add_argument("--version", action="version", version=f"kqlab {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    ins = sub.add_parser("inspect", help="dump (and optionally validate) log segment batches",
                         description="Dump the record batches of a log segment file or a "
                         "partition folder, like Kafka's kafka-dump-log; with --validate, say "
                         "what a broker with the given topic configs would answer if each batch "
                         "were produced now.")
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
    ins.add_argument("--json", action="store_true", help="print one JSON document")

    rep = sub.add_parser("replay", help="replay a sample through the broker checks and a "
                         "policy", description="Replay a sample (a segment file or partition "
                         "folder) through the broker's batch checks and a policy's rules, with "
                         "the record-policy KIPs' semantics, and summarise what production "
                         "would reject and why.")
    rep.add_argument("source", help="a segment file (*.log), a partition folder, a log "
                     "directory (of <topic>-<partition> folders) or a snapshot folder "
                     "(kqlab snapshot)")
    rep.add_argument("--policy", required=True, help="the policy file (YAML)")
    rep.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                     help="broker clock (default: the wall clock)")
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
    rep.add_argument("--engine", choices=("local", "spark"), default="local",
                     help="local: in this process; spark: one Spark task per topic-partition "
                     "(same verdicts; for samples that outgrow one process)")
    rep.add_argument("--master", default=None,
                     help="Spark master for --engine spark (default local[*]; e.g. local[2], "
                     "spark://host:7077, yarn)")
    rep.add_argument("--overwrite", action="store_true",
                     help="with --engine spark: replace an existing --out folder")
    rep.add_argument("--json", action="store_true", help="print one JSON document")

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
    smp.add_argument("--json", action="store_true", help="print one JSON document")

    snap = sub.add_parser("snapshot", help="save log segments as a snapshot (Parquet + "
                          "metadata) that replays anywhere")
    snap.add_argument("path", help="a segment file (*.log) or a partition folder")
    snap.add_argument("out", help="the snapshot folder to create")
    snap.add_argument("--topic", default=None, help="topic (default: from the folder name)")
    snap.add_argument("--partition", type=int, default=None, help="partition (default: from "
                      "the folder name)")
    snap.add_argument("--overwrite", action="store_true",
                      help="replace an existing snapshot at OUT")
    snap.add_argument("--json", action="store_true", help="print one JSON document")

    demo = sub.add_parser("demo", help="generate the demo partition, decode and validate it")
    demo.add_argument("--dir", default=None,
                      help="where to write the demo segment (default: a temporary folder)")
    demo.add_argument("--now", type=int, default=None, metavar="EPOCH_MS",
                      help="clock for generation and validation (default: now)")
    demo.add_argument("--topics", action="store_true",
                      help="the demo topics (orders: Avro, clicks: JSON) with their documented "
                      "defects: replay every partition, then produce them into the embedded "
                      "broker and sample them back")
    demo.add_argument("--spark", action="store_true",
                      help="the demo topics replayed on Spark and locally: the parity check "
                      "(identical verdicts from both engines)")
    demo.add_argument("--master", default=None,
                      help="Spark master for --spark (default local[*])")
    demo.add_argument("--json", action="store_true", help="print one JSON document")

    from kqlab.cli_policy import add_parsers  # kqlab test | suggest (policy authoring)

    add_parsers(sub)
    from kqlab.cli_report import add_parsers as add_report  # kqlab report (HTML)

    add_report(sub)
    from kqlab.cli_export import add_parsers as add_export  # kqlab export (enforcement targets)

    add_export(sub)
    from kqlab.cli_gate import add_parsers as add_gate  # kqlab gate (the validating gate)

    add_gate(sub)
    return p


# ---------------------------------------------------------------------------------------------
# inspect
# ---------------------------------------------------------------------------------------------

def _record_rows(records: Any) -> dict[int, list[dict[str, Any]]]:
    """Per batch_offset, the record summaries (sizes computed with Arrow kernels)."""
    import pyarrow.compute as pc

    if records.num_rows == 0:
        return {}
    key_size = pc.fill_null(pc.binary_length(records["key"]), -1).to_pylist()
    value_size = pc.fill_null(pc.binary_length(records["value"]), -1).to_pylist()
    offsets = records["offset"].to_pylist()
    ts = records["timestamp"].to_pylist()
    tstype = records["timestamp_type"].to_pylist()
    batch_offsets = records["batch_offset"].to_pylist()
    batch_index = records["batch_index"].to_pylist()
    headers = records["headers"].to_pylist()
    out: dict[int, list[dict[str, Any]]] = {}
    prev = None
    group: list[dict[str, Any]] = []
    for i in range(records.num_rows):
        if batch_index[i] == 0 and group:
            out.setdefault(prev, []).extend(group)  # type: ignore[arg-type]
            group = []
        prev = batch_offsets[i]
        group.append({
            "offset": offsets[i], "batch_index": batch_index[i], "timestamp": ts[i],
            "timestamp_type": tstype[i], "key_size": key_size[i], "value_size": value_size[i],
            "headers": [{"key": h["key"],
                         "value_size": -1 if h["value"] is None else len(h["value"])}
                        for h in headers[i]],
        })
    if group:
        out.setdefault(prev, []).extend(group)  # type: ignore[arg-type]
    return out


def _inspect_chunks(args: argparse.Namespace) -> Iterator[tuple[list[dict[str, Any]], list]]:
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
            broker_version=args.broker_version,
            now=args.now if args.now is not None else int(time.time() * 1000),
            source=args.source, produce_version=args.produce_version)
    elif args.config or args.now is not None:
        raise KqlabError("--config and --now only apply with --validate")
    builder = TableBuilder(topic, partition)
    outcomes: list[Any] = []
    issues: list[LogIssue] = []
    pending = 0

    def drain() -> tuple[list[dict[str, Any]], list]:
        records, batches = builder.take()
        rows = batches.to_pylist()
        by_batch = _record_rows(records) if args.records else {}
        for i, row in enumerate(rows):
            row["last_offset"] = (None if row["batch_offset"] is None or
                                  row["last_offset_delta"] is None else
                                  row["batch_offset"] + row["last_offset_delta"])
            if args.records:
                row["records"] = by_batch.get(row["batch_offset"], []) \
                    if row["decode_error"] is None or row["batch_offset"] in by_batch else []
            if validator is not None:
                row["verdict"] = outcomes[i].to_dict()
        outcomes.clear()
        return rows, issues[:]

    for item in iter_log_batches(args.path):
        if isinstance(item, LogIssue):
            issues.append(item)
            continue
        builder.add(item.position, item.data)
        if validator is not None:
            outcomes.append(validator.validate(item.data, position=item.position))
        pending += 1
        if pending >= _CHUNK:
            yield drain()
            issues.clear()
            pending = 0
    yield drain()


def _fmt_batch(row: dict[str, Any]) -> str:
    tstype = {0: "CreateTime", 1: "LogAppendTime"}.get(row["timestamp_type"], "NoTimestamp")
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
    tstype = {0: "CreateTime", 1: "LogAppendTime"}.get(r["timestamp_type"], "NoTimestamp")
    keys = [h["key"] for h in r["headers"]]
    return (f"| offset: {r['offset']} {tstype}: {r['timestamp']} keySize: {r['key_size']} "
            f"valueSize: {r['value_size']} headerKeys: {keys}")


def _totals(rows: list[dict[str, Any]], issues: list, validated: bool) -> dict[str, Any]:
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
    import orjson

    from kqlab.kafka.log import segment_files, topic_partition_of

    files = segment_files(args.path)  # raises a clear error for a bad path
    t, p = topic_partition_of(args.path)
    all_rows: list[dict[str, Any]] = []
    all_issues: list = []
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
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
        return 0
    for issue in all_issues:
        print(f"issue: {issue.kind} at position {issue.position} of {issue.file}: "
              f"{issue.message}")
    print("totals: " + ", ".join(f"{k}={v}" for k, v in totals.items()))
    return 0


# ---------------------------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------------------------

def cmd_demo_topics(args: argparse.Namespace) -> int:
    """``kqlab demo --topics``: ground truth vs what the replay finds, then the network path."""
    import tempfile

    import orjson

    from kqlab.embedded import broker
    from kqlab.sources import demo_topics as dt
    from kqlab.sources.kafka import sample
    from kqlab.validate import replay

    now = args.now if args.now is not None else int(time.time() * 1000)
    found: Counter[tuple[str, str]] = Counter()
    summaries: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kqlab-demo-topics-") as tmp:
        demo = dt.generate(args.dir or tmp, now)
        policies = dt.load_policies()
        t0 = time.perf_counter()
        for name, folder in sorted(demo.folders.items()):
            topic = name.rsplit("-", 1)[0]
            v = replay(folder, policies[topic], now=now)
            summaries[name] = v.summary()["outcomes"]
            for fs, outcome in zip(v.records.column("failures").to_pylist(),
                                   v.records.column("outcome").to_pylist(), strict=True):
                if outcome == "rejected" and fs:
                    found[(topic, fs[0]["rule"])] += 1
        replay_s = time.perf_counter() - t0
        with broker() as b:
            produced = dt.produce_to(b, demo)
            sampled = {}
            for topic, parts in produced.items():
                res = sample(b.bootstrap, topic, timeout_s=30)
                v = replay(res.records, policies[topic], now=now, framing="single")
                sampled[topic] = {"produced": sum(parts.values()),
                                  "sampled": res.records.num_rows,
                                  "outcomes": v.by_outcome()}
    rows = [{"defect": k, "topic": d.topic, "caught_by": d.caught_by, "expected": d.records,
             "found": found[(d.topic, d.caught_by)]} for k, d in demo.truth.defects.items()]
    doc = {"now": now, "ground_truth": rows, "partitions": summaries, "broker": sampled,
           "replay_seconds": round(replay_s, 3),
           "all_found": all(r["expected"] == r["found"] for r in rows)}
    if args.json:
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
        return 0
    print("kqlab demo --topics — orders (Avro, two schema versions) and clicks (JSON)")
    print(f"  replayed {len(summaries)} partitions with their policies in {replay_s:.2f} s; "
          "planted defects (docs/demo-defects.md) vs what the replay found:")
    for r in rows:
        mark = "ok" if r["expected"] == r["found"] else "MISMATCH"
        print(f"    {r['defect']:<28} {r['topic']:<7} {r['caught_by']:<22} expected "
              f"{r['expected']:>4} found {r['found']:>4}  {mark}")
    for name, o in summaries.items():
        print(f"  {name:<9} accepted {o['accepted']:>5} rejected {o['rejected']:>4} "
              f"collateral {o['collateral']:>4}")
    print("  through the embedded broker (produced, sampled back, replayed with rebuilt "
          "framing):")
    for topic, r in sampled.items():
        print(f"    {topic:<7} produced {r['produced']:>5} sampled {r['sampled']:>5} outcomes "
              f"{r['outcomes']}")
    return 0


def cmd_demo_spark(args: argparse.Namespace) -> int:
    """``kqlab demo --spark``: every demo topic on both engines, every verdict compared."""
    import tempfile

    import orjson

    from kqlab.sources import demo_topics as dt
    from kqlab.spark import parity_check, spark_session

    now = args.now if args.now is not None else int(time.time() * 1000)
    reports = {}
    with tempfile.TemporaryDirectory(prefix="kqlab-demo-spark-") as tmp:
        demo = dt.generate(Path(args.dir or tmp) / "segments", now)
        policies = dt.load_policies()
        spark = spark_session(args.master)
        for topic in sorted(policies):
            logdir = Path(tmp) / "by-topic" / topic
            logdir.mkdir(parents=True)
            for name, folder in demo.folders.items():
                if name.rsplit("-", 1)[0] == topic:
                    (logdir / name).symlink_to(folder.resolve(), target_is_directory=True)
            report = parity_check(logdir, policies[topic], spark=spark, now=now,
                                  progress=not args.json)
            reports[topic] = (report, report.spark_verdicts.summary())
    identical = all(r.identical for r, _ in reports.values())
    if args.json:
        sys.stdout.write(orjson.dumps({
            "now": now, "master": spark.sparkContext.master, "identical": identical,
            "topics": {t: {**r.to_dict(), "outcomes": s["outcomes"], "units": s["units"]}
                       for t, (r, s) in reports.items()}}).decode() + "\n")
        return 0 if identical else 1
    print(f"kqlab demo --spark — the demo topics on Spark ({spark.sparkContext.master}) and "
          "locally, every verdict compared")
    for topic, (r, s) in reports.items():
        o = s["outcomes"]
        verdict = "identical" if r.identical else "DIFFERENT"
        print(f"  {topic:<7} {s['units']} partition(s), {r.records:>5} records, "
              f"{r.batches:>4} batches: accepted {o['accepted']:>5} rejected {o['rejected']:>4}"
              f" collateral {o['collateral']:>4} — engines {verdict} (local "
              f"{r.local_seconds:.2f} s, spark {r.spark_seconds:.2f} s)")
        for d in r.differences[:5]:
            print(f"    {d}")
    return 0 if identical else 1


def cmd_demo(args: argparse.Namespace) -> int:
    """``kqlab demo``: generate the demo partition, decode it, replay the demo policy over it."""
    import tempfile

    if args.topics:
        return cmd_demo_topics(args)
    if args.spark:
        return cmd_demo_spark(args)

    import orjson

    from kqlab.kafka.log import read_log
    from kqlab.policy.io import load_policy
    from kqlab.sources.demo import DEMO_PARTITION, DEMO_TOPIC, demo_policy_path, write_demo_segment
    from kqlab.validate import replay

    now = args.now if args.now is not None else int(time.time() * 1000)
    policy_file = demo_policy_path()
    policy = load_policy(str(policy_file))
    with tempfile.TemporaryDirectory(prefix="kqlab-demo-") as tmp:
        folder = write_demo_segment(args.dir or tmp, now)
        t0 = time.perf_counter()
        log = read_log(folder)
        t1 = time.perf_counter()
        verdicts = replay(folder, policy, now=now)
        t2 = time.perf_counter()
    summary = verdicts.summary()
    rejected = [b for b in verdicts.batches.to_pylist() if b["error_code"] != 0]
    reasons: Counter[str] = Counter()
    for fs, outcome in zip(verdicts.records.column("failures").to_pylist(),
                           verdicts.records.column("outcome").to_pylist(), strict=True):
        if outcome == "rejected" and fs:
            reasons[fs[0]["rule"]] += 1
    doc = {
        "topic": DEMO_TOPIC, "partition": DEMO_PARTITION, "policy": policy.name,
        "policy_file": str(policy_file), "segment": str(folder) if args.dir else None,
        "records": log.records.num_rows, "batches": log.batches.num_rows,
        "codecs": dict(Counter(log.batches["compression"].to_pylist())),
        "issues": [i.to_dict() for i in log.issues],
        "verdicts": {k: v["batches"] for k, v in summary["by_error"].items()},
        "rejected_by_reason": dict(reasons.most_common()),
        "rejections": [{"batch_offset": b["batch_offset"], "error": b["error_name"],
                        "check": b["check"], "record_errors": len(b["record_errors"]),
                        "why": (b["record_errors"][0]["message"] if b["record_errors"]
                                else b["detail"])} for b in rejected],
        "summary": summary,
        "decode_seconds": round(t1 - t0, 4), "replay_seconds": round(t2 - t1, 4),
    }
    if args.json:
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
        return 0
    print(f"kqlab demo — topic {DEMO_TOPIC}-{DEMO_PARTITION}, a generated log segment")
    print(f"  decoded {doc['records']} records in {doc['batches']} batches "
          f"({', '.join(f'{k}: {v}' for k, v in sorted(doc['codecs'].items()))}) "
          f"in {doc['decode_seconds'] * 1000:.1f} ms")
    print(f"  replayed policy {policy.name!r} ({len(policy.rules)} rules, {policy_file.name}) "
          f"with the broker's checks in {doc['replay_seconds'] * 1000:.1f} ms\n")
    print_summary(summary)
    print("  rejected records by first reason:")
    for rule, n in reasons.most_common():
        print(f"    {rule:<28} {n}")
    print("  rejected batches:")
    for r in doc["rejections"]:
        print(f"    batch @{r['batch_offset']}: {r['error']} at {r['check']} — {r['why']}")
    return 0


# ---------------------------------------------------------------------------------------------
# replay
# ---------------------------------------------------------------------------------------------

def print_summary(summary: dict[str, Any], *, out: Any = None) -> None:
    """The human-readable replay summary (outcomes, rules, errors, partitions, producer)."""
    w = out or sys.stdout
    o = summary["outcomes"]
    total = sum(o.values()) or 1
    print(f"policy {summary['policy']} ({summary['profile']}, framing {summary['framing']}): "
          f"{summary['records']} records in {summary['batches']} batches", file=w)
    for name in ("accepted", "rejected", "collateral"):
        print(f"  {name:<11} {o[name]:>8}  {100 * o[name] / total:5.1f} %", file=w)
    print(f"  would be lost: {summary['records_lost']} records; delayed (retried): "
          f"{summary['records_delayed']}", file=w)
    if summary["by_rule"]:
        print("  by rule:", file=w)
        for r in summary["by_rule"]:
            flag = "" if r["exportable"] else "  (not exportable)"
            print(f"    {r['rule']:<24} {r['mode']:<8} failed {r['failed_records']:>7}  "
                  f"rejected {r['rejected_records']:>7}{flag}", file=w)
    print("  by broker error:", file=w)
    for name, c in sorted(summary["by_error"].items()):
        print(f"    {name:<30} {c['batches']:>6} batches {c['records']:>8} records", file=w)
    if len(summary["by_partition"]) > 1:
        print("  by partition:", file=w)
        for p in summary["by_partition"]:
            print(f"    {p['topic']}-{p['partition']:<6} accepted {p['accepted']:>7} rejected "
                  f"{p['rejected']:>7} collateral {p['collateral']:>7}", file=w)
    for note in summary["notes"]:
        print(f"  note: {note}", file=w)
    for issue in summary["issues"]:
        print(f"  issue: {issue['kind']} at byte {issue['position']}: {issue['message']}",
              file=w)


def cmd_replay(args: argparse.Namespace) -> int:
    """``kqlab replay``: the summary, or one JSON document; Parquet tables with ``--out``."""
    import orjson

    from kqlab.policy.io import load_policy
    from kqlab.validate import replay

    policy = load_policy(args.policy)
    if args.engine == "spark":
        return _replay_spark(args, policy)
    verdicts = replay(args.source, policy, now=args.now, framing=args.framing,
                      profile=args.profile, linger_ms=args.linger_ms,
                      batch_size=args.batch_size)
    summary = verdicts.summary()
    if args.vet:
        from kqlab.policy.io import save_policy

        save_policy(verdicts.vet(policy, source=str(args.source)), args.vet)
        summary["vetted_policy"] = str(args.vet)
    if args.out:
        import pyarrow.parquet as pq

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(verdicts.records, out / "records.parquet")
        pq.write_table(verdicts.batches, out / "batches.parquet")
        pq.write_table(verdicts.rules, out / "rules.parquet")
        (out / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
        summary["out"] = str(out)
    if args.json:
        sys.stdout.write(orjson.dumps(summary).decode() + "\n")
        return 0
    print_summary(summary)
    if args.out:
        print(f"  verdict tables written to {args.out}/")
    if args.vet:
        print(f"  vetted policy (with provenance) written to {args.vet}")
    return 0


def _replay_spark(args: argparse.Namespace, policy: Any) -> int:
    """``kqlab replay --engine spark``: verdict Parquet under ``--out`` (or a temporary
    folder), the same summary as the local engine; exit 3 when a unit could not be read."""
    import orjson

    from kqlab.spark import replay_spark

    verdicts = replay_spark(args.source, policy, master=args.master, out=args.out,
                            overwrite=args.overwrite, now=args.now, framing=args.framing,
                            profile=args.profile, linger_ms=args.linger_ms,
                            batch_size=args.batch_size, progress=not args.json)
    summary = verdicts.summary()
    if args.vet:
        from kqlab.policy.io import save_policy

        save_policy(verdicts.vet(policy, source=str(args.source)), args.vet)
        summary["vetted_policy"] = str(args.vet)
    if args.json:
        sys.stdout.write(orjson.dumps(summary).decode() + "\n")
    else:
        print_summary(summary)
        print(f"  engine: spark, {summary['units']} unit(s) in {summary['seconds']:.1f} s; "
              f"verdict Parquet files in {summary['out']}/")
        if args.vet:
            print(f"  vetted policy (with provenance) written to {args.vet}")
    for e in summary["errors"]:
        print(f"kqlab replay: {e['topic']}-{e['partition']} ({e['path']}) was not replayed: "
              f"{e['error']}: {e['message']}", file=sys.stderr)
    return 3 if summary["errors"] else 0


def cmd_sample(args: argparse.Namespace) -> int:
    """``kqlab sample``: a live topic into a snapshot, with progress on stderr."""
    import orjson

    from kqlab.kafka.configs import parse_assignments
    from kqlab.sources.fetch import sample_to_snapshot

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
        sys.stdout.write(orjson.dumps(meta).decode() + "\n")
        return 0
    print(f"\nsnapshot {args.out}: topic {meta['topic']}, {meta['num_records']} records, "
          f"framing {meta['framing']}, partitions {snap.partitions}")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    """``kqlab snapshot``: stream segments into a snapshot folder; print its metadata."""
    import orjson

    from kqlab.sources.segments import snapshot_from_segments

    snap = snapshot_from_segments(args.path, args.out, topic=args.topic,
                                  partition=args.partition, overwrite=args.overwrite)
    meta = snap.metadata
    if args.json:
        sys.stdout.write(orjson.dumps(meta).decode() + "\n")
        return 0
    print(f"snapshot {args.out}: topic {meta['topic']}, {meta['num_records']} records in "
          f"{meta['num_batches']} batches, framing {meta['framing']}")
    for issue in meta.get("issues", []):
        print(f"  issue: {issue['kind']} at byte {issue['position']}: {issue['message']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kqlab`` console script."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "inspect":
            return cmd_inspect(args)
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "snapshot":
            return cmd_snapshot(args)
        if args.command == "sample":
            return cmd_sample(args)
        if args.command in ("test", "suggest"):
            from kqlab.cli_policy import run

            return run(args)
        if args.command == "report":
            from kqlab.cli_report import run as run_report

            return run_report(args)
        if args.command == "export":
            from kqlab.cli_export import run as run_export

            return run_export(args)
        if args.command == "gate":
            from kqlab.cli_gate import run as run_gate

            return run_gate(args)
        return cmd_demo(args)
    except (KqlabError, ValueError) as exc:
        print(f"kqlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # pragma: no cover - `kqlab inspect ... | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
