"""CEL expressions for ``cel`` rules: compile once (cached), evaluate per record, never raise.

A ``cel`` rule holds one expression (``expr``) over a record's variables:

===============  =====================================================================
variable         value
===============  =====================================================================
``key``          the key as a string when it is valid UTF-8, else bytes; null: no key
``value``        the decoded value (map/list/scalars) or null (a tombstone); without
                 decoding, the raw value bytes
``headers``      map of header name → value of its *last* occurrence (string when
                 valid UTF-8, else bytes; null for a null header value)
``header_list``  every header in order, as a list of ``{key, value}`` maps
``topic``        string; ``partition``, ``offset``, ``timestamp`` (epoch ms),
                 ``timestamp_type``, ``batch_offset``, ``batch_index``: int
===============  =====================================================================

Semantics (what a record's verdict is):

* the record **passes** when the expression evaluates to ``true``;
* ``false`` → the record **fails** the rule (result ``False``);
* an evaluation error (missing map key, no matching overload, division by zero, ...) or a
  result that is not a bool → the record **fails** with the error text (result ``None``).
  Errors are failures because that is what Confluent's CEL rule executor does: in
  ``confluent_kafka/schema_registry/_sync/serde.py`` (``BaseSerde._execute_rules``) the
  executor's ``transform`` raising — celpy raises ``CELEvalError`` out of
  ``CelExecutor.execute_rule`` (``rules/cel/cel_executor.py``) — lands in
  ``except Exception as e: self._run_action(..., self._get_on_failure(rule), ...)``, the
  same on-failure action as a false condition (``RuleConditionError``).  Confluent treats any
  falsy result as a failure and any truthy one as a pass; kqlab is stricter and reports a
  non-bool result as an error.

Guard optional fields yourself: ``has(value.a) && value.a > 0`` (``has`` tests map-key
presence; a present key with a null value is "has").  CEL's ``&&``/``||`` absorb errors when
the other side decides (``false && <error>`` is ``false``, in either order).

Engines: ``cel-expr-python`` (the C++ CEL runtime; type-checks at compile time, fastest) is
the default; ``cel-python`` (``celpy``, pure Python, what confluent-kafka uses) is the
fallback when the former is not importable, or when ``KQLAB_CEL_ENGINE=cel-python``.  Known
differences: celpy has no compile-time checker (undeclared variables and type errors surface
per record); cel-expr-python compares ``int``/``double`` across types (``1 == 1.0``) where
celpy raises "no matching overload"; ``has(value.x)`` on a null ``value`` is an error on
cel-expr-python (as the CEL spec says) but false on celpy; ``x == null`` / ``x != null`` raise
on celpy when ``x`` is a number or (``!=``) a map/list, so test ``type(x) == null_type`` to be
portable.

cel-expr-python 0.1.3 cuts Python ``bytes`` and ``str`` at the first NUL byte when it
converts them, so bytes are handed over as ``bytearray`` (which it copies whole); and it
refuses ``datetime``/``timedelta`` values.  A record holding a string with U+0000, a
timestamp or a duration (Avro ``timestamp-millis`` decodes to ``datetime``) is therefore
evaluated with celpy when that is installed (otherwise it fails with an error saying so).
Only the CEL standard library is
available (no string/math extensions), so the same expression runs on both engines.

This module is the reference.  The local engine's ``cel`` rules and ``when`` preconditions
evaluate a documented subset of CEL as Arrow column kernels (:mod:`kqlab.validate.cel_vector`)
and send every row those cannot decide, and every expression outside the subset, here: the
results and error texts are this module's.
"""

from __future__ import annotations

import datetime
import decimal
import os
import re
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from kqlab.errors import KqlabError

if TYPE_CHECKING:  # both only for annotations: this module imports neither at load time
    import pyarrow as pa
    from celpy.celtypes import Value as CelpyValue

__all__ = [
    "ENGINES",
    "VARIABLES",
    "CelProgram",
    "CelSyntaxError",
    "available_engines",
    "clear_cache",
    "compile_cel",
    "default_engine",
    "plain_value",
    "record_activations",
]

#: Engine names, preferred first.
ENGINES = ("cel-expr-python", "cel-python")
#: Environment variable forcing one engine (e.g. to run the test suite on the fallback).
ENGINE_ENV = "KQLAB_CEL_ENGINE"

#: The activation variables a ``cel`` rule may use.
VARIABLES = ("key", "value", "headers", "header_list", "topic", "partition", "offset",
             "timestamp", "timestamp_type", "batch_offset", "batch_index")

#: a program compiled by one engine (cel-expr-python's program or a celpy runner): neither
#: library ships type information, so there is no narrower type to name
EngineProgram: TypeAlias = Any

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_POSITION = re.compile(r"<input>:(\d+):(\d+):")
_DAYS_SHIFT = datetime.date(1970, 1, 1).toordinal()


class CelSyntaxError(KqlabError, ValueError):
    """A CEL expression does not compile (syntax, or type-check on cel-expr-python).

    ``line`` and ``column`` (1-based, when the engine reports them) point into ``expr``;
    the message is the engine's own, including its caret diagram.
    """

    def __init__(self, expr: str, detail: str, line: int | None = None,
                 column: int | None = None) -> None:
        where = f" at line {line}, column {column}" if line is not None else ""
        # a 400 KB expression must not come back whole in the message (nor in the engine's
        # caret diagram, which repeats its line): both are cut, ``expr``/``detail`` keep all
        super().__init__(f"CEL expression {_cut(expr, 80)!r} does not compile{where}: "
                         f"{_cut(detail, 600)}")
        self.expr = expr
        self.detail = detail
        self.line = line
        self.column = column

    def __reduce__(self):  # pickles across processes (Spark executors)
        return (type(self), (self.expr, self.detail, self.line, self.column))


def _cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


class _NeedsCelPython(Exception):
    """A value cel-expr-python cannot take faithfully (NUL in a string, a timestamp)."""


# --------------------------------------------------------------------------- value conversion

def plain_value(value: object) -> object:
    """Python values CEL can hold: tuples → lists, dates → days, Decimal → float, UUID → str."""
    t = type(value)  # exact types first: the common case, and bool stays bool
    if t is dict and isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    if (t is list or t is tuple) and isinstance(value, list | tuple):
        return [plain_value(v) for v in value]
    if value is None or t in (str, bytes, bool, int, float):
        return value
    if isinstance(value, Mapping):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_value(v) for v in value]
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, datetime.datetime):
        # CEL timestamps are absolute: a naive datetime is taken as UTC.
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    if isinstance(value, datetime.date):  # Avro date: days since the epoch, as Confluent does
        return value.toordinal() - _DAYS_SHIFT
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


_SAFE_SCALARS = frozenset((bool, int, float, type(None)))


def _is_ready(value: object) -> bool:
    """True when cel-expr-python takes ``value`` as is (no bytes, NUL, tuple, exotic type)."""
    if type(value) is str:
        return "\x00" not in value
    if type(value) in _SAFE_SCALARS:
        return True
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        v = pop()
        t = type(v)
        if t is dict and isinstance(v, dict):
            for x in v.values():
                tx = type(x)
                if tx is str:
                    if "\x00" in x:
                        return False
                elif tx is dict or tx is list:
                    push(x)
                elif tx not in _SAFE_SCALARS:
                    return False
        elif t is list and isinstance(v, list):
            for x in v:
                tx = type(x)
                if tx is str:
                    if "\x00" in x:
                        return False
                elif tx is dict or tx is list:
                    push(x)
                elif tx not in _SAFE_SCALARS:
                    return False
        else:
            return False
    return True


def _to_cel_expr_python(value: object) -> object:
    """cel-expr-python input: bytes as bytearray (copied whole), NUL strings refused."""
    t = type(value)
    if t is str and isinstance(value, str):
        if "\x00" in value:
            raise _NeedsCelPython("strings containing U+0000")
        return value
    if t is dict and isinstance(value, dict):
        return {k: _to_cel_expr_python(v) for k, v in value.items()}
    if t is list and isinstance(value, list):
        return [_to_cel_expr_python(v) for v in value]
    if t is bytes and isinstance(value, bytes):
        return bytearray(value)
    if value is None or t in (bool, int, float):
        return value
    if isinstance(value, datetime.datetime | datetime.timedelta):
        # this cel-expr-python build refuses datetime/timedelta ("Non-CEL value type")
        raise _NeedsCelPython("timestamps and durations")
    plain = plain_value(value)
    # an unknown type stays as is: the engine then reports it as that record's error
    return value if plain is value else _to_cel_expr_python(plain)


def _to_celpy(value: object) -> CelpyValue:
    """celpy input: its ``celtypes`` wrappers, all the way down (as confluent-kafka does)."""
    from celpy import celtypes

    t = type(value)
    if value is None:
        return None
    if t is bool:  # before int: bool is an int subclass
        return celtypes.BoolType(value)
    if t is int and isinstance(value, int):
        return celtypes.IntType(value) if value < 2**63 else celtypes.UintType(value)
    if t is float:
        return celtypes.DoubleType(value)
    if t is str and isinstance(value, str):
        return celtypes.StringType(value)
    if t is bytes and isinstance(value, bytes):
        return celtypes.BytesType(value)
    if t is dict and isinstance(value, dict):
        return celtypes.MapType({celtypes.StringType(k) if type(k) is str else _to_celpy(k):
                                 _to_celpy(v) for k, v in value.items()})
    if t is list and isinstance(value, list):
        return celtypes.ListType([_to_celpy(v) for v in value])
    if isinstance(value, datetime.datetime):
        return celtypes.TimestampType(value)
    if isinstance(value, datetime.timedelta):
        return celtypes.DurationType(value)
    plain = plain_value(value)
    if type(plain) is type(value) and not isinstance(value, list | tuple | Mapping):
        raise TypeError(f"no CEL value for Python type {type(value).__name__}")
    return _to_celpy(plain)


# --------------------------------------------------------------------------------- engines

class _Backend:
    """One CEL engine: compile an expression, evaluate it on one activation."""

    name: str

    def compile(self, expr: str) -> EngineProgram:  # pragma: no cover - interface
        raise NotImplementedError

    def run(self, compiled: EngineProgram, activation: Mapping[str, object]
            ) -> tuple[bool | None, str | None]:
        raise NotImplementedError  # pragma: no cover - interface


class _CelExprPython(_Backend):
    name = "cel-expr-python"

    def __init__(self) -> None:
        from cel_expr_python import cel

        self._cel = cel
        dyn, integer = cel.Type.DYN, cel.Type.INT
        self._env = cel.NewEnv(variables={
            "key": dyn,
            "value": dyn,
            "headers": cel.Type.Map(cel.Type.STRING, dyn),
            "header_list": cel.Type.List(cel.Type.Map(cel.Type.STRING, dyn)),
            "topic": cel.Type.STRING,
            "partition": integer, "offset": integer, "timestamp": integer,
            "timestamp_type": integer, "batch_offset": integer, "batch_index": integer,
        })
        self._bool, self._error = cel.Type.BOOL, cel.Type.ERROR

    def compile(self, expr: str) -> EngineProgram:
        try:
            compiled = self._env.compile(expr)
        except RuntimeError as exc:
            detail = str(exc).removeprefix("INVALID_ARGUMENT: ").strip()
            m = _POSITION.search(detail)
            line, column = (int(m.group(1)), int(m.group(2))) if m else (None, None)
            raise CelSyntaxError(expr, detail, line, column) from None
        rtype = compiled.return_type()
        if rtype != self._bool and rtype != self._cel.Type.DYN:
            # the whole expression is at fault: point at its start
            raise CelSyntaxError(expr, f"the expression gives {rtype.name()}, not bool", 1, 1)
        return compiled

    def run(self, compiled: EngineProgram, activation: Mapping[str, object]
            ) -> tuple[bool | None, str | None]:
        out = compiled.eval(data=activation)
        result = out.value()
        if type(result) is bool:
            return result, None
        if out.type() == self._error:
            return None, str(result)
        return None, f"the expression gave {out.type().name()}, not bool"


class _CelPython(_Backend):
    name = "cel-python"

    def __init__(self) -> None:
        import celpy

        self._celpy = celpy
        self._env = celpy.Environment(runner_class=celpy.InterpretedRunner)

    def compile(self, expr: str) -> EngineProgram:
        celpy = self._celpy
        try:
            return self._env.program(self._env.compile(expr))
        except celpy.CELParseError as exc:
            line = getattr(exc, "line", None)
            column = getattr(exc, "column", None)
            raise CelSyntaxError(expr, str(exc.args[0]) if exc.args else str(exc),
                                 line, column) from None

    def run(self, compiled: EngineProgram, activation: Mapping[str, object]
            ) -> tuple[bool | None, str | None]:
        celpy = self._celpy
        try:
            result = compiled.evaluate(activation)
        except celpy.CELEvalError as exc:
            return None, _celpy_error_text(exc)
        if isinstance(result, celpy.CELEvalError):
            return None, _celpy_error_text(result)
        if isinstance(result, celpy.celtypes.BoolType):
            return bool(result), None
        return None, f"the expression gave {type(result).__name__}, not bool"


def _celpy_error_text(exc: BaseException) -> str:
    args = exc.args
    if not args:
        return type(exc).__name__
    text = str(args[0]).split(" (in activation ")[0]  # celpy appends the whole activation
    if len(args) > 2 and args[2] and "undeclared reference" not in text:
        text += " (" + "; ".join(str(a) for a in args[2]) + ")"
    return text


_BACKENDS: dict[str, type[_Backend]] = {"cel-expr-python": _CelExprPython,
                                        "cel-python": _CelPython}
_backend_instances: dict[str, _Backend] = {}
_backend_lock = threading.Lock()


def available_engines() -> tuple[str, ...]:
    """The engines that import here, preferred first."""
    out = []
    for name in ENGINES:
        try:
            _backend(name)
        except ImportError:
            continue
        out.append(name)
    return tuple(out)


def default_engine() -> str:
    """``$KQLAB_CEL_ENGINE`` if set, else the first importable of :data:`ENGINES`."""
    forced = os.environ.get(ENGINE_ENV)
    if forced:
        if forced not in ENGINES:
            raise KqlabError(f"{ENGINE_ENV}={forced!r} is not a CEL engine; "
                             f"use one of {', '.join(ENGINES)}")
        return forced
    engines = available_engines()
    if not engines:
        raise ImportError("no CEL engine: pip install cel-expr-python (or cel-python)")
    return engines[0]


def _backend(name: str) -> _Backend:
    with _backend_lock:
        backend = _backend_instances.get(name)
        if backend is None:
            try:
                cls = _BACKENDS[name]
            except KeyError:
                raise KqlabError(f"unknown CEL engine {name!r}; known: "
                                 f"{', '.join(ENGINES)}") from None
            backend = _backend_instances[name] = cls()
        return backend


# --------------------------------------------------------------------------------- programs

class CelProgram:
    """A compiled CEL expression; evaluate it on record activations (see module docstring).

    Build with :func:`compile_cel` (cached), not directly.
    """

    __slots__ = ("_backend", "_compiled", "_fallback", "_fallback_lock", "_native", "engine",
                 "expr", "variables")

    def __init__(self, expr: str, engine: str) -> None:
        self.expr = expr
        #: Which engine runs it: ``"cel-expr-python"`` or ``"cel-python"``.
        self.engine = engine
        #: The activation variables the expression mentions (the others are not converted).
        self.variables = frozenset(v for v in _IDENT.findall(expr) if v in VARIABLES)
        self._backend = _backend(engine)
        self._compiled = self._backend.compile(expr)
        self._native = engine == "cel-expr-python"
        #: the cel-python program (or why there is none), built on first need
        self._fallback: tuple[EngineProgram | Exception, _Backend | None] | None = None
        self._fallback_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CelProgram({self.expr!r}, engine={self.engine!r})"

    def evaluate(self, activation: Mapping[str, object]) -> bool | None:
        """True/False, or None when the evaluation failed (see :meth:`check` for the text)."""
        return self.check(activation)[0]

    def check(self, activation: Mapping[str, object]) -> tuple[bool | None, str | None]:
        """``(result, error)``: ``(True|False, None)``, or ``(None, error text)``; never raises."""
        data = {name: activation[name] for name in self.variables if name in activation}
        try:
            if self._native:
                try:
                    # most values need nothing: check before rebuilding them
                    converted = {k: v if _is_ready(v) else _to_cel_expr_python(v)
                                 for k, v in data.items()}
                except _NeedsCelPython as why:
                    return self._run_fallback(data, str(why))
                return self._backend.run(self._compiled, converted)
            return self._backend.run(self._compiled, {k: _to_celpy(v) for k, v in data.items()})
        except Exception as exc:  # a value the engine cannot take: that record's failure
            return None, f"{type(exc).__name__}: {exc}"

    def evaluate_many(self, activations: Iterable[Mapping[str, object]]
                      ) -> tuple[list[bool | None], list[str | None]]:
        """Per-activation results and error texts (None where there was no error)."""
        results: list[bool | None] = []
        errors: list[str | None] = []
        check = self.check
        for activation in activations:
            result, error = check(activation)
            results.append(result)
            errors.append(error)
        return results, errors

    def _run_fallback(self, data: Mapping[str, object], why: str
                      ) -> tuple[bool | None, str | None]:
        with self._fallback_lock:
            fallback = self._fallback
            if fallback is None:
                try:
                    celpy_backend = _backend("cel-python")
                    fallback = (celpy_backend.compile(self.expr), celpy_backend)
                except (ImportError, CelSyntaxError) as exc:
                    fallback = (exc, None)
                self._fallback = fallback
        compiled, backend = fallback
        if backend is None:
            return None, (f"cel-expr-python cannot hold {why} and the cel-python fallback "
                          f"is unavailable ({compiled})")
        return backend.run(compiled, {k: _to_celpy(v) for k, v in data.items()})


_cache: dict[tuple[str, str], CelProgram] = {}
_cache_lock = threading.Lock()


def compile_cel(expr: str, engine: str | None = None) -> CelProgram:
    """Compile ``expr`` once per engine; later calls return the same :class:`CelProgram`.

    Parameters
    ----------
    expr
        The CEL source.
    engine
        ``"cel-expr-python"`` or ``"cel-python"``; default :func:`default_engine`.

    Raises
    ------
    CelSyntaxError
        The expression does not compile; ``line``/``column`` locate the problem.

    Examples
    --------
    >>> prog = compile_cel("value.amount > 0")
    >>> prog.evaluate({"value": {"amount": 5}})
    True
    >>> prog.check({"value": {}})[0] is None
    True
    >>> compile_cel("value.amount > 0") is prog
    True
    """
    if not isinstance(expr, str):
        raise TypeError(f"a CEL expression is a string, not {type(expr).__name__}")
    name = engine or default_engine()
    key = (name, expr)
    # Compiling under the lock: one compile per expression even when threads race.
    with _cache_lock:
        program = _cache.get(key)
        if program is None:
            program = _cache[key] = CelProgram(expr, name)
        return program


def clear_cache() -> None:
    """Forget every compiled program."""
    with _cache_lock:
        _cache.clear()


# ------------------------------------------------------------------------------ activations

def _text_or_bytes(raw: bytes | None) -> str | bytes | None:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def record_activations(records: pa.Table, decoded_values: Sequence[object] | None = None
                       ) -> list[dict[str, object]]:
    """One activation (dict of :data:`VARIABLES`) per row of a ``RECORDS_SCHEMA`` table.

    Parameters
    ----------
    records
        A ``pyarrow.Table`` with the ``kqlab.records.RECORDS_SCHEMA`` columns.
    decoded_values
        The decoded values as Python objects, one per row (None for a tombstone); when None,
        ``value`` is the raw value bytes.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from kqlab.records import RECORDS_SCHEMA
    >>> t = pa.Table.from_pylist([{"topic": "t", "partition": 0, "offset": 7, "key": b"k",
    ...     "headers": [{"key": "h", "value": b"1"}, {"key": "h", "value": b"2"}]}],
    ...     schema=RECORDS_SCHEMA)
    >>> act = record_activations(t, [{"amount": 3}])[0]
    >>> act["key"], act["value"], act["headers"], act["offset"]
    ('k', {'amount': 3}, {'h': '2'}, 7)
    """
    n = records.num_rows
    if decoded_values is not None and len(decoded_values) != n:
        raise ValueError(f"decoded_values has {len(decoded_values)} items for {n} records")
    names = set(records.column_names)

    def column(name: str) -> list:
        return records.column(name).to_pylist() if name in names else [None] * n

    keys = [_text_or_bytes(k) for k in column("key")]
    values = decoded_values if decoded_values is not None else column("value")
    header_lists, header_maps = [], []
    for hs in column("headers"):
        items = [{"key": h["key"], "value": _text_or_bytes(h["value"])} for h in hs or ()]
        header_lists.append(items)
        header_maps.append({h["key"]: h["value"] for h in items})  # the last occurrence wins
    meta = {name: column(name) for name in ("topic", "partition", "offset", "timestamp",
                                            "timestamp_type", "batch_offset", "batch_index")}
    out = []
    for i in range(n):
        act = {"key": keys[i], "value": values[i], "headers": header_maps[i],
               "header_list": header_lists[i]}
        for name, col in meta.items():
            act[name] = col[i]
        out.append(act)
    return out
