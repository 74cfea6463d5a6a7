#!/usr/bin/env python3
"""Fuzz the batch validator: mutated batches must always end as a verdict, in both engines.

Why this exists: kqlab promises that corrupt input never crashes or hangs and that the two
engines — the byte-level :class:`~kqlab.kafka.validator.PartitionValidator` and the vectorised
:func:`~kqlab.kafka.table_checks.broker_verdicts` over the decoded Arrow tables — give the same
verdict row for row.  Hand-written tests cover the spec's cases; this script covers the space
between them, a million inputs at a time.  The generator and mutations live in
:mod:`kqlab.kafka.fuzz` (shared with ``scripts/broker_oracle.py``).

Each *case* is one input (the ``records`` field of a produce request: usually one batch,
sometimes several concatenated).  It is built from a seed corpus that spans the spec (v2 with
every codec, idempotent / transactional / control batches, timestamps at the bounds, null keys
and values, headers, the LogAppendTime bit, legacy v0/v1 plain and compressed wrappers) and
mutated at two levels:

* structurally, on the records' fields before encoding (varint corruption: too long, negative,
  overflowing; wrong record lengths and header counts; duplicated, dropped, reordered or
  spliced records; header fields; compressed-stream corruption), and
* on the encoded bytes (bit flips, header-field overwrites, truncation / extension,
  insertions, splices);

half of the inputs then get their CRCs recomputed (CRC-32C over bytes 21.., CRC-32 for
legacy) so they pass C3 and reach the deeper checks.

Every case goes through:

1. the byte validator with ``source="producer"`` (the whole input as one request) on a few
   topic configs / broker versions / request parameters;
2. the scan (``scan_buffer``), ``decode_batches`` and ``decode_records`` (which must agree),
   then ``validate_batches(source="log"...)`` against ``broker_verdicts`` with ``raw=`` (equal
   row for row) and without (equal, or marked undetermined) on more configs, some with a
   record policy (KIP-940/729/686 profiles) injected into both engines.  Cases are
   processed in groups of :data:`GROUP` so the decode and ``broker_verdicts`` calls are
   amortised; producer state then carries from case to case inside a group, which both
   engines see identically;
3. a metamorphic relation (one per case, rotating): the same input with a field the broker
   never validates changed — partitionLeaderEpoch, maxTimestamp without the LogAppendTime
   bit, the delete-horizon or unused attribute bits, a record's attributes byte — must get
   the same verdict.  This oracle trusts neither engine (they share much of their code);
4. now and then the C kernels against their pure-Python references, and ``read_log`` on a
   segment file against ``decode_records`` on the same bytes.

A Python exception anywhere is a *crash*; more than :data:`CASE_SECONDS` on one case is a
*hang* (a SIGALRM deadline, plus a watchdog in the parent for code stuck in C or a dead
worker); engines that disagree (or a broken metamorphic relation) are a *mismatch*; a verdict
without a known error code (or an explicit ``undetermined``), or whose text quotes a number no
Java ``long`` can hold, is an *invalid verdict*.  Findings are deduplicated by signature;
``--save-dir`` keeps replayable JSON files (``--replay FILE`` re-runs one).

Usage::

    python scripts/fuzz_validator.py --quick --json
    nice -n 10 python scripts/fuzz_validator.py --cases 1000000 --jobs 2 --save-dir fuzz-out
    python scripts/fuzz_validator.py --replay fuzz-out/mismatch-....json
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import hashlib
import json
import multiprocessing as mp
import queue
import random
import re
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import kqlab  # noqa: F401
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from kqlab.kafka._records_py import parse_records as parse_records_py
from kqlab.kafka._scan_py import scan_batches as scan_batches_py
from kqlab.kafka.batch import decode_batches, decode_records, records_region
from kqlab.kafka.configs import TopicConfig
from kqlab.kafka.errors import error_for_code
from kqlab.kafka.fuzz.corpus import build_corpus  # the generator: kqlab.kafka.fuzz
from kqlab.kafka.fuzz.mutate import make_case
from kqlab.kafka.fuzz.seeds import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN, NOW, Seed
from kqlab.kafka.log import LogIssue, read_log, scan_buffer
from kqlab.kafka.records_parser import IMPLEMENTATION, crc32c, parse_records, scan_batches
from kqlab.kafka.table_checks import (
    UNDETERMINED,
    RecordPolicy,
    broker_verdicts,
    policy_by_batch,  # the split of a policy per batch, as the tests of table_checks use it
)
from kqlab.kafka.validator import PartitionValidator, outcomes_table, validate_batches
from kqlab.kafka.varint import VarintError, decode_varint

TOPIC, PARTITION = "t", 0
#: one case may take this long before it counts as a hang
CASE_SECONDS = 2.0
#: cases per decode / broker_verdicts call (amortises their fixed cost)
GROUP = 256
#: cases per task handed to a worker process
CHUNK = 1024
#: a worker silent for this long is stuck where SIGALRM cannot reach (C code) or dead
WATCHDOG_SECONDS = 30.0
#: findings kept in full (input bytes) per signature; the rest are only counted
KEEP_PER_SIGNATURE = 3
FORMAT = "kqlab-fuzz-1"

# -- what the inputs are judged under ---------------------------------------------------------

#: byte validator, ``source="producer"``, the whole input as one request.  The first is the
#: primary setup whose verdicts the summary counts (one per case).
PRODUCER_SETUPS: list[tuple[str, dict[str, Any]]] = [
    ("producer-4.0", {"broker_version": "4.0"}),
    ("producer-4.0-compact-bounds", {"broker_version": "4.0", "config": {
        "cleanup.policy": "compact", "message.timestamp.before.max.ms": "3600000",
        "message.timestamp.after.max.ms": "60000"}}),
    ("producer-3.9-pv2-difference", {"broker_version": "3.9", "produce_version": 2,
                                     "config": {"message.timestamp.difference.max.ms": "1000"}}),
    ("producer-3.9-lat-topic", {"broker_version": "3.9", "config": {
        "message.timestamp.type": "LogAppendTime"}}),
    ("producer-4.0-small", {"broker_version": "4.0", "config": {"max.message.bytes": "1200"}}),
    ("producer-4.0-gzip-target", {"broker_version": "4.0", "config": {
        "compression.type": "gzip", "max.message.bytes": "1500"}}),
    ("producer-3.9-pv5-compact", {"broker_version": "3.9", "produce_version": 5,
                                  "config": {"cleanup.policy": "compact,delete"}}),
    ("producer-3.5-pv2-lat", {"broker_version": "3.5", "produce_version": 2, "config": {
        "message.timestamp.difference.max.ms": "600000"}}),
]
#: extra producer setups per case besides the primary one (rotating through the list)
PRODUCER_PER_CASE = 2

#: the stream of batches (``validate_batches``) against ``broker_verdicts``.  Setups whose
#: ``broker_verdicts`` needs ``raw`` for every row (source producer, produce version < 3) are
#: compared with ``raw`` only.
LOG_SETUPS: list[tuple[str, dict[str, Any]]] = [
    ("log-4.0", {"broker_version": "4.0", "config": {}}),
    ("log-4.0-compact-bounds", {"broker_version": "4.0", "config": {
        "cleanup.policy": "compact", "message.timestamp.before.max.ms": "3600000",
        "message.timestamp.after.max.ms": "60000"}}),
    ("log-3.9", {"broker_version": "3.9", "config": {}}),
    ("log-3.9-difference", {"broker_version": "3.9", "config": {
        "message.timestamp.difference.max.ms": "600000"}}),
    ("log-3.5-difference", {"broker_version": "3.5", "config": {
        "cleanup.policy": "compact,delete", "message.timestamp.difference.max.ms": "600000"}}),
    ("log-4.0-lat-topic-compact", {"broker_version": "4.0", "config": {
        "message.timestamp.type": "LogAppendTime", "cleanup.policy": "compact"}}),
    ("log-4.0-small", {"broker_version": "4.0", "config": {"max.message.bytes": "1000"}}),
    ("log-4.0-recompress", {"broker_version": "4.0", "config": {
        "compression.type": "uncompressed", "max.message.bytes": "1500"}}),
    ("log-3.9-lz4-segment", {"broker_version": "3.9", "config": {
        "compression.type": "lz4", "segment.bytes": "1200",
        "message.timestamp.after.max.ms": "1000"}}),
    ("log-3.9-zstd-ibp-pv5", {"broker_version": "3.9", "produce_version": 5, "config": {
        "compression.type": "zstd", "inter.broker.protocol.version": "2.0"}}),
    ("log-4.0-coordinator-unauthorized", {"broker_version": "4.0", "config": {},
                                          "origin": "coordinator",
                                          "transactional_id_authorized": False}),
    ("log-4.0-first-offset-noresync", {"broker_version": "4.0", "first_offset": 1000,
                                       "resync": False, "config": {
                                           "message.timestamp.before.max.ms": "1000"}}),
    ("log-3.9-acks2", {"broker_version": "3.9", "acks": 2, "config": {}}),
    ("log-3.9-pv2", {"broker_version": "3.9", "produce_version": 2, "config": {
        "message.timestamp.difference.max.ms": "1000"}}),
    ("producer-stream-4.0", {"broker_version": "4.0", "source": "producer", "config": {
        "cleanup.policy": "compact"}}),
    # a record policy's failures injected where the broker would run it (both engines)
    ("log-4.0-policy-kip940", {"broker_version": "4.0", "policy": "kip-940", "config": {}}),
    ("log-3.9-policy-kip729-compact", {"broker_version": "3.9", "policy": "kip-729",
                                       "config": {"cleanup.policy": "compact"}}),
    ("log-4.0-policy-kip686-bounds", {"broker_version": "4.0", "policy": "kip-686", "config": {
        "message.timestamp.before.max.ms": "3600000"}}),
]
#: log setups per group (rotating through the list, so every setup sees every kind of input
#: over a run while a case costs a few of them, not all)
LOG_PER_GROUP = 3
#: every how many cases one is judged again after its group ran (the history oracle)
HISTORY_EVERY = 2
#: checks whose verdict may legitimately not repeat (none: a fresh validator has no state)
_HISTORY_EXEMPT: frozenset[str] = frozenset()
#: every how many groups the C kernels are compared with the Python references
KERNEL_EVERY = 8
#: every how many groups ``read_log`` reads the group's bytes from a segment file
READ_LOG_EVERY = 16
#: every how many groups ``decode_records`` (the bulk path) is held equal to ``decode_batches``
BULK_EVERY = 2


# =============================================================================================
# Running inputs through the engines
# =============================================================================================

class CaseTimeout(BaseException):
    """Raised by SIGALRM when a case overruns (a BaseException: code under test catching
    ``Exception`` cannot swallow it)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`CaseTimeout` in the block after ``seconds`` (main thread only; elsewhere
    the caller measures the time afterwards)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Finding:
    """A crash, hang, mismatch or invalid verdict, with what is needed to replay it."""

    kind: str  # crash | hang | mismatch | invalid
    stage: str
    signature: str
    message: str
    case: int | None = None
    input: bytes | None = None
    pieces: list[bytes] | None = None  # the log stream, when the input alone does not show it
    ops: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self, run_seed: int | None = None) -> dict[str, Any]:
        return {"format": FORMAT, "kind": self.kind, "stage": self.stage,
                "signature": self.signature, "message": self.message, "seed": run_seed,
                "case": self.case, "ops": self.ops,
                "input": None if self.input is None else self.input.hex(),
                "pieces": None if self.pieces is None else [p.hex() for p in self.pieces],
                "details": self.details}


def _crash_signature(stage: str, exc: BaseException) -> tuple[str, str]:
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f for f in reversed(tb) if "kqlab" in f.filename), tb[-1] if tb else None)
    loc = f"{Path(where.filename).name}:{where.lineno}:{where.name}" if where else "?"
    text = "".join(traceback.format_exception(exc)[-6:])
    return f"{stage}|{type(exc).__name__}|{loc}", text


_RESOLVED: dict[int, TopicConfig] = {}


def _setup_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A setup's keyword arguments with its topic config resolved once (``TopicConfig``
    parsing is a visible share of a case's cost when done per call)."""
    kw = dict(kwargs)
    key = id(kwargs)
    cfg = _RESOLVED.get(key)
    if cfg is None:
        cfg = _RESOLVED[key] = TopicConfig.from_dict(kw.get("config"), kw.get("broker_version"))
    kw["config"] = cfg
    kw.pop("broker_version", None)
    return kw


_NUMBER = re.compile(r"-?\d+")


_LONG_NUMBER = re.compile(r"\d{19}")  # a number beyond the 64-bit range has 19+ digits


def numbers_fit_long(*texts: str | None) -> bool:
    """Java renders every number in a broker text from an ``int`` or ``long``: a Python int
    outside the 64-bit range in a text means some arithmetic forgot to wrap."""
    joined = " ".join(t for t in texts if t)
    if not _LONG_NUMBER.search(joined):  # the common case, one scan
        return True
    return all(LONG_MIN <= int(m) <= LONG_MAX for m in _NUMBER.findall(joined))


def check_outcome_invariants(out: Any) -> str | None:
    """What a byte-validator verdict must satisfy whatever the input; None when it does."""
    try:
        err = error_for_code(out.error_code)
    except KeyError:
        return f"unknown error code {out.error_code}"
    if err.name != out.error_name:
        return f"error_name {out.error_name} for code {out.error_code}"
    if out.error_code == 0 and (out.record_errors or out.error_message):
        return "accepted batch with record_errors or an error_message"
    if out.record_errors and out.error_code not in (32, 87):
        return f"record_errors with code {out.error_code}"
    if out.error_code != 0 and not out.check:
        return "rejection without a check"
    if not numbers_fit_long(out.error_message, out.detail, *(m for _, m in out.record_errors)):
        return f"a number beyond the 64-bit range in a message ({out.check})"
    return None


def run_producer(data: bytes, setups: Sequence[tuple[str, dict[str, Any]]],
                 findings: list[Finding], stats: Counter | None = None,
                 primary: bool = False) -> dict[str, Any] | None:
    """The byte validator on ``data`` as one request (``source="producer"``); returns the
    first setup's verdict (its :data:`_VERDICT_FIELDS`)."""
    first: dict[str, Any] | None = None
    for k, (name, kwargs) in enumerate(setups):
        kw = _setup_kwargs(kwargs)
        config = kw.pop("config", None)
        try:
            out = PartitionValidator(TOPIC, PARTITION, config, now=NOW, source="producer",
                                     **kw).validate(data)
        except CaseTimeout:
            raise
        except Exception as exc:
            sig, text = _crash_signature(name, exc)
            findings.append(Finding("crash", name, sig, text))
            continue
        bad = check_outcome_invariants(out)
        if bad:
            findings.append(Finding("invalid", name, f"{name}|{bad}", bad,
                                    details={"outcome": out.to_dict()}))
        if k == 0:
            first = _verdict_of(out)
        if stats is not None and primary and k == 0:
            stats[f"verdict|{out.error_code} {out.error_name}"] += 1
            stats[f"check|{out.check}"] += 1
    return first


def _verdict_of(out: Any) -> dict[str, Any]:
    d = out.to_dict()
    return {k: d[k] for k in _VERDICT_FIELDS}


def primary_verdict(data: bytes) -> dict[str, Any]:
    """The primary setup's verdict on ``data`` (a fresh validator: no state carried)."""
    kw = _setup_kwargs(PRODUCER_SETUPS[0][1])
    config = kw.pop("config")
    return _verdict_of(PartitionValidator(TOPIC, PARTITION, config, now=NOW,
                                          source="producer", **kw).validate(data))


def check_history(data: bytes, before: dict[str, Any], history: list[bytes],
                  findings: list[Finding], stats: Counter | None = None) -> None:
    """The same input judged again after other inputs went through decoders and validators
    must get the same verdict: state left behind in a module (a shared codec context, a
    cache) would otherwise make a verdict depend on what the process saw before."""
    after = primary_verdict(data)
    if stats is not None:
        stats["history-checks"] += 1
    if after != before:
        cols = ",".join(k for k in _VERDICT_FIELDS if after[k] != before[k])
        findings.append(Finding(
            "mismatch", "history", f"history|{before['check']}->{after['check']}|{cols}",
            f"the verdict changed in {cols} after other batches were decoded and validated",
            details={"history": [p.hex() for p in history], "expected": before, "got": after}))


_OFFSET_NUMBER = re.compile(r"(offset[ =])-?\d+")


# -- metamorphic relations: bytes the broker never validates must not change a verdict --------

#: (name, description) of the relations; each case checks one (rotating), on its first batch
METAMORPHIC = [
    ("partition-leader-epoch", "partitionLeaderEpoch (bytes 12-15, outside the CRC) is "
                               "overwritten by the broker, any value accepted (spec 1.2)"),
    ("max-timestamp", "maxTimestamp is not validated without the LogAppendTime bit (1.2)"),
    ("delete-horizon-bit", "the delete-horizon attribute bit is passed through (1.3)"),
    ("unused-attribute-bits", "attribute bits 7-15 are ignored (1.3)"),
    ("record-attributes", "a record's attributes byte is unused, any value accepted (1.4)"),
]
_VERDICT_FIELDS = ("error_code", "error_name", "error_message", "record_errors", "check",
                   "detail")


def metamorphic_variant(data: bytes, relation: str, rng: random.Random) -> bytes | None:
    """``data`` with one never-validated field of its first batch changed (CRC kept valid),
    or None when the relation does not apply (not a whole v2 batch with a valid CRC)."""
    if len(data) < 61 or data[16] != 2:
        return None
    end = 12 + struct.unpack_from(">i", data, 8)[0]
    if end < 61 or end > len(data):
        return None
    if crc32c(data[21:end]) != struct.unpack_from(">I", data, 17)[0]:
        return None
    b = bytearray(data)
    if relation == "partition-leader-epoch":
        struct.pack_into(">i", b, 12, rng.choice([0, 1, -1, INT_MAX, INT_MIN,
                                                  rng.randrange(INT_MIN, INT_MAX)]))
        return bytes(b)
    if relation == "max-timestamp":
        if b[22] & 0x08:
            return None
        struct.pack_into(">q", b, 35, rng.choice([-1, 0, LONG_MIN, LONG_MAX, NOW + 1,
                                                  rng.randrange(LONG_MIN, LONG_MAX)]))
    elif relation == "delete-horizon-bit":
        b[22] ^= 0x40
    elif relation == "record-attributes":  # the first record of an uncompressed batch
        if b[22] & 0x07:
            return None
        try:
            _, pos = decode_varint(b, 61, end)
        except VarintError:
            return None
        if pos >= end:
            return None
        b[pos] = rng.choice([b[pos] ^ 0xFF, 0x01, 0x80, rng.randrange(256)])
        if b == bytearray(data):
            return None
    else:
        if rng.random() < 0.5:
            b[22] ^= 0x80
        else:
            b[21] ^= 1 << rng.randrange(8)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:end])))
    return bytes(b)


def run_metamorphic(data: bytes, index: int, setup: tuple[str, dict[str, Any]],
                    findings: list[Finding], stats: Counter | None = None) -> None:
    """The primary setup's verdict on ``data`` and on a variant that only changes what the
    broker never validates must be the same: an oracle that does not trust either engine."""
    name, desc = METAMORPHIC[index % len(METAMORPHIC)]
    variant = metamorphic_variant(data, name, random.Random(index))
    if variant is None:
        return
    if stats is not None:
        stats[f"metamorphic|{name}"] += 1
    kw = _setup_kwargs(setup[1])
    config = kw.pop("config")
    outs = [PartitionValidator(TOPIC, PARTITION, config, now=NOW, source="producer", **kw)
            .validate(x).to_dict() for x in (data, variant)]
    a, b = ({k: o[k] for k in _VERDICT_FIELDS} for o in outs)
    if a != b:
        cols = ",".join(k for k in _VERDICT_FIELDS if a[k] != b[k])
        findings.append(Finding("mismatch", f"metamorphic|{name}",
                                f"metamorphic|{name}|{a['check']}->{b['check']}|{cols}",
                                f"{desc}, yet the verdict changed in {cols}",
                                details={"variant": variant.hex(), "expected": a, "got": b}))


def _without_offsets(row: dict[str, Any]) -> dict[str, Any]:
    """A stage-F row with the offsets it quotes blanked (in its text and its parameters)."""
    def blank(text: Any) -> Any:
        return _OFFSET_NUMBER.sub(r"\1#", text) if isinstance(text, str) else text

    params = row.get("params")
    if params:
        params = [(k, blank(v)) for k, v in params if k != "offset"]
    return {**row, "detail": blank(row.get("detail")), "params": params}


def _rows_equal_plain(g: dict[str, Any], w: dict[str, Any], after_unknown: bool) -> str | None:
    """The ``raw``-less contract: equal, undetermined, or (after an undetermined row) a
    stage-F row whose offsets in ``detail`` may differ."""
    if g["check"] == UNDETERMINED:
        if g["error_code"] is not None or g["error_name"] is not None or not g["detail"]:
            return "undetermined row with a code or without a reason"
        return None
    if after_unknown and (g["check"] or "").startswith("F") and \
            _without_offsets(g) == _without_offsets(w):
        return None
    if g == w:
        return None
    return ",".join(k for k in w if g.get(k) != w.get(k))


def _verdict_invariants(rows: list[dict[str, Any]], plain: bool) -> str | None:
    for r in rows:
        if r["error_code"] is None:
            if plain and r["check"] == UNDETERMINED:
                continue
            return "row without an error code"
        try:
            err = error_for_code(r["error_code"])
        except KeyError:
            return f"unknown error code {r['error_code']}"
        if err.name != r["error_name"]:
            return f"error_name {r['error_name']} for code {r['error_code']}"
        if not numbers_fit_long(r["error_message"], r["detail"],
                                *(e["message"] for e in r["record_errors"] or ())):
            return f"a number beyond the 64-bit range in a message ({r['check']})"
    return None


@dataclass
class LogResult:
    """Per piece (batch row) the first problem found, per setup."""

    findings: list[Finding] = field(default_factory=list)
    #: (piece index, finding) for mismatches / invalid rows, to attribute them to cases
    row_findings: list[tuple[int, Finding]] = field(default_factory=list)
    stats: Counter = field(default_factory=Counter)


def run_log(pieces: list[bytes], setups: Sequence[tuple[str, dict[str, Any]]],
            stats: Counter | None = None, bulk: bool = True) -> LogResult:
    """Decode ``pieces`` and compare the two engines on the stream under each setup.

    Exceptions propagate (the caller attributes them to cases); mismatching rows are returned
    with their piece index.
    """
    res = LogResult()
    st = res.stats if stats is None else stats
    decoded = decode_batches(pieces, topic=TOPIC, partition=PARTITION)
    if decoded.batches.num_rows != len(pieces):
        res.findings.append(Finding("invalid", "decode", "decode|row-count",
                                    f"{decoded.batches.num_rows} rows for {len(pieces)} batches"))
        return res
    if bulk:
        bulk_d = decode_records(b"".join(pieces), topic=TOPIC, partition=PARTITION)
        same_records = bulk_d.records.equals(decoded.records)
        same_batches = bulk_d.batches.drop_columns(["position"]).equals(
            decoded.batches.drop_columns(["position"]))
        if not (same_records and same_batches and not bulk_d.issues):
            which = "records" if not same_records else "batches" if not same_batches \
                else "issues"
            res.findings.append(Finding(
                "mismatch", "decode", f"decode|bulk-vs-batches|{which}",
                f"decode_records and decode_batches disagree on {which}",
                details=_table_diff(decoded, bulk_d, which, pieces)))
    for name, kwargs in setups:
        kw = _setup_kwargs(kwargs)
        config = kw.pop("config", None)
        profile = kw.pop("policy", None)
        policy = None if profile is None else random_policy(profile, pieces,
                                                            decoded.records.num_rows)
        if policy is None:
            want_t = validate_batches(pieces, topic=TOPIC, partition=PARTITION, config=config,
                                      now=NOW, **kw)
        else:  # validate_batches takes no policy: the same loop, each batch with its share
            v = PartitionValidator(TOPIC, PARTITION, config, now=NOW, **kw)
            shares = policy_by_batch(decoded.records, decoded.batches, policy)
            want_t = outcomes_table([v.validate(p, policy=shares[i])
                                     for i, p in enumerate(pieces)], TOPIC, PARTITION)
        got_t = broker_verdicts(decoded.records, decoded.batches, config, now=NOW, raw=pieces,
                                policy=policy, **kw)
        plain_ok = kw.get("source", "log") == "log" and kw.get("produce_version", 9) >= 3
        plain_t = broker_verdicts(decoded.records, decoded.batches, config, now=NOW,
                                  policy=policy, **kw) if plain_ok else None
        want = want_t.to_pylist()
        st["log-rows"] += len(want)
        for w in want:
            st[f"log-verdict|{w['error_code']} {w['error_name']}"] += 1
            st[f"log-check|{w['check']}"] += 1
        bad = _verdict_invariants(want, False)
        if bad:
            res.findings.append(Finding("invalid", f"{name}|validate_batches",
                                        f"{name}|validate_batches|{bad}", bad))
        if not got_t.equals(want_t):
            got = got_t.to_pylist()
            if len(got) != len(want):
                res.findings.append(Finding("mismatch", f"{name}|raw", f"{name}|raw|row-count",
                                            f"{len(got)} rows, expected {len(want)}"))
            for i, (g, w) in enumerate(zip(got, want, strict=False)):
                if g != w:
                    cols = ",".join(k for k in w if g.get(k) != w.get(k))
                    res.row_findings.append((i, Finding(
                        "mismatch", f"{name}|raw", f"{name}|raw|{w['check']}->{g['check']}|"
                        f"{cols}", f"broker_verdicts(raw=) differs from validate_batches in "
                        f"{cols}", details={"row": i, "expected": w, "got": g})))
        if plain_t is not None:
            plain = plain_t.to_pylist()
            bad = _verdict_invariants(plain, True)
            if bad:
                res.findings.append(Finding("invalid", f"{name}|plain",
                                            f"{name}|plain|{bad}", bad))
            if len(plain) != len(want):
                res.findings.append(Finding("mismatch", f"{name}|plain",
                                            f"{name}|plain|row-count",
                                            f"{len(plain)} rows, expected {len(want)}"))
                continue
            after_unknown = False
            for i, (g, w) in enumerate(zip(plain, want, strict=True)):
                if g["check"] == UNDETERMINED:
                    st[f"undetermined|{(g['detail'] or '')[:40]}"] += 1
                cols = _rows_equal_plain(g, w, after_unknown)
                if g["check"] == UNDETERMINED:
                    after_unknown = True
                if cols is not None:
                    res.row_findings.append((i, Finding(
                        "mismatch", f"{name}|plain", f"{name}|plain|{w['check']}->{g['check']}"
                        f"|{cols}", f"broker_verdicts without raw differs in {cols}",
                        details={"row": i, "expected": w, "got": g})))
    return res


def _table_diff(a: Any, b: Any, which: str, pieces: list[bytes]) -> dict[str, Any]:
    """The first differing rows of two decodes, and whether decoding again agrees (a
    difference that vanishes on a second try is state or nondeterminism, not the bytes)."""
    if which == "issues":
        return {"issues": [str(i) for i in b.issues]}
    ta, tb = (getattr(x, which) for x in (a, b))
    if which == "batches":
        ta, tb = ta.drop_columns(["position"]), tb.drop_columns(["position"])
    ra, rb = ta.to_pylist(), tb.to_pylist()
    rows = [{"row": i, "batches_path": {k: repr(x[k]) for k in x if x[k] != y.get(k)},
             "bulk_path": {k: repr(y[k]) for k in x if x[k] != y.get(k)}}
            for i, (x, y) in enumerate(zip(ra, rb, strict=False)) if x != y][:5]
    again = decode_batches(pieces, topic=TOPIC, partition=PARTITION)
    out: dict[str, Any] = {"rows": rows, "row_counts": [len(ra), len(rb)],
                           "same_on_second_decode": getattr(again, which).equals(
                               getattr(a, which))}
    if which == "batches" and rows and rows[0]["row"] < len(pieces):
        out["batch"] = pieces[rows[0]["row"]].hex()
    return out


def random_policy(profile: str, pieces: list[bytes], n_records: int) -> RecordPolicy:
    """A record policy failing about one record in five, deterministic in the input (so a
    replay sees the same failures); messages with quotes and non-ASCII, as users write."""
    rng = random.Random(zlib.crc32(b"".join(pieces[:2])) + n_records)
    texts = ["amount must be positive", "status isn't one of NEW, PAID", "trace-id fehlt — bitte",
             "field 'a.b' = 3 > 2"]
    return RecordPolicy(profile, [rng.choice(texts) if rng.random() < 0.2 else None
                                  for _ in range(n_records)])


def _same_parsed(a: Any, b: Any) -> str | None:
    for name in a._fields:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is None or y is None or x.dtype != y.dtype or not np.array_equal(x, y):
                return name
        elif name == "batch_error":
            if [None if e is None else tuple(e) for e in x] != \
                    [None if e is None else tuple(e) for e in y]:
                return name
        elif (bytes(x) if x is not None else None) != (bytes(y) if y is not None else None):
            return name
    return None


def run_kernels(buffers: list[bytes], pieces: list[bytes]) -> list[Finding]:
    """The C kernels (when built) against the pure-Python references."""
    if IMPLEMENTATION != "c":
        return []
    found = []
    for buf in buffers:
        a, b = scan_batches(buf, 0, len(buf)), scan_batches_py(buf, 0, len(buf))
        same = len(a) == len(b) and all(
            (np.array_equal(x, y) and x.dtype == y.dtype) if isinstance(x, np.ndarray)
            else x == y for x, y in zip(a, b, strict=True))
        if not same:
            found.append(Finding("mismatch", "kernel|scan_batches", "kernel|scan_batches",
                                 "C scan_batches differs from the Python reference",
                                 input=buf))
    regions, counts = [], []
    for p in pieces:
        if len(p) >= 61 and p[16] == 2 and p[22] & 7 <= 4:
            region, _ = records_region(memoryview(p)[61:], p[22] & 7)
            regions.append(bytes(region))
            counts.append(struct.unpack_from(">i", p, 57)[0])
    if regions:
        for strict in (True, False):
            c = parse_records(regions, counts, strict, True)
            py = parse_records_py(regions, counts, strict, True)
            diff = _same_parsed(c, py)
            if diff:
                found.append(Finding("mismatch", "kernel|parse_records",
                                     f"kernel|parse_records|strict={strict}|{diff}",
                                     f"C parse_records differs in {diff} (strict={strict})",
                                     pieces=list(pieces)))
    return found


def run_read_log(buf: bytes) -> list[Finding]:
    """``read_log`` on a segment file holding ``buf`` against ``decode_records(buf)``."""
    with tempfile.TemporaryDirectory(prefix="kqlab-fuzz-") as tmp:
        d = Path(tmp) / f"{TOPIC}-{PARTITION}"
        d.mkdir()
        (d / "00000000000000000000.log").write_bytes(buf)
        got = read_log(d)
    want = decode_records(buf, topic=TOPIC, partition=PARTITION)

    def issues(xs: list[LogIssue]) -> list[tuple]:
        return [(i.kind, i.position, i.message, i.bytes) for i in xs]

    if got.records.equals(want.records) and got.batches.equals(want.batches) and \
            issues(got.issues) == issues(want.issues):
        return []
    what = ("records" if not got.records.equals(want.records) else
            "batches" if not got.batches.equals(want.batches) else "issues")
    return [Finding("mismatch", "read_log", f"read_log|{what}",
                    f"read_log and decode_records disagree on {what}", input=buf)]


def scan_pieces(data: bytes) -> list[bytes]:
    return [item[1] for item in scan_buffer(data) if not isinstance(item, LogIssue)]


# =============================================================================================
# The driver: groups of cases, isolation of findings, summaries
# =============================================================================================

@dataclass
class Case:
    index: int
    data: bytes
    ops: list[str]
    pieces: list[bytes] = field(default_factory=list)
    first: dict[str, Any] | None = None  # the primary verdict before the group ran


class Collector:
    """Counts findings by signature and keeps the first few in full."""

    def __init__(self) -> None:
        self.stats: Counter = Counter()
        self.counts: Counter = Counter()  # (kind, signature) -> n
        self.kept: list[Finding] = []
        self._kept_per: Counter = Counter()
        #: groups split case by case, per failure signature (bounded: see process_group)
        self.isolations: Counter = Counter()

    def add(self, f: Finding) -> None:
        key = (f.kind, f.signature)
        self.counts[key] += 1
        if self._kept_per[key] < KEEP_PER_SIGNATURE:
            self._kept_per[key] += 1
            self.kept.append(f)

    def wants(self, f: Finding) -> bool:
        """Whether ``f`` would be kept in full (rather than only counted)."""
        return self._kept_per[(f.kind, f.signature)] < KEEP_PER_SIGNATURE

    def merge(self, other: dict[str, Any]) -> None:
        self.stats.update(other["stats"])
        for (kind, sig), n in other["counts"]:
            self.counts[(kind, sig)] += n
        for f in other["kept"]:
            key = (f.kind, f.signature)
            if self._kept_per[key] < KEEP_PER_SIGNATURE:
                self._kept_per[key] += 1
                self.kept.append(f)

    def export(self) -> dict[str, Any]:
        return {"stats": self.stats, "counts": list(self.counts.items()), "kept": self.kept}


def _attribute(f: Finding, case: Case) -> Finding:
    f.case, f.input, f.ops = case.index, case.data, case.ops
    return f


def group_log_setups(group_no: int) -> list[tuple[str, dict[str, Any]]]:
    """The log setups of group ``group_no``: :data:`LOG_PER_GROUP` of them, rotating."""
    n = len(LOG_SETUPS)
    return [LOG_SETUPS[(group_no * LOG_PER_GROUP + j) % n] for j in range(min(LOG_PER_GROUP, n))]


def process_group(cases: list[Case], col: Collector, group_no: int,
                  producer_setups: Sequence[tuple[str, dict[str, Any]]] | None = None,
                  log_setups: Sequence[tuple[str, dict[str, Any]]] | None = None) -> None:
    """Run a group of cases through every stage, attributing each finding to its case.

    ``None`` setups mean the rotating selection of a fuzzing run; a replay passes them all.
    """
    if log_setups is None:
        log_setups = group_log_setups(group_no)
    beat = _BEAT[0]
    # -- per case: the producer-source validator and the scan --------------------------------
    for c in cases:
        beat(c.index, c.index)
        if producer_setups is None:
            k = c.index % (len(PRODUCER_SETUPS) - 1)
            extra = [PRODUCER_SETUPS[1 + (k + j) % (len(PRODUCER_SETUPS) - 1)]
                     for j in range(PRODUCER_PER_CASE)]
            setups = [PRODUCER_SETUPS[0], *extra]
        else:
            setups = list(producer_setups)
        found: list[Finding] = []
        t0 = time.perf_counter()
        try:
            with deadline(CASE_SECONDS):
                c.first = run_producer(c.data, setups, found, col.stats,
                                       primary=producer_setups is None)
                if setups:
                    run_metamorphic(c.data, c.index, setups[0], found, col.stats)
                c.pieces = scan_pieces(c.data)
        except CaseTimeout:
            found.append(Finding("hang", "producer", "producer|timeout",
                                 f"over {CASE_SECONDS} s in the producer-source validator"))
        except Exception as exc:  # the metamorphic variant or the scan (validators report
            sig, text = _crash_signature("case", exc)  # their own crashes per setup)
            found.append(Finding("crash", "case", sig, text))
        if time.perf_counter() - t0 > CASE_SECONDS and not any(f.kind == "hang" for f in found):
            found.append(Finding("hang", "producer", "producer|slow",
                                 f"{time.perf_counter() - t0:.1f} s in the producer stage"))
        for f in found:
            col.add(_attribute(f, c))
    # -- the group: decode, both engines on every log setup -----------------------------------
    pieces = [p for c in cases for p in c.pieces]
    owner = [c for c in cases for _ in c.pieces]
    if not pieces:
        return
    beat(cases[0].index, cases[-1].index)
    t0 = time.perf_counter()
    try:
        # a group gets CASE_SECONDS per 64 cases; past that its cases are re-run one by one,
        # each with CASE_SECONDS, to tell a hang from a busy machine
        with deadline(CASE_SECONDS * max(1, len(cases) // 64)):
            res = run_log(pieces, log_setups, col.stats, bulk=group_no % BULK_EVERY == 0)
            extra_findings: list[Finding] = []
            if group_no % KERNEL_EVERY == 0:
                extra_findings += run_kernels([c.data for c in cases], pieces)
            if group_no % READ_LOG_EVERY == 0:
                extra_findings += run_read_log(b"".join(c.data for c in cases))
    except (CaseTimeout, Exception) as exc:
        if len(cases) == 1:
            if isinstance(exc, CaseTimeout):
                col.add(_attribute(Finding("hang", "log", "log|timeout",
                                           f"over {CASE_SECONDS} s decoding / validating the "
                                           "stream"), cases[0]))
            else:
                sig, text = _crash_signature("log", exc)
                col.add(_attribute(Finding("crash", "log", sig, text,
                                           pieces=list(pieces)), cases[0]))
            return
        sig, text = _crash_signature("log", exc) if not isinstance(exc, CaseTimeout) else \
            ("log|timeout", "")
        if col.isolations[sig] >= KEEP_PER_SIGNATURE:
            # a known failure: re-running 64 cases alone again would only cost time
            kind = "hang" if isinstance(exc, CaseTimeout) else "crash"
            col.add(Finding(kind, "log-group", sig, text, case=cases[0].index,
                            pieces=list(pieces)))
            col.stats["groups-not-isolated"] += 1
            return
        col.isolations[sig] += 1
        _isolate(cases, col, group_no, log_setups, exc)
        return
    for c in cases:
        if c.first is not None and c.index % HISTORY_EVERY == 0 and \
                c.first["check"] not in _HISTORY_EXEMPT:
            found = []
            try:
                with deadline(CASE_SECONDS):
                    check_history(c.data, c.first, pieces, found, col.stats)
            except CaseTimeout:
                found.append(Finding("hang", "history", "history|timeout",
                                     f"over {CASE_SECONDS} s validating again"))
            except Exception as exc:
                sig, text = _crash_signature("history", exc)
                found.append(Finding("crash", "history", sig, text))
            for f in found:
                col.add(_attribute(f, c))
    slow = time.perf_counter() - t0 > CASE_SECONDS * len(cases)
    if slow:
        col.stats["slow-groups"] += 1
    for f in res.findings + extra_findings:
        if len(cases) == 1:
            _attribute(f, cases[0])
        else:
            if f.input is None and f.pieces is None:
                f.pieces = list(pieces)
            f.details.setdefault("cases", [cases[0].index, cases[-1].index])
        col.add(f)
    done: set[tuple[int, str]] = set()
    for i, f in res.row_findings:
        case = owner[i]
        key = (case.index, f.signature)
        if key in done:
            continue
        done.add(key)
        if col.wants(f):  # localising costs reruns: only for findings kept in full
            f = _localise(f, case, cases, pieces, owner, log_setups)
        else:
            _attribute(f, case)
        col.add(f)


def _isolate(cases: list[Case], col: Collector, group_no: int,
             log_setups: Sequence[tuple[str, dict[str, Any]]], exc: BaseException) -> None:
    """A group failed as a whole: run its cases one by one to find the culprit(s)."""
    before = sum(col.counts.values())
    for c in cases:
        sub = Collector()
        process_group([Case(c.index, c.data, c.ops, c.pieces)], sub, group_no,
                      producer_setups=[], log_setups=log_setups)
        for f in sub.kept:
            col.add(f)
        for key, n in sub.counts.items():
            col.counts[key] += n - min(n, sub._kept_per[key])
    if sum(col.counts.values()) == before:  # only the group as a whole fails
        pieces = [p for c in cases for p in c.pieces]
        kind = "hang" if isinstance(exc, CaseTimeout) else "crash"
        if kind == "hang":
            col.stats["slow-groups"] += 1  # every case alone was fast: the machine was busy
            return
        sig, text = _crash_signature("log-group", exc)
        col.add(Finding(kind, "log-group", sig, text, case=cases[0].index, pieces=pieces))


def _localise(f: Finding, case: Case, cases: list[Case], pieces: list[bytes],
              owner: list[Case], log_setups: Sequence[tuple[str, dict[str, Any]]]) -> Finding:
    """Attribute a mismatching row to its case: alone if it shows alone, else the shortest
    stream prefix (greedily reduced) that still shows it."""
    setup = [s for s in log_setups if f.stage.startswith(s[0] + "|")]
    _attribute(f, case)
    if not setup or _LOCALISE["seconds"] > LOCALISE_BUDGET:
        f.pieces = list(pieces[:max(i for i, c in enumerate(owner) if c is case) + 1])
        f.details["localised"] = False
        return f
    t0 = time.perf_counter()
    try:
        return _localise_in(f, case, pieces, owner, setup)
    finally:
        _LOCALISE["seconds"] += time.perf_counter() - t0


#: seconds spent localising mismatches in this process (re-running the engines on smaller
#: streams); past :data:`LOCALISE_BUDGET` findings keep their whole stream prefix instead
_LOCALISE = {"seconds": 0.0}
LOCALISE_BUDGET = 30.0
#: reruns per localisation at most
LOCALISE_TRIES = 40


def _localise_in(f: Finding, case: Case, pieces: list[bytes], owner: list[Case],
                 setup: list[tuple[str, dict[str, Any]]]) -> Finding:
    tries = [0]

    def shows(ps: list[bytes]) -> bool:
        tries[0] += 1
        try:
            with deadline(CASE_SECONDS * 2):
                r = run_log(ps, setup)
        except (CaseTimeout, Exception):
            return False
        return any(g.signature == f.signature for _, g in r.row_findings)

    row = f.details.get("row", 0)
    if row < len(pieces) and shows([pieces[row]]):  # the batch alone shows it
        f.pieces = [pieces[row]]
        return f
    if shows(case.pieces):
        return f
    stream = pieces[:row + 1]
    if not shows(stream):
        f.pieces = stream
        f.details["reproduced"] = False
        return f
    # ddmin over the batches before the mismatching one (complements of ever finer chunks)
    prefix, target = stream[:-1], stream[-1]
    k = 2
    while prefix and tries[0] < LOCALISE_TRIES:
        size = max(1, -(-len(prefix) // k))
        chunks = [prefix[j:j + size] for j in range(0, len(prefix), size)]
        for j in range(len(chunks)):
            trial = [p for m, c in enumerate(chunks) if m != j for p in c]
            if shows([*trial, target]):
                prefix, k = trial, max(k - 1, 2)
                break
        else:
            if size == 1:
                break
            k = min(k * 2, len(prefix))
    f.pieces = [*prefix, target]
    f.details["row"] = len(prefix)
    return f


#: the worker's heartbeat: ``beat(first, last)`` names the cases being worked on (the
#: watchdog blames them if the process dies or stops beating); a no-op in process
_BEAT: list[Callable[[int, int], None]] = [lambda first, last: None]


def run_range(run_seed: int, start: int, stop: int, corpus: list[Seed]) -> Collector:
    """Generate and run cases ``start <= i < stop``."""
    col = Collector()
    group: list[Case] = []
    beat = _BEAT[0]
    for i in range(start, stop):
        beat(i, i)
        try:
            with deadline(CASE_SECONDS):
                data, ops = make_case(run_seed, i, corpus)
        except (CaseTimeout, Exception) as exc:
            sig, text = _crash_signature("generator", exc)
            col.add(Finding("crash", "generator", sig, text, case=i))
            continue
        group.append(Case(i, data, ops))
        col.stats["cases"] += 1
        if len(group) == GROUP or i == stop - 1:
            process_group(group, col, group[0].index // GROUP)
            group = []
    if group:
        process_group(group, col, group[0].index // GROUP)
    return col


_CORPUS: list[Seed] | None = None


def corpus() -> list[Seed]:
    """The seed corpus (built once per process)."""
    global _CORPUS
    if _CORPUS is None:
        _CORPUS = build_corpus()
    return _CORPUS


# -- multiprocessing ---------------------------------------------------------------------------

def _worker(slot: int, run_seed: int, tasks: Any, results: Any, beat: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    seeds = corpus()

    def heartbeat(first: int, last: int) -> None:
        beat[3 * slot] = first
        beat[3 * slot + 1] = last
        beat[3 * slot + 2] = time.time()

    _BEAT[0] = heartbeat

    while True:
        task = tasks.get()
        if task is None:
            return
        start, stop = task
        col = run_range(run_seed, start, stop, seeds)
        beat[3 * slot + 2] = time.time()
        results.put((slot, start, stop, col.export()))


class _Pool:
    """Worker processes with a watchdog: a worker that dies or stops beating is replaced,
    its current case is recorded as a crash / hang and the rest of its chunk re-queued."""

    def __init__(self, jobs: int, run_seed: int):
        self.ctx = mp.get_context("fork")
        self.jobs = jobs
        self.seed = run_seed
        self.results = self.ctx.Queue()
        self.beat = self.ctx.Array("d", 3 * jobs, lock=False)
        self.procs: list[Any] = [None] * jobs
        self.queues: list[Any] = [None] * jobs
        self.busy: list[tuple[int, int] | None] = [None] * jobs
        for s in range(jobs):
            self._start(s)

    def _start(self, slot: int) -> None:
        q = self.ctx.Queue()
        p = self.ctx.Process(target=_worker, args=(slot, self.seed, q, self.results, self.beat),
                             daemon=True)
        p.start()
        self.procs[slot], self.queues[slot], self.busy[slot] = p, q, None
        self.beat[3 * slot:3 * slot + 3] = [-1, -1, time.time()]

    def run(self, chunks: list[tuple[int, int]], col: Collector,
            progress: Callable[[], None]) -> None:
        pending = list(reversed(chunks))
        while pending or any(self.busy):
            for s in range(self.jobs):
                if self.busy[s] is None and pending:
                    task = pending.pop()
                    self.busy[s] = task
                    self.beat[3 * s + 2] = time.time()
                    self.queues[s].put(task)
            try:
                slot, start, stop, part = self.results.get(timeout=0.5)
                if self.busy[slot] == (start, stop):
                    self.busy[slot] = None
                col.merge(part)
            except queue.Empty:
                pass
            now = time.time()
            for s in range(self.jobs):
                task = self.busy[s]
                if task is None:
                    continue
                dead = not self.procs[s].is_alive()
                stuck = now - self.beat[3 * s + 2] > WATCHDOG_SECONDS
                if not (dead or stuck):
                    continue
                with contextlib.suppress(queue.Empty):  # it may have finished just before
                    while True:
                        slot, start, stop, part = self.results.get(timeout=0.2)
                        if self.busy[slot] == (start, stop):
                            self.busy[slot] = None
                        col.merge(part)
                if self.busy[s] is None:
                    continue
                first, last = int(self.beat[3 * s]), int(self.beat[3 * s + 1])
                if not task[0] <= first <= last < task[1]:
                    first = last = task[0]
                kind = "crash" if dead else "hang"
                msg = (f"worker died (exit code {self.procs[s].exitcode})" if dead else
                       f"no progress for {WATCHDOG_SECONDS:.0f} s (stuck outside Python?)")
                inputs = [make_case(self.seed, i, corpus())[0] for i in range(first, last + 1)]
                col.add(Finding(kind, "worker", f"worker|{kind}", msg, case=first,
                                input=inputs[0] if len(inputs) == 1 else None,
                                details={"cases": [first, last],
                                         "inputs": [x.hex() for x in inputs]}))
                col.stats["cases"] += last - first + 1
                if not dead:
                    self.procs[s].kill()
                self.procs[s].join(5)
                # the chunk's results died with the worker: redo all but the blamed cases
                pending += [t for t in ((task[0], first), (last + 1, task[1])) if t[0] < t[1]]
                self._start(s)
            progress()

    def close(self) -> None:
        for s in range(self.jobs):
            with contextlib.suppress(Exception):
                self.queues[s].put(None)
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.kill()


# -- the core entry point --------------------------------------------------------------------

def run_fuzz(cases: int = 1_000_000, seed: int = 1, jobs: int = 2, *,
             save_dir: str | Path | None = None, progress: bool = False,
             start: int = 0) -> dict[str, Any]:
    """Run ``cases`` cases (indices ``start`` ..) and return the summary dict.

    ``jobs=1`` runs in this process (no watchdog for code stuck in C; SIGALRM still applies
    in the main thread).
    """
    t0 = time.perf_counter()
    col = Collector()
    last = [0.0]

    def report(force: bool = False) -> None:
        if not progress:
            return
        now = time.perf_counter()
        if not force and now - last[0] < 2.0:
            return
        last[0] = now
        done = col.stats["cases"]
        rate = done / max(now - t0, 1e-9)
        print(f"[fuzz] {done}/{cases} cases  {rate:,.0f}/s  crashes {_n(col, 'crash')}  "
              f"hangs {_n(col, 'hang')}  mismatches {_n(col, 'mismatch')}  "
              f"invalid {_n(col, 'invalid')}", file=sys.stderr, flush=True)

    chunks = [(a, min(a + CHUNK, start + cases)) for a in range(start, start + cases, CHUNK)]
    if jobs <= 1:
        seeds = corpus()
        for a, b in chunks:
            part = run_range(seed, a, b, seeds)
            col.merge(part.export())
            report()
    else:
        corpus()  # built before forking, shared copy-on-write
        pool = _Pool(jobs, seed)
        try:
            pool.run(chunks, col, report)
        finally:
            pool.close()
    report(force=True)
    seconds = time.perf_counter() - t0
    saved = save_findings(col.kept, save_dir, seed) if save_dir else []
    return summary(col, seconds, seed, jobs, saved)


def _n(col: Collector, kind: str) -> int:
    return sum(n for (k, _), n in col.counts.items() if k == kind)


def summary(col: Collector, seconds: float, seed: int, jobs: int, saved: list[str]
            ) -> dict[str, Any]:
    st = col.stats

    def sub(prefix: str) -> dict[str, int]:
        return dict(sorted(((k[len(prefix):], v) for k, v in st.items()
                            if k.startswith(prefix)), key=lambda kv: -kv[1]))

    cases = st["cases"]
    return {
        "cases": cases,
        "crashes": _n(col, "crash"),
        "hangs": _n(col, "hang"),
        "mismatches": _n(col, "mismatch"),
        "invalid_verdicts": _n(col, "invalid"),
        "verdicts": sub("verdict|"),
        "checks": sub("check|"),
        "metamorphic": sub("metamorphic|"),
        "history_checks": st["history-checks"],
        "log_rows": st["log-rows"],
        "log_verdicts": sub("log-verdict|"),
        "log_checks": sub("log-check|"),
        "undetermined": sub("undetermined|"),
        "slow_groups": st["slow-groups"],
        "groups_not_isolated": st["groups-not-isolated"],
        "signatures": [{"kind": k, "signature": s, "count": n}
                       for (k, s), n in col.counts.most_common()],
        "kernels": IMPLEMENTATION,
        "seed": seed,
        "jobs": jobs,
        "seconds": round(seconds, 2),
        "cases_per_s": round(cases / seconds, 1) if seconds else None,
        "saved": saved,
    }


def save_findings(findings: list[Finding], save_dir: str | Path | None, seed: int) -> list[str]:
    if not save_dir:
        return []
    out = Path(save_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in findings:
        h = hashlib.sha1(f.signature.encode()).hexdigest()[:10]
        p = out / f"{f.kind}-{h}-{f.case}.json"
        p.write_text(json.dumps(f.to_json(seed), indent=1, default=str) + "\n")
        paths.append(str(p))
    return paths


# -- replay ------------------------------------------------------------------------------------

def _guarded(stage: str, fn: Callable[[], list[Finding]], seconds: float) -> list[Finding]:
    """``fn()``'s findings, or the crash / hang it ran into."""
    try:
        with deadline(seconds):
            return fn()
    except CaseTimeout:
        return [Finding("hang", stage, f"{stage}|timeout", f"over {seconds} s")]
    except Exception as exc:
        sig, text = _crash_signature(stage, exc)
        return [Finding("crash", stage, sig, text)]


def replay_input(data: bytes | None, pieces: list[bytes] | None = None,
                 index: int = 0) -> list[Finding]:
    """Every stage, every setup, on one input (and/or a given log stream); the findings.

    ``index`` is the case's index in its run (it picks the metamorphic relation).
    """
    col = Collector()
    if data is not None:
        c = Case(index, data, ["replay"])
        process_group([c], col, 0, producer_setups=PRODUCER_SETUPS, log_setups=LOG_SETUPS)
        for f in _guarded("kernel", lambda: run_kernels([data], c.pieces), CASE_SECONDS) + \
                _guarded("read_log", lambda: run_read_log(data), CASE_SECONDS):
            col.add(f)
    if pieces is not None:
        def stream() -> list[Finding]:
            res = run_log(list(pieces), LOG_SETUPS)
            return res.findings + [g for _, g in res.row_findings]

        for f in _guarded("log", stream, CASE_SECONDS * 3):
            col.add(f)
    return col.kept


def replay_history(data: bytes, history: list[bytes]) -> list[Finding]:
    """Judge ``data``, push ``history`` through the decoders and both engines, judge it again.

    Module state left by earlier work in the process can hide such a finding: replay it in a
    fresh interpreter (``--replay``), as the regression test does.
    """
    def run() -> list[Finding]:
        found: list[Finding] = []
        before = primary_verdict(data)
        run_log(list(history), LOG_SETUPS[:1])
        check_history(data, before, history, found)
        return found

    return _guarded("history", run, CASE_SECONDS * 3)


def load_finding(path: str | Path) -> dict[str, Any]:
    doc = json.loads(Path(path).read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file")
    return doc


def replay_file(path: str | Path) -> list[Finding]:
    """Re-run a saved finding (or a regression seed); returns what is still found."""
    doc = load_finding(path)
    data = bytes.fromhex(doc["input"]) if doc.get("input") is not None else None
    pieces = [bytes.fromhex(p) for p in doc["pieces"]] if doc.get("pieces") else None
    inputs = (doc.get("details") or {}).get("inputs")
    first = doc.get("case") or 0
    history = (doc.get("details") or {}).get("history")
    if data is not None and history is not None:  # the same input before and after others
        return replay_history(data, [bytes.fromhex(p) for p in history])
    if data is None and pieces is None and inputs:  # a worker died in a group: each case
        return [f for k, x in enumerate(inputs) for f in replay_input(bytes.fromhex(x),
                                                                        index=first + k)]
    return replay_input(data, pieces, index=first)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1_000_000, help="cases to run (1 000 000)")
    ap.add_argument("--quick", action="store_true", help="20 000 cases")
    ap.add_argument("--seed", type=int, default=1, help="run seed (cases are reproducible "
                    "from seed and index)")
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (1 = in process)")
    ap.add_argument("--json", action="store_true", help="print the summary as one JSON line "
                    "(last line of stdout)")
    ap.add_argument("--save-dir", help="write each kept finding as a replayable JSON file")
    ap.add_argument("--replay", metavar="FILE", help="re-run one saved finding and exit")
    args = ap.parse_args(argv)
    faulthandler.enable()  # a segfault in a C kernel still prints where it happened
    if args.replay:
        found = replay_file(args.replay)
        for f in found:
            print(json.dumps({k: v for k, v in f.to_json().items() if k != "input"},
                             default=str))
        print(json.dumps({"replay": args.replay, "findings": len(found)}))
        return 1 if found else 0
    n = 20_000 if args.quick else args.cases
    result = run_fuzz(n, args.seed, args.jobs, save_dir=args.save_dir, progress=True,
                      start=args.start)
    if not args.json:
        for s in result["signatures"][:20]:
            print(f"{s['kind']:8} {s['count']:8}  {s['signature']}", file=sys.stderr)
    print(json.dumps(result, default=str) if args.json else json.dumps(result, indent=1,
                                                                      default=str))
    bad = result["crashes"] + result["hangs"] + result["mismatches"] + \
        result["invalid_verdicts"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
