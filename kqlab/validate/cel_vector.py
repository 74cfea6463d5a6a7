"""CEL rules as Arrow/numpy column kernels, with the per-record evaluator as the exact fallback.

A ``cel`` rule (or a ``when`` precondition) is first compiled by :mod:`kqlab.policy.cel` as
always (same compile errors).  This module then parses the expression with cel-python's lark
parser (``celpy.CELParser``; no grammar of our own) into a small AST and evaluates it over the
:class:`~kqlab.validate.context.EvalContext`'s cached columns with ``pyarrow.compute`` and
numpy.  The per-record evaluator stays the ground truth: every row the kernels cannot decide
with certainty — an evaluation error, an ambiguity in the decoded data, a value the engine
would hand to another engine — is *unsure* and evaluated per record by
:meth:`~kqlab.policy.cel.CelProgram.evaluate_many` on that row alone, so results and error
messages are exactly the per-record ones.  Anything outside the subset runs per record whole.

Supported subset (everything else falls back, transparently):

* literals: int, double, string, bytes, bool, ``null`` (values taken from cel-expr-python
  itself and cross-checked with celpy), list literals of literals (after ``in``);
* variables: ``value`` (the decoded value: an Arrow struct → CEL map, scalars as below),
  ``key`` (string; a non-UTF-8 key is bytes → that row per record), ``headers`` (``headers.x``,
  ``headers['x']``, ``'x' in headers``, ``has(headers.x)``), ``topic``, ``partition``,
  ``offset``, ``timestamp``, ``timestamp_type``, ``batch_offset``, ``batch_index``;
* field selection ``a.b`` / ``a['b']`` on struct columns, ``has(a.b)``, ``'b' in a``,
  list indexing with an int literal (``value.items[0]``);
* ``==`` ``!=`` (CEL's heterogeneous equality: across types false, ``1 == 1.0`` true, NaN
  unequal), ``<`` ``<=`` ``>`` ``>=`` on numbers (int/int exact, otherwise as double, as the
  C++ runtime does), strings (UTF-8 byte order), bytes and bools;
* ``+ - * / %`` on ints (overflow, ``/ 0`` and ``% 0`` are errors), ``+ - * /`` on doubles
  (IEEE), ``+`` on strings and bytes, unary ``-`` and ``!``;
* ``&&`` ``||`` with CEL's commutative error absorption (``false && <error>`` is false in either
  order), ``c ? a : b``;
* ``x in [literals]``, ``x in value.list``, ``size()`` (strings in code points, bytes, lists),
  ``s.startsWith(lit)``, ``endsWith``, ``contains``, ``s.matches(lit)`` (RE2, search),
  ``type(x) == int|uint|double|string|bytes|bool|map|list|null_type``, ``int()``, ``double()``.

How decoded Arrow columns map to CEL values, and where the kernels defer to the record:

* integers → ``int`` (``uint64`` columns are not vectorised); ``float32`` → ``double``;
  ``float64`` → ``double``, except that an *integral* float64 may stand for a decoded Python
  ``int`` (JSON ``[1, 2.5]`` infers a double column; Avro numeric unions likewise), so where
  int and double would differ (arithmetic, ``type()``, magnitudes ≥ 2**53) those rows go per
  record; strings, bytes, bools as themselves; structs → maps; lists → lists.
* **Absent vs null.** For CEL, ``value.a`` on a missing key is an error and ``has(value.a)``
  is false, while a present null is null.  An Arrow struct cannot tell the two apart (see
  :mod:`kqlab.validate.fields`), so for a null child the kernels ask the decoded Python object
  of that row (the per-record path's own input), only for those rows.  Avro values decoded
  with a single writer schema (every record has every field) skip that check.
* Values the per-record path hands to cel-python (a string with U+0000 anywhere in a
  referenced variable, a timestamp or time) are evaluated per record; so are Avro values
  whose schema needs a per-value converter (uuid, JSON-text unions), JSON values that fell back
  to text, and Arrow maps, decimals, dates and timestamps when selected.

Vectorising follows cel-expr-python's semantics; when the engine is cel-python
(``KQLAB_CEL_ENGINE``), rules run per record.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["CelColumn", "Unsupported", "evaluate_cel", "parse_cel", "vectorisable"]

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_EXACT = 2.0**53  # doubles at or beyond this magnitude may not equal the int they came from
_META_INTS = ("partition", "offset", "timestamp", "timestamp_type", "batch_offset",
              "batch_index")
_TYPE_CODES = {"int": 1, "uint": 2, "double": 3, "string": 4, "bytes": 5, "bool": 6,
               "null_type": 7, "map": 8, "list": 9}
_NUMERIC = ("int", "double")
_IDENTS = frozenset(("value", "key", "headers", "topic", *_META_INTS, *_TYPE_CODES))
_METHODS = frozenset(("size", "startsWith", "endsWith", "contains", "matches"))
_FUNCTIONS = frozenset(("has", "size", "matches", "type", "int", "double"))


class Unsupported(Exception):
    """The expression (or this sample's data) is outside the vectorised subset."""


# ============================================================================== parsing

_parser: Any = None
_parser_lock = threading.Lock()
_ast_cache: dict[str, Any] = {}


def parse_cel(expr: str) -> tuple:
    """The expression's AST (nested tuples), or :class:`Unsupported` outside the subset.

    Examples
    --------
    >>> parse_cel("value.a > 1")
    ('op', 'gt', (('sel', ('id', 'value'), 'a'), ('lit', 1, 'int')))
    """
    with _parser_lock:
        hit = _ast_cache.get(expr)
        if hit is None:
            try:
                hit = _Builder().build(_get_parser().parse(expr))
            except Unsupported as exc:
                hit = exc
            except Exception as exc:  # the lark parser disagreeing with the reference
                hit = Unsupported(f"cel-python's parser: {type(exc).__name__}")
            _ast_cache[expr] = hit
    if isinstance(hit, Unsupported):
        raise hit
    return hit


def _get_parser() -> Any:
    global _parser
    if _parser is None:
        from celpy.celparser import CELParser

        _parser = CELParser()
    return _parser


_BINOPS = {"relation_lt": "lt", "relation_le": "le", "relation_gt": "gt", "relation_ge": "ge",
           "relation_eq": "eq", "relation_ne": "ne", "relation_in": "in",
           "addition_add": "add", "addition_sub": "sub", "multiplication_mul": "mul",
           "multiplication_div": "div", "multiplication_mod": "mod"}


class _Builder:
    """lark tree (celpy's grammar) → tuple AST of the subset."""

    def build(self, tree: Any) -> tuple:
        name = str(tree.data)
        kids = tree.children
        if name == "expr":
            if len(kids) == 1:
                return self.build(kids[0])
            return ("op", "cond", tuple(self.build(k) for k in kids))
        if name in ("conditionalor", "conditionaland"):
            if len(kids) == 1:
                return self.build(kids[0])
            return ("op", "or" if name == "conditionalor" else "and",
                    (self.build(kids[0]), self.build(kids[1])))
        if name in ("relation", "addition", "multiplication"):
            if len(kids) == 1:
                return self.build(kids[0])
            left, right = kids
            op = str(left.data)
            return ("op", _BINOPS[op], (self.build(left.children[0]), self.build(right)))
        if name == "unary":
            if len(kids) == 1:
                return self.build(kids[0])
            op = str(kids[0].data)
            return ("op", "not" if op == "unary_not" else "neg", (self.build(kids[1]),))
        if name in ("member", "primary", "paren_expr"):
            return self.build(kids[0])
        if name == "member_dot":
            return ("sel", self.build(kids[0]), str(kids[1]))
        if name == "member_dot_arg":
            fname = str(kids[1])
            if fname not in _METHODS:
                raise Unsupported(f"method {fname}() is not vectorised")
            args = self._args(kids[2] if len(kids) > 2 else None)
            return ("call", fname, self.build(kids[0]), args)
        if name == "member_index":
            target, index = self.build(kids[0]), self.build(kids[1])
            if index[0] == "lit" and index[2] == "string":
                return ("sel", target, index[1])
            return ("idx", target, index)
        if name == "ident":
            ident = str(kids[0])
            if ident not in _IDENTS:
                raise Unsupported(f"{ident} is not a vectorised variable")
            return ("id", ident)
        if name == "ident_arg":
            fname = str(kids[0])
            if fname not in _FUNCTIONS:
                raise Unsupported(f"function {fname}() is not vectorised")
            args = self._args(kids[1] if len(kids) > 1 else None)
            if fname == "has":
                if len(args) != 1 or args[0][0] != "sel":
                    raise Unsupported("has() takes one field selection")
                return ("has", args[0])
            return ("call", fname, None, args)
        if name == "list_lit":
            return ("list", self._args(kids[0] if kids else None))
        if name == "literal":
            return _literal(kids[0])
        raise Unsupported(f"{name} is outside the vectorised subset")

    def _args(self, exprlist: Any) -> tuple:
        if exprlist is None:
            return ()
        return tuple(self.build(k) for k in exprlist.children)


_literal_env: Any = None


def _literal(token: Any) -> tuple:
    """A literal's value as the reference engine reads it (cross-checked with celpy)."""
    global _literal_env
    kind = {"INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double",
            "STRING_LIT": "string", "MLSTRING_LIT": "string", "BYTES_LIT": "bytes",
            "BOOL_LIT": "bool", "NULL_LIT": "null"}.get(token.type)
    if kind is None or kind == "uint":
        raise Unsupported(f"{token.type} literals are not vectorised")
    text = str(token)
    if kind == "null":
        return ("lit", None, "null")
    if kind == "bool":
        return ("lit", text == "true", "bool")
    try:
        from cel_expr_python import cel

        if _literal_env is None:
            _literal_env = cel.NewEnv(variables={})
        out = _literal_env.compile(text).eval(data={})
        value = out.value()
    except Exception as exc:
        raise Unsupported(f"literal {text!r}: {exc}") from None
    if isinstance(value, bytearray):
        value = bytes(value)
    from celpy import evaluation

    try:  # both libraries must read the literal alike (NUL bytes, escapes)
        other: Any = {"int": lambda t: int(t, 0) if "x" in t.lower() else int(t),
                      "double": float,
                      "string": lambda t: str(evaluation.celstr(token)),
                      "bytes": lambda t: bytes(evaluation.celbytes(token))}[kind](text)
    except Exception as exc:
        raise Unsupported(f"literal {text!r}: {exc}") from None
    if type(other) is not type(value) or other != value or \
            (kind == "string" and "\x00" in value) or (kind == "bytes" and b"\x00" in value):
        raise Unsupported(f"literal {text!r} is read differently by the CEL libraries")
    if kind == "int" and not _INT_MIN <= value <= _INT_MAX:
        raise Unsupported(f"literal {text!r} is out of range")
    return ("lit", value, kind)


# ============================================================================== values

@dataclass(eq=False, slots=True)
class _V:
    """One sub-expression over all N rows.

    ``kind`` is the CEL type of every non-null row; ``data`` a numpy array (int64, float64,
    bool, int8 type codes) or an Arrow array (string, bytes, struct, list), or a Python scalar
    for a literal (``scalar``).  ``null`` marks rows whose value is CEL null, ``bad`` rows the
    kernels cannot decide (errors included): None means no such row.
    """

    kind: str
    data: Any
    null: np.ndarray | None = None
    bad: np.ndarray | None = None
    scalar: bool = False
    maybe_int: bool = False  # float64 whose integral values may be decoded ints
    path: tuple[str, ...] | None = None  # struct: where it sits in ``value``


def _or(*masks: np.ndarray | None) -> np.ndarray | None:
    out = None
    for m in masks:
        if m is None:
            continue
        out = m.copy() if out is None else (out | m)
    return out


def _andnot(mask: np.ndarray, other: np.ndarray | None) -> np.ndarray:
    return mask if other is None else mask & ~other


def _np_bool(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(bool, copy=False)


def _nulls_of(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return _np_bool(arr.is_null())


def _decode_dict(arr: pa.Array) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


def _from_arrow(arr: pa.Array, path: tuple[str, ...] | None, decoded: bool) -> _V:
    """An Arrow column as a :class:`_V` (see the module docstring for the mapping)."""
    arr = _decode_dict(arr)
    t = arr.type
    nulls = _nulls_of(arr)
    if pa.types.is_null(t):
        return _V("null", None, np.ones(len(arr), dtype=bool))
    if pa.types.is_boolean(t):
        return _V("bool", _np_bool(arr), nulls)
    if pa.types.is_integer(t) and not pa.types.is_uint64(t):
        return _V("int", pc.fill_null(arr, 0).to_numpy(zero_copy_only=False).astype(np.int64),
                  nulls)
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        data = pc.fill_null(arr, 0.0).to_numpy(zero_copy_only=False).astype(np.float64)
        return _V("double", data, nulls, maybe_int=decoded and pa.types.is_float64(t))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _V("string", arr, nulls)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _V("bytes", arr, nulls)
    if pa.types.is_struct(t):
        if any("\x00" in f.name for f in t):
            raise Unsupported("a field name holds U+0000")
        return _V("map", arr, nulls, path=path)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _V("list", arr, nulls)
    raise Unsupported(f"Arrow type {t} is not vectorised")


def _full(v: _V, n: int) -> _V:
    """A literal broadcast to all rows."""
    if not v.scalar:
        return v
    if v.kind == "null":
        return _V("null", None, np.ones(n, dtype=bool))
    if v.kind in ("string", "bytes"):
        return _V(v.kind, pa.repeat(pa.scalar(v.data, pa.string() if v.kind == "string"
                                              else pa.binary()), n))
    dtype = {"int": np.int64, "double": np.float64, "bool": bool, "type": np.int8}[v.kind]
    return _V(v.kind, np.full(n, v.data, dtype=dtype))


def _arrow_arg(v: _V) -> Any:
    return pa.scalar(v.data, pa.string() if v.kind == "string" else pa.binary()) \
        if v.scalar else v.data


# ============================================================================== evaluation

@dataclass(frozen=True, slots=True)
class CelColumn:
    """One CEL expression over a sample: per record, did it give true, or an error (and which).

    ``passed`` is true where the expression evaluated to ``true``; ``error`` where it failed
    to evaluate (or gave a non-bool), with the per-record evaluator's text in ``messages``.
    ``per_record`` counts the rows evaluated per record (all of them when not ``vectorised``).
    """

    passed: np.ndarray
    error: np.ndarray
    messages: dict[int, str]
    vectorised: bool
    per_record: int


def vectorisable(expr: str) -> bool:
    """Whether ``expr`` is in the vectorised subset (syntax only; data may still defer).

    Examples
    --------
    >>> vectorisable("value.amount > 0 && value.status in ['NEW', 'PAID']")
    True
    >>> vectorisable("value.items.exists(i, i.sku == 'x')")
    False
    """
    try:
        parse_cel(expr)
    except Unsupported:
        return False
    return True


def evaluate_cel(ctx: Any, expr: str) -> CelColumn:
    """Evaluate ``expr`` over every record of ``ctx``: vectorised where possible, exact always.

    Parameters
    ----------
    ctx
        The :class:`~kqlab.validate.context.EvalContext` (its decoded columns are reused).
    expr
        The CEL source; compile errors raise :class:`~kqlab.policy.cel.CelSyntaxError` exactly
        as :func:`~kqlab.policy.cel.compile_cel` does.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from kqlab.policy.model import Format
    >>> from kqlab.records import RECORDS_SCHEMA
    >>> from kqlab.validate.context import EvalContext
    >>> rows = [{"topic": "t", "partition": 0, "offset": i, "timestamp": 0, "batch_offset": 0,
    ...          "batch_index": i, "headers": [], "value": v}
    ...         for i, v in enumerate([b'{"a": 2}', b'{"a": 0}', b'{"b": 1}'])]
    >>> ctx = EvalContext(pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA), 0,
    ...                   value_format=Format(format="json"))
    >>> col = evaluate_cel(ctx, "value.a > 1")
    >>> col.passed.tolist(), col.error.tolist(), col.per_record  # only the error row
    ([True, False, False], [False, False, True], 1)
    >>> col.messages[2]
    'NOT_FOUND: Key not found in map : "a"'
    """
    from kqlab.policy.cel import compile_cel

    program = compile_cel(expr)  # compile errors exactly as the per-record path raises them
    n = ctx.n
    sure = None
    if program.engine == "cel-expr-python" and n:
        try:
            ast = parse_cel(expr)
            sure = _Evaluator(ctx, program.variables).top(ast)
        except Unsupported:
            sure = None
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            sure = None  # an Arrow kernel refusing this data: the per-record path decides
    if sure is None:
        rows = np.arange(n, dtype=np.int64)
        passed = np.zeros(n, dtype=bool)
        vectorised = False
    else:
        passed, unsure = sure
        rows = np.flatnonzero(unsure)
        vectorised = True
    error = np.zeros(n, dtype=bool)
    messages: dict[int, str] = {}
    if len(rows):
        results, errors = program.evaluate_many(_activations(ctx, rows))
        res = np.array([r is True for r in results], dtype=bool)
        passed[rows] = res
        for i, e in zip(rows.tolist(), errors, strict=True):
            if e is not None:
                error[i] = True
                messages[i] = e
    return CelColumn(passed, error, messages, vectorised, len(rows))


def _activations(ctx: Any, rows: np.ndarray) -> list[dict[str, Any]]:
    """The per-record path's activations for ``rows`` only (same values, no full rebuild)."""
    from kqlab.policy.cel import record_activations

    n = ctx.n
    fmt = ctx.value_format
    whole = len(rows) == n
    table = ctx.records if whole else ctx.records.take(pa.array(rows))
    if fmt is None or fmt.format in ("none", "bytes"):
        return record_activations(table, None)
    decoded = ctx.decoded("value")
    py = getattr(decoded, "_python", None)
    if py is None:
        py = decoded.python_values() if whole else \
            decoded.values.take(pa.array(rows)).to_pylist()
        return record_activations(table, py)
    return record_activations(table, py if whole else [py[i] for i in rows.tolist()])


class _Evaluator:
    """Evaluates one AST over a context; see :class:`_V` for the value representation."""

    def __init__(self, ctx: Any, variables: frozenset[str]) -> None:
        self.ctx = ctx
        self.n = ctx.n
        self.variables = variables
        self._exact_presence = False
        self._py: list | None = None
        self._root: _V | None = None
        self._column: pa.Array | None = None

    # -- entry -------------------------------------------------------------------------------
    def top(self, ast: tuple) -> tuple[np.ndarray, np.ndarray]:
        """(passed, unsure) over all rows."""
        v = _full(self.eval(ast), self.n)
        if v.kind != "bool":
            raise Unsupported("the expression does not give a bool")  # per record: its error
        unsure = _or(v.null, v.bad, self._engine_rows())
        if unsure is None:
            unsure = np.zeros(self.n, dtype=bool)
        return v.data & ~unsure, unsure

    def _engine_rows(self) -> np.ndarray | None:
        """Rows the per-record path would not give to cel-expr-python as they are.

        A property of the sample, not of the expression: cached per variable in the context,
        so an edited rule does not scan every string of the values again.
        """
        out = None
        for name in ("value", "key", "headers", "topic"):
            if name in self.variables or (name == "headers" and "header_list" in
                                          self.variables):
                memo_key = f"cel_vector:engine_rows:{name}"
                if memo_key not in self.ctx._memo:
                    self.ctx._memo[memo_key] = self._special_rows_of(name)
                out = _or(out, self.ctx._memo[memo_key])
        return out

    def _special_rows_of(self, name: str) -> np.ndarray | None:
        ctx = self.ctx
        if name == "value":
            return _special_rows(self._value_column())
        if name == "key":
            return _special_rows(ctx.column("key"), binary_nul=True)
        if name == "topic":
            return _special_rows(_decode_dict(ctx.column("topic")))
        h = ctx.headers
        flat = _or(_special_rows(h.keys), _special_rows(h.values, binary_nul=True))
        if flat is None or not flat.any():
            return None
        return np.bincount(h.parent[flat], minlength=self.n) > 0

    # -- variables ---------------------------------------------------------------------------
    def _value_column(self) -> pa.Array:
        if self._column is None:
            self._column = self._load_value_column()
        return self._column

    def _load_value_column(self) -> pa.Array:
        ctx = self.ctx
        fmt = ctx.value_format
        if fmt is None or fmt.format in ("none", "bytes"):
            return ctx.column("value")
        decoded = ctx.decoded("value")
        if decoded.fallback:
            raise Unsupported("the decoded values are JSON text")
        if fmt.format == "avro":
            memo_key = "cel_vector:avro_exact_presence"
            if memo_key not in ctx._memo:
                try:
                    ctx._memo[memo_key] = _avro_exact_presence(ctx, decoded)
                except Unsupported as exc:
                    ctx._memo[memo_key] = exc
            exact = ctx._memo[memo_key]
            if isinstance(exact, Unsupported):
                raise exact
            self._exact_presence = exact
        return _decode_dict(decoded.values)

    def _ident(self, name: str) -> _V:
        ctx = self.ctx
        if name == "value":
            if self._root is None:
                fmt = ctx.value_format
                decoded = fmt is not None and fmt.format in ("json", "avro")
                self._root = _from_arrow(self._value_column(), (), decoded)
            return self._root
        if name == "key":
            return _utf8_or_bytes(ctx.column("key"))
        if name == "topic":
            return _from_arrow(ctx.column("topic"), None, False)
        if name in _META_INTS:
            return _from_arrow(ctx.column(name), None, False)
        if name == "headers":
            return _V("headers", None)
        if name in _TYPE_CODES:
            return _V("type", _TYPE_CODES[name], scalar=True)
        raise Unsupported(f"variable {name!r} is not vectorised")

    def _python_values(self) -> list:
        if self._py is None:
            self._py = self.ctx.python_values("value")
        return self._py

    # -- dispatch ----------------------------------------------------------------------------
    def eval(self, node: tuple) -> _V:
        tag = node[0]
        if tag == "lit":
            _, value, kind = node
            if kind == "null":
                return _V("null", None, None, scalar=True)
            return _V(kind, value, scalar=True)
        if tag == "id":
            return self._ident(node[1])
        if tag == "sel":
            return self._select(self.eval(node[1]), node[2])
        if tag == "has":
            _, (_, target, name) = node
            return self._has(self.eval(target), name)
        if tag == "idx":
            return self._index(self.eval(node[1]), node[2])
        if tag == "call":
            return self._call(node[1], node[2], node[3])
        if tag == "op":
            return self._op(node[1], node[2])
        raise Unsupported(f"{tag} is not vectorised")

    # -- selection ---------------------------------------------------------------------------
    def _presence(self, parent: _V, name: str, rows: np.ndarray) -> np.ndarray:
        """Whether key ``name`` is in the decoded object at each of ``rows`` (None: unknown)."""
        out = np.zeros(len(rows), dtype=np.int8)  # 1 present, 0 missing, -1 unknown
        if parent.path is None:
            out[:] = -1
            return out
        py = self._python_values()
        path = parent.path
        for j, i in enumerate(rows.tolist()):
            obj = py[i]
            for step in path:
                obj = obj.get(step, _MISSING) if type(obj) is dict else _MISSING
            out[j] = -1 if type(obj) is not dict else (1 if name in obj else 0)
        return out

    def _child(self, parent: _V, name: str) -> tuple[_V | None, np.ndarray, np.ndarray | None]:
        """(child or None when no such field, parent-valid rows, rows to re-check)."""
        n = self.n
        valid = _andnot(np.ones(n, dtype=bool), _or(parent.null, parent.bad))
        index = parent.data.type.get_field_index(name)
        if index < 0:
            return None, valid, None
        arr = pc.struct_field(parent.data, [index])
        path = None if parent.path is None else (*parent.path, name)
        fmt = self.ctx.value_format
        child = _from_arrow(arr, path, fmt is not None and fmt.format in ("json", "avro"))
        ambiguous = None
        if not self._exact_presence and child.null is not None:
            ambiguous = valid & child.null
        return child, valid, ambiguous

    def _select(self, target: _V, name: str) -> _V:
        if target.kind == "headers":
            return self._header(name)
        if target.kind != "map" or target.scalar:
            if target.kind in ("null", "int", "double", "string", "bytes", "bool", "list"):
                return _V("null", None, np.ones(self.n, dtype=bool),
                          np.ones(self.n, dtype=bool))  # an error on every row
            raise Unsupported(f"selection on {target.kind}")
        child, _, ambiguous = self._child(target, name)
        if child is None:  # no such key anywhere: an error on every row
            return _V("null", None, np.ones(self.n, dtype=bool), np.ones(self.n, dtype=bool))
        bad = _or(target.bad, target.null, child.bad)
        if ambiguous is not None and ambiguous.any():
            rows = np.flatnonzero(ambiguous)
            known = self._presence(target, name, rows)
            miss = np.zeros(self.n, dtype=bool)
            miss[rows[known != 1]] = True  # missing: an error; unknown: per record
            bad = _or(bad, miss)
        child.bad = bad
        return child

    def _has(self, target: _V, name: str) -> _V:
        n = self.n
        if target.kind == "headers":
            present, _ = self._header_rows(name)
            return _V("bool", present)
        if target.kind != "map" or target.scalar:
            if target.kind in ("null", "int", "double", "string", "bytes", "bool", "list"):
                return _V("bool", np.zeros(n, dtype=bool), None, np.ones(n, dtype=bool))
            raise Unsupported(f"has() on {target.kind}")
        child, valid, ambiguous = self._child(target, name)
        bad = _or(target.bad, target.null)
        if child is None:
            return _V("bool", np.zeros(n, dtype=bool), None, bad)
        present = valid.copy()
        if ambiguous is not None and ambiguous.any():
            rows = np.flatnonzero(ambiguous)
            known = self._presence(target, name, rows)
            present[rows[known == 0]] = False
            unknown = np.zeros(n, dtype=bool)
            unknown[rows[known < 0]] = True
            bad = _or(bad, unknown)
        return _V("bool", present, None, bad)

    def _header_rows(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Per record: has a header ``name``; flat index of its last occurrence (or -1)."""
        memo = self.ctx._memo
        key = f"cel_vector:header:{name}"
        if key not in memo:
            h = self.ctx.headers
            last = np.full(self.n, -1, dtype=np.int64)
            if len(h.keys):
                hit = np.flatnonzero(_np_bool(pc.equal(h.keys, name)))
                if len(hit):
                    parents = h.parent[hit]
                    ends = np.append(parents[1:] != parents[:-1], True)
                    last[parents[ends]] = hit[ends]
            memo[key] = (last >= 0, last)
        return memo[key]

    def _header(self, name: str) -> _V:
        present, last = self._header_rows(name)
        h = self.ctx.headers
        n = self.n
        if not present.any():
            return _V("null", None, np.ones(n, dtype=bool), np.ones(n, dtype=bool))
        idx = pa.array(np.where(present, last, 0))
        values = h.values.take(idx)
        v = _utf8_or_bytes(values)
        v.bad = _or(v.bad, ~present)
        return v

    def _index(self, target: _V, index: tuple) -> _V:
        if index[0] != "lit" or index[2] != "int" or target.kind != "list" or target.scalar:
            raise Unsupported("only list[int literal] indexing is vectorised")
        i = index[1]
        arr = target.data
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(
            zero_copy_only=False).astype(np.int64)
        ok = (i >= 0) & (lengths > i) if i >= 0 else np.zeros(self.n, dtype=bool)
        bad = _or(target.bad, target.null, ~ok)
        offsets = arr.offsets.to_numpy()[:-1].astype(np.int64) if len(arr) else \
            np.zeros(0, np.int64)
        pos = np.where(ok, offsets + i, 0)
        values = arr.values
        if len(values) == 0:
            return _V("null", None, np.ones(self.n, dtype=bool), np.ones(self.n, dtype=bool))
        child = _from_arrow(values.take(pa.array(pos)), None, self._decoded_value())
        child.bad = _or(child.bad, bad)
        return child

    def _decoded_value(self) -> bool:
        fmt = self.ctx.value_format
        return fmt is not None and fmt.format in ("json", "avro")

    # -- calls -------------------------------------------------------------------------------
    def _call(self, name: str, target: tuple | None, args: tuple) -> _V:
        if name == "size" and ((target is None and len(args) == 1) or
                               (target is not None and not args)):
            return self._size(self.eval(args[0] if target is None else target))
        if name in ("startsWith", "endsWith", "contains", "matches") and target is not None \
                and len(args) == 1:
            return self._string_fn(name, self.eval(target), args[0])
        if name == "matches" and target is None and len(args) == 2:
            return self._string_fn(name, self.eval(args[0]), args[1])
        if name == "type" and target is None and len(args) == 1:
            return self._type(self.eval(args[0]))
        if name in ("int", "double") and target is None and len(args) == 1:
            return self._convert(name, self.eval(args[0]))
        raise Unsupported(f"function {name} is not vectorised")

    def _size(self, v: _V) -> _V:
        v = _full(v, self.n)
        if v.kind == "string":
            out = pc.utf8_length(v.data)
        elif v.kind == "bytes":
            out = pc.binary_length(v.data)
        elif v.kind == "list":
            out = pc.list_value_length(v.data)
        elif v.kind in ("int", "double", "bool", "null", "type"):
            return _V("int", np.zeros(self.n, dtype=np.int64), None, np.ones(self.n, bool))
        else:
            raise Unsupported(f"size() of {v.kind}")
        data = pc.fill_null(out, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        return _V("int", data, None, _or(v.bad, v.null))

    def _string_fn(self, name: str, target: _V, arg_node: tuple) -> _V:
        if arg_node[0] != "lit" or arg_node[2] != "string":
            raise Unsupported(f"{name}() with a non-literal argument")
        arg = arg_node[1]
        n = self.n
        if target.kind != "string":
            if target.kind in ("null", "int", "double", "bool", "bytes", "list", "map"):
                return _V("bool", np.zeros(n, dtype=bool), None, np.ones(n, dtype=bool))
            raise Unsupported(f"{name}() on {target.kind}")
        target = _full(target, n)
        bad = _or(target.bad, target.null)
        if name == "startsWith":
            out = pc.starts_with(target.data, arg)
        elif name == "endsWith":
            out = pc.ends_with(target.data, arg)
        elif name == "contains":
            out = pc.match_substring(target.data, arg)
        else:
            try:
                out = pc.match_substring_regex(target.data, arg)
            except pa.ArrowInvalid:  # a bad pattern: an error wherever it is applied
                return _V("bool", np.zeros(n, dtype=bool), None, np.ones(n, dtype=bool))
        return _V("bool", _np_bool(out), None, bad)

    def _type(self, v: _V) -> _V:
        n = self.n
        if v.kind not in _TYPE_CODES and v.kind not in ("headers", "null"):
            raise Unsupported(f"type() of {v.kind}")
        v = _full(v, n) if v.kind != "headers" else v
        code = _TYPE_CODES["map" if v.kind == "headers" else
                           "null_type" if v.kind == "null" else v.kind]
        data = np.full(n, code, dtype=np.int8)
        if v.null is not None:
            data[v.null] = _TYPE_CODES["null_type"]
        bad = v.bad
        if v.maybe_int:
            bad = _or(bad, _andnot(_integral(v.data), v.null))
        return _V("type", data, None, bad)

    def _convert(self, name: str, v: _V) -> _V:
        n = self.n
        if v.kind not in _NUMERIC:
            if v.kind in ("null", "bool", "bytes", "list", "map"):
                return _V(name, np.zeros(n, dtype=np.int64 if name == "int" else np.float64),
                          None, np.ones(n, dtype=bool))
            raise Unsupported(f"{name}() of {v.kind}")
        v = _full(v, n)
        bad = _or(v.bad, v.null)
        if name == "double":
            return _V("double", v.data.astype(np.float64), None, bad)
        if v.kind == "int":
            return _V("int", v.data, None, bad)
        x = v.data
        with np.errstate(invalid="ignore"):
            out_of_range = ~np.isfinite(x) | (np.abs(x) >= 2.0**62)
            if v.maybe_int:
                out_of_range |= _integral(x) & (np.abs(x) >= _EXACT)
            data = np.where(out_of_range, 0, np.trunc(x)).astype(np.int64)
        return _V("int", data, None, _or(bad, out_of_range))

    # -- operators ---------------------------------------------------------------------------
    def _op(self, op: str, args: tuple) -> _V:
        if op in ("and", "or"):
            return self._logic(op, self.eval(args[0]), self.eval(args[1]))
        if op == "cond":
            return self._cond(*(self.eval(a) for a in args))
        if op == "not":
            v = _full(self.eval(args[0]), self.n)
            if v.kind != "bool":
                return _V("bool", np.zeros(self.n, dtype=bool), None, np.ones(self.n, bool))
            return _V("bool", ~v.data, None, _or(v.bad, v.null))
        if op == "neg":
            return self._neg(self.eval(args[0]))
        if op == "in":
            return self._in(self.eval(args[0]), args[1])
        a, b = self.eval(args[0]), self.eval(args[1])
        if op in ("eq", "ne"):
            v = self._eq(a, b)
            if op == "ne":
                v.data = ~v.data
            return v
        if op in ("lt", "le", "gt", "ge"):
            return self._order(op, a, b)
        return self._arith(op, a, b)

    def _truth(self, v: _V) -> tuple[np.ndarray, np.ndarray]:
        """(definitely true, definitely false) rows of a logical operand."""
        n = self.n
        if v.kind != "bool":  # null, a number...: acts as an error under && and ||
            z = np.zeros(n, dtype=bool)
            return z, z
        v = _full(v, n)
        unsure = _or(v.bad, v.null)
        return _andnot(v.data, unsure), _andnot(~v.data, unsure)

    def _logic(self, op: str, a: _V, b: _V) -> _V:
        at, af = self._truth(a)
        bt, bf = self._truth(b)
        if op == "and":
            false = af | bf
            true = at & bt
            data = true
        else:
            true = at | bt
            false = af & bf
            data = true
        return _V("bool", data, None, ~(true | false))

    def _cond(self, c: _V, x: _V, y: _V) -> _V:
        n = self.n
        ct, cf = self._truth(c)
        x, y = _full(x, n), _full(y, n)
        if x.kind == "null" and y.kind != "null":
            x = _null_like(x, y, n)
        elif y.kind == "null" and x.kind != "null":
            y = _null_like(y, x, n)
        if x.kind != y.kind or x.kind in ("map", "headers"):
            raise Unsupported("a conditional whose branches differ in type")
        bad = _or(~(ct | cf), _and_mask(ct, x.bad), _and_mask(cf, y.bad))
        null = _or(_and_mask(ct, x.null), _and_mask(cf, y.null))
        if x.kind == "null":
            data = None
        elif isinstance(x.data, np.ndarray):
            data = np.where(ct, x.data, y.data)
        else:
            data = pc.if_else(pa.array(ct), x.data, y.data)
        return _V(x.kind, data, null, bad, maybe_int=x.maybe_int or y.maybe_int)

    def _neg(self, v: _V) -> _V:
        n = self.n
        if v.kind not in _NUMERIC:
            return _V("int", np.zeros(n, np.int64), None, np.ones(n, dtype=bool))
        v = _full(v, n)
        bad = _or(v.bad, v.null)
        if v.kind == "int":
            overflow = v.data == _INT_MIN
            with np.errstate(over="ignore"):
                return _V("int", -v.data, None, _or(bad, overflow))
        if v.maybe_int:
            bad = _or(bad, _integral(v.data) & (np.abs(v.data) >= _EXACT))
        return _V("double", -v.data, None, bad, maybe_int=v.maybe_int)

    def _eq(self, a: _V, b: _V) -> _V:
        """CEL ``==`` (heterogeneous: different types are unequal, numbers by value)."""
        n = self.n
        if a.kind in ("map", "list", "headers") or b.kind in ("map", "list", "headers"):
            if a.kind == "null" or b.kind == "null":  # a container == null: only null is
                other = b if a.kind == "null" else a
                if other.kind == "headers":
                    return _V("bool", np.zeros(n, dtype=bool))
                null = other.null if other.null is not None else np.zeros(n, dtype=bool)
                return _V("bool", null.copy(), None, _or(a.bad, b.bad))
            raise Unsupported("equality of maps or lists")
        bad = _or(a.bad, b.bad)
        an = a.null if not a.scalar else (np.ones(n, bool) if a.kind == "null" else None)
        bn = b.null if not b.scalar else (np.ones(n, bool) if b.kind == "null" else None)
        an_ = an if an is not None else np.zeros(n, dtype=bool)
        bn_ = bn if bn is not None else np.zeros(n, dtype=bool)
        both_null = an_ & bn_
        some_null = an_ | bn_
        if a.kind == "null" or b.kind == "null":
            return _V("bool", both_null, None, bad)
        if a.kind in _NUMERIC and b.kind in _NUMERIC:
            eq, extra = self._num_cmp(np.equal, a, b)
            bad = _or(bad, extra)
        elif a.kind == b.kind and a.kind in ("string", "bytes"):
            if a.scalar and b.scalar:
                eq = np.full(n, a.data == b.data)
            else:
                left, right = (b, a) if a.scalar else (a, b)
                eq = _np_bool(pc.equal(left.data, _arrow_arg(right)))
        elif a.kind == b.kind and a.kind in ("bool", "type"):
            eq = np.broadcast_to(np.equal(a.data, b.data), (n,)).copy()
        else:
            eq = np.zeros(n, dtype=bool)  # different types: unequal
        data = np.where(some_null, both_null, eq)
        return _V("bool", data, None, bad)

    def _num_cmp(self, fn: Any, a: _V, b: _V) -> tuple[np.ndarray, np.ndarray | None]:
        """``fn`` over two numeric values as the C++ runtime compares them; plus unsure rows."""
        n = self.n
        extra = None
        if a.kind == "int" and b.kind == "int":
            out = fn(a.data, b.data)
        else:
            x = np.asarray(a.data, dtype=np.float64)
            y = np.asarray(b.data, dtype=np.float64)
            with np.errstate(invalid="ignore"):
                out = fn(x, y)
            # an integral float64 may be a decoded int: int/int compares exactly, so values
            # beyond 2**53 on either side are left to the record
            for v, w in ((a, b), (b, a)):
                if v.maybe_int and (w.kind == "int" or w.maybe_int):
                    big = (np.abs(np.asarray(v.data, dtype=np.float64)) >= _EXACT) | \
                        (np.abs(np.asarray(w.data, dtype=np.float64)) >= _EXACT)
                    extra = _or(extra, np.broadcast_to(_integral(v.data) & big, (n,)).copy())
        return np.broadcast_to(out, (n,)).copy(), extra

    def _order(self, op: str, a: _V, b: _V) -> _V:
        n = self.n
        fn = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}[op]
        bad = _or(a.bad, b.bad, None if a.scalar else a.null, None if b.scalar else b.null)
        if a.kind == "null" or b.kind == "null":
            return _V("bool", np.zeros(n, dtype=bool), None, np.ones(n, dtype=bool))
        if a.kind in _NUMERIC and b.kind in _NUMERIC:
            data, extra = self._num_cmp(fn, a, b)
            return _V("bool", data, None, _or(bad, extra))
        if a.kind == b.kind and a.kind in ("string", "bytes"):
            a, b = (_full(a, n), b) if a.scalar and b.scalar else (a, b)
            arrow_fn = {"lt": pc.less, "le": pc.less_equal, "gt": pc.greater,
                        "ge": pc.greater_equal}[op]
            return _V("bool", _np_bool(arrow_fn(_arrow_arg(a), _arrow_arg(b))), None, bad)
        if a.kind == b.kind == "bool":
            return _V("bool", np.broadcast_to(fn(a.data, b.data), (n,)).copy(), None, bad)
        if a.kind in ("map", "list", "headers", "type") or b.kind in ("map", "list", "type"):
            raise Unsupported(f"ordering of {a.kind} and {b.kind}")
        return _V("bool", np.zeros(n, dtype=bool), None, np.ones(n, dtype=bool))

    def _arith(self, op: str, a: _V, b: _V) -> _V:
        n = self.n
        if a.scalar and b.scalar:
            a = _full(a, n)
        bad = _or(a.bad, b.bad, None if a.scalar else a.null, None if b.scalar else b.null)
        if a.kind == b.kind == "int":
            return self._int_arith(op, a.data, b.data, bad)
        if a.kind == b.kind == "double" and op != "mod":
            for v in (a, b):  # an integral float64 may be a decoded int: int + double errs
                if v.maybe_int:
                    bad = _or(bad, np.broadcast_to(_integral(v.data), (n,)).copy())
            fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                  "div": np.divide}[op]
            with np.errstate(all="ignore"):
                data = np.broadcast_to(fn(a.data, b.data), (n,)).copy()
            return _V("double", data, None, bad)
        if op == "add" and a.kind == b.kind and a.kind in ("string", "bytes"):
            fa, fb = _full(a, n), _full(b, n)
            if a.kind == "string":
                data = pc.binary_join_element_wise(fa.data, fb.data, "")
            else:
                data = pc.binary_join_element_wise(fa.data.cast(pa.binary()),
                                                   fb.data.cast(pa.binary()), b"")
            return _V(a.kind, data, None, bad)
        if a.kind in ("map", "list", "headers", "type") or b.kind in ("map", "list", "type"):
            raise Unsupported(f"arithmetic on {a.kind} and {b.kind}")
        if (a.kind == "double" and a.maybe_int) or (b.kind == "double" and b.maybe_int):
            # int op maybe-int: the integral rows may be ints (no error): per record
            raise Unsupported("arithmetic mixing int and a double column that may hold ints")
        return _V("int", np.zeros(n, np.int64), None, np.ones(n, dtype=bool))

    def _int_arith(self, op: str, x: Any, y: Any, bad: np.ndarray | None) -> _V:
        n = self.n
        x = np.broadcast_to(np.asarray(x, dtype=np.int64), (n,))
        y = np.broadcast_to(np.asarray(y, dtype=np.int64), (n,))
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
                err = (y != 0) & ((r // safe_y != x) | ((x == -1) & (y == _INT_MIN)) |
                                  ((y == -1) & (x == _INT_MIN)))
            else:
                zero = y == 0
                overflow = (x == _INT_MIN) & (y == -1)
                err = zero | overflow
                safe_y = np.where(err, 1, y)
                q = x // safe_y  # floor division, then truncated toward zero as in C++
                q = np.where((x - q * safe_y != 0) & ((x < 0) != (safe_y < 0)), q + 1, q)
                r = q if op == "div" else x - safe_y * q
        return _V("int", np.asarray(r, dtype=np.int64), None, _or(bad, err))

    def _in(self, x: _V, container: tuple) -> _V:
        n = self.n
        if container[0] == "list":
            items = container[1]
            if any(item[0] != "lit" for item in items):
                raise Unsupported("`in` a list with non-literal items")
            return self._in_literals(x, [(item[1], item[2]) for item in items])
        c = self.eval(container)
        if c.kind == "headers":
            if x.kind == "string" and x.scalar:
                present, _ = self._header_rows(x.data)
                return _V("bool", present.copy())
            raise Unsupported("`in` headers with a non-literal key")
        if c.kind == "map" and not c.scalar:
            if x.kind == "string" and x.scalar:
                return self._has(c, x.data)
            raise Unsupported("`in` a map with a non-literal key")
        if c.kind == "list" and not c.scalar:
            return self._in_column(x, c)
        if c.kind in ("null", "int", "double", "string", "bytes", "bool"):
            return _V("bool", np.zeros(n, dtype=bool), None, np.ones(n, dtype=bool))
        raise Unsupported(f"`in` {c.kind}")

    def _in_literals(self, x: _V, items: list[tuple[Any, str]]) -> _V:
        n = self.n
        x = _full(x, n)
        xnull = x.null if x.null is not None else np.zeros(n, dtype=bool)
        bad = x.bad
        has_null = any(k == "null" for _, k in items)
        if x.kind == "null":
            return _V("bool", np.full(n, has_null), None, bad)
        if x.kind in ("map", "list", "headers"):
            raise Unsupported(f"{x.kind} in a list")
        if x.kind in _NUMERIC:
            ints = [v for v, k in items if k == "int"]
            doubles = [v for v, k in items if k == "double"]
            data = np.zeros(n, dtype=bool)
            if x.kind == "int":
                if ints:
                    data |= np.isin(x.data, np.array(ints, dtype=np.int64))
                if doubles:
                    data |= np.isin(x.data.astype(np.float64), np.array(doubles))
            else:
                values = np.array([float(v) for v in ints + doubles], dtype=np.float64)
                if len(values):
                    with np.errstate(invalid="ignore"):
                        data |= np.isin(x.data, values)
                if x.maybe_int and ints:
                    big = np.abs(x.data) >= _EXACT
                    if any(abs(v) >= _EXACT for v in ints):
                        big = np.ones(n, dtype=bool)
                    bad = _or(bad, _integral(x.data) & big)
        elif x.kind in ("string", "bytes", "bool"):
            same = [v for v, k in items if k == x.kind]
            if x.kind == "bool":
                data = np.isin(x.data, np.array(same, dtype=bool)) if same else \
                    np.zeros(n, dtype=bool)
            elif same:
                data = _np_bool(pc.is_in(x.data, value_set=pa.array(
                    same, pa.string() if x.kind == "string" else pa.binary())))
            else:
                data = np.zeros(n, dtype=bool)
        else:
            raise Unsupported(f"{x.kind} in a list")
        data = np.where(xnull, has_null, data)
        return _V("bool", data, None, bad)

    def _in_column(self, x: _V, c: _V) -> _V:
        """``x in list_column``: element-wise equality, any per row."""
        n = self.n
        arr = c.data
        flat = arr.flatten()
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False).astype(np.int64)
        elems = _from_arrow(flat, None, self._decoded_value())
        m = len(flat)
        if x.scalar:
            xs = x
        else:
            take = pa.array(parents)
            xs = _take(x, take, parents)
        sub = _Evaluator.__new__(_Evaluator)
        sub.n = m
        eq = sub._eq(elems, xs)
        hits = eq.data & ~(eq.bad if eq.bad is not None else np.zeros(m, dtype=bool))
        data = np.bincount(parents[hits], minlength=n) > 0
        unsure = np.bincount(parents[eq.bad], minlength=n) > 0 if eq.bad is not None and \
            eq.bad.any() else None
        bad = _or(c.bad, c.null, None if x.scalar else x.bad, _andnot_opt(unsure, data))
        return _V("bool", data, None, bad)


_MISSING = object()


def _andnot_opt(mask: np.ndarray | None, other: np.ndarray) -> np.ndarray | None:
    return None if mask is None else mask & ~other


def _and_mask(mask: np.ndarray, other: np.ndarray | None) -> np.ndarray | None:
    return None if other is None else mask & other


def _integral(x: Any) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.isfinite(x) & (np.floor(x) == x)


def _null_like(null: _V, v: _V, n: int) -> _V:
    """``null`` (an all-null value) typed as ``v`` (the other branch of a conditional)."""
    if isinstance(v.data, np.ndarray):
        data: Any = np.zeros(n, dtype=v.data.dtype)
    else:
        data = pa.nulls(n, v.data.type)
    return _V(v.kind, data, np.ones(n, dtype=bool), null.bad)


def _take(v: _V, take: pa.Array, rows: np.ndarray) -> _V:
    data = v.data[rows] if isinstance(v.data, np.ndarray) else \
        (None if v.data is None else v.data.take(take))
    return _V(v.kind, data, None if v.null is None else v.null[rows],
              None if v.bad is None else v.bad[rows], maybe_int=v.maybe_int)


def _utf8_or_bytes(arr: pa.Array) -> _V:
    """A binary column as CEL sees it: strings where valid UTF-8 (else bytes: per record)."""
    arr = _decode_dict(arr)
    nulls = _nulls_of(arr)
    try:
        return _V("string", arr.cast(pa.string()), nulls)
    except pa.ArrowInvalid:
        pass
    items = arr.to_pylist()
    invalid = np.zeros(len(items), dtype=bool)
    for i, b in enumerate(items):
        if b is not None:
            try:
                b.decode("utf-8")
            except UnicodeDecodeError:
                invalid[i] = True
    cleaned = pc.if_else(pa.array(~invalid), arr, pa.scalar(None, arr.type))
    return _V("string", cleaned.cast(pa.string()), _or(nulls, invalid), invalid)


def _special_rows(arr: pa.Array, binary_nul: bool = False) -> np.ndarray | None:
    """Rows holding a value cel-expr-python does not take as is (see the module docstring)."""
    arr = _decode_dict(arr)
    t = arr.type
    n = len(arr)
    if n == 0:
        return None
    if pa.types.is_string(t) or pa.types.is_large_string(t) or \
            (binary_nul and (pa.types.is_binary(t) or pa.types.is_large_binary(t))):
        if binary_nul and not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            # only a value that is valid UTF-8 becomes a string; NUL bytes in any: per record
            m = _np_bool(pc.match_substring(arr, b"\x00"))
        else:
            m = _np_bool(pc.match_substring(arr, "\x00"))
        return m if m.any() else None
    if pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_duration(t):
        m = _np_bool(arr.is_valid())
        return m if m.any() else None
    if pa.types.is_struct(t):
        valid = _np_bool(arr.is_valid())
        out = None
        for i in range(t.num_fields):
            out = _or(out, _special_rows(pc.struct_field(arr, [i])))
        return None if out is None else out & valid
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        flat = arr.flatten() if not pa.types.is_map(t) else \
            pa.StructArray.from_arrays([arr.keys, arr.items], ["key", "value"])
        inner = _special_rows(flat)
        if inner is None:
            return None
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
        return np.bincount(parents[inner], minlength=n) > 0
    if pa.types.is_union(t) or pa.types.is_fixed_size_list(t) or \
            isinstance(t, pa.ExtensionType) or pa.types.is_list_view(t):
        raise Unsupported(f"Arrow type {t} is not vectorised")
    return None


def _avro_exact_presence(ctx: Any, decoded: Any) -> bool:
    """Whether every decoded Avro record has every struct field (one writer schema's shape).

    Values whose schema needs a per-value converter (uuid, JSON-text unions) are not what the
    Arrow column holds: :class:`Unsupported`.
    """
    fmt = ctx.value_format
    resolver = ctx.resolver
    if resolver is None:
        from kqlab.serde.schemas import SchemaResolver

        resolver = SchemaResolver.from_source(fmt.schemas)
    from kqlab.serde.schemas import SchemaNotFound

    schemas = []
    if getattr(fmt, "wire", "raw") == "confluent":
        ids = decoded.schema_ids
        for sid in pc.unique(ids.drop_null()).to_pylist() if ids is not None else []:
            try:
                schemas.append(resolver.schema(int(sid)))
            except SchemaNotFound:
                continue  # those values did not decode: null here and None per record
    else:
        schemas.append(resolver.unframed())
    if any(ps.arrow.converter is not None for ps in schemas):
        raise Unsupported("Avro values with per-value converters (uuid, JSON-text unions)")
    return all(ps.arrow_type == decoded.values.type for ps in schemas)

