"""SchemaResolver over confluent-kafka's mock registry and over ``.avsc`` folders."""

from __future__ import annotations

import pickle

import orjson
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference

from kqlab.errors import KqlabError
from kqlab.policy.model import SchemaSource
from kqlab.serde import (
    SchemaNotFound,
    SchemaResolver,
    SchemaSourceError,
    clear_registry_clients,
    registry_client,
)

from .conftest import ORDER_SCHEMA, register


def test_registry_schema_by_id(registry):
    url, client = registry
    sid = register(client, "orders-value", ORDER_SCHEMA)
    r = SchemaResolver.from_source(SchemaSource(registry=url, subject="orders-value"))
    ps = r.schema(sid)
    assert ps.schema_id == sid
    assert ps.arrow_type == pa.struct([("id", pa.int64()), ("customer", pa.string()),
                                       ("amount", pa.float64()), ("note", pa.string())])
    assert "__fastavro_parsed" in ps.parsed
    assert r.schema(sid) is ps  # cached per resolver


def test_registry_unknown_id_names_id_and_registry(registry):
    url, _ = registry
    r = SchemaResolver(registry=url)
    with pytest.raises(SchemaNotFound, match=f"schema id 7 not found in {url}") as e:
        r.schema(7)
    assert isinstance(e.value, KqlabError)
    assert not r.is_registered(7)


def test_is_registered_and_latest_by_subject(registry):
    url, client = registry
    v1 = register(client, "orders-value", ORDER_SCHEMA)
    v2_schema = dict(ORDER_SCHEMA, fields=[*ORDER_SCHEMA["fields"],
                                           {"name": "qty", "type": "int", "default": 1}])
    v2 = register(client, "orders-value", v2_schema)
    other = register(client, "payments-value", '"string"')
    r = SchemaResolver(registry=url, subject="orders-value")
    assert r.is_registered(v1, "orders-value") and r.is_registered(v2, "orders-value")
    assert not r.is_registered(other, "orders-value")
    assert r.is_registered(other)  # any subject
    assert not r.is_registered(v1, "no-such-subject")
    latest = r.latest()
    assert (latest.schema_id, latest.version, latest.subject) == (v2, 2, "orders-value")
    assert r.unframed().schema_id == v2
    with pytest.raises(SchemaNotFound, match="subject 'nope' not found"):
        r.latest("nope")


def test_non_avro_schema_is_not_found(registry):
    url, client = registry
    sid = client.register_schema("j-value", Schema('{"type": "object"}', "JSON"))
    with pytest.raises(SchemaNotFound, match=f"schema id {sid} in {url} is a JSON schema"):
        SchemaResolver(registry=url).schema(sid)


def test_schema_references_resolve(registry):
    url, client = registry
    customer = {"type": "record", "name": "Customer", "namespace": "shop",
                "fields": [{"name": "name", "type": "string"}]}
    register(client, "customer", customer)
    order = {"type": "record", "name": "Order", "namespace": "shop",
             "fields": [{"name": "who", "type": "shop.Customer"}]}
    sid = client.register_schema("orders-value", Schema(
        orjson.dumps(order).decode(), "AVRO",
        [SchemaReference("shop.Customer", "customer", 1)]))
    ps = SchemaResolver(registry=url).schema(sid)
    assert ps.arrow_type == pa.struct([("who", pa.struct([("name", pa.string())]))])


def test_shared_mock_clients(registry):
    url, client = registry
    assert registry_client(url) is client
    clear_registry_clients()
    assert registry_client(url) is not client


def test_explicit_client(registry):
    _, client = registry
    sid = register(client, "s", '"long"')
    r = SchemaResolver(client=client)
    assert r.schema(sid).arrow_type == pa.int64()
    assert r.origin.startswith("mock://")


def test_unreachable_registry_is_a_source_error():
    r = SchemaResolver(registry="http://127.0.0.1:9", config={"max.retries": 0,
                                                              "timeout": 2})
    with pytest.raises(SchemaSourceError, match=r"http://127\.0\.0\.1:9"):
        r.schema(1)


def write(folder, name, schema):
    (folder / name).write_text(schema if isinstance(schema, str) else orjson.dumps(
        schema).decode())


def test_folder_ids_from_file_names(tmp_path):
    write(tmp_path, "3.avsc", ORDER_SCHEMA)
    write(tmp_path, "4.avsc", '"string"')
    r = SchemaResolver(path=tmp_path)
    assert r.schema(3).arrow_type.num_fields == 4
    assert r.schema(4).arrow_type == pa.string()
    assert r.is_registered(3) and not r.is_registered(5)
    with pytest.raises(SchemaNotFound, match=r"schema id 5 not found in .* \(no 5.avsc\)"):
        r.schema(5)


def test_folder_unframed_schema(tmp_path):
    write(tmp_path, "order.avsc", ORDER_SCHEMA)
    write(tmp_path, "1.avsc", '"long"')
    r = SchemaResolver(path=tmp_path)
    assert r.unframed().schema_id is None
    assert r.unframed().arrow_type.num_fields == 4
    assert SchemaResolver(path=tmp_path / "order.avsc").unframed().arrow_type.num_fields == 4
    write(tmp_path, "other.avsc", '"string"')
    with pytest.raises(SchemaSourceError, match="name one with subject"):
        SchemaResolver(path=tmp_path).unframed()
    assert SchemaResolver(path=tmp_path, subject="other").unframed().arrow_type == pa.string()
    assert SchemaResolver(path=tmp_path).latest("other").arrow_type == pa.string()


def test_folder_errors(tmp_path):
    with pytest.raises(SchemaSourceError, match="does not exist"):
        SchemaResolver(path=tmp_path / "missing")
    with pytest.raises(SchemaSourceError, match=r"no \.avsc or \.proto files"):
        SchemaResolver(path=tmp_path)
    write(tmp_path, "1.avsc", "{not json")
    with pytest.raises(SchemaSourceError, match=r"1\.avsc is not a valid Avro schema"):
        SchemaResolver(path=tmp_path).schema(1)


def test_exactly_one_source():
    with pytest.raises(SchemaSourceError, match="exactly one"):
        SchemaResolver()
    with pytest.raises(SchemaSourceError, match="exactly one"):
        SchemaResolver(registry="mock://x", path="/tmp")


def test_resolver_pickles_as_its_source(tmp_path):
    write(tmp_path, "1.avsc", '"long"')
    r = pickle.loads(pickle.dumps(SchemaResolver(path=tmp_path)))
    assert r.schema(1).arrow_type == pa.int64()


def test_portable_resolver_ships_a_mock_registry_image(registry):
    """A mock registry lives in one process: its image answers like it elsewhere (Spark)."""
    from kqlab.serde.schemas import clear_registry_clients, portable_resolver

    url, client = registry
    base = {"type": "record", "name": "Base", "fields": [{"name": "id", "type": "string"}]}
    base_id = register(client, "base", base)
    ref = Schema(orjson.dumps({"type": "record", "name": "Order", "fields": [
        {"name": "base", "type": "Base"}]}).decode(), "AVRO",
        [SchemaReference("Base", "base", 1)])
    order_id = client.register_schema("orders-value", ref)
    v2 = register(client, "orders-value", ORDER_SCHEMA)
    original = SchemaResolver(registry=url, subject="orders-value")
    shipped = pickle.loads(pickle.dumps(portable_resolver(original)))
    clear_registry_clients()  # the "other process": the mock registry is gone
    try:
        assert SchemaResolver(registry=url).is_registered(base_id) is False
        assert shipped.ids("orders-value") == frozenset({order_id, v2})
        assert shipped.schema(order_id).arrow == original.schema(order_id).arrow
        assert shipped.latest().schema_id == v2
        assert shipped.is_registered(base_id, "base") and not shipped.is_registered(
            base_id, "orders-value")
        with pytest.raises(SchemaNotFound, match=f"schema id 999 not found in {url}"):
            shipped.schema(999)
        assert shipped.ids("nope") == frozenset()
    finally:
        clear_registry_clients()
    # a folder or a live registry address travels as it is
    assert portable_resolver(original) is not original
    folder = SchemaResolver.__new__(SchemaResolver)
    folder.registry = None
    assert portable_resolver(folder) is folder
