"""The Structured Streaming enforcer (``kqlab export --target spark-streaming``): the gate as a
Spark job (:mod:`kqlab.spark.enforcer`).

The export is a runnable folder: ``enforcer.yaml`` (the policy's path and content hash, the
topics, how the stream reads), ``policy.yaml`` (the policy itself, the hash the config pins),
``enforcer_main.py`` (the application file ``spark-submit`` takes) and ``submit.sh`` (the
``spark-submit`` line; the tests run this very script).  Deployment settings — bootstrap
servers, credentials (``-X``), the checkpoint location, the Spark master — are given when it
runs, so no file holds a secret.

Every rule is claimed ``exact``: the enforcer judges each record with the gate's
:class:`~kqlab.gate._judge.Judge` (``replay(framing="single")``); ``kqlab export --sample``
does not start Spark to prove it (the claims stay ``unverified`` in the fidelity report), the
end-to-end tests in ``tests/spark/test_enforcer*.py`` do.

The policy's sample checks are ``enforced`` where the enforcer computes them
(:mod:`kqlab.spark.enforcer_checks`: windowed volume, null_rate, duplicate_rate, distinct,
stat and reject_rate, each closed window judged once into an alert row on the config's
``checks.alert_topic``; freshness per group at each micro-batch) and ``not enforced`` with
the reason otherwise (:func:`~kqlab.spark.enforcer_config.check_support`: drift, schema
drift, checks over the whole sample).  As for the rules, the export runs no enforcer: the
fidelity report marks each ``enforced`` check as claimed and not run here, proven by the
same end-to-end tests (``tests/spark/test_enforcer_checks.py``), not by the report.
``volume`` by partition knows every partition the source reads, the silent ones too; by a
header or a field, only the groups records named (its row's ``how`` says so).
"""

from __future__ import annotations

from typing import Any

import yaml

from kqlab.export.base import (
    ENFORCED,
    EXACT,
    NOT_ENFORCED,
    CheckFidelity,
    Export,
    ExportError,
    RuleFidelity,
    comment_block,
    implicit_row,
    implicit_rules,
    provenance,
    provenance_lines,
    rule_lines,
    secrets_of,
)
from kqlab.spark.enforcer_config import (
    DEFAULT_LATENESS_MS,
    ENFORCER_VERSION,
    check_support,
)

__all__ = ["FOLDER", "LAUNCHER", "POLICY_FILE", "build", "check_rows", "enforcer_config",
           "submit_script"]

TITLE = "kqlab Structured Streaming enforcer (spark-submit job)"
FOLDER = "spark-streaming"
POLICY_FILE = "policy.yaml"
#: the application file spark-submit runs (kqlab must be importable where it runs)
LAUNCHER = '''"""spark-submit application file of the kqlab Structured Streaming enforcer."""
import sys

from kqlab.spark.enforcer import main

sys.exit(main())
'''

BEHAVIOUR = (
    "downstream, not in the produce path: producers write to the raw topic unchecked; "
    "consumers of the sink topic only see valid records",
    "per record: each record is judged alone and forwarded or dead-lettered, so the replay's "
    "'collateral' records (valid, rejected with their batch) reach the sink",
    "micro-batches: records are forwarded when their micro-batch runs (trigger interval, "
    "maxOffsetsPerTrigger); at least once — a restart from the checkpoint runs the "
    "uncommitted micro-batch again and its records may be duplicated (counted as redelivered)",
    "sample checks per window of record time: a window is judged once the newest record "
    "seen, less checks.lateness_ms, passes its end, from the records read by then (a record "
    "later than that is counted late, not judged); volume judges the groups seen so far; "
    "reject_rate counts the enforcer's own verdicts (each record alone); alert rows are sent "
    "at least once (keyed check|group|window start)",
)


def enforcer_config(policy: Any, *, policy_path: str | None = None,
                    sink_suffix: str = ".valid", dlq_suffix: str = ".dlq",
                    max_offsets_per_trigger: int = 200_000,
                    lateness_ms: int = DEFAULT_LATENESS_MS) -> dict[str, Any]:
    """The config as data.

    Examples
    --------
    >>> from kqlab.policy.model import Policy, Topics
    >>> cfg = enforcer_config(Policy(name="orders", topics=Topics(names=("orders",))))
    >>> cfg["topics"], cfg["source"]["startingOffsets"]
    ([{'source': 'orders', 'sink': 'orders.valid', 'dlq': 'orders.dlq'}], 'earliest')
    """
    if not policy.topics.names:
        raise ExportError(f"policy {policy.name!r} names no topics: the enforcer needs source "
                          "topic names")
    out: dict[str, Any] = {
        "kqlab_spark_enforcer": ENFORCER_VERSION,
        "policy": {"path": policy_path or POLICY_FILE, "content_hash": policy.content_hash()},
        "topics": [{"source": t, "sink": t + sink_suffix, "dlq": t + dlq_suffix}
                   for t in policy.topics.names],
        "source": {"startingOffsets": "earliest",
                   "maxOffsetsPerTrigger": max_offsets_per_trigger},
        "trigger_seconds": 0,
        "partitioning": "same",
        "connector": "python",
    }
    if any(check_support(c) is None for c in policy.checks):
        out["checks"] = {"alert_topic": f"{policy.topics.names[0]}.alerts",
                         "lateness_ms": lateness_ms, "alert_passing": False}
    return out


def check_rows(policy: Any) -> tuple[CheckFidelity, ...]:
    """The fidelity rows of the policy's sample checks: ``enforced`` (how the enforcer
    computes it when it runs) or ``not enforced`` (why), per
    :func:`~kqlab.spark.enforcer_config.check_support`.  The export runs no Spark: the
    report says so beside each row (:meth:`kqlab.export.fidelity.FidelityReport.check_table`)."""
    rows = []
    for c in policy.checks:
        why = check_support(c)
        if why is not None:
            rows.append(CheckFidelity(check=c.id, kind=c.kind, status=NOT_ENFORCED, how=why))
        elif c.kind == "freshness":
            rows.append(CheckFidelity(
                check=c.id, kind=c.kind, status=ENFORCED,
                how="the enforcer computes it per group at every micro-batch and every "
                "trigger interval between them (a silent topic runs none), against its "
                "clock; an alert row when a group's status changes"))
        else:
            how = ("the enforcer computes it: each window judged once when closed (newest "
                   "record seen less checks.lateness_ms past its end), one alert row per "
                   "failing window")
            if c.kind == "reject_rate":
                how += "; rejections are the enforcer's own verdicts (each record alone)"
            if c.kind == "volume" and c.by == "partition":
                how += ("; every partition the source reads is a group from the first "
                        "micro-batch on, so a partition silent from the start is alerted (a "
                        "replay knows only the partitions that have records)")
            elif c.kind == "volume" and c.by:
                how += (f"; groups by {c.by} cannot be known before a record names them: "
                        "the groups seen so far, so a group that never sends a record is "
                        "never alerted (by: partition knows every partition)")
            rows.append(CheckFidelity(check=c.id, kind=c.kind, status=ENFORCED, how=how))
    return tuple(rows)


def submit_script(policy: Any, prov: dict[str, Any]) -> str:
    """``submit.sh``: the spark-submit line, the same locally (``local[2]``) and on a cluster
    (``SPARK_MASTER``, ``SPARK_SUBMIT_ARGS``), headed by the provenance of the policy it
    runs."""
    return f"""#!/bin/sh
# The kqlab Structured Streaming enforcer of policy {policy.name!r}.
{comment_block(provenance_lines(prov))}#   BOOTSTRAP   bootstrap servers (required)
#   CHECKPOINT  checkpoint location: a path, or hdfs:// s3a:// gs:// abfs:// (required;
#               restart with the same one to resume)
#   SPARK_MASTER       default local[2]; yarn, k8s://..., spark://host:7077 on a cluster
#   SPARK_SUBMIT_ARGS  more spark-submit options (--conf, --archives with a Python env ...)
# Arguments after the script go to the enforcer: -X KEY=VALUE (librdkafka settings),
# --json-metrics, --available-now, --now EPOCH_MS.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec spark-submit --master "${{SPARK_MASTER:-local[2]}}" --name "kqlab-enforcer-{policy.name}" \\
  --conf spark.sql.execution.arrow.pyspark.enabled=true ${{SPARK_SUBMIT_ARGS:-}} \\
  "$here/enforcer_main.py" --config "$here/enforcer.yaml" \\
  --bootstrap "${{BOOTSTRAP:?set BOOTSTRAP to the bootstrap servers}}" \\
  --checkpoint "${{CHECKPOINT:?set CHECKPOINT to the checkpoint location}}" "$@"
"""


def build(policy: Any, *, policy_path: str | None = None) -> Export:
    """The folder ``spark-streaming/``: config, policy copy, launcher and submit script."""
    from kqlab.export.gate import _portable
    from kqlab.policy import PolicyError, dump_policy

    prov = provenance(policy)
    cfg = enforcer_config(policy, policy_path=policy_path)
    how = ("the enforcer judges every record with the gate's judge (kqlab's validator, "
           "record-level broker checks included)")
    fid = [RuleFidelity(rule=r.id, kind=r.kind, mode=r.mode, status=EXACT,
                        how=how + ("" if r.exportable else "; the plugin module must be "
                                   "importable on the executors"))
           for r in policy.rules]
    fid += [implicit_row(r, EXACT, "the enforcer runs kqlab's validator, its implicit checks "
                         "included") for r in implicit_rules(policy)]
    head = comment_block([
        "kqlab Structured Streaming enforcer: run it with",
        "  BOOTSTRAP=broker:9092 CHECKPOINT=<location> sh submit.sh",
        "Bootstrap servers, credentials and the checkpoint location are deployment",
        "settings and deliberately not in this file. The policy path is relative to this",
        "file's folder.",
        *provenance_lines(prov),
        *rule_lines(policy.rules)])
    files = {f"{FOLDER}/enforcer.yaml": head + yaml.safe_dump(cfg, sort_keys=False,
                                                                default_flow_style=False),
             f"{FOLDER}/enforcer_main.py": LAUNCHER,
             f"{FOLDER}/submit.sh": submit_script(policy, prov)}
    notes = ["kqlab (with its spark and kafka extras) must be installed where the driver and "
             "the executors run, e.g. a packed environment passed with --archives"]
    if policy_path is None and secrets_of(policy):
        notes.append(f"the policy's schema source holds credentials, so it is not copied into "
                     f"the export: put the policy file beside enforcer.yaml as {POLICY_FILE}")
    elif policy_path is None:
        try:
            files[f"{FOLDER}/{POLICY_FILE}"] = dump_policy(_portable(policy))
        except PolicyError as exc:
            raise ExportError(f"the enforcer runs a policy file, and this policy cannot be "
                              f"written as one: {exc}") from None
        notes.append(f"{POLICY_FILE} is the policy itself, beside enforcer.yaml: copy the "
                     "folder")
    if "checks" in cfg:
        notes.append(f"create the alert topic {cfg['checks']['alert_topic']!r} before the "
                     "first run: the sample checks send an alert row (JSON) per failing window")
    return Export(target="spark-streaming", title=TITLE, policy=policy.name, files=files,
                  fidelity=tuple(fid), behaviour=BEHAVIOUR, data=cfg, notes=tuple(notes),
                  checks=check_rows(policy))
