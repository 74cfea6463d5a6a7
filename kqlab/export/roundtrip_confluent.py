"""Round trip (a): the Confluent data contract, run by confluent-kafka's own serializer.

The exported contract is registered in a fresh ``mock://`` registry and every sampled record's
decoded value goes through confluent-kafka's ``AvroSerializer`` (Avro values),
``ProtobufSerializer`` (Protobuf values: the parsed message, re-read into the contract's message
class when another writer schema decoded it) or ``JSONSerializer`` (JSON values, which also
validates the registered JSON Schema) with its CEL rule executor.  The values are the objects a
producer would hand the serializer, decoded by kqlab's one decoder
(:func:`kqlab.serde.datums.decode_datums`, the replay's own decoding), so the serializer is
given exactly the records the replay decoded; records with no value, that do not decode, or
that are transaction markers are excluded and counted, by reason.

Two comparisons come out of it:

* the contract as exported, all rules at once: the records it refuses against those the replay
  rejects for the rules it enforces, and which rule refused each (the serializer stops at the
  first failing rule, in ruleSet order);
* every rule on its own (:class:`~kqlab.export.roundtrip.RuleCheck`).  The first run already
  decides most of them — a record the contract accepted passed every enforcing rule, one
  refused by rule *k* passed the rules before it — and each rule is run alone (a contract
  holding only that rule, ``onFailure: ERROR``) on the records left undecided: those after
  the first failure, those refused by a rule that raised instead of answering, and every
  record for rules exported with ``onFailure: NONE`` (observe mode), whose verdicts the
  contract never shows.

Known deviations (cel-python's equality, JSON integers outside int64: see the fidelity rows)
show up as disagreements with their cause in ``errors``; nothing is filtered out.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np

from kqlab.export.base import DECODE_KEY, ExportError
from kqlab.export.roundtrip import CONTROL, RoundTrip, SampleView, compare, compare_whole

__all__ = ["roundtrip_confluent"]

#: why a record is not given to the serializer (the keys of ``RoundTrip.excluded``)
_NULL_VALUE = "null value (never serialized)"
_NO_FRAMING = "no Confluent framing (cannot be serialized)"
_UNDECODABLE = {"json": "not valid JSON (cannot be serialized)",
                "avro": "undecodable or unknown schema id (cannot be serialized)",
                "protobuf": "undecodable or unknown schema id (cannot be serialized)"}
_NULL_DATUM = {"json": "JSON null (serializes to a tombstone, no rule runs)",
               "avro": "Avro null datum (serializes to a tombstone, no rule runs)",
               "protobuf": "no message (never serialized)"}
_SCHEMA = "JSON Schema validation"


def _serializer_input(view: SampleView) -> tuple[list[object], list[str | None]]:
    """Each record's value as the object a producer would hand the serializer, and ``None``;
    or ``None`` and why there is none (a value reaches the serializer exactly when the
    replay's decoding passed it)."""
    fmt = view.policy.value.format
    decoded = view.datums
    undecodable, null_datum = _UNDECODABLE[fmt], _NULL_DATUM[fmt]
    why: list[str | None] = []
    for i, (datum, stage, null) in enumerate(zip(decoded.values, decoded.stages,
                                                 decoded.null.tolist(), strict=True)):
        if view.control[i]:
            why.append(CONTROL)
        elif null:
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


class _Contract:
    """A contract registered in its own ``mock://`` registry, and a serializer using it."""

    def __init__(self, register: dict[str, Any], subject: str, fmt: str, proto: Any = None):
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        client = SchemaRegistryClient.new_client(
            {"url": f"mock://kqlab-roundtrip-{uuid.uuid4().hex}"})
        for ref_subject, body in (proto.reference_bodies.items() if proto else ()):
            client.register_schema(ref_subject, Schema.from_dict(body))
        client.register_schema(subject, Schema.from_dict(register))
        conf: dict[str, Any] = {"auto.register.schemas": False, "use.latest.version": True}
        self.cls = None if proto is None else proto.cls
        self.schema_errors: tuple[type, ...] = ()
        if fmt == "protobuf":
            from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

            conf["subject.name.strategy"] = lambda ctx, name: subject
            self.serializer: Any = ProtobufSerializer(self.cls, client, conf=conf)
        elif fmt == "avro":
            from confluent_kafka.schema_registry.avro import AvroSerializer

            self.serializer = AvroSerializer(client, None, conf=conf)
        else:
            from confluent_kafka.schema_registry.json_schema import JSONSerializer
            from jsonschema import ValidationError

            self.serializer = JSONSerializer(None, client, conf=conf)
            self.schema_errors = (ValidationError,)

    def outcome(self, datum: Any, ctx: Any) -> tuple[str, str | None]:
        """What the serializer did with one datum: ``("ok", None)``, ``("rule", doc)`` (a
        rule answered false), ``("schema", None)`` (JSON Schema validation failed, after the
        rules), ``("write", error)`` (the writer refused the datum, after the rules) or
        ``("error", cause)`` (a rule, or the conversion of the message, raised)."""
        from confluent_kafka.schema_registry.common.serde import RuleConditionError
        from confluent_kafka.serialization import SerializationError

        try:
            if self.cls is not None and type(datum) is not self.cls:
                # another writer schema's message: what a producer of the contract's
                # generated class would hold for the same bytes
                datum = self.cls.FromString(datum.SerializeToString())
            self.serializer(datum, ctx)
            return "ok", None
        except SerializationError as exc:
            cause = exc.__cause__
            if isinstance(cause, RuleConditionError):
                return "rule", str(cause)
            if cause is None and self.schema_errors and \
                    isinstance(exc.__context__, self.schema_errors):
                return "schema", None
            if isinstance(cause, ValueError) and str(cause) == "overflow":
                return "error", ("ValueError overflow: an integer outside int64 in the value "
                                 "(the executor cannot convert the message)")
            if cause is not None:
                return "error", f"{type(cause).__name__} (a rule raised instead of answering)"
            return "error", f"SerializationError: {exc}"[:120]
        except Exception as exc:  # fastavro refusing a datum: after the rules ran
            return "write", type(exc).__name__


def roundtrip_confluent(policy: Any, sample: Any = None, *, now: int | None = None,
                        view: SampleView | None = None) -> RoundTrip:
    """Round trip (a); see the module docstring.

    ``sample`` is anything :func:`kqlab.replay` takes (or a ``Replayer``); ``view`` a
    :class:`~kqlab.export.roundtrip.SampleView` already built for it.
    """
    from kqlab.export.confluent import build
    from kqlab.export.roundtrip import replayer_of

    started = time.perf_counter()
    view = view or SampleView(policy, replayer_of(sample, now))
    fmt = policy.value.format
    rt = RoundTrip(target="confluent", ran=True, records=view.n)
    if fmt not in ("avro", "json", "protobuf"):
        rt.ran = False
        rt.reason = (f"a data contract is exported for Avro, JSON or Protobuf values only; "
                     f"value format "
                     f"{fmt!r} has no serializer here")
        return rt
    try:
        ex = build(policy)
    except ExportError as exc:
        rt.ran, rt.reason = False, f"the contract could not be exported: {exc}"
        return rt
    from confluent_kafka.schema_registry.rules.cel.cel_executor import CelExecutor
    from confluent_kafka.schema_registry.rules.cel.cel_field_executor import CelFieldExecutor
    from confluent_kafka.serialization import MessageField, SerializationContext

    CelExecutor.register()
    CelFieldExecutor.register()
    subject = ex.data["subject"]
    register = ex.data["register"]
    schema_rule = ex.data.get("schema_rule")
    domain = register["ruleSet"]["domainRules"]
    names = [r["name"] for r in domain]
    enforcing = [r["onFailure"] in ("ERROR", "DLQ") for r in domain]
    enforced = {n for n, e in zip(names, enforcing, strict=True) if e}
    if schema_rule is not None:
        enforced.add(schema_rule)
    status = {f.rule: f.status for f in ex.fidelity}
    compared = [f.rule for f in ex.fidelity if f.rule in enforced and f.mode == "reject"]
    rt.rules = compared
    rt.serializer = {"avro": "AvroSerializer", "protobuf": "ProtobufSerializer"}.get(
        fmt, "JSONSerializer")
    proto = ex.data.get("proto")
    contract = _Contract(register, subject, fmt, proto)
    datums, why = _serializer_input(view)
    n = view.n
    judged = np.array([w is None for w in why], dtype=bool)
    for reason in why:
        if reason:
            rt.excluded[reason] = rt.excluded.get(reason, 0) + 1
    docs: dict[str, list[int]] = {}
    for j, r in enumerate(domain):
        docs.setdefault(r["doc"], []).append(j)
    topics: list[Any] = view.records.column("topic").to_pylist()
    headers: list[Any] = view.records.column("headers").to_pylist()

    def ctx(i: int) -> Any:
        return SerializationContext(topics[i], MessageField.VALUE,
                                    [(h["key"], h["value"]) for h in headers[i]])

    # 1. the contract as exported, every rule at once
    refused = np.zeros(n, dtype=bool)
    #: per rule: 1 refused, 0 passed, -1 not decided by the first run
    verdict = {name: np.full(n, -1, dtype=np.int8) for name in names}
    schema_verdict = np.full(n, -1, dtype=np.int8)
    undecided: list[int] = []
    for i in np.flatnonzero(judged).tolist():
        what, detail = contract.outcome(datums[i], ctx(i))
        if what == "ok":
            for name, e in zip(names, enforcing, strict=True):
                if e:
                    verdict[name][i] = 0
            schema_verdict[i] = 0
            continue
        refused[i] = True
        hit = docs.get(detail or "", []) if what == "rule" else []
        if what == "rule" and len(hit) == 1:
            k = hit[0]
            rt.by_rule[names[k]] = rt.by_rule.get(names[k], 0) + 1
            for j in range(k):
                if enforcing[j]:
                    verdict[names[j]][i] = 0
            verdict[names[k]][i] = 1
        elif what in ("schema", "write"):
            for name, e in zip(names, enforcing, strict=True):
                if e:
                    verdict[name][i] = 0
            if what == "schema":
                schema_verdict[i] = 1
                label = schema_rule if schema_rule in compared else _SCHEMA
                if label in compared:
                    rt.by_rule[label] = rt.by_rule.get(label, 0) + 1
                else:
                    rt.other_errors[label] = rt.other_errors.get(label, 0) + 1
            else:
                rt.other_errors[str(detail)] = rt.other_errors.get(str(detail), 0) + 1
        else:  # a rule raised, or a doc several rules share: which rule is not known
            key = str(detail) if what == "error" else f"rule {' or '.join(names[j] for j in hit)}"
            rt.other_errors[key] = rt.other_errors.get(key, 0) + 1
            undecided.append(i)
    expected = np.zeros(n, dtype=bool)
    for rid in compared:
        expected |= view.replay_failed(rid)
    compare_whole(rt, view, refused, expected, judged)
    order = [nm for nm in names if nm in compared] + [r for r in compared if r not in names]
    first = np.zeros(n, dtype=bool)
    for rid in order:
        hit_mask = view.replay_failed(rid) & judged & ~first
        if hit_mask.any():
            rt.expected_by_rule[rid] = int(hit_mask.sum())
        first |= hit_mask
    # 2. every rule on its own, run alone where the first run did not decide it
    excluded = dict(rt.excluded)
    for r in domain:
        name = r["name"]
        todo = np.flatnonzero(judged & (verdict[name] < 0)).tolist()
        errors: dict[str, int] = {}
        if todo:
            alone = _Contract({**register, "ruleSet": {"domainRules": [
                {**r, "onFailure": "ERROR"}]}}, subject, fmt, proto)
            for i in todo:
                what, detail = alone.outcome(datums[i], ctx(i))
                verdict[name][i] = 1 if what in ("rule", "error") else 0
                if what == "error":
                    errors[str(detail)] = errors.get(str(detail), 0) + 1
        rt.checks[name] = compare(view, name, verdict[name] == 1, judged, excluded=excluded,
                                  errors=errors)
    if schema_rule is not None:
        todo = np.flatnonzero(judged & (schema_verdict < 0)).tolist()
        if todo:
            bare = _Contract({**register, "ruleSet": {"domainRules": []}}, subject, fmt, proto)
            for i in todo:
                schema_verdict[i] = 1 if bare.outcome(datums[i], ctx(i))[0] == "schema" else 0
        rt.checks[schema_rule] = compare(view, schema_rule, schema_verdict == 1, judged,
                                         excluded=excluded)
    for f in ex.fidelity:
        if f.rule in rt.checks or f.status == "not expressible":
            continue
        if f.rule == DECODE_KEY:
            rt.unchecked[f.rule] = ("the serializer is only ever given values: no key reaches "
                                    "it, so there is nothing to run")
        else:
            rt.unchecked[f.rule] = ("not a rule of the contract: the serializer is handed "
                                    "objects, never bytes, so there is nothing to run it on")
    decode_ids = view.decode_rule_ids()
    replay_undecodable = 0
    for rid in decode_ids:
        replay_undecodable += int((view.replay_failed(rid) & ~judged).sum())
    rt.notes.append(f"serialized with confluent-kafka's {rt.serializer} and its CEL rule "
                    "executor against the contract registered in a mock:// registry; each rule "
                    "also alone where the whole contract did not decide it")
    rt.notes.append(f"{int((~judged).sum())} record(s) not serializable input (null, "
                    f"undecodable or transaction markers); {replay_undecodable} of them failed "
                    "the replay's decoding")
    rt.notes.append("compared: " + (", ".join(f"{r} ({status[r]})" for r in compared)
                                     or "none"))
    rt.seconds = time.perf_counter() - started
    return rt

