"""format: protobuf decoding, held to messages written by protobuf's own generated classes."""

from __future__ import annotations

import datetime as dt

import orjson
import pyarrow as pa
import pytest

from kqlab.policy.model import Format, SchemaSource
from kqlab.serde import SchemaResolver, SchemaSourceError, decode
from kqlab.serde.decode import decode_pass
from kqlab.serde.protobuf_schemas import MessageIndexError, ProtoCompileError, proto_folder

from .protobuf_helpers import generated, write_protos

UTC = dt.UTC


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    """(proto folder, generated modules by file name)."""
    root = write_protos(tmp_path_factory.mktemp("protos"))
    mods = generated(root, tmp_path_factory.mktemp("gen"),
                     ["kqt/common/money.proto", "kqt/orders.proto", "kqt/orders_v2.proto"])
    return root, mods


def raw(root, message):
    return Format(format="protobuf", schemas=SchemaSource(path=str(root), message=message))


def framed(sid, indexes, payload):
    """Confluent framing by hand: magic, id, zig-zag count and indexes (``[0]`` as one 0)."""
    def zz(v):
        v = (v << 1) ^ (v >> 63)
        out = bytearray()
        while True:
            b = v & 0x7F
            v >>= 7
            out.append(b | (0x80 if v else 0))
            if not v:
                return bytes(out)
    head = b"\x00" if indexes == [0] else zz(len(indexes)) + b"".join(zz(i) for i in indexes)
    return b"\x00" + sid.to_bytes(4, "big") + head + payload


def full_order(o):
    m = o.Order(id="o-1", qty=3, status=o.SHIPPED, tags=["a", "b"], email="e@x.org",
                score=0.5)
    m.total.currency, m.total.units = "EUR", 12
    m.counts["x"] = 2
    m.placed_at.seconds, m.placed_at.nanos = 1_700_000_000, 123_456_789
    m.wait.seconds, m.wait.nanos = 90, 5
    m.lines.add(sku="S1", n=2)
    m.lines.add(sku="S2", n=1)
    m.by_shop[7].currency = "USD"
    return m


def test_every_field_kind_round_trips(pb):
    root, mods = pb
    o = mods["kqt/orders.proto"]
    values = pa.array([full_order(o).SerializeToString(), o.Order(id="o-2").SerializeToString(),
                       None, b""])
    col = decode(values, raw(root, "kqt.Order"))
    assert col.error_count == 0
    t = col.values.type
    assert t.field("status").type == pa.string()
    assert t.field("total").type == pa.struct([("currency", pa.string()), ("units", pa.int64()),
                                               ("nanos", pa.int32())])
    assert t.field("counts").type == pa.map_(pa.string(), pa.int32())
    assert t.field("placed_at").type == pa.timestamp("ns", tz="UTC")
    assert t.field("wait").type == pa.duration("ns")
    assert t.field("by_shop").type.key_type == pa.int64()
    first, second, tomb, empty = col.values.to_pylist(maps_as_pydicts="strict")
    assert first["id"] == "o-1" and first["qty"] == 3 and first["status"] == "SHIPPED"
    assert first["total"] == {"currency": "EUR", "units": 12, "nanos": 0}
    assert first["tags"] == ["a", "b"] and first["counts"] == {"x": 2}
    assert first["email"] == "e@x.org" and first["phone"] is None  # the oneof's other member
    assert col.values.field("placed_at")[0].value == 1_700_000_000_123_456_789
    assert col.values.field("wait")[0].value == 90_000_000_005
    assert first["score"] == 0.5 and second["score"] is None  # optional: presence kept
    assert first["lines"] == [{"sku": "S1", "n": 2}, {"sku": "S2", "n": 1}]
    assert first["by_shop"] == {7: {"currency": "USD", "units": 0, "nanos": 0}}
    # proto3 defaults read as protobuf reads them; unset messages are null
    assert second["qty"] == 0 and second["status"] == "STATUS_UNSPECIFIED"
    assert second["total"] is None and second["placed_at"] is None and second["email"] is None
    assert tomb is None
    assert empty["id"] == ""  # an empty payload is a message with every field at its default
    assert col.unknown_fields.to_pylist() == [0, 0, 0, 0]


def test_scalars_match_the_generated_class(pb):
    root, mods = pb
    o = mods["kqt/orders.proto"]
    m = o.Scalars(d=1.5, f=0.25, i32=-7, i64=-(2**40), u32=2**32 - 1, u64=2**64 - 1, s32=-3,
                  s64=-(2**50), fx32=9, fx64=2**63, sf32=-1, sf64=-(2**62), b=True, s="é",
                  raw=b"\x00\xff", packed=[1, 2, 3], statuses=[o.PLACED, 9])
    col = decode(pa.array([m.SerializeToString()]), raw(root, "kqt.Scalars"))
    got = col.values.to_pylist()[0]
    want = {f.name: getattr(m, f.name) for f in m.DESCRIPTOR.fields}
    want["packed"] = list(m.packed)
    want["statuses"] = ["PLACED", "9"]  # an open enum's number without a name: its text
    assert got == want
    types = col.values.type
    assert [types.field(n).type for n in ("u32", "u64", "s32", "fx64", "sf32")] == [
        pa.uint32(), pa.uint64(), pa.int32(), pa.uint64(), pa.int32()]


def test_every_well_known_type(pb):
    root, mods = pb
    o = mods["kqt/orders.proto"]
    from google.protobuf import timestamp_pb2

    k = o.Known()
    k.ts.FromDatetime(dt.datetime(2024, 2, 29, 12, 0, 1, 250000, tzinfo=UTC))
    k.dur.FromTimedelta(dt.timedelta(seconds=-3, microseconds=500))
    k.dv.value, k.fv.value, k.i64v.value, k.u64v.value = 2.5, 0.5, -(2**60), 2**64 - 1
    k.i32v.value, k.u32v.value, k.bv.value, k.sv.value = 0, 7, False, "text"
    k.bytv.value = b"\x01"
    k.st.update({"a": 1, "b": [True, None, "x"], "c": {"d": "e"}})
    k.val.string_value = "v"
    k.lv.extend([1, "two"])
    k.any.Pack(timestamp_pb2.Timestamp(seconds=5))
    k.empty.SetInParent()
    k.mask.paths.extend(["a.b", "c"])
    k.stamps.add(seconds=1)
    k.stamps.add(seconds=2, nanos=3)
    col = decode(pa.array([k.SerializeToString(), o.Known().SerializeToString()]),
                 raw(root, "kqt.Known"))
    assert col.error_count == 0
    full, unset = col.values.to_pylist()
    v = col.values
    assert v.field("ts").type == pa.timestamp("ns", tz="UTC")
    assert v.field("ts")[0].as_py() == dt.datetime(2024, 2, 29, 12, 0, 1, 250000, tzinfo=UTC)
    assert v.field("dur")[0].value == (-3 * 10**9 + 500_000)
    # wrappers: the scalar, null when not set (a set zero / false is not null)
    assert (full["dv"], full["fv"], full["i64v"], full["u64v"]) == (2.5, 0.5, -(2**60),
                                                                      2**64 - 1)
    assert (full["i32v"], full["u32v"], full["bv"], full["sv"], full["bytv"]) == (
        0, 7, False, "text", b"\x01")
    assert v.field("u64v").type == pa.uint64() and v.field("bv").type == pa.bool_()
    # Struct / Value / ListValue: protobuf's JSON mapping, as text
    assert orjson.loads(full["st"]) == {"a": 1, "b": [True, None, "x"], "c": {"d": "e"}}
    assert orjson.loads(full["val"]) == "v" and orjson.loads(full["lv"]) == [1, "two"]
    assert full["any"] == {"type_url": "type.googleapis.com/google.protobuf.Timestamp",
                           "value": timestamp_pb2.Timestamp(seconds=5).SerializeToString()}
    assert full["empty"] == {} and full["mask"] == {"paths": ["a.b", "c"]}
    assert [s.value for s in v.field("stamps")[0].values] == [10**9, 2 * 10**9 + 3]
    assert all(unset[n] is None for n in ("ts", "dur", "dv", "i32v", "bv", "st", "val", "any",
                                          "empty", "mask"))
    assert unset["stamps"] == []


def test_recursive_message_is_json_from_the_recursion_on(pb):
    root, mods = pb
    o = mods["kqt/orders.proto"]
    t = o.Tree(name="root")
    t.children.add(name="kid").children.add(name="grandkid")
    col = decode(pa.array([t.SerializeToString()]), raw(root, "Tree"))  # a unique short name
    assert col.values.type.field("children").type == pa.list_(pa.string())
    kid = orjson.loads(col.values.to_pylist()[0]["children"][0])
    assert kid == {"name": "kid", "children": [{"name": "grandkid", "children": []}]}


def test_unknown_fields_are_counted_not_errors(pb):
    root, mods = pb
    v2 = mods["kqt/orders_v2.proto"]
    newer = v2.Order(id="n", qty=1, added="new", also_new=5).SerializeToString()
    o = mods["kqt/orders.proto"]
    nested = o.Order(id="m")
    nested.total.currency = "EUR"
    # a Money with two fields its reader lacks (numbers 40 and 41), inside an Order
    money = nested.total.SerializeToString() + b"\xc2\x02\x01z\xc8\x02\x05"
    body = o.Order(id="m").SerializeToString() + b"\x22" + bytes([len(money)]) + money
    col = decode(pa.array([newer, body, o.Order(id="k").SerializeToString()]),
                 raw(root, "kqt.Order"))
    assert col.error_count == 0
    assert col.values.to_pylist()[0]["id"] == "n"
    assert col.values.to_pylist()[1]["total"]["currency"] == "EUR"
    assert col.unknown_fields.to_pylist() == [2, 2, 0]


def test_payloads_that_do_not_parse_fail_with_their_reason(pb):
    root, mods = pb
    o = mods["kqt/orders.proto"]
    good = full_order(o).SerializeToString()
    values = pa.array([good, good[:-1], b"\xff\xff\xff", b"\x0f\x01", b"\x0a\x05ab",
                       b"\x0a\x02\xc3\x28", b"\x00\x01"])
    run = decode_pass(values, raw(root, "kqt.Order"))
    errs = run.column.errors.to_pylist()
    assert errs[0] is None
    label = "invalid Protobuf payload for kqt.Order"
    assert all(e.startswith(label) for e in errs[1:])
    assert "runs 1 bytes past the end of the value" in errs[1]
    assert "truncated varint at byte 0" in errs[2]
    assert "field kqt.Order.id (#1): invalid wire type 7 at byte 0" in errs[3]
    assert "field kqt.Order.id (#1): length 5 at byte 0 runs 3 bytes past the end" in errs[4]
    assert "field kqt.Order.id (#1): not valid UTF-8 at byte 2" in errs[5]
    assert "field number 0 at byte 0" in errs[6]
    assert run.stages == [None] + ["payload"] * 6
    assert run.column.values.null_count == 6
    same = full_order(o).SerializeToString(deterministic=True)  # the datum: the message itself
    assert run.datums[0].SerializeToString(deterministic=True) == same
    assert run.datums[1] is None


def test_confluent_framing_message_indexes_and_bad_ids(pb, tmp_path):
    root, mods = pb
    o = mods["kqt/orders.proto"]
    folder = tmp_path / "by-id"
    folder.mkdir()
    (folder / "kqt").mkdir()
    (folder / "kqt" / "common").mkdir()
    (folder / "kqt/common/money.proto").write_text((root / "kqt/common/money.proto").read_text())
    (folder / "5.proto").write_text((root / "kqt/orders.proto").read_text())
    fmt = Format(format="protobuf", wire="confluent", schemas=SchemaSource(path=str(folder)))
    order = full_order(o).SerializeToString()
    line = o.Order.Line(sku="L", n=4).SerializeToString()
    long_form = b"\x00\x00\x00\x00\x05\x02\x00" + order  # count 1, index 0: also [0]
    values = pa.array([framed(5, [0], order), long_form,
                       framed(5, [7], order), framed(5, [0, 3], line), framed(9, [0], order),
                       b"\x00\x00\x00\x00\x05", b"\x01abc", framed(5, [0], b"\xff")])
    run = decode_pass(values, fmt)
    errs = run.column.errors.to_pylist()
    assert errs[0] is None and errs[1] is None
    assert "message index [7] out of range: index 7 at depth 0, but 5.proto has 4 top-level" \
        in errs[2]
    assert "kqt.Order has 3 nested message(s)" in errs[3]  # map entries count, as Confluent's
    assert "schema id 9 not found" in errs[4] and "no 9.proto" in errs[4]
    assert "no message indexes after the schema id" in errs[5]
    assert "magic byte 1" in errs[6]
    assert errs[7].startswith("invalid Protobuf payload for schema id 5 (kqt.Order): "
                              "field tag: truncated varint at byte 6")
    assert run.stages == [None, None, "schema", "schema", "schema", "framing", "framing",
                          "payload"]
    assert run.column.schema_ids.to_pylist() == [5, 5, 5, 5, 9, 5, None, 5]
    assert [r and r["id"] for r in run.column.values.to_pylist()] == [
        "o-1", "o-1", None, None, None, None, None, None]


def test_two_message_types_in_one_column_fall_back_to_json(pb, tmp_path):
    root, mods = pb
    o = mods["kqt/orders.proto"]
    folder = write_protos(tmp_path)
    (folder / "3.proto").write_text((root / "kqt/orders.proto").read_text())
    fmt = Format(format="protobuf", wire="confluent", schemas=SchemaSource(path=str(folder)))
    col = decode(pa.array([framed(3, [0], o.Order(id="a").SerializeToString()),
                           framed(3, [0, 1], o.Order.Line(sku="s").SerializeToString())]), fmt)
    assert col.error_count == 0 and "conflicting Arrow types" in col.fallback
    assert orjson.loads(col.values[1].as_py()) == {"sku": "s", "n": 0}


def test_configuration_errors(pb, tmp_path):
    root, _ = pb
    with pytest.raises(MessageIndexError, match=r"no message 'kqt.Ordr'.*did you mean kqt.Order"):
        decode(pa.array([b""]), raw(root, "kqt.Ordr"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.proto").write_text('syntax = "proto3";\nmessage X { strin a = 1; }\n')
    with pytest.raises(SchemaSourceError, match=r"x\.proto:2:.*strin"):
        decode(pa.array([b""]), raw(bad, "X"))
    with pytest.raises(ProtoCompileError, match=r"no \.proto files"):
        proto_folder(tmp_path / "empty")
    resolver = SchemaResolver(path=root)
    assert resolver.protobuf(None).named("kqt.Order").full_name == "kqt.Order"


def test_registry_subject_with_references_written_by_confluent_serializer(pb):
    """confluent-kafka's ProtobufSerializer registers the schema and its import (a reference,
    as base64 descriptors); kqlab reads both back and decodes its framed values."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from kqlab.serde import registry_client

    _, mods = pb
    o = mods["kqt/orders.proto"]
    url = "mock://kqt-protobuf-refs"
    client = registry_client(url)
    ser = ProtobufSerializer(o.Order, client, {"use.deprecated.format": False})
    ctx = SerializationContext("orders", MessageField.VALUE)
    values = [ser(full_order(o), ctx), ser(o.Order(id="b"), ctx)]
    assert client.get_subjects() == ["kqt/common/money.proto", "orders-value"]
    line_ser = ProtobufSerializer(o.Order.Line, client, {"use.deprecated.format": False})
    values.append(line_ser(o.Order.Line(sku="L"), SerializationContext("lines",
                                                                       MessageField.VALUE)))
    fmt = Format(format="protobuf", wire="confluent", schemas=SchemaSource(registry=url))
    col = decode(pa.array(values[:2]), fmt)
    assert col.error_count == 0
    assert col.values.to_pylist()[0]["total"] == {"currency": "EUR", "units": 12, "nanos": 0}
    assert col.values.to_pylist()[1]["id"] == "b"
    line = decode(pa.array(values[2:]), fmt)  # message indexes [0, 1]: the nested Line
    assert line.error_count == 0 and line.values.to_pylist() == [{"sku": "L", "n": 0}]
    # raw values: the subject's latest schema, the message named
    latest = Format(format="protobuf", schemas=SchemaSource(registry=url, subject="orders-value",
                                                            message="kqt.Order"))
    col = decode(pa.array([full_order(o).SerializeToString()]), latest)
    assert col.values.to_pylist()[0]["status"] == "SHIPPED"


def test_registry_text_schema_with_text_reference(pb):
    """.proto text, as a Schema Registry stores it, with a reference by subject/version."""
    from confluent_kafka.schema_registry import Schema, SchemaReference

    from kqlab.serde import registry_client

    root, mods = pb
    o = mods["kqt/orders.proto"]
    client = registry_client("mock://kqt-protobuf-text")
    client.register_schema("money", Schema((root / "kqt/common/money.proto").read_text(),
                                           "PROTOBUF"))
    sid = client.register_schema("orders-value", Schema(
        (root / "kqt/orders.proto").read_text(), "PROTOBUF",
        [SchemaReference("kqt/common/money.proto", "money", 1)]))
    fmt = Format(format="protobuf", wire="confluent",
                 schemas=SchemaSource(registry="mock://kqt-protobuf-text"))
    col = decode(pa.array([framed(sid, [0], full_order(o).SerializeToString()),
                           framed(sid, [9], b"")]), fmt)
    assert col.values.to_pylist()[0]["total"]["currency"] == "EUR"
    assert "message index [9] out of range" in col.errors.to_pylist()[1]
