"""Protobuf writer schemas: ``.proto`` files compiled at load, registry subjects with references.

A protobuf "schema" is a file (``FileDescriptorProto``) in a pool with its imports; a value
names one message of it — by the Confluent message-index path after its schema id
(``wire: confluent``), or by the policy's ``schemas.message`` (``wire: raw``).

``.proto`` text is compiled by the compiler bundled in ``grpcio-tools`` (``python -m
grpc_tools.protoc``, run in a child process so its messages are captured and a crash cannot
take the replay down): no system ``protoc``.  The well-known types (``google/protobuf/*.proto``)
come with it.  Registry schemas are text (what a Schema Registry stores) or base64
``FileDescriptorProto`` (what confluent-kafka's serializer registers and its ``mock://``
registry keeps): both are read, references first, as ``ProtobufDeserializer`` reads them.

:class:`ProtoSchema` is what :class:`~kqlab.serde.schemas.SchemaResolver` hands the decoder.
"""

from __future__ import annotations

import base64
import binascii
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kqlab.errors import KqlabError
from kqlab.serde.schema_errors import SchemaNotFound, SchemaSourceError

__all__ = ["MessageIndexError", "ProtoCompileError", "ProtoSchema", "compile_proto_files",
           "proto_folder", "registry_proto", "wkt_pool"]

#: the confluent-kafka rule: imports it never registers (they come with every client)
_BUILTIN_PREFIXES = ("google/protobuf/", "confluent/", "google/type/")


class ProtoCompileError(KqlabError, ValueError):
    """``.proto`` text that does not compile (protoc's own messages, file and line)."""


class MessageIndexError(KqlabError, LookupError):
    """A message-index path or message name the schema does not have."""


def wkt_pool() -> Any:
    """A fresh ``DescriptorPool`` holding the well-known types (as confluent-kafka's)."""
    from google.protobuf import (
        any_pb2,
        api_pb2,
        descriptor_pb2,
        descriptor_pool,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )

    pool = descriptor_pool.DescriptorPool()
    for module in (any_pb2, source_context_pb2, type_pb2, api_pb2, descriptor_pb2,
                   duration_pb2, empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2,
                   wrappers_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    return pool


def _add_files(pool: Any, files: Iterable[Any]) -> None:
    """Add ``FileDescriptorProto``s (dependencies first) not already in ``pool``."""
    for fd in files:
        try:
            pool.FindFileByName(fd.name)
            continue
        except KeyError:
            pass
        pool.Add(fd)


def compile_proto_files(root: Path, names: Sequence[str],
                        descriptor_sets: Sequence[Path] = ()) -> list[Any]:
    """Compile ``names`` (paths relative to ``root``) with their imports.

    Returns the ``FileDescriptorProto``s in dependency order (imports first), as protoc's
    ``--include_imports`` writes them.  ``descriptor_sets`` are ``FileDescriptorSet`` files
    that provide imports already compiled (registry references stored as descriptors).
    Raises :class:`ProtoCompileError` with the compiler's messages.
    """
    from google.protobuf import descriptor_pb2

    try:
        import grpc_tools  # noqa: F401  (only to say what is missing)
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ProtoCompileError("compiling .proto files needs grpcio-tools: "
                                "pip install 'kqlab[kafka]'") from e
    with tempfile.TemporaryDirectory(prefix="kqlab-protoc-") as tmp:
        out = Path(tmp) / "set.pb"
        args = [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", "--include_imports",
                f"--descriptor_set_out={out}"]
        if descriptor_sets:
            args.append("--descriptor_set_in=" + ":".join(str(p) for p in descriptor_sets))
        run = subprocess.run([*args, *names], capture_output=True, text=True, timeout=120,
                             check=False)
        if run.returncode != 0 or not out.exists():
            why = (run.stderr or run.stdout).strip() or f"exit status {run.returncode}"
            raise ProtoCompileError(f"cannot compile {', '.join(names)} in {root}: {why}")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return list(fds.file)


@dataclass(eq=False)
class ProtoSchema:
    """One protobuf writer schema: its file in a pool holding every import.

    ``file`` is the ``FileDescriptor`` a Confluent message-index path walks; ``schema_id`` is
    ``None`` for a folder's files read without framing.  :meth:`message` and :meth:`named`
    give message descriptors; :meth:`message_class` their (cached) message classes.
    """

    schema_id: int | None
    pool: Any
    file: Any
    origin: str = ""
    subject: str | None = None
    #: where :meth:`named` looks short names up (a folder's every file; else ``file``)
    search: tuple[Any, ...] = ()
    _classes: dict[str, Any] = field(default_factory=dict, repr=False)
    _paths: dict[tuple[int, ...], Any] = field(default_factory=dict, repr=False)

    def message(self, indexes: Sequence[int]) -> Any:
        """The message at a Confluent message-index path (``[0]``: the file's first message).

        Raises :class:`MessageIndexError` naming the index and how many messages there are.
        """
        key = tuple(indexes) or (0,)
        hit = self._paths.get(key)
        if hit is None:
            hit = self._paths[key] = self._walk_path(key)
        return hit

    def _walk_path(self, indexes: tuple[int, ...]) -> Any:
        parent: Any = None
        desc = None
        for depth, i in enumerate(indexes):
            msgs = ([self.file.message_types_by_name[m.name] for m in _file_order(self.file)]
                    if parent is None else list(parent.nested_types))
            if not 0 <= i < len(msgs):
                where = (f"{self.file.name} has {len(msgs)} top-level message(s)"
                         if parent is None else
                         f"{parent.full_name} has {len(msgs)} nested message(s)")
                raise MessageIndexError(f"message index {list(indexes)} out of range: "
                                        f"index {i} at depth {depth}, but {where}")
            desc = parent = msgs[i]
        return desc

    def named(self, name: str) -> Any:
        """The message called ``name`` (full name, or a name unique in the pool's files).

        Raises :class:`MessageIndexError` listing the messages there are (nearest first).
        """
        try:
            return self.pool.FindMessageTypeByName(name)
        except KeyError:
            pass
        every = [m for f in (self.search or (self.file,)) for m in all_messages(self.pool, f)]
        every = list(dict.fromkeys(every))
        tail = [full for full in every if full.rsplit(".", 1)[-1] == name]
        if len(tail) == 1:
            return self.pool.FindMessageTypeByName(tail[0])
        import difflib

        near = difflib.get_close_matches(name, every, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else \
            f"; messages: {', '.join(sorted(every)[:12]) or 'none'}"
        if len(tail) > 1:
            hint = f"; it is ambiguous: {', '.join(tail)}"
        raise MessageIndexError(f"no message {name!r} in {self.origin}{hint}")

    def message_class(self, desc: Any) -> Any:
        """The generated message class of ``desc`` (built once per schema)."""
        cls = self._classes.get(desc.full_name)
        if cls is None:
            from google.protobuf import message_factory

            cls = self._classes[desc.full_name] = message_factory.GetMessageClass(desc)
        return cls


def _file_order(file: Any) -> list[Any]:
    """The file's top-level messages in declaration order (what message indexes count)."""
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return list(proto.message_type)


def all_messages(pool: Any, file: Any) -> list[str]:
    """Full names of the messages of ``file`` and of the files it imports (nested included)."""
    out: list[str] = []
    seen: set[str] = set()

    def walk(msgs: Iterable[Any]) -> None:
        for m in msgs:
            out.append(m.full_name)
            walk(m.nested_types)

    def visit(f: Any) -> None:
        if f.name in seen:
            return
        seen.add(f.name)
        walk(f.message_types_by_name.values())
        for dep in f.dependencies:
            if not dep.name.startswith(_BUILTIN_PREFIXES):
                visit(dep)

    visit(file)
    return out


# -- a folder of .proto files -------------------------------------------------------------------
@dataclass(eq=False)
class ProtoFolder:
    """The ``.proto`` files of a folder (and its sub-folders); imports resolve in the folder.

    ``<id>.proto`` at the top is the schema of Confluent schema id ``<id>``, compiled on its
    own (versions of one message may share its names); the other files are compiled together
    and serve unframed values by message name (when there are none, the highest id does).
    """

    root: Path
    names: list[str]
    _pools: dict[str, ProtoSchema] = field(default_factory=dict, repr=False)

    @property
    def ids(self) -> dict[int, str]:
        """Schema id -> file name, for the ``<id>.proto`` files."""
        return {int(n[:-6]): n for n in self.names
                if "/" not in n and n[:-6].lstrip("-").isdigit()}

    def _compile(self, key: str, names: list[str], schema_id: int | None) -> ProtoSchema:
        hit = self._pools.get(key)
        if hit is None:
            pool = wkt_pool()
            _add_files(pool, compile_proto_files(self.root, names))
            files = tuple(pool.FindFileByName(n) for n in names)
            hit = self._pools[key] = ProtoSchema(
                schema_id=schema_id, pool=pool, file=files[0],
                origin=str(self.root / names[0]) if len(names) == 1 else str(self.root),
                search=files)
        return hit

    def schema(self, schema_id: int) -> ProtoSchema | None:
        """The schema of ``<schema_id>.proto`` (None when there is no such file)."""
        name = self.ids.get(schema_id)
        return None if name is None else self._compile(name, [name], schema_id)

    def any_file(self) -> ProtoSchema:
        """The schema unframed values are read with (every file that is not an id's)."""
        ids = self.ids
        shared = [n for n in self.names if n not in ids.values()]
        if not shared:
            top = ids[max(ids)]
            return self._compile(top, [top], None)
        return self._compile("", shared, None)


def proto_files(root: Path) -> list[str]:
    """The ``.proto`` files under ``root``, relative to it (``[]`` when none)."""
    if root.is_file():
        return [root.name] if root.suffix == ".proto" else []
    if not root.is_dir():
        return []
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.proto"))


def proto_folder(root: Path) -> ProtoFolder:
    """The ``.proto`` files under ``root`` (a folder, or one file), compiled when first read."""
    names = proto_files(root)
    if not names:
        raise ProtoCompileError(f"schema folder {root} holds no .proto files")
    return ProtoFolder(root.parent if root.is_file() else root, names)


# -- registry subjects ---------------------------------------------------------------------------
def _as_descriptor(name: str, text: str) -> Any | None:
    """A base64 ``FileDescriptorProto`` (as confluent-kafka registers), or None for .proto text."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    stripped = text.strip()
    if not stripped or any(c in stripped for c in " \n;{"):
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
        fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        return None
    if not fd.name:
        fd.name = name
    return fd


def registry_proto(schema_id: int, text: str, references: Mapping[str, str],
                   origin: str) -> ProtoSchema:
    """The schema registered as ``text`` with its (transitive) ``references`` by import name.

    Texts and descriptors may be mixed: descriptors are handed to the compiler as imports.
    """
    from google.protobuf import descriptor_pb2

    main_name = f"schema-{schema_id}.proto"
    pool = wkt_pool()
    described: list[Any] = []
    texts: dict[str, str] = {}
    for name, ref_text in [*references.items(), (main_name, text)]:
        fd = _as_descriptor(name, ref_text)
        if fd is not None:
            if name == main_name:
                main_name = fd.name or main_name
            described.append(fd)
        elif not name.startswith(_BUILTIN_PREFIXES):
            texts[name] = ref_text
    with tempfile.TemporaryDirectory(prefix="kqlab-proto-") as tmp:
        root = Path(tmp)
        sets: list[Path] = []
        if described:
            fds = descriptor_pb2.FileDescriptorSet(file=[
                *(_builtin_files(described)), *described])
            (root / "_refs.pb").write_bytes(fds.SerializeToString())
            sets.append(root / "_refs.pb")
        for name, body in texts.items():
            path = root / "src" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="utf-8")
        if texts:
            compiled = compile_proto_files(root / "src", sorted(texts), sets)
            described = [*described, *compiled]
    try:
        _add_files(pool, _dependency_order(described))
        file = pool.FindFileByName(main_name)
    except (TypeError, KeyError, ValueError) as e:
        raise ProtoCompileError(f"schema id {schema_id} in {origin} does not build: {e}") from e
    return ProtoSchema(schema_id=schema_id, pool=pool, file=file, origin=origin)


def _builtin_files(files: Sequence[Any]) -> list[Any]:
    """The well-known type files ``files`` import (the compiler needs them in the set)."""
    from google.protobuf import descriptor_pb2

    pool = wkt_pool()
    out = []
    wanted = {dep for f in files for dep in f.dependency if dep.startswith("google/protobuf/")}
    for name in sorted(wanted):
        try:
            found = pool.FindFileByName(name)
        except KeyError:
            continue
        proto = descriptor_pb2.FileDescriptorProto()
        found.CopyToProto(proto)
        out.append(proto)
    return out


def _dependency_order(files: Sequence[Any]) -> list[Any]:
    """``files`` with every file after the files it imports (duplicates by name dropped)."""
    by_name = {f.name: f for f in files}
    done: set[str] = set()
    out: list[Any] = []

    def visit(name: str) -> None:
        if name in done or name not in by_name:
            return
        done.add(name)
        for dep in by_name[name].dependency:
            visit(dep)
        out.append(by_name[name])

    for f in files:
        visit(f.name)
    return out


# -- what SchemaResolver.protobuf asks for -------------------------------------------------------
def load_protobuf(resolver: Any, schema_id: int | None) -> ProtoSchema:
    """The protobuf schema of ``schema_id`` from ``resolver``'s folder or registry.

    Errors the value is to blame for (an id not there, a schema that is not protobuf or does
    not compile) are ``SchemaNotFound``; a source that cannot be read is ``SchemaSourceError``.
    """
    if resolver.path is not None:
        folder = resolver._protos.get("folder")
        if folder is None:
            try:
                folder = proto_folder(Path(resolver.path))
            except ProtoCompileError as e:
                raise SchemaSourceError(str(e)) from e
            resolver._protos["folder"] = folder
        try:
            found = folder.any_file() if schema_id is None else folder.schema(schema_id)
        except ProtoCompileError as e:
            if schema_id is None:
                raise SchemaSourceError(str(e)) from e
            raise SchemaNotFound(f"schema id {schema_id} in {resolver.origin} is not a valid "
                                 f"protobuf schema: {e}") from e
        if found is None:
            raise SchemaNotFound(f"schema id {schema_id} not found in {resolver.origin} "
                                 f"(no {schema_id}.proto)")
        return found
    if schema_id is None:
        subject = resolver.subject
        if subject is None:
            raise SchemaSourceError(f"unframed protobuf from {resolver.origin} needs a "
                                    "subject (its latest version is the writer schema)")
        latest = resolver._call(f"subject {subject!r}", resolver.client.get_latest_version,
                                subject)
        schema = resolver.protobuf(latest.schema_id)
        return ProtoSchema(schema_id=None, pool=schema.pool, file=schema.file,
                           origin=schema.origin, subject=subject)
    schema = resolver._call(f"schema id {schema_id}", resolver.client.get_schema, schema_id)
    kind = (schema.schema_type or "AVRO").upper()
    if kind != "PROTOBUF":
        raise SchemaNotFound(f"schema id {schema_id} in {resolver.origin} is a {kind} schema, "
                             "not protobuf")
    refs: dict[str, str] = {}
    _references(resolver, schema, refs)
    try:
        return registry_proto(schema_id, schema.schema_str, refs,
                              f"schema id {schema_id} in {resolver.origin}")
    except ProtoCompileError as e:
        raise SchemaNotFound(f"schema id {schema_id} in {resolver.origin} is not a valid "
                             f"protobuf schema: {e}") from e


def _references(resolver: Any, schema: Any, out: dict[str, str]) -> None:
    """Every reference of ``schema``, transitively, as import name -> registered text."""
    for ref in schema.references or ():
        if ref.name in out or ref.name.startswith(_BUILTIN_PREFIXES):
            continue
        rs = resolver._call(f"schema reference {ref.name} ({ref.subject} v{ref.version})",
                            resolver.client.get_version, ref.subject, ref.version)
        out[ref.name] = rs.schema.schema_str
        _references(resolver, rs.schema, out)
