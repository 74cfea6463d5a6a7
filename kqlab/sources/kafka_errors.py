"""The errors of the live sources (:mod:`kqlab.sources.kafka`, :mod:`kqlab.sources.fetch`).

Each message names the broker and what to do.  :class:`ReadCancelled` is the one exception
that is not an error for the user: a read that noticed its ``cancel`` event raises it with what
it had read, and the sampling functions turn it into :class:`SampleCancelled`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from kqlab.errors import KqlabError

if TYPE_CHECKING:
    from kqlab.kafka.log import LogIssue
    from kqlab.sources.files import Snapshot
    from kqlab.sources.sample_result import SampleResult

__all__ = [
    "BrokerUnreachableError",
    "EmptyRangeError",
    "KafkaSourceError",
    "KafkaTimeoutError",
    "NotAuthorizedError",
    "ReadCancelled",
    "SampleCancelled",
    "UnknownTopicError",
]


class KafkaSourceError(KqlabError):
    """Sampling a live topic failed; the message names the broker and what to do."""


class BrokerUnreachableError(KafkaSourceError, ConnectionError):
    """No broker in ``bootstrap.servers`` answered."""


class UnknownTopicError(KafkaSourceError, LookupError):
    """The topic (or a requested partition) does not exist."""


class NotAuthorizedError(KafkaSourceError, PermissionError):
    """The broker refused access to the topic or cluster."""


class EmptyRangeError(KafkaSourceError, ValueError):
    """The requested range holds no records (pass ``allow_empty=True`` for an empty table)."""


class KafkaTimeoutError(KafkaSourceError, TimeoutError):
    """The broker stopped delivering before the range was read."""


class SampleCancelled(KafkaSourceError):
    """Sampling was cancelled (``cancel`` event set).

    ``result`` is the :class:`~kqlab.sources.sample_result.SampleResult` of what was read so
    far (``None`` when nothing was planned yet);
    :func:`kqlab.sources.kafka_snapshot.sample_to_snapshot` sets ``snapshot`` to the snapshot
    holding the parts already written (its metadata says ``complete: false``).
    """

    def __init__(self, message: str, *, result: SampleResult | None = None,
                 snapshot: Snapshot | None = None):
        super().__init__(message)
        self.result = result
        self.snapshot = snapshot

    @property
    def records(self) -> pa.Table | None:
        """The records read before the cancel (``result.records``)."""
        return None if self.result is None else self.result.records


class ReadCancelled(Exception):
    """A read stopped because its ``cancel`` event was set; it carries what was read.

    ``records`` (``RECORDS_SCHEMA``) and their payload ``nbytes``; reads of raw batches also
    carry their ``batches`` (``BATCHES_SCHEMA``) and the parser's ``issues``.  Not a
    :class:`KafkaSourceError`: the public functions catch it and raise
    :class:`SampleCancelled` with a result the user can keep.
    """

    def __init__(self, records: pa.Table, nbytes: int, batches: pa.Table | None = None,
                 issues: list[LogIssue] | None = None):
        super().__init__("cancelled")
        self.records = records
        self.nbytes = nbytes
        self.batches = batches
        self.issues = issues or []
