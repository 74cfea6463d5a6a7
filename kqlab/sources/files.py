"""Snapshots: a sample kept on disk as Parquet, readable by the local engine and by Spark.

A snapshot is a folder::

    <snapshot>/
      snapshot.json                 metadata (the only file opening a snapshot reads)
      records/part-00000.parquet    the records table (``RECORDS_SCHEMA``), zstd
      batches/part-00000.parquet    the batches table (``BATCHES_SCHEMA``), exact framing only

Each :meth:`Snapshot.append` adds one part file per table and then rewrites ``snapshot.json``
atomically (write to a temporary file, then rename).  Part files are also written under a
temporary name starting with ``_`` (which Spark and ``pyarrow.dataset`` ignore) and renamed
into place, and the local reader reads exactly the parts listed in the metadata, so a crash
mid-append never leaves a half-written part visible.

The metadata answers the usual questions — counts, partitions, offset and timestamp ranges,
the scan's issues — without touching Parquet.  It never holds secrets: a cluster given as a
client config dict is passed through :func:`redact_config`.

Examples
--------
>>> import tempfile, pyarrow as pa
>>> from kqlab.records import RECORDS_SCHEMA
>>> snap = Snapshot.create(tempfile.mkdtemp() + "/s", topic="orders",
...                        framing="reconstructed:single")
>>> snap.append(RECORDS_SCHEMA.empty_table())
>>> Snapshot.open(snap.path).num_records
0
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kqlab.errors import KqlabError
from kqlab.records import BATCHES_SCHEMA, RECORDS_SCHEMA, conform_batches

#: version of the snapshot folder layout / metadata format this code reads and writes
SNAPSHOT_FORMAT = 1
METADATA_FILE = "snapshot.json"
COMPRESSION = "zstd"
_REQUIRED = ("format", "kqlab_version", "created_at", "topic", "framing", "parts",
             "num_records", "num_batches", "partitions")


class SnapshotError(KqlabError):
    """A snapshot folder cannot be created, opened or appended to as asked."""


# ------------------------------------------------------------------------------ redaction

_SECRET_WORDS = ("password", "secret", "token", "credential", "user.info", "jaas",
                 "key.pem", "keystore.key")


def is_secret_key(key: str) -> bool:
    """True for client config keys that may carry credentials (``sasl.*``, ``*password*`` ...)."""
    k = str(key).lower()
    return k.startswith("sasl.") or any(w in k for w in _SECRET_WORDS)


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config without credential-bearing keys (nested mappings too).

    Drops ``sasl.*``, ``ssl.*password*`` and any key containing ``password``, ``secret``,
    ``token`` or ``credential``, ``*basic.auth.user.info``, ``*jaas*`` and inline private
    keys (``ssl.key.pem``, ``ssl.keystore.key``).

    >>> redact_config({"bootstrap.servers": "b:9092", "sasl.password": "x",
    ...                "ssl.key.password": "y", "security.protocol": "SASL_SSL"})
    {'bootstrap.servers': 'b:9092', 'security.protocol': 'SASL_SSL'}
    """
    out: dict[str, Any] = {}
    for k, v in config.items():
        if is_secret_key(k):
            continue
        out[str(k)] = redact_config(v) if isinstance(v, Mapping) else v
    return out


def _cluster_name(cluster: str | Mapping[str, Any] | None) -> tuple[str | None, dict | None]:
    if cluster is None or isinstance(cluster, str):
        return cluster, None
    if isinstance(cluster, Mapping):
        conf = redact_config(cluster)
        name = conf.get("cluster.name") or conf.get("name") or conf.get("bootstrap.servers")
        return (None if name is None else str(name)), conf
    raise SnapshotError(f"cluster must be a name or a client config dict, not "
                        f"{type(cluster).__name__}")


# ------------------------------------------------------------------------------ helpers

def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _jsonable(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"{what} must be JSON-serialisable: {exc}") from None


def _check_framing(framing: str) -> str:
    if not isinstance(framing, str) or not (
            framing == "exact" or framing == "reconstructed"
            or framing.startswith("reconstructed:")):
        raise SnapshotError(f"framing must be 'exact' or 'reconstructed:<how>' (e.g. "
                            f"'reconstructed:linger'), not {framing!r}")
    return framing


def _check_schema(table: Any, schema: pa.Schema, name: str) -> None:
    if not isinstance(table, pa.Table):
        raise SnapshotError(f"{name} must be a pyarrow.Table, not {type(table).__name__}")
    if not table.schema.equals(schema, check_metadata=False):
        want = {f.name: f.type for f in schema}
        got = {f.name: f.type for f in table.schema}
        diffs = [f"missing {n}" for n in want if n not in got]
        diffs += [f"unexpected {n}" for n in got if n not in want]
        diffs += [f"{n}: {got[n]} (expected {t})" for n, t in want.items()
                  if n in got and got[n] != t]
        if not diffs:
            diffs = ["column order or nullability differs"]
        raise SnapshotError(f"{name} table does not match kqlab.records."
                            f"{name.upper()}_SCHEMA: {'; '.join(diffs)}")


def _issue_dict(issue: Any) -> dict[str, Any]:
    if hasattr(issue, "to_dict"):
        return _jsonable(issue.to_dict(), "issue")
    if isinstance(issue, Mapping):
        return _jsonable(dict(issue), "issue")
    return {"kind": "note", "message": str(issue)}


def _min_max(col: pa.ChunkedArray) -> tuple[int | None, int | None]:
    mm = pc.min_max(col)
    return mm["min"].as_py(), mm["max"].as_py()


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _write_parquet_atomic(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"_{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, tmp, compression=COMPRESSION)
    os.replace(tmp, path)


# ------------------------------------------------------------------------------ snapshot

class Snapshot:
    """A snapshot folder: Parquet parts of the records (and batches) tables plus metadata.

    Use :meth:`create` for a new snapshot and :meth:`open` for an existing one; both read no
    Parquet.  Tables are read on demand by :meth:`records`, :meth:`batches` and
    :meth:`iter_records`.
    """

    def __init__(self, path: str | Path, metadata: dict[str, Any]):
        self.path = Path(path)
        self._meta = metadata

    # -- creating and opening ----------------------------------------------------------------

    @classmethod
    def create(cls, path: str | Path, *, topic: str,
               cluster: str | Mapping[str, Any] | None = None, method: str = "manual",
               ranges: Any = None, framing: str = "exact", extra: Mapping[str, Any] | None = None,
               overwrite: bool = False) -> Snapshot:
        """Start an empty snapshot at ``path`` (a new or empty folder).

        ``cluster`` is a cluster name or a client config dict (stored without credentials, see
        :func:`redact_config`); ``method`` says how the sample was taken (``"segments"``,
        ``"consumer:latest"`` ...); ``ranges`` what was asked for (JSON-serialisable).
        An existing non-empty folder is refused unless ``overwrite=True`` *and* it is a
        snapshot (a folder holding other files is never deleted).
        """
        p = Path(path)
        if not isinstance(topic, str):
            raise SnapshotError(f"topic must be a string, not {type(topic).__name__}")
        _check_framing(framing)
        if p.exists() and not p.is_dir():
            raise SnapshotError(f"{p}: exists and is not a folder; a snapshot is a folder")
        if p.is_dir() and any(p.iterdir()):
            if not overwrite:
                raise SnapshotError(f"{p}: folder exists and is not empty; pass overwrite=True "
                                    "to replace a snapshot, or choose a new folder")
            if not (p / METADATA_FILE).is_file():
                raise SnapshotError(f"{p}: not a snapshot (no {METADATA_FILE}); refusing to "
                                    "delete a folder kqlab did not create")
            shutil.rmtree(p)
        name, conf = _cluster_name(cluster)
        from kqlab._version import __version__

        now = _now_iso()
        meta: dict[str, Any] = {
            "format": SNAPSHOT_FORMAT,
            "kqlab_version": __version__,
            "created_at": now,
            "updated_at": now,
            "topic": topic,
            "cluster": name,
            "cluster_config": conf,
            "method": str(method),
            "ranges": _jsonable(ranges, "ranges"),
            "framing": framing,
            "compression": COMPRESSION,
            "extra": _jsonable(redact_config(extra) if extra else {}, "extra"),
            "parts": [],
            "num_records": 0,
            "num_batches": 0,
            "partitions": {},
            "timestamp_range": None,
            "issues": [],
        }
        p.mkdir(parents=True, exist_ok=True)
        (p / "records").mkdir(exist_ok=True)
        if framing == "exact":
            (p / "batches").mkdir(exist_ok=True)
        _write_json_atomic(p / METADATA_FILE, meta)
        return cls(p, meta)

    @classmethod
    def open(cls, path: str | Path) -> Snapshot:
        """Open an existing snapshot, reading only its ``snapshot.json``."""
        return cls(Path(path), cls._read_metadata(Path(path)))

    @staticmethod
    def _read_metadata(p: Path) -> dict[str, Any]:
        f = p / METADATA_FILE
        if not f.is_file():
            what = "no such folder" if not p.exists() else f"no {METADATA_FILE}"
            raise SnapshotError(f"{p}: not a kqlab snapshot ({what}); create one with "
                                "Snapshot.create or kqlab.sources.segments.snapshot_from_segments")
        try:
            meta = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise SnapshotError(f"{f}: corrupt snapshot metadata ({exc})") from None
        if not isinstance(meta, dict):
            raise SnapshotError(f"{f}: corrupt snapshot metadata (not a JSON object)")
        fmt = meta.get("format")
        if not isinstance(fmt, int) or fmt < 1:
            raise SnapshotError(f"{f}: corrupt snapshot metadata (no valid 'format' version)")
        if fmt > SNAPSHOT_FORMAT:
            raise SnapshotError(
                f"{f}: snapshot format {fmt} was written by kqlab "
                f"{meta.get('kqlab_version', '?')}; this kqlab reads format {SNAPSHOT_FORMAT} "
                "— upgrade kqlab to open it")
        missing = [k for k in _REQUIRED if k not in meta]
        if missing:
            raise SnapshotError(f"{f}: corrupt snapshot metadata (missing {', '.join(missing)})")
        return meta

    def refresh(self) -> Snapshot:
        """Re-read ``snapshot.json`` (after another process appended)."""
        self._meta = self._read_metadata(self.path)
        return self

    def update_extra(self, **values: Any) -> None:
        """Set keys of the metadata's ``extra`` and rewrite ``snapshot.json`` atomically.

        A streaming writer marks its snapshot this way (``complete``, ``cancelled``), so a
        crashed or cancelled run is recognisable from the metadata alone.
        """
        meta = json.loads(json.dumps(self._meta))  # deep copy: commit only on success
        meta.setdefault("extra", {}).update(_jsonable(redact_config(values), "extra"))
        meta["updated_at"] = _now_iso()
        _write_json_atomic(self.path / METADATA_FILE, meta)
        self._meta = meta

    # -- appending ---------------------------------------------------------------------------

    def append(self, records: pa.Table, batches: pa.Table | None = None,
               issues: Iterable[Any] = ()) -> None:
        """Add one part: ``records`` (and, for exact framing, its ``batches``) plus issues.

        Tables must have exactly ``RECORDS_SCHEMA`` / ``BATCHES_SCHEMA`` (schema metadata
        aside) and the snapshot's topic.  Empty tables add no part file, only their issues.
        """
        framing = self._meta["framing"]
        _check_schema(records, RECORDS_SCHEMA, "records")
        if batches is not None:
            if framing != "exact":
                raise SnapshotError(f"{self.path}: framing is {framing!r}; a batches table is "
                                    "only kept for exact framing (read from real batches)")
            _check_schema(batches, BATCHES_SCHEMA, "batches")
        elif framing == "exact" and records.num_rows:
            raise SnapshotError(f"{self.path}: framing is 'exact': append the batches table "
                                "with the records (or create the snapshot with "
                                "framing='reconstructed:<how>')")
        topic = self._meta["topic"]
        for name, t in (("records", records), ("batches", batches)):
            if t is None or not t.num_rows:
                continue
            topics = pc.unique(t.column("topic").combine_chunks()).to_pylist()
            if topics != [topic]:
                raise SnapshotError(f"{self.path}: snapshot is of topic {topic!r}; {name} table "
                                    f"holds topic(s) {topics!r}")
        new_issues = [_issue_dict(i) for i in issues]

        meta = json.loads(json.dumps(self._meta))  # deep copy: commit only on success
        n_b = 0 if batches is None else batches.num_rows
        if records.num_rows or n_b:
            part = f"part-{len(meta['parts']):05d}.parquet"
            _write_parquet_atomic(records.replace_schema_metadata(None),
                                  self.path / "records" / part)
            if framing == "exact":
                b = BATCHES_SCHEMA.empty_table() if batches is None else batches
                _write_parquet_atomic(b.replace_schema_metadata(None),
                                      self.path / "batches" / part)
            held = pc.unique(records.column("partition")).to_pylist() if records.num_rows \
                else pc.unique(batches.column("partition")).to_pylist()
            meta["parts"].append({"name": part, "records": records.num_rows, "batches": n_b,
                                  "partitions": sorted(p for p in held if p is not None)})
            meta["num_records"] += records.num_rows
            meta["num_batches"] += n_b
            self._update_stats(meta, records, batches)
        meta["issues"].extend(new_issues)
        meta["updated_at"] = _now_iso()
        _write_json_atomic(self.path / METADATA_FILE, meta)
        self._meta = meta

    @staticmethod
    def _update_stats(meta: dict[str, Any], records: pa.Table, batches: pa.Table | None) -> None:
        parts: dict[str, dict[str, Any]] = meta["partitions"]

        def entry(p: int) -> dict[str, Any]:
            return parts.setdefault(str(p), {"records": 0, "batches": 0, "first_offset": None,
                                             "last_offset": None})

        def widen(e: dict[str, Any], lo_key: str, hi_key: str, lo: Any, hi: Any) -> None:
            if lo is not None:
                e[lo_key] = lo if e.get(lo_key) is None else min(e[lo_key], lo)
            if hi is not None:
                e[hi_key] = hi if e.get(hi_key) is None else max(e[hi_key], hi)

        if records.num_rows:
            g = records.group_by("partition").aggregate([
                ("offset", "min"), ("offset", "max"),
                ("offset", "count", pc.CountOptions(mode="all"))]).to_pylist()
            for row in g:
                e = entry(row["partition"])
                e["records"] += row["offset_count"]
                widen(e, "first_offset", "last_offset", row["offset_min"], row["offset_max"])
            lo, hi = _min_max(records.column("timestamp"))
            tr = meta["timestamp_range"] or [lo, hi]
            meta["timestamp_range"] = [min(tr[0], lo), max(tr[1], hi)]
        if batches is not None and batches.num_rows:
            last = pc.add(batches.column("batch_offset"),
                          pc.cast(batches.column("last_offset_delta"), pa.int64()))
            t = pa.table({"partition": batches.column("partition"),
                          "first": batches.column("batch_offset"), "last": last})
            g = t.group_by("partition").aggregate([
                ("first", "min"), ("last", "max"),
                ("first", "count", pc.CountOptions(mode="all"))]).to_pylist()
            for row in g:
                e = entry(row["partition"])
                e["batches"] += row["first_count"]
                widen(e, "batch_first_offset", "batch_last_offset", row["first_min"],
                      row["last_max"])
        meta["partitions"] = dict(sorted(parts.items(), key=lambda kv: int(kv[0])))

    # -- metadata questions (no Parquet read) ------------------------------------------------

    @property
    def metadata(self) -> dict[str, Any]:
        """A copy of the snapshot's metadata (``snapshot.json``)."""
        return json.loads(json.dumps(self._meta))

    @property
    def topic(self) -> str:
        return self._meta["topic"]

    @property
    def framing(self) -> str:
        return self._meta["framing"]

    @property
    def cluster(self) -> str | None:
        return self._meta.get("cluster")

    @property
    def num_records(self) -> int:
        return int(self._meta["num_records"])

    @property
    def num_batches(self) -> int:
        return int(self._meta["num_batches"])

    @property
    def partitions(self) -> list[int]:
        """The partitions holding data, ascending."""
        return sorted(int(p) for p in self._meta["partitions"])

    def offset_ranges(self) -> dict[int, tuple[int | None, int | None]]:
        """``{partition: (first_offset, last_offset)}`` of the records kept (inclusive)."""
        return {int(p): (e["first_offset"], e["last_offset"])
                for p, e in self._meta["partitions"].items()}

    @property
    def timestamp_range(self) -> tuple[int, int] | None:
        tr = self._meta.get("timestamp_range")
        return None if tr is None else (tr[0], tr[1])

    @property
    def issues(self) -> list[dict[str, Any]]:
        """The scan issues recorded with the parts (``LogIssue.to_dict`` form)."""
        return json.loads(json.dumps(self._meta.get("issues", [])))

    def part_files(self, table: str = "records") -> list[Path]:
        """The Parquet files of ``table`` (``"records"`` or ``"batches"``) in append order."""
        if table not in ("records", "batches"):
            raise SnapshotError(f"table must be 'records' or 'batches', not {table!r}")
        if table == "batches" and self.framing != "exact":
            return []
        return [self.path / table / part["name"] for part in self._meta["parts"]]

    # -- reading the tables ------------------------------------------------------------------

    def _read(self, table: str, schema: pa.Schema) -> pa.Table:
        files = self.part_files(table)
        if not files:
            return schema.empty_table()
        try:
            parts = [pq.read_table(f, schema=schema) for f in files]
        except (OSError, pa.ArrowException) as exc:
            raise SnapshotError(f"{self.path}: cannot read {table} parts ({exc})") from None
        return pa.concat_tables(parts).replace_schema_metadata(None)

    def records(self) -> pa.Table:
        """The whole records table (``RECORDS_SCHEMA``), in append order."""
        return self._read("records", RECORDS_SCHEMA)

    def batches(self) -> pa.Table:
        """The whole batches table (``BATCHES_SCHEMA``); empty unless framing is exact.  A
        snapshot written before the decode columns existed gets them filled
        (:func:`kqlab.records.conform_batches`)."""
        b = self._read("batches", BATCHES_SCHEMA)
        if b["records_decoded"].null_count:
            b = conform_batches(b, self.records())
        return b

    def iter_records(self, batch_size: int = 65536) -> Iterator[pa.RecordBatch]:
        """Stream the records as ``RECORDS_SCHEMA`` record batches of at most ``batch_size``."""
        for f in self.part_files("records"):
            pf = pq.ParquetFile(f)
            for rb in pf.iter_batches(batch_size=batch_size):
                yield pa.RecordBatch.from_arrays(rb.columns, schema=RECORDS_SCHEMA)

    def iter_parts(self) -> Iterator[tuple[pa.Table, pa.Table | None]]:
        """Yield ``(records, batches)`` per appended part (``batches`` None unless exact)."""
        exact = self.framing == "exact"
        for part in self._meta["parts"]:
            r = pq.read_table(self.path / "records" / part["name"], schema=RECORDS_SCHEMA)
            b = (pq.read_table(self.path / "batches" / part["name"], schema=BATCHES_SCHEMA)
                 if exact else None)
            if b is not None and b["records_decoded"].null_count:  # an older snapshot
                b = conform_batches(b, r)
            yield r, b

    def __repr__(self) -> str:
        return (f"Snapshot({str(self.path)!r}, topic={self.topic!r}, cluster={self.cluster!r}, "
                f"framing={self.framing!r}, records={self.num_records}, "
                f"batches={self.num_batches}, partitions={self.partitions})")


def is_snapshot(path: str | Path) -> bool:
    """True when ``path`` is a folder holding ``snapshot.json`` (not validated)."""
    return (Path(path) / METADATA_FILE).is_file()


__all__ = ["COMPRESSION", "METADATA_FILE", "SNAPSHOT_FORMAT", "Snapshot", "SnapshotError",
           "is_secret_key", "is_snapshot", "redact_config"]
