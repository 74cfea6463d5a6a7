"""The state of one :func:`~kqlab.kafka.table_checks.broker_verdicts` call: the batches
table's columns as numpy arrays, the policy, the verdict cascade and the byte-level validator
that shares producer state with the table checks.  Each stage of the procedure is a class of
its own module built on this state (records, sizes, producer state)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.configs import TopicConfig
from kqlab.kafka.table_cascade import (
    V2_MIN,
    Cascade,
    column_np,
)
from kqlab.kafka.table_inputs import (
    RecordPolicy,
    as_strings,
    policy_messages,
    records_per_batch,
    rules_array,
)
from kqlab.kafka.validator import (
    BatchOutcome,
    PartitionValidator,
    PolicyErrors,
)


class VerdictState:
    """The arrays and the cascade of one :func:`~kqlab.kafka.table_checks.broker_verdicts` call
    (``source="log"``, produce version >= 3)."""

    def __init__(self, records: pa.Table, batches: pa.Table, cfg: TopicConfig,
                 validator: PartitionValidator, now: int, raw: Sequence[bytes] | None,
                 policy: RecordPolicy | None = None):
        self.records = records
        self.policy = policy
        #: the policy's messages (Arrow strings, or dictionary-encoded strings; null = the
        #: record passes) and where they are set
        self.parr = None if policy is None else policy_messages(policy.messages)
        self.prules = None if policy is None or policy.rules is None else \
            rules_array(policy.rules)
        if self.parr is not None and len(self.parr) != records.num_rows:
            raise ValueError(f"the policy has {len(self.parr)} messages but the records table "
                             f"{records.num_rows} rows")
        self.pmask = np.zeros(records.num_rows, dtype=bool) if self.parr is None else \
            pc.is_valid(self.parr).to_numpy(zero_copy_only=False)
        self.batches = batches
        self.cfg = cfg
        self.v = validator
        self.tp = validator.tp
        self.now = now
        self.raw = raw
        self.positions = batches["position"]
        n = batches.num_rows
        self.n = n
        self.cas = Cascade(n)
        b = batches
        self.magic = column_np(b, "magic", -128, np.int64)
        self.size = column_np(b, "size_bytes", 0, np.int64)
        self.attr = column_np(b, "attributes", 0, np.int64) & 0xFF
        self.codec = self.attr & 0x07
        self.pid = column_np(b, "producer_id", -1, np.int64)
        self.epoch = column_np(b, "producer_epoch", -1, np.int64)
        self.seq = column_np(b, "base_sequence", -1, np.int64)
        self.count = column_np(b, "record_count", 0, np.int64)
        self.count_known = b["record_count"].is_valid().to_numpy(zero_copy_only=False)
        self.last_delta = column_np(b, "last_offset_delta", 0, np.int64)
        self.lod_known = b["last_offset_delta"].is_valid().to_numpy(zero_copy_only=False)
        self.batch_offset = column_np(b, "batch_offset", 0, np.int64)
        self.max_ts = column_np(b, "max_timestamp", -1, np.int64)
        self.crc_valid = column_np(b, "crc_valid", False, bool)
        self.crc = column_np(b, "crc", 0, np.int64)
        self.control = column_np(b, "is_control", False, bool) & (self.magic == 2)
        self.transactional = column_np(b, "is_transactional", False, bool) & (self.magic == 2)
        self.lat = (self.attr & 0x08) != 0
        #: rows the decoder found a problem in (kqlab.records.DECODE_COLUMNS)
        self.decode_found = pc.is_valid(b["decode_kind"]).to_numpy(zero_copy_only=False)
        self.v2 = (self.magic == 2) & (self.size >= V2_MIN)
        self.ctrl_origin = np.full(n, validator.origin == "coordinator") | self.control
        self.rec_errors: pa.Array | None = None
        #: KIP-686's pending batch decisions: (records failing the policy, their batch rows)
        self._kip686: tuple[np.ndarray, np.ndarray] | None = None
        #: set by the procedure: records per batch row, rows the broker reads in place,
        #: and rows judged by the byte-level validator (with their outcomes)
        self.n_r = np.zeros(n, dtype=np.int64)
        self.partial_reader = np.zeros(n, dtype=bool)
        self.delegated: dict[int, BatchOutcome] = {}
        self._rec_batch: np.ndarray | None = None

    @property
    def rec_batch(self) -> np.ndarray:
        """The batch row of every records-table row (computed once)."""
        if self._rec_batch is None:
            self._rec_batch = np.repeat(np.arange(self.n), self.n_r)
        return self._rec_batch

    def _batch_policy(self, i: int) -> PolicyErrors | None:
        """The policy's failures inside batch ``i`` (for rows delegated to the validator)."""
        if self.policy is None or self.parr is None:
            return None
        start, k = int(self.n_r[:i].sum()), int(self.n_r[i])
        errors = {j: m for j, m in enumerate(self.parr.slice(start, k).to_pylist())
                  if m is not None}
        if not errors:
            return None
        rules = {} if self.prules is None else {
            j: r for j, r in enumerate(as_strings(self.prules.slice(start, k)).to_pylist())
            if r is not None and j in errors}
        return PolicyErrors(self.policy.profile, errors, rules)

    # -- records <-> batches -------------------------------------------------------------------
    def _record_counts(self) -> np.ndarray:
        """Rows of the records table each batch contributed (TableBuilder's rules)."""
        return records_per_batch(self.batches, self.records.num_rows)

