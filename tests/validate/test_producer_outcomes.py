"""Producer outcomes observed (issue 27 item 4): what confluent-kafka (librdkafka) does with each
error the real broker can be made to return, against kqlab's ``producer_action``.

Every case makes the session's Kafka broker refuse one batch of several records (one partition,
``linger.ms`` long enough that they share a batch) and observes per record the delivery error
(code, ``retriable()``, ``fatal()``, ``txn_requires_abort()``), the resends counted in the
statistics (``txretries``), and whether a record produced afterwards by the same producer still
goes through.  The table and how it was measured: docs/producer-outcomes.md.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kqlab.validate.verdicts import client_outcomes, lost_delayed_text, producer_action

DAY_MS = 86_400_000
#: the Java producer's side of the table: one JVM, every case (tests/validate/java)
JAVA_HARNESS = Path(__file__).parent / "java" / "ProducerOutcomes.java"
#: librdkafka's own code for the good records of a batch with several culprits
INVALID_DIFFERENT_RECORD = -138

_LOG = logging.getLogger("kqlab.tests.producer_outcomes")
_LOG.addHandler(logging.NullHandler())
_LOG.propagate = False


@dataclass
class Observed:
    """One producer's view of a refused batch and of the record it sends afterwards."""

    errors: list[Any] = field(default_factory=list)  # KafkaError or None, per record
    retries: int = 0  # resends counted by librdkafka (sum of the brokers' txretries)
    after: Any = "not sent"  # the following record: None (delivered) or its KafkaError

    @property
    def codes(self) -> list[int | None]:
        return [None if e is None else e.code() for e in self.errors]

    def flags(self, name: str) -> set[bool]:
        return {getattr(e, name)() for e in self.errors if e is not None}


def _producer(broker: Any, conf: Mapping[str, Any], stats: list[dict[str, Any]]) -> Any:
    from confluent_kafka import Producer

    base: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap, "linger.ms": 200, "batch.num.messages": 100,
        "message.timeout.ms": 3000, "statistics.interval.ms": 100, "logger": _LOG,
        "stats_cb": lambda s: stats.append(json.loads(s))}
    return Producer({**base, **conf})


def _send(producer: Any, topic: str, records: Sequence[Mapping[str, Any]], *,
          warm: bool = True) -> list[Any]:
    """Produce ``records`` (one batch), flush, and return each one's delivery error.

    ``warm``: look the topic up first, so the partition's leader is known and linger.ms counts
    from the first record (records queued while the metadata is fetched may leave in two
    batches when the lookup outlasts linger.ms: seen once under load)."""
    if warm:
        producer.list_topics(topic, timeout=5)
    errors: list[Any] = ["no report"] * len(records)
    for i, rec in enumerate(records):
        def report(err: Any, _msg: Any, i: int = i) -> None:
            errors[i] = err
        producer.produce(topic, on_delivery=report, **rec)
    assert producer.flush(10) == 0
    return errors


def _retries(producer: Any, stats: list[dict[str, Any]]) -> int:
    producer.poll(0.25)  # one more statistics interval after the last request
    assert stats, "no statistics reported"
    return sum(b.get("txretries", 0) for b in stats[-1]["brokers"].values())


def observe(broker: Any, topic: str, records: Sequence[Mapping[str, Any]],
            conf: Mapping[str, Any] | None = None,
            after: Mapping[str, Any] | None = None, warm: bool = True) -> Observed:
    """Send ``records`` as one batch with a plain or idempotent producer, then ``after``."""
    stats: list[dict[str, Any]] = []
    p = _producer(broker, conf or {}, stats)
    obs = Observed(errors=_send(p, topic, records, warm=warm))
    if after is not None:
        obs.after = _send(p, topic, [after])[0]
    obs.retries = _retries(p, stats)
    return obs


def _old(value: bytes, now: int, key: bytes | None = None) -> dict[str, Any]:
    return {"key": key, "value": value, "timestamp": now - DAY_MS}


def _fresh(value: bytes, key: bytes | None = None) -> dict[str, Any]:
    return {"key": key, "value": value}


def assert_kqlab_agrees(obs: Observed, code: int) -> None:
    """kqlab's librdkafka action for ``code`` says what happened to the whole batch."""
    action = producer_action(code, len(obs.errors), client="librdkafka")
    if action == "failed":
        assert all(e is not None for e in obs.errors) and obs.retries == 0
    else:  # pragma: no cover - no reachable case is retried (docs/producer-outcomes.md)
        raise AssertionError(f"unexpected action {action} for {code}")


MODES = {"plain": {}, "idempotent": {"enable.idempotence": True}}


# -- the broker's refusals, plain and idempotent producers ------------------------------------
@pytest.mark.parametrize("mode", list(MODES))
def test_invalid_timestamp_fails_the_whole_batch(kafka_broker, topic_name, mode) -> None:
    kafka_broker.create_topic(topic_name, config={"message.timestamp.before.max.ms": "60000"})
    now = int(time.time() * 1000)
    obs = observe(kafka_broker, topic_name, [_fresh(b"a"), _old(b"b", now), _fresh(b"c")],
                  MODES[mode], after=_fresh(b"after"))
    # one culprit: every record of the batch gets the partition's code, culprit or not
    assert obs.codes == [32, 32, 32]
    assert obs.flags("retriable") == obs.flags("fatal") == {False}
    assert obs.flags("txn_requires_abort") == {False}
    assert obs.after is None  # not fatal, also not for the idempotent producer (epoch bumped)
    assert_kqlab_agrees(obs, 32)


def test_two_culprits_get_their_own_code(kafka_broker, topic_name) -> None:
    """With more than one record error librdkafka tells culprits (INVALID_RECORD) from the
    others (_INVALID_DIFFERENT_RECORD): all fail.  Kafka 4.x's default
    message.timestamp.after.max.ms (1 h) refuses the record two hours ahead."""
    kafka_broker.create_topic(topic_name, config={"message.timestamp.before.max.ms": "60000"})
    now = int(time.time() * 1000)
    ahead = {"value": b"d", "timestamp": now + 2 * 3_600_000}
    obs = observe(kafka_broker, topic_name,
                  [_fresh(b"a"), _old(b"b", now), _fresh(b"c"), ahead])
    assert obs.codes == [INVALID_DIFFERENT_RECORD, 87, INVALID_DIFFERENT_RECORD, 87]
    assert obs.flags("retriable") == {False}
    assert_kqlab_agrees(obs, 32)


@pytest.mark.parametrize("mode", list(MODES))
def test_message_too_large_is_not_split(kafka_broker, topic_name, mode) -> None:
    """The Java producer splits a MESSAGE_TOO_LARGE batch of several records; librdkafka
    fails every record, each small enough to pass alone (kqlab's Java column says split)."""
    kafka_broker.create_topic(topic_name, config={"max.message.bytes": "2000"})
    obs = observe(kafka_broker, topic_name, [_fresh(b"x" * 600) for _ in range(5)],
                  MODES[mode], after=_fresh(b"y" * 600))
    assert obs.codes == [10] * 5 and obs.flags("retriable") == obs.flags("fatal") == {False}
    assert obs.after is None  # a record that fits alone goes through
    assert producer_action(10, 5) == "split"  # the Java client (spec §6)
    assert_kqlab_agrees(obs, 10)


def test_record_list_too_large(kafka_broker, topic_name) -> None:
    """A batch over the topic's segment.bytes (1 MiB, its minimum) but under max.message.bytes:
    RECORD_LIST_TOO_LARGE for the batch, the small record beside the big one included."""
    kafka_broker.create_topic(topic_name, config={"max.message.bytes": "3000000",
                                                  "segment.bytes": "1048576"})
    obs = observe(kafka_broker, topic_name, [_fresh(b"x" * 1_200_000), _fresh(b"s")],
                  {"message.max.bytes": 4_000_000, "batch.size": 4_000_000},
                  after=_fresh(b"after"))
    assert obs.codes == [18, 18] and obs.flags("retriable") == {False}
    assert obs.after is None
    assert_kqlab_agrees(obs, 18)


@pytest.mark.parametrize("mode", list(MODES))
def test_null_key_on_a_compacted_topic(kafka_broker, topic_name, mode) -> None:
    kafka_broker.create_topic(topic_name, config={"cleanup.policy": "compact"})
    obs = observe(kafka_broker, topic_name,
                  [_fresh(b"a", b"k1"), _fresh(b"no key"), _fresh(b"c", b"k2")],
                  MODES[mode], after=_fresh(b"after", b"k3"))
    assert obs.codes == [87, 87, 87]
    assert obs.flags("retriable") == obs.flags("fatal") == {False}
    assert obs.after is None
    assert_kqlab_agrees(obs, 87)


def test_unknown_topic_fails_after_the_metadata_wait(kafka_broker, topic_name) -> None:
    """Without auto-creation the topic never appears: the record is never sent and fails with
    UNKNOWN_TOPIC_OR_PARTITION once topic.metadata.propagation.max.ms has passed (retriable
    for both clients: delayed, then lost as the cause persists)."""
    start = time.monotonic()
    obs = observe(kafka_broker, topic_name, [_fresh(b"a")],
                  {"allow.auto.create.topics": False, "topic.metadata.propagation.max.ms": 500},
                  warm=False)
    assert obs.codes == [3] and obs.retries == 0
    assert time.monotonic() - start >= 0.5
    assert producer_action(3, 1, client="librdkafka") == "retried"


# -- transactional producer -----------------------------------------------------------------
def _txn(producer: Any, topic: str, records: Sequence[Mapping[str, Any]]) -> tuple[list[Any], Any]:
    """One transaction: the records' delivery errors and commit's KafkaError (None: committed;
    an abortable failure is aborted)."""
    producer.begin_transaction()
    errors = _send(producer, topic, records)
    try:
        producer.commit_transaction(10)
    except Exception as exc:
        err = exc.args[0]
        if err.txn_requires_abort():
            producer.abort_transaction(10)
        return errors, err
    return errors, None


@pytest.mark.parametrize("case", ["timestamp", "null-key"])
def test_transaction_with_a_refused_batch(kafka_broker, topic_name, case) -> None:
    """The refused records fail (not abortable themselves); commit raises an abortable error;
    after the abort librdkafka's next transaction fails too (OUT_OF_ORDER_SEQUENCE_NUMBER,
    "skipped sequence numbers": the epoch is bumped only then); the one after commits."""
    config = ({"message.timestamp.before.max.ms": "60000"} if case == "timestamp"
              else {"cleanup.policy": "compact"})
    kafka_broker.create_topic(topic_name, config=config)
    now = int(time.time() * 1000)
    bad = _old(b"b", now, b"k") if case == "timestamp" else _fresh(b"no key")
    code = 32 if case == "timestamp" else 87
    stats: list[dict[str, Any]] = []
    p = _producer(kafka_broker, {"transactional.id": topic_name}, stats)
    p.init_transactions(10)
    errors, commit = _txn(p, topic_name, [_fresh(b"a", b"k"), bad, _fresh(b"c", b"k")])
    assert [e.code() for e in errors] == [code] * 3
    assert {e.txn_requires_abort() for e in errors} == {False}
    assert commit is not None and commit.code() == code
    assert commit.txn_requires_abort() and not commit.fatal() and not commit.retriable()
    _, second = _txn(p, topic_name, [_fresh(b"d", b"k")])
    assert second is not None and second.code() == 45 and second.txn_requires_abort()
    assert not second.fatal()
    errors, third = _txn(p, topic_name, [_fresh(b"e", b"k")])
    assert third is None and errors == [None]
    assert _retries(p, stats) == 0
    assert producer_action(code, 3, client="librdkafka") == "failed"


def test_fenced_transactional_producer_is_fatal(kafka_broker, topic_name) -> None:
    """A second producer with the same transactional.id fences the first: its open
    transaction's commit fails with a fatal error, the producer must be recreated."""
    kafka_broker.create_topic(topic_name)
    stats: list[dict[str, Any]] = []
    old = _producer(kafka_broker, {"transactional.id": topic_name}, stats)
    old.init_transactions(10)
    old.begin_transaction()
    assert _send(old, topic_name, [_fresh(b"a")]) == [None]
    new = _producer(kafka_broker, {"transactional.id": topic_name}, [])
    new.init_transactions(10)
    with pytest.raises(Exception) as info:  # noqa: PT011 - confluent-kafka raises KafkaException
        old.commit_transaction(10)
    err = info.value.args[0]
    assert err.fatal() and not err.txn_requires_abort()
    # librdkafka's own code for the coordinator's PRODUCER_FENCED answer
    assert err.name() == "_FENCED" and not err.retriable()


# -- the Java producer, for kqlab's default column --------------------------------------------
def _java(broker: Any, cases: Sequence[tuple[str, str, Sequence[str]]]) -> dict[str, Any]:
    """Run the Java harness (the broker's own kafka-clients jar) over ``cases`` of
    (topic, producer configs, records as size:timestamp offset:key): per topic, the records'
    outcomes ("ok" or the exception's class) and the record-retry-total metric."""
    from kqlab.embedded.kafka import java_binary, kafka_libs

    args = [java_binary(), "-Xmx256m", "-cp", f"{kafka_libs(broker.version)}/*", str(JAVA_HARNESS),
            broker.bootstrap]
    for topic, conf, records in cases:
        args += ["--case", topic, conf, *records]
    run = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    out: dict[str, Any] = {}
    for line in run.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word == "case":
            current = out.setdefault(rest, {"records": [], "retries": None})
        elif word in ("ok", "err"):
            current["records"].append("ok" if word == "ok" else rest.split(" ", 1)[0])
        elif word == "retries":
            current["retries"] = int(rest)
    return out


def test_java_producer_splits_and_names_culprits(kafka_broker, topic_name) -> None:
    """kqlab's default column is the Java client's: MESSAGE_TOO_LARGE with several records is
    split and delivered (delayed, not lost), idempotent or not; a refused batch fails every
    record, the one culprit with the code's own exception, the others with KafkaException."""
    big, big_idem, ts, ts2, cmp = (f"{topic_name}-{n}" for n in
                                   ("big", "bigidem", "ts", "ts2", "cmp"))
    for t in (big, big_idem):
        kafka_broker.create_topic(t, config={"max.message.bytes": "2000"})
    for t in (ts, ts2):
        kafka_broker.create_topic(t, config={"message.timestamp.before.max.ms": "60000"})
    kafka_broker.create_topic(cmp, config={"cleanup.policy": "compact"})
    old, ahead = f"10:{-DAY_MS}:k", "10:7200000:k"
    out = _java(kafka_broker, [
        (big, "", ["600:0:k"] * 5), (big_idem, "enable.idempotence=true", ["600:0:k"] * 5),
        (ts, "", ["10:0:k", old, "10:0:k"]), (ts2, "", ["10:0:k", old, "10:0:k", ahead]),
        (cmp, "", ["10:0:k", "10:0:-", "10:0:k"])])
    for t in (big, big_idem):
        assert out[t] == {"records": ["ok"] * 5, "retries": 0}
    assert producer_action(10, 5) == "split"
    other = "KafkaException"
    assert out[ts]["records"] == [other, "InvalidTimestampException", other]
    assert out[ts2]["records"] == [other, "InvalidRecordException", other,
                                   "InvalidRecordException"]
    assert out[cmp]["records"] == [other, "InvalidRecordException", other]
    assert {out[t]["retries"] for t in (ts, ts2, cmp)} == {0}
    assert producer_action(32, 3) == producer_action(87, 3) == "failed"


# -- kqlab's mapping ----------------------------------------------------------------------------
def test_clients_differ_only_on_split() -> None:
    codes = [0, 2, 3, 6, 10, 18, 19, 32, 43, 45, 47, 87]
    for code in codes:
        for n in (1, 3):
            java, rd = producer_action(code, n), producer_action(code, n, client="librdkafka")
            assert java == rd or (code == 10 and n > 1 and (java, rd) == ("split", "failed"))
    with pytest.raises(ValueError, match="unknown producer client 'go'"):
        producer_action(10, 3, client="go")
    counts = client_outcomes({"appended": 5, "failed": 1, "retried": 2, "split": 4})
    assert counts == {"java": {"lost": 1, "delayed": 6}, "librdkafka": {"lost": 5, "delayed": 2}}
    summary = {"records_lost": 1, "records_delayed": 6, "producer_clients": counts}
    assert lost_delayed_text(summary).endswith("never splits a batch: lost 5, delayed 2")
    same = {"records_lost": 1, "records_delayed": 2,
            "producer_clients": client_outcomes({"failed": 1, "retried": 2})}
    assert "librdkafka" not in lost_delayed_text(same)
