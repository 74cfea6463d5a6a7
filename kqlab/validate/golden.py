"""Golden examples: run every rule's must-pass and must-fail records through the real validator.

A policy is unit-tested like code (issue 4 §3).  :func:`check_examples` encodes each example of
each rule into a record with the policy's own key/value formats (Avro with the policy's schema
source, framed with the Confluent header when ``wire: confluent``), builds one records table
from all of them, and replays it with :func:`kqlab.validate.replay` under the *whole* policy —
every rule, the implicit decode rule and the broker's checks, each record alone in its batch
(``framing="single"``), so one example never makes another collateral.  Then, per example:

* ``pass``: the rule must not be among the record's failures (other rules or broker checks
  may still reject the record; they are reported as context, not as a failure of this test);
* ``fail``: the rule must be among them (the rule's own message is reported).

``observe`` rules count: their failures are in the verdicts too.  An example that cannot be
encoded (a datum that does not fit the schema, no schema source) is an ``error``: the test
fails with the reason, and the other examples still run.

Examples are written as YAML reads them, so an Avro example is brought to what the writer
takes first: a number (or numeric text) for a ``decimal`` field becomes a ``Decimal`` of that
value, exactly — a value with more places than the schema's scale is an error, never rounded.
A Confluent-framed example without ``schema_id`` is framed with the latest schema: the
subject's latest version in a registry, the highest id in a folder of ``<id>.avsc`` files.

(The entry point is ``check_examples``, not ``test_*``: pytest and readers take a ``test_``
function for a test of kqlab; this is a library function testing a *policy*.)
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kqlab.errors import KqlabError
from kqlab.policy.model import RELATIVE_TIMESTAMP_UNITS, Example, Format, Policy, thaw
from kqlab.policy.plain_data import PlainData

if TYPE_CHECKING:
    import pyarrow as pa

    from kqlab.serde.schemas import ParsedSchema, SchemaResolver

__all__ = ["ExampleError", "ExampleResult", "ExamplesReport", "RuleExamplesResult",
           "avro_datum", "check_examples", "encode_example", "examples_table"]

_RELATIVE = re.compile(r"now(?:([+-])([0-9]+)([a-z]+))?\Z")


class ExampleError(KqlabError, ValueError):
    """A golden example cannot be turned into a record (bad datum, no schema to encode with)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExampleResult:
    """One example of one rule: what was expected, what the validator said, and why."""

    rule: str
    expect: str  # "pass" | "fail"
    index: int
    name: str | None
    ok: bool
    #: the record's verdict (accepted / rejected / collateral), None when it could not be built
    outcome: str | None
    #: every failure the record got, ``(rule or broker check, message)``, in verdict order
    failures: tuple[tuple[str, str], ...]
    message: str
    error: bool = False

    @property
    def label(self) -> str:
        """``amount-positive fail[0] (negative amount)``: how reports name the example."""
        return f"{self.rule} {self.expect}[{self.index}]" + (f" ({self.name})" if self.name
                                                             else "")

    def to_dict(self) -> dict[str, PlainData]:
        """Plain data for JSON reports."""
        return {"rule": self.rule, "expect": self.expect, "index": self.index,
                "name": self.name, "ok": self.ok, "error": self.error, "outcome": self.outcome,
                "failures": [{"rule": r, "message": m} for r, m in self.failures],
                "message": self.message}


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleExamplesResult:
    """The examples of one rule and whether they all behaved."""

    rule: str
    examples: tuple[ExampleResult, ...]

    @property
    def ok(self) -> bool:
        """True when every example behaved as declared."""
        return all(e.ok for e in self.examples)

    def to_dict(self) -> dict[str, PlainData]:
        """Plain data for JSON reports."""
        return {"rule": self.rule, "ok": self.ok,
                "passed": sum(e.ok for e in self.examples),
                "failed": sum(not e.ok for e in self.examples),
                "examples": [e.to_dict() for e in self.examples]}


@dataclass(frozen=True, slots=True, kw_only=True)
class ExamplesReport:
    """What ``kqlab test`` prints: per rule, per example, pass or fail with the reason."""

    policy: str
    now: int
    rules: tuple[RuleExamplesResult, ...] = ()
    notes: tuple[str, ...] = field(default=())
    #: the rule table of the examples' replay (rows as dicts): a field no example record has
    #: is found there as in any replay (:mod:`kqlab.validate.rule_health`)
    rule_rows: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    @property
    def ok(self) -> bool:
        """True when every example of every rule behaved (vacuously true without examples)."""
        return all(r.ok for r in self.rules)

    @property
    def examples(self) -> int:
        """How many examples ran."""
        return sum(len(r.examples) for r in self.rules)

    @property
    def failed(self) -> tuple[ExampleResult, ...]:
        """The examples that did not behave."""
        return tuple(e for r in self.rules for e in r.examples if not e.ok)

    def rule(self, rule_id: str) -> RuleExamplesResult:
        """The result of one rule (``KeyError`` when it has no examples)."""
        for r in self.rules:
            if r.rule == rule_id:
                return r
        raise KeyError(f"rule {rule_id!r} has no examples in policy {self.policy!r}")

    def to_dict(self) -> dict[str, PlainData]:
        """The ``kqlab test --json`` document."""
        return {"policy": self.policy, "now": self.now, "ok": self.ok,
                "rules_tested": len(self.rules), "examples": self.examples,
                "failed": len(self.failed), "rules": [r.to_dict() for r in self.rules],
                "notes": list(self.notes)}

    def render(self) -> str:
        """Human-readable lines: one per rule, then one per example that misbehaved."""
        lines = [f"policy {self.policy}: {len(self.rules)} rule(s) with examples, "
                 f"{self.examples} example(s)"]
        for r in self.rules:
            good = sum(e.ok for e in r.examples)
            lines.append(f"  {'ok  ' if r.ok else 'FAIL'} {r.rule:<28} {good}/{len(r.examples)}")
            lines.extend(f"       {e.expect}[{e.index}]{f' ({e.name})' if e.name else ''}: "
                         f"{e.message}" for e in r.examples if not e.ok)
        lines.extend(f"  note: {n}" for n in self.notes)
        failed = len(self.failed)
        lines.append("all examples behave" if not failed else
                     f"{failed} example(s) do not behave")
        return "\n".join(lines)


# ------------------------------------------------------------------------------- encoding
def _timestamp(example: Example, now: int) -> int:
    ts = example.timestamp
    if ts is None:
        return now
    if isinstance(ts, int):
        return ts
    m = _RELATIVE.match(ts)
    if m is None or (m.group(3) and m.group(3) not in RELATIVE_TIMESTAMP_UNITS):
        raise ExampleError(f"timestamp {ts!r} is neither epoch ms nor now[+-]N<unit>")
    if not m.group(1):
        return now
    delta = int(m.group(2)) * RELATIVE_TIMESTAMP_UNITS[m.group(3)]
    return now + delta if m.group(1) == "+" else now - delta


class _Encoder:
    """Encodes example keys/values with a policy's formats; one schema resolver per format."""

    def __init__(self, policy: Policy, resolver: SchemaResolver | None = None) -> None:
        self.policy = policy
        self._resolvers: dict[str, SchemaResolver] = \
            {"value": resolver} if resolver is not None else {}

    def resolver(self, target: str, fmt: Format) -> SchemaResolver:
        if target not in self._resolvers:
            if fmt.schemas is None:
                raise ExampleError(f"the policy's {target} format {fmt.format} has no schema "
                                   f"source to encode the example with — add {target}.schemas")
            from kqlab.serde.schemas import SchemaResolver

            self._resolvers[target] = SchemaResolver.from_source(fmt.schemas)
        return self._resolvers[target]

    def _schema_for(self, target: str, fmt: Format, schema_id: int | None
                    ) -> tuple[ParsedSchema, int | None]:
        """(writer schema, id to frame with) for an Avro example."""
        from kqlab.serde.schemas import SchemaNotFound, SchemaSourceError

        res = self.resolver(target, fmt)
        try:
            if schema_id is not None and res.is_registered(schema_id):
                return res.schema(schema_id), schema_id
            if fmt.wire == "raw":
                return res.unframed(), -1
            if res.path is not None:
                framed = _folder_latest(res)
                if framed is not None:
                    return framed, framed.schema_id if schema_id is None else schema_id
            latest = res.latest(fmt.schemas.subject if fmt.schemas is not None else None)
            # an unregistered schema_id frames a value written with the latest schema
            return latest, latest.schema_id if schema_id is None else schema_id
        except (SchemaNotFound, SchemaSourceError) as exc:
            raise ExampleError(f"no {target} schema to encode the example with: {exc}") from None

    def _json_schema_id(self, target: str, fmt: Format, schema_id: int | None) -> int:
        if schema_id is not None:
            return schema_id
        from kqlab.serde.schemas import SchemaNotFound, SchemaSourceError

        res = self.resolver(target, fmt)
        subject = fmt.schemas.subject if fmt.schemas is not None else None
        if subject is None:
            raise ExampleError(f"a json {target} with wire: confluent needs schema_id on the "
                               f"example or {target}.schemas.subject in the policy")
        try:
            return int(res.client.get_latest_version(subject).schema_id)
        except (SchemaNotFound, SchemaSourceError) as exc:
            raise ExampleError(str(exc)) from None
        except Exception as exc:  # the registry client's own errors
            raise ExampleError(f"subject {subject!r}: {exc}") from None

    def encode(self, target: str, data: PlainData, schema_id: int | None = None
               ) -> bytes | None:
        """``data`` (decoded content) as the bytes the policy's ``target`` format reads."""
        if data is None:
            return None
        fmt = self.policy.key if target == "key" else self.policy.value
        data = thaw(data)
        if fmt.format in ("none", "bytes", "string"):
            if not isinstance(data, str):
                raise ExampleError(f"the {target} format is {fmt.format}: give the {target} as "
                                   f"text, not {type(data).__name__}")
            return data.encode()
        if fmt.format == "json":
            import orjson

            payload = orjson.dumps(data)
            if fmt.wire != "confluent":
                return payload
            return b"\x00" + self._json_schema_id(target, fmt, schema_id).to_bytes(4, "big") + \
                payload
        if fmt.format == "avro":
            from fastavro import schemaless_writer

            schema, sid = self._schema_for(target, fmt, schema_id)
            buf = io.BytesIO()
            parsed = schema.parsed
            named = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}
            try:
                schemaless_writer(buf, parsed, avro_datum(parsed, data, named))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise ExampleError(f"the {target} does not fit Avro schema "
                                   f"{schema.schema_id if schema.schema_id is not None else ''}"
                                   f" ({schema.origin}): {type(exc).__name__}: {exc}") from None
            body = buf.getvalue()
            if fmt.wire != "confluent":
                return body
            if sid is None:
                raise ExampleError(f"the {target} schema ({schema.origin}) has no schema id to "
                                   "frame the example with — give the example a schema_id")
            return b"\x00" + int(sid).to_bytes(4, "big", signed=False) + body
        raise ExampleError(f"unknown {target} format {fmt.format!r}")

    def row(self, example: Example, now: int) -> dict[str, object]:
        """The example's key, value, headers and timestamp as a records-table row."""
        value = example.raw_value.encode() if example.raw_value is not None else \
            self.encode("value", example.value, example.schema_id)
        return {"key": self.encode("key", example.key), "value": value,
                "headers": [{"key": k, "value": None if v is None else v.encode()}
                            for k, v in example.headers],
                "timestamp": _timestamp(example, now)}


def _folder_latest(res: SchemaResolver) -> ParsedSchema | None:
    """The schema a framed example is written with when its schemas are a folder of
    ``<id>.avsc`` files: the highest id (ids grow as schemas are registered, so it is the
    latest); None when the folder has no ``<id>.avsc`` (the caller then says what to add)."""
    if res.path is None:
        return None
    folder = Path(res.path)
    files = [folder] if folder.is_file() else sorted(folder.glob("*.avsc"))
    ids = sorted(int(f.stem) for f in files if f.stem.isdigit())
    return res.schema(ids[-1]) if ids else None


#: which Python values a primitive Avro type takes (a union branch is chosen with these)
_AVRO_TAKES = {
    "null": lambda d: d is None, "boolean": lambda d: isinstance(d, bool),
    "int": lambda d: isinstance(d, int) and not isinstance(d, bool),
    "long": lambda d: isinstance(d, int) and not isinstance(d, bool),
    "float": lambda d: isinstance(d, int | float | Decimal) and not isinstance(d, bool),
    "double": lambda d: isinstance(d, int | float | Decimal) and not isinstance(d, bool),
    "bytes": lambda d: isinstance(d, bytes), "string": lambda d: isinstance(d, str),
}


def _takes(schema: Any, datum: Any, named: Mapping[str, Any]) -> bool:
    """Whether ``datum`` plausibly belongs to the (union branch) ``schema``."""
    if isinstance(schema, str):
        if schema in named:
            return _takes(named[schema], datum, named)
        return _AVRO_TAKES.get(schema, lambda _d: False)(datum)
    if not isinstance(schema, Mapping):
        return False
    if schema.get("logicalType") == "decimal":
        return _decimal(datum) is not None or isinstance(datum, bytes)
    kind = schema.get("type")
    if kind in ("record", "error", "map"):
        return isinstance(datum, Mapping)
    if kind == "array":
        return isinstance(datum, list)
    if kind == "enum":
        return isinstance(datum, str)
    if kind == "fixed":
        return isinstance(datum, bytes)
    return _takes(kind, datum, named)


def _decimal(datum: Any) -> Decimal | None:
    """``datum`` (a number or numeric text) as the exact ``Decimal`` it writes; None when it
    is not one."""
    if isinstance(datum, Decimal):
        return datum
    if isinstance(datum, bool) or not isinstance(datum, int | float | str):
        return None
    try:
        value = Decimal(str(datum))  # str(25.5) == '25.5': the number as written
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    return value


def avro_datum(schema: Any, datum: Any, named: Mapping[str, Any] | None = None) -> Any:
    """``datum`` as fastavro writes it with ``schema`` (fastavro's parsed form; ``named`` its
    named types): ``decimal`` values become ``Decimal`` (YAML gives floats, ints or text),
    through records, arrays, maps and the union branch the value belongs to; everything else
    is left to the writer, which says what does not fit.

    Examples
    --------
    >>> dec = {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}
    >>> avro_datum({"type": "record", "name": "o", "fields": [
    ...     {"name": "amount", "type": ["null", dec]}]}, {"amount": 25.5})
    {'amount': Decimal('25.5')}
    """
    named = named or {}
    if datum is None:
        return None
    if isinstance(schema, str):
        return avro_datum(named[schema], datum, named) if schema in named else datum
    if isinstance(schema, list):
        for branch in schema:
            if branch != "null" and _takes(branch, datum, named):
                return avro_datum(branch, datum, named)
        return datum
    if not isinstance(schema, Mapping):
        return datum
    kind = schema.get("type")
    if schema.get("logicalType") == "decimal" and kind in ("bytes", "fixed"):
        value = _decimal(datum)
        return datum if value is None else value
    if kind in ("record", "error") and isinstance(datum, Mapping):
        types = {f["name"]: f["type"] for f in schema.get("fields") or ()
                 if isinstance(f, Mapping) and "name" in f}
        return {k: avro_datum(types[k], v, named) if k in types else v
                for k, v in datum.items()}
    if kind == "array" and isinstance(datum, list):
        return [avro_datum(schema.get("items"), v, named) for v in datum]
    if kind == "map" and isinstance(datum, Mapping):
        return {k: avro_datum(schema.get("values"), v, named) for k, v in datum.items()}
    if isinstance(kind, Mapping | list) or (isinstance(kind, str) and kind in named):
        return avro_datum(kind, datum, named)
    return datum


def encode_example(policy: Policy, example: Example, *, now: int,
                   resolver: SchemaResolver | None = None) -> dict[str, object]:
    """One example as a records-table row (key, value, headers, timestamp), without offsets.

    Raises
    ------
    ExampleError
        When the example cannot be encoded with the policy's formats.

    Examples
    --------
    >>> from kqlab.policy import loads_policy
    >>> policy = loads_policy("kqlab: 1\\nname: p\\nvalue: {format: json}\\n")
    >>> row = encode_example(policy, Example(key="k", value={"a": 1}, headers={"h": "x"}),
    ...                      now=1000)
    >>> row["key"], row["value"], row["headers"], row["timestamp"]
    (b'k', b'{"a":1}', [{'key': 'h', 'value': b'x'}], 1000)
    """
    return _Encoder(policy, resolver).row(example, now)


def _iter_examples(policy: Policy) -> Iterator[tuple[str, str, int, Example]]:
    for rule in policy.rules:
        if rule.examples is None:
            continue
        for expect, items in (("pass", rule.examples.passing), ("fail", rule.examples.failing)):
            for i, ex in enumerate(items):
                yield rule.id, expect, i, ex


def examples_table(policy: Policy, *, now: int, resolver: SchemaResolver | None = None
                   ) -> tuple[pa.Table, list[tuple[str, str, int, Example]], dict[int, str]]:
    """The records table of every encodable example (one partition, offsets 0..n-1).

    Returns ``(table, examples, errors)``: ``examples`` lists ``(rule, expect, index,
    example)`` in table order for the encoded ones, ``errors`` maps positions in the full
    example list (:func:`_iter_examples` order) to why they could not be encoded.
    """
    import pyarrow as pa

    from kqlab.records import RECORDS_SCHEMA

    encoder = _Encoder(policy, resolver)
    rows: list[dict[str, object]] = []
    kept: list[tuple[str, str, int, Example]] = []
    errors: dict[int, str] = {}
    topic = policy.topics.names[0] if policy.topics.names else "examples"
    for pos, item in enumerate(_iter_examples(policy)):
        try:
            row = encoder.row(item[3], now)
        except ExampleError as exc:
            errors[pos] = str(exc)
            continue
        n = len(rows)
        rows.append({"topic": topic, "partition": 0, "offset": n, "timestamp_type": 0,
                     "batch_offset": n, "batch_index": 0, **row})
        kept.append(item)
    return pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA), kept, errors


# --------------------------------------------------------------------------------- running
def check_examples(policy: Policy, *, now: int | None = None,
                   resolver: SchemaResolver | None = None) -> ExamplesReport:
    """Run the golden examples of every rule of ``policy`` through the real validator.

    ``now`` is the broker clock (relative example timestamps are relative to it; default the
    wall clock); ``resolver`` a :class:`~kqlab.serde.SchemaResolver` for the value schemas
    (default: built from the policy's ``value.schemas``).

    Examples
    --------
    >>> from kqlab.policy import loads_policy
    >>> policy = loads_policy('''
    ... kqlab: 1
    ... name: orders
    ... value: {format: json}
    ... rules:
    ... - id: amount-positive
    ...   kind: field_range
    ...   field: amount
    ...   min: 0.01
    ...   examples:
    ...     pass: [{value: {amount: 10}}]
    ...     fail: [{value: {amount: -1}, name: negative}, {value: {amount: 5}, name: wrong}]
    ... ''')
    >>> report = check_examples(policy, now=1763700000000)
    >>> report.ok, report.examples, [e.label for e in report.failed]
    (False, 3, ['amount-positive fail[1] (wrong)'])
    >>> report.failed[0].message
    'expected rule amount-positive to reject this record; it accepted it (record accepted)'
    """
    from kqlab.validate.replayer import replay

    now = int(time.time() * 1000) if now is None else int(now)
    every = list(_iter_examples(policy))
    if not every:
        return ExamplesReport(policy=policy.name, now=now,
                              notes=("the policy has no golden examples: add examples: "
                                     "{pass: [...], fail: [...]} to its rules",))
    table, _, errors = examples_table(policy, now=now, resolver=resolver)
    outcomes: list[str] = []
    failures: list[tuple[tuple[str, str], ...]] = []
    rule_rows: tuple[dict[str, Any], ...] = ()
    if table.num_rows:
        verdicts = replay(table, policy, now=now, framing="single", resolver=resolver)
        rule_rows = tuple(verdicts.rules.to_pylist())
        recs = verdicts.records.sort_by("offset")
        # both columns are non-null in the verdict contract (outcome; a list, maybe empty)
        outcomes = [str(o) for o in recs.column("outcome").to_pylist()]
        failures = [tuple((str(f["rule"]), str(f["message"])) for f in fs or ())
                    for fs in recs.column("failures").to_pylist()]
    by_rule: dict[str, list[ExampleResult]] = {}
    row = 0
    for pos, (rule_id, expect, index, ex) in enumerate(every):
        if pos in errors:
            result = ExampleResult(rule=rule_id, expect=expect, index=index, name=ex.name,
                                   ok=False, outcome=None, failures=(), error=True,
                                   message=f"cannot build the record: {errors[pos]}")
        else:
            result = _judge(rule_id, expect, index, ex, outcomes[row], failures[row])
            row += 1
        by_rule.setdefault(rule_id, []).append(result)
    return ExamplesReport(policy=policy.name, now=now, rules=tuple(
        RuleExamplesResult(rule=r, examples=tuple(items)) for r, items in by_rule.items()),
        rule_rows=rule_rows)



def _judge(rule_id: str, expect: str, index: int, ex: Example, outcome: str,
           fs: tuple[tuple[str, str], ...]) -> ExampleResult:
    mine = [m for r, m in fs if r == rule_id]
    others = [f"{r}: {m}" for r, m in fs if r != rule_id]
    context = f"record {outcome}" + (f"; other failures: {'; '.join(others)}" if others else "")
    if expect == "pass":
        ok = not mine
        message = (f"rule {rule_id} accepts it ({context})" if ok else
                   f"expected rule {rule_id} to accept this record; it rejected it: {mine[0]}"
                   + (f" ({'; '.join(others)})" if others else ""))
    else:
        ok = bool(mine)
        message = (f"rule {rule_id} rejects it: {mine[0]}" if ok else
                   f"expected rule {rule_id} to reject this record; it accepted it ({context})")
    return ExampleResult(rule=rule_id, expect=expect, index=index, name=ex.name, ok=ok,
                         outcome=outcome, failures=fs, message=message)
