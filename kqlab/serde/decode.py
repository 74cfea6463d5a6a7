"""Decode a key or value column into an Arrow column plus one error message per record.

:func:`decode` is a pure function of (binary column, :class:`~kqlab.policy.model.Format`,
schema resolver).  Bad *data* never raises: a value that cannot be decoded gets a null value
and a precise message in ``errors`` (the validator turns it into a rejection reason of its
own).  Only bad *configuration* raises (Avro without a schema source, unknown format, an
unreachable registry).  Null input (no key / tombstone) decodes to null without an error.

Per format:

- ``none`` — not interpreted: ``values`` is the raw binary column, no checks.
- ``bytes`` — the raw payload (after the 5-byte header with ``wire: confluent``).
- ``string`` — UTF-8 text (Arrow's vectorised cast; invalid rows are located only when the
  cast fails).
- ``json`` — defined as one ``orjson.loads`` per value, then ``pa.array`` (type inferred, or
  ``arrow_type=``).  When records disagree on types (``1`` vs ``"1"``, object vs number)
  inference fails and ``values`` falls back to the JSON text of each record (a string
  column; ``fallback`` says so); ``python_values()`` still holds the parsed objects.
  A JSON ``null`` document decodes to a null value without an error.  Columns of objects
  are read in bulk by Arrow's JSON reader where it provably gives that very column
  (:mod:`kqlab.serde.json_arrow`); each record's object is then parsed by orjson only when
  asked for.
- ``avro`` — fastavro ``schemaless_reader`` per value on the pre-parsed writer schema, reading
  all values from one in-memory copy of the column's data buffer (no per-value slicing); the
  result becomes a struct column with one ``pa.array`` call.  Each value is read on its own
  (no batching of several values into one container block): only then is a value's verdict a
  function of its own bytes — a value with a trailing byte next to one missing that byte
  would otherwise read as two good records.  Several writer schemas in one
  column are unified field-wise (``pa.unify_schemas``, permissive); if they conflict,
  ``values`` falls back to JSON text.  A datum that does not end exactly at the end of its
  value (trailing bytes, or one that needs bytes past it) is an error.

With ``wire: confluent`` a value without the header (magic byte 0 + 4-byte id) is an error,
and ``schema_ids`` holds the id of every framed value.

:func:`decode_pass` is the one implementation behind :func:`decode`: it also keeps each
record's Python datum (what orjson or fastavro returned) and the stage at which each failing
record failed, so :func:`kqlab.serde.datums.decode_datums` hands a producer's serializer the
same values, and the same failures, the replay judges.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from fastavro import schemaless_reader

from kqlab.errors import KqlabError
from kqlab.serde.avro_arrow import to_json_text
from kqlab.serde.avro_faults import explain
from kqlab.serde.schemas import ParsedSchema, SchemaNotFound, SchemaResolver
from kqlab.serde.wire import HEADER_SIZE, WireInfo, as_binary, parse_wire

__all__ = ["FORMATS", "WIRES", "DecodeConfigError", "DecodePass", "DecodeStage",
           "DecodedColumn", "avro_error", "decode", "decode_pass"]

FORMATS = ("none", "bytes", "string", "json", "avro", "protobuf")
WIRES = ("raw", "confluent")

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError,
                 OverflowError, TypeError, ValueError)


#: Where a record failed to decode: its Confluent header (``framing``), the lookup of its
#: writer schema id (``schema``), or its payload (``payload``: bad JSON, bad UTF-8, Avro that
#: does not read, a value that does not fit the Arrow type).  Consumers branch on it instead of
#: parsing the error text.
DecodeStage = Literal["framing", "schema", "payload"]


class DecodeConfigError(KqlabError, ValueError):
    """The decode request itself is wrong (unknown format, Avro without a schema source)."""


@dataclass(eq=False)
class DecodedColumn:
    """A decoded key/value column: ``values``, ``errors`` (null = fine), ``schema_ids``.

    ``fallback`` is ``None``, or says why ``values`` holds JSON text instead of typed values.
    ``python_values()`` gives one Python object per record (dicts for Avro records and JSON
    objects, ``None`` for nulls and errors) for per-record consumers such as CEL.
    """

    values: pa.Array
    errors: pa.StringArray
    schema_ids: pa.Int32Array | None = None
    fallback: str | None = None
    #: per record objects, when the decoder has them: a list, or (JSON read in bulk) a
    #: sequence that parses a record when it is first read
    _python: Sequence[object] | None = field(default=None, repr=False)
    #: protobuf: how many fields each record holds that its writer schema lacks (a newer
    #: writer's), nested messages included; None for the other formats
    unknown_fields: pa.Int64Array | None = None

    def __len__(self) -> int:
        return len(self.values)

    @property
    def error_count(self) -> int:
        """How many records failed to decode."""
        return len(self.errors) - self.errors.null_count

    @property
    def ok(self) -> pa.BooleanArray:
        """True where the record decoded (or was null)."""
        return self.errors.is_null()

    def python_values(self) -> list[object]:
        """One Python object per record (computed once)."""
        if self._python is None:
            self._python = self.values.to_pylist()
        elif not isinstance(self._python, list):
            self._python = list(self._python)
        return self._python  # type: ignore[return-value]  # a list since the lines above


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True, slots=True, eq=False)
class DecodePass:
    """Everything one decoding of a column learns (see :func:`decode_pass`).

    ``column`` is what :func:`decode` returns.  ``stages`` names, per failing record, the
    stage that failed (``None`` for records that decoded or were null).  ``datums`` holds the
    Python object the format's reader returned for each record (orjson's for JSON, fastavro's
    for Avro: ``Decimal``, ``bytes``, ``datetime``, ``UUID``, enum symbols as ``str``); it is
    ``None`` for the formats whose Arrow value already is that object (``none``, ``bytes``,
    ``string``), so decoding for the replay never pays for a list it does not need.
    """

    column: DecodedColumn
    stages: list[DecodeStage | None]
    datums: Sequence[object] | None


def _framing_errors(info: WireInfo, errors: list[str | None],
                    stages: list[DecodeStage | None]) -> None:
    """Messages for non-null values without the Confluent header."""
    bad = np.flatnonzero(info.valid & ~info.framed.to_numpy(zero_copy_only=False))
    if not len(bad):
        return
    lengths = (info.ends - info.starts)[bad].tolist()
    magic = info.magic.to_numpy()[bad].tolist()
    for i, n, m in zip(bad.tolist(), lengths, magic, strict=True):
        stages[i] = "framing"
        if n == 0:
            errors[i] = "empty value: not in the Confluent wire format"
        elif m != 0:
            errors[i] = f"not in the Confluent wire format: magic byte {m}, expected 0"
        else:
            errors[i] = (f"too short for the Confluent wire format: {n} bytes, "
                         f"need at least {HEADER_SIZE}")


def _payloads(values: pa.Array, info: WireInfo | None) -> pa.Array:
    """The payload of each value (header stripped; null where not framed)."""
    if info is None:
        return values
    # An explicit stop: pyarrow 26's binary_slice mis-sizes its output without one.
    stop = max(int(info.lengths.max(initial=0)), HEADER_SIZE)
    sliced = pc.binary_slice(values, HEADER_SIZE, stop)
    return pc.if_else(info.framed, sliced, pa.scalar(None, sliced.type))


def _mask_errors(arr: pa.Array, errors: list[str | None]) -> pa.Array:
    err = np.array([e is not None for e in errors], dtype=bool)
    if not err.any():
        return arr
    return pc.if_else(pa.array(~err), arr, pa.scalar(None, arr.type))


def _build(objs: list[object], arrow_type: pa.DataType | None,
           errors: list[str | None]) -> pa.Array:
    """``pa.array(objs, type)``; on failure find the rows that do not fit and null them."""
    try:
        return pa.array(objs, type=arrow_type)
    except _ARROW_ERRORS:
        if arrow_type is None:
            raise
    for i, v in enumerate(objs):
        if v is None:
            continue
        try:
            pa.array([v], type=arrow_type)
        except _ARROW_ERRORS as e:
            errors[i] = f"decoded value does not fit Arrow type {arrow_type}: {e}"
            objs[i] = None
    return pa.array(objs, type=arrow_type)


# -- formats ---------------------------------------------------------------------------------
def _decode_string(values: pa.Array, info: WireInfo | None,
                   errors: list[str | None]) -> DecodedColumn:
    payload = _mask_errors(_payloads(values, info), errors)
    target = pa.large_string() if pa.types.is_large_binary(payload.type) else pa.string()
    try:
        out = payload.cast(target)
    except pa.ArrowInvalid:
        shift = 0 if info is None else HEADER_SIZE
        for i, b in enumerate(payload.to_pylist()):
            if b is None:
                continue
            try:
                b.decode("utf-8")
            except UnicodeDecodeError as e:
                errors[i] = f"not valid UTF-8 at byte {e.start + shift}: {e.reason}"
        out = _mask_errors(payload, errors).cast(target)
    return DecodedColumn(out, pa.array(errors, pa.string()),
                         None if info is None else info.schema_id)


#: read JSON objects in bulk where that gives the same column (tests switch it off to compare)
BULK_JSON = True


def _decode_json(values: pa.Array, info: WireInfo | None, errors: list[str | None],
                 arrow_type: pa.DataType | None) -> tuple[DecodedColumn, Sequence[object]]:
    """The JSON column and each record's parsed object (``None`` where it failed)."""
    if arrow_type is None and BULK_JSON:
        from kqlab.serde.json_arrow import decode_objects

        bulk = decode_objects(_payloads(values, info), errors)
        if bulk is not None:
            column, lazy = bulk
            return (DecodedColumn(column, pa.array(errors, pa.string()),
                                  None if info is None else info.schema_id, None, lazy), lazy)
    return _decode_json_objects(values, info, errors, arrow_type)


def _decode_json_objects(values: pa.Array, info: WireInfo | None, errors: list[str | None],
                         arrow_type: pa.DataType | None) -> tuple[DecodedColumn, list[object]]:
    """:func:`_decode_json` record by record: the definition the bulk path is held to."""
    framing = info
    if framing is None:
        pos = parse_wire(values)  # only for the buffer positions
        starts, rows = pos.starts, pos.valid
    else:
        pos = framing
        starts, rows = pos.starts + HEADER_SIZE, pos.framed.to_numpy(zero_copy_only=False)
    mv = pos.data.data  # the data buffer as a memoryview: each value parsed in place
    objs: list[object] = [None] * len(values)
    loads = orjson.loads
    idx = np.flatnonzero(rows)
    for i, s, e in zip(idx.tolist(), starts[idx].tolist(), pos.ends[idx].tolist(),
                       strict=True):
        try:
            objs[i] = loads(mv[s:e])
        except orjson.JSONDecodeError as ex:
            errors[i] = f"invalid JSON: {ex}"
    fallback = None
    try:
        out = _build(list(objs), arrow_type, errors)
    except _ARROW_ERRORS as ex:
        # Records disagree on types: keep each record's JSON text (valid UTF-8: it parsed).
        fallback = f"JSON values do not share one Arrow type ({ex}); values are JSON text"
        out = _mask_errors(_payloads(values, framing), errors).cast(pa.string())
    if arrow_type is not None:  # a value that does not fit the given type has no object either
        for i, e in enumerate(errors):
            if e is not None:
                objs[i] = None
    schema_ids = None if framing is None else framing.schema_id
    return (DecodedColumn(out, pa.array(errors, pa.string()), schema_ids, fallback, objs),
            objs)


def _read_group(reader_data: io.BytesIO, ps: ParsedSchema, label: str, rows: np.ndarray,
                starts: np.ndarray, ends: np.ndarray, out: list[object],
                errors: list[str | None], header: int) -> int:
    """Decode the values at ``rows`` with one writer schema; returns how many decoded.

    ``header`` is how many bytes of each value precede ``starts`` (the Confluent header), so
    error messages count bytes from the start of the value.
    """
    seek, tell = reader_data.seek, reader_data.tell
    parsed = ps.parsed
    done = 0
    for i, s, e in zip(rows.tolist(), starts[rows].tolist(), ends[rows].tolist(), strict=True):
        seek(s)
        try:
            rec = schemaless_reader(reader_data, parsed)
        except Exception:  # any fastavro failure on bad bytes is a decode error
            errors[i] = _isolated_error(reader_data.getbuffer(), s, e, parsed, label, header)
            continue
        end = tell()
        if end < e:
            errors[i] = avro_error(label, f"{e - end} unread bytes after the datum (it ends at "
                                          f"byte {end - s + header} of {e - s + header})")
            continue
        if end > e:
            errors[i] = _isolated_error(reader_data.getbuffer(), s, e, parsed, label, header)
            continue
        out[i] = rec
        done += 1
    return done


def avro_error(label: str, what: str) -> str:
    """The one wording of an Avro payload that does not read (the replay's ``decode:value``
    and ``avro_valid`` messages, the export round trips' datums and both engines share it)."""
    return f"invalid Avro payload for {label}: {what}"


#: what a value that runs past its end reads instead of its neighbours (see _isolated_error)
_PAD = bytes(65_536)


def _isolated_error(data: memoryview, s: int, e: int, parsed: Any, label: str,
                    header: int) -> str:
    """Why the value at ``[s, e)`` does not read, from its own bytes only.

    First :func:`~kqlab.serde.avro_faults.explain`: the field and byte at fault, in an
    analyst's words.  When that walk finds nothing (fastavro refused something the encoding
    allows), fastavro's own message from decoding the value alone, followed by zero bytes.
    Values are read from one shared buffer for speed, so a value that runs past its end reads
    its neighbours' bytes; its error would then depend on which records share the sample (a
    Spark task holds one partition, a local replay all of them).  Both ways make the message
    a function of the value only.
    """
    value = bytes(data[s:e])
    why = explain(value, parsed, offset=header)
    if why is not None:
        return avro_error(label, why)
    reader = io.BytesIO(value + _PAD)
    try:
        schemaless_reader(reader, parsed)
    except Exception as ex:
        return avro_error(label, _describe(ex))
    return avro_error(label, f"datum runs {reader.tell() - (e - s)} bytes past the end of "
                             "the value")


#: read Avro values field by field where that gives fastavro's column (tests switch it off)
BULK_AVRO = True


def _decode_avro_bulk(groups: list[tuple[ParsedSchema, str, np.ndarray]], data: np.ndarray,
                      starts: np.ndarray, ends: np.ndarray, errors: list[str | None],
                      header: int, n: int) -> tuple[pa.Array, Sequence[object]] | None:
    """:func:`_decode_avro` with every writer schema's values read field by field
    (:mod:`kqlab.serde.avro_columns`); the values that module flags are read by fastavro one
    by one, exactly as the per-record path reads them.  None (the caller reads every value
    with fastavro) when a schema is outside that module's subset, needs a converter, or the
    schemas map to different Arrow types."""
    from kqlab.serde.avro_columns import LazyAvroValues, compile_reader, read_values

    target = groups[0][0].arrow_type
    readers = []
    for ps, _, _ in groups:
        if ps.arrow.converter is not None or ps.arrow_type != target:
            return None
        reader = compile_reader(ps.parsed, target)
        if reader is None:
            return None
        readers.append(reader)
    columns: list[pa.Array] = []
    placed: list[np.ndarray] = []
    schema_of = np.full(n, -1, dtype=np.int64)
    known: dict[int, object] = {}
    fallback: list[np.ndarray] = []
    buf: io.BytesIO | None = None
    for k, ((ps, label, rows), reader) in enumerate(zip(groups, readers, strict=True)):
        column, bad = read_values(reader, data, starts[rows], ends[rows])
        columns.append(column)
        placed.append(rows)
        schema_of[rows[~bad]] = k
        again = rows[bad]
        if len(again):  # fastavro reads these, value by value, as the per-record path does
            if buf is None:
                buf = io.BytesIO(data.tobytes())
            out: list[object] = [None] * n
            _read_group(buf, ps, label, again, starts, ends, out, errors, header)
            for i in again.tolist():
                known[i] = out[i]
            fallback.append(again)
    column = pa.concat_arrays(columns) if len(columns) > 1 else columns[0]
    order = np.concatenate(placed) if len(placed) > 1 else placed[0]
    where = np.full(n, -1, dtype=np.int64)
    where[order] = np.arange(len(order))
    if fallback:
        again = np.concatenate(fallback)
        objs = [known[i] for i in again.tolist()]
        local: list[str | None] = [None] * len(objs)
        extra = _build(objs, target, local)  # a value that does not fit: its own error
        for j, i in enumerate(again.tolist()):
            if local[j] is not None:
                errors[i] = local[j]
                known[i] = None
        where[again] = len(order) + np.arange(len(again))
        column = pa.concat_arrays([column, extra])
    if not (len(order) == n and not fallback and np.array_equal(order, np.arange(n))):
        column = column.take(pa.array(where, mask=where < 0))
    return column, LazyAvroValues(data, starts, ends, schema_of,
                                  [ps.parsed for ps, _, _ in groups], known)


def _unify(types: list[pa.DataType]) -> pa.DataType | None:
    """One Arrow type for values of several writer schemas (None: they conflict)."""
    if len(set(types)) == 1:
        return types[0]
    if all(pa.types.is_struct(t) for t in types):
        try:
            schema = pa.unify_schemas([pa.schema([t.field(i) for i in range(t.num_fields)])
                                       for t in types],
                                      promote_options="permissive")
        except _ARROW_ERRORS:
            return None
        return pa.struct(list(schema))
    return None


def _decode_avro(values: pa.Array, info: WireInfo | None, errors: list[str | None],
                 stages: list[DecodeStage | None],
                 resolver: SchemaResolver) -> tuple[DecodedColumn, Sequence[object]]:
    """The Avro column and each record's fastavro datum (``None`` where it failed)."""
    n = len(values)
    out: list[object] = [None] * n
    if info is None:
        ps = resolver.unframed()
        pos = parse_wire(values)
        groups: list[tuple[ParsedSchema, str, np.ndarray]] = [
            (ps, f"schema {ps.origin}", np.flatnonzero(pos.valid))]
        starts, ends, data = pos.starts, pos.ends, pos.data
    else:
        starts, ends, data = info.starts + HEADER_SIZE, info.ends, info.data
        framed = np.flatnonzero(info.framed.to_numpy(zero_copy_only=False))
        ids = info.schema_id.to_numpy(zero_copy_only=False)
        groups = []
        if len(framed):
            fid = ids[framed].astype(np.int64)
            order = np.argsort(fid, kind="stable")
            bounds = np.flatnonzero(np.diff(fid[order])) + 1
            for chunk in np.split(framed[order], bounds):
                sid = int(ids[chunk[0]])
                try:
                    ps = resolver.schema(sid)
                except SchemaNotFound as ex:
                    msg = str(ex)
                    for i in chunk.tolist():
                        errors[i] = msg
                        stages[i] = "schema"
                    continue
                groups.append((ps, f"schema id {sid}", np.sort(chunk)))
    if BULK_AVRO and groups:
        bulk = _decode_avro_bulk(groups, data, starts, ends, errors,
                                 0 if info is None else HEADER_SIZE, n)
        if bulk is not None:
            bulk_values, lazy = bulk
            return (DecodedColumn(bulk_values, pa.array(errors, pa.string()),
                                  None if info is None else info.schema_id, None, lazy), lazy)
    buf = io.BytesIO(data.tobytes())  # one copy of the data buffer; each value read in place
    types: list[pa.DataType] = []  # Arrow types of the schemas that decoded at least one value
    convert: list[tuple[Callable[[Any], Any], np.ndarray]] = []
    for ps, label, rows in groups:
        if _read_group(buf, ps, label, rows, starts, ends, out, errors,
                       0 if info is None else HEADER_SIZE):
            types.append(ps.arrow_type)
        if ps.arrow.converter is not None:
            convert.append((ps.arrow.converter, rows))
    fallback = None
    arrow_in = out
    if convert:
        arrow_in = list(out)
        for conv, rows in convert:
            for i in rows.tolist():
                if arrow_in[i] is not None:
                    arrow_in[i] = conv(arrow_in[i])
    if not types:  # nothing decoded: keep the column typed when a schema was found
        types = [groups[0][0].arrow_type] if groups else [pa.null()]
    target = _unify(types)
    arr: pa.Array
    if target is None:
        fallback = ("writer schemas map to conflicting Arrow types "
                    f"({', '.join(sorted({str(t) for t in types}))}); values are JSON text")
        arr = pa.array([to_json_text(v) for v in out], pa.string())
    else:
        try:  # the common case: every decoded value fits the Arrow type at once
            arr = pa.array(arrow_in, type=target)
        except _ARROW_ERRORS:
            if arrow_in is out:
                arrow_in = list(out)  # _build nulls the rows that do not fit
            arr = _build(arrow_in, target, errors)
            for i, v in enumerate(arrow_in):
                if v is None and out[i] is not None:
                    out[i] = None
    schema_ids = None if info is None else info.schema_id
    return DecodedColumn(arr, pa.array(errors, pa.string()), schema_ids, fallback, out), out


def decode(values: pa.Array | pa.ChunkedArray, fmt: Any,
           resolver: SchemaResolver | None = None, *,
           arrow_type: pa.DataType | None = None) -> DecodedColumn:
    """Decode a binary key/value column as ``fmt`` says (see the module docstring).

    Parameters
    ----------
    values
        The records table's ``key`` or ``value`` column (binary; null = no key/tombstone).
    fmt
        A :class:`~kqlab.policy.model.Format` (``format``, ``wire``, ``schemas``).
    resolver
        Writer schemas for Avro; built from ``fmt.schemas`` when omitted.
    arrow_type
        JSON only: the Arrow type to build instead of inferring one.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from kqlab.policy.model import Format
    >>> col = decode(pa.array([b'{"a": 1}', b'{"a": ', None]), Format(format="json"))
    >>> col.values.to_pylist(), col.errors.to_pylist()[1][:13]
    ([{'a': 1}, None, None], 'invalid JSON:')
    """
    return decode_pass(values, fmt, resolver, arrow_type=arrow_type).column


def decode_pass(values: pa.Array | pa.ChunkedArray, fmt: Any,
                resolver: SchemaResolver | None = None, *,
                arrow_type: pa.DataType | None = None) -> DecodePass:
    """:func:`decode`, keeping each record's Python datum and each failure's stage.

    Same parameters, same column, same errors (this *is* :func:`decode`'s implementation);
    see :class:`DecodePass` for what else it returns.
    """
    kind = getattr(fmt, "format", None)
    wire = getattr(fmt, "wire", "raw")
    if kind not in FORMATS:
        raise DecodeConfigError(f"unknown format {kind!r}; expected one of {', '.join(FORMATS)}")
    if wire not in WIRES:
        raise DecodeConfigError(f"unknown wire format {wire!r}; expected raw or confluent")
    values = as_binary(values)
    n = len(values)
    stages: list[DecodeStage | None] = [None] * n
    if kind == "none":
        return DecodePass(DecodedColumn(values, pa.nulls(n, pa.string())), stages, None)
    if kind in ("avro", "protobuf") and resolver is None:
        if getattr(fmt, "schemas", None) is None:
            raise DecodeConfigError(f"{kind.capitalize()} decoding needs writer schemas: give "
                                    "the format a schema source (registry URL or folder) or "
                                    "a resolver")
        resolver = SchemaResolver.from_source(fmt.schemas)
    errors: list[str | None] = [None] * n
    info = None
    if wire == "confluent":
        info = parse_wire(values)
        _framing_errors(info, errors, stages)
    datums: Sequence[object] | None = None
    if kind == "bytes":
        column = DecodedColumn(_payloads(values, info), pa.array(errors, pa.string()),
                               None if info is None else info.schema_id)
    elif kind == "string":
        column = _decode_string(values, info, errors)
    elif kind == "json":
        column, datums = _decode_json(values, info, errors, arrow_type)
    elif kind == "protobuf":
        from kqlab.serde.protobuf_decode import decode_protobuf

        assert resolver is not None  # built above
        message = getattr(getattr(fmt, "schemas", None), "message", None)
        values_col, fallback, unknown, datums = decode_protobuf(values, info, errors, stages,
                                                                resolver, message)
        column = DecodedColumn(values_col, pa.array(errors, pa.string()),
                               None if info is None else info.schema_id, fallback,
                               unknown_fields=unknown)
    else:
        assert resolver is not None  # built above for Avro
        column, datums = _decode_avro(values, info, errors, stages, resolver)
    if column.error_count:  # every failure not placed earlier is its payload's
        failed = np.flatnonzero(column.errors.is_valid().to_numpy(zero_copy_only=False))
        for i in failed.tolist():
            if stages[i] is None:
                stages[i] = "payload"
    return DecodePass(column, stages, datums)
