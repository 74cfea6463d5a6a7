"""A real Spark standalone cluster on loopback for the cluster tests, started from the pyspark
wheel itself: a master, two workers (separate JVMs) and a Spark Connect server.

Why this shape: local mode shares the driver's process tree, working directory and Python, so
it cannot show a relative path resolved on an executor, a verdict folder an executor cannot
reach, or a missing dependency on a worker.  Here the workers' Python (``PYSPARK_PYTHON``) is
a bare virtualenv with no kqlab and no pyarrow, so every job must ship kqlab as users do: the
packed environment of :func:`kqlab.spark.ship.pack_environment` in ``spark.archives``.

Each worker offers 2 task slots and 2 GB, so that two applications (the Connect server and a
classic ``spark-submit`` / CLI driver) each get one 1-core executor per worker at the same
time; every application here asks for ``spark.executor.cores=1`` and ``spark.cores.max=2``.

The packed archive is cached under ``.cache/spark-env/`` (git-ignored), keyed by a hash of
kqlab's sources and dependency versions, so a rerun packs nothing.
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

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "spark-env"
#: what every application on the test cluster asks for (see the module docstring)
APP_CONF = {"spark.executor.cores": "1", "spark.cores.max": "2",
            "spark.executor.memory": "768m", "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false"}


class ClusterError(RuntimeError):
    """A part of the test cluster did not start (its log's tail is in the message)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def packed_environment() -> Path:
    """The packed kqlab environment, built once per source hash (a few seconds' copy and
    wheel build, then cached)."""
    from kqlab.spark.ship import pack_environment, sources_hash

    target = CACHE / f"kqlab-env-{sources_hash()}.tar.gz"
    if not target.exists():
        for old in CACHE.glob("kqlab-env-*.tar.gz"):
            old.unlink(missing_ok=True)
        pack_environment(target)
    return target


def bare_python() -> Path:
    """A virtualenv with nothing installed (no kqlab, no pyarrow): the workers' Python."""
    env = CACHE / "bare-venv"
    py = env / "bin" / "python"
    if not py.exists():
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True)
    return py


@dataclass
class Cluster:
    """The running cluster: ``master`` (spark://...), ``remote`` (sc://...), the packed
    environment ``archive`` and the start-up ``timings`` in seconds."""

    master: str = ""
    remote: str = ""
    archive: Path = Path()
    bare_python: Path = Path()
    workdir: Path = Path()
    timings: dict[str, float] = field(default_factory=dict)
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = field(default_factory=list)

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
        raise ClusterError(f"the test cluster's {name} {state}; last lines of {log}:\n{tail}")

    def start(self, workers: int = 2) -> Cluster:
        t0 = time.monotonic()
        self.archive = packed_environment()
        self.bare_python = bare_python()
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
                "--host", "127.0.0.1", "--cores", "2", "--memory", "2g",
                "--webui-port", str(free_port()), "--work-dir", str(wdir), self.master],
                env)
        self._start_connect(env)
        for i in range(workers):
            self.timings[f"worker{i}_s"] = round(
                self._wait(f"worker{i}", "Successfully registered with master", 90), 2)
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

    def stop(self) -> None:
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
        shutil.rmtree(self.workdir, ignore_errors=True)
