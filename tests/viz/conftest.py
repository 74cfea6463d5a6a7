"""Shared samples for the view tests: the demo ``orders`` topic replayed with its shipped policy,
a small JSON sample holding sensitive data, and a synthetic million-record verdict set."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kqlab.records import RECORDS_SCHEMA
from kqlab.validate.replayer import Replayer
from kqlab.validate.verdicts import (
    RECORD_VERDICTS_SCHEMA,
    REPLAY_BATCHES_SCHEMA,
    Verdicts,
    failures_array,
)

NOW = 1_763_700_000_000
SECRET_EMAIL = "ada.lovelace@analytical.example"
SECRET_KEY = "cust-ada-4242"
SECRET_TOKEN = "Bearer s3cr3t-t0k3n"


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    from kqlab.sources import demo_topics

    return demo_topics.generate(tmp_path_factory.mktemp("demo-topics"), NOW)


@pytest.fixture(scope="session")
def policies(demo):
    from kqlab.sources import demo_topics

    return demo_topics.load_policies()


def topic_dir(demo, topic: str, root: Path) -> Path:
    """A log directory holding only ``topic``'s partition folders (symlinks)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, folder in demo.folders.items():
        if name.rsplit("-", 1)[0] == topic:
            os.symlink(folder, root / name)
    return root


@pytest.fixture(scope="session")
def orders(demo, policies, tmp_path_factory):
    """``(replayer, verdicts, policy)`` of the demo orders topic (3 partitions)."""
    folder = topic_dir(demo, "orders", tmp_path_factory.mktemp("orders-only"))
    r = Replayer(folder, now=NOW)
    return r, r.run(policies["orders"]), policies["orders"]


SENSITIVE_POLICY = """
kqlab: 1
name: customers
value: {format: json}
sensitive: {fields: [customer.email], key: true, headers: [authorization]}
rules:
- {id: email-domain, kind: field_regex, field: customer.email, pattern: '@example\\.com$'}
- {id: auth-known, kind: header_values, name: authorization, values: [none],
   message: 'authorization {value} is not allowed'}
- {id: amount, kind: field_range, field: amount, min: 0}
"""


@pytest.fixture
def sensitive_sample():
    """``(records table, policy)``: 200 JSON records, every 7th with the secret e-mail, key and
    token (so they are rejected by rules whose messages would quote them)."""
    from kqlab.policy import loads_policy

    n = 200
    i = np.arange(n)
    secret = i % 7 == 0
    emails = np.where(secret, SECRET_EMAIL, "someone@example.com")
    values = [f'{{"customer": {{"email": "{e}", "id": {k}}}, "amount": {k - 5}}}'.encode()
              for k, e in zip(i.tolist(), emails.tolist(), strict=True)]
    keys = [(SECRET_KEY if s else f"cust-{k:04d}").encode()
            for k, s in zip(i.tolist(), secret.tolist(), strict=True)]
    headers = [[{"key": "authorization", "value": (SECRET_TOKEN if s else "none").encode()}]
               for s in secret.tolist()]
    table = pa.table({
        "topic": pa.array(["customers"] * n), "partition": pa.array(i % 2, pa.int32()),
        "offset": pa.array(i // 2, pa.int64()), "timestamp": pa.array(NOW - 1000 * (n - i)),
        "timestamp_type": pa.array(np.zeros(n, np.int8)), "key": pa.array(keys, pa.binary()),
        "value": pa.array(values, pa.binary()), "headers": pa.array(headers,
                                                                    RECORDS_SCHEMA.field(
                                                                        "headers").type),
        "batch_offset": pa.array(i // 2, pa.int64()), "batch_index": pa.array(np.zeros(n),
                                                                              pa.int32()),
    }, schema=RECORDS_SCHEMA)
    return table, loads_policy(SENSITIVE_POLICY)


def million_verdicts(n: int = 1_000_000, partitions: int = 6, batch: int = 50,
                     seed: int = 1) -> tuple[Verdicts, pa.Table]:
    """Synthetic verdicts of ``n`` records (and a matching records table), built vectorised:
    a bad deploy (one reason, a band of batches) in every partition, scattered culprits of two
    other rules, collateral for their batch siblings, and timestamps over a day."""
    rng = np.random.default_rng(seed)
    part = np.repeat(np.arange(partitions, dtype=np.int32), n // partitions)
    n = len(part)
    offset = np.concatenate([np.arange(n // partitions)] * partitions).astype(np.int64)
    batch_offset = offset - offset % batch
    batch_index = (offset % batch).astype(np.int32)
    ts = NOW - 86_400_000 + (offset * 86_400_000 // (n // partitions))
    band = (offset > 100_000) & (offset < 120_000)
    scattered = rng.random(n) < 0.002
    culprit = band | scattered
    rule = np.where(band, 0, np.where(rng.random(n) < 0.5, 1, 2))
    rule_names = ["traceparent", "amount-range", "broker:R4"]
    codes = np.where(rule == 2, 32, 87)
    bad_batch = np.zeros(n, dtype=bool)
    key = part.astype(np.int64) * (n + 1) + batch_offset
    uniq, inv = np.unique(key, return_inverse=True)
    bad_batch = np.bincount(inv, weights=culprit, minlength=len(uniq))[inv] > 0
    outcome_idx = np.where(culprit, 1, np.where(bad_batch, 2, 0)).astype(np.int8)
    outcome = pa.DictionaryArray.from_arrays(
        pa.array(outcome_idx), pa.array(["accepted", "rejected", "collateral"])).cast(pa.string())
    idx = np.flatnonzero(culprit)
    names = np.asarray(rule_names, dtype=object)[rule[idx]].tolist()
    failures = failures_array(n, idx, names, codes[idx], ["bad record"] * len(idx))
    topic = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)),
                                           pa.array(["orders"])).cast(pa.string())
    records = pa.table([topic, pa.array(part), pa.array(offset), pa.array(batch_offset),
                        pa.array(batch_index), pa.array(ts), outcome, failures],
                       schema=RECORD_VERDICTS_SCHEMA)
    first = np.flatnonzero(batch_index == 0)
    nb = len(first)
    rejected_b = bad_batch[first]
    columns = {
        "topic": pa.array(["orders"] * nb), "partition": pa.array(part[first]),
        "batch_offset": pa.array(batch_offset[first]),
        "error_code": pa.array(np.where(rejected_b, 87, 0).astype(np.int16)),
        "error_name": pa.array(np.where(rejected_b, "INVALID_RECORD", "NONE")),
        "error_message": pa.nulls(nb, pa.string()),
        "record_errors": pa.array([[]] * nb, REPLAY_BATCHES_SCHEMA.field("record_errors").type),
        "check": pa.array(np.where(rejected_b, "P", None)),
        "detail": pa.nulls(nb, pa.string()),
        "record_count": pa.array(np.full(nb, batch, np.int32)),
        "position": pa.array(np.arange(nb, dtype=np.int64)),
        "producer_id": pa.array((part[first] % 3 + 2001).astype(np.int64)),
        "profile": pa.array(["kip-940"] * nb), "framing": pa.array(["exact"] * nb),
        "producer_action": pa.array(np.where(rejected_b, "failed", "appended")),
    }
    # columns the contract gains later (structured parameters...) stay null here
    batches = pa.table({f.name: columns.get(f.name, pa.nulls(nb, f.type))
                        for f in REPLAY_BATCHES_SCHEMA}, schema=REPLAY_BATCHES_SCHEMA)
    rules = pa.table({"rule": rule_names[:2], "kind": ["header_required", "field_range"],
                      "mode": ["reject"] * 2, "severity": ["error"] * 2,
                      "exportable": [True] * 2, "failed_records": [0, 0],
                      "rejected_records": [0, 0], "rejected_batches": [0, 0],
                      "evaluation_errors": [0, 0]})
    v = Verdicts(records, batches, rules, "kip-940", "exact", NOW, "synthetic", None)
    # the sample's records: keys like order-000123, values framed with schema ids 1, 2, 4242
    key_text = pc.binary_join_element_wise("order-", pc.cast(pa.array(offset % 5000),
                                                              pa.string()), "")
    sid = np.where(culprit & (rule == 1), 4242, 1 + (offset % 2)).astype(">u4")
    header = np.zeros((n, 1), np.uint8)
    value = np.concatenate([header, sid.view(np.uint8).reshape(n, 4),
                            np.full((n, 3), 65, np.uint8)], axis=1)
    value_arr = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(8), n, [None, pa.py_buffer(value.tobytes())]).cast(pa.binary())
    sample = pa.table({
        "topic": topic, "partition": pa.array(part), "offset": pa.array(offset),
        "timestamp": pa.array(ts), "timestamp_type": pa.array(np.zeros(n, np.int8)),
        "key": key_text.cast(pa.binary()), "value": value_arr,
        "headers": pa.array([[]] * 1, RECORDS_SCHEMA.field("headers").type).take(
            pa.array(np.zeros(n, np.int64))),
        "batch_offset": pa.array(batch_offset), "batch_index": pa.array(batch_index),
    }, schema=RECORDS_SCHEMA)
    return v, sample


@pytest.fixture(scope="session")
def million():
    return million_verdicts()
