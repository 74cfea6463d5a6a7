"""A real Apache Kafka broker (single-node KRaft, loopback) for the demo and the tests.

The jars come from Maven Central: ``make setup`` runs ``scripts/setup-kafka``, which resolves
``org.apache.kafka:kafka_2.13`` with its runtime dependencies and a logging binding through the
small Maven project ``extensions/kafka-broker/`` into ``extensions/kafka-broker/target/
kafka-VERSION/libs`` (git-ignored; Maven's local repository is the cache).  Nothing is downloaded
when a broker starts.  ``KQLAB_KAFKA_HOME`` points elsewhere: a folder holding
``kafka-VERSION/libs``.

:class:`KafkaBroker` does what ``bin/kafka-storage.sh format`` and ``bin/kafka-server-start.sh``
do: it writes a ``server.properties`` (controller and broker in one process, both listeners on
free ``127.0.0.1`` ports), formats a temporary log directory, starts ``kafka.Kafka`` in a
process group of its own, waits until a Metadata request lists the broker, and on :meth:`stop`
shuts it down and removes the directory::

    with KafkaBroker() as b:                  # ~3-5 s on this project's machines
        b.create_topic("orders", partitions=3, config={"cleanup.policy": "compact"})
        b.produce("orders", [{"key": b"k", "value": b"v", "partition": 0}])
        print(b.bootstrap)                    # "127.0.0.1:PORT"

Broker settings differ from Kafka's defaults only where a one-node test broker needs it
(replication factors and ISR of the internal topics = 1, one partition for them, no initial
rebalance delay, the log cleaner looking for work every second instead of every 15 s, no
broker-wide time retention since samples carry fixed past clocks); pass
``configs`` to set any other broker property (e.g. ``create.topic.policy.class.name`` with a
plugin jar on ``classpath``).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kqlab.embedded._process import EmbeddedBrokerError, ProcessBroker, free_port

#: the Kafka versions ``make setup`` resolves: the newest 4.x, and the newest 3.9.x (the
#: validator's ``broker_version`` models 3.x too); the first is the default
VERSIONS: tuple[str, ...] = ("4.4.0", "3.9.2")
DEFAULT_VERSION = VERSIONS[0]

_MAVEN_PROJECT = Path("extensions") / "kafka-broker"

#: broker properties every embedded broker gets (``configs`` may override them)
_BASE_CONFIG: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    # how soon the cleaner looks for a compactable log (Kafka: 15 s); what it does is unchanged
    "log.cleaner.backoff.ms": "1000",
    # keep every record by default (Kafka: 7 days by record timestamp): the demo and the tests
    # replay samples at fixed clocks in the past, which Kafka's retention would delete within
    # minutes of the first check; a topic's own retention.ms still applies
    "log.retention.ms": "-1",
}
#: 4.x-only properties (3.9 warns about unknown ones; keep its log quiet)
_BASE_CONFIG_4: dict[str, str] = {
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}

_LOG4J2 = """status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka.server.KafkaRaftServer
logger.kafka.level = INFO
"""
_LOG4J1 = """log4j.rootLogger=WARN, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
"""


def _source_root() -> Path:
    return Path(__file__).resolve().parents[2]


def kafka_home() -> Path:
    """The folder holding ``kafka-VERSION/libs``: ``$KQLAB_KAFKA_HOME``, else the Maven target."""
    env = os.environ.get("KQLAB_KAFKA_HOME")
    return Path(env) if env else _source_root() / _MAVEN_PROJECT / "target"


def kafka_libs(version: str = DEFAULT_VERSION) -> Path:
    """The folder of jars of Kafka ``version``; a clear error if ``make setup`` has not run."""
    libs = kafka_home() / f"kafka-{version}" / "libs"
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise EmbeddedBrokerError(
            f"Apache Kafka {version} is not installed at {libs}: run `make setup` (it resolves "
            f"the broker from Maven Central with `mvn -f {_MAVEN_PROJECT}/pom.xml package "
            f"-Dkafka.version={version}`), or set KQLAB_KAFKA_HOME to a folder holding "
            f"kafka-{version}/libs")
    return libs


def java_binary() -> str:
    """``$KQLAB_JAVA``, else ``$JAVA_HOME/bin/java``, else ``java`` on PATH (Java 17+)."""
    for cand in (os.environ.get("KQLAB_JAVA"),
                 os.path.join(os.environ["JAVA_HOME"], "bin", "java")
                 if os.environ.get("JAVA_HOME") else None):
        if cand and os.access(cand, os.X_OK):
            return cand
    found = shutil.which("java")
    if not found:
        raise EmbeddedBrokerError("the embedded Kafka broker needs Java 17+ and no `java` is on "
                                  "PATH (Debian: apt-get install openjdk-17-jre-headless; or set "
                                  "JAVA_HOME)")
    return found


def cluster_id() -> str:
    """A random KRaft cluster id, as ``kafka-storage.sh random-uuid`` prints it (no JVM start)."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not text.startswith("-"):  # Kafka's Uuid.randomUuid() avoids these too
            return text


class KafkaBroker(ProcessBroker):
    """One single-node KRaft Apache Kafka broker on ``127.0.0.1``.

    ``version``: one of :data:`VERSIONS`.  ``configs``: extra broker properties.
    ``classpath``: extra jars (broker plugins).  ``heap``: the JVM's -Xmx.  The log directory is
    a temporary folder removed on :meth:`stop`; :meth:`kill` and :meth:`start` again keep it (a
    crash and a restart, same ports).
    """

    kind = "Apache Kafka"

    def __init__(self, *, version: str = DEFAULT_VERSION,
                 configs: Mapping[str, str] | None = None,
                 classpath: Sequence[str | Path] = (), heap: str | None = None,
                 start_timeout: float = 90.0, attempts: int = 3) -> None:
        super().__init__(start_timeout=start_timeout)
        if version not in VERSIONS:
            raise EmbeddedBrokerError(f"no embedded Kafka {version!r}: choose one of "
                                      f"{', '.join(VERSIONS)}")
        self.version = version
        self.configs = dict(configs or {})
        self.classpath = [Path(p).resolve() for p in classpath]
        self.heap = heap or os.environ.get("KQLAB_KAFKA_HEAP", "1g")
        self.attempts = attempts
        self.controller_port: int | None = None
        self.dir: Path | None = None
        #: seconds the last start took until Metadata answered (measured, for the docs)
        self.start_seconds: float | None = None

    # -- files ----------------------------------------------------------------------------
    def properties(self) -> dict[str, str]:
        """The ``server.properties`` this broker runs with."""
        assert self.dir is not None and self.port and self.controller_port
        props = dict(_BASE_CONFIG)
        if not self.version.startswith("3."):
            props.update(_BASE_CONFIG_4)
        props.update({
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (f"PLAINTEXT://127.0.0.1:{self.port},"
                          f"CONTROLLER://127.0.0.1:{self.controller_port}"),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.dir / "data"),
        })
        props.update(self.configs)
        return props

    def _write_files(self) -> Path:
        assert self.dir is not None
        path = self.dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        log4j = _LOG4J1 if self.version.startswith("3.") else _LOG4J2
        (self.dir / "log4j.properties").write_text(log4j)
        return path

    def _java(self, main: str, *args: str, heap: str) -> list[str]:
        cp = os.pathsep.join([str(kafka_libs(self.version) / "*"), *map(str, self.classpath)])
        log_flag = ("-Dlog4j.configuration=file:" if self.version.startswith("3.")
                    else "-Dlog4j2.configurationFile=")
        assert self.dir is not None
        return [java_binary(), f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC",
                "-Djava.awt.headless=true", f"{log_flag}{self.dir / 'log4j.properties'}",
                "-cp", cp, main, *args]

    def _format(self, props: Path) -> None:
        """``kafka-storage.sh format`` on a fresh log directory (skipped once formatted)."""
        assert self.dir is not None
        if (self.dir / "data" / "meta.properties").exists():
            return
        cmd = self._java("kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c",
                         str(props), "--ignore-formatted", heap="256m")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise EmbeddedBrokerError(f"formatting the Kafka {self.version} log directory failed "
                                      f"(exit {proc.returncode}): "
                                      f"{(proc.stderr or proc.stdout).strip()[-2000:]}")

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> KafkaBroker:
        """Start (or restart, after :meth:`kill`) and wait until Metadata lists the broker."""
        if self.running:
            return self
        kafka_libs(self.version)  # the clear "run make setup" error before anything else
        fresh = self.dir is None
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix=f"kqlab-kafka-{self.version}-"))
        home = self.dir
        t0 = time.monotonic()
        deadline = t0 + self.start_timeout
        last = "no attempt made"
        for _ in range(max(1, self.attempts if fresh else 1)):
            if fresh or self.port is None:
                self.port, self.controller_port = free_port(), free_port()
            props = self._write_files()
            self._format(props)
            cmd = self._java("kafka.Kafka", str(props), heap=self.heap)
            self._spawn(cmd, env=os.environ, cwd=str(home), log_path=home / "server.log")
            err = self._wait_metadata(deadline)
            if err is None:
                self.start_seconds = time.monotonic() - t0
                return self
            last = err
            tail = self.stderr_tail()
            self._terminate()
            if time.monotonic() >= deadline or "Address already in use" not in tail:
                break
            shutil.rmtree(home / "data", ignore_errors=True)  # new ports, fresh format
        tail = self.stderr_tail()
        self.stop()
        raise EmbeddedBrokerError(
            f"Apache Kafka {self.version} did not become ready within {self.start_timeout:g}s: "
            f"{last}" + (f"\nlast broker output:\n{tail}" if tail else ""))

    def kill(self) -> None:
        """SIGKILL the broker (a crash), keeping its log directory and ports for :meth:`start`."""
        import signal

        from kqlab.embedded._process import signal_group

        self._admin = None
        if self._proc is not None:
            signal_group(self._proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(10)
        self._terminate()

    def _cleanup(self) -> None:
        log = self._log_path
        self._log_path = None  # the log lives in self.dir, removed with it
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        elif log is not None:
            with contextlib.suppress(OSError):
                log.unlink()
        self.controller_port = None

    def stderr_tail(self) -> str:
        """The last lines the broker wrote (WARN and above, and its start/stop lines)."""
        path = self.dir / "server.log" if self.dir is not None else None
        return self._tail(path) if path is not None else ""

    def _await_leaders(self, name: str, partitions: int, deadline: float) -> None:
        """Wait until every partition of the new topic has a leader in the metadata."""
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                md = self.admin().list_topics(name, timeout=2)
                t = md.topics.get(name)
                if (t is not None and t.error is None and len(t.partitions) >= partitions
                        and all(p.leader >= 0 for p in t.partitions.values())):
                    return
            time.sleep(0.05)

    def describe_version(self) -> str:
        """The version the broker reports in its log (``Kafka version: X``), or ``version``."""
        m = re.search(r"Kafka version: (\S+)", self.stderr_tail())
        return m.group(1) if m else self.version


@contextlib.contextmanager
def kafka_broker(**kwargs: Any) -> Iterator[KafkaBroker]:
    """Start a real Kafka broker for the ``with`` block (see :class:`KafkaBroker`)."""
    b = KafkaBroker(**kwargs)
    try:
        yield b.start()
    finally:
        b.stop()
