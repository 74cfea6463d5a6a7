"""A DataFrame read by Spark's own Kafka connector (``format("kafka")``) as kqlab's records.

Why: users on a cluster that has the connector already read their topics with
``spark.read.format("kafka")``; a replay takes that DataFrame as it is
(``kqlab.validate.replay(df, policy, framing="single")``).  Spark's connector hands over
records without their batches (no batch offset, producer id, compression or batch bytes), so
the batch framing is *reconstructed* — every record its own batch (``single``) or
producer-like runs (``linger``) — and the verdicts say so (``framing`` reads
``reconstructed:single``); the broker checks judge the rebuilt batches, not the log's.
``format("kqlab-kafka")`` (:mod:`kqlab.spark.kafka_source`) reads the batches as the broker
stores them and stays the default for exact framing; its DataFrames (kqlab's records
columns) are taken here too.

The records come to the driver (``toArrow``), as a local replay needs them in one process:
this is for samples, not whole topics (``replay_spark`` replays snapshots in tasks).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kqlab.records import RECORDS_SCHEMA
from kqlab.validate.sample import ReplayError

__all__ = ["CONNECTOR_COLUMNS", "is_spark_frame", "kafka_records", "records_frame"]

#: the columns of Spark's Kafka source (``headers`` with ``includeHeaders=true``)
CONNECTOR_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp",
                     "timestampType")


def is_spark_frame(obj: Any) -> bool:
    """A PySpark DataFrame (classic or Spark Connect), by its methods (no pyspark import)."""
    return all(hasattr(obj, a) for a in ("toArrow", "columns", "select", "sparkSession"))


def _is_connector_frame(columns: list[str]) -> bool:
    return set(CONNECTOR_COLUMNS) <= set(columns) and "timestamp_type" not in columns


def records_frame(df: Any) -> Any:
    """``df`` (Spark's Kafka rows) as a DataFrame of kqlab's records columns
    (:data:`~kqlab.records.RECORDS_SCHEMA`): timestamps in epoch milliseconds, the
    timestamp type as Kafka numbers it (0 CreateTime, 1 LogAppendTime), no headers as an
    empty list, and every record its own batch (``batch_offset = offset``) — the connector
    does not say which batch a record came in.  A DataFrame that already has kqlab's
    columns (``format("kqlab-kafka")``) is selected as it is."""
    from pyspark.sql import functions as sf

    cols = list(df.columns)
    if set(RECORDS_SCHEMA.names) <= set(cols):
        return df.select(*RECORDS_SCHEMA.names)
    if not _is_connector_frame(cols):
        raise ReplayError(f"a DataFrame with columns {', '.join(cols)} is neither a read of "
                          "Spark's Kafka connector (format('kafka'): "
                          f"{', '.join(CONNECTOR_COLUMNS)}, headers) nor of "
                          "format('kqlab-kafka')")
    if "headers" not in cols:
        raise ReplayError("the DataFrame of format('kafka') has no headers column: read it "
                          "with .option('includeHeaders', 'true') (the policy's header rules "
                          "and the failure headers need them)")
    return df.select(
        "topic", "partition", "offset",
        sf.unix_millis("timestamp").alias("timestamp"),
        sf.when(sf.col("timestampType") == 1, 1).otherwise(0).cast("byte")
        .alias("timestamp_type"), "key", "value",
        sf.coalesce("headers", sf.array()).alias("headers"),
        sf.col("offset").alias("batch_offset"), sf.lit(0).alias("batch_index"))


def kafka_records(df: Any) -> pa.Table:
    """The records of ``df`` (Spark's Kafka rows, or kqlab-kafka's) on the driver, in log order
    (topic, partition, offset), as kqlab's records table."""
    table = records_frame(df).orderBy("topic", "partition", "offset").toArrow()
    return table.select(RECORDS_SCHEMA.names).cast(RECORDS_SCHEMA)


def load_frame(df: Any, framing: str, linger_ms: int, batch_size: int) -> Any:
    """The :class:`~kqlab.validate.sample.Sample` a replay of ``df`` judges: the records with
    their framing rebuilt (``exact`` refused: the DataFrame has no batches)."""
    from kqlab.validate.framing import reconstruct_framing

    if framing == "exact":
        raise ReplayError("a Spark DataFrame of Kafka records has no batch framing (Spark's "
                          "connector hands over records, not batches): pass framing='single' "
                          "or 'linger' to rebuild it, or sample the topic with kqlab "
                          "(format('kqlab-kafka') rows='batches', or kqlab.sources.kafka) "
                          "for the exact framing")
    return reconstruct_framing(kafka_records(df), framing, linger_ms=linger_ms,
                               batch_size=batch_size)
