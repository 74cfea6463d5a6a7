"""Round trip (b): Tansu's per-topic schema files, run by the embedded Tansu broker.

The embedded broker (:mod:`kqlab.embedded`) starts with ``--schema-registry`` on a folder of
exported schema files, and every sampled record is produced (same key, value, headers and
timestamp) in a batch of its own — Tansu rejects whole batches, so one record per batch makes
its verdict per record.  A record answered ``INVALID_RECORD`` was refused.

Tansu takes one schema file per topic, so each rule gets a topic of its own whose file is what
the exporter writes for a policy holding that rule alone (the implicit checks likewise: the
bare value schema for the decoding, the export's key/value structure for the key's decoding),
and receives the records that rule can be judged on: a rule reading fields gets the records
whose value decodes — a value schema refuses the others for the decoding's sake, which is
compared under the decoding — and the decoding gets every record.  The policy's own topics
get the whole export and every record.

Tansu checks raw payloads only; for a policy whose values are Confluent-framed (the demo
``orders``) the proof cannot run, and the round trip says why instead of pretending.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kqlab.export.base import DECODE_KEY, DECODE_VALUE, NOT_EXPRESSIBLE
from kqlab.export.roundtrip import CONTROL, RoundTrip, SampleView, compare, compare_whole

__all__ = ["roundtrip_tansu"]

_UNDECODABLE = "value not JSON: refused by the value schema, compared under the decoding"
_TOMBSTONE = "no value: refused by the value schema, compared under the decoding"
_NO_KEY = "no key: key presence is key_required's to judge"


def _judged(view: SampleView, rule: Any) -> tuple[np.ndarray, dict[str, int]]:
    """The records a rule's own topic is given, and why the others are not."""
    from kqlab.validate.rules import DECODE_KINDS

    keep = ~view.control
    excluded = {CONTROL: int(view.control.sum())}
    value_side = rule.spec.param("target") is None or rule.param("target") != "key"
    if rule.id == DECODE_VALUE or (rule.kind in DECODE_KINDS and value_side):
        pass
    elif rule.kind == "value_required":
        bad = keep & ~view.value_null & ~view.decodes
        excluded[_UNDECODABLE] = int(bad.sum())
        keep = keep & ~bad
    else:
        tomb, bad = keep & view.value_null, keep & ~view.value_null & ~view.decodes
        excluded[_TOMBSTONE], excluded[_UNDECODABLE] = int(tomb.sum()), int(bad.sum())
        keep = keep & view.decodes
        if rule.id == DECODE_KEY:
            nokey = keep & view.key_null
            excluded[_NO_KEY] = int(nokey.sum())
            keep = keep & ~nokey
    return keep, {k: v for k, v in excluded.items() if v}


def _structure(doc: dict[str, Any]) -> dict[str, Any]:
    """The export's key/value structure without the value's constraints (what the key's
    decoding is checked against)."""
    props = {k: ({} if k == "value" else v) for k, v in doc.get("properties", {}).items()}
    return {"type": "object", "properties": props, "required": list(doc.get("required", []))}


def roundtrip_tansu(policy: Any, sample: Any = None, *, now: int | None = None,
                    view: SampleView | None = None, timeout: float = 30.0) -> RoundTrip:
    """Round trip (b); see the module docstring."""
    from kqlab.export.roundtrip import replayer_of
    from kqlab.export.tansu import build

    started = time.perf_counter()
    view = view or SampleView(policy, replayer_of(sample, now))
    rt = RoundTrip(target="tansu", ran=True, records=view.n)
    if policy.value.wire == "confluent" or policy.value.format not in ("json",):
        rt.ran = False
        rt.reason = (
            f"Tansu validates raw payloads only — JSON text, Avro object-container files, raw "
            f"protobuf — and rejects every value in the Confluent wire format "
            f"(test-broker.md §2, verified there). This policy's values are "
            f"{policy.value.format} with wire {policy.value.wire!r}: produced unchanged, all "
            f"{view.n} records would be refused whatever the rules say; re-encoded "
            "as object-container files they would no longer be the sample; and an .avsc "
            "cannot express field rules anyway. Only policies with raw JSON values can be "
            "round-tripped through Tansu.")
        return rt
    ex = build(policy)
    rows = [f for f in ex.fidelity if f.status != NOT_EXPRESSIBLE and f.mode == "reject"]
    compared = [f.rule for f in rows if not f.implicit]
    rt.rules = compared
    full = ex.data["schema"]
    per_row: list[tuple[str, dict[str, Any], np.ndarray, dict[str, int]]] = []
    for f in rows:
        rule = view.rule(f.rule)
        if f.rule == DECODE_KEY:
            doc = _structure(full)
        elif f.rule == DECODE_VALUE:
            doc = build(policy.with_rules([])).data["schema"]
        else:
            doc = build(policy.with_rules([rule])).data["schema"]
        keep, excluded = _judged(view, rule)
        per_row.append((f.rule, doc, keep, excluded))
    refused_by, errors = _produce(view, full, per_row, timeout)
    whole = refused_by["<whole>"]
    judged = ~view.control
    rt.excluded = {CONTROL: int(view.control.sum())} if view.control.any() else {}
    other = errors.pop("<whole>", {})
    rt.other_errors = other
    rt.by_rule = {"INVALID_RECORD (87)": int((whole & judged).sum())}
    expected = np.zeros(view.n, dtype=bool)
    for f in rows:  # the implicit decoding too: a value schema refuses what is not JSON
        expected |= view.replay_failed(f.rule)
    tomb = view.value_null & judged
    if tomb.any():
        expected |= tomb
        rt.notes.append(f"{int(tomb.sum())} tombstone(s) expected refused: a value schema makes "
                        "the value mandatory")
    compare_whole(rt, view, whole, expected, judged)
    for rid, _, keep, excluded in per_row:
        rt.checks[rid] = compare(view, rid, refused_by[rid], keep, excluded=excluded,
                                 errors=errors.get(rid, {}))
    rt.notes.append("produced into the embedded Tansu broker started with the exported schema "
                    "files, one record per batch; each rule also on a topic of its own")
    rt.notes.append("not compared (not expressible): " + (", ".join(
        f.rule for f in ex.fidelity if f.rule not in rt.checks) or "none"))
    rt.seconds = time.perf_counter() - started
    return rt


def _produce(view: SampleView, full: dict[str, Any],
             per_row: list[tuple[str, dict[str, Any], np.ndarray, dict[str, int]]],
             timeout: float) -> tuple[dict[str, np.ndarray], dict[str, dict[str, int]]]:
    """Produce the sample to the policy's topics (the whole export) and each rule's records
    to its own topic; ``(refused per slot, other delivery errors per slot)``."""
    from confluent_kafka import KafkaError, Producer

    from kqlab.embedded import TansuBroker

    n = view.n
    cols = {c: view.records.column(c).to_pylist() for c in
            ("topic", "partition", "key", "value", "headers", "timestamp")}
    refused = {"<whole>": np.zeros(n, dtype=bool)}
    refused.update({rid: np.zeros(n, dtype=bool) for rid, *_ in per_row})
    errors: dict[str, dict[str, int]] = {}
    pending = [0]
    with tempfile.TemporaryDirectory(prefix="kqlab-tansu-roundtrip-") as tmp:
        schema_dir = Path(tmp) / "schemas"
        schema_dir.mkdir()
        topics = sorted(set(cols["topic"]))
        for t in topics:
            (schema_dir / f"{t}.json").write_text(json.dumps(full), encoding="utf-8")
        row_topics = {}
        for k, (rid, doc, _, _) in enumerate(per_row):
            row_topics[rid] = f"kqlab-roundtrip-{k}"
            (schema_dir / f"{row_topics[rid]}.json").write_text(json.dumps(doc),
                                                                encoding="utf-8")
        with TansuBroker(schema_dir=schema_dir) as broker:
            for t in topics:
                parts = max(p for tt, p in zip(cols["topic"], cols["partition"], strict=True)
                            if tt == t) + 1
                broker.create_topic(t, partitions=parts)
            for t in row_topics.values():
                broker.create_topic(t)
            # one record per batch: Tansu's verdict is per batch, so this makes it per record
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                                 "batch.num.messages": 1, "enable.idempotence": False,
                                 "retries": 0, "message.timeout.ms": int(timeout * 1000),
                                 "logger": _quiet()})

            def report(err: Any, slot: str, i: int) -> None:
                pending[0] -= 1
                if err is None:
                    return
                if err.code() == KafkaError.INVALID_RECORD:
                    refused[slot][i] = True
                else:
                    e = errors.setdefault(slot, {})
                    e[err.name()] = e.get(err.name(), 0) + 1

            def send(producer: Any, topic: str, partition: int, slot: str, i: int) -> None:
                kwargs: dict[str, Any] = {
                    "key": cols["key"][i], "value": cols["value"][i], "partition": partition,
                    "timestamp": cols["timestamp"][i],
                    "headers": [(h["key"], h["value"]) for h in cols["headers"][i]],
                    "on_delivery": lambda e, _m, s=slot, i=i: report(e, s, i)}
                pending[0] += 1
                while True:
                    try:
                        producer.produce(topic, **kwargs)
                        return
                    except BufferError:
                        producer.poll(0.05)

            for i in np.flatnonzero(~view.control).tolist():
                send(producer, cols["topic"][i], cols["partition"][i], "<whole>", i)
            for rid, _, keep, _ in per_row:
                for i in np.flatnonzero(keep).tolist():
                    send(producer, row_topics[rid], 0, rid, i)
            producer.flush(timeout)
            del producer
    if pending[0]:
        errors.setdefault("<whole>", {})["no delivery report"] = pending[0]
    return refused, errors


def _quiet() -> Any:
    import logging

    logger = logging.getLogger("kqlab.export.librdkafka")
    if not logger.handlers:
        logger.propagate = False
        logger.addHandler(logging.NullHandler())
    return logger
