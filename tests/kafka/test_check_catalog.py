"""Every broker check in ``kqlab.kafka.checks`` has a witness: an input that makes the broker
procedure decide with exactly that check, in the byte-level validator and (where the tables
can judge it) in the vectorised table checks, with the verdict's text rendered from the
check's template and the parameters the verdict carries.

``docs/broker-checks.md`` lists every check with the test that proves it; the test here holds
the document to the registry, so a new check cannot land without a witness and a row.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kqlab.kafka import legacy
from kqlab.kafka.batch import decode_batches
from kqlab.kafka.builder import Record, build_batch, control_record, encode_record, rewrite_header
from kqlab.kafka.checks import CHECKS, checks_table
from kqlab.kafka.checks._check import Check
from kqlab.kafka.checksums import crc32c
from kqlab.kafka.compression import Codec, compress
from kqlab.kafka.table_checks import RecordPolicy, broker_verdicts
from kqlab.kafka.validator import BatchOutcome, PartitionValidator, PolicyErrors
from kqlab.kafka.varint import encode_varint, encode_varlong

NOW = 1_700_000_000_000
DOC = Path(__file__).resolve().parents[2] / "docs" / "broker-checks.md"


@dataclass
class Witness:
    """Inputs that end in one check: ``batches`` are validated in order on one partition
    (the last one's outcome is the witness); ``request`` are PartitionValidator arguments."""

    batches: list[bytes]
    config: dict = field(default_factory=dict)
    version: str = "4.0"
    request: dict = field(default_factory=dict)
    policy: PolicyErrors | None = None
    #: how the bytes arrive: as a producer sent them, or as a broker stored them (markers)
    source: str = "producer"
    #: the check judged where the verdict's ``record_errors`` name it (record-level checks)
    record_level: bool = False
    #: the tables judge it too (source="log" from the decoded tables, produce v >= 3)
    tables: bool = False


def v2(values=(b"v",), **kw) -> bytes:
    kw.setdefault("base_timestamp", NOW)
    return build_batch([Record(key=b"k", value=v) for v in values], **kw)


def idempotent(seq: int, epoch: int = 0, pid: int = 7, **kw) -> bytes:
    return v2(producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)


def txn(seq: int, epoch: int = 5) -> bytes:
    return idempotent(seq, epoch, transactional=True)


def marker(epoch: int, pid: int = 7, coordinator_epoch: int = 0,
           record: Record | None = None) -> bytes:
    rec = record or control_record(commit=True, coordinator_epoch=coordinator_epoch,
                                   timestamp=NOW)
    return build_batch([rec], producer_id=pid, producer_epoch=epoch, base_sequence=-1,
                       transactional=True, control=True, base_timestamp=NOW)


def bad_marker(key: bytes | None, value: bytes | None) -> Witness:
    """A coordinator's marker whose control record the broker cannot read (F7)."""
    return Witness([txn(0), marker(6, record=Record(key=key, value=value))], source="log",
                   tables=True)


def legacy_v1(*values: bytes, magic: int = 1) -> bytes:
    return b"".join(legacy.encode_message(i, b"k", v, magic=magic, timestamp=NOW)
                    for i, v in enumerate(values))


def _with_length(data: bytes, length: int) -> bytes:
    """``data`` with its batchLength field set to ``length`` (CRC untouched)."""
    return data[:8] + struct.pack(">i", length) + data[12:]


def incompressible(n: int) -> bytes:
    return random.Random(n).randbytes(n)


OLD_MAGIC = {"inter.broker.protocol.version": "2.8", "message.format.version": "0.10.0"}

# -- records regions for the §3.D.3 witnesses (docs/kafka-4x-record-structure.md) -------------
REC = encode_record(Record(key=b"k", value=b"v"), 0, 0)


def rec_with(*, key: bytes = encode_varint(0), headers: bytes = encode_varint(0)) -> bytes:
    """One record around hand-made key / header fields, its length prefix consistent."""
    body = b"\x00" + encode_varlong(0) + encode_varint(0) + key + encode_varint(0) + headers
    return encode_varint(len(body)) + body


def v2_region(region: bytes, count: int, codec: Codec = Codec.NONE, *,
              compressed: bytes | None = None) -> bytes:
    """A v2 batch of ``count`` records around a hand-made records region (``compressed``:
    the records bytes as they go on the wire), with a valid CRC."""
    body = compress(codec, region) if compressed is None else compressed
    head = struct.pack(">qiibIhiqqqhii", 0, 49 + len(body), -1, 2, 0, int(codec), count - 1,
                       NOW, NOW, -1, -1, -1, count)
    data = bytearray(head + body)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def gzip_damaged(how: str) -> bytes:
    stream = bytearray(compress(Codec.GZIP, REC * 3))
    if how == "header":
        stream[1] ^= 0xFF
    elif how == "trailer":
        stream[-8] ^= 0xFF
    else:  # cut inside the deflate data
        stream = stream[:-12]
    return v2_region(REC * 3, 3, Codec.GZIP, compressed=bytes(stream))


def legacy_wrapper(inner: bytes, codec: Codec = Codec.GZIP, *, cut: int = 0) -> bytes:
    value = compress(codec, inner)
    return legacy.encode_message(0, None, value[:len(value) - cut], magic=1,
                                 attributes=int(codec), timestamp=NOW)


OLD_PRODUCE = {"produce_version": 2}
REBUILD = {"compression.type": "lz4"}  # a gzip batch the broker re-compresses

#: check id -> its witness
WITNESSES: dict[str, Callable[[], Witness]] = {
    "S1": lambda: Witness([struct.pack(">qi", 0, 10) + bytes(10)]),
    "S3": lambda: Witness([rewrite_header(v2(), fix_crc=False, magic=3)]),
    "A1": lambda: Witness([struct.pack(">qi", 0, 10) + bytes(10)]),
    "A1'": lambda: Witness([v2(producer_id=7, producer_epoch=0, base_sequence=0,
                               transactional=True)],
                           request={"transactional_id_authorized": False}),
    "A4.a": lambda: Witness([b""]),
    "A4.b": lambda: Witness([legacy_v1(b"v")]),
    "A4.c": lambda: Witness([v2(codec=Codec.ZSTD)], request={"produce_version": 6}),
    "A4.c/codec": lambda: Witness([rewrite_header(v2(), attributes=5)],
                                  request={"produce_version": 6}),
    "A4.d": lambda: Witness([v2() + v2()]),
    "A4.d/scan": lambda: Witness([v2() + struct.pack(">qi", 0, 10) + bytes(10)]),
    "B0": lambda: Witness([_with_length(v2()[:12 + 20], 20)]),
    "B3": lambda: Witness([v2()], request={"acks": 2}),
    "B4": lambda: Witness([v2()], request={"topic": "__consumer_offsets"}, tables=True),
    "C1": lambda: Witness([v2(base_offset=5)]),
    "C2": lambda: Witness([v2([b"x" * 100])], {"max.message.bytes": "100"}, tables=True),
    "C3": lambda: Witness([v2()[:-1] + b"\x01"], tables=True),
    "C4": lambda: Witness([rewrite_header(v2(), attributes=5)], tables=True),
    "Z0": lambda: Witness([v2()], {"compression.type": "zstd",
                                   "inter.broker.protocol.version": "2.0"}, "3.9"),
    "D1": lambda: Witness([b""], version="3.9", request={"produce_version": 2}),
    "D1/more": lambda: Witness([v2() + v2()], version="3.9", request={"produce_version": 2}),
    "D2.a": lambda: Witness([legacy_v1(b"a", magic=0) + legacy_v1(b"b", magic=1)],
                            version="3.9", request={"produce_version": 2}),
    "D2.b": lambda: Witness([rewrite_header(v2(), last_offset_delta=-1)], tables=True),
    "D2.c": lambda: Witness([rewrite_header(v2(), records_count=0, last_offset_delta=0)],
                            tables=True),
    "D2.d": lambda: Witness([rewrite_header(v2([b"a", b"b", b"c"]), last_offset_delta=1)],
                            tables=True),
    "D2.e": lambda: Witness([marker(0)]),
    "D2.f": lambda: Witness([rewrite_header(idempotent(0), base_sequence=-2)], tables=True),
    "D2.g": lambda: Witness([v2(producer_id=7, producer_epoch=0, base_sequence=0,
                                transactional=True)], OLD_MAGIC, "3.9"),
    "D2.h": lambda: Witness([idempotent(0)], OLD_MAGIC, "3.9"),
    "R1": lambda: Witness([legacy.encode_wrapper([(b"k", b"v", NOW)], magic=1, inner_magic=0)],
                          version="3.9", request={"produce_version": 2}, record_level=True),
    "R3": lambda: Witness([build_batch([Record(value=b"v")], base_timestamp=NOW)],
                          {"cleanup.policy": "compact"}, record_level=True, tables=True),
    "R4": lambda: Witness([v2(base_timestamp=NOW - 10_000)],
                          {"message.timestamp.before.max.ms": "1000"}, record_level=True,
                          tables=True),
    "R4/type": lambda: Witness([v2(timestamp_type=1)],
                               {"message.timestamp.type": "LogAppendTime"}, record_level=True),
    "D5/timestamp": lambda: Witness([v2(base_timestamp=NOW - 10_000)],
                                    {"message.timestamp.before.max.ms": "1000"}, tables=True),
    "D5": lambda: Witness([build_batch([Record(value=b"v")], base_timestamp=NOW)],
                          {"cleanup.policy": "compact"}, tables=True),
    "P": lambda: Witness([v2()], policy=PolicyErrors("kip-940", {0: "no"}, {0: "r"}),
                         record_level=True, tables=True),
    "P/batch": lambda: Witness([v2()], policy=PolicyErrors("kip-686", {0: "no"}, {0: "r"}),
                               tables=True),
    "E1": lambda: Witness([v2([incompressible(200)])],
                          {"compression.type": "gzip", "max.message.bytes": "280"}),
    "E2": lambda: Witness([v2([b"x" * 100])], {"segment.bytes": "100"}, "3.9", tables=True),
    "F1": lambda: Witness([idempotent(0), idempotent(0)], tables=True),
    "F3": lambda: Witness([idempotent(0, epoch=1), idempotent(1, epoch=0)], tables=True),
    "F4/epoch": lambda: Witness([idempotent(0, epoch=0), idempotent(5, epoch=1)], tables=True),
    "F4": lambda: Witness([idempotent(0), idempotent(2)], tables=True),
    "F5": lambda: Witness([v2(producer_id=7, producer_epoch=0, base_sequence=0,
                              transactional=True), idempotent(1)], tables=True),
    # markers arrive from the coordinator, as a broker stores them
    "F3/unified-log": lambda: Witness([txn(0), marker(6), txn(1, epoch=5)], source="log",
                                      tables=True),
    "F3/marker": lambda: Witness([txn(0), marker(4)], version="3.8", source="log",
                                 tables=True),
    "F3/2.4": lambda: Witness([txn(0), marker(6), idempotent(1, epoch=5)], version="2.7",
                              source="log", tables=True),
    "F3/tv": lambda: Witness([txn(0), marker(5)], version="4.2", source="log",
                             request={"marker_transaction_version": 2}, tables=True),
    "F4/tv2": lambda: Witness([txn(3, epoch=0)], version="4.1", source="log",
                              request={"produce_version": 12}, tables=True),
    "F6": lambda: Witness([txn(0), marker(5, coordinator_epoch=3), txn(1),
                           marker(5, coordinator_epoch=2)], source="log", tables=True),
    "F7/key-size": lambda: bad_marker(b"\0\0\0", b"\0" * 6),
    "F7/key-version": lambda: bad_marker(b"\xff\xfe\0\x01", b"\0" * 6),
    "F7/type": lambda: bad_marker(b"\0\0\0\x02", b"\0" * 6),
    "F7/value-size": lambda: bad_marker(b"\0\0\0\x01", b"\0" * 5),
    "F7/value-version": lambda: bad_marker(b"\0\0\0\0", b"\x80\0\0\0\0\0"),
    "F7/null": lambda: bad_marker(None, b"\0" * 6),
    # §3.D.3 reading the records, by reader (docs/kafka-4x-record-structure.md)
    "D3/eof": lambda: Witness([v2_region(REC, 2)], tables=True),
    "D3/size": lambda: Witness([v2_region(encode_varint(100) + bytes(5), 1)], tables=True),
    "D3/payload": lambda: Witness([v2_region(encode_varint(100) + bytes(5), 1, Codec.GZIP)],
                                  REBUILD, tables=True),
    "D3/read": lambda: Witness([v2_region(encode_varint(len(REC)) + REC[1:] + b"\0", 1)],
                               tables=True),
    "D3/headers": lambda: Witness([v2_region(rec_with(headers=encode_varint(-4)), 1)],
                                  tables=True),
    "D3/headers-left": lambda: Witness([v2_region(rec_with(headers=encode_varint(50)), 1)],
                                       tables=True),
    "D3/header-key": lambda: Witness(
        [v2_region(rec_with(headers=encode_varint(1) + encode_varint(-2)), 1)], tables=True),
    "D3/structure": lambda: Witness([v2_region(rec_with(key=encode_varint(1000)), 1)],
                                    tables=True),
    "D3/skip": lambda: Witness([v2_region(rec_with(key=encode_varint(1000)), 1, Codec.GZIP)],
                               tables=True),
    "D3/remaining": lambda: Witness([v2_region(REC * 2, 1)], tables=True),
    "D3/count": lambda: Witness([rewrite_header(marker(0), records_count=-1,
                                                last_offset_delta=-2)],
                                request={"origin": "coordinator"}, tables=True),
    "D3.codec": lambda: Witness([gzip_damaged("cut")], tables=True),
    "D3.codec/open": lambda: Witness([gzip_damaged("header")], tables=True),
    "D3.codec/tail": lambda: Witness([gzip_damaged("trailer")], tables=True),
    "D3.varint": lambda: Witness([v2_region(b"\xff" * 5 + b"\0", 1)], tables=True),
    "D3.alloc": lambda: Witness([v2_region(encode_varint(2**30) + b"\0", 1, Codec.GZIP)],
                                REBUILD, tables=True),
    "D3.rebuild": lambda: Witness([build_batch(
        [Record(key=b"k", value=b"v", offset_delta=0)] * 2, codec=Codec.GZIP,
        base_timestamp=NOW, last_offset_delta=1)], tables=True),
    # found by the broker oracle (docs/broker-oracle.md): a batch the broker re-compresses
    # with a producer id but epoch -1 cannot start the rebuilt batch
    "D3.rebuild/producer": lambda: Witness([build_batch(
        [Record(key=b"k", value=b"v")], codec=Codec.GZIP, base_timestamp=NOW, producer_id=7,
        producer_epoch=-1, base_sequence=0)], config=REBUILD, tables=True),
    "D3/legacy": lambda: Witness([legacy.encode_message(0, None, None, magic=1,
                                                        attributes=int(Codec.GZIP),
                                                        timestamp=NOW)],
                                 version="3.9", request=OLD_PRODUCE),
    "D3/legacy-zstd": lambda: Witness([legacy.encode_wrapper([(b"k", b"v", NOW)], magic=1,
                                                             codec=Codec.ZSTD)],
                                      version="3.9", request=OLD_PRODUCE),
    "D3.corrupt": lambda: Witness([legacy_wrapper(struct.pack(">qi", 0, 13) + bytes(13))],
                                  version="3.9", request=OLD_PRODUCE),
    "D3.codec/legacy": lambda: Witness([legacy_wrapper(legacy_v1(b"a", b"b"), cut=10)],
                                       version="3.9", request=OLD_PRODUCE),
}


def _validate(w: Witness) -> list[BatchOutcome]:
    req = dict(w.request)
    topic = req.pop("topic", "t")
    if w.source == "log":
        req.setdefault("resync", False)
    v = PartitionValidator(topic, 0, w.config, broker_version=w.version, now=NOW,
                           source=w.source, **req)
    return [v.validate(b, policy=w.policy if i == len(w.batches) - 1 else None)
            for i, b in enumerate(w.batches)]


def _decided_by(out: BatchOutcome, check: Check, record_level: bool) -> None:
    """The outcome is ``check``'s verdict, its text rendered from its parameters."""
    if check.id == "S1" or check.id == "S3":  # scanning texts: carried by A1
        assert out.check == "A1"
        assert out.params["scan_error"] == check.render(**_scan_params(out, check))
        return
    if record_level:
        ids = [i[0] for i in out.record_error_ids]
        assert check.id in ids, (out.record_error_ids, out.detail)
        k = ids.index(check.id)
        params = out.record_error_ids[k][2] or {}
        message = out.record_errors[k][1]
        if check.id == "P":
            assert message == "no" and out.record_error_ids[k][1] == "r"
        else:
            assert message == check.render(**params)
        assert check.step in out.check.split("+")
        return
    if check.step == "D5":  # the aggregate is the client's error_message
        assert out.error_code == check.code
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')"
                          for i, m in out.record_errors[:3])
        expected = check.render(count=len(out.record_errors), shown=shown) \
            if check.params else check.render()
        assert out.error_message == expected
        return
    assert out.check == check.step, (out.check, out.detail)
    assert out.error_code == check.code
    if check.id == "P/batch":
        assert out.error_message == out.detail == "no"
        assert out.params == {"batch_index": "0", "rule": "r"}
        return
    if check.step == "F1":
        assert out.duplicate
    params = out.params
    # the verdict keeps every value the check saw; its template prints some or all of them
    assert params is not None and set(check.params) <= set(params), (params, check.params)
    assert out.detail == check.render(**params)


def _scan_params(out: BatchOutcome, check: Check) -> dict[str, str]:
    text = out.params["scan_error"]
    if check.id == "S3":
        return {"magic": text.rsplit(" ", 1)[1]}
    return {"length": text.split()[2]}


@pytest.mark.parametrize("check_id", sorted(WITNESSES))
def test_witness(check_id):
    check = CHECKS[check_id]
    w = WITNESSES[check_id]()
    outs = _validate(w)
    _decided_by(outs[-1], check, w.record_level)
    if not w.tables:
        return
    # the table checks judge the same bytes, as stored by a broker, identically
    topic = w.request.get("topic", "t")
    d = decode_batches(w.batches, topic=topic, partition=0)

    policy = None
    if w.policy is not None:  # the policy's errors are in the last batch
        n = d.records.num_rows
        start = n - decode_batches(w.batches[-1:]).records.num_rows
        msgs: list[str | None] = [None] * n
        rules: list[str | None] = [None] * n
        for i, m in w.policy.errors.items():
            msgs[start + i], rules[start + i] = m, w.policy.rules[i]
        policy = RecordPolicy(w.policy.profile, msgs, rules)
    request = {k: v for k, v in w.request.items() if k != "topic"}
    if w.source == "log":
        request.setdefault("resync", False)
    got = broker_verdicts(d.records, d.batches, w.config, broker_version=w.version, now=NOW,
                          source="log", policy=policy, **request).to_pylist()[-1]
    if w.source == "log":
        request.setdefault("resync", False)
    want = PartitionValidator(topic, 0, w.config, broker_version=w.version, now=NOW,
                              source="log", **request)
    for i, b in enumerate(w.batches):
        last = want.validate(b, policy=w.policy if i == len(w.batches) - 1 else None)
    assert (got["error_code"], got["check"], got["detail"], got["error_message"]) == \
        (last.error_code, last.check, last.detail, last.error_message)
    assert (dict(got["params"]) if got["params"] is not None else None) == last.params


def test_every_check_has_a_witness_or_a_named_proof():
    missing = [c.id for c in CHECKS if c.id not in WITNESSES and c.id not in PROVEN_ELSEWHERE]
    assert not missing, f"checks without a witness: {missing}"


def test_the_checks_document_is_the_registry():
    """``docs/broker-checks.md`` holds the table :func:`checks_table` renders (regenerate it
    with ``python -m kqlab.kafka.checks > docs/broker-checks.md``)."""
    text = DOC.read_text()
    assert checks_table() in text


#: checks proven by tests of their own (test file::function); each must exist
PROVEN_ELSEWHERE: dict[str, str] = {}


def test_named_proofs_exist():
    root = Path(__file__).resolve().parents[2]
    for check_id, where in PROVEN_ELSEWHERE.items():
        path, name = where.split("::")
        assert f"def {name}(" in (root / path).read_text(), (check_id, where)
