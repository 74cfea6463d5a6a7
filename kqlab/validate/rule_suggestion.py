"""Rule suggestion: propose a starting policy from a sample, each rule with the replay's counts.

:func:`suggest` takes statistics of a sample — whatever ``kqlab replay`` reads: a records
table, a :class:`~kqlab.validate.Sample` or :class:`~kqlab.validate.Replayer`, a snapshot
folder, log segments or a log directory — decoded with a policy's key/value formats, proposes
catalog rules (the sample's invariants), then **replays** the policy with every candidate
appended: the numbers a suggestion carries (records failing it, rejected, evaluation errors,
up to ``max_examples`` failing records with their message) are the verdict core's own, the
ones ``kqlab replay`` prints for the written policy, never a re-derivation.  With an Avro
schema source it also derives rules from the registered schema (non-null fields, types,
enums, logical types).  Candidates equivalent to a rule the policy already has are not
proposed (:func:`~kqlab.validate.suggestions.equivalent`; they are listed as duplicates).
:meth:`Suggestions.accept` appends the chosen ones to a policy as normal rules.

What is proposed, and the thresholds (the defaults; all are parameters):

* **presence** — ``key_required`` (``allow_empty: false`` when no key is empty) and
  ``value_required`` when at most ``max_rejection`` of the records lack one;
* **wire** — ``magic_byte`` when values are Confluent-framed, ``schema_id_registered`` (with
  a schema source) and ``schema_id_allowed`` listing the ids of the value set (below; and
  registered, when a source can say);
* **headers** — ``header_required`` for every header name on all but ``max_rejection`` of the
  records; ``header_values`` for headers whose value set has at most ``max_categories``
  values;
* **sizes** — ``key_size`` / ``value_size`` / ``headers_size`` with ``max`` = twice the
  (1 - ``max_rejection``) quantile rounded up to a power of two: head-room for growth, while
  the rare outliers (a 70 KB value among 100-byte ones) are exactly what it rejects;
* **fields** (JSON/Avro values) — ``field_not_null`` when at most ``max_rejection`` are null
  or absent; ``field_range`` with ``min: 0`` when at most ``max_rejection`` of the values are
  negative (else minus the power of ten below the ``max_rejection`` quantile) and ``max`` =
  the next power of ten above the (1 - ``max_rejection``) quantile — an order of magnitude of
  head-room, so only unit mix-ups and corrupt values fail — and no ``max`` for identifiers and
  times (names like ``*_id``, ``*_at``, ``ts``, or integers above 1e9), which only grow;
  ``field_in`` for text fields whose value set has at most ``max_categories`` values;
* **schema** (Avro) — ``field_not_null`` for non-nullable fields, ``field_type`` for
  non-nullable fields (a nullable one cannot say "string or null"), ``field_in`` for enums,
  ``field_regex`` for ``uuid``, ``field_range`` for ``decimal``; dates and times decode to
  temporal values that have no JSON type, so they get ``field_not_null`` only.

A **value set** holds the values seen at least ``min_support`` times *and* carried by at least
``min_share`` of the records that have the field (header, schema id): a value a sliver of the
sample carries is more often a defect than a category, and allowing it would bless the very
records a rule should catch.  What is left out, how often it was seen and why, is listed on
the suggestion (``left_out``) and in its evidence.

A sample-derived suggestion that would reject more than ``max_rejection`` of the sample is
dropped (and a note says so): such a rule describes a different population, not a defect.
Schema-derived ones are kept whatever their rate (the schema is the contract; the rate says
how far the data is from it).  Order is fixed — presence, wire, headers, sizes, then fields by
path — and ids are derived from content (``suggest.field_range.amount``), so the same sample
always gives the same suggestions, in the same order, with the same numbers.

How: statistics come from Arrow/numpy kernels (:mod:`kqlab.validate.sample_stats`) over the
replay's own evaluation context (one :class:`~kqlab.validate.Replayer`, so values are decoded
once and every rule result is cached for the replay that follows), restricted to the records
a client produced (transaction markers are the coordinator's).  The results are plain data
(:mod:`kqlab.validate.suggestions`).  This sits above the policy model: the policy package
declares rules, this reads samples to propose them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.policy.model import Policy, Rule
from kqlab.policy.plain_data import PlainData
from kqlab.validate.replayer import Replayer
from kqlab.validate.rules import RuleEvaluationError, decodes
from kqlab.validate.sample_stats import (
    DataView,
    ValueSet,
    as_number,
    data_mask,
    pow2_ceil,
    pow10_ceil,
    quantiles,
    value_set,
)
from kqlab.validate.suggestions import (
    Duplicate,
    LeftOut,
    RecordRef,
    Suggestion,
    Suggestions,
    equivalent,
    suggestion_id,
)

if TYPE_CHECKING:
    from kqlab.serde.schemas import ParsedSchema, SchemaResolver
    from kqlab.validate.sample_stats import SampleLike
    from kqlab.validate.verdicts import Verdicts

#: ``progress(stage)``: told when each stage of :func:`suggest` starts (the CLI's display)
SuggestProgress = Callable[[str], None]

__all__ = ["SuggestProgress", "suggest"]

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
#: how many left-out values a value-set suggestion lists (the most frequent), and how much of
#: each value it shows
MAX_LEFT_OUT = 20
MAX_VALUE_CHARS = 60


def _short(value: str) -> str:
    """``value`` cut to :data:`MAX_VALUE_CHARS` characters, saying how long it was."""
    if len(value) <= MAX_VALUE_CHARS:
        return value
    return f"{value[:MAX_VALUE_CHARS]}… ({len(value):,} characters)"


@dataclass
class _Candidate:
    rule: Rule
    source: str
    evidence: str
    target: str = ""
    left_out: tuple[LeftOut, ...] = field(default_factory=tuple)

    @property
    def order(self) -> tuple:
        kind = self.rule.kind
        if kind in _GROUP:
            return (_GROUP[kind], self.target, kind)
        return (4, self.target, _FIELD_ORDER.index(kind) if kind in _FIELD_ORDER else 9)


# ------------------------------------------------------------------------ the candidates
class _Proposer:
    """Reads the sample's statistics section by section and collects candidate rules."""

    def __init__(self, ctx: DataView, policy: Policy, resolver: SchemaResolver | None, *,
                 max_rejection: float, max_categories: int, min_support: int,
                 min_share: float) -> None:
        self.ctx = ctx
        self.policy = policy
        self.resolver = resolver
        self.max_rejection = max_rejection
        self.max_categories = max_categories
        self.min_support = min_support
        self.min_share = min_share
        self.out: list[_Candidate] = []
        self.notes: list[str] = []

    def add(self, kind: str, params: dict[str, PlainData], evidence: str,
            target: str | None = None, source: str = "sample",
            left_out: tuple[LeftOut, ...] = ()) -> None:
        rule = Rule(id=suggestion_id(kind, target), kind=kind, params=params)
        self.out.append(_Candidate(rule, source, evidence, target or "", left_out))

    def value_set(self, arr: pa.Array) -> ValueSet:
        return value_set(arr, self.min_support, self.min_share)

    def value_set_evidence(self, what: str, vs: ValueSet) -> tuple[str, tuple[LeftOut, ...]]:
        """The evidence of a value-set rule (how many values, which left out, why); the
        :data:`MAX_LEFT_OUT` most frequent values left out are listed, each cut to
        :data:`MAX_VALUE_CHARS` characters (a 70 KB note is not a label)."""
        left = tuple(LeftOut(value=_short(v), count=c, reason=r)
                     for v, c, r in vs.left_out[:MAX_LEFT_OUT])
        text = (f"{what}: {vs.distinct} distinct value(s) in {vs.total}, {len(vs.keep)} seen "
                f"at least {self.min_support} times on at least {100 * self.min_share:g} % "
                "of them")
        if vs.left_out:
            shown = ", ".join(f"{v.value!r} ({v.reason})" for v in left[:5])
            rest = vs.left_out[5:]
            more = (f" and {len(rest)} more value(s) on {sum(c for _, c, _ in rest)} "
                    "record(s)") if rest else ""
            text += f"; left out as rare: {shown}{more}"
        return text, left

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
            try:
                text = pc.cast(values, pa.string()) if len(values) else values
                vs = self.value_set(text)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                continue  # binary header values: no text value set
            if 0 < len(vs.keep) <= self.max_categories and len(vs.keep) < len(values):
                evidence, left = self.value_set_evidence(f"header {name!r}", vs)
                self.add("header_values", {"name": name, "values": vs.keep}, evidence, name,
                         left_out=left)

    def wire(self) -> None:
        fmt = self.policy.value
        if fmt.format not in ("avro", "json", "protobuf") and fmt.wire != "confluent":
            return
        ctx = self.ctx
        present = ctx.value_size >= 0
        if not present.any():
            return
        info = ctx.wire("value")
        framed = info.framed & present
        n = int(present.sum())
        if 1 - int(framed.sum()) / n > self.max_rejection:
            return
        self.add("magic_byte", {}, f"{int(framed.sum())} of {n} values start with the "
                 "Confluent magic byte")
        ids = info.schema_id[framed]
        seen, counts = np.unique(ids, return_counts=True)
        subject = fmt.schemas.subject if fmt.schemas is not None else None
        if self.resolver is not None:
            self.add("schema_id_registered", {"subject": subject} if subject else {},
                     f"schema ids seen: {', '.join(map(str, seen.tolist()))}")
        vs = self.value_set(pa.array([str(i) for i in ids.tolist()], pa.string()))
        left = list(vs.left_out)
        usable = sorted(int(i) for i in vs.keep)
        if self.resolver is not None:
            unregistered = [i for i in usable if not self.resolver.is_registered(i, subject)]
            left += [(str(i), int(counts[seen == i][0]), "not registered"
                      + (f" under {subject}" if subject else "")) for i in unregistered]
            usable = [i for i in usable if i not in unregistered]
        if usable and len(usable) <= self.max_categories:
            evidence, left_out = self.value_set_evidence(
                "schema ids", ValueSet([str(i) for i in usable], left, vs.distinct, vs.total))
            self.add("schema_id_allowed", {"ids": usable}, evidence, left_out=left_out)

    # -- fields -----------------------------------------------------------------------------
    def fields(self) -> None:
        fmt = self.policy.value
        if fmt.format not in ("json", "avro", "protobuf") or not decodes(fmt):
            return
        records, fallback = self.ctx.decoded_values("value")
        if records is None:
            self.notes.append(f"value fields not measured: {fallback}")
            return
        if not pa.types.is_struct(records.type) or not len(records):
            return
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
            vs = self.value_set(arr)
            if 0 < len(vs.keep) <= self.max_categories and len(vs.keep) < n - nulls:
                evidence, left = self.value_set_evidence(path, vs)
                self.add("field_in", {"field": path, "values": vs.keep}, evidence, path,
                         left_out=left)

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
        fmt, resolver = self.policy.value, self.resolver
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
        resolver = self.resolver
        if resolver is None:
            return None
        info = self.ctx.wire("value")
        ids = info.schema_id[info.framed]
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
                                      f"{keep.evidence}; {other.evidence}", keep.target,
                                      keep.left_out)
    return sorted(by_id.values(), key=lambda c: (c.order, c.rule.id))


def suggest(sample: SampleLike, policy: Policy | None = None, *, now: int | None = None,
            resolver: SchemaResolver | None = None, framing: str | None = None,
            max_rejection: float = 0.01, max_examples: int = 5, max_categories: int = 20,
            min_support: int = 2, min_share: float = 0.02, schema: bool = True,
            progress: SuggestProgress | None = None) -> Suggestions:
    """Propose rules from ``sample`` decoded with ``policy``'s formats (see the module doc).

    Parameters
    ----------
    sample
        Whatever :func:`~kqlab.validate.replay` reads: a log segment file, a partition
        folder, a log directory, a snapshot folder, a records table, a
        :class:`~kqlab.validate.Sample` — or a :class:`~kqlab.validate.Replayer`, whose
        decoded columns and cached rule results are then shared.
    policy
        Supplies the key/value formats (and schema source) the values are decoded with, and
        the rules the suggestions are replayed with (a candidate equivalent to one of them is
        not proposed); ``None``: bytes, nothing decoded (no field suggestions).
    now
        The broker clock of the replay (default: the wall clock).
    resolver
        A :class:`~kqlab.serde.SchemaResolver` (default: from ``policy.value.schemas``).
    framing
        The replay's framing (``exact``, ``single``, ``linger``); default ``exact``, or
        ``single`` for a records table or a snapshot of records read through a consumer.
    max_rejection
        Sample-derived suggestions that would reject a larger share are dropped.
    max_examples
        How many failing records each suggestion names.
    max_categories, min_support, min_share
        ``field_in`` / ``header_values`` / ``schema_id_allowed`` allow the values seen at
        least ``min_support`` times and on at least ``min_share`` of the records that carry
        one, and are proposed only when there are at most ``max_categories`` of them.
    schema
        Also derive rules from the registered Avro schema.
    progress
        Called with the name of each stage as it starts (for a progress display).

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
    if not 0 <= min_share <= 1:
        raise ValueError(f"min_share is a share of the values, 0 to 1, not {min_share}")
    if max_examples < 0 or max_categories < 1 or min_support < 1:
        raise ValueError("max_examples must be >= 0, max_categories and min_support >= 1")
    policy = policy or Policy(name="suggested")
    step = progress or (lambda _stage: None)
    step("reading the sample")
    replayer = sample if isinstance(sample, Replayer) else Replayer(
        sample, now=now, framing=_framing_of(sample, framing), resolver=resolver)
    if resolver is None:
        resolver = replayer.resolver
    if resolver is None and policy.value.schemas is not None:
        from kqlab.serde.schemas import SchemaResolver

        resolver = SchemaResolver.from_source(policy.value.schemas)
    settings: dict[str, PlainData] = {
        "max_rejection": max_rejection, "max_examples": max_examples,
        "max_categories": max_categories, "min_support": min_support, "min_share": min_share,
        "framing": replayer.sample.framing, "now": replayer.now}
    smp = replayer.sample
    view = DataView(replayer.context(policy), data_mask(smp.records, smp.batches))
    if not view.n:
        return Suggestions((), smp.records.num_rows, settings, ("the sample has no records",))
    step("measuring the sample")
    proposer = _Proposer(view, policy, resolver, max_rejection=max_rejection,
                         max_categories=max_categories, min_support=min_support,
                         min_share=min_share)
    proposer.presence()
    proposer.wire()
    proposer.headers()
    proposer.sizes()
    proposer.fields()
    if schema:
        proposer.schema()
    candidates, duplicates = _new_candidates(_merge(proposer.out), policy, proposer.notes)
    step("evaluating the candidate rules")
    usable = []
    for c in candidates:
        try:  # each alone first: one that cannot run must not stop the replay of the others
            replayer.evaluate(policy.with_rules([c.rule]))
        except RuleEvaluationError as exc:
            proposer.notes.append(f"{c.rule.id} not suggested: {exc}")
            continue
        usable.append(c)
    step("replaying the policy with the suggestions")
    trial = replayer.run(policy.with_rules([*policy.rules, *(c.rule for c in usable)]))
    counts = {r["rule"]: r for r in trial.rules.to_pylist()}
    n = trial.records.num_rows
    kept = []
    for c in usable:
        failed = counts[c.rule.id]["failed_records"]
        if c.source == "sample" and n and failed / n > max_rejection:
            proposer.notes.append(
                f"{c.rule.id} not suggested: it fails {failed} of {n} records "
                f"({100 * failed / n:.2g} %, more than max_rejection {100 * max_rejection:g} %)")
            continue
        kept.append(c)
    final = trial if len(kept) == len(usable) else replayer.run(
        policy.with_rules([*policy.rules, *(c.rule for c in kept)]))
    baseline = replayer.run(policy).by_outcome() if kept else final.by_outcome()
    return Suggestions(_rated(kept, final, max_examples), final.records.num_rows, settings,
                       tuple(proposer.notes), duplicates, final.by_outcome(), baseline,
                       tuple(final.rules.to_pylist()))


def _framing_of(sample: Any, framing: str | None) -> str:
    """The framing asked for, or the one a sample has: records tables and snapshots of
    consumed records have no batches of their own (rebuilt one record per batch)."""
    if framing is not None:
        return framing
    if isinstance(sample, pa.Table):
        return "single"
    from pathlib import Path

    from kqlab.sources.files import Snapshot, is_snapshot

    if isinstance(sample, str | Path) and is_snapshot(sample):
        sample = Snapshot.open(sample)
    if isinstance(sample, Snapshot) and sample.framing != "exact":
        return "single"
    return "exact"


def _new_candidates(candidates: list[_Candidate], policy: Policy, notes: list[str]
                    ) -> tuple[list[_Candidate], tuple[Duplicate, ...]]:
    """The candidates the policy does not check yet; the others as duplicates (equivalent to
    one of its rules) or notes (an accepted suggestion's id, since edited)."""
    have = {r.id for r in policy.rules}
    out, duplicates = [], []
    for c in candidates:
        twin = next((r for r in policy.rules if equivalent(r, c.rule)), None)
        if twin is not None:
            duplicates.append(Duplicate(id=c.rule.id, rule=twin.id))
        elif c.rule.id in have:
            notes.append(f"{c.rule.id} not suggested: the policy has a rule with this id that "
                         f"checks something else (the sample suggests {_params(c.rule)})")
        else:
            out.append(c)
    return out, tuple(duplicates)


def _params(rule: Rule) -> str:
    return ", ".join(f"{k}: {v}" for k, v in rule.to_dict().items() if k not in ("id", "kind"))


def _rated(kept: list[_Candidate], verdicts: Verdicts, max_examples: int
           ) -> tuple[Suggestion, ...]:
    """Each kept candidate with the replay's counts and its first failing records."""
    counts = {r["rule"]: r for r in verdicts.rules.to_pylist()}
    n = verdicts.records.num_rows
    records = verdicts.records
    failures = records.column("failures").combine_chunks()
    flat = pc.list_flatten(failures)
    parent = pc.list_parent_indices(failures).to_numpy(zero_copy_only=False)
    ids = [c.rule.id for c in kept]
    which = pc.index_in(flat.field("rule"), value_set=pa.array(ids, pa.string())
                        ).fill_null(-1).to_numpy(zero_copy_only=False)
    messages = flat.field("message")
    topic, part, offset = (records.column(c) for c in ("topic", "partition", "offset"))
    out = []
    for k, c in enumerate(kept):
        rows = np.flatnonzero(which == k)[:max_examples]
        examples = tuple(RecordRef(topic=topic[int(parent[i])].as_py(),
                                   partition=part[int(parent[i])].as_py(),
                                   offset=offset[int(parent[i])].as_py(),
                                   message=messages[int(i)].as_py()) for i in rows)
        row = counts[c.rule.id]
        out.append(Suggestion(rule=c.rule, source=c.source, evidence=c.evidence, records=n,
                              failed=row["failed_records"], rejected=row["rejected_records"],
                              evaluation_errors=row["evaluation_errors"], examples=examples,
                              left_out=c.left_out))
    return tuple(out)
