"""A SparkSession with kqlab's local defaults, or the caller's own session unchanged.

Why a helper: PySpark's defaults are wrong for a workbench on a laptop or CI box.  The Python
workers must run the interpreter that imported kqlab (``PYSPARK_PYTHON`` has to be set before
the JVM starts, or executors pick whatever ``python3`` is on the PATH and cannot import
kqlab); the driver must bind to loopback only; the UI port must not clash with a second
session or JupyterLab; Arrow must be on; and the start-up log chatter hides real warnings.

An existing session (yours, or the active one in a notebook) is used as it is: kqlab never
changes a session it did not create.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from importlib import resources
from typing import Any

from kqlab.errors import KqlabError


class SparkUnavailable(KqlabError):
    """PySpark or Java is missing, or the session could not start."""


#: settings kqlab applies to the sessions it creates (``config=`` overrides any of them)
DEFAULTS: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "8",
    "spark.python.worker.reuse": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",  # kqlab reports progress itself
    # verdict files are small per task; one output file per task and kind is plenty
    "spark.sql.sources.partitionOverwriteMode": "static",
}


def free_port(start: int = 4040, tries: int = 200) -> int:
    """The first TCP port from ``start`` that nothing listens on at 127.0.0.1."""
    for port in range(start, start + tries):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SparkUnavailable(f"no free port for the Spark UI in {start}..{start + tries - 1}")


def _log4j_option() -> str:
    path = resources.files("kqlab.spark").joinpath("log4j2.properties")
    return f"-Dlog4j.configurationFile=file:{path}"


def _connector_jars(wanted: bool | None, settings: Mapping[str, str]) -> dict[str, str]:
    """``spark.jars`` with Spark's Kafka connector's local jars added (never
    ``spark.jars.packages``: that resolves from a repository when the session starts)."""
    if wanted is False:
        return {}
    from kqlab.spark.connector import SparkKafkaMissing, connector_jars

    try:
        jars = connector_jars()
    except SparkKafkaMissing:
        if wanted:
            raise
        return {}
    have = [j for j in settings.get("spark.jars", "").split(",") if j]
    return {"spark.jars": ",".join([*have, *(str(j) for j in jars)])}


def spark_session(master: str | None = None, *, app_name: str = "kqlab",
                  config: Mapping[str, Any] | None = None, ui: bool = False,
                  quiet: bool = True, spark: Any = None,
                  kafka_connector: bool | None = None, remote: str | None = None,
                  environment: str | None = None) -> Any:
    """The session to run on: ``spark`` when given, else the active one, else a new one.

    A new session gets ``master`` (default ``local[*]``: every core of this machine; pass a
    cluster URL such as ``spark://host:7077`` or ``yarn`` to run elsewhere), the interpreter
    running this code as ``PYSPARK_PYTHON`` (unless already set), Arrow enabled, a driver
    bound to 127.0.0.1 (unless ``config`` says otherwise), :data:`DEFAULTS`, then ``config``.
    ``ui=True`` starts the Spark UI on the first free port from 4040 (off by default: a
    replay needs none and a CI box has no browser).  ``quiet`` keeps the JVM's logs to
    warnings and errors.  ``kafka_connector``: Spark's own ``format("kafka")`` jars
    (:mod:`kqlab.spark.connector`, installed by ``make setup``) on the classpath as local
    files — ``None`` when installed, ``True`` required (:class:`~kqlab.spark.connector.
    SparkKafkaMissing` if not), ``False`` never.

    Examples
    --------
    >>> from kqlab.spark import spark_session  # doctest: +SKIP
    >>> spark = spark_session("local[2]")  # doctest: +SKIP
    >>> spark.conf.get("spark.sql.execution.arrow.pyspark.enabled")  # doctest: +SKIP
    'true'
    """
    if spark is not None:
        return spark
    if remote is not None:
        return connect_session(remote, environment)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailable("the Spark engine needs PySpark: pip install 'kqlab[spark]'"
                               ) from exc
    active = SparkSession.getActiveSession()
    if active is not None and master is None and not config:
        return active
    if active is not None:
        # a second SparkContext cannot run in one process: say what is running instead
        running = active.sparkContext.master
        if master is not None and master != running:
            raise SparkUnavailable(f"a Spark session with master {running!r} is already "
                                   f"running in this process; stop it (spark.stop()) before "
                                   f"asking for {master!r}, or pass spark=<that session>")
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings: dict[str, str] = dict(DEFAULTS)
    settings["spark.ui.enabled"] = "true" if ui else "false"
    if ui:
        settings["spark.ui.port"] = str(free_port())
    if quiet:
        opt = _log4j_option()
        settings["spark.driver.extraJavaOptions"] = opt
        settings["spark.executor.extraJavaOptions"] = opt
    if environment is not None:  # kqlab shipped to the executors (kqlab.spark.ship)
        from kqlab.spark.ship import ship_conf

        settings.update(ship_conf(environment))
        # a driver started from Python takes its executors' Python from PYSPARK_PYTHON
        # (spark.pyspark.python counts for spark-submit only)
        os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    settings.update({str(k): str(v) for k, v in (config or {}).items()})
    settings.update(_connector_jars(kafka_connector, settings))
    builder = SparkSession.builder.master(master or "local[*]").appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # the JVM did not start: say why in one line
        text = str(exc).strip().splitlines()
        hint = ("is Java 17+ installed and on the PATH (or JAVA_HOME set)? "
                "`make check-java` tells")
        raise SparkUnavailable(f"Spark did not start ({text[-1] if text else exc}); {hint}"
                               ) from exc
    if quiet:
        session.sparkContext.setLogLevel("WARN")
    return session


def connect_session(remote: str, environment: str | None = None) -> Any:
    """A Spark Connect session on ``remote`` (``sc://host:port``); ``environment``, a packed
    kqlab environment, is uploaded as a session artifact and runs this session's Python
    functions on the executors (:func:`kqlab.spark.ship.ship_to`)."""
    try:
        from pyspark.sql.connect.session import SparkSession
    except ImportError as exc:
        raise SparkUnavailable("Spark Connect needs its client: pip install 'kqlab[spark]' "
                               "(pyspark[connect])") from exc
    # pyspark.sql.functions build Connect columns only in Connect mode
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    try:
        session = SparkSession.builder.remote(remote).getOrCreate()
    except Exception as exc:
        raise SparkUnavailable(f"no Spark Connect server at {remote}: {exc}") from exc
    if environment is not None:
        from kqlab.spark.ship import ship_to

        ship_to(session, environment)
    return session
