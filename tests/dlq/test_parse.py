"""Dead letters of each producer family, produced on the embedded Tansu broker and read back:
who dead-lettered each record, why, from where, and the original record — and records with
no or malformed failure headers shown as ``unknown reason``, never dropped.

The gate's and Confluent's dead letters are written by the real producers (a running
:class:`kqlab.gate.Gate`; confluent-kafka's ``DlqAction`` behind an ``AvroSerializer`` with a
CEL rule).  Kafka Connect and Kafka Streams cannot run here (Java), so their dead letters are
produced with the headers, values and order their source writes
(``DeadLetterQueueReporter.populateContextHeaders``: context headers appended to the consumed
record's headers, ``exception.message`` null when the exception has none;
``ExceptionHandlerUtils.buildDeadLetterQueueRecord``: a new record of the raw key/value and
the source timestamp, with only the six ``__streams.errors.*`` headers).
"""

from __future__ import annotations

import json
import tempfile

from kqlab.dlq import CONFLUENT, CONNECT, STREAMS, UNKNOWN_REASON, read_dead_letters
from kqlab.gate import Gate, GateSettings, Route
from kqlab.sources import demo_topics as dt
from tests.dlq.conftest import NOW, gate_dead_letter, read_all
from tests.gate.conftest import FAST_GROUP, gate_thread, wait_for


def _rows(dead):
    return dead.records.to_pylist()


def test_a_real_gates_dead_letters_name_the_replays_rule_and_keep_the_original(kafka):
    """The demo clicks through a running gate: every dead letter reads as family ``kqlab``,
    reason = the rule the replay (single framing) rejects its source record for, source
    coordinates = where it was in the raw topic, key/value/headers/timestamp = the raw
    record's."""
    from kqlab.validate import replay

    topic, sink, dlq = "p.clicks", "p.clicks.valid", "p.clicks.dlq"
    for t in (topic, sink, dlq):
        kafka.create_topic(t, partitions=dt.CLICKS_PARTITIONS)
    demo = dt.generate(tempfile.mkdtemp(prefix="kqlab-dlq-demo-"), NOW)
    kafka.produce(topic, list(dt.iter_records(demo, dt.CLICKS_TOPIC)),
                  config={"message.max.bytes": 1_000_000})
    raw = read_all(kafka.bootstrap, topic)
    policy = dt.load_policies()[dt.CLICKS_TOPIC]
    verdicts = replay(raw, policy, now=NOW, framing="single").records.to_pylist()
    expected = {(r["partition"], r["offset"]): next(f["rule"] for f in r["failures"]
                                                   if f["code"] != 0)
                for r in verdicts if r["outcome"] != "accepted"}
    assert len(expected) > 20
    gate = Gate(policy, GateSettings(routes=(Route(source=topic, sink=sink, dlq=dlq),),
                                     bootstrap=kafka.bootstrap, group="dlq-parse-gate",
                                     consumer=FAST_GROUP, now=NOW, log_interval=0))
    with gate_thread(gate):
        wait_for(lambda: gate.metrics.records >= raw.num_rows, 60, "the gate to drain")

    dead = read_dead_letters(kafka.bootstrap, dlq)
    assert len(dead) == len(expected)
    by_coord = {(r["partition"], r["offset"]): r for r in raw.to_pylist()}
    for r in _rows(dead):
        assert r["family"] == "kqlab" and r["problems"] == []
        key = (r["source_partition"], r["source_offset"])
        assert r["source_topic"] == topic
        assert r["reason"] == r["rule"] == expected[key], key
        src = by_coord[key]
        assert (r["key"], r["value"], r["timestamp"]) == (src["key"], src["value"],
                                                          src["timestamp"])
        assert r["headers"] == src["headers"]
        assert r["detail"] and r["message"]
    reasons = dead.by_reason().to_pylist()
    assert sum(x["records"] for x in reasons) == len(dead)
    assert {x["reason"] for x in reasons} == set(expected.values())


def test_confluents_rule_dlq_from_the_real_dlq_action(kafka):
    """confluent-kafka's ``DlqAction`` (its own registry of executors and actions) behind an
    AvroSerializer with a CEL rule: the dead letters read as family ``confluent``, reason =
    the rule name, source topic = the serialised topic, message = the rule's exception, the
    produce call's headers kept, no source partition/offset (the record never reached
    Kafka)."""
    from confluent_kafka.schema_registry import (
        Rule,
        RuleKind,
        RuleMode,
        RuleParams,
        RuleSet,
        Schema,
        SchemaRegistryClient,
    )
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.rule_registry import RuleRegistry
    from confluent_kafka.schema_registry.rules.cel.cel_executor import CelExecutor
    from confluent_kafka.schema_registry.rules.dlq.dlq_action import DlqAction
    from confluent_kafka.serialization import (
        MessageField,
        SerializationContext,
        SerializationError,
    )

    dlq = "pay.dlq"
    kafka.create_topic(dlq)
    registry = RuleRegistry()
    registry.register_executor(CelExecutor())
    action = DlqAction({"bootstrap.servers": kafka.bootstrap, "dlq.auto.flush": "true"})
    registry.register_action(action)
    sr = SchemaRegistryClient.new_client({"url": "mock://kqlab-dlq-parse"})
    schema = json.dumps({"type": "record", "name": "Pay", "fields": [
        {"name": "id", "type": "string"}, {"name": "amount", "type": "double"}]})
    rule = Rule("amount-positive", None, RuleKind.CONDITION, RuleMode.WRITE, "CEL", None,
                RuleParams({"dlq.topic": dlq}), "message.amount > 0.0", None, "DLQ", False)
    sr.register_schema("pay-value", Schema(schema, "AVRO", rule_set=RuleSet(None, [rule])))
    ser = AvroSerializer(sr, None, conf={"auto.register.schemas": False,
                                         "use.latest.version": True}, rule_registry=registry)
    refused = 0
    for i, amount in enumerate([5.0, -1.0, 2.5, -3.0]):
        ctx = SerializationContext("pay", MessageField.VALUE, [("trace", b"t%d" % i)])
        try:
            ser({"id": f"p{i}", "amount": amount}, ctx)
        except SerializationError:
            refused += 1
    action.close()
    assert refused == 2

    dead = read_dead_letters(kafka.bootstrap, dlq)
    rows = _rows(dead)
    assert len(rows) == 2
    for r, (i, amount) in zip(rows, [(1, -1.0), (3, -3.0)], strict=True):
        assert r["family"] == CONFLUENT.name == "confluent"
        assert r["reason"] == r["rule"] == "amount-positive"
        assert r["source_topic"] == "pay"
        assert r["source_partition"] is None and r["source_offset"] is None
        assert "message.amount > 0.0" in r["message"]
        assert dict(r["detail"])["__rule.mode"] == "WRITE"
        assert dict(r["detail"])["__rule.subject"] == "pay-value"
        assert r["headers"] == [{"key": "trace", "value": b"t%d" % i}]
        assert json.loads(r["value"]) == {"id": f"p{i}", "amount": amount}  # the JSON form
        assert r["problems"] == []


def test_header_names_are_confluents_own():
    from confluent_kafka.schema_registry.common import serde

    assert set(CONFLUENT.keys) == {
        serde.DLQ_RULE_NAME_HEADER, serde.DLQ_RULE_MODE_HEADER, serde.DLQ_RULE_SUBJECT_HEADER,
        serde.DLQ_RULE_TOPIC_HEADER, serde.DLQ_RULE_EXCEPTION_HEADER}
    assert CONFLUENT.prefix == serde.DLQ_HEADER_PREFIX


def _connect_letter(i: int, *, message: bytes | None = b"Converting byte[] to Kafka Connect "
                    b"data failed", topic: bytes = b"orders") -> dict:
    c = CONNECT.prefix
    return {"key": b"k%d" % i, "value": b"\x00garbage%d" % i, "timestamp": NOW + i,
            "headers": [("trace", b"t%d" % i), (c + "topic", topic),
                        (c + "partition", str(i % 3).encode()), (c + "offset", str(100 + i)
                                                                 .encode()),
                        (c + "connector.name", b"jdbc-sink"), (c + "task.id", b"0"),
                        (c + "stage", b"VALUE_CONVERTER"),
                        (c + "class.name", b"org.apache.kafka.connect.json.JsonConverter"),
                        (c + "exception.class.name",
                         b"org.apache.kafka.connect.errors.DataException"),
                        (c + "exception.message", message),
                        (c + "exception.stacktrace", b"org.apache.kafka...\n\tat x.y(Z.java:1)")]}


def test_kafka_connect_dead_letters(kafka):
    kafka.create_topic("connect.dlq")
    kafka.produce("connect.dlq", [_connect_letter(0), _connect_letter(1, message=None)])
    rows = _rows(read_dead_letters(kafka.bootstrap, "connect.dlq"))
    assert [r["family"] for r in rows] == ["connect", "connect"]
    assert [r["reason"] for r in rows] == ["connect:DataException"] * 2
    assert rows[0]["exception"] == "org.apache.kafka.connect.errors.DataException"
    assert rows[0]["message"].startswith("Converting byte[]")
    assert rows[1]["message"] is None and rows[1]["problems"] == []  # null message: allowed
    assert [(r["source_topic"], r["source_partition"], r["source_offset"]) for r in rows] == \
        [("orders", 0, 100), ("orders", 1, 101)]
    assert rows[0]["headers"] == [{"key": "trace", "value": b"t0"}]
    assert rows[0]["value"] == b"\x00garbage0" and rows[0]["timestamp"] == NOW
    assert dict(rows[0]["detail"])[CONNECT.prefix + "connector.name"] == "jdbc-sink"


def test_kafka_streams_dead_letters(kafka):
    """KIP-1034: ``exception`` is ``Throwable.toString()``; the record has no other headers;
    ``-1`` for a partition/offset Streams does not know (punctuation) reads as unknown."""
    s = STREAMS.prefix
    kafka.create_topic("streams.dlq")
    kafka.produce("streams.dlq", [
        {"key": b"k", "value": b"{not json", "timestamp": NOW,
         "headers": [(s + "exception", b"org.apache.kafka.common.errors.SerializationException"
                      b": Size of data received by IntegerDeserializer is not 4"),
                     (s + "message", b"Size of data received by IntegerDeserializer is not 4"),
                     (s + "stacktrace", b"org.apache...\n\tat a.b(C.java:9)"),
                     (s + "topic", b"clicks"), (s + "partition", b"2"),
                     (s + "offset", b"77")]},
        {"key": None, "value": b"v", "timestamp": NOW + 1,
         "headers": [(s + "exception", b"java.lang.IllegalStateException"),
                     (s + "message", None), (s + "stacktrace", b"..."),
                     (s + "topic", b"clicks"), (s + "partition", b"-1"), (s + "offset", b"-1")]},
    ])
    rows = _rows(read_dead_letters(kafka.bootstrap, "streams.dlq"))
    assert [r["reason"] for r in rows] == ["streams:SerializationException",
                                           "streams:IllegalStateException"]
    assert rows[0]["exception"] == "org.apache.kafka.common.errors.SerializationException"
    assert rows[0]["message"] == "Size of data received by IntegerDeserializer is not 4"
    assert (rows[0]["source_topic"], rows[0]["source_partition"], rows[0]["source_offset"]) == \
        ("clicks", 2, 77)
    assert (rows[1]["source_partition"], rows[1]["source_offset"]) == (None, None)
    assert rows[1]["problems"] == []
    assert [r["headers"] for r in rows] == [[], []]


def test_no_or_malformed_failure_headers_are_unknown_reasons_never_dropped(kafka):
    """Nothing, someone else's headers, a rule that is not UTF-8, a partition that is not a
    number, a family without its reason header: every record is read, with what was wrong."""
    c = CONNECT.prefix
    letters = [
        {"key": b"a", "value": b"no headers at all"},
        {"key": b"b", "value": b"v", "headers": [("kafka_dlt-exception-fqcn", b"x.Y")]},
        {"key": b"c", "value": b"v", "headers": [("kqlab.rule", b"\xff\xfe"),
                                                  ("kqlab.source.topic", b"orders")]},
        {"key": b"d", "value": b"v", "headers": [("kqlab.rule", b"r"),
                                                  ("kqlab.source.partition", b"two")]},
        {"key": b"e", "value": b"v", "headers": [(c + "topic", b"orders")]},
        {"key": None, "value": None},
    ]
    kafka.create_topic("bad.dlq")
    kafka.produce("bad.dlq", letters)
    dead = read_dead_letters(kafka.bootstrap, "bad.dlq")
    rows = _rows(dead)
    assert [r["key"] for r in rows] == [x["key"] for x in letters]  # every one, in order
    assert [r["reason"] for r in rows] == [UNKNOWN_REASON, UNKNOWN_REASON, UNKNOWN_REASON, "r",
                                           UNKNOWN_REASON, UNKNOWN_REASON]
    assert [r["family"] for r in rows] == ["none", "none", "kqlab", "kqlab", "connect", "none"]
    assert all(r["problems"] for r in rows)
    assert "kqlab.rule is not UTF-8" in rows[2]["problems"][0]
    assert rows[2]["source_topic"] == "orders"
    assert rows[3]["problems"] == ["kqlab.source.partition is not an integer: 'two'"]
    assert rows[3]["source_partition"] is None
    assert "no readable __connect.errors.exception.class.name" in rows[4]["problems"][0]
    assert rows[1]["headers"] == [{"key": "kafka_dlt-exception-fqcn", "value": b"x.Y"}]
    assert dead.unknown().num_rows == 5
    summary = dead.summary()
    assert summary["unknown_reason"]["records"] == 5 and summary["records"] == 6
    json.dumps(summary)


def test_the_outer_producer_decides_and_trailing_headers_stay_the_records(kafka):
    """A Connect DLQ fed by a gate's DLQ reads as Connect's dead letter whose original record
    still carries the gate's headers (a redrive returns it to the gate's DLQ); a header an
    interceptor appends after the failure headers does not hide them."""
    inner = gate_dead_letter(4, source="orders")
    c = CONNECT.prefix
    outer = {**inner, "headers": [*inner["headers"], (c + "topic", b"orders.dlq"),
                                  (c + "partition", b"0"), (c + "offset", b"4"),
                                  (c + "exception.class.name", b"a.b.RetriableException"),
                                  ("traceparent", b"00-abc-01")]}
    kafka.create_topic("nested.dlq")
    kafka.produce("nested.dlq", [outer])
    (r,) = _rows(read_dead_letters(kafka.bootstrap, "nested.dlq"))
    assert (r["family"], r["reason"], r["source_topic"]) == \
        ("connect", "connect:RetriableException", "orders.dlq")
    keys = [h["key"] for h in r["headers"]]
    assert keys == [k for k, _ in inner["headers"]] + ["traceparent"]
