"""Rule implementations for the local (Arrow) engine, keyed by catalog kind.

Each implementation takes an :class:`~kqlab.validate.context.EvalContext` and a
:class:`~kqlab.policy.model.Rule` and returns a :class:`RuleResult`: a boolean ``failed`` mask
over the sample's records (computed with Arrow/numpy kernels, no per-record Python loop for
byte-level rules) and one message per failing record (rendered only for the failures).  The
catalog (``kqlab.policy.catalog``) declares the kinds; :func:`implements` registers one
function per kind, and :func:`evaluate_rule` applies the ``when`` precondition.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.errors import KqlabError
from kqlab.policy.catalog import KINDS
from kqlab.policy.model import Rule
from kqlab.validate.context import EvalContext

if TYPE_CHECKING:
    from kqlab.policy.model import Format
    from kqlab.validate.rule_table import Unseen


class RuleEvaluationError(KqlabError):
    """A rule cannot run on this sample (bad plugin path, missing schema source ...)."""


@dataclass(frozen=True, slots=True)
class RuleResult:
    """Which records fail a rule, and why (``messages`` aligned with ``failing``)."""

    failed: np.ndarray  # bool[N]
    messages: tuple[str, ...]
    #: records the rule could not judge (e.g. a ``when`` precondition errored); they fail too
    errors: int = 0
    #: which records those are (a subset of ``failed``; None: none): an evaluation error is a
    #: status of its own in the verdicts, not a false
    error_mask: np.ndarray | None = None
    #: the records the rule judged (set by the replay: not a marker, decoded when it reads the
    #: value), and the names it reads that none of them has (:mod:`kqlab.validate.rule_table`)
    judged: int = 0
    unseen: tuple[Unseen, ...] = ()

    @property
    def failing(self) -> np.ndarray:
        """Indices of the failing records."""
        return np.flatnonzero(self.failed)

    @property
    def count(self) -> int:
        """Number of failing records."""
        return int(self.failed.sum())


Impl = Callable[[EvalContext, Rule], RuleResult]
_IMPLS: dict[str, Impl] = {}


def implements(kind_name: str) -> Callable[[Impl], Impl]:
    """Register the local-engine implementation of a catalog kind."""
    if kind_name not in KINDS:
        raise KeyError(f"{kind_name!r} is not a catalog rule kind")

    def deco(fn: Impl) -> Impl:
        _IMPLS[kind_name] = fn
        return fn

    return deco


def missing_implementations() -> list[str]:
    """Catalog kinds without a local implementation (a test asserts this is empty)."""
    return sorted(set(KINDS) - set(_IMPLS))


def evaluate_rule(ctx: EvalContext, rule: Rule) -> RuleResult:
    """Evaluate ``rule`` over the sample, honouring its ``when`` precondition."""
    impl = _IMPLS.get(rule.kind)
    if impl is None:
        raise RuleEvaluationError(f"rule {rule.id!r}: kind {rule.kind!r} has no implementation "
                                  "in the local engine")
    result = impl(ctx, rule)
    keep = _judged(ctx, rule)
    if keep is not None:
        result = _restrict(result, keep)
    if rule.when is None:
        return result
    applies, when_errors = _when_mask(ctx, rule.when)
    if keep is not None:  # a precondition cannot bring back a record the rule does not judge
        when_errors &= keep
    own = result.failed & applies
    failed = own | when_errors
    # the rule's own message where it failed and applies, else (the precondition errored) the
    # precondition's: gathered with index arrays, not a loop over the failures
    idx = np.flatnonzero(failed)
    from_rule = own[idx]
    texts = np.full(len(idx), f"precondition of rule {rule.id!r} could not be evaluated",
                    dtype=object)
    if from_rule.any():
        pos = np.searchsorted(result.failing, idx[from_rule])
        texts[from_rule] = np.asarray(result.messages, dtype=object)[pos]
    errors = when_errors if result.error_mask is None else when_errors | \
        (result.error_mask & own)
    return RuleResult(failed, tuple(texts.tolist()), errors=int(errors.sum()),
                      error_mask=errors if errors.any() else None)


#: rules that judge decoding itself
DECODE_KINDS = frozenset({"decodable", "avro_valid", "json_valid"})


def decodes(fmt: Format | None) -> bool:
    """Whether a format is decoded (json, avro, string) rather than taken as bytes."""
    return fmt is not None and fmt.format in ("json", "avro", "protobuf", "string")


def _judged(ctx: EvalContext, rule: Rule) -> np.ndarray | None:
    """The records a rule judges (None: all of them).

    An undecodable value is its own rejection reason (the decode rule), so rules that read the
    decoded value do not judge it again; field checks do not judge tombstones (no value).
    """
    keep = None
    if "decoded_value" in rule.spec.needs and rule.kind not in DECODE_KINDS and \
            decodes(ctx.value_format):
        keep = ~ctx.decode_failed("value")
    if rule.kind.startswith("field_") and ctx.n and (ctx.value_size < 0).any():
        present = ctx.value_size >= 0
        keep = present if keep is None else keep & present
    return keep


def rule_judges(ctx: EvalContext, rule: Rule) -> np.ndarray:
    """Per record: whether ``rule`` judges it (see :func:`_judged`)."""
    keep = _judged(ctx, rule)
    return np.ones(ctx.n, dtype=bool) if keep is None else keep


def _restrict(result: RuleResult, keep: np.ndarray) -> RuleResult:
    """``result`` with failures only where ``keep`` is true."""
    if keep.all() or not result.failed.any():
        return result
    k = keep[result.failing]
    errors = None if result.error_mask is None else result.error_mask & keep
    return RuleResult(result.failed & keep,
                      tuple(m for m, ok in zip(result.messages, k, strict=True) if ok),
                      0 if errors is None else int(errors.sum()), errors)


def _when_mask(ctx: EvalContext, when: str) -> tuple[np.ndarray, np.ndarray]:
    """Where a ``when`` precondition holds, and where it could not be evaluated."""
    # vectorised where the expression allows, per record for the rest (same results)
    from kqlab.validate.cel import evaluate_cel

    col = evaluate_cel(ctx, when)
    return col.passed, col.error


def _python_values_or_none(ctx: EvalContext) -> list[object] | None:
    fmt = ctx.value_format
    if fmt is None or fmt.format in ("none", "bytes"):
        return None
    return ctx.python_values("value")


#: the values a failing record's message is rendered with (``{"size": 12}``); hashable
MessageValues = dict[str, int | str | None]


def _result(rule: Rule, failed: np.ndarray,
            render: Callable[[int], MessageValues] | None = None) -> RuleResult:
    idx = np.flatnonzero(failed)
    if render is None:
        text = rule.render_message()
        return RuleResult(failed, (text,) * len(idx))
    # failures often share their values (the same size, the same header): render each once
    cache: dict[tuple[tuple[str, int | str | None], ...], str] = {}
    out = []
    for i in idx.tolist():
        values = render(i)
        key = tuple(values.items())
        rendered = cache.get(key)
        if rendered is None:
            rendered = cache[key] = rule.render_message(**values)
        out.append(rendered)
    return RuleResult(failed, tuple(out))


def _result_of(rule: Rule, failed: np.ndarray, values: np.ndarray, name: str) -> RuleResult:
    """:func:`_result` for a message with one integer field (``{size}``): each distinct value
    is rendered once and the texts gathered by index (vectorised; the same texts)."""
    idx = np.flatnonzero(failed)
    if not len(idx):
        return RuleResult(failed, ())
    distinct, which = np.unique(values[idx], return_inverse=True)
    texts = np.array([rule.render_message(**{name: int(v)}) for v in distinct.tolist()],
                     dtype=object)
    return RuleResult(failed, tuple(texts[which].tolist()))


# ---------------------------------------------------------------------------------------------
# presence and sizes
# ---------------------------------------------------------------------------------------------

@implements("key_required")
def _key_required(ctx: EvalContext, rule: Rule) -> RuleResult:
    size = ctx.key_size
    failed = size < 0
    if not rule.param("allow_empty"):
        failed |= size == 0
    return _result(rule, failed)


@implements("value_required")
def _value_required(ctx: EvalContext, rule: Rule) -> RuleResult:
    size = ctx.value_size
    failed = np.zeros(ctx.n, dtype=bool) if rule.param("allow_tombstones") else size < 0
    if not rule.param("allow_empty"):
        failed |= size == 0
    return _result(rule, failed)


def _bounded(rule: Rule, size: np.ndarray, applicable: np.ndarray) -> np.ndarray:
    lo = rule.param("min")
    hi = rule.param("max")
    failed = np.zeros(len(size), dtype=bool)
    if lo is not None:
        failed |= size < lo
    if hi is not None:
        failed |= size > hi
    return failed & applicable


@implements("key_size")
def _key_size(ctx: EvalContext, rule: Rule) -> RuleResult:
    size = ctx.key_size
    failed = _bounded(rule, size, size >= 0)  # a null key has no size: key_required judges it
    return _result_of(rule, failed, size, "size")


@implements("value_size")
def _value_size(ctx: EvalContext, rule: Rule) -> RuleResult:
    size = ctx.value_size
    failed = _bounded(rule, size, size >= 0)
    return _result_of(rule, failed, size, "size")


@implements("headers_size")
def _headers_size(ctx: EvalContext, rule: Rule) -> RuleResult:
    size = ctx.headers_size
    failed = size > rule.param("max")
    return _result_of(rule, failed, size, "size")


@implements("record_size")
def _record_size(ctx: EvalContext, rule: Rule) -> RuleResult:
    size = ctx.key_size.clip(min=0) + ctx.value_size.clip(min=0) + ctx.headers_size
    failed = size > rule.param("max")
    return _result_of(rule, failed, size, "size")


# ---------------------------------------------------------------------------------------------
# headers
# ---------------------------------------------------------------------------------------------

def _per_record_any(ctx: EvalContext, header_mask: np.ndarray) -> np.ndarray:
    parent = ctx.headers.parent[header_mask]
    out = np.zeros(ctx.n, dtype=bool)
    out[parent] = True
    return out


def _named(ctx: EvalContext, name: str) -> np.ndarray:
    keys = ctx.headers.keys
    if len(keys) == 0:
        return np.zeros(0, dtype=bool)
    return pc.equal(keys, pa.scalar(name, pa.string())).fill_null(False).to_numpy(
        zero_copy_only=False)


@implements("header_required")
def _header_required(ctx: EvalContext, rule: Rule) -> RuleResult:
    present = _per_record_any(ctx, _named(ctx, rule.param("name")))
    return _result(rule, ~present)


def _header_value_rule(ctx: EvalContext, rule: Rule, bad_value: np.ndarray) -> RuleResult:
    named = _named(ctx, rule.param("name"))
    failed = _per_record_any(ctx, named & bad_value)
    if rule.param("required"):
        failed |= ~_per_record_any(ctx, named)
    return _result(rule, failed)


@implements("header_values")
def _header_values(ctx: EvalContext, rule: Rule) -> RuleResult:
    values = ctx.headers.values
    allowed = pa.array([v.encode() if isinstance(v, str) else v for v in rule.param("values")],
                       pa.binary())
    ok = pc.is_in(values, value_set=allowed).fill_null(False) if len(values) else \
        pa.array([], pa.bool_())
    return _header_value_rule(ctx, rule, ~ok.to_numpy(zero_copy_only=False))


@implements("header_pattern")
def _header_pattern(ctx: EvalContext, rule: Rule) -> RuleResult:
    values = ctx.headers.values
    pattern = re.compile(rule.param("pattern"))
    # header values are bytes: decode for the match; undecodable or null values never match
    bad = np.array([v is None or pattern.fullmatch(v.decode("utf-8", "replace")) is None
                    for v in values.to_pylist()], dtype=bool) if len(values) else \
        np.zeros(0, dtype=bool)
    return _header_value_rule(ctx, rule, bad)


@implements("headers_unique")
def _headers_unique(ctx: EvalContext, rule: Rule) -> RuleResult:
    h = ctx.headers
    failed = np.zeros(ctx.n, dtype=bool)
    dup_names: dict[int, str | None] = {}  # header keys are strings, never null in practice
    multi = np.flatnonzero(h.counts > 1)
    if len(multi):
        names = rule.param("names")
        keys = h.keys.to_pylist()
        starts = np.concatenate([[0], np.cumsum(h.counts)[:-1]])
        for i in multi.tolist():  # only records that have two or more headers
            seen: set[str | None] = set()
            s = int(starts[i])
            for k in keys[s:s + int(h.counts[i])]:
                if names is not None and k not in names:
                    continue
                if k in seen:
                    failed[i] = True
                    dup_names[i] = k
                    break
                seen.add(k)
    return _result(rule, failed, lambda i: {"name": dup_names[i]})


# ---------------------------------------------------------------------------------------------
# timestamps
# ---------------------------------------------------------------------------------------------

@implements("timestamp_window")
def _timestamp_window(ctx: EvalContext, rule: Rule) -> RuleResult:
    ts = ctx.timestamps
    ref = ctx.batch_first_timestamp if rule.param("relative_to") == "batch" else \
        np.full(ctx.n, ctx.now, dtype=np.int64)
    failed = np.zeros(ctx.n, dtype=bool)
    before, after = rule.param("before_ms"), rule.param("after_ms")
    with np.errstate(over="ignore"):
        if before is not None:
            failed |= ts < ref - np.int64(before)
        if after is not None:
            failed |= ts > ref + np.int64(after)
    return _result(rule, failed, lambda i: {"timestamp": int(ts[i]), "reference": int(ref[i])})


# ---------------------------------------------------------------------------------------------
# wire format, schemas, syntax (kqlab.serde)
# ---------------------------------------------------------------------------------------------

def _present(ctx: EvalContext, target: str) -> np.ndarray:
    return (ctx.value_size if target == "value" else ctx.key_size) >= 0


@implements("magic_byte")
def _magic_byte(ctx: EvalContext, rule: Rule) -> RuleResult:
    target = rule.param("target")
    wire = ctx.wire(target)
    framed = np.asarray(wire.framed, dtype=bool)
    return _result(rule, ~framed & _present(ctx, target), lambda i: {"target": target})


def _schema_ids(ctx: EvalContext, target: str) -> tuple[np.ndarray, np.ndarray]:
    wire = ctx.wire(target)
    framed = np.asarray(wire.framed, dtype=bool)
    ids = wire.schema_id.fill_null(-1).to_numpy(zero_copy_only=False) \
        if isinstance(wire.schema_id, pa.Array) else np.asarray(wire.schema_id)
    return framed, ids.astype(np.int64)


@implements("schema_id_allowed")
def _schema_id_allowed(ctx: EvalContext, rule: Rule) -> RuleResult:
    target = rule.param("target")
    framed, ids = _schema_ids(ctx, target)
    allowed = np.asarray(sorted(rule.param("ids")), dtype=np.int64)
    failed = _present(ctx, target) & (~framed | ~np.isin(ids, allowed))
    return _result(rule, failed,
                   lambda i: {"schema_id": int(ids[i]) if framed[i] else "(none)"})


@implements("schema_id_registered")
def _schema_id_registered(ctx: EvalContext, rule: Rule) -> RuleResult:
    target = rule.param("target")
    if ctx.resolver is None:
        raise RuleEvaluationError(f"rule {rule.id!r} needs a schema source: set "
                                  f"{target}.schemas in the policy")
    framed, ids = _schema_ids(ctx, target)
    subject = rule.param("subject")
    known = {int(i): bool(ctx.resolver.is_registered(int(i), subject))
             for i in np.unique(ids[framed]).tolist()}
    registered = np.array([known.get(int(i), False) for i in ids], dtype=bool) if len(ids) \
        else np.zeros(0, dtype=bool)
    failed = _present(ctx, target) & (~framed | ~registered)
    return _result(rule, failed,
                   lambda i: {"schema_id": int(ids[i]) if framed[i] else "(none)"})


def _decode_failures(ctx: EvalContext, rule: Rule) -> RuleResult:
    decoded = ctx.decoded(rule.param("target"))
    errors = decoded.errors
    failed = pc.is_valid(errors).to_numpy(zero_copy_only=False) if len(errors) else \
        np.zeros(0, dtype=bool)
    texts = errors.to_pylist()
    return _result(rule, failed, lambda i: {"error": texts[i]})


@implements("decodable")
def _decodable(ctx: EvalContext, rule: Rule) -> RuleResult:
    return _decode_failures(ctx, rule)


@implements("avro_valid")
def _avro_valid(ctx: EvalContext, rule: Rule) -> RuleResult:
    return _decode_failures(ctx, rule)


@implements("json_valid")
def _json_valid(ctx: EvalContext, rule: Rule) -> RuleResult:
    return _decode_failures(ctx, rule)


@implements("json_schema")
def _json_schema(ctx: EvalContext, rule: Rule) -> RuleResult:
    import fastjsonschema

    from kqlab.policy.model import thaw

    schema = rule.param("schema")
    if schema is None and rule.param("path"):
        import orjson

        with open(rule.param("path"), "rb") as fh:
            schema = orjson.loads(fh.read())
    if schema is None:
        raise RuleEvaluationError(f"rule {rule.id!r} needs a JSON Schema: give schema or path")
    validate = fastjsonschema.compile(thaw(schema))
    decoded = ctx.decoded(rule.param("target"))
    values = decoded.python_values()
    decode_errors = decoded.errors.to_pylist()
    failed = np.zeros(ctx.n, dtype=bool)
    why: dict[int, str] = {}
    for i, v in enumerate(values):
        decode_error = decode_errors[i]
        if decode_error is not None:
            failed[i], why[i] = True, decode_error
            continue
        if v is None and ctx.value_size[i] < 0:
            continue  # a tombstone has no value to check (value_required judges it)
        try:
            validate(v)
        except (fastjsonschema.JsonSchemaValueException,
                fastjsonschema.JsonSchemaValuesException) as exc:  # what validation raises
            failed[i], why[i] = True, exc.message
    return _result(rule, failed, lambda i: {"error": why[i]})


# ---------------------------------------------------------------------------------------------
# field checks, expressions, plugins
# ---------------------------------------------------------------------------------------------

def _field_rule(ctx: EvalContext, rule: Rule) -> RuleResult:
    from kqlab.validate.fields import evaluate_field_rule

    decoded = ctx.decoded("value")
    # a JSON column whose records disagree on types falls back to text: use the objects
    values = decoded.python_values() if decoded.fallback else decoded.values
    # JSON keeps the parsed objects: verdicts and messages follow each record's own types
    res = evaluate_field_rule(rule, values, decoded._python)
    failed = np.asarray(res.failed, dtype=bool)
    return RuleResult(failed, tuple(res.failing_messages()))


for _name in ("field_not_null", "field_range", "field_in", "field_regex", "field_length",
              "field_type"):
    implements(_name)(_field_rule)


@implements("cel")
def _cel(ctx: EvalContext, rule: Rule) -> RuleResult:
    """Column kernels for the vectorised CEL subset, the per-record evaluator for the rows
    (or expressions) they cannot decide: verdicts and error texts are the per-record ones
    (``kqlab.validate.cel``)."""
    from kqlab.validate.cel import evaluate_cel

    col = evaluate_cel(ctx, rule.param("expr"))
    failed = ~col.passed
    base = rule.render_message()
    errors = col.messages
    failing = np.flatnonzero(failed)
    msgs = tuple(base if i not in errors else evaluation_error_text(rule, errors[i])
                 for i in failing.tolist()) if errors else (base,) * len(failing)
    mask = None
    if errors:
        mask = np.zeros(ctx.n, dtype=bool)
        mask[np.fromiter(errors, dtype=np.int64, count=len(errors))] = True
        mask &= failed
    return RuleResult(failed, msgs, errors=0 if mask is None else int(mask.sum()),
                      error_mask=mask)


def evaluation_error_text(rule: Rule, error: str) -> str:
    """The message of a record a rule could not judge: the error, never the rule's own
    message (which would read as a judgement)."""
    return f"evaluation error in rule {rule.id}: {error}"


#: a plugin's record check: the record's activation (``key``, ``value``, ``headers``, ...)
#: → None or True to accept, False or a message to reject (any other value rejects too)
RecordValidator = Callable[[dict[str, object]], object]


def load_plugin(path: str, options: object = None) -> RecordValidator:
    """Import ``module:attr``; a class is instantiated and ``configure(options)``-ed (KIP-729)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise RuleEvaluationError(f"plugin {path!r}: write it as module.path:callable")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RuleEvaluationError(f"plugin {path!r} cannot be loaded: {exc}") from exc
    if isinstance(obj, type):
        obj = obj()
        if hasattr(obj, "configure"):
            obj.configure(options or {})
        fn = getattr(obj, "validate", None)
        if fn is None:
            raise RuleEvaluationError(f"plugin class {path!r} has no validate(record) method")
        return fn
    return obj


@implements("plugin")
def _plugin(ctx: EvalContext, rule: Rule) -> RuleResult:
    """A Python validator per record: returns None/True to accept, False or a message to reject.

    Raising also rejects (with the exception text), as a broker-side validator would.
    """
    from kqlab.policy.cel import record_activations

    fn = load_plugin(rule.param("callable"), rule.param("options"))
    failed = np.zeros(ctx.n, dtype=bool)
    raised = np.zeros(ctx.n, dtype=bool)
    why: dict[int, str] = {}
    for i, record in enumerate(record_activations(ctx.records, _python_values_or_none(ctx))):
        try:
            verdict = fn(record)
        except Exception as exc:
            failed[i] = raised[i] = True
            why[i] = evaluation_error_text(rule, f"{type(exc).__name__}: {exc}")
            continue
        if verdict is None or verdict is True:
            continue
        failed[i] = True
        why[i] = verdict if isinstance(verdict, str) else rule.render_message()
    return RuleResult(failed, tuple(why[i] for i in np.flatnonzero(failed).tolist()),
                      errors=int(raised.sum()), error_mask=raised if raised.any() else None)
