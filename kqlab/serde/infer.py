"""Guessing how a topic's keys or values are encoded, from the bytes of a sample.

``kqlab init`` starts a policy for a topic nobody has described yet, so it needs the
``key:``/``value:`` formats before any rule can read a field.  :func:`infer_format` looks at
one binary column (keys or values) and answers with a :class:`FormatGuess`: the policy's
``format``/``wire``/``schemas`` plus the evidence, in words and counts, that the starter
policy's comments repeat.

What is read, in order:

1. **Confluent framing** — every present value at least 5 bytes long and starting with the
   magic byte 0 (:func:`~kqlab.serde.wire.parse_wire`); a JSON or UTF-8 text never starts
   with a NUL byte, so this is unambiguous.  The schema ids are then looked up in the schema
   registry when one is named (confluent-kafka's own client, :func:`registry_client`): its
   schema type says Avro, JSON Schema or Protobuf, and the subject is the one the ids are
   registered under (``<topic>-key``/``<topic>-value`` first: Confluent's default
   TopicNameStrategy).  Without a registry, payloads that parse as JSON are JSON Schema
   framed; anything else (Avro or Protobuf binary) cannot be decoded, and the guess says to
   name the registry.
2. **JSON** — at least half of the present values parse as a JSON object or array (a key
   ``"12345"`` parses as a number but is an identifier: text).  The rest are exactly what
   the implicit ``decodable`` rule will reject, so the evidence names the first of them.
3. **Text** — every present value is valid UTF-8: ``string``.
4. Otherwise ``bytes``; a column with no present value is ``none`` for keys (no key) and
   ``bytes`` for values (tombstones only).

Only the first :data:`MAX_VALUES` present values are parsed one by one (the framing check is
vectorised over all of them): enough to tell formats apart, bounded on any sample.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from kqlab.serde.schema_errors import SchemaSourceError
from kqlab.serde.wire import HEADER_SIZE, as_binary, parse_wire

__all__ = ["MAX_VALUES", "FormatGuess", "infer_format"]

#: present values parsed one by one to tell JSON from text from bytes
MAX_VALUES = 5000
#: the registry's schema types, as the policy's formats name them
_SCHEMA_TYPES = {"AVRO": "avro", "JSON": "json", "PROTOBUF": "protobuf"}


@dataclass(frozen=True, slots=True, kw_only=True)
class FormatGuess:
    """How one column (``role``: ``key`` or ``value``) is encoded, and why kqlab thinks so.

    ``format``/``wire``/``registry``/``subject`` are what the policy's format section gets;
    ``evidence`` says what was counted; ``schema_ids`` are the ids of framed values with
    their counts; ``notes`` what the user should know (an undecodable framing, a subject not
    found).
    """

    role: str
    format: str
    wire: str = "raw"
    registry: str | None = None
    subject: str | None = None
    evidence: str = ""
    present: int = 0
    parsed: int = 0
    schema_ids: dict[int, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_format(self) -> dict[str, Any]:
        """The policy's ``key:``/``value:`` section (plain data, defaults left out)."""
        out: dict[str, Any] = {"format": self.format}
        if self.wire != "raw":
            out["wire"] = self.wire
        if self.registry:
            out["schemas"] = {"registry": self.registry,
                              **({"subject": self.subject} if self.subject else {})}
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``kqlab init --json``."""
        return {"role": self.role, **self.to_format(), "evidence": self.evidence,
                "present": self.present, "parsed": self.parsed,
                "schema_ids": {str(k): v for k, v in sorted(self.schema_ids.items())},
                "notes": list(self.notes)}


def infer_format(values: pa.Array | pa.ChunkedArray, role: str, *, topic: str | None = None,
                 registry: str | None = None,
                 registry_config: Mapping[str, Any] | None = None) -> FormatGuess:
    """The format of ``values`` (a records table's ``key`` or ``value`` column).

    ``registry`` (a Schema Registry URL, ``mock://`` for an in-process one) is asked about
    the schema ids of framed values; ``topic`` picks the subject to prefer.  Raises
    :class:`~kqlab.serde.SchemaSourceError` when the registry cannot be reached or does not
    know an id the sample carries (the policy would decode nothing).
    """
    if role not in ("key", "value"):
        raise ValueError(f"role is 'key' or 'value', not {role!r}")
    arr = as_binary(values)
    present = int(len(arr) - arr.null_count)
    if present == 0:
        return FormatGuess(role=role, format="none" if role == "key" else "bytes",
                           evidence=f"no record of {len(arr):,} has a {role}")
    info = parse_wire(arr)
    framed = info.framed.to_numpy(zero_copy_only=False).astype(bool)
    if int(framed.sum()) == present:
        ids = info.schema_id.to_numpy(zero_copy_only=False)[framed]
        counts = {int(i): int(c) for i, c in zip(*np.unique(ids, return_counts=True),
                                                    strict=True)}
        return _framed(arr, role, present, counts, topic, registry, registry_config)
    sample = [v for v in arr.slice(0, _window(arr)).to_pylist() if v is not None]
    return _unframed(role, present, sample)


def _window(arr: pa.Array) -> int:
    """How many leading rows hold the first :data:`MAX_VALUES` present values."""
    if not arr.null_count:
        return min(len(arr), MAX_VALUES)
    valid = np.cumsum(arr.is_valid().to_numpy(zero_copy_only=False))
    return int(np.searchsorted(valid, MAX_VALUES) + 1)


def _json_container(value: bytes) -> bool:
    import orjson

    try:
        return isinstance(orjson.loads(value), dict | list)
    except orjson.JSONDecodeError:
        return False


def _unframed(role: str, present: int, values: list[bytes]) -> FormatGuess:
    """JSON, text or bytes, from the first present values."""
    looked = len(values)
    ok = [_json_container(v) for v in values]
    n_json = sum(ok)
    if n_json and 2 * n_json >= looked:
        evidence = f"{n_json:,} of {looked:,} {role}s parse as JSON objects or arrays"
        if n_json < looked:
            first = next(i for i, good in enumerate(ok) if not good)
            bad = looked - n_json
            verb = "does" if bad == 1 else "do"
            evidence += (f"; {bad:,} {verb} not (the first: {_excerpt(values[first])})"
                         " — the implicit decodable rule rejects them")
        return FormatGuess(role=role, format="json", evidence=evidence, present=present,
                           parsed=n_json)
    text = 0
    for v in values:
        try:
            v.decode("utf-8")
            text += 1
        except UnicodeDecodeError:
            pass
    if text == looked:
        return FormatGuess(role=role, format="string", present=present, parsed=text,
                           evidence=f"{looked:,} {role}s are UTF-8 text, {n_json:,} of them "
                           "JSON objects or arrays")
    return FormatGuess(role=role, format="bytes", present=present, parsed=0,
                       evidence=f"{looked - text:,} of {looked:,} {role}s are neither JSON "
                       "nor UTF-8 text (binary)")


def _excerpt(value: bytes) -> str:
    text = value[:40].decode("utf-8", "replace").replace("\n", " ").replace("\r", "")
    return repr(text + ("…" if len(value) > 40 else ""))


def _framed(arr: pa.Array, role: str, present: int, counts: dict[int, int], topic: str | None,
            registry: str | None, registry_config: Mapping[str, Any] | None) -> FormatGuess:
    """A Confluent-framed column: the registry's schema types, or JSON payloads."""
    ids = ", ".join(f"{i} ({c:,})" for i, c in sorted(counts.items()))
    evidence = (f"all {present:,} {role}s start with the Confluent magic byte 0 and a schema "
                f"id: {ids}")
    if registry:
        fmt, subject, notes = _registry_types(role, counts, topic, registry, registry_config)
        return FormatGuess(role=role, format=fmt, wire="confluent", registry=registry,
                           subject=subject, evidence=evidence + f"; registry {registry}: "
                           f"{fmt}" + (f", subject {subject}" if subject else ""),
                           present=present, parsed=present, schema_ids=counts, notes=notes)
    payloads = [v[HEADER_SIZE:] for v in arr.slice(0, _window(arr)).to_pylist()
                if v is not None]
    n_json = sum(_json_container(p) for p in payloads)
    if n_json == len(payloads):
        return FormatGuess(role=role, format="json", wire="confluent", present=present,
                           parsed=n_json, schema_ids=counts,
                           evidence=evidence + "; every payload is JSON (JSON Schema "
                           "serializer)")
    note = (f"the {role}s are Confluent-framed Avro or Protobuf (schema ids {ids}): name the "
            "schema registry (--registry URL) to decode them; the policy checks only sizes, "
            "presence and headers until then")
    return FormatGuess(role=role, format="bytes", present=present, schema_ids=counts,
                       evidence=evidence + "; the payloads are binary and no registry was "
                       "named", notes=(note,))


def _registry_types(role: str, counts: dict[int, int], topic: str | None, registry: str,
                    config: Mapping[str, Any] | None) -> tuple[str, str | None, tuple[str, ...]]:
    """(format, subject, notes) of the schema ids, as the registry knows them."""
    from kqlab.serde.schemas import registry_client

    client = registry_client(registry, config)
    types: Counter[str] = Counter()
    subjects: Counter[str] = Counter()
    for schema_id, n in counts.items():
        try:
            schema = client.get_schema(schema_id)
            names = _subjects_of(client, schema_id, schema, mock=registry.startswith("mock://"))
        except Exception as exc:  # the client raises its own error types, or a socket's
            status = getattr(exc, "http_status_code", None)
            if status == 404:
                raise SchemaSourceError(f"registry {registry} has no schema id {schema_id}, "
                                        f"which {n:,} {role}(s) of the sample carry — is it "
                                        "the registry their producer used?") from exc
            raise SchemaSourceError(f"cannot read schema id {schema_id} from registry "
                                    f"{registry}: {exc}") from exc
        types[_SCHEMA_TYPES.get(schema.schema_type or "AVRO", "avro")] += n
        for name in names:
            subjects[name] += n
    fmt = types.most_common(1)[0][0]
    notes: list[str] = []
    if len(types) > 1:
        notes.append(f"the {role}s' schema ids are of several types ({dict(types)}): "
                     f"decoded as {fmt}, the others fail decoding")
    preferred = f"{topic}-{role}" if topic else None
    subject = preferred if preferred in subjects else (
        subjects.most_common(1)[0][0] if subjects else None)
    if subject is None:
        notes.append(f"registry {registry} names no subject for the {role}s' schema ids")
    return fmt, subject, tuple(notes)


def _subjects_of(client: Any, schema_id: int, schema: Any, *, mock: bool) -> list[str]:
    """The subjects ``schema_id`` is registered under.  confluent-kafka's mock client has no
    ``get_subjects_by_schema_id`` (it sends HTTP requests to ``mock://``, retried for
    seconds): there every subject is asked whether it holds the schema (``lookup_schema``)."""
    if not mock:
        return list(client.get_subjects_by_schema_id(schema_id) or [])
    names = []
    for subject in client.get_subjects():
        try:
            if client.lookup_schema(subject, schema).schema_id == schema_id:
                names.append(subject)
        except Exception:  # a subject without this schema (404): not its subject
            continue
    return names
