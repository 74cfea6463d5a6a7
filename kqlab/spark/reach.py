"""Can the executors and the driver both reach the verdict folder?  One tiny probe job says so
before any unit is replayed.

Why: on a cluster each task writes its unit's verdict Parquet with pyarrow, and the driver reads
the files back (Spark lists them; kqlab's driver prunes retried attempts' files).  A folder that
exists on every machine but is not *shared* (``/tmp/v`` on each worker's own disk) lets every
task succeed and leaves verdicts scattered where the driver never sees them; an executor that
cannot create the folder fails every unit.  Both used to surface after the whole replay ran.
The probe costs one short job (a task per slot asked for, each writing and reading back a
marker), then the driver looks for every marker.  It is skipped on a classic ``local[...]``
master, where the executors share this process's filesystem.
"""

from __future__ import annotations

import uuid
from typing import Any

from kqlab.spark.engine import SparkReplayError

PROBE_DIR = "_kqlab_probe"


class UnreachableOutput(SparkReplayError):
    """The verdict folder is not one that the executors and the driver share."""


def needs_probe(session: Any, master: str) -> bool:
    """True unless this process *is* the driver of a ``local[...]`` master (the executors then
    share its filesystem).  Over Spark Connect the driver is the server, maybe elsewhere."""
    from kqlab.spark.engine import is_connect

    return is_connect(session) or not master.startswith("local")


def _probe_rows(path: str, token: str) -> Any:
    """The probe's ``mapInArrow`` function: write a marker naming this host, read it back."""
    import pyarrow as pa

    schema = pa.schema([("id", pa.int64()), ("host", pa.string()), ("marker", pa.string()),
                        ("error", pa.string())])

    def probe(batches: Any) -> Any:
        import socket

        from kqlab.spark.outputs import filesystem

        host = socket.gethostname()
        for rb in batches:
            for i in rb.column("id").to_pylist():
                marker, error = "", None
                try:
                    fs, base = filesystem(path)
                    marker = f"{base}/{PROBE_DIR}/{token}-{i}"
                    fs.create_dir(f"{base}/{PROBE_DIR}", recursive=True)
                    with fs.open_output_stream(marker) as f:
                        f.write(host.encode())
                    with fs.open_input_stream(marker) as f:
                        if f.read() != host.encode():
                            error = "the marker read back differs from the one written"
                except OSError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                yield pa.RecordBatch.from_pylist(
                    [{"id": i, "host": host, "marker": marker, "error": error}], schema=schema)

    return probe, "id long, host string, marker string, error string"


def probe_output(session: Any, path: str, tasks: int = 2) -> None:
    """Refuse ``path`` (raise :class:`UnreachableOutput`) unless executors can write a marker
    there, read it back, and this driver sees every marker; the markers are removed after."""
    from pyarrow import fs as pafs

    from kqlab.spark.outputs import filesystem

    token = uuid.uuid4().hex[:12]
    fn, schema = _probe_rows(path, token)
    rows = session.range(0, tasks, 1, tasks).mapInArrow(fn, schema).collect()
    advice = ("pass --out (out=) a folder that the driver and every executor reach: a shared "
              "mount, hdfs://, s3a://")
    failed = [r for r in rows if r["error"]]
    if failed:
        raise UnreachableOutput(f"the executors cannot write the verdict folder {path} "
                                f"(on {failed[0]['host']}: {failed[0]['error']}); {advice}")
    fs, base = filesystem(path)
    unseen = [r for r in rows if fs.get_file_info(r["marker"]).type != pafs.FileType.File]
    if unseen:
        raise UnreachableOutput(
            f"the verdict folder {path} is not shared: the executor on {unseen[0]['host']} "
            f"wrote {unseen[0]['marker']}, but this driver does not see it (a folder local "
            f"to each machine?); {advice}. Nothing was replayed")
    fs.delete_dir(f"{base}/{PROBE_DIR}")
