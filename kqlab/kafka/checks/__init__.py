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
    """The Markdown table of every check: id, spec step, code, where its text goes, its
    message template, the Kafka class/method it mirrors, when it fires, and the test that
    proves it (each check's witness in ``tests/kafka/test_check_catalog.py``)."""
    rows = ["| check | spec | code | error | text returned as | message template | mirrors "
            "| fires when | proven by |", "|---|---|---|---|---|---|---|---|---|"]
    for c in CHECKS:
        tmpl = c.template.replace("|", "\\|")
        rows.append(f"| `{c.id}` | {c.step} (§{c.section}) | {c.code} | {c.error.name} | "
                    f"{c.returned} | `{tmpl}` | {c.mirrors} | {c.condition} | "
                    f"`test_check_catalog.py::test_witness[{c.id}]` |")
    return "\n".join(rows) + "\n"
