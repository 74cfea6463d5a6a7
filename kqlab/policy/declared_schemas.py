"""The schemas a policy declares for its values, read at load time to check rules against them.

``value: {format: avro, schemas: {...}}`` names where the writer schemas are: a folder of
``.avsc`` files (``<id>.avsc`` or ``<subject>.avsc``; ``.json`` files hold JSON Schemas for
``format: json``) or a Schema Registry subject.  :func:`declared_value_shape` reads every
schema there — every version of the subject, every file of the folder, since a sample may hold
values of any of them — and merges their :class:`~kqlab.policy.value_shapes.Shape`.

Reading must not make loading fragile or slow, so it claims nothing (returns None) whenever a
schema cannot be read: no schema declared, a folder that is not there, a subject that is not
registered, a registry that does not answer.  Registries are read without the network unless
asked: a ``mock://`` registry is in this process's memory (filled by a test, a notebook or
``kqlab.cli._common.prepare_registries``); an ``http(s)://`` registry is contacted only with
``contact_registries=True``, which the CLI passes because its commands read the registry
anyway — a notebook editing a policy is never held up by a remote service.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from kqlab.policy.model import Format
from kqlab.policy.value_shapes import Shape, avro_shape, json_schema_shape, merge

__all__ = ["declared_value_shape"]

#: schema kinds by format: what a registry calls them, and the file suffixes of a folder
_KINDS = {"avro": ("AVRO", (".avsc",)), "json": ("JSON", (".json",))}


def declared_value_shape(fmt: Format, topic_names: Sequence[str] = (), *,
                         contact_registries: bool = False) -> Shape | None:
    """The merged shape of every schema ``fmt`` declares, or None when none can be read.

    ``topic_names`` give the registry subjects to try when ``fmt.schemas`` names none
    (``<topic>-value``, the TopicNameStrategy).
    """
    source = fmt.schemas
    if fmt.format == "protobuf":
        from kqlab.policy.protobuf_shapes import protobuf_value_shape

        return protobuf_value_shape(fmt, topic_names, contact_registries=contact_registries)
    if source is None or fmt.format not in _KINDS:
        return None
    kind, suffixes = _KINDS[fmt.format]
    documents: list[object] = []
    if source.path is not None:
        documents = list(_folder_documents(Path(source.path), suffixes))
    elif source.registry is not None:
        subjects = [source.subject] if source.subject else [f"{t}-value" for t in topic_names]
        documents = list(_registry_documents(source.registry, dict(source.config), subjects,
                                             kind, contact_registries))
    if not documents:
        return None
    shape = avro_shape if fmt.format == "avro" else json_schema_shape
    return merge(shape(doc) for doc in documents)


def _folder_documents(path: Path, suffixes: tuple[str, ...]) -> Iterator[object]:
    try:
        files = [path] if path.is_file() else sorted(
            f for f in path.iterdir() if f.suffix in suffixes) if path.is_dir() else []
    except OSError:
        return
    for f in files:
        if f.suffix not in suffixes:
            continue
        try:
            yield json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # an unreadable schema is the replay's error to report, not the loader's


def _registry_documents(url: str, config: dict[str, Any], subjects: list[str], kind: str,
                        contact: bool) -> Iterator[object]:
    if url.startswith("mock://"):
        # a mock registry lives in kqlab.serde.schemas' shared clients: none exist (nothing
        # was registered in this process) until that module is imported
        module = sys.modules.get("kqlab.serde.schemas")
        if module is None and not contact:
            return
    elif not contact:
        return
    try:
        from kqlab.serde.schemas import registry_client

        client = registry_client(url, config)
    except Exception:  # no confluent-kafka, a bad client config: the replay will say
        return
    for subject in subjects:
        try:
            versions = client.get_versions(subject)
        except Exception:  # not registered, unreachable: nothing to claim
            continue
        for version in versions:
            try:
                registered = client.get_version(subject, version)
                schema = registered.schema
                if (schema.schema_type or "AVRO").upper() != kind:
                    continue
                yield json.loads(schema.schema_str)
            except Exception:
                continue
