"""Progress displays for :func:`kqlab.sources.kafka.sample` and
:func:`kqlab.sources.kafka_snapshot.sample_to_snapshot`.

Both classes are callables with the ``progress(records, bytes, partitions_done,
records_per_s)`` signature (:data:`Progress`), so they can be passed as ``progress=``
directly:

* :class:`NotebookProgress` — an ipywidgets ``IntProgress`` bar, an ``HTML`` label (records,
  MB, partitions done, rate) and a **Cancel** button that sets :attr:`cancel_event`, to be
  passed as ``cancel=``::

      p = NotebookProgress(total_partitions=3)
      display(p)
      sample(bootstrap, "orders", progress=p, cancel=p.cancel_event)

  ipywidgets (the ``kqlab[lab]`` extra) is imported only when a ``NotebookProgress`` is made.
  Sampling blocks the cell, so the Cancel click is only delivered while the kernel handles
  comm messages: run the sample in a thread (``threading.Thread(target=...)``) to cancel
  from the button while it runs.

* :class:`TerminalProgress` — one stderr line rewritten in place (``\\r``), for the CLI.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO, TypeAlias

if TYPE_CHECKING:
    from ipywidgets import Button

#: a sampling progress callback: ``progress(records, bytes, partitions_done, records_per_s)``
Progress: TypeAlias = Callable[[int, int, int, float], None]


def format_progress(records: int, nbytes: int, partitions_done: int, rate: float,
                    total_partitions: int | None = None) -> str:
    """``"12,345 records, 2.5 MB, 1/3 partitions done, 40,000 records/s"``."""
    parts = f"{partitions_done}/{total_partitions}" if total_partitions else f"{partitions_done}"
    return (f"{records:,} records, {nbytes / 1e6:.1f} MB, {parts} partition(s) done, "
            f"{rate:,.0f} records/s")


def _widgets() -> ModuleType:
    """ipywidgets, imported when a notebook display is made (``import kqlab`` stays light)."""
    try:
        import ipywidgets
    except ImportError as exc:
        raise ImportError("NotebookProgress needs ipywidgets: install the lab extra, "
                          "pip install 'kqlab[lab]'") from exc
    return ipywidgets


class NotebookProgress:
    """A progress bar + label + Cancel button for a notebook (see the module doc).

    ``total_records`` (when known, e.g. from :func:`~kqlab.sources.kafka.resolve_ranges`) makes
    the bar count records; otherwise, with ``total_partitions``, it counts finished partitions.
    Attributes: :attr:`bar` (``IntProgress``), :attr:`label` (``HTML``), :attr:`button`
    (``Button``), :attr:`widget` (the ``VBox`` to display), :attr:`cancel_event`, and
    :attr:`last` (the last ``(records, bytes, partitions_done, rate)``).
    """

    def __init__(self, *, total_records: int | None = None,
                 total_partitions: int | None = None, description: str = "sampling",
                 cancel_event: threading.Event | None = None):
        w = _widgets()
        self.total_records = total_records
        self.total_partitions = total_partitions
        self.cancel_event = cancel_event if cancel_event is not None else threading.Event()
        self.calls = 0
        self.last: tuple[int, int, int, float] | None = None
        maximum = total_records or total_partitions or 1
        self.bar = w.IntProgress(value=0, min=0, max=max(int(maximum), 1),
                                 description=description, bar_style="info")
        self.label = w.HTML(value="waiting for the first records…")
        self.button = w.Button(description="Cancel", button_style="warning", icon="stop",
                               tooltip="stop sampling (what was read so far is kept)")
        self.button.on_click(self._on_cancel)
        self.widget = w.VBox([w.HBox([self.bar, self.button]), self.label])

    def _on_cancel(self, _button: Button | None = None) -> None:
        self.cancel_event.set()
        self.button.disabled = True
        self.button.description = "Cancelling…"

    def cancel(self) -> None:
        """The same as clicking the Cancel button."""
        self._on_cancel()

    def __call__(self, records: int, nbytes: int, partitions_done: int, rate: float) -> None:
        self.calls += 1
        self.last = (records, nbytes, partitions_done, rate)
        if self.total_records:
            self.bar.value = min(int(records), self.bar.max)
        elif self.total_partitions:
            self.bar.value = min(int(partitions_done), self.bar.max)
        self.label.value = format_progress(records, nbytes, partitions_done, rate,
                                           self.total_partitions)

    def finish(self, *, cancelled: bool | None = None) -> None:
        """Mark the run as over: green when it completed, orange when it was cancelled."""
        cancelled = self.cancel_event.is_set() if cancelled is None else cancelled
        self.bar.bar_style = "warning" if cancelled else "success"
        if not cancelled:
            self.bar.value = self.bar.max
        self.button.disabled = True
        self.label.value += " — cancelled" if cancelled else " — done"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        bundle: dict[str, Any] | None = self.widget._repr_mimebundle_(**kwargs)
        return bundle


class TerminalProgress:
    """One progress line on ``stream`` (stderr), rewritten in place at most every
    ``min_interval_s`` (the final call of a run always shows).  Call :meth:`close` at the end
    to move to a new line.  :attr:`cancel_event` exists for symmetry with
    :class:`NotebookProgress` (the CLI cancels with Ctrl-C)."""

    def __init__(self, stream: TextIO | None = None, *, total_partitions: int | None = None,
                 min_interval_s: float = 0.1, prefix: str = "  "):
        self.stream = stream if stream is not None else sys.stderr
        self.total_partitions = total_partitions
        self.min_interval_s = min_interval_s
        self.prefix = prefix
        self.cancel_event = threading.Event()
        self._last_t = 0.0
        self._width = 0
        self._pending: str | None = None

    def __call__(self, records: int, nbytes: int, partitions_done: int, rate: float) -> None:
        line = self.prefix + format_progress(records, nbytes, partitions_done, rate,
                                             self.total_partitions)
        now = time.monotonic()
        final = self.total_partitions is not None and partitions_done >= self.total_partitions
        if not final and now - self._last_t < self.min_interval_s:
            self._pending = line
            return
        self._write(line)
        self._last_t = now

    def _write(self, line: str) -> None:
        pad = " " * max(self._width - len(line), 0)
        self.stream.write("\r" + line + pad)
        self.stream.flush()
        self._width = len(line)
        self._pending = None

    def close(self) -> None:
        """Show the last pending update and end the line."""
        if self._pending is not None:
            self._write(self._pending)
        if self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
