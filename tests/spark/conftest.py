"""One real local SparkSession (two cores) for the Spark engine tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark():
    # Python workers import plugin rules from this repository (tests.validate.plugins)
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from kqlab.spark import spark_session

    session = spark_session("local[2]", app_name="kqlab-tests",
                            config={"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()
