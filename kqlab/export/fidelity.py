"""The fidelity report: every target's claims side by side, each proven, withdrawn or marked
unverified by running the target's own engine on the vetting sample.

Fidelity is measured, not assumed (ARCHITECTURE principle 4).  An exporter *claims* how it
enforces each rule (``exact`` / ``approximate`` / ``not expressible``, with how or why); the
report turns each claim into a *verdict*:

``exact``
    claimed exact, and the target's own engine, run here on the sample, refused exactly the
    records the replay rejects **for that rule** (each rule checked on its own: one rule that
    rejects nearly everything cannot hide another rule's wrong export);
``withdrawn``
    claimed exact, and the engine disagreed: the claim does not hold (one sentence and one
    example record say where);
``unverified``
    claimed exact, but no engine ran it here (the target cannot run offline, or the sample
    holds nothing it could be run on): never reported as ``exact``;
``approximate`` / ``not expressible``
    as claimed; an approximation that ran says whether it showed on this sample.

The implicit checks — the value's decoding, the key's decoding, the schema-id allowlist a
framed value implies (:func:`~kqlab.export.base.implicit_rules`) — are rows too.

Five engines run here (:mod:`kqlab.export.roundtrip`): the Confluent serializer with its CEL
rule executor on a ``mock://`` registry (:func:`roundtrip_confluent`), the embedded Tansu
broker with the exported schema files (:func:`roundtrip_tansu`), the kqlab gate — its judge
per rule, and the exported gate config run end to end on the embedded broker
(:func:`roundtrip_gate`) — and the topic-policy plugin (extensions/topic-policy) in a real
Apache Kafka broker, asked to create and re-configure the policy's topic with each required
setting broken (:func:`roundtrip_topic_policy`; its proof counts admin requests, not records),
and datacontract-cli's own ``test`` on the ODCS contract with the sample's decoded values as
local servers (:func:`roundtrip_odcs`; its counts resolved to records by grouping).
Kroxylicious (not served by the Maven Central reachable here), the schema-ID brokers and the
proposed KIP APIs (no engine exists) cannot run: their exact claims stay unverified, with the
reason (:data:`NO_ENGINE`).

:meth:`FidelityReport.problems` says what should fail a command: a withdrawn claim or a round
trip whose whole export disagreed where every claim was exact — always; a rule a requested
target enforces only approximately or not at all, in ``reject`` mode — unless approximations
are accepted.

Sample checks (``checks:``) get their own table (:meth:`FidelityReport.check_table`): per
target ``enforced`` where the target computes them itself (the Structured Streaming
enforcer: windowed checks and freshness, an alert row per failing window; a claim this
report does not run, as a rule's exact on a target that cannot run here stays unverified —
each cell's ``why`` says so), ``stated`` where
the export carries them (ODCS quality rules) and ``not enforced`` everywhere else —
record-at-a-time enforcement points have no place for an aggregate over windows of a topic.
Checks refuse no record, so they are never among the problems.
"""

from __future__ import annotations

import datetime
import html
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kqlab.export.base import (
    APPROXIMATE,
    ENFORCED,
    EXACT,
    NOT_ENFORCED,
    NOT_EXPRESSIBLE,
    PROPOSED,
    UNVERIFIED,
    VERDICTS,
    WITHDRAWN,
    Export,
    RuleFidelity,
    provenance,
)
from kqlab.export.roundtrip import RoundTrip, RuleCheck, SampleView, replayer_of
from kqlab.export.roundtrip_confluent import roundtrip_confluent
from kqlab.export.roundtrip_gate import roundtrip_gate
from kqlab.export.roundtrip_odcs import roundtrip_odcs
from kqlab.export.roundtrip_tansu import roundtrip_tansu
from kqlab.export.roundtrip_topic_policy import roundtrip_topic_policy
from kqlab.policy.message_params import params_filled

__all__ = ["NO_ENGINE", "ROUNDTRIPS", "FidelityReport", "RoundTrip", "RuleCheck", "Verdict",
           "fidelity_report", "roundtrip_confluent", "roundtrip_gate", "roundtrip_odcs",
           "roundtrip_tansu", "roundtrip_topic_policy", "verdict_of"]

#: the targets whose own engine runs here, and the function that runs it
ROUNDTRIPS = {"confluent": roundtrip_confluent, "tansu": roundtrip_tansu,
              "gate": roundtrip_gate, "topic-policy": roundtrip_topic_policy,
              "odcs": roundtrip_odcs}


#: targets whose engine cannot run here, and exactly why (their exact claims stay unverified)
NO_ENGINE = {
    "kroxylicious": (
        "engine not available: io.kroxylicious:* is not served by the Maven Central reachable "
        "here (io.kroxylicious:kroxylicious-app 0.23.0, 0.22.0 and 0.18.0, "
        "kroxylicious-runtime, kroxylicious-api and kroxylicious-record-validation were all "
        "answered 'not found'), so the proxy could not be run in front of the broker"),
    "kip": (
        "no engine exists: KIP-940 / KIP-729 record validation is a proposed API, not "
        "implemented in Apache Kafka (no release loads record.validation.policy.class.name); "
        "a kip row never counts as proven"),
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the report concludes for one rule on one target: ``verdict`` in
    :data:`~kqlab.export.base.VERDICTS` and ``why`` in a sentence or two."""

    verdict: str
    why: str


def verdict_of(row: RuleFidelity, target: str, rt: RoundTrip | None) -> Verdict:
    """The verdict on ``row`` (a target's claim for one rule) given its round trip (None: the
    target has none, or none ran)."""
    if row.status == NOT_EXPRESSIBLE:
        return Verdict(NOT_EXPRESSIBLE, row.how)
    check = rt.checks.get(row.rule) if rt is not None and rt.ran else None
    if check is None:
        if rt is None and target in NO_ENGINE:
            why = NO_ENGINE[target]
        elif rt is None:
            why = f"{target} cannot run here" if target not in ROUNDTRIPS else \
                f"{target}'s round trip did not run (no sample given)"
        elif not rt.ran:
            why = f"{target}'s round trip could not run: {rt.reason}"
        else:
            why = rt.unchecked.get(row.rule, f"{target} did not run this rule")
        if row.status == EXACT:
            return Verdict(UNVERIFIED, f"claimed exact ({row.how}); not proven: {why}")
        return Verdict(APPROXIMATE, f"{row.how} (not run: {why})")
    if check.equal:
        proof = (f"{target} refused the same {check.refused} of {check.judged} {check.unit} "
                 "as the replay" + (" predicts" if check.unit != "sampled records" else ""))
        if row.status == EXACT:
            return Verdict(EXACT, f"proven: {proof} ({row.how})")
        return Verdict(APPROXIMATE, f"{row.how}; agreed on this sample: {proof}")
    said = "; ".join(check.sentences(target))
    if row.status == EXACT:
        return Verdict(WITHDRAWN, f"claimed exact, but {said}")
    return Verdict(APPROXIMATE, f"{row.how}; on this sample {said}")


@dataclass
class FidelityReport:
    """Every target's export of one policy, with the round trips that ran (HTML + JSON)."""

    policy: str
    provenance: dict[str, Any]
    exports: dict[str, Export]
    roundtrips: list[RoundTrip] = field(default_factory=list)
    #: targets the policy could not be exported to, and why
    skipped: dict[str, str] = field(default_factory=dict)
    #: rule id -> why it cannot mean what it says (with how much of the sample it rejects)
    warnings: dict[str, str] = field(default_factory=dict)
    #: what belongs to this run, not to the result (date, timings): a diff can ignore it
    run: dict[str, Any] = field(default_factory=dict)
    #: rule id -> (severity, description) of the policy's rules
    rules: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: check id -> kind of the policy's sample checks, in policy order
    checks: dict[str, str] = field(default_factory=dict)

    def check_table(self) -> list[dict[str, Any]]:
        """One row per sample check: per target ``enforced`` or ``stated`` with how (the
        target computes it, or the export carries it) or ``not enforced`` with why; and
        ``why``, what this report knows of it.  ``enforced`` is a claim like a rule's
        exact: no engine here runs the target (the export starts no Spark), so ``why`` says
        it was not run here — the enforcer's alerts are proven equal to the replay's
        failing windows by kqlab's test suite, not by this report."""
        rows = []
        for cid, kind in self.checks.items():
            targets = {}
            for name, ex in self.exports.items():
                row = next((c for c in ex.checks if c.check == cid), None)
                cell = {"status": row.status, "how": row.how} if row is not None \
                    else {"status": NOT_ENFORCED, "how": _NOT_ENFORCED_WHY}
                cell["why"] = (f"claimed enforced ({cell['how']}); not run by this export: "
                               f"{name} cannot run here (kqlab's test suite, not this "
                               "report, proves its alerts equal the replay's failing "
                               "windows)") if cell["status"] == ENFORCED else cell["how"]
                targets[name] = cell
            rows.append({"check": cid, "kind": kind, "targets": targets})
        return rows

    def roundtrip(self, target: str) -> RoundTrip | None:
        """The round trip of ``target``, if one was attempted."""
        return next((r for r in self.roundtrips if r.target == target), None)

    def verdict(self, rule: str, target: str) -> Verdict:
        """The verdict on ``rule`` for ``target`` (``KeyError``: no such row)."""
        return verdict_of(self.exports[target].status_of(rule), target, self.roundtrip(target))

    def table(self) -> list[dict[str, Any]]:
        """One row per rule (implicit checks last): its claim, verdict and why per target."""
        rows: dict[str, dict[str, Any]] = {}
        for name, ex in self.exports.items():
            rt = self.roundtrip(name)
            for f in ex.fidelity:
                sev, desc = self.rules.get(f.rule, ("", ""))
                row = rows.setdefault(f.rule, {"rule": f.rule, "kind": f.kind, "mode": f.mode,
                                               "implicit": f.implicit, "severity": sev,
                                               "description": desc, "targets": {}})
                v = verdict_of(f, name, rt)
                row["targets"][name] = {"status": f.status, "how": f.how,
                                        "verdict": v.verdict, "why": v.why}
        out = list(rows.values())
        return [r for r in out if not r["implicit"]] + [r for r in out if r["implicit"]]

    def counts(self) -> dict[str, dict[str, int]]:
        """Per target, rows per verdict (every verdict listed)."""
        out = {}
        for name, ex in self.exports.items():
            c = dict.fromkeys(VERDICTS, 0)
            rt = self.roundtrip(name)
            for f in ex.fidelity:
                c[verdict_of(f, name, rt).verdict] += 1
            out[name] = c
        return out

    def problems(self, targets: list[str] | None = None, *,
                 accept_approximations: bool = False) -> list[str]:
        """Why a command exporting to ``targets`` (default: every exported one) should fail:
        withdrawn claims and round trips that disagreed where every claim was exact, always;
        ``reject`` rules a requested target enforces only approximately or not at all, unless
        ``accept_approximations``."""
        targets = list(self.exports) if targets is None else targets
        out = []
        for name in targets:
            ex = self.exports.get(name)
            if ex is None:
                continue
            rt = self.roundtrip(name)
            loose = []
            for f in ex.fidelity:
                v = verdict_of(f, name, rt)
                if v.verdict == WITHDRAWN:
                    out.append(f"{name}: rule {f.rule}: {v.why}")
                elif v.verdict in (APPROXIMATE, NOT_EXPRESSIBLE) and f.mode == "reject":
                    loose.append(f.rule)
            if rt is not None and rt.ran and not rt.whole_equal and \
                    all(f.status == EXACT for f in ex.fidelity if f.rule in rt.rules):
                out.append(f"{name}: the export as a whole disagreed with the replay "
                           f"({_whole_sentence(rt)}) although every rule it enforces is "
                           "claimed exact")
            elif rt is not None and rt.ran and not rt.whole_equal and not accept_approximations:
                out.append(f"{name}: the export as a whole disagreed with the replay "
                           f"({_whole_sentence(rt)})")
            if loose and not accept_approximations:
                out.append(f"{name}: {len(loose)} reject rule(s) enforced only approximately "
                           f"or not at all ({', '.join(loose)}); --accept-approximations "
                           "accepts that")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (everything but ``run`` is the same for the same policy, sample
        and kqlab version)."""
        return {"policy": self.policy, "provenance": self.provenance,
                "targets": {n: e.to_dict() for n, e in self.exports.items()},
                "table": self.table(), "counts": self.counts(),
                "checks": self.check_table(), "skipped": self.skipped,
                "warnings": self.warnings,
                "roundtrips": [r.to_dict() for r in self.roundtrips], "run": self.run}

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """In a notebook: the kqlab MIME payload (verdict per rule and target) beside its
        HTML fallback (:mod:`kqlab.validate.mime`)."""
        from kqlab.validate import mime

        payload = mime.fidelity_payload(self)
        return mime.bundle(payload, mime.fidelity_text(payload))

    def to_html(self) -> str:
        """A self-contained static HTML page of the report (no date, no timings)."""
        e = html.escape
        colour = {EXACT: "#c9ecc9", APPROXIMATE: "#fff2c6", NOT_EXPRESSIBLE: "#f3dede",
                  UNVERIFIED: "#e4e4e4", WITHDRAWN: "#f4a6a6"}
        names = list(self.exports)
        out = ["<!doctype html><html><head><meta charset='utf-8'>",
               f"<title>kqlab export fidelity: {e(self.policy)}</title><style>",
               "body{font:14px system-ui,sans-serif;margin:2em;max-width:1500px}",
               "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;"
               "padding:4px 6px;vertical-align:top}th{background:#eee}",
               "small{color:#444}.proposed{color:#a00;font-weight:bold}"
               ".warn{background:#fde7c8;padding:.5em 1em;border-left:4px solid #d80}"
               "</style></head><body>",
               f"<h1>Export fidelity — policy <code>{e(self.policy)}</code></h1>",
               "<p>A verdict of <b>exact</b> means the target's own engine ran here on the "
               "vetting sample and refused exactly what the replay rejects for that rule; "
               "<b>unverified</b>, that no engine could run it; <b>withdrawn</b>, that the "
               "engine disagreed with a claim of exact.</p>"]
        if self.warnings:
            out.append("<h2>Warnings</h2>")
            out.extend(f"<p class='warn'><b>{e(r)}</b>: {e(w)}</p>"
                       for r, w in self.warnings.items())
        out.append("<h2>Summary</h2><table><tr><th>target</th>")
        out.extend(f"<th>{e(v)}</th>" for v in VERDICTS)
        out.append("<th>round trip</th></tr>")
        for n, c in self.counts().items():
            rt = self.roundtrip(n)
            ran = "not run" if rt is None or not rt.ran else \
                ("EQUAL" if rt.equal else "DIFFERENT")
            out.append(f"<tr><td>{e(n)}</td>" + "".join(f"<td>{c[v]}</td>" for v in VERDICTS)
                       + f"<td>{ran}</td></tr>")
        out.append("</table><h2>Per rule and target</h2><table><tr><th>rule</th>")
        for n in names:
            label = " <span class='proposed'>(" + e(PROPOSED) + ")</span>" \
                if self.exports[n].proposed else ""
            out.append(f"<th>{e(n)}{label}</th>")
        out.append("</tr>")
        for row in self.table():
            tag = " (implicit)" if row["implicit"] else ""
            desc = f"<br><small>{e(row['description'])}</small>" if row["description"] else ""
            sev = f", {e(row['severity'])}" if row["severity"] else ""
            out.append(f"<tr><td><code>{e(row['rule'])}</code>{tag}<br><small>"
                       f"{e(row['kind'])}, {e(row['mode'])}{sev}</small>{desc}</td>")
            for n in names:
                cell = row["targets"].get(n)
                if cell is None:
                    out.append("<td></td>")
                    continue
                claim = "" if cell["status"] == cell["verdict"] else \
                    f" <small>(claimed {e(cell['status'])})</small>"
                out.append(f"<td style='background:{colour[cell['verdict']]}'><b>"
                           f"{e(cell['verdict'])}</b>{claim}<br><small>{e(cell['why'])}"
                           "</small></td>")
            out.append("</tr>")
        out.append("</table>")
        if self.checks:
            out.append("<h2>Sample checks</h2><p>Checks judge the sample (volume, freshness, "
                       "null rates, drift...), not a record: <b>enforced</b> where the target "
                       "computes them (alert rows) — claimed, not run by this export, which "
                       "starts no Spark (kqlab's test suite proves the enforcer's alerts "
                       "equal the replay's failing windows) — <b>stated</b> where the export "
                       "carries them, <b>not enforced</b> where the target has no place for "
                       "them.</p><table><tr><th>check</th>")
            out.extend(f"<th>{e(n)}</th>" for n in names)
            out.append("</tr>")
            for row in self.check_table():
                out.append(f"<tr><td><code>{e(row['check'])}</code><br><small>"
                           f"{e(row['kind'])}</small></td>")
                for n in names:
                    cell = row["targets"][n]
                    bg = {ENFORCED: "#9fdf9f", NOT_ENFORCED: "#e4e4e4"}.get(cell["status"],
                                                                           "#c9ecc9")
                    out.append(f"<td style='background:{bg}'><b>{e(cell['status'])}</b><br>"
                               f"<small>{e(cell['why'])}</small></td>")
                out.append("</tr>")
            out.append("</table>")
        out.append("<h2>Round trips</h2>")
        for rt in self.roundtrips:
            if not rt.ran:
                out.append(f"<h3>{e(rt.target)}: not run</h3><p>{e(rt.reason)}</p>")
                continue
            verdict = "EQUAL" if rt.equal else "DIFFERENT"
            out.append(f"<h3>{e(rt.target)}: {verdict}</h3><p>{e(_whole_sentence(rt))}</p><ul>")
            for rid, check in rt.checks.items():
                said = "; ".join(check.sentences(rt.target)) or \
                    f"same {check.refused} of {check.judged} records refused as the replay"
                out.append(f"<li><code>{e(rid)}</code> "
                           f"{'EQUAL' if check.equal else 'DIFFERENT'}: {e(said)}</li>")
            out.append("</ul>")
            extra = [*rt.notes, *(f"{k}: {v}" for k, v in rt.other_errors.items()),
                     *(f"excluded, {k}: {v}" for k, v in rt.excluded.items())]
            if extra:
                out.append("<small>" + "<br>".join(e(x) for x in extra) + "</small>")
        out.append("<h2>Expected behaviour differences</h2>")
        for ex in self.exports.values():
            out.append(f"<h3>{e(ex.title)}</h3><ul>")
            out.extend(f"<li>{e(b)}</li>" for b in ex.behaviour)
            out.extend(f"<li><i>note:</i> {e(x)}</li>" for x in ex.notes)
            out.append(f"</ul><small>files: {e(', '.join(sorted(ex.files)))}</small>")
        if self.skipped:
            out.append("<h2>Not exported</h2><ul>")
            out.extend(f"<li><b>{e(n)}</b>: {e(why)}</li>" for n, why in self.skipped.items())
            out.append("</ul>")
        out.append("<h2>Provenance</h2><table>")
        for k, v in self.provenance.items():
            out.append(f"<tr><th>{e(str(k))}</th><td>{e(json.dumps(v, default=str))}</td></tr>")
        out.append("</table></body></html>\n")
        return "\n".join(out)

    def write(self, out_dir: str | Path) -> list[Path]:
        """``fidelity.json`` and ``fidelity.html`` under ``out_dir``."""
        root = Path(out_dir)
        root.mkdir(parents=True, exist_ok=True)
        j, h = root / "fidelity.json", root / "fidelity.html"
        j.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
        h.write_text(self.to_html(), encoding="utf-8")
        return [j, h]


#: why a target without check rows does not enforce a sample check
_NOT_ENFORCED_WHY = ("this target judges records one at a time: a sample check is an "
                     "aggregate over windows of the topic, with no place here (kqlab replay "
                     "and the CLI's exit status enforce it)")


def _whole_sentence(rt: RoundTrip) -> str:
    """The whole export's comparison in one sentence."""
    engine = f" ({rt.serializer})" if rt.serializer else ""
    text = (f"the export as deployed{engine} refused {rt.refused} and the replay rejected "
            f"{rt.expected} of {rt.judged} judged records")
    if rt.only_target:
        t, p, o = rt.only_target[0]
        text += f"; {len(rt.only_target)} refused only by {rt.target} (e.g. {t}-{p}@{o})"
    if rt.only_replay:
        t, p, o = rt.only_replay[0]
        text += f"; {len(rt.only_replay)} rejected only by the replay (e.g. {t}-{p}@{o})"
    if rt.attribution_differs:
        text += f"; {rt.attribution_differs} under another rule than the replay's"
    return text


def fidelity_report(policy: Any, *, sample: Any = None, now: int | None = None,
                    roundtrips: tuple[str, ...] = tuple(ROUNDTRIPS),
                    targets: tuple[str, ...] | None = None,
                    exports: dict[str, Export] | None = None, today: str | None = None,
                    gate_end_to_end: bool = True, **options: Any) -> FidelityReport:
    """Every target's export of ``policy`` (or those named in ``targets``) and, given a
    ``sample``, the round trips of those among ``roundtrips``.

    ``options`` go to the exporters that accept them (see :func:`kqlab.export.export_all`);
    pass ``exports`` to reuse exports already built.  ``today`` is recorded in the report's
    ``run`` section (default: the date of the run), never in the exported files.
    """
    import inspect
    import time

    from kqlab.export import TARGETS, ExportError

    skipped: dict[str, str] = {}
    if exports is None:
        exports = {}
        for name, t in TARGETS.items():
            if targets is not None and name not in targets:
                continue
            accepted = inspect.signature(importlib.import_module(t.module).build).parameters
            kwargs = {k: v for k, v in options.items() if k in accepted}
            try:
                exports[name] = t.build(policy, **kwargs)
            except ExportError as exc:
                skipped[name] = str(exc)
    report = FidelityReport(policy.name, provenance(policy), exports, skipped=skipped,
                            rules={r.id: (r.severity,
                                          r.description or params_filled(r) or "")
                                   for r in policy.rules},
                            checks={c.id: c.kind for c in policy.checks})
    report.run = {"exported_at": today or datetime.date.today().isoformat(), "seconds": {}}
    view = None
    if sample is not None:
        view = SampleView(policy, replayer_of(sample, now))
        for name in roundtrips:
            if name not in exports:  # not requested, or the export itself failed
                continue
            started = time.perf_counter()
            kwargs_rt: dict[str, Any] = {"view": view}
            if name == "gate":
                kwargs_rt["end_to_end"] = gate_end_to_end
            report.roundtrips.append(ROUNDTRIPS[name](policy, **kwargs_rt))
            report.run["seconds"][name] = round(time.perf_counter() - started, 3)
    report.warnings = _warnings(policy, exports, view)
    return report


def _warnings(policy: Any, exports: dict[str, Export], view: SampleView | None
              ) -> dict[str, str]:
    """Rules that cannot mean what they say on the writer schema, with how much of the
    sample they reject."""
    writer = exports["confluent"].data.get("writer") if "confluent" in exports else None
    if writer is None and policy.value.format == "avro":
        try:
            from kqlab.export.confluent import writer_schema

            writer = json.loads(writer_schema(policy)[0])
        except Exception:  # no schema to check against: nothing to warn about
            return {}
    if writer is None:
        return {}
    from kqlab.export.avro_fields import rule_warnings

    out = rule_warnings(policy.rules, writer)
    if view is not None:
        import numpy as np

        judged = int((~view.control).sum())
        for rid in out:
            failed = int(np.sum(view.replay_failed(rid)))
            out[rid] += f" — it rejects {failed} of the {judged} sampled records"
    return out
