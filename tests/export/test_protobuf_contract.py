"""The Confluent data contract of a Protobuf subject, proven by confluent-kafka's own
ProtobufSerializer and CEL rule executor on a sample written by protobuf's generated classes."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kqlab.export.confluent import build, register_contract
from kqlab.export.fidelity import roundtrip_confluent
from kqlab.policy import loads_policy
from kqlab.records import RECORDS_SCHEMA
from tests.serde.protobuf_helpers import generated, write_protos

NOW = 1_700_000_000_000

_RULES = """
- {id: qty-range, kind: field_range, field: qty, min: 1, max: 100}
- {id: status-in, kind: field_in, field: status, values: [PLACED, SHIPPED]}
- {id: status-re, kind: field_regex, field: status, pattern: '^SH'}
- {id: id-re, kind: field_regex, field: id, pattern: '^o-[0-9]+$'}
- {id: id-len, kind: field_length, field: id, min: 1, max: 4}
- {id: total-set, kind: field_not_null, field: total}
- {id: cur-len, kind: field_length, field: total.currency, min: 3}
- {id: score-range, kind: field_range, field: score, min: 0.5}
- {id: qty-type, kind: field_type, field: qty, type: string}
- {id: tags-len, kind: field_length, field: tags, max: 2}
- {id: email-set, kind: field_not_null, field: email}
- {id: cel-qty, kind: cel, expr: 'value.qty < 400'}
- {id: cel-status, kind: cel, expr: 'value.status != "STATUS_UNSPECIFIED"'}
"""


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    root = write_protos(tmp_path_factory.mktemp("protos"))
    mods = generated(root, tmp_path_factory.mktemp("gen"),
                     ["kqt/common/money.proto", "kqt/orders.proto"])
    return root, mods["kqt/orders.proto"]


def _orders(o):
    """Messages hitting every rule's edge: defaults, unset optionals, an unnamed enum number."""
    def order(**kw):
        m = o.Order(**{k: v for k, v in kw.items() if k not in ("total", "placed")})
        if "total" in kw:
            m.total.currency, m.total.units = kw["total"]
        if "placed" in kw:
            m.placed_at.seconds = kw["placed"]
        return m

    return [order(id="o-1", qty=3, status=o.SHIPPED, total=("EUR", 5), email="a@b.c", score=1.5),
            order(id="", qty=0),
            order(id="bad id", qty=-4, status=o.PLACED, total=("", 0), tags=["x"]),
            order(id="o-4", qty=500, status=o.STATUS_UNSPECIFIED, phone="123", score=0.0),
            None, None, order(id="o-7", qty=7, status=7),
            order(id="o-8", qty=2, placed=1_700_000_000, tags=["a", "b", "c"])]


def _replayer(values):
    from kqlab.validate.replayer import Replayer

    n = len(values)
    table = pa.table({
        "topic": ["orders-pb"] * n, "partition": [0] * n, "offset": list(range(n)),
        "timestamp": [NOW] * n, "timestamp_type": [0] * n, "key": [None] * n,
        "value": values, "headers": [[] for _ in range(n)],
        "batch_offset": list(range(n)), "batch_index": [0] * n}, schema=RECORDS_SCHEMA)
    return Replayer(table, framing="single", now=NOW)


def _policy(value: str, rules: str = _RULES):
    return loads_policy(f"kqlab: 1\nname: pb-orders\ntopics: {{names: [orders-pb]}}\n"
                        f"key: {{format: none}}\nvalue: {value}\nrules:{rules}", "pb")


def test_protobuf_contract_rules_proven_by_the_protobuf_serializer(pb):
    """Every field kind on proto3 defaults, unset optionals and messages, oneofs, an enum by
    name and a number without one: the serializer refuses exactly what the replay rejects,
    rule by rule; a CEL rule comparing an enum with its name shows the executor's difference
    (enums are numbers there) with its cause, as its row says."""
    root, o = pb
    msgs = _orders(o)
    values = [m.SerializeToString() if m is not None else None for m in msgs]
    values[4] = b"\xff\xff"  # does not parse: excluded, never serialized
    policy = _policy(f"{{format: protobuf, schemas: {{path: {root}, message: kqt.Order}}}}")
    ex = build(policy)
    assert ex.data["register"]["schemaType"] == "PROTOBUF"
    assert [r["name"] for r in ex.data["register"]["references"]] == ["kqt/common/money.proto"]
    rows = {f.rule: f for f in ex.fidelity}
    assert rows["status-in"].status == "exact" and "numbers" in rows["status-in"].how
    assert rows["status-re"].status == "approximate"
    assert "enum as its number" in rows["cel-status"].how
    rt = roundtrip_confluent(policy, _replayer(values))
    assert rt.ran and rt.serializer == "ProtobufSerializer", rt.reason
    assert rt.excluded == {"undecodable or unknown schema id (cannot be serialized)": 1,
                           "null value (never serialized)": 1}
    disagree = {name: c for name, c in rt.checks.items() if not c.equal}
    assert set(disagree) == {"cel-status"}, {k: c.to_dict() for k, c in disagree.items()}
    # the records whose status is a named non-default or unnamed enum: cel-python raises
    assert [c[2] for c in disagree["cel-status"].only_target] == [0, 2, 6]
    assert disagree["cel-status"].only_replay == []
    # each rule refused something: the agreement is not vacuous
    for name, c in rt.checks.items():
        assert c.expected > 0 or name in ("cel-status",), name


def test_protobuf_registry_subject_with_references(pb):
    """A registry subject written by confluent-kafka's serializer (a reference for the
    import): the contract carries the reference, registers in a fresh registry, and the
    round trip (values framed by the serializer, re-read into the contract's class) agrees."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from kqlab.serde.schemas import registry_client

    _, o = pb
    url = "mock://kqt-protobuf-contract"
    client = registry_client(url)
    ser = ProtobufSerializer(o.Order, client, {"use.deprecated.format": False})
    ctx = SerializationContext("orders-pb", MessageField.VALUE)
    msgs = [m for m in _orders(o) if m is not None]
    values = [ser(m, ctx) for m in msgs]
    policy = _policy(f"{{format: protobuf, wire: confluent, schemas: {{registry: '{url}'}}}}",
                     "\n- {id: qty-range, kind: field_range, field: qty, min: 1, max: 100}"
                     "\n- {id: status-in, kind: field_in, field: status, values: [SHIPPED]}")
    ex = build(policy)
    assert ex.data["register"]["references"] == [
        {"name": "kqt/common/money.proto", "subject": "kqt/common/money.proto", "version": 1}]
    assert "confluent/orders-pb-value.references.json" in ex.files
    fresh = registry_client("mock://kqt-protobuf-contract-fresh")
    assert register_contract(fresh, ex) > 0
    assert fresh.get_latest_version("kqt/common/money.proto").version == 1
    rt = roundtrip_confluent(policy, _replayer(values))
    assert rt.ran and rt.equal, rt.to_dict()
    assert rt.checks["qty-range"].expected == 3 and rt.checks["status-in"].expected == 5


def test_kroxylicious_schema_rule_for_protobuf_says_it_is_unverified(pb):
    from kqlab.export.kroxylicious import build as krox

    root, _ = pb
    policy = _policy(f"{{format: protobuf, schemas: {{path: {root}, message: kqt.Order}}}}",
                     "\n- {id: decodes, kind: decodable}")
    ex = krox(policy, apicurio={"url": "http://apicurio:8080", "id": 7})
    assert "schemaType: PROTOBUF" in ex.files[next(f for f in ex.files if "proxy" in f)]
    row = next(f for f in ex.fidelity if f.rule == "decodes")
    assert row.status == "approximate" and "not verified here" in row.how
