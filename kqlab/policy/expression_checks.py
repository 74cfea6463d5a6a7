"""Load-time checks of a rule's CEL (``expr``, ``when``): nothing runs on a broken expression.

A CEL expression that does not compile, reads a variable that does not exist, selects a field
the declared schema does not have, or compares a string with an int fails for *every* record
— a replay would report the whole sample as rejected, and an exported rule would reject the
whole topic.  :func:`expression_problem` finds those mistakes when the policy is loaded and
says where (an offset in the expression, which the loader turns into the file's line and
column):

1. **It compiles** with the CEL engine that will run it (:func:`kqlab.policy.cel.compile_cel`;
   cel-expr-python also type-checks the record variables, e.g. ``timestamp > 'x'``).
2. **Its variables are declared** (:data:`kqlab.policy.cel.VARIABLES`, plus the variables a
   macro such as ``exists(i, ...)`` binds), with the nearest name offered.
3. **Its types and field paths fit the declared schema.**  The expression is walked on
   cel-python's own parse tree (the grammar the vectorised engine uses, never one of ours)
   with the :class:`~kqlab.policy.value_shapes.Shape` of each variable — ``value``'s from the
   schemas the policy declares, when it declares any — and refused only where *every* record
   would fail: a field no schema version has, an ordering or arithmetic between types CEL has
   no overload for (``'a' < 1``, ``amount * 100`` on a double), an equality that can never
   hold (CEL's ``==`` across types is false), a condition that is not a bool.  Numbers compare
   across int/uint/double (CEL does), ``null`` compares with anything, and a value the schemas
   do not pin down (``dyn``) is never refused.  Literal ``matches()`` patterns go through
   :func:`kqlab.policy.patterns.pattern_problem`, like every rule's pattern.

Expressions longer than :data:`ANALYSED_CHARS` skip step 3's walk (cel-python's parser is slow
on them; the engine still checks steps 1 and 2).  Messages quote at most a short excerpt of
the expression: a 400 KB expression is never echoed.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kqlab.policy.cel import (
    VARIABLES,
    CelSyntaxError,
    available_engines,
    compile_cel,
    default_engine,
)
from kqlab.policy.patterns import pattern_problem
from kqlab.policy.shape_checks import did_you_mean
from kqlab.policy.value_shapes import (
    DYN,
    Shape,
    article,
    merge,
    nearest_field,
    of,
    plural,
    variable_shapes,
)

if TYPE_CHECKING:
    from lark import Token, Tree

__all__ = ["ANALYSED_CHARS", "ExpressionProblem", "excerpt", "expression_problem"]

#: longer expressions are compiled and checked by the engine only (see the module docstring)
ANALYSED_CHARS = 20_000
#: the type identifiers CEL knows as values (``type(x) == int``)
_TYPE_NAMES = frozenset(("int", "uint", "double", "string", "bytes", "bool", "list", "map",
                         "null_type", "type", "dyn"))
_MACROS = frozenset(("all", "exists", "exists_one", "map", "filter"))
_NUMERIC = frozenset(("int", "uint", "double"))
_ORDERED = frozenset(("string", "bytes", "bool", "timestamp", "duration"))
_OPS = {"relation_lt": "<", "relation_le": "<=", "relation_gt": ">", "relation_ge": ">=",
        "relation_eq": "==", "relation_ne": "!=", "relation_in": "in", "addition_add": "+",
        "addition_sub": "-", "multiplication_mul": "*", "multiplication_div": "/",
        "multiplication_mod": "%"}
#: (operator, left kind, right kind) -> result kind, CEL's arithmetic overloads
_ARITHMETIC: dict[tuple[str, str, str], str] = {}
for _k in ("int", "uint", "double"):
    for _op in "+-*/":
        _ARITHMETIC[(_op, _k, _k)] = _k
for _k in ("int", "uint"):
    _ARITHMETIC[("%", _k, _k)] = _k
_ARITHMETIC.update({
    ("+", "string", "string"): "string", ("+", "bytes", "bytes"): "bytes",
    ("+", "list", "list"): "list", ("+", "timestamp", "duration"): "timestamp",
    ("+", "duration", "timestamp"): "timestamp", ("+", "duration", "duration"): "duration",
    ("-", "timestamp", "timestamp"): "duration", ("-", "timestamp", "duration"): "timestamp",
    ("-", "duration", "duration"): "duration"})
#: functions and methods by result (what they take is checked for the common ones below)
_RESULTS = {"int": "int", "uint": "uint", "double": "double", "string": "string",
            "bytes": "bytes", "bool": "bool", "type": "type", "timestamp": "timestamp",
            "duration": "duration", "size": "int", "startsWith": "bool", "endsWith": "bool",
            "contains": "bool", "matches": "bool", "exists": "bool", "all": "bool",
            "exists_one": "bool", "getFullYear": "int", "getMonth": "int", "getDate": "int",
            "getDayOfMonth": "int", "getDayOfWeek": "int", "getDayOfYear": "int",
            "getHours": "int", "getMinutes": "int", "getSeconds": "int",
            "getMilliseconds": "int"}
_ENGINE_POSITION = re.compile(r"^(?:ERROR: )?<input>:\d+:\d+: ")
#: the parser's list of every token that can start an operand, said in words
_ANY_OPERAND = re.compile(r"expecting \{[^}]*IDENTIFIER[^}]*\}")


@dataclass(frozen=True, slots=True)
class ExpressionProblem:
    """Why an expression is refused: ``message`` (what, and what to write instead) and
    ``offset``, the 0-based index of the offending character (None: the whole expression)."""

    message: str
    offset: int | None


class _Found(Exception):
    """The first problem the walk meets (it stops there: one error at a time)."""

    def __init__(self, message: str, offset: int | None) -> None:
        super().__init__(message)
        self.problem = ExpressionProblem(message, offset)


def expression_problem(expr: str, value: Shape = DYN) -> ExpressionProblem | None:
    """None when ``expr`` is a sound rule condition; else the first problem and where it is.

    ``value`` is the shape of the decoded value from the declared schemas (``DYN`` when the
    policy declares none: then fields are not checked).

    Examples
    --------
    >>> expression_problem("value.amount > 0") is None
    True
    >>> p = expression_problem("vlaue.amount > 0")
    >>> p.offset, p.message.split(" — ")[1].split(" (a rule reads")[0]
    (0, "did you mean 'value'?")
    """
    engine_error = _compile_error(expr)
    if engine_error is not None and not _checker_error(engine_error.detail):
        return _engine_problem(expr, engine_error)
    if len(expr) <= ANALYSED_CHARS:
        tree = _parse(expr)
        if tree is not None:
            try:
                _Typer(expr, variable_shapes(value)).condition(tree)
            except _Found as found:
                return found.problem
            except RecursionError:  # thousands of chained conditions: the engine checked it
                pass
    return None if engine_error is None else _engine_problem(expr, engine_error)


def excerpt(text: str, offset: int | None, before: int = 30, after: int = 20) -> str:
    """A one-line piece of ``text`` around ``offset`` (its start when None), cut with '…'."""
    at = 0 if offset is None else max(0, min(offset, len(text)))
    start, end = max(0, at - before), min(len(text), at + after)
    piece = " ".join(text[start:end].split())
    return ("…" if start > 0 else "") + piece + ("…" if end < len(text) else "")


# --------------------------------------------------------------------------- engine errors
def _compile_error(expr: str) -> CelSyntaxError | None:
    """The first compile error of the engines that matter: cel-expr-python (the reference,
    whose checker and messages are the precise ones) when it is installed, and the engine
    that will run the rule (``KQLAB_CEL_ENGINE`` may force cel-python, whose grammar differs
    in corners).  Both programs are cached, so the replay compiles nothing again."""
    engines = [name for name in ("cel-expr-python",) if name in available_engines()]
    try:
        default = default_engine()
    except ImportError:  # no CEL engine here: the replay will say so
        return None
    if default not in engines:
        engines.append(default)
    for engine in engines:
        try:
            compile_cel(expr, engine)
        except CelSyntaxError as exc:
            return exc
    return None


def _checker_error(detail: str) -> bool:
    """Whether the engine's message is its type checker's (our walk says it better)."""
    return "undeclared reference" in detail or "no matching overload" in detail


def _engine_problem(expr: str, exc: CelSyntaxError) -> ExpressionProblem:
    offset = None
    if exc.line is not None and exc.column is not None:
        lines = expr.split("\n")
        if exc.line <= len(lines):
            offset = sum(len(line) + 1 for line in lines[:exc.line - 1]) + exc.column - 1
    detail = _first_line(exc.detail, expr)
    hint = ""
    if "codepoint limit" in detail:
        hint = " — split the condition over several rules"
    return ExpressionProblem(f"CEL expression does not compile: {detail}{hint} — near "
                             f"'{excerpt(expr, offset)}'", offset)


def _first_line(detail: str, expr: str) -> str:
    """The engine's message without its caret diagram (which repeats the expression)."""
    first = detail.strip().split("\n", 1)[0]
    first = _ENGINE_POSITION.sub("", first).removesuffix(" [INVALID_ARGUMENT]").strip()
    first = _ANY_OPERAND.sub("expecting a value (a literal, a variable, '(', '-' or '!')",
                             first)
    if not first or first.strip() == expr.strip().split("\n", 1)[0].strip():
        return "syntax error"  # cel-python's parse errors are only a diagram
    return first if len(first) <= 300 else first[:299] + "…"


# ----------------------------------------------------------------------------------- parse
class _Parser(Protocol):
    def parse(self, text: str) -> Tree[Token]: ...


_parser: _Parser | None = None
_parser_lock = threading.Lock()


def _parse(expr: str) -> Tree[Token] | None:
    """cel-python's parse tree, or None when its grammar disagrees with the engine's."""
    global _parser
    try:
        with _parser_lock:
            if _parser is None:
                from celpy.celparser import CELParser

                _parser = CELParser()
            return _parser.parse(expr)
    except Exception:  # ImportError, or a parse error the engine did not make
        return None


# ------------------------------------------------------------------------------------ walk
class _Typer:
    """Walks a parse tree computing each node's :class:`Shape`; raises :class:`_Found`."""

    def __init__(self, expr: str, variables: Mapping[str, Shape]) -> None:
        self.expr = expr
        self.variables = variables
        self.scopes: list[dict[str, Shape]] = []
        #: names some macro binds (``i`` in ``exists(i, ...)``), for the message when one is
        #: read outside its macro
        self.macro_variables: set[str] = set()

    # --- entry -----------------------------------------------------------------------------
    def condition(self, tree: Tree[Token]) -> None:
        """The whole expression: it must be able to give a bool."""
        shape = self.shape(tree)
        if not shape.dyn and "bool" not in (shape.kinds or ()):
            raise _Found(f"the expression gives {article(shape)}, not a bool — a rule's condition "
                         f"is true or false: compare it, e.g. {self.text(tree, 30)} != "
                         f"{_example(shape)}", 0)

    # --- helpers ---------------------------------------------------------------------------
    def text(self, node: Tree[Token] | Token, limit: int = 40) -> str:
        """The source of ``node``, on one line, cut to ``limit`` characters."""
        start, end = _span(node)
        piece = " ".join(self.expr[start:end].split())
        return piece if len(piece) <= limit else piece[:limit - 1] + "…"

    def boolean(self, node: Tree[Token], shape: Shape, what: str, at: int) -> None:
        """``node`` (of ``shape``, walked once by the caller) can be a bool."""
        if not shape.dyn and "bool" not in (shape.kinds or ()):
            raise _Found(f"{self.text(node)} is {article(shape)}, not a bool: {what}", at)

    # --- dispatch ------------------------------------------------------------------------
    def shape(self, node: Tree[Token] | Token) -> Shape:
        from lark import Token

        if isinstance(node, Token):
            return DYN
        name = str(node.data)
        kids = node.children
        if len(kids) == 1 and name in ("expr", "conditionalor", "conditionaland", "relation",
                                       "addition", "multiplication", "unary", "member",
                                       "primary", "paren_expr"):
            return self.shape(kids[0])
        method = getattr(self, f"_{name}", None)
        if method is None:  # member_object, anything new in the grammar: type the parts
            for kid in kids:
                self.shape(kid)
            return DYN
        result: Shape = method(node, kids)
        return result

    def _expr(self, node: Tree[Token], kids: list) -> Shape:
        cond, yes, no = kids
        self.boolean(cond, self.shape(cond), "the condition of '? :' is true or false — "
                     "compare it first", _start(cond))
        return merge((self.shape(yes), self.shape(no)))

    def _conditionalor(self, node: Tree[Token], kids: list) -> Shape:
        return self._logic(kids, "||")

    def _conditionaland(self, node: Tree[Token], kids: list) -> Shape:
        return self._logic(kids, "&&")

    def _logic(self, kids: list, op: str) -> Shape:
        left, right = kids
        at = self.operator_at(_end(left), _start(right))
        for side in (left, right):
            shape = self.shape(side)
            self.boolean(side, shape, f"'{op}' joins conditions — compare it, e.g. "
                         f"{self.text(side, 30)} != {_example(shape)}", at)
        return of("bool")

    def _unary(self, node: Tree[Token], kids: list) -> Shape:
        op = str(kids[0].data)
        operand = kids[1]
        at = _start(node)
        if op == "unary_not":
            self.boolean(operand, self.shape(operand), "'!' negates a condition — compare it "
                         "first", at)
            return of("bool")
        shape = self.shape(operand)
        if shape.dyn:
            return DYN
        kinds = (shape.kinds or frozenset()) & {"int", "double", "duration"}
        if not kinds:
            raise _Found(f"{self.text(operand)} is {article(shape)}: CEL's unary '-' takes a "
                         "number", at)
        return Shape(frozenset(kinds))

    def _relation(self, node: Tree[Token], kids: list) -> Shape:
        return self.binary(kids)

    def _addition(self, node: Tree[Token], kids: list) -> Shape:
        return self.binary(kids)

    def _multiplication(self, node: Tree[Token], kids: list) -> Shape:
        return self.binary(kids)

    def binary(self, kids: list) -> Shape:
        op_tree, right_node = kids
        name = str(op_tree.data)
        op = _OPS[name]
        left_node = op_tree.children[0]
        at = _end(op_tree) - len(op)
        left, right = self.shape(left_node), self.shape(right_node)
        if op in ("==", "!="):
            self.equality(left_node, left, right_node, right, op, at)
            return of("bool")
        if op in ("<", "<=", ">", ">="):
            self.ordering(left_node, left, right_node, right, op, at)
            return of("bool")
        if op == "in":
            self.membership(left_node, left, right_node, right, at)
            return of("bool")
        return self.arithmetic(left_node, left, right_node, right, op, at)

    def equality(self, ln: Tree[Token], left: Shape, rn: Tree[Token], right: Shape, op: str,
                 at: int) -> None:
        lk, rk = _values(left), _values(right)
        if lk is None or rk is None or not lk or not rk or _comparable(lk, rk):
            return
        never = "false" if op == "==" else "true"
        raise _Found(f"{self.text(ln)} is {article(left)} but {self.text(rn)} is {article(right)}: "
                     f"CEL's '{op}' between different types is always {never} — "
                     f"{self.compare_hint(ln, left, rn, right)}", at)

    def ordering(self, ln: Tree[Token], left: Shape, rn: Tree[Token], right: Shape, op: str,
                 at: int) -> None:
        lk, rk = _values(left), _values(right)
        if lk is None or rk is None or not lk or not rk:
            return
        if any((a in _NUMERIC and b in _NUMERIC) or (a == b and a in _ORDERED)
               for a in lk for b in rk):
            return
        raise _Found(f"{self.text(ln)} is {article(left)} but {self.text(rn)} is "
                     f"{article(right)}: CEL has no '{op}' between them, so every record would "
                     "fail with an error — "
                     f"{self.compare_hint(ln, left, rn, right)}", at)

    def compare_hint(self, ln: Tree[Token], left: Shape, rn: Tree[Token], right: Shape
                     ) -> str:
        """``compare value.amount with a number``: the side that is not a literal leads."""
        left_token = _token(ln)
        if left_token is not None and left_token.type.endswith("_LIT") and _token(rn) is None:
            ln, left, rn, right = rn, right, ln, left
        return f"compare {self.text(ln, 30)} with {_a_value(left)}"

    def membership(self, ln: Tree[Token], left: Shape, rn: Tree[Token], right: Shape,
                   at: int) -> None:
        rk = _values(right)
        if rk is None or not rk:
            return
        if not rk & {"list", "map"}:
            raise _Found(f"'in' looks in a list or a map, but {self.text(rn)} is {article(right)} "
                         f"— write {self.text(ln, 20)} in [...]", at)
        lk = _values(left)
        if lk is None or not lk:
            return
        candidates: set[str] = set()
        if "map" in rk:
            candidates.add("string")  # map keys: record fields, header names, JSON keys
        if "list" in rk:
            items = right.items
            item_kinds = None if items is None else _values(items)
            if item_kinds is None:
                return
            if not item_kinds:
                candidates.add("null")
            candidates |= item_kinds
        if candidates and not _comparable(lk, frozenset(candidates)):
            raise _Found(f"{self.text(ln)} is {article(left)} but {self.text(rn)} holds "
                         f"{plural(frozenset(candidates))}: 'in' is always false", at)

    def arithmetic(self, ln: Tree[Token], left: Shape, rn: Tree[Token], right: Shape, op: str,
                   at: int) -> Shape:
        lk, rk = _values(left), _values(right)
        if lk is None or rk is None:
            return DYN
        results = {_ARITHMETIC[(op, a, b)] for a in lk for b in rk if (op, a, b) in _ARITHMETIC}
        if results or not lk or not rk:
            items = merge(s.items or DYN for s in (left, right)) if "list" in results else None
            return Shape(frozenset(results), items=items) if results else DYN
        hint = ""
        if lk & _NUMERIC and rk & _NUMERIC:
            hint = (" — CEL does not mix int and double in arithmetic: write a double literal "
                    "(2.0, not 2), or convert with double(...) or int(...)")
        raise _Found(f"{self.text(ln)} is {article(left)} and {self.text(rn)} is {article(right)}: "
                     f"CEL has no '{op}' for them, so every record would fail with an error"
                     f"{hint}", at)

    # --- members ---------------------------------------------------------------------------
    def _member_dot(self, node: Tree[Token], kids: list) -> Shape:
        target, name = kids
        return self.select(target, self.shape(target), str(name), name.start_pos)

    def select(self, target: Tree[Token], shape: Shape, name: str, at: int) -> Shape:
        kinds = _values(shape)
        if kinds is None:
            return DYN
        if "map" not in kinds:
            if not kinds:
                return DYN  # only null: CEL's error on null is the record's to report
            raise _Found(f"{self.text(target)} is {article(shape)}, so it has no field {name!r}",
                         at)
        if name in shape.fields:
            return shape.fields[name]
        if shape.closed:
            fields = sorted(shape.fields)
            shown = ", ".join(fields[:12]) + (", …" if len(fields) > 12 else "")
            raise _Found(f"{self.text(target)} has no field {name!r} in the declared schema "
                         f"(its fields: {shown or 'none'}) — {nearest_field(name, fields)}", at)
        return shape.items or DYN

    def _member_index(self, node: Tree[Token], kids: list) -> Shape:
        target, index = kids
        shape = self.shape(target)
        self.shape(index)
        literal = _string_literal(index)
        if literal is not None:
            return self.select(target, shape, literal, _start(index))
        kinds = _values(shape)
        if kinds is None or not kinds:
            return DYN
        if "list" in kinds:
            return shape.items or DYN
        if "map" in kinds:
            return merge([*shape.fields.values(), shape.items or DYN]) if not shape.closed \
                else merge(shape.fields.values()) if shape.fields else DYN
        raise _Found(f"{self.text(target)} is {article(shape)}: only lists and maps take [...]",
                     _start(index) - 1)

    def _member_dot_arg(self, node: Tree[Token], kids: list) -> Shape:
        target, name = kids[0], str(kids[1])
        args = list(kids[2].children) if len(kids) > 2 and kids[2] is not None else []
        shape = self.shape(target)
        if name in _MACROS and args and _ident_name(args[0]) is not None:
            return self.macro(target, shape, name, args)
        return self.call(name, target, shape, args, kids[1].start_pos)

    def macro(self, target: Tree[Token], shape: Shape, name: str, args: list) -> Shape:
        kinds = _values(shape)
        if kinds is None or not kinds:
            element = DYN
        elif kinds & {"list", "map"}:
            element = merge(([shape.items or DYN] if "list" in kinds else []) +
                            ([of("string")] if "map" in kinds else []))
        else:
            raise _Found(f"{self.text(target)} is {article(shape)}: {name}() iterates over a "
                         "list or a map", _end(target) + 1)
        variable = _ident_name(args[0])
        assert variable is not None
        self.macro_variables.add(variable)
        self.scopes.append({variable: element})
        try:
            bodies = [self.shape(arg) for arg in args[1:]]
        finally:
            self.scopes.pop()
        if name in ("map", "filter"):
            items = bodies[-1] if name == "map" and bodies else element
            return of("list", items=items)
        return of("bool")

    def _ident_arg(self, node: Tree[Token], kids: list) -> Shape:
        name = str(kids[0])
        args = list(kids[1].children) if len(kids) > 1 and kids[1] is not None else []
        if name == "has" and len(args) == 1:
            self.shape(args[0])  # an unknown field is refused by the selection itself
            return of("bool")
        return self.call(name, None, None, args, kids[0].start_pos)

    def _dot_ident_arg(self, node: Tree[Token], kids: list) -> Shape:
        return self._ident_arg(node, kids)

    def call(self, name: str, target: Tree[Token] | None, shape: Shape | None, args: list,
             at: int) -> Shape:
        """A function or method: checks what the common ones take, types the rest as dyn."""
        arg_shapes = [self.shape(a) for a in args]
        operands = list(zip(args, arg_shapes, strict=True))
        if target is not None and shape is not None:
            operands.insert(0, (target, shape))
        if operands and name == "size":
            self.takes(*operands[0], {"string", "bytes", "list", "map"}, "size()", at)
        if operands and name in ("startsWith", "endsWith", "contains", "matches"):
            self.takes(*operands[0], {"string"}, f"{name}()", at)
            for arg, arg_shape in operands[1:]:
                self.takes(arg, arg_shape, {"string"}, f"{name}()'s argument", _start(arg))
                literal = _string_literal(arg)
                problem = pattern_problem(literal) if name == "matches" and \
                    literal is not None else None
                if problem is not None:
                    offset = _start(arg) + 1 + (problem.offset or 0) \
                        if literal == _raw_body(arg) else _start(arg)
                    raise _Found(f"invalid regular expression in matches(): "
                                 f"{problem.message}", offset)
        result = _RESULTS.get(name)
        return DYN if result is None else of(result)

    def takes(self, node: Tree[Token], shape: Shape, kinds: set[str], what: str,
              at: int) -> None:
        values = _values(shape)
        if values is None or not values or values & kinds:
            return
        raise _Found(f"{self.text(node)} is {article(shape)}: {what} takes "
                     f"{plural(frozenset(kinds))}", at)

    # --- leaves ----------------------------------------------------------------------------
    def _ident(self, node: Tree[Token], kids: list) -> Shape:
        return self.variable(kids[0])

    def _dot_ident(self, node: Tree[Token], kids: list) -> Shape:
        return self.variable(kids[0])

    def variable(self, token: Token) -> Shape:
        name = str(token)
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in self.variables:
            return self.variables[name]
        if name in _TYPE_NAMES:
            return of("type")
        if name in self.macro_variables:
            hint = (f"{name!r} is a macro's variable, and exists only inside its macro: move "
                    "the condition inside, e.g. exists(i, i.a > 0 && i.b > 0)")
        else:
            hint = did_you_mean(name, VARIABLES)
            if hint.startswith("did you mean"):
                hint += f" (a rule reads {', '.join(VARIABLES)})"
        raise _Found(f"undeclared variable {name!r} — {hint}", token.start_pos)

    def _literal(self, node: Tree[Token], kids: list) -> Shape:
        kind = {"INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double",
                "STRING_LIT": "string", "MLSTRING_LIT": "string", "BYTES_LIT": "bytes",
                "BOOL_LIT": "bool", "NULL_LIT": "null"}.get(kids[0].type)
        return DYN if kind is None else of(kind)

    def _list_lit(self, node: Tree[Token], kids: list) -> Shape:
        items = [self.shape(k) for k in kids[0].children] if kids and kids[0] is not None else []
        return of("list", items=merge(items) if items else DYN)

    def _map_lit(self, node: Tree[Token], kids: list) -> Shape:
        for k in kids[0].children if kids and kids[0] is not None else ():
            self.shape(k)
        return of("map", items=DYN)

    def operator_at(self, left_end: int, right_start: int) -> int:
        """The index of the operator between two operands (skipping blanks and comments)."""
        i = left_end
        while i < right_start:
            if self.expr.startswith("//", i):
                nl = self.expr.find("\n", i)
                i = right_start if nl < 0 else nl + 1
            elif self.expr[i].isspace():
                i += 1
            else:
                return i
        return left_end


# ------------------------------------------------------------------------------ utilities
def _span(node: Tree[Token] | Token) -> tuple[int, int]:
    from lark import Token

    if isinstance(node, Token):
        start = node.start_pos or 0
        return start, node.end_pos if node.end_pos is not None else start + len(node)
    meta = node.meta
    if getattr(meta, "empty", True):
        return 0, 0
    return meta.start_pos, meta.end_pos


def _start(node: Tree[Token] | Token) -> int:
    return _span(node)[0]


def _end(node: Tree[Token] | Token) -> int:
    return _span(node)[1]


def _values(shape: Shape) -> frozenset[str] | None:
    """The kinds a non-null value may have (None: dyn; empty: only null)."""
    return None if shape.kinds is None else shape.kinds - {"null"}


def _comparable(left: frozenset[str], right: frozenset[str]) -> bool:
    """Whether some value of ``left`` can equal some value of ``right`` in CEL."""
    return any(a == b or (a in _NUMERIC and b in _NUMERIC) for a in left for b in right)


def _a_value(shape: Shape) -> str:
    """What to compare a value of ``shape`` with: ``a number``, ``a string``."""
    kinds = _values(shape) or frozenset()
    if kinds and kinds <= _NUMERIC:
        return "a number"
    return article(Shape(kinds)) if kinds else "null"


def _ident_name(node: Tree[Token] | Token) -> str | None:
    """The identifier ``node`` is made of (a macro's variable), else None."""
    from lark import Token

    while not isinstance(node, Token):
        if len(node.children) != 1:
            return None
        if str(node.data) == "ident":
            child = node.children[0]
            return str(child) if isinstance(child, Token) else None
        node = node.children[0]
    return None


def _token(node: Tree[Token] | Token) -> Token | None:
    """The single token ``node`` is made of, else None."""
    from lark import Token

    while not isinstance(node, Token):
        if len(node.children) != 1:
            return None
        node = node.children[0]
    return node


def _string_literal(node: Tree[Token] | Token) -> str | None:
    """The value of a string literal (escapes read as cel-python reads them), else None."""
    token = _token(node)
    if token is None or token.type not in ("STRING_LIT", "MLSTRING_LIT"):
        return None
    try:
        from celpy import evaluation

        return str(evaluation.celstr(token))
    except Exception:
        return None


def _raw_body(node: Tree[Token] | Token) -> str | None:
    """The text between a one-quote literal's quotes, as written (for in-pattern offsets)."""
    token = _token(node)
    if token is None or token.type != "STRING_LIT":
        return None
    text = str(token)
    return text[1:-1] if text[:1] in "'\"" else None


def _example(shape: Shape) -> str:
    kinds = _values(shape) or frozenset()
    if kinds & _NUMERIC:
        return "0"
    if "string" in kinds:
        return "''"
    return "null"
