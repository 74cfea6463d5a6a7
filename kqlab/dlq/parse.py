"""Dead-letter records → one row per dead letter saying who dead-lettered it, why, and what
the original record was (:func:`parse_dead_letters`), vectorised over the headers column.

How a record's family is found
------------------------------
Every known producer *appends* its failure headers to the record it dead-letters.  So the
family is the one of the record's **last failure header**, and its failure headers are the
run of that family's headers ending there; every other header is the original record's own
(including any a DLQ producer's interceptor appended after the run, e.g. a trace id).
A record dead-lettered twice (a Connect DLQ fed by a gate's DLQ) therefore reads as the outer
producer's dead letter, whose original record still carries the inner failure headers — which
is where a redrive would send it back to.  Within the run the last header of a name wins.

Bad input loses nothing: a record without failure headers is family ``none``, reason
``unknown reason``; a failure header that is missing, not UTF-8, or not an integer where one
is expected leaves that field null and says so in ``problems``; the record is always kept.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.dlq.headers import (
    FAMILIES,
    FAMILY_NAMES,
    REDRIVE_HEADER,
    UNKNOWN_REASON,
    Family,
)
from kqlab.records import HEADER_TYPE

__all__ = ["DEAD_LETTERS_SCHEMA", "last_header", "parse_dead_letters"]

#: one row per dead letter, in the dead-letter topic's order:
#:
#: * ``dlq_topic`` / ``dlq_partition`` / ``dlq_offset``: where the dead letter is;
#: * ``timestamp`` / ``timestamp_type``: the dead letter's (the original record's for the
#:   gate, Connect and Streams, which keep it; the time of the failure for Confluent's DLQ);
#: * ``family`` (:data:`~kqlab.dlq.headers.FAMILY_NAMES`), ``reason`` (never null: the rule id
#:   for kqlab and Confluent, ``connect:<Exception>`` / ``streams:<Exception>``, else
#:   ``unknown reason``), ``rule``, ``message``, ``exception`` (the full class name);
#: * ``source_topic`` / ``source_partition`` / ``source_offset``: where the original record
#:   was, as the failure headers say (null: not said, ``-1``, or malformed);
#: * ``redrive_marker``: the original record's own ``kqlab.redrive`` header (it was redriven
#:   before and dead-lettered again), else null;
#: * ``problems``: what was wrong with the failure headers, in words (empty: nothing);
#: * ``detail``: every failure header of the run, as text (invalid UTF-8 escaped);
#: * ``key`` / ``value`` / ``headers``: the original record (failure headers removed).
DEAD_LETTERS_SCHEMA = pa.schema([
    ("dlq_topic", pa.string()),
    ("dlq_partition", pa.int32()),
    ("dlq_offset", pa.int64()),
    ("timestamp", pa.int64()),
    ("timestamp_type", pa.int8()),
    ("family", pa.string()),
    ("reason", pa.string()),
    ("rule", pa.string()),
    ("message", pa.string()),
    ("exception", pa.string()),
    ("source_topic", pa.string()),
    ("source_partition", pa.int32()),
    ("source_offset", pa.int64()),
    ("redrive_marker", pa.string()),
    ("problems", pa.list_(pa.string())),
    ("detail", pa.map_(pa.string(), pa.string())),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", HEADER_TYPE),
])

_NO_HEADERS = ("no failure headers of a known producer (kqlab gate, Confluent rule DLQ, "
               "Kafka Connect, Kafka Streams)")
#: a Java class name at the start of ``Throwable.toString()``
_CLASS_RE = r"^(?P<cls>[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)(?::|$)"


class _Problems:
    """Sparse per-record problem texts, gathered while parsing, built into one list column."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.rows: list[np.ndarray] = []
        self.texts: list[pa.Array] = []

    def add(self, rows: np.ndarray, texts: pa.Array | str) -> None:
        if not len(rows):
            return
        self.rows.append(np.asarray(rows, dtype=np.int64))
        self.texts.append(pa.repeat(pa.scalar(texts), len(rows)) if isinstance(texts, str)
                          else texts.cast(pa.string()))

    def column(self) -> pa.Array:
        if not self.rows:
            return pa.ListArray.from_arrays(pa.array(np.zeros(self.n + 1, np.int32)),
                                            pa.array([], pa.string()))
        rows = np.concatenate(self.rows)
        texts = pa.concat_arrays([t.combine_chunks() if isinstance(t, pa.ChunkedArray) else t
                                  for t in self.texts])
        order = np.argsort(rows, kind="stable")
        offsets = np.zeros(self.n + 1, np.int32)
        offsets[1:] = np.cumsum(np.bincount(rows, minlength=self.n))
        return pa.ListArray.from_arrays(pa.array(offsets), texts.take(pa.array(order)))


def _np(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(a.to_numpy(zero_copy_only=False))


def _texts(values: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Binary header values as text, and the positions that were not valid UTF-8 (those are
    decoded with backslash escapes, so nothing is lost and nothing raises)."""
    try:
        out = values.cast(pa.string())
        out.validate(full=True)
        return out, np.zeros(0, np.int64)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    texts: list[str | None] = []
    bad: list[int] = []
    for i, v in enumerate(values.to_pylist()):
        if v is None:
            texts.append(None)
            continue
        try:
            texts.append(v.decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(v.decode("utf-8", "backslashreplace"))
            bad.append(i)
    return pa.array(texts, pa.string()), np.asarray(bad, dtype=np.int64)


def _integers(texts: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Decimal texts as int64 (null stays null), and the positions that are not integers."""
    try:
        return pc.cast(pc.utf8_trim_whitespace(texts), pa.int64()), np.zeros(0, np.int64)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    out: list[int | None] = []
    bad: list[int] = []
    for i, t in enumerate(texts.to_pylist()):
        if t is None:
            out.append(None)
            continue
        try:
            out.append(int(t.strip()))
        except ValueError:
            out.append(None)
            bad.append(i)
    return pa.array(out, pa.int64()), np.asarray(bad, dtype=np.int64)


def _last_per_record(n: int, parent: np.ndarray, mask: np.ndarray, j: np.ndarray,
                     default: np.ndarray) -> np.ndarray:
    """Per record, the largest entry index ``j`` where ``mask`` holds (``default`` where it
    holds nowhere); entries come record by record, in order."""
    out = default.copy()
    sel = np.flatnonzero(mask)
    if len(sel):
        p = parent[sel]
        last = np.r_[p[1:] != p[:-1], True]
        out[p[last]] = j[sel[last]]
    return out


def _scatter(n: int, rows: np.ndarray, values: pa.Array) -> pa.Array:
    """A length-``n`` array holding ``values[i]`` at ``rows[i]`` and null elsewhere."""
    where = np.full(n, -1, dtype=np.int64)
    where[rows] = np.arange(len(rows))
    return values.take(pa.array(where, mask=where < 0))


def last_header(records_headers: pa.Array | pa.ChunkedArray, key: str) -> pa.Array:
    """Per record, the value (binary) of its last header named ``key``, null when it has none.

    Reads the flattened headers column once; what recovery reads the redrive marker with."""
    lists = records_headers.combine_chunks() if isinstance(records_headers, pa.ChunkedArray) \
        else records_headers
    n = len(lists)
    flat = cast(pa.StructArray, pc.list_flatten(lists))
    parent = _np(pc.list_parent_indices(lists)).astype(np.int64)
    hit = np.flatnonzero(_np(pc.fill_null(pc.equal(flat.field("key"), key), False)))
    if not len(hit):
        return pa.nulls(n, pa.binary())
    p = parent[hit]
    last = np.r_[p[1:] != p[:-1], True]
    return _scatter(n, p[last], flat.field("value").take(pa.array(hit[last])))


def parse_dead_letters(records: pa.Table) -> pa.Table:
    """Who dead-lettered each record of ``records`` (``RECORDS_SCHEMA``, read from a dead-letter
    topic), why, and the original record: a :data:`DEAD_LETTERS_SCHEMA` table, same rows in the
    same order (see the module doc for how families are told apart).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from kqlab.gate import records_table
    >>> dlq = records_table(["o.dlq"] * 2, [0, 0], [0, 1], [(1, 5), (1, 6)], [b"k", None],
    ...                     [b"v", b"w"],
    ...                     [[("trace", b"t"), ("kqlab.rule", b"amount-positive"),
    ...                       ("kqlab.source.topic", b"orders"),
    ...                       ("kqlab.source.partition", b"2")], None])
    >>> t = parse_dead_letters(dlq)
    >>> t.select(["family", "reason", "source_topic", "source_partition"]).to_pylist()[0]
    {'family': 'kqlab', 'reason': 'amount-positive', 'source_topic': 'orders', \
'source_partition': 2}
    >>> t["headers"][0].as_py(), t["reason"][1].as_py(), t["problems"][1].as_py()[0][:19]
    ([{'key': 'trace', 'value': b't'}], 'unknown reason', 'no failure headers ')
    """
    n = records.num_rows
    lists = records.column("headers").combine_chunks()
    counts = _np(pc.fill_null(pc.list_value_length(lists), 0)).astype(np.int64)
    flat = cast(pa.StructArray, pc.list_flatten(lists))
    keys, values = flat.field("key"), flat.field("value")
    e = len(flat)
    parent = _np(pc.list_parent_indices(lists)).astype(np.int64)
    j = np.arange(e, dtype=np.int64)
    starts = np.cumsum(counts) - counts

    # every entry's name as a code into the known failure header names (-1: another name),
    # and its family (0: none); names of a family's prefix not in its list count too
    known = [k for f in FAMILIES for k in f.keys]
    known_family = np.array([c for c, f in enumerate(FAMILIES, start=1) for _ in f.keys],
                            dtype=np.int8)
    name_code = _np(pc.fill_null(pc.index_in(keys, value_set=pa.array(known, pa.string())),
                                 -1)).astype(np.int64) if e else np.zeros(0, np.int64)
    fam = np.where(name_code >= 0, known_family[name_code], 0).astype(np.int8)
    other = np.flatnonzero(name_code < 0)
    if len(other):
        other_keys = keys.take(pa.array(other))
        for code, f in enumerate(FAMILIES, start=1):
            if f.prefix is not None:
                hit = _np(pc.fill_null(pc.starts_with(other_keys, f.prefix), False))
                fam[other[hit.astype(bool)]] = code
    # the record's family: that of its last failure header (headers a DLQ producer's
    # interceptors add afterwards, e.g. tracing, do not hide it); its run: the block of that
    # family's headers ending there
    last_fam = _last_per_record(n, parent, fam != 0, j, starts - 1)
    rec_fam = np.zeros(n, dtype=np.int8)
    found = last_fam >= starts
    rec_fam[found] = fam[last_fam[found]]
    breaks = (fam != rec_fam[parent]) & (j < last_fam[parent])
    last_other = _last_per_record(n, parent, breaks, j, starts - 1)
    in_run = (rec_fam[parent] != 0) & (j > last_other[parent]) & (j <= last_fam[parent])

    problems = _Problems(n)
    problems.add(np.flatnonzero(rec_fam == 0), _NO_HEADERS)

    def field(name: str | None) -> tuple[np.ndarray, pa.Array] | None:
        """(records, text values) of the last in-run header ``name`` of each record."""
        if name is None:
            return None
        code = known.index(name)
        hit = np.flatnonzero(in_run & (name_code == code))
        p = parent[hit]
        last = np.r_[p[1:] != p[:-1], True] if len(p) else np.zeros(0, bool)
        rows, taken = p[last], values.take(pa.array(hit[last]))
        out, bad = _texts(taken)
        if len(bad):  # malformed: the field is unknown, the problem says what it held
            shown = [t[:40] for t in out.take(pa.array(bad)).to_pylist()]
            problems.add(rows[bad], pa.array([f"{name} is not UTF-8: {t}" for t in shown],
                                             pa.string()))
            ok = np.ones(len(rows), dtype=bool)
            ok[bad] = False
            rows, out = rows[ok], out.filter(pa.array(ok))
        return rows, out

    def column(names: list[str | None]) -> pa.Array:
        """One output column from the families' headers ``names`` (one per family)."""
        rows_parts: list[np.ndarray] = []
        vals_parts: list[pa.Array] = []
        for name in names:
            got = field(name)
            if got is None or not len(got[0]):
                continue
            rows, vals = got
            rows_parts.append(rows)
            vals_parts.append(vals)
        if not rows_parts:
            return pa.nulls(n, pa.string())
        return _scatter(n, np.concatenate(rows_parts), pa.concat_arrays(vals_parts))

    def int_column(names: list[str | None], typ: pa.DataType) -> pa.Array:
        """Like ``column`` for integer headers: malformed ones are problems, -1 is unknown."""
        rows_parts: list[np.ndarray] = []
        vals_parts: list[pa.Array] = []
        for name in names:
            got = field(name)
            if got is None or not len(got[0]):
                continue
            rows, vals = got
            ints, bad = _integers(vals)
            if len(bad):
                shown = [str(t)[:40] for t in vals.take(pa.array(bad)).to_pylist()]
                problems.add(rows[bad], pa.array([f"{name} is not an integer: {t!r}"
                                                  for t in shown], pa.string()))
            ints = pc.if_else(pc.less(ints, 0), pa.scalar(None, pa.int64()), ints)
            if typ == pa.int32():
                too_big = np.flatnonzero(_np(pc.fill_null(pc.greater(ints, 2**31 - 1), False)))
                if len(too_big):
                    problems.add(rows[too_big], f"{name} is beyond a partition number")
                    ints = pc.if_else(pc.greater(ints, 2**31 - 1), pa.scalar(None, pa.int64()),
                                      ints)
            rows_parts.append(rows)
            vals_parts.append(ints.cast(typ))
        if not rows_parts:
            return pa.nulls(n, typ)
        return _scatter(n, np.concatenate(rows_parts), pa.concat_arrays(vals_parts))

    rule = column([f.rule for f in FAMILIES])
    message = column([f.message for f in FAMILIES])
    source_topic = column([f.topic for f in FAMILIES])
    source_partition = int_column([f.partition for f in FAMILIES], pa.int32())
    source_offset = int_column([f.offset for f in FAMILIES], pa.int64())

    # exceptions: the class name (Streams writes "<class>: <message>")
    exc_parts: list[pa.Array] = []
    for f in FAMILIES:
        if f.exception is None:
            continue
        got = field(f.exception)
        if got is None or not len(got[0]):
            continue
        rows, vals = got
        if f.exception_to_string:
            cls = pc.struct_field(pc.extract_regex(vals, _CLASS_RE), [0])
            if f.message is not None:  # Streams' message header may be absent: the text's tail
                tail = pc.replace_substring_regex(vals, r"(?s)^[^:]*:\s*", "")
                message = _fill_at(message, rows, tail)
            vals = cls
        exc_parts.append(_scatter(n, rows, vals))
    exception = pa.nulls(n, pa.string())
    for part in exc_parts:
        exception = pc.coalesce(exception, part)

    # the reason: a rule id, or <family>:<SimpleException>, else unknown
    family_names = pa.array(FAMILY_NAMES, pa.string())
    family = family_names.take(pa.array(rec_fam.astype(np.int64)))
    reason = rule
    simple = pc.replace_substring_regex(exception, r"^.*\.", "")
    for code, f in enumerate(FAMILIES, start=1):
        if f.reason_prefix is None:
            continue
        is_f = pa.array(rec_fam == code)
        reason = pc.if_else(is_f, pc.binary_join_element_wise(
            pa.scalar(f.reason_prefix), simple, ""), reason)
    missing = np.flatnonzero((rec_fam != 0) & _np(pc.is_null(reason)))
    if len(missing):
        for code, f in enumerate(FAMILIES, start=1):
            mine = missing[rec_fam[missing] == code]
            what = f.rule or f.exception
            problems.add(mine, f"{f.label}: no readable {what} header, so no reason")
    reason = pc.fill_null(reason, UNKNOWN_REASON)

    # the original headers: everything before the run
    keep = ~in_run
    orig_counts = np.bincount(parent[keep], minlength=n) if e else np.zeros(n, np.int64)
    orig_offsets = np.zeros(n + 1, np.int32)
    orig_offsets[1:] = np.cumsum(orig_counts)
    kept = flat.filter(pa.array(keep)) if e else flat
    headers = pa.ListArray.from_arrays(pa.array(orig_offsets), kept, type=HEADER_TYPE)
    marker = _marker(headers)

    # every failure header of the run, as text
    run_idx = np.flatnonzero(in_run)
    run_counts = np.bincount(parent[run_idx], minlength=n) if len(run_idx) else \
        np.zeros(n, np.int64)
    run_offsets = np.zeros(n + 1, np.int32)
    run_offsets[1:] = np.cumsum(run_counts)
    run_text, _ = _texts(values.take(pa.array(run_idx)))
    detail = pa.MapArray.from_arrays(pa.array(run_offsets), keys.take(pa.array(run_idx)),
                                     pc.fill_null(run_text, ""))

    return pa.table([
        records.column("topic"), records.column("partition"), records.column("offset"),
        records.column("timestamp"), records.column("timestamp_type"),
        family, reason, rule, message, exception,
        source_topic, source_partition, source_offset, marker, problems.column(), detail,
        records.column("key"), records.column("value"), headers,
    ], schema=DEAD_LETTERS_SCHEMA)


def _fill_at(column: pa.Array, rows: np.ndarray, values: pa.Array) -> pa.Array:
    """``column`` with its nulls at ``rows`` filled from ``values`` (aligned with ``rows``)."""
    return pc.coalesce(column, _scatter(len(column), rows, values))


def _marker(headers: pa.Array) -> pa.Array:
    """The last ``kqlab.redrive`` header of each original record, as text (or null)."""
    raw = last_header(headers, REDRIVE_HEADER)
    text, _ = _texts(raw)
    return text


def family_of(name: str) -> Family | None:
    """The family called ``name`` (None: ``none`` or unknown)."""
    return next((f for f in FAMILIES if f.name == name), None)
