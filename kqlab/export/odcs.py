"""Open Data Contract Standard v3: a policy as an ODCS contract, and an ODCS contract as a policy.

Data catalogs and contract tools (datacontract-cli, Soda, Atlan, ...) speak ODCS; kqlab
policies speak Kafka.  :func:`build` writes a policy as one ODCS v3 document with the
standard's own pydantic model (package ``open-data-contract-standard``), and
:func:`import_odcs` reads one back, so that ``import_odcs(build(p)) == p`` — the policy
equality of :class:`~kqlab.policy.model.Policy`, hence the same ``content_hash()``.

The mapping, every rule being one ODCS quality rule named by its id:

* the record's value fields become nested schema ``properties`` (paths from the field rules
  and the sensitive fields; ``classification: sensitive`` marks the latter); unconditional
  reject-mode field rules also become the standard's schema constraints — ``required`` from
  ``field_not_null``, ``logicalType`` from ``field_type`` (or what ``field_range`` /
  ``field_regex`` imply), ``logicalTypeOptions`` from ranges, lengths and patterns;
* rules ODCS expresses are its ``library`` metrics on the field's property:
  ``field_not_null`` → ``nullValues`` must be 0, ``field_in`` → ``invalidValues`` must be 0
  with ``arguments.validValues``, ``field_regex`` → ``invalidValues`` with
  ``arguments.pattern``;
* every other kind is a ``custom`` quality rule with ``engine: kqlab``: its CEL text as the
  ``implementation`` where it has one (``cel`` rules; field ranges, lengths and types through
  :func:`kqlab.validate.fields.field_rule_to_cel`), else the rule's own parameters as a
  mapping (headers, sizes, timestamps, wire format, schemas, plugins);
* what the standard has no place for (message, ``when``, mode, golden examples, parameters
  the standard fields do not carry, the rule's position) rides along in a ``kqlabRule``
  custom property (vendor ``kqlab``), and the policy's own sections (topics, broker settings,
  enforcement profile, key/value formats, masking, provenance) in ``kqlab*`` custom
  properties of the contract.

Sample checks (``checks:``) are quality rules too, each named by its id with the whole
check in a ``kqlabCheck`` custom property (so the import restores it exactly): a check over
the whole sample (no ``window``, ``by`` or ``when``) that ODCS's library metrics express is
one — ``volume`` → ``rowCount`` (unit rows), ``null_rate`` → ``nullValues`` and
``duplicate_rate`` of a field with ``max: 0`` → ``duplicateValues`` ``mustBe: 0`` on the
field's property (unit percent for null rates, rows otherwise), with
``mustBeGreaterOrEqualTo`` / ``mustBeLessOrEqualTo`` / ``mustBeBetween`` — and every
other (windowed, grouped, and the kinds ODCS has no metric for: freshness, distinct, stat,
reject rate, drift, schema drift) is a ``custom`` rule with ``engine: kqlab``.  Their rows
are :class:`~kqlab.export.base.CheckFidelity` ``stated``: ODCS states them, enforces none.

Importing a contract kqlab did not write works too: library metrics, ``engine: kqlab`` (or
``cel``) custom rules and the schema constraints become rules with ids derived from the field
and check; data-set metrics with a tolerance become sample checks (``rowCount`` → ``volume``,
``nullValues`` / ``missingValues`` in percent → ``null_rate``, ``duplicateValues`` →
``duplicate_rate``, what they read approximately said in the import's notes); whatever has
no kqlab meaning (SQL, text, a count that must not be some value) is listed in
:attr:`OdcsImport.skipped` with the reason, never silently dropped.

Fidelity: ODCS states rules and enforces none, so a row says how the contract states the
rule — ``exact`` when ``kqlab import odcs`` restores it identically, which :func:`build`
checks by reading its own output back — and ``how`` says whether that is the standard's own
vocabulary (library metrics) or a custom rule other ODCS tools show but do not run.

Credentials are never written: sensitive keys of a schema source's ``config`` and user info
in a registry URL are left out (so a policy holding them imports back without them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kqlab.errors import KqlabError
from kqlab.export.base import (
    APPROXIMATE,
    EXACT,
    STATED,
    CheckFidelity,
    Export,
    RuleFidelity,
    comment_block,
    provenance,
    provenance_lines,
    public_url,
)

if TYPE_CHECKING:  # pragma: no cover
    from open_data_contract_standard.model import OpenDataContractStandard

__all__ = ["API_VERSION", "OdcsError", "OdcsImport", "build", "check_rows", "dump_contract",
           "import_odcs", "to_odcs"]

TITLE = "Open Data Contract Standard v3 (schema + quality rules)"
#: the ODCS version written: v3.2.0 is the first with a custom property's `vendor`
API_VERSION = "v3.2.0"
VENDOR = "kqlab"
ENGINE = "kqlab"
#: the policy sections carried as contract-level custom properties, in policy-file order
_SECTIONS = {"topics": "kqlabTopics", "broker": "kqlabBroker", "enforcement": "kqlabEnforcement",
             "key": "kqlabKey", "value": "kqlabValue", "sensitive": "kqlabSensitive",
             "provenance": "kqlabProvenance"}
_STABLE_ID = re.compile(r"[A-Za-z0-9_-]+\Z")
_RULE_ID_CHARS = re.compile(r"[^a-z0-9._-]+")
#: the ODCS logical types that are JSON types kqlab's field_type checks
_JSON_TYPES = ("string", "number", "integer", "boolean", "object", "array")
_DIMENSIONS = {"presence": "completeness", "size": "conformity", "header": "conformity",
               "timestamp": "timeliness", "wire": "conformity", "schema": "conformity",
               "json": "conformity", "field": "conformity"}
_SENSITIVE_CLASSES = ("sensitive", "restricted", "confidential", "pii", "secret")

BEHAVIOUR = (
    "a contract document, not an enforcement point: catalogs and contract tools read it, "
    "kqlab imports it back (kqlab import odcs) to the identical policy",
    "library metrics (nullValues, invalidValues) are checked by ODCS tools over a data set "
    "(counts must be 0); kqlab judges each record, with the same outcome per record",
    "custom rules (engine kqlab) carry their CEL text or kqlab parameters: other ODCS tools "
    "show them but do not run them",
    "the record's key, headers, timestamps and batch framing have no place in the ODCS "
    "schema: rules on them are custom rules at the schema object's level",
    "sample checks over the whole sample are library metrics (rowCount, nullValues, "
    "duplicateValues) ODCS tools compute over a data set; windowed, grouped and other kinds "
    "are custom rules (engine kqlab) other tools show but do not run",
)


class OdcsError(KqlabError, ValueError):
    """An ODCS document cannot be read as a policy (the message says where and why)."""


@dataclass(frozen=True, slots=True)
class OdcsImport:
    """What :func:`import_odcs` made of a contract: the policy, and everything it left out."""

    policy: Any
    #: ``"<where>: <what> — <why>"`` per quality rule or constraint with no kqlab meaning
    skipped: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape ``kqlab import odcs --json`` prints."""
        return {"policy": self.policy.name, "content_hash": self.policy.content_hash(),
                "rules": [r.id for r in self.policy.rules], "skipped": list(self.skipped),
                "notes": list(self.notes)}


# ------------------------------------------------------------------------ shared mapping

@dataclass(slots=True)
class _Prop:
    """A node of the value-field tree while it is being built."""

    name: str
    children: dict[str, _Prop] = field(default_factory=dict)
    constraints: dict[str, Any] = field(default_factory=dict)
    quality: list[Any] = field(default_factory=list)
    sensitive: bool = False


def _field_kinds() -> tuple[str, ...]:
    from kqlab.validate.fields import FIELD_KINDS

    return tuple(FIELD_KINDS)


def _standard(rule: Any) -> tuple[dict[str, Any], tuple[str, ...]] | None:
    """The ODCS library metric of a rule the standard expresses, and the parameters those
    fields carry; None for every other rule."""
    if rule.kind == "field_not_null":
        return {"type": "library", "metric": "nullValues", "mustBe": 0}, ("field",)
    if rule.kind == "field_in":
        from kqlab.policy.model import thaw

        return {"type": "library", "metric": "invalidValues", "mustBe": 0,
                "arguments": {"validValues": thaw(rule.params["values"])}}, ("field", "values")
    if rule.kind == "field_regex":
        return {"type": "library", "metric": "invalidValues", "mustBe": 0,
                "arguments": {"pattern": rule.params["pattern"]}}, ("field", "pattern")
    return None


def _cel_text(rule: Any) -> str | None:
    """The CEL a rule amounts to, when it has one (``cel`` rules and field rules)."""
    if rule.kind == "cel":
        return str(rule.params["expr"])
    if rule.kind in _field_kinds():
        from kqlab.validate.fields import FieldRuleError, field_rule_to_cel

        try:
            return field_rule_to_cel(rule)
        except FieldRuleError:
            return None
    return None


def _derived_constraints(rules: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    """The schema constraints the unconditional reject-mode field rules imply, per path.

    Used both ways: the export writes them, the import recognises them as implied by the
    rules it carries (so they do not become extra rules).  A field whose rules imply two
    logical types gets none (the contract would contradict itself).
    """
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    types: dict[tuple[str, ...], set[str]] = {}
    options: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in rules:
        if r.kind not in _field_kinds() or r.mode != "reject" or r.when is not None:
            continue
        path = tuple(str(r.params["field"]).split("."))
        c = out.setdefault(path, {})
        opts = options.setdefault(path, {})
        if r.kind == "field_not_null":
            c["required"] = True
        elif r.kind == "field_type" and r.params["type"] in _JSON_TYPES:
            types.setdefault(path, set()).add(str(r.params["type"]))
        elif r.kind == "field_range":
            types.setdefault(path, set()).add("number")
            for p, o in (("min", "minimum"), ("max", "maximum")):
                if r.param(p) is not None:
                    opts.setdefault(o, r.param(p))
        elif r.kind == "field_regex":
            types.setdefault(path, set()).add("string")
            opts.setdefault("pattern", r.params["pattern"])
        elif r.kind == "field_length":
            lo, hi = r.param("min"), r.param("max")
            opts.setdefault("length", (lo, hi))
    for path, c in out.items():
        kinds = types.get(path, set())
        if kinds == {"integer", "number"}:
            kinds = {"integer"}
        if len(kinds) != 1:
            continue
        (ltype,) = kinds
        c["logicalType"] = ltype
        opts = options.get(path, {})
        length = opts.pop("length", None)
        allowed = {"string": ("minLength", "maxLength", "pattern"),
                   "number": ("minimum", "maximum"), "integer": ("minimum", "maximum"),
                   "array": ("minItems", "maxItems")}.get(ltype, ())
        if length is not None and ltype in ("string", "array"):
            lo, hi = length
            names = ("minLength", "maxLength") if ltype == "string" else ("minItems", "maxItems")
            if lo:
                opts[names[0]] = lo
            if hi is not None:
                opts[names[1]] = hi
        kept = {k: v for k, v in opts.items() if k in allowed}
        if kept:
            c["logicalTypeOptions"] = kept
    return {p: c for p, c in out.items() if c}


def _strip_secrets(section: Any) -> Any:
    """A key/value format section without credentials (config keys and URL user info)."""
    from kqlab.export.base import _SENSITIVE

    if not isinstance(section, dict) or not isinstance(section.get("schemas"), dict):
        return section
    schemas = dict(section["schemas"])
    if schemas.get("registry"):
        schemas["registry"] = public_url(schemas["registry"])
    if isinstance(schemas.get("config"), dict):
        config = {k: v for k, v in schemas["config"].items()
                  if not any(w in str(k).lower() for w in _SENSITIVE)}
        if config:
            schemas["config"] = config
        else:
            schemas.pop("config")
    return {**section, "schemas": schemas}


# --------------------------------------------------------------------------------- export

def _quality(rule: Any, position: int, canonical: dict[str, Any]) -> tuple[Any, RuleFidelity]:
    """One rule as an ODCS ``DataQuality`` and its fidelity row."""
    from open_data_contract_standard.model import CustomProperty, DataQuality

    from kqlab.policy.catalog import kind as kind_of

    spec = kind_of(rule.kind)
    std = _standard(rule)
    carried: tuple[str, ...]
    # ODCS states rules, it enforces none: a row says how the contract states the rule, and
    # it is exact when the contract restores it identically (build() proves that by importing
    # its own output); what other ODCS tools make of it is in ``how``
    if std is not None:
        body, carried = std
        how = (f"ODCS library metric {body['metric']} must be 0 on the field's property "
               "(standard vocabulary: ODCS tools check it over a data set)")
        if rule.param("allow_null") is False:
            how += "; allow_null: false rides in kqlabRule (ODCS tools pass nulls)"
    else:
        cel = _cel_text(rule)
        if cel is not None:
            body = {"type": "custom", "engine": ENGINE, "implementation": cel}
            carried = ("expr",) if rule.kind == "cel" else ("field",)
            how = "custom quality rule (engine kqlab) with its CEL text"
        else:
            params = {k: v for k, v in canonical.items() if spec.param(k) is not None}
            body = {"type": "custom", "engine": ENGINE,
                    "implementation": {"kind": rule.kind, **params}}
            carried = tuple(params)
            how = "custom quality rule (engine kqlab) with the rule's parameters"
        how += ": other ODCS tools show it but do not run it"
        if not rule.exportable:
            how += " (a Python plugin: only kqlab with the module installed runs it)"
    if rule.when is not None:
        how += "; the `when` precondition rides in kqlabRule"
    if rule.mode == "observe":
        how += "; observe mode rides in kqlabRule (ODCS has no observe-only checks)"
    status = EXACT
    rest = {k: v for k, v in canonical.items()
            if k not in ("id", "description", "severity") and k not in carried}
    dq = DataQuality(
        id=rule.id if _STABLE_ID.match(rule.id) else None,
        name=rule.id, description=rule.description, severity=rule.severity,
        dimension=("completeness" if rule.kind == "field_not_null" else
                   "uniqueness" if rule.kind == "headers_unique" else
                   _DIMENSIONS.get(spec.category)),
        customProperties=[CustomProperty(property="kqlabRule", vendor=VENDOR,
                                         value={"position": position, **rest})],
        **body)
    return dq, RuleFidelity(rule=rule.id, kind=rule.kind, status=status, how=how,
                            mode=rule.mode)


#: whole-sample check kinds ODCS library metrics express: kind -> (metric, unit, scale);
#: duplicate_rate only as "no duplicates" (ODCS tools test duplicateValues in rows)
_CHECK_METRICS = {"volume": ("rowCount", "rows", 1), "null_rate": ("nullValues", "percent", 100),
                  "duplicate_rate": ("duplicateValues", "rows", 1)}


def _check_quality(check: Any, position: int) -> tuple[Any, tuple[str, ...] | None,
                                                        CheckFidelity]:
    """One sample check as an ODCS ``DataQuality``, the property path it sits on (None: the
    schema object) and its fidelity row."""
    from open_data_contract_standard.model import CustomProperty, DataQuality

    plain = check.to_dict()
    metric = _CHECK_METRICS.get(check.kind)
    field_name = (check.params.get("field") if check.kind == "null_rate" else
                  check.params.get("of") if check.kind == "duplicate_rate" else None)
    whole = check.window is None and check.by is None and check.when is None
    lo, hi = check.params.get("min"), check.params.get("max")
    if check.kind == "duplicate_rate":  # ODCS tools test duplicateValues in rows only: 0
        metric = ("duplicateValues", "rows", 1) if hi == 0 else None
    if metric is not None and whole and (check.kind == "volume" or
                                         (field_name and field_name != "key")):
        name, unit, scale = metric
        bounds: dict[str, Any] = {}
        if check.kind == "duplicate_rate":
            bounds["mustBe"] = 0
        elif lo is not None and hi is not None:
            bounds["mustBeBetween"] = [_scaled(lo, scale), _scaled(hi, scale)]
        elif lo is not None:
            bounds["mustBeGreaterOrEqualTo"] = _scaled(lo, scale)
        elif hi is not None:
            bounds["mustBeLessOrEqualTo"] = _scaled(hi, scale)
        body: dict[str, Any] = {"type": "library", "metric": name, "unit": unit, **bounds}
        how = (f"ODCS library metric {name} ({unit}) over the data set: standard vocabulary, "
               "ODCS tools compute it")
        path = None if check.kind == "volume" else tuple(str(field_name).split("."))
    else:
        body = {"type": "custom", "engine": ENGINE,
                "implementation": {k: v for k, v in plain.items() if k != "id"}}
        how = ("custom quality rule (engine kqlab) with the check's parameters: other ODCS "
               "tools show it but do not run it")
        path = None
    dq = DataQuality(
        id=check.id if _STABLE_ID.match(check.id) else None, name=check.id,
        description=check.description,
        dimension={"volume": "completeness", "freshness": "timeliness",
                   "null_rate": "completeness", "duplicate_rate": "uniqueness",
                   "distinct": "uniqueness"}.get(check.kind, "accuracy"),
        customProperties=[CustomProperty(property="kqlabCheck", vendor=VENDOR,
                                         value={"position": position, **plain})],
        **body)
    return dq, path, CheckFidelity(check=check.id, kind=check.kind, status=STATED, how=how)


def _scaled(value: Any, scale: int) -> Any:
    """A threshold in the metric's unit (shares as percent), as short as it is exact."""
    if scale == 1:
        return value
    return round(float(value) * scale, 10)


def _properties(root: _Prop) -> list[Any]:
    from open_data_contract_standard.model import SchemaProperty

    out = []
    for node in root.children.values():
        kids = _properties(node)
        c = dict(node.constraints)
        if kids and "logicalType" not in c:
            c["logicalType"] = "object"
        out.append(SchemaProperty(
            name=node.name, properties=kids or None, quality=node.quality or None,
            classification="sensitive" if node.sensitive else None, **c))
    return out


def to_odcs(policy: Any, *, version: str = "1.0.0") -> tuple[OpenDataContractStandard,
                                                            tuple[RuleFidelity, ...]]:
    """``policy`` as an ODCS contract (the standard's pydantic model) and per-rule fidelity
    (the checks' rows: :func:`check_rows`)."""
    from open_data_contract_standard.model import (
        CustomProperty,
        Description,
        OpenDataContractStandard,
        SchemaObject,
        Team,
    )

    from kqlab.policy.model import canonical_rule, policy_to_dict

    plain = policy_to_dict(policy)
    root = _Prop(name="")

    def node(path: tuple[str, ...]) -> _Prop:
        n = root
        for step in path:
            n = n.children.setdefault(step, _Prop(name=step))
        return n

    for path_text in policy.sensitive.fields:
        node(tuple(path_text.split("."))).sensitive = True
    for path, c in _derived_constraints(policy.rules).items():
        node(path).constraints.update(c)
    top, fid = [], []
    for i, r in enumerate(policy.rules):
        canonical = canonical_rule(r).to_dict()
        dq, f = _quality(r, i, canonical)
        fid.append(f)
        if r.kind in _field_kinds():
            node(tuple(str(r.params["field"]).split("."))).quality.append(dq)
        else:
            top.append(dq)
    for i, check in enumerate(policy.checks):
        dq, on, _ = _check_quality(check, i)
        if on is None:
            top.append(dq)
        else:
            node(on).quality.append(dq)
    names = policy.topics.names
    one = names[0] if len(names) == 1 else None
    obj = SchemaObject(name=one or policy.name, physicalType="topic", physicalName=one,
                       logicalType="object",
                       description="the records of Kafka topic(s) " +
                       ", ".join([*names, *policy.topics.patterns]) if names or
                       policy.topics.patterns else None,
                       properties=_properties(root) or None, quality=top or None)
    custom = [CustomProperty(property="kqlabFormat", value=policy.version, vendor=VENDOR),
              CustomProperty(property="kqlabContentHash", value=policy.content_hash(),
                             vendor=VENDOR)]
    for section, prop in _SECTIONS.items():
        if section not in plain:
            continue
        value = plain[section]
        if section in ("key", "value"):
            value = _strip_secrets(value)
        custom.append(CustomProperty(property=prop, value=value, vendor=VENDOR))
    vetted = policy.provenance is not None and \
        policy.provenance.content_hash == policy.content_hash()
    contract = OpenDataContractStandard(
        apiVersion=API_VERSION, kind="DataContract", id=policy.name, name=policy.name,
        version=version, status="active" if vetted else "draft", tags=["kafka", "kqlab"],
        description=Description(purpose=policy.description) if policy.description else None,
        team=Team(name=policy.owner) if policy.owner else None,
        schema=[obj], customProperties=custom)
    return contract, tuple(fid)


def build(policy: Any, *, version: str = "1.0.0", today: str | None = None) -> Export:
    """``odcs/<policy>.odcs.yaml``: the policy as an ODCS v3 contract (provenance as a comment
    header and, for kqlab, as a custom property)."""
    contract, fid = to_odcs(policy, version=version)
    fid = _proven(policy, contract, fid) + _implicit(policy)
    prov = provenance(policy, today=today)
    head = comment_block(["Open Data Contract Standard v3, exported by kqlab; read it back "
                          "with `kqlab import odcs FILE`.", *provenance_lines(prov)])
    text = head + dump_contract(contract)
    notes = ["kqlab-only rule kinds are custom quality rules (engine: kqlab); "
             "`kqlab import odcs` restores the identical policy (same content hash), checked "
             "when exporting: a rule it would not restore is marked approximate"]
    stripped = [f"{side}.schemas" for side in ("key", "value")
                if _strip_secrets(_section(policy, side)) != _section(policy, side)]
    if stripped:
        notes.append(f"credentials left out of {', '.join(stripped)}: an import of this file "
                     "has none")
    checks = check_rows(policy)
    back = _read_back_checks(contract)
    if back is not None and back != policy.checks:
        checks = tuple(CheckFidelity(check=c.check, kind=c.kind, status=c.status,
                                     how=f"{c.how}; NOT restored identically by kqlab import")
                       for c in checks)
    return Export(target="odcs", title=TITLE, policy=policy.name, checks=checks,
                  files={f"odcs/{policy.name}.odcs.yaml": text}, fidelity=fid,
                  behaviour=BEHAVIOUR, notes=tuple(notes),
                  data={"contract": contract.model_dump(by_alias=True, exclude_none=True)})


def _implicit(policy: Any) -> tuple[RuleFidelity, ...]:
    """The implicit rows (:func:`~kqlab.export.base.implicit_rules`): how the contract
    states the value's decoding and schema ids (its ``kqlabValue`` section, restored by the
    import) and that it says nothing of keys."""
    from kqlab.export.base import DECODE_KEY, implicit_row, implicit_rules

    out = []
    for r in implicit_rules(policy):
        if r.id == DECODE_KEY:
            out.append(implicit_row(r, EXACT, "an ODCS schema describes the record's value: "
                                    "no record is refused for its key, as in the replay"))
        else:
            out.append(implicit_row(r, EXACT, "stated by the value's format and schema source "
                                    "(kqlabValue, restored by kqlab import): ODCS tools read "
                                    "values already decoded, they run no decoding"))
    return tuple(out)


def check_rows(policy: Any) -> tuple[CheckFidelity, ...]:
    """How the contract states each of ``policy``'s sample checks."""
    return tuple(_check_quality(c, i)[2] for i, c in enumerate(policy.checks))


def _read_back_checks(contract: Any) -> tuple[Any, ...] | None:
    """The checks the contract imports back as (None: it does not read back)."""
    try:
        return import_odcs(dump_contract(contract)).policy.checks
    except OdcsError:
        return None


def _proven(policy: Any, contract: Any, fid: tuple[RuleFidelity, ...]
            ) -> tuple[RuleFidelity, ...]:
    """``fid`` once the contract has been read back: a rule the import does not restore
    identically is not exact (it never happens unless the mapping has a bug, and then the
    export says so instead of claiming)."""
    try:
        back = {r.id: r for r in import_odcs(dump_contract(contract)).policy.rules}
    except OdcsError as exc:
        why = f"the contract does not read back: {exc}"
        return tuple(RuleFidelity(rule=f.rule, kind=f.kind, mode=f.mode, status=APPROXIMATE,
                                  how=f"{f.how}; {why}") for f in fid)
    rules = {r.id: r for r in policy.rules}
    return tuple(f if back.get(f.rule) == rules.get(f.rule) else
                 RuleFidelity(rule=f.rule, kind=f.kind, mode=f.mode, status=APPROXIMATE,
                              how=f"{f.how}; NOT restored identically by kqlab import")
                 for f in fid)


#: the order a person reads a contract in (the model's field order puts ``version`` first)
_TOP_ORDER = ("apiVersion", "kind", "id", "name", "version", "status", "tags", "description",
              "team", "schema")


def _reordered(value: Any) -> Any:
    """``customProperties`` last in every mapping (a rule's name and check come first)."""
    if isinstance(value, dict):
        out = {k: _reordered(v) for k, v in value.items() if k != "customProperties"}
        if "customProperties" in value:
            out["customProperties"] = _reordered(value["customProperties"])
        return out
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


def dump_contract(contract: OpenDataContractStandard) -> str:
    """The contract as YAML: the model's own dump (aliases, no unset fields), in reading
    order."""
    import yaml

    doc = _reordered(contract.model_dump(by_alias=True, exclude_none=True,
                                         exclude_defaults=True))
    doc = {**{k: doc[k] for k in _TOP_ORDER if k in doc},
           **{k: v for k, v in doc.items() if k not in _TOP_ORDER}}
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)
    if yaml.safe_load(text) != doc:
        # PyYAML writes some characters (U+0085 NEXT LINE, ...) unescaped that its reader
        # takes for line breaks: then every non-ASCII character is escaped instead
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=False, width=100)
    return text


def _section(policy: Any, side: str) -> Any:
    from kqlab.policy.model import policy_to_dict

    return policy_to_dict(policy).get(side)


# --------------------------------------------------------------------------------- import

def _custom(props: Any, name: str) -> tuple[bool, Any]:
    for p in props or ():
        if p.property == name:
            return True, p.value
    return False, None


def _rule_id(text: str, taken: set[str]) -> str:
    base = _RULE_ID_CHARS.sub("-", text.lower()).strip("-._") or "rule"
    if not base[0].isalnum():
        base = "r" + base
    rule_id, n = base, 2
    while rule_id in taken:
        rule_id, n = f"{base}-{n}", n + 1
    taken.add(rule_id)
    return rule_id


@dataclass(slots=True)
class _Reader:
    """One import: kqlab rules with their positions, foreign rules in document order."""

    placed: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    foreign: list[dict[str, Any]] = field(default_factory=list)
    foreign_props: list[tuple[tuple[str, ...], Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    sensitive: list[str] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)
    #: rule id → (the CEL text a field rule carries, where): checked once the rule is built
    cel_texts: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: sample checks (``kqlabCheck``) with their positions
    checks: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    #: sample checks read from library metrics of a contract kqlab did not write
    foreign_checks: list[dict[str, Any]] = field(default_factory=list)
    #: what those checks read approximately (strict bounds, shares of other totals)
    approximations: list[str] = field(default_factory=list)

    def quality(self, q: Any, path: tuple[str, ...] | None, where: str) -> None:
        found_check, check = _custom(q.customProperties, "kqlabCheck")
        if found_check:
            self.check(q, check, where)
            return
        found, rule = _custom(q.customProperties, "kqlabRule")
        if found:
            self.kqlab(q, rule, path, where)
        else:
            self.other(q, path, where)

    def check(self, q: Any, check: Any, where: str) -> None:
        """A sample check kqlab wrote: the whole check rides in ``kqlabCheck`` (the standard
        fields say the same for other tools)."""
        if not isinstance(check, Mapping) or "kind" not in check or \
                not isinstance(check.get("position"), int):
            raise OdcsError(f"{where}: quality rule {q.name!r}: kqlabCheck must be a mapping "
                            "with kind and position (the check's place in the policy)")
        plain = dict(check)
        position = plain.pop("position")
        plain["id"] = q.name
        if q.description is not None:
            plain["description"] = q.description
        self.checks.append((position, plain))

    def kqlab(self, q: Any, extra: Any, path: tuple[str, ...] | None, where: str) -> None:
        if not isinstance(extra, Mapping) or "kind" not in extra:
            raise OdcsError(f"{where}: quality rule {q.name!r}: kqlabRule must be a mapping "
                            "with kind and position")
        extra = dict(extra)
        position = extra.pop("position", None)
        kind = str(extra["kind"])
        rule: dict[str, Any] = {"id": q.name, "kind": kind}
        if path is not None and kind in _field_kinds():
            rule["field"] = ".".join(path)
        args = q.arguments or {}
        if q.metric == "invalidValues" and "validValues" in args:
            rule["values"] = args["validValues"]
        if q.metric == "invalidValues" and "pattern" in args:
            rule["pattern"] = args["pattern"]
        impl = q.implementation
        if isinstance(impl, Mapping):
            rule.update((k, v) for k, v in impl.items() if k != "kind")
        elif kind == "cel" and isinstance(impl, str):
            rule["expr"] = impl
        rule.update(extra)
        if q.description is not None:
            rule["description"] = q.description
        if q.severity is not None:
            rule["severity"] = q.severity
        if kind in _field_kinds() and isinstance(impl, str):
            self.cel_texts[str(q.name)] = (impl, where)
        if not isinstance(position, int):
            raise OdcsError(f"{where}: quality rule {q.name!r}: kqlabRule.position must be an "
                            "integer (the rule's place in the policy)")
        self.taken.add(str(q.name))
        self.placed.append((position, rule))

    def other(self, q: Any, path: tuple[str, ...] | None, where: str) -> None:
        label = f"{where}: quality rule {q.name or q.metric or q.type!r}"
        rule: dict[str, Any] = {}
        qtype = q.type or ("library" if q.metric or q.rule else None)
        metric = q.metric or q.rule
        zero = q.mustBe == 0 and all(getattr(q, o) is None for o in (
            "mustNotBe", "mustBeGreaterThan", "mustBeGreaterOrEqualTo", "mustBeLessThan",
            "mustBeLessOrEqualTo", "mustBeBetween", "mustNotBeBetween"))
        args = q.arguments or {}
        check = _foreign_check(q, qtype, metric, path, zero, self.approximations, label)
        if check is not None:
            base = q.name or (f"{'.'.join(path)}-{check['kind']}" if path else check["kind"])
            self.foreign_checks.append({"id": base, **check})
            return
        if qtype == "custom" and (q.engine or "").lower() in (ENGINE, "cel") and \
                isinstance(q.implementation, str):
            rule = {"kind": "cel", "expr": q.implementation}
        elif qtype == "library" and path is None:
            self.skipped.append(f"{label}: {metric} on the whole record — kqlab rules judge "
                                "fields or records, not data-set counts")
            return
        elif qtype == "library" and not zero:
            self.skipped.append(f"{label}: {metric} with a tolerance — kqlab judges every "
                                "record (only 'mustBe: 0' has a per-record meaning)")
            return
        elif qtype == "library" and metric in ("nullValues", "missingValues") and \
                not args.get("missingValues"):
            rule = {"kind": "field_not_null"}
        elif qtype == "library" and metric == "invalidValues" and "validValues" in args:
            rule = {"kind": "field_in", "values": args["validValues"]}
        elif qtype == "library" and metric == "invalidValues" and "pattern" in args:
            rule = {"kind": "field_regex", "pattern": args["pattern"]}
        else:
            self.skipped.append(f"{label}: {qtype or 'text'} {metric or q.engine or ''} — no "
                                "kqlab rule kind has this meaning".replace("  ", " "))
            return
        if path is not None and rule["kind"] != "cel":
            rule["field"] = ".".join(path)
        base = q.name or (f"{'.'.join(path)}-{rule['kind']}" if path else rule["kind"])
        rule = {"id": base, **rule}
        if q.description is not None:
            rule["description"] = q.description
        if q.severity in ("error", "warning", "info"):
            rule["severity"] = q.severity
        self.foreign.append(rule)

    def prop(self, p: Any, parent: tuple[str, ...], where: str) -> None:
        if not p.name:
            raise OdcsError(f"{where}: a property without a name")
        path = (*parent, str(p.name))
        here = f"{where}.{p.name}"
        if (p.classification or "").lower() in _SENSITIVE_CLASSES:
            self.sensitive.append(".".join(path))
        self.foreign_props.append((path, p))
        for q in p.quality or ():
            self.quality(q, path, here)
        for child in p.properties or ():
            self.prop(child, path, here)


def _bounds(q: Any) -> tuple[Any, Any, bool, bool] | None:
    """A library metric's ``(low, high, low strict, high strict)``; None when it has none or
    one kqlab cannot state (``mustNotBe``, ``mustNotBeBetween``)."""
    if q.mustNotBe is not None or q.mustNotBeBetween is not None:
        return None
    if q.mustBe is not None:
        return q.mustBe, q.mustBe, False, False
    if q.mustBeBetween is not None:
        return q.mustBeBetween[0], q.mustBeBetween[1], False, False
    lo, lo_strict = (q.mustBeGreaterThan, True) if q.mustBeGreaterThan is not None else \
        (q.mustBeGreaterOrEqualTo, False)
    hi, hi_strict = (q.mustBeLessThan, True) if q.mustBeLessThan is not None else \
        (q.mustBeLessOrEqualTo, False)
    if lo is None and hi is None:
        return None
    return lo, hi, lo_strict, hi_strict


def _foreign_check(q: Any, qtype: str | None, metric: str | None,
                   path: tuple[str, ...] | None, zero: bool, approximations: list[str],
                   label: str) -> dict[str, Any] | None:
    """The sample check a library metric of a foreign contract means, or None: ``rowCount``
    → ``volume`` over the whole sample (strict bounds moved by one record);
    ``nullValues``/``missingValues`` in percent → ``null_rate``; ``duplicateValues`` 0 (rows)
    or in percent → ``duplicate_rate`` of the field.  ``nullValues: 0`` stays the per-record
    rule ``field_not_null``."""
    if qtype != "library" or metric not in ("rowCount", "nullValues", "missingValues",
                                            "duplicateValues"):
        return None
    bounds = _bounds(q)
    if bounds is None:
        return None
    lo, hi, lo_strict, hi_strict = bounds
    unit = (q.unit or "rows").lower()
    if metric == "rowCount" and path is None and unit == "rows":
        out: dict[str, Any] = {"kind": "volume"}
        if lo is not None:
            out["min"] = int(lo) + 1 if lo_strict else int(lo)
        if hi is not None:
            out["max"] = int(hi) - 1 if hi_strict else int(hi)
        return out
    if path is None:
        return None
    dotted = ".".join(path)
    if metric == "duplicateValues" and zero and unit == "rows":
        return {"kind": "duplicate_rate", "of": dotted, "max": 0}
    if unit != "percent" or (metric != "duplicateValues" and zero):
        return None
    kind = "duplicate_rate" if metric == "duplicateValues" else "null_rate"
    out = {"kind": kind, ("of" if kind == "duplicate_rate" else "field"): dotted}
    if lo is not None:
        out["min"] = round(float(lo) / 100, 12)
    if hi is not None:
        out["max"] = round(float(hi) / 100, 12)
    if kind == "duplicate_rate" and "min" in out:
        return None  # duplicate_rate has only a max
    if lo_strict or hi_strict:
        approximations.append(f"{label}: {metric} with a strict bound read as kqlab's "
                              "inclusive min/max")
    if kind == "duplicate_rate":
        approximations.append(f"{label}: duplicateValues in percent of the rows read as "
                              "kqlab's share of the field's non-null values")
    return out


def _constraint_rules(path: tuple[str, ...], p: Any, implied: Mapping[str, Any],
                      skipped: list[str]) -> list[dict[str, Any]]:
    """The rules a property's schema constraints amount to, less those ``implied`` by the
    kqlab rules the file carries."""
    dotted = ".".join(path)
    out: list[dict[str, Any]] = []
    if p.required and not implied.get("required"):
        out.append({"id": f"{dotted}-required", "kind": "field_not_null", "field": dotted})
    ltype = p.logicalType
    has_kids = bool(p.properties)
    if ltype and ltype != implied.get("logicalType") and not (ltype == "object" and has_kids):
        if ltype in _JSON_TYPES:
            out.append({"id": f"{dotted}-type", "kind": "field_type", "field": dotted,
                        "type": ltype})
        else:
            skipped.append(f"{dotted}: logicalType {ltype} — not a JSON type kqlab checks")
    opts = dict(p.logicalTypeOptions or {})
    have = dict(implied.get("logicalTypeOptions") or {})
    for k in list(opts):
        if k in have and have[k] == opts[k]:
            opts.pop(k)
    lo, hi = opts.pop("minimum", None), opts.pop("maximum", None)
    if lo is not None or hi is not None:
        rng = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        out.append({"id": f"{dotted}-range", "kind": "field_range", "field": dotted, **rng})
    for lo_key, hi_key in (("minLength", "maxLength"), ("minItems", "maxItems")):
        lo, hi = opts.pop(lo_key, None), opts.pop(hi_key, None)
        if lo is not None or hi is not None:
            rng = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
            out.append({"id": f"{dotted}-length", "kind": "field_length", "field": dotted,
                        **rng})
    if "pattern" in opts:
        out.append({"id": f"{dotted}-pattern", "kind": "field_regex", "field": dotted,
                    "pattern": opts.pop("pattern")})
    skipped.extend(f"{dotted}: logicalTypeOptions.{k} — no kqlab rule kind has this meaning"
                   for k in opts)
    return out


def import_odcs(source: str | Path | OpenDataContractStandard, *,
                schema: str | None = None) -> OdcsImport:
    """Read an ODCS v3 contract (a path, YAML text, or the pydantic model) as a policy.

    ``schema`` names the schema object to read when the contract has several (one policy
    judges the records of its topics with one rule list).

    Examples
    --------
    >>> from kqlab.policy import loads_policy
    >>> p = loads_policy("kqlab: 1\\nname: p\\nvalue: {format: json}\\n"
    ...                  "rules: [{id: s, kind: field_in, field: status, values: [A, B]}]")
    >>> text = build(p).files["odcs/p.odcs.yaml"]
    >>> import_odcs(text).policy == p
    True
    """
    from open_data_contract_standard.model import OpenDataContractStandard
    from pydantic import ValidationError

    from kqlab.policy import PolicyError, policy_from_dict

    where = "<odcs>"
    if isinstance(source, OpenDataContractStandard):
        contract = source
    else:
        text = str(source)
        if isinstance(source, Path) or ("\n" not in text and Path(text).is_file()):
            where = str(source)
            try:
                text = Path(source).read_text(encoding="utf-8")
            except OSError as exc:
                raise OdcsError(f"cannot read {source}: {exc}") from None
        try:
            contract = OpenDataContractStandard.from_string(text)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise OdcsError(f"{where}: not an ODCS contract: {loc}: {first['msg']} "
                            f"({exc.error_count()} error(s))") from None
        except Exception as exc:  # YAML errors, a top level that is not a mapping
            raise OdcsError(f"{where}: not an ODCS contract: {type(exc).__name__}: {exc}"
                            ) from None
    if contract.kind not in (None, "DataContract"):
        raise OdcsError(f"{where}: kind is {contract.kind!r}, not DataContract")
    objects = list(contract.schema_ or ())
    if schema is not None:
        objects = [o for o in objects if o.name == schema]
        if not objects:
            raise OdcsError(f"{where}: no schema object named {schema!r}; schema objects: "
                            f"{', '.join(str(o.name) for o in contract.schema_ or ())}")
    if len(objects) > 1:
        raise OdcsError(f"{where}: the contract has {len(objects)} schema objects ("
                        f"{', '.join(str(o.name) for o in objects)}); a policy reads one: "
                        "pass schema=<name> (kqlab import odcs --schema NAME)")
    obj = objects[0] if objects else None
    name = contract.name or contract.id
    if not name:
        raise OdcsError(f"{where}: the contract has neither name nor id; the policy needs "
                        "a name")
    found_fmt, fmt = _custom(contract.customProperties, "kqlabFormat")
    data: dict[str, Any] = {"kqlab": fmt if found_fmt else 1, "name": name}
    if contract.description is not None and contract.description.purpose:
        data["description"] = contract.description.purpose
    team = contract.team
    if team is not None:
        owner = team.name if not isinstance(team, list) else \
            next((m.username or m.name for m in team if m.username or m.name), None)
        if owner:
            data["owner"] = owner
    notes: list[str] = []
    sections: dict[str, Any] = {}
    for section, prop in _SECTIONS.items():
        found, value = _custom(contract.customProperties, prop)
        if found:
            sections[section] = value
    reader = _Reader()
    if obj is not None:
        here = f"schema.{obj.name}"
        for q in obj.quality or ():
            reader.quality(q, None, here)
        for p in obj.properties or ():
            reader.prop(p, (), here)
        if not found_fmt and "topics" not in sections and \
                (obj.physicalType or "topic") == "topic":  # a contract kqlab did not write
            sections["topics"] = {"names": [obj.physicalName or obj.name]}
    placed = [r for _, r in sorted(reader.placed, key=lambda x: x[0])]
    formats = {k: sections[k] for k in ("key", "value") if k in sections}
    try:  # examples are checked against the key/value formats: read with them
        kqlab_rules = policy_from_dict({"kqlab": 1, "name": name, **formats, "rules": placed},
                                       source=where).rules if placed else ()
    except PolicyError as exc:
        raise OdcsError(f"{where}: the contract's kqlab rules are not valid: {exc}") from None
    for r in kqlab_rules:
        # a field rule's CEL is derived from its parameters: an edited text would be lost
        # silently, so it is refused with the way out
        text, at = reader.cel_texts.get(r.id, (None, where))
        if text is not None and _cel_text(r) != text:
            raise OdcsError(f"{at}: quality rule {r.id!r}: its implementation is not the CEL of "
                            f"its {r.kind} parameters (edited by hand?); change the parameters "
                            "in kqlabRule, or drop kqlabRule to import the text as a cel rule")
    implied = _derived_constraints(kqlab_rules)
    foreign = list(reader.foreign)
    for path, p in reader.foreign_props:
        foreign += _constraint_rules(path, p, implied.get(path, {}), reader.skipped)
    for rule in foreign:
        rule["id"] = _rule_id(str(rule["id"]), reader.taken)
    fields_read = foreign or any(c["kind"] != "volume" for c in reader.foreign_checks)
    for check in reader.foreign_checks:
        check["id"] = _rule_id(str(check["id"]), reader.taken)
    notes.extend(reader.approximations)
    if fields_read and "value" not in sections:
        sections["value"] = {"format": "json"}
        notes.append("value format: json assumed (the contract's field rules read a decoded "
                     "value; set value.format in the policy if the topic carries Avro)")
    if reader.sensitive and "sensitive" not in sections:
        sections["sensitive"] = {"fields": reader.sensitive}
    for section in _SECTIONS:
        if section in sections and section != "provenance":
            data[section] = sections[section]
    data["rules"] = placed + foreign
    if reader.checks or reader.foreign_checks:
        data["checks"] = [c for _, c in sorted(reader.checks, key=lambda x: x[0])] + \
            reader.foreign_checks
    if "provenance" in sections:
        data["provenance"] = sections["provenance"]
    if not data["rules"]:
        data.pop("rules")
    try:
        policy = policy_from_dict(data, source=where)
    except PolicyError as exc:
        raise OdcsError(f"{where}: the contract does not make a valid policy: {exc}") from None
    found, stated = _custom(contract.customProperties, "kqlabContentHash")
    if found and stated != policy.content_hash():
        notes.append(f"content hash {policy.content_hash()} differs from the exported "
                     f"{stated}: the contract was edited after the export")
    return OdcsImport(policy=policy, skipped=tuple(reader.skipped), notes=tuple(notes))
