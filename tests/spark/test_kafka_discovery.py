"""``format("kqlab-kafka")`` follows the cluster as Spark's connector does, on a real Apache Kafka
broker: ``subscribePattern`` selects the topics whose names the pattern is found in (never an
internal one); a stream on ``subscribe``/``subscribePattern`` picks up, at every trigger, a
topic that comes to match and reads it from its earliest offset, whatever
``startingOffsets`` said, each record once; a topic-partition that disappears fails the
query with ``failOnDataLoss=true`` and is dropped with ``false``.

Partitions added to a subscribed topic (CreatePartitions) take the same path as a new
matching topic (:meth:`current_partitions`): read from their earliest offset.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from kqlab.sources.fetch import ClusterTopics
from kqlab.spark.kafka_source import (
    KafkaSourceOptionError,
    KafkaStreamReader,
    PartitionsGoneError,
    SourceOptions,
    arrow_to_contract,
    matching_topics,
)
from tests.spark.kafka_helpers import kafka, reader

__all__ = ["kafka"]  # the module-scoped broker fixture


def _values(n: int, tag: str, partitions: int) -> list[dict]:
    return [{"key": b"%s-%d" % (tag.encode(), i), "value": b"%s-%d" % (tag.encode(), i),
             "partition": i % partitions} for i in range(n)]


def _rows(table: pa.Table) -> list[tuple[str, int, int, bytes]]:
    """(topic, partition, offset, value) of each record, in offset order."""
    t = arrow_to_contract(table)
    out = list(zip(t.column("topic").to_pylist(), t.column("partition").to_pylist(),
                   t.column("offset").to_pylist(), t.column("value").to_pylist(), strict=True))
    return sorted(out)


def _delete(broker, topic: str) -> None:
    broker.admin().delete_topics([topic], operation_timeout=10)[topic].result(10)


# -- options ----------------------------------------------------------------------------
@pytest.mark.parametrize(("options", "match"), [
    ({}, r"exactly one of subscribe .* got none"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, r"got assign and subscribe"),
    ({"subscribe": "a", "subscribePattern": "a.*"}, r"got subscribe and subscribePattern"),
    ({"SubscribePattern": "a.*", "assign": '{"a": [0]}'},
     r"got assign and subscribePattern"),
    ({"subscribePattern": "orders-(["}, r"subscribePattern 'orders-\(\[' is not a valid "
                                        r"regular expression"),
    ({"subscribePattern": " "}, r"subscribePattern is empty"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, r"failOnDataLoss must be true or false"),
])
def test_one_way_to_name_the_topics_and_a_valid_pattern(options, match):
    with pytest.raises(KafkaSourceOptionError, match=match):
        SourceOptions.parse({"kafka.bootstrap.servers": "b:1", **options})


def test_the_pattern_and_data_loss_options_parse():
    opts = SourceOptions.parse({"kafka.bootstrap.servers": "b:1",
                                "subscribepattern": "orders-.*", "FAILONDATALOSS": "False"})
    assert (opts.strategy, opts.pattern, opts.topics) == ("subscribePattern", "orders-.*", {})
    assert opts.discovers and not opts.fail_on_data_loss
    fixed = SourceOptions.parse({"kafka.bootstrap.servers": "b:1", "assign": '{"a": [1]}'})
    assert not fixed.discovers and fixed.fail_on_data_loss


def test_the_pattern_is_searched_and_internal_topics_never_match():
    cluster = ClusterTopics({"orders-a": (0, 1), "old-orders-x": (0,), "orders": (0,),
                             "__consumer_offsets": tuple(range(50)), "__orders-x": (0,),
                             "orders-new": None},
                            frozenset({"__consumer_offsets"}))
    # Spark's findFirstIn: found anywhere in the name; anchors name whole topics
    assert matching_topics("orders-.*", cluster) == ["__orders-x", "old-orders-x", "orders-a"]
    assert matching_topics("^orders-.*$", cluster) == ["orders-a"]
    assert matching_topics("^orders$", cluster) == ["orders"]
    # a topic the broker flags internal is left out even when the pattern names it
    assert matching_topics("__consumer_offsets", cluster) == []
    assert matching_topics(".*", cluster) == ["__orders-x", "old-orders-x", "orders",
                                              "orders-a"]


# -- batch --------------------------------------------------------------------------------
def test_a_batch_read_on_a_pattern_equals_subscribe_to_the_matching_topics(spark, kafka):
    for t, n in (("sales-eu", 2), ("sales-us", 1), ("old-sales-x", 1), ("clicks-b", 1)):
        kafka.create_topic(t, partitions=n)
        kafka.produce(t, _values(7 * n, t, n))
    want = _rows(reader(spark, kafka.bootstrap,
                        subscribe="sales-eu,sales-us,old-sales-x").toArrow())
    got = _rows(reader(spark, kafka.bootstrap, subscribePattern="sales-.*").toArrow())
    assert got == want
    assert {t for t, *_ in got} == {"sales-eu", "sales-us", "old-sales-x"}
    assert len(got) == 14 + 7 + 7
    anchored = _rows(reader(spark, kafka.bootstrap, subscribePattern="^sales-").toArrow())
    assert anchored == [r for r in want if r[0] != "old-sales-x"]
    assert reader(spark, kafka.bootstrap, subscribePattern="^nothing$").count() == 0


# -- streaming ----------------------------------------------------------------------------
class _Collect:
    """A running stream's micro-batches (``foreachBatch``), driven by
    ``processAllAvailable`` (no sleeps: it returns once a trigger finds nothing new)."""

    def __init__(self, spark, bootstrap: str, checkpoint: str, **options: str) -> None:
        self.got: list[tuple[int, pa.Table]] = []
        sdf = reader(spark, bootstrap, stream=True, **options)
        self.query = (sdf.writeStream.foreachBatch(lambda df, i: self.got.append(
            (i, df.toArrow()))).option("checkpointLocation", checkpoint)
                      .trigger(processingTime="0 seconds").start())

    def settle(self) -> list[tuple[str, int, int, bytes]]:
        self.query.processAllAvailable()
        rows = [r for _, t in self.got for r in _rows(t)]
        return rows

    def end_offsets(self) -> dict:
        return json.loads(self.query.lastProgress.sources[0].endOffset)


def test_a_topic_that_comes_to_match_is_read_from_its_start_once(spark, kafka, tmp_path):
    """``orders-.*`` from ``latest`` on ``orders-a``; ``orders-b`` created mid-query is
    read whole, from offset 0, each record once; ``clicks`` never; then ``orders-b``
    deleted with ``failOnDataLoss=false``: the query drops it and reads on."""
    kafka.create_topic("orders-a", partitions=2)
    kafka.create_topic("clicks", partitions=1)
    kafka.produce("orders-a", _values(10, "before", 2))  # before the start: not read
    run = _Collect(spark, kafka.bootstrap, str(tmp_path / "ck"), subscribePattern="orders-.*",
                   startingOffsets="latest", failOnDataLoss="false")
    try:
        assert run.settle() == []
        kafka.produce("orders-a", _values(6, "a", 2))
        kafka.produce("clicks", _values(5, "c", 1))
        kafka.create_topic("orders-b", partitions=3)
        kafka.produce("orders-b", _values(30, "b", 3))
        rows = run.settle()
        want_a = sorted(("orders-a", i % 2, 5 + i // 2, b"a-%d" % i) for i in range(6))
        want_b = sorted(("orders-b", i % 3, i // 3, b"b-%d" % i) for i in range(30))
        assert rows == sorted(want_a + want_b)  # each once; orders-b from 0 despite latest
        assert run.end_offsets() == {"orders-a": {"0": 8, "1": 8},
                                     "orders-b": {"0": 10, "1": 10, "2": 10}}
        # orders-b deleted: dropped (failOnDataLoss=false), orders-a read on
        _delete(kafka, "orders-b")
        kafka.produce("orders-a", _values(2, "after", 2))
        rows = run.settle()
        assert sorted(r for r in rows if r[3].startswith(b"after")) == [
            ("orders-a", 0, 8, b"after-0"), ("orders-a", 1, 8, b"after-1")]
        assert len(rows) == len(set(rows)) == 6 + 30 + 2
        assert run.query.isActive
        assert run.end_offsets() == {"orders-a": {"0": 9, "1": 9}}
    finally:
        run.query.stop()


def test_a_deleted_topic_fails_the_query_by_default(spark, kafka, tmp_path):
    kafka.create_topic("gone-a", partitions=2)
    kafka.produce("gone-a", _values(4, "g", 2))
    run = _Collect(spark, kafka.bootstrap, str(tmp_path / "ck"), subscribePattern="^gone-")
    try:
        assert len(run.settle()) == 4
        _delete(kafka, "gone-a")
        with pytest.raises(Exception, match=r"gone-a\[0\], gone-a\[1\] of this stream are "
                                            r"gone .*failOnDataLoss=false"):
            run.query.processAllAvailable()
        assert not run.query.isActive
    finally:
        run.query.stop()


def test_the_reader_adds_and_drops_partitions_at_each_trigger(kafka):
    """The driver half alone (no Spark): ``subscribe`` too drops or refuses a deleted topic;
    a partition new to the offsets starts at its earliest offset in ``partitions``."""
    kafka.create_topic("sub-a", partitions=2)
    kafka.create_topic("sub-b", partitions=1)
    kafka.produce("sub-a", _values(6, "s", 2))
    kafka.produce("sub-b", _values(3, "t", 1))
    base = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": "sub-a,sub-b"}
    strict = KafkaStreamReader(SourceOptions.parse(base))
    lenient = KafkaStreamReader(SourceOptions.parse({**base, "failOnDataLoss": "false"}))
    try:
        start = strict.initialOffset()
        assert start == {"sub-a": {"0": 0, "1": 0}, "sub-b": {"0": 0}}
        # a partition the start lacks (as a discovered one): added, read from offset 0
        end = strict.latestOffset({"sub-a": {"0": 1}}, None)
        assert end == {"sub-a": {"0": 3, "1": 3}, "sub-b": {"0": 3}}
        parts = strict.partitions({"sub-a": {"0": 1}}, end)
        assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [
            ("sub-a", 0, 1, 3), ("sub-a", 1, 0, 3), ("sub-b", 0, 0, 3)]
        _delete(kafka, "sub-b")
        with pytest.raises(PartitionsGoneError, match=r"sub-b\[0\] of this stream are gone"):
            strict.latestOffset(end, None)
        assert lenient.latestOffset(end, None) == {"sub-a": {"0": 3, "1": 3}}
    finally:
        strict.stop()
        lenient.stop()


def test_partitions_added_to_a_subscribed_topic_are_read_from_their_start(kafka):
    """CreatePartitions (Apache Kafka has it; Tansu did not): a partition added to a
    subscribed topic joins at the next trigger and is read from its earliest offset."""
    from confluent_kafka.admin import NewPartitions

    kafka.create_topic("grow-a", partitions=1)
    kafka.produce("grow-a", _values(3, "g", 1))
    r = KafkaStreamReader(SourceOptions.parse({"kafka.bootstrap.servers": kafka.bootstrap,
                                               "subscribe": "grow-a"}))
    try:
        start = r.initialOffset()
        assert start == {"grow-a": {"0": 0}}
        end = r.latestOffset(start, None)
        assert end == {"grow-a": {"0": 3}}
        kafka.admin().create_partitions([NewPartitions("grow-a", 3)])["grow-a"].result(10)
        kafka.produce("grow-a", [{"key": b"n", "value": b"n%d" % p, "partition": p}
                                 for p in (1, 2, 2)])
        grown = r.latestOffset(end, None)
        assert grown == {"grow-a": {"0": 3, "1": 1, "2": 2}}
        parts = r.partitions(end, grown)
        assert [(p.topic, p.partition, p.start, p.end) for p in parts
                if p.end > p.start] == [("grow-a", 1, 0, 1), ("grow-a", 2, 0, 2)]
    finally:
        r.stop()
