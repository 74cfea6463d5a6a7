"""A character of a YAML text value → its line and column in the file.

A CEL engine reports "line 1, column 24 of the expression"; a regex check, an index into the
pattern.  The user needs the position in the *policy file*, and the two differ as soon as the
value is quoted (escapes, ``''``), folded over several lines (plain and quoted scalars join
lines with a space), or written as a block scalar (``|`` keeps lines, ``>`` folds them, both
drop the indentation).  :func:`value_origins` replays PyYAML's scanner for the scalar's style
on the file text and records, for every character of the value, the index it came from;
:func:`file_position` turns an offset in the value into a 1-based ``(line, column)``.

The replay is checked: the characters it produces must be the value PyYAML built, else the
position is unknown (None) and the caller points at the start of the value instead — an
approximate location is acceptable, a wrong one is not.
"""

from __future__ import annotations

from kqlab.policy.positioned_yaml import Position, ScalarSpan

__all__ = ["file_position", "offset_position", "value_origins"]

_BREAK = "\r\n\x85\u2028\u2029"
#: PyYAML's double-quoted escapes (``ScannerError`` for anything else)
_ESCAPES = {"0": "\0", "a": "\x07", "b": "\x08", "t": "\x09", "\t": "\x09", "n": "\x0a",
            "v": "\x0b", "f": "\x0c", "r": "\x0d", "e": "\x1b", " ": " ", '"': '"', "/": "/",
            "\\": "\\", "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029"}
_CODES = {"x": 2, "u": 4, "U": 8}


class _Out:
    """The value being rebuilt: characters and, for each, its index in the file text."""

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.origins: list[int] = []

    def add(self, text: str, origin: int, step: int = 0) -> None:
        """``text`` from ``origin`` (``step`` 1: one source character per character)."""
        for k, ch in enumerate(text):
            self.chars.append(ch)
            self.origins.append(origin + k * step)


def _peek(text: str, i: int) -> str:
    return text[i] if i < len(text) else "\0"


def _skip_break(text: str, i: int) -> int:
    """Past the line break at ``i`` (``\\r\\n`` is one break)."""
    return i + 2 if text.startswith("\r\n", i) else i + 1


def value_origins(span: ScalarSpan, value: str) -> list[int] | None:
    """For each character of ``value`` (PyYAML's result), its index in ``span.text``.

    None when the replay does not rebuild ``value`` exactly (then nothing is claimed).  A block
    scalar's final line breaks (its chomping) are not compared: no error points at them.
    """
    text, style = span.text, span.style
    out = _Out()
    try:
        if style is None:
            _plain(text, span.start, span.end, out)
        elif style in ("'", '"'):
            _quoted(text, span.start, span.end, style == '"', out)
        elif style in ("|", ">"):
            _block(text, span.start, style == ">", span.indent, out)
        else:
            return None
    except (IndexError, ValueError):
        return None
    rebuilt = "".join(out.chars)
    if style in ("|", ">"):
        kept = len(value.rstrip("\n"))
        return out.origins[:kept] if rebuilt.rstrip("\n") == value[:kept] else None
    return out.origins if rebuilt == value else None


def offset_position(text: str, index: int) -> Position:
    """The 1-based (line, column) of ``text[index]``."""
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, column


def file_position(span: ScalarSpan | None, value: str, offset: int) -> Position | None:
    """Where ``value[offset]`` is written in the file (``offset == len(value)``: just after the
    value's last character, where "unexpected end of input" points); None when unknown."""
    if span is None or not 0 <= offset <= len(value):
        return None
    origins = value_origins(span, value)
    if not origins:
        return None
    if offset < len(origins):
        return offset_position(span.text, origins[offset])
    return offset_position(span.text, origins[-1] + 1)  # past the end (trailing breaks too)


def _plain(text: str, start: int, end: int, out: _Out) -> None:
    """A plain scalar: runs of text; line breaks (and the next line's indentation) fold."""
    i = start
    while i < end:
        j = i
        while j < end and text[j] not in " \t" + _BREAK:
            j += 1
        out.add(text[i:j], i, 1)
        i = j
        if i >= end:
            break
        j = i
        while j < end and text[j] == " ":
            j += 1
        if _peek(text, j) in _BREAK:
            i = _fold(text, j, out, " ")
        elif j > i:
            out.add(text[i:j], i, 1)
            i = j
        else:  # a tab inside the text: kept as written
            out.add(text[i], i)
            i += 1


def _fold(text: str, i: int, out: _Out, blanks: str) -> int:
    """At a line break: one break becomes a space, n breaks n-1 newlines; the continuation's
    leading ``blanks`` are dropped.  Returns the index of the next content."""
    first = i
    i = _skip_break(text, i)
    breaks: list[int] = []
    while True:
        while _peek(text, i) in blanks:
            i += 1
        if _peek(text, i) in _BREAK and i < len(text):
            breaks.append(i)
            i = _skip_break(text, i)
        else:
            break
    if not breaks:
        out.add(" ", first)
    for b in breaks:
        out.add("\n", b)
    return i


def _quoted(text: str, start: int, end: int, double: bool, out: _Out) -> None:
    """A single- or double-quoted scalar: ``''`` / escapes, and flow folding."""
    i, stop = start + 1, end - 1  # inside the quotes
    while i < stop:
        c = text[i]
        if not double and c == "'" and _peek(text, i + 1) == "'":
            out.add("'", i)
            i += 2
        elif double and c == "\\":
            nxt = text[i + 1]
            if nxt in _ESCAPES:
                out.add(_ESCAPES[nxt], i)
                i += 2
            elif nxt in _CODES:
                width = _CODES[nxt]
                out.add(chr(int(text[i + 2:i + 2 + width], 16)), i)
                i += 2 + width
            elif nxt in _BREAK:  # an escaped line break joins the lines without a space
                i = _skip_break(text, i + 1)
                while True:
                    while _peek(text, i) in " \t":
                        i += 1
                    if _peek(text, i) in _BREAK and i < stop:
                        out.add("\n", i)
                        i = _skip_break(text, i)
                    else:
                        break
            else:
                raise ValueError(f"unknown escape \\{nxt}")
        elif c in " \t":
            j = i
            while text[j] in " \t":
                j += 1
            if text[j] in _BREAK:
                i = _fold(text, j, out, " \t")
            else:
                out.add(text[i:j], i, 1)
                i = j
        elif c in _BREAK:
            i = _fold(text, i, out, " \t")
        else:
            out.add(c, i)
            i += 1


def _block(text: str, start: int, folded: bool, parent_indent: int, out: _Out) -> None:
    """A literal (``|``) or folded (``>``) block scalar, as PyYAML's ``scan_block_scalar``."""
    i = start + 1
    increment = None
    while _peek(text, i) in "+-0123456789":
        if text[i].isdigit():
            increment = int(text[i])
        i += 1
    while _peek(text, i) == " ":
        i += 1
    if _peek(text, i) == "#":
        while _peek(text, i) not in _BREAK + "\0":
            i += 1
    i = _skip_break(text, i)
    min_indent = max(parent_indent + 1, 1)
    column = 0
    breaks: list[int] = []
    if increment is None:
        max_indent = 0
        while _peek(text, i) in " " + _BREAK and i < len(text):
            if text[i] == " ":
                i += 1
                column += 1
                max_indent = max(max_indent, column)
            else:
                breaks.append(i)
                i = _skip_break(text, i)
                column = 0
        indent = max(min_indent, max_indent)
        if column < indent:  # the indentation scan may stop short of the content's column
            return
    else:
        indent = min_indent + increment - 1
        i, column, breaks = _block_breaks(text, i, 0, indent)
    while column == indent and i < len(text):
        for b in breaks:
            out.add("\n", b)
        leading_non_space = _peek(text, i) not in " \t"
        j = i
        while j < len(text) and text[j] not in _BREAK:
            j += 1
        out.add(text[i:j], i, 1)
        line_break = j
        if j >= len(text):
            break
        i, column, breaks = _block_breaks(text, _skip_break(text, j), 0, indent)
        if column == indent and i < len(text):
            if folded and leading_non_space and _peek(text, i) not in " \t":
                if not breaks:
                    out.add(" ", line_break)
            else:
                out.add("\n", line_break)
        else:
            break


def _block_breaks(text: str, i: int, column: int, indent: int) -> tuple[int, int, list[int]]:
    """Empty lines inside a block scalar: ``(next index, its column, the breaks passed)``."""
    breaks: list[int] = []
    while column < indent and _peek(text, i) == " ":
        i += 1
        column += 1
    while _peek(text, i) in _BREAK and i < len(text):
        breaks.append(i)
        i = _skip_break(text, i)
        column = 0
        while column < indent and _peek(text, i) == " ":
            i += 1
            column += 1
    return i, column, breaks
