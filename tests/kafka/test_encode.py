"""The vectorised batch encoder (``kqlab.kafka.encode``) and the framing built on it.

The encoder must write, byte for byte, what ``BatchBuilder`` writes record by record; its
batches table must be what decoding those bytes gives; an independent decoder (kafka-python)
must read the batches back; and ``reconstruct_framing`` must give exactly what the per-record
implementation it replaced gave (kept below as the reference).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch

import kqlab.kafka.encode as encode_mod
import kqlab.validate.framing as framing_mod
from kqlab.kafka.batch import TableBuilder, decode_batches
from kqlab.kafka.builder import BatchBuilder, Record
from kqlab.kafka.encode import encode_batches
from kqlab.kafka.varint import to_int64
from kqlab.records import BATCHES_SCHEMA, HEADER_TYPE, RECORDS_SCHEMA
from kqlab.validate.framing import reconstruct_framing
from kqlab.validate.sample import ReplayError, Sample

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
INT64 = (-(2**63), 2**63 - 1)
NOW = 1_700_000_000_000


# -- the reference: the per-record implementation reconstruct_framing had before ----------------

def _reference_framing(records: pa.Table, strategy: str, *, linger_ms: int = 5,
                       batch_size: int = 16384) -> Sample:
    n = records.num_rows
    topic = records.column("topic").to_pylist()
    part = records.column("partition").to_pylist()
    ts = records.column("timestamp").to_pylist()
    keys = records.column("key").to_pylist()
    values = records.column("value").to_pylist()
    headers = records.column("headers").to_pylist()
    offsets = records.column("offset").to_pylist()
    groups: list[list[int]] = []
    open_batch: dict[tuple[str, int], tuple[int, int]] = {}
    for i in range(n):
        rec_size = 20 + len(keys[i] or b"") + len(values[i] or b"") + sum(
            len(h["key"]) + len(h["value"] or b"") for h in headers[i])
        tp = (topic[i], part[i])
        cur = open_batch.get(tp)
        if strategy == "linger" and cur is not None and \
                ts[i] - ts[groups[cur[0]][0]] <= linger_ms and cur[1] + rec_size <= batch_size:
            groups[cur[0]].append(i)
            open_batch[tp] = (cur[0], cur[1] + rec_size)
        else:
            groups.append([i])
            open_batch[tp] = (len(groups) - 1, 61 + rec_size)
    raw = []
    batch_offset = np.empty(n, dtype=np.int64)
    batch_index = np.empty(n, dtype=np.int32)
    builder = TableBuilder(framing=f"reconstructed:{strategy}")
    for g in groups:
        b = BatchBuilder(base_timestamp=ts[g[0]])
        for i in g:
            b.append(Record(key=keys[i], value=values[i], timestamp=ts[i],
                            headers=tuple((h["key"], h["value"]) for h in headers[i])))
        data = b.build()
        raw.append(data)
        builder.topic, builder.partition = topic[g[0]], part[g[0]]
        builder.add(None, data)
        for k, i in enumerate(g):
            batch_offset[i] = offsets[g[0]]
            batch_index[i] = k
    _, batches = builder.take()
    batches = batches.set_column(batches.schema.get_field_index("batch_offset"), "batch_offset",
                                 pa.array([offsets[g[0]] for g in groups], pa.int64()))
    out = records.set_column(records.schema.get_field_index("batch_offset"), "batch_offset",
                             pa.array(batch_offset, pa.int64()))
    out = out.set_column(out.schema.get_field_index("batch_index"), "batch_index",
                         pa.array(batch_index, pa.int32()))
    order = np.fromiter((i for g in groups for i in g), dtype=np.int64, count=n)
    if n and (np.diff(order) < 0).any():
        out = out.take(pa.array(order))
    return Sample(out, batches, raw, f"reconstructed:{strategy}", "producer")


def _builder_bytes(rows: list[dict], starts: list[int]) -> list[bytes]:
    out = []
    for a, e in zip(starts, [*starts[1:], len(rows)], strict=True):
        b = BatchBuilder(base_timestamp=rows[a]["timestamp"])
        for r in rows[a:e]:
            b.append(Record(key=r["key"], value=r["value"], timestamp=r["timestamp"],
                            headers=tuple((h["key"], h["value"]) for h in r["headers"])))
        out.append(b.build())
    return out


# -- strategies ---------------------------------------------------------------------------------

_utf8 = st.characters(codec="utf-8")
header_keys = st.one_of(st.sampled_from(["", "a", "a", "trace-id", "ключ", "🔑", "a\x00b"]),
                        st.text(alphabet=_utf8, max_size=10))
opt_bytes = st.one_of(st.none(), st.just(b""), st.binary(max_size=40))
payloads = st.one_of(opt_bytes, st.binary(max_size=300),
                     st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8),
                               st.integers(1, 2500)))  # up to 20 KB: 3-byte length varints
header_lists = st.lists(st.tuples(header_keys, st.one_of(st.none(), st.just(b""),
                                                         st.binary(max_size=20))), max_size=4)


@st.composite
def records_tables(draw: st.DrawFn, max_rows: int = 24) -> pa.Table:
    n = draw(st.integers(1, max_rows))
    base = draw(st.one_of(st.just(NOW), st.integers(-(2**41), 2**45), st.integers(*INT64)))
    near = st.builds(lambda d: min(max(base + d, INT64[0]), INT64[1]),
                     st.one_of(st.integers(0, 12), st.integers(-5, 40),
                               st.integers(-(2**40), 2**40)))
    stamps = st.one_of(near, near, near, st.integers(*INT64),
                       st.sampled_from([INT64[0], INT64[1], -1, 0]))
    topics = st.sampled_from(["orders", "orders", "clicks", "ték"]) | st.none()
    partitions = st.integers(0, 2) | st.sampled_from([None, -1, 2**31 - 1])
    rows = [{
        "topic": draw(topics), "partition": draw(partitions),
        "offset": draw(st.integers(0, 50) | st.integers(*INT64)),
        "timestamp": draw(stamps), "timestamp_type": draw(st.sampled_from([0, 1, -1])),
        "key": draw(opt_bytes), "value": draw(payloads),
        "headers": [{"key": k, "value": v} for k, v in draw(header_lists)],
        "batch_offset": 0, "batch_index": 0,
    } for _ in range(n)]
    table = pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA)
    # the same rows as several chunks and a slice: the encoder must not assume one buffer
    if draw(st.booleans()) and n > 1:
        cut = draw(st.integers(1, n - 1))
        pad = pa.Table.from_pylist(rows[:1], schema=RECORDS_SCHEMA)
        table = pa.concat_tables([pad, table.slice(0, cut), table.slice(cut)]).slice(1)
    return table


@st.composite
def tables_and_starts(draw: st.DrawFn) -> tuple[pa.Table, list[int]]:
    table = draw(records_tables())
    n = table.num_rows
    cuts = draw(st.sets(st.integers(1, max(n - 1, 1)), max_size=n)) if n > 1 else set()
    return table, sorted({0} | {c for c in cuts if c < n})


# -- the encoder --------------------------------------------------------------------------------

@SETTINGS
@given(tables_and_starts())
def test_bytes_are_batchbuilders_and_decode_back(case: tuple[pa.Table, list[int]]) -> None:
    table, starts = case
    rows = table.to_pylist()
    enc = encode_batches(table, starts, framing="test")
    raw = enc.raw()
    assert raw == _builder_bytes(rows, starts)
    assert enc.bounds.tolist() == np.cumsum([0] + [len(r) for r in raw]).tolist()
    assert enc.batches.schema == BATCHES_SCHEMA
    ends = [*starts[1:], len(rows)]
    for i, (a, e) in enumerate(zip(starts, ends, strict=True)):
        # kqlab's decoder: the same records, and the batch row the encoder computed
        d = decode_batches([raw[i]], topic=rows[a]["topic"], partition=rows[a]["partition"])
        assert d.issues == []
        got = d.records.select(["offset", "timestamp", "key", "value", "headers",
                                "batch_index"]).to_pylist()
        assert got == [{"offset": k, "timestamp": r["timestamp"], "key": r["key"],
                        "value": r["value"], "headers": r["headers"], "batch_index": k}
                       for k, r in enumerate(rows[a:e])]
        expected = d.batches.to_pylist()[0]
        expected.update(batch_offset=rows[a]["offset"], framing="test")
        assert enc.batches.slice(i, 1).to_pylist()[0] == expected
        # an independent decoder (kafka-python) accepts the batch and reads the same records
        ref = KpBatch(raw[i])
        assert ref.validate_crc() is True
        assert (ref.base_offset, ref.magic, ref.compression_type, ref.timestamp_type,
                ref.producer_id, ref.last_offset_delta) == (0, 2, 0, 0, -1, e - a - 1)
        assert ref.first_timestamp == rows[a]["timestamp"]
        assert ref.max_timestamp == max(r["timestamp"] for r in rows[a:e])
        # (kafka-python adds the delta in Python ints; Java, and kqlab, wrap to 64 bits)
        assert [(x.offset, to_int64(x.timestamp), x.key, x.value, [tuple(h) for h in x.headers])
                for x in KpBatch(raw[i])] == [
            (k, r["timestamp"], r["key"], r["value"],
             [(h["key"], h["value"]) for h in r["headers"]]) for k, r in enumerate(rows[a:e])]


@SETTINGS
@given(tables_and_starts())
def test_decoded_table_fallback_agrees(case: tuple[pa.Table, list[int]]) -> None:
    """A column added to BATCHES_SCHEMA the encoder does not know falls back to decoding the
    bytes: that slow table and the computed one are the same."""
    table, starts = case
    s = np.asarray(starts, dtype=np.int64)
    enc = encode_batches(table, starts, framing="f")
    assert encode_mod._decoded_table(table, s, "f", enc).equals(enc.batches)


def test_encoder_computes_every_batches_column() -> None:
    """When this fails, BATCHES_SCHEMA grew a column: teach ``_batches_table`` its value for a
    well-formed rebuilt batch (until then the encoder decodes its own bytes: correct, slow)."""
    table = pa.Table.from_pylist([{"topic": "t", "partition": 0, "offset": 7, "timestamp": NOW,
                                   "timestamp_type": 0, "key": None, "value": b"v",
                                   "headers": [], "batch_offset": 0, "batch_index": 0}],
                                 schema=RECORDS_SCHEMA)
    one = np.ones(1, np.int64)
    got = encode_mod._batches_table(table, np.zeros(1, np.int64), "x", one, one * 9,
                                    one * NOW, one * NOW, np.zeros(1, np.uint32))
    assert got is not None, [f.name for f in BATCHES_SCHEMA]


def test_fallback_is_used_when_a_column_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    table = pa.Table.from_pylist([
        {"topic": "t", "partition": p, "offset": o, "timestamp": NOW + o, "timestamp_type": 0,
         "key": b"k", "value": None, "headers": [{"key": "h", "value": None}],
         "batch_offset": 0, "batch_index": 0} for p, o in [(0, 5), (0, 6), (1, 9)]],
        schema=RECORDS_SCHEMA)
    direct = encode_batches(table, [0, 2], framing="x")
    monkeypatch.setattr(encode_mod, "_batches_table", lambda *a: None)
    slow = encode_batches(table, [0, 2], framing="x")
    assert slow.batches.equals(direct.batches)
    assert slow.raw() == direct.raw()
    assert direct.batches.column("batch_offset").to_pylist() == [5, 9]
    assert direct.batches.column("partition").to_pylist() == [0, 1]


def test_varint_widths_at_their_boundaries() -> None:
    """Lengths and deltas at every varint byte-count boundary (1 ... 10 bytes)."""
    sizes = [0, 63, 64, 8191, 8192, 1048575, 1048576]
    deltas = [0, -1, 63, -64, 64, -65, 2**20, -(2**20), 2**34, -(2**34), 2**55, 2**62,
              INT64[1] - 5, -(2**62)]
    rows = [{"topic": "t", "partition": 0, "offset": i, "timestamp": d, "timestamp_type": 0,
             "key": b"k" * sizes[i % len(sizes)] if i % 3 else None,
             "value": b"v" * sizes[(i + 3) % len(sizes)],
             "headers": [{"key": "h" * sizes[i % 4], "value": b"x" * sizes[(i + 1) % 5]}],
             "batch_offset": 0, "batch_index": 0} for i, d in enumerate(deltas)]
    table = pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA)
    for starts in ([0], list(range(len(rows))), [0, 1, 5]):
        assert encode_batches(table, starts).raw() == _builder_bytes(rows, starts)


def test_null_slot_with_bytes_behind_it_is_null() -> None:
    """Arrow allows a null binary slot to span bytes; it still encodes as length -1."""
    data = pa.py_buffer(b"abcdef")
    offsets = pa.py_buffer(np.array([0, 2, 4, 6], np.int32).tobytes())
    validity = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little").tobytes())
    values = pa.Array.from_buffers(pa.binary(), 3, [validity, offsets, data])
    assert values.to_pylist() == [b"ab", None, b"ef"]
    table = pa.table({"topic": ["t"] * 3, "partition": pa.array([0] * 3, pa.int32()),
                      "offset": pa.array([0, 1, 2], pa.int64()),
                      "timestamp": pa.array([NOW] * 3, pa.int64()),
                      "timestamp_type": pa.array([0] * 3, pa.int8()), "key": values,
                      "value": values, "headers": pa.array([[]] * 3, HEADER_TYPE),
                      "batch_offset": pa.array([0] * 3, pa.int64()),
                      "batch_index": pa.array([0] * 3, pa.int32())}, schema=RECORDS_SCHEMA)
    assert encode_batches(table, [0]).raw() == _builder_bytes(table.to_pylist(), [0])


def test_what_batchbuilder_cannot_encode_is_refused() -> None:
    def one(**over: object) -> pa.Table:
        row = {"topic": "t", "partition": 0, "offset": 0, "timestamp": NOW,
               "timestamp_type": 0, "key": None, "value": b"v", "headers": [],
               "batch_offset": 0, "batch_index": 0, **over}
        return pa.Table.from_pylist([row], schema=RECORDS_SCHEMA)

    with pytest.raises(ValueError, match="timestamp"):
        encode_batches(one(timestamp=None), [0])
    with pytest.raises(ValueError, match="null key"):
        encode_batches(one(headers=[{"key": None, "value": b"x"}]), [0])
    with pytest.raises(ValueError, match="null header"):
        encode_batches(one(headers=[None]), [0])
    for bad in ([], [1], [0, 0], [0, 1]):
        with pytest.raises(ValueError, match="batch starts"):
            encode_batches(one(), bad)
    with pytest.raises(ReplayError, match="timestamp"):
        reconstruct_framing(one(timestamp=None), "single")
    with pytest.raises(ReplayError, match="null key"):
        reconstruct_framing(one(headers=[{"key": None, "value": b"x"}]), "linger")


def test_null_header_list_is_no_headers() -> None:
    table = pa.Table.from_pylist([{"topic": "t", "partition": 0, "offset": 0, "timestamp": NOW,
                                   "timestamp_type": 0, "key": None, "value": b"v",
                                   "headers": None, "batch_offset": 0, "batch_index": 0}],
                                 schema=RECORDS_SCHEMA)
    empty = table.set_column(7, "headers", pa.array([[]], HEADER_TYPE))
    assert encode_batches(table, [0]).raw() == encode_batches(empty, [0]).raw()


def test_empty_table() -> None:
    enc = encode_batches(RECORDS_SCHEMA.empty_table(), [])
    assert enc.raw() == [] and enc.batches.num_rows == 0
    assert enc.batches.schema == BATCHES_SCHEMA
    for strategy in ("single", "linger"):
        got = reconstruct_framing(RECORDS_SCHEMA.empty_table(), strategy)
        ref = _reference_framing(RECORDS_SCHEMA.empty_table(), strategy)
        assert got.records.equals(ref.records) and got.batches.equals(ref.batches)
        assert got.raw == ref.raw == []


# -- reconstruct_framing against the per-record reference ----------------------------------------

lingers = st.one_of(st.integers(-3, 12), st.just(5), st.just(0),
                    st.integers(-(2**70), 2**70), st.sampled_from([INT64[1], INT64[0], 2**64]))
batch_sizes = st.one_of(st.integers(0, 600), st.just(16384), st.integers(-100, 2**70))


def _assert_same(got: Sample, ref: Sample) -> None:
    assert got.framing == ref.framing and got.source == ref.source
    assert got.raw == ref.raw
    assert got.batches.schema == ref.batches.schema
    for name in ref.batches.column_names:
        assert got.batches.column(name).equals(ref.batches.column(name)), name
    assert got.records.schema == ref.records.schema
    assert got.records.equals(ref.records)


@SETTINGS
@given(records_tables(), st.sampled_from(["single", "linger", "linger"]), lingers, batch_sizes,
       st.sampled_from([1 << 16, 1, 3]))
def test_reconstruct_framing_is_the_reference(table: pa.Table, strategy: str, linger_ms: int,
                                              batch_size: int, chunk: int) -> None:
    ref = _reference_framing(table, strategy, linger_ms=linger_ms, batch_size=batch_size)
    old_chunk = framing_mod._CHUNK
    framing_mod._CHUNK = chunk  # the timestamp search in small pieces finds the same batches
    try:
        got = reconstruct_framing(table, strategy, linger_ms=linger_ms, batch_size=batch_size)
    finally:
        framing_mod._CHUNK = old_chunk
    _assert_same(got, ref)


@pytest.mark.parametrize(("linger_ms", "batch_size"), [(5, 16384), (0, 16384), (40, 900),
                                                        (10**6, 10**9), (-1, 16384)])
def test_reconstruct_framing_on_a_larger_interleaved_sample(linger_ms: int,
                                                            batch_size: int) -> None:
    """A few thousand records over several partitions: long batches, long chains."""
    rng = np.random.default_rng(7)
    n = 3000
    table = pa.table({
        "topic": pa.array(rng.choice(["a", "b"], n)),
        "partition": pa.array(rng.integers(0, 3, n), pa.int32()),
        "offset": pa.array(np.arange(n), pa.int64()),
        "timestamp": pa.array(NOW + np.cumsum(rng.integers(-2, 4, n)), pa.int64()),
        "timestamp_type": pa.array(np.zeros(n), pa.int8()),
        "key": pa.array([None if i % 7 == 0 else b"k%d" % i for i in range(n)], pa.binary()),
        "value": pa.array([bytes(int(v)) for v in rng.integers(0, 120, n)], pa.binary()),
        "headers": pa.array([[{"key": "é" * (i % 3), "value": None if i % 2 else b"x"}]
                             * (i % 3) for i in range(n)], HEADER_TYPE),
        "batch_offset": pa.array(np.zeros(n), pa.int64()),
        "batch_index": pa.array(np.zeros(n), pa.int32()),
    }, schema=RECORDS_SCHEMA)
    for strategy in ("single", "linger"):
        _assert_same(reconstruct_framing(table, strategy, linger_ms=linger_ms,
                                         batch_size=batch_size),
                     _reference_framing(table, strategy, linger_ms=linger_ms,
                                        batch_size=batch_size))
