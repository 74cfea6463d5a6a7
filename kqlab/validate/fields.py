"""Field-check rules (``field_*`` kinds): vectorised over the decoded Arrow column, sugar over CEL.

Each field kind names a dotted ``field`` path into the decoded value (``customer.id``) and has
an equivalent CEL expression (:func:`field_rule_to_cel`) which gives the same pass/fail per
record as the vectorised evaluator (:func:`evaluate_field_rule`); the test suite checks that
on random data.

Semantics, the same on all three paths (Arrow, Python per record, CEL):

* **Absent and null are one case.**  A path step that meets something other than an object
  (map / struct / dict) — null, a missing key, a number, a list — makes the field *absent*.
  Arrow struct columns cannot tell a missing key from a null one, and Avro has no missing
  fields, so kqlab does not distinguish them.  Dots always separate steps (a key containing a
  dot cannot be addressed).
* An absent (or null) field **passes** ``field_range``, ``field_in``, ``field_regex`` and
  ``field_length`` — they check values, and presence is ``field_not_null``'s job, as in
  pandera (``ignore_na``) and Great Expectations — unless the rule says ``allow_null: false``,
  when it fails them (``field_in`` with ``null`` among its ``values`` still passes).  An absent
  field fails ``field_not_null`` and ``field_type`` (except ``type: null``).
* ``field_range``: the value is a number — int, uint, double or decimal; **not** a boolean —
  and ``min <= value <= max`` (either bound optional), compared as float64 (doubles), so
  integers beyond 2**53 are rounded before comparing.  NaN fails.
* ``field_in``: ``values`` are scalars (string, number, boolean, null).  Strings match
  strings exactly; numbers match numbers by numeric value (``1`` matches ``1.0``, integers
  exactly); booleans match only booleans (``true`` is not ``1``, unlike Python).
* ``field_regex``: the value is a string (bytes do not match) and the pattern matches
  *somewhere* in it (a search, as CEL ``matches`` and Arrow ``match_substring_regex`` do:
  anchor with ``^...$``).  Patterns are RE2 syntax, not Python ``re``: no look-around
  (``(?=``, ``(?!``, ``(?<=``), no backreferences (``\\1``), no possessive/atomic groups;
  ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII-only (Python's match Unicode); ``\\Z`` is
  spelt ``\\z``; matching is linear-time.  A pattern RE2 rejects fails at load time.
* ``field_length``: the value is a string (length in code points), bytes (in bytes) or an
  array (in elements), with ``min <= length <= max`` (``min`` defaults to 0).  Objects and
  scalars fail.
* ``field_type``: the JSON type of the value — ``string``, ``number`` (int, uint, double,
  decimal; not boolean), ``integer`` (int/uint *types*: ``1.0`` decoded as a float is a number
  but not an integer — unlike JSON Schema, which checks the mathematical value), ``boolean``,
  ``object`` (map/struct), ``array``, ``null`` (absent or null).  Bytes, timestamps and other
  non-JSON values have none of these types.

Python values are first made CEL-shaped as :mod:`kqlab.policy.cel` does for activations
(``date`` → days since the epoch, ``Decimal`` → float, ``UUID`` → string, tuple → list).
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import TypeGuard

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.errors import KqlabError
from kqlab.policy.cel import plain_value
from kqlab.policy.model import Rule

__all__ = [
    "FIELD_KINDS",
    "JSON_TYPES",
    "FieldResult",
    "FieldRuleError",
    "evaluate_field_rule",
    "evaluate_python_values",
    "field_rule_to_cel",
]

FIELD_KINDS = ("field_not_null", "field_range", "field_in", "field_regex", "field_length",
               "field_type")
#: kinds whose null/absent values pass unless ``allow_null: false``
NULLABLE_KINDS = ("field_range", "field_in", "field_regex", "field_length")
JSON_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")

_INT64 = (-(2**63), 2**63 - 1)
_UINT64 = (0, 2**64 - 1)
_CEL_RESERVED = frozenset((
    "true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
    "function", "if", "import", "let", "loop", "package", "namespace", "return", "var", "void",
    "while"))


class FieldRuleError(KqlabError, ValueError):
    """A field rule's parameters are unusable (bad path, bound, value list or pattern)."""


@dataclass(frozen=True, slots=True)
class FieldResult:
    """One field rule over a column: which rows failed and the value each row had.

    ``failed`` is a numpy bool array (one per row); ``observed`` the field's value per row
    (null when absent); ``lengths`` the measured length per row (``field_length`` only).
    """

    failed: np.ndarray
    observed: pa.Array
    rule: Rule | None = None
    lengths: pa.Array | None = None
    #: the Python values behind ``observed`` (Python path: ``observed`` may be JSON text)
    python_observed: list[object] | None = field(default=None, repr=False, compare=False)
    #: the records' own Python objects (JSON as parsed): messages show values as written
    python_records: Sequence[object] | None = field(default=None, repr=False, compare=False)

    @property
    def failed_count(self) -> int:
        """How many rows failed."""
        return int(self.failed.sum())

    def messages(self) -> list[str | None]:
        """The failure message per row (None for rows that passed), from the rule's template."""
        out: list[str | None] = [None] * len(self.failed)
        idx = np.flatnonzero(self.failed)
        for i, text in zip(idx.tolist(), self.failing_messages(), strict=True):
            out[i] = text
        return out

    def failing_messages(self) -> list[str]:
        """The message of each failing row, in row order (what a rule result carries).

        Failing values repeat (one bad deploy writes the same wrong status 100k times), so
        each distinct value is formatted once and the texts are gathered by index; the
        template is filled once (:class:`_Renderer`), each value's text put into it.
        """
        idx = np.flatnonzero(self.failed)
        if self.rule is None or not len(idx):
            return [self.rule.render_message() if self.rule else ""] * len(idx)
        take = pa.array(idx, pa.int64())
        name = self.rule.param("field")
        render = _Renderer(self.rule, name)
        lengths = self.lengths.take(take) if self.lengths is not None else None
        # JSON widened to double: each value is shown as its record wrote it
        widened = self.python_records if _has_float(self.observed.type) else None
        if self.python_observed is None and widened is None:
            vals = self.observed.take(take)
            try:
                enc = vals.dictionary_encode()
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
                enc = None
            if enc is not None:
                ind = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(
                    np.int64)
                uniq, first = np.unique(ind, return_index=True)
                words = enc.dictionary.to_pylist()
                lens = (lengths.to_pylist() if lengths is not None else None)
                texts = np.empty(len(uniq), dtype=object)
                for k, (u, f) in enumerate(zip(uniq.tolist(), first.tolist(), strict=True)):
                    texts[k] = render(_show(None if u < 0 else words[u]),
                                      None if lens is None else lens[f])
                return texts[np.searchsorted(uniq, ind)].tolist()
        out: np.ndarray | None = None
        rest, looked_up = idx, None
        if self.python_observed is None and widened is not None and lengths is None and \
                pa.types.is_floating(self.observed.type):
            # a float column: a value with a fraction was written as a float whatever the
            # format (an integer has none), so it shows as its double does; only whole or
            # missing values are looked up in their records (JSON may have written 5, not 5.0)
            vals = self.observed.take(take)
            f = vals.to_numpy(zero_copy_only=False).astype(np.float64)
            with np.errstate(invalid="ignore"):
                fraction = np.isfinite(f) & (f != np.floor(f))
            if vals.null_count:
                fraction &= vals.is_valid().to_numpy(zero_copy_only=False)
            if fraction.any():
                # distinct values by hashing (finite, with a fraction: equal values have
                # equal bits), in the order met: sorting them cost more than the rest
                enc = pc.dictionary_encode(pa.array(f[fraction], pa.float64()))
                shown = render.many([_show(v) for v in enc.dictionary.to_pylist()])
                which = enc.indices.to_numpy(zero_copy_only=False)
                out = np.empty(len(idx), dtype=object)
                out[fraction] = np.asarray(shown, dtype=object)[which]
                looked_up = ~fraction
                rest = idx[looked_up]
        values: list[object]
        if self.python_observed is not None:
            values = [self.python_observed[i] for i in rest.tolist()]
        elif widened is not None:
            path = _spec(self.rule).path
            values = [_resolve(widened[i], path) for i in rest.tolist()]
        else:
            values = self.observed.take(take).to_pylist()
        lens_list = lengths.to_pylist() if lengths is not None else [None] * len(rest)
        memo: dict[tuple[str, int | None], str] = {}  # failing values repeat: format each once
        texts_rest = []
        for value, length in zip(values, lens_list, strict=True):
            key = (_show(value), length)
            text = memo.get(key)
            if text is None:
                text = memo[key] = render(key[0], length)
            texts_rest.append(text)
        if out is None:
            return texts_rest
        out[looked_up] = np.asarray(texts_rest, dtype=object)
        return out.tolist()


class _Renderer:
    """A field rule's message for many values: :meth:`Rule.render_message` with ``field``,
    ``value`` and ``length``, the template filled once.

    When ``{value}`` appears without a conversion or format spec and ``{length}`` not at all
    (the catalog's templates), the template is rendered once with a marker for the value and
    each value's text is put in its place — the same text ``render_message`` gives, without
    filling every parameter again per value (a range edit on a million records renders tens
    of thousands of distinct values).  Otherwise every value is rendered in full."""

    _MARK = "\x00kqlab-value\x00"

    def __init__(self, rule: Rule, field_name: object):
        self.rule = rule
        self.field = field_name
        self.parts: list[str] | None = None
        template = rule.message or rule.spec.message
        try:
            pieces = list(string.Formatter().parse(template))
        except ValueError:
            return
        fields = [(n, spec, conv) for _, n, spec, conv in pieces if n is not None]
        roots = [re.split(r"[.\[]", n, maxsplit=1)[0] for n, _, _ in fields]
        simple = "length" not in roots and all(
            n == "value" and not spec and not conv
            for (n, spec, conv), root in zip(fields, roots, strict=True) if root == "value")
        if simple and "value" in roots:
            filled = rule.render_message(field=field_name, value=self._MARK, length=None)
            if self._MARK in filled:
                self.parts = filled.split(self._MARK)

    def __call__(self, value: str, length: int | None) -> str:
        if self.parts is not None:  # the template has no {length}
            return value.join(self.parts)
        return self.rule.render_message(field=self.field, value=value, length=length)

    def many(self, values: list[str]) -> list[str]:
        """The messages of ``values`` (``length`` None)."""
        if self.parts is None:
            return [self(v, None) for v in values]
        parts = self.parts
        return [v.join(parts) for v in values]


def _has_float(t: pa.DataType) -> bool:
    """Whether a (nested) Arrow type holds floating-point values anywhere."""
    if pa.types.is_floating(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_float(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_float(t.value_type)
    if pa.types.is_map(t):
        return _has_float(t.item_type)
    return False


def _show(value: object) -> str:
    try:
        text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


# ------------------------------------------------------------------------------- parameters

@dataclass(frozen=True, slots=True)
class _Spec:
    kind: str
    path: tuple[str, ...]
    lo: float | None = None
    hi: float | None = None
    strings: tuple[str, ...] = ()
    ints: tuple[int, ...] = ()
    floats: tuple[float, ...] = ()
    bools: tuple[bool, ...] = ()
    null_ok: bool = False
    pattern: str = ""
    type: str = ""


def _finite(rule: Rule, name: str) -> float | None:
    value = rule.param(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FieldRuleError(f"rule {rule.id!r}: {name} must be a finite number, not {value!r}")
    return float(value)


def _spec(rule: Rule) -> _Spec:
    if rule.kind not in FIELD_KINDS:
        raise FieldRuleError(f"rule {rule.id!r} is a {rule.kind!r} rule, not a field check "
                             f"({', '.join(FIELD_KINDS)})")
    dotted = rule.param("field")
    if not isinstance(dotted, str) or not dotted or any(not s for s in dotted.split(".")):
        raise FieldRuleError(f"rule {rule.id!r}: field must be a dotted path like 'a.b', "
                             f"not {dotted!r}")
    path = tuple(dotted.split("."))
    kind = rule.kind
    # value checks pass a null/absent field unless allow_null is false (presence is
    # field_not_null's job), as pandera's ignore_na and Great Expectations do
    nullable = kind in NULLABLE_KINDS and rule.param("allow_null") is not False
    if kind == "field_range":
        return _Spec(kind, path, lo=_finite(rule, "min"), hi=_finite(rule, "max"),
                     null_ok=nullable)
    if kind == "field_length":
        lo = _finite(rule, "min")
        return _Spec(kind, path, lo=0.0 if lo is None else lo, hi=_finite(rule, "max"),
                     null_ok=nullable)
    if kind == "field_in":
        values = rule.param("values")
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise FieldRuleError(f"rule {rule.id!r}: values must be a list, not {values!r}")
        strings, ints, floats, bools, null_ok = [], [], [], [], False
        for v in values:
            if v is None:
                null_ok = True
            elif isinstance(v, bool):
                bools.append(v)
            elif isinstance(v, str):
                strings.append(v)
            elif isinstance(v, int | float):
                if not math.isfinite(v):
                    raise FieldRuleError(f"rule {rule.id!r}: values cannot hold {v!r}")
                floats.append(float(v))
                if isinstance(v, int) or v.is_integer():
                    ints.append(int(v))
            else:
                raise FieldRuleError(f"rule {rule.id!r}: values must be strings, numbers, "
                                     f"booleans or null, not {v!r}")
        return _Spec(kind, path, strings=tuple(dict.fromkeys(strings)),
                     ints=tuple(dict.fromkeys(ints)), floats=tuple(dict.fromkeys(floats)),
                     bools=tuple(dict.fromkeys(bools)), null_ok=null_ok or nullable)
    if kind == "field_regex":
        pattern = rule.param("pattern")
        if not isinstance(pattern, str):
            raise FieldRuleError(f"rule {rule.id!r}: pattern must be a string")
        try:
            pc.match_substring_regex(pa.array([""], pa.string()), pattern)
        except pa.ArrowInvalid as exc:
            raise FieldRuleError(f"rule {rule.id!r}: pattern {pattern!r} is not valid RE2 "
                                 f"syntax: {exc}") from None
        return _Spec(kind, path, pattern=pattern, null_ok=nullable)
    if kind == "field_type":
        jtype = rule.param("type")
        if jtype not in JSON_TYPES:
            raise FieldRuleError(f"rule {rule.id!r}: type must be one of "
                                 f"{', '.join(JSON_TYPES)}, not {jtype!r}")
        return _Spec(kind, path, type=jtype)
    return _Spec(kind, path)


# ---------------------------------------------------------------------------------- CEL form

def _cel_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # JSON escapes are valid CEL escapes


def _cel_double(x: float) -> str:
    text = repr(float(x))
    return text if any(c in text for c in ".en") else text + ".0"


def _cel_list(items: list[str]) -> str:
    return "[" + ", ".join(items) + "]"


_CEL_NUMBER = "(type({v}) == int || type({v}) == uint || type({v}) == double)"


def field_rule_to_cel(rule: Rule) -> str:
    """The CEL expression equivalent to a field rule (same pass/fail on every record).

    Examples
    --------
    >>> from kqlab.policy.model import Rule
    >>> rule = Rule(id="r", kind="field_range", params={"field": "a.b", "min": 0, "max": 10})
    >>> field_rule_to_cel(rule)  # doctest: +NORMALIZE_WHITESPACE
    '!(type(value) == map && has(value.a) && type(value.a) == map && has(value.a.b))
     || type(value.a.b) == null_type
     || ((type(value.a.b) == int || type(value.a.b) == uint || type(value.a.b) == double)
     && double(value.a.b) >= 0.0 && double(value.a.b) <= 10.0)'
    """
    spec = _spec(rule)
    guards, v = [], "value"
    for step in spec.path:
        guards.append(f"type({v}) == map")
        if step.isidentifier() and step.isascii() and step not in _CEL_RESERVED:
            guards.append(f"has({v}.{step})")
            v = f"{v}.{step}"
        else:
            guards.append(f"{_cel_str(step)} in {v}")
            v = f"{v}[{_cel_str(step)}]"
    present = " && ".join(guards)
    kind = spec.kind
    checks: list[str]
    if kind == "field_not_null":
        checks = [f"type({v}) != null_type"]
    elif kind == "field_range":
        checks = [_CEL_NUMBER.format(v=v)]
        if spec.lo is not None:
            checks.append(f"double({v}) >= {_cel_double(spec.lo)}")
        if spec.hi is not None:
            checks.append(f"double({v}) <= {_cel_double(spec.hi)}")
    elif kind == "field_length":
        checks = [f"(type({v}) == string || type({v}) == bytes || type({v}) == list)",
                  f"size({v}) >= {int(spec.lo or 0)}"]
        if spec.hi is not None:
            checks.append(f"size({v}) <= {math.floor(spec.hi)}")
    elif kind == "field_regex":
        checks = [f"type({v}) == string", f"{v}.matches({_cel_str(spec.pattern)})"]
    elif kind == "field_type":
        if spec.type == "null":
            return f"!({present}) || type({v}) == null_type"
        checks = [{"string": f"type({v}) == string",
                   "number": _CEL_NUMBER.format(v=v),
                   "integer": f"(type({v}) == int || type({v}) == uint)",
                   "boolean": f"type({v}) == bool",
                   "object": f"type({v}) == map",
                   "array": f"type({v}) == list"}[spec.type]]
    else:  # field_in: one branch per CEL type, so no engine compares across types
        parts = []
        if spec.strings:
            parts.append(f"type({v}) == string && {v} in "
                         f"{_cel_list([_cel_str(s) for s in spec.strings])}")
        ints = [str(i) for i in spec.ints if _INT64[0] <= i <= _INT64[1]]
        if ints:
            parts.append(f"type({v}) == int && {v} in {_cel_list(ints)}")
        uints = [f"{i}u" for i in spec.ints if _UINT64[0] <= i <= _UINT64[1]]
        if uints:
            parts.append(f"type({v}) == uint && {v} in {_cel_list(uints)}")
        if spec.floats:
            parts.append(f"type({v}) == double && {v} in "
                         f"{_cel_list([_cel_double(f) for f in spec.floats])}")
        if spec.bools:
            parts.append(f"type({v}) == bool && {v} in "
                         f"{_cel_list(['true' if b else 'false' for b in spec.bools])}")
        body = " || ".join(f"({p})" for p in parts) or "false"
        checks = [f"({body})"]
    if spec.null_ok:
        return f"!({present}) || type({v}) == null_type || ({' && '.join(checks)})"
    return " && ".join([present, *checks])


# ------------------------------------------------------------------------------ Python path

_ABSENT = object()


def _resolve(value: object, path: tuple[str, ...]) -> object:
    for step in path:
        if not isinstance(value, Mapping) or step not in value:
            return None
        value = value[step]
    return plain_value(value)


def _is_number(v: object) -> TypeGuard[int | float]:
    return type(v) in (int, float)  # after plain_value: Decimal → float, bool excluded


def _json_type_ok(v: object, jtype: str) -> bool:
    if v is None:
        return jtype == "null"
    t = type(v)
    return {"string": t is str, "number": t in (int, float), "integer": t is int,
            "boolean": t is bool, "object": isinstance(v, Mapping),
            "array": t is list, "null": False}[jtype]


def _length(v: object) -> int | None:
    if type(v) in (str, bytes, bytearray, list) and isinstance(v, Sized):
        return len(v)
    return None


def evaluate_python_values(rule: Rule, values: Sequence[object]) -> FieldResult:
    """The field rule evaluated per record on Python values (decoded values, one per row).

    The fallback of :func:`evaluate_field_rule` for columns that are not Arrow structs (JSON
    with values of differing types); same semantics.
    """
    spec = _spec(rule)
    leaves = [_resolve(v, spec.path) for v in values]
    n = len(leaves)
    ok = np.zeros(n, dtype=bool)
    lengths: list[int | None] | None = None
    kind = spec.kind
    if kind == "field_not_null":
        ok[:] = [v is not None for v in leaves]
    elif kind == "field_range":
        lo = -math.inf if spec.lo is None else spec.lo
        hi = math.inf if spec.hi is None else spec.hi
        ok[:] = [_is_number(v) and lo <= float(v) <= hi for v in leaves]
    elif kind == "field_in":
        strings, ints, floats, bools = (set(spec.strings), set(spec.ints), set(spec.floats),
                                        set(spec.bools))
        ok[:] = [(v is None and spec.null_ok)
                 or (type(v) is str and v in strings)
                 or (type(v) is int and v in ints)
                 or (type(v) is float and v in floats)
                 or (type(v) is bool and v in bools) for v in leaves]
    elif kind == "field_regex":
        idx = [i for i, v in enumerate(leaves) if type(v) is str]
        if idx:
            matched = pc.match_substring_regex(pa.array([leaves[i] for i in idx], pa.string()),
                                               spec.pattern)
            ok[idx] = matched.to_numpy(zero_copy_only=False)
    elif kind == "field_length":
        lengths = [_length(v) for v in leaves]
        lo, hi = spec.lo or 0, math.inf if spec.hi is None else spec.hi
        ok[:] = [n_ is not None and lo <= n_ <= hi for n_ in lengths]
    else:  # field_type
        ok[:] = [_json_type_ok(v, spec.type) for v in leaves]
    if spec.null_ok:
        ok |= np.array([v is None for v in leaves], dtype=bool)
    return FieldResult(failed=~ok, observed=_observed_array(leaves), rule=rule,
                       lengths=None if lengths is None else pa.array(lengths, pa.int64()),
                       python_observed=leaves)


def _observed_array(leaves: list[object]) -> pa.Array:
    try:
        return pa.array(leaves)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        # values of differing types: keep them visible as JSON text
        return pa.array([None if v is None else json.dumps(v, ensure_ascii=False, default=str)
                         for v in leaves], pa.string())


# ------------------------------------------------------------------------------- Arrow path

def _resolve_arrow(arr: pa.Array, path: tuple[str, ...]) -> pa.Array | None:
    """The leaf column at ``path`` (all-null when absent), or None when Python must decide."""
    for step in path:
        if isinstance(arr, pa.DictionaryArray):
            arr = arr.dictionary_decode()
        t = arr.type
        if pa.types.is_struct(t):
            index = t.get_field_index(step)
            if index < 0:
                return pa.nulls(len(arr))
            arr = pc.struct_field(arr, [index])
        elif pa.types.is_map(t) or pa.types.is_union(t) or isinstance(t, pa.ExtensionType):
            return None
        else:  # a scalar, list or null column has no such field
            return pa.nulls(len(arr))
    if isinstance(arr, pa.DictionaryArray):
        arr = arr.dictionary_decode()
    t = arr.type
    if pa.types.is_union(t) or isinstance(t, pa.ExtensionType) or pa.types.is_list_view(t) \
            or pa.types.is_large_list_view(t):
        return None
    if pa.types.is_string_view(t):
        arr = arr.cast(pa.large_string())
    elif pa.types.is_binary_view(t):
        arr = arr.cast(pa.large_binary())
    return arr


def _pylist(values: pa.Array) -> list[object]:
    # Arrow maps read back as lists of pairs unless asked: they are objects here
    return values.to_pylist(maps_as_pydicts="lossy")


def _np(mask: pa.Array) -> np.ndarray:
    """A boolean kernel result as numpy, null → False."""
    return mask.fill_null(False).to_numpy(zero_copy_only=False)


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_array(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _arrow_json_types(t: pa.DataType) -> frozenset[str]:
    if pa.types.is_integer(t):
        return frozenset({"number", "integer"})
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return frozenset({"number"})
    if _is_text(t):
        return frozenset({"string"})
    if pa.types.is_boolean(t):
        return frozenset({"boolean"})
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return frozenset({"object"})
    if _is_array(t):
        return frozenset({"array"})
    return frozenset()


def _value_set_in(v: pa.Array, spec: _Spec) -> np.ndarray:
    t = v.type
    candidates: list[str] | list[bool] | list[int] | list[float]
    if _is_text(t):
        candidates = list(spec.strings)
    elif pa.types.is_boolean(t):
        candidates = list(spec.bools)
    elif pa.types.is_integer(t):
        bits = t.bit_width
        lo, hi = (0, 2**bits - 1) if pa.types.is_unsigned_integer(t) else \
            (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        candidates = [i for i in spec.ints if lo <= i <= hi]
    elif pa.types.is_floating(t) or pa.types.is_decimal(t):
        # + 0.0 turns -0.0 into 0.0: Arrow's hash set tells the two zeros apart, CEL does not
        v, t = pc.add(pc.cast(v, pa.float64(), safe=False), 0.0), pa.float64()
        candidates = [f + 0.0 for f in spec.floats]
    else:
        return np.zeros(len(v), dtype=bool)
    if not candidates:
        return np.zeros(len(v), dtype=bool)
    return _np(pc.is_in(v, value_set=pa.array(candidates, t)))


def evaluate_field_rule(rule: Rule, values: pa.Array | pa.ChunkedArray | Sequence[object],
                        python: Sequence[object] | None = None) -> FieldResult:
    """Evaluate a field rule over a decoded value column, vectorised when it is a struct.

    Parameters
    ----------
    rule
        A ``field_*`` rule.
    values
        The decoded values, one per record: an Arrow struct column (Avro records, uniform JSON
        objects) is evaluated with Arrow compute kernels; any other column, or a Python
        sequence, per record (:func:`evaluate_python_values`).
    python
        The same records as parsed Python objects, when the column's types were inferred
        (JSON).  Arrow widens a field holding both ``5`` and ``2.5`` to double for the whole
        column, so without them a record's verdict (``type: integer``) and message
        (``amount=5.0``) would depend on the other records in the sample; with them, both
        follow the record's own value.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from kqlab.policy.model import Rule
    >>> rule = Rule(id="amount", kind="field_range", params={"field": "amount", "min": 0})
    >>> res = evaluate_field_rule(rule, pa.array([{"amount": 5}, {"amount": -1}, None]))
    >>> res.failed.tolist()  # a null record has no amount: field_not_null judges presence
    [False, True, False]
    >>> res.messages()[1]
    'amount=-1 is outside [0, inf]'
    """
    spec = _spec(rule)
    if not isinstance(values, pa.Array | pa.ChunkedArray):
        return evaluate_python_values(rule, values)
    column = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if isinstance(column, pa.DictionaryArray):
        column = column.dictionary_decode()
    top = column.type
    if not (pa.types.is_struct(top) or pa.types.is_null(top)):
        return evaluate_python_values(rule, _pylist(column))
    v = _resolve_arrow(column, spec.path)
    if v is None:
        return evaluate_python_values(rule, _pylist(column))
    t = v.type
    valid = _np(v.is_valid())
    lengths: pa.Array | None = None
    kind = spec.kind
    if kind == "field_not_null":
        ok = valid
    elif kind == "field_range":
        if _is_numeric(t):
            f = pc.cast(v, pa.float64(), safe=False)
            ok = valid.copy()
            if spec.lo is not None:
                ok &= _np(pc.greater_equal(f, pa.scalar(spec.lo)))
            if spec.hi is not None:
                ok &= _np(pc.less_equal(f, pa.scalar(spec.hi)))
        else:
            ok = np.zeros(len(v), dtype=bool)
    elif kind == "field_in":
        ok = _value_set_in(v, spec) & valid
        if spec.null_ok:
            ok |= ~valid
    elif kind == "field_regex":
        ok = _np(pc.match_substring_regex(v, spec.pattern)) if _is_text(t) \
            else np.zeros(len(v), dtype=bool)
    elif kind == "field_length":
        measured: pa.Array
        if isinstance(v, pa.StringArray | pa.LargeStringArray):  # code points
            measured = pc.utf8_length(v)
        elif isinstance(v, pa.BinaryArray | pa.LargeBinaryArray
                           | pa.FixedSizeBinaryArray):
            measured = pc.binary_length(v)
        elif _is_array(t):
            measured = pc.list_value_length(v)
        else:
            measured = pa.nulls(len(v), pa.int64())
        lengths = pc.cast(measured, pa.int64())
        ok = _np(pc.greater_equal(lengths, pa.scalar(spec.lo or 0)))
        if spec.hi is not None:
            ok &= _np(pc.less_equal(lengths, pa.scalar(spec.hi)))
    elif spec.type == "null":  # field_type
        ok = ~valid
    else:
        ok = valid & (spec.type in _arrow_json_types(t))
        if spec.type == "integer" and python is not None and pa.types.is_floating(t):
            # a widened column: integral values may have been written as integers
            whole = valid & _np(pc.equal(v, pc.floor(v)))
            for i in np.flatnonzero(whole).tolist():
                x = _resolve(python[i], spec.path)
                ok[i] = type(x) is int
    ok = np.asarray(ok, dtype=bool)
    if spec.null_ok:
        ok = ok | ~valid
    return FieldResult(failed=~ok, observed=v, rule=rule,
                       lengths=lengths, python_records=python)
