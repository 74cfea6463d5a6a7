"""A minimal Kafka protocol client over a raw socket: exact produce bytes, no client library.

Why: kqlab's broker verdicts must be checked against the broker itself, and any client library
re-encodes (or refuses) the batches the checks are about.  :class:`WireClient` sends the
``records`` field of a ProduceRequest byte for byte as given and parses the ProduceResponse
(error code, ``error_message``, ``record_errors``, base offset, log append time).  It also speaks
the few APIs the producer-state cases need: ApiVersions (to pick versions both 3.9 and 4.x
accept), InitProducerId, AddPartitionsToTxn and EndTxn.

Encodings follow Kafka's message JSON (``clients/src/main/resources/common/message/*.json``):
versions below an API's first flexible version use INT16-length strings, INT32-length arrays and
bytes and request header v1; flexible versions use compact (unsigned-varint length + 1) forms,
tagged-field sections (always written empty, skipped when read) and request header v2 /
response header v1.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

from kqlab.errors import KqlabError
from kqlab.kafka.varint import encode_unsigned as uvarint  # compact lengths, tag counts

API_PRODUCE = 0
API_FIND_COORDINATOR = 10
API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22
API_ADD_PARTITIONS_TO_TXN = 24
API_END_TXN = 26

#: the first flexible version of each API this client speaks
FIRST_FLEXIBLE = {API_PRODUCE: 9, API_FIND_COORDINATOR: 3, API_VERSIONS: 3, API_INIT_PRODUCER_ID: 2,
                  API_ADD_PARTITIONS_TO_TXN: 3, API_END_TXN: 3}
#: the highest version this client can encode/decode per API
CLIENT_MAX = {API_PRODUCE: 12, API_FIND_COORDINATOR: 3, API_VERSIONS: 0, API_INIT_PRODUCER_ID: 5,
              API_ADD_PARTITIONS_TO_TXN: 3, API_END_TXN: 5}


class WireError(KqlabError):
    """The broker closed the connection or answered something this client cannot read."""


# -- encoding -------------------------------------------------------------------------------
class Writer:
    """Builds one request body; ``flexible`` picks compact forms and tagged sections."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.buf = bytearray()

    def int8(self, v: int) -> Writer:
        self.buf += struct.pack(">b", v)
        return self

    def int16(self, v: int) -> Writer:
        self.buf += struct.pack(">h", v)
        return self

    def int32(self, v: int) -> Writer:
        self.buf += struct.pack(">i", v)
        return self

    def int64(self, v: int) -> Writer:
        self.buf += struct.pack(">q", v)
        return self

    def string(self, s: str | None) -> Writer:
        """A (nullable) string in the version's form."""
        raw = None if s is None else s.encode()
        if self.flexible:
            self.buf += uvarint(0 if raw is None else len(raw) + 1)
        else:
            self.buf += struct.pack(">h", -1 if raw is None else len(raw))
        if raw is not None:
            self.buf += raw
        return self

    def bytes_(self, b: bytes | None) -> Writer:
        """(Nullable) bytes / RECORDS, exactly as given."""
        if self.flexible:
            self.buf += uvarint(0 if b is None else len(b) + 1)
        else:
            self.buf += struct.pack(">i", -1 if b is None else len(b))
        if b is not None:
            self.buf += b
        return self

    def array_len(self, n: int) -> Writer:
        self.buf += uvarint(n + 1) if self.flexible else struct.pack(">i", n)
        return self

    def tags(self) -> Writer:
        """An empty tagged-field section (flexible versions only)."""
        if self.flexible:
            self.buf += b"\x00"
        return self


class Reader:
    """Reads one response body in the version's form."""

    def __init__(self, data: bytes, flexible: bool) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def _take(self, fmt: str) -> int:
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return int(v)

    def int8(self) -> int:
        return self._take(">b")

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s

    def array_len(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.int32()

    def skip_tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.pos += self.uvarint()


# -- results --------------------------------------------------------------------------------
@dataclass(slots=True)
class ProduceResult:
    """One partition of a ProduceResponse, as the broker sent it."""

    error_code: int
    error_message: str | None
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class ProducerId:
    """What InitProducerId granted."""

    producer_id: int
    producer_epoch: int


class WireClient:
    """One connection to one broker; produce requests may be pipelined (:meth:`produce_many`)."""

    def __init__(self, bootstrap: str, *, client_id: str = "kqlab-oracle",
                 timeout: float = 30.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.client_id = client_id
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = self._api_versions()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- framing ----------------------------------------------------------------------------
    def _recv(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            got = self.sock.recv(n - len(chunks))
            if not got:
                raise WireError("the broker closed the connection (it drops requests it cannot "
                                "parse; see its log)")
            chunks += got
        return bytes(chunks)

    def call(self, api: int, version: int, body: bytes) -> Reader:
        """Send one request; return a reader positioned after the response header."""
        return self._read(api, version, self._send(api, version, body))

    def _frame(self, api: int, version: int, body: bytes) -> tuple[bytes, int]:
        """One request's bytes (size, header, body) and its correlation id."""
        self._correlation += 1
        cid = self.client_id.encode()
        header = struct.pack(">hhih", api, version, self._correlation, len(cid)) + cid
        if version >= FIRST_FLEXIBLE[api]:
            header += b"\x00"
        msg = header + body
        return struct.pack(">i", len(msg)) + msg, self._correlation

    def _send(self, api: int, version: int, body: bytes) -> int:
        frame, correlation = self._frame(api, version, body)
        self.sock.sendall(frame)
        return correlation

    def _read(self, api: int, version: int, correlation: int) -> Reader:
        """The response to ``correlation`` (responses come back in request order)."""
        flexible = version >= FIRST_FLEXIBLE[api]
        size = struct.unpack(">i", self._recv(4))[0]
        r = Reader(self._recv(size), flexible)
        if r.int32() != correlation:
            raise WireError("correlation id mismatch")
        if flexible and api != API_VERSIONS:  # ApiVersions always answers with header v0
            r.skip_tags()
        return r

    def version(self, api: int, want: int | None = None) -> int:
        """``want`` if the broker serves it, else the highest both sides speak."""
        lo, hi = self.versions.get(api, (0, -1))
        top = min(hi, CLIENT_MAX[api])
        if want is not None:
            if not lo <= want <= top:
                raise WireError(f"the broker serves api {api} v{lo}-v{hi}; v{want} not possible")
            return want
        if top < lo:
            raise WireError(f"no common version of api {api} (broker v{lo}-v{hi})")
        return top

    def _api_versions(self) -> dict[int, tuple[int, int]]:
        r = self.call(API_VERSIONS, 0, b"")
        error = r.int16()
        if error:
            raise WireError(f"ApiVersions failed with error {error}")
        out = {}
        for _ in range(r.int32()):
            key, lo, hi = r.int16(), r.int16(), r.int16()
            out[key] = (lo, hi)
        return out

    # -- Produce ----------------------------------------------------------------------------
    def produce(self, topic: str, partition: int, records: bytes | None, *, version: int = 8,
                acks: int = -1, transactional_id: str | None = None,
                timeout_ms: int = 30000) -> ProduceResult:
        """Produce ``records`` (exact bytes) to one partition; the broker's answer for it."""
        return self.produce_many(topic, partition, [records], version=version, acks=acks,
                                 transactional_id=transactional_id, timeout_ms=timeout_ms)[0]

    def produce_many(self, topic: str, partition: int, batches: list[bytes | None], *,
                     version: int = 8, acks: int = -1, transactional_id: str | None = None,
                     timeout_ms: int = 30000) -> list[ProduceResult]:
        """One ProduceRequest per element of ``batches``, all written before the first answer
        is read (pipelined: the broker handles one connection's requests in order, so the
        answers are what sending them one at a time would get, minus the round trips)."""
        if acks == 0:
            raise WireError("acks=0 gets no response; this client needs one")
        v = self.version(API_PRODUCE, version)
        frames, ids = [], []
        for records in batches:
            w = Writer(v >= FIRST_FLEXIBLE[API_PRODUCE])
            w.string(transactional_id).int16(acks).int32(timeout_ms)
            w.array_len(1).string(topic).array_len(1).int32(partition).bytes_(records).tags()
            w.tags().tags()
            frame, correlation = self._frame(API_PRODUCE, v, bytes(w.buf))
            frames.append(frame)
            ids.append(correlation)
        self.sock.sendall(b"".join(frames))
        return [_read_produce(self._read(API_PRODUCE, v, c), v) for c in ids]

    # -- producer ids and transactions -------------------------------------------------------
    def init_producer_id(self, transactional_id: str | None = None, *,
                         timeout_ms: int = 60000, version: int | None = None,
                         attempts: int = 50) -> ProducerId:
        """An idempotent (no id) or transactional producer id + epoch, retried while the
        coordinator loads (codes 14 COORDINATOR_LOAD_IN_PROGRESS, 15, 16 NOT_COORDINATOR)."""
        import time

        v = self.version(API_INIT_PRODUCER_ID, version)
        if transactional_id is not None:
            self.find_coordinator(transactional_id)
        for _ in range(attempts):
            w = Writer(v >= FIRST_FLEXIBLE[API_INIT_PRODUCER_ID])
            w.string(transactional_id).int32(timeout_ms)
            if v >= 3:
                w.int64(-1).int16(-1)
            w.tags()
            r = self.call(API_INIT_PRODUCER_ID, v, bytes(w.buf))
            r.int32()
            error, pid, epoch = r.int16(), r.int64(), r.int16()
            if error == 0:
                return ProducerId(pid, epoch)
            if error not in (14, 15, 16, 51):  # 51 CONCURRENT_TRANSACTIONS
                raise WireError(f"InitProducerId failed with error {error}")
            time.sleep(0.2)
        raise WireError("InitProducerId: the coordinator never became available")

    def find_coordinator(self, transactional_id: str, *, attempts: int = 100) -> None:
        """Wait until the transaction coordinator of ``transactional_id`` is available; the
        first FindCoordinator is what makes the broker create ``__transaction_state``."""
        import time

        v = self.version(API_FIND_COORDINATOR)
        for _ in range(attempts):
            w = Writer(v >= FIRST_FLEXIBLE[API_FIND_COORDINATOR])
            w.string(transactional_id).int8(1).tags()
            r = self.call(API_FIND_COORDINATOR, v, bytes(w.buf))
            r.int32()
            if r.int16() == 0:
                return
            time.sleep(0.2)
        raise WireError("FindCoordinator: no transaction coordinator became available")

    def add_partitions_to_txn(self, transactional_id: str, pid: ProducerId, topic: str,
                              partition: int, *, attempts: int = 50) -> int:
        """Add one partition to the open transaction (client form, v0-v3); its error code."""
        import time

        v = self.version(API_ADD_PARTITIONS_TO_TXN)
        code = -1
        for _ in range(attempts):
            w = Writer(v >= FIRST_FLEXIBLE[API_ADD_PARTITIONS_TO_TXN])
            w.string(transactional_id).int64(pid.producer_id).int16(pid.producer_epoch)
            w.array_len(1).string(topic).array_len(1).int32(partition).tags().tags()
            r = self.call(API_ADD_PARTITIONS_TO_TXN, v, bytes(w.buf))
            r.int32()
            for _t in range(r.array_len()):
                r.string()
                for _p in range(r.array_len()):
                    r.int32()
                    code = r.int16()
                    r.skip_tags()
                r.skip_tags()
            if code not in (14, 15, 16, 51):
                return code
            time.sleep(0.1)
        return code

    def end_txn(self, transactional_id: str, pid: ProducerId, *, commit: bool,
                version: int | None = None, attempts: int = 50) -> tuple[int, ProducerId | None]:
        """Commit or abort; the error code and (v5+, transactions v2) the bumped id/epoch."""
        import time

        v = self.version(API_END_TXN, version)
        code, bumped = -1, None
        for _ in range(attempts):
            w = Writer(v >= FIRST_FLEXIBLE[API_END_TXN])
            w.string(transactional_id).int64(pid.producer_id).int16(pid.producer_epoch)
            w.int8(1 if commit else 0).tags()
            r = self.call(API_END_TXN, v, bytes(w.buf))
            r.int32()
            code = r.int16()
            if v >= 5:
                bumped = ProducerId(r.int64(), r.int16())
            if code not in (14, 15, 16, 51):
                return code, bumped
            time.sleep(0.1)
        return code, bumped


def _read_produce(r: Reader, version: int) -> ProduceResult:
    """The first (only) partition of a ProduceResponse v3+."""
    result: ProduceResult | None = None
    for _t in range(r.array_len()):
        r.string()
        for _p in range(r.array_len()):
            r.int32()
            res = ProduceResult(error_code=r.int16(), error_message=None)
            res.base_offset = r.int64()
            res.log_append_time = r.int64() if version >= 2 else -1
            res.log_start_offset = r.int64() if version >= 5 else -1
            if version >= 8:
                for _e in range(r.array_len()):
                    res.record_errors.append((r.int32(), r.string()))
                    r.skip_tags()
                res.error_message = r.string()
            r.skip_tags()
            result = result or res
        r.skip_tags()
    if result is None:
        raise WireError("the ProduceResponse named no partition")
    return result
