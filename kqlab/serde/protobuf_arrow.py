"""Parsed protobuf messages to Arrow columns, field by field (no per-record dict).

Mapping (a message is a struct; the first column is what every reader of the column sees):

==========================================  ==============================================
protobuf                                    Arrow
==========================================  ==============================================
int32 / sint32 / sfixed32                   int32
int64 / sint64 / sfixed64                   int64
uint32 / fixed32, uint64 / fixed64          uint32, uint64
float, double, bool                         float32, float64, bool
string, bytes                               string, binary
enum                                        string: the value's name (an open enum's
                                            number without a name: its decimal text)
message (singular)                          struct, null when not set
repeated T                                  list<T>
map<K, V>                                   map<K, V>
oneof members, ``optional``, proto2         null when not the one set / not set
google.protobuf.Timestamp                   timestamp[ns, tz=UTC], null when not set
google.protobuf.Duration                    duration[ns]
google.protobuf.*Value wrappers             the wrapped scalar, null when not set
google.protobuf.Struct / Value / ListValue  string: the JSON text (protobuf's JSON mapping)
a message that contains itself              string: the JSON text, from the recursion on
==========================================  ==============================================

Proto3 scalars without presence read as protobuf reads them: their default when absent.
:func:`messages_to_arrow` also counts each message's unknown fields (those of its nested
messages included): a writer with a newer schema leaves fields its reader's schema lacks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, methodcaller
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

__all__ = ["MessagePlan", "TemporalRangeError", "message_dict", "message_plan",
           "messages_to_arrow"]

_T: dict[int, pa.DataType] = {
    1: pa.float64(), 2: pa.float32(), 3: pa.int64(), 4: pa.uint64(), 5: pa.int32(),
    6: pa.uint64(), 7: pa.uint32(), 8: pa.bool_(), 9: pa.string(), 12: pa.binary(),
    13: pa.uint32(), 15: pa.int32(), 16: pa.int64(), 17: pa.int32(), 18: pa.int64(),
}
_MESSAGE, _GROUP, _ENUM = 11, 10, 14
_WRAPPERS = {f"google.protobuf.{n}": t for n, t in (
    ("DoubleValue", pa.float64()), ("FloatValue", pa.float32()), ("Int64Value", pa.int64()),
    ("UInt64Value", pa.uint64()), ("Int32Value", pa.int32()), ("UInt32Value", pa.uint32()),
    ("BoolValue", pa.bool_()), ("StringValue", pa.string()), ("BytesValue", pa.binary()))}
_JSON_TYPES = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")
_NS = 1_000_000_000
_I64 = np.iinfo(np.int64)


class TemporalRangeError(ValueError):
    """A Timestamp or Duration outside what nanoseconds in an int64 hold (1677-2262)."""


@dataclass
class _Elem:
    """How one element of a field (the field's value, or one item of a repeated field) maps."""

    kind: str  # scalar | enum | message | timestamp | duration | wrapper | json
    type: pa.DataType
    names: dict[int, str] | None = None
    plan: MessagePlan | None = None


@dataclass
class _Field:
    name: str
    get: Callable[[Any], Any]
    presence: bool
    shape: str  # single | list | map
    elem: _Elem
    key: _Elem | None = None


@dataclass
class MessagePlan:
    """A message's Arrow type and the steps that fill it (see :func:`message_plan`)."""

    full_name: str
    type: pa.StructType
    fields: list[_Field] = field(default_factory=list)


def _elem(fd: Any, stack: tuple[str, ...]) -> _Elem:
    if fd.type == _ENUM:
        names = {v.number: v.name for v in fd.enum_type.values}
        return _Elem("enum", pa.string(), names=names)
    if fd.type not in (_MESSAGE, _GROUP):
        return _Elem("scalar", _T[fd.type])
    msg = fd.message_type
    full = msg.full_name
    if full == "google.protobuf.Timestamp":
        return _Elem("timestamp", pa.timestamp("ns", tz="UTC"))
    if full == "google.protobuf.Duration":
        return _Elem("duration", pa.duration("ns"))
    if full in _WRAPPERS:
        return _Elem("wrapper", _WRAPPERS[full])
    if full in _JSON_TYPES or full in stack:
        return _Elem("json", pa.string())
    plan = message_plan(msg, stack)
    return _Elem("message", plan.type, plan=plan)


def message_plan(desc: Any, stack: tuple[str, ...] = ()) -> MessagePlan:
    """The Arrow mapping of message ``desc`` (module docstring), computed once per call."""
    stack = (*stack, desc.full_name)
    out = MessagePlan(desc.full_name, pa.struct([]))
    arrow_fields = []
    for fd in desc.fields:
        entry = fd.message_type if fd.type == _MESSAGE else None
        if fd.is_repeated and entry is not None and entry.GetOptions().map_entry:
            key = _elem(entry.fields_by_name["key"], stack)
            val = _elem(entry.fields_by_name["value"], stack)
            f = _Field(fd.name, attrgetter(fd.name), False, "map", val, key)
            typ: pa.DataType = pa.map_(key.type, val.type)
        elif fd.is_repeated:
            f = _Field(fd.name, attrgetter(fd.name), False, "list", _elem(fd, stack))
            typ = pa.list_(f.elem.type)
        else:
            f = _Field(fd.name, attrgetter(fd.name), bool(fd.has_presence), "single",
                       _elem(fd, stack))
            typ = f.elem.type
        out.fields.append(f)
        arrow_fields.append(pa.field(fd.name, typ))
    out.type = pa.struct(arrow_fields)
    return out


def _unknown(msgs: Sequence[Any]) -> np.ndarray:
    from google.protobuf.unknown_fields import UnknownFieldSet

    return np.fromiter((len(UnknownFieldSet(m)) for m in msgs), dtype=np.int64,
                       count=len(msgs))


def _nanos(subs: Sequence[Any], mask: np.ndarray | None) -> np.ndarray:
    secs = np.fromiter(map(attrgetter("seconds"), subs), dtype=np.int64, count=len(subs))
    nanos = np.fromiter(map(attrgetter("nanos"), subs), dtype=np.int64, count=len(subs))
    limit = _I64.max // _NS - 1
    bad = np.abs(secs) > limit
    if mask is not None:
        bad &= ~mask
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TemporalRangeError(f"{int(secs[i])} s is outside the nanosecond range of Arrow "
                                 "timestamps (years 1677-2262)")
    return np.where(bad, 0, secs) * _NS + nanos


def message_dict(msg: Any) -> dict[str, Any]:
    """protobuf's JSON mapping of ``msg`` as a dict (field names as declared, not camelCase;
    enums by name, Timestamps in RFC 3339): a message as a person reads it."""
    from google.protobuf import json_format

    out: dict[str, Any] = json_format.MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    return out


def _to_json(msg: Any) -> str:
    """protobuf's JSON mapping of ``msg`` (:func:`message_dict`) as text."""
    return orjson.dumps(message_dict(msg)).decode()


def _elements(values: list[Any], elem: _Elem,
              mask: np.ndarray | None) -> tuple[pa.Array, np.ndarray | None]:
    """Arrow array of ``values`` (one field's values, or flat items); ``mask`` True = null.

    Also returns the unknown-field count of each value when they are messages.
    """
    kind = elem.kind
    if kind == "scalar":
        return pa.array(values, elem.type, mask=mask), None
    if kind == "enum":
        names = elem.names or {}
        return pa.array([names.get(v) or str(v) for v in values], pa.string(), mask=mask), None
    if kind == "timestamp" or kind == "duration":
        return pa.array(_nanos(values, mask), elem.type, mask=mask), None
    if kind == "wrapper":
        return pa.array(list(map(attrgetter("value"), values)), elem.type, mask=mask), None
    if kind == "json":
        keep = range(len(values)) if mask is None else np.flatnonzero(~mask).tolist()
        texts: list[str | None] = [None] * len(values)
        for i in keep:
            texts[i] = _to_json(values[i])
        return pa.array(texts, pa.string()), None
    assert elem.plan is not None
    return _struct(values, elem.plan, mask)


def _offsets(containers: list[Any]) -> np.ndarray:
    lengths = np.fromiter(map(len, containers), dtype=np.int32, count=len(containers))
    offsets = np.zeros(len(containers) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _per_parent(counts: np.ndarray | None, offsets: np.ndarray) -> np.ndarray | None:
    """Sum per-item counts into their parents (``offsets`` delimit each parent's items)."""
    if counts is None or not len(counts):
        return None
    sums = np.concatenate([[0], np.cumsum(counts)])
    return sums[offsets[1:]] - sums[offsets[:-1]]


def _column(msgs: list[Any], f: _Field) -> tuple[pa.Array, np.ndarray | None]:
    values = list(map(f.get, msgs))
    if f.shape == "single":
        mask = None
        if f.presence:
            has = methodcaller("HasField", f.name)
            mask = ~np.fromiter(map(has, msgs), dtype=bool, count=len(msgs))
            if not mask.any():
                mask = None
        return _elements(values, f.elem, mask)
    offsets = _offsets(values)
    if f.shape == "list":
        items, counts = _elements(list(chain.from_iterable(values)), f.elem, None)
        return pa.ListArray.from_arrays(pa.array(offsets), items), _per_parent(counts, offsets)
    assert f.key is not None
    pairs = list(chain.from_iterable(v.items() for v in values))
    keys, _ = _elements([k for k, _ in pairs], f.key, None)
    items, counts = _elements([v for _, v in pairs], f.elem, None)
    return pa.MapArray.from_arrays(pa.array(offsets), keys, items), _per_parent(counts, offsets)


def _struct(msgs: list[Any], plan: MessagePlan,
            mask: np.ndarray | None) -> tuple[pa.Array, np.ndarray]:
    counts = _unknown(msgs)
    if not plan.fields:
        return pa.array([{}] * len(msgs), plan.type, mask=mask), counts
    children = []
    for f in plan.fields:
        arr, sub = _column(msgs, f)
        children.append(arr)
        if sub is not None:
            counts += sub
    mask_arr = None if mask is None else pa.array(mask, pa.bool_())
    arr = pa.StructArray.from_arrays(children, fields=list(plan.type), mask=mask_arr)
    return arr, counts


def messages_to_arrow(msgs: list[Any], plan: MessagePlan) -> tuple[pa.Array, np.ndarray]:
    """The struct column of parsed messages ``msgs`` (none is None) and each one's count of
    unknown fields, its nested messages' included.

    Raises :class:`TemporalRangeError` when a Timestamp or Duration does not fit.
    """
    return _struct(msgs, plan, None)
