"""A Spark standalone cluster on loopback, started from the pyspark wheel itself: a master,
workers (separate JVMs) and, optionally, a Spark Connect server.

Why this lives in kqlab (not only in the tests): the cluster tests, the cluster benchmark
(``benchmarks/spark_cluster.py``) and the enforcer's kill -9 run on a cluster
(``scripts/enforcer_kill_cluster.py``) all need the same cluster, and local mode cannot show
what a cluster changes (executors in other JVMs, with their own working directory and
Python).  The workers' Python (``PYSPARK_PYTHON``) is a bare virtualenv with no kqlab and no
pyarrow, so every job must ship kqlab as users do: the packed environment of
:func:`kqlab.spark.ship.pack_environment` in ``spark.archives``.

Each worker offers ``cores`` task slots (default 2) and ``memory`` (default 2 GB), so that two
applications (the Connect server and a classic ``spark-submit`` / CLI driver) each get one
1-core executor per worker at the same time; every application asks for :data:`APP_CONF`
(``spark.executor.cores=1``, ``spark.cores.max=2``).

The packed archive is cached under ``cache`` keyed by a hash of kqlab's sources and
dependency versions, so a rerun packs nothing.  Everything binds to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kqlab.errors import KqlabError

#: what every application on the cluster asks for (see the module docstring)
APP_CONF = {"spark.executor.cores": "1", "spark.cores.max": "2",
            "spark.executor.memory": "768m", "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false"}
#: the default cache of the packed environment and the workers' bare virtualenv
DEFAULT_CACHE = Path.home() / ".cache" / "kqlab" / "spark-env"


class ClusterError(KqlabError, RuntimeError):
    """A part of the cluster did not start (its log's tail is in the message)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    """The pyspark wheel's folder: its ``bin/spark-class`` and ``bin/spark-submit``."""
    import pyspark

    return Path(pyspark.__file__).parent


def packed_environment(cache: Path = DEFAULT_CACHE) -> Path:
    """The packed kqlab environment, built once per source hash (a wheel build and a copy
    of the dependency closure, 12-24 s on a 2-core box; then cached)."""
    from kqlab.spark.ship import pack_environment, sources_hash

    target = cache / f"kqlab-env-{sources_hash()}.tar.gz"
    if not target.exists():
        for old in cache.glob("kqlab-env-*.tar.gz"):
            old.unlink(missing_ok=True)
        pack_environment(target)
    return target


def bare_python(cache: Path = DEFAULT_CACHE) -> Path:
    """A virtualenv with nothing installed (no kqlab, no pyarrow): the workers' Python."""
    env = cache / "bare-venv"
    py = env / "bin" / "python"
    if not py.exists():
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True)
    return py


@dataclass
class Cluster:
    """The running cluster: ``master`` (spark://...), ``remote`` (sc://..., empty without a
    Connect server), the packed environment ``archive`` and the start-up ``timings`` in
    seconds.  ``with Cluster().start() as c:`` stops every JVM it started on exit."""

    master: str = ""
    remote: str = ""
    archive: Path = Path()
    bare_python: Path = Path()
    workdir: Path = Path()
    cache: Path = DEFAULT_CACHE
    timings: dict[str, float] = field(default_factory=dict)
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = field(default_factory=list)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a process that talks to the cluster (loopback, the worker's
        bare Python as the default for executors)."""
        env = dict(os.environ)
        env.update({"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(spark_home()),
                    "PYSPARK_PYTHON": str(self.bare_python)})
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        env.update(extra)
        return env

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        log = self.workdir / f"{name}.log"
        f = log.open("wb")
        p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env,
                             cwd=self.workdir, start_new_session=True)
        f.close()
        self.procs.append((name, p, log))

    def _wait(self, name: str, ready: str, timeout: float) -> float:
        """Seconds until ``name``'s log shows ``ready``; a dead process or a timeout raise
        :class:`ClusterError` with the log's tail."""
        t0 = time.monotonic()
        _, proc, log = next(x for x in self.procs if x[0] == name)
        while time.monotonic() - t0 < timeout:
            text = log.read_text(errors="replace") if log.exists() else ""
            if ready in text:
                return time.monotonic() - t0
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        tail = "\n".join((log.read_text(errors="replace") if log.exists() else "")
                         .splitlines()[-25:])
        state = f"exited {proc.returncode}" if proc.poll() is not None else \
            f"not ready after {timeout:.0f} s"
        raise ClusterError(f"the cluster's {name} {state}; last lines of {log}:\n{tail}")

    def start(self, workers: int = 2, *, connect: bool = True, cores: int = 2,
              memory: str = "2g") -> Cluster:
        """Start the master, ``workers`` workers and (``connect``) a Connect server; a part
        that does not come up stops the others and raises :class:`ClusterError`."""
        try:
            return self._start(workers, connect, cores, memory)
        except BaseException:
            self.stop()
            raise

    def _start(self, workers: int, connect: bool, cores: int, memory: str) -> Cluster:
        t0 = time.monotonic()
        self.archive = packed_environment(self.cache)
        self.bare_python = bare_python(self.cache)
        self.timings["pack_s"] = round(time.monotonic() - t0, 2)
        self.workdir = Path(tempfile.mkdtemp(prefix="kqlab-cluster-"))
        bin_ = spark_home() / "bin"
        port = free_port()
        self.master = f"spark://127.0.0.1:{port}"
        env = self.env(SPARK_NO_DAEMONIZE="1")
        t1 = time.monotonic()
        self._spawn("master", [str(bin_ / "spark-class"), "org.apache.spark.deploy.master.Master",
                               "--host", "127.0.0.1", "--port", str(port),
                               "--webui-port", str(free_port())], env)
        self.timings["master_s"] = round(self._wait("master", "I have been elected leader",
                                                    90), 2)
        for i in range(workers):
            wdir = self.workdir / f"worker{i}"
            wdir.mkdir()
            self._spawn(f"worker{i}", [
                str(bin_ / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                "--webui-port", str(free_port()), "--work-dir", str(wdir), self.master],
                env)
        if connect:
            self._start_connect(env)
        for i in range(workers):
            self.timings[f"worker{i}_s"] = round(
                self._wait(f"worker{i}", "Successfully registered with master", 90), 2)
        if connect:
            self.timings["connect_s"] = round(self._wait(
                "connect", "Spark Connect server started", 120), 2)
        self.timings["total_s"] = round(time.monotonic() - t1, 2)
        return self

    def _start_connect(self, env: dict[str, str]) -> None:
        port = free_port()
        self.remote = f"sc://127.0.0.1:{port}"
        # executors keep the bare Python: each Connect session ships kqlab itself
        # (kqlab.spark.ship.ship_to: an archive artifact of the session)
        conf = {**APP_CONF,
                "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.connect.grpc.binding.port": str(port)}
        args = [str(spark_home() / "bin" / "spark-submit"), "--class",
                "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--master", self.master, "--name", "kqlab-connect"]
        for k, v in conf.items():
            args += ["--conf", f"{k}={v}"]
        self._spawn("connect", [*args, "spark-internal"], env)

    def submit_conf(self, ship: bool = True) -> dict[str, str]:
        """The settings of a classic application on this cluster (shipping kqlab)."""
        from kqlab.spark.ship import ship_conf

        return {**APP_CONF, **(ship_conf(self.archive) if ship else {})}

    def submit_args(self, ship: bool = True) -> list[str]:
        """:meth:`submit_conf` as ``spark-submit`` options (``--conf k=v`` ...)."""
        out: list[str] = []
        for k, v in self.submit_conf(ship).items():
            out += ["--conf", f"{k}={v}"]
        return out

    def stop(self) -> None:
        """SIGTERM every process group it started (newest first), SIGKILL what is left after
        15 s, and remove the work folder."""
        import signal

        for _, p, _ in reversed(self.procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for _, p, _ in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        self.procs.clear()
        if self.workdir != Path():
            shutil.rmtree(self.workdir, ignore_errors=True)
