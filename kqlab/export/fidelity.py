"""The fidelity report: every target's per-rule fidelity side by side, and round-trip proofs.

Fidelity is measured, not assumed (ARCHITECTURE principle 4).  Besides the static table
(each rule ``exact`` / ``approximate`` / ``not expressible`` per target, with how or why, and
the behaviour differences), two targets are *run* on the replayed sample:

(a) **Confluent data contract** — :func:`roundtrip_confluent` registers the exported contract
    in a fresh ``mock://`` registry and serializes every sampled record's decoded value through
    confluent-kafka's own ``AvroSerializer`` with rule execution; the records it refuses must be
    exactly the records the replay rejects for the rules the contract expresses exactly.
(b) **Tansu** — :func:`roundtrip_tansu` starts the embedded Tansu broker with the exported
    schema files, produces every sampled record (same partition, key, value, headers,
    timestamp) in a batch of its own — Tansu rejects whole batches, so one record per batch is
    what makes its verdict per record — and compares the records answered
    ``INVALID_RECORD`` with the replay's failures of the rules the files express.  Tansu checks
    raw payloads only; for a policy whose values are Confluent-framed (the demo ``orders``) the
    proof cannot run, and the round trip says why instead of pretending.

Both compare *policy-rule* failures, not outcomes: the replay's broker checks (CRC, sequences,
timestamps) and batch collateral are other enforcement points' business.
"""

from __future__ import annotations

import html
import importlib
import json
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kqlab.export.base import EXACT, NOT_EXPRESSIBLE, PROPOSED, Export, provenance

__all__ = ["FidelityReport", "RoundTrip", "fidelity_report", "roundtrip_confluent",
           "roundtrip_tansu"]

#: coordinates listed per disagreement (the counts are always complete)
_SHOWN = 20


@dataclass
class RoundTrip:
    """One round-trip proof: the target's refusals against the replay's, record by record.

    ``ran`` is False when the proof cannot run here (``reason`` says precisely why).
    ``judged`` records were given to the target; ``excluded`` the others, by reason.
    ``only_target`` / ``only_replay`` list (topic, partition, offset) of disagreements.
    """

    target: str
    ran: bool
    reason: str = ""
    rules: list[str] = field(default_factory=list)
    records: int = 0
    judged: int = 0
    excluded: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    expected: int = 0
    agree: int = 0
    only_target: list[tuple[str, int, int]] = field(default_factory=list)
    only_replay: list[tuple[str, int, int]] = field(default_factory=list)
    by_rule: dict[str, int] = field(default_factory=dict)
    other_errors: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        """The target refused exactly the records the replay rejected (for the rules)."""
        return self.ran and not self.only_target and not self.only_replay and \
            self.refused == self.expected

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {"target": self.target, "ran": self.ran, "reason": self.reason,
                "equal": self.equal, "rules": self.rules, "records": self.records,
                "judged": self.judged, "excluded": self.excluded, "refused": self.refused,
                "expected": self.expected, "agree": self.agree,
                "only_target": [list(c) for c in self.only_target[:_SHOWN]],
                "only_target_count": len(self.only_target),
                "only_replay": [list(c) for c in self.only_replay[:_SHOWN]],
                "only_replay_count": len(self.only_replay),
                "by_rule": self.by_rule, "other_errors": self.other_errors,
                "notes": self.notes, "seconds": round(self.seconds, 3)}


# ----------------------------------------------------------------------------------- helpers

def _replayed(policy: Any, sample: Any, now: int | None) -> tuple[Any, Any, dict[str, Any]]:
    """``(records table, effective policy, rule results)`` of the local replay."""
    from kqlab.validate.replay import Replayer, with_implicit_rules

    r = sample if hasattr(sample, "evaluate") else Replayer(sample, now=now)
    effective = with_implicit_rules(policy)
    return r.sample.records, effective, r.evaluate(effective)


def _mask(results: dict[str, Any], rules: list[str], n: int) -> Any:
    import numpy as np

    out = np.zeros(n, dtype=bool)
    for rid in rules:
        out |= results[rid].failed
    return out


def _coords(records: Any) -> list[tuple[str, int, int]]:
    return list(zip(records.column("topic").to_pylist(), records.column("partition").to_pylist(),
                    records.column("offset").to_pylist(), strict=True))


def _compare(rt: RoundTrip, refused: Any, expected: Any, judged: Any, coords: list) -> None:
    import numpy as np

    refused, expected = refused & judged, expected & judged
    rt.judged = int(judged.sum())
    rt.refused, rt.expected = int(refused.sum()), int(expected.sum())
    rt.agree = int((refused & expected).sum())
    rt.only_target = [coords[i] for i in np.flatnonzero(refused & ~expected).tolist()]
    rt.only_replay = [coords[i] for i in np.flatnonzero(expected & ~refused).tolist()]


# ------------------------------------------------------------------------- (a) Confluent

def roundtrip_confluent(policy: Any, sample: Any, *, now: int | None = None) -> RoundTrip:
    """Round-trip proof (a); see the module docstring.

    ``sample`` is anything :func:`kqlab.replay` takes (or a ``Replayer``).  Records whose value
    is null (never serialized) or does not decode with the policy's schemas (the serializer
    cannot be given them: decode and schema-id rules hold by construction) are excluded and
    counted.
    """
    import numpy as np

    from kqlab.export.confluent import build, register_contract

    started = time.perf_counter()
    records, effective, results = _replayed(policy, sample, now)
    ex = build(effective)
    compared = [f.rule for f in ex.fidelity if f.status == EXACT and f.mode == "reject"]
    rt = RoundTrip(target="confluent", ran=True, rules=compared, records=records.num_rows)
    if policy.value.format != "avro":
        rt.ran = False
        rt.reason = (f"the proof serializes with AvroSerializer; value format "
                     f"{policy.value.format!r} is not Avro")
        return rt
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.rules.cel.cel_executor import CelExecutor
    from confluent_kafka.schema_registry.rules.cel.cel_field_executor import CelFieldExecutor
    from confluent_kafka.serialization import (
        MessageField,
        SerializationContext,
        SerializationError,
    )

    CelExecutor.register()
    CelFieldExecutor.register()
    client = SchemaRegistryClient.new_client({"url": f"mock://kqlab-roundtrip-{uuid.uuid4().hex}"})
    register_contract(client, ex)
    serializer = AvroSerializer(client, None, conf={"auto.register.schemas": False,
                                                    "use.latest.version": True})
    datums, why = _decode_avro(policy, records)
    n = records.num_rows
    judged = np.array([d is not None for d in datums], dtype=bool)
    for reason in why:
        if reason:
            rt.excluded[reason] = rt.excluded.get(reason, 0) + 1
    doc_to_rule = {r["doc"]: r["name"] for r in ex.data["register"]["ruleSet"]["domainRules"]}
    refused = np.zeros(n, dtype=bool)
    topics = records.column("topic").to_pylist()
    headers = records.column("headers").to_pylist()
    for i, datum in enumerate(datums):
        if datum is None:
            continue
        ctx = SerializationContext(topics[i], MessageField.VALUE,
                                   [(h["key"], h["value"]) for h in headers[i]])
        try:
            serializer(datum, ctx)
        except SerializationError as exc:
            refused[i] = True
            cause = str(exc.__cause__) if exc.__cause__ is not None else str(exc)
            name = doc_to_rule.get(cause, cause)
            rt.by_rule[name] = rt.by_rule.get(name, 0) + 1
        except Exception as exc:  # fastavro refusing a datum: a schema error, not a rule
            refused[i] = True
            key = f"{type(exc).__name__}"
            rt.other_errors[key] = rt.other_errors.get(key, 0) + 1
    expected = _mask(results, compared, n)
    _compare(rt, refused, expected, judged, _coords(records))
    decode_rules = [r.id for r in effective.rules if r.kind in ("decodable", "avro_valid")]
    replay_undecodable = int((_mask(results, decode_rules, n) & ~judged).sum())
    rt.notes.append(f"{int((~judged).sum())} record(s) not serializable input (null or "
                    f"undecodable); {replay_undecodable} of them failed the replay's decode "
                    "rules")
    rt.notes.append("not compared (not exactly expressible): " + ", ".join(
        f"{f.rule} ({f.status})" for f in ex.fidelity if f.rule not in compared))
    rt.seconds = time.perf_counter() - started
    return rt


def _decode_avro(policy: Any, records: Any) -> tuple[list[Any], list[str | None]]:
    """Each record's value decoded with its writer schema (None + why when it cannot be)."""
    import io

    import fastavro

    from kqlab.serde.schemas import SchemaResolver

    resolver = SchemaResolver.from_source(policy.value.schemas)
    framed = policy.value.wire == "confluent"
    datums: list[Any] = []
    why: list[str | None] = []
    for value in records.column("value").to_pylist():
        if value is None:
            datums.append(None)
            why.append("null value (never serialized)")
            continue
        try:
            if framed:
                if len(value) < 5 or value[0] != 0:
                    raise ValueError("no Confluent framing")
                schema = resolver.schema(int.from_bytes(value[1:5], "big"))
                body = value[5:]
            else:
                schema, body = resolver.unframed(), value
            buf = io.BytesIO(body)
            datum = fastavro.schemaless_reader(buf, schema.parsed, None)
            if buf.tell() != len(body):
                raise ValueError("trailing bytes")
        except Exception:
            datums.append(None)
            why.append("undecodable or unknown schema id (cannot be serialized)")
            continue
        datums.append(datum)
        why.append(None)
    return datums, why


# ------------------------------------------------------------------------------ (b) Tansu

def roundtrip_tansu(policy: Any, sample: Any, *, now: int | None = None,
                    timeout: float = 30.0) -> RoundTrip:
    """Round-trip proof (b); see the module docstring."""
    import numpy as np

    from kqlab.export.tansu import build

    started = time.perf_counter()
    records, effective, results = _replayed(policy, sample, now)
    rt = RoundTrip(target="tansu", ran=True, records=records.num_rows)
    if policy.value.wire == "confluent" or policy.value.format not in ("json",):
        rt.ran = False
        rt.reason = (
            f"Tansu validates raw payloads only — JSON text, Avro object-container files, raw "
            f"protobuf — and rejects every value in the Confluent wire format "
            f"(test-broker.md §2, verified there). This policy's values are "
            f"{policy.value.format} with wire {policy.value.wire!r}: produced unchanged, all "
            f"{records.num_rows} records would be refused whatever the rules say; re-encoded "
            "as object-container files they would no longer be the sample; and an .avsc "
            "cannot express field rules anyway. Only policies with raw JSON values can be "
            "round-tripped through Tansu.")
        return rt
    ex = build(effective)
    compared = [f.rule for f in ex.fidelity if f.status != NOT_EXPRESSIBLE and
                f.mode == "reject"]
    rt.rules = compared
    from confluent_kafka import KafkaError, Producer

    from kqlab.embedded import Broker

    n = records.num_rows
    rows = {c: records.column(c).to_pylist() for c in
            ("topic", "partition", "key", "value", "headers", "timestamp")}
    errors: list[Any] = [None] * n
    with tempfile.TemporaryDirectory(prefix="kqlab-tansu-roundtrip-") as tmp:
        schema_dir = Path(tmp) / "schemas"
        schema_dir.mkdir()
        for rel, text in ex.files.items():
            (schema_dir / Path(rel).name).write_text(text, encoding="utf-8")
        with Broker(schema_dir=schema_dir) as broker:
            for topic in sorted(set(rows["topic"])):
                parts = max(p for t, p in zip(rows["topic"], rows["partition"], strict=True)
                            if t == topic) + 1
                broker.create_topic(topic, partitions=parts)
            # one record per batch: Tansu's verdict is per batch, so this makes it per record
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                                 "batch.num.messages": 1, "enable.idempotence": False,
                                 "retries": 0, "message.timeout.ms": int(timeout * 1000),
                                 "logger": _quiet()})
            done = [False] * n

            def report(err: Any, _msg: Any, i: int) -> None:
                errors[i] = err
                done[i] = True

            for i in range(n):
                kwargs: dict[str, Any] = {
                    "key": rows["key"][i], "value": rows["value"][i],
                    "partition": rows["partition"][i], "timestamp": rows["timestamp"][i],
                    "headers": [(h["key"], h["value"]) for h in rows["headers"][i]],
                    "on_delivery": lambda e, m, i=i: report(e, m, i)}
                while True:
                    try:
                        producer.produce(rows["topic"][i], **kwargs)
                        break
                    except BufferError:
                        producer.poll(0.05)
            left = producer.flush(timeout)
            del producer
    if left or not all(done):
        rt.notes.append(f"{n - sum(done)} record(s) got no delivery report within {timeout}s")
    refused = np.array([e is not None and e.code() == KafkaError.INVALID_RECORD
                        for e in errors], dtype=bool)
    for e in errors:
        if e is not None and e.code() != KafkaError.INVALID_RECORD:
            rt.other_errors[e.name()] = rt.other_errors.get(e.name(), 0) + 1
    rt.by_rule = {"INVALID_RECORD (87)": int(refused.sum())}
    judged = np.array(done, dtype=bool)
    expected = _mask(results, compared, n)
    tomb = np.array([v is None for v in rows["value"]], dtype=bool)
    if tomb.any():
        expected |= tomb
        rt.notes.append(f"{int(tomb.sum())} tombstone(s) expected refused: a value schema makes "
                        "the value mandatory")
    _compare(rt, refused, expected, judged, _coords(records))
    rt.notes.append("not compared (not expressible): " + (", ".join(
        f.rule for f in ex.fidelity if f.rule not in compared) or "none"))
    rt.seconds = time.perf_counter() - started
    return rt


def _quiet() -> Any:
    import logging

    logger = logging.getLogger("kqlab.export.librdkafka")
    if not logger.handlers:
        logger.propagate = False
        logger.addHandler(logging.NullHandler())
    return logger


# --------------------------------------------------------------------------------- report

@dataclass
class FidelityReport:
    """Every target's export of one policy, with the round trips that ran (HTML + JSON)."""

    policy: str
    provenance: dict[str, Any]
    exports: dict[str, Export]
    roundtrips: list[RoundTrip] = field(default_factory=list)
    #: targets the policy could not be exported to, and why
    skipped: dict[str, str] = field(default_factory=dict)

    def table(self) -> list[dict[str, Any]]:
        """One row per rule: its status and how/why on every target."""
        rows: dict[str, dict[str, Any]] = {}
        for name, ex in self.exports.items():
            for f in ex.fidelity:
                row = rows.setdefault(f.rule, {"rule": f.rule, "kind": f.kind, "mode": f.mode,
                                               "targets": {}})
                row["targets"][name] = {"status": f.status, "how": f.how}
        return list(rows.values())

    def to_dict(self) -> dict[str, Any]:
        """The JSON report."""
        return {"policy": self.policy, "provenance": self.provenance,
                "targets": {n: e.to_dict() for n, e in self.exports.items()},
                "table": self.table(), "skipped": self.skipped,
                "roundtrips": [r.to_dict() for r in self.roundtrips]}

    def to_html(self) -> str:
        """A self-contained static HTML page of the report."""
        e = html.escape
        colour = {"exact": "#d8f0d8", "approximate": "#fff2c6", "not expressible": "#f6d6d6"}
        names = list(self.exports)
        out = ["<!doctype html><html><head><meta charset='utf-8'>",
               f"<title>kqlab export fidelity: {e(self.policy)}</title><style>",
               "body{font:14px system-ui,sans-serif;margin:2em;max-width:1400px}",
               "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;"
               "padding:4px 6px;vertical-align:top}th{background:#eee}",
               "small{color:#555}.proposed{color:#a00;font-weight:bold}</style></head><body>",
               f"<h1>Export fidelity — policy <code>{e(self.policy)}</code></h1>",
               "<h2>Provenance</h2><table>"]
        for k, v in self.provenance.items():
            out.append(f"<tr><th>{e(str(k))}</th><td>{e(json.dumps(v, default=str))}</td></tr>")
        out.append("</table><h2>Per rule and target</h2><table><tr><th>rule</th><th>kind</th>")
        for n in names:
            label = " <span class='proposed'>(" + e(PROPOSED) + ")</span>" \
                if self.exports[n].proposed else ""
            out.append(f"<th>{e(n)}{label}</th>")
        out.append("</tr>")
        for row in self.table():
            out.append(f"<tr><td><code>{e(row['rule'])}</code><br><small>{e(row['mode'])}"
                       f"</small></td><td>{e(row['kind'])}</td>")
            for n in names:
                cell = row["targets"].get(n)
                if cell is None:
                    out.append("<td></td>")
                    continue
                out.append(f"<td style='background:{colour[cell['status']]}'><b>"
                           f"{e(cell['status'])}</b><br><small>{e(cell['how'])}</small></td>")
            out.append("</tr>")
        out.append("</table><h2>Expected behaviour differences</h2>")
        for ex in self.exports.values():
            out.append(f"<h3>{e(ex.title)}</h3><ul>")
            out.extend(f"<li>{e(b)}</li>" for b in ex.behaviour)
            out.extend(f"<li><i>note:</i> {e(x)}</li>" for x in ex.notes)
            out.append(f"</ul><small>files: {e(', '.join(sorted(ex.files)))}</small>")
        if self.skipped:
            out.append("<h2>Not exported</h2><ul>")
            out.extend(f"<li><b>{e(n)}</b>: {e(why)}</li>" for n, why in self.skipped.items())
            out.append("</ul>")
        out.append("<h2>Round trips</h2>")
        for rt in self.roundtrips:
            d = rt.to_dict()
            verdict = ("EQUAL" if rt.equal else "DIFFERENT") if rt.ran else "not run"
            out.append(f"<h3>{e(rt.target)}: {verdict}</h3><table>")
            for k in ("reason", "rules", "records", "judged", "excluded", "refused", "expected",
                      "agree", "only_target_count", "only_replay_count", "only_target",
                      "only_replay", "by_rule", "other_errors", "notes", "seconds"):
                if d.get(k) in (None, "", [], {}):
                    continue
                out.append(f"<tr><th>{e(k)}</th><td>{e(json.dumps(d[k], default=str))}</td>"
                           "</tr>")
            out.append("</table>")
        out.append("</body></html>\n")
        return "\n".join(out)

    def write(self, out_dir: str | Path) -> list[Path]:
        """``fidelity.json`` and ``fidelity.html`` under ``out_dir``."""
        root = Path(out_dir)
        root.mkdir(parents=True, exist_ok=True)
        j, h = root / "fidelity.json", root / "fidelity.html"
        j.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
        h.write_text(self.to_html(), encoding="utf-8")
        return [j, h]


def fidelity_report(policy: Any, *, sample: Any = None, now: int | None = None,
                    roundtrips: tuple[str, ...] = ("confluent", "tansu"),
                    exports: dict[str, Export] | None = None, today: str | None = None,
                    **options: Any) -> FidelityReport:
    """Every target's export of ``policy`` and, given a ``sample``, the round trips.

    ``options`` go to the exporters that accept them (see :func:`kqlab.export.export_all`);
    pass ``exports`` to reuse exports already built.
    """
    import inspect

    from kqlab.export import TARGETS, ExportError

    skipped: dict[str, str] = {}
    if exports is None:
        exports = {}
        for name, t in TARGETS.items():
            accepted = inspect.signature(importlib.import_module(t.module).build).parameters
            kwargs = {k: v for k, v in {"today": today, **options}.items() if k in accepted}
            try:
                exports[name] = t.build(policy, **kwargs)
            except ExportError as exc:
                skipped[name] = str(exc)
    report = FidelityReport(policy.name, provenance(policy, today=today), exports,
                            skipped=skipped)
    if sample is not None:
        from kqlab.validate.replay import Replayer

        replayer = sample if hasattr(sample, "evaluate") else Replayer(sample, now=now)
        if "confluent" in roundtrips:
            report.roundtrips.append(roundtrip_confluent(policy, replayer))
        if "tansu" in roundtrips:
            report.roundtrips.append(roundtrip_tansu(policy, replayer))
    return report
