"""``format("kqlab-kafka")`` on a real Tansu broker and a real local SparkSession: a batch read
equals the single-process sampler's exact-framing read (records and batches), however the
ranges are split into input partitions; offset and time windows mean what they mean to the
sampler; a stream's micro-batches hold every record and batch once, its offsets are
checkpointed and it resumes from them; the reader commits nothing to the cluster.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kqlab.sources.kafka import sample
from kqlab.spark.kafka_source import (
    KafkaSourceOptionError,
    SourceOptions,
    arrow_to_contract,
)
from tests.spark.kafka_helpers import NOW, kafka, produce_varied, reader

__all__ = ["kafka"]  # the module-scoped broker fixture

TOPIC, PARTS, N = "src", 4, 3000


@pytest.fixture(scope="module")
def topic(kafka):
    produce_varied(kafka, TOPIC, N, PARTS)
    kafka.create_topic("other", partitions=1)
    kafka.produce("other", [{"value": b"o%d" % i, "partition": 0} for i in range(50)])
    return kafka.bootstrap


def _records(df) -> pa.Table:
    return arrow_to_contract(df.toArrow())


def _batches(df) -> pa.Table:
    return arrow_to_contract(df.toArrow(), "batches")


def _same_batches(got: pa.Table, want: pa.Table) -> None:
    """Equal batch tables but for ``position`` (the byte offset in the Fetch response that
    carried the batch: it depends on where a range was cut into requests)."""
    assert got.drop_columns(["position"]).equals(want.drop_columns(["position"]))


@pytest.mark.parametrize("split", [None, 101, 500])
def test_batch_read_equals_the_sampler_exactly(spark, topic, split):
    want = sample(topic, TOPIC, exact_framing=True)
    opts = {"subscribe": TOPIC} | ({"maxOffsetsPerSplit": split} if split else {})
    df = reader(spark, topic, **opts)
    if split:
        assert df.rdd.getNumPartitions() > PARTS  # ranges cut mid-batch
    records = _records(df)
    assert records.num_rows == N
    assert records.equals(want.records)
    batches = _batches(reader(spark, topic, rows="batches", **opts))
    assert batches.num_rows > 4 * PARTS  # many batches per partition
    assert pc.all(pc.equal(batches.column("framing"), "exact")).as_py()
    assert pc.any(pc.greater(batches.column("producer_id"), -1)).as_py()
    _same_batches(batches, want.batches)


def test_offset_ranges_cut_inside_batches(spark, topic):
    start, end = {0: 5, 1: 0, 2: 333, 3: 700}, {0: 600, 1: 1, 2: 334, 3: 750}
    want = sample(topic, TOPIC, start_offset=start, end_offset=end, exact_framing=True)
    spec = {"startingOffsets": json.dumps({TOPIC: {str(p): o for p, o in start.items()}}),
            "endingOffsets": json.dumps({TOPIC: {str(p): o for p, o in end.items()}}),
            "maxOffsetsPerSplit": 64}
    assert _records(reader(spark, topic, subscribe=TOPIC, **spec)).equals(want.records)
    _same_batches(_batches(reader(spark, topic, subscribe=TOPIC, rows="batches", **spec)),
                  want.batches)
    # a batch that starts before the range is kept whole (the sampler's rule)
    assert pc.min(want.batches.column("batch_offset")).as_py() < 5


def test_earliest_latest_and_assign(spark, topic):
    latest = reader(spark, topic, subscribe=TOPIC, startingOffsets="latest")
    assert latest.count() == 0
    df = reader(spark, topic, assign=json.dumps({TOPIC: [1, 3]}),
                endingOffsets=json.dumps({TOPIC: {"1": -1, "3": 10}}))
    want = sample(topic, TOPIC, partitions=[1, 3], end_offset={3: 10}, exact_framing=True)
    assert _records(df).equals(want.records)
    two = reader(spark, topic, subscribe=f"{TOPIC},other")
    counts = {r["topic"]: r["count"] for r in two.groupBy("topic").count().collect()}
    assert counts == {TOPIC: N, "other": 50}


def test_time_window_equals_the_sampler(spark, topic):
    lo, hi = NOW - 3_600_000 + 500_000, NOW - 3_600_000 + 1_500_000
    want = sample(topic, TOPIC, start_time_ms=lo, end_time_ms=hi, exact_framing=True)
    df = reader(spark, topic, subscribe=TOPIC, startingTimestamp=lo, endingTimestamp=hi)
    got = _records(df)
    assert got.num_rows == 1000 and got.equals(want.records)
    _same_batches(_batches(reader(spark, topic, subscribe=TOPIC, rows="batches",
                                  startingTimestamp=lo, endingTimestamp=hi)), want.batches)


def test_raw_rows_hold_each_batch_once_with_its_bytes(spark, topic):
    from kqlab.kafka.batch import decode_batches

    raw = arrow_to_contract(reader(spark, topic, subscribe=TOPIC, rows="raw").toArrow(), "raw")
    data = raw.filter(pc.is_valid(raw.column("data")))
    markers = raw.filter(pc.is_null(raw.column("data")))
    assert markers.num_rows == PARTS  # one per range (raw rows are never split)
    want = sample(topic, TOPIC, exact_framing=True)
    assert data.num_rows == want.batches.num_rows
    for p in range(PARTS):
        mine = data.filter(pc.equal(data.column("partition"), p))
        d = decode_batches(mine.column("data").to_pylist(), topic=TOPIC, partition=p)
        assert d.records.equals(want.records.filter(
            pc.equal(want.records.column("partition"), p)))


def _collect_stream(spark, bootstrap, checkpoint, rows="records", **options):
    """Run a stream to its end offsets; every micro-batch's rows and offsets."""
    got: list[tuple[int, pa.Table]] = []

    def each(df, batch_id):
        got.append((batch_id, df.toArrow()))

    sdf = reader(spark, bootstrap, stream=True, subscribe=TOPIC, rows=rows, **options)
    q = (sdf.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
         .trigger(processingTime="0 seconds").start())
    try:
        q.processAllAvailable()
        progress = [json.loads(p.sources[0].endOffset) for p in q.recentProgress
                    if p.numInputRows]
    finally:
        q.stop()
    return got, progress


def test_stream_holds_every_record_and_batch_once(spark, topic, tmp_path):
    want = sample(topic, TOPIC, exact_framing=True)
    ending = json.dumps({TOPIC: {str(p): N // PARTS for p in range(PARTS)}})
    got, progress = _collect_stream(spark, topic, str(tmp_path / "r"),
                                    maxOffsetsPerTrigger=333, endingOffsets=ending)
    assert len(got) >= N // 333
    records = pa.concat_tables([arrow_to_contract(t) for _, t in got])
    order = pc.sort_indices(records, [("partition", "ascending"), ("offset", "ascending")])
    assert records.take(order).equals(want.records)
    # offsets: JSON per topic and partition, ending at the end offsets
    assert progress[-1] == {TOPIC: {str(p): N // PARTS for p in range(PARTS)}}
    got_b, _ = _collect_stream(spark, topic, str(tmp_path / "b"), rows="batches",
                               maxOffsetsPerTrigger=333, endingOffsets=ending)
    batches = pa.concat_tables([arrow_to_contract(t, "batches") for _, t in got_b])
    order = pc.sort_indices(batches, [("partition", "ascending"),
                                      ("batch_offset", "ascending")])
    _same_batches(batches.take(order), want.batches)


def test_stream_resumes_from_its_checkpoint(spark, topic, tmp_path):
    ck = str(tmp_path / "ck")
    first = json.dumps({TOPIC: {str(p): 200 for p in range(PARTS)}})
    got1, _ = _collect_stream(spark, topic, ck, maxOffsetsPerTrigger=300, endingOffsets=first)
    # the same checkpoint, a further end: only the records after the checkpointed offsets
    second = json.dumps({TOPIC: {str(p): 400 for p in range(PARTS)}})
    got2, _ = _collect_stream(spark, topic, ck, maxOffsetsPerTrigger=300,
                              endingOffsets=second)
    assert got2[0][0] == got1[-1][0] + 1  # batch ids continue
    one = pa.concat_tables([arrow_to_contract(t) for _, t in got1])
    two = pa.concat_tables([arrow_to_contract(t) for _, t in got2])
    assert one.num_rows == 200 * PARTS and two.num_rows == 200 * PARTS
    assert pc.max(one.column("offset")).as_py() == 199
    assert pc.min(two.column("offset")).as_py() == 200


def test_the_reader_commits_nothing(spark, topic, kafka):
    reader(spark, topic, subscribe=TOPIC).count()
    groups = kafka.admin().list_consumer_groups(request_timeout=10).result()
    from confluent_kafka import ConsumerGroupTopicPartitions

    for g in groups.valid:
        res = kafka.admin().list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(g.group_id)])
        for fut in res.values():
            committed = [tp for tp in fut.result().topic_partitions
                         if tp.topic == TOPIC and tp.offset >= 0]
            assert not committed, (g.group_id, committed)


@pytest.mark.parametrize(("options", "match"), [
    ({"subscribe": "t"}, "kafka.bootstrap.servers is required"),
    ({"kafka.bootstrap.servers": "b:1"}, "exactly one of subscribe"),
    ({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingoffset": "x"},
     "unknown option"),
    ({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "rows": "bytes"},
     "rows must be one of"),
    ({"kafka.bootstrap.servers": "b:1", "assign": "[1]"}, "assign must be JSON"),
    ({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingOffsets": "{nope"},
     "not valid JSON"),
    ({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "maxOffsetsPerTrigger": "0"},
     "at least 1"),
    ({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingTimestamp": "5",
      "endingOffsets": "latest"}, "cannot be combined"),
])
def test_bad_options_say_what_is_wrong(options, match):
    with pytest.raises(KafkaSourceOptionError, match=match):
        SourceOptions.parse(options)


def test_client_config_passes_through():
    opts = SourceOptions.parse({"kafka.bootstrap.servers": "b:1",
                                "kafka.security.protocol": "SASL_SSL", "subscribe": "a, b",
                                "startingOffsets": '{"a": {"0": 5, "1": -2}}'})
    assert opts.config == {"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL"}
    assert list(opts.topics) == ["a", "b"]
    assert opts.starting == {"a": {0: 5, 1: -2}}
