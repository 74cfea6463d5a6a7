"""``ReplayPanel``: pick a source (segments, log directory or snapshot) and an engine (local or
Spark), run the replay with a progress bar, cancel it.

The panel is a view of an :class:`~kqlab.authoring.AuthoringSession`: *Replay* replays the
session's policy — as edited, never a copy taken when the panel was made — and the status
line is the session's, so after an edit it shows the edited verdicts, not the last run's.
The button runs the replay on a background thread so the notebook stays usable and *Cancel*
can act; :meth:`ReplayPanel.run` (what the button calls, with ``wait=True`` by default) is the
synchronous Python twin.  A local replay is cancelled between its phases (reading the sample,
evaluating the rules, the broker pass); a Spark replay through its job group.  A cancelled
replay changes nothing in the session.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from kqlab.authoring import AuthoringSession
from kqlab.authoring.session import ENGINES
from kqlab.errors import KqlabError
from kqlab.widgets._common import css, error_html

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.authoring import SessionChange
    from kqlab.policy.model import Policy

CUSTOM = "(path below)"

__all__ = ["CUSTOM", "ENGINES", "ReplayCancelled", "ReplayPanel"]


class ReplayCancelled(KqlabError):
    """The replay was cancelled before it finished (its partial result is dropped)."""


class ReplayPanel:
    """Choose a source and an engine, run, watch the progress, cancel.

    Parameters
    ----------
    policy
        The session to replay for, or the policy to start one from.
    sources
        Named sources offered in the dropdown (name -> path or table); any path can also be
        typed in.
    now
        The replay clock (epoch ms) of a session started here (default: the sample's own).
    master
        The Spark master for the ``spark`` engine (default ``local[2]``).
    spark, remote, ship_env, spark_out
        Where else the ``spark`` engine runs: a SparkSession of yours (a cluster's, or a
        Spark Connect one), or ``remote`` (``sc://host:port``) for a Spark Connect session
        opened on the first Spark replay, with ``ship_env`` (a packed kqlab environment,
        :func:`kqlab.spark.ship.pack_environment`) shipped to its executors; ``spark_out``
        a folder the driver and every executor reach (required on a cluster), each run's
        verdicts in a subfolder.
    on_result
        Called with the panel after every successful run.
    """

    def __init__(self, policy: Policy | AuthoringSession | None = None,
                 sources: Mapping[str, Any] | None = None, *, now: int | None = None,
                 master: str = "local[2]",
                 on_result: Callable[[ReplayPanel], Any] | None = None,
                 spark: Any = None, remote: str | None = None, ship_env: str | None = None,
                 spark_out: str | None = None):
        self.session: AuthoringSession | None = None
        self.sources = dict(sources or {})
        self.master = master
        self.spark = spark
        self._remote = (remote, ship_env)
        self.spark_out = spark_out
        self.seconds: float | None = None
        self.state = "idle"  # idle | running | done | cancelled | failed
        self._now = now
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
        self.status = css(w.HTML(""), "status")
        self.clock = css(w.HTML(""), "clock")
        self.warning = css(w.HTML(""), "warning")
        self.error = css(w.HTML(""), "error")
        self.run_button.on_click(lambda _b: self._start())
        self.cancel_button.on_click(lambda _b: self.cancel())
        self.widget = css(w.VBox([w.HBox([self.source, self.path]), self.engine,
                                  w.HBox([self.run_button, self.cancel_button, self.progress]),
                                  self.status, self.clock, self.warning, self.error]),
                          "replay_panel")
        if isinstance(policy, AuthoringSession):
            self._attach(policy)
        elif policy is not None:
            self._attach(AuthoringSession(policy, now=now))

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def on_result(self, callback: Callable[[ReplayPanel], Any]) -> None:
        """Call ``callback(panel)`` after every successful run."""
        self._listeners.append(callback)

    # -- the session's state, as the panel shows it ------------------------------------------
    def _attach(self, session: AuthoringSession) -> None:
        self.session = session
        session.observe(self._on_change)

    @property
    def policy(self) -> Policy | None:
        """The policy *Replay* replays: the session's current one."""
        return self.session.policy if self.session is not None else None

    @policy.setter
    def policy(self, policy: Policy) -> None:
        if self.session is None:
            self._attach(AuthoringSession(policy, now=self._now))
        elif policy != self.session.policy:
            self.session.set_policy(policy)

    @property
    def now(self) -> int | None:
        """The clock given for replays (None: the sample's own)."""
        return self.session.now if self.session is not None else self._now

    @property
    def verdicts(self) -> Any:
        """The session's current verdicts (None before a replay)."""
        return self.session.verdicts if self.session is not None else None

    @property
    def replayer(self) -> Any:
        """The local sample the current verdicts were judged on (None after a Spark run:
        its verdicts are Spark's, whatever sample is kept for edits)."""
        return self.session.view_sample if self.session is not None else None

    @property
    def current_source(self) -> Any:
        """What the controls point at: the chosen named source, or the typed path."""
        if self.source.value == CUSTOM:
            if not self.path.value.strip():
                raise KqlabError("type a path (segment file, log directory or snapshot folder)")
            return self.path.value.strip()
        return self.sources[self.source.value]

    def _on_change(self, change: SessionChange) -> None:
        """Every change of the verdicts rewrites the status: it is never the last run's
        line under an edited policy."""
        s = change.session
        if "verdicts" in change or "sample" in change:
            self.status.value = html.escape(s.status())
            self.clock.value = html.escape(s.clock_text())
            self.warning.value = error_html(" ".join(s.warnings))

    # -- the Python twins --------------------------------------------------------------------
    def run(self, source: Any = None, *, engine: str | None = None, policy: Any = None,
            wait: bool = True) -> Any:
        """Replay ``source`` (default: the controls' choice) on ``engine`` with the session's
        policy (``policy``: make that the session's first); returns the verdicts
        (``wait=False``: starts a thread and returns it)."""
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
        """Show a phase, or stop here when *Cancel* was pressed."""
        cancelled = self._cancel.is_set() or bool(
            self._job_progress is not None and getattr(self._job_progress, "cancelled", False))
        if cancelled:
            raise ReplayCancelled("replay cancelled")
        self.progress.value = value
        self.status.value = html.escape(text)

    def _phase(self, phase: int, phases: int, text: str) -> None:
        """The session's phase hook: local phases move the bar; Spark moves it itself."""
        if phases:
            self.progress.max = phases
            self._step(phase, text)
        else:
            self._step(self.progress.value, text)

    def _run(self, swallow: bool = False) -> Any:
        if self.session is None:
            raise KqlabError("the panel has no policy to replay")
        self._cancel.clear()
        self.state = "running"
        self.error.value = ""
        self.run_button.disabled, self.cancel_button.disabled = True, False
        t0 = time.perf_counter()
        try:
            source = self.current_source
            if self.engine.value == "spark":
                verdicts = self._run_spark(source)
            else:
                verdicts = self.session.replay(source, engine="local", step=self._phase)
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
        self.state = "done"
        for callback in self._listeners:
            callback(self)
        return verdicts

    def _run_spark(self, source: Any) -> Any:
        from kqlab.spark.progress import SparkNotebookProgress

        assert self.session is not None
        progress = SparkNotebookProgress(description="spark")
        # the panel's own bar follows the tasks: the Spark widget stays an implementation detail
        bar = self.progress
        bar.value = 0

        def report(done: int, total: int, failed: int, seconds: float) -> None:
            progress(done, total, failed, seconds)
            bar.max = max(total, 1)
            bar.value = min(done, bar.max)
            self.status.value = html.escape(progress.label.value)

        self._job_progress = progress
        remote, ship_env = self._remote
        if self.spark is None and remote is not None:  # opened once, kept for edits
            from kqlab.spark.session import connect_session

            self.spark = connect_session(remote, ship_env)
        progress.spark = self.spark
        return self.session.replay(source, engine="spark", master=self.master,
                                   progress=_Progress(progress, report), step=self._phase,
                                   spark=self.spark, out=self.spark_out)


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
