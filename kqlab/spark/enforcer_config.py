"""The Structured Streaming enforcer's config file, ``enforcer.yaml`` (written by
``kqlab export --target spark-streaming``, read by :mod:`kqlab.spark.enforcer`).

::

    kqlab_spark_enforcer: 1
    policy: {path: policy.yaml, content_hash: 3f2a...}
    topics: [{source: orders, sink: orders.valid, dlq: orders.dlq}]
    source: {startingOffsets: earliest, maxOffsetsPerTrigger: 200000}
    trigger_seconds: 0
    partitioning: same

Like the gate's ``gate.yaml`` it names only what the vetted policy fixes — the policy (path
and content hash, so an edited file is refused) and the topics — plus how the stream reads;
bootstrap servers, credentials and the checkpoint location are deployment settings, given on
the command line, so the file holds no secret.  This module imports neither PySpark nor a
Kafka client: the exporter writes what it reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kqlab.errors import KqlabError

__all__ = ["ENFORCER_VERSION", "SOURCE_OPTIONS", "EnforcerConfigError", "EnforcerFile",
           "Route", "load_enforcer_file"]

#: the config format this enforcer reads
ENFORCER_VERSION = 1
_KNOWN = {"kqlab_spark_enforcer", "policy", "topics", "source", "trigger_seconds",
          "partitioning", "connector"}
#: the ``format("kqlab-kafka")`` options a config may set under ``source``
SOURCE_OPTIONS = ("startingOffsets", "maxOffsetsPerTrigger", "fetchTimeoutMs",
                  "maxBytesPerFetch")
#: where records are read from and written to: kqlab's Python data source and a
#: confluent-kafka producer (default, runs anywhere), or Spark's Kafka connector (a cluster
#: that has the spark-sql-kafka jar)
CONNECTORS = ("python", "spark")


class EnforcerConfigError(KqlabError, ValueError):
    """The enforcer's config file is missing, malformed or does not match its policy."""


@dataclass(frozen=True)
class Route:
    """Where the records of one source topic go."""

    source: str
    sink: str
    dlq: str


@dataclass(frozen=True)
class EnforcerFile:
    """A parsed ``enforcer.yaml``."""

    path: Path
    policy_path: Path
    content_hash: str | None
    routes: tuple[Route, ...]
    source: dict[str, str] = field(default_factory=dict)
    trigger_seconds: float = 0.0
    partitioning: str = "same"
    connector: str = "python"


def load_enforcer_file(path: str | Path) -> EnforcerFile:
    """Parse and check ``path``; a relative policy path is relative to the file's folder."""
    p = Path(path)
    try:
        doc: Any = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise EnforcerConfigError(f"{p}: cannot read the enforcer config: {exc}") from None
    if not isinstance(doc, dict):
        raise EnforcerConfigError(f"{p}: an enforcer config is a mapping with "
                                  "kqlab_spark_enforcer, policy, topics")
    unknown = sorted(set(doc) - _KNOWN)
    if unknown:
        raise EnforcerConfigError(f"{p}: unknown key(s) {', '.join(unknown)}; known: "
                                  f"{', '.join(sorted(_KNOWN))}")
    if doc.get("kqlab_spark_enforcer") != ENFORCER_VERSION:
        raise EnforcerConfigError(f"{p}: kqlab_spark_enforcer must be {ENFORCER_VERSION}, "
                                  f"got {doc.get('kqlab_spark_enforcer')!r}")
    pol = doc.get("policy") or {}
    if not isinstance(pol, dict) or not pol.get("path"):
        raise EnforcerConfigError(f"{p}: policy.path is required")
    policy_path = Path(pol["path"])
    if not policy_path.is_absolute():
        policy_path = p.parent / policy_path
    routes = []
    for i, t in enumerate(doc.get("topics") or ()):
        if not isinstance(t, dict) or set(t) != {"source", "sink", "dlq"}:
            raise EnforcerConfigError(f"{p}: topics[{i}] needs exactly source, sink and dlq")
        routes.append(Route(str(t["source"]), str(t["sink"]), str(t["dlq"])))
    if not routes:
        raise EnforcerConfigError(f"{p}: topics is empty: name at least one source topic "
                                  "with its sink and dlq")
    source = doc.get("source") or {}
    if not isinstance(source, dict) or set(source) - set(SOURCE_OPTIONS):
        raise EnforcerConfigError(f"{p}: source takes only {', '.join(SOURCE_OPTIONS)}")
    partitioning = str(doc.get("partitioning", "same"))
    if partitioning not in ("same", "key"):
        raise EnforcerConfigError(f"{p}: partitioning must be same or key, not "
                                  f"{partitioning!r}")
    connector = str(doc.get("connector", "python"))
    if connector not in CONNECTORS:
        raise EnforcerConfigError(f"{p}: connector must be one of {', '.join(CONNECTORS)}, "
                                  f"not {connector!r}")
    try:
        trigger = float(doc.get("trigger_seconds", 0) or 0)
    except (TypeError, ValueError):
        raise EnforcerConfigError(f"{p}: trigger_seconds must be a number") from None
    return EnforcerFile(p, policy_path, pol.get("content_hash"), tuple(routes),
                        {str(k): str(v) for k, v in source.items()}, trigger, partitioning,
                        connector)
