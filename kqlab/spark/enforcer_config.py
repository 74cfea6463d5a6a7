"""The Structured Streaming enforcer's config file, ``enforcer.yaml`` (written by
``kqlab export --target spark-streaming``, read by :mod:`kqlab.spark.enforcer`).

::

    kqlab_spark_enforcer: 1
    policy: {path: policy.yaml, content_hash: 3f2a...}
    topics: [{source: orders, sink: orders.valid, dlq: orders.dlq}]
    source: {startingOffsets: earliest, maxOffsetsPerTrigger: 200000}
    trigger_seconds: 0
    partitioning: same
    delivery: at-least-once   # or exactly-once (readers then use read_committed)
    checks: {alert_topic: orders.alerts, lateness_ms: 60000, alert_passing: false}

A route may name its source topics by a regular expression instead,
``{source_pattern: "orders-.*", sink: orders.valid, dlq: orders.dlq}``: the stream then reads
with ``subscribePattern`` (every route's sources in one pattern, :func:`source_pattern`),
so a topic created later that matches is enforced from its first record on, into that
route's sink and dead-letter topic (:func:`route_for`; a named route wins over a pattern,
the first matching pattern over later ones).  The pattern is searched in the topic name
(``format("kqlab-kafka")``'s, Spark's rule): anchor it (``^orders-.*$``) to name whole
topics.  With ``partitioning: same`` the sink and dead-letter topics need as many
partitions as any topic the pattern will match (checked at the start for those that
exist); a pattern route has no alert topic of its own (``checks.alert_topic`` is then
required when the first route is a pattern).

``checks`` says where the enforcer sends the alert rows of the policy's sample checks
(:mod:`kqlab.spark.enforcer_checks`) and how late a record may come: a window is closed once
the newest record timestamp seen, less ``lateness_ms``, passes its end.  Absent, the alert
topic is the first source topic's name + ``.alerts`` (:func:`default_alert_topic`), the
lateness :data:`DEFAULT_LATENESS_MS`, and only failing windows are sent.

Like the gate's ``gate.yaml`` it names only what the vetted policy fixes — the policy (path
and content hash, so an edited file is refused) and the topics — plus how the stream reads;
bootstrap servers, credentials and the checkpoint location are deployment settings, given on
the command line, so the file holds no secret.  This module imports neither PySpark nor a
Kafka client: the exporter writes what it reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kqlab.errors import KqlabError

__all__ = ["DEFAULT_LATENESS_MS", "ENFORCED_CHECK_KINDS", "ENFORCER_VERSION", "SOURCE_OPTIONS",
           "CheckSettings", "EnforcerConfigError", "EnforcerFile", "Route", "check_support",
           "default_alert_topic", "load_enforcer_file", "route_for", "source_pattern"]

#: the config format this enforcer reads
ENFORCER_VERSION = 1
_KNOWN = {"kqlab_spark_enforcer", "policy", "topics", "source", "trigger_seconds",
          "partitioning", "connector", "checks", "delivery"}
#: the ``format("kqlab-kafka")`` options a config may set under ``source``
SOURCE_OPTIONS = ("startingOffsets", "maxOffsetsPerTrigger", "fetchTimeoutMs",
                  "maxBytesPerFetch", "failOnDataLoss")
#: where records are read from and written to: kqlab's Python data source and a
#: confluent-kafka producer (default, runs anywhere), or Spark's Kafka connector (a cluster
#: that has the spark-sql-kafka jar)
CONNECTORS = ("python", "spark")
#: at least once (default), or exactly once: a Kafka transaction per task with the source
#: offset it reached (:mod:`kqlab.spark.enforcer_txn`; readers use read_committed)
DELIVERY = ("at-least-once", "exactly-once")
#: how late (ms) a record may be, by default, behind the newest record seen before the
#: windows it falls in are closed (a minute: partitions read side by side in a micro-batch
#: are seldom further apart)
DEFAULT_LATENESS_MS = 60_000
#: the sample-check kinds the enforcer computes: the windowed ones, each window judged once
#: when closed, and ``freshness`` (per group, against the clock at each micro-batch)
ENFORCED_CHECK_KINDS = ("volume", "freshness", "null_rate", "duplicate_rate", "distinct",
                        "stat", "reject_rate")
_CHECK_KEYS = {"alert_topic", "lateness_ms", "alert_passing"}


def check_support(check: Any) -> str | None:
    """Why the enforcer does not compute sample check ``check`` (None: it does).

    A stream has no whole sample: a check over the whole sample (no ``window``) never ends,
    and drift compares the whole sample's distribution with a baseline's.

    Examples
    --------
    >>> from kqlab.policy.model import Check
    >>> check_support(Check(id="v", kind="volume", window="1m", params={"min": 1})) is None
    True
    >>> check_support(Check(id="v", kind="volume", params={"min": 1}))[:36]
    'a check over the whole sample has no'
    """
    if check.kind not in ENFORCED_CHECK_KINDS:
        return (f"{check.kind} compares the whole sample with a baseline; a stream has no "
                "whole sample, and the enforcer computes no distribution per window (kqlab "
                "replay judges it)")
    if check.kind != "freshness" and check.window is None:
        return ("a check over the whole sample has no end in a stream: give it a window "
                "(the enforcer judges each closed window; kqlab replay judges the whole "
                "sample)")
    return None


def default_alert_topic(routes: tuple[Route, ...] | list[Route]) -> str:
    """The alert topic when the config names none: the first source topic + ``.alerts``
    (a first route by pattern has no topic name to start from: name one)."""
    if routes[0].pattern:
        raise EnforcerConfigError(f"the first route reads topics by pattern "
                                  f"({routes[0].source!r}): name the alert topic of the "
                                  "sample checks in checks.alert_topic")
    return f"{routes[0].source}.alerts"


def source_pattern(routes: Iterable[Route]) -> str | None:
    """The ``subscribePattern`` that reads every route's sources (a named topic anchored,
    whole), or None when every route names its topic (the stream then subscribes).

    >>> source_pattern([Route("orders", "o.valid", "o.dlq"),
    ...                 Route("eu-.*", "eu.valid", "eu.dlq", pattern=True)])
    '^orders$|(?:eu-.*)'
    """
    routes = list(routes)
    if not any(r.pattern for r in routes):
        return None
    return "|".join(f"(?:{r.source})" if r.pattern else f"^{re.escape(r.source)}$"
                    for r in routes)


def route_for(routes: Iterable[Route], topic: str) -> Route | None:
    """The route of ``topic``: the one naming it, else the first whose pattern is found in
    it (None: no route reads it).

    >>> rs = [Route("eu-.*", "eu.valid", "eu.dlq", pattern=True),
    ...       Route("eu-test", "t.valid", "t.dlq")]
    >>> route_for(rs, "eu-test").sink, route_for(rs, "eu-live").sink, route_for(rs, "us")
    ('t.valid', 'eu.valid', None)
    """
    routes = list(routes)
    for r in routes:
        if not r.pattern and r.source == topic:
            return r
    for r in routes:
        if r.pattern and re.search(r.source, topic):
            return r
    return None


@dataclass(frozen=True)
class CheckSettings:
    """Where the sample checks' alert rows go and when a window closes."""

    #: None: :func:`default_alert_topic`
    alert_topic: str | None = None
    lateness_ms: int = DEFAULT_LATENESS_MS
    #: send passing windows too (failing ones always)
    alert_passing: bool = False


class EnforcerConfigError(KqlabError, ValueError):
    """The enforcer's config file is missing, malformed or does not match its policy."""


@dataclass(frozen=True)
class Route:
    """Where the records of one source topic go (``pattern``: of every topic ``source``, a
    regular expression, is found in; see the module doc)."""

    source: str
    sink: str
    dlq: str
    pattern: bool = False


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
    checks: CheckSettings = field(default_factory=CheckSettings)
    delivery: str = "at-least-once"


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
        if not isinstance(t, dict) or set(t) not in ({"source", "sink", "dlq"},
                                                     {"source_pattern", "sink", "dlq"}):
            raise EnforcerConfigError(f"{p}: topics[{i}] needs exactly source (or "
                                      "source_pattern), sink and dlq")
        if "source_pattern" in t:
            try:
                re.compile(str(t["source_pattern"]))
            except re.error as exc:
                raise EnforcerConfigError(f"{p}: topics[{i}].source_pattern "
                                          f"{t['source_pattern']!r} is not a valid regular "
                                          f"expression: {exc}") from None
            routes.append(Route(str(t["source_pattern"]), str(t["sink"]), str(t["dlq"]),
                                pattern=True))
            continue
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
    delivery = str(doc.get("delivery", "at-least-once"))
    if delivery not in DELIVERY:
        raise EnforcerConfigError(f"{p}: delivery must be one of {', '.join(DELIVERY)}, not "
                                  f"{delivery!r}")
    if delivery == "exactly-once" and connector != "python":
        raise EnforcerConfigError(f"{p}: delivery: exactly-once needs connector: python "
                                  "(Spark's Kafka sink writes at least once)")
    try:
        trigger = float(doc.get("trigger_seconds", 0) or 0)
    except (TypeError, ValueError):
        raise EnforcerConfigError(f"{p}: trigger_seconds must be a number") from None
    return EnforcerFile(p, policy_path, pol.get("content_hash"), tuple(routes),
                        {str(k): str(v) for k, v in source.items()}, trigger, partitioning,
                        connector, _check_settings(p, doc.get("checks")), delivery)


def _check_settings(p: Path, doc: Any) -> CheckSettings:
    if doc is None:
        return CheckSettings()
    if not isinstance(doc, dict) or set(doc) - _CHECK_KEYS:
        raise EnforcerConfigError(f"{p}: checks takes only {', '.join(sorted(_CHECK_KEYS))}")
    lateness = doc.get("lateness_ms", DEFAULT_LATENESS_MS)
    if isinstance(lateness, bool) or not isinstance(lateness, int) or lateness < 0:
        raise EnforcerConfigError(f"{p}: checks.lateness_ms must be a whole number of "
                                  f"milliseconds >= 0, not {lateness!r}")
    passing = doc.get("alert_passing", False)
    if not isinstance(passing, bool):
        raise EnforcerConfigError(f"{p}: checks.alert_passing must be true or false, not "
                                  f"{passing!r}")
    topic = doc.get("alert_topic")
    if topic is not None and (not isinstance(topic, str) or not topic):
        raise EnforcerConfigError(f"{p}: checks.alert_topic must be a topic name")
    return CheckSettings(topic, lateness, passing)
