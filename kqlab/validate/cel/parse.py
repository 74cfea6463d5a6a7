"""CEL text → kqlab's expression tree, with cel-python's lark parser (no grammar of our own).

The tree covers the vectorised subset only: anything else raises :class:`Unsupported` here,
so the caller evaluates the expression per record.  Literal values are read by the reference
engine (cel-expr-python) and cross-checked with celpy, so a literal the two libraries read
differently (escapes, NUL characters) never reaches a kernel.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, Protocol

from kqlab.validate.cel.tree import (
    FUNCTIONS,
    IDENTS,
    METHODS,
    Call,
    Has,
    Ident,
    Index,
    ListLit,
    Lit,
    LitKind,
    LitValue,
    Node,
    Op,
    OpName,
    Select,
    Unsupported,
)

if TYPE_CHECKING:
    from lark import Token, Tree

__all__ = ["parse_cel", "vectorisable"]

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


class _Parser(Protocol):
    """What kqlab uses of ``celpy.celparser.CELParser``."""

    def parse(self, text: str) -> Tree[Token]: ...


_parser: _Parser | None = None
_parser_lock = threading.Lock()
_ast_cache: dict[str, Node | Unsupported] = {}


def parse_cel(expr: str) -> Node:
    """The expression's tree (nested tuples), or :class:`Unsupported` outside the subset.

    Examples
    --------
    >>> parse_cel("value.a > 1")
    ('op', 'gt', (('sel', ('id', 'value'), 'a'), ('lit', 1, 'int')))
    """
    with _parser_lock:
        hit = _ast_cache.get(expr)
        if hit is None:
            try:
                hit = _build(_get_parser().parse(expr))
            except Unsupported as exc:
                hit = exc
            except Exception as exc:  # the lark parser disagreeing with the reference
                hit = Unsupported(f"cel-python's parser: {type(exc).__name__}")
            _ast_cache[expr] = hit
    if isinstance(hit, Unsupported):
        raise hit
    return hit


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


def _get_parser() -> _Parser:
    global _parser
    if _parser is None:
        from celpy.celparser import CELParser

        _parser = CELParser()
    return _parser


_BINOPS: dict[str, OpName] = {
    "relation_lt": "lt", "relation_le": "le", "relation_gt": "gt", "relation_ge": "ge",
    "relation_eq": "eq", "relation_ne": "ne", "relation_in": "in",
    "addition_add": "add", "addition_sub": "sub", "multiplication_mul": "mul",
    "multiplication_div": "div", "multiplication_mod": "mod"}


def _build(tree: Tree[Token] | Token) -> Node:
    """lark tree (celpy's grammar) → the subset's tree."""
    from lark import Token

    if isinstance(tree, Token):  # the grammar gives tokens only where the code reads them
        raise Unsupported(f"token {tree.type} in place of an expression")
    name = str(tree.data)
    kids = tree.children
    if name == "expr":
        if len(kids) == 1:
            return _build(kids[0])
        return Op("op", "cond", tuple(_build(k) for k in kids))
    if name in ("conditionalor", "conditionaland"):
        if len(kids) == 1:
            return _build(kids[0])
        return Op("op", "or" if name == "conditionalor" else "and",
                  (_build(kids[0]), _build(kids[1])))
    if name in ("relation", "addition", "multiplication"):
        if len(kids) == 1:
            return _build(kids[0])
        left, right = kids
        op = str(_tree(left).data)
        return Op("op", _BINOPS[op], (_build(_tree(left).children[0]), _build(right)))
    if name == "unary":
        if len(kids) == 1:
            return _build(kids[0])
        op = str(_tree(kids[0]).data)
        return Op("op", "not" if op == "unary_not" else "neg", (_build(kids[1]),))
    if name in ("member", "primary", "paren_expr"):
        return _build(kids[0])
    if name == "member_dot":
        return Select("sel", _build(kids[0]), str(kids[1]))
    if name == "member_dot_arg":
        fname = str(kids[1])
        if fname not in METHODS:
            raise Unsupported(f"method {fname}() is not vectorised")
        args = _args(kids[2] if len(kids) > 2 else None)
        return Call("call", fname, _build(kids[0]), args)
    if name == "member_index":
        target, index = _build(kids[0]), _build(kids[1])
        if isinstance(index, Lit) and index.kind == "string":
            assert isinstance(index.value, str)
            return Select("sel", target, index.value)
        return Index("idx", target, index)
    if name == "ident":
        ident = str(kids[0])
        if ident not in IDENTS:
            raise Unsupported(f"{ident} is not a vectorised variable")
        return Ident("id", ident)
    if name == "ident_arg":
        fname = str(kids[0])
        if fname not in FUNCTIONS:
            raise Unsupported(f"function {fname}() is not vectorised")
        args = _args(kids[1] if len(kids) > 1 else None)
        if fname == "has":
            if len(args) != 1 or not isinstance(args[0], Select):
                raise Unsupported("has() takes one field selection")
            return Has("has", args[0])
        return Call("call", fname, None, args)
    if name == "list_lit":
        return ListLit("list", _args(kids[0] if kids else None))
    if name == "literal":
        token = kids[0]
        if not isinstance(token, Token):
            raise Unsupported("a literal without its token")
        return _literal(token)
    raise Unsupported(f"{name} is outside the vectorised subset")


def _tree(node: Tree[Token] | Token) -> Tree[Token]:
    from lark import Token

    if isinstance(node, Token):
        raise Unsupported(f"token {node.type} in place of an expression")
    return node


def _args(exprlist: Tree[Token] | Token | None) -> tuple[Node, ...]:
    if exprlist is None:
        return ()
    return tuple(_build(k) for k in _tree(exprlist).children)


class _Value(Protocol):
    """A cel-expr-python evaluation result."""

    def value(self) -> object: ...


class _Program(Protocol):
    def eval(self, data: dict[str, object]) -> _Value: ...


class _Env(Protocol):
    """What kqlab uses of a cel-expr-python environment (it ships no type information)."""

    def compile(self, text: str) -> _Program: ...


_literal_env: _Env | None = None
_TOKEN_KINDS: dict[str, LitKind | Literal["uint"]] = {
    "INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double", "STRING_LIT": "string",
    "MLSTRING_LIT": "string", "BYTES_LIT": "bytes", "BOOL_LIT": "bool", "NULL_LIT": "null"}


def _literal(token: Token) -> Lit:
    """A literal's value as the reference engine reads it (cross-checked with celpy)."""
    global _literal_env
    kind = _TOKEN_KINDS.get(token.type)
    if kind is None or kind == "uint":
        raise Unsupported(f"{token.type} literals are not vectorised")
    text = str(token)
    if kind == "null":
        return Lit("lit", None, "null")
    if kind == "bool":
        return Lit("lit", text == "true", "bool")
    try:
        from cel_expr_python import cel

        if _literal_env is None:
            _literal_env = cel.NewEnv(variables={})
        value = _literal_env.compile(text).eval(data={}).value()
    except Exception as exc:
        raise Unsupported(f"literal {text!r}: {exc}") from None
    if isinstance(value, bytearray):
        value = bytes(value)
    from celpy import evaluation

    readers: dict[str, Callable[[str], LitValue]] = {
        "int": lambda t: int(t, 0) if "x" in t.lower() else int(t),
        "double": float,
        "string": lambda t: str(evaluation.celstr(token)),
        "bytes": lambda t: bytes(evaluation.celbytes(token))}
    try:  # both libraries must read the literal alike (NUL bytes, escapes)
        other = readers[kind](text)
    except Exception as exc:
        raise Unsupported(f"literal {text!r}: {exc}") from None
    if type(other) is not type(value) or other != value or \
            (isinstance(value, str) and "\x00" in value) or \
            (isinstance(value, bytes) and b"\x00" in value):
        raise Unsupported(f"literal {text!r} is read differently by the CEL libraries")
    if isinstance(value, int) and not _INT_MIN <= value <= _INT_MAX:
        raise Unsupported(f"literal {text!r} is out of range")
    assert isinstance(value, int | float | str | bytes)  # same type as ``other``
    return Lit("lit", value, kind)
