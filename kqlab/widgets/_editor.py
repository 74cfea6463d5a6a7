"""``PolicyEditor``: author a policy against a loaded sample, with live per-rule counts.

The editor is a view of an :class:`~kqlab.authoring.AuthoringSession`: the session holds the
policy, its history, the sample (one :class:`~kqlab.validate.Replayer`, so an edit
re-evaluates only the rule that changed — issue 7: "it must feel instant"), the verdicts,
suggestions and golden examples; the editor shows them and calls the session's methods.
Every button calls a public method (:meth:`PolicyEditor.add_rule`, :meth:`update_rule`,
...): notebooks and tests drive the same code the clicks do.  An edit the session refuses (a
bad parameter, a CEL expression that does not compile or reads a field the sample does not
have) is shown inline and leaves the current policy untouched.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from kqlab.authoring import AuthoringSession, EditError, check_cel
from kqlab.errors import KqlabError
from kqlab.policy.catalog import KINDS, Param
from kqlab.policy.message_params import stale_literals
from kqlab.policy.model import ENFORCEMENT_PROFILES, MODES, SEVERITIES, Policy, Rule
from kqlab.widgets._common import FigureView, build_figures, css, error_html

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.authoring import SessionChange

__all__ = ["EditError", "PolicyEditor", "RuleForm", "check_cel"]

_OK = '<span style="color:#4c9a6a">✓ {}</span>'

#: a rule row's identity: (rule id, rule kind); a row shows one kind's controls and label
_RowKey = tuple[str, str]


# -- the rule form ------------------------------------------------------------------------------

def _param_widget(p: Param, value: Any) -> w.Widget:
    """An input for one catalog parameter; lists and free-form values are edited as text
    (comma-separated or JSON) because their element types vary by kind."""
    desc = p.name + (" *" if p.required else "")
    tip = p.doc or p.type
    if p.type == "bool":
        return w.Checkbox(value=bool(p.default if value is None else value), description=desc,
                          tooltip=tip, indent=False)
    if p.choices:
        options = list(p.choices) if p.required or p.default is not None else ["", *p.choices]
        v = value if value is not None else (p.default if p.default is not None else options[0])
        return w.Dropdown(options=options, value=v, description=desc, tooltip=tip)
    if value is None:
        text = ""
    elif p.type in ("list[str]", "list[int]") and isinstance(value, list | tuple):
        text = ", ".join(str(v) for v in value)
    elif p.type in ("list", "any"):
        text = json.dumps(value)
    else:
        text = str(value)
    if p.name == "expr":
        return w.Textarea(value=text, description=desc, tooltip=tip,
                          continuous_update=True, layout=w.Layout(width="95%"))
    return w.Text(value=text, description=desc, tooltip=tip,
                  placeholder="" if p.default is None else f"default {p.default}",
                  continuous_update=True)


def _parse(p: Param, widget: w.Widget) -> Any:
    """The parameter's value from its input; None means "not set" (the catalog default)."""
    value = widget.value
    if p.type == "bool":
        return bool(value)
    if isinstance(value, str):
        value = value.strip()
        if value == "":
            return None
    try:
        if p.type == "int":
            return int(value)
        if p.type == "number":
            f = float(value)
            return int(f) if f.is_integer() and "." not in value and "e" not in value else f
        if p.type == "list[str]":
            return [s.strip() for s in value.split(",") if s.strip()]
        if p.type == "list[int]":
            return [int(s) for s in value.split(",") if s.strip()]
        if p.type in ("list", "any"):
            return json.loads(value)
    except ValueError:
        raise EditError(f"{p.name}: cannot read {value!r} as {p.type}") from None
    return value


#: inputs whose every change re-runs the form's checks
_CHECKED_PARAMS = ("expr", "field")


class RuleForm:
    """The add/edit form of one rule, its parameter inputs generated from the catalog entry of
    the chosen kind.  As you type, CEL inputs (``expr`` of a ``cel`` rule, every ``when``)
    are compiled and, with ``problem`` (the session's :meth:`~kqlab.authoring
    .AuthoringSession.rule_problem`), the rule is checked against the sample's decoded
    columns — an unknown field is flagged with the nearest one; the verdict is shown under the
    form.  A rule loaded for editing keeps its description and golden examples."""

    def __init__(self, on_apply: Callable[[], Any],
                 problem: Callable[[Rule], str | None] | None = None):
        self._problem = problem
        self.kind = css(w.Dropdown(options=sorted(KINDS), description="kind"), "form_kind")
        self.rule_id = css(w.Text(description="id", continuous_update=True), "form_id")
        self.message = w.Text(description="message", placeholder="catalog default",
                              continuous_update=True)
        #: a hand-written message that still says a parameter's old value (issue 30)
        self.message_status = w.HTML("")
        self.when = css(w.Text(description="when", placeholder="CEL precondition (optional)",
                               continuous_update=True), "form_when")
        self.severity = w.Dropdown(options=list(SEVERITIES), value="error",
                                   description="severity")
        self.mode = w.ToggleButtons(options=list(MODES), value="reject")
        self.cel_status = css(w.HTML(""), "cel_status")
        self.error = css(w.HTML(""), "error")
        self.apply = css(w.Button(description="Apply", button_style="primary",
                                  icon="check"), "form_apply")
        self.editing: str | None = None  # id of the rule being edited; None: a new rule
        self.loaded: Rule | None = None  # the rule being edited, as it was loaded
        self.fields: dict[str, w.Widget] = {}
        self._params = w.VBox()
        self._loading = False  # load() sets the kind itself: no rebuild from its observer
        self.apply.on_click(lambda _b: on_apply())
        # observers are removed one by one, never with unobserve_all: that would also drop
        # ipywidgets' own value <-> index sync, and the page would show a stale kind
        self.kind.observe(self._on_kind, names="value")
        self.when.observe(self._on_input, names="value")
        self.message.observe(self._on_message, names="value")
        self.widget = css(w.VBox([
            w.HBox([self.kind, self.rule_id]), self._params,
            w.HBox([self.message, self.when]), w.HBox([self.severity, self.mode]),
            self.cel_status, self.message_status, w.HBox([self.apply]), self.error,
        ]), "form")
        self._build(self.kind.value, {})

    def _on_kind(self, change: dict[str, Any]) -> None:
        if not self._loading:
            self._build(change["new"], {})

    def _on_input(self, _change: dict[str, Any]) -> None:
        self.check()

    def _build(self, kind: str, params: dict[str, Any]) -> None:
        self.fields = {}
        for p in KINDS[kind].params:
            widget = css(_param_widget(p, params.get(p.name)), "form_param", name=p.name)
            if p.name in _CHECKED_PARAMS:
                widget.observe(self._on_input, names="value")
            else:
                widget.observe(self._on_message, names="value")
            self.fields[p.name] = widget
        self._params.children = tuple(self.fields.values())
        self.check()
        self.check_message()

    def _on_message(self, _change: dict[str, Any]) -> None:
        self.check_message()

    def check_message(self) -> None:
        """Flag a hand-written message that still says a parameter's old value once the
        parameter is edited (write ``{min}`` and it follows the edit)."""
        if self._loading or self.loaded is None:
            self.message_status.value = ""
            return
        try:
            rule = self.rule(require_id=False)
        except (EditError, KqlabError, ValueError, TypeError):
            return  # a parameter that does not read yet: Apply will say which
        stale = stale_literals(self.loaded, rule)
        self.message_status.value = error_html("; ".join(s.text for s in stale)) \
            if stale else ""

    def load(self, rule: Rule | None = None, *, kind: str | None = None,
             rule_id: str = "") -> None:
        """Show ``rule`` for editing, or a blank form of ``kind`` for a new rule."""
        kind = rule.kind if rule is not None else (kind or self.kind.value)
        if kind not in KINDS:
            raise EditError(f"unknown rule kind {kind!r}; known kinds: {', '.join(sorted(KINDS))}")
        self.editing = rule.id if rule is not None else None
        self.loaded = rule
        self._loading = True
        try:
            self.kind.value = kind
            self.rule_id.value = rule.id if rule is not None else rule_id
            self.message.value = (rule.message or "") if rule is not None else ""
            self.when.value = (rule.when or "") if rule is not None else ""
            self.severity.value = rule.severity if rule is not None else "error"
            self.mode.value = rule.mode if rule is not None else "reject"
        finally:
            self._loading = False
        self.error.value = ""
        self._build(kind, dict(rule.params) if rule is not None else {})

    def check(self) -> None:
        """Compile the form's CEL inputs and check the rule against the sample; the status
        line says ok or what is wrong, where."""
        if self._loading:
            return
        problems = []
        exprs = [("when", self.when.value.strip())]
        if "expr" in self.fields:
            exprs.insert(0, ("expr", self.fields["expr"].value.strip()))
        checked = [name for name, expr in exprs if expr]
        for name, expr in exprs:
            if expr:
                problem = check_cel(expr)
                if problem:
                    problems.append(f"{name}: {problem}")
        sample_checked = False
        field = self.fields.get("field")
        if not problems and self._problem is not None and \
                (checked or (field is not None and str(field.value).strip())):
            try:
                rule = self.rule(require_id=False)
            except EditError:
                rule = None  # a parameter that does not read yet: Apply will say which
            if rule is not None:
                problem = self._problem(rule)
                sample_checked = True
                if problem:
                    problems.append(problem)
        if problems:
            self.cel_status.value = error_html("; ".join(problems))
        elif checked:
            self.cel_status.value = _OK.format(
                "CEL compiles" + (" and fits the sample" if sample_checked else ""))
        elif sample_checked:
            self.cel_status.value = _OK.format("the field fits the sample")
        else:
            self.cel_status.value = ""

    @property
    def cel_ok(self) -> bool:
        """Whether every checked input is fine (empty ones count as fine)."""
        return "⚠" not in self.cel_status.value

    def rule(self, *, require_id: bool = True) -> Rule:
        """The rule the form describes (``EditError`` says what is missing or unreadable); a
        rule loaded for editing keeps its description and golden examples."""
        rule_id = self.rule_id.value.strip()
        if not rule_id and require_id:
            raise EditError("a rule needs an id")
        params = {}
        for p in KINDS[self.kind.value].params:
            value = _parse(p, self.fields[p.name])
            if value is not None and not (p.type == "bool" and value == p.default):
                params[p.name] = value
        kept = self.loaded
        return Rule(id=rule_id or "new-rule", kind=self.kind.value, params=params,
                    message=self.message.value.strip() or None,
                    when=self.when.value.strip() or None,
                    severity=self.severity.value, mode=self.mode.value,
                    description=kept.description if kept is not None else None,
                    examples=kept.examples if kept is not None else None)


# -- the editor ---------------------------------------------------------------------------------

class PolicyEditor:
    """The rule list of a policy with live counts on a sample, a view of one
    :class:`~kqlab.authoring.AuthoringSession`.

    Parameters
    ----------
    replayer
        The session to show, or what to start one from: a :class:`~kqlab.validate.Replayer`
        or anything it accepts as a source (segment path, records table, sample).
    policy
        The starting policy (not with a session, which has its own).
    figures
        Which figures to refresh after each edit (names of ``kqlab.widgets.FIGURES``:
        ``reasons``, ``offsets``, ``timeline``, ``impact``); kept in :attr:`figures`.
    now
        The replay clock when a session is started here (default: the sample's own).

    Every UI action has a method: :meth:`add_rule`, :meth:`update_rule`, :meth:`remove_rule`,
    :meth:`move_rule`, :meth:`set_mode`, :meth:`set_severity`, :meth:`set_enforcement`,
    :meth:`edit` / :meth:`new_rule` + :meth:`apply_form`, :meth:`undo`, :meth:`redo`,
    :meth:`suggest`, :meth:`accept_suggestion`, :meth:`apply_yaml`.  Each edit returns the new
    verdicts, or raises :class:`EditError` (also shown inline in :attr:`error`) and keeps the
    policy.
    """

    def __init__(self, replayer: Any = None, policy: Policy | None = None, *,
                 figures: tuple[str, ...] = ("reasons", "impact"), now: int | None = None):
        if isinstance(replayer, AuthoringSession):
            if policy is not None:
                raise TypeError("a PolicyEditor of a session shows the session's policy: "
                                "pass no policy (or session.set_policy(policy))")
            session = replayer
        else:
            if policy is None:
                raise TypeError("PolicyEditor needs a policy (or an AuthoringSession)")
            session = AuthoringSession(policy, replayer, now=now)
        self.session = session
        self.figure_names = tuple(figures)
        self.figures: dict[str, Any] = {}
        self.suggestion_buttons: dict[str, w.Button] = {}
        self._listeners: list[Callable[[PolicyEditor], Any]] = []
        self._syncing = False  # the enforcement toggle is being set from the session
        self._syncing_row = False  # a row's mode/severity is being set from the session
        self._suggestions_shown: tuple[Any, frozenset[str]] | None = None

        self.error = css(w.HTML(""), "error")
        self.outcomes = css(w.HTML(""), "outcomes")
        self.warning = css(w.HTML(""), "warning")
        self.golden = css(w.HTML(""), "golden")
        self.enforcement = css(w.ToggleButtons(options=list(ENFORCEMENT_PROFILES),
                                               value=session.policy.enforcement,
                                               description="enforcement"), "enforcement")
        self.enforcement.observe(self._on_enforcement, names="value")
        self.undo_button = css(w.Button(description="Undo", icon="undo", disabled=True),
                               "undo")
        self.redo_button = css(w.Button(description="Redo", icon="repeat", disabled=True),
                               "redo")
        self.undo_button.on_click(lambda _b: self._try(self.undo))
        self.redo_button.on_click(lambda _b: self._try(self.redo))
        self.new_kind = css(w.Dropdown(options=sorted(KINDS), value="cel",
                                       description="new rule"), "new_kind")
        self.add_button = css(w.Button(description="Add rule", icon="plus"), "add_rule")
        self.add_button.on_click(lambda _b: self.new_rule(self.new_kind.value))
        self.rules_box = w.VBox()
        self.rows: dict[str, dict[str, w.Widget]] = {}
        self.form = RuleForm(self._apply_clicked, problem=session.rule_problem)
        self.form.widget.layout.display = "none"
        self.yaml = css(w.Textarea(layout=w.Layout(width="100%", height="240px")), "yaml")
        self.yaml_apply = w.Button(description="Apply YAML")
        self.yaml_apply.on_click(lambda _b: self._try(self.apply_yaml, self.yaml.value))
        self.suggest_button = css(w.Button(description="Suggest rules", icon="magic"),
                                  "suggest")
        self.suggest_button.on_click(lambda _b: self._try(self.suggest))
        self.suggestions_box = w.VBox()
        self.figures_out = css(w.Output(), "figures")
        self._figure_view = FigureView(self.figures_out)
        self._rules_shown: tuple[_RowKey, ...] | None = None  # the rules the rows show
        #: the rows in :attr:`rules_box`, in its order: the policy's rules in policy order,
        #: and between them, hidden, rows of rules no longer in it (:func:`_box_order`)
        self._box_keys: tuple[_RowKey, ...] = ()
        #: the YAML view's texts by policy (the policy kept with its text: ids stay unique)
        self._yaml_cache: dict[int, tuple[Policy, str]] = {}
        #: rule rows built so far, by (id, kind), least recently used first; a row's mode and
        #: severity controls follow its rule in place (a mode switch re-renders no row)
        self._row_cache: dict[_RowKey, tuple[w.HBox, dict[str, w.Widget]]] = {}
        tabs = w.Tab(children=[
            w.VBox([self.rules_box, w.HBox([self.new_kind, self.add_button]), self.form.widget]),
            w.VBox([self.suggest_button, self.suggestions_box]),
            w.VBox([self.yaml, self.yaml_apply]),
        ])
        for i, title in enumerate(("Rules", "Suggestions", "YAML")):
            tabs.set_title(i, title)
        self.widget = css(w.VBox([
            w.HBox([self.enforcement, self.undo_button, self.redo_button]), self.outcomes,
            self.warning, self.golden, self.error, tabs, self.figures_out]), "editor")
        session.observe(self._on_change)
        self._refresh()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def on_change(self, callback: Callable[[PolicyEditor], Any]) -> None:
        """Call ``callback(editor)`` after every accepted edit (undo and redo included)."""
        self._listeners.append(callback)

    # -- the session's state, as the editor shows it -----------------------------------------
    @property
    def policy(self) -> Policy:
        """The current policy (the session's)."""
        return self.session.policy

    @property
    def verdicts(self) -> Any:
        """The current verdicts (the session's)."""
        return self.session.verdicts

    @property
    def previous(self) -> Any:
        """The verdicts before the last edit (the impact figure's base)."""
        return self.session.previous

    @previous.setter
    def previous(self, verdicts: Any) -> None:
        self.session.previous = verdicts

    @property
    def replayer(self) -> Any:
        """The session's sample (a :class:`~kqlab.validate.Replayer`)."""
        return self.session.replayer

    @replayer.setter
    def replayer(self, replayer: Any) -> None:
        """Edit against another sample: the session replays the policy on it."""
        self.session.replay(replayer)

    @property
    def history(self) -> list[Policy]:
        """The policies before each accepted edit (what :meth:`undo` goes back to)."""
        return self.session.history

    @property
    def suggestions(self) -> Any:
        """The last suggestions for the sample (None before :meth:`suggest`)."""
        return self.session.suggestions

    @property
    def counts(self) -> dict[str, dict[str, int]]:
        """Per rule id: ``failed`` records, ``rejected`` records (0 for ``observe`` rules) and
        ``rejected_batches``, from the current verdicts (the implicit ``decode:value`` too)."""
        return self.session.counts

    # -- edits (the Python twins of the buttons) ---------------------------------------------
    def add_rule(self, rule: Rule | str, *, index: int | None = None, **fields: Any) -> Any:
        """Add ``rule`` (or a rule of kind ``rule`` built from ``fields``: ``id``, ``params``
        or the parameters inline, ``message``, ``when``, ``severity``, ``mode``)."""
        return self.session.add_rule(rule, index=index, **fields)

    def update_rule(self, rule_id: str, **changes: Any) -> Any:
        """Change one rule (:meth:`AuthoringSession.update_rule`)."""
        return self.session.update_rule(rule_id, **changes)

    def replace_rule(self, rule_id: str, rule: Rule) -> Any:
        """Put ``rule`` where rule ``rule_id`` is."""
        return self.session.replace_rule(rule_id, rule)

    def remove_rule(self, rule_id: str) -> Any:
        """Remove rule ``rule_id`` (its trash button)."""
        return self.session.remove_rule(rule_id)

    def move_rule(self, rule_id: str, delta: int) -> Any:
        """Move rule ``rule_id`` ``delta`` places (its arrow buttons; negative: up)."""
        return self.session.move_rule(rule_id, delta)

    def set_mode(self, rule_id: str, mode: str) -> Any:
        """``reject`` or ``observe`` (the row's toggle)."""
        return self.session.set_mode(rule_id, mode)

    def set_severity(self, rule_id: str, severity: str) -> Any:
        """``error``, ``warning`` or ``info`` (the row's dropdown)."""
        return self.session.set_severity(rule_id, severity)

    def set_enforcement(self, profile: str) -> Any:
        """The record-policy KIP whose semantics the replay applies (the toggle on top)."""
        return self.session.set_enforcement(profile)

    def set_policy(self, policy: Policy) -> Any:
        """Replace the whole policy (its unchanged rules still come from the cache)."""
        return self.session.set_policy(policy)

    def apply_yaml(self, text: str) -> Any:
        """Replace the policy with the YAML ``text`` (the YAML tab's Apply button)."""
        return self.session.apply_yaml(text)

    def undo(self) -> Any:
        """Go back to the policy before the last accepted edit (the Undo button)."""
        return self.session.undo()

    def redo(self) -> Any:
        """Apply again what :meth:`undo` took back (the Redo button)."""
        return self.session.redo()

    # -- the form -------------------------------------------------------------------------------
    def new_rule(self, kind: str, rule_id: str | None = None) -> RuleForm:
        """Open a blank form of ``kind`` (the *Add rule* button); fill it, then
        :meth:`apply_form`."""
        base = rule_id or kind.replace("_", "-")
        taken = {r.id for r in self.policy.rules}
        n, rid = 1, base
        while rid in taken:
            n += 1
            rid = f"{base}-{n}"
        self.form.load(None, kind=kind, rule_id=rid)
        self.form.widget.layout.display = None
        return self.form

    def edit(self, rule_id: str) -> RuleForm:
        """Open rule ``rule_id`` in the form (its *edit* button)."""
        self.form.load(self.session.rule(rule_id))
        self.form.widget.layout.display = None
        return self.form

    def apply_form(self) -> Any:
        """Apply the form: add the new rule, or replace the one being edited."""
        try:
            rule = self.form.rule()
        except EditError as exc:
            self.form.error.value = error_html(str(exc))
            raise self.session.refuse(str(exc)) from None
        try:
            if self.form.editing is None:
                out = self.session.add_rule(rule)
            else:
                out = self.session.replace_rule(self.form.editing, rule)
        except EditError as exc:
            self.form.error.value = error_html(str(exc))
            raise
        self.form.error.value = ""
        self.form.widget.layout.display = "none"
        self.form.editing = None
        self.form.loaded = None
        return out

    def _apply_clicked(self) -> None:
        self._try(self.apply_form)

    # -- suggestions ----------------------------------------------------------------------------
    def suggest(self, **options: Any) -> Any:
        """Rule suggestions from the sample, each with its would-be rejection rate (the
        *Suggest rules* button); options go to :func:`kqlab.validate.rule_suggestion.suggest`."""
        return self.session.suggest(**options)

    def accept_suggestion(self, suggestion_id: str) -> Any:
        """Append one suggested rule (its *Accept* button)."""
        return self.session.accept_suggestion(suggestion_id)

    # -- internals ------------------------------------------------------------------------------
    def _try(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A button handler: the error is already shown inline, so swallow it here (an
        exception in a callback would only reach the kernel's log)."""
        try:
            return fn(*args)
        except EditError:
            return None
        except KqlabError as exc:
            self.error.value = error_html(str(exc))
            return None

    def _on_change(self, change: SessionChange) -> None:
        """The session changed: redraw what depends on what changed."""
        if "policy" in change or "verdicts" in change:
            self._refresh()
        if "error" in change:
            self.error.value = error_html(self.session.error)
        if "examples" in change:
            self.golden.value = html.escape(self.session.examples_text())
        if "suggestions" in change and "policy" not in change:
            self._render_suggestions()
        if "sample" in change:
            self.form.check()
        if change.action in ("edit", "undo", "redo"):
            for callback in self._listeners:
                callback(self)

    def _refresh(self) -> None:
        """Everything the editor shows, from the session's current state."""
        s = self.session
        v = s.verdicts
        self._render_rules()
        o = s.outcomes
        n = sum(o.values()) or 1
        self.outcomes.value = " · ".join(
            f"<b>{k}</b> {c:,} ({c / n:.1%})" for k, c in o.items()) if o else \
            "no sample loaded"
        self.warning.value = error_html(" ".join((*s.warnings, *s.message_warnings)))
        self.golden.value = html.escape(s.examples_text())
        self.error.value = error_html(s.error)
        self.yaml.value = self._yaml(s.policy)
        self.undo_button.disabled = not s.history
        self.redo_button.disabled = not s.future
        if self.enforcement.value != s.policy.enforcement:
            self._syncing = True
            try:
                self.enforcement.value = s.policy.enforcement
            finally:
                self._syncing = False
        self._render_suggestions()
        # the figures last: the counts and the outcome line reach the page first, while the
        # figures are still being built
        self.figures = {} if v is None else build_figures(self.figure_names, v,
                                                          s.figure_context())
        self._figure_view.show(self.figures)

    def _yaml(self, policy: Policy) -> str:
        """The YAML view's text of ``policy``, kept for the policies of the last edits (an
        undo, a rule switched back, shows a text already made); the session's policies are
        checked as loaded, so the text is not checked again."""
        cache = self._yaml_cache
        hit = cache.pop(id(policy), None)
        if hit is None or hit[0] is not policy:
            hit = (policy, _yaml(policy))
        cache[id(policy)] = hit
        while len(cache) > _YAML_CACHE_MAX:
            del cache[next(iter(cache))]
        return hit[1]

    def _on_enforcement(self, change: dict[str, Any]) -> None:
        if not self._syncing:
            self._try(self.set_enforcement, change["new"])

    def _render_rules(self) -> None:
        """One visible row per rule of the policy, in policy order, showing its count, mode and
        severity; :attr:`rows` holds those rows' controls.

        The page is told as little as possible: ipywidgets' box view keeps the views of the
        longest common prefix of its old and new children and creates a view for every child
        after it (``ViewList.update``), about ten views a row.  So a row is never taken out of
        :attr:`rules_box` when its rule goes: it is hidden (``display: none``) where it is,
        and shown again, its count brought up to date first, when the rule comes back (undo,
        redo) — a remove or its undo changes one row's layout instead of re-creating every
        row below it.  Only a rule out of place (moved, or back at another place or with
        another kind) lays out the rows from there again (:func:`_box_order`).
        """
        found = self.session.rule_findings
        counts = {rid: {**c, "findings": found.get(rid, [])} for rid, c in self.counts.items()}
        n = (self.verdicts.count()[0] if self.verdicts is not None else 0) or 1
        zero = {"failed": 0, "rejected": 0}
        rules = self.policy.rules
        layout = tuple((r.id, r.kind) for r in rules)
        if layout == self._rules_shown:
            # the same rows: only the counts, modes and severities change
            for rule in rules:
                self._sync_row(self.rows[rule.id], rule, counts.get(rule.id, zero), n)
            return
        cache = self._row_cache
        rows = {}
        for rule, key in zip(rules, layout, strict=True):
            c = counts.get(rule.id, zero)
            hit = cache.pop(key, None)
            if hit is None:
                hit = self._row(rule, _count_html(c, n, rule.mode))
            else:
                # a row built earlier for the same rule (a rule added back, moved): reuse its
                # widgets; its count, mode and severity follow the rule (before it is shown)
                self._sync_row(hit[1], rule, c, n)
            cache[key] = hit  # most recently used last
            rows[rule.id] = hit[1]
        order = _box_order(self._box_keys, layout, hidden_max=_HIDDEN_ROWS_MAX)
        shown = set(layout)
        for key in order:
            cache[key][0].layout.display = None if key in shown else "none"
        if order != self._box_keys:
            self.rules_box.children = tuple(cache[key][0] for key in order)
            self._box_keys = order
        self.rows = rows
        self._rules_shown = layout
        boxed = set(order)  # a row in the box stays in the cache: it may be shown again
        for key in [k for k in cache if k not in boxed][:max(0, len(cache) - _ROW_CACHE_MAX)]:
            del cache[key]

    def _sync_row(self, controls: dict[str, w.Widget], rule: Rule, c: dict[str, int],
                  n: int) -> None:
        """Make a row show ``rule``: its count, and its mode and severity controls set without
        their observers editing the policy again (the session already has these values)."""
        controls["count"].value = _count_html(c, n, rule.mode)
        if controls["mode"].value != rule.mode or controls["severity"].value != rule.severity:
            self._syncing_row = True
            try:
                controls["mode"].value = rule.mode
                controls["severity"].value = rule.severity
            finally:
                self._syncing_row = False

    def _row(self, rule: Rule, count_html: str) -> tuple[w.HBox, dict[str, w.Widget]]:
        """One rule's row: count, mode, severity, edit, up, down, remove — each wired to the
        session method of the same name."""
        rid = rule.id
        count = css(w.HTML(count_html), "rule_count", id=rid)
        mode = css(w.ToggleButtons(options=list(MODES), value=rule.mode,
                                   style={"button_width": "64px"}), "rule_mode", id=rid)
        severity = css(w.Dropdown(options=list(SEVERITIES), value=rule.severity,
                                  layout=w.Layout(width="90px")), "rule_severity", id=rid)
        edit = css(w.Button(icon="pencil", tooltip="edit", layout=_small()), "rule_edit", id=rid)
        up = css(w.Button(icon="arrow-up", tooltip="move up", layout=_small()), "rule_up",
                 id=rid)
        down = css(w.Button(icon="arrow-down", tooltip="move down", layout=_small()),
                   "rule_down", id=rid)
        remove = css(w.Button(icon="trash", tooltip="remove", layout=_small()), "rule_remove",
                     id=rid)
        mode.observe(lambda ch: None if self._syncing_row else
                     self._try(self.set_mode, rid, ch["new"]), names="value")
        severity.observe(lambda ch: None if self._syncing_row else
                         self._try(self.set_severity, rid, ch["new"]), names="value")
        edit.on_click(lambda _b: self._try(self.edit, rid))
        up.on_click(lambda _b: self._try(self.move_rule, rid, -1))
        down.on_click(lambda _b: self._try(self.move_rule, rid, 1))
        remove.on_click(lambda _b: self._try(self.remove_rule, rid))
        label = w.HTML(f"<code>{html.escape(rid)}</code> <small>{html.escape(rule.kind)}</small>",
                       layout=w.Layout(width="260px"))
        controls = {"count": count, "mode": mode, "severity": severity, "edit": edit, "up": up,
                    "down": down, "remove": remove}
        row = css(w.HBox([label, count, mode, severity, edit, up, down, remove]), "rule_row",
                  id=rid)
        return row, controls

    def _render_suggestions(self) -> None:
        have = {r.id for r in self.policy.rules}
        shown = (self.suggestions, frozenset(have))
        if self._suggestions_shown is not None and self._suggestions_shown[0] is shown[0] \
                and self._suggestions_shown[1] == shown[1]:
            return  # the same suggestions and rules: the same buttons
        self._suggestions_shown = shown
        self.suggestion_buttons = {}
        rows = []
        for s in self.suggestions or ():
            accept = css(w.Button(description="Accept" if s.id not in have else "Accepted",
                                  disabled=s.id in have, layout=w.Layout(width="90px")),
                         "accept", id=s.id)
            accept.on_click(lambda _b, sid=s.id: self._try(self.accept_suggestion, sid))
            self.suggestion_buttons[s.id] = accept
            rows.append(w.HBox([accept, w.HTML(
                f"<code>{html.escape(s.id)}</code> would reject {s.rejected:,} "
                f"({s.rejection_rate:.2%}) — <small>{html.escape(s.evidence)}</small>")]))
        self.suggestions_box.children = tuple(rows)


#: rule rows kept for reuse (a rule's row survives other rules being added or removed)
_ROW_CACHE_MAX = 64

#: rows of rules no longer in the policy kept hidden in the rule box (more: the box is laid
#: out again without them, once)
_HIDDEN_ROWS_MAX = 16


def _box_order(shown: tuple[_RowKey, ...], wanted: tuple[_RowKey, ...], *,
               hidden_max: int) -> tuple[_RowKey, ...]:
    """The rule box's rows after an edit: ``wanted`` (the policy's rows, in order) as a
    subsequence, keeping as long a prefix of ``shown`` (the box's rows now) as it can.

    The page keeps the views of the common prefix of the old and new children and creates
    every view after it, so rows of rules no longer in the policy stay where they are (to be
    hidden); a rule that is no longer at its place — moved, back elsewhere, or under the same
    id with another kind (one row per id, so a page finds a rule by its class) — ends the
    prefix, and the policy's remaining rows follow in order.  More than ``hidden_max`` rows
    to hide: just ``wanted``.

    >>> _box_order((("a", "cel"), ("b", "cel")), (("b", "cel"),), hidden_max=4)
    (('a', 'cel'), ('b', 'cel'))
    >>> _box_order((("a", "cel"), ("b", "cel")), (("b", "cel"), ("a", "cel")), hidden_max=4)
    (('b', 'cel'), ('a', 'cel'))
    """
    ids = {rule_id for rule_id, _ in wanted}
    kept: list[_RowKey] = []
    i = 0
    for key in shown:
        if i < len(wanted) and key == wanted[i]:
            kept.append(key)
            i += 1
        elif key[0] not in ids:
            kept.append(key)  # a rule no longer in the policy: its row stays, hidden
        else:
            break  # a rule out of place: every row from here is laid out again
    order = (*kept, *wanted[i:])
    return order if len(order) - len(wanted) <= hidden_max else wanted


#: YAML texts the editor keeps (policies of the last edits)
_YAML_CACHE_MAX = 16


def _yaml(policy: Policy) -> str:
    from kqlab.policy import dump_policy

    return dump_policy(policy, check=False)


def _small() -> w.Layout:
    return w.Layout(width="34px")


def _count_html(c: dict[str, Any], n: int, mode: str) -> str:
    found = c.get("findings") or ()
    if found:  # the count is no evidence: say why, as every command does
        return ('<span style="color:#c0392b" title="' + html.escape("; ".join(found))
                + f'">⚠ {html.escape(found[0])}</span>')
    failed = c["failed"]
    colour = "#c0392b" if failed and mode == "reject" else ("#e6a23c" if failed else "#4c9a6a")
    return (f'<span style="color:{colour}" title="records failing / rejected by this rule">'
            f"{failed:,} failed ({failed / n:.2%}) · {c['rejected']:,} rejected</span>")
