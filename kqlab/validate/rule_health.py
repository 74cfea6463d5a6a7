"""What a replay can tell about a rule itself, not about the records: a field or header it
reads that no record of the sample has, and whether every one of its evaluations errored.

A policy without a declared schema cannot be checked for ``field: amuont`` when it is loaded
(:mod:`kqlab.policy.content_checks` needs a schema).  At replay time the sample is in hand:
a ``field_range`` on a field no decoded record has passes every record (absent passes), and
``value.curency == 'EUR'`` errors on every one — both look like ordinary results.  The replay
computes these findings once per rule, with its result (:func:`unseen_names` from
:meth:`kqlab.validate.replayer.Replayer.evaluate`), and writes them into the verdicts' rule
table (``unseen``, ``judged_records``, ``broken``: :mod:`kqlab.validate.rule_table`); every
surface — the CLI commands, the report, the workbench's rule rows — reads them from there and words
them with :func:`findings` (one wording), so no view recomputes or contradicts another.

Evidence, stated with each finding: how many records were looked at (the decoded records
for a value field, every record for a header) and the nearest name that *was* seen.  A
field is unseen when the decoded column's type has no such field (Arrow's inferred JSON
type is the union of every record's keys; Avro's the writer schemas'), or, for values kept
as Python objects, when no record's object has the key.  Maps, lists and values of no
known shape are never claimed unseen.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from kqlab.validate.rule_table import Unseen

if TYPE_CHECKING:
    from kqlab.policy.model import Policy, Rule
    from kqlab.validate.context import EvalContext

__all__ = ["Finding", "findings", "findings_of", "referenced", "strict_failures",
           "unseen_names"]

#: rule kinds whose ``name`` parameter is a header name
_HEADER_KINDS = frozenset({"header_required", "header_values", "header_pattern"})


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing wrong with a rule itself: ``kind`` is ``unseen`` or ``broken``."""

    rule: str
    kind: str
    text: str


# ------------------------------------------------------------------------ what a rule reads
def referenced(rule: Rule) -> list[tuple[str, tuple[str, ...]]]:
    """The fields (``("field", path)``) and headers (``("header", (name,))``) ``rule`` reads
    by name: a field kind's ``field``, a header kind's ``name``, and in its CEL (``expr``,
    ``when``) every ``value.a.b`` / ``value['a']`` chain and ``headers['name']``."""
    out: list[tuple[str, tuple[str, ...]]] = []
    field = rule.params.get("field")
    if rule.kind.startswith("field_") and isinstance(field, str) and field:
        out.append(("field", tuple(field.split("."))))
    name = rule.params.get("name")
    if rule.kind in _HEADER_KINDS and isinstance(name, str):
        out.append(("header", (name,)))
    for expr in (rule.params.get("expr") if rule.kind == "cel" else None, rule.when):
        if isinstance(expr, str) and expr.strip():
            out.extend(r for r in _cel_references(expr) if r not in out)
    return out


def _cel_references(expr: str) -> list[tuple[str, tuple[str, ...]]]:
    """``value`` field chains and ``headers[...]`` names in ``expr`` (cel-python's parse
    tree, as the load-time checks walk it; nothing when it does not parse)."""
    from kqlab.policy.expression_checks import ANALYSED_CHARS, _parse

    if len(expr) > ANALYSED_CHARS:
        return []
    tree = _parse(expr)
    if tree is None:
        return []
    chains: list[tuple[str, ...]] = []
    for node in tree.iter_subtrees():
        if node.data in ("member_dot", "member_index"):
            chain = _chain(node)
            if chain is not None and chain[0] in ("value", "headers") and len(chain) > 1:
                chains.append(chain)
    # the longest chains only: value.a.b covers value.a
    out: list[tuple[str, tuple[str, ...]]] = []
    for c in chains:
        if any(len(o) > len(c) and o[:len(c)] == c for o in chains):
            continue
        ref = ("field", c[1:]) if c[0] == "value" else ("header", c[1:2])
        if ref not in out:
            out.append(ref)
    return out


def _chain(node: Any) -> tuple[str, ...] | None:
    """``("value", "a", "b")`` for ``value.a.b`` / ``value['a'].b``; None for anything else."""
    from lark import Token, Tree

    from kqlab.policy.expression_checks import _string_literal

    if isinstance(node, Token):
        return (str(node),) if node.type == "IDENT" else None
    if not isinstance(node, Tree):
        return None
    kids = node.children
    if node.data in ("member", "primary") and len(kids) == 1:
        return _chain(kids[0])
    if node.data == "ident" and len(kids) == 1:
        return (str(kids[0]),)
    if node.data == "member_dot" and len(kids) == 2:
        head = _chain(kids[0])
        return None if head is None else (*head, str(kids[1]))
    if node.data == "member_index" and len(kids) == 2:
        head = _chain(kids[0])
        key = _string_literal(_unwrap(kids[1]))
        return None if head is None or key is None else (*head, key)
    return None


def _unwrap(node: Any) -> Any:
    """The single leaf under a chain of one-child nodes (an index expression's literal)."""
    from lark import Tree

    while isinstance(node, Tree) and len(node.children) == 1:
        node = node.children[0]
    if isinstance(node, Tree) and node.data == "literal" and node.children:
        return node.children[0]
    return node


# ---------------------------------------------------------------------- what the sample has
def unseen_names(ctx: EvalContext, rule: Rule, control: np.ndarray) -> tuple[Unseen, ...]:
    """The names ``rule`` reads that no record of ``ctx`` has (transaction markers,
    ``control``, are not looked at); see the module docstring for the evidence."""
    refs = referenced(rule)
    if not refs or not ctx.n:
        return ()
    out = []
    for what, path in refs:
        found = _header_unseen(ctx, path[0], control) if what == "header" else \
            _field_unseen(ctx, path, control)
        if found is not None:
            out.append(found)
    return tuple(out)


def _header_unseen(ctx: EvalContext, name: str, control: np.ndarray) -> Unseen | None:
    def names() -> list[str]:
        keys = ctx.headers.keys
        return sorted({k for k in keys.unique().to_pylist() if k is not None}) \
            if len(keys) else []

    seen = ctx.memo("health:header_names", names)
    if name in seen:
        return None
    looked = int((~control).sum()) if len(control) == ctx.n else ctx.n
    return Unseen("header", name, _nearest(name, seen), looked)


def _decoded_rows(ctx: EvalContext, control: np.ndarray) -> np.ndarray:
    """The records whose value decoded (not a tombstone, not a marker)."""
    ok = ctx.value_size >= 0
    failed = ctx.decode_failed("value")
    if len(failed) == ctx.n:
        ok = ok & ~failed
    if len(control) == ctx.n:
        ok = ok & ~control
    return ok


def _field_unseen(ctx: EvalContext, path: tuple[str, ...], control: np.ndarray
                  ) -> Unseen | None:
    from kqlab.validate.rules import decodes

    if not decodes(ctx.value_format) or (ctx.value_format and
                                         ctx.value_format.format == "string"):
        return None
    rows = _decoded_rows(ctx, control)
    looked = int(rows.sum())
    if not looked:
        return None
    decoded = ctx.decoded("value")
    if decoded.fallback is None:
        missing = _arrow_missing(decoded.values.type, path)
    else:
        missing = _python_missing(ctx, decoded.python_values(), rows, path)
    if missing is None:
        return None
    depth, names = missing
    prefix = ".".join(path[:depth])
    close = _nearest(path[depth], names)
    nearest = None if close is None else (f"{prefix}.{close}" if prefix else close)
    return Unseen("field", ".".join(path), nearest, looked)


def _arrow_missing(t: pa.DataType, path: tuple[str, ...]
                   ) -> tuple[int, list[str]] | None:
    """Where ``path`` leaves a struct type (its depth and the names there), or None."""
    for depth, step in enumerate(path):
        if pa.types.is_dictionary(t):
            t = t.value_type
        if not pa.types.is_struct(t):
            return None  # a map, a list, a scalar, null: no claim
        names = [f.name for f in t]
        if step not in names:
            return depth, names
        t = t.field(step).type
    return None


def _python_missing(ctx: EvalContext, values: Sequence[object], rows: np.ndarray,
                    path: tuple[str, ...]) -> tuple[int, list[str]] | None:
    """:func:`_arrow_missing` over Python objects: the first step no record's object has
    (a step some record meets as a non-object makes no claim)."""
    level: list[object] = [values[i] for i in np.flatnonzero(rows).tolist()]
    for depth, step in enumerate(path):
        maps = [v for v in level if isinstance(v, Mapping)]
        if not maps or len(maps) < sum(v is not None for v in level):
            return None
        nxt = [m[step] for m in maps if step in m]
        if not nxt:
            return depth, sorted({str(k) for m in maps for k in m})
        level = nxt
    return None


def _nearest(name: str, names: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return close[0] if close else None


# ---------------------------------------------------------------------------- the wording
def findings_of(row: Mapping[str, Any]) -> list[Finding]:
    """What is wrong with the rule of one rule-table row (a dict of its columns)."""
    out = []
    rid = row["rule"]
    for u in row.get("unseen") or ():
        hint = f" — did you mean {u['nearest']!r}?" if u.get("nearest") else ""
        where = "decoded records" if u["what"] == "field" else "records"
        out.append(Finding(rid, "unseen", f"rule {rid}: {u['what']} {u['name']!r} is in none "
                                          f"of the {u['looked_at']:,} {where} looked at{hint}"))
    if row.get("broken"):
        n = int(row.get("evaluation_errors") or 0)
        out.append(Finding(rid, "broken", f"rule {rid} is broken: every one of its {n:,} "
                                          "evaluations errored (evaluation errors, not "
                                          "rejections of the data)"))
    return out


def findings(rules: pa.Table | Sequence[Mapping[str, Any]]) -> list[Finding]:
    """Every finding of a verdicts' rule table (or its rows), in rule order."""
    rows = rules.to_pylist() if isinstance(rules, pa.Table) else rules
    return [f for row in rows for f in findings_of(row)]


def strict_failures(policy: Policy | None, rules: pa.Table | Sequence[Mapping[str, Any]],
                    strict: bool = False) -> list[Finding]:
    """The findings that fail a command: all of them when ``strict`` (``--strict``) or the
    policy says ``strict: true``; none otherwise (they are printed as warnings)."""
    if not (strict or (policy is not None and getattr(policy, "strict", False))):
        return []
    return findings(rules)
