"""Realistic demo topics with a documented defect mix: ``orders`` (Avro) and ``clicks`` (JSON).

:func:`generate` writes ``orders-0..2`` and ``clicks-0..1`` partition folders of log segments
(deterministic for a seed, ``now`` and ``scale``) and returns their :class:`GroundTruth`: every
planted defect class with its topic, partitions, time window, the rule or broker check that
catches it and exactly how many records / batches it affects.  ``docs/demo-defects.md``
documents the mix for the defaults; the tests replay every partition with the shipped policies
(``demo_topics_orders_policy.yaml``, ``demo_topics_clicks_policy.yaml``) and check the counts.

* ``orders``: compacted (``cleanup.policy: compact,delete``), string keys, values in the
  Confluent wire format — Avro schema v1, then v2 (adds the optional ``note``), both registered
  under ``orders-value`` in ``mock://kqlab-demo`` — with ``traceparent`` and ``source`` headers,
  written by two idempotent producers (``checkout-a`` pid 2001, zstd; ``checkout-b`` pid 2002,
  lz4).  ``checkout-b`` runs a bad deploy for one hour; ``orders-2``'s leader host has a skewed
  clock for half an hour.
* ``clicks``: JSON values, null keys, a ``source`` header, idempotent producers ``web``
  (pid 3001, gzip) and ``mobile`` (pid 3002, snappy).

Each defective batch carries exactly one defect class, so every rejection has one cause.
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kqlab.kafka.builder import BatchBuilder, Record, rewrite_header
from kqlab.kafka.compression import Codec

REGISTRY_URL = "mock://kqlab-demo"
ORDERS_SUBJECT = "orders-value"
ORDERS_TOPIC, ORDERS_PARTITIONS = "orders", 3
CLICKS_TOPIC, CLICKS_PARTITIONS = "clicks", 2
#: schema ids a misconfigured serializer wrote (never registered)
UNKNOWN_SCHEMA_IDS = (4242, 4243)
#: the topic configs the demo validates against (also in the shipped policies)
ORDERS_CONFIGS = {
    "cleanup.policy": "compact,delete",
    "max.message.bytes": str(64 * 1024),
    "message.timestamp.after.max.ms": str(3600 * 1000),
    "message.timestamp.before.max.ms": str(7 * 24 * 3600 * 1000),
}
CLICKS_CONFIGS = {
    "cleanup.policy": "delete",
    "message.timestamp.after.max.ms": str(3600 * 1000),
    "message.timestamp.before.max.ms": str(7 * 24 * 3600 * 1000),
}
TOPIC_CONFIGS = {ORDERS_TOPIC: ORDERS_CONFIGS, CLICKS_TOPIC: CLICKS_CONFIGS}

_MIN, _HOUR, _DAY = 60_000, 3_600_000, 86_400_000

ORDER_V1: dict[str, Any] = {
    "type": "record", "name": "Order", "namespace": "kqlab.demo",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer_id", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string"},
        {"name": "status", "type": "string"},
        {"name": "created_at", "type": "long"},
    ],
}
#: v2 adds the optional ``note`` (backward compatible)
ORDER_V2: dict[str, Any] = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"],
               {"name": "note", "type": ["null", "string"], "default": None}],
}
_STATUSES = ("NEW", "PAID", "SHIPPED", "CANCELLED")
_CURRENCIES = ("EUR", "EUR", "EUR", "USD", "GBP")
_PAGES = ("/", "/search", "/cart", "/checkout", "/account", *(f"/p/{i}" for i in range(40)))
_EVENTS = ("view", "click", "scroll", "add_to_cart")


@dataclass(frozen=True)
class Defect:
    """One planted defect class and exactly what it affects (its ground truth)."""

    name: str
    topic: str
    partitions: tuple[int, ...]
    #: the rule id (``amount-range``) or broker check (``broker:C3``) a replay names first
    caught_by: str
    records: int
    batches: int
    window: tuple[int, int]  # [first, last] write time (ms) of the affected batches
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "topic": self.topic, "partitions": list(self.partitions),
                "caught_by": self.caught_by, "records": self.records,
                "batches": self.batches, "window": list(self.window),
                "description": self.description}


@dataclass
class GroundTruth:
    """Defect class → :class:`Defect`, plus the clean totals per partition folder."""

    defects: dict[str, Defect]
    #: ``topic-partition`` → (records, batches) written
    partitions: dict[str, tuple[int, int]]

    def counts(self) -> dict[str, tuple[int, int]]:
        """Defect class → (records, batches)."""
        return {k: (d.records, d.batches) for k, d in self.defects.items()}

    def for_topic(self, topic: str) -> dict[str, Defect]:
        return {k: d for k, d in self.defects.items() if d.topic == topic}


@dataclass
class DemoTopics:
    """What :func:`generate` wrote: partition folders, the records, the ground truth."""

    root: Path
    now_ms: int
    folders: dict[str, Path]  # "orders-0" -> folder
    truth: GroundTruth
    schema_ids: dict[str, int]  # "v1"/"v2" -> registered id
    #: ``topic-partition`` → the data records as a producer sent them (for :func:`produce_to`)
    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def partitions(self, topic: str) -> list[Path]:
        return [f for name, f in sorted(self.folders.items()) if name.startswith(topic + "-")]


def policy_path(topic: str):
    """The shipped policy for ``orders`` or ``clicks`` (a Traversable)."""
    from importlib.resources import files

    if topic not in TOPIC_CONFIGS:
        raise ValueError(f"no demo policy for topic {topic!r}; use orders or clicks")
    return files("kqlab.sources") / f"demo_topics_{topic}_policy.yaml"


def load_policies() -> dict[str, Any]:
    """``{"orders": Policy, "clicks": Policy}`` (registers the orders schemas first)."""
    from kqlab.policy import loads_policy

    register_schemas()
    return {t: loads_policy(policy_path(t).read_text(), str(policy_path(t)))
            for t in TOPIC_CONFIGS}


def register_schemas(url: str = REGISTRY_URL) -> dict[str, int]:
    """Register order schema v1 and v2 under ``orders-value`` (idempotent); their ids."""
    from confluent_kafka.schema_registry import Schema

    from kqlab.serde.schemas import registry_client

    client = registry_client(url)
    return {v: client.register_schema(ORDERS_SUBJECT, Schema(json.dumps(s), "AVRO"))
            for v, s in (("v1", ORDER_V1), ("v2", ORDER_V2))}


def _avro(schema_id: int, schema: Mapping[str, Any], datum: Mapping[str, Any]) -> bytes:
    from fastavro import parse_schema, schemaless_writer

    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(dict(schema)), dict(datum))
    return b"\x00" + schema_id.to_bytes(4, "big") + buf.getvalue()


# --------------------------------------------------------------------------------- generation

class _Tally:
    def __init__(self) -> None:
        self.records: dict[str, int] = {}
        self.batches: dict[str, set[tuple[int, int]]] = {}
        self.parts: dict[str, set[int]] = {}
        self.when: dict[str, list[int]] = {}

    def add(self, name: str, partition: int, batch: int, n: int, ts: int) -> None:
        self.records[name] = self.records.get(name, 0) + n
        self.batches.setdefault(name, set()).add((partition, batch))
        self.parts.setdefault(name, set()).add(partition)
        w = self.when.setdefault(name, [ts, ts])
        w[0], w[1] = min(w[0], ts), max(w[1], ts)


#: defect class -> (topic, caught_by, description)
DEFECTS: dict[str, tuple[str, str, str]] = {
    "orders.missing_key": (ORDERS_TOPIC, "broker:R3",
                           "bad deploy: null key on the compacted topic"),
    "orders.missing_header": (ORDERS_TOPIC, "traceparent",
                              "bad deploy: traceparent header dropped"),
    "orders.unknown_schema_id": (ORDERS_TOPIC, "schema-registered",
                                 "bad deploy: value framed with an unregistered schema id"),
    "orders.undecodable": (ORDERS_TOPIC, "avro",
                           "bad deploy: JSON bytes behind a registered schema id"),
    "orders.out_of_range": (ORDERS_TOPIC, "amount-range", "bad deploy: negative amount"),
    "orders.null_field": (ORDERS_TOPIC, "customer-present", "bad deploy: customer_id null"),
    "orders.future_timestamp": (ORDERS_TOPIC, "broker:R4",
                                "orders-2 host clock 3 h ahead for 30 min"),
    "orders.oversize": (ORDERS_TOPIC, "broker:C2",
                        "single-record batch with a ~70 KB note (max.message.bytes 64 KiB)"),
    "orders.sequence_gap": (ORDERS_TOPIC, "broker:F4", "idempotent sequence jumps by 3"),
    "clicks.malformed_json": (CLICKS_TOPIC, "json",
                              "tracker release truncating JSON values for 15 min"),
    "clicks.past_timestamp": (CLICKS_TOPIC, "broker:R4",
                              "mobile offline queue flushed with 30-day-old timestamps"),
    "clicks.bad_crc": (CLICKS_TOPIC, "broker:C3", "one batch corrupted (CRC mismatch)"),
    "clicks.sequence_gap": (CLICKS_TOPIC, "broker:F4", "idempotent sequence jumps by 2"),
}
_BAD_DEPLOY_KINDS = ("missing_key", "missing_header", "unknown_schema_id", "undecodable",
                     "out_of_range", "null_field")


def _order_record(rng: random.Random, ids: Mapping[str, int], ts: int, seq_no: int,
                  source: str) -> tuple[Record, dict[str, Any], int]:
    v2 = "v2" in ids
    datum: dict[str, Any] = {
        "order_id": f"o-{seq_no:07d}",
        "customer_id": f"c-{rng.randrange(50_000):05d}",
        "amount": round(rng.lognormvariate(3.5, 1.0), 2) + 0.01,
        "currency": rng.choice(_CURRENCIES),
        "status": rng.choice(_STATUSES),
        "created_at": ts,
    }
    if v2:
        datum["note"] = "gift wrap" if rng.random() < 0.05 else None
    sid = ids["v2"] if v2 else ids["v1"]
    key = f"order-{rng.randrange(20_000):05d}".encode()
    headers = (("traceparent", f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01"
                .encode()), ("source", source.encode()))
    return Record(value=_avro(sid, ORDER_V2 if v2 else ORDER_V1, datum), key=key,
                  headers=headers), datum, sid


def _spoil_order(kind: str, rec: Record, datum: dict[str, Any], sid: int, ids: Mapping[str, int],
                 k: int) -> Record:
    schema = ORDER_V2 if sid == ids.get("v2") else ORDER_V1
    if kind == "missing_key":
        return Record(value=rec.value, headers=rec.headers)
    if kind == "missing_header":
        return Record(value=rec.value, key=rec.key,
                      headers=tuple(h for h in rec.headers if h[0] != "traceparent"))
    if kind == "unknown_schema_id":
        bad = UNKNOWN_SCHEMA_IDS[k % len(UNKNOWN_SCHEMA_IDS)]
        return Record(value=b"\x00" + bad.to_bytes(4, "big") + rec.value[5:], key=rec.key,
                      headers=rec.headers)
    if kind == "undecodable":
        return Record(value=b"\x00" + sid.to_bytes(4, "big") + json.dumps(datum).encode(),
                      key=rec.key, headers=rec.headers)
    if kind == "out_of_range":
        return Record(value=_avro(sid, schema, {**datum, "amount": -datum["amount"]}),
                      key=rec.key, headers=rec.headers)
    if kind == "null_field":
        return Record(value=_avro(sid, schema, {**datum, "customer_id": None}), key=rec.key,
                      headers=rec.headers)
    raise ValueError(kind)


def _as_dict(r: Record, partition: int) -> dict[str, Any]:
    return {"key": r.key, "value": r.value, "headers": list(r.headers),
            "timestamp": r.timestamp, "partition": partition}


def _write(folder: Path, batches: list[bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "00000000000000000000.log").write_bytes(b"".join(batches))


def _orders_partition(p: int, now: int, seed: int, scale: float, ids: Mapping[str, int],
                      tally: _Tally, defects: bool = True
                      ) -> tuple[list[bytes], list[dict[str, Any]]]:
    rng = random.Random(seed * 1000 + p)
    n_batches = max(20, round(100 * scale))
    start, end = now - 6 * _HOUR, now - 5 * _MIN
    deploy = (now - 4 * _HOUR, now - 3 * _HOUR)     # checkout-b's bad deploy
    skew = (now - 90 * _MIN, now - 60 * _MIN)      # orders-2 clock 3 h ahead
    v2_from = now - 5 * _HOUR
    gap_at = n_batches // 10 if p == 0 else -1      # a clean stretch, early
    oversize_at = {n_batches // 2 + 2, n_batches // 2 + 5} if p == 1 else set()
    seq = {2001: 0, 2002: 0}
    out, sent = [], []
    offset, spoiled = 0, 0
    for i in range(n_batches):
        pid = 2001 if i % 2 == 0 else 2002
        source = "checkout-a" if pid == 2001 else "checkout-b"
        write_ts = start + (end - start) * i // n_batches + rng.randrange(0, 60_000)
        batch_ids = {"v1": ids["v1"]} if write_ts < v2_from else dict(ids)
        n = rng.randrange(3, 18)
        recs, data = [], []
        for k in range(n):
            r, d, sid = _order_record(rng, batch_ids, write_ts + 2 * k, offset + k, source)
            recs.append(r)
            data.append((d, sid))
        codec = Codec.ZSTD if pid == 2001 else Codec.LZ4
        defect = None
        if not defects:
            pass
        elif pid == 2002 and deploy[0] <= write_ts < deploy[1]:
            kind = _BAD_DEPLOY_KINDS[spoiled % len(_BAD_DEPLOY_KINDS)]
            spoiled += 1
            hits = sorted(rng.sample(range(n), 1 + (spoiled % 3)))
            for k in hits:
                recs[k] = _spoil_order(kind, recs[k], data[k][0], data[k][1], batch_ids, k)
            defect, defect_n = f"orders.{kind}", len(hits)
        elif p == 2 and skew[0] <= write_ts < skew[1]:
            defect, defect_n = "orders.future_timestamp", n
        elif i in oversize_at:
            d = {**data[0][0], "note": "".join(rng.choice("abcdefghij ") for _ in range(70_000))}
            recs = [Record(value=_avro(ids["v2"], ORDER_V2, d), key=recs[0].key,
                           headers=recs[0].headers)]
            n, codec = 1, Codec.NONE
            defect, defect_n = "orders.oversize", 1
        elif i == gap_at and pid == 2001:
            seq[pid] += 3
            defect, defect_n = "orders.sequence_gap", n
        ts = write_ts + 3 * _HOUR if defect == "orders.future_timestamp" else write_ts
        b = BatchBuilder(codec=codec, base_offset=offset, base_timestamp=ts, producer_id=pid,
                         producer_epoch=0, base_sequence=seq[pid], partition_leader_epoch=5)
        for k, r in enumerate(recs):
            rec = Record(value=r.value, key=r.key, headers=r.headers, timestamp=ts + 2 * k)
            b.append(rec)
            sent.append(_as_dict(rec, p))
        out.append(b.build())
        if defect:
            tally.add(defect, p, offset, defect_n, write_ts)
        offset += n
        seq[pid] += n
    return out, sent


def _click_value(rng: random.Random, ts: int, n: int) -> bytes:
    return json.dumps({
        "event_id": f"e-{n:08d}", "session": f"s-{rng.getrandbits(40):010x}",
        "user_id": None if rng.random() < 0.3 else f"u-{rng.randrange(100_000):06d}",
        "type": rng.choice(_EVENTS), "page": rng.choice(_PAGES), "ts": ts,
    }, separators=(",", ":")).encode()


def _clicks_partition(p: int, now: int, seed: int, scale: float, tally: _Tally,
                      defects: bool = True) -> tuple[list[bytes], list[dict[str, Any]]]:
    rng = random.Random(seed * 1000 + 500 + p)
    n_batches = max(20, round(70 * scale))
    start, end = now - 6 * _HOUR, now - 2 * _MIN
    truncating = (now - 150 * _MIN, now - 135 * _MIN)  # web tracker release, clicks-0
    flush = (now - 4 * _HOUR, now - 3 * _HOUR)         # mobile offline queue, clicks-0
    crc_at = n_batches * 2 // 3 if p == 1 else -1
    gap_at = n_batches // 5 if p == 1 else -1
    seq = {3001: 0, 3002: 0}
    out, sent = [], []
    offset = 0
    for i in range(n_batches):
        pid = 3001 if i % 3 else 3002
        source = "web" if pid == 3001 else "mobile"
        write_ts = start + (end - start) * i // n_batches + rng.randrange(0, 60_000)
        n = rng.randrange(8, 22)
        recs = [Record(value=_click_value(rng, write_ts + k, offset + k),
                       headers=(("source", source.encode()),)) for k in range(n)]
        codec = Codec.GZIP if pid == 3001 else Codec.SNAPPY
        defect, defect_n, ts = None, 0, write_ts
        if not defects:
            pass
        elif p == 0 and pid == 3001 and truncating[0] <= write_ts < truncating[1]:
            hits = sorted(rng.sample(range(n), 1 + i % 3))
            for k in hits:
                v = recs[k].value
                recs[k] = Record(value=v[: len(v) * 2 // 3], headers=recs[k].headers)
            defect, defect_n = "clicks.malformed_json", len(hits)
        elif p == 0 and pid == 3002 and flush[0] <= write_ts < flush[1]:
            ts = write_ts - 30 * _DAY
            defect, defect_n = "clicks.past_timestamp", n
        elif i == crc_at:
            defect, defect_n = "clicks.bad_crc", n
        elif i == gap_at and pid == 3001:
            seq[pid] += 2
            defect, defect_n = "clicks.sequence_gap", n
        b = BatchBuilder(codec=codec, base_offset=offset, base_timestamp=ts, producer_id=pid,
                         producer_epoch=0, base_sequence=seq[pid], partition_leader_epoch=2)
        for k, r in enumerate(recs):
            rec = Record(value=r.value, headers=r.headers, timestamp=ts + k)
            b.append(rec)
            sent.append(_as_dict(rec, p))
        data = b.build()
        if defect == "clicks.bad_crc":  # a flipped bit in the stored CRC: the payload is intact
            stored = int.from_bytes(data[17:21], "big")
            data = rewrite_header(data, crc=stored ^ 0x00040000)
        out.append(data)
        if defect:
            tally.add(defect, p, offset, defect_n, write_ts)
        offset += n
        seq[pid] += n
    return out, sent


def generate(out_dir: str | Path, now_ms: int, *, seed: int = 7, scale: float = 1.0,
             defects: bool = True) -> DemoTopics:
    """Write ``orders-0..2`` and ``clicks-0..1`` under ``out_dir``; return what was written.

    ``defects=False`` writes the same traffic without any of :data:`DEFECTS` (no bad deploy,
    no skewed clock, no corrupt batch, no sequence gap): a clean reference — "last week" — for
    the sample checks that compare with a baseline (drift, schema drift).

    Registers the orders schemas in ``mock://kqlab-demo`` first (their ids go into the values).
    """
    if scale <= 0:
        raise ValueError(f"scale must be positive, not {scale}")
    root = Path(out_dir)
    ids = register_schemas()
    tally = _Tally()
    folders: dict[str, Path] = {}
    sent: dict[str, list[dict[str, Any]]] = {}
    parts: dict[str, tuple[int, int]] = {}
    for topic, count in ((ORDERS_TOPIC, ORDERS_PARTITIONS), (CLICKS_TOPIC, CLICKS_PARTITIONS)):
        for p in range(count):
            name = f"{topic}-{p}"
            if topic == ORDERS_TOPIC:
                batches, recs = _orders_partition(p, now_ms, seed, scale, ids, tally, defects)
            else:
                batches, recs = _clicks_partition(p, now_ms, seed, scale, tally, defects)
            _write(root / name, batches)
            folders[name], sent[name] = root / name, recs
            parts[name] = (len(recs), len(batches))
    defects = {}
    for name, (topic, caught_by, description) in DEFECTS.items():
        if name not in tally.records:
            continue  # a tiny scale can leave a window empty
        w = tally.when[name]
        defects[name] = Defect(name, topic, tuple(sorted(tally.parts[name])), caught_by,
                               tally.records[name], len(tally.batches[name]), (w[0], w[1]),
                               description)
    return DemoTopics(root, now_ms, folders, GroundTruth(defects, parts), ids, sent)


def to_snapshots(demo: DemoTopics, out_dir: str | Path, *, overwrite: bool = False
                 ) -> dict[str, Any]:
    """One exact-framing snapshot per partition folder (``<out_dir>/<topic>-<p>``)."""
    from kqlab.sources.segments import snapshot_from_segments

    return {name: snapshot_from_segments(folder, Path(out_dir) / name, overwrite=overwrite)
            for name, folder in sorted(demo.folders.items())}


def iter_records(demo: DemoTopics, topic: str) -> Iterator[dict[str, Any]]:
    """The data records of ``topic`` as a producer sent them, partition by partition."""
    for name in sorted(demo.records):
        if name.rsplit("-", 1)[0] == topic:
            yield from demo.records[name]


def produce_to(broker: Any, demo: DemoTopics, *, create: bool = True, timeout: float = 60.0
               ) -> dict[str, dict[int, int]]:
    """Produce every demo record (same partition, key, value, headers, timestamp) into an
    embedded :class:`~kqlab.embedded.Broker`; returns ``{topic: {partition: records}}``.

    The batch framing is the client's own (no exact framing): faults that live in the framing
    (bad CRC, sequence gaps) do not survive, and the topics are created with default configs so
    the broker stores the defective records for a later sample to find.
    """
    out: dict[str, dict[int, int]] = {}
    for topic, count in ((ORDERS_TOPIC, ORDERS_PARTITIONS), (CLICKS_TOPIC, CLICKS_PARTITIONS)):
        if create:
            broker.create_topic(topic, partitions=count)
        recs = list(iter_records(demo, topic))
        delivered = broker.produce(topic, recs, timeout=timeout,
                                   config={"message.max.bytes": 1_000_000,
                                           "compression.type": "lz4"})
        per: dict[int, int] = {}
        for partition, _ in delivered:
            per[partition] = per.get(partition, 0) + 1
        out[topic] = dict(sorted(per.items()))
    return out


__all__ = ["CLICKS_CONFIGS", "DEFECTS", "ORDERS_CONFIGS", "ORDER_V1", "ORDER_V2", "REGISTRY_URL",
           "Defect", "DemoTopics", "GroundTruth", "generate", "iter_records", "load_policies",
           "policy_path", "produce_to", "register_schemas", "to_snapshots"]
