"""kqlab's CEL expression tree: the node types of the vectorised subset, and its vocabulary.

:func:`~kqlab.validate.cel.parse.parse_cel` builds these nodes; the evaluator walks them.
Every node is a named tuple whose first item is its tag, and it prints as a plain tuple, so a
tree compares equal to (and reads like) nested tuples — ``('op', 'gt', (left, right))`` —
is hashable and cheap to cache, while the evaluator reads fields by name and mypy knows each
field's type.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from kqlab.policy.cel import VARIABLES

__all__ = [
    "FUNCTIONS",
    "IDENTS",
    "META_INTS",
    "METHODS",
    "TYPE_NAMES",
    "Call",
    "Has",
    "Ident",
    "Index",
    "ListLit",
    "Lit",
    "LitKind",
    "LitValue",
    "Node",
    "Op",
    "OpName",
    "Select",
    "Unsupported",
]


class Unsupported(Exception):
    """The expression (or this sample's data) is outside the vectorised subset."""


#: the record metadata variables, all CEL ints
META_INTS = ("partition", "offset", "timestamp", "timestamp_type", "batch_offset",
             "batch_index")
#: type identifiers ``type(x)`` is compared with (``type(x) == int``)
TYPE_NAMES = ("int", "uint", "double", "string", "bytes", "bool", "null_type", "map", "list")
#: identifiers the subset evaluates: the activation variables (``header_list`` excepted: its
#: list of maps runs per record) and the type identifiers
IDENTS = frozenset((*(v for v in VARIABLES if v != "header_list"), *TYPE_NAMES))
#: receiver-style functions of the subset (``s.startsWith('a')``)
METHODS = frozenset(("size", "startsWith", "endsWith", "contains", "matches"))
#: global functions of the subset (``size(s)``)
FUNCTIONS = frozenset(("has", "size", "matches", "type", "int", "double"))

LitKind = Literal["int", "double", "string", "bytes", "bool", "null"]
LitValue = int | float | str | bytes | bool | None
OpName = Literal["cond", "or", "and", "not", "neg", "lt", "le", "gt", "ge", "eq", "ne", "in",
                 "add", "sub", "mul", "div", "mod"]


class Lit(NamedTuple):
    """A literal, with its value as the reference engine reads it."""

    tag: Literal["lit"]
    value: LitValue
    kind: LitKind

    def __repr__(self) -> str:
        return tuple.__repr__(self)


class Ident(NamedTuple):
    """A variable (``value``, ``key``, ``offset``, ...) or a type identifier (``int``)."""

    tag: Literal["id"]
    name: str

    def __repr__(self) -> str:
        return tuple.__repr__(self)


class Select(NamedTuple):
    """``target.field`` or ``target['field']``."""

    tag: Literal["sel"]
    target: Node
    field: str

    def __repr__(self) -> str:
        return tuple.__repr__(self)


class Has(NamedTuple):
    """``has(target.field)``: the presence test of a selection."""

    tag: Literal["has"]
    select: Select

    def __repr__(self) -> str:
        return tuple.__repr__(self)


class Index(NamedTuple):
    """``target[index]`` with a non-string index (only an int literal on a list evaluates)."""

    tag: Literal["idx"]
    target: Node
    subscript: Node

    def __repr__(self) -> str:
        return tuple.__repr__(self)


class Call(NamedTuple):
    """A function call: ``name(args)`` (``target`` None) or ``target.name(args)``."""

    tag: Literal["call"]
    name: str
    target: Node | None
    args: tuple[Node, ...]

    def __repr__(self) -> str:
        return tuple.__repr__(self)


class Op(NamedTuple):
    """An operator over its operands (``cond`` has three: condition, then, else)."""

    tag: Literal["op"]
    op: OpName
    args: tuple[Node, ...]

    def __repr__(self) -> str:
        return tuple.__repr__(self)


class ListLit(NamedTuple):
    """A list literal ``[a, b]`` (evaluated only as the right side of ``in``)."""

    tag: Literal["list"]
    items: tuple[Node, ...]

    def __repr__(self) -> str:
        return tuple.__repr__(self)


Node = Lit | Ident | Select | Has | Index | Call | Op | ListLit
