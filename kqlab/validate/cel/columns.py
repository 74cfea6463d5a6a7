"""The types of the sample's columns as CEL sees them: Arrow columns → CEL values over all rows.

:class:`Vec` is one sub-expression's value over every record; :func:`from_arrow` types an
Arrow column (the decoded value, a struct field, ``key``, a metadata column) as CEL would type
the Python value the per-record path hands to the engine.  The rows where the two may differ
are marked, not guessed:

* integers → ``int`` (``uint64`` columns are not vectorised); ``float32`` → ``double``;
  ``float64`` → ``double``, except that an *integral* float64 may stand for a decoded Python
  ``int`` (JSON ``[1, 2.5]`` infers a double column; Avro numeric unions likewise), so it is
  ``maybe_int`` and the kernels leave those rows to the record where int and double differ;
  strings, bytes, bools as themselves; structs → maps; lists → lists.
* :func:`special_rows`: rows the per-record path would not hand to cel-expr-python as they are
  (a string with U+0000, a timestamp or time), a property of the sample cached per variable.
* :func:`avro_exact_presence`: whether a decoded Avro column has every field in every record,
  so a null struct child is a present null, never a missing key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.cel.masks import Mask, np_bool, nulls_of, or_masks
from kqlab.validate.cel.tree import TYPE_NAMES, LitValue, Unsupported

if TYPE_CHECKING:
    from kqlab.serde.decode import DecodedColumn
    from kqlab.serde.schemas import ParsedSchema
    from kqlab.validate.context import EvalContext

__all__ = ["EXACT", "INT_MAX", "INT_MIN", "NUMERIC", "TYPE_CODES", "Data", "Kind", "Vec",
           "arrow_arg", "avro_exact_presence", "decode_dict", "from_arrow", "full", "null_like",
           "special_rows", "take", "utf8_or_bytes"]

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
EXACT = 2.0**53  # doubles at or beyond this magnitude may not equal the int they came from
#: the int8 code of each type identifier, what ``type(x)`` gives per row
TYPE_CODES = {name: code for code, name in enumerate(TYPE_NAMES, start=1)}
NUMERIC = ("int", "double")

#: a value's CEL type; ``headers`` is the headers map (read through the flattened headers),
#: ``type`` a type identifier (an int8 code)
Kind = Literal["int", "double", "string", "bytes", "bool", "null", "map", "list", "headers",
               "type"]
#: numpy (bool, int64, float64, int8 type codes), Arrow (string, bytes, struct, list), a
#: literal's Python value, or None (null and headers values)
Data: TypeAlias = np.ndarray | pa.Array | LitValue


@dataclass(eq=False, slots=True)
class Vec:
    """One sub-expression over all N rows.

    ``kind`` is the CEL type of every non-null row; ``data`` a numpy array (int64, float64,
    bool, int8 type codes) or an Arrow array (string, bytes, struct, list), or a Python scalar
    for a literal (``scalar``).  ``null`` marks rows whose value is CEL null, ``bad`` rows the
    kernels cannot decide (errors included): None means no such row.
    """

    kind: Kind
    data: Data
    null: Mask | None = None
    bad: Mask | None = None
    scalar: bool = False
    maybe_int: bool = False  # float64 whose integral values may be decoded ints
    path: tuple[str, ...] | None = None  # struct: where it sits in ``value``

    def numpy(self) -> np.ndarray:
        """``data`` of a column of bool, int, double or type values."""
        if not isinstance(self.data, np.ndarray):
            raise TypeError(f"a {self.kind} value without a numpy column")
        return self.data

    def num(self) -> np.ndarray | int | float | bool:
        """``data`` of a bool, int, double or type value: a numpy column or a literal."""
        data = self.data
        if isinstance(data, np.ndarray | int | float | bool):
            return data
        raise TypeError(f"a {self.kind} value is not numeric")

    def arrow(self) -> pa.Array:
        """``data`` of a string, bytes, map or list column."""
        if not isinstance(self.data, pa.Array):
            raise TypeError(f"a {self.kind} value without an Arrow column")
        return self.data

    def text(self) -> str:
        """``data`` of a string literal."""
        if not isinstance(self.data, str):
            raise TypeError(f"a {self.kind} value is not a string literal")
        return self.data


def decode_dict(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array, dictionary-decoded."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if isinstance(arr, pa.DictionaryArray):
        return arr.dictionary_decode()
    return arr


def from_arrow(arr: pa.Array | pa.ChunkedArray, path: tuple[str, ...] | None,
               decoded: bool) -> Vec:
    """An Arrow column as a :class:`Vec` (see the module docstring for the mapping).

    ``path`` is where a struct sits in ``value`` (None elsewhere); ``decoded`` says the column
    comes from decoding (JSON, Avro), where a float64 may hold decoded ints.
    """
    arr = decode_dict(arr)
    t = arr.type
    nulls = nulls_of(arr)
    if pa.types.is_null(t):
        return Vec("null", None, np.ones(len(arr), dtype=bool))
    if pa.types.is_boolean(t):
        return Vec("bool", np_bool(arr), nulls)
    if pa.types.is_integer(t) and not pa.types.is_uint64(t):
        return Vec("int", _filled(arr, 0).astype(np.int64), nulls)
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        data = _filled(arr, 0.0).astype(np.float64)
        return Vec("double", data, nulls, maybe_int=decoded and pa.types.is_float64(t))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return Vec("string", arr, nulls)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return Vec("bytes", arr, nulls)
    if isinstance(t, pa.StructType):
        if any("\x00" in f.name for f in t):
            raise Unsupported("a field name holds U+0000")
        return Vec("map", arr, nulls, path=path)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return Vec("list", arr, nulls)
    raise Unsupported(f"Arrow type {t} is not vectorised")


def _filled(arr: pa.Array, fill: int | float) -> np.ndarray:
    """A numeric column as numpy, nulls replaced by ``fill``."""
    return arr.fill_null(fill).to_numpy(zero_copy_only=False)


def full(v: Vec, n: int) -> Vec:
    """A literal broadcast to all rows (a column as it is)."""
    if not v.scalar:
        return v
    if v.kind == "null":
        return Vec("null", None, np.ones(n, dtype=bool))
    if isinstance(v.data, str | bytes):  # a string or bytes literal
        return Vec(v.kind, pa.repeat(v.data, n))
    dtype = {"int": np.int64, "double": np.float64, "bool": bool, "type": np.int8}[v.kind]
    return Vec(v.kind, np.full(n, v.data, dtype=dtype))


def _arrow_scalar(v: Vec) -> pa.Scalar:
    """A string or bytes literal as an Arrow scalar of its CEL type."""
    return pa.scalar(v.data, pa.string() if v.kind == "string" else pa.binary())


def arrow_arg(v: Vec) -> pa.Array | pa.Scalar:
    """A string or bytes value as an Arrow kernel argument (a literal as a scalar)."""
    return _arrow_scalar(v) if v.scalar else v.arrow()


def null_like(null: Vec, v: Vec, n: int) -> Vec:
    """``null`` (an all-null value) typed as ``v`` (the other branch of a conditional)."""
    data: np.ndarray | pa.Array
    if isinstance(v.data, np.ndarray):
        data = np.zeros(n, dtype=v.data.dtype)
    else:
        data = pa.nulls(n, v.arrow().type)
    return Vec(v.kind, data, np.ones(n, dtype=bool), null.bad)


def take(v: Vec, indices: pa.Array, rows: np.ndarray) -> Vec:
    """``v`` at ``rows`` (``indices``: the same positions as an Arrow array)."""
    data: Data
    if isinstance(v.data, np.ndarray):
        data = v.data[rows]
    elif isinstance(v.data, pa.Array):
        data = v.data.take(indices)
    else:
        data = v.data  # None: a null or headers value has no data to take
    return Vec(v.kind, data, None if v.null is None else v.null[rows],
               None if v.bad is None else v.bad[rows], maybe_int=v.maybe_int)


def utf8_or_bytes(arr: pa.Array) -> Vec:
    """A binary column as CEL sees it: strings where valid UTF-8 (else bytes: per record)."""
    arr = decode_dict(arr)
    nulls = nulls_of(arr)
    try:
        return Vec("string", arr.cast(pa.string()), nulls)
    except pa.ArrowInvalid:
        pass
    items = arr.to_pylist()
    invalid = np.zeros(len(items), dtype=bool)
    for i, b in enumerate(items):
        if isinstance(b, bytes):
            try:
                b.decode("utf-8")
            except UnicodeDecodeError:
                invalid[i] = True
    cleaned: pa.Array = pc.if_else(pa.array(~invalid), arr, pa.scalar(None, arr.type))
    return Vec("string", cleaned.cast(pa.string()), or_masks(nulls, invalid), invalid)


def special_rows(arr: pa.Array | pa.ChunkedArray, binary_nul: bool = False) -> Mask | None:
    """Rows holding a value cel-expr-python does not take as is (see the module docstring).

    ``binary_nul``: a binary column (``key``, header values) whose valid UTF-8 values become
    strings, so a NUL byte in any of them sends the row per record.
    """
    arr = decode_dict(arr)
    t = arr.type
    n = len(arr)
    if n == 0:
        return None
    if pa.types.is_string(t) or pa.types.is_large_string(t) or \
            (binary_nul and (pa.types.is_binary(t) or pa.types.is_large_binary(t))):
        # a binary value becomes a string only when it is valid UTF-8, but a NUL byte in any
        # sends the row per record (the pattern is the same byte for strings and bytes)
        m = np_bool(pc.match_substring(arr, "\x00"))
        return m if m.any() else None
    if pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_duration(t):
        m = np_bool(arr.is_valid())
        return m if m.any() else None
    if isinstance(arr, pa.StructArray):
        valid = np_bool(arr.is_valid())
        out = None
        for i in range(arr.type.num_fields):
            out = or_masks(out, special_rows(pc.struct_field(arr, [i])))
        return None if out is None else out & valid
    if isinstance(arr, pa.ListArray | pa.LargeListArray | pa.MapArray):
        flat = pa.StructArray.from_arrays([arr.keys, arr.items], ["key", "value"]) \
            if isinstance(arr, pa.MapArray) else arr.flatten()
        inner = special_rows(flat)
        if inner is None:
            return None
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
        return np.bincount(parents[inner], minlength=n) > 0
    if pa.types.is_union(t) or pa.types.is_fixed_size_list(t) or \
            isinstance(t, pa.ExtensionType) or pa.types.is_list_view(t):
        raise Unsupported(f"Arrow type {t} is not vectorised")
    return None


def avro_exact_presence(ctx: EvalContext, decoded: DecodedColumn) -> bool:
    """Whether every decoded Avro record has every struct field (one writer schema's shape).

    Values whose schema needs a per-value converter (uuid, JSON-text unions) are not what the
    Arrow column holds: :class:`Unsupported`.
    """
    from kqlab.serde.schemas import SchemaNotFound, SchemaResolver

    fmt = ctx.value_format
    resolver = ctx.resolver
    if resolver is None:
        resolver = SchemaResolver.from_source(None if fmt is None else fmt.schemas)
    schemas: list[ParsedSchema] = []
    if fmt is not None and fmt.wire == "confluent":
        ids = decoded.schema_ids
        for sid in pc.unique(ids.drop_null()).to_pylist() if ids is not None else []:
            if sid is None:
                continue
            try:
                schemas.append(resolver.schema(int(sid)))
            except SchemaNotFound:
                continue  # those values did not decode: null here and None per record
    else:
        schemas.append(resolver.unframed())
    if any(ps.arrow.converter is not None for ps in schemas):
        raise Unsupported("Avro values with per-value converters (uuid, JSON-text unions)")
    return all(ps.arrow_type == decoded.values.type for ps in schemas)
