"""Checks of what a rule's text *says*: patterns, CEL expressions and field paths.

The shape checks (:mod:`kqlab.policy.shape_checks`) know a pattern is text; these know whether
the engines can run it and whether it can be true.  Each refuses, at load time, what would
otherwise fail every record of a replay — or of production, once exported:

* a ``pattern`` RE2 or Python's ``re`` cannot read (:func:`kqlab.policy.patterns.pattern_problem`,
  the one function every pattern-taking kind calls);
* a CEL ``expr`` or ``when`` that does not compile, reads an undeclared variable, or does not
  fit the declared schema (:func:`kqlab.policy.expression_checks.expression_problem`);
* a field kind's ``field`` path that the declared schema does not have, or whose type the
  kind can never accept (``field_range`` on a string).

The error points *inside* the value — the file's line and column of the offending character,
found through the scalar's quoting or block style (:mod:`kqlab.policy.scalar_offsets`) — and
the schema is the one the policy declares (:mod:`kqlab.policy.declared_schemas`), read once
per load; without one, field paths and value types are not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

from kqlab.policy.declared_schemas import declared_value_shape
from kqlab.policy.expression_checks import expression_problem
from kqlab.policy.model import Format
from kqlab.policy.patterns import pattern_problem
from kqlab.policy.positioned_yaml import scalar_of, value_pos
from kqlab.policy.scalar_offsets import file_position
from kqlab.policy.shape_checks import ShapeChecker
from kqlab.policy.value_shapes import DYN, Shape, article, nearest_field, plural

__all__ = ["FIELD_KIND_ACCEPTS", "ContentChecker"]

#: what the value of a field kind's field can be for the rule to pass (others always fail)
FIELD_KIND_ACCEPTS = {"field_range": frozenset(("int", "uint", "double")),
                      "field_regex": frozenset(("string",)),
                      "field_length": frozenset(("string", "bytes", "list")),
                      # sample checks (kqlab.policy.check_checks)
                      "stat": frozenset(("int", "uint", "double"))}


class ContentChecker(ShapeChecker):
    """Pattern, expression and field-path checks, with errors located inside the value."""

    def __init__(self, source: str) -> None:
        super().__init__(source)
        # the policy's formats and topics, known before its rules
        self.formats: dict[str, Format] = {"key": Format(), "value": Format()}
        self.topic_names: tuple[str, ...] = ()
        #: may reading the declared schemas contact a network schema registry?
        self.contact_registries = False
        self._value_shape: Shape | None = None

    def value_shape(self) -> Shape:
        """The decoded value's shape from the declared schemas (DYN: none declared/readable)."""
        if self._value_shape is None:
            shape = declared_value_shape(self.formats["value"], self.topic_names,
                                         contact_registries=self.contact_registries)
            self._value_shape = DYN if shape is None else shape
        return self._value_shape

    def fail_inside(self, reason: str, key: str, mapping: Mapping[str, object], name: str,
                    offset: int | None) -> NoReturn:
        """Fail at ``offset`` inside the text value ``mapping[name]`` (its file line and column
        when they can be found, else where the value starts)."""
        raw = mapping.get(name)
        at = None
        if offset is not None and isinstance(raw, str):
            at = file_position(scalar_of(mapping, name), raw, offset)
        if at is None:
            self.fail(reason, key, value_pos(mapping, name))
        self.fail(reason, key, at, inside=True)

    # --- patterns --------------------------------------------------------------------------
    def pattern(self, mapping: Mapping[str, object], name: str, key: str) -> None:
        """``mapping[name]`` is a regular expression every engine can run."""
        pattern = mapping[name]
        if not isinstance(pattern, str):
            return
        problem = pattern_problem(pattern)
        if problem is not None:
            shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
            self.fail_inside(f"invalid regular expression '{shown}': {problem.message}", key,
                             mapping, name, problem.offset)

    # --- expressions -----------------------------------------------------------------------
    def expression(self, mapping: Mapping[str, object], name: str, key: str) -> None:
        """``mapping[name]`` is a CEL condition that compiles and fits the declared schema."""
        raw = mapping.get(name)
        if not isinstance(raw, str) or not raw.strip():
            return
        expr = raw.strip()  # what the rule keeps (PROSE): offsets shift by the lead
        problem = expression_problem(expr, self.value_shape())
        if problem is not None:
            lead = len(raw) - len(raw.lstrip())
            self.fail_inside(problem.message, key, mapping, name,
                             None if problem.offset is None else lead + problem.offset)

    # --- field paths -----------------------------------------------------------------------
    def field_path(self, kind: str, mapping: Mapping[str, object], key: str,
                   name: str = "field") -> None:
        """A field kind's ``field`` (or the path under ``name``) exists in the declared schema
        with a type it can pass."""
        path = mapping.get(name)
        shape = self.value_shape()
        if not isinstance(path, str) or shape.dyn:
            return
        offset, where = 0, "value"
        shape = shape.without_null()
        for segment in path.split("."):
            kinds = shape.kinds
            if kinds is None:
                return
            if "map" not in kinds:
                self.fail_inside(f"{where} is {article(shape)} in the declared schema, so it "
                                 f"has no field {segment!r} — the path stops at {where}", key,
                                 mapping, name, offset)
            if segment in shape.fields:
                shape = shape.fields[segment]
            elif shape.closed:
                fields = sorted(shape.fields)
                shown = ", ".join(fields[:12]) + (", …" if len(fields) > 12 else "")
                self.fail_inside(f"{where} has no field {segment!r} in the declared schema "
                                 f"(its fields: {shown or 'none'}) — "
                                 f"{nearest_field(segment, fields)}", key, mapping, name,
                                 offset)
            else:
                shape = shape.items or DYN
            where = f"{where}.{segment}"
            offset += len(segment) + 1
        accepts = FIELD_KIND_ACCEPTS.get(kind)
        kinds = shape.kinds
        if accepts is not None and kinds is not None and kinds - {"null"} and \
                not (kinds - {"null"}) & accepts:
            self.fail_inside(f"{where} is {article(shape)} in the declared schema, and a {kind} "
                             f"rule only passes {plural(accepts)} — every record with the field "
                             "would fail; check another field or use another kind", key,
                             mapping, name, 0)
