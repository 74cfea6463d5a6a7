"""``python -m kqlab.kafka.checks`` prints ``docs/broker-checks.md`` (the registry as a table)."""

from kqlab.kafka.checks import checks_table

HEADER = """# The broker checks kqlab runs

Every check below is one `Check` in `kqlab/kafka/checks/` (one module per step of
`shared/spec/kafka-validation.md`): its error code, the message template its text is rendered
from, where the broker puts that text (the client's `error_message`, one entry of
`record_errors`, or only the broker's log, which kqlab keeps as `detail`), and the Kafka class
and method it mirrors.  Verdicts carry the check's id/step and the template's parameters as
data (`params`); the text is rendered from them, never parsed back.

Both engines call the same definitions: the byte-level validator (`kqlab/kafka/validator.py`),
the vectorised table checks (`kqlab/kafka/table_checks.py`), the gate (`kqlab/gate/_judge.py`)
and the exports' round trips.  Each row's witness test builds an input that makes the broker
procedure decide with exactly that check, in both engines where the tables can judge it.

`R0` (a legacy inner record with compression attributes) is not a row: `DeepRecordsIterator`
throws on a compressed inner record before LogValidator looks at it, so the broker answers with
the structural error (`D3/legacy`).  Corrections to the spec found while building these checks
are in `docs/kafka-4x-producer-state.md` and `docs/kafka-4x-record-structure.md`.

This file is generated: `python -m kqlab.kafka.checks > docs/broker-checks.md`
(`tests/kafka/test_check_catalog.py` fails when it is stale).

"""

if __name__ == "__main__":
    print(HEADER + checks_table(), end="")
