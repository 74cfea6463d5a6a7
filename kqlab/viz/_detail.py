"""One record under the microscope: its content, its bytes, its batch, every failure, and what
the producer would have been told — with the policy's sensitive data masked.

Only the one record (and its batch) is decoded and turned into Python objects; finding it in
the verdicts is an Arrow filter, so a detail costs the same on a million-record sample.

The card shows values for people (:mod:`kqlab.viz._people`): floats in their shortest form
(32-bit floats as 32-bit), decimals as decimals, bytes escaped or in hex — never decoded into
replacement characters — and a decoding error as one line.  ``to_dict`` keeps the data itself.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.validate.view import ViewError
from kqlab.viz._groups import SampleLike, sample_tables
from kqlab.viz._masking import MASK, Masker, masker
from kqlab.viz._people import error_line, render, tidy

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.policy.model import Policy
    from kqlab.serde.schemas import SchemaResolver
    from kqlab.validate.view import VerdictsView

__all__ = ["RecordDetail", "hexdump", "record_detail"]

#: raw bytes shown per key/value (a detail is for reading, not for copying payloads)
HEX_LIMIT = 1024


def hexdump(data: bytes | None, limit: int = HEX_LIMIT) -> str | None:
    """``xxd``-style hex of ``data`` (16 bytes a line, ASCII on the right), cut at ``limit``.

    Examples
    --------
    >>> print(hexdump(b"\\x00\\x00\\x00\\x00\\x01hi"))
    00000000  00 00 00 00 01 68 69                              |.....hi|
    """
    if data is None:
        return None
    lines = []
    for at in range(0, min(len(data), limit), 16):
        chunk = data[at:at + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {hexes:<47}  |{text}|")
    if len(data) > limit:
        lines.append(f"... {len(data) - limit:,} more bytes")
    return "\n".join(lines)


@dataclass
class RecordDetail:
    """Everything about one record (see :func:`record_detail`); ``masked`` says whether the
    policy's sensitive data was hidden."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    outcome: str
    key: Any
    key_hex: str | None
    value: Any
    value_hex: str | None
    value_error: str | None
    headers: list[tuple[str, str | None]]
    failures: list[dict[str, Any]]
    batch: dict[str, Any]
    producer_saw: dict[str, Any]
    masked: bool
    notes: list[str] = field(default_factory=list)
    #: the key and value as the card shows them (see :mod:`kqlab.viz._people`)
    key_text: str | None = None
    value_text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)

    def to_html(self) -> str:
        """A compact HTML card (notebooks render it via ``_repr_html_``; the report embeds it)."""
        esc = html.escape

        def pre(text: Any) -> str:
            if text is None:
                return "<i>null</i>"
            if not isinstance(text, str):
                text = orjson.dumps(text, option=orjson.OPT_INDENT_2, default=str).decode()
            return f"<pre>{esc(text)}</pre>"

        when = _iso(self.timestamp)
        rows = [("record", f"{self.topic}-{self.partition} @ {self.offset:,} "
                           f"(timestamp {self.timestamp}{f', {when}' if when else ''})"),
                ("outcome", self.outcome)]
        fails = "".join(f"<li><b>{esc(str(f['rule']))}</b> (code {f['code']} "
                        f"{esc(str(f['error_name'] or ''))}): {esc(str(tidy(f['message'])))}"
                        "</li>" for f in self.failures) or "<li>none</li>"
        key = self.key if self.key_text is None or self.key == MASK else self.key_text
        value = self.value if self.value_text is None or self.value == MASK \
            else self.value_text
        heads = "".join(f"<li>{esc(k)}: {esc(v) if v is not None else '<i>null</i>'}</li>"
                        for k, v in self.headers) or "<li>none</li>"
        body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in rows)
        saw = self.producer_saw
        notes = "".join(f"<p class='note'>{esc(n)}</p>" for n in self.notes)
        return (f"<div class='kqlab-record'><table>{body}</table>{notes}"
                f"<h4>Failures</h4><ul>{fails}</ul>"
                f"<h4>What the producer saw</h4>{pre(saw)}"
                f"<h4>Key</h4>{pre(key)}<h4>Value</h4>{pre(value)}"
                + (f"<p>decode error: {esc(self.value_error)}</p>" if self.value_error else "")
                + f"<h4>Headers</h4><ul>{heads}</ul>"
                f"<h4>Batch</h4>{pre(self.batch)}"
                f"<h4>Raw key</h4>{pre(self.key_hex)}<h4>Raw value</h4>{pre(self.value_hex)}"
                "</div>")

    def _repr_html_(self) -> str:
        return self.to_html()


def _iso(ms: int | None) -> str | None:
    """Epoch ms as ISO 8601 UTC (None when out of the calendar's range)."""
    import datetime

    if ms is None:
        return None
    try:
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def _one(table: pa.Table, mask: pa.Array) -> dict[str, Any] | None:
    rows = table.filter(mask)
    return rows.slice(0, 1).to_pylist()[0] if rows.num_rows else None


def _where(table: pa.Table, topic: str | None, partition: int, offset: int) -> pa.Array:
    cond = pc.and_(pc.equal(table.column("partition"), partition),
                   pc.equal(table.column("offset"), offset))
    if topic is not None:
        cond = pc.and_(cond, pc.equal(table.column("topic"), topic))
    return cond


def record_detail(verdicts: VerdictsView, sample: SampleLike | None, *, partition: int,
                  offset: int, topic: str | None = None, policy: Policy | None = None,
                  resolver: SchemaResolver | None = None, unmask: bool | None = None
                  ) -> RecordDetail:
    """The detail of the record at ``topic``/``partition``/``offset``.

    ``sample`` is what the verdicts were replayed from (a Sample, a Replayer or a records
    table); ``policy`` decodes key and value with its formats (``resolver`` for Avro
    schemas, built from the policy when omitted) and says what is sensitive.  Sensitive data
    is masked unless ``unmask=True`` or the session chose :func:`kqlab.viz.unmask`.
    """
    from kqlab.kafka.errors import error_for_code

    records, batches = sample_tables(sample)
    if records is None:
        raise ViewError("a record detail reads the record's bytes: pass sample= (the Sample, "
                        "records table or Replayer the verdicts came from)")
    found = verdicts.lookup(partition, offset, topic)
    if found is None:
        where = f"{topic}-{partition}" if topic else f"partition {partition}"
        raise ViewError(f"no record at offset {offset} of {where} in these verdicts")
    verdict, batch_verdict = found.record, found.batch
    topic = verdict["topic"]
    rec_mask = _where(records, topic, partition, offset)
    record_rows = records.filter(rec_mask)
    if not record_rows.num_rows:
        raise ViewError(f"the sample has no record {topic}-{partition}@{offset}: pass the "
                        "sample the verdicts were replayed from")
    record = record_rows.slice(0, 1)
    m = masker(policy, unmask)
    notes: list[str] = []

    def name_of(code: int) -> str | None:
        try:
            return error_for_code(code).name if code else None
        except KeyError:
            return None

    # -- content ------------------------------------------------------------------------------
    key_raw = record.column("key")[0].as_py()
    value_raw = record.column("value")[0].as_py()
    key, value, value_error, types = _decode(record, policy, resolver)
    if m.key:
        key = None if key_raw is None else MASK
    value = m.value(value)
    if m.value_bytes and value_error is not None and value_raw is not None:
        value = MASK  # undecodable: the sensitive fields cannot be located
    headers = [(h["key"], None if h["value"] is None else
                MASK if m.header(h["key"]) else h["value"].decode("utf-8", "replace"))
               for h in record.column("headers")[0].as_py() or []]
    key_hex = None if key_raw is None else (f"{MASK} ({len(key_raw)} bytes)" if m.key
                                            else hexdump(key_raw))
    value_hex = None if value_raw is None else (f"{MASK} ({len(value_raw)} bytes)"
                                                if m.value_bytes else hexdump(value_raw))
    if m.active:
        notes.append("sensitive data is masked (kqlab.viz.unmask() shows it for this session)")
    # -- failures and the batch ----------------------------------------------------------------
    failures = [{"rule": f["rule"], "code": f["code"], "error_name": name_of(f["code"] or 0),
                 "message": m.message(f["rule"], f["message"])}
                for f in verdict["failures"] or []]
    batch: dict[str, Any] = {"batch_offset": verdict["batch_offset"],
                             "batch_index": verdict["batch_index"]}
    if batches is not None:
        sb = _one(batches, _where_batch(batches, topic, partition, verdict["batch_offset"]))
        if sb is not None:
            batch.update({k: sb.get(k) for k in (
                "record_count", "size_bytes", "compression", "magic", "producer_id",
                "producer_epoch", "base_sequence", "is_transactional", "framing")})
    secrets = _batch_secrets(found.batch_failures, m)
    saw: dict[str, Any] = {"error_code": 0, "error_name": "NONE", "error_message": None,
                           "record_errors": []}
    if batch_verdict is not None:
        errors = [{"batch_index": e["batch_index"], "message": _scrub(e["message"], secrets)}
                  for e in batch_verdict["record_errors"] or []]
        saw = {"error_code": batch_verdict["error_code"],
               "error_name": batch_verdict["error_name"],
               "error_message": _scrub(batch_verdict["error_message"], secrets),
               "record_errors": errors,
               "this_record": [e["message"] for e in errors
                               if e["batch_index"] == verdict["batch_index"]],
               "producer_action": batch_verdict["producer_action"]}
        batch.update({"check": batch_verdict["check"], "profile": batch_verdict["profile"],
                      "framing": batch_verdict["framing"]})
    return RecordDetail(
        topic=topic, partition=partition, offset=offset, timestamp=verdict["timestamp"],
        outcome=verdict["outcome"], key=key, key_hex=key_hex, value=value, value_hex=value_hex,
        value_error=value_error, headers=headers, failures=failures, batch=batch,
        producer_saw=saw, masked=m.active, notes=notes,
        key_text=None if key is None else render(key, types[0]),
        value_text=None if value is None else render(value, types[1]))


def _where_batch(table: pa.Table, topic: str, partition: int, batch_offset: int) -> pa.Array:
    return pc.and_(pc.and_(pc.equal(table.column("topic"), topic),
                           pc.equal(table.column("partition"), partition)),
                   pc.equal(table.column("batch_offset"), batch_offset))


def _batch_secrets(failures: list[dict[str, Any]], m: Masker) -> list[str]:
    """The raw messages of sensitive rules failing any record of the batch (``failures``, read
    by field name): the broker's ``record_errors`` and ``error_message`` repeat them, so they
    are scrubbed there too."""
    hidden = m.sensitive_rules
    if not hidden:
        return []
    secrets = {f.get("message") for f in failures if f.get("rule") in hidden}
    return sorted((s for s in secrets if s), key=len, reverse=True)


def _scrub(message: str | None, secrets: list[str]) -> str | None:
    if message is None:
        return None
    for s in secrets:
        message = message.replace(s, f"{MASK} (masked: a sensitive rule's message)")
    return message


def _raw(raw: bytes | None) -> Any:
    """Undecoded content: its text when it is printable UTF-8, else the bytes themselves
    (shown escaped or in hex, never as replacement characters)."""
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return raw
    return text


def _decode(record: pa.Table, policy: Policy | None, resolver: SchemaResolver | None
            ) -> tuple[Any, Any, str | None, tuple[pa.DataType | None, pa.DataType | None]]:
    """The record's key and value decoded with the policy's formats (raw content without
    one), the value's decoding error as one line, and the Arrow types they were read as."""
    from kqlab.serde.decode import decode

    key_raw = record.column("key")[0].as_py()
    value_raw = record.column("value")[0].as_py()
    if policy is None:
        return _raw(key_raw), _raw(value_raw), None, (None, None)
    out: list[Any] = []
    types: list[pa.DataType | None] = []
    error = None
    for name, fmt in (("key", policy.key), ("value", policy.value)):
        raw = key_raw if name == "key" else value_raw
        types.append(None)
        if fmt.format in ("none", "bytes") and fmt.wire == "raw":
            out.append(_raw(raw))
            continue
        try:
            col = decode(record.column(name), fmt, resolver)
        except Exception as exc:  # a config problem (no registry): show the raw, say why
            out.append(_raw(raw))
            if name == "value":
                error = f"not decoded: {error_line(exc)}"
            continue
        out.append(col.python_values()[0])
        types[-1] = col.values.type
        err = col.errors[0].as_py()
        if err and name == "value":
            error = error_line(err)
            out[-1] = _raw(raw)
            types[-1] = None
    return out[0], out[1], error, (types[0], types[1])
