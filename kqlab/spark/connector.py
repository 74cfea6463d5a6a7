"""Spark's own Kafka connector (``format("kafka")``) on a local session's classpath, offline.

Why a module: pyspark's pip package ships no Kafka connector, and the usual way to get one,
``spark.jars.packages``, resolves it from a Maven repository every time a session starts (a
network fetch at run time, which kqlab never does).  ``make setup`` resolves
``org.apache.spark:spark-sql-kafka-0-10_2.13`` at the installed pyspark's version once
(``extensions/spark-kafka/pom.xml``, ``scripts/setup-spark-kafka``) into an ignored folder,
keeping only the jars pyspark's ``jars/`` lacks (the connector, its token provider,
kafka-clients and commons-pool2); :func:`connector_jars` lists them for ``spark.jars``.
``KQLAB_SPARK_KAFKA_HOME`` points elsewhere: a folder holding ``spark-kafka-VERSION/jars``.

kqlab's own ``format("kqlab-kafka")`` (:mod:`kqlab.spark.kafka_source`) needs none of this and
stays the default: it keeps each record's batch framing exactly, which Spark's connector
does not expose.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from kqlab.errors import KqlabError

__all__ = ["SparkKafkaMissing", "connector_home", "connector_jars", "duplicate_jars",
           "pyspark_version"]

_MAVEN_PROJECT = "extensions/spark-kafka"
_VERSIONED = re.compile(r"^(?P<artifact>.+?)-\d[\w.\-]*\.jar$")


class SparkKafkaMissing(KqlabError):
    """Spark's Kafka connector jars are not installed for this pyspark."""


def pyspark_version() -> str:
    """The installed pyspark's version (the connector must be the same one)."""
    from importlib.metadata import version

    return version("pyspark")


def connector_home() -> Path:
    """``$KQLAB_SPARK_KAFKA_HOME``, else the Maven project's ``target/`` in this checkout."""
    env = os.environ.get("KQLAB_SPARK_KAFKA_HOME")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / _MAVEN_PROJECT / "target"


def connector_jars(version: str | None = None) -> list[Path]:
    """The connector's jars for pyspark ``version`` (default: the installed one), sorted; a
    :class:`SparkKafkaMissing` saying to run ``make setup`` when they are not there."""
    v = version or pyspark_version()
    folder = connector_home() / f"spark-kafka-{v}" / "jars"
    jars = sorted(folder.glob("*.jar"))
    if not any(j.name.startswith("spark-sql-kafka-0-10_") for j in jars):
        raise SparkKafkaMissing(
            f"Spark's Kafka connector for pyspark {v} is not installed at {folder}: run "
            f"`make setup` (it resolves org.apache.spark:spark-sql-kafka-0-10_2.13:{v} from "
            f"Maven Central with `mvn -f {_MAVEN_PROJECT}/pom.xml package -Dspark.version={v}`), "
            "or set KQLAB_SPARK_KAFKA_HOME to a folder holding spark-kafka-VERSION/jars")
    return jars


def _artifact(name: str) -> str:
    m = _VERSIONED.match(name)
    return m.group("artifact") if m else name.removesuffix(".jar")


def duplicate_jars(jars: list[Path]) -> list[str]:
    """The jars whose artifact pyspark's own ``jars/`` already holds (in any version): two
    copies of one class on the classpath; the set-up refuses them."""
    import pyspark

    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(j.name for j in jars if _artifact(j.name) in shipped)


if __name__ == "__main__":  # scripts/setup-spark-kafka: check what was copied
    import sys

    found = connector_jars(sys.argv[1] if len(sys.argv) > 1 else None)
    dup = duplicate_jars(found)
    if dup:
        sys.exit(f"these jars are also in pyspark's jars/: {', '.join(dup)}; exclude them in "
                 f"{_MAVEN_PROJECT}/pom.xml")
    print(" ".join(j.name for j in found))
