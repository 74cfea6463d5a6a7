"""Output for people: tables, colour and progress, drawn with ``rich`` on a terminal.

The rules the commands keep (``--json`` output never comes through here):

* **tables for people** — :func:`table` and :func:`show` render rows as aligned columns; the
  cells are text as given (no markup: a ``[`` in a message is printed, not parsed);
* **colour only for a terminal** — :func:`console` draws colour when its stream is a TTY and
  ``NO_COLOR`` is unset or empty (https://no-color.org); otherwise plain text, which CI logs
  and ``grep`` read as they are.  Off a terminal, lines are never re-wrapped (a long message
  stays one line) and tables get :data:`PIPE_WIDTH` columns unless ``COLUMNS`` says otherwise;
* **progress on stderr** — :class:`Progress` shows a bar (work of known size) or a spinner
  with the elapsed time (one long step) while a command works, on stderr so stdout keeps the
  command's output; it draws nothing when stderr is not a terminal (CI logs stay clean) and
  clears itself when done.

``rich`` is imported when a command first prints for people, never by ``import kqlab`` or
``kqlab --help``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["PIPE_WIDTH", "Progress", "color_enabled", "console", "progress", "show", "styled",
           "table"]

#: table width when stdout is not a terminal (and ``COLUMNS`` is not set)
PIPE_WIDTH = 160
#: the style of each outcome and verdict word (used only when colour is on)
STYLES = {"accepted": "green", "rejected": "bold red", "collateral": "yellow",
          "undetermined": "magenta", "ok": "green", "FAIL": "bold red", "error": "red",
          "warning": "yellow", "note": "cyan", "dim": "dim"}


def is_terminal(stream: TextIO) -> bool:
    """True when ``stream`` is an interactive terminal."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def color_enabled(stream: TextIO) -> bool:
    """Colour for ``stream``: a terminal, ``NO_COLOR`` unset or empty, ``TERM`` not ``dumb``."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    return is_terminal(stream)


def console(stream: TextIO | None = None) -> Console:
    """A rich console on ``stream`` (default: the current ``sys.stdout``), colour per
    :func:`color_enabled`, no markup, emoji or highlighting of the text it is given."""
    from rich.console import Console

    stream = stream if stream is not None else sys.stdout
    tty = is_terminal(stream)
    color = color_enabled(stream)
    width = None if tty else int(os.environ.get("COLUMNS") or PIPE_WIDTH)
    return Console(file=stream, force_terminal=tty and color, no_color=not color,
                   color_system="auto" if color else None, width=width, markup=False,
                   emoji=False, highlight=False, soft_wrap=True, force_jupyter=False)


def styled(text: str, style: str | None) -> Any:
    """``text`` with a style (a :data:`STYLES` key or a rich style), as a rich ``Text``."""
    from rich.text import Text

    return Text(text, style=STYLES.get(style or "", style or ""))


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None,
          right: Sequence[str] = ()) -> Table:
    """A table of ``rows`` under ``columns``; columns named in ``right`` are right-aligned
    (numbers).  Cells may be strings, numbers or :func:`styled` texts."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold",
              title_style="bold", show_edge=False, pad_edge=False)
    for name in columns:
        t.add_column(name, justify="right" if name in right else "left", overflow="fold")
    for row in rows:
        t.add_row(*(c if isinstance(c, Text) else Text(_cell(c)) for c in row))
    return t


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}"
    return str(value)


def show(*renderables: Any, out: Console | None = None) -> None:
    """Print tables or texts for people on stdout (or ``out``)."""
    c = out or console()
    for r in renderables:
        c.print(r)


class Progress:
    """Progress of one command on stderr: :meth:`step` starts a stage — a bar when its
    ``total`` is known (:meth:`advance` it), a spinner with the elapsed time otherwise — and
    ends the previous one.  Does nothing when disabled (stderr not a terminal)."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self._stream = stream
        self._live: Any = None
        self._task: Any = None
        #: the stages started, in order (what the command did; tests read it)
        self.steps: list[str] = []

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as RichProgress

            class _Count(MofNCompleteColumn):
                """``3/7`` for a stage of known size; nothing for a spinner stage or one
                whose units are not worth counting (bytes: its text says what it did)."""

                def render(self, task: Any) -> Any:
                    return super().render(task) if task.total is not None and \
                        task.fields.get("count", True) else ""

            self._live = RichProgress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                _Count(), TimeElapsedColumn(),
                console=console(self._stream if self._stream is not None else sys.stderr),
                transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None

    def step(self, description: str, total: int | None = None, *, count: bool = True) -> None:
        """Start the stage ``description`` (``total`` units of work, or unknown); ``count``
        False draws the bar without its ``done/total`` numbers."""
        self.steps.append(description)
        if self._live is None:
            return
        if self._task is not None:
            self._live.update(self._task, visible=False)
        self._task = self._live.add_task(description, total=total, count=count)

    def advance(self, n: int = 1, *, description: str | None = None) -> None:
        """``n`` more units of the current stage done (and, optionally, a new label)."""
        if self._live is not None and self._task is not None:
            self._live.update(self._task, advance=n,
                              **({"description": description} if description else {}))

    def update(self, *, completed: int | None = None, total: int | None = None,
               description: str | None = None) -> None:
        """Set the current stage's position, size or label."""
        if self._live is not None and self._task is not None:
            fields = {k: v for k, v in (("completed", completed), ("total", total),
                                        ("description", description)) if v is not None}
            self._live.update(self._task, **fields)


def progress_enabled() -> bool:
    """Progress is drawn when stderr is a terminal."""
    return is_terminal(sys.stderr)


@contextmanager
def progress() -> Iterator[Progress]:
    """A :class:`Progress` for the running command (enabled per :func:`progress_enabled`)."""
    with Progress(progress_enabled()) as p:
        yield p
