"""``PolicyEditor``: author a policy against a loaded sample, with live per-rule counts.

One :class:`~kqlab.validate.Replayer` holds the sample's decoded columns and every rule's
result, so an edit re-evaluates only the rule that changed (issue 7: "it must feel instant").
Every button calls a public method (:meth:`PolicyEditor.add_rule`, :meth:`update_rule`, ...):
notebooks and tests drive the same code the clicks do.  An edit that makes the policy invalid
(a bad parameter, a CEL expression that does not compile) is shown inline and leaves the
current policy untouched.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from kqlab.errors import KqlabError
from kqlab.policy.catalog import KINDS, Param
from kqlab.policy.cel import CelSyntaxError, compile_cel
from kqlab.policy.model import ENFORCEMENT_PROFILES, MODES, SEVERITIES, Policy, Rule
from kqlab.widgets._common import FigureView, build_figures, css, error_html


class EditError(KqlabError, ValueError):
    """An edit the editor refused (the policy stays as it was); the message says why."""


def check_cel(expr: str) -> str | None:
    """None when ``expr`` compiles, else the compiler's message (with line and column)."""
    try:
        compile_cel(expr)
    except CelSyntaxError as exc:
        return str(exc)
    return None


def _check_policy(policy: Policy) -> Policy:
    """``policy`` validated as if loaded from YAML (unknown or ill-typed parameters, missing
    required ones), plus every CEL expression compiled: the loader does not compile CEL, and an
    expression that does not compile must be an inline error, not a failed replay."""
    from kqlab.policy import policy_from_dict, policy_to_dict

    checked = policy_from_dict(policy_to_dict(policy), source="editor")
    for rule in policy.rules:
        for expr in (rule.param("expr") if rule.kind == "cel" else None, rule.when):
            if expr:
                problem = check_cel(expr)
                if problem:
                    raise EditError(f"rule {rule.id}: {problem}")
    return checked


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


class RuleForm:
    """The add/edit form of one rule, its parameter inputs generated from the catalog entry of
    the chosen kind; CEL inputs (``expr`` of a ``cel`` rule, every ``when``) are compiled as
    you type and the verdict is shown under the form."""

    def __init__(self, on_apply: Callable[[], Any]):
        self.kind = w.Dropdown(options=sorted(KINDS), description="kind")
        self.rule_id = css(w.Text(description="id", continuous_update=True), "form_id")
        self.message = w.Text(description="message", placeholder="catalog default")
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
        self.fields: dict[str, w.Widget] = {}
        self._params = w.VBox()
        self.apply.on_click(lambda _b: on_apply())
        self.kind.observe(lambda ch: self._build(ch["new"], {}), names="value")
        self.when.observe(lambda _ch: self._check_cel(), names="value")
        self.widget = css(w.VBox([
            w.HBox([self.kind, self.rule_id]), self._params,
            w.HBox([self.message, self.when]), w.HBox([self.severity, self.mode]),
            self.cel_status, w.HBox([self.apply]), self.error,
        ]), "form")
        self._build(self.kind.value, {})

    def _build(self, kind: str, params: dict[str, Any]) -> None:
        self.fields = {}
        for p in KINDS[kind].params:
            widget = css(_param_widget(p, params.get(p.name)), "form_param", name=p.name)
            if p.name == "expr":
                widget.observe(lambda _ch: self._check_cel(), names="value")
            self.fields[p.name] = widget
        self._params.children = tuple(self.fields.values())
        self._check_cel()

    def load(self, rule: Rule | None = None, *, kind: str | None = None,
             rule_id: str = "") -> None:
        """Show ``rule`` for editing, or a blank form of ``kind`` for a new rule."""
        self.editing = rule.id if rule is not None else None
        kind = rule.kind if rule is not None else (kind or self.kind.value)
        if kind not in KINDS:
            raise EditError(f"unknown rule kind {kind!r}; known kinds: {', '.join(sorted(KINDS))}")
        with self.kind.hold_trait_notifications():
            self.kind.unobserve_all("value")
            self.kind.value = kind
            self.kind.observe(lambda ch: self._build(ch["new"], {}), names="value")
        self.rule_id.value = rule.id if rule is not None else rule_id
        self.message.value = (rule.message or "") if rule is not None else ""
        self.when.value = (rule.when or "") if rule is not None else ""
        self.severity.value = rule.severity if rule is not None else "error"
        self.mode.value = rule.mode if rule is not None else "reject"
        self.error.value = ""
        self._build(kind, dict(rule.params) if rule is not None else {})

    def _check_cel(self) -> None:
        """Compile the form's CEL inputs; the status line says ok or what is wrong, where."""
        problems = []
        exprs = [("when", self.when.value.strip())]
        if "expr" in self.fields:
            exprs.insert(0, ("expr", self.fields["expr"].value.strip()))
        checked = 0
        for name, expr in exprs:
            if not expr:
                continue
            checked += 1
            problem = check_cel(expr)
            if problem:
                problems.append(f"{name}: {problem}")
        if problems:
            self.cel_status.value = error_html("; ".join(problems))
        elif checked:
            self.cel_status.value = '<span style="color:#4c9a6a">✓ CEL compiles</span>'
        else:
            self.cel_status.value = ""

    @property
    def cel_ok(self) -> bool:
        """Whether every CEL input of the form compiles (empty ones count as fine)."""
        return "⚠" not in self.cel_status.value

    def rule(self) -> Rule:
        """The rule the form describes (``EditError`` says what is missing or unreadable)."""
        rule_id = self.rule_id.value.strip()
        if not rule_id:
            raise EditError("a rule needs an id")
        params = {}
        for p in KINDS[self.kind.value].params:
            value = _parse(p, self.fields[p.name])
            if value is not None and not (p.type == "bool" and value == p.default):
                params[p.name] = value
        return Rule(id=rule_id, kind=self.kind.value, params=params,
                    message=self.message.value.strip() or None,
                    when=self.when.value.strip() or None,
                    severity=self.severity.value, mode=self.mode.value)


# -- the editor ---------------------------------------------------------------------------------

class PolicyEditor:
    """The rule list of ``policy`` with live counts on the sample held by ``replayer``.

    Parameters
    ----------
    replayer
        A :class:`~kqlab.validate.Replayer` (or anything ``Replayer`` accepts as a source:
        segment path, records table, sample); it caches decoded columns and rule results, so
        an edit re-evaluates only the changed rule.
    policy
        The starting policy.
    figures
        Which figures to refresh after each edit (names of ``kqlab.widgets.FIGURES``:
        ``reasons``, ``offsets``, ``timeline``, ``impact``); kept in :attr:`figures`.
    now
        The replay clock when ``replayer`` is a source (default: wall clock).

    Every UI action has a method: :meth:`add_rule`, :meth:`update_rule`, :meth:`remove_rule`,
    :meth:`move_rule`, :meth:`set_mode`, :meth:`set_severity`, :meth:`set_enforcement`,
    :meth:`edit` / :meth:`new_rule` + :meth:`apply_form`, :meth:`suggest`,
    :meth:`accept_suggestion`, :meth:`apply_yaml`.  Each edit returns the new verdicts, or
    raises :class:`EditError` (also shown inline in :attr:`error`) and keeps the policy.
    """

    def __init__(self, replayer: Any, policy: Policy, *,
                 figures: tuple[str, ...] = ("reasons", "impact"), now: int | None = None):
        from kqlab.validate.replayer import Replayer

        self.replayer = replayer if isinstance(replayer, Replayer) else Replayer(replayer, now=now)
        self.figure_names = tuple(figures)
        self.policy = _check_policy(policy)
        self.verdicts: Any = None
        self.previous: Any = None  # verdicts before the last edit (the impact figure's base)
        self.figures: dict[str, Any] = {}
        self.suggestions: Any = None
        self.history: list[Policy] = []
        self._listeners: list[Callable[[PolicyEditor], Any]] = []

        self.error = css(w.HTML(""), "error")
        self.outcomes = css(w.HTML(""), "outcomes")
        self.enforcement = css(w.ToggleButtons(options=list(ENFORCEMENT_PROFILES),
                                               value=self.policy.enforcement,
                                               description="enforcement"), "enforcement")
        self.enforcement.observe(self._on_enforcement, names="value")
        self.new_kind = css(w.Dropdown(options=sorted(KINDS), value="cel",
                                       description="new rule"), "new_kind")
        self.add_button = css(w.Button(description="Add rule", icon="plus"), "add_rule")
        self.add_button.on_click(lambda _b: self.new_rule(self.new_kind.value))
        self.rules_box = w.VBox()
        self.rows: dict[str, dict[str, w.Widget]] = {}
        self.form = RuleForm(self.apply_form)
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
        self._rules_shown: tuple[Any, ...] | None = None  # what the rule rows were built for
        #: rule rows built so far, by (id, kind, mode, severity), least recently used first
        self._row_cache: dict[tuple[str, str, str, str], tuple[w.HBox, dict[str, w.Widget]]] = {}
        tabs = w.Tab(children=[
            w.VBox([self.rules_box, w.HBox([self.new_kind, self.add_button]), self.form.widget]),
            w.VBox([self.suggest_button, self.suggestions_box]),
            w.VBox([self.yaml, self.yaml_apply]),
        ])
        for i, title in enumerate(("Rules", "Suggestions", "YAML")):
            tabs.set_title(i, title)
        self.widget = css(w.VBox([self.enforcement, self.outcomes, self.error, tabs,
                                  self.figures_out]), "editor")
        self._refresh()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def on_change(self, callback: Callable[[PolicyEditor], Any]) -> None:
        """Call ``callback(editor)`` after every accepted edit (the workbench follows along)."""
        self._listeners.append(callback)

    # -- state --------------------------------------------------------------------------------
    @property
    def counts(self) -> dict[str, dict[str, int]]:
        """Per rule id: ``failed`` records, ``rejected`` records (0 for ``observe`` rules) and
        ``rejected_batches``, from the current verdicts (the implicit ``decode:value`` too)."""
        return {r["rule"]: {"failed": r["failed_records"], "rejected": r["rejected_records"],
                            "rejected_batches": r["rejected_batches"]}
                for r in self.verdicts.rules.to_pylist()}

    # -- edits (the Python twins of the buttons) ---------------------------------------------
    def add_rule(self, rule: Rule | str, *, index: int | None = None, **fields: Any) -> Any:
        """Add ``rule`` (or a rule of kind ``rule`` built from ``fields``: ``id``, ``params``
        or the parameters inline, ``message``, ``when``, ``severity``, ``mode``)."""
        if isinstance(rule, str):
            rule = _make_rule(rule, fields)
        if any(r.id == rule.id for r in self.policy.rules):
            raise self._fail(f"there is already a rule {rule.id!r}")
        rules = list(self.policy.rules)
        rules.insert(len(rules) if index is None else index, rule)
        return self._commit(self.policy.with_rules(rules))

    def update_rule(self, rule_id: str, **changes: Any) -> Any:
        """Change one rule: ``params={...}`` replaces parameters (a value of None drops one),
        other parameters may be given inline; ``message``, ``when``, ``severity``, ``mode``,
        ``id`` (rename) and ``kind`` as named."""
        old = self._rule(rule_id)
        params = dict(old.params)
        for name, value in {**changes.pop("params", {}),
                            **{k: changes.pop(k) for k in list(changes)
                               if k not in _RULE_FIELDS}}.items():
            if value is None:
                params.pop(name, None)
            else:
                params[name] = value
        new = Rule(id=changes.get("id", old.id), kind=changes.get("kind", old.kind),
                   params=params, message=changes.get("message", old.message),
                   description=changes.get("description", old.description),
                   severity=changes.get("severity", old.severity),
                   mode=changes.get("mode", old.mode), when=changes.get("when", old.when),
                   examples=old.examples)
        return self.replace_rule(rule_id, new)

    def replace_rule(self, rule_id: str, rule: Rule) -> Any:
        """Put ``rule`` where rule ``rule_id`` is."""
        self._rule(rule_id)
        if rule.id != rule_id and any(r.id == rule.id for r in self.policy.rules):
            raise self._fail(f"there is already a rule {rule.id!r}")
        return self._commit(self.policy.with_rules(
            [rule if r.id == rule_id else r for r in self.policy.rules]))

    def remove_rule(self, rule_id: str) -> Any:
        """Remove rule ``rule_id``."""
        self._rule(rule_id)
        return self._commit(self.policy.with_rules(
            [r for r in self.policy.rules if r.id != rule_id]))

    def move_rule(self, rule_id: str, delta: int) -> Any:
        """Move rule ``rule_id`` ``delta`` places (negative: up).  Order matters: a record's
        policy error is its first failing ``reject`` rule."""
        rules = list(self.policy.rules)
        i = rules.index(self._rule(rule_id))
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
            raise self._fail(f"enforcement must be one of {', '.join(ENFORCEMENT_PROFILES)}")
        return self._commit(_with(self.policy, enforcement=profile))

    def set_policy(self, policy: Policy) -> Any:
        """Replace the whole policy (its unchanged rules still come from the cache)."""
        return self._commit(policy)

    def apply_yaml(self, text: str) -> Any:
        """Replace the policy with the YAML ``text`` (the YAML tab's Apply button)."""
        from kqlab.policy import loads_policy

        try:
            policy = loads_policy(text, source="editor YAML")
        except KqlabError as exc:
            raise self._fail(str(exc)) from None
        return self._commit(policy)

    def undo(self) -> Any:
        """Go back to the policy before the last accepted edit."""
        if not self.history:
            raise self._fail("nothing to undo")
        policy = self.history.pop()
        out = self._commit(policy)
        self.history.pop()
        return out

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
        self.form.load(self._rule(rule_id))
        self.form.widget.layout.display = None
        return self.form

    def apply_form(self) -> Any:
        """Apply the form: add the new rule, or replace the one being edited."""
        try:
            rule = self.form.rule()
        except EditError as exc:
            self.form.error.value = error_html(str(exc))
            raise self._fail(str(exc)) from None
        try:
            if self.form.editing is None:
                out = self.add_rule(rule)
            else:
                out = self.replace_rule(self.form.editing, rule)
        except EditError as exc:
            self.form.error.value = error_html(str(exc))
            raise
        self.form.error.value = ""
        self.form.widget.layout.display = "none"
        self.form.editing = None
        return out

    # -- suggestions ----------------------------------------------------------------------------
    def suggest(self, **options: Any) -> Any:
        """Rule suggestions from the sample, each with its would-be rejection rate (the
        *Suggest rules* button); options go to :func:`kqlab.validate.rule_suggestion.suggest`."""
        from kqlab.validate.rule_suggestion import suggest

        r = self.replayer
        self.suggestions = suggest(r.sample, self.policy, now=r.now, resolver=r.resolver,
                                   **options)
        self._render_suggestions()
        return self.suggestions

    def accept_suggestion(self, suggestion_id: str) -> Any:
        """Append one suggested rule (its *Accept* button)."""
        if self.suggestions is None:
            self.suggest()
        try:
            s = self.suggestions[suggestion_id]
        except KeyError as exc:
            raise self._fail(str(exc.args[0])) from None
        out = self.add_rule(s.rule)
        self._render_suggestions()
        return out

    # -- internals ------------------------------------------------------------------------------
    def _rule(self, rule_id: str) -> Rule:
        try:
            return self.policy.rule(rule_id)
        except KeyError as exc:
            raise self._fail(str(exc.args[0])) from None

    def _fail(self, message: str) -> EditError:
        self.error.value = error_html(message)
        return EditError(message)

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

    def _commit(self, policy: Policy) -> Any:
        """Validate ``policy``, replay it incrementally, refresh counts, figures and views."""
        try:
            checked = _check_policy(policy)
            verdicts = self.replayer.run(checked)
        except KqlabError as exc:
            raise self._fail(str(exc)) from None
        self.history.append(self.policy)
        self.previous, self.verdicts, self.policy = self.verdicts, verdicts, checked
        self.error.value = ""
        self._refresh(verdicts)
        for callback in self._listeners:
            callback(self)
        return verdicts

    def _refresh(self, verdicts: Any = None) -> None:
        if verdicts is None:
            self.verdicts = self.replayer.run(self.policy)
        self.figures = build_figures(self.figure_names, self.verdicts, {
            "sample": self.replayer, "before": self.previous,
            "policies": (self.history[-1], self.policy) if self.history else None})
        self._figure_view.show(self.figures)
        self._render_rules()
        o = self.verdicts.by_outcome()
        n = sum(o.values()) or 1
        self.outcomes.value = " · ".join(
            f"<b>{k}</b> {v:,} ({v / n:.1%})" for k, v in o.items())
        self.yaml.value = _yaml(self.policy)
        if self.enforcement.value != self.policy.enforcement:
            self.enforcement.unobserve(self._on_enforcement, names="value")
            self.enforcement.value = self.policy.enforcement
            self.enforcement.observe(self._on_enforcement, names="value")

    def _on_enforcement(self, change: dict[str, Any]) -> None:
        self._try(self.set_enforcement, change["new"])

    def _render_rules(self) -> None:
        counts = self.counts
        n = self.verdicts.count()[0] or 1
        layout = tuple((r.id, r.kind, r.mode, r.severity) for r in self.policy.rules)
        if layout == self._rules_shown and set(self.rows) == {r.id for r in self.policy.rules}:
            # the same rows: only the counts change (rebuilding ~8 widgets a rule would cost
            # more than the rest of a refresh's widget work)
            for rule in self.policy.rules:
                c = counts.get(rule.id, {"failed": 0, "rejected": 0})
                self.rows[rule.id]["count"].value = _count_html(c, n, rule.mode)
            return
        self._rules_shown = layout
        self.rows = {}
        rows = []
        cache = self._row_cache
        for rule in self.policy.rules:
            c = counts.get(rule.id, {"failed": 0, "rejected": 0})
            key = (rule.id, rule.kind, rule.mode, rule.severity)
            hit = cache.get(key)
            if hit is not None and hit[1]["mode"].value == rule.mode and \
                    hit[1]["severity"].value == rule.severity:
                # a row built earlier for the same rule layout (a rule added back, another
                # rule's mode switched): reuse its widgets, only the count text changes
                cache[key] = cache.pop(key)  # most recently used last
                hit[1]["count"].value = _count_html(c, n, rule.mode)
                self.rows[rule.id] = hit[1]
                rows.append(hit[0])
                continue
            count = css(w.HTML(_count_html(c, n, rule.mode)), "rule_count", id=rule.id)
            mode = css(w.ToggleButtons(options=list(MODES), value=rule.mode,
                                       style={"button_width": "64px"}), "rule_mode", id=rule.id)
            severity = css(w.Dropdown(options=list(SEVERITIES), value=rule.severity,
                                      layout=w.Layout(width="90px")), "rule_severity", id=rule.id)
            edit = css(w.Button(icon="pencil", tooltip="edit", layout=_small()), "rule_edit",
                       id=rule.id)
            up = css(w.Button(icon="arrow-up", tooltip="move up", layout=_small()), "rule_up",
                     id=rule.id)
            down = css(w.Button(icon="arrow-down", tooltip="move down", layout=_small()),
                       "rule_down", id=rule.id)
            remove = css(w.Button(icon="trash", tooltip="remove", layout=_small()),
                         "rule_remove", id=rule.id)
            rid = rule.id
            mode.observe(lambda ch, rid=rid: self._try(self.set_mode, rid, ch["new"]),
                         names="value")
            severity.observe(lambda ch, rid=rid: self._try(self.set_severity, rid, ch["new"]),
                             names="value")
            edit.on_click(lambda _b, rid=rid: self._try(self.edit, rid))
            up.on_click(lambda _b, rid=rid: self._try(self.move_rule, rid, -1))
            down.on_click(lambda _b, rid=rid: self._try(self.move_rule, rid, 1))
            remove.on_click(lambda _b, rid=rid: self._try(self.remove_rule, rid))
            label = w.HTML(f"<code>{html.escape(rule.id)}</code> "
                           f"<small>{html.escape(rule.kind)}</small>",
                           layout=w.Layout(width="260px"))
            self.rows[rule.id] = {"count": count, "mode": mode, "severity": severity,
                                  "edit": edit, "up": up, "down": down, "remove": remove}
            row = css(w.HBox([label, count, mode, severity, edit, up, down, remove]), "rule_row",
                      id=rule.id)
            cache[key] = (row, self.rows[rule.id])
            rows.append(row)
        while len(cache) > _ROW_CACHE_MAX:
            del cache[next(iter(cache))]
        self.rules_box.children = tuple(rows)

    def _render_suggestions(self) -> None:
        self.suggestion_buttons: dict[str, w.Button] = {}
        have = {r.id for r in self.policy.rules}
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

_RULE_FIELDS = {"id", "kind", "message", "description", "severity", "mode", "when"}


def _make_rule(kind: str, fields: dict[str, Any]) -> Rule:
    fields = dict(fields)
    params = dict(fields.pop("params", {}))
    named = {k: fields.pop(k) for k in list(fields) if k in _RULE_FIELDS}
    params.update(fields)
    if "id" not in named:
        raise EditError("a new rule needs an id")
    return Rule(kind=kind, params=params, **named)


def _with(policy: Policy, **changes: Any) -> Policy:
    from dataclasses import fields

    values = {f.name: getattr(policy, f.name) for f in fields(policy)}
    values.update(changes)
    return Policy(**values)


def _yaml(policy: Policy) -> str:
    from kqlab.policy import dump_policy

    return dump_policy(policy)


def _small() -> w.Layout:
    return w.Layout(width="34px")


def _count_html(c: dict[str, int], n: int, mode: str) -> str:
    failed = c["failed"]
    colour = "#c0392b" if failed and mode == "reject" else ("#e6a23c" if failed else "#4c9a6a")
    return (f'<span style="color:{colour}" title="records failing / rejected by this rule">'
            f"{failed:,} failed ({failed / n:.2%}) · {c['rejected']:,} rejected</span>")
