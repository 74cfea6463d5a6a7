"""Values shown for people (issue 16): the record detail of an Avro record with a 32-bit float,
a decimal, bytes and a timestamp shows ``0.3``, ``12.30``, escaped or hex bytes and ISO time
— not ``0.30000001192092896``, ``Decimal('12.30')`` or mojibake — and errors read as one line."""

from __future__ import annotations

import datetime
import decimal
import io
import json

import fastavro
import pyarrow as pa
import pytest

import kqlab.viz as viz
from kqlab.policy import loads_policy
from kqlab.records import RECORDS_SCHEMA
from kqlab.validate.replayer import Replayer
from kqlab.viz._people import error_line, number, render, text, tidy
from tests.viz.conftest import NOW

SCHEMA = {
    "type": "record", "name": "Payment", "namespace": "t",
    "fields": [
        {"name": "ratio", "type": "float"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                    "precision": 9, "scale": 2}},
        {"name": "blob", "type": "bytes"},
        {"name": "note", "type": "bytes"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "total", "type": "double"},
    ],
}
POLICY = """
kqlab: 1
name: payments
value: {{format: avro, wire: confluent, schemas: {{path: {path}}}}}
rules:
- {{id: ratio-small, kind: field_range, field: ratio, max: 0.1}}
"""


@pytest.fixture
def avro_sample(tmp_path):
    folder = tmp_path / "schemas"
    folder.mkdir()
    (folder / "1.avsc").write_text(json.dumps(SCHEMA))
    datum = {"ratio": 0.3, "amount": decimal.Decimal("12.30"), "blob": b"\x00\x01\xfe\xff",
             "note": b"hello\x00world",
             "at": datetime.datetime(2025, 11, 21, 4, 40, tzinfo=datetime.UTC),
             "total": 0.1 + 0.2}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(SCHEMA), datum)
    value = b"\x00" + (1).to_bytes(4, "big") + buf.getvalue()
    n = 3
    table = pa.table({
        "topic": ["payments"] * n, "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(n), pa.int64()), "timestamp": pa.array([NOW - 1000] * n),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.array([b"\xff\xfe\x00k", b"plain-key", None], pa.binary()),
        "value": pa.array([value] * n, pa.binary()),
        "headers": pa.array([[]] * n, RECORDS_SCHEMA.field("headers").type),
        "batch_offset": pa.array(range(n), pa.int64()),
        "batch_index": pa.array([0] * n, pa.int32()),
    }, schema=RECORDS_SCHEMA)
    return table, loads_policy(POLICY.format(path=folder))


def test_an_avro_record_reads_for_people(avro_sample):
    table, policy = avro_sample
    r = Replayer(table, framing="single", now=NOW)
    v = r.run(policy)
    d = viz.record_detail(v, r, partition=0, offset=0, policy=policy)
    shown = d.value_text
    assert '"ratio": 0.3,' in shown and "0.30000001" not in shown  # float32 as float32
    assert '"amount": 12.30,' in shown and "Decimal" not in shown  # a decimal as a decimal
    assert '"blob": hex 00 01 fe ff' in shown  # binary as hex
    assert '"note": b"hello\\x00world"' in shown  # mostly text: escaped
    assert '"at": 2025-11-21T04:40:00+00:00' in shown
    assert '"total": 0.3' in shown  # 0.1 + 0.2 without its noise
    card = d.to_html()
    value_part = card.split("<h4>Value</h4>")[1].split("<h4>")[0]
    assert "\ufffd" not in card and "0.30000001" not in value_part and "12.30" in value_part
    # the data keeps the exact values
    assert d.value["amount"] == decimal.Decimal("12.30") and d.value["blob"] == b"\x00\x01\xfe\xff"
    # a binary key is escaped, not decoded into replacement characters
    assert d.key == b"\xff\xfe\x00k" and d.key_text == 'hex ff fe 00 6b'
    assert viz.record_detail(v, r, partition=0, offset=1, policy=policy).key_text == \
        '"plain-key"'
    # the failure message quotes the float32 widened; the card shows it without the noise
    msg = d.failures[0]["message"]
    assert "0.30000001192092896" in msg and tidy(msg) != msg and "0.300000011920929" in tidy(msg)


def test_raw_bytes_are_not_mojibake(avro_sample):
    table, _ = avro_sample
    r = Replayer(table, framing="single", now=NOW)
    raw = loads_policy("kqlab: 1\nname: raw\n")  # value: bytes, nothing decoded
    v = r.run(raw)
    d = viz.record_detail(v, r, partition=0, offset=0, policy=raw)
    assert isinstance(d.value, bytes) and d.value_text.startswith(("hex ", 'b"'))
    assert "\ufffd" not in d.to_html()


def test_an_undecodable_value_is_one_line(avro_sample, tmp_path):
    table, policy = avro_sample
    broken = table.set_column(table.schema.get_field_index("value"), "value",
                              pa.array([b"\x00\x00\x00\x00\x01\x07"] * 3, pa.binary()))
    r = Replayer(broken, framing="single", now=NOW)
    d = viz.record_detail(r.run(policy), r, partition=0, offset=0, policy=policy)
    assert d.value_error and "\n" not in d.value_error and "Traceback" not in d.value_error


@pytest.mark.parametrize(("value", "single", "want"), [
    (0.1 + 0.2, False, "0.3"), (0.30000001192092896, True, "0.3"), (1 / 3, False,
                                                                    "0.3333333333333333"),
    (-24.610000000000003, False, "-24.61"), (1e-7, False, "1e-07"), (2.0, False, "2.0"),
    (float("inf"), False, "Infinity"), (12345678.9, True, "12345679.0"),
])
def test_numbers(value, single, want):
    assert number(value, single=single) == want
    if not single and want not in ("Infinity",):
        assert abs(float(number(value)) - value) <= 2 * abs(value) * 2**-52


def test_render_and_text():
    assert text({"a": [1, None, True], "b": "x"}) == '{"a": [1, null, true], "b": "x"}'
    assert text(decimal.Decimal("1E+2")) == "100"
    assert text(b"") == 'b""' and text(bytes(range(100))).endswith("… (100 bytes)")
    assert render({"f": 0.30000001192092896}, pa.struct([("f", pa.float32())]),
                  indent=None) == '{"f": 0.3}'
    assert render([0.30000001192092896], pa.list_(pa.float32()), indent=None) == "[0.3]"
    assert render({}, indent=2) == "{}"


def test_errors_are_one_line():
    assert error_line(ValueError("first\nsecond")) == "first"
    assert error_line(KeyError("schema 7")) == "missing 'schema 7'"
    assert error_line(RuntimeError()) == "runtime error"
    trace = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom"
    assert error_line(trace) == "ValueError: boom"
    assert len(error_line("x" * 1000)) == 300


def test_durations_read_as_protobuf_writes_them():
    """A Protobuf ``Duration`` is decoded as Arrow ``duration[ns]`` (a pandas Timedelta on
    the way out): shown as ``90.000000005s``, not ``0 days 00:01:30.000000005``."""
    import datetime

    import pyarrow as pa

    from kqlab.viz._people import render

    ns = pa.array([90_000_000_005, -1_500_000_000, 0], pa.duration("ns")).to_pylist()
    assert [render(v) for v in ns] == ["90.000000005s", "-1.5s", "0s"]
    assert render({"ttl": datetime.timedelta(hours=1)}, indent=None) == '{"ttl": 3600s}'
