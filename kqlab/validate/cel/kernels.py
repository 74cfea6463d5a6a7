"""CEL operators and functions as kernels over whole columns, with CEL's error semantics.

Each kernel takes :class:`~kqlab.validate.cel.columns.Vec` operands over ``n`` rows and gives
one, marking as ``bad`` every row where the result is an evaluation error (int overflow,
``/ 0``, no matching overload) or where the kernels cannot be sure of the engine's answer;
the evaluator hands those rows to the per-record path, which produces the error text.  A
kernel raises :class:`~kqlab.validate.cel.tree.Unsupported` for operand types it does not
cover at all (the whole expression then runs per record).

Semantics followed (cel-expr-python's, the C++ runtime):

* ``==`` is heterogeneous: values of different types are unequal, numbers compare by value
  (``1 == 1.0``), NaN is unequal to itself; ordering compares int/int exactly and otherwise as
  double; strings in UTF-8 byte order;
* ``+ - * / %`` on ints are checked (overflow, ``/ 0`` and ``% 0`` are errors; division
  truncates toward zero), on doubles IEEE;
* ``&&`` and ``||`` absorb an error (or a non-bool) when the other side decides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.cel.columns import (
    EXACT,
    INT_MIN,
    NUMERIC,
    TYPE_CODES,
    Vec,
    arrow_arg,
    from_arrow,
    full,
    null_like,
    take,
)
from kqlab.validate.cel.masks import (
    Mask,
    and_mask,
    andnot,
    andnot_opt,
    integral,
    np_bool,
    or_masks,
)
from kqlab.validate.cel.tree import LitKind, LitValue, Unsupported

__all__ = ["arith", "cond", "convert", "eq", "in_column", "in_literals", "logic", "neg",
           "negate", "order", "size", "string_fn", "type_of"]

#: a numpy comparison (``np.less``, ``np.equal``, ...)
Compare = Callable[..., np.ndarray]
Order = Literal["lt", "le", "gt", "ge"]
Arith = Literal["add", "sub", "mul", "div", "mod"]
StringFn = Literal["startsWith", "endsWith", "contains", "matches"]

_SCALARS = ("null", "int", "double", "string", "bytes", "bool")


def _trues(n: int) -> Mask:
    return np.ones(n, dtype=bool)


def _falses(n: int) -> Mask:
    return np.zeros(n, dtype=bool)


# ---------------------------------------------------------------------------------- logic

def truth(v: Vec, n: int) -> tuple[Mask, Mask]:
    """(definitely true, definitely false) rows of a logical operand."""
    if v.kind != "bool":  # null, a number...: acts as an error under && and ||
        z = _falses(n)
        return z, z
    v = full(v, n)
    data = v.numpy()
    unsure = or_masks(v.bad, v.null)
    return andnot(data, unsure), andnot(~data, unsure)


def logic(op: Literal["and", "or"], a: Vec, b: Vec, n: int) -> Vec:
    """``a && b`` / ``a || b`` with CEL's commutative error absorption."""
    at, af = truth(a, n)
    bt, bf = truth(b, n)
    if op == "and":
        false = af | bf
        true = at & bt
    else:
        true = at | bt
        false = af & bf
    return Vec("bool", true, None, ~(true | false))


def negate(v: Vec, n: int) -> Vec:
    """``!v``."""
    v = full(v, n)
    if v.kind != "bool":
        return Vec("bool", _falses(n), None, _trues(n))
    return Vec("bool", ~v.numpy(), None, or_masks(v.bad, v.null))


def cond(c: Vec, x: Vec, y: Vec, n: int) -> Vec:
    """``c ? x : y`` (branches of one type, a null branch typed as the other)."""
    ct, cf = truth(c, n)
    x, y = full(x, n), full(y, n)
    if x.kind == "null" and y.kind != "null":
        x = null_like(x, y, n)
    elif y.kind == "null" and x.kind != "null":
        y = null_like(y, x, n)
    if x.kind != y.kind or x.kind in ("map", "headers"):
        raise Unsupported("a conditional whose branches differ in type")
    bad = or_masks(~(ct | cf), and_mask(ct, x.bad), and_mask(cf, y.bad))
    null = or_masks(and_mask(ct, x.null), and_mask(cf, y.null))
    data: np.ndarray | pa.Array | None
    if x.kind == "null":
        data = None
    elif isinstance(x.data, np.ndarray):
        data = np.where(ct, x.data, y.numpy())
    else:
        data = pc.if_else(pa.array(ct), x.arrow(), y.arrow())
    return Vec(x.kind, data, null, bad, maybe_int=x.maybe_int or y.maybe_int)


# ------------------------------------------------------------------------------ arithmetic

def neg(v: Vec, n: int) -> Vec:
    """``-v`` (``-(-2**63)`` overflows)."""
    if v.kind not in NUMERIC:
        return Vec("int", np.zeros(n, np.int64), None, _trues(n))
    v = full(v, n)
    data = v.numpy()
    bad = or_masks(v.bad, v.null)
    if v.kind == "int":
        overflow = data == INT_MIN
        with np.errstate(over="ignore"):
            return Vec("int", -data, None, or_masks(bad, overflow))
    if v.maybe_int:
        bad = or_masks(bad, integral(data) & (np.abs(data) >= EXACT))
    return Vec("double", -data, None, bad, maybe_int=v.maybe_int)


def arith(op: Arith, a: Vec, b: Vec, n: int) -> Vec:
    """``a op b`` for ``+ - * / %``."""
    if a.scalar and b.scalar:
        a = full(a, n)
    bad = or_masks(a.bad, b.bad, None if a.scalar else a.null, None if b.scalar else b.null)
    if a.kind == b.kind == "int":
        return _int_arith(op, a.num(), b.num(), bad, n)
    if a.kind == b.kind == "double" and op != "mod":
        for v in (a, b):  # an integral float64 may be a decoded int: int + double errs
            if v.maybe_int:
                bad = or_masks(bad, np.broadcast_to(integral(v.num()), (n,)).copy())
        fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[op]
        with np.errstate(all="ignore"):
            data = np.broadcast_to(fn(a.num(), b.num()), (n,)).copy()
        return Vec("double", data, None, bad)
    if op == "add" and a.kind == b.kind and a.kind in ("string", "bytes"):
        fa, fb = full(a, n).arrow(), full(b, n).arrow()
        # pyarrow-stubs type the separator (the last argument) like the strings joined; the
        # kernel takes a Python str/bytes there
        if a.kind == "string":
            joined = pc.binary_join_element_wise(fa, fb, "")
        else:
            joined = pc.binary_join_element_wise(
                fa.cast(pa.binary()), fb.cast(pa.binary()), b"")
        return Vec(a.kind, joined, None, bad)
    if a.kind in ("map", "list", "headers", "type") or b.kind in ("map", "list", "type"):
        raise Unsupported(f"arithmetic on {a.kind} and {b.kind}")
    if (a.kind == "double" and a.maybe_int) or (b.kind == "double" and b.maybe_int):
        # int op maybe-int: the integral rows may be ints (no error): per record
        raise Unsupported("arithmetic mixing int and a double column that may hold ints")
    return Vec("int", np.zeros(n, np.int64), None, _trues(n))


def _int_arith(op: Arith, a: np.ndarray | int | float | bool, b: np.ndarray | int | float | bool,
               bad: Mask | None, n: int) -> Vec:
    """Checked int64 arithmetic: overflow, ``/ 0`` and ``% 0`` are errors (``bad``)."""
    x = np.broadcast_to(np.asarray(a, dtype=np.int64), (n,))
    y = np.broadcast_to(np.asarray(b, dtype=np.int64), (n,))
    with np.errstate(all="ignore"):
        if op == "add":
            r = x + y
            err = ((x ^ r) & (y ^ r)) < 0
        elif op == "sub":
            r = x - y
            err = ((x ^ y) & (x ^ r)) < 0
        elif op == "mul":
            r = x * y
            safe_y = np.where(y == 0, 1, y)
            err = (y != 0) & ((r // safe_y != x) | ((x == -1) & (y == INT_MIN)) |
                              ((y == -1) & (x == INT_MIN)))
        else:
            zero = y == 0
            overflow = (x == INT_MIN) & (y == -1)
            err = zero | overflow
            safe_y = np.where(err, 1, y)
            q: np.ndarray = x // safe_y  # floor division, then truncated toward zero (C++)
            q = np.where((x - q * safe_y != 0) & ((x < 0) != (safe_y < 0)), q + 1, q)
            r = q if op == "div" else x - safe_y * q
    return Vec("int", np.asarray(r, dtype=np.int64), None, or_masks(bad, err))


# ----------------------------------------------------------------------------- comparison

def eq(a: Vec, b: Vec, n: int) -> Vec:
    """CEL ``==`` (heterogeneous: different types are unequal, numbers by value)."""
    if a.kind in ("map", "list", "headers") or b.kind in ("map", "list", "headers"):
        if a.kind == "null" or b.kind == "null":  # a container == null: only null is
            other = b if a.kind == "null" else a
            if other.kind == "headers":
                return Vec("bool", _falses(n))
            null = other.null if other.null is not None else _falses(n)
            return Vec("bool", null.copy(), None, or_masks(a.bad, b.bad))
        raise Unsupported("equality of maps or lists")
    bad = or_masks(a.bad, b.bad)
    an = a.null if not a.scalar else (_trues(n) if a.kind == "null" else None)
    bn = b.null if not b.scalar else (_trues(n) if b.kind == "null" else None)
    an_ = an if an is not None else _falses(n)
    bn_ = bn if bn is not None else _falses(n)
    both_null = an_ & bn_
    some_null = an_ | bn_
    if a.kind == "null" or b.kind == "null":
        return Vec("bool", both_null, None, bad)
    if a.kind in NUMERIC and b.kind in NUMERIC:
        same, extra = _num_cmp(np.equal, a, b, n)
        bad = or_masks(bad, extra)
    elif a.kind == b.kind and a.kind in ("string", "bytes"):
        if a.scalar and b.scalar:
            same = np.full(n, a.data == b.data)
        else:
            left, right = (b, a) if a.scalar else (a, b)
            same = np_bool(pc.equal(left.arrow(), arrow_arg(right)))
    elif a.kind == b.kind and a.kind in ("bool", "type"):
        same = np.broadcast_to(np.equal(a.num(), b.num()), (n,)).copy()
    else:
        same = _falses(n)  # different types: unequal
    return Vec("bool", np.where(some_null, both_null, same), None, bad)


def _num_cmp(fn: Compare, a: Vec, b: Vec, n: int) -> tuple[Mask, Mask | None]:
    """``fn`` over two numeric values as the C++ runtime compares them; plus unsure rows."""
    extra = None
    if a.kind == "int" and b.kind == "int":
        out = fn(a.num(), b.num())
    else:
        x = np.asarray(a.num(), dtype=np.float64)
        y = np.asarray(b.num(), dtype=np.float64)
        with np.errstate(invalid="ignore"):
            out = fn(x, y)
        # an integral float64 may be a decoded int: int/int compares exactly, so values
        # beyond 2**53 on either side are left to the record
        for v, w in ((a, b), (b, a)):
            if v.maybe_int and (w.kind == "int" or w.maybe_int):
                big = (np.abs(np.asarray(v.num(), dtype=np.float64)) >= EXACT) | \
                    (np.abs(np.asarray(w.num(), dtype=np.float64)) >= EXACT)
                extra = or_masks(extra, np.broadcast_to(integral(v.num()) & big, (n,)).copy())
    return np.broadcast_to(out, (n,)).copy(), extra


_ORDER_NP: dict[str, Compare] = {"lt": np.less, "le": np.less_equal, "gt": np.greater,
                                 "ge": np.greater_equal}
_ORDER_ARROW = {"lt": pc.less, "le": pc.less_equal, "gt": pc.greater, "ge": pc.greater_equal}


def order(op: Order, a: Vec, b: Vec, n: int) -> Vec:
    """``<`` ``<=`` ``>`` ``>=`` on numbers, strings, bytes and bools."""
    fn = _ORDER_NP[op]
    bad = or_masks(a.bad, b.bad, None if a.scalar else a.null, None if b.scalar else b.null)
    if a.kind == "null" or b.kind == "null":
        return Vec("bool", _falses(n), None, _trues(n))
    if a.kind in NUMERIC and b.kind in NUMERIC:
        data, extra = _num_cmp(fn, a, b, n)
        return Vec("bool", data, None, or_masks(bad, extra))
    if a.kind == b.kind and a.kind in ("string", "bytes"):
        if a.scalar and b.scalar:
            a = full(a, n)
        return Vec("bool", np_bool(_ORDER_ARROW[op](arrow_arg(a), arrow_arg(b))), None, bad)
    if a.kind == b.kind == "bool":
        return Vec("bool", np.broadcast_to(fn(a.num(), b.num()), (n,)).copy(), None, bad)
    if a.kind in ("map", "list", "headers", "type") or b.kind in ("map", "list", "type"):
        raise Unsupported(f"ordering of {a.kind} and {b.kind}")
    return Vec("bool", _falses(n), None, _trues(n))


# ------------------------------------------------------------------------------------- in

def in_literals(x: Vec, items: list[tuple[LitValue, LitKind]], n: int) -> Vec:
    """``x in [literals]``: membership by CEL equality, per type."""
    x = full(x, n)
    xnull = x.null if x.null is not None else _falses(n)
    bad = x.bad
    has_null = any(k == "null" for _, k in items)
    if x.kind == "null":
        return Vec("bool", np.full(n, has_null), None, bad)
    if x.kind in ("map", "list", "headers"):
        raise Unsupported(f"{x.kind} in a list")
    if x.kind in NUMERIC:
        xs = x.numpy()
        ints = [v for v, k in items if k == "int"]
        doubles = [v for v, k in items if k == "double"]
        data = _falses(n)
        if x.kind == "int":
            if ints:
                data |= np.isin(xs, np.array(ints, dtype=np.int64))
            if doubles:
                data |= np.isin(xs.astype(np.float64), np.array(doubles))
        else:
            values = np.array([float(v) for v in ints + doubles if isinstance(v, int | float)],
                              dtype=np.float64)
            if len(values):
                with np.errstate(invalid="ignore"):
                    data |= np.isin(xs, values)
            if x.maybe_int and ints:
                big = np.abs(xs) >= EXACT
                if any(isinstance(v, int) and abs(v) >= EXACT for v in ints):
                    big = _trues(n)
                bad = or_masks(bad, integral(xs) & big)
    elif x.kind in ("string", "bytes", "bool"):
        same = [v for v, k in items if k == x.kind]
        if x.kind == "bool":
            data = np.isin(x.numpy(), np.array(same, dtype=bool)) if same else _falses(n)
        elif same:
            data = np_bool(pc.is_in(x.arrow(), value_set=pa.array(
                same, pa.string() if x.kind == "string" else pa.binary())))
        else:
            data = _falses(n)
    else:
        raise Unsupported(f"{x.kind} in a list")
    return Vec("bool", np.where(xnull, has_null, data), None, bad)


def in_column(x: Vec, c: Vec, n: int, decoded: bool) -> Vec:
    """``x in list_column``: element-wise equality, any per row."""
    arr = c.arrow()
    if not isinstance(arr, pa.ListArray | pa.LargeListArray):
        raise TypeError(f"a list value held in {arr.type}")
    flat = arr.flatten()
    parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False).astype(np.int64)
    elems = from_arrow(flat, None, decoded)
    m = len(flat)
    xs = x if x.scalar else take(x, pa.array(parents), parents)
    same = eq(elems, xs, m)
    hits = same.numpy() & ~(same.bad if same.bad is not None else _falses(m))
    data = np.bincount(parents[hits], minlength=n) > 0
    unsure = np.bincount(parents[same.bad], minlength=n) > 0 if same.bad is not None and \
        same.bad.any() else None
    bad = or_masks(c.bad, c.null, None if x.scalar else x.bad, andnot_opt(unsure, data))
    return Vec("bool", data, None, bad)


# ------------------------------------------------------------------------------ functions

def size(v: Vec, n: int) -> Vec:
    """``size(v)``: strings in code points, bytes, lists."""
    v = full(v, n)
    if v.kind in ("int", "double", "bool", "null", "type"):
        return Vec("int", np.zeros(n, dtype=np.int64), None, _trues(n))
    if v.kind not in ("string", "bytes", "list"):
        raise Unsupported(f"size() of {v.kind}")
    arr = v.arrow()
    out: pa.Array
    if isinstance(arr, pa.StringArray | pa.LargeStringArray):
        out = pc.utf8_length(arr)  # code points
    elif isinstance(arr, pa.BinaryArray | pa.LargeBinaryArray
                         | pa.FixedSizeBinaryArray):
        out = pc.binary_length(arr)
    else:
        out = pc.list_value_length(arr)
    data = out.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return Vec("int", data, None, or_masks(v.bad, v.null))


def string_fn(name: StringFn, target: Vec, arg: str, n: int) -> Vec:
    """``target.startsWith(arg)``, ``endsWith``, ``contains``, ``matches`` (RE2, search)."""
    if target.kind != "string":
        if target.kind in ("null", "int", "double", "bool", "bytes", "list", "map"):
            return Vec("bool", _falses(n), None, _trues(n))
        raise Unsupported(f"{name}() on {target.kind}")
    target = full(target, n)
    bad = or_masks(target.bad, target.null)
    strings = target.arrow()
    if name == "startsWith":
        out = pc.starts_with(strings, arg)
    elif name == "endsWith":
        out = pc.ends_with(strings, arg)
    elif name == "contains":
        out = pc.match_substring(strings, arg)
    else:
        try:
            out = pc.match_substring_regex(strings, arg)
        except pa.ArrowInvalid:  # a bad pattern: an error wherever it is applied
            return Vec("bool", _falses(n), None, _trues(n))
    return Vec("bool", np_bool(out), None, bad)


def type_of(v: Vec, n: int) -> Vec:
    """``type(v)`` as an int8 type code per row."""
    if v.kind not in TYPE_CODES and v.kind not in ("headers", "null"):
        raise Unsupported(f"type() of {v.kind}")
    v = full(v, n) if v.kind != "headers" else v
    code = TYPE_CODES["map" if v.kind == "headers" else
                      "null_type" if v.kind == "null" else v.kind]
    data = np.full(n, code, dtype=np.int8)
    if v.null is not None:
        data[v.null] = TYPE_CODES["null_type"]
    bad = v.bad
    if v.maybe_int:
        bad = or_masks(bad, andnot(integral(v.numpy()), v.null))
    return Vec("type", data, None, bad)


def convert(name: Literal["int", "double"], v: Vec, n: int) -> Vec:
    """``int(v)`` / ``double(v)`` of a number (int() of a double truncates; range-checked)."""
    if v.kind not in NUMERIC:
        if v.kind in ("null", "bool", "bytes", "list", "map"):
            return Vec(name, np.zeros(n, dtype=np.int64 if name == "int" else np.float64),
                       None, _trues(n))
        raise Unsupported(f"{name}() of {v.kind}")
    v = full(v, n)
    x = v.numpy()
    bad = or_masks(v.bad, v.null)
    if name == "double":
        return Vec("double", x.astype(np.float64), None, bad)
    if v.kind == "int":
        return Vec("int", x, None, bad)
    with np.errstate(invalid="ignore"):
        out_of_range = ~np.isfinite(x) | (np.abs(x) >= 2.0**62)
        if v.maybe_int:
            out_of_range |= integral(x) & (np.abs(x) >= EXACT)
        data = np.where(out_of_range, 0, np.trunc(x)).astype(np.int64)
    return Vec("int", data, None, or_masks(bad, out_of_range))
