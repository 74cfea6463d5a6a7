"""kqlab's results as notebook output: ``application/vnd.kqlab.verdicts+json`` beside HTML.

Why a MIME type of its own: a notebook saved with it shows the replay's summary, rules table
and reasons chart in JupyterLab / Notebook 7 (the ``kqlab-lab`` renderer shipped in
``kqlab/labextension``) with the kernel stopped and no widget state, and stays small on disk —
a few KB of JSON, where a widget's saved state carries its whole JavaScript.  Front ends
without the renderer show the ``text/html`` fallback built here from the same payload, so
the two cannot say different things.

Every number in a payload is the verdict core's (``summary()``, ``by_reason()`` of the
verdicts, ``table()`` / ``counts()`` of a fidelity report); nothing is parsed back from text.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

#: the MIME type of kqlab's results (the payload's ``kind`` says which result it is)
MIME_TYPE = "application/vnd.kqlab.verdicts+json"
#: the payload's version: the renderer refuses versions it does not know, with a message
PAYLOAD_VERSION = 1
#: rows of the reasons chart and of the issue list kept in a payload (the rest counted)
MAX_REASONS, MAX_ISSUES = 15, 10

_SUMMARY_KEYS = ("policy", "policy_hash", "profile", "framing", "now", "records", "batches",
                 "outcomes", "producer_actions", "records_lost", "records_delayed",
                 "producer_clients")


def replay_payload(view: Any) -> dict[str, Any]:
    """The payload of a replay's verdicts (any engine's: ``summary()`` and ``by_reason()``)."""
    summary = view.summary()
    reasons = view.by_reason().to_pylist()
    issues = summary.get("issues", [])
    return {
        "version": PAYLOAD_VERSION, "kind": "replay",
        "engine": summary.get("engine", "local"),
        "summary": {k: summary[k] for k in _SUMMARY_KEYS if k in summary},
        "rules": summary["by_rule"],
        "errors": summary["by_error"],
        "reasons": reasons[:MAX_REASONS], "reasons_total": len(reasons),
        "issues": issues[:MAX_ISSUES], "issues_total": len(issues),
        "notes": list(summary.get("notes", [])),
    }


def fidelity_payload(report: Any) -> dict[str, Any]:
    """The payload of a fidelity report: per rule and target the verdict and why."""
    rows = [{k: r[k] for k in ("rule", "kind", "mode", "severity", "implicit")}
            | {"targets": {t: {"verdict": c["verdict"], "why": c["why"]}
                           for t, c in r["targets"].items()}}
            for r in report.table()]
    return {"version": PAYLOAD_VERSION, "kind": "fidelity", "policy": report.policy,
            "targets": list(report.exports), "counts": report.counts(), "rows": rows,
            "skipped": dict(report.skipped), "warnings": dict(report.warnings)}


def bundle(payload: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The display bundle: the payload, its HTML fallback and a one-line text."""
    return {MIME_TYPE: dict(payload), "text/html": payload_html(payload), "text/plain": text}


def replay_text(payload: Mapping[str, Any]) -> str:
    """One line: the policy and the records per outcome."""
    s = payload["summary"]
    outcomes = ", ".join(f"{k} {v:,}" for k, v in s["outcomes"].items())
    return (f"Verdicts of policy {s.get('policy')!r} ({s['records']:,} records, "
            f"{s['batches']:,} batches): {outcomes}")


def fidelity_text(payload: Mapping[str, Any]) -> str:
    """One line: the policy and the targets."""
    return (f"Fidelity report of policy {payload['policy']!r}: {len(payload['rows'])} rules "
            f"on {', '.join(payload['targets'])}")


def payload_html(payload: Mapping[str, Any]) -> str:
    """The ``text/html`` fallback of a payload (plain tables, no script)."""
    if payload["kind"] == "replay":
        return _replay_html(payload)
    if payload["kind"] == "fidelity":
        return _fidelity_html(payload)
    raise ValueError(f"unknown kqlab payload kind {payload['kind']!r}")


def _table(head: list[str], rows: list[list[Any]]) -> str:
    e = html.escape
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{e(_fmt(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "" if value is None else ("yes" if value else "no")
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _librdkafka_clause(s: Mapping[str, Any]) -> str:
    """`` (librdkafka: lost n, delayed m)`` when a librdkafka producer's counts differ from the
    Java producer's (it fails the batches Java splits; docs/producer-outcomes.md)."""
    from kqlab.validate.verdicts import librdkafka_counts

    rd = librdkafka_counts(s)
    if rd is None:
        return ""
    return f" (Java producer; librdkafka: lost {rd['lost']:,}, delayed {rd['delayed']:,})"


def _replay_html(p: Mapping[str, Any]) -> str:
    s = p["summary"]
    e = html.escape
    outcomes = ", ".join(f"{e(k)} <b>{v:,}</b>" for k, v in s["outcomes"].items())
    head = (f"<p><b>kqlab replay</b> of policy <code>{e(str(s.get('policy')))}</code> "
            f"({e(str(s.get('profile')))}, {e(str(s.get('framing')))} framing): "
            f"{s['records']:,} records in {s['batches']:,} batches — {outcomes}; "
            f"lost {s.get('records_lost', 0):,}, delayed {s.get('records_delayed', 0):,}"
            f"{_librdkafka_clause(s)}</p>")
    rules = _table(["rule", "kind", "mode", "failed", "rejected records", "rejected batches"],
                   [[r["rule"], r["kind"], r["mode"], r["failed_records"],
                     r["rejected_records"], r["rejected_batches"]] for r in p["rules"]])
    reasons = _table(["reason", "culprit", "collateral", "not enforced"],
                     [[r["reason"], r["culprit"], r["collateral"], r["not_enforced"]]
                      for r in p["reasons"]])
    return f"<div class='kqlab-verdicts'>{head}{rules}<p>Reasons</p>{reasons}</div>"


def _fidelity_html(p: Mapping[str, Any]) -> str:
    e = html.escape
    targets = p["targets"]
    rows = [[r["rule"], r["mode"]] + [r["targets"].get(t, {}).get("verdict", "") for t in targets]
            for r in p["rows"]]
    return (f"<div class='kqlab-fidelity'><p><b>kqlab fidelity</b> of policy "
            f"<code>{e(p['policy'])}</code></p>{_table(['rule', 'mode', *targets], rows)}</div>")
