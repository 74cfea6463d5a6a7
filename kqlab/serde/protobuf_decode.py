"""``format: protobuf``: key/value columns of protobuf messages decoded to Arrow.

Each value is parsed on its own by protobuf's C parser (upb) into a message of its writer
schema's class — its verdict is a function of its own bytes — and the parsed messages become
a struct column field by field (:mod:`kqlab.serde.protobuf_arrow`).

With ``wire: confluent`` a value is magic byte 0, the schema id, the message-index path
(zig-zag varints; a lone ``0`` byte means ``[0]``) and the message.  Values are grouped by
(schema id, message path); an id the source lacks is a ``schema``-stage failure, and so is
a path naming a message the schema lacks (the value names a writer type that is not there).
With ``wire: raw`` every value is the message ``schemas.message`` names (or the first
message of the only file / the subject's latest schema).

A payload that does not parse is a ``payload``-stage failure: where the bytes go wrong when
:func:`~kqlab.serde.protobuf_faults.explain_protobuf` finds it, else the parser's words.
Fields the writer schema lacks (a newer writer) are not errors: they are counted per record
in :attr:`DecodedColumn.unknown_fields`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from kqlab.serde.schemas import SchemaNotFound, SchemaResolver
from kqlab.serde.wire import HEADER_SIZE, WireInfo, message_indexes, parse_wire

__all__ = ["decode_protobuf", "protobuf_error"]


def protobuf_error(label: str, what: str) -> str:
    """The one wording of a protobuf payload that does not parse (decode and exports)."""
    return f"invalid Protobuf payload for {label}: {what}"


def _framed_paths(info: WireInfo, rows: np.ndarray, errors: list[str | None],
                  stages: list[Any]) -> dict[tuple[int, tuple[int, ...]], list[tuple[int, int]]]:
    """(schema id, message path) -> [(row, payload start)] for the framed ``rows``.

    The common ``0`` byte ([0]) is found with numpy; other paths are read per value.
    """
    data, starts, ends = info.data, info.starts, info.ends
    ids = info.schema_id.to_numpy(zero_copy_only=False)
    at = starts[rows] + HEADER_SIZE
    has = at < ends[rows]
    first = np.full(len(rows), -1, dtype=np.int16)
    first[has] = data[at[has]]
    groups: dict[tuple[int, tuple[int, ...]], list[tuple[int, int]]] = {}
    zero = first == 0
    for sid in np.unique(ids[rows[zero]]).tolist():
        pick = zero & (ids[rows] == sid)
        groups[(int(sid), (0,))] = list(zip(rows[pick].tolist(), (at[pick] + 1).tolist(),
                                            strict=True))
    for i in rows[~zero].tolist():
        s, e = int(starts[i]), int(ends[i])
        if s + HEADER_SIZE >= e:
            errors[i] = ("too short for Confluent-framed protobuf: no message indexes after "
                         "the schema id")
            stages[i] = "framing"
            continue
        try:
            path, pos = message_indexes(bytes(data[s:e]), HEADER_SIZE)
        except ValueError as ex:
            errors[i] = f"bad protobuf message indexes after the schema id: {ex}"
            stages[i] = "framing"
            continue
        groups.setdefault((int(ids[i]), tuple(path)), []).append((i, s + pos))
    return groups


def _parse(cls: Any, desc: Any, label: str, rows: list[tuple[int, int]], ends: np.ndarray,
           mv: memoryview, errors: list[str | None], header_of: Any) -> list[tuple[int, Any]]:
    """Parse each row's payload with ``cls``; failures get their reason."""
    from google.protobuf.message import DecodeError

    parse = cls.FromString
    out = []
    for i, s in rows:
        e = int(ends[i])
        try:
            out.append((i, parse(mv[s:e])))
        except (DecodeError, ValueError, RuntimeError) as ex:
            from kqlab.serde.protobuf_faults import explain_protobuf

            why = explain_protobuf(bytes(mv[s:e]), desc, offset=header_of(i, s))
            errors[i] = protobuf_error(label, why or str(ex))
    return out


def _group_column(parsed: list[tuple[int, Any]], desc: Any, label: str,
                  errors: list[str | None], plans: dict[str, Any]) -> tuple[
                      list[int], pa.Array, np.ndarray, list[Any]]:
    """The struct column of one group's parsed messages (rows that do not fit: errors)."""
    from kqlab.serde.protobuf_arrow import TemporalRangeError, message_plan, messages_to_arrow

    plan = plans.get(desc.full_name)
    if plan is None:
        plan = plans[desc.full_name] = message_plan(desc)
    rows = [i for i, _ in parsed]
    msgs = [m for _, m in parsed]
    try:
        column, unknown = messages_to_arrow(msgs, plan)
        return rows, column, unknown, msgs
    except (TemporalRangeError, pa.ArrowInvalid, OverflowError) as ex:
        first_error = ex
    keep_rows, keep_msgs = [], []
    for i, m in parsed:  # find the values that do not fit, keep the others
        try:
            messages_to_arrow([m], plan)
        except (TemporalRangeError, pa.ArrowInvalid, OverflowError) as ex:
            errors[i] = protobuf_error(label, f"value does not fit Arrow type: {ex}")
            continue
        keep_rows.append(i)
        keep_msgs.append(m)
    if len(keep_rows) == len(rows):  # pragma: no cover - the column failed as a whole only
        raise first_error
    column, unknown = messages_to_arrow(keep_msgs, plan)
    return keep_rows, column, unknown, keep_msgs


def _combine(parts: list[tuple[list[int], pa.Array, np.ndarray, list[Any]]], n: int,
             fallback_type: pa.DataType) -> tuple[pa.Array, np.ndarray, list[Any], str | None]:
    """One column in record order from the groups' columns (JSON text when types differ)."""
    from kqlab.serde.protobuf_arrow import _to_json

    unknown = np.zeros(n, dtype=np.int64)
    datums: list[Any] = [None] * n
    if not parts:
        return pa.nulls(n, fallback_type), unknown, datums, None
    types = {p[1].type for p in parts}
    order = np.concatenate([np.asarray(p[0], dtype=np.int64) for p in parts])
    for rows, _, counts, msgs in parts:
        unknown[rows] = counts
        for i, m in zip(rows, msgs, strict=True):
            datums[i] = m
    fallback = None
    if len(types) == 1:
        column = pa.concat_arrays([p[1] for p in parts])
    else:
        fallback = ("writer schemas map to conflicting Arrow types "
                    f"({', '.join(sorted(str(t) for t in types))}); values are JSON text")
        column = pa.array([_to_json(m) for p in parts for m in p[3]], pa.string())
    where = np.full(n, -1, dtype=np.int64)
    where[order] = np.arange(len(order))
    if not (len(order) == n and np.array_equal(order, np.arange(n))):
        column = column.take(pa.array(where, mask=where < 0))
    return column, unknown, datums, fallback


def decode_protobuf(values: pa.Array, info: WireInfo | None, errors: list[str | None],
                    stages: list[Any], resolver: SchemaResolver,
                    message: str | None
                    ) -> tuple[pa.Array, Any, pa.Array, Sequence[object]]:
    """The protobuf values as ``(column, fallback, unknown field counts, parsed messages)``:
    the pieces :func:`kqlab.serde.decode.decode` makes its ``DecodedColumn`` of (the
    messages ``None`` where they failed; ``errors`` filled in place); see the module
    docstring."""
    from kqlab.serde.protobuf_schemas import MessageIndexError

    n = len(values)
    plans: dict[str, Any] = {}
    parts = []
    fallback_type: pa.DataType = pa.null()
    if info is None:
        ps = resolver.protobuf(None)
        desc = ps.named(message) if message else ps.message([0])
        label = f"{desc.full_name} ({ps.origin})"
        pos = parse_wire(values)
        rows = np.flatnonzero(pos.valid)
        mv = pos.data.data
        starts = pos.starts
        parsed = _parse(ps.message_class(desc), desc, label,
                        list(zip(rows.tolist(), starts[rows].tolist(), strict=True)),
                        pos.ends, mv, errors, lambda i, s: 0)
        parts.append(_group_column(parsed, desc, label, errors, plans))
    else:
        framed = np.flatnonzero(info.framed.to_numpy(zero_copy_only=False))
        mv = info.data.data
        for (sid, path), rows_at in _framed_paths(info, framed, errors, stages).items():
            try:
                ps = resolver.protobuf(sid)
                desc = ps.message(path)
            except (SchemaNotFound, MessageIndexError) as ex:
                for i, _ in rows_at:
                    errors[i] = str(ex) if isinstance(ex, SchemaNotFound) else \
                        f"schema id {sid}: {ex}"
                    stages[i] = "schema"
                continue
            label = f"schema id {sid} ({desc.full_name})"
            parsed = _parse(ps.message_class(desc), desc, label, rows_at, info.ends, mv,
                            errors, lambda i, s, at=info.starts: int(s - at[i]))
            parts.append(_group_column(parsed, desc, label, errors, plans))
    if parts:
        fallback_type = parts[0][1].type
    column, unknown, datums, fallback = _combine([p for p in parts if p[0]] or parts[:1],
                                                 n, fallback_type)
    return column, fallback, pa.array(unknown, pa.int64()), datums
