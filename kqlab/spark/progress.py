"""Spark job progress as a notebook bar or a terminal line, with cancel.

A replay is one Spark job (one task per unit).  :class:`JobWatcher` polls Spark's status
tracker for the job group kqlab runs it under and reports ``(tasks done, tasks total,
tasks failed, seconds)``; :class:`SparkNotebookProgress` draws that as an ipywidgets bar
with a Cancel button (``SparkContext.cancelJobGroup``; over Spark Connect
``spark.interruptTag``, with :class:`ConnectProgress` in place of the watcher),
:class:`SparkTerminalProgress` as a stderr line.  Any callable with that signature works as
``progress=``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

Callback = Callable[[int, int, int, float], None]


class JobWatcher:
    """Polls the tasks of job group ``group`` every ``interval`` seconds while in a ``with``."""

    def __init__(self, spark: Any, group: str, callback: Callback, interval: float = 0.5):
        self.sc = spark.sparkContext
        self.group = group
        self.callback = callback
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kqlab-spark-progress",
                                        daemon=True)
        self._t0 = time.monotonic()
        self.last: tuple[int, int, int] = (0, 0, 0)

    def poll(self) -> tuple[int, int, int]:
        """``(done, total, failed)`` tasks of the group's jobs so far."""
        tracker = self.sc.statusTracker()
        done = total = failed = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is None:
                    continue
                done += stage.numCompletedTasks
                total += stage.numTasks
                failed += stage.numFailedTasks
        return done, total, failed

    def _report(self) -> None:
        try:
            self.last = self.poll()
        except Exception:  # the context is stopping: keep the last figures
            return
        self.callback(*self.last, time.monotonic() - self._t0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._report()

    def __enter__(self) -> JobWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._report()


class ConnectProgress:
    """Spark Connect's progress (``spark.registerProgressHandler``: the server streams each
    stage's task counts with the results) as kqlab's ``(done, total, failed, seconds)`` ticks.

    Connect has no status tracker; its stage figures carry no failed-attempt count, so
    ``failed`` is always 0 here.
    """

    def __init__(self, callback: Callback):
        self.callback = callback
        self._t0 = time.monotonic()
        self.last: tuple[int, int, int] = (0, 0, 0)
        self.ticks = 0

    def __call__(self, stages: Any = None, inflight_tasks: int = 0,
                 operation_id: str | None = None, done: bool = False) -> None:
        stages = list(stages or [])
        if not stages:
            return
        self.last = (sum(s.num_completed_tasks for s in stages),
                     sum(s.num_tasks for s in stages), 0)
        self.ticks += 1
        self.callback(*self.last, time.monotonic() - self._t0)

    def finish(self) -> None:
        """A last tick with the final figures (Connect's last update may come before the
        results are all in)."""
        self.callback(*self.last, time.monotonic() - self._t0)


def format_tasks(done: int, total: int, failed: int, seconds: float) -> str:
    """``"3/8 units replayed, 12.5 s"`` (plus failed task attempts, when any)."""
    text = f"{done}/{total or '?'} units replayed, {seconds:.1f} s"
    return text + (f", {failed} task attempt(s) failed" if failed else "")


class SparkTerminalProgress:
    """One stderr line, rewritten in place on a terminal; elsewhere (a log, a pipe) only the
    final count is written."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.calls = 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._final: str | None = None

    def __call__(self, done: int, total: int, failed: int, seconds: float) -> None:
        text = "  spark: " + format_tasks(done, total, failed, seconds)
        if self.tty:
            self.calls += 1
            self.stream.write("\r" + text + " ")
            self.stream.flush()
        else:
            self._final = text

    def close(self) -> None:
        if not self.tty and self._final is not None:
            self.stream.write(self._final + "\n")
            self.stream.flush()
            self._final = None
            return
        if self.calls:
            self.stream.write("\n")
            self.stream.flush()


class SparkNotebookProgress:
    """An ipywidgets bar, label and Cancel button for a Spark replay (display ``.widget``)."""

    def __init__(self, spark: Any = None, description: str = "replay"):
        try:
            import ipywidgets as w
        except ImportError as exc:
            raise ImportError("SparkNotebookProgress needs ipywidgets: pip install "
                              "'kqlab[lab]'") from exc
        self.spark = spark
        self.group: str | None = None
        self.bar = w.IntProgress(value=0, min=0, max=1, description=description)
        self.label = w.HTML("waiting for Spark")
        self.button = w.Button(description="Cancel", button_style="warning")
        self.button.on_click(self._on_cancel)
        self.widget = w.VBox([w.HBox([self.bar, self.button]), self.label])
        self.last: tuple[int, int, int, float] | None = None
        self.cancelled = False

    def _on_cancel(self, _button: Any = None) -> None:
        self.cancel()

    def cancel(self) -> None:
        """Cancel the running replay (its job group) if there is one."""
        self.cancelled = True
        if self.spark is not None and self.group is not None:
            from kqlab.spark.engine import is_connect

            if is_connect(self.spark):  # Connect: the replay's operations carry its tag
                self.spark.interruptTag(self.group)
            else:
                self.spark.sparkContext.cancelJobGroup(self.group)
        self.button.disabled = True

    def __call__(self, done: int, total: int, failed: int, seconds: float) -> None:
        self.last = (done, total, failed, seconds)
        self.bar.max = max(total, 1)
        self.bar.value = min(done, self.bar.max)
        self.label.value = format_tasks(done, total, failed, seconds)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
