"""The rule catalog: every built-in rule kind declared once (parameters, default message, needs).

The policy layer only *declares* rules; engines implement them, keyed by kind
(``kqlab.validate.rules``).  A declaration says which parameters a rule takes (so the YAML loader
and the JSON Schema can check them), the message a failing record gets when the policy gives
none, what the rule must read (KIP-940's introspection hints are derived from that), and whether
the rule can be exported to enforcement targets (Python plugins cannot).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kqlab.policy.plain_data import PlainData

#: What a rule reads from a record; KIP-940's introspection hints are derived from these.
NEEDS = ("headers", "key", "value", "decoded_key", "decoded_value", "metadata")


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of a rule kind."""

    name: str
    type: str  # "int" | "number" | "str" | "bool" | "list[str]" | "list[int]" | "list" | "any"
    required: bool = False
    default: PlainData = None
    doc: str = ""
    choices: tuple[str, ...] = ()  # the allowed values of a "str" parameter, when closed


@dataclass(frozen=True, slots=True)
class RuleKind:
    """A built-in rule kind: its parameters, default message and what it reads."""

    name: str
    category: str
    doc: str
    params: tuple[Param, ...] = ()
    message: str = "record failed {rule}"
    needs: frozenset[str] = field(default_factory=frozenset)
    exportable: bool = True

    def param(self, name: str) -> Param | None:
        """The parameter called ``name``, or None."""
        return next((p for p in self.params if p.name == name), None)

    def minimal_params(self, params: Mapping[str, PlainData]) -> dict[str, PlainData]:
        """``params`` in catalog order without those equal to their default (unknown names kept
        last): the canonical form the loader builds and the dump writes, so two spellings of
        one rule compare, hash and print the same.

        Examples
        --------
        >>> kind("field_range").minimal_params({"max": 10, "field": "x", "allow_null": True})
        {'field': 'x', 'max': 10}
        """
        out: dict[str, PlainData] = {}
        for p in self.params:
            if p.name in params:
                value = params[p.name]
                if not (value == p.default and type(value) is type(p.default)):
                    out[p.name] = value
        out.update((k, v) for k, v in params.items() if self.param(k) is None)
        return out


def _k(name: str, category: str, doc: str, params: tuple[Param, ...], message: str,
       needs: tuple[str, ...], exportable: bool = True) -> RuleKind:
    return RuleKind(name, category, doc, params, message, frozenset(needs), exportable)


_FIELD = Param("field", "str", required=True,
               doc="dotted path into the decoded value, e.g. customer.id")
_MIN = Param("min", "number", doc="smallest allowed value (inclusive)")
_MAX = Param("max", "number", doc="largest allowed value (inclusive)")
_NULLS = Param("allow_null", "bool", default=True,
               doc="a null or absent field passes (require presence with field_not_null)")
_TARGET = Param("target", "str", default="value", doc="value | key", choices=("value", "key"))

KINDS: dict[str, RuleKind] = {k.name: k for k in (
    # presence
    _k("key_required", "presence", "Every record has a key (empty keys optionally refused).",
       (Param("allow_empty", "bool", default=True, doc="accept zero-length keys"),),
       "record has no key", ("key",)),
    _k("value_required", "presence", "Every record has a value; tombstones optionally allowed.",
       (Param("allow_tombstones", "bool", default=False, doc="accept null values (deletes)"),
        Param("allow_empty", "bool", default=True, doc="accept zero-length values")),
       "record has no value", ("value",)),
    # sizes
    _k("key_size", "size", "Key size in bytes within [min, max].",
       (Param("min", "int", default=0), Param("max", "int")),
       "key size {size} bytes is outside [{min}, {max}]", ("key",)),
    _k("value_size", "size", "Value size in bytes within [min, max].",
       (Param("min", "int", default=0), Param("max", "int")),
       "value size {size} bytes is outside [{min}, {max}]", ("value",)),
    _k("headers_size", "size", "Total header bytes (keys + values) at most max.",
       (Param("max", "int", required=True),),
       "headers take {size} bytes, more than {max}", ("headers",)),
    _k("record_size", "size", "Key + value + headers bytes at most max.",
       (Param("max", "int", required=True),),
       "record takes {size} bytes, more than {max}", ("key", "value", "headers")),
    # headers
    _k("header_required", "header", "A header with this name is present.",
       (Param("name", "str", required=True),),
       "header {name!r} is missing", ("headers",)),
    _k("header_values", "header", "The header's value is one of the allowed values.",
       (Param("name", "str", required=True), Param("values", "list[str]", required=True),
        Param("required", "bool", default=False, doc="also fail when the header is absent")),
       "header {name!r} has a value outside the allowed set", ("headers",)),
    _k("header_pattern", "header", "The header's value matches a regular expression.",
       (Param("name", "str", required=True), Param("pattern", "str", required=True),
        Param("required", "bool", default=False)),
       "header {name!r} does not match {pattern!r}", ("headers",)),
    _k("headers_unique", "header", "No header name appears twice (optionally only these names).",
       (Param("names", "list[str]", doc="only check these names"),),
       "header {name!r} appears more than once", ("headers",)),
    # timestamps
    _k("timestamp_window", "timestamp",
       "The record timestamp lies within [reference - before_ms, reference + after_ms].",
       (Param("before_ms", "int"), Param("after_ms", "int"),
        Param("relative_to", "str", default="now", doc="now | batch (the batch's first timestamp)",
              choices=("now", "batch"))),
       "timestamp {timestamp} is outside the allowed window", ("metadata",)),
    # wire format
    _k("magic_byte", "wire", "The value starts with the Confluent wire-format magic byte 0.",
       (_TARGET,),
       "{target} does not start with the Confluent magic byte 0", ("value",)),
    _k("schema_id_allowed", "wire", "The wire-format schema id is one of the allowed ids.",
       (Param("ids", "list[int]", required=True), _TARGET),
       "schema id {schema_id} is not allowed", ("value",)),
    _k("schema_id_registered", "wire",
       "The wire-format schema id is registered (for the subject, when one is given).",
       (Param("subject", "str"), _TARGET),
       "schema id {schema_id} is not registered", ("value",)),
    # schemas / syntax
    _k("decodable", "schema", "The value (or key) decodes with the policy's declared format. "
       "Applied implicitly, first, whenever the format decodes and no decode rule is given.",
       (Param("target", "str", default="value", choices=("value", "key")),),
       "{target} cannot be decoded: {error}", ("decoded_value",)),
    _k("avro_valid", "schema", "The value decodes with its Avro writer schema.",
       (_TARGET,),
       "value is not valid Avro: {error}", ("decoded_value",)),
    _k("json_valid", "json", "The value is syntactically valid JSON (UTF-8).",
       (_TARGET,),
       "value is not valid JSON: {error}", ("value",)),
    _k("json_schema", "schema", "The JSON value conforms to a JSON Schema (inline or file).",
       (Param("schema", "any", doc="the schema as a mapping"), Param("path", "str"),
        _TARGET),
       "value does not conform to the JSON Schema: {error}", ("decoded_value",)),
    # field checks (sugar over expressions)
    _k("field_not_null", "field", "The field is present and not null.", (_FIELD,),
       "{field} is null or missing", ("decoded_value",)),
    _k("field_range", "field", "The numeric field lies within [min, max].",
       (_FIELD, _MIN, _MAX, _NULLS),
       "{field}={value} is outside [{min}, {max}]", ("decoded_value",)),
    _k("field_in", "field", "The field's value is one of a set.",
       (_FIELD, Param("values", "list", required=True), _NULLS),
       "{field}={value} is not one of the allowed values", ("decoded_value",)),
    _k("field_regex", "field", "The string field matches a regular expression.",
       (_FIELD, Param("pattern", "str", required=True), _NULLS),
       "{field}={value} does not match {pattern!r}", ("decoded_value",)),
    _k("field_length", "field", "The string/list field's length lies within [min, max].",
       (_FIELD, Param("min", "int", default=0), Param("max", "int"), _NULLS),
       "{field} has length {length}, outside [{min}, {max}]", ("decoded_value",)),
    _k("field_type", "field", "The field has this JSON type.",
       (_FIELD, Param("type", "str", required=True,
                      doc="string | number | integer | boolean | object | array | null",
                      choices=("string", "number", "integer", "boolean", "object", "array",
                               "null"))),
       "{field} is not of type {type}", ("decoded_value",)),
    # expressions
    _k("cel", "expression", "A CEL expression over key, value (decoded), headers and metadata "
       "that must evaluate to true.",
       (Param("expr", "str", required=True),),
       "expression is false: {expr}", ("key", "decoded_value", "headers", "metadata")),
    # plugins (KIP-729 style validator): never exportable
    _k("plugin", "plugin", "A Python callable or class 'module:attr' validating each record.",
       (Param("callable", "str", required=True, doc="module.path:function_or_class"),
        Param("options", "any", doc="passed to the plugin's configure()")),
       "rejected by plugin {callable}", ("key", "value", "headers", "metadata"),
       exportable=False),
)}


def kind(name: str) -> RuleKind:
    """The :class:`RuleKind` called ``name``; ``KeyError`` lists the known kinds."""
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"unknown rule kind {name!r}; known kinds: {', '.join(sorted(KINDS))}"
                       ) from None
