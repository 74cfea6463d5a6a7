"""Why a protobuf payload does not parse, in an analyst's words: the field and the byte.

protobuf's C parser says only "Error parsing message"; :func:`explain_protobuf` walks the
wire format against the writer's message descriptor and names the first fault it finds —
a truncated varint, a length running past the end, wire type 6 or 7, field number 0, a
string that is not UTF-8, a proto2 required field missing — with its byte position counted
from the start of the value (``offset`` is what precedes the payload: the Confluent header
and message indexes).  None when it finds nothing (the parser's own message is used then).
"""

from __future__ import annotations

from typing import Any

__all__ = ["explain_protobuf"]

_STRING, _MESSAGE, _GROUP = 9, 11, 10


class _Fault(Exception):
    pass


def _varint(data: bytes, pos: int, end: int, what: str, offset: int) -> tuple[int, int]:
    start = pos
    value = shift = 0
    while True:
        if pos >= end:
            raise _Fault(f"{what}: truncated varint at byte {start + offset}")
        b = data[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise _Fault(f"{what}: varint longer than 10 bytes at byte {start + offset}")


def _name(desc: Any, number: int) -> str:
    fd = None if desc is None else desc.fields_by_number.get(number)
    owner = "" if desc is None else f"{desc.full_name}."
    return f"field {owner}{fd.name} (#{number})" if fd is not None else \
        f"unknown field #{number}"


def _walk(data: bytes, pos: int, end: int, desc: Any, offset: int,
          group: int | None = None) -> int:
    """Walk fields in ``[pos, end)``; returns where it stopped (an end-group's end)."""
    seen: set[int] = set()
    while pos < end:
        at = pos
        tag, pos = _varint(data, pos, end, "field tag", offset)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise _Fault(f"field number 0 at byte {at + offset} (not a protobuf message?)")
        what = _name(desc, number)
        fd = None if desc is None else desc.fields_by_number.get(number)
        seen.add(number)
        if wire == 0:
            _, pos = _varint(data, pos, end, what, offset)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > end:
                raise _Fault(f"{what}: {size}-byte value at byte {pos + offset} runs "
                             f"{pos + size - end} bytes past the end of the value")
            pos += size
        elif wire == 2:
            size, pos = _varint(data, pos, end, f"{what} length", offset)
            if pos + size > end:
                raise _Fault(f"{what}: length {size} at byte {at + offset} runs "
                             f"{pos + size - end} bytes past the end of the value")
            if fd is not None and fd.type == _MESSAGE:
                _walk(data, pos, pos + size, fd.message_type, offset)
            elif fd is not None and fd.type == _STRING:
                try:
                    data[pos:pos + size].decode("utf-8")
                except UnicodeDecodeError as e:
                    raise _Fault(f"{what}: not valid UTF-8 at byte "
                                 f"{pos + e.start + offset}") from None
            pos += size
        elif wire == 3:
            sub = fd.message_type if fd is not None and fd.type == _GROUP else None
            pos = _walk(data, pos, end, sub, offset, group=number)
        elif wire == 4:
            if group != number:
                raise _Fault(f"unexpected end of group #{number} at byte {at + offset}")
            return pos
        else:
            raise _Fault(f"{what}: invalid wire type {wire} at byte {at + offset} "
                         "(not a protobuf message?)")
    if group is not None:
        raise _Fault(f"group #{group} is not closed before the end of the value")
    if desc is not None:
        missing = [f.name for f in desc.fields if f.is_required and f.number not in seen]
        if missing:
            raise _Fault(f"{desc.full_name}: required field(s) {', '.join(missing)} missing")
    return pos


def explain_protobuf(payload: bytes, desc: Any, *, offset: int = 0) -> str | None:
    """The first fault of ``payload`` as message ``desc``, or None when none is found.

    Examples
    --------
    >>> from google.protobuf import timestamp_pb2
    >>> explain_protobuf(b"\\x08\\x96", timestamp_pb2.Timestamp.DESCRIPTOR, offset=6)
    'field google.protobuf.Timestamp.seconds (#1): truncated varint at byte 7'
    """
    try:
        _walk(payload, 0, len(payload), desc, offset)
    except _Fault as e:
        return str(e)
    return None
