"""Confluent framing parsed vectorised, checked against a per-record Python reference."""

from __future__ import annotations

import io
import struct

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.common.serde import SchemaId
from hypothesis import given, settings
from hypothesis import strategies as st

from kqlab.serde import message_indexes, message_indexes_length, parse_wire, wire


def reference(value: bytes | None) -> tuple[bool, int, int | None, int]:
    """(framed, magic, schema_id, payload_start) of one value, the slow obvious way."""
    if value is None or len(value) == 0:
        return False, -1, None, 0
    ok = len(value) >= 5 and value[0] == 0
    sid = struct.unpack(">i", value[1:5])[0] if ok else None
    return ok, value[0], sid, 5 if ok else 0


def check(arr: pa.Array) -> None:
    info = parse_wire(arr)
    if wire._cjson is not None:  # the C pass and the numpy definition, the same arrays
        kernels, wire._cjson = wire._cjson, None
        try:
            numpy_info = parse_wire(arr)
        finally:
            wire._cjson = kernels
        for name in ("framed", "magic", "schema_id", "payload_start"):
            assert getattr(info, name).equals(getattr(numpy_info, name)), name
    expect = [reference(v) for v in arr.to_pylist()]
    assert info.framed.to_pylist() == [e[0] for e in expect]
    assert info.magic.to_pylist() == [e[1] for e in expect]
    assert info.schema_id.to_pylist() == [e[2] for e in expect]
    assert info.payload_start.to_pylist() == [e[3] for e in expect]
    assert info.framed.null_count == 0
    assert info.magic.type == pa.int16()
    assert info.schema_id.type == pa.int32()
    # starts/ends locate every value in the data buffer
    for i, v in enumerate(arr.to_pylist()):
        if v is not None:
            assert info.data[info.starts[i]:info.ends[i]].tobytes() == v


value = st.one_of(
    st.none(),
    st.binary(max_size=12),
    st.builds(lambda sid, p: struct.pack(">bi", 0, sid) + p,
              st.integers(-(2**31), 2**31 - 1), st.binary(max_size=8)),
    st.builds(lambda p: b"\x00" + p, st.binary(max_size=4)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(value, max_size=40), st.integers(0, 40), st.integers(0, 40),
       st.booleans())
def test_parse_wire_matches_reference(values, start, stop, large):
    arr = pa.array(values, pa.large_binary() if large else pa.binary())
    check(arr)
    check(arr.slice(min(start, len(values)), stop))  # non-zero array offset


def test_chunked_strings_and_empty_arrays():
    check(pa.array([], pa.binary()))
    check(pa.array([None, None], pa.binary()))
    chunked = pa.chunked_array([[b"\x00\x00\x00\x00\x07a"], [None, b"x"]], pa.binary())
    assert parse_wire(chunked).schema_id.to_pylist() == [7, None, None]
    assert parse_wire(pa.array(["\x00\x00\x00\x01\x00"])).schema_id.to_pylist() == [256]


def test_wire_table_and_lengths():
    info = parse_wire(pa.array([b"\x00\x00\x00\x00\x2a{}", None, b""]))
    assert info.to_table().column_names == ["framed", "magic", "schema_id", "payload_start"]
    assert info.lengths.tolist() == [7, 0, 0]


def test_non_binary_column_is_rejected():
    with pytest.raises(TypeError, match="binary column"):
        parse_wire(pa.array([1, 2]))


@pytest.mark.parametrize("indexes", [[0], [1], [0, 0], [1, 2, 3], [63], [64], [300, 5],
                                     [2**31 - 1]])
def test_message_indexes_against_confluent_encoder(indexes):
    header = SchemaId("PROTOBUF", 42, message_indexes=indexes).id_to_bytes()
    value = header + b"payload"
    got, start = message_indexes(value)
    assert got == indexes
    assert value[start:] == b"payload"
    assert message_indexes_length(value) == len(header) - 5
    # and confluent's own reader agrees on where the payload starts
    buf = io.BytesIO(value)
    SchemaId("PROTOBUF").from_bytes(buf)
    assert buf.tell() == start


@pytest.mark.parametrize(("value", "match"), [
    (b"\x00\x00\x00\x00\x01", "truncated"),
    (b"\x00\x00\x00\x00\x01\x04\x02", "truncated"),
    (b"\x00\x00\x00\x00\x01\x01", "negative"),
    (b"\x00\x00\x00\x00\x01" + b"\xff" * 11, "longer than 10 bytes"),
])
def test_bad_message_indexes(value, match):
    with pytest.raises(ValueError, match=match):
        message_indexes(value)
