"""The one exception a malformed policy raises: :class:`PolicyError`, naming file, line and key.

"Your policy is wrong" is a load-time error, kept apart from "your data is wrong" (verdicts,
never exceptions).  Every malformation — YAML syntax, unknown keys, wrong types, bad rule
parameters, invalid broker configs — becomes a ``PolicyError`` whose message reads like a
compiler's::

    orders.yaml:14: rules[2].min: expected a number, got 'ten' — write min: 10
    orders.yaml:21:24: rules[3].expr: value.currency is a string but 5 is an int: ...

(the column is shown when it points inside a value: a CEL expression, a pattern, a field path).
"""

from __future__ import annotations

from kqlab.errors import KqlabError


class PolicyError(KqlabError, ValueError):
    """A policy file (or dict) is malformed; the message says where and what to write instead.

    Attributes
    ----------
    file : str
        The file name (or ``"<string>"`` / ``"<dict>"``) the policy came from.
    line, column : int or None
        1-based position of the offending key or value, when known.
    inside : bool
        True when ``column`` points *inside* a value — the character of a CEL expression or a
        regular expression where the problem is — rather than at the start of a key or value;
        the message then shows it, as compilers do: ``orders.yaml:12:24: rules[1].expr: ...``.
    key : str or None
        Dotted path of the offending key, e.g. ``rules[2].min`` or
        ``broker.configs.cleanup.polcy``; None for file-level problems (YAML syntax).
    reason : str
        What is wrong and, after " — ", what to do about it.

    Examples
    --------
    >>> err = PolicyError("expected a number, got 'ten' — write min: 10", file="orders.yaml",
    ...                   line=14, key="rules[2].min")
    >>> str(err)
    "orders.yaml:14: rules[2].min: expected a number, got 'ten' — write min: 10"
    """

    def __init__(self, reason: str, *, file: str = "<string>", line: int | None = None,
                 column: int | None = None, key: str | None = None,
                 inside: bool = False) -> None:
        self.reason = reason
        self.file = file
        self.line = line
        self.column = column
        self.key = key
        self.inside = inside and line is not None and column is not None
        super().__init__(self.render())

    def render(self) -> str:
        """``file:line: key: reason`` (line and key left out when unknown), or
        ``file:line:column: key: reason`` when the column points inside a value."""
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.inside:
            where += f":{self.column}"
        key = f" {self.key}:" if self.key else ""
        return f"{where}:{key} {self.reason}"

    def __str__(self) -> str:
        return self.render()

    def __reduce__(self):  # pickles across process boundaries (Spark executors)
        return (_rebuild, (self.reason, self.file, self.line, self.column, self.key,
                           self.inside))


def _rebuild(reason: str, file: str, line: int | None, column: int | None,
             key: str | None, inside: bool = False) -> PolicyError:
    return PolicyError(reason, file=file, line=line, column=column, key=key, inside=inside)
