"""The fidelity report: every target's per-rule fidelity side by side, and round-trip proofs.

Fidelity is measured, not assumed (ARCHITECTURE principle 4).  Besides the static table
(each rule ``exact`` / ``approximate`` / ``not expressible`` per target, with how or why, and
the behaviour differences), two targets are *run* on the replayed sample:

(a) **Confluent data contract** — :func:`roundtrip_confluent` registers the exported contract
    in a fresh ``mock://`` registry and serializes every sampled record's decoded value through
    confluent-kafka's own ``AvroSerializer`` (Avro values) or ``JSONSerializer`` (JSON values,
    which also validates the registered JSON Schema) with rule execution; the records it
    refuses must be exactly the records the replay rejects for the rules the contract
    enforces, and each refusal must name the replay's first failing rule.  Known deviations
    (cel-python's equality, JSON integers outside int64: see the fidelity rows) show up as
    disagreements with their cause in ``other_errors``; nothing is filtered out.
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
from typing import TYPE_CHECKING, Any

from kqlab.export.base import NOT_EXPRESSIBLE, PROPOSED, Export, provenance

if TYPE_CHECKING:
    import pyarrow as pa

    from kqlab.policy.model import Policy
    from kqlab.serde.schemas import SchemaResolver
    from kqlab.validate.replayer import Replayer
    from kqlab.validate.rules import RuleResult

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
    #: the replay's count per compared rule, each record under its first failing rule in
    #: the target's order (comparable with ``by_rule`` where the target stops at the first)
    expected_by_rule: dict[str, int] = field(default_factory=dict)
    #: what judged the records on the target side (e.g. ``JSONSerializer``)
    serializer: str = ""

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
                "by_rule": self.by_rule, "expected_by_rule": self.expected_by_rule,
                "serializer": self.serializer, "other_errors": self.other_errors,
                "notes": self.notes, "seconds": round(self.seconds, 3)}


# ----------------------------------------------------------------------------------- helpers

def _replayer(sample: object, now: int | None) -> Replayer:
    """``sample`` as a :class:`~kqlab.validate.replayer.Replayer`: one given is used as is
    (with its cached decodes and rule results); anything else :func:`kqlab.replay` takes is
    loaded into a new one."""
    from kqlab.validate.replayer import Replayer

    return sample if isinstance(sample, Replayer) else Replayer(sample, now=now)


def _replayed(policy: Policy, sample: object, now: int | None
              ) -> tuple[Replayer, pa.Table, Policy, dict[str, RuleResult]]:
    """``(replayer, records table, effective policy, rule results)`` of the local replay."""
    from kqlab.validate.replayer import with_implicit_rules

    r = _replayer(sample, now)
    effective = with_implicit_rules(policy)
    return r, r.sample.records, effective, r.evaluate(effective)


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

    ``sample`` is anything :func:`kqlab.replay` takes (or a ``Replayer``).  Avro values go
    through ``AvroSerializer``, JSON values through ``JSONSerializer`` (the registered JSON
    Schema is validated by the serializer itself, after the rules: the ``json_schema`` rule it
    came from is compared too).  Each value is decoded into the object a producer would hand
    the serializer by kqlab's one decoder (:func:`kqlab.serde.datums.decode_datums`, the
    replay's ``decode()`` with the replay's schema resolver), so the serializer is given
    exactly the records the replay decoded.  Records whose value is null (never serialized)
    or does not decode (the serializer cannot be given them: decode and schema-id rules hold
    by construction) are excluded and counted, by reason.

    Besides the record sets, the proof compares *which* rule refused: the serializer stops at
    the first failing rule of the rule set, so ``by_rule`` (the serializer's) must equal
    ``expected_by_rule`` (the replay's first failing compared rule, in the same order).
    """
    import numpy as np

    from kqlab.export.confluent import build, register_contract

    started = time.perf_counter()
    replayer, records, effective, results = _replayed(policy, sample, now)
    fmt = policy.value.format
    rt = RoundTrip(target="confluent", ran=True, records=records.num_rows)
    if fmt not in ("avro", "json"):
        rt.ran = False
        rt.reason = (f"a data contract is exported for Avro or JSON values only; value format "
                     f"{fmt!r} has no serializer here")
        return rt
    ex = build(effective)
    schema_rule = ex.data.get("schema_rule")
    domain = ex.data["register"]["ruleSet"]["domainRules"]
    # every rule the contract makes the serializer refuse for: the domain rules that fail
    # with ERROR/DLQ and (JSON) the rule whose schema is registered - exact or approximate
    enforced = {r["name"] for r in domain if r.get("onFailure", "ERROR") in ("ERROR", "DLQ")}
    if schema_rule is not None:
        enforced.add(schema_rule)
    status = {f.rule: f.status for f in ex.fidelity}
    compared = [f.rule for f in ex.fidelity if f.rule in enforced and f.mode == "reject"]
    rt.rules = compared
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.common.serde import RuleConditionError
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
    conf = {"auto.register.schemas": False, "use.latest.version": True}
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        serializer: Any = AvroSerializer(client, None, conf=conf)
        rt.serializer = "AvroSerializer"
        datums, why = _serializer_input(policy, records, replayer.resolver)
        schema_errors: tuple[type, ...] = ()
    else:
        from confluent_kafka.schema_registry.json_schema import JSONSerializer
        from jsonschema import ValidationError

        serializer = JSONSerializer(None, client, conf=conf)
        rt.serializer = "JSONSerializer"
        datums, why = _serializer_input(policy, records, replayer.resolver)
        schema_errors = (ValidationError,)
    n = records.num_rows
    judged = np.array([w is None for w in why], dtype=bool)
    for reason in why:
        if reason:
            rt.excluded[reason] = rt.excluded.get(reason, 0) + 1
    names: dict[str, list[str]] = {}
    for r in domain:
        names.setdefault(r["doc"], []).append(r["name"])
    doc_to_rule = {doc: "|".join(ns) for doc, ns in names.items()}
    schema_label = schema_rule if schema_rule in compared else "JSON Schema validation"
    refused = np.zeros(n, dtype=bool)
    topics: list[Any] = records.column("topic").to_pylist()
    headers: list[Any] = records.column("headers").to_pylist()
    for i, datum in enumerate(datums):
        if not judged[i]:
            continue
        ctx = SerializationContext(topics[i], MessageField.VALUE,
                                   [(h["key"], h["value"]) for h in headers[i]])
        try:
            serializer(datum, ctx)
        except SerializationError as exc:
            refused[i] = True
            cause = exc.__cause__
            if isinstance(cause, RuleConditionError):
                name = doc_to_rule.get(str(cause), str(cause))
                rt.by_rule[name] = rt.by_rule.get(name, 0) + 1
            elif cause is None and schema_errors and \
                    isinstance(exc.__context__, schema_errors):
                if schema_label in compared:
                    rt.by_rule[schema_label] = rt.by_rule.get(schema_label, 0) + 1
                else:
                    rt.other_errors[schema_label] = rt.other_errors.get(schema_label, 0) + 1
            else:  # a rule that raised instead of answering, or anything else
                if isinstance(cause, ValueError) and str(cause) == "overflow":
                    key = ("ValueError overflow: an integer outside int64 in the value (the "
                           "executor cannot convert the message)")
                elif cause is not None:
                    key = f"{type(cause).__name__} (a rule raised instead of answering)"
                else:
                    key = f"SerializationError: {exc}"[:120]
                rt.other_errors[key] = rt.other_errors.get(key, 0) + 1
        except Exception as exc:  # fastavro refusing a datum: a schema error, not a rule
            refused[i] = True
            key = f"{type(exc).__name__}"
            rt.other_errors[key] = rt.other_errors.get(key, 0) + 1
    expected = _mask(results, compared, n)
    _compare(rt, refused, expected, judged, _coords(records))
    # the serializer's order: the domain rules as listed, then (JSON) the schema validation
    order = [r["name"] for r in domain if r["name"] in compared]
    order += [r for r in compared if r not in order]
    first = np.zeros(n, dtype=bool)
    for rid in order:
        hit = results[rid].failed & judged & ~first
        if hit.any():
            rt.expected_by_rule[rid] = int(hit.sum())
        first |= hit
    decode_rules = [r.id for r in effective.rules
                    if r.kind in ("decodable", "avro_valid", "json_valid")]
    replay_undecodable = int((_mask(results, decode_rules, n) & ~judged).sum())
    rt.notes.append(f"serialized with confluent-kafka's {rt.serializer} and its CEL rule "
                    "executor against the contract registered in a mock:// registry")
    rt.notes.append(f"{int((~judged).sum())} record(s) not serializable input (null or "
                    f"undecodable); {replay_undecodable} of them failed the replay's decode "
                    "rules")
    rt.notes.append("compared: " + (", ".join(f"{r} ({status[r]})" for r in compared)
                                     or "none"))
    rt.notes.append("not compared (not enforced by the contract): " + (", ".join(
        f"{f.rule} ({f.status})" for f in ex.fidelity if f.rule not in compared) or "none"))
    rt.seconds = time.perf_counter() - started
    return rt


#: why a record is not given to the serializer (the keys of ``RoundTrip.excluded``)
_NULL_VALUE = "null value (never serialized)"
_NO_FRAMING = "no Confluent framing (cannot be serialized)"
_UNDECODABLE = {"json": "not valid JSON (cannot be serialized)",
                "avro": "undecodable or unknown schema id (cannot be serialized)"}
_NULL_DATUM = {"json": "JSON null (serializes to a tombstone, no rule runs)",
               "avro": "Avro null datum (serializes to a tombstone, no rule runs)"}


def _serializer_input(policy: Policy, records: pa.Table, resolver: SchemaResolver | None
                      ) -> tuple[list[object], list[str | None]]:
    """Each record's value as the object a producer would hand the serializer, and ``None``;
    or ``None`` and why there is none.

    The objects come from :func:`~kqlab.serde.datums.decode_datums` — the replay's own
    decoding, with the replay's resolver (``None``: built from the policy's schema source, as
    the replay builds it) — so a value reaches the serializer exactly when the replay's
    ``decode:value`` verdict passed it, and the reasons follow the stage that failed.
    """
    from kqlab.serde.datums import decode_datums

    fmt = policy.value
    decoded = decode_datums(records.column("value"), fmt, resolver)
    undecodable, null_datum = _UNDECODABLE[fmt.format], _NULL_DATUM[fmt.format]
    why: list[str | None] = []
    for datum, stage, null in zip(decoded.values, decoded.stages, decoded.null.tolist(),
                                  strict=True):
        if null:
            why.append(_NULL_VALUE)
        elif stage == "framing":
            why.append(_NO_FRAMING)
        elif stage is not None:
            why.append(undecodable)
        elif datum is None:  # the serializer returns None for None: a producer's tombstone
            why.append(null_datum)
        else:
            why.append(None)
    return decoded.values, why


# ------------------------------------------------------------------------------ (b) Tansu

def roundtrip_tansu(policy: Any, sample: Any, *, now: int | None = None,
                    timeout: float = 30.0) -> RoundTrip:
    """Round-trip proof (b); see the module docstring."""
    import numpy as np

    from kqlab.export.tansu import build

    started = time.perf_counter()
    _, records, effective, results = _replayed(policy, sample, now)
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
    rows: dict[str, list[Any]] = {c: records.column(c).to_pylist() for c in
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
                      "only_replay", "serializer", "by_rule", "expected_by_rule",
                      "other_errors", "notes", "seconds"):
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
        replayer = _replayer(sample, now)
        if "confluent" in roundtrips:
            report.roundtrips.append(roundtrip_confluent(policy, replayer))
        if "tansu" in roundtrips:
            report.roundtrips.append(roundtrip_tansu(policy, replayer))
    return report
