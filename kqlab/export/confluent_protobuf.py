"""The Protobuf side of the Confluent data contract: its schema, references and field CEL.

A Protobuf subject's contract registers the message's file as a base64
``FileDescriptorProto`` — what confluent-kafka's own ``ProtobufSerializer`` registers and what
its rule executor parses back (``_str_to_proto``); a Confluent Schema Registry accepts it as
well as ``.proto`` text — with one schema reference per imported file that is not a
well-known type (subject = the import name, version 1: confluent-kafka's default reference
subject strategy).  The writer schema comes from the policy's own schema source through
kqlab's resolver (:func:`kqlab.serde.protobuf_schemas.load_protobuf`): the subject's latest
version in a registry, else the folder's schema that unframed values are read with.

confluent-kafka 2.16.0's CEL executor binds a message through ``constraints.MessageType``,
which does not read it as kqlab does (verified with 2.16.0):

==============================  ==========================  ==============================
protobuf                        kqlab's replay              Confluent's CEL executor
==============================  ==========================  ==============================
proto3 scalar at its default    the default value           ``has()`` false; reads as the
                                                            default
enum                            the value's name (string)   the number (int)
optional / message / oneof      null when not set           ``has()`` false; outside
not set                                                     ``has()`` the default
==============================  ==========================  ==============================

:func:`protobuf_field_cel` writes field rules for that binding: no ``has()`` guard on a
field without presence (kqlab checks its default value), and an enum's names as its numbers.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any

from kqlab.export.base import APPROXIMATE, EXACT, ExportError

__all__ = ["CEL_PROTOBUF", "ProtoContract", "protobuf_contract", "protobuf_field_cel"]

#: what a ``cel`` rule on a Protobuf value must be read with (module docstring's table)
CEL_PROTOBUF = ("; on Protobuf values the executor binds an enum as its number (comparing it "
                "with a name raises, which refuses the record) and an unset optional or message "
                "field as its default, where kqlab reads enum names and null")

_ENUM, _MESSAGE = 14, 11
_BUILTIN = ("google/protobuf/", "confluent/", "google/type/")
_WRAPPERS = frozenset(f"google.protobuf.{n}Value" for n in (
    "Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes"))


@dataclass
class ProtoContract:
    """The registered schema of a Protobuf contract and what the round trip needs of it.

    ``schema`` is the base64 ``FileDescriptorProto`` of the message's file; ``references``
    its schema references; ``reference_bodies`` the register body of each referenced subject
    (imports first); ``desc`` the message descriptor, ``cls`` its message class.
    """

    schema: str
    note: str
    desc: Any
    cls: Any
    references: list[dict[str, Any]] = field(default_factory=list)
    reference_bodies: dict[str, dict[str, Any]] = field(default_factory=dict)


def _b64(file: Any) -> str:
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return base64.b64encode(proto.SerializeToString()).decode()


def _refs(file: Any, bodies: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The references of ``file`` (its non-builtin imports), their bodies added to ``bodies``
    (dependencies before the files that import them)."""
    out = []
    for dep in file.dependencies:
        if dep.name.startswith(_BUILTIN):
            continue
        if dep.name not in bodies:
            sub = _refs(dep, bodies)
            bodies[dep.name] = {"schemaType": "PROTOBUF", "schema": _b64(dep),
                                "references": sub}
        out.append({"name": dep.name, "subject": dep.name, "version": 1})
    return out


def protobuf_contract(policy: Any, subject: str) -> ProtoContract:
    """The contract's schema for ``policy``'s Protobuf value (module docstring).

    ``ExportError`` says what to give when the schema source cannot answer.
    """
    from kqlab.serde.schemas import SchemaResolver

    src = policy.value.schemas
    if src is None or not (src.registry or src.path):
        raise ExportError("a Protobuf data contract needs the writer schema: give "
                          "value.schemas.path (a folder of .proto files) or "
                          "value.schemas.registry in the policy")
    resolver = SchemaResolver(registry=src.registry, path=src.path,
                              subject=src.subject or subject, config=src.config)
    try:
        ps = resolver.protobuf(None)
        desc = ps.named(src.message) if src.message else ps.message([0])
    except Exception as exc:
        hint = ""
        if str(src.registry or "").startswith("mock://"):
            hint = (f"; {src.registry} is an in-memory registry, empty in a new process "
                    "unless the same process filled it: point value.schemas.path at a folder "
                    "of .proto files")
        raise ExportError(f"cannot read the Protobuf writer schema of {subject!r}: "
                          f"{type(exc).__name__}: {exc}{hint}") from None
    if desc.containing_type is not None:
        raise ExportError(f"{desc.full_name} is a nested message: confluent-kafka's "
                          "serializer runs rules on top-level messages only")
    bodies: dict[str, dict[str, Any]] = {}
    refs = _refs(desc.file, bodies)
    note = (f"schema: {desc.file.name} ({ps.origin}), message {desc.full_name}, as a base64 "
            f"FileDescriptorProto" + (f" with {len(refs)} reference(s)" if refs else ""))
    return ProtoContract(schema=_b64(desc.file), note=note, desc=desc,
                         cls=ps.message_class(desc), references=refs,
                         reference_bodies=bodies)


def _walk(desc: Any, path: list[str]) -> list[Any] | None:
    """The field descriptors along ``path`` from message ``desc`` (None when a step is not a
    field, or goes into something that is not a plain message)."""
    out = []
    msg = desc
    for i, step in enumerate(path):
        if msg is None:
            return None
        fd = msg.fields_by_name.get(step)
        if fd is None or (fd.is_repeated and i < len(path) - 1):
            return None
        out.append(fd)
        sub = fd.message_type if fd.type == _MESSAGE else None
        msg = sub if sub is not None and not sub.GetOptions().map_entry and \
            not sub.full_name.startswith("google.protobuf.") else None
    return out


def _enum_rule(rule: Any, fd: Any) -> tuple[Any, str] | None:
    """A field_in / field_regex rule on an enum field as a field_in over its numbers."""
    from kqlab.policy.model import Rule

    names = {v.name: v.number for v in fd.enum_type.values}
    if rule.kind == "field_in":
        wanted = [str(v) for v in rule.param("values") or ()]
        nums = sorted({names[w] for w in wanted if w in names} |
                      {int(w) for w in wanted if w.lstrip("-").isdigit()})
        how = "; enum names written as their numbers (the executor binds enums as ints)"
    elif rule.kind == "field_regex":
        pattern = re.compile(str(rule.param("pattern")))
        nums = sorted({n for name, n in names.items() if pattern.search(name)})
        how = ("; approximate: the pattern was matched against the enum's names at export "
               "time (Python re) and written as their numbers — a number without a name, "
               "which kqlab reads as its decimal text, is refused")
    else:
        return None
    params = {k: v for k, v in rule.params.items() if k not in ("pattern", "values")}
    return Rule(id=rule.id, kind="field_in", params={**params, "values": nums}), how


def protobuf_field_cel(rule: Any, desc: Any) -> tuple[str | None, str, str]:
    """A field rule over a Protobuf field, written for the executor's binding (module
    docstring): ``(expression or None, status, how it was written)``."""
    from kqlab.validate.fields import field_rule_to_cel

    path = str(rule.param("field")).split(".")
    fds = _walk(desc, path)
    if fds is None:
        return None, APPROXIMATE, (f" (approximate: {rule.param('field')} is not a plain "
                                   "field path of the message)")
    leaf = fds[-1]
    status, how = EXACT, ""
    if leaf.type == _ENUM and not leaf.is_repeated:
        swapped = _enum_rule(rule, leaf)
        if swapped is not None:
            rule, how = swapped
            status = APPROXIMATE if "approximate" in how else EXACT
        elif rule.kind not in ("field_not_null",):
            status = APPROXIMATE
            how = ("; approximate: kqlab reads the enum as its name, the executor as its "
                   "number")
    expr = field_rule_to_cel(rule)
    v = "value"
    for step, fd in zip(path, fds, strict=True):
        # every step before the leaf is a message, which the executor binds as a
        # MessageType: `type(m) == map` is false for it, so the guard is dropped
        expr = expr.replace(f"type({v}) == map", "true")
        if not fd.has_presence:
            # kqlab reads a field without presence as its value, default included; the
            # executor's has() calls a default unset: no guard, the value is always there
            expr = expr.replace(f"has({v}.{step})", "true")
        v = f"{v}.{step}"
    while "true && " in expr:
        expr = expr.replace("true && ", "")
    return expr, status, " for the Protobuf field types" + how
