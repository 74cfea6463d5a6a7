"""Dead-letter triage and redrive: read a dead-letter topic, see why its records failed
(grouped by rule or exception, source partition and time, in the same views as a replay),
re-validate them against an amended policy and send the ones that pass back, exactly once.

* :func:`read_dead_letters` → :class:`DeadLetters` (``by_reason``, ``by_source``,
  ``timeline``, ``verdicts``: a :class:`~kqlab.validate.view.VerdictsView` the figures take);
  the failure headers of kqlab's gate, Confluent's rule DLQ, Kafka Connect and Kafka Streams
  are understood (:mod:`kqlab.dlq.headers`), anything else is ``unknown reason``;
* :func:`revalidate` → :class:`RedrivePlan` (what would pass now, where it would go);
* :func:`redrive` → :class:`RedriveResult` (dry run by default; ``execute=True`` sends, with
  a :class:`RedriveLog` so a re-run — even after ``kill -9`` — never sends a record twice).

The CLI is ``kqlab dlq inspect`` / ``kqlab dlq redrive`` (:mod:`kqlab.cli.dlq`).  Importing
this package does not import confluent-kafka; reading and sending do.
"""

from kqlab.dlq.headers import (
    CONFLUENT,
    CONNECT,
    FAMILIES,
    KQLAB,
    REDRIVE_HEADER,
    STREAMS,
    UNKNOWN_REASON,
    Family,
)
from kqlab.dlq.parse import DEAD_LETTERS_SCHEMA, parse_dead_letters
from kqlab.dlq.redrive import KILL_PHASES, RecoveryReport, RedriveResult, recover, redrive
from kqlab.dlq.redrive_log import LogEntry, RedriveLog, RedriveLogError
from kqlab.dlq.revalidate import PLAN_SCHEMA, WHY, RedrivePlan, revalidate
from kqlab.dlq.triage import (
    DLQ_REASONS_SCHEMA,
    DLQ_SOURCES_SCHEMA,
    DeadLetterError,
    DeadLetters,
    read_dead_letters,
)

__all__ = [
    "CONFLUENT",
    "CONNECT",
    "DEAD_LETTERS_SCHEMA",
    "DLQ_REASONS_SCHEMA",
    "DLQ_SOURCES_SCHEMA",
    "FAMILIES",
    "KILL_PHASES",
    "KQLAB",
    "PLAN_SCHEMA",
    "REDRIVE_HEADER",
    "STREAMS",
    "UNKNOWN_REASON",
    "WHY",
    "DeadLetterError",
    "DeadLetters",
    "Family",
    "LogEntry",
    "RecoveryReport",
    "RedriveLog",
    "RedriveLogError",
    "RedrivePlan",
    "RedriveResult",
    "parse_dead_letters",
    "read_dead_letters",
    "recover",
    "redrive",
    "revalidate",
]
