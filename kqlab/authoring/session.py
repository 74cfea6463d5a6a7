"""``AuthoringSession``: the one source of truth of a policy being authored against a sample.

A workbench shows one policy through several views — the rule list with live counts, the
replay panel's outcome line, the rejection explorer, the figures, the golden examples — and
they must never disagree.  Before this object each widget kept its own copy (the panel
replayed the policy as *loaded* while the editor showed it as *edited*; the Spark path showed
the unedited verdicts; a stale status line survived an edit).  Now the session holds:

* the **policy** (always valid: every edit is checked as if loaded from YAML, and new or
  changed rules also against the sample's decoded columns, :mod:`kqlab.authoring
  .sample_checks`) with an **edit history** (:meth:`undo` / :meth:`redo`);
* the **sample**: a :class:`~kqlab.validate.Replayer`, which caches decoded columns and rule
  results, so an edit re-evaluates only the rule that changed;
* the current **verdicts** (a :class:`~kqlab.validate.view.VerdictsView`: the local engine's,
  or Spark's after a Spark replay) and the previous ones (the impact figure's base);
* the **suggestions** for the sample (:mod:`kqlab.validate.rule_suggestion`) and the policy's
  **golden examples** run through the validator (:mod:`kqlab.validate.golden`);
* the **clock**: given, or the sample's own (:func:`kqlab.validate.replayer.sample_clock`),
  and a warning when the timestamp bounds reject most of the sample;
* the **colours**: one per rule for the session's life (:attr:`AuthoringSession.colors`, a
  :class:`~kqlab.viz.RuleColors` every figure of the views is drawn with), so an edit or a
  replay never repaints the rules it did not touch.

Views subscribe with :meth:`observe` (a plain observer list, no traitlets) and act only
through the session's methods; every number they show is read from the session's current
verdicts, so they cannot disagree.  Nothing here imports a widget toolkit: notebooks, the CLI
and tests drive a session directly.

Examples
--------
>>> import tempfile
>>> from kqlab.policy import loads_policy
>>> from kqlab.sources.demo import write_demo_segment
>>> folder = write_demo_segment(tempfile.mkdtemp(), 1763700000000)
>>> policy = loads_policy("kqlab: 1\\nname: p\\nrules: "
...                       "[{id: trace, kind: header_required, name: trace-id}]")
>>> session = AuthoringSession(policy, folder)  # no clock given: the sample's own
>>> session.clock_source, session.outcomes
('sample', {'accepted': 323, 'rejected': 25, 'collateral': 4})
>>> seen = []
>>> _ = session.observe(lambda change: seen.append((change.action, sorted(change.changed))))
>>> session.update_rule("trace", mode="observe").by_outcome()
{'accepted': 329, 'rejected': 23, 'collateral': 0}
>>> seen
[('edit', ['error', 'examples', 'policy', 'verdicts'])]
>>> _ = session.undo()
>>> session.policy.rule("trace").mode, session.outcomes["rejected"]
('reject', 25)
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kqlab.authoring.check_edits import changed_check, make_check
from kqlab.authoring.policy_edits import EditError, changed_rule, check_policy, make_rule
from kqlab.errors import KqlabError
from kqlab.policy.message_params import StaleLiteral, stale_literals
from kqlab.policy.model import ENFORCEMENT_PROFILES, Check, Policy, Rule
from kqlab.viz._style import RuleColors

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from kqlab.policy.expression_checks import ExpressionProblem
    from kqlab.policy.value_shapes import Shape
    from kqlab.validate.golden import ExamplesReport
    from kqlab.validate.replayer import Replayer
    from kqlab.validate.suggestions import Suggestions
    from kqlab.validate.view import VerdictsView

__all__ = ["ASPECTS", "ENGINES", "AuthoringSession", "RunInfo", "SessionChange",
           "SessionError"]

ENGINES = ("local", "spark")
#: what a :class:`SessionChange` may report as changed
ASPECTS = ("policy", "sample", "verdicts", "suggestions", "examples", "error")


class SessionError(KqlabError):
    """The session cannot do what was asked (no sample loaded, an unknown engine...)."""


@dataclass(frozen=True, slots=True)
class SessionChange:
    """One change of a session, as its observers receive it: what was done (``action``:
    ``replay``, ``edit``, ``undo``, ``redo``, ``suggest``, ``examples``, ``error``) and which
    of :data:`ASPECTS` changed."""

    session: AuthoringSession
    action: str
    changed: frozenset[str]

    def __contains__(self, aspect: object) -> bool:
        return aspect in self.changed


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The last full replay: which engine, what source, how long it took."""

    engine: str
    source: Any
    seconds: float
    master: str | None = None
    #: the SparkSession given for the run (a Connect one, say); edits re-run on it
    spark: Any = field(default=None, repr=False, compare=False)
    #: the folder whose subfolders hold each Spark run's verdicts (None: temporary ones)
    out: str | None = None


#: a replay's phase hook: ``step(phase, phases, text)``; ``phases`` 0 means the engine reports
#: its own progress (Spark).  It may raise to cancel: nothing is adopted then.
StepHook = Callable[[int, int, str], None]


def _no_step(_phase: int, _phases: int, _text: str) -> None:
    return None


class AuthoringSession:
    """A policy, its edit history, the sample it is replayed on, and everything derived.

    Parameters
    ----------
    policy
        The policy to start from (checked as if loaded; a broken one is refused).
    source
        A sample to replay at once (segment file, partition folder, log directory, snapshot
        folder, records table, :class:`~kqlab.validate.Sample` or a ready
        :class:`~kqlab.validate.Replayer`); None: load one later with :meth:`replay`.
    now
        The replay clock (epoch ms).  Default: the sample's own — its newest batch — never
        the wall clock, which would judge a week-old sample's timestamps against today.
    framing, resolver, base_dir
        As for :class:`~kqlab.validate.Replayer` (``base_dir``: the policy file's folder,
        which sample checks' baselines are relative to).

    Every action is a method: edits (:meth:`add_rule`, :meth:`update_rule`,
    :meth:`replace_rule`, :meth:`remove_rule`, :meth:`move_rule`, :meth:`set_mode`,
    :meth:`set_severity`, :meth:`set_enforcement`, :meth:`set_policy`, :meth:`apply_yaml`,
    sample checks :meth:`add_check`, :meth:`update_check`, :meth:`set_threshold`,
    :meth:`remove_check`; :meth:`undo`, :meth:`redo`) return the new verdicts or raise
    :class:`EditError` and keep the policy; :meth:`replay` (local or Spark), :meth:`suggest`,
    :meth:`accept_suggestion`, :meth:`check_examples`; as-you-type checks
    :meth:`check_expression` and :meth:`rule_problem`.
    """

    def __init__(self, policy: Policy, source: Any = None, *, now: int | None = None,
                 framing: str = "exact", resolver: Any = None,
                 base_dir: str | Path | None = None):
        if isinstance(policy, str | Path):  # a policy file, as every command reads one
            from kqlab.sources.policy_files import load_policy_file

            base_dir = base_dir if base_dir is not None else Path(policy).parent
            policy = load_policy_file(str(policy))
        elif not isinstance(policy, Policy):
            raise EditError(f"policy must be a Policy or a policy file path (str or Path), "
                            f"not {type(policy).__name__}: pass 'policy.yaml' or "
                            "kqlab.load_policy('policy.yaml')")
        self.policy: Policy = check_policy(policy)
        self.now = now
        self.framing = framing
        self.resolver = resolver
        self.base_dir = base_dir
        #: policies before each accepted edit (undo pops), and those undone (redo pops)
        self.history: list[Policy] = []
        self.future: list[Policy] = []
        self.replayer: Replayer | None = None
        self.source: Any = None
        self.verdicts: VerdictsView | None = None
        #: the verdicts and policy before the last edit (the impact figure's base)
        self.previous: VerdictsView | None = None
        self.previous_policy: Policy | None = None
        self.suggestions: Suggestions | None = None
        self.examples: ExamplesReport | None = None
        #: why the last edit was refused (None after an accepted one)
        self.error: str | None = None
        #: per rule id: old parameter values its hand-written message still says after an
        #: edit (issue 30: a message naming [0.01, 100000] after min became 10)
        self.stale_messages: dict[str, tuple[StaleLiteral, ...]] = {}
        self.run_info: RunInfo | None = None
        #: whether the current verdicts were judged on :attr:`replayer` (the session made
        #: them, so it knows; no view has to ask the verdicts which engine they came from)
        self._judged_locally = False
        #: accepted edits since the last full replay
        self.edits_since_run = 0
        self._observers: list[Callable[[SessionChange], Any]] = []
        self._derived: dict[str, Any] = {}
        self._derived_for: object = None
        self._shapes: dict[tuple[Any, ...], Shape] = {}
        #: one colour per rule for the session's life, passed to every figure the views draw
        #: (:meth:`RuleColors.keep`): removing, moving or re-adding a rule, or undoing an edit,
        #: never shifts another rule's colour, as a map built per replay would
        self.colors = RuleColors().keep(r.id for r in self.policy.rules)
        if source is not None:
            self.replay(source)
        else:
            self._refresh_examples()

    # -- observers ---------------------------------------------------------------------------
    def observe(self, callback: Callable[[SessionChange], Any]) -> Callable[[SessionChange], Any]:
        """Call ``callback(change)`` after every change (returns it, so it can decorate)."""
        self._observers.append(callback)
        return callback

    def unobserve(self, callback: Callable[[SessionChange], Any]) -> None:
        """Stop calling ``callback``."""
        self._observers.remove(callback)

    def _publish(self, action: str, changed: set[str]) -> None:
        change = SessionChange(self, action, frozenset(changed))
        for callback in list(self._observers):
            callback(change)

    # -- derived state (computed once per verdicts) -------------------------------------------
    def _derive(self, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per verdicts object: a Spark engine answers each with a job, and
        every view reads the same answer."""
        if self._derived_for is not self.verdicts:
            self._derived, self._derived_for = {}, self.verdicts
        if name not in self._derived:
            self._derived[name] = compute()
        return self._derived[name]

    @property
    def outcomes(self) -> dict[str, int]:
        """Records per outcome in the current verdicts (empty without a sample)."""
        v = self.verdicts
        return {} if v is None else self._derive("outcomes", v.by_outcome)

    @property
    def counts(self) -> dict[str, dict[str, int]]:
        """Per rule id: ``failed`` records, ``rejected`` records (0 for ``observe`` rules) and
        ``rejected_batches``, from the current verdicts (the implicit ``decode:value`` too)."""
        v = self.verdicts
        if v is None:
            return {}
        return self._derive("counts", lambda: {
            r["rule"]: {"failed": r["failed_records"], "rejected": r["rejected_records"],
                        "rejected_batches": r["rejected_batches"]}
            for r in v.rules.to_pylist()})

    @property
    def rule_findings(self) -> dict[str, list[str]]:
        """Per rule id: what the current verdicts found wrong with the rule itself (a field
        or header no record has, every evaluation errored: the rule table's own columns,
        worded by :func:`kqlab.validate.rule_health.findings_of`); empty lists for the rest."""
        from kqlab.validate.rule_health import findings_of

        v = self.verdicts
        if v is None:
            return {}
        return self._derive("rule_findings", lambda: {
            r["rule"]: [f.text for f in findings_of(r)] for r in v.rules.to_pylist()})

    @property
    def checks(self) -> list[dict[str, Any]]:
        """The sample checks' results in the current verdicts, one dict per check
        (:data:`~kqlab.validate.sample_checks.CHECK_RESULTS_SCHEMA` columns, ``params`` as a
        mapping, ``text`` rendered from them); empty without a sample or checks."""
        v = self.verdicts
        if v is None:
            return []
        return self._derive("checks", lambda: _check_rows(v.checks()))

    def check_windows(self, check_id: str) -> pa.Table:
        """Every judged window (group) of check ``check_id`` in the current verdicts
        (:data:`~kqlab.validate.sample_checks.CHECK_WINDOWS_SCHEMA`), in (group, start)
        order: what a sparkline draws."""
        from kqlab.validate.sample_checks import CHECK_WINDOWS_SCHEMA

        v = self.verdicts
        if v is None:
            return CHECK_WINDOWS_SCHEMA.empty_table()
        return self._derive(f"check_windows:{check_id}", lambda: v.check_windows(
            check_id).sort_by([("group", "ascending"), ("start", "ascending")]))

    def window_records(self, check_id: str, group: str | None, start: int | None,
                       end: int | None) -> pa.Table:
        """The sample's records check ``check_id`` read in one window: its ``group`` (None:
        the check has no ``by``) and ``[start, end)`` (None: the whole sample) — a failing
        window's drill-down.  Needs the local sample (:attr:`view_sample`)."""
        from kqlab.authoring.check_windows import window_records

        if self.view_sample is None:
            raise self.refuse("a window's records are read from the local sample: replay "
                              "it locally first")
        return window_records(self.view_sample, self.policy, self.check(check_id), group,
                              start, end)

    @property
    def clock(self) -> int | None:
        """The replay clock in epoch ms: the loaded sample's, else the one given."""
        if self.replayer is not None:
            return self.replayer.now
        if self.verdicts is not None:
            return self.verdicts.now
        return self.now

    @property
    def clock_source(self) -> str:
        """Where :attr:`clock` comes from: ``given``, ``sample`` or ``wall clock``."""
        if self.replayer is not None:
            return str(self.replayer.clock)
        if self.now is not None:
            return "given"
        # a Spark-only session: the Spark engine read the sample's clock (or fell back)
        read = getattr(self.verdicts, "clock", None)
        return read if read in ("sample", "wall clock") else "wall clock"

    def clock_text(self) -> str:
        """``clock: now = … UTC, the sample's newest batch (no clock given)``."""
        now = self.clock
        if now is None:
            return "clock: none yet (no sample loaded)"
        when = datetime.datetime.fromtimestamp(now / 1000, datetime.UTC)
        how = {"given": "as given",
               "sample": "the sample's newest batch (no clock given; pass now= to change it)",
               "wall clock": "the wall clock (none given, none read from a sample)"}[
            self.clock_source]
        return f"clock: now = {now} ({when:%Y-%m-%d %H:%M:%S} UTC), {how}"

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the views should show next to the numbers: a clock that rejects most of the
        sample (:func:`kqlab.validate.replayer.clock_warning`)."""
        v = self.verdicts
        if v is None:
            return ()

        def compute() -> tuple[str, ...]:
            from kqlab.validate.replayer import clock_warning

            warning = clock_warning(v)
            return (warning,) if warning else ()
        return self._derive("warnings", compute)

    def status(self) -> str:
        """One line on the current verdicts: engine, records, how they were made, outcomes."""
        v = self.verdicts
        if v is None:
            return "no sample loaded"
        o = self.outcomes
        run = self.run_info
        if run is not None and self.edits_since_run == 0:
            how = f"in {run.seconds:.2f} s"
        else:
            k = self.edits_since_run
            how = f"re-judged after {k} edit{'s' if k != 1 else ''} of the policy"
        return (f"{v.engine}: {sum(o.values()):,} records {how} — "
                + ", ".join(f"{name} {n:,}" for name, n in o.items()))

    @property
    def view_sample(self) -> Replayer | None:
        """The sample record-level views may read with the current verdicts: the local
        replayer when the verdicts are its own, None for a Spark replay (never collected)."""
        return self.replayer if self._judged_locally else None

    def figure_context(self) -> dict[str, Any]:
        """What the figure builders read besides the verdicts (``kqlab.widgets.FIGURES``):
        the sample, the impact figure's base and the session's rule colours."""
        return {"sample": self.view_sample, "before": self.previous,
                "policies": (self.previous_policy, self.policy)
                if self.previous_policy is not None else None,
                "colors": self.colors}

    # -- replays -----------------------------------------------------------------------------
    def replay(self, source: Any = None, *, engine: str = "local", master: str | None = None,
               now: int | None = None, progress: Any = None,
               step: StepHook | None = None, spark: Any = None,
               out: str | Path | None = None) -> VerdictsView:
        """Replay ``source`` (default: the one loaded) with the current policy on ``engine``.

        ``local`` loads the sample into a new :class:`~kqlab.validate.Replayer`, which later
        edits re-judge incrementally.  ``spark`` replays on Spark (``master``; ``progress`` as
        :func:`kqlab.spark.replay_spark` takes it; ``spark``: a SparkSession to run on, e.g.
        a Spark Connect one, instead of ``master``; ``out``: on a cluster, a folder the
        driver and every executor reach, each Spark run's verdicts in a new subfolder of it);
        the local sample stays for edits when it
        is the same source, so edits re-judge locally; otherwise they re-run on Spark.
        ``now`` sets the clock from here on.  ``step`` is told each phase and may raise to
        cancel: nothing changes then.
        """
        if engine not in ENGINES:
            raise SessionError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        source = self.source if source is None else source
        if source is None:
            raise SessionError("no sample to replay: give a source (segment file, partition "
                               "folder, log directory, snapshot folder or records table)")
        if now is not None:
            self.now = now
        step = step or _no_step
        t0 = time.perf_counter()
        replayer: Replayer | None
        if engine == "local":
            replayer, verdicts = self._load(source, step)
            step(3, 3, "done")
        else:
            step(0, 0, "starting Spark…")
            same = self.replayer if _same_source(self.source, source) else None
            verdicts = self._spark(source, self.policy, master, progress,
                                   same.now if same is not None else None, spark,
                                   None if out is None else str(out))
            step(0, 0, "done")
            replayer = same  # the same sample stays for edits; another one is Spark's only
        new_sample = replayer is not self.replayer
        self.replayer, self.source, self.verdicts = replayer, source, verdicts
        self._judged_locally = engine == "local"
        self.previous = self.previous_policy = None
        self.run_info = RunInfo(engine, source, time.perf_counter() - t0, master, spark,
                                None if out is None else str(out))
        self.edits_since_run = 0
        self.error = None
        changed = {"verdicts", "examples", "error"}
        if new_sample:
            self.suggestions = None
            self._shapes = {}
            changed |= {"sample", "suggestions"}
        self._refresh_examples()
        self._publish("replay", changed)
        return verdicts

    def _load(self, source: Any, step: StepHook) -> tuple[Replayer, VerdictsView]:
        from kqlab.validate.replayer import Replayer, with_implicit_rules

        step(0, 3, "reading the sample…")
        replayer = source if isinstance(source, Replayer) else Replayer(
            source, now=self.now, framing=self.framing, resolver=self.resolver,
            base_dir=self.base_dir)
        step(1, 3, f"evaluating {len(self.policy.rules)} rules…")
        replayer.evaluate(with_implicit_rules(self.policy))  # cached: run() reuses it
        step(2, 3, "broker checks and verdicts…")
        return replayer, replayer.run(self.policy)

    def _spark(self, source: Any, policy: Policy, master: str | None, progress: Any,
               sample_now: int | None, spark: Any = None, out: str | None = None
               ) -> VerdictsView:
        from kqlab.spark import replay_spark
        from kqlab.validate.replayer import Replayer

        if isinstance(source, Replayer):
            raise SessionError("the Spark engine reads a path (segment file, partition folder, "
                               "log directory or snapshot folder), not a loaded Replayer")
        now = self.now if self.now is not None else sample_now
        if out is not None:  # a new subfolder per run: earlier verdicts stay readable
            import uuid

            out = f"{out.rstrip('/')}/replay-{uuid.uuid4().hex[:12]}"
        return replay_spark(source, policy, master=master, now=now, framing=self.framing,
                            resolver=self.resolver, progress=progress, spark=spark, out=out)

    def _judge(self, policy: Policy) -> VerdictsView | None:
        """``policy``'s verdicts on the current sample: incrementally on the local replayer,
        else again on Spark when the sample is only there; None without a sample.  (The
        caller adopts them: :attr:`view_sample` follows from :attr:`replayer`.)"""
        if self.replayer is not None:
            rejudged = self._checks_rejudged(policy)
            return rejudged if rejudged is not None else self.replayer.run(policy)
        run = self.run_info
        if run is not None and run.engine == "spark":
            return self._spark(run.source, policy, run.master, None, None, run.spark,
                               run.out)
        return None

    def _checks_rejudged(self, policy: Policy) -> VerdictsView | None:
        """When ``policy`` differs from the current one in its sample checks only (a threshold
        typed in the checks panel), the current local verdicts with the checks judged again
        from the replayer's cached partials: every record and batch verdict is the same, so
        the broker pass is not run again.  None when anything else differs."""
        import copy

        from kqlab.validate.replayer import with_implicit_rules
        from kqlab.validate.verdicts import Verdicts

        prev, replayer = self.verdicts, self.replayer
        if replayer is None or not self._judged_locally or not isinstance(prev, Verdicts) or \
                policy.with_checks(()) != self.policy.with_checks(()):
            return None
        effective = with_implicit_rules(policy)
        verdicts = copy.copy(prev)
        verdicts.policy_hash = effective.content_hash()  # as the replay names it
        before = {c.id: c for c in self.policy.checks}
        changed = [c for c in policy.checks if before.get(c.id) != c]
        kept = prev.check_results
        if not policy.checks:
            verdicts.check_results = None
        elif kept is None or len(changed) == len(policy.checks):
            verdicts.check_results = replayer.run_checks(
                effective, replayer.evaluate(effective), verdicts).finish()
        else:  # only the edited checks are judged; the others' results stay as they were
            judged = replayer.run_checks(effective.with_checks(changed),
                                         replayer.evaluate(effective), verdicts).finish() \
                if changed else None
            verdicts.check_results = _merged_results(
                [c.id for c in policy.checks], {c.id for c in changed}, judged, kept)
        return verdicts

    # -- edits (each returns the new verdicts or raises EditError) ----------------------------
    def add_rule(self, rule: Rule | str, *, index: int | None = None, **fields: Any) -> Any:
        """Add ``rule`` (or a rule of kind ``rule`` built from ``fields``: ``id``, ``params``
        or the parameters inline, ``message``, ``when``, ``severity``, ``mode``)."""
        if isinstance(rule, str):
            try:
                rule = make_rule(rule, fields)
            except (EditError, TypeError) as exc:
                raise self.refuse(str(exc)) from None
        if any(r.id == rule.id for r in self.policy.rules):
            raise self.refuse(f"there is already a rule {rule.id!r}")
        rules = list(self.policy.rules)
        rules.insert(len(rules) if index is None else index, rule)
        return self._commit(self.policy.with_rules(rules))

    def update_rule(self, rule_id: str, **changes: Any) -> Any:
        """Change one rule: ``params={...}`` replaces parameters (a value of None drops one),
        other parameters may be given inline; ``message``, ``when``, ``severity``, ``mode``,
        ``id`` (rename) and ``kind`` as named.  Its golden examples stay with it."""
        return self.replace_rule(rule_id, changed_rule(self.rule(rule_id), changes))

    def replace_rule(self, rule_id: str, rule: Rule) -> Any:
        """Put ``rule`` where rule ``rule_id`` is."""
        before = self.rule(rule_id)
        if rule.id != rule_id and any(r.id == rule.id for r in self.policy.rules):
            raise self.refuse(f"there is already a rule {rule.id!r}")
        kept = dict(self.stale_messages)  # set before the commit: its observers show it
        stale = stale_literals(before, rule, self.stale_messages.pop(rule_id, ()))
        if stale:
            self.stale_messages[rule.id] = stale
        try:
            return self._commit(self.policy.with_rules(
                [rule if r.id == rule_id else r for r in self.policy.rules]))
        except EditError:
            self.stale_messages = kept
            raise

    @property
    def message_warnings(self) -> tuple[str, ...]:
        """The rules whose hand-written message still says a parameter's old value (checked
        against the rules as they are now: an undo or a fixed message clears it)."""
        rules = {r.id: r for r in self.policy.rules}
        return tuple(s.text for rid, found in self.stale_messages.items() if rid in rules
                     for s in stale_literals(rules[rid], rules[rid], found))

    def remove_rule(self, rule_id: str) -> Any:
        """Remove rule ``rule_id``."""
        self.rule(rule_id)
        return self._commit(self.policy.with_rules(
            [r for r in self.policy.rules if r.id != rule_id]))

    def move_rule(self, rule_id: str, delta: int) -> Any:
        """Move rule ``rule_id`` ``delta`` places (negative: up).  Order matters: a record's
        policy error is its first failing ``reject`` rule."""
        rules = list(self.policy.rules)
        i = rules.index(self.rule(rule_id))
        j = max(0, min(len(rules) - 1, i + delta))
        rules.insert(j, rules.pop(i))
        return self._commit(self.policy.with_rules(rules))

    def set_mode(self, rule_id: str, mode: str) -> Any:
        """``reject`` or ``observe`` (counted, never rejects)."""
        return self.update_rule(rule_id, mode=mode)

    def set_severity(self, rule_id: str, severity: str) -> Any:
        """``error``, ``warning`` or ``info``."""
        return self.update_rule(rule_id, severity=severity)

    def set_enforcement(self, profile: str) -> Any:
        """The record-policy KIP whose semantics the replay applies."""
        if profile not in ENFORCEMENT_PROFILES:
            raise self.refuse(f"enforcement must be one of {', '.join(ENFORCEMENT_PROFILES)}")
        return self._commit(replace(self.policy, enforcement=profile))

    def set_policy(self, policy: Policy) -> Any:
        """Replace the whole policy (its unchanged rules still come from the cache)."""
        return self._commit(policy)

    def apply_yaml(self, text: str) -> Any:
        """Replace the policy with the YAML ``text``."""
        from kqlab.policy import loads_policy

        try:
            policy = loads_policy(text, source="editor YAML")
        except KqlabError as exc:
            raise self.refuse(str(exc)) from None
        return self._commit(policy)

    def undo(self) -> Any:
        """Go back to the policy before the last accepted edit."""
        if not self.history:
            raise self.refuse("nothing to undo")
        verdicts = self._judged(self.history[-1])
        target = self.history.pop()
        self.future.append(self.policy)
        return self._advance(target, verdicts, "undo")

    def redo(self) -> Any:
        """Apply again the edit the last :meth:`undo` took back."""
        if not self.future:
            raise self.refuse("nothing to redo")
        verdicts = self._judged(self.future[-1])
        target = self.future.pop()
        self.history.append(self.policy)
        return self._advance(target, verdicts, "redo")

    def add_check(self, check: Check | str, *, index: int | None = None, **fields: Any
                  ) -> Any:
        """Add sample check ``check`` (or one of kind ``check`` built from ``fields``:
        ``id``, ``window``, ``by``, ``when``, ``description`` and its parameters inline or
        as ``params``)."""
        if isinstance(check, str):
            try:
                check = make_check(check, fields)
            except (EditError, TypeError) as exc:
                raise self.refuse(str(exc)) from None
        if any(c.id == check.id for c in self.policy.checks):
            raise self.refuse(f"there is already a check {check.id!r}")
        checks = list(self.policy.checks)
        checks.insert(len(checks) if index is None else index, check)
        return self._commit(self.policy.with_checks(checks))

    def update_check(self, check_id: str, **changes: Any) -> Any:
        """Change one sample check: parameters inline or as ``params={...}`` (None drops
        one), ``window``, ``by``, ``when``, ``description``, ``id`` as named.  Only a
        threshold changed: the replayer re-judges the cached partial aggregates, nothing is
        recomputed."""
        old = self.check(check_id)
        try:
            new = changed_check(old, changes)
        except (EditError, TypeError) as exc:
            raise self.refuse(str(exc)) from None
        if new.id != check_id and any(c.id == new.id for c in self.policy.checks):
            raise self.refuse(f"there is already a check {new.id!r}")
        return self._commit(self.policy.with_checks(
            [new if c.id == check_id else c for c in self.policy.checks]))

    def set_threshold(self, check_id: str, **thresholds: float | int | None) -> Any:
        """Set thresholds of check ``check_id`` (``min=``, ``max=``, ``max_age_ms=``,
        ``max_psi=``; None opens that side): :meth:`update_check` limited to the kind's
        threshold parameters."""
        spec = self.check(check_id).spec
        unknown = sorted(set(thresholds) - set(spec.thresholds))
        if unknown:
            raise self.refuse(f"check {check_id}: {', '.join(unknown)} is not a threshold of "
                              f"a {spec.name} check (thresholds: {', '.join(spec.thresholds)})")
        return self.update_check(check_id, **thresholds)

    def remove_check(self, check_id: str) -> Any:
        """Remove sample check ``check_id``."""
        self.check(check_id)
        return self._commit(self.policy.with_checks(
            [c for c in self.policy.checks if c.id != check_id]))

    def check(self, check_id: str) -> Check:
        """The current policy's sample check ``check_id`` (a refused edit when there is
        none)."""
        try:
            return self.policy.check(check_id)
        except KeyError as exc:
            raise self.refuse(str(exc.args[0])) from None

    def rule(self, rule_id: str) -> Rule:
        """The current policy's rule ``rule_id`` (a refused edit when there is none)."""
        try:
            return self.policy.rule(rule_id)
        except KeyError as exc:
            raise self.refuse(str(exc.args[0])) from None

    # -- suggestions and golden examples -------------------------------------------------------
    def suggest(self, **options: Any) -> Suggestions:
        """Rule suggestions from the sample, each with its would-be rejection count (options:
        :func:`kqlab.validate.rule_suggestion.suggest`'s); the sample's decoded columns are
        shared with the replay."""
        from kqlab.validate.rule_suggestion import suggest

        r = self.replayer
        if r is None:
            raise self.refuse("suggestions read the sample: replay one locally first")
        self.suggestions = suggest(r, self.policy, now=r.now, resolver=r.resolver, **options)
        self._publish("suggest", {"suggestions"})
        return self.suggestions

    def accept_suggestion(self, suggestion_id: str) -> Any:
        """Append one suggested rule."""
        if self.suggestions is None:
            self.suggest()
        assert self.suggestions is not None
        try:
            s = self.suggestions[suggestion_id]
        except KeyError as exc:
            raise self.refuse(str(exc.args[0])) from None
        return self.add_rule(s.rule)

    def check_examples(self) -> ExamplesReport | None:
        """Run the policy's golden examples again (they run after every accepted edit)."""
        self._refresh_examples()
        self._publish("examples", {"examples"})
        return self.examples

    def _refresh_examples(self) -> None:
        from kqlab.validate.golden import check_examples

        if not any(r.examples for r in self.policy.rules):
            self.examples = None
            return
        try:
            self.examples = check_examples(self.policy, now=self.clock, resolver=self.resolver)
        except KqlabError as exc:  # a schema source that cannot be read: say so, keep going
            self.examples = None
            self.error = f"golden examples could not run: {exc}"

    def examples_text(self) -> str:
        """``golden examples: 12 of 12 behave`` (or which do not); empty without examples."""
        report = self.examples
        if report is None:
            return ""
        bad = report.failed
        if not bad:
            return f"golden examples: {report.examples} of {report.examples} behave"
        shown = "; ".join(f"{e.label}: {e.message}" for e in bad[:3])
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        return (f"golden examples: {len(bad)} of {report.examples} do not behave — "
                f"{shown}{more}")

    # -- as-you-type checks against the sample ------------------------------------------------
    def value_shape(self, policy: Policy | None = None) -> Shape:
        """What ``value`` holds, as CEL types: from the sample's decoded column when one is
        loaded (:func:`kqlab.authoring.sample_checks.sample_value_shape`), else from the
        schemas the policy declares; ``dyn`` when neither says."""
        from kqlab.authoring.sample_checks import sample_value_shape
        from kqlab.policy.declared_schemas import declared_value_shape
        from kqlab.policy.value_shapes import DYN

        policy = policy or self.policy
        key = (id(self.replayer), repr(policy.value), repr(policy.key), policy.topics.names)
        if key not in self._shapes:
            shape = DYN
            if self.replayer is not None:
                shape = sample_value_shape(self.replayer, policy)
            if shape.dyn:
                shape = declared_value_shape(policy.value, policy.topics.names) or DYN
            self._shapes[key] = shape
        return self._shapes[key]

    def check_expression(self, expr: str) -> ExpressionProblem | None:
        """None when the CEL ``expr`` compiles and can hold for some record of the sample;
        else the problem (an unknown field with the nearest one, types that never compare)
        and its offset in ``expr``."""
        from kqlab.authoring.sample_checks import expression_against

        return expression_against(expr, self.value_shape())

    def rule_problem(self, rule: Rule, policy: Policy | None = None) -> str | None:
        """Why ``rule`` would fail every record of the sample (see
        :func:`kqlab.authoring.sample_checks.rule_problem`), or None."""
        from kqlab.authoring.sample_checks import rule_problem

        return rule_problem(rule, self.value_shape(policy))

    # -- internals -----------------------------------------------------------------------------
    def refuse(self, message: str) -> EditError:
        """Record and publish why an edit was refused; the caller raises what it returns."""
        self.error = message
        self._publish("error", {"error"})
        return EditError(message)

    def _judged(self, policy: Policy) -> VerdictsView | None:
        try:
            return self._judge(policy)
        except KqlabError as exc:
            raise self.refuse(str(exc)) from None

    def _commit(self, policy: Policy) -> Any:
        """Check ``policy`` (as loaded, and its new or changed rules against the sample),
        judge it, and make it current."""
        try:
            checked = check_policy(policy)
        except KqlabError as exc:
            raise self.refuse(str(exc)) from None
        known = set(self.policy.rules)
        for rule in checked.rules:
            if rule not in known:
                problem = self.rule_problem(rule, checked)
                if problem is not None:
                    raise self.refuse(f"rule {rule.id}: {problem}")
        verdicts = self._judged(checked)
        self.history.append(self.policy)
        self.future.clear()
        return self._advance(checked, verdicts, "edit")

    def _advance(self, policy: Policy, verdicts: VerdictsView | None, action: str) -> Any:
        self.previous, self.verdicts = self.verdicts, verdicts
        self._judged_locally = verdicts is not None and self.replayer is not None
        self.previous_policy, self.policy = self.policy, policy
        self.colors.keep(r.id for r in policy.rules)
        self.error = None
        self.edits_since_run += 1
        self._refresh_examples()
        self._publish(action, {"policy", "verdicts", "examples", "error"})
        return verdicts


def _merged_results(order: list[str], changed: set[str], judged: Any, kept: Any) -> Any:
    """Check results in policy ``order``: the ``changed`` checks' from ``judged``, the
    others' from ``kept`` (both :class:`~kqlab.validate.sample_checks.CheckResults`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from kqlab.validate.sample_checks import CheckResults

    def pick(table: pa.Table, check: str) -> pa.Table:
        return table.filter(pc.equal(table.column("check"), check))

    results, windows = [], []
    for cid in order:
        src = judged if cid in changed else kept
        results.append(pick(src.results, cid))
        windows.append(pick(src.windows, cid))
    return CheckResults(pa.concat_tables(results), pa.concat_tables(windows))


def _check_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Result rows as dicts with ``params`` as a mapping and their text."""
    from kqlab.validate.sample_checks import describe_check

    rows = table.to_pylist()
    for row in rows:
        row["params"] = dict(row["params"] or [])
        row["text"] = describe_check(row)
    return rows


def _same_source(a: Any, b: Any) -> bool:
    """Whether two sources name the same sample (the same object, or the same path)."""
    if a is b:
        return True
    if isinstance(a, str | Path) and isinstance(b, str | Path):
        return Path(a).resolve() == Path(b).resolve()
    return False
