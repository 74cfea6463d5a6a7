"""Checks of a document's shape — mappings, known keys, types, plain data — with messages that
say where the mistake is and what to write instead.

:class:`ShapeChecker` is the base of the policy checker (:mod:`kqlab.policy.rule_checks`,
:mod:`kqlab.policy.section_checks`): every check fails fast with one
:class:`~kqlab.policy.errors.PolicyError` naming the source, the line (when the data came from
:func:`~kqlab.policy.positioned_yaml.read_yaml`) and the dotted key, and a hint written like the
line the user should have typed (``write min: 10``, ``quote it: version: "3.10"``).  It knows
parameter *types* and how to describe values, nothing about what a policy means.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, NoReturn, TypeGuard, overload

import yaml

from kqlab.policy.errors import PolicyError
from kqlab.policy.plain_data import PlainData
from kqlab.policy.positioned_yaml import Position, item_pos, key_pos, pos_of, value_pos

__all__ = ["INT64_LIMIT", "PROSE", "ShapeChecker", "describe", "did_you_mean", "example_text",
           "is_int", "is_number", "join_key", "yaml_scalar"]

#: free-text fields whose surrounding whitespace is formatting (YAML ``>`` adds a newline)
PROSE = ("name", "description", "owner", "message", "when", "expr")
#: integers must fit in signed 64 bits (Java's long): -2**63 <= n < 2**63
INT64_LIMIT = 2**63


def describe(value: object) -> str:
    """How a value reads back to the user in an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:57] + "...")
    return repr(value)


def yaml_scalar(value: object) -> str:
    """``value`` as one would type it in YAML (for hints such as ``quote it: '10'``)."""
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix(
        "\n...").removesuffix("...").strip()


def join_key(path: str, name: str) -> str:
    """The dotted key of ``name`` under ``path`` (error messages name keys this way)."""
    return f"{path}.{name}" if path else name


def is_int(value: object) -> TypeGuard[int]:
    """True for whole numbers (YAML/JSON booleans are not numbers, though Python's are)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """True for whole and decimal numbers, not booleans."""
    return (is_int(value) or isinstance(value, float)) and not isinstance(value, bool)


#: parameter type -> (test, noun for messages)
_TYPES: dict[str, tuple[Callable[[object], bool], str]] = {
    "int": (is_int, "a whole number"),
    "number": (is_number, "a number"),
    "str": (lambda v: isinstance(v, str), "text"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "list[str]": (lambda v: isinstance(v, list | tuple), "a list of text"),
    "list[int]": (lambda v: isinstance(v, list | tuple), "a list of whole numbers"),
    "list": (lambda v: isinstance(v, list | tuple), "a list"),
    "map": (lambda v: isinstance(v, Mapping), "a mapping"),
    "any": (lambda v: True, "plain data"),
}
#: example values for hints, by parameter name then by type
_EXAMPLES = {
    "field": "customer.id", "name": "trace-id", "pattern": "'^[0-9a-f-]+$'",
    "expr": "'value.amount > 0'", "callable": "my_package.checks:validate", "values": "[a, b]",
    "names": "[a, b]", "ids": "[1, 2]", "before_ms": "604800000", "after_ms": "3600000",
    "subject": "orders-value", "path": "schemas/orders.json", "schema": "{type: object}",
    "id": "amount-range", "version": '"4.0"', "registry": "mock://orders", "message":
    "'amount must be positive'", "when": "'value != null'", "records": "1000",
    "content_hash": "sha256:<64 hex digits>", "vetted_at": "'2026-11-21'",
}
_TYPE_EXAMPLES = {"int": "10", "number": "10", "str": "text", "bool": "true", "list[str]": "[a, b]",
                  "list[int]": "[1, 2]", "list": "[a, b]", "map": "{}", "any": "{}"}


def example_text(name: str, type_: str, choices: tuple[str, ...] = ()) -> str:
    """A value to show in a hint for a key called ``name`` of type ``type_``."""
    if choices:
        return choices[0]
    return _EXAMPLES.get(name) or _TYPE_EXAMPLES.get(type_, "...")


def did_you_mean(word: str, options: tuple[str, ...] | list[str]) -> str:
    """The closest option to a misspelt ``word``, or the list of options."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"use one of: {', '.join(options)}"


# ---------------------------------------------------------------------------------- checker
class ShapeChecker:
    """Checks the shape of one document (positioned or plain), failing fast with a hint."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, reason: str, key: str | None = None,
             at: Position | None = None, *, inside: bool = False) -> NoReturn:
        """Raise the one :class:`PolicyError`; ``inside``: ``at`` is a character inside the
        value (an expression's, a pattern's), shown as ``file:line:column``."""
        line, column = at if at else (None, None)
        raise PolicyError(reason, file=self.source, line=line, column=column, key=key or None,
                          inside=inside)

    # --- generic shapes --------------------------------------------------------------------
    def mapping(self, value: object, path: str, at: Position | None, what: str,
                hint: str | None = None) -> Mapping[str, object]:
        if not isinstance(value, Mapping):
            hint = f" — {hint}" if hint else ""
            self.fail(f"expected a mapping of {what}, got {describe(value)}{hint}", path, at)
        for key, key_at in getattr(value, "duplicates", ()):
            self.fail(f"duplicate key {key!r} — YAML would keep only one of them; remove or "
                      "rename the other", join_key(path, key), key_at)
        return value

    def known_keys(self, mapping: Mapping[str, object], allowed: tuple[str, ...], path: str,
                   what: str) -> None:
        for name in mapping:
            if not isinstance(name, str):
                self.fail(f"keys are names, got {describe(name)} — quote it", path,
                          pos_of(mapping))
            if name not in allowed:
                self.fail(f"unknown key {name!r} in {what} — {did_you_mean(name, allowed)}",
                          join_key(path, name), key_pos(mapping, name))

    def typed(self, value: object, type_: str, name: str, path: str, at: Position | None,
              example: str | None = None, item_of: str | None = None) -> PlainData:
        """``value`` if it has ``type_``; otherwise fail with a hint how to write it."""
        test, noun = _TYPES[type_]
        example = example or example_text(name, type_)
        if item_of is not None and not test(value):
            self.fail(f"expected {noun}, got {describe(value)} — every item of {name} is "
                      f"{noun}, e.g. {name}: {example_text(name, item_of)}", path, at)
        if value is None:
            self.fail(f"expected {noun}, got null — write {name}: {example}, or remove "
                      f"{name} to use its default", path, at)
        if not test(value):
            self.fail(f"expected {noun}, got {describe(value)} — "
                      f"{self._type_hint(value, type_, name, example)}", path, at)
        if type_ == "number" and isinstance(value, float) and not math.isfinite(value):
            self.fail(f"expected a finite number, got {describe(value)} — remove {name} to "
                      "leave that side open", path, at)
        if type_ in ("int", "number") and is_int(value) and \
                not -INT64_LIMIT <= value < INT64_LIMIT:
            self.fail(f"{value} does not fit in 64 bits", path, at)
        if type_ in ("list[str]", "list[int]") and isinstance(value, list | tuple):
            item_type = type_[5:-1]
            for i, item in enumerate(value):
                self.typed(item, item_type, name, f"{path}[{i}]", item_pos(value, i) or at,
                           item_of=type_)
        # every type is plain data: for list/any/map this is the check, for the others it
        # only confirms what the test above established
        return self.plain(value, path, at)

    @staticmethod
    def _type_hint(value: object, type_: str, name: str, example: str) -> str:
        if type_ in ("int", "number") and isinstance(value, str):
            number: int | float
            try:
                number = int(value.replace("_", ""))
            except ValueError:
                try:
                    number = float(value)
                except ValueError:
                    return f"write {name}: {example}"
            if type_ == "int" and isinstance(number, float):
                return f"write a whole number, e.g. {name}: {int(number)}"
            return f"write {name}: {yaml_scalar(number)} (a number, not text)"
        if type_ == "int" and isinstance(value, float):
            if value.is_integer():
                return f"write {name}: {int(value)} (no decimal point)"
            return f"write a whole number, e.g. {name}: {round(value)}"
        if type_ == "bool" and isinstance(value, str) and value.lower() in ("true", "false"):
            return f"write {name}: {value.lower()} (without quotes)"
        if type_ == "str" and isinstance(value, bool | int | float):
            return f"quote it: {name}: '{yaml_scalar(value)}'"
        if type_.startswith("list") and not isinstance(value, Mapping):
            return f"write {name}: [{yaml_scalar(value)}]"
        return f"write {name}: {example}"

    def plain(self, value: object, path: str, at: Position | None) -> PlainData:
        """Free-form data (samples, inline schemas, plugin options) is JSON-shaped."""
        if isinstance(value, Mapping):
            self.mapping(value, path, at, "values", f"write {path.rsplit('.', 1)[-1]}: {{}}")
            for key, item in value.items():
                if not isinstance(key, str):
                    self.fail(f"keys are names, got {describe(key)} — quote it", path, at)
                self.plain(item, join_key(path, key), value_pos(value, key) or at)
            return value
        if isinstance(value, list | tuple):
            for i, item in enumerate(value):
                self.plain(item, f"{path}[{i}]", item_pos(value, i) or at)
            return value
        if is_int(value):
            if not -INT64_LIMIT <= value < INT64_LIMIT:
                self.fail(f"{value} does not fit in 64 bits", path, at)
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                self.fail(f"expected a finite number, got {value!r} — JSON has no NaN or "
                          "infinity", path, at)
            return value
        if not (value is None or isinstance(value, str | bool)):
            self.fail(f"expected plain data (text, numbers, true/false, lists, mappings), got "
                      f"{type(value).__name__} — remove the YAML tag", path, at)
        return value

    # ``get``'s result type follows its ``type_`` (and whether a default or requirement
    # rules out None): the checks in ``typed`` guarantee it
    @overload
    def get(self, mapping: Mapping[str, object], name: str, type_: Literal["str"], path: str,
            *, required: Literal[True], choices: tuple[str, ...] = ..., nonempty: bool = ...,
            example: str | None = ...) -> str: ...
    @overload
    def get(self, mapping: Mapping[str, object], name: str, type_: Literal["str"], path: str,
            *, choices: tuple[str, ...] = ..., default: str, nonempty: bool = ...,
            example: str | None = ...) -> str: ...
    @overload
    def get(self, mapping: Mapping[str, object], name: str, type_: Literal["str"], path: str,
            *, choices: tuple[str, ...] = ..., default: None = ..., nonempty: bool = ...,
            example: str | None = ...) -> str | None: ...
    @overload
    def get(self, mapping: Mapping[str, object], name: str, type_: Literal["int"], path: str,
            *, example: str | None = ...) -> int | None: ...
    @overload
    def get(self, mapping: Mapping[str, object], name: str, type_: Literal["bool"], path: str,
            *, default: bool, example: str | None = ...) -> bool: ...
    @overload
    def get(self, mapping: Mapping[str, object], name: str, type_: Literal["list[str]"],
            path: str, *, default: Sequence[str], example: str | None = ...
            ) -> Sequence[str]: ...
    @overload
    def get(self, mapping: Mapping[str, object], name: str, type_: Literal["map"], path: str,
            *, default: Mapping[str, PlainData], example: str | None = ...
            ) -> Mapping[str, PlainData]: ...
    def get(self, mapping: Mapping[str, object], name: str, type_: str, path: str, *,
            required: bool = False, choices: tuple[str, ...] = (), default: PlainData = None,
            nonempty: bool = True, example: str | None = None) -> PlainData:
        """The checked value of ``mapping[name]`` (``default`` when absent)."""
        key = join_key(path, name)
        example = example or example_text(name, type_, choices)
        if name not in mapping:
            if required:
                self.fail(f"missing required key {name!r} — add {name}: {example}", path,
                          pos_of(mapping))
            return default
        at = value_pos(mapping, name)
        value = self.typed(mapping[name], type_, name, key, at, example)
        if choices and value not in choices:
            self.fail(f"{value!r} is not a valid {name} — {did_you_mean(str(value), choices)}",
                      key, at)
        if nonempty and type_ == "str" and isinstance(value, str) and not value.strip():
            self.fail(f"{name} is empty — write {name}: {example}, or remove it", key, at)
        if type_ == "int" and is_int(value) and value < 0:
            self.fail(f"{name} must be 0 or more, got {value}", key, at)
        return value.strip() if name in PROSE and isinstance(value, str) else value

    def regex(self, pattern: str, key: str, at: Position | None) -> None:
        try:
            re.compile(pattern)
        except re.error as exc:
            self.fail(f"invalid regular expression {pattern!r}: {exc} — fix the pattern (quote "
                      "it in single quotes so backslashes stay as written)", key, at)
