"""decode(): Avro (mock registry and folders), JSON, strings, bytes; bad data → error rows."""

from __future__ import annotations

import datetime as dt

import orjson
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kqlab.policy.model import Format, SchemaSource
from kqlab.serde import DecodeConfigError, SchemaResolver, SchemaSourceError, decode

from .conftest import ORDER_SCHEMA, avro_bytes, framed, register

AVRO = Format(format="avro", wire="confluent")


def order(i, note=None):
    return {"id": i, "customer": f"c{i}", "amount": i * 1.5, "note": note}


def test_avro_confluent_from_mock_registry(registry):
    url, client = registry
    sid = register(client, "orders-value", ORDER_SCHEMA)
    values = pa.array([framed(sid, avro_bytes(ORDER_SCHEMA, order(i, "n" if i else None)))
                       for i in range(3)] + [None])
    col = decode(values, Format(format="avro", wire="confluent",
                                schemas=SchemaSource(registry=url)))
    assert col.errors.to_pylist() == [None] * 4
    assert col.error_count == 0
    assert col.schema_ids.to_pylist() == [sid] * 3 + [None]
    assert pa.types.is_struct(col.values.type)
    assert col.values.to_pylist() == [order(0), order(1, "n"), order(2, "n"), None]
    assert col.python_values() == col.values.to_pylist()
    assert col.fallback is None


def test_avro_matches_confluents_own_serializer(registry):
    url, client = registry
    ser = AvroSerializer(client, orjson.dumps(ORDER_SCHEMA).decode())
    ctx = SerializationContext("orders", MessageField.VALUE)
    values = pa.array([ser(order(i), ctx) for i in range(5)])
    col = decode(values, AVRO, SchemaResolver(registry=url))
    assert col.values.to_pylist() == [order(i) for i in range(5)]
    assert col.schema_ids.to_pylist() == [client.get_latest_version("orders-value").schema_id] * 5


def test_unknown_id_and_corrupt_payload_are_error_rows(registry):
    url, client = registry
    sid = register(client, "orders-value", ORDER_SCHEMA)
    good = avro_bytes(ORDER_SCHEMA, order(1))
    values = pa.array([
        framed(sid, good),
        framed(999, good),                     # unknown schema id
        framed(sid, good[:3]),                 # truncated
        framed(sid, good + b"\x00\x01"),       # trailing bytes
        framed(sid, b"\x02\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"),  # broken string length
        b"\x01" + good,                        # wrong magic byte
        b"\x00\x00",                           # too short
        b"",
        None,                                  # tombstone
        framed(sid, good),
    ])
    col = decode(values, AVRO, SchemaResolver(registry=url))
    e = col.errors.to_pylist()
    assert e[0] is None and e[-1] is None and e[-2] is None
    assert e[1] == f"schema id 999 not found in {url}"
    assert e[2].startswith(f"invalid Avro payload for schema id {sid}: ")
    assert e[3] == (f"invalid Avro payload for schema id {sid}: 2 unread bytes after the datum "
                    f"(it ends at byte {5 + len(good)} of {7 + len(good)})")
    assert e[4].startswith(f"invalid Avro payload for schema id {sid}: ")
    assert e[5] == "not in the Confluent wire format: magic byte 1, expected 0"
    assert e[6] == "too short for the Confluent wire format: 2 bytes, need at least 5"
    assert e[7] == "empty value: not in the Confluent wire format"
    assert col.values.to_pylist() == [order(1)] + [None] * 8 + [order(1)]
    assert col.schema_ids.to_pylist() == [sid, 999, sid, sid, sid, None, None, None, None, sid]
    assert col.error_count == 7


def test_truncated_datum_does_not_read_into_the_next_value(registry):
    url, client = registry
    sid = register(client, "s", {"type": "record", "name": "R",
                                 "fields": [{"name": "s", "type": "string"}]})
    # string length 10 but only 2 bytes: the bytes of the next value must not complete it
    values = pa.array([framed(sid, b"\x14ab"), framed(sid, avro_bytes(
        {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]},
        {"s": "0123456789"}))])
    col = decode(values, AVRO, SchemaResolver(registry=url))
    assert col.errors.to_pylist()[0] == (f"invalid Avro payload for schema id {sid}: truncated: "
                                         "field 's' declares 10 bytes but only 2 remain (byte 5)")
    assert col.values.to_pylist() == [None, {"s": "0123456789"}]


def test_several_writer_schemas_unify(registry):
    url, client = registry
    v1 = register(client, "orders-value", ORDER_SCHEMA)
    v2_schema = dict(ORDER_SCHEMA, fields=[*ORDER_SCHEMA["fields"],
                                           {"name": "qty", "type": "int", "default": 1}])
    v2 = register(client, "orders-value", v2_schema)
    values = pa.array([framed(v2, avro_bytes(v2_schema, dict(order(0), qty=5))),
                       framed(v1, avro_bytes(ORDER_SCHEMA, order(1)))])
    col = decode(values, AVRO, SchemaResolver(registry=url))
    assert col.values.type.get_field_index("qty") >= 0
    assert col.values.to_pylist() == [dict(order(0), qty=5), dict(order(1), qty=None)]
    assert col.python_values()[1] == order(1)  # exactly what fastavro returned


def test_conflicting_writer_schemas_fall_back_to_json_text(registry):
    url, client = registry
    a = register(client, "x", '"long"')
    b = register(client, "y", '"string"')
    values = pa.array([framed(a, avro_bytes("long", 5)), framed(b, avro_bytes("string", "s"))])
    col = decode(values, AVRO, SchemaResolver(registry=url))
    assert col.values.to_pylist() == ["5", '"s"']
    assert "conflicting Arrow types" in col.fallback
    assert col.python_values() == [5, "s"]


def test_logical_types_and_uuid_reach_arrow(registry):
    url, client = registry
    schema = {"type": "record", "name": "E", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}}]}
    sid = register(client, "e", schema)
    at = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    uid = "12345678-1234-5678-1234-567812345678"
    col = decode(pa.array([framed(sid, avro_bytes(schema, {"at": at, "id": uid}))]), AVRO,
                 SchemaResolver(registry=url))
    assert col.values.type == pa.struct([("at", pa.timestamp("ms", tz="UTC")),
                                         ("id", pa.string())])
    assert col.values.to_pylist() == [{"at": at, "id": uid}]
    assert str(col.python_values()[0]["id"]) == uid  # fastavro's own UUID object


def test_all_rows_undecodable_keeps_the_type(registry):
    url, client = registry
    sid = register(client, "o", ORDER_SCHEMA)
    col = decode(pa.array([framed(sid, b"\x01")]), AVRO, SchemaResolver(registry=url))
    assert pa.types.is_struct(col.values.type)
    assert col.values.null_count == 1
    assert decode(pa.array([framed(5, b"")]), AVRO,
                  SchemaResolver(registry=url)).values.type == pa.null()


def test_raw_avro_from_a_folder(tmp_path):
    (tmp_path / "order.avsc").write_text(orjson.dumps(ORDER_SCHEMA).decode())
    values = pa.array([avro_bytes(ORDER_SCHEMA, order(1)), None, b"\x01"])
    fmt = Format(format="avro", wire="raw", schemas=SchemaSource(path=str(tmp_path)))
    col = decode(values, fmt)
    assert col.values.to_pylist()[:2] == [order(1), None]
    assert col.errors.to_pylist()[0:2] == [None, None]
    assert col.errors.to_pylist()[2].startswith(f"invalid Avro payload for schema {tmp_path}")
    assert col.schema_ids is None


def test_confluent_avro_from_a_folder(tmp_path):
    (tmp_path / "12.avsc").write_text(orjson.dumps(ORDER_SCHEMA).decode())
    fmt = Format(format="avro", wire="confluent", schemas=SchemaSource(path=str(tmp_path)))
    col = decode(pa.array([framed(12, avro_bytes(ORDER_SCHEMA, order(3))),
                           framed(13, b"")]), fmt)
    assert col.values.to_pylist() == [order(3), None]
    assert col.errors.to_pylist()[1] == f"schema id 13 not found in {tmp_path} (no 13.avsc)"


def test_sliced_and_chunked_input(registry):
    url, client = registry
    sid = register(client, "o", ORDER_SCHEMA)
    arr = pa.array([framed(sid, avro_bytes(ORDER_SCHEMA, order(i))) for i in range(6)])
    col = decode(arr.slice(2, 3), AVRO, SchemaResolver(registry=url))
    assert col.values.to_pylist() == [order(2), order(3), order(4)]
    chunked = pa.chunked_array([arr.slice(0, 2), arr.slice(4)])
    assert decode(chunked, AVRO, SchemaResolver(registry=url)).values.to_pylist() == [
        order(0), order(1), order(4), order(5)]


# -- JSON ----------------------------------------------------------------------------------
def test_json_values():
    col = decode(pa.array([b'{"a": 1, "b": "x"}', b'{"a": 2}', None, b"{bad", b""]),
                 Format(format="json"))
    assert col.values.to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": None}, None, None, None]
    e = col.errors.to_pylist()
    assert e[:3] == [None, None, None]
    assert e[3].startswith("invalid JSON: ") and "line 1 column 2" in e[3]
    assert e[4].startswith("invalid JSON: ")
    assert col.python_values()[1] == {"a": 2}
    assert col.schema_ids is None


def test_json_mixed_types_fall_back_to_text():
    col = decode(pa.array([b'{"a": 1}', b'{"a": "one"}', b"[1]", b" 7 ", b"nope"]),
                 Format(format="json"))
    assert col.values.type == pa.string()
    assert col.values.to_pylist() == ['{"a": 1}', '{"a": "one"}', "[1]", " 7 ", None]
    assert col.fallback.startswith("JSON values do not share one Arrow type")
    assert col.python_values() == [{"a": 1}, {"a": "one"}, [1], 7, None]


def test_json_confluent_framed_and_given_type():
    values = pa.array([framed(4, b'{"n": 1}'), framed(4, b'{"n": "big"}'), b'{"n": 2}'])
    col = decode(values, Format(format="json", wire="confluent"),
                 arrow_type=pa.struct([("n", pa.int64())]))
    assert col.values.to_pylist() == [{"n": 1}, None, None]
    e = col.errors.to_pylist()
    assert e[0] is None
    assert e[1].startswith("decoded value does not fit Arrow type struct<n: int64>")
    assert e[2] == "not in the Confluent wire format: magic byte 123, expected 0"
    assert col.schema_ids.to_pylist() == [4, 4, None]


def test_json_invalid_utf8():
    col = decode(pa.array([b'"\xff"']), Format(format="json"))
    assert col.errors.to_pylist()[0].startswith("invalid JSON: ")


# -- strings, bytes, none --------------------------------------------------------------------
def test_strings_valid_and_invalid_utf8():
    col = decode(pa.array([b"hello", None, b"caf\xc3\xa9", b"bad \xff here", b""]),
                 Format(format="string"))
    assert col.values.to_pylist() == ["hello", None, "café", None, ""]
    assert col.errors.to_pylist() == [None, None, None,
                                      "not valid UTF-8 at byte 4: invalid start byte", None]
    assert col.values.type == pa.string()


def test_strings_confluent_positions_count_the_header():
    col = decode(pa.array([framed(1, b"ok"), framed(1, b"\xc3")]),
                 Format(format="string", wire="confluent"))
    assert col.values.to_pylist() == ["ok", None]
    assert col.errors.to_pylist()[1] == "not valid UTF-8 at byte 5: unexpected end of data"


def test_bytes_and_none():
    values = pa.array([framed(9, b"\x01\x02"), None, b"xy"])
    raw = decode(values, Format(format="bytes"))
    assert raw.values.equals(values) and raw.error_count == 0
    payload = decode(values, Format(format="bytes", wire="confluent"))
    assert payload.values.to_pylist() == [b"\x01\x02", None, None]
    assert payload.errors.to_pylist()[2].startswith("not in the Confluent wire format")
    assert payload.python_values() == [b"\x01\x02", None, None]
    none = decode(values, Format(format="none"))
    assert none.values.equals(values) and none.error_count == 0


def test_tombstones_everywhere(registry):
    url, _ = registry
    nulls = pa.nulls(3, pa.binary())
    for fmt in ("none", "bytes", "string", "json"):
        for wire in ("raw", "confluent"):
            col = decode(nulls, Format(format=fmt, wire=wire))
            assert col.error_count == 0 and col.values.null_count == 3, (fmt, wire)
    col = decode(nulls, AVRO, SchemaResolver(registry=url))
    assert col.error_count == 0 and col.values.null_count == 3


# -- configuration errors raise ------------------------------------------------------------
def test_bad_configuration_raises():
    values = pa.array([b"x"])
    with pytest.raises(DecodeConfigError, match="needs writer schemas"):
        decode(values, Format(format="avro"))
    with pytest.raises(DecodeConfigError, match="unknown format 'xml'"):
        decode(values, Format(format="xml"))
    with pytest.raises(DecodeConfigError, match="unknown wire format"):
        decode(values, Format(format="json", wire="magic"))
    with pytest.raises(SchemaSourceError, match="does not exist"):
        decode(values, Format(format="avro", schemas=SchemaSource(path="/no/such/dir")))


@pytest.mark.parametrize("large", [False, True])
def test_confluent_payloads_match_python_slicing(large):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from .test_wire import value

    @settings(max_examples=150, deadline=None)
    @given(st.lists(value, max_size=30), st.integers(0, 30))
    def run(values, start):
        arr = pa.array(values, pa.large_binary() if large else pa.binary()).slice(start)
        col = decode(arr, Format(format="bytes", wire="confluent"))
        expect = [v[5:] if v is not None and len(v) >= 5 and v[0] == 0 else None
                  for v in arr.to_pylist()]
        assert col.values.to_pylist() == expect
        assert [e is None for e in col.errors.to_pylist()] == [
            v is None or x is not None for v, x in zip(arr.to_pylist(), expect, strict=True)]

    run()


def test_error_text_depends_on_the_value_alone(registry):
    """A value that runs past its end is re-read alone: its message must not change with the
    records around it (the Spark engine decodes one partition at a time)."""
    url, client = registry
    schema = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}
    sid = register(client, "s", schema)
    bad = framed(sid, b"\x7b")  # a negative string length: reads to the end of the buffer
    short = framed(sid, b"\x14ab")  # a string of 10 bytes with only 2
    good = framed(sid, avro_bytes(schema, {"s": "x" * 300}))
    for value in (bad, short):
        alone = decode(pa.array([value]), AVRO, SchemaResolver(registry=url))
        for neighbours in ([good] * 3, [good, good, value, good] * 40):
            col = decode(pa.array([value, *neighbours]), AVRO, SchemaResolver(registry=url))
            assert col.errors.to_pylist()[0] == alone.errors.to_pylist()[0]
    assert decode(pa.array([short]), AVRO, SchemaResolver(registry=url)).errors.to_pylist()[
        0].endswith("truncated: field 's' declares 10 bytes but only 2 remain (byte 5)")
    assert decode(pa.array([bad]), AVRO, SchemaResolver(registry=url)).errors.to_pylist()[
        0].endswith("field 's' declares a negative length (-62) at byte 5")


def test_misaligned_neighbours_are_two_errors_in_groups_of_any_size(tmp_path):
    """A value with a trailing byte followed by one missing that byte: each fails on its
    own, however many values share the writer schema (reading many values as one container
    block once accepted both, as two records that were neither value)."""
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    (tmp_path / "r.avsc").write_text(orjson.dumps(schema).decode())
    fmt = Format(format="avro", wire="raw", schemas=SchemaSource(path=str(tmp_path)))
    alone = [decode(pa.array([v]), fmt).errors.to_pylist()[0] for v in (b"\x02\x04", b"")]
    assert alone[0].endswith("1 unread bytes after the datum (it ends at byte 1 of 2)")
    assert alone[1].endswith("truncated: field 'n' needs a long at byte 0 but the value ends "
                             "there")
    for good in (1, 63, 64, 500):
        col = decode(pa.array([b"\x02\x04", b""] + [b"\x02"] * good), fmt)
        assert col.errors.to_pylist() == alone + [None] * good, good
        assert col.values.to_pylist() == [None, None] + [{"n": 1}] * good
