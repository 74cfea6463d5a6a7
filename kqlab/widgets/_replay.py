"""``ReplayPanel``: pick a source (segments, log directory or snapshot) and an engine (local or
Spark), run the replay with a progress bar, cancel it.

The button runs the replay on a background thread so the notebook stays usable and *Cancel*
can act; :meth:`ReplayPanel.run` (what the button calls, with ``wait=True`` by default) is the
synchronous Python twin.  A local replay is cancelled between its phases (reading the sample,
evaluating the rules, the broker pass); a Spark replay through its job group.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ipywidgets as w

from kqlab.errors import KqlabError
from kqlab.widgets._common import css, error_html

ENGINES = ("local", "spark")
CUSTOM = "(path below)"


class ReplayCancelled(KqlabError):
    """The replay was cancelled before it finished (its partial result is dropped)."""


class ReplayPanel:
    """Choose a source and an engine, run, watch the progress, cancel.

    Parameters
    ----------
    policy
        The policy to replay (the workbench passes the editor's current one).
    sources
        Named sources offered in the dropdown (name -> path or table); any path can also be
        typed in.
    now
        The replay clock (epoch ms; default: wall clock at each run).
    master
        The Spark master for the ``spark`` engine (default ``local[2]``).
    on_result
        Called with the panel after every successful run.
    """

    def __init__(self, policy: Any = None, sources: Mapping[str, Any] | None = None, *,
                 now: int | None = None, master: str = "local[2]",
                 on_result: Callable[[ReplayPanel], Any] | None = None):
        self.policy = policy
        self.sources = dict(sources or {})
        self.now = now
        self.master = master
        self.verdicts: Any = None
        self.replayer: Any = None  # the local engine's Replayer (kept for incremental edits)
        self.seconds: float | None = None
        self.state = "idle"  # idle | running | done | cancelled | failed
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._job_progress: Any = None
        self._listeners = [on_result] if on_result else []
        options = [*self.sources, CUSTOM]
        self.source = css(w.Dropdown(options=options, value=options[0], description="source"),
                          "source")
        self.path = w.Text(description="path", placeholder="segment file, log dir or snapshot")
        self.engine = css(w.ToggleButtons(options=list(ENGINES), value="local",
                                          description="engine"), "engine")
        self.run_button = css(w.Button(description="Replay", button_style="primary",
                                       icon="play"), "run")
        self.cancel_button = css(w.Button(description="Cancel", icon="stop", disabled=True),
                                 "cancel")
        self.progress = css(w.IntProgress(value=0, min=0, max=3, description="progress"),
                            "progress")
        self.status = w.HTML("")
        self.error = css(w.HTML(""), "error")
        self.run_button.on_click(lambda _b: self._start())
        self.cancel_button.on_click(lambda _b: self.cancel())
        self.widget = css(w.VBox([w.HBox([self.source, self.path]), self.engine,
                                  w.HBox([self.run_button, self.cancel_button, self.progress]),
                                  self.status, self.error]), "replay_panel")

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def on_result(self, callback: Callable[[ReplayPanel], Any]) -> None:
        """Call ``callback(panel)`` after every successful run."""
        self._listeners.append(callback)

    @property
    def current_source(self) -> Any:
        """What the controls point at: the chosen named source, or the typed path."""
        if self.source.value == CUSTOM:
            if not self.path.value.strip():
                raise KqlabError("type a path (segment file, log directory or snapshot folder)")
            return self.path.value.strip()
        return self.sources[self.source.value]

    # -- the Python twins --------------------------------------------------------------------
    def run(self, source: Any = None, *, engine: str | None = None, policy: Any = None,
            wait: bool = True) -> Any:
        """Replay ``source`` (default: the controls' choice) on ``engine``; returns the
        verdicts (``wait=False``: starts a thread and returns it)."""
        if source is not None:
            self._choose(source)
        if engine is not None:
            self.engine.value = engine
        if policy is not None:
            self.policy = policy
        if not wait:
            return self._start()
        return self._run()

    def _choose(self, source: Any) -> None:
        """Point the controls at ``source``: a named source, a path, or anything else
        (a table, a sample) added to the dropdown as ``given``."""
        if isinstance(source, str) and source in self.sources:
            self.source.value = source
        elif isinstance(source, str | Path):
            self.source.value = CUSTOM
            self.path.value = str(source)
        else:
            self.sources["given"] = source
            self.source.options = [*self.sources, CUSTOM]
            self.source.value = "given"

    def cancel(self) -> None:
        """Stop the running replay (the *Cancel* button)."""
        self._cancel.set()
        if self._job_progress is not None:
            self._job_progress.cancel()
        self.status.value = "cancelling…"

    def wait(self, timeout: float | None = None) -> Any:
        """Wait for a background run; returns its verdicts (None if cancelled or failed)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.verdicts if self.state == "done" else None

    # -- internals ----------------------------------------------------------------------------
    def _start(self) -> threading.Thread:
        if self._thread is not None and self._thread.is_alive():
            raise KqlabError("a replay is already running")
        self._thread = threading.Thread(target=self._run, kwargs={"swallow": True},
                                        name="kqlab-replay", daemon=True)
        self._thread.start()
        return self._thread

    def _step(self, value: int, text: str) -> None:
        if self._cancel.is_set():
            raise ReplayCancelled("replay cancelled")
        self.progress.value = value
        self.status.value = html.escape(text)

    def _run(self, swallow: bool = False) -> Any:
        if self.policy is None:
            raise KqlabError("the panel has no policy to replay")
        self._cancel.clear()
        self.state = "running"
        self.error.value = ""
        self.run_button.disabled, self.cancel_button.disabled = True, False
        t0 = time.perf_counter()
        try:
            source = self.current_source
            now = self.now if self.now is not None else int(time.time() * 1000)
            if self.engine.value == "spark":
                verdicts = self._run_spark(source, now)
            else:
                verdicts = self._run_local(source, now)
        except (KqlabError, OSError) as exc:
            cancelled = isinstance(exc, ReplayCancelled) or self._cancel.is_set()
            self.state = "cancelled" if cancelled else "failed"
            self.status.value = "cancelled" if cancelled else ""
            if not cancelled:
                self.error.value = error_html(str(exc))
            if swallow:
                return None
            raise
        finally:
            self.run_button.disabled, self.cancel_button.disabled = False, True
            self._job_progress = None
        self.seconds = time.perf_counter() - t0
        self.verdicts = verdicts
        self.state = "done"
        o = verdicts.by_outcome()
        self.status.value = (f"{self.engine.value}: {sum(o.values()):,} records in "
                             f"{self.seconds:.2f} s — " +
                             ", ".join(f"{k} {v:,}" for k, v in o.items()))
        for callback in self._listeners:
            callback(self)
        return verdicts

    def _run_local(self, source: Any, now: int) -> Any:
        from kqlab.validate.replayer import Replayer, with_implicit_rules

        self.progress.max = 3
        self._step(0, "reading the sample…")
        replayer = Replayer(source, now=now)
        self._step(1, f"evaluating {len(self.policy.rules)} rules…")
        replayer.evaluate(with_implicit_rules(self.policy))  # cached: run() reuses it
        self._step(2, "broker checks and verdicts…")
        verdicts = replayer.run(self.policy)
        self._step(3, "done")
        self.replayer = replayer
        return verdicts

    def _run_spark(self, source: Any, now: int) -> Any:
        from kqlab.spark import replay_spark
        from kqlab.spark.progress import SparkNotebookProgress

        progress = SparkNotebookProgress(description="spark")
        # the panel's own bar follows the tasks: the Spark widget stays an implementation detail
        bar = self.progress

        def report(done: int, total: int, failed: int, seconds: float) -> None:
            progress(done, total, failed, seconds)
            bar.max = max(total, 1)
            bar.value = min(done, bar.max)
            self.status.value = html.escape(progress.label.value)

        self._job_progress = progress
        self._step(0, "starting Spark…")
        verdicts = replay_spark(source, self.policy, master=self.master, now=now,
                                progress=_Progress(progress, report))
        if progress.cancelled:
            raise ReplayCancelled("replay cancelled")
        self.replayer = None
        return verdicts


class _Progress:
    """The Spark engine's progress hook: forwards ticks to the panel and lets the engine set
    ``spark``/``group`` on the :class:`SparkNotebookProgress` that can cancel the job group."""

    def __init__(self, inner: Any, report: Callable[[int, int, int, float], None]):
        self._inner = inner
        self._report = report

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._inner, name, value)

    def __call__(self, done: int, total: int, failed: int, seconds: float) -> None:
        self._report(done, total, failed, seconds)
