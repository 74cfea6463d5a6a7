"""Undecodable Avro values are explained in an analyst's words: what is wrong, which field,
which byte of the value — never fastavro's ``EOFError: Expected -62 bytes, read 65550``.

The wording lives in one place (:mod:`kqlab.serde.avro_faults`, called by
``kqlab.serde.decode``), so the replay's messages and the export round trips' datums
(``decode_datums``) say the same thing; ``test_datums`` holds the two equal on random bytes,
these tests hold the words.
"""

from __future__ import annotations

import json

import fastavro
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqlab.policy.model import Format
from kqlab.serde import SchemaResolver, decode, decode_datums
from kqlab.serde.avro_faults import explain

from .conftest import avro_bytes, framed, register

AVRO = Format(format="avro", wire="confluent")
NOTE = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "customer", "type": "string"},
    {"name": "note", "type": ["null", "string"], "default": None}]}


def _errors(registry, schema, payloads):
    url, client = registry
    sid = register(client, "s-value", schema)
    values = pa.array([framed(sid, p) for p in payloads])
    col = decode(values, AVRO, SchemaResolver(registry=url))
    datums = decode_datums(values, AVRO, SchemaResolver(registry=url))
    assert datums.errors == col.errors.to_pylist()  # one wording for both engines and export
    return sid, col.errors.to_pylist()


def test_a_length_past_the_end_names_the_field_the_length_and_the_byte(registry):
    good = avro_bytes(NOTE, {"id": 7, "customer": "c-1", "note": "gift wrap"})
    # the note's length varint claims 65550 bytes; 12 bytes of text follow
    head = avro_bytes(NOTE, {"id": 7, "customer": "c-1", "note": None})[:-1]
    cut = head + b"\x02" + b"\x9c\x80\x08" + b"x" * 12
    sid, errors = _errors(registry, NOTE, [good, cut])
    assert errors[0] is None
    at = 5 + len(head) + 1  # header, id and customer, the union index: the length starts here
    assert errors[1] == (f"invalid Avro payload for schema id {sid}: truncated: field 'note' "
                         f"declares 65550 bytes but only 12 remain (byte {at})")
    assert "EOFError" not in errors[1] and "Expected" not in errors[1]


def test_json_behind_a_registered_id_says_so(registry):
    """The demo's planted ``orders.undecodable`` defect: a serializer wrote JSON text behind an
    Avro schema id (fastavro reported ``EOFError: Expected -62 bytes, read 65550``)."""
    text = json.dumps({"id": 1, "customer": "c-1"}).encode()
    sid, errors = _errors(registry, NOTE, [text])
    assert errors[0].startswith(f"invalid Avro payload for schema id {sid}: the payload is JSON "
                                'text, not Avro ({"id": 1, "customer": "c-1"}); read as Avro: ')
    # '{' is the zig-zag varint -62 (the id), '"' a customer of 17 bytes, then the next '"'
    # (value byte 24) is union branch 17 of the note
    assert errors[0].endswith("field 'note' selects union branch 17 at byte 24, but the union "
                              "has 2 (null, string)")


@pytest.mark.parametrize(("schema", "payload", "why"), [
    ({"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]},
     b"\x7b", "field 's' declares a negative length (-62) at byte 5"),
    ({"type": "record", "name": "R", "fields": [{"name": "u", "type": ["null", "long"]}]},
     b"\x08\x02", "field 'u' selects union branch 4 at byte 5, but the union has 2 (null, long)"),
    ({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"},
        {"name": "e", "type": {"type": "enum", "name": "State", "symbols": ["OK", "KO"]}}]},
     b"\x02\x0e", "field 'e' has enum index 7 at byte 6, but State has 2 symbols"),
    ({"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]},
     b"\x04\xff\xfe", "field 's' is not valid UTF-8 at byte 6: invalid start byte"),
    ({"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]},
     b"\xff" * 11, "field 'n': a long at byte 5 runs longer than 10 bytes (not a valid varint)"),
    ({"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]},
     b"\xff\xff", "truncated: field 'n''s a long starting at byte 5 is cut off by the end of "
                  "the value"),
    ({"type": "record", "name": "R", "fields": [{"name": "x", "type": "double"}]},
     b"\x00\x00\x00", "truncated: field 'x' needs 8 bytes but only 3 remain (byte 5)"),
    ({"type": "record", "name": "R", "fields": [
        {"name": "tags", "type": {"type": "array", "items": "string"}}]},
     b"\x04\x02a\x06bc", "truncated: field 'tags[1]' declares 3 bytes but only 2 remain "
                          "(byte 8)"),
    ({"type": "record", "name": "R", "fields": [
        {"name": "tags", "type": {"type": "array", "items": "long"}}]},
     b"\xd0\x0f\x02", "truncated: field 'tags' declares 1000 items at byte 5 but only 1 bytes "
                      "remain"),
    ({"type": "record", "name": "R", "fields": [
        {"name": "attrs", "type": {"type": "map", "values": "long"}}]},
     b"\x02\x02k", "truncated: field 'attrs['k']' needs a long at byte 8 but the value ends "
                   "there"),
    ({"type": "record", "name": "R", "fields": [
        {"name": "c", "type": {"type": "record", "name": "Card", "fields": [
            {"name": "last4", "type": {"type": "fixed", "name": "F", "size": 4}}]}}]},
     b"12", "truncated: field 'c.last4' needs 4 bytes but only 2 remain (byte 5)"),
    ({"type": "record", "name": "R", "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}}]},
     b"\x06abc", "field 'id' is a uuid, but 'abc' at byte 5 is not one"),
    ({"type": "record", "name": "R", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]},
     b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01",
     "field 'at': timestamp-millis 9223372036854775807 at byte 5 is outside the years 1-9999"),
])
def test_each_kind_of_fault_in_words(registry, schema, payload, why):
    sid, errors = _errors(registry, schema, [payload])
    assert errors[0] == f"invalid Avro payload for schema id {sid}: {why}"


def test_unframed_values_count_bytes_from_the_start_of_the_value(tmp_path):
    from kqlab.policy.model import SchemaSource

    (tmp_path / "r.avsc").write_text(json.dumps(NOTE))
    fmt = Format(format="avro", wire="raw", schemas=SchemaSource(path=str(tmp_path)))
    err = decode(pa.array([b"\x02\x7b"]), fmt).errors.to_pylist()[0]
    assert err.endswith("field 'customer' declares a negative length (-62) at byte 1")


def test_the_demo_topics_undecodable_defect_reads_in_words(tmp_path):
    """docs/demo-defects.md: ``orders.undecodable`` (JSON behind a registered id, 6 records,
    caught by rule ``avro``) — each rejection says the payload is JSON and where Avro fails."""
    from kqlab.sources import demo_topics as dt
    from kqlab.validate import replay

    now = 1_763_700_000_000
    demo = dt.generate(tmp_path, now)
    policy = dt.load_policies()["orders"]
    messages = []
    for name, folder in sorted(demo.folders.items()):
        if name.startswith("orders-"):
            v = replay(folder, policy, now=now)
            messages += [f["message"] for fs in v.records.column("failures").to_pylist()
                         for f in fs if f["rule"] == "avro"]
    json_ones = [m for m in messages if "the payload is JSON text, not Avro" in m]
    assert len(json_ones) == demo.truth.defects["orders.undecodable"].records == 6
    assert all("field 'order_id' declares a negative length (-62) at byte 5" in m
               for m in json_ones)
    assert not any("EOFError" in m or "Expected " in m for m in messages)


@st.composite
def _order_bytes(draw):
    datum = {"id": draw(st.integers(-2**63, 2**63 - 1)), "customer": draw(st.text(max_size=20)),
             "note": draw(st.none() | st.text(max_size=300))}
    return avro_bytes(NOTE, datum)


@settings(max_examples=60, deadline=None)
@given(_order_bytes(), st.data())
def test_every_truncation_is_named_as_one(payload, data):
    """A valid datum reads without a fault; any proper prefix of it is 'truncated' at a byte
    inside the value (hypothesis over datums and cut points)."""
    parsed = fastavro.parse_schema(NOTE)
    assert explain(payload, parsed, offset=5) is None
    cut = data.draw(st.integers(0, len(payload) - 1))
    why = explain(payload[:cut], parsed, offset=5)
    assert why is not None and why.startswith("truncated: field '"), why
    assert "EOFError" not in why
