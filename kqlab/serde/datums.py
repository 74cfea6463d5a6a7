"""Per record, the Python datum a producer would hand its serializer — or why there is none.

Export round trips (:mod:`kqlab.export.fidelity`) prove a data contract by serializing the
sample again with the target's own serializer (confluent-kafka's ``AvroSerializer`` or
``JSONSerializer``), which takes Python objects, not bytes.  Those objects must come from the
*same* decoding the replay judged: were the round trip to decode with its own rules, a value
the replay rejects as undecodable could reach the serializer, or the other way round, and
the two would disagree for reasons that have nothing to do with the contract.

:func:`decode_datums` is therefore :func:`kqlab.serde.decode.decode` itself (one
implementation, :func:`~kqlab.serde.decode.decode_pass`), read for its datums: a record has a
datum exactly when ``decode()`` gives it no error, and a failing record carries
``decode()``'s message word for word, plus the stage that failed.

The datum per format:

- ``json`` — the object ``orjson.loads`` returns for the payload (``dict``, ``list``, ``str``,
  ``int``, ``float``, ``bool``; a JSON ``null`` document is ``None`` *without* an error).
- ``avro`` — the datum fastavro's ``schemaless_reader`` returns with the writer schema:
  records as ``dict``, enums as their symbol, ``bytes``/``fixed`` as ``bytes``, decimals as
  ``Decimal``, timestamps as aware ``datetime`` (UTC), dates/times as ``date``/``time``, uuids
  as ``UUID``, unions as the branch value — the types ``AvroSerializer`` (fastavro's writer)
  accepts back.
- ``string`` — the ``str``; ``bytes`` — the payload ``bytes`` (after the header with
  ``wire: confluent``); ``none`` — the raw value ``bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from kqlab.serde.decode import DecodeStage, decode_pass
from kqlab.serde.schemas import SchemaResolver

__all__ = ["Datums", "decode_datums"]


@dataclass(frozen=True, slots=True, eq=False)
class Datums:
    """One entry per record of the decoded column.

    ``values[i]`` is the record's datum (``None`` for a null input, a JSON ``null`` document
    and every failure); ``errors[i]`` is ``decode()``'s message for it (``None``: decoded, or
    null); ``stages[i]`` the :data:`~kqlab.serde.decode.DecodeStage` that failed; ``null[i]``
    is True where the input itself was null (no key / tombstone), which tells a tombstone from
    a JSON ``null`` document.
    """

    values: list[object]
    errors: list[str | None]
    stages: list[DecodeStage | None]
    null: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    @property
    def error_count(self) -> int:
        """How many records have no datum because they failed to decode."""
        return sum(e is not None for e in self.errors)


def decode_datums(values: pa.Array | pa.ChunkedArray, fmt: Any,
                  resolver: SchemaResolver | None = None, *,
                  arrow_type: pa.DataType | None = None) -> Datums:
    """Each record's serializer input, decoded exactly as :func:`~kqlab.serde.decode` does.

    Parameters are :func:`~kqlab.serde.decode.decode`'s (``fmt`` a
    :class:`~kqlab.policy.model.Format`; ``resolver`` built from ``fmt.schemas`` when omitted;
    ``arrow_type`` JSON only).  Bad data never raises; bad configuration raises as there.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from kqlab.policy.model import Format
    >>> d = decode_datums(pa.array([b'{"a": 1}', b"null", b'{"a": ', None]),
    ...                   Format(format="json"))
    >>> d.values, d.stages, d.null.tolist()
    ([{'a': 1}, None, None, None], [None, None, 'payload', None], [False, False, False, True])
    >>> d.errors[2][:13]
    'invalid JSON:'
    """
    run = decode_pass(values, fmt, resolver, arrow_type=arrow_type)
    column = run.column
    # formats whose Arrow value is the datum keep no list of their own (see DecodePass)
    datums = list(run.datums) if run.datums is not None else column.values.to_pylist()
    return Datums(datums, column.errors.to_pylist(), list(run.stages), _input_nulls(values))


def _input_nulls(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """True where the input value is null (decoded columns also null failures: not those)."""
    if isinstance(values, pa.ChunkedArray):
        return np.concatenate([np.zeros(0, dtype=bool)] + [
            np.asarray(c.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            for c in values.chunks])
    return np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)
