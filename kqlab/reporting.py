"""The static HTML report of a replay: figures, summaries, top failures, the policy and where
it was replayed — one self-contained file that opens offline.

The file embeds plotly.js once (the copy inside the installed plotly package; never a CDN) and
every figure as aggregated data, so its size is plotly.js plus a bounded amount that does not
grow with the sample: figures are drawn from group-bys (:mod:`kqlab.viz`) and tables are capped
at ``max_rows``.  Sensitive data (the policy's ``sensitive`` section) is masked exactly as in
the notebook views; ``unmask=True`` is an explicit choice for one report.

The module is ``kqlab.reporting`` (not ``kqlab.report``) so that the function
``kqlab.report`` and a submodule of the same name never shadow each other.
"""

from __future__ import annotations

import datetime
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kqlab.errors import KqlabError

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from kqlab.policy.model import Policy
    from kqlab.validate.view import VerdictsView
    from kqlab.viz._groups import SampleLike

__all__ = ["ReportError", "report", "top_failures"]

PLOTLY_FILE = "plotly.min.js"

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;
max-width:1200px;padding:16px 24px;color:#1d2330}
h1{margin-bottom:0}h2{border-bottom:1px solid #dde1e7;padding-bottom:4px;margin-top:32px}
.sub{color:#5b6473;margin-top:4px}
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{border:1px solid #dde1e7;border-radius:6px;
padding:8px 14px;min-width:120px}.card b{display:block;font-size:1.4em}
table.t{border-collapse:collapse;font-size:.9em;margin:8px 0}
table.t th,table.t td{border-bottom:1px solid #eceef2;padding:3px 10px;text-align:left;
vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f6f7f9;padding:8px;overflow:auto;font-size:.85em}
.note{color:#7a5a00}.fig{margin:12px 0}
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


def report(verdicts: VerdictsView, policy: Policy | None = None, *,
           sample: SampleLike | None = None, path: str | Path | None = None,
           title: str | None = None, source: str | None = None, unmask: bool | None = None,
           max_rows: int = 50, plotlyjs: str = "inline") -> str | Path:
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
        The policy replayed: shown in the report, and its ``sensitive`` section masks data.
    sample
        What was replayed (Sample, Replayer or records table): adds the schema-id and
        key-pattern views and producer epochs.
    source
        Where the sample came from, for the provenance section.
    unmask
        ``True`` shows sensitive data in this report; ``None`` follows the session
        (:func:`kqlab.viz.unmask`); masked by default.
    max_rows
        Cap of every table (top failures, partitions).
    plotlyjs
        ``"inline"`` embeds plotly.js (one file, opens anywhere offline); ``"file"`` writes
        ``plotly.min.js`` next to ``path`` once and references it (many small reports).
    """
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    from kqlab.viz import _figures as figs
    from kqlab.viz._groups import sample_tables
    from kqlab.viz._masking import masker

    if plotlyjs not in ("inline", "file"):
        raise ReportError(f"plotlyjs must be 'inline' or 'file', not {plotlyjs!r}")
    if plotlyjs == "file" and path is None:
        raise ReportError("plotlyjs='file' writes plotly.min.js next to the report: pass path=")
    summary = verdicts.summary()
    figures: list[tuple[str, str, go.Figure]] = [
        ("reasons", "Why records were rejected", figs.rejections_by_reason(verdicts)),
        ("offsets", "Where in each partition", figs.rejections_by_offset(verdicts)),
        ("timeline", "When", figs.rejection_timeline(verdicts)),
        ("producers", "Which producers", figs.by_producer(verdicts, sample)),
    ]
    if sample_tables(sample)[0] is not None:  # views of the records' content
        figures.append(("schemas", "Which schema ids", figs.by_schema_id(verdicts, sample)))
        figures.append(("keys", "Which keys", figs.by_key_pattern(
            verdicts, sample, policy=policy, unmask=unmask)))
    config = {"displaylogo": False, "responsive": True}
    parts = [f"<h2>{_esc(heading)}</h2><div class='fig'>" + pio.to_html(
        fig, full_html=False, include_plotlyjs=False, div_id=f"kqlab-{name}", config=config)
        + "</div>" for name, heading, fig in figures]
    m = masker(policy, unmask)
    outcomes = summary["outcomes"]
    n = max(summary["records"], 1)
    cards = "".join(f"<div class='card'>{_esc(k)}<b>{v:,}</b>{100 * v / n:.2f} %</div>"
                    for k, v in outcomes.items())
    cards += (f"<div class='card'>records lost<b>{summary['records_lost']:,}</b>producer "
              f"gives up</div><div class='card'>records delayed<b>"
              f"{summary['records_delayed']:,}</b>retried or split</div>")
    top = top_failures(verdicts, policy, limit=max_rows, unmask=unmask).to_pylist()
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
    ]
    if policy is not None and policy.provenance is not None:
        vetted = policy.provenance
        provenance.append({"item": "vetted", "value": f"{vetted.vetted_at} on "
                           f"{vetted.records} records (hash {vetted.content_hash})"})
    masked_note = "<p class='note'>Sensitive data is masked (policy section <code>sensitive"\
        "</code>).</p>" if m.active else ""
    name = summary["policy"] or "replay"
    title = title or f"kqlab report: {name}"
    if plotlyjs == "inline":
        script = f"<script type='text/javascript'>{get_plotlyjs()}</script>"
    else:
        script = f"<script type='text/javascript' src='{PLOTLY_FILE}'></script>"
    body = [
        f"<h1>{_esc(title)}</h1>",
        f"<p class='sub'>{summary['records']:,} records in {summary['batches']:,} batches, "
        f"replayed under policy {_esc(name)} ({_esc(summary['profile'])}, framing "
        f"{_esc(summary['framing'])}) at {_esc(_when(summary['now']))}</p>",
        masked_note,
        f"<div class='cards'>{cards}</div>",
        *parts,
        "<h2>Top failures</h2>",
        _table(top, ["rule", "code", "message", "records", "topic", "partition", "offset"],
               f"the {max_rows} most frequent (rule, code, message); offset: one example"),
        "<h2>Rules</h2>",
        _table(summary["by_rule"]),
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
            f"<title>{_esc(title)}</title><style>{_CSS}</style>{script}</head><body>"
            + "\n".join(body) + "</body></html>\n")
    if path is None:
        return text
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    if plotlyjs == "file":
        js = out.parent / PLOTLY_FILE
        if not js.exists():
            js.write_text(get_plotlyjs(), encoding="utf-8")
    return out
