"""Per-record columns the sample checks read, from one sample (or one chunk of a streamed
replay): which records a check reads (not transaction markers; ``when``), their groups
(``by``), and a field's values in the canonical forms every chunk and engine agrees on.

Canonical forms make partial aggregates of different chunks comparable whatever type the
JSON reader inferred for each chunk: a value to count or compare (distinct, duplicates,
categories, groups) is its text as ``large_binary`` (numbers as Arrow casts them to text:
``5`` and ``5.0`` are both ``5``); a value to measure (statistics, numeric drift) is a finite
float64.  Everything is Arrow/numpy over whole columns; a decoded column Arrow cannot
address (JSON whose records disagree on types, maps, unions) is read through its Python
objects, one record at a time — the one fallback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.policy.check_catalog import by_target
from kqlab.validate.context import EvalContext

__all__ = ["FieldValues", "field_values", "group_labels", "key_values", "numeric_values",
           "reads", "to_text"]


@dataclass(frozen=True)
class FieldValues:
    """A field's values over a sample: the leaf column (nulls where null or missing) when it
    holds single values, else None (objects or lists); and where it is null or missing."""

    values: pa.Array | None
    nulls: np.ndarray
    #: the numbers (NaN elsewhere) when read through Python objects (the fallback), where a
    #: column of mixed types is text but its numbers still count as numbers
    numbers: np.ndarray | None = None


def _py_text(v: object) -> str | None:
    """A Python scalar in the canonical text Arrow's casts give (``5.0`` → ``5``)."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    if isinstance(v, int | float):
        return repr(v)
    return json.dumps(v, ensure_ascii=False, default=str)


def _python_leaf(values: list[object], path: tuple[str, ...]) -> list[object]:
    from kqlab.validate.fields import _resolve

    return [_resolve(v, path) for v in values]


def _is_nested(t: pa.DataType) -> bool:
    return bool(pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t) or
                pa.types.is_map(t) or pa.types.is_fixed_size_list(t))


def field_values(ctx: EvalContext, path: str) -> FieldValues:
    """The decoded value's field at dotted ``path``, one entry per record (memoised on the
    context: several checks of one field read it once)."""
    return ctx.memo(f"check-field:{path}", lambda: _field_values(ctx, path))


def _field_values(ctx: EvalContext, path: str) -> FieldValues:
    from kqlab.validate.fields import _resolve_arrow

    decoded = ctx.decoded("value")
    parts = tuple(path.split("."))
    leaf = None if decoded.fallback else _resolve_arrow(decoded.values, parts)
    if leaf is None:  # the fallback: Python objects, one record at a time
        items = _python_leaf(decoded.python_values(), parts)
        nulls = np.array([v is None for v in items], dtype=bool)
        if any(isinstance(v, dict | list) for v in items):
            return FieldValues(None, nulls)
        numbers = np.array([float(v) if isinstance(v, int | float) and
                            not isinstance(v, bool) else np.nan for v in items], np.float64)
        leaf = pa.array([_py_text(v) for v in items], pa.large_string())
        return FieldValues(leaf, nulls, numbers)
    nulls = leaf.is_null().to_numpy(zero_copy_only=False)
    return FieldValues(None if _is_nested(leaf.type) else leaf, np.asarray(nulls, dtype=bool))


def to_text(values: pa.Array) -> pa.Array:
    """``values`` as ``large_binary`` text (nulls stay null): the canonical form values are
    counted and compared in."""
    t = values.type
    if pa.types.is_null(t):
        return pa.nulls(len(values), pa.large_binary())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t) or \
            pa.types.is_large_string(t):
        return pc.cast(values, pa.large_binary())
    if pa.types.is_boolean(t):
        return pc.cast(pc.cast(values, pa.string()), pa.large_binary())
    if pa.types.is_floating(t):
        # 5.0 and 5 count as one value (a JSON reader may infer either per chunk)
        f = values.to_numpy(zero_copy_only=False)
        whole = np.isfinite(f) & (np.floor(f) == f) & (np.abs(f) < 2**53)
        if whole.any():
            as_int = pc.cast(pa.array(np.where(whole, f, 0).astype(np.int64)), pa.string())
            text = pc.if_else(pa.array(whole), as_int, pc.cast(values, pa.string()))
            return pc.cast(pc.if_else(values.is_null(), pa.scalar(None, pa.string()), text),
                           pa.large_binary())
    return pc.cast(pc.cast(values, pa.string()), pa.large_binary())


def numeric_values(fv: FieldValues) -> tuple[np.ndarray, np.ndarray, int]:
    """``(valid, numbers, non_numeric)``: where a record holds a finite number, the numbers
    (float64, aligned with the records; NaN elsewhere) and how many non-null values were
    not numbers."""
    values = fv.values
    assert values is not None
    if fv.numbers is not None:
        valid = np.isfinite(fv.numbers)
        return valid, fv.numbers, int((~fv.nulls & ~valid).sum())
    t = values.type
    n = len(values)
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        f = np.asarray(pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False),
                       dtype=np.float64)
        valid = np.isfinite(f)
        return valid, f, 0
    return np.zeros(n, dtype=bool), np.full(n, np.nan), int(n - values.null_count)


def key_values(ctx: EvalContext) -> pa.Array:
    """The record keys (null: no key), as ``large_binary``."""
    return pc.cast(ctx.column("key"), pa.large_binary())


def group_labels(ctx: EvalContext, by: str | None) -> pa.Array:
    """Each record's group label (string, or a dictionary array of strings; null: no ``by``,
    or no value to group on)."""
    n = ctx.n
    if by is None:  # one group, null: its codes cost nothing to group by
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)),
                                              pa.array([None], pa.string()))
    what, name = by_target(by)
    if what == "partition":
        return _partition_labels(ctx.column("topic"), pc.fill_null(
            ctx.column("partition"), -1).to_numpy(zero_copy_only=False).astype(np.int64))
    if what == "header":
        h = ctx.headers
        hit = pc.equal(h.keys, name).fill_null(False).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(hit)
        first = np.full(n, -1, dtype=np.int64)
        parents = h.parent[rows]
        # the first header of that name per record (reverse assignment keeps the first)
        first[parents[::-1]] = rows[::-1]
        taken = pc.take(h.values, pa.array(first, mask=first < 0))
        return pc.dictionary_encode(_as_label(taken))
    values = field_values(ctx, name).values
    if values is None:
        return pa.nulls(n, pa.string())
    # encoded once here (memoised with the context), grouped by its indices by every check
    return pc.dictionary_encode(_as_label(to_text(values)))


def _partition_labels(topic: pa.Array, part: np.ndarray) -> pa.DictionaryArray:
    """Each record's ``topic-partition`` label as a dictionary array.  A chunk of a replay
    is one partition's records in a row: the labels are worked out for the first record of
    each run of one (topic, partition) only, then repeated — comparing neighbours costs a
    fraction of hashing every record's topic."""
    n = len(part)
    if n and int(part.min()) == int(part.max()) and _one_text(topic):  # one partition
        label = f"{topic[0].as_py()}-{int(part[0])}"
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)),
                                              pa.array([label], pa.string()))
    if n > 1024:
        changed = part[1:] != part[:-1]
        if isinstance(topic, pa.ChunkedArray):
            topic = topic.combine_chunks()
        changed |= np.asarray(pc.fill_null(pc.not_equal(topic.slice(0, n - 1), topic.slice(1)),
                                           True).to_numpy(zero_copy_only=False), bool)
        heads = np.concatenate([[0], np.flatnonzero(changed) + 1]).astype(np.int64)
        if len(heads) <= n // 16:
            few = _partition_labels(topic.take(pa.array(heads)), part[heads])
            which = np.repeat(few.indices.to_numpy(zero_copy_only=False),
                              np.diff(np.append(heads, n)))
            return pa.DictionaryArray.from_arrays(pa.array(which), few.dictionary)
    # codes of (topic, partition); labels for the distinct ones
    topics = pc.dictionary_encode(topic)
    t = pc.fill_null(topics.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    code = t * (int(part.max(initial=0)) + 2) + (part + 1)
    top = int(code.max(initial=0)) + 1
    if top <= 4 * n + 1024:  # a few partitions: ranks by counting (a sort costs ~10x)
        seen = np.zeros(top, bool)
        seen[code] = True
        rank = np.cumsum(seen) - 1
        which = rank[code]
        count = int(rank[-1]) + 1
    else:
        distinct, which = np.unique(code, return_inverse=True)
        count = len(distinct)
    first = np.empty(count, np.int64)
    first[which.reshape(-1)[::-1]] = np.arange(n - 1, -1, -1)
    names = topics.dictionary.to_pylist()
    labels = [f"{names[t[i]]}-{part[i]}" for i in first.tolist()]
    return pa.DictionaryArray.from_arrays(pa.array(which.reshape(-1).astype(np.int32)),
                                          pa.array(labels, pa.string()))


def _one_text(column: pa.Array | pa.ChunkedArray) -> bool:
    """Whether a string column without nulls holds one value throughout (a chunk's topic),
    told from its offsets and bytes without comparing strings."""
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks != 1:
            return False
        column = column.chunk(0)
    n = len(column)
    if not n or column.null_count or not pa.types.is_string(column.type):
        return False
    _, offs, data = column.buffers()
    offsets = np.frombuffer(offs, np.int32, n + 1, column.offset * 4)
    size = int(offsets[1] - offsets[0])
    if not (np.diff(offsets) == size).all():
        return False
    if size == 0:
        return True
    raw = np.frombuffer(data, np.uint8, n * size, int(offsets[0]))
    # every value as long as the first and each byte equal to the one a value earlier:
    # every value is the first
    return bool(np.array_equal(raw[size:], raw[:-size]))


def _as_label(values: pa.Array) -> pa.Array:
    """Binary text as string labels (invalid UTF-8 replaced: labels are for people)."""
    if pa.types.is_string(values.type):
        return values
    try:
        return pc.cast(values, pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "replace")
                         for v in values.to_pylist()], pa.string())


def reads(ctx: EvalContext, control: np.ndarray, when: str | None) -> np.ndarray:
    """The records a check reads: not transaction markers, and ``when`` true (an error
    evaluating it leaves the record out)."""
    keep = ~control if len(control) == ctx.n else np.ones(ctx.n, dtype=bool)
    if when:
        def mask() -> np.ndarray:
            from kqlab.validate.cel import evaluate_cel

            col = evaluate_cel(ctx, when)
            return np.asarray(col.passed, dtype=bool) & ~np.asarray(col.error, dtype=bool)

        keep = keep & ctx.memo(f"check-when:{when}", mask)
    return keep
