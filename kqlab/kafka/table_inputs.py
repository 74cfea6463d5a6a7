"""What the table checks take besides the tables: how many records each batch row holds (the
decoder's own accounting) and a record policy's verdict per record (message and rule)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from kqlab.kafka.validator import (
    PolicyErrors,
)

#: per record a text or None: a Python sequence, an Arrow string (or dictionary) array
Texts: TypeAlias = Sequence[str | None] | pa.Array | pa.ChunkedArray

@dataclass(frozen=True)
class RecordPolicy:
    """A record policy's verdict per record: the message of its first failing reject rule.

    ``messages`` has one entry per records-table row (None = the record passes), as a Python
    sequence or an Arrow string array (null = the record passes); ``profile`` is ``kip-940``,
    ``kip-729`` or ``kip-686`` (see :class:`PolicyErrors`).
    """

    profile: str
    messages: Sequence[str | None] | pa.Array | pa.ChunkedArray
    #: the rule behind each message (same length; None: not named), so a verdict names its
    #: rule as data instead of being matched back by its text
    rules: Sequence[str | None] | pa.Array | pa.ChunkedArray | None = None


def messages_array(messages: Texts) -> pa.Array:
    """A policy's messages as one Arrow ``string`` array (null = the record passes)."""
    if isinstance(messages, pa.ChunkedArray):
        messages = messages.combine_chunks()
    if not isinstance(messages, pa.Array):
        messages = pa.array(messages, pa.string())
    return messages if messages.type == pa.string() else messages.cast(pa.string())


def policy_messages(messages: Texts) -> pa.Array:
    """A policy's messages as one Arrow array, kept dictionary-encoded when given so: the
    replay hands a million records' messages over as indices into the texts of its rules'
    failures, and the record checks take only the failing records' texts out of it (decoding
    every record's text first cost more than the checks themselves)."""
    if isinstance(messages, pa.ChunkedArray):
        messages = messages.combine_chunks()
    if isinstance(messages, pa.Array) and pa.types.is_dictionary(messages.type) and \
            messages.type.value_type == pa.string():
        return messages
    return messages_array(messages)


def records_per_batch(batches: pa.Table, n_records: int) -> np.ndarray:
    """How many rows of the records table each batch row contributed: the decoder's
    ``records_decoded`` column (``kqlab.records.DECODE_COLUMNS``)."""
    col = batches["records_decoded"]
    if col.null_count:
        raise ValueError("the batches table has rows without records_decoded: pass it through "
                         "kqlab.records.conform_batches (a table written by an older kqlab)")
    n_r = np.asarray(col.to_numpy(), dtype=np.int64)
    total = int(n_r.sum())
    if total != n_records:
        raise ValueError(f"the records table has {n_records} rows but the batches table "
                         f"accounts for {total}: pass both tables unfiltered, as the decoder "
                         "returned them")
    return n_r


def policy_by_batch(records: pa.Table, batches: pa.Table, policy: RecordPolicy | None
                     ) -> list[PolicyErrors | None]:
    """The policy split per batch row."""
    nb = batches.num_rows
    out: list[PolicyErrors | None] = [None] * nb
    if policy is None:
        return out
    arr = messages_array(policy.messages)
    if arr.null_count == len(arr):
        return out
    messages = arr.to_pylist()
    rules = [None] * len(messages) if policy.rules is None else \
        as_strings(rules_array(policy.rules)).to_pylist()
    n_r = records_per_batch(batches, records.num_rows).tolist()
    start = 0
    for row, k in enumerate(n_r):
        errors = {i: m for i, m in enumerate(messages[start:start + k]) if m is not None}
        if errors:
            named = {i: r for i, r in enumerate(rules[start:start + k])
                     if r is not None and i in errors}
            out[row] = PolicyErrors(policy.profile, errors, named)
        start += k
    return out


def rules_array(rules: Texts) -> pa.Array:
    """A policy's rule ids as one Arrow array, kept dictionary-encoded when given so (taking
    a few failing records' rules from a million-row column stays cheap)."""
    if isinstance(rules, pa.ChunkedArray):
        rules = rules.combine_chunks()
    if isinstance(rules, pa.Array) and pa.types.is_dictionary(rules.type):
        return rules
    return messages_array(rules)


def as_strings(arr: pa.Array) -> pa.Array:
    """Rule ids as plain strings (the replay hands them over dictionary-encoded)."""
    return arr.cast(pa.string()) if pa.types.is_dictionary(arr.type) else arr
