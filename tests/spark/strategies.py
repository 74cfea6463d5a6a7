"""Hypothesis strategies for engine parity: multi-partition log directories and policies.

Samples exercise what makes the engines' jobs hard: several partitions, idempotent producers
with sequence gaps, duplicates and epoch bumps across batches, compressed and multi-record
batches (collateral, record errors), timestamps around ``now``, null keys, tombstones,
malformed JSON, stale CRCs.  Policies draw from rules of every catalog kind that applies to
JSON values (the Avro kinds run on the demo topics).
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson
from hypothesis import strategies as st

from kqlab.kafka.builder import BatchBuilder, Record, rewrite_header
from kqlab.policy import loads_policy

NOW = 1_763_700_000_000


def _value(rng: random.Random) -> bytes | None:
    r = rng.random()
    if r < 0.05:
        return None  # tombstone
    if r < 0.1:
        return b'{"amount": 3,'  # malformed JSON
    doc: dict = {}
    if rng.random() < 0.9:
        doc["amount"] = rng.choice([1, 5, 250, -3, 0, 1e6, 2.5, "7", None])
    if rng.random() < 0.85:
        doc["customer"] = rng.choice(["c-1", "c-22", "VIP-9", "", None, 42])
    if rng.random() < 0.5:
        doc["tags"] = rng.sample(["a", "b", "c", "d"], rng.randrange(0, 4))
    if rng.random() < 0.3:
        doc["meta"] = {"region": rng.choice(["eu", "us", None])}
    return orjson.dumps(doc)


def partition_log(rng: random.Random, n_batches: int) -> bytes:
    """One partition's segment bytes (see the module doc for what varies)."""
    state = {1: [0, 0], 2: [3, 10]}  # pid -> [epoch, next sequence]
    out: list[bytes] = []
    offset = 0
    for _ in range(n_batches):
        if out and rng.random() < 0.06:
            out.append(out[rng.randrange(len(out))])  # a resent batch (duplicate)
            continue
        pid = rng.choice([-1, 1, 1, 2])
        n = rng.randrange(1, 6)
        epoch, seq = (-1, -1) if pid < 0 else tuple(state[pid])
        if pid > 0:
            r = rng.random()
            if r < 0.12:
                seq += rng.randrange(1, 3)  # gap
            elif r < 0.17:
                epoch, seq = epoch + 1, 0  # epoch bump
        b = BatchBuilder(codec=rng.choice([0, 0, 1, 3, 4]), base_offset=offset,
                         base_timestamp=NOW, producer_id=pid, producer_epoch=epoch,
                         base_sequence=seq)
        for _ in range(n):
            ts = NOW + rng.choice([0, -1_000, 5_000, -90_000_000, 7_200_000])
            key = None if rng.random() < 0.12 else b"k%d" % rng.randrange(30)
            headers = []
            if rng.random() < 0.8:
                headers.append(("trace", b"00-%d" % rng.randrange(9)))
            if rng.random() < 0.2:
                headers.append(("source", rng.choice([b"web", b"app", b"batch"])))
            if rng.random() < 0.05:
                headers.append(("trace", b"again"))
            b.append(Record(value=_value(rng), key=key, headers=tuple(headers), timestamp=ts))
        data = b.build()
        if rng.random() < 0.04:
            data = rewrite_header(data, fix_crc=False, max_timestamp=NOW + 1)  # stale CRC
        out.append(data)
        if pid > 0 and epoch >= state[pid][0]:
            state[pid] = [epoch, seq + n]
        offset += n
    return b"".join(out)


@st.composite
def log_dirs(draw) -> dict[int, bytes]:
    """``{partition: segment bytes}`` for one to three partitions of topic ``orders``."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    parts = draw(st.sampled_from([[0], [0, 1], [0, 1, 2], [1, 4]]))
    return {p: partition_log(rng, draw(st.integers(1, 12))) for p in parts}


def write_log_dir(root: Path, logs: dict[int, bytes], topic: str = "orders") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for p, data in logs.items():
        folder = root / f"{topic}-{p}"
        folder.mkdir()
        (folder / "00000000000000000000.log").write_bytes(data)
    return root


RULES = [
    "{id: key, kind: key_required}",
    "{id: value, kind: value_required, allow_tombstones: true}",
    "{id: key-size, kind: key_size, max: 2}",
    "{id: value-size, kind: value_size, max: 60, mode: observe}",
    "{id: headers-size, kind: headers_size, max: 20}",
    "{id: record-size, kind: record_size, max: 90}",
    "{id: trace, kind: header_required, name: trace}",
    "{id: source, kind: header_values, name: source, values: [web, app]}",
    "{id: trace-shape, kind: header_pattern, name: trace, pattern: '^00-[0-4]$'}",
    "{id: unique, kind: headers_unique}",
    "{id: window, kind: timestamp_window, before_ms: 86400000, after_ms: 3600000}",
    "{id: magic, kind: magic_byte, mode: observe}",
    "{id: json, kind: json_valid}",
    "{id: shape, kind: json_schema, schema: {type: object, required: [amount]}}",
    "{id: amount-set, kind: field_not_null, field: amount}",
    "{id: amount, kind: field_range, field: amount, min: 0, max: 1000}",
    "{id: customer, kind: field_in, field: customer, values: [c-1, c-22, VIP-9]}",
    "{id: customer-shape, kind: field_regex, field: customer, pattern: '^c-'}",
    "{id: tags, kind: field_length, field: tags, max: 2}",
    "{id: region, kind: field_type, field: meta.region, type: string}",
    "{id: cel, kind: cel, expr: 'has(value.amount) && value.amount != 0'}",
    "{id: cel-meta, kind: cel, expr: 'offset % 7 != 3', when: 'partition == 0'}",
    "{id: plugin, kind: plugin, callable: 'tests.validate.plugins:reject_odd_offsets', "
    "mode: observe}",
    "{id: decodes, kind: decodable, mode: observe}",
]


@st.composite
def policies(draw):
    """A JSON-value policy: a random subset of :data:`RULES`, configs and profile."""
    chosen = draw(st.lists(st.sampled_from(RULES), min_size=1, max_size=7, unique=True))
    profile = draw(st.sampled_from(["kip-940", "kip-686", "kip-729"]))
    configs = draw(st.sampled_from([
        "{}", "{cleanup.policy: compact}",
        "{message.timestamp.after.max.ms: '60000', message.timestamp.before.max.ms: '600000'}",
        "{max.message.bytes: '300'}",
    ]))
    text = (f"kqlab: 1\nname: generated\nenforcement: {profile}\n"
            f"broker: {{configs: {configs}}}\nvalue: {{format: json}}\n"
            "rules:\n" + "".join(f"- {r}\n" for r in chosen))
    return loads_policy(text)
