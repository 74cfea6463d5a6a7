"""The static HTML report of a replay: a verdict first, then figures, failures grouped by rule,
summaries, the policy and where it was replayed — one self-contained file that opens offline.

It opens with the *verdict*: does the policy pass on this sample, against thresholds the
reader can set (:class:`Thresholds`: by default at most 1 % of the records refused).  Top
failures are grouped by rule and error code with the rule's message template, a count and
one real example (:func:`kqlab.viz._failures.failure_groups`), not one row per distinct text.

The file embeds plotly.js once — the vendored *basic* bundle (scatter and bar, 1.2 MB;
:mod:`kqlab.viz._plotlyjs`), never a CDN unless asked — and every figure as aggregated data,
so it weighs about 1.3 MB whatever the sample: figures are drawn from group-bys
(:mod:`kqlab.viz`) and tables are capped at ``max_rows``.  Sensitive data (the policy's
``sensitive`` section) is masked exactly as in the notebook views; ``unmask=True`` is an
explicit choice for one report.  The page follows the reader's light or dark preference.

The module is ``kqlab.reporting`` (not ``kqlab.report``) so that the function
``kqlab.report`` and a submodule of the same name never shadow each other.
"""

from __future__ import annotations

import datetime
import html
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kqlab.errors import KqlabError
from kqlab.viz._plotlyjs import CDN_URL, VERSION, bundle_text

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from kqlab.policy.model import Policy
    from kqlab.validate.view import VerdictsView
    from kqlab.viz._groups import SampleLike

__all__ = ["PLOTLY_FILE", "PLOTLY_JS_MODES", "ReportError", "ReportVerdict", "Thresholds",
           "judge", "report", "top_failures"]

#: the file ``plotlyjs="file"`` writes next to the report (versioned: a report never picks
#: up another version's bundle left in the folder)
PLOTLY_FILE = f"plotly-basic-{VERSION}.min.js"
#: how the report gets plotly.js: embedded, a file beside it, or plotly's CDN
PLOTLY_JS_MODES = ("inline", "file", "cdn")

_CSS = """
:root{--fg:#1d2330;--muted:#5b6473;--line:#dde1e7;--soft:#eceef2;--code:#f6f7f9;--bg:#fff;
--pass:#1e7b45;--pass-bg:#e8f5ed;--fail:#b42318;--fail-bg:#fdecea;--note:#7a5a00}
@media (prefers-color-scheme:dark){:root{--fg:#dde1e7;--muted:#9aa3b2;--line:#3a404b;
--soft:#2c313a;--code:#1f232a;--bg:#15181d;--pass:#5fd08e;--pass-bg:#173322;--fail:#ff8a80;
--fail-bg:#3a1c1a;--note:#e0b84f}}
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;
max-width:1200px;padding:16px 24px;color:var(--fg);background:var(--bg)}
h1{margin-bottom:0}h2{border-bottom:1px solid var(--line);padding-bottom:4px;margin-top:32px}
.sub{color:var(--muted);margin-top:4px}
.verdict{border-radius:8px;padding:12px 18px;margin:16px 0;border:1px solid}
.verdict b.word{font-size:1.5em;margin-right:10px}.verdict ul{margin:6px 0 0 0}
.verdict.pass{background:var(--pass-bg);border-color:var(--pass);color:var(--pass)}
.verdict.fail{background:var(--fail-bg);border-color:var(--fail);color:var(--fail)}
.verdict li,.verdict p{color:var(--fg)}
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{border:1px solid var(--line);border-radius:6px;
padding:8px 14px;min-width:120px}.card b{display:block;font-size:1.4em}
table.t{border-collapse:collapse;font-size:.9em;margin:8px 0}
table.t th,table.t td{border-bottom:1px solid var(--soft);padding:3px 10px;text-align:left;
vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}
td code,td.tmpl{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.92em}
td .ex{color:var(--muted);display:block;margin-top:2px}
pre{background:var(--code);padding:8px;overflow:auto;font-size:.85em}
.note{color:var(--note)}.fig{margin:12px 0}
"""

#: restyles the figures' text and grid for a dark page (the figures carry no background)
_THEME_JS = """
(function(){if(!window.matchMedia||!window.Plotly)return;
var q=matchMedia('(prefers-color-scheme: dark)');function apply(){
var t=THEMES[q.matches?'dark':'light'];document.querySelectorAll('.js-plotly-plot').forEach(
function(d){Plotly.relayout(d,{'font.color':t.text,'xaxis.gridcolor':t.grid,
'yaxis.gridcolor':t.grid,'xaxis.zerolinecolor':t.zero,'yaxis.zerolinecolor':t.zero});});}
if(q.matches)apply();if(q.addEventListener)q.addEventListener('change',apply);})();
"""


class ReportError(KqlabError, ValueError):
    """The report cannot be written as asked (unknown ``plotlyjs`` mode, no place for it)."""


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _table(rows: list[dict[str, Any]], columns: list[str] | None = None,
           note: str | None = None) -> str:
    if not rows:
        return "<p class='sub'>none</p>"
    columns = columns or list(rows[0])
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(
            f"<td class='n'>{v:,}</td>" if isinstance(v, int) and not isinstance(v, bool)
            else f"<td>{_esc(v)}</td>" for v in (r.get(c) for c in columns)) + "</tr>"
        for r in rows)
    extra = f"<p class='sub'>{_esc(note)}</p>" if note else ""
    return f"<table class='t'><tr>{head}</tr>{body}</table>{extra}"


def top_failures(verdicts: VerdictsView, policy: Policy | None = None, *, limit: int = 50,
                 unmask: bool | None = None) -> pa.Table:
    """The most frequent failures: ``rule``, ``code``, ``message`` (masked per the policy's
    sensitive section), ``records`` and one example ``topic``/``partition``/``offset``;
    grouped by the verdicts' engine, whatever the sample size
    (:data:`~kqlab.validate.view.TOP_FAILURES_SCHEMA`)."""
    from kqlab.viz._masking import masker

    return verdicts.top_failures(limit, masker(policy, unmask).templates())


def _policy_text(policy: Policy, unmask: bool | None) -> str:
    """The policy as YAML, with its golden examples' sensitive data masked too."""
    import yaml

    from kqlab.policy import policy_to_dict
    from kqlab.viz._masking import MASK, masker

    m = masker(policy, unmask)
    data: dict[str, Any] = policy_to_dict(policy)  # plain data, walked by the file's keys
    if m.active:
        for rule in data.get("rules", ()):
            for items in rule.get("examples", {}).values():
                for ex in items:
                    if "value" in ex:
                        ex["value"] = m.value(ex["value"])
                    if "raw_value" in ex and m.value_bytes:
                        ex["raw_value"] = MASK
                    if "key" in ex and m.key and ex["key"] is not None:
                        ex["key"] = MASK
                    headers = ex.get("headers")
                    if isinstance(headers, dict):
                        ex["headers"] = {k: MASK if m.header(k) and v is not None else v
                                         for k, v in headers.items()}
                    elif isinstance(headers, list):
                        ex["headers"] = [[k, MASK if m.header(k) and v is not None else v]
                                         for k, v in headers]
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S UTC")


# -- the verdict ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Thresholds:
    """When a policy *passes* on a sample.

    ``max_reject_rate``: the share of the records a broker would refuse (rejected and
    collateral, as ``kqlab replay --fail-over`` counts them) that is still acceptable, 0 to 1.
    ``max_rejected``: also at most this many refused records (None: no count limit).
    """

    max_reject_rate: float = 0.01
    max_rejected: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.max_reject_rate <= 1:
            raise ReportError(f"max_reject_rate must be a share between 0 and 1, not "
                              f"{self.max_reject_rate!r}")
        if self.max_rejected is not None and self.max_rejected < 0:
            raise ReportError(f"max_rejected must be 0 or more, not {self.max_rejected!r}")


@dataclass(frozen=True)
class ReportVerdict:
    """The report's verdict: ``passed``, what was measured (records, refused, their share,
    the rules that refused most) and ``reasons``: one sentence per threshold crossed, and
    ``warnings`` that do not fail the policy but deserve a look."""

    passed: bool
    records: int
    refused: int
    rate: float
    thresholds: Thresholds
    reasons: list[str]
    warnings: list[str]
    #: the reasons that refused most: (reason, records whose own failure it is), collateral
    #: left out as the Top failures table leaves it out
    top: list[tuple[str, int]]
    #: ids of the policy's sample checks that failed (each is also one of ``reasons``)
    checks_failed: list[str] = field(default_factory=list)
    #: records refused only because a sibling in their batch failed (counted in ``refused``,
    #: not in ``top``)
    collateral: int = 0
    #: what the replay found wrong with the rules themselves (unseen names, broken rules:
    #: :mod:`kqlab.validate.rule_health`); a reason too when the replay is strict
    rule_findings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``kqlab report --json``)."""
        out = asdict(self)
        out["top"] = [{"reason": r, "records": n, "collateral_included": False}
                      for r, n in self.top]
        return out


def _pct(share: float) -> str:
    return f"{100 * share:.2f} %" if share else "0 %"


def judge(verdicts: VerdictsView, thresholds: Thresholds | None = None, *,
          summary: dict[str, Any] | None = None, strict: bool = False,
          policy: Policy | None = None) -> ReportVerdict:
    """Whether the replayed policy passes on this sample (see :class:`Thresholds`);
    ``summary``: the verdicts' summary when already at hand (Spark computes it anew).
    The rule findings of the replay (a field no record has, a broken rule) are warnings, or
    reasons when ``strict`` or the ``policy`` says ``strict: true``."""
    from kqlab.validate.rule_health import findings, strict_failures

    t = thresholds or Thresholds()
    summary = summary if summary is not None else verdicts.summary()
    outcomes = summary["outcomes"]
    records = int(summary["records"])
    refused = int(outcomes.get("rejected", 0)) + int(outcomes.get("collateral", 0))
    rate = refused / records if records else 0.0
    reasons = []
    if rate > t.max_reject_rate:
        reasons.append(f"it refuses {_pct(rate)} of the records ({refused:,} of {records:,}), "
                       f"more than the {_pct(t.max_reject_rate)} allowed")
    if t.max_rejected is not None and refused > t.max_rejected:
        reasons.append(f"it refuses {refused:,} records, more than the {t.max_rejected:,} "
                       "allowed")
    warnings = []
    undetermined = int(outcomes.get("undetermined", 0))
    if undetermined:
        warnings.append(f"{undetermined:,} records could not be judged (damaged batches "
                        "without their bytes): the verdict does not cover them")
    found = [f.text for f in findings(summary["by_rule"])]
    if strict_failures(policy, summary["by_rule"], strict):
        reasons.extend(found)
    else:
        warnings.extend(found)
    for r in summary["by_rule"]:
        n = r.get("evaluation_errors") or 0
        if n and not r.get("broken"):
            warnings.append(f"rule {r['rule']} could not be evaluated on {n:,} records "
                            "(evaluation errors: failures with status error)")
    if not records:
        warnings.append("the sample holds no records")
    checks_failed = []
    for row in summary.get("checks", []):
        if row["status"] == "fail":
            checks_failed.append(row["check"])
            reasons.append(f"sample check {row['text']}")
        elif row["status"] == "not_evaluable":
            warnings.append(f"sample check {row['text']}")
    reason_rows = verdicts.by_reason().to_pylist()
    # the records whose own failure each reason is: what the Top failures table counts
    # (collateral, fine records refused with their batch, is said apart)
    top = sorted(((r["reason"], int(r["culprit"])) for r in reason_rows if r["culprit"]),
                 key=lambda x: (-x[1], x[0]))[:3]
    return ReportVerdict(passed=not reasons, records=records, refused=refused, rate=rate,
                         thresholds=t, reasons=reasons, warnings=warnings, top=top,
                         checks_failed=checks_failed,
                         collateral=int(outcomes.get("collateral", 0)), rule_findings=found)


def _rule_row(row: dict[str, Any]) -> dict[str, Any]:
    """A rule-table row for the page: its unseen names as words, not a list of dicts."""
    out = dict(row)
    out["unseen"] = "; ".join(
        f"{u['what']} {u['name']!r} ({u['looked_at']:,} records looked at"
        + (f", nearest {u['nearest']!r})" if u.get("nearest") else ")")
        for u in row.get("unseen") or ()) or "—"
    return out


def _verdict_html(v: ReportVerdict, policy_name: str) -> str:
    word = "PASS" if v.passed else "FAIL"
    limits = f"at most {_pct(v.thresholds.max_reject_rate)} of the records refused"
    if v.thresholds.max_rejected is not None:
        limits += f" and at most {v.thresholds.max_rejected:,} records"
    if v.passed:
        line = (f"policy {_esc(policy_name)} refuses {_pct(v.rate)} of this sample "
                f"({v.refused:,} of {v.records:,} records): within the threshold ({limits}).")
    else:
        line = (f"policy {_esc(policy_name)} fails on this sample: "
                + "; ".join(_esc(r) for r in v.reasons) + f" (threshold: {limits}).")
    items = ""
    if v.top:
        items += "<li>refused most by: " + ", ".join(
            f"<code>{_esc(r)}</code> ({n:,})" for r, n in v.top) + \
            f" — records that failed it themselves, as Top failures counts them; collateral " \
            f"not included ({v.collateral:,} records refused only with their batch)</li>"
    items += "".join(f"<li class='note'>{_esc(w)}</li>" for w in v.warnings)
    return (f"<div class='verdict {'pass' if v.passed else 'fail'}' id='kqlab-verdict'>"
            f"<b class='word'>{word}</b><span>{line}</span>"
            + (f"<ul>{items}</ul>" if items else "")
            + "<p class='sub'>Set the threshold with <code>kqlab report --max-reject-rate"
              "</code> (or <code>thresholds=</code>).</p></div>")


def _checks_section(checks: list[dict[str, Any]]) -> list[str]:
    """The policy's sample checks: status, observed value, thresholds, failing windows and
    the line that says where (nothing when the policy has none)."""
    if not checks:
        return []
    rows = [{"check": c["check"], "kind": c["kind"], "status": c["status"],
             "observed": c["observed"], "min": c["min"], "max": c["max"],
             "failing windows": f"{c['failing_windows']} of {c['windows']}",
             "result": c["text"]} for c in checks]
    return ["<h2 id='kqlab-checks'>Sample checks</h2>", _table(rows)]


def _failures_html(groups: list[Any], max_rows: int) -> str:
    from kqlab.kafka.errors import error_for_code

    if not groups:
        return "<p class='sub'>none</p>"

    def code_text(code: int) -> str:
        if not code:
            return "0 (not enforced)"
        try:
            return f"{code} {error_for_code(code).name}"
        except KeyError:
            return str(code)

    rows = []
    for g in groups:
        where = f"{g.where[0]}-{g.where[1]} @ {g.where[2]:,}"
        texts = f" <span class='sub'>(one of {g.texts} texts of this check)</span>" \
            if g.texts > 1 else ""
        example = "" if g.example is None else \
            f"<span class='ex'>e.g. {_esc(g.example)} — {_esc(where)}</span>"
        rows.append(f"<tr><td><code>{_esc(g.rule)}</code></td><td>{_esc(code_text(g.code))}"
                    f"</td><td class='n'>{g.records:,}</td><td class='tmpl'>{_esc(g.template)}"
                    f"{texts}{example}</td></tr>")
    return ("<table class='t'><tr><th>rule</th><th>code</th><th>records</th>"
            "<th>message template, and the first example</th></tr>" + "".join(rows)
            + f"</table><p class='sub'>Failures grouped by rule, error code and message "
              f"template (fields like <code>{{value}}</code> vary per record); the "
              f"{max_rows} largest groups. Records that failed the check themselves: "
              f"collateral (records refused only because a sibling in their batch failed) "
              f"is not included.</p>")


def _rollout_section(rollout: Any) -> str:
    from kqlab.rollout.section import rollout_section

    return rollout_section(rollout)


def report(verdicts: VerdictsView, policy: Policy | None = None, *,
           sample: SampleLike | None = None, path: str | Path | None = None,
           title: str | None = None, source: str | None = None, unmask: bool | None = None,
           max_rows: int = 50, plotlyjs: str = "inline",
           thresholds: Thresholds | None = None, rollout: Any = None,
           strict: bool = False) -> str | Path:
    """A static HTML report of a replay; written to ``path`` (returned) or returned as text.

    Parameters
    ----------
    verdicts
        The replay's verdicts, from either engine (a
        :class:`~kqlab.validate.view.VerdictsView`): its summaries, top failures and figures
        are the engine's own aggregations (Spark's reach the driver as small results), so
        the report stays small and quick whatever the sample size, and is the same report
        whichever engine replayed.
    policy
        The policy replayed: shown in the report, its rules' messages give the failures'
        templates, and its ``sensitive`` section masks data.
    sample
        What was replayed (Sample, Replayer or records table): adds the schema-id and
        key-pattern views and producer epochs.
    source
        Where the sample came from, for the provenance section.
    unmask
        ``True`` shows sensitive data in this report; ``None`` follows the session
        (:func:`kqlab.viz.unmask`); masked by default.
    max_rows
        Cap of every table (failure groups, partitions).
    plotlyjs
        ``"inline"`` embeds plotly.js's basic bundle (one file, opens anywhere offline, about
        1.3 MB in all); ``"file"`` writes it next to ``path`` once (:data:`PLOTLY_FILE`) and
        references it (many small reports); ``"cdn"`` loads it from plotly's CDN (the
        smallest file, needs the network).
    thresholds
        When the policy passes on this sample (:class:`Thresholds`; default: at most 1 % of
        the records refused): the verdict the report opens with.
    strict
        The rule findings (a field no record has, a broken rule) fail the verdict, as the
        policy's ``strict: true`` makes them; else they are warnings under it.
    rollout
        A what-if and/or rollout plan (:mod:`kqlab.rollout`: a ``WhatIf``, a ``RolloutPlan``
        or a tuple of both) to add as the report's rollout section; None (the default) adds
        nothing, so the report stays the same whichever engine replayed.
    """
    import plotly.io as pio

    from kqlab.viz import _figures as figs
    from kqlab.viz._failures import failure_groups
    from kqlab.viz._groups import sample_tables
    from kqlab.viz._masking import masker
    from kqlab.viz._style import CONFIG, THEMES, RuleColors

    if plotlyjs not in PLOTLY_JS_MODES:
        raise ReportError(f"plotlyjs must be 'inline', 'file' or 'cdn', not {plotlyjs!r}")
    if plotlyjs == "file" and path is None:
        raise ReportError(f"plotlyjs='file' writes {PLOTLY_FILE} next to the report: pass path=")
    summary = verdicts.summary()
    # sample checks' sensitive group labels and new values, masked before any line quotes them
    summary["checks"] = masker(policy, unmask).check_rows(summary.get("checks", []))
    colors = RuleColors().follow(verdicts)  # one map: a rule's colour in every figure
    figures: list[tuple[str, str, go.Figure]] = [
        ("reasons", "Why records were rejected", figs.rejections_by_reason(verdicts,
                                                                           colors=colors)),
        # 600 runs at most: at a report's width a run is a few pixels anyway, and the spans'
        # hover data is most of a figure's bytes
        ("offsets", "Where in each partition", figs.rejections_by_offset(
            verdicts, colors=colors, max_spans=600)),
        ("timeline", "When", figs.rejection_timeline(verdicts, colors=colors)),
        ("producers", "Which producers", figs.by_producer(verdicts, sample)),
    ]
    if sample_tables(sample)[0] is not None:  # views of the records' content
        figures.append(("schemas", "Which schema ids", figs.by_schema_id(verdicts, sample)))
        figures.append(("keys", "Which keys", figs.by_key_pattern(
            verdicts, sample, policy=policy, unmask=unmask)))
    parts = [f"<h2>{_esc(heading)}</h2><div class='fig'>" + pio.to_html(
        fig, full_html=False, include_plotlyjs=False, div_id=f"kqlab-{name}",
        config=dict(CONFIG)) + "</div>" for name, heading, fig in figures]
    m = masker(policy, unmask)
    outcomes = summary["outcomes"]
    n = max(summary["records"], 1)
    cards = "".join(f"<div class='card'>{_esc(k)}<b>{v:,}</b>{100 * v / n:.2f} %</div>"
                    for k, v in outcomes.items())
    from kqlab.validate.verdicts import librdkafka_counts

    rd = librdkafka_counts(summary)
    rd_lost = f"; librdkafka: {rd['lost']:,}" if rd and rd["lost"] != summary["records_lost"] \
        else ""
    cards += (f"<div class='card'>records lost<b>{summary['records_lost']:,}</b>Java producer "
              f"gives up{rd_lost}</div><div class='card'>records delayed<b>"
              f"{summary['records_delayed']:,}</b>retried or split</div>")
    groups = failure_groups(verdicts, policy, limit=max_rows, unmask=unmask)
    partitions = summary["by_partition"]
    part_note = f"first {max_rows} of {len(partitions)} partitions" \
        if len(partitions) > max_rows else None
    issues = summary["issues"][:max_rows]
    provenance = [
        {"item": "source", "value": source or "(not given)"},
        {"item": "policy", "value": summary["policy"]},
        {"item": "policy content hash", "value": summary["policy_hash"]},
        {"item": "enforcement profile", "value": summary["profile"]},
        {"item": "framing", "value": summary["framing"]},
        {"item": "replayed at (broker clock)", "value": f"{summary['now']} "
                                                        f"({_when(summary['now'])})"},
        {"item": "records / batches", "value": f"{summary['records']:,} / "
                                               f"{summary['batches']:,}"},
        {"item": "plotly.js", "value": f"{VERSION} (basic bundle, {plotlyjs})"},
    ]
    if policy is not None and policy.provenance is not None:
        vetted = policy.provenance
        provenance.append({"item": "vetted", "value": f"{vetted.vetted_at} on "
                           f"{vetted.records} records (hash {vetted.content_hash})"})
    masked_note = "<p class='note'>Sensitive data is masked (policy section <code>sensitive"\
        "</code>).</p>" if m.active else ""
    name = summary["policy"] or "replay"
    title = title or f"kqlab report: {name}"
    verdict = judge(verdicts, thresholds, summary=summary, strict=strict, policy=policy)
    if plotlyjs == "inline":
        script = f"<script type='text/javascript'>{bundle_text()}</script>"
    elif plotlyjs == "file":
        script = f"<script type='text/javascript' src='{PLOTLY_FILE}'></script>"
    else:
        script = f"<script type='text/javascript' src='{CDN_URL}' crossorigin='anonymous'>" \
                 "</script>"
    theme_js = "<script type='text/javascript'>var THEMES=" + json.dumps(
        {k: THEMES[k] for k in ("light", "dark")}) + ";" + _THEME_JS + "</script>"
    body = [
        f"<h1>{_esc(title)}</h1>",
        f"<p class='sub'>{summary['records']:,} records in {summary['batches']:,} batches, "
        f"replayed under policy {_esc(name)} ({_esc(summary['profile'])}, framing "
        f"{_esc(summary['framing'])}) at {_esc(_when(summary['now']))}</p>",
        _verdict_html(verdict, name),
        masked_note,
        f"<div class='cards'>{cards}</div>",
        "<h2>Top failures</h2>",
        _failures_html(groups, max_rows),
        *parts,
        *([] if rollout is None else [_rollout_section(rollout)]),
        "<h2>Rules</h2>",
        _table([_rule_row(r) for r in summary["by_rule"]]),
        *_checks_section(summary.get("checks", [])),
        "<h2>Broker errors</h2>",
        _table([{"error": k, **v} for k, v in sorted(summary["by_error"].items(),
                                                      key=lambda kv: (kv[0] != "NONE", kv[0]))]),
        "<h2>Producer actions</h2>",
        _table([{"action": k, "records": v}
                for k, v in sorted(summary["producer_actions"].items())]),
        "<h2>Partitions</h2>",
        _table(partitions[:max_rows], note=part_note),
        "<h2>Notes and issues</h2>",
        _table([{"note": x} for x in summary["notes"]] +
               [{"note": f"issue: {i}"} for i in issues]),
        "<h2>Provenance</h2>",
        _table(provenance),
    ]
    if policy is not None:
        body += ["<h2>Policy</h2>", f"<pre>{_esc(_policy_text(policy, unmask))}</pre>"]
    text = ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<meta name='color-scheme' content='light dark'>"
            f"<title>{_esc(title)}</title><style>{_CSS}</style>{script}</head><body>"
            + "\n".join(body) + theme_js + "</body></html>\n")
    if path is None:
        return text
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    if plotlyjs == "file":
        js = out.parent / PLOTLY_FILE
        if not js.exists():
            js.write_text(bundle_text(), encoding="utf-8")
    return out
