"""Avro read field by field (numpy, :mod:`kqlab.serde.avro_columns`) equals Avro read value by
value (fastavro + ``pa.array``): the same column, the same errors word for word, the same
datums.

The value-by-value path is the definition (``decode()`` with ``BULK_AVRO`` off).  Hypothesis
draws records of a schema that uses every type the column reader supports (nested and
optional records, enums, fixed, booleans, ints at the 32-bit edges, floats with NaN, strings
with non-ASCII text, bytes), encodes them with fastavro and damages some: cut short, bytes
appended or flipped, a boolean of 2, an enum or union index out of range (fastavro reads
negative ones Python's way), a length past the end, invalid UTF-8.  Schemas outside the
subset (logical types, arrays, wider unions) and several writer schemas are checked too.
"""

from __future__ import annotations

import importlib
import math
import struct

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlab.policy.model import Format, SchemaSource
from kqlab.serde import SchemaResolver, decode_datums
from kqlab.serde.avro_columns import LazyAvroValues
from kqlab.serde.decode import decode_pass

from .conftest import avro_bytes, framed, register

decode_module = importlib.import_module("kqlab.serde.decode")
AVRO = Format(format="avro", wire="confluent")

INNER = {"type": "record", "name": "Address", "fields": [
    {"name": "street", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}
WIDE = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "ok", "type": "boolean"},
        {"name": "ratio", "type": "float"},
        {"name": "amount", "type": "double"},
        {"name": "customer", "type": "string"},
        {"name": "blob", "type": "bytes"},
        {"name": "tag", "type": {"type": "fixed", "name": "Tag", "size": 3}},
        {"name": "status", "type": {"type": "enum", "name": "Status",
                                    "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "flag", "type": ["boolean", "null"]},
        {"name": "nothing", "type": "null"},
        {"name": "address", "type": INNER},
        {"name": "billing", "type": ["null", "Address"], "default": None},
    ],
}

TEXT = st.text(max_size=8) | st.sampled_from(["", "é", "日本", "x" * 40, "a\x00b"])
RECORDS = st.fixed_dictionaries({
    "id": st.integers(-(2 ** 63), 2 ** 63 - 1) | st.sampled_from([0, -1, 2 ** 53 + 1]),
    "qty": st.integers(-(2 ** 31), 2 ** 31 - 1),
    "ok": st.booleans(),
    "ratio": st.floats(width=32, allow_nan=False) | st.sampled_from([0.0, -0.0, 1.5]),
    "amount": st.floats(allow_nan=False) | st.sampled_from([0.1, -0.0, 1e300]),
    "customer": TEXT,
    "blob": st.binary(max_size=6),
    "tag": st.binary(min_size=3, max_size=3),
    "status": st.sampled_from(["NEW", "PAID", "SHIPPED"]),
    "note": st.none() | TEXT,
    "flag": st.none() | st.booleans(),
    "nothing": st.none(),
    "address": st.fixed_dictionaries({"street": TEXT, "zip": st.none() | st.integers(
        -(2 ** 31), 2 ** 31 - 1)}),
    "billing": st.none() | st.fixed_dictionaries({"street": TEXT, "zip": st.none()}),
})


def _damage(data: bytes, how: int, at: int) -> bytes:
    if not data:
        return data
    i = at % len(data)
    return [
        data[:i],                                   # cut short
        data + bytes([at % 256]),                   # a byte too many
        data[:i] + bytes([data[i] ^ (1 << at % 8)]) + data[i + 1:],  # one bit flipped
        data[:i] + b"\x02" + data[i + 1:],          # a boolean of 2, an index of 1 ...
        data[:i] + b"\x7f" + data[i + 1:],          # a large index / length
        data[:i] + b"\x01" + data[i + 1:],          # index -1 (zig-zag)
        data[:i] + b"\xff\xff" + data[i:],          # a varint running on
        data[:i] + b"\x04\xed\xa0" + data[i:],      # invalid UTF-8 (a surrogate)
        data[:i] + struct.pack("<f", math.nan) + data[i + 4:],  # a NaN float
    ][how % 9]


def reference(values, fmt, resolver):
    decode_module.BULK_AVRO = False
    try:
        return decode_pass(values, fmt, resolver)
    finally:
        decode_module.BULK_AVRO = True


def assert_same(values, fmt, resolver, *, bulk: bool | None = None):
    want = reference(values, fmt, resolver)
    got = decode_pass(values, fmt, resolver)
    w, g = want.column, got.column
    assert g.values.type == w.values.type
    # Arrow's equals has NaN != NaN (a damaged float may read as one): compare the values
    assert _same(g.values.to_pylist(), w.values.to_pylist())
    assert g.values.is_valid().equals(w.values.is_valid())
    assert g.errors.to_pylist() == w.errors.to_pylist()
    assert g.fallback == w.fallback
    assert got.stages == want.stages
    for i in range(len(values)):  # one record at a time (lazily read), then all of them
        assert _same(g._python[i], w._python[i]), i
    assert _same(list(got.datums), list(want.datums))
    if bulk is not None:
        assert isinstance(got.datums, LazyAvroValues) is bulk
    return got


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN (a float field may hold one)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.fixture
def wide(registry):
    url, client = registry
    return register(client, "orders-value", WIDE), SchemaResolver(registry=url)


def test_clean_records_are_read_column_by_column(wide):
    sid, resolver = wide
    rec = {"id": 1, "qty": -5, "ok": True, "ratio": 0.5, "amount": 2.25, "customer": "c-é",
           "blob": b"\x00\x01", "tag": b"abc", "status": "PAID", "note": None, "flag": False,
           "nothing": None, "address": {"street": "s", "zip": 7},
           "billing": {"street": "b", "zip": None}}
    values = pa.array([framed(sid, avro_bytes(WIDE, dict(rec, id=i))) for i in range(50)]
                      + [None, b"\x01xx"])
    got = assert_same(values, AVRO, resolver, bulk=True)
    assert got.column.values.to_pylist()[3] == dict(rec, id=3)
    fresh = decode_pass(values, AVRO, resolver).column._python
    assert fresh[7]["id"] == 7 and len(fresh._known) == 1  # read when asked, one value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(RECORDS, st.integers(0, 12), st.integers(0, 2 ** 16)), max_size=25))
def test_random_records_some_damaged(wide, rows):
    sid, resolver = wide
    values = []
    for rec, how, at in rows:
        data = avro_bytes(WIDE, rec)
        if how < 9:
            data = _damage(data, how, at)
        values.append(framed(sid, data))
    assert_same(pa.array(values, pa.binary()), AVRO, resolver)


def test_hand_picked_faults(wide):
    sid, resolver = wide
    good = avro_bytes(WIDE, {"id": 1, "qty": 2, "ok": True, "ratio": 1.0, "amount": 1.0,
                             "customer": "c", "blob": b"", "tag": b"xyz", "status": "NEW",
                             "note": "n", "flag": None, "nothing": None,
                             "address": {"street": "", "zip": None}, "billing": None})
    ok_at = 10 + 1 + 1 + 4 + 8  # id (1 byte), qty, ok, ratio, amount: where ok sits is 2
    values = [good, good[:-1], good + b"\x00", b"", b"\x00", good[:2] + b"\x02" + good[3:],
              good[:ok_at] + b"\xff" * 12, good[:3] + struct.pack("<f", math.nan) + good[7:]]
    assert_same(pa.array([framed(sid, v) for v in values]), AVRO, resolver)


def test_int_outside_32_bits_does_not_fit(registry):
    url, client = registry
    schema = {"type": "record", "name": "I", "fields": [{"name": "n", "type": "int"}]}
    sid = register(client, "i", schema)
    big = avro_bytes({"type": "record", "name": "I", "fields": [{"name": "n", "type": "long"}]},
                     {"n": 2 ** 40})
    values = pa.array([framed(sid, avro_bytes(schema, {"n": 5})), framed(sid, big)])
    got = assert_same(values, AVRO, SchemaResolver(registry=url))
    assert got.column.errors.to_pylist()[1].startswith("decoded value does not fit Arrow type")


@pytest.mark.parametrize("schema", [
    {"type": "record", "name": "T", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]},
    {"type": "record", "name": "A", "fields": [{"name": "xs", "type": {
        "type": "array", "items": "int"}}]},
    {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["null", "int", "string"]}]},
    {"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]},
    "string",
])
def test_other_schemas_read_value_by_value_or_alike(registry, schema):
    url, client = registry
    sid = register(client, "o", '"string"' if schema == "string" else schema)
    datum = {"string": "s", "T": {"at": 1_763_700_000_000}, "A": {"xs": [1, 2]},
             "U": {"u": "x"}, "N": {"next": {"next": None}}}
    key = schema if isinstance(schema, str) else schema["name"]
    good = avro_bytes(schema, datum[key])
    values = pa.array([framed(sid, good), framed(sid, good[:-1]), framed(sid, good + b"\x00")])
    assert_same(values, AVRO, SchemaResolver(registry=url),
                bulk=schema == "string")


def test_several_writer_schemas(registry):
    url, client = registry
    v1 = register(client, "orders-value", WIDE)
    v2 = register(client, "orders-value", dict(WIDE, doc="the same fields, documented"))
    extra = dict(WIDE, fields=[*WIDE["fields"], {"name": "x", "type": "long", "default": 0}])
    v3 = register(client, "other-value", extra)
    rec = {"id": 1, "qty": 2, "ok": False, "ratio": 0.0, "amount": 0.0, "customer": "",
           "blob": b"", "tag": b"abc", "status": "SHIPPED", "note": None, "flag": True,
           "nothing": None, "address": {"street": "", "zip": 1}, "billing": None}
    same = pa.array([framed(v1 if i % 2 else v2, avro_bytes(WIDE, dict(rec, id=i)))
                     for i in range(20)] + [framed(v1, b"\x00")])
    assert_same(same, AVRO, SchemaResolver(registry=url), bulk=True)
    mixed = pa.array([framed(v1, avro_bytes(WIDE, rec)),
                      framed(v3, avro_bytes(extra, dict(rec, x=9)))])
    assert_same(mixed, AVRO, SchemaResolver(registry=url), bulk=False)


def test_raw_values_from_a_folder_and_datums(tmp_path):
    import orjson

    (tmp_path / "order.avsc").write_bytes(orjson.dumps(WIDE))
    fmt = Format(format="avro", schemas=SchemaSource(path=str(tmp_path)))
    resolver = SchemaResolver(path=tmp_path)
    rec = {"id": 9, "qty": 1, "ok": True, "ratio": 2.5, "amount": -1.0, "customer": "z",
           "blob": b"\xff", "tag": b"\x00\x00\x00", "status": "NEW", "note": "é",
           "flag": None, "nothing": None, "address": {"street": "a", "zip": None},
           "billing": None}
    data = avro_bytes(WIDE, rec)
    values = pa.array([data, data[:4], None, data, b""])
    assert_same(values, fmt, resolver, bulk=True)
    got = decode_datums(values, fmt, resolver)
    decode_module.BULK_AVRO = False
    try:
        want = decode_datums(values, fmt, resolver)
    finally:
        decode_module.BULK_AVRO = True
    assert (got.values, got.errors, got.stages) == (want.values, want.errors, want.stages)
    assert fastavro  # the reference reader of both paths
