"""Round trip (c): the kqlab validating gate, run on the sample.

Two runs:

* **every rule on its own, by the gate's judge** (:class:`kqlab.gate.Judge`, the object that
  decides each record's fate inside a running gate): for each rule a judge of a policy holding
  that rule alone (in ``reject`` mode, so an observe rule's verdicts show) judges every
  sampled record, each alone in its batch as the gate sees records; the records it refuses
  for the rule are compared with the replay's failures of the rule.  Records the judge refused
  first for something else (a broker check such as the compacted topic's key requirement, or
  the value's decoding for a rule reading fields) are excluded from that rule's comparison and
  counted; the decoding is compared on its own row.
* **the exported gate, end to end**: ``gate.yaml`` and the policy file beside it are written to
  a folder and loaded as ``kqlab gate --config`` loads them (path relative to the config,
  content hash checked); the sample is produced into the embedded Apache Kafka broker (source
  topics with the policy's topic settings, each record alone in its batch; what the broker
  refuses at produce counts as refused there), a real
  :class:`kqlab.gate.Gate` forwards and dead-letters it, and the dead-letter topic is compared
  with the replay of the sample with every record alone in its batch (``framing="single"``) —
  which records, and under which rule.
"""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from kqlab.export.base import DECODE_KEY, DECODE_VALUE, SCHEMA_ID, ExportError
from kqlab.export.roundtrip import CONTROL, RoundTrip, SampleView, compare, compare_whole

__all__ = ["roundtrip_gate"]

_BROKER = "refused first by a broker check ({rule}) in the gate"
_UNDECODED = "value does not decode: refused first by the decoding, compared there"
_PAYLOAD = "value framed with a known id but its payload does not decode"
#: a quick group join: Apache Kafka refuses a session.timeout.ms below its
#: group.min.session.timeout.ms (6000 by default) with INVALID_SESSION_TIMEOUT, so use the
#: smallest it takes (the embedded broker's initial rebalance delay is 0)
_FAST_GROUP = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}
#: the rule a record refused by the broker when it was produced is counted under
_AT_PRODUCE = "broker (at produce): "


def _same_broker_refusal(dead: str | None, expected: str | None) -> bool:
    """The broker refused the record at produce and the replay's first failure is a broker
    check: the same refusal (the produce error names the error code, not the check)."""
    return bool(dead and expected and dead.startswith(_AT_PRODUCE)
                and expected.startswith("broker:"))


def _as_consumed(records: Any) -> Any:
    """The sample as the gate's consumer hands it over: each record its own batch."""
    import pyarrow as pa

    offsets = records.column("offset")
    i = records.schema.get_field_index("batch_offset")
    records = records.set_column(i, "batch_offset", offsets)
    j = records.schema.get_field_index("batch_index")
    return records.set_column(j, "batch_index",
                              pa.repeat(pa.scalar(0, pa.int32()), records.num_rows))


def _attribution(judge: Any, table: Any, now: int) -> list[str | None]:
    """Per record, the rule the judge dead-letters it under (None: forwarded)."""
    verdict = judge(table, now)
    out: list[str | None] = [None] * table.num_rows
    for k, i in enumerate(np.flatnonzero(verdict.dead).tolist()):
        out[i] = verdict.rules[k]
    return out


def roundtrip_gate(policy: Any, sample: Any = None, *, now: int | None = None,
                   view: SampleView | None = None, end_to_end: bool = True,
                   timeout: float = 60.0) -> RoundTrip:
    """Round trip (c); see the module docstring.  ``end_to_end=False`` runs only the judge
    (no broker, no gate process)."""
    from kqlab.export.gate import build
    from kqlab.export.roundtrip import replayer_of
    from kqlab.gate import Judge

    started = time.perf_counter()
    view = view or SampleView(policy, replayer_of(sample, now))
    rt = RoundTrip(target="gate", ran=True, records=view.n, serializer="kqlab.gate.Judge")
    try:
        ex = build(policy)
    except ExportError as exc:
        rt.ran, rt.reason = False, f"the gate config could not be exported: {exc}"
        return rt
    table = _as_consumed(view.records)
    bare = _attribution(Judge(policy.with_rules([]), now=view.now), table, view.now)
    for f in ex.fidelity:
        rule = view.rule(f.rule)
        if f.rule in (DECODE_VALUE, DECODE_KEY, SCHEMA_ID):
            rule_of, target_id = bare, (DECODE_KEY if f.rule == DECODE_KEY else DECODE_VALUE)
        else:
            judge = Judge(policy.with_rules([replace(rule, mode="reject")]), now=view.now)
            try:
                rule_of, target_id = _attribution(judge, table, view.now), f.rule
            except Exception as exc:
                if rule.exportable:
                    raise
                rt.unchecked[f.rule] = f"the plugin cannot run here: {exc}"
                continue
        keep = ~view.control
        masks: dict[str, np.ndarray] = {CONTROL: view.control.copy()}
        decoding = f.rule in view.decode_rule_ids() or f.rule in (DECODE_VALUE, SCHEMA_ID)
        for i, r in enumerate(rule_of):
            if r is None or not keep[i] or r == target_id:
                continue
            if r.startswith("broker:"):
                why = _BROKER.format(rule=r)
            elif r == DECODE_VALUE and not decoding:
                why = _UNDECODED
            else:
                continue
            keep[i] = False
            masks[why] = masks.get(why, np.zeros(view.n, dtype=bool))
            masks[why][i] = True
        if f.rule == SCHEMA_ID:
            payload = np.array([s == "payload" for s in view.datums.stages], dtype=bool) & keep
            masks[_PAYLOAD] = payload
            keep &= ~payload
        refused = np.array([r == target_id for r in rule_of], dtype=bool)
        excluded = {k: int(v.sum()) for k, v in masks.items() if v.any()}
        rt.checks[f.rule] = compare(view, f.rule, refused, keep, excluded=excluded)
    rt.rules = [f.rule for f in ex.fidelity if not f.implicit and f.mode == "reject"]
    rt.notes.append("each rule judged alone by kqlab.gate.Judge (the gate's own verdict "
                    "object), every record alone in its batch")
    if end_to_end:
        _end_to_end(rt, view, ex, timeout)
    else:
        rt.notes.append("the exported gate itself was not run (end_to_end=False)")
    rt.seconds = time.perf_counter() - started
    return rt


def _end_to_end(rt: RoundTrip, view: SampleView, ex: Any, timeout: float) -> None:
    """Run the exported gate on the embedded broker (module docstring) and fill ``rt``'s
    whole-export comparison."""
    from kqlab.gate import (
        H_OFFSET,
        H_PARTITION,
        H_RULE,
        H_TOPIC,
        Gate,
        GateSettings,
        load_gate_file,
    )
    from kqlab.policy import dump_policy, load_policy

    with tempfile.TemporaryDirectory(prefix="kqlab-gate-roundtrip-") as tmp:
        for rel, text in ex.files.items():
            path = Path(tmp) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        gf = load_gate_file(Path(tmp) / "gate" / "gate.yaml")
        if not gf.policy_path.exists():  # not embedded (credentials): the policy itself
            gf.policy_path.write_text(dump_policy(view.policy), encoding="utf-8")
        running = load_policy(str(gf.policy_path))
        if running.content_hash() != gf.content_hash:
            rt.ran = False
            rt.reason = ("the exported gate config pins another content hash than its policy "
                         "file's: the gate would refuse to start")
            return
        expected_rule = _replay_single(view, running)
        with _broker() as broker:
            dead, produced = _run_gate(broker, view, gf, running, timeout, Gate, GateSettings,
                                       (H_TOPIC, H_PARTITION, H_OFFSET, H_RULE))
    judged = ~view.control
    rt.excluded = {CONTROL: int(view.control.sum())} if view.control.any() else {}
    refused = np.array([d is not None for d in dead], dtype=bool)
    expected = np.array([e is not None for e in expected_rule], dtype=bool)
    missing = judged & ~produced
    if missing.any():
        rt.other_errors["not seen by the gate within the timeout"] = int(missing.sum())
    compare_whole(rt, view, refused, expected, judged)
    for d in dead:
        if d is not None:
            rt.by_rule[d] = rt.by_rule.get(d, 0) + 1
    for e, j in zip(expected_rule, judged.tolist(), strict=True):
        if e is not None and j:
            rt.expected_by_rule[e] = rt.expected_by_rule.get(e, 0) + 1
    other = [i for i in np.flatnonzero(refused & expected & judged).tolist()
             if dead[i] != expected_rule[i] and not _same_broker_refusal(dead[i],
                                                                         expected_rule[i])]
    if other:
        ex_i = other[0]
        rt.other_errors[f"dead-lettered under another rule than the replay's first failure "
                        f"(e.g. {view.coords[ex_i]}: {dead[ex_i]} vs {expected_rule[ex_i]})"
                        ] = len(other)
        rt.attribution_differs = len(other)
    rt.notes.append(f"the exported {Path('gate') / 'gate.yaml'} and its policy file run by a "
                    "kqlab gate on the embedded broker; the dead-letter topic compared with the "
                    "replay, every record alone in its batch")


def _replay_single(view: SampleView, policy: Any) -> list[str | None]:
    """Per record, the replay's first failing rule with every record alone in its batch
    (None: accepted; transaction markers: None, never produced)."""
    from kqlab.validate.replayer import Replayer

    keep = np.flatnonzero(~view.control)
    out: list[str | None] = [None] * view.n
    if not len(keep):
        return out
    import pyarrow as pa

    table = view.records.take(pa.array(keep))
    verdicts = Replayer(table, framing="single", now=view.now,
                        resolver=view.replayer.resolver).run(policy)
    for i, row in zip(keep.tolist(), verdicts.records.to_pylist(), strict=True):
        if row["outcome"] != "accepted":
            out[i] = next((f["rule"] for f in row["failures"] if f["code"] != 0), None)
    return out


def _broker() -> Any:
    from kqlab.embedded import broker

    return broker()


def _run_gate(broker: Any, view: SampleView, gf: Any, policy: Any, timeout: float,
              gate_cls: Any, settings_cls: Any, names: tuple[str, str, str, str]
              ) -> tuple[list[str | None], np.ndarray]:
    """Produce the sample, run the gate until it has seen every record, read the dead-letter
    topics: per sample record, the rule it was dead-lettered under (None: forwarded), and
    whether the gate saw it."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    h_topic, h_part, h_off, h_rule = names
    cols = {c: view.records.column(c).to_pylist() for c in
            ("topic", "partition", "key", "value", "headers", "timestamp")}
    topics = sorted({cols["topic"][i] for i in np.flatnonzero(~view.control).tolist()})
    routes = [r for r in gf.routes if r.source in topics]
    parts = {t: max(p for tt, p in zip(cols["topic"], cols["partition"], strict=True)
                    if tt == t) + 1 for t in topics}
    # the source topics get the settings the replay assumed (a real broker applies them:
    # timestamps, compaction keys, sizes); each record is produced alone in its batch, as the
    # replay it is compared with frames them, so a broker refusal is that record's alone
    topic_configs = {k: str(v).lower() if isinstance(v, bool) else str(v)
                     for k, v in policy.broker.configs.items()}
    for r in routes:
        broker.create_topic(r.source, partitions=parts[r.source], config=topic_configs)
        for t in (r.sink, r.dlq):
            broker.create_topic(t, partitions=parts[r.source])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "batch.num.messages": 1, "enable.idempotence": True,
                         "logger": _quiet()})
    where: dict[tuple[str, int, int], int] = {}
    refused_at_produce: dict[int, str] = {}
    # a real broker judges timestamps (message.timestamp.*.max.ms) against its own clock, the
    # replay against ``view.now``: every timestamp and the gate's clock move by the same
    # amount, so each record stands where it stood from the replay's ``now``
    shift = 0 if view.now is None else int(time.time() * 1000) - view.now

    def delivered(i: int) -> Any:
        def report(err: Any, msg: Any) -> None:
            if err is None:
                where[(msg.topic(), msg.partition(), msg.offset())] = i
            else:
                refused_at_produce[i] = f"{_AT_PRODUCE}{err.name()}"
        return report

    gated = {r.source for r in routes}
    n_sent = 0
    for i in np.flatnonzero(~view.control).tolist():
        if cols["topic"][i] not in gated:
            continue
        n_sent += 1
        while True:
            try:
                producer.produce(cols["topic"][i], value=cols["value"][i], key=cols["key"][i],
                                 partition=cols["partition"][i],
                                 timestamp=_shifted(cols["timestamp"][i], shift),
                                 headers=[(h["key"], h["value"]) for h in cols["headers"][i]],
                                 on_delivery=delivered(i))
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(timeout)
    del producer
    settings = settings_cls(routes=tuple(routes), bootstrap=broker.bootstrap,
                            group=f"kqlab-roundtrip-{uuid.uuid4().hex[:8]}",
                            consumer=_FAST_GROUP,
                            now=None if view.now is None else view.now + shift, log_interval=0,
                            final_log=False)
    gate = gate_cls(policy, settings)
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["metrics"] = gate.run()
        except BaseException as exc:  # reported below
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and gate.metrics.records < len(where) and \
            "error" not in out:
        time.sleep(0.05)
    gate.stop()
    thread.join(30)
    if "error" in out:
        raise out["error"]
    dead: list[str | None] = [None] * view.n
    seen = np.zeros(view.n, dtype=bool)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kqlab-reader",
                         "enable.auto.commit": False, "logger": _quiet()})
    try:
        assignment = [TopicPartition(r.dlq, p, 0) for r in routes
                      for p in range(parts[r.source])]
        consumer.assign(assignment)
        want = gate.metrics.dead_lettered
        got = 0
        idle = time.monotonic()
        while got < want and time.monotonic() - idle < 5:
            msgs = [m for m in consumer.consume(10_000, 0.2) if m.error() is None]
            if msgs:
                idle = time.monotonic()
            for m in msgs:
                h: dict[str, bytes] = {}
                for pair in m.headers() or ():
                    name, raw = pair[0], pair[1]
                    h[str(name)] = raw if isinstance(raw, bytes) else str(raw or "").encode()
                key = (h[h_topic].decode(), int(h[h_part]), int(h[h_off]))
                if key in where:
                    dead[where[key]] = h[h_rule].decode()
                got += 1
    finally:
        consumer.close()
    if gate.metrics.records >= len(where):
        for i in where.values():
            seen[i] = True
    for i, why in refused_at_produce.items():  # the broker refused it: the gate never saw it
        dead[i], seen[i] = why, True
    return dead, seen


def _shifted(timestamp: int | None, shift: int) -> int:
    """``timestamp`` moved by ``shift`` ms (0: none, the producer stamps it itself)."""
    return 0 if timestamp is None or timestamp < 0 else timestamp + shift


def _quiet() -> Any:
    import logging

    logger = logging.getLogger("kqlab.export.librdkafka")
    if not logger.handlers:
        logger.propagate = False
        logger.addHandler(logging.NullHandler())
    return logger
