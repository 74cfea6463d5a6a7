"""Topic and broker configs that drive batch validation (spec §2, §8), with Kafka's names.

Configs are plain ``{"name": value}`` dicts as a user would write them for ``kafka-configs``.
Topic configs fall back to their broker synonym (``log.cleanup.policy`` ...), then to the
version's default.  Unknown names are rejected with the closest known name — Kafka itself
answers INVALID_CONFIG for them, and a typo must never silently validate against a default.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from kqlab.errors import ConfigError

LONG_MAX = 2**63 - 1

#: topic config -> broker synonym (``ServerTopicConfigSynonyms``)
BROKER_SYNONYMS = {
    "max.message.bytes": "message.max.bytes",
    "segment.bytes": "log.segment.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.format.version": "log.message.format.version",
    "min.insync.replicas": "min.insync.replicas",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
}
#: broker-only settings the validator reads
BROKER_ONLY = {
    "inter.broker.protocol.version": None,  # default: the release's version
    "transaction.partition.verification.enable": True,
    "producer.id.expiration.ms": 86400000,
}
#: topic configs that exist but do not influence produce validation (accepted, ignored)
IGNORED_TOPIC_CONFIGS = {
    "retention.ms", "retention.bytes", "segment.ms", "segment.jitter.ms", "segment.index.bytes",
    "flush.messages", "flush.ms", "index.interval.bytes", "delete.retention.ms",
    "min.compaction.lag.ms", "max.compaction.lag.ms", "min.cleanable.dirty.ratio",
    "file.delete.delay.ms", "preallocate", "unclean.leader.election.enable",
    "message.downconversion.enable", "local.retention.ms", "local.retention.bytes",
    "remote.storage.enable", "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas", "remote.log.copy.disable",
    "remote.log.delete.on.disable",
}
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


def _version_tuple(text: str) -> tuple[int, int]:
    head = text.strip().split("-")[0].split(".")
    try:
        return int(head[0]), int(head[1]) if len(head) > 1 else 0
    except (ValueError, IndexError):
        raise ConfigError(f"cannot read version {text!r}; write it like 3.9 or 4.0") from None


@dataclass(frozen=True, slots=True)
class BrokerRelease:
    """Which broker release's behaviour to emulate (spec §8): ``BrokerRelease.parse("3.9")``.

    Supported: 2.4 (KIP-467's INVALID_RECORD and record_errors) up to 4.x.
    """

    version: tuple[int, int] = (4, 0)

    @classmethod
    def parse(cls, value: str | BrokerRelease | None) -> BrokerRelease:
        """Accept ``"3.9"``, ``"4.1"``, ``"4"`` or an existing release (``None`` = 4.0)."""
        if value is None:
            return cls()
        if isinstance(value, BrokerRelease):
            return value
        v = _version_tuple(value)
        if v < (2, 4):
            raise ConfigError(f"broker version {value} predates KIP-467 (2.4); kqlab emulates "
                              "2.4 and later — pick --broker-version 2.4 or newer")
        return cls(v)

    @property
    def label(self) -> str:
        """``"3.9"``."""
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def before_after_timestamps(self) -> bool:
        """KIP-937 before/after bounds (3.6+) rather than the symmetric difference rule."""
        return self.version >= (3, 6)

    @property
    def has_difference_config(self) -> bool:
        """``message.timestamp.difference.max.ms`` exists (removed in 4.0)."""
        return self.version < (4, 0)

    @property
    def legacy_produce(self) -> bool:
        """Produce v0-v2 (and so v0/v1 message sets) are accepted (removed in 4.0)."""
        return self.version < (4, 0)

    def defaults(self) -> dict[str, Any]:
        """Topic-config defaults of this release."""
        d: dict[str, Any] = {
            "max.message.bytes": 1048588,
            "segment.bytes": 1073741824,
            "cleanup.policy": "delete",
            "compression.type": "producer",
            "message.timestamp.type": "CreateTime",
            "message.timestamp.before.max.ms": LONG_MAX,
            "message.timestamp.after.max.ms": 3600000 if self.version >= (4, 0) else LONG_MAX,
            "min.insync.replicas": 1,
            "compression.gzip.level": -1,
            "compression.lz4.level": 9,
            "compression.zstd.level": 3,
        }
        if self.has_difference_config:
            d["message.timestamp.difference.max.ms"] = LONG_MAX
            d["message.format.version"] = "3.0-IV1"
        return d


def _as_long(name: str, value: object) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not an integer (Kafka expects a long)") from None
    if not -(2**63) <= n <= LONG_MAX:
        raise ConfigError(f"{name}={value} does not fit a Java long")
    return n


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Effective topic settings for validation, resolved against a :class:`BrokerRelease`.

    Build with :meth:`from_dict`; every attribute is the value the broker would use.

    Examples
    --------
    >>> cfg = TopicConfig.from_dict({"cleanup.policy": "compact,delete"}, "3.9")
    >>> cfg.compacted, cfg.max_message_bytes
    (True, 1048588)
    """

    release: BrokerRelease
    max_message_bytes: int
    segment_bytes: int
    compacted: bool
    compression_type: str
    log_append_time: bool
    before_max_ms: int
    after_max_ms: int
    difference_max_ms: int
    to_magic: int
    inter_broker_protocol: tuple[int, int]
    min_insync_replicas: int
    raw: tuple[tuple[str, str], ...] = ()
    #: ``transaction.partition.verification.enable`` (3.6+, on by default): whether stage F
    #: applies the transaction-verification rules
    transaction_verification: bool = True

    @classmethod
    def from_dict(cls, configs: dict[str, Any] | None = None,
                  release: str | BrokerRelease | None = None) -> TopicConfig:
        """Resolve ``configs`` (topic names, broker synonyms or broker-only names) for the
        broker ``release`` (``"3.9"``, ``"4.0"`` ...; None: 4.0)."""
        prof = BrokerRelease.parse(release)
        values = prof.defaults()
        broker_only = dict(BROKER_ONLY)
        configs = dict(configs or {})
        known = set(values) | set(BROKER_SYNONYMS.values()) | set(BROKER_ONLY) \
            | IGNORED_TOPIC_CONFIGS
        synonyms_back = {v: k for k, v in BROKER_SYNONYMS.items()}
        # broker synonyms first, so a topic-level value wins over a broker-level one
        for name in sorted(configs, key=lambda n: n in values):
            value = configs[name]
            if name in BROKER_ONLY:
                broker_only[name] = value
            elif name in values:
                values[name] = value
            elif name in synonyms_back and synonyms_back[name] in values:
                if name not in values:
                    values[synonyms_back[name]] = value
            elif name in IGNORED_TOPIC_CONFIGS:
                continue
            else:
                removed = {"message.timestamp.difference.max.ms", "message.format.version",
                           "log.message.timestamp.difference.max.ms",
                           "log.message.format.version"}
                if name in removed:
                    raise ConfigError(f"{name} was removed in Kafka 4.0; use "
                                      "message.timestamp.before.max.ms / after.max.ms, or pick "
                                      "--broker-version 3.9 to emulate an older broker")
                close = difflib.get_close_matches(name, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"Unknown topic config name: {name}{hint}")
        policy = str(values["cleanup.policy"]).lower()
        compacted = "compact" in [p.strip() for p in policy.split(",")]
        ctype = str(values["compression.type"]).strip().lower()
        if ctype not in COMPRESSION_TYPES:
            raise ConfigError(f"compression.type={values['compression.type']!r} is invalid; use "
                              f"one of {', '.join(COMPRESSION_TYPES)}")
        ttype = str(values["message.timestamp.type"]).strip()
        if ttype not in ("CreateTime", "LogAppendTime"):
            raise ConfigError(f"message.timestamp.type={ttype!r} is invalid; use CreateTime or "
                              "LogAppendTime")
        before = _as_long("message.timestamp.before.max.ms",
                          values["message.timestamp.before.max.ms"])
        after = _as_long("message.timestamp.after.max.ms",
                         values["message.timestamp.after.max.ms"])
        if before < 0 or after < 0:
            raise ConfigError("message.timestamp.before/after.max.ms must be >= 0")
        difference = _as_long("message.timestamp.difference.max.ms",
                              values.get("message.timestamp.difference.max.ms", LONG_MAX))
        if prof.before_after_timestamps and prof.has_difference_config:
            # 3.6-3.9 fallback ([LC] getMessageTimestampBeforeMaxMs / AfterMaxMs)
            if before == LONG_MAX:
                before = difference
            if after == LONG_MAX:
                after = difference
        ibp_text = broker_only["inter.broker.protocol.version"]
        ibp = prof.version if ibp_text is None else _version_tuple(str(ibp_text))
        to_magic = 2
        if prof.version < (4, 0) and ibp < (3, 0):
            mfv = _version_tuple(str(values.get("message.format.version", "3.0-IV1")))
            to_magic = 0 if mfv < (0, 10) else 1 if mfv < (0, 11) else 2
        return cls(
            release=prof,
            max_message_bytes=_as_long("max.message.bytes", values["max.message.bytes"]),
            segment_bytes=_as_long("segment.bytes", values["segment.bytes"]),
            compacted=compacted,
            compression_type=ctype,
            log_append_time=ttype == "LogAppendTime",
            before_max_ms=before,
            after_max_ms=after,
            difference_max_ms=difference,
            to_magic=to_magic,
            inter_broker_protocol=ibp,
            min_insync_replicas=int(values["min.insync.replicas"]),
            raw=tuple(sorted((k, str(v)) for k, v in configs.items())),
            transaction_verification=_as_bool(
                "transaction.partition.verification.enable",
                broker_only["transaction.partition.verification.enable"]),
        )


def _as_bool(name: str, value: object) -> bool:
    """A boolean config as Kafka reads it (``true``/``false``, any case)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"{name}={value!r} is invalid; use true or false")
    return text == "true"


def parse_assignments(items: list[str]) -> dict[str, str]:
    """Turn CLI ``KEY=VALUE`` strings into a dict, with a clear error for a missing ``=``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--config {item!r}: write it as KEY=VALUE, e.g. "
                              "cleanup.policy=compact")
        out[key.strip()] = value.strip()
    return out
