"""Samples for the rollout tests: planted partitions built batch by batch, and the demo
topics with one folder per topic."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kqlab.kafka.builder import BatchBuilder, Record
from kqlab.policy import loads_policy

NOW = 1_763_700_000_000


def order(amount: float, *, key: bytes | None = b"k", client: str | None = None,
          timestamp: int | None = None) -> Record:
    """One JSON order record (``client.id`` header when ``client`` is given)."""
    headers = () if client is None else (("client.id", client.encode()),)
    return Record(key=key, value=json.dumps({"amount": amount}).encode(), headers=headers,
                  timestamp=timestamp)


def write_log(folder: Path, *batches: list[Record], pids: list[int] | None = None) -> Path:
    """A partition folder holding one batch per list of records (offsets from 0; batch ``i``
    produced by ``pids[i]``, idempotent with consecutive sequences, or without an id)."""
    folder.mkdir(parents=True)
    data, offset, seq = [], 0, {}
    for i, records in enumerate(batches):
        pid = pids[i] if pids else -1
        b = BatchBuilder(base_offset=offset, base_timestamp=NOW - 1000, producer_id=pid,
                         producer_epoch=0 if pid >= 0 else -1,
                         base_sequence=seq.get(pid, 0) if pid >= 0 else -1)
        for r in records:
            b.append(r)
        data.append(b.build())
        offset += len(records)
        if pid >= 0:
            seq[pid] = seq.get(pid, 0) + len(records)
    (folder / "00000000000000000000.log").write_bytes(b"".join(data))
    return folder


def policy(*rules: str, configs: str = "{}"):
    """A JSON-valued policy on topic ``orders`` with the given rules (YAML flow maps)."""
    body = "\n".join(f"- {r}" for r in rules)
    return loads_policy(f"kqlab: 1\nname: planted\ntopics: {{names: [orders]}}\n"
                        f"broker: {{version: '4.0', configs: {configs}}}\n"
                        f"value: {{format: json}}\nrules:\n{body}\n")


AMOUNT = "{id: amount-positive, kind: field_range, field: amount, min: 0}"
KEYED = "{id: keyed, kind: key_required}"


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """The demo topics (default scale) with one log directory per topic, and the policies."""
    from kqlab.sources.demo_topics import generate, load_policies

    root = tmp_path_factory.mktemp("rollout-demo")
    topics = generate(root / "all", NOW)
    for topic in ("orders", "clicks"):
        (root / topic).mkdir()
        for folder in topics.partitions(topic):
            os.symlink(folder, root / topic / folder.name)
    return root, load_policies()
