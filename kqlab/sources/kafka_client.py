"""Client configuration for the live sources, one normalisation for both clients.

A source is given ``"host:port"`` or a librdkafka-style config dict (``bootstrap.servers``
plus SASL/SSL settings).  :func:`client_config` turns either into the dict and its bootstrap
address; :func:`consumer_conf` makes the read-only consumer configuration
(:mod:`kqlab.sources.kafka`); :func:`protocol_client_config` translates the dict for
kafka-python's protocol client, which exact framing uses (:mod:`kqlab.sources.fetch`).

Configs are never printed: results keep only :func:`redact` of them, and error messages name
only ``bootstrap.servers``.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from kqlab.sources.kafka_errors import KafkaSourceError

__all__ = [
    "FETCH_CLIENT_ID",
    "GROUP_PREFIX",
    "PROTOCOL_CLIENT_SETTINGS",
    "REDACTED",
    "client_config",
    "consumer_conf",
    "new_group_id",
    "protocol_client_config",
    "redact",
]

#: every sampling consumer's ``group.id`` starts with this, followed by 16 random hex digits
#: (librdkafka wants one; it is never used to join a group or commit)
GROUP_PREFIX = "kqlab-sample-"
REDACTED = "[redacted]"
#: ``client.id`` of the raw Fetch client (unless the config names one)
FETCH_CLIENT_ID = "kqlab-fetch"

_SECRET_KEY = re.compile(r"password|secret|token|jaas|credential|ssl\.key|keystore|"
                         r"private|sasl\.oauthbearer\.config|\.pem$|api\.key", re.IGNORECASE)

#: librdkafka config key -> (kafka-python config key, conversion): what exact framing can
#: pass on to its protocol client
PROTOCOL_CLIENT_SETTINGS: dict[str, tuple[str, Callable[[str], str]]] = {
    "security.protocol": ("security_protocol", str.upper),
    "sasl.mechanism": ("sasl_mechanism", str),
    "sasl.mechanisms": ("sasl_mechanism", str),
    "sasl.username": ("sasl_plain_username", str),
    "sasl.password": ("sasl_plain_password", str),
    "ssl.ca.location": ("ssl_cafile", str),
    "ssl.certificate.location": ("ssl_certfile", str),
    "ssl.key.location": ("ssl_keyfile", str),
    "ssl.key.password": ("ssl_password", str),
    "client.id": ("client_id", str),
}


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a librdkafka config with secret values replaced.

    >>> redact({"bootstrap.servers": "b:9092", "sasl.password": "hunter2",
    ...         "ssl.key.pem": "-----BEGIN"})
    {'bootstrap.servers': 'b:9092', 'sasl.password': '[redacted]', 'ssl.key.pem': '[redacted]'}
    """
    return {k: (REDACTED if _SECRET_KEY.search(str(k)) and v is not None else v)
            for k, v in config.items()}


def client_config(config_or_bootstrap: str | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """A librdkafka config dict (from ``"host:port"`` or a dict) and its bootstrap address.

    >>> client_config("b:9092")
    ({'bootstrap.servers': 'b:9092'}, 'b:9092')
    """
    config = ({"bootstrap.servers": config_or_bootstrap}
              if isinstance(config_or_bootstrap, str) else dict(config_or_bootstrap))
    bootstrap = str(config.get("bootstrap.servers") or config.get("metadata.broker.list") or "")
    if not bootstrap:
        raise KafkaSourceError("no bootstrap.servers given: pass 'host:port' or a config dict "
                               "with 'bootstrap.servers'")
    return config, bootstrap


def new_group_id() -> str:
    """A fresh ``group.id`` for a sampling consumer (see :data:`GROUP_PREFIX`)."""
    return GROUP_PREFIX + secrets.token_hex(8)


def consumer_conf(config: Mapping[str, Any], group_id: str, errors: list[str]
                  ) -> dict[str, Any]:
    """The read-only consumer configuration: ``config`` plus what a bounded read needs.

    Never commits and never joins a group (auto commit and offset store off; the caller
    assigns partitions itself); reads stop at the end of a partition (``enable.partition.eof``)
    and fail on a missing offset instead of jumping.  Client errors are collected in
    ``errors`` (at most 20) for the messages of a failed request.
    """
    conf = dict(config)
    # a bounded read: don't let an empty fetch (the end of a partition) park for 500 ms
    conf.setdefault("fetch.wait.max.ms", 50)
    # once the prefetch queue is over its bounds librdkafka waits this long before the next
    # Fetch (default 1000 ms): a sample drains the queue fast, so look again soon
    conf.setdefault("fetch.queue.backoff.ms", 20)
    conf.update({
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "allow.auto.create.topics": False,
        "error_cb": lambda err: errors.append(str(err)) if len(errors) < 20 else None,
        "logger": _quiet_logger(),
    })
    return conf


def protocol_client_config(config_or_bootstrap: str | Mapping[str, Any]
                           ) -> tuple[str, dict[str, Any]]:
    """The bootstrap address and kafka-python client settings for exact framing.

    Only the settings in :data:`PROTOCOL_CLIENT_SETTINGS` have a kafka-python equivalent; any
    other ``sasl.*`` / ``ssl.*`` setting is refused rather than silently dropped (the
    connection would then not be secured as asked).
    """
    config, bootstrap = client_config(config_or_bootstrap)
    out: dict[str, Any] = {"bootstrap_servers": bootstrap.split(","),
                           "client_id": FETCH_CLIENT_ID}
    for k, v in config.items():
        if k in PROTOCOL_CLIENT_SETTINGS:
            name, conv = PROTOCOL_CLIENT_SETTINGS[k]
            out[name] = conv(v)
        elif k.startswith(("sasl.", "ssl.")) and v is not None:
            raise KafkaSourceError(f"exact framing cannot pass the client setting {k!r} on "
                                   "(supported: " + ", ".join(sorted(PROTOCOL_CLIENT_SETTINGS))
                                   + ")")
    return bootstrap, out


def _quiet_logger() -> logging.Logger:
    """librdkafka's log lines go nowhere: failures surface as errors with their own messages."""
    logger = logging.getLogger("kqlab.sources.kafka.librdkafka")
    if not logger.handlers:
        logger.propagate = False
        logger.addHandler(logging.NullHandler())
    return logger
