"""Writer schemas by id: a Confluent Schema Registry or a local folder of ``.avsc`` files.

(Protobuf schemas — ``.proto`` folders and registry subjects — are read by
:meth:`SchemaResolver.protobuf`, see :mod:`kqlab.serde.protobuf_schemas`.)

:class:`SchemaResolver` answers ``schema(id)`` with a :class:`ParsedSchema` (fastavro's parsed
schema plus its Arrow mapping), parsed once and cached per resolver.  Registry access goes
through confluent-kafka's own ``SchemaRegistryClient`` (``mock://`` URLs get its in-memory
mock).  Clients are shared per (url, config) through an explicit cache,
:func:`registry_client`, so a ``mock://orders`` registry filled by a test or notebook is the
one a policy naming ``mock://orders`` reads; :func:`clear_registry_clients` empties it.

Folder mode: ``<id>.avsc`` is the writer schema of id ``<id>``; a non-numeric ``<name>.avsc``
(the only one, or the one named after ``subject``) serves unframed ("raw") Avro.
Schema references are resolved for registries (named types from other subjects), not for
folders.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import orjson

from kqlab.serde.avro_arrow import ArrowMapping, avro_to_arrow
from kqlab.serde.schema_errors import SchemaNotFound, SchemaSourceError

__all__ = [
    "ParsedSchema",
    "SchemaNotFound",
    "SchemaResolver",
    "SchemaSourceError",
    "clear_registry_clients",
    "registry_client",
]


@dataclass(frozen=True, slots=True, eq=False)
class ParsedSchema:
    """One writer schema, parsed for fastavro and mapped to Arrow.

    ``schema`` is the schema's JSON (as registered), ``parsed`` fastavro's ``parse_schema``
    result (what ``schemaless_reader`` takes), ``arrow`` its :class:`ArrowMapping`.
    ``schema_id`` is ``None`` for an unframed schema from a folder.
    """

    schema_id: int | None
    schema: Any
    parsed: Any
    arrow: ArrowMapping
    subject: str | None = None
    version: int | None = None
    origin: str = ""

    @property
    def arrow_type(self):  # -> pa.DataType
        """The Arrow type decoded values of this schema take."""
        return self.arrow.type


_CLIENTS: dict[tuple[str, bytes], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def registry_client(url: str, config: Mapping[str, Any] | None = None):
    """A (shared) confluent-kafka ``SchemaRegistryClient`` for ``url``; ``mock://`` → mock.

    Clients are shared per (url, config); ``mock://`` clients per url alone, so every
    resolver naming the same mock URL sees the same schemas.

    Examples
    --------
    >>> registry_client("mock://doc") is registry_client("mock://doc")
    True
    """
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
    except ImportError as e:  # pragma: no cover - depends on the install
        raise SchemaSourceError("reading schemas from a registry needs confluent-kafka: "
                                "pip install 'kqlab[kafka]'") from e
    conf = {str(k): v for k, v in (config or {}).items()}
    conf["url"] = url
    # A mock registry is one in-memory store per URL (its "scope"), whatever the config.
    key = (url, b"" if url.startswith("mock://") else
           orjson.dumps(conf, option=orjson.OPT_SORT_KEYS, default=str))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            try:
                client = SchemaRegistryClient.new_client(conf)
            except Exception as e:
                raise SchemaSourceError(f"cannot configure a schema registry client for "
                                        f"{url}: {e}") from e
            _CLIENTS[key] = client
        return client


def clear_registry_clients() -> None:
    """Forget every shared registry client (mock registries lose their schemas)."""
    with _CLIENTS_LOCK:
        _CLIENTS.clear()


def _is_not_found(exc: Exception) -> bool:
    return getattr(exc, "http_status_code", None) == 404


class SchemaResolver:
    """Writer schemas by id from a registry (``registry=``) or a folder (``path=``).

    Build it from a policy's :class:`~kqlab.policy.model.SchemaSource` with
    :meth:`from_source`.  Pass ``client=`` to use a registry client you already hold.
    Results (found and not found) are cached per resolver; :meth:`clear` forgets them.

    Examples
    --------
    >>> from confluent_kafka.schema_registry import Schema
    >>> client = registry_client("mock://doc-orders")
    >>> sid = client.register_schema("orders-value", Schema('"long"', "AVRO"))
    >>> r = SchemaResolver(registry="mock://doc-orders")
    >>> r.schema(sid).arrow_type, r.is_registered(sid, "orders-value")
    (DataType(int64), True)
    """

    def __init__(self, *, registry: str | None = None, path: str | Path | None = None,
                 subject: str | None = None, config: Mapping[str, Any] | None = None,
                 client: Any = None) -> None:
        if (registry is None and client is None) == (path is None):
            raise SchemaSourceError("a schema source needs exactly one of a registry URL "
                                    "(or client) and a folder path")
        self.registry = registry
        self.subject = subject
        self.config = dict(config or {})
        self.path = None if path is None else Path(path)
        self._client = client
        self._lock = threading.RLock()
        self._by_id: dict[int, ParsedSchema | SchemaNotFound] = {}
        self._subject_ids: dict[str, frozenset[int]] = {}
        #: folder mode: the .avsc files by stem (empty for a registry)
        self._files: dict[str, Path] = {} if self.path is None else _scan_folder(self.path)
        self._unframed: ParsedSchema | None = None
        #: protobuf writer schemas by id, and the compiled .proto folder (see protobuf())
        self._protos: dict[Any, Any] = {}
        if self.path is None and client is not None and registry is None:
            self.registry = (client.config() or {}).get("url", "registry")

    @classmethod
    def from_source(cls, source: Any, client: Any = None) -> SchemaResolver:
        """A resolver for a policy ``SchemaSource`` (registry, subject, path, config)."""
        return cls(registry=source.registry, path=source.path, subject=source.subject,
                   config=source.config, client=client)

    @property
    def origin(self) -> str:
        """Where schemas come from, as messages name it (the URL or folder)."""
        return str(self.path) if self.path is not None else str(self.registry)

    @property
    def cache_key(self) -> tuple:
        """Identifies the source (decode caches key on it)."""
        return ("path", str(self.path), self.subject) if self.path is not None else \
            ("registry", self.registry, self.subject, id(self.client))

    def __repr__(self) -> str:
        return f"SchemaResolver({self.origin!r}, subject={self.subject!r})"

    def __reduce__(self):
        # Spark ships resolvers to executors: rebuild from the source, not the live client
        # (an image of a mock registry travels with its contents: see portable_resolver).
        if isinstance(self._client, ImageClient):
            return (_rebuild_image, (self._client.image, self.subject, self.config))
        return (_rebuild, (self.registry, None if self.path is None else str(self.path),
                           self.subject, self.config))

    # -- registry ------------------------------------------------------------------------
    @property
    def client(self):
        """The registry client (created on first use)."""
        if self._client is None:
            if self.registry is None:
                raise SchemaSourceError(f"{self.origin} is a folder, not a registry")
            self._client = registry_client(self.registry, self.config)
        return self._client

    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            if _is_not_found(e):
                raise SchemaNotFound(f"{what} not found in {self.origin}") from e
            raise SchemaSourceError(f"schema registry {self.origin} failed to return {what}: "
                                    f"{e}") from e

    def _parse(self, schema_id: int | None, text: str, named: dict[str, Any],
               subject: str | None = None, version: int | None = None,
               origin: str = "") -> ParsedSchema:
        obj = orjson.loads(text)
        # parse_schema adds the named types it defines to ``named`` (references first).
        parsed = fastavro.parse_schema(obj, named_schemas=named)
        arrow = avro_to_arrow(parsed, named)
        return ParsedSchema(schema_id=schema_id, schema=obj, parsed=parsed, arrow=arrow,
                            subject=subject, version=version, origin=origin)

    def _references(self, schema: Any, named: dict[str, Any], seen: set) -> None:
        for ref in schema.references or ():
            key = (ref.subject, ref.version)
            if key in seen:
                continue
            seen.add(key)
            rs = self._call(f"schema reference {ref.name} ({ref.subject} v{ref.version})",
                            self.client.get_version, ref.subject, ref.version)
            self._references(rs.schema, named, seen)
            fastavro.parse_schema(orjson.loads(rs.schema.schema_str), named_schemas=named)

    def _from_registry(self, schema_id: int) -> ParsedSchema:
        schema = self._call(f"schema id {schema_id}", self.client.get_schema, schema_id)
        kind = (schema.schema_type or "AVRO").upper()
        if kind != "AVRO":
            raise SchemaNotFound(f"schema id {schema_id} in {self.origin} is a {kind} schema, "
                                 f"not Avro")
        named: dict[str, Any] = {}
        self._references(schema, named, set())
        return self._parse(schema_id, schema.schema_str, named, origin=self.origin)

    # -- folder --------------------------------------------------------------------------
    def _from_file(self, name: str, schema_id: int | None) -> ParsedSchema:
        f = self._files.get(name)
        if f is None:
            raise SchemaNotFound(f"schema id {schema_id} not found in {self.origin} "
                                 f"(no {name}.avsc)" if schema_id is not None else
                                 f"schema {name!r} not found in {self.origin}")
        try:
            return self._parse(schema_id, f.read_text(encoding="utf-8"), {}, origin=str(f))
        except (OSError, ValueError, fastavro.schema.SchemaParseException) as e:
            raise SchemaSourceError(f"{f} is not a valid Avro schema: {e}") from e

    # -- public --------------------------------------------------------------------------
    def schema(self, schema_id: int) -> ParsedSchema:
        """The writer schema with this id; ``SchemaNotFound`` names the id and the source."""
        schema_id = int(schema_id)
        with self._lock:
            hit = self._by_id.get(schema_id)
            if hit is None:
                try:
                    hit = (self._from_file(str(schema_id), schema_id) if self.path is not None
                           else self._from_registry(schema_id))
                except SchemaNotFound as e:
                    hit = e
                except (ValueError, fastavro.schema.SchemaParseException) as e:
                    hit = SchemaNotFound(f"schema id {schema_id} in {self.origin} is not a "
                                         f"valid Avro schema: {e}")
                self._by_id[schema_id] = hit
        if isinstance(hit, SchemaNotFound):
            raise SchemaNotFound(str(hit))
        return hit

    def ids(self, subject: str) -> frozenset[int]:
        """Every schema id registered under ``subject`` (all versions)."""
        with self._lock:
            if subject not in self._subject_ids:
                client = self.client
                try:
                    versions = self._call(f"subject {subject!r}", client.get_versions, subject)
                except SchemaNotFound:
                    versions = []
                self._subject_ids[subject] = frozenset(
                    self._call(f"subject {subject!r} version {v}", client.get_version,
                               subject, v).schema_id for v in versions)
            return self._subject_ids[subject]

    def is_registered(self, schema_id: int, subject: str | None = None) -> bool:
        """Whether the id exists (under ``subject`` when given; folders have no subjects)."""
        if subject is not None and self.path is None:
            return int(schema_id) in self.ids(subject)
        try:
            self.schema(schema_id)
        except SchemaNotFound:
            return False
        return True

    def latest(self, subject: str | None = None) -> ParsedSchema:
        """The latest schema of ``subject`` (default: the resolver's).

        A folder has no versions: its ``<subject>.avsc`` is the latest.
        """
        subject = subject or self.subject
        if self.path is not None:
            if subject is None:
                raise SchemaSourceError(f"latest() on folder {self.origin} needs a subject")
            return self._from_file(subject, None)
        if subject is None:
            raise SchemaSourceError(f"latest() on {self.origin} needs a subject")
        rs = self._call(f"subject {subject!r}", self.client.get_latest_version, subject)
        parsed = self.schema(rs.schema_id)
        return ParsedSchema(schema_id=parsed.schema_id, schema=parsed.schema,
                            parsed=parsed.parsed, arrow=parsed.arrow, subject=subject,
                            version=rs.version, origin=parsed.origin)

    def unframed(self) -> ParsedSchema:
        """The writer schema of unframed (``wire: raw``) Avro values.

        Folder: ``<subject>.avsc``, else its only non-numeric ``.avsc`` (or its only file).
        Registry: the latest schema of ``subject``.
        """
        with self._lock:
            if self._unframed is not None:
                return self._unframed
            if self.path is None:
                hit = self.latest()
            else:
                names = [n for n in self._files if not n.lstrip("-").isdigit()]
                if self.subject is not None and self.subject in self._files:
                    hit = self._from_file(self.subject, None)
                elif len(names) == 1 or len(self._files) == 1:
                    hit = self._from_file(names[0] if names else next(iter(self._files)), None)
                else:
                    raise SchemaSourceError(
                        f"schema folder {self.origin} has no single schema for unframed Avro: "
                        f"name one with subject (candidates: {', '.join(names) or 'none'})")
            self._unframed = hit
            return hit

    def protobuf(self, schema_id: int | None = None) -> Any:
        """The protobuf writer schema of ``schema_id`` (``None``: for unframed values).

        A :class:`~kqlab.serde.protobuf_schemas.ProtoSchema`.  Folder: its ``.proto`` files
        compiled together (``<id>.proto`` is id ``<id>``; unframed values look their message
        up in every file).  Registry: the schema of the id with its references (unframed:
        the latest version of ``subject``).  Raises ``SchemaNotFound`` (unknown id, not a
        protobuf schema, one that does not compile: it is the value's failure) or
        ``SchemaSourceError`` (no such folder, unreachable registry).
        """
        from kqlab.serde.protobuf_schemas import load_protobuf

        with self._lock:
            hit = self._protos.get(schema_id)
            if hit is None:
                try:
                    hit = load_protobuf(self, schema_id)
                except SchemaNotFound as e:
                    hit = e
                self._protos[schema_id] = hit
        if isinstance(hit, SchemaNotFound):
            raise SchemaNotFound(str(hit))
        return hit

    def clear(self) -> None:
        """Forget cached schemas and subject lookups."""
        with self._lock:
            self._protos.clear()
            self._by_id.clear()
            self._subject_ids.clear()
            self._unframed = None


def _scan_folder(p: Path) -> dict[str, Path]:
    """The ``.avsc`` files of a schema folder (or the one file) by stem."""
    if p.is_file() and p.suffix in (".avsc", ".proto"):
        return {p.stem: p} if p.suffix == ".avsc" else {}
    if not p.is_dir():
        raise SchemaSourceError(f"schema folder {p} does not exist (expected a folder of "
                                f"<schema id>.avsc files or one .avsc file)")
    files = {f.stem: f for f in sorted(p.glob("*.avsc"))}
    if not files and not any(p.rglob("*.proto")):
        raise SchemaSourceError(f"schema folder {p} holds no .avsc or .proto files")
    return files


def _rebuild(registry, path, subject, config) -> SchemaResolver:
    return SchemaResolver(registry=registry, path=path, subject=subject, config=config)


def _rebuild_image(image, subject, config) -> SchemaResolver:
    return SchemaResolver(registry=image.url, subject=subject, config=config,
                          client=image.client())


# -- registry images: a mock registry's contents, shipped to other processes -----------------

class _NotFound(Exception):
    http_status_code = 404


@dataclass(frozen=True)
class RegistryImage:
    """Everything a registry holds (every subject's versions, by id), as plain data.

    A ``mock://`` registry lives in one process's memory, so a Spark executor asking for
    ``mock://kqlab-demo`` would find it empty and call every schema id unknown.  The driver
    takes an image of it (:func:`registry_image`); executors serve lookups from the image
    (:meth:`client`), with the same answers and the same not-found cases.
    """

    url: str
    #: subject -> [(version, schema id, schema text, schema type, references)]
    subjects: dict[str, list[tuple[int, int, str, str, tuple[tuple[str, str, int], ...]]]]

    def client(self) -> ImageClient:
        """A read-only client answering like the registry the image was taken from."""
        return ImageClient(self)


def registry_image(url: str, client: Any = None) -> RegistryImage:
    """An image of the registry at ``url`` (or of ``client``): every subject and version."""
    client = client or registry_client(url)
    subjects: dict[str, list] = {}
    for subject in sorted(client.get_subjects()):
        rows = []
        for version in sorted(client.get_versions(subject)):
            rs = client.get_version(subject, version)
            refs = tuple((r.name, r.subject, r.version) for r in rs.schema.references or ())
            rows.append((version, rs.schema_id, rs.schema.schema_str,
                         rs.schema.schema_type or "AVRO", refs))
        subjects[subject] = rows
    return RegistryImage(url, subjects)


class ImageClient:
    """The lookups :class:`SchemaResolver` makes, served from a :class:`RegistryImage`."""

    def __init__(self, image: RegistryImage):
        from confluent_kafka.schema_registry import RegisteredSchema, Schema, SchemaReference

        self.image = image
        self._versions: dict[str, dict[int, Any]] = {}
        self._by_id: dict[int, Any] = {}
        for subject, rows in image.subjects.items():
            for version, sid, text, kind, refs in rows:
                schema = Schema(text, kind, [SchemaReference(n, s, v) for n, s, v in refs])
                self._versions.setdefault(subject, {})[version] = RegisteredSchema(
                    schema_id=sid, guid=None, schema=schema, subject=subject, version=version)
                self._by_id.setdefault(sid, schema)

    def config(self) -> dict[str, str]:
        return {"url": self.image.url}

    def get_subjects(self) -> list[str]:
        return sorted(self._versions)

    def get_schema(self, schema_id: int, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._by_id[int(schema_id)]
        except KeyError:
            raise _NotFound(f"schema id {schema_id} not found") from None

    def get_versions(self, subject: str, *args: Any, **kwargs: Any) -> list[int]:
        return sorted(self._versions.get(subject, {}))

    def get_version(self, subject: str, version: int, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._versions[subject][int(version)]
        except KeyError:
            raise _NotFound(f"subject {subject} version {version} not found") from None

    def get_latest_version(self, subject: str, *args: Any, **kwargs: Any) -> Any:
        versions = self._versions.get(subject)
        if not versions:
            raise _NotFound(f"subject {subject} not found")
        return versions[max(versions)]


def portable_resolver(resolver: SchemaResolver) -> SchemaResolver:
    """``resolver`` as other processes can rebuild it: a ``mock://`` registry becomes an image
    of its contents (a live registry or a folder is rebuilt from its address as is)."""
    if resolver.registry is None or not str(resolver.registry).startswith("mock://"):
        return resolver
    image = registry_image(resolver.registry, resolver.client)
    return SchemaResolver(registry=resolver.registry, subject=resolver.subject,
                          config=resolver.config, client=image.client())
