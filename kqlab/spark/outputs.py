"""Where the verdict files go: a local folder or any filesystem pyarrow and Spark both reach.

Tasks write with pyarrow and Spark reads the same files back, so one address must work for
both: local paths and ``file:`` URIs, and on clusters ``hdfs://``, ``s3://`` / ``s3a://``
(Spark's Hadoop name for S3; pyarrow calls it ``s3``), ``gs://`` and ``abfs://``.
"""

from __future__ import annotations

from typing import Any


def is_local(out: str) -> bool:
    """True for a path on this machine's filesystem."""
    return "://" not in out or out.startswith("file:")


def filesystem(out: str) -> tuple[Any, str]:
    """``(pyarrow filesystem, path inside it)`` for ``out``."""
    from pyarrow import fs

    if is_local(out):
        path = out.removeprefix("file://").removeprefix("file:")
        return fs.LocalFileSystem(), path
    uri = "s3://" + out[len("s3a://"):] if out.startswith("s3a://") else out
    return fs.FileSystem.from_uri(uri)


def spark_path(path: str, out: str) -> str:
    """The address Spark reads ``path`` (as :func:`filesystem` names it) at."""
    if is_local(out):
        return path
    scheme = out.split("://", 1)[0]
    return f"{scheme}://{path}"
