"""Kroxylicious ``RecordValidation`` filter YAML (deployment-targets.md §1).

The proxy rejects a whole ProduceRequest when any record fails, before the broker sees it, so
it cannot be bypassed by a producer that skips a serializer.  It expresses presence and
emptiness (``allowNulls`` / ``allowEmpty``), JSON syntax, and schema conformance against one
fixed *Apicurio* artifact per rule; no field expressions, headers (beyond JWS), sizes or
timestamps.  The gotchas of §1.1-1.2 are handled on purpose: both ``allowNulls`` and
``allowEmpty`` are always written (the docs and the code disagree on the default of
``allowNulls``), the ``rules`` list is never empty, the short type ``RecordValidation`` and the
0.22+ ``clusterDefinitions`` layout are used, and ``forwardPartialRequests`` (removed in 0.9) is
never emitted.  Two files: a standalone proxy config and the operator's ``KafkaProtocolFilter``,
each opening with one comment line per rule (id, kind, severity, mode, description and how
the filter takes it): the filter's own config has no place for names or descriptions.
"""

from __future__ import annotations

from typing import Any

import yaml

from kqlab.export.base import (
    APPROXIMATE,
    DECODE_KEY,
    DECODE_VALUE,
    EXACT,
    NOT_EXPRESSIBLE,
    Export,
    ExportError,
    RuleFidelity,
    comment_block,
    implicit_row,
    implicit_rules,
    provenance,
    provenance_lines,
    rule_lines,
)

__all__ = ["build", "filter_config"]

TITLE = "Kroxylicious RecordValidation filter"
FILTER_NAME = "kqlab-record-validation"

BEHAVIOUR = (
    "proxy-side: enforced for every producer that connects through the proxy (cannot be "
    "bypassed by skipping a serializer), but not for clients that reach the brokers directly",
    "whole request: one invalid record fails the entire ProduceRequest — every partition in "
    "it gets INVALID_RECORD (87); partitions holding bad records get per-record recordErrors, "
    "clean ones 'Invalid record in another topic-partition caused whole ProduceRequest to be "
    "invalidated' (the replay rejects per batch, so the proxy rejects at least as much)",
    "no DLQ and no observe mode: a failing record is only ever rejected",
    "topics are matched by exact name (no patterns); unmatched topics are not validated",
)

#: rules that refuse a zero-length value (so allowEmpty: false is exact for the value)
_REFUSE_EMPTY = ("json_valid", "decodable", "avro_valid", "json_schema")


#: a Protobuf schema rule: written, but no release of the filter could be run here to check it
_PROTOBUF_SCHEMA = ("; schemaType PROTOBUF: whether the filter release you run validates "
                    "Protobuf against Apicurio is not verified here (its engine is not served "
                    "by the Maven Central reachable here, see the fidelity report)")


def _format(policy: Any, part: str) -> str:
    return str((policy.key if part == "key" else policy.value).format)


def _target(rule: Any) -> str:
    t = rule.param("target") if rule.spec.param("target") is not None else "value"
    return t or "value"


def _fidelity(policy: Any, apicurio: dict[str, Any] | None, rules: Any = None
              ) -> list[tuple[RuleFidelity, Any]]:
    """Per rule: its fidelity and what it contributes (``(part, key, value)`` or None)."""
    out = []
    for r in (policy.rules if rules is None else rules):
        def row(status: str, how: str, r: Any = r) -> RuleFidelity:
            return RuleFidelity(rule=r.id, kind=r.kind, status=status, how=how, mode=r.mode)

        if r.mode == "observe":
            out.append((row(NOT_EXPRESSIBLE, "observe-only rule: the filter has no observe or "
                            "metrics mode, it can only reject"), None))
            continue
        if r.when is not None:
            out.append((row(NOT_EXPRESSIBLE, "the rule has a `when` precondition; the filter "
                            "has no conditions"), None))
            continue
        k = r.kind
        if k == "key_required":
            out.append((row(EXACT, "keyRule allowNulls: false" +
                            ("" if r.param("allow_empty") else ", allowEmpty: false")),
                        ("key", "required", bool(r.param("allow_empty")))))
        elif k == "value_required":
            tomb = bool(r.param("allow_tombstones"))
            empty = bool(r.param("allow_empty"))
            how = f"valueRule allowNulls: {str(tomb).lower()}, allowEmpty: {str(empty).lower()}"
            out.append((row(EXACT, how), ("value", "value_required", (tomb, empty))))
        elif k == "json_valid":
            part = _target(r)
            out.append((row(APPROXIMATE, f"{part}Rule syntacticallyCorrectJson: the proxy "
                            "checks syntax only (kqlab also requires UTF-8 and decodes); "
                            "allowEmpty: false"), (part, "json", None)))
        elif k in ("avro_valid", "decodable", "json_schema") and apicurio:
            part = _target(r)
            out.append((row(APPROXIMATE, f"{part}Rule schemaValidationConfig against Apicurio "
                            f"artifact {apicurio['id']}: one fixed artifact (records framed "
                            "with other schema versions fail 'Unexpected schema id')"
                            + _PROTOBUF_SCHEMA * (_format(policy, part) == "protobuf")),
                        (part, "schema", None)))
        elif k in ("avro_valid", "decodable", "json_schema", "schema_id_allowed",
                   "schema_id_registered", "magic_byte"):
            out.append((row(NOT_EXPRESSIBLE, "schema checks need an Apicurio registry artifact "
                            "(apicurioRegistryUrl + apicurioId contentId); the policy's schemas "
                            "live in a Confluent-API registry — pass apicurio={'url', 'id'} "
                            "to export schema conformance"), None))
        elif k == "plugin":
            out.append((row(NOT_EXPRESSIBLE, "Python plugin: never exportable"), None))
        else:
            out.append((row(NOT_EXPRESSIBLE, f"{r.spec.category} rules ({k}) have no "
                            "equivalent: the filter validates syntax, schemas, nulls/empties "
                            "and JWS signatures only"), None))
    return out


def _bytebuf(part: str, contributions: list[Any], policy: Any,
             apicurio: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``BytebufValidation`` for ``key``/``value``, or None when nothing applies."""
    mine = [c for c in contributions if c is not None and c[0] == part]
    if not mine:
        return None
    allow_nulls, allow_empty = True, True
    out: dict[str, Any] = {}
    for _, what, arg in mine:
        if what == "required":
            allow_nulls = False
            allow_empty = allow_empty and arg
        elif what == "value_required":
            tomb, empty = arg
            allow_nulls = allow_nulls and tomb
            allow_empty = allow_empty and empty
        elif what == "json":
            out["syntacticallyCorrectJson"] = {"validateObjectKeysUnique": False}
            allow_empty = False
        elif what == "schema" and apicurio:
            fmt = policy.value if part == "value" else policy.key
            out["schemaValidationConfig"] = {
                "apicurioRegistryUrl": apicurio["url"], "apicurioId": int(apicurio["id"]),
                "schemaType": {"avro": "AVRO", "protobuf": "PROTOBUF"}.get(fmt.format,
                                                                            "JSON_SCHEMA"),
                "wireFormatVersion": "V3"}
            allow_empty = False
    # both keys always, explicitly: the docs say allowNulls defaults to false, the code to true
    out["allowNulls"] = allow_nulls
    out["allowEmpty"] = allow_empty
    return out


def filter_config(policy: Any, apicurio: dict[str, Any] | None = None) -> dict[str, Any]:
    """The filter's ``config`` map (``rules`` with the policy's topic names)."""
    if not policy.topics.names:
        raise ExportError(f"policy {policy.name!r} names no topics (topics.names): the "
                          "RecordValidation filter matches exact topic names only")
    contributions = [c for _, c in _fidelity(policy, apicurio)]
    rule: dict[str, Any] = {"topicNames": list(policy.topics.names)}
    for part in ("key", "value"):
        bb = _bytebuf(part, contributions, policy, apicurio)
        if bb is not None:
            rule[f"{part}Rule"] = bb
    if "keyRule" not in rule and "valueRule" not in rule:
        # a rule needs something to check; nulls pass, empties pass: a no-op the proxy accepts
        rule["valueRule"] = {"allowNulls": True, "allowEmpty": True}
    return {"rules": [rule]}


def _implicit(policy: Any, apicurio: dict[str, Any] | None) -> list[RuleFidelity]:
    """The implicit rows (:func:`~kqlab.export.base.implicit_rules`) for the filter."""
    out = []
    for r in implicit_rules(policy):
        if r.id == DECODE_VALUE:
            f = _fidelity(policy, apicurio, [r])[0][0]
            out.append(implicit_row(r, f.status, f.how))
        elif r.id == DECODE_KEY:
            out.append(implicit_row(r, EXACT, "the keyRule checks nulls and empties only: no key "
                                    "is decoded, as in the replay"))
        elif apicurio:
            out.append(implicit_row(r, APPROXIMATE, "one fixed Apicurio artifact: a value framed "
                                    "with any other id fails 'Unexpected schema id'"))
        else:
            out.append(implicit_row(r, NOT_EXPRESSIBLE, "schema ids are checked only against an "
                                    "Apicurio artifact (pass apicurio={'url', 'id'})"))
    return out


def build(policy: Any, *, bootstrap: str = "kafka:9092", proxy_address: str = "localhost:9192",
          apicurio: dict[str, Any] | None = None) -> Export:
    """The proxy config YAML and the ``KafkaProtocolFilter`` resource for ``policy``.

    ``bootstrap`` is the target cluster, ``proxy_address`` where clients connect;
    ``apicurio={"url": ..., "id": contentId}`` adds schema conformance against that artifact.
    """
    prov = provenance(policy)
    config = filter_config(policy, apicurio)
    fid = tuple(f for f, _ in _fidelity(policy, apicurio))
    head = comment_block([
        f"Kroxylicious RecordValidation filter exported by kqlab from policy {policy.name!r}.",
        "Needs Kroxylicious >= 0.22 (clusterDefinitions layout); the filter is '(Preview)'.",
        *provenance_lines(prov),
        *rule_lines(policy.rules, {f.rule: f.status for f in fid}),
        "Not expressible here: " + (", ".join(f.rule for f in fid
                                               if f.status == NOT_EXPRESSIBLE) or "none"),
    ])
    fid += tuple(_implicit(policy, apicurio))
    proxy = {
        "clusterDefinitions": [{"name": "target", "bootstrapServers": bootstrap}],
        "virtualClusters": [{
            "name": "kqlab",
            "target": {"cluster": "target"},
            "gateways": [{"name": "default",
                          "portIdentifiesNode": {"bootstrapAddress": proxy_address}}],
            "filters": [FILTER_NAME],
        }],
        "filterDefinitions": [{"name": FILTER_NAME, "type": "RecordValidation",
                               "config": config}],
    }
    crd = {
        "apiVersion": "kroxylicious.io/v1alpha1",
        "kind": "KafkaProtocolFilter",
        "metadata": {"name": FILTER_NAME,
                     "annotations": {"kqlab.io/policy": policy.name,
                                     "kqlab.io/content-hash": prov["content_hash"]}},
        # configTemplate, not config: the CRD requires it (the packaging example is stale)
        "spec": {"type": "RecordValidation", "configTemplate": config},
    }
    dump = lambda d: yaml.safe_dump(d, sort_keys=False, default_flow_style=False)  # noqa: E731
    files = {
        "kroxylicious/proxy-config.yaml": head + dump(proxy),
        "kroxylicious/kafka-protocol-filter.yaml": head + dump(crd),
    }
    notes = []
    if policy.topics.patterns:
        notes.append("topic patterns " + ", ".join(policy.topics.patterns) + " are not "
                     "exported: the filter matches exact names only")
    return Export(target="kroxylicious", title=TITLE, policy=policy.name, files=files,
                  fidelity=fid, behaviour=BEHAVIOUR, notes=tuple(notes),
                  data={"proxy": proxy, "filter": crd})
