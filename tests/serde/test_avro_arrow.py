"""Avro → Arrow type mapping, and fastavro's decoded values fit the mapped types."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import fastavro
import pyarrow as pa
import pytest

from kqlab.serde import arrow_type, avro_to_arrow

from .conftest import avro_bytes


def _long(lt):
    return {"type": "long", "logicalType": lt}


@pytest.mark.parametrize(("schema", "expected"), [
    ("null", pa.null()), ("boolean", pa.bool_()), ("int", pa.int32()), ("long", pa.int64()),
    ("float", pa.float32()), ("double", pa.float64()), ("bytes", pa.binary()),
    ("string", pa.string()), ('"string"', pa.string()),
    ({"type": "fixed", "name": "F", "size": 4}, pa.binary()),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, pa.string()),
    ({"type": "array", "items": "int"}, pa.list_(pa.int32())),
    ({"type": "map", "values": "long"}, pa.map_(pa.string(), pa.int64())),
    (["null", "string"], pa.string()), (["string", "null"], pa.string()),
    (["int", "long"], pa.int64()), (["null", "int", "double"], pa.float64()),
    (["string", "long"], pa.string()),  # JSON-text fallback
    (["null"], pa.null()),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
     pa.decimal128(10, 2)),
    ({"type": "fixed", "name": "D", "size": 32, "logicalType": "decimal", "precision": 60,
      "scale": 4}, pa.decimal256(60, 4)),
    ({"type": "int", "logicalType": "date"}, pa.date32()),
    ({"type": "int", "logicalType": "time-millis"}, pa.time32("ms")),
    (_long("time-micros"), pa.time64("us")),
    (_long("timestamp-millis"), pa.timestamp("ms", tz="UTC")),
    (_long("timestamp-micros"), pa.timestamp("us", tz="UTC")),
    (_long("timestamp-nanos"), pa.timestamp("ns", tz="UTC")),
    (_long("local-timestamp-millis"), pa.timestamp("ms")),
    (_long("local-timestamp-micros"), pa.timestamp("us")),
    ({"type": "string", "logicalType": "uuid"}, pa.string()),
    ({"type": "string", "logicalType": "date"}, pa.string()),  # wrong base: ignored
    ({"type": "long", "logicalType": "made-up"}, pa.int64()),
])
def test_type_mapping(schema, expected):
    assert arrow_type(schema) == expected


ALL_TYPES = {
    "type": "record", "name": "All", "namespace": "t",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "f", "type": "float"},
        {"name": "raw", "type": "bytes"},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "e2", "type": "Color"},  # named reference, same namespace
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal",
                                   "precision": 9, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "at", "type": _long("timestamp-millis")},
        {"name": "at_us", "type": _long("timestamp-micros")},
        {"name": "local", "type": _long("local-timestamp-millis")},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "either", "type": ["null", "string", "long"]},
        {"name": "inner", "type": ["null", {"type": "record", "name": "Inner", "fields": [
            {"name": "x", "type": "int"}, {"name": "uid", "type": ["null", {
                "type": "string", "logicalType": "uuid"}]}]}]},
        {"name": "inners", "type": {"type": "array", "items": "Inner"}},
    ],
}


def test_decoded_logical_values_fit_the_arrow_type():
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    at = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.UTC)
    record = {
        "b": True, "i": -3, "f": 1.5, "raw": b"\x00\xff", "fx": b"abcd", "e": "GREEN",
        "e2": "RED", "tags": ["a", "b"], "attrs": {"k": 1, "n": None},
        "price": decimal.Decimal("1234.56"), "day": dt.date(2024, 2, 29),
        "tm": dt.time(1, 2, 3, 4000), "tu": dt.time(1, 2, 3, 4), "at": at,
        "at_us": dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC),
        "local": dt.datetime(2024, 5, 6, 7, 8, 9, 123000), "id": str(u), "either": 12,
        "inner": {"x": 1, "uid": str(u)}, "inners": [{"x": 2, "uid": None}],
    }
    parsed = fastavro.parse_schema(ALL_TYPES)
    import io

    decoded = fastavro.schemaless_reader(io.BytesIO(avro_bytes(ALL_TYPES, record)), parsed)
    mapping = avro_to_arrow(ALL_TYPES)
    assert mapping.converter is not None  # uuid and the mixed union need one
    arr = pa.array([mapping.converter(decoded), None], type=mapping.type)
    row = arr.to_pylist()[0]
    assert row["price"] == decimal.Decimal("1234.56")
    assert row["at"] == at
    assert row["id"] == str(u)
    assert row["inner"] == {"x": 1, "uid": str(u)}
    assert row["either"] == "12"  # JSON text of the union branch
    assert row["attrs"] == [("k", 1), ("n", None)]
    assert row["e"] == "GREEN" and row["e2"] == "RED"
    assert arr.type.field("tu").type == pa.time64("us")
    assert arr.to_pylist()[1] is None


def test_recursive_type_becomes_json_text_at_the_recursion():
    schema = {"type": "record", "name": "Node", "fields": [
        {"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"]}]}
    m = avro_to_arrow(schema)
    assert m.type == pa.struct([("v", pa.int32()), ("next", pa.string())])
    value = {"v": 1, "next": {"v": 2, "next": None}}
    assert m.converter(value) == {"v": 1, "next": '{"v":2,"next":null}'}


def test_no_converter_for_plain_records():
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": ["null", "long"]},
        {"name": "t", "type": _long("timestamp-millis")}]}
    assert avro_to_arrow(schema).converter is None


def test_bad_schemas_raise_value_error():
    with pytest.raises(ValueError, match="unknown Avro type name 'Nope'"):
        arrow_type({"type": "record", "name": "R", "fields": [{"name": "a", "type": "Nope"}]})
    with pytest.raises(ValueError, match="not an Avro schema"):
        arrow_type(42)
