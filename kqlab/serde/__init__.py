"""Key/value decoding into Arrow columns: Confluent wire format, Avro, JSON, strings.

``decode(values, fmt, resolver)`` turns a records table's ``key`` or ``value`` column into a
:class:`DecodedColumn` (values + one error message per undecodable record); writer schemas
come from a :class:`SchemaResolver` (Schema Registry or ``.avsc`` folder); a
:class:`DecodeCache` decodes each sample once.  ``decode_datums(values, fmt, resolver)`` is the
same decoding read per record as the Python datum a producer would serialize (or the reason
there is none), for the export round trips.
"""

from kqlab.serde.avro_arrow import ArrowMapping, arrow_type, avro_to_arrow
from kqlab.serde.cache import DecodeCache, array_fingerprint
from kqlab.serde.datums import Datums, decode_datums
from kqlab.serde.decode import DecodeConfigError, DecodedColumn, DecodeStage, decode
from kqlab.serde.schemas import (
    ParsedSchema,
    SchemaNotFound,
    SchemaResolver,
    SchemaSourceError,
    clear_registry_clients,
    registry_client,
)
from kqlab.serde.wire import WireInfo, message_indexes, message_indexes_length, parse_wire

__all__ = [
    "ArrowMapping",
    "Datums",
    "DecodeCache",
    "DecodeConfigError",
    "DecodeStage",
    "DecodedColumn",
    "ParsedSchema",
    "SchemaNotFound",
    "SchemaResolver",
    "SchemaSourceError",
    "WireInfo",
    "array_fingerprint",
    "arrow_type",
    "avro_to_arrow",
    "clear_registry_clients",
    "decode",
    "decode_datums",
    "message_indexes",
    "message_indexes_length",
    "parse_wire",
    "registry_client",
]
