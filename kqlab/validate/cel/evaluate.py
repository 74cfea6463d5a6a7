"""A parsed expression over a sample: variables, selection and presence, then the kernels.

:func:`evaluate_cel` is the entry point: it compiles with :mod:`kqlab.policy.cel` (same
compile errors as the per-record path), walks the tree with :class:`Evaluator` over the
context's cached columns, and evaluates per record exactly the rows the kernels left unsure.
The evaluator owns what depends on the sample rather than on an operator: the variables'
columns, field selection and ``has()`` (absent vs null asks the decoded Python object of the
ambiguous rows only), ``headers``, list indexing, and which rows the per-record path would
hand to another engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.cel import kernels
from kqlab.validate.cel.columns import (
    TYPE_CODES,
    Vec,
    avro_exact_presence,
    decode_dict,
    from_arrow,
    full,
    special_rows,
    utf8_or_bytes,
)
from kqlab.validate.cel.masks import Mask, andnot, np_bool, or_masks
from kqlab.validate.cel.parse import parse_cel
from kqlab.validate.cel.tree import (
    META_INTS,
    Call,
    Has,
    Ident,
    Index,
    ListLit,
    Lit,
    Node,
    Op,
    Select,
    Unsupported,
)

if TYPE_CHECKING:
    from kqlab.validate.context import EvalContext

__all__ = ["CelColumn", "Evaluator", "evaluate_cel"]


@dataclass(frozen=True, slots=True)
class CelColumn:
    """One CEL expression over a sample: per record, did it give true, or an error (and which).

    ``passed`` is true where the expression evaluated to ``true``; ``error`` where it failed
    to evaluate (or gave a non-bool), with the per-record evaluator's text in ``messages``.
    ``per_record`` counts the rows evaluated per record (all of them when not ``vectorised``).
    """

    passed: Mask
    error: Mask
    messages: dict[int, str]
    vectorised: bool
    per_record: int


def evaluate_cel(ctx: EvalContext, expr: str) -> CelColumn:
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
            sure = Evaluator(ctx, program.variables).top(parse_cel(expr))
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
        passed[rows] = np.array([r is True for r in results], dtype=bool)
        for i, e in zip(rows.tolist(), errors, strict=True):
            if e is not None:
                error[i] = True
                messages[i] = e
    return CelColumn(passed, error, messages, vectorised, len(rows))


def _activations(ctx: EvalContext, rows: np.ndarray) -> list[dict[str, object]]:
    """The per-record path's activations for ``rows`` only (same values, no full rebuild)."""
    from kqlab.policy.cel import record_activations

    n = ctx.n
    fmt = ctx.value_format
    whole = len(rows) == n
    table = ctx.records if whole else ctx.records.take(pa.array(rows))
    if fmt is None or fmt.format in ("none", "bytes"):
        return record_activations(table, None)
    decoded = ctx.decoded("value")
    py = decoded._python
    if py is None:
        py = decoded.python_values() if whole else \
            decoded.values.take(pa.array(rows)).to_pylist()
        return record_activations(table, py)
    return record_activations(table, py if whole else [py[i] for i in rows.tolist()])


_MISSING = object()
#: the variables whose values the per-record path may hand to another engine
_ENGINE_VARIABLES = ("value", "key", "headers", "topic")


class Evaluator:
    """Evaluates one tree over a context; see :class:`~kqlab.validate.cel.columns.Vec`."""

    def __init__(self, ctx: EvalContext, variables: frozenset[str]) -> None:
        self.ctx = ctx
        self.n = ctx.n
        self.variables = variables
        self._exact_presence = False
        self._py: list[object] | None = None
        self._root: Vec | None = None
        self._column: pa.Array | None = None
        fmt = ctx.value_format
        #: the value is decoded (JSON, Avro, Protobuf): a float64 in it may hold decoded ints
        self._decoded = fmt is not None and fmt.format in ("json", "avro", "protobuf")

    # -- entry -------------------------------------------------------------------------------
    def top(self, tree: Node) -> tuple[Mask, Mask]:
        """(passed, unsure) over all rows."""
        v = full(self.eval(tree), self.n)
        if v.kind != "bool":
            raise Unsupported("the expression does not give a bool")  # per record: its error
        unsure = or_masks(v.null, v.bad, self._engine_rows())
        if unsure is None:
            unsure = np.zeros(self.n, dtype=bool)
        return v.numpy() & ~unsure, unsure

    def _engine_rows(self) -> Mask | None:
        """Rows the per-record path would not give to cel-expr-python as they are.

        A property of the sample, not of the expression: cached per variable in the context,
        so an edited rule does not scan every string of the values again.
        """
        out = None
        for name in _ENGINE_VARIABLES:
            if name in self.variables or (name == "headers" and "header_list" in
                                          self.variables):
                rows = self.ctx.memo(f"cel:engine_rows:{name}",
                                     partial(self._special_rows_of, name))
                out = or_masks(out, rows)
        return out

    def _special_rows_of(self, name: str) -> Mask | None:
        ctx = self.ctx
        if name == "value":
            return special_rows(self._value_column())
        if name == "key":
            return special_rows(ctx.column("key"), binary_nul=True)
        if name == "topic":
            return special_rows(decode_dict(ctx.column("topic")))
        h = ctx.headers
        flat = or_masks(special_rows(h.keys), special_rows(h.values, binary_nul=True))
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
            def presence() -> bool | Unsupported:
                try:
                    return avro_exact_presence(ctx, decoded)
                except Unsupported as exc:  # kept: the sample's answer, not the expression's
                    return exc

            exact = ctx.memo("cel:avro_exact_presence", presence)
            if isinstance(exact, Unsupported):
                raise exact
            self._exact_presence = exact
        return decode_dict(decoded.values)

    def _ident(self, name: str) -> Vec:
        ctx = self.ctx
        if name == "value":
            if self._root is None:
                self._root = from_arrow(self._value_column(), (), self._decoded)
            return self._root
        if name == "key":
            return utf8_or_bytes(ctx.column("key"))
        if name == "topic":
            return from_arrow(ctx.column("topic"), None, False)
        if name in META_INTS:
            return from_arrow(ctx.column(name), None, False)
        if name == "headers":
            return Vec("headers", None)
        if name in TYPE_CODES:
            return Vec("type", TYPE_CODES[name], scalar=True)
        raise Unsupported(f"variable {name!r} is not vectorised")

    def _python_values(self) -> list[object]:
        if self._py is None:
            self._py = self.ctx.python_values("value")
        return self._py

    # -- dispatch ----------------------------------------------------------------------------
    def eval(self, node: Node) -> Vec:
        """The value of ``node`` over all rows."""
        if isinstance(node, Lit):
            if node.kind == "null":
                return Vec("null", None, None, scalar=True)
            return Vec(node.kind, node.value, scalar=True)
        if isinstance(node, Ident):
            return self._ident(node.name)
        if isinstance(node, Select):
            return self._select(self.eval(node.target), node.field)
        if isinstance(node, Has):
            return self._has(self.eval(node.select.target), node.select.field)
        if isinstance(node, Index):
            return self._index(self.eval(node.target), node.subscript)
        if isinstance(node, Call):
            return self._call(node)
        if isinstance(node, Op):
            return self._op(node)
        raise Unsupported(f"{node.tag} is not vectorised")

    # -- selection ---------------------------------------------------------------------------
    def _presence(self, parent: Vec, name: str, rows: np.ndarray) -> np.ndarray:
        """Per row of ``rows``: key ``name`` is in the decoded object (1), is not (0), or the
        object cannot tell (-1)."""
        out = np.zeros(len(rows), dtype=np.int8)
        if parent.path is None:
            out[:] = -1
            return out
        py = self._python_values()
        path = parent.path
        for j, i in enumerate(rows.tolist()):
            obj = py[i]
            for step in path:
                obj = obj.get(step, _MISSING) if isinstance(obj, dict) else _MISSING
            out[j] = -1 if not isinstance(obj, dict) else (1 if name in obj else 0)
        return out

    def _child(self, parent: Vec, name: str) -> tuple[Vec | None, Mask, Mask | None]:
        """(child or None when no such field, parent-valid rows, rows to re-check)."""
        valid = andnot(np.ones(self.n, dtype=bool), or_masks(parent.null, parent.bad))
        struct = parent.arrow()
        if not isinstance(struct, pa.StructArray):
            raise TypeError(f"a map value held in {struct.type}")
        index = struct.type.get_field_index(name)
        if index < 0:
            return None, valid, None
        arr = pc.struct_field(struct, [index])
        path = None if parent.path is None else (*parent.path, name)
        child = from_arrow(arr, path, self._decoded)
        ambiguous = None
        if not self._exact_presence and child.null is not None:
            ambiguous = valid & child.null
        return child, valid, ambiguous

    def _all_errors(self) -> Vec:
        """An error on every row (a selection that cannot succeed)."""
        return Vec("null", None, np.ones(self.n, dtype=bool), np.ones(self.n, dtype=bool))

    def _select(self, target: Vec, name: str) -> Vec:
        if target.kind == "headers":
            return self._header(name)
        if target.kind != "map" or target.scalar:
            if target.kind in ("null", "int", "double", "string", "bytes", "bool", "list"):
                return self._all_errors()
            raise Unsupported(f"selection on {target.kind}")
        child, _, ambiguous = self._child(target, name)
        if child is None:  # no such key anywhere: an error on every row
            return self._all_errors()
        bad = or_masks(target.bad, target.null, child.bad)
        if ambiguous is not None and ambiguous.any():
            rows = np.flatnonzero(ambiguous)
            known = self._presence(target, name, rows)
            miss = np.zeros(self.n, dtype=bool)
            miss[rows[known != 1]] = True  # missing: an error; unknown: per record
            bad = or_masks(bad, miss)
        child.bad = bad
        return child

    def _has(self, target: Vec, name: str) -> Vec:
        n = self.n
        if target.kind == "headers":
            present, _ = self._header_rows(name)
            return Vec("bool", present)
        if target.kind != "map" or target.scalar:
            if target.kind in ("null", "int", "double", "string", "bytes", "bool", "list"):
                return Vec("bool", np.zeros(n, dtype=bool), None, np.ones(n, dtype=bool))
            raise Unsupported(f"has() on {target.kind}")
        child, valid, ambiguous = self._child(target, name)
        bad = or_masks(target.bad, target.null)
        if child is None:
            return Vec("bool", np.zeros(n, dtype=bool), None, bad)
        present = valid.copy()
        if ambiguous is not None and ambiguous.any():
            rows = np.flatnonzero(ambiguous)
            known = self._presence(target, name, rows)
            present[rows[known == 0]] = False
            unknown = np.zeros(n, dtype=bool)
            unknown[rows[known < 0]] = True
            bad = or_masks(bad, unknown)
        return Vec("bool", present, None, bad)

    def _header_rows(self, name: str) -> tuple[Mask, np.ndarray]:
        """Per record: has a header ``name``; flat index of its last occurrence (or -1)."""
        def rows() -> tuple[Mask, np.ndarray]:
            h = self.ctx.headers
            last = np.full(self.n, -1, dtype=np.int64)
            if len(h.keys):
                hit = np.flatnonzero(np_bool(pc.equal(h.keys, pa.scalar(name, pa.string()))))
                if len(hit):
                    parents = h.parent[hit]
                    ends = np.append(parents[1:] != parents[:-1], True)
                    last[parents[ends]] = hit[ends]
            return last >= 0, last

        return self.ctx.memo(f"cel:header:{name}", rows)

    def _header(self, name: str) -> Vec:
        present, last = self._header_rows(name)
        if not present.any():
            return self._all_errors()
        values = self.ctx.headers.values.take(pa.array(np.where(present, last, 0), pa.int64()))
        v = utf8_or_bytes(values)
        v.bad = or_masks(v.bad, ~present)
        return v

    def _index(self, target: Vec, index: Node) -> Vec:
        if not (isinstance(index, Lit) and index.kind == "int" and isinstance(index.value, int)
                and target.kind == "list" and not target.scalar):
            raise Unsupported("only list[int literal] indexing is vectorised")
        i = index.value
        arr = target.arrow()
        if not isinstance(arr, pa.ListArray | pa.LargeListArray):
            raise TypeError(f"a list value held in {arr.type}")
        lengths = pc.list_value_length(arr).fill_null(0).to_numpy(
            zero_copy_only=False).astype(np.int64)
        ok = (i >= 0) & (lengths > i) if i >= 0 else np.zeros(self.n, dtype=bool)
        bad = or_masks(target.bad, target.null, ~ok)
        offsets = arr.offsets.to_numpy()[:-1].astype(np.int64) if len(arr) else \
            np.zeros(0, np.int64)
        pos = np.where(ok, offsets + i, 0)
        values = arr.values
        if len(values) == 0:
            return self._all_errors()
        child = from_arrow(values.take(pa.array(pos, pa.int64())), None, self._decoded)
        child.bad = or_masks(child.bad, bad)
        return child

    # -- calls -------------------------------------------------------------------------------
    def _call(self, node: Call) -> Vec:
        name, target, args = node.name, node.target, node.args
        if name == "size" and ((target is None and len(args) == 1) or
                               (target is not None and not args)):
            return kernels.size(self.eval(args[0] if target is None else target), self.n)
        if name in ("startsWith", "endsWith", "contains", "matches") and target is not None \
                and len(args) == 1:
            return self._string_fn(name, self.eval(target), args[0])
        if name == "matches" and target is None and len(args) == 2:
            return self._string_fn(name, self.eval(args[0]), args[1])
        if name == "type" and target is None and len(args) == 1:
            return kernels.type_of(self.eval(args[0]), self.n)
        if name in ("int", "double") and target is None and len(args) == 1:
            return kernels.convert(cast("Literal['int', 'double']", name), self.eval(args[0]),
                                   self.n)
        raise Unsupported(f"function {name} is not vectorised")

    def _string_fn(self, name: str, target: Vec, arg: Node) -> Vec:
        if not (isinstance(arg, Lit) and arg.kind == "string" and isinstance(arg.value, str)):
            raise Unsupported(f"{name}() with a non-literal argument")
        return kernels.string_fn(cast("kernels.StringFn", name), target, arg.value, self.n)

    # -- operators ---------------------------------------------------------------------------
    def _op(self, node: Op) -> Vec:
        op, args, n = node.op, node.args, self.n
        if op == "and" or op == "or":
            return kernels.logic(op, self.eval(args[0]), self.eval(args[1]), n)
        if op == "cond":
            c, x, y = (self.eval(a) for a in args)
            return kernels.cond(c, x, y, n)
        if op == "not":
            return kernels.negate(self.eval(args[0]), n)
        if op == "neg":
            return kernels.neg(self.eval(args[0]), n)
        if op == "in":
            return self._in(self.eval(args[0]), args[1])
        a, b = self.eval(args[0]), self.eval(args[1])
        if op == "eq" or op == "ne":
            v = kernels.eq(a, b, n)
            if op == "ne":
                v.data = ~v.numpy()
            return v
        if op == "lt" or op == "le" or op == "gt" or op == "ge":
            return kernels.order(op, a, b, n)
        return kernels.arith(op, a, b, n)

    def _in(self, x: Vec, container: Node) -> Vec:
        n = self.n
        if isinstance(container, ListLit):
            items = container.items
            literals = [item for item in items if isinstance(item, Lit)]
            if len(literals) != len(items):
                raise Unsupported("`in` a list with non-literal items")
            return kernels.in_literals(x, [(item.value, item.kind) for item in literals], n)
        c = self.eval(container)
        if c.kind == "headers":
            if x.kind == "string" and x.scalar:
                present, _ = self._header_rows(x.text())
                return Vec("bool", present.copy())
            raise Unsupported("`in` headers with a non-literal key")
        if c.kind == "map" and not c.scalar:
            if x.kind == "string" and x.scalar:
                return self._has(c, x.text())
            raise Unsupported("`in` a map with a non-literal key")
        if c.kind == "list" and not c.scalar:
            return kernels.in_column(x, c, n, self._decoded)
        if c.kind in ("null", "int", "double", "string", "bytes", "bool"):
            return Vec("bool", np.zeros(n, dtype=bool), None, np.ones(n, dtype=bool))
        raise Unsupported(f"`in` {c.kind}")
