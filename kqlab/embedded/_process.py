"""What every embedded broker shares: a child process on loopback, its log, and a few clients.

:class:`ProcessBroker` owns the process (its own session, so SIGTERM reaches the whole tree),
the log file its output goes to (tailed into error messages) and an admin client, and offers the
two client helpers the demo and the tests need (:meth:`ProcessBroker.create_topic`,
:meth:`ProcessBroker.produce`).  The subclasses say how to launch and when the broker is ready.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kqlab.errors import KqlabError

_STDERR_TAIL_LINES = 20


class EmbeddedBrokerError(KqlabError):
    """The embedded broker could not be found, started, or did not answer in time."""


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def quiet_logger() -> logging.Logger:
    """A logger that swallows librdkafka's chatter (clients of the embedded broker log nothing)."""
    logger = logging.getLogger("kqlab.embedded.librdkafka")
    if not logger.handlers:
        logger.propagate = False
        logger.addHandler(logging.NullHandler())
    return logger


_LIVE: weakref.WeakSet[ProcessBroker] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:  # safety net: no broker outlives the interpreter
    for b in list(_LIVE):
        with contextlib.suppress(Exception):
            b.stop()


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group ``proc`` leads (it was started in a session of its own)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


class ProcessBroker:
    """One broker process on ``127.0.0.1``: a context manager, or :meth:`start` / :meth:`stop`."""

    #: the name used in messages and reprs
    kind = "broker"

    def __init__(self, *, start_timeout: float) -> None:
        self.start_timeout = start_timeout
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._log_path: Path | None = None
        self._lock = threading.Lock()
        self._admin: Any = None

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"`` for ``bootstrap.servers``."""
        if self.port is None:
            raise EmbeddedBrokerError(f"the embedded {self.kind} broker is not running")
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """The process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> ProcessBroker:  # pragma: no cover - subclasses implement
        raise NotImplementedError

    def _spawn(self, cmd: list[str], *, env: Mapping[str, str], cwd: str | None,
               log_path: Path) -> None:
        """Start ``cmd`` in a session of its own with its output appended to ``log_path``."""
        self._log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in _terminate()
        self._proc = subprocess.Popen(cmd, env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
                                      stdout=self._log, stderr=self._log,
                                      start_new_session=True)
        _LIVE.add(self)

    def _wait_metadata(self, deadline: float) -> str | None:
        """``None`` once Metadata answers; else why not (process died or deadline passed)."""
        from confluent_kafka.admin import AdminClient

        assert self._proc is not None
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 2000,
                                "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100,
                                "log_level": 0, "logger": quiet_logger()}
        admin = AdminClient(conf)
        last = "no Metadata response"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return f"process exited with code {self._proc.returncode}"
            try:
                md = admin.list_topics(timeout=min(1.0, max(0.05, deadline - time.monotonic())))
                if md.brokers:
                    return None
                last = "Metadata answered with no broker"
            except Exception as exc:  # KafkaException: not ready yet
                last = f"Metadata request failed: {exc}"
            time.sleep(0.05)
        return f"timed out ({last})"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the broker: SIGTERM to its process group, SIGKILL after ``timeout``.  Idempotent."""
        with self._lock:
            self._admin = None  # drop clients first: open connections slow a broker's exit
            self._terminate(timeout)
            self._cleanup()
            self.port = None
            _LIVE.discard(self)

    def _cleanup(self) -> None:
        """Remove what the broker wrote (its log file; subclasses add their data)."""
        if self._log_path is not None:
            with contextlib.suppress(OSError):
                self._log_path.unlink()
            self._log_path = None

    def _terminate(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                signal_group(proc, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    def __enter__(self) -> ProcessBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"{self.bootstrap} pid={self.pid}" if self.running else "stopped"
        return f"<kqlab Broker ({self.kind}) {state}>"

    def stderr_tail(self) -> str:
        """The last lines the broker wrote (for error messages)."""
        return self._tail(self._log_path) if self._log_path else ""

    @staticmethod
    def _tail(path: Path) -> str:
        try:
            data = path.read_bytes()[-8192:]
        except OSError:
            return ""
        lines = data.decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-_STDERR_TAIL_LINES:])

    # -- helpers --------------------------------------------------------------------------
    def admin(self) -> Any:
        """A cached ``confluent_kafka.admin.AdminClient`` for this broker."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": quiet_logger()}
            self._admin = AdminClient(conf)
        return self._admin

    def create_topic(self, name: str, partitions: int = 1,
                     config: Mapping[str, str] | None = None, *, timeout: float = 10.0) -> None:
        """Create a topic (replication factor 1) and wait until it is created."""
        from confluent_kafka.admin import NewTopic

        topic = NewTopic(name, num_partitions=partitions, replication_factor=1,
                         config=dict(config or {}))
        futures = self.admin().create_topics([topic], operation_timeout=timeout,
                                             request_timeout=timeout)
        try:
            futures[name].result(timeout)
        except Exception as exc:
            raise EmbeddedBrokerError(f"could not create topic {name!r} on {self.bootstrap}: "
                                      f"{exc}") from exc
        self._await_leaders(name, partitions, time.monotonic() + timeout)

    def _await_leaders(self, name: str, partitions: int, deadline: float) -> None:
        """Hook: wait until the new topic's partitions have leaders (Kafka needs it)."""

    def produce(self, topic: str, records: Iterable[Mapping[str, Any]], *,
                timeout: float = 10.0, config: Mapping[str, Any] | None = None
                ) -> list[tuple[int, int]]:
        """Produce ``records`` and wait for every delivery; returns ``[(partition, offset)]``.

        Each record is a mapping with optional ``key``, ``value`` (bytes/str/None),
        ``headers`` (list of ``(str, bytes | None)``, duplicates allowed), ``timestamp`` (ms,
        CreateTime) and ``partition``.  ``config`` adds producer settings to a per-call producer.
        """
        from confluent_kafka import Producer

        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                                "logger": quiet_logger(),
                "message.timeout.ms": int(timeout * 1000)}
        conf.update(config or {})
        producer = Producer(conf)
        results: list[Any] = []

        def on_delivery(err: Any, msg: Any, i: int) -> None:
            results[i] = err if err is not None else (msg.partition(), msg.offset())

        for i, rec in enumerate(records):
            results.append(None)
            kwargs: dict[str, Any] = {"key": rec.get("key"), "value": rec.get("value"),
                                      "on_delivery": lambda e, m, i=i: on_delivery(e, m, i)}
            if rec.get("headers") is not None:
                kwargs["headers"] = list(rec["headers"])
            if rec.get("timestamp") is not None:
                kwargs["timestamp"] = int(rec["timestamp"])
            if rec.get("partition") is not None:
                kwargs["partition"] = int(rec["partition"])
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)
        left = producer.flush(timeout)
        if left:
            raise EmbeddedBrokerError(f"{left} records to {topic!r} not delivered within "
                                      f"{timeout:g}s")
        bad = [r for r in results if not isinstance(r, tuple)]
        if bad:
            raise EmbeddedBrokerError(f"{len(bad)} records to {topic!r} failed: {bad[0]}")
        return results
