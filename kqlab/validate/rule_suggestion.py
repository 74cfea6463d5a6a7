"""Rule suggestion: propose a starting policy from a sample, each rule with its rejection rate.

:func:`suggest` takes statistics of a sample (a records table, a
:class:`~kqlab.validate.Sample`, a snapshot folder or log segments) decoded with a policy's
key/value formats and proposes
catalog rules — the sample's invariants, each *evaluated with the real validator* on that same
sample so it carries the number of records it would reject and up to ``max_examples`` of them
(partition, offset, message).  With an Avro schema source it also derives rules from the
registered schema (non-null fields, types, enums, logical types).  :meth:`Suggestions.accept`
appends the chosen ones to a policy as normal rules.

What is proposed, and the thresholds (the defaults; all are parameters):

* **presence** — ``key_required`` (``allow_empty: false`` when no key is empty) and
  ``value_required`` when at most ``max_rejection`` of the records lack one;
* **wire** — ``magic_byte`` when values are Confluent-framed, ``schema_id_registered`` (with
  a schema source) and ``schema_id_allowed`` listing the ids seen at least ``min_support``
  times (and registered, when a source can say);
* **headers** — ``header_required`` for every header name on all but ``max_rejection`` of the
  records; ``header_values`` for headers with at most ``max_categories`` values that recur;
* **sizes** — ``key_size`` / ``value_size`` / ``headers_size`` with ``max`` = twice the
  (1 - ``max_rejection``) quantile rounded up to a power of two: head-room for growth, while
  the rare outliers (a 70 KB value among 100-byte ones) are exactly what it rejects;
* **fields** (JSON/Avro values) — ``field_not_null`` when at most ``max_rejection`` are null
  or absent; ``field_range`` with ``min: 0`` when at most ``max_rejection`` of the values are
  negative (else minus the power of ten below the ``max_rejection`` quantile) and ``max`` =
  the next power of ten above the (1 - ``max_rejection``) quantile — an order of magnitude of
  head-room, so only unit mix-ups and corrupt values fail — and no ``max`` for identifiers and
  times (names like ``*_id``, ``*_at``, ``ts``, or integers above 1e9), which only grow;
  ``field_in`` for text fields whose values seen at least ``min_support`` times number at
  most ``max_categories``;
* **schema** (Avro) — ``field_not_null`` for non-nullable fields, ``field_type`` for
  non-nullable fields (a nullable one cannot say "string or null"), ``field_in`` for enums,
  ``field_regex`` for ``uuid``, ``field_range`` for ``decimal``; dates and times decode to
  temporal values that have no JSON type, so they get ``field_not_null`` only.

A sample-derived suggestion that would reject more than ``max_rejection`` of the sample is
dropped: such a rule describes a different population, not a defect.  Schema-derived ones are
kept whatever their rate (the schema is the contract; the rate says how far the data is from
it).  Order is fixed — presence, wire, headers, sizes, then fields by path — and ids are
derived from content (``suggest.field_range.amount``), so the same sample always gives the
same suggestions, in the same order, with the same numbers.

How: statistics come from Arrow/numpy kernels (:mod:`kqlab.validate.sample_stats`) over the
records table and the decoded value column (one :class:`~kqlab.validate.context.EvalContext`,
so values are decoded once); every candidate rule is then evaluated with the validator's own
kernels (:func:`kqlab.validate.rules.evaluate_rule`) on that context — the rate a suggestion
carries is the validator's verdict, never a re-derivation from the statistics.  The results
are plain data (:mod:`kqlab.validate.suggestions`).  This sits above the policy model: the
policy package declares rules, this reads samples to propose them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.policy.model import Policy, Rule
from kqlab.policy.plain_data import PlainData
from kqlab.validate.context import EvalContext
from kqlab.validate.rules import RuleEvaluationError, decodes, evaluate_rule
from kqlab.validate.sample_stats import (
    as_number,
    pow2_ceil,
    pow10_ceil,
    quantiles,
    recurring,
    sample_records,
)
from kqlab.validate.suggestions import RecordRef, Suggestion, Suggestions, suggestion_id

if TYPE_CHECKING:
    from kqlab.serde.schemas import ParsedSchema, SchemaResolver
    from kqlab.validate.sample_stats import SampleLike

__all__ = ["suggest"]

# Bounds are read at the (1 - max_rejection) quantile, so a bound never rejects more than the
# share the caller accepts, on any sample size (a fixed 99.9th percentile is the maximum of a
# sample under 1000 records, and then the outlier itself would set the bound).
#: how deep field suggestions walk nested records
MAX_DEPTH = 3
#: at most this many header names are measured (the most frequent)
MAX_HEADER_NAMES = 50
#: field names that only grow (identifiers, times, sequence numbers): no upper bound
_GROWING = re.compile(r"(^|[._-])(id|ids|ts|time|timestamp|at|date|seq|sequence|offset|"
                      r"version|epoch)$|_(id|at|ts|time|ms|seq)$", re.IGNORECASE)
#: the order suggestions are listed in: presence, wire, headers, sizes, fields
_GROUP = {"key_required": 0, "value_required": 0, "magic_byte": 1, "schema_id_registered": 1,
          "schema_id_allowed": 1, "header_required": 2, "header_values": 2, "key_size": 3,
          "value_size": 3, "headers_size": 3}
_FIELD_ORDER = ("field_not_null", "field_type", "field_range", "field_in", "field_regex")
_UUID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


@dataclass
class _Candidate:
    rule: Rule
    source: str
    evidence: str
    target: str = ""

    @property
    def order(self) -> tuple:
        kind = self.rule.kind
        if kind in _GROUP:
            return (_GROUP[kind], self.target, kind)
        return (4, self.target, _FIELD_ORDER.index(kind) if kind in _FIELD_ORDER else 9)


# ------------------------------------------------------------------------ the candidates
class _Proposer:
    """Reads the sample's statistics section by section and collects candidate rules."""

    def __init__(self, ctx: EvalContext, policy: Policy, *, max_rejection: float,
                 max_categories: int, min_support: int) -> None:
        self.ctx = ctx
        self.policy = policy
        self.max_rejection = max_rejection
        self.max_categories = max_categories
        self.min_support = min_support
        self.out: list[_Candidate] = []
        self.notes: list[str] = []

    def add(self, kind: str, params: dict[str, PlainData], evidence: str,
            target: str | None = None, source: str = "sample") -> None:
        rule = Rule(id=suggestion_id(kind, target), kind=kind, params=params)
        self.out.append(_Candidate(rule, source, evidence, target or ""))

    def share(self, mask: np.ndarray) -> float:
        return float(mask.mean()) if len(mask) else 0.0

    def presence(self) -> None:
        ctx, n = self.ctx, self.ctx.n
        ks = ctx.key_size
        missing = self.share(ks < 0)
        if missing < 1 and missing <= self.max_rejection:
            empty = int((ks == 0).sum())
            self.add("key_required", {} if empty else {"allow_empty": False},
                     f"{n - int((ks < 0).sum())} of {n} records have a key"
                     + ("" if empty else ", none empty"))
        vs = ctx.value_size
        tomb = self.share(vs < 0)
        if tomb < 1 and tomb <= self.max_rejection:
            self.add("value_required", {}, f"{int((vs < 0).sum())} of {n} records are "
                     "tombstones")

    def sizes(self) -> None:
        ctx = self.ctx
        for kind, size, what in (("key_size", ctx.key_size, "key"),
                                 ("value_size", ctx.value_size, "value"),
                                 ("headers_size", ctx.headers_size, "headers")):
            present = size[size >= 0] if kind != "headers_size" else size[size > 0]
            if not len(present):
                continue
            (q,) = quantiles(present, (1 - self.max_rejection,))
            bound = pow2_ceil(2 * q)
            self.add(kind, {"max": bound}, f"{what} sizes: p{100 * (1 - self.max_rejection):g}"
                     f" {int(q)} B, max {int(present.max())} B over {len(present)} records")

    def headers(self) -> None:
        h, n = self.ctx.headers, self.ctx.n
        if not len(h.keys):
            return
        names = pc.value_counts(h.keys)
        order = np.argsort(-names.field("counts").to_numpy(zero_copy_only=False), kind="stable")
        top = [names.field("values")[int(i)].as_py() for i in order[:MAX_HEADER_NAMES]]
        if len(order) > MAX_HEADER_NAMES:
            self.notes.append(f"{len(order)} header names: only the {MAX_HEADER_NAMES} most "
                              "frequent were measured")
        for name in sorted(top):
            mask = pc.equal(h.keys, pa.scalar(name)).fill_null(False).to_numpy(
                zero_copy_only=False)
            carriers = len(np.unique(h.parent[mask]))
            if 1 - carriers / n <= self.max_rejection:
                self.add("header_required", {"name": name},
                         f"{carriers} of {n} records carry header {name!r}", name)
            values = h.values.filter(pa.array(mask))
            text = pc.cast(values, pa.string(), safe=False) if len(values) else values
            try:
                keep, k, total = recurring(text, self.min_support)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                continue
            if 0 < k <= self.max_categories and k < len(values):
                self.add("header_values", {"name": name, "values": keep},
                         f"header {name!r}: {total} distinct value(s), {k} seen at least "
                         f"{self.min_support} times", name)

    def wire(self) -> None:
        fmt = self.policy.value
        if fmt.format not in ("avro", "json") and fmt.wire != "confluent":
            return
        ctx = self.ctx
        present = ctx.value_size >= 0
        if not present.any():
            return
        info = ctx.wire("value")
        framed = np.asarray(info.framed, dtype=bool)
        n = int(present.sum())
        share_unframed = 1 - int((framed & present).sum()) / n
        if share_unframed > self.max_rejection:
            return
        self.add("magic_byte", {}, f"{int((framed & present).sum())} of {n} values start with "
                 "the Confluent magic byte")
        ids = info.schema_id.fill_null(-1).to_numpy(zero_copy_only=False) \
            if isinstance(info.schema_id, pa.Array) else np.asarray(info.schema_id)
        ids = ids[framed & present].astype(np.int64)
        seen, counts = np.unique(ids, return_counts=True)
        usable = [int(i) for i, c in zip(seen.tolist(), counts.tolist(), strict=True)
                  if c >= self.min_support]
        subject = fmt.schemas.subject if fmt.schemas is not None else None
        if ctx.resolver is not None:
            self.add("schema_id_registered", {"subject": subject} if subject else {},
                     f"schema ids seen: {', '.join(map(str, seen.tolist()))}")
            usable = [i for i in usable if ctx.resolver.is_registered(i, subject)]
        if usable and len(usable) <= self.max_categories:
            self.add("schema_id_allowed", {"ids": usable},
                     "schema ids seen: " + ", ".join(f"{i} ({c})" for i, c in
                                                     zip(seen.tolist(), counts.tolist(),
                                                         strict=True)))

    # -- fields -----------------------------------------------------------------------------
    def fields(self) -> None:
        fmt = self.policy.value
        if fmt.format not in ("json", "avro") or not decodes(fmt):
            return
        ctx = self.ctx
        decoded = ctx.decoded("value")
        if decoded.fallback:
            self.notes.append(f"value fields not measured: {decoded.fallback}")
            return
        ok = ~ctx.decode_failed("value") & (ctx.value_size >= 0)
        values = decoded.values
        if not pa.types.is_struct(values.type) or not ok.any():
            return
        records = values.filter(pa.array(ok))
        if isinstance(records, pa.StructArray):  # it is: a struct type makes a StructArray
            self._walk(records, "", 1)

    def _walk(self, arr: pa.StructArray, prefix: str, depth: int) -> None:
        children = arr.flatten()  # parent nulls become child nulls
        for f, child in zip(arr.type, children, strict=True):
            path = f"{prefix}{f.name}"
            if "." in f.name or not f.name.strip():
                continue  # not addressable by a dotted path
            self._leaf(child, path)
            if isinstance(child, pa.StructArray) and depth < MAX_DEPTH:
                self._walk(child, path + ".", depth + 1)

    def _leaf(self, arr: pa.Array, path: str) -> None:
        n = len(arr)
        nulls = arr.null_count
        if nulls / n <= self.max_rejection:
            self.add("field_not_null", {"field": path},
                     f"{path}: {nulls} of {n} decoded values null or absent", path)
        t = arr.type
        if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)) \
                and nulls < n:
            self._range(arr, path)
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            keep, k, total = recurring(arr, self.min_support)
            if 0 < k <= self.max_categories and k < n - nulls:
                self.add("field_in", {"field": path, "values": keep},
                         f"{path}: {total} distinct value(s), {k} seen at least "
                         f"{self.min_support} times", path)

    def _range(self, arr: pa.Array, path: str) -> None:
        values = pc.cast(arr.drop_null(), pa.float64()).to_numpy(zero_copy_only=False)
        values = values[np.isfinite(values)]
        if not len(values):
            return
        integral = pa.types.is_integer(arr.type)
        r = self.max_rejection
        lo, hi = quantiles(values, (r, 1 - r))
        negative = float((values < 0).mean())
        growing = bool(_GROWING.search(path.rsplit(".", 1)[-1])) or (integral and lo > 1e9)
        params: dict[str, PlainData] = {"field": path}
        if negative <= r:
            params["min"] = 0  # non-negative but for the few a rule should catch
        else:
            params["min"] = as_number(-pow10_ceil(-lo), integral)
        if not growing:
            params["max"] = as_number(pow10_ceil(hi) if hi > 0 else 0, integral)
        self.add("field_range", params, f"{path}: {100 * negative:.2g} % negative, "
                 f"p{100 * r:g} {lo:g}, p{100 * (1 - r):g} {hi:g}, min {values.min():g}, max "
                 f"{values.max():g}" + (" (grows: no upper bound)" if growing else ""), path)

    # -- the registered schema --------------------------------------------------------------
    def schema(self) -> None:
        fmt, resolver = self.policy.value, self.ctx.resolver
        if fmt.format != "avro" or resolver is None:
            return
        from kqlab.serde.schemas import SchemaNotFound, SchemaSourceError

        parsed: ParsedSchema | None
        try:
            if fmt.wire == "raw":
                parsed = resolver.unframed()
            elif fmt.schemas is not None and fmt.schemas.subject:
                parsed = resolver.latest(fmt.schemas.subject)
            else:
                parsed = self._most_used_schema()
        except (SchemaNotFound, SchemaSourceError) as exc:
            self.notes.append(f"no rules derived from the schema: {exc}")
            return
        if parsed is None:
            return
        what = f"schema {parsed.schema_id}" if parsed.schema_id is not None else "schema"
        if parsed.subject:
            what = f"{parsed.subject} v{parsed.version} (id {parsed.schema_id})"
        schema = parsed.schema
        if isinstance(schema, dict) and schema.get("type") == "record":
            self._schema_record(schema, "", 1, what)

    def _most_used_schema(self) -> ParsedSchema | None:
        resolver = self.ctx.resolver
        if resolver is None:
            return None
        info = self.ctx.wire("value")
        framed = np.asarray(info.framed, dtype=bool)
        ids = info.schema_id.fill_null(-1).to_numpy(zero_copy_only=False)[framed]
        for sid in np.unique(ids)[np.argsort(-np.unique(ids, return_counts=True)[1],
                                             kind="stable")].tolist():
            if resolver.is_registered(int(sid)):
                return resolver.schema(int(sid))
        return None

    def _schema_record(self, schema: Mapping[str, object], prefix: str, depth: int, what: str
                       ) -> None:
        """Rules an Avro record schema (its JSON) implies, field by field."""
        fields = schema.get("fields", ())
        for f in fields if isinstance(fields, list | tuple) else ():
            if not isinstance(f, Mapping):
                continue  # not a field declaration: nothing to derive
            name = f.get("name", "")
            path = f"{prefix}{name}"
            t = f.get("type")
            nullable = isinstance(t, list) and any(b == "null" for b in t)
            branches = [b for b in t if b != "null"] if isinstance(t, list) else [t]
            source = "schema"
            if not nullable:
                self.add("field_not_null", {"field": path}, f"{what}: {path} is not nullable",
                         path, source)
            if len(branches) != 1 or nullable:
                continue  # field_type fails an absent value: it cannot say "string or null"
            b = branches[0]
            spec: Mapping[str, object] = b if isinstance(b, Mapping) else {}
            base = spec.get("type") if isinstance(b, Mapping) else b
            logical = spec.get("logicalType")
            if logical == "uuid":
                self.add("field_regex", {"field": path, "pattern": _UUID},
                         f"{what}: {path} is a uuid", path, source)
                self.add("field_type", {"field": path, "type": "string"},
                         f"{what}: {path} is a uuid string", path, source)
            elif logical == "decimal":
                precision, scale = _whole(spec.get("precision", 38)), _whole(spec.get("scale", 0))
                bound = 10 ** (precision - scale)
                self.add("field_type", {"field": path, "type": "number"},
                         f"{what}: {path} is decimal({precision}, {scale})", path, source)
                if precision - scale <= 15:
                    self.add("field_range", {"field": path, "min": -bound, "max": bound},
                             f"{what}: decimal({precision}, {scale}) holds |x| < {bound}",
                             path, source)
            elif logical is not None:
                continue  # dates and times decode to Arrow temporal types: no JSON type
            elif base == "enum":
                symbols = spec.get("symbols", ())
                self.add("field_in", {"field": path, "values": [
                    str(s) for s in (symbols if isinstance(symbols, list | tuple) else ())]},
                         f"{what}: {path} is an enum", path, source)
            elif base == "record":
                self.add("field_type", {"field": path, "type": "object"},
                         f"{what}: {path} is a record", path, source)
                if depth < MAX_DEPTH:
                    self._schema_record(spec, path + ".", depth + 1, what)
            else:
                jtype = {"string": "string", "int": "integer", "long": "integer",
                         "float": "number", "double": "number", "boolean": "boolean",
                         "array": "array", "map": "object"}.get(str(base))
                if jtype is not None:
                    self.add("field_type", {"field": path, "type": jtype},
                             f"{what}: {path} is {base}", path, source)


def _whole(value: object) -> int:
    """An Avro schema attribute (precision, scale) as a whole number."""
    if not isinstance(value, int | float | str):
        raise TypeError(f"expected a number in the Avro schema, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------- evaluation
def _merge(candidates: list[_Candidate]) -> list[_Candidate]:
    """One candidate per rule id; the schema's wins (it is the contract), sources joined."""
    by_id: dict[str, _Candidate] = {}
    for c in candidates:
        old = by_id.get(c.rule.id)
        if old is None:
            by_id[c.rule.id] = c
            continue
        keep, other = (c, old) if c.source == "schema" else (old, c)
        by_id[c.rule.id] = _Candidate(keep.rule, "schema+sample",
                                      f"{keep.evidence}; {other.evidence}", keep.target)
    return sorted(by_id.values(), key=lambda c: (c.order, c.rule.id))


def suggest(sample: SampleLike, policy: Policy | None = None, *, now: int | None = None,
            resolver: SchemaResolver | None = None, max_rejection: float = 0.01,
            max_examples: int = 5,
            max_categories: int = 20, min_support: int = 2, schema: bool = True
            ) -> Suggestions:
    """Propose rules from ``sample`` decoded with ``policy``'s formats (see the module doc).

    Parameters
    ----------
    sample
        A records table, a :class:`~kqlab.validate.Sample`, a snapshot folder, or a log
        segment file / partition folder.  Records of transaction-marker batches are left out.
    policy
        Supplies the key/value formats (and schema source) the values are decoded with;
        ``None``: bytes, nothing decoded (no field suggestions).
    now
        The clock for rules that read it (default: the wall clock).
    resolver
        A :class:`~kqlab.serde.SchemaResolver` (default: from ``policy.value.schemas``).
    max_rejection
        Sample-derived suggestions that would reject a larger share are dropped.
    max_examples
        How many rejected records each suggestion names.
    max_categories, min_support
        ``field_in`` / ``header_values`` / ``schema_id_allowed`` list values seen at least
        ``min_support`` times, and only when there are at most ``max_categories`` of them.
    schema
        Also derive rules from the registered Avro schema.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from kqlab.policy import loads_policy
    >>> from kqlab.records import RECORDS_SCHEMA
    >>> rows = [{"topic": "t", "partition": 0, "offset": i, "timestamp": 0,
    ...          "timestamp_type": 0, "key": b"k%d" % i, "batch_offset": i, "batch_index": 0,
    ...          "value": b'{"amount": %d, "status": "%s"}' % (i - (i == 7) * 50, b"NEW"),
    ...          "headers": []} for i in range(200)]
    >>> table = pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA)
    >>> found = suggest(table, loads_policy("kqlab: 1\\nname: p\\nvalue: {format: json}"))
    >>> s = found["suggest.field_range.amount"]
    >>> s.rule.to_dict(), s.rejected, [(e.offset, e.message) for e in s.examples]
    ({'id': 'suggest.field_range.amount', 'kind': 'field_range', 'field': 'amount', 'min': 0,\
 'max': 1000}, 1, [(7, 'amount=-43 is outside [0, 1000]')])
    """
    if not 0 <= max_rejection <= 1:
        raise ValueError(f"max_rejection is a share of the sample, 0 to 1, not {max_rejection}")
    if max_examples < 0 or max_categories < 1 or min_support < 1:
        raise ValueError("max_examples must be >= 0, max_categories and min_support >= 1")
    policy = policy or Policy(name="suggested")
    records = sample_records(sample)
    if resolver is None and policy.value.schemas is not None:
        from kqlab.serde.schemas import SchemaResolver

        resolver = SchemaResolver.from_source(policy.value.schemas)
    now = int(time.time() * 1000) if now is None else int(now)
    ctx = EvalContext(records, now, None, value_format=policy.value, key_format=policy.key,
                      resolver=resolver)
    settings: dict[str, PlainData] = {
        "max_rejection": max_rejection, "max_examples": max_examples,
        "max_categories": max_categories, "min_support": min_support}
    n = ctx.n
    if not n:
        return Suggestions((), 0, settings, ("the sample has no records",))
    proposer = _Proposer(ctx, policy, max_rejection=max_rejection,
                         max_categories=max_categories, min_support=min_support)
    proposer.presence()
    proposer.wire()
    proposer.headers()
    proposer.sizes()
    proposer.fields()
    if schema:
        proposer.schema()
    topic = records.column("topic")
    part = records.column("partition")
    offset = records.column("offset")
    out: list[Suggestion] = []
    for c in _merge(proposer.out):
        try:
            result = evaluate_rule(ctx, c.rule)
        except RuleEvaluationError as exc:
            proposer.notes.append(f"{c.rule.id} not suggested: {exc}")
            continue
        rejected = result.count
        if c.source == "sample" and rejected / n > max_rejection:
            continue
        idx = result.failing[:max_examples].tolist()
        examples = tuple(RecordRef(topic=topic[i].as_py(), partition=part[i].as_py(),
                                   offset=offset[i].as_py(), message=result.messages[k])
                         for k, i in enumerate(idx))
        out.append(Suggestion(rule=c.rule, source=c.source, evidence=c.evidence, records=n,
                              rejected=rejected, examples=examples))
    return Suggestions(tuple(out), n, settings, tuple(proposer.notes))
