"""Export a vetted policy to the configuration that enforces it in production (issue 8).

One module per enforcement target, registered in :data:`TARGETS` (name → :class:`Target`) and
imported only when used, so ``import kqlab.export`` stays light:

=================  ==========================================================================
``confluent``      Confluent data contract: schema metadata + CEL ``ruleSet`` (client side)
``kroxylicious``   Kroxylicious ``RecordValidation`` filter YAML (proxy)
``schema-id``      schema-ID validation topic configs: Confluent Server, Redpanda, WarpStream
``tansu``          Tansu per-topic schema files (broker)
``kip``            KIP-940 / KIP-729 broker and topic properties (proposed API, not in Kafka)
``topic-policy``   KIP-108 topic-config requirements, checks and a create-topics dry run
``gate``           the config file a kqlab validating gate takes (minimal)
``spark-streaming`` the gate as a Structured Streaming job: config, launcher, spark-submit line
``odcs``           an Open Data Contract Standard v3 contract (``kqlab import odcs`` reads it back)
=================  ==========================================================================

:func:`kqlab.export.verify.verify` reads what is deployed and diffs it against the policy.

:func:`export` builds one target's :class:`~kqlab.export.base.Export` (files, per-rule
fidelity, behaviour differences, provenance embedded, secrets refused);
:func:`fidelity_report` puts every target side by side and runs the round-trip proofs.

Examples
--------
>>> from kqlab.policy import loads_policy
>>> policy = loads_policy("kqlab: 1\\nname: p\\ntopics: {names: [t]}\\n"
...                       "rules: [{id: k, kind: key_required}]")
>>> ex = export(policy, "kroxylicious")
>>> ex.status_of("k").status, sorted(ex.files)
('exact', ['kroxylicious/kafka-protocol-filter.yaml', 'kroxylicious/proxy-config.yaml'])
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kqlab.export.base import (
    APPROXIMATE,
    EXACT,
    NOT_EXPRESSIBLE,
    Export,
    ExportError,
    RuleFidelity,
    check_no_secrets,
)

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.export.fidelity import FidelityReport

__all__ = [
    "APPROXIMATE",
    "EXACT",
    "NOT_EXPRESSIBLE",
    "TARGETS",
    "Export",
    "ExportError",
    "RuleFidelity",
    "Target",
    "export",
    "export_all",
    "export_policy",
    "fidelity_report",
]


@dataclass(frozen=True, slots=True)
class Target:
    """One enforcement target: its name, where it enforces, and the module that exports to it.

    The module defines ``build(policy, **options) -> Export``.
    """

    name: str
    title: str
    where: str  # client | proxy | broker | admin | gate | contract
    module: str
    proposed: bool = False

    def build(self, policy: Any, **options: Any) -> Export:
        """The export of ``policy`` (secrets refused)."""
        fn = importlib.import_module(self.module).build
        return check_no_secrets(fn(policy, **options), policy)


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("confluent", "Confluent data contract (schema metadata + CEL ruleSet)", "client",
           "kqlab.export.confluent"),
    Target("kroxylicious", "Kroxylicious RecordValidation filter", "proxy",
           "kqlab.export.kroxylicious"),
    Target("schema-id", "Schema-ID validation (Confluent Server, Redpanda, WarpStream)",
           "broker", "kqlab.export.schema_id"),
    Target("tansu", "Tansu per-topic schema files", "broker", "kqlab.export.tansu"),
    Target("kip", "KIP-940 / KIP-729 record validation (proposed API, not in Apache Kafka)",
           "broker", "kqlab.export.kip", proposed=True),
    Target("topic-policy", "Topic-config policy (KIP-108 CreateTopicPolicy)", "admin",
           "kqlab.export.topic_policy"),
    Target("gate", "kqlab validating gate config", "gate", "kqlab.export.gate"),
    Target("spark-streaming", "kqlab Structured Streaming enforcer (spark-submit job)", "gate",
           "kqlab.export.spark_streaming"),
    Target("odcs", "Open Data Contract Standard v3 (schema + quality rules)", "contract",
           "kqlab.export.odcs"),
)}


def target(name: str) -> Target:
    """The :class:`Target` called ``name``; ``ExportError`` lists the known ones."""
    try:
        return TARGETS[name]
    except KeyError:
        raise ExportError(f"unknown export target {name!r}; targets: "
                          f"{', '.join(TARGETS)}") from None


def export(policy: Any, target_name: str, **options: Any) -> Export:
    """Export ``policy`` to one target (see :data:`TARGETS`); ``options`` go to its builder.

    ``today`` is accepted and dropped for the targets that take no date: generated files
    carry none, so two exports of one policy are byte-identical.
    """
    t = target(target_name)
    if "today" in options and "today" not in _accepted(t):
        options.pop("today")
    return t.build(policy, **options)


def _accepted(t: Target) -> frozenset[str]:
    """The keyword options ``t``'s builder takes."""
    import inspect

    return frozenset(inspect.signature(importlib.import_module(t.module).build).parameters)


#: ``kqlab.export_policy``: the package-level name (``kqlab.export`` is this subpackage, so
#: a function of that name on ``kqlab`` would be replaced by the module once it is imported)
export_policy = export


def export_all(policy: Any, *, skip_errors: bool = False, **options: Any) -> dict[str, Export]:
    """Every target's export; ``options`` are passed to the builders that accept them.

    With ``skip_errors`` a target the policy cannot be exported to (``ExportError``: e.g. a
    data contract for a policy without Avro or JSON values) is left out instead of raising.
    """
    import inspect

    out = {}
    for name, t in TARGETS.items():
        fn = importlib.import_module(t.module).build
        accepted = inspect.signature(fn).parameters
        try:
            out[name] = t.build(policy, **{k: v for k, v in options.items() if k in accepted})
        except ExportError:
            if not skip_errors:
                raise
    return out


def fidelity_report(policy: Any, **kwargs: Any) -> FidelityReport:
    """The fidelity report of every target (see :func:`kqlab.export.fidelity.fidelity_report`)."""
    from kqlab.export.fidelity import fidelity_report as build_report

    return build_report(policy, **kwargs)
