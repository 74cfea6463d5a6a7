"""The broker's checks, one module per step of ``shared/spec/kafka-validation.md``.

Each module holds the :class:`Check` definitions of its step (code, message template, the Kafka
method mirrored) next to the functions that decide it, as numpy over arrays, so the byte-level
validator (:mod:`kqlab.kafka.validator`), the vectorised table checks
(:mod:`kqlab.kafka.table_checks`), the gate and the exports' round trips all call the same
code.  :data:`CHECKS` lists every check in spec order; ``docs/broker-checks.md`` is rendered
from it (:func:`checks_table`).
"""

from __future__ import annotations

from kqlab.kafka.checks import (  # noqa: F401 - each module registers its checks
    aggregate,
    append,
    header,
    producer,
    record,
    request,
    size,
    structure,
)
from kqlab.kafka.checks._check import CHECKS, Check, Registry

__all__ = ["CHECKS", "Check", "Registry", "checks_table"]


def checks_table() -> str:
    """The Markdown table of every check (step, code, message template, Kafka source)."""
    rows = ["| step | spec | code | error | returned as | message template | mirrors "
            "| fires when |", "|---|---|---|---|---|---|---|---|"]
    for c in CHECKS:
        tmpl = c.template.replace("|", "\\|")
        rows.append(f"| {c.step} | §{c.section} | {c.code} | {c.error.name} | {c.returned} | "
                    f"`{tmpl}` | {c.mirrors} | {c.condition} |")
    return "\n".join(rows) + "\n"
