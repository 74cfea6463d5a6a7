"""The two ways a schema lookup fails, apart from the resolver, so every schema loader
(Avro and JSON in :mod:`kqlab.serde.schemas`, Protobuf in :mod:`kqlab.serde.protobuf_schemas`)
raises the same types without importing the resolver that calls it."""

from __future__ import annotations

from kqlab.errors import KqlabError

__all__ = ["SchemaNotFound", "SchemaSourceError"]


class SchemaNotFound(KqlabError, LookupError):
    """No schema with this id (or for this subject) in the schema source."""


class SchemaSourceError(KqlabError):
    """The schema source itself is unusable: missing folder, unreachable registry, bad config."""
