"""What ``schema_drift`` compares: each record's shape — its schema id (Confluent framing)
and the set of top-level fields its decoded value holds — as canonical text.

``schema:<id>`` for a framed value; ``fields:<a,b,...>`` (names sorted, a field counts when
it is not null) for a value decoded to a record/object; both, joined by ``|``, when a value
has both.  Computed over whole columns: per struct child a validity bit, the bits of a
record packed into one integer code, and only the distinct codes rendered as text.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.context import EvalContext

__all__ = ["record_shapes"]

#: beyond this many top-level fields the codes are built in several 62-bit words
_WORD = 62


def _field_words(ctx: EvalContext) -> tuple[list[np.ndarray], list[str], pa.Array] | None:
    """Per record the bits of the top-level fields its object holds (one word per
    :data:`_WORD` fields, bit ``b`` of word ``w``: field ``w * _WORD + b`` of the names
    sorted), the sorted names and the decoded values (null: no object); None when values do
    not decode to objects."""
    if ctx.value_format is None or ctx.value_format.format not in ("json", "avro", "protobuf"):
        return None
    decoded = ctx.decoded("value")
    values = decoded.values
    if isinstance(values, pa.DictionaryArray):
        values = values.dictionary_decode()
    if decoded.fallback or not pa.types.is_struct(values.type):
        return None
    names = [values.type.field(i).name for i in range(values.type.num_fields)]
    n = len(values)
    order = np.argsort(np.array(names, dtype=object), kind="stable") if names else \
        np.zeros(0, np.int64)
    words = []
    for start in range(0, len(names), _WORD):
        const = 0  # the bits of the fields every object holds (or none does): no pass
        code: np.ndarray | None = None
        for bit, i in enumerate(order[start:start + _WORD].tolist()):
            child = pc.struct_field(values, [i])  # null where the value itself is null
            if child.null_count == values.null_count:  # set in every object
                const |= 1 << bit
                continue
            if child.null_count == n:  # in none
                continue
            valid = child.is_valid().to_numpy(zero_copy_only=False).astype(np.int64) << bit
            code = valid if code is None else code | valid
        words.append(np.full(n, const, np.int64) if code is None else code | const)
    if not words:
        words = [np.zeros(n, np.int64)]
    return words, [names[i] for i in order.tolist()], values


def _texts(rows: list[list[int]], sorted_names: list[str]) -> list[str]:
    """``fields:a,b`` of each row of words (:func:`_field_words`)."""
    return ["fields:" + ",".join(sorted_names[w * _WORD + b] for w, word in enumerate(row)
                                 for b in range(_WORD) if word >> b & 1) for row in rows]


def _field_sets(ctx: EvalContext) -> pa.Array | None:
    """``fields:a,b`` per record (null: the value is not an object), or None when values do
    not decode to objects."""
    found = _field_words(ctx)
    if found is None:
        return None
    words, sorted_names, values = found
    if len(words) == 1 and len(sorted_names) <= 20:  # a small code range: counting, no sort
        seen = np.zeros(1 << len(sorted_names), bool)
        seen[words[0]] = True
        present_codes = np.flatnonzero(seen)
        rank = np.cumsum(seen) - 1
        distinct, which = present_codes.reshape(-1, 1), rank[words[0]]
    elif len(words) == 1:
        distinct, which = np.unique(words[0], return_inverse=True)
        distinct = distinct.reshape(-1, 1)
    else:
        distinct, which = np.unique(np.stack(words, axis=1), axis=0, return_inverse=True)
    texts = _texts(distinct.tolist(), sorted_names)
    indices = pa.array(which.reshape(-1).astype(np.int32), mask=np.asarray(
        values.is_null().to_numpy(zero_copy_only=False), bool))
    return pa.DictionaryArray.from_arrays(indices, pa.array(texts, pa.large_string()))


def shape_counts(ctx: EvalContext, keep: np.ndarray) -> tuple[pa.Array, np.ndarray] | None:
    """The shapes of the records ``keep`` keeps and how many hold each — the rows of a
    ``schema_drift`` partial, in the order counting :func:`record_shapes`' dictionary codes
    gives them (ascending field bits) — counted from the records' field bits, without
    building each record's shape; None where :func:`record_shapes` must say (schema ids in
    the shape, values that are not objects, more than 20 top-level fields)."""
    fmt = ctx.value_format
    if fmt is not None and fmt.wire == "confluent":
        return None
    found = _field_words(ctx)
    if found is None or len(found[0]) != 1 or len(found[1]) > 20:
        return None
    (word,), sorted_names, values = found
    present = keep if not values.null_count else keep & np.asarray(
        values.is_valid().to_numpy(zero_copy_only=False), bool)
    per = np.bincount(word if present.all() else word[present],
                      minlength=1 << len(sorted_names))
    at = np.flatnonzero(per)
    return (pa.array(_texts([[c] for c in at.tolist()], sorted_names), pa.large_string()),
            per[at].astype(np.int64))


def record_shapes(ctx: EvalContext) -> pa.Array:
    """Each record's shape text (``large_binary``, or a dictionary array of it; null: no
    schema id and no fields)."""
    def compute() -> pa.Array:
        n = ctx.n
        parts: list[pa.Array] = []
        fmt = ctx.value_format
        if fmt is not None and fmt.wire == "confluent":
            ids = ctx.wire("value").schema_id
            # every input and the separator of one type: Arrow has no kernel for a mix
            parts.append(pc.binary_join_element_wise(
                pa.scalar("schema", pa.large_string()), pc.cast(ids, pa.large_string()),
                pa.scalar(":", pa.large_string())))
        fields = _field_sets(ctx)
        if fields is not None:
            parts.append(fields)
        if not parts:
            return pa.nulls(n, pa.large_binary())
        if len(parts) == 1 and isinstance(parts[0], pa.DictionaryArray):
            return parts[0]  # field sets only: their codes as they are
        decoded = [pc.cast(p.dictionary_decode() if isinstance(p, pa.DictionaryArray) else p,
                           pa.large_string()) for p in parts]
        if len(decoded) == 1:
            joined = decoded[0]
        else:
            joined = pc.binary_join_element_wise(*decoded, pa.scalar("|", pa.large_string()),
                                                 null_handling="skip")
            empty = pc.equal(joined, "")
            joined = pc.if_else(empty, pa.scalar(None, pa.large_string()), joined)
        return pc.cast(joined, pa.large_binary())

    return ctx.memo("check-shapes", compute)
