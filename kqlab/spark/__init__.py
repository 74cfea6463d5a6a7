"""The Spark engine: replay samples of any size with verdicts identical to the local engine.

>>> import kqlab.spark  # light: PySpark is imported when a session is made

* :func:`spark_session` — local defaults (``local[*]``, Arrow, loopback, quiet) or your own
  session unchanged;
* :func:`replay_spark` — snapshot folders, log directories, partition folders or segment
  files, one Spark task per topic-partition, verdicts written to Parquet
  (:class:`SparkVerdicts`: DataFrames, summaries by Spark aggregation, bounded examples);
* :func:`parity_check` — both engines on one sample, every verdict compared;
* :class:`SparkNotebookProgress` / :class:`SparkTerminalProgress` — job progress and cancel;
* ``format("kqlab-kafka")`` (:func:`register_kafka_source`) — Kafka read with exact framing,
  batch and streaming; :class:`StreamingReplay` — a policy replayed on a stream, micro-batch
  by micro-batch; :class:`Enforcer` — the Structured Streaming enforcer.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "spark_session": "kqlab.spark.session",
    "SparkUnavailable": "kqlab.spark.session",
    "replay_spark": "kqlab.spark.engine",
    "SparkReplayError": "kqlab.spark.engine",
    "ReplayCancelled": "kqlab.spark.engine",
    "SparkVerdicts": "kqlab.spark.verdicts",
    "TooLargeToCollect": "kqlab.spark.verdicts",
    "parity_check": "kqlab.spark.parity",
    "ParityReport": "kqlab.spark.parity",
    "ParityError": "kqlab.spark.parity",
    "plan_units": "kqlab.spark.units",
    "Unit": "kqlab.spark.units",
    "SparkNotebookProgress": "kqlab.spark.progress",
    "SparkTerminalProgress": "kqlab.spark.progress",
    "KafkaDataSource": "kqlab.spark.kafka_source",
    "register_kafka_source": "kqlab.spark.kafka_source",
    "StreamingReplay": "kqlab.spark.streaming",
    "Enforcer": "kqlab.spark.enforcer",
    "EnforcerSettings": "kqlab.spark.enforcer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kqlab.spark' has no attribute {name!r}")
    attr = "register" if name == "register_kafka_source" else name
    return getattr(import_module(module), attr)
