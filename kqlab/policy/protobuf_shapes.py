"""The shape (:class:`~kqlab.policy.value_shapes.Shape`) of Protobuf values, from descriptors.

:func:`protobuf_value_shape` reads the policy's declared Protobuf schemas the way the decoder
does (:mod:`kqlab.serde.protobuf_schemas`: a folder of ``.proto`` files compiled by
grpcio-tools' protoc, or a registry subject with its references) and describes what kqlab's
Arrow mapping (:mod:`kqlab.serde.protobuf_arrow`) hands the rules: enums as their names
(strings), Timestamps and Durations as temporal values, wrappers as nullable scalars,
Struct/Value/ListValue and a recursion as JSON text, messages as closed records that are null
when not set, ``optional``/oneof members null when not set, fields without presence never
null.  Like every declared shape it claims nothing (None) when a schema cannot be read.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from kqlab.policy.model import Format
from kqlab.policy.value_shapes import DYN, Shape, merge, of, record

__all__ = ["protobuf_value_shape"]

_KINDS = {1: "double", 2: "double", 3: "int", 4: "uint", 5: "int", 6: "uint", 7: "uint",
          8: "bool", 9: "string", 12: "bytes", 13: "uint", 15: "int", 16: "int", 17: "int",
          18: "int", 14: "string"}
_WRAPPED = {"Double": "double", "Float": "double", "Int64": "int", "UInt64": "uint",
            "Int32": "int", "UInt32": "uint", "Bool": "bool", "String": "string",
            "Bytes": "bytes"}


def _elem(fd: Any, stack: tuple[str, ...]) -> Shape:
    """The shape of one value of field ``fd`` (an item, for a repeated field)."""
    if fd.type in _KINDS:
        return of(_KINDS[fd.type])
    msg = fd.message_type
    full = msg.full_name
    if full == "google.protobuf.Timestamp":
        return of("timestamp", "null")
    if full == "google.protobuf.Duration":
        return of("duration", "null")
    if full.startswith("google.protobuf.") and full.endswith("Value") and \
            full[16:-5] in _WRAPPED:
        return of(_WRAPPED[full[16:-5]], "null")
    if full in ("google.protobuf.Struct", "google.protobuf.Value",
                "google.protobuf.ListValue") or full in stack:
        return of("string", "null")
    return message_shape(msg, stack, null=True)


def message_shape(desc: Any, stack: tuple[str, ...] = (), *, null: bool = False) -> Shape:
    """The shape of message ``desc`` as kqlab decodes it (module docstring)."""
    stack = (*stack, desc.full_name)
    fields: dict[str, Shape] = {}
    for fd in desc.fields:
        entry = fd.message_type if fd.type == 11 else None
        if fd.is_repeated and entry is not None and entry.GetOptions().map_entry:
            fields[fd.name] = of("map", items=_elem(entry.fields_by_name["value"], stack))
        elif fd.is_repeated:
            fields[fd.name] = of("list", items=_elem(fd, stack))
        else:
            shape = _elem(fd, stack)
            if fd.has_presence and shape.kinds is not None:
                shape = Shape(shape.kinds | {"null"}, shape.fields, shape.closed, shape.items)
            fields[fd.name] = shape
    return record(fields, null=null)


def _messages(ps: Any, fmt: Format) -> list[Any]:
    """The messages values may be: the one named, else the first (raw) or any top-level one
    (Confluent framing names it by its message index)."""
    src = fmt.schemas
    if src is not None and src.message:
        return [ps.named(src.message)]
    if fmt.wire != "confluent":
        return [ps.message([0])]
    return list(ps.file.message_types_by_name.values())


def protobuf_value_shape(fmt: Format, topic_names: Sequence[str] = (), *,
                         contact_registries: bool = False) -> Shape | None:
    """The merged shape of every Protobuf message ``fmt`` declares, or None when none can be
    read (same rules as :func:`kqlab.policy.declared_schemas.declared_value_shape`)."""
    src = fmt.schemas
    if src is None or not (src.path or src.registry):
        return None
    if src.registry is not None and not contact_registries and (
            not str(src.registry).startswith("mock://") or
            "kqlab.serde.schemas" not in sys.modules):
        return None
    try:
        from kqlab.serde.schemas import SchemaResolver

        subject = src.subject or (f"{topic_names[0]}-value" if topic_names else None)
        resolver = SchemaResolver(registry=src.registry, path=src.path, subject=subject,
                                  config=src.config)
        schemas = [resolver.protobuf(None)]
        if src.path is not None:
            folder = resolver._protos.get("folder")
            schemas += [resolver.protobuf(i) for i in sorted(getattr(folder, "ids", {}))]
        shapes = [message_shape(m) for ps in schemas for m in _messages(ps, fmt)]
    except Exception:  # unreadable, not compiling, no such message: the replay will say
        return None
    return merge(shapes) if shapes else DYN
