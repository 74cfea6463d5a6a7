"""What a record's CEL variables can hold, as far as the policy's declared schemas tell.

A :class:`Shape` is the set of CEL types a value may have at run time (``int``, ``double``,
``string``, ``map`` ...; ``None`` for "anything", CEL's ``dyn``), plus, for maps, the fields a
record schema declares and, for lists and open maps, the shape of their items.  It is built
from the policy's declared schemas — Avro (:func:`avro_shape`) or JSON Schema
(:func:`json_schema_shape`) — with the types the *per-record* path hands to the CEL engine
(``kqlab.policy.cel.plain_value``: Avro ``decimal`` → double, ``date`` → int days, ``uuid`` →
string, timestamps → CEL timestamps; JSON ``number`` → int or double, as orjson decodes it),
and from the fixed record variables (:func:`variable_shapes`).

Shapes are deliberately generous — a union of every writer schema's types, ``null`` wherever
a value may be absent — because the load-time checks built on them
(:mod:`kqlab.policy.expression_checks`) must refuse only what fails for *every* record.
Anything a schema does not pin down (a schema reference, an unresolvable ``$ref``, ``time``
values, ``oneOf`` mixing records) is ``dyn``, about which nothing is claimed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["DYN", "KINDS", "Shape", "article", "avro_shape", "either", "json_schema_shape",
           "merge", "nearest_field", "of", "plural", "record", "variable_shapes"]

#: the CEL types a shape distinguishes
KINDS = ("int", "uint", "double", "string", "bytes", "bool", "null", "map", "list",
         "timestamp", "duration", "type")


@dataclass(frozen=True, slots=True)
class Shape:
    """The CEL types a value may take (``kinds``; None: any), and what maps and lists hold.

    ``fields`` (maps from records): the declared fields; ``closed`` says no other key can be
    there (an Avro record, a JSON Schema object without ``additionalProperties``).  ``items``:
    the shape of a list's elements or of an open map's values.
    """

    kinds: frozenset[str] | None
    fields: Mapping[str, Shape] = field(default_factory=dict)
    closed: bool = False
    items: Shape | None = None

    @property
    def dyn(self) -> bool:
        """Nothing is known about the value."""
        return self.kinds is None

    def describe(self) -> str:
        """``double``, ``int or null``, ``a record``: how messages name the type."""
        if self.kinds is None:
            return "dyn"
        names = ["record" if k == "map" and self.closed else k for k in KINDS
                 if k in self.kinds]
        return either(names) if names else "nothing"

    def without_null(self) -> Shape:
        """The shape of the value when it is not null."""
        if self.kinds is None or "null" not in self.kinds:
            return self
        return Shape(self.kinds - {"null"}, self.fields, self.closed, self.items)


DYN = Shape(None)


def either(names: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def article(shape: Shape) -> str:
    """``a double``, ``an int or null``, ``a record``: a shape in a sentence."""
    text = shape.describe()
    return ("an " if text[0] in "aeiou" else "a ") + text


def nearest_field(name: str, fields: list[str]) -> str:
    """``did you mean 'amount'?``, or what to do when no field is close to ``name``."""
    close = difflib.get_close_matches(name, fields, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return "use one of its fields" if fields else "the schema declares none: remove the path"


_PLURALS = {"int": "ints", "uint": "uints", "double": "doubles", "string": "strings",
            "bytes": "bytes", "bool": "bools", "null": "null", "map": "maps", "list": "lists",
            "timestamp": "timestamps", "duration": "durations", "type": "types"}


def plural(kinds: Iterable[str]) -> str:
    """``strings``, ``strings, bytes, maps or lists``: kinds of values in a sentence."""
    kinds = set(kinds)
    ordered = [_PLURALS[k] for k in KINDS if k in kinds]
    return either(ordered) if ordered else "nothing"


def of(*kinds: str, items: Shape | None = None) -> Shape:
    """A shape of these kinds (``items`` for a list or an open map)."""
    return Shape(frozenset(kinds), items=items)


def record(fields: Mapping[str, Shape], *, closed: bool = True, null: bool = False,
           items: Shape | None = None) -> Shape:
    """A map with declared fields (``items``: the values of undeclared keys, when open)."""
    # the very dict, not a copy: a recursive Avro record fills it after referring to it
    return Shape(frozenset(("map", "null") if null else ("map",)), fields, closed, items)


def merge(shapes: Iterable[Shape]) -> Shape:
    """One shape holding every value any of ``shapes`` holds (a union)."""
    shapes = list(shapes)
    if not shapes or any(s.kinds is None for s in shapes):
        return DYN
    kinds = frozenset().union(*(s.kinds or () for s in shapes))
    maps = [s for s in shapes if s.kinds and "map" in s.kinds]
    fields: dict[str, Shape] = {}
    for s in maps:
        for name, sub in s.fields.items():
            fields[name] = merge((fields[name], sub)) if name in fields else sub
    # items: a list's elements, an open map's values (None in a container: unknown)
    containers = [s for s in maps if not s.closed] + \
        [s for s in shapes if s.kinds and "list" in s.kinds]
    items = None
    if containers:
        known = [s.items for s in containers if s.items is not None]
        items = merge(known) if len(known) == len(containers) else DYN
    return Shape(kinds, fields, bool(maps) and all(s.closed for s in maps), items)


# ------------------------------------------------------------------------------------ Avro
_AVRO_PRIMITIVES = {"null": "null", "boolean": "bool", "int": "int", "long": "int",
                    "float": "double", "double": "double", "bytes": "bytes",
                    "string": "string"}
#: logical types → what ``plain_value`` makes of fastavro's Python value (None: no claim)
_AVRO_LOGICAL = {"decimal": "double", "uuid": "string", "date": "int",
                 "timestamp-millis": "timestamp", "timestamp-micros": "timestamp",
                 "timestamp-nanos": "timestamp", "local-timestamp-millis": "timestamp",
                 "local-timestamp-micros": "timestamp", "local-timestamp-nanos": "timestamp",
                 "time-millis": None, "time-micros": None, "duration": None}


def avro_shape(schema: object, named: dict[str, object] | None = None,
               namespace: str = "") -> Shape:
    """The shape of the datums an Avro ``schema`` (parsed JSON) decodes to.

    Examples
    --------
    >>> s = avro_shape({"type": "record", "name": "O", "fields": [
    ...     {"name": "amount", "type": "double"},
    ...     {"name": "note", "type": ["null", "string"]}]})
    >>> s.fields["amount"].describe(), s.fields["note"].describe()
    ('double', 'string or null')
    """
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return of(_AVRO_PRIMITIVES[schema])
        qualified = schema if "." in schema or not namespace else f"{namespace}.{schema}"
        target = named.get(qualified, named.get(schema))
        if isinstance(target, Shape):
            return target
        return DYN  # a reference to another subject's type, or a forward reference
    if isinstance(schema, list):
        return merge(avro_shape(branch, named, namespace) for branch in schema)
    if not isinstance(schema, Mapping):
        return DYN
    logical = schema.get("logicalType")
    if isinstance(logical, str) and logical in _AVRO_LOGICAL:
        kind = _AVRO_LOGICAL[logical]
        return DYN if kind is None else of(kind)
    kind = schema.get("type")
    if isinstance(kind, str | list) and kind not in ("record", "error", "enum", "array", "map",
                                                     "fixed"):
        return avro_shape(kind, named, namespace)
    if isinstance(kind, Mapping):
        return avro_shape(kind, named, namespace)
    name = schema.get("name")
    ns = schema.get("namespace", namespace)
    ns = ns if isinstance(ns, str) else namespace
    full: str | None = None
    if isinstance(name, str):
        full = name if "." in name or not ns else f"{ns}.{name}"
    if kind in ("enum",):
        shape = of("string")
    elif kind == "fixed":
        shape = of("bytes")
    elif kind == "array":
        shape = of("list", items=avro_shape(schema.get("items"), named, ns))
    elif kind == "map":
        shape = of("map", items=avro_shape(schema.get("values"), named, ns))
    elif kind in ("record", "error"):
        fields: dict[str, Shape] = {}
        shape = record(fields)  # registered before its fields: recursive types refer to it
        if full:
            named[full] = shape
            named.setdefault(str(name).rsplit(".", 1)[-1], shape)
        for f in schema.get("fields") or ():
            if isinstance(f, Mapping) and isinstance(f.get("name"), str):
                fields[f["name"]] = avro_shape(f.get("type"), named, ns)
        return shape
    else:
        return DYN
    if full:
        named[full] = shape
    return shape


# ----------------------------------------------------------------------------- JSON Schema
_JSON_TYPES = {"string": ("string",), "integer": ("int",), "number": ("int", "double"),
               "boolean": ("bool",), "null": ("null",), "object": ("map",),
               "array": ("list",)}


def json_schema_shape(schema: object, root: object = None, depth: int = 0) -> Shape:
    """The shape of the JSON values a JSON Schema accepts (as orjson decodes them).

    An object schema with ``properties`` and no ``additionalProperties`` /
    ``patternProperties`` is taken as closed: the policy author named its fields, so a field
    outside them is a typo.  ``additionalProperties: true`` (or a schema) opens it.

    Examples
    --------
    >>> s = json_schema_shape({"type": "object", "properties": {"n": {"type": "number"}}})
    >>> s.closed, s.fields["n"].describe()
    (True, 'int or double')
    """
    root = schema if root is None else root
    if depth > 32 or not isinstance(schema, Mapping):
        return DYN  # ``true`` / ``false`` schemas and runaway references claim nothing
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _json_pointer(root, ref)
        return DYN if target is None else json_schema_shape(target, root, depth + 1)
    for combinator in ("anyOf", "oneOf"):
        options = schema.get(combinator)
        if isinstance(options, list) and options:
            return merge(json_schema_shape(o, root, depth + 1) for o in options)
    if "allOf" in schema or "not" in schema or "if" in schema:
        return DYN
    if "const" in schema:
        return _literal_shape([schema["const"]])
    if isinstance(schema.get("enum"), list):
        return _literal_shape(schema["enum"])
    types = schema.get("type")
    if isinstance(types, str):
        types = [types]
    if not isinstance(types, list) or not all(t in _JSON_TYPES for t in types):
        return DYN
    kinds = frozenset(k for t in types for k in _JSON_TYPES[t])
    fields: dict[str, Shape] = {}
    closed = False
    items: Shape | None = None
    if "map" in kinds:
        props = schema.get("properties")
        if isinstance(props, Mapping):
            fields = {str(k): json_schema_shape(v, root, depth + 1) for k, v in props.items()}
        extra = schema.get("additionalProperties")
        closed = bool(fields) and extra is None and "patternProperties" not in schema
        if isinstance(extra, Mapping):
            items = json_schema_shape(extra, root, depth + 1)
        elif not closed:
            items = DYN
    if "list" in kinds:
        spec = schema.get("items")
        items = json_schema_shape(spec, root, depth + 1) if isinstance(spec, Mapping) else DYN
    return Shape(kinds, fields, closed, items)


def _literal_shape(values: list[object]) -> Shape:
    kinds: set[str] = set()
    for v in values:
        if v is None:
            kinds.add("null")
        elif isinstance(v, bool):
            kinds.add("bool")
        elif isinstance(v, int):
            kinds.add("int")
        elif isinstance(v, float):
            kinds.add("double")
        elif isinstance(v, str):
            kinds.add("string")
        else:
            return DYN
    return Shape(frozenset(kinds))


def _json_pointer(root: object, ref: str) -> object:
    """The local target of ``$ref`` (``#/definitions/x``, ``#/$defs/x``); None elsewhere."""
    if not ref.startswith("#"):
        return None
    node = root
    for part in ref[1:].split("/")[1:] if ref != "#" else ():
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return None
    return node


# ------------------------------------------------------------------------------- variables
_TEXT_OR_BYTES = of("string", "bytes", "null")


def variable_shapes(value: Shape = DYN) -> dict[str, Shape]:
    """The shape of every record variable (``kqlab.policy.cel.VARIABLES``); ``value`` is the
    decoded value's, from the declared schemas (a tombstone makes it null)."""
    value = value if value.dyn else merge((value, of("null")))
    header = record({"key": of("string"), "value": _TEXT_OR_BYTES})
    meta = {name: of("int") for name in ("partition", "offset", "timestamp", "timestamp_type",
                                         "batch_offset", "batch_index")}
    return {"key": _TEXT_OR_BYTES, "value": value,
            "headers": of("map", items=_TEXT_OR_BYTES),
            "header_list": of("list", items=header), "topic": of("string"), **meta}
