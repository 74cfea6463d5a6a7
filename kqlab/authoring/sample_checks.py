"""Rules checked against the loaded sample's decoded columns, as they are typed.

The policy loader refuses a CEL expression or a field path that fails for every record — but
only against the schemas a policy *declares* (:mod:`kqlab.policy.content_checks`).  Without a
declared schema, ``value.amuont > 0`` compiles, gets a ✓, and then rejects the whole sample.
The workbench always has better evidence than nothing: the sample it replays, decoded.  Here
the decoded value column's Arrow type becomes a :class:`~kqlab.policy.value_shapes.Shape`
(the same CEL types the vectorised engine gives the column, :func:`kqlab.validate.cel.columns
.from_arrow`), and the loader's own checks run against it: :func:`expression_problem` for
``expr`` and ``when``, :meth:`ContentChecker.field_path` for a field kind's ``field``.  A field
the sample does not have is refused with the nearest name it does have.

Shapes stay generous like the loader's: every field may be null, a decoded float64 may hold
ints, and whatever the sample cannot pin down (values kept as JSON text because their types
were mixed, a value format that is not decoded) is ``dyn``, about which nothing is claimed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from kqlab.policy.content_checks import ContentChecker
from kqlab.policy.errors import PolicyError
from kqlab.policy.expression_checks import ExpressionProblem, expression_problem
from kqlab.policy.value_shapes import DYN, Shape, of, record

if TYPE_CHECKING:
    from kqlab.policy.model import Policy, Rule
    from kqlab.validate.replayer import Replayer

__all__ = ["SAMPLE_WORDS", "arrow_shape", "expression_against", "rule_problem",
           "sample_value_shape"]

#: how messages name the evidence (the loader's say "the declared schema")
SAMPLE_WORDS = "the sample's decoded values"
_DECLARED_WORDS = "the declared schema"


def arrow_shape(t: pa.DataType, *, decoded: bool = True) -> Shape:
    """The CEL shape of the values of an Arrow column of type ``t``.

    ``decoded``: the column comes from decoding JSON or Avro, where a float64 may hold values
    that were ints (JSON ``[1, 2.5]``), so it may be either.

    Examples
    --------
    >>> s = arrow_shape(pa.struct([("amount", pa.float64()), ("tags", pa.list_(pa.string()))]))
    >>> s.closed, s.fields["amount"].describe(), s.fields["tags"].items.describe()
    (True, 'int, double or null', 'string or null')
    """
    if pa.types.is_dictionary(t):
        return arrow_shape(t.value_type, decoded=decoded)
    if pa.types.is_null(t):
        return of("null")
    if pa.types.is_boolean(t):
        return of("bool", "null")
    if pa.types.is_integer(t):
        return of("int", "uint", "null") if pa.types.is_uint64(t) else of("int", "null")
    if pa.types.is_float64(t) and decoded:
        return of("int", "double", "null")
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return of("double", "null")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return of("string", "null")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or \
            pa.types.is_fixed_size_binary(t):
        return of("bytes", "null")
    if pa.types.is_timestamp(t):
        return of("timestamp", "null")
    if pa.types.is_date(t):
        return of("int", "null")
    if pa.types.is_struct(t):
        return record({f.name: arrow_shape(f.type, decoded=decoded) for f in t}, null=True)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return of("list", "null", items=arrow_shape(t.value_type, decoded=decoded))
    if pa.types.is_map(t):
        return of("map", "null", items=arrow_shape(t.item_type, decoded=decoded))
    return DYN  # times, durations, unions: no claim


def sample_value_shape(replayer: Replayer, policy: Policy) -> Shape:
    """The shape of ``value`` in ``replayer``'s sample decoded with ``policy``'s value format
    (the column the rules read, decoded once and cached with the sample); ``DYN`` when the
    format does not decode or the decoder kept the values as JSON text."""
    from kqlab.validate.rules import decodes

    if not decodes(policy.value) or replayer.sample.records.num_rows == 0:
        return DYN
    decoded = replayer.context(policy).decoded("value")
    if decoded.fallback is not None:
        return DYN
    return arrow_shape(decoded.values.type)


def expression_against(expr: str, shape: Shape) -> ExpressionProblem | None:
    """:func:`expression_problem` of ``expr`` with ``value`` shaped like the sample; its
    message names the sample as the evidence."""
    problem = expression_problem(expr, shape)
    if problem is None:
        return None
    return ExpressionProblem(_named(problem.message), problem.offset)


def rule_problem(rule: Rule, shape: Shape) -> str | None:
    """Why ``rule`` fails every record of a sample whose values have ``shape``: a CEL
    ``expr`` / ``when`` that reads a field the sample lacks or compares types that never
    compare, a field kind's ``field`` path that is not there or has a type the kind never
    passes; None when nothing is certain to fail."""
    if shape.dyn:
        return None
    for name, expr in (("expr", rule.params.get("expr")), ("when", rule.when)):
        if isinstance(expr, str) and expr.strip():
            problem = expression_against(expr.strip(), shape)
            if problem is not None:
                return f"{name}: {problem.message}"
    field = rule.params.get("field")
    if isinstance(field, str):
        checker = _SampleChecker(shape)
        try:
            checker.field_path(rule.kind, {"field": field}, "field")
        except PolicyError as exc:
            return f"field: {_named(exc.reason)}"
    return None


class _SampleChecker(ContentChecker):
    """The loader's field-path check with the sample's shape standing in for the declared
    schema's."""

    def __init__(self, shape: Shape) -> None:
        super().__init__("sample")
        self._value_shape = shape


def _named(message: str) -> str:
    return message.replace(_DECLARED_WORDS, SAMPLE_WORDS)
