"""YAML text → plain data that remembers where each mapping, key, value and item starts.

A policy error must name the line and key (ARCHITECTURE §Policy file), but PyYAML's plain
``SafeLoader`` forgets positions once it has built dicts and lists.  :func:`read_yaml` composes
the document with a loader that builds :class:`PositionedMap` / :class:`PositionedList` instead
(ordinary ``dict`` / ``list`` subclasses carrying 1-based ``(line, column)`` marks), keeps
duplicate keys aside so the checker can report them, keeps dates as the text they are, and turns
PyYAML's syntax errors into one :class:`~kqlab.policy.errors.PolicyError` with a hint for the
mistakes people actually make.  The ``*_pos`` helpers read a mark back, or ``None`` for data
that did not come from YAML (a dict given to :func:`kqlab.policy.policy_from_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, TypeAlias

import yaml

from kqlab.policy.errors import PolicyError

__all__ = ["Position", "PositionedList", "PositionedMap", "ScalarSpan", "item_pos", "key_pos",
           "pos_of", "read_yaml", "scalar_of", "value_pos"]

#: a 1-based (line, column) in the policy text
Position: TypeAlias = tuple[int, int]


class ScalarSpan(NamedTuple):
    """Where a text value is written, so a position *inside* it can be found in the file.

    An error inside a CEL expression or a pattern has a column in the value; which file column
    that is depends on how the value is written (quotes, escapes, block scalars, folding):
    :func:`kqlab.policy.scalar_offsets.file_position` replays the scanner on ``text``.
    """

    #: the whole policy text (shared, not copied)
    text: str
    #: PyYAML's scalar style: None (plain), ``'`` , ``"``, ``|`` or ``>``
    style: str | None
    #: 0-based indices in ``text`` of the scalar's first character and just past its last
    start: int
    end: int
    #: the 0-based column of the key the value belongs to (block scalars indent from it)
    indent: int


class PositionedMap(dict[str, object]):
    """A mapping read from YAML that remembers where it, its keys and its values start."""

    __slots__ = ("at", "duplicates", "keys_at", "scalars", "values_at")
    at: Position
    keys_at: dict[str, Position]
    values_at: dict[str, Position]
    #: text values: how they are written (see :class:`ScalarSpan`)
    scalars: dict[str, ScalarSpan]
    #: keys given twice (YAML keeps one): the later ones, with where they are
    duplicates: list[tuple[str, Position]]


class PositionedList(list[object]):
    """A sequence read from YAML that remembers where it and its items start."""

    __slots__ = ("at", "items_at")
    at: Position
    items_at: list[Position]


class _Loader(yaml.SafeLoader):
    """``SafeLoader`` recording 1-based (line, column) marks; dates stay text."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        #: the text as given (marks' ``index`` point into it)
        self.text = text


def _mark(mark: yaml.Mark) -> Position:
    return mark.line + 1, mark.column + 1


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> PositionedMap:
    loader.flatten_mapping(node)
    out = PositionedMap()
    out.at, out.keys_at, out.values_at, out.duplicates = _mark(node.start_mark), {}, {}, []
    out.scalars = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            text = key_node.value if isinstance(key_node, yaml.ScalarNode) else key
            raise yaml.constructor.ConstructorError(
                None, None, f"key {text!r} is read as {_describe_type(key)}, not as a name — "
                f"quote it: '{text}':", key_node.start_mark)
        if key in out:
            out.duplicates.append((key, _mark(key_node.start_mark)))
            continue
        out[key] = loader.construct_object(value_node, deep=True)
        out.keys_at[key] = _mark(key_node.start_mark)
        out.values_at[key] = _mark(value_node.start_mark)
        if isinstance(value_node, yaml.ScalarNode) and isinstance(out[key], str):
            out.scalars[key] = ScalarSpan(loader.text, value_node.style,
                                          value_node.start_mark.index,
                                          value_node.end_mark.index, key_node.start_mark.column)
    return out


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> PositionedList:
    out = PositionedList(loader.construct_object(child, deep=True) for child in node.value)
    out.at = _mark(node.start_mark)
    out.items_at = [_mark(child.start_mark) for child in node.value]
    return out


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)
# vetted_at: 2026-11-21 is a date to YAML 1.1; a policy keeps it as the text it is
_Loader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: node.value)

#: hints for PyYAML problems people actually hit
_SYNTAX_HINTS = (
    ("cannot start any token", "indent with spaces, not tabs, and quote values starting with "
                               "@ or `"),
    ("mapping values are not allowed here", "quote values that contain ': ', and check the "
                                            "indentation of the line"),
    ("expected <block end>", "check the indentation: keys of one mapping line up exactly"),
    ("could not find expected ':'", "every key needs a ': ' after it; quote text containing "
                                    "':' or '#'"),
    ("expected a single document", "a policy file holds one document; remove the '---' "
                                   "separators after the first"),
    ("could not determine a constructor", "policy files hold plain YAML data; remove the tag"),
    ("found undefined alias", "define the anchor (&name) before using it (*name)"),
    ("while parsing a flow", "close the bracket or brace opened there, and separate items "
                             "with commas"),
)


def read_yaml(text: str, source: str) -> object:
    """The YAML document in ``text`` as positioned maps/lists (``PolicyError`` on bad YAML)."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem and exc.context_mark is not None:
            context = f"{exc.context} on line {exc.context_mark.line + 1}"
            problem = f"{context}, {problem}" if problem.startswith("but ") else \
                f"{problem} ({context})"
        hint = next((h for needle, h in _SYNTAX_HINTS if needle in str(exc)), None)
        reason = f"YAML syntax error: {problem}" + (f" — {hint}" if hint else "")
        if problem.startswith("key "):  # our own non-text key message
            reason = problem
        line, column = _mark(mark) if mark is not None else (None, None)
        raise PolicyError(reason, file=source, line=line, column=column) from None
    except yaml.YAMLError as exc:  # ReaderError: control characters, bad encoding
        position = getattr(exc, "position", None)
        line = text.count("\n", 0, position) + 1 if position is not None else None
        raise PolicyError(f"not a YAML text file: {exc} — remove control characters and save "
                          "the file as UTF-8", file=source, line=line) from None


def _describe_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


# --------------------------------------------------------------------------- positions
def pos_of(obj: object) -> Position | None:
    """Where ``obj`` starts in the YAML text (None for data that did not come from YAML)."""
    at: Position | None = getattr(obj, "at", None)
    return at


def key_pos(mapping: object, name: str) -> Position | None:
    """Where the key ``name`` of ``mapping`` is written (else where the mapping starts)."""
    keys_at: dict[str, Position] = getattr(mapping, "keys_at", {})
    return keys_at.get(name) or pos_of(mapping)


def value_pos(mapping: object, name: str) -> Position | None:
    """Where the value of ``mapping[name]`` is written (else where the mapping starts)."""
    values_at: dict[str, Position] = getattr(mapping, "values_at", {})
    return values_at.get(name) or pos_of(mapping)


def scalar_of(mapping: object, name: str) -> ScalarSpan | None:
    """How the text value ``mapping[name]`` is written (None for data not read from YAML)."""
    scalars: dict[str, ScalarSpan] = getattr(mapping, "scalars", {})
    return scalars.get(name)


def item_pos(seq: object, index: int) -> Position | None:
    """Where item ``index`` of ``seq`` is written (else where the sequence starts)."""
    items: list[Position] | None = getattr(seq, "items_at", None)
    return items[index] if items else pos_of(seq)
