"""The real Spark standalone cluster on loopback of the cluster tests: a master, two workers
(separate JVMs, whose Python has no kqlab) and a Spark Connect server.

The cluster itself is :mod:`kqlab.spark.standalone` (the cluster benchmark and the enforcer's
kill -9 script start the same one); this module keeps the names the tests import and keeps
the packed archive and the bare virtualenv under the checkout's ``.cache/spark-env/``
(git-ignored), keyed by a hash of kqlab's sources, so a rerun packs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kqlab.spark import standalone
from kqlab.spark.standalone import APP_CONF, ClusterError, free_port, spark_home

__all__ = ["APP_CONF", "CACHE", "ROOT", "Cluster", "ClusterError", "bare_python", "free_port",
           "packed_environment", "spark_home"]

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "spark-env"


def packed_environment() -> Path:
    """The packed kqlab environment under :data:`CACHE` (built once per source hash)."""
    return standalone.packed_environment(CACHE)


def bare_python() -> Path:
    """A virtualenv with nothing installed (no kqlab, no pyarrow): the workers' Python."""
    return standalone.bare_python(CACHE)


@dataclass
class Cluster(standalone.Cluster):
    """:class:`kqlab.spark.standalone.Cluster` with its cache under :data:`CACHE`."""

    cache: Path = CACHE
