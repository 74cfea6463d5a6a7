"""Shared fixtures: a fresh ``mock://`` Schema Registry per test and Confluent-framed values."""

from __future__ import annotations

import io
import struct
import uuid

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema

from kqlab.serde import registry_client

ORDER_SCHEMA = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def avro_bytes(schema, record) -> bytes:
    """Schemaless Avro encoding by fastavro's writer (the reference encoder)."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def framed(schema_id: int, payload: bytes) -> bytes:
    """Confluent wire format: magic byte 0, big-endian schema id, payload."""
    return struct.pack(">bI", 0, schema_id) + payload


@pytest.fixture
def registry():
    """(url, client) of an empty mock registry nobody else uses."""
    url = f"mock://kqlab-test-{uuid.uuid4().hex[:8]}"
    return url, registry_client(url)


def register(client, subject: str, schema) -> int:
    """Register an Avro schema with the real client API; returns its id."""
    import orjson

    text = schema if isinstance(schema, str) else orjson.dumps(schema).decode()
    return client.register_schema(subject, Schema(text, "AVRO"))
