"""One sample, replayed as often as the what-if and the plan need, in two framings.

Every number of :mod:`kqlab.rollout` is a replay's: the whole-batch enforcement points (the
broker's record policy per KIP, the Kroxylicious proxy) are the sample replayed in its own
framing (``exact`` for logs and exact snapshots, or the rebuilt ``linger``/``single`` batches
of a consumer's sample), and the per-record points (the Confluent serializer, the gate, the
Spark enforcer) are the sample replayed with ``framing="single"`` — every record alone in its
batch, which is exactly what the gate judges (:mod:`kqlab.gate._judge`).  :class:`SampleReplays`
loads the sample once, keeps one :class:`~kqlab.validate.replayer.Replayer` per framing (their
decoded columns and rule results are cached, so replaying the policy with other rule modes
re-evaluates only what changed), replays both at one clock, and memoises each replay by the
policy's content, profile and framing.

It also knows who produced each record (:class:`Producers`): the producer id of its batch and,
when the records carry one, a client identity read from a header (``client.id``, ``source``
...), so a plan can say which producers would break first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.rollout.errors import RolloutError
from kqlab.validate.loading import SampleSource, load_sample, sample_from_tables
from kqlab.validate.replayer import Replayer
from kqlab.validate.sample import Sample, record_batch_rows

if TYPE_CHECKING:  # pragma: no cover
    from kqlab.policy.model import Policy
    from kqlab.serde.schemas import SchemaResolver
    from kqlab.validate.verdicts import Verdicts

__all__ = ["AUTO", "CLIENT_HEADERS", "Producers", "RolloutError", "SampleReplays",
           "align", "load_samples"]

#: ``client_header=AUTO``: the first of :data:`CLIENT_HEADERS` the sample's records carry
AUTO = "auto"
#: header names that commonly carry the producing application's identity, in order of trust
CLIENT_HEADERS = ("client.id", "client-id", "client_id", "clientId", "producer",
                  "producer.id", "app", "application", "service", "source")


def load_samples(source: SampleSource | Sequence[SampleSource], *, framing: str = "exact",
                 linger_ms: int = 5, batch_size: int = 16384) -> Sample:
    """One :class:`Sample` from a source or a list of them (e.g. the partition folders of one
    topic): the parts are read exactly as :func:`~kqlab.validate.loading.load_sample` reads a
    log directory — concatenated in the order given — then re-framed when ``framing`` asks."""
    if isinstance(source, str | Path | pa.Table | Sample) or not isinstance(source, Sequence):
        return load_sample(source, framing=framing, linger_ms=linger_ms,
                           batch_size=batch_size)
    if not source:
        raise RolloutError("no sample given: pass a segment path, a log directory, a snapshot "
                           "or a list of them")
    if len(source) == 1:
        return load_samples(source[0], framing=framing, linger_ms=linger_ms,
                            batch_size=batch_size)
    parts = [load_sample(s, framing="exact") for s in source]
    raws = [p.raw for p in parts]
    raw = None if any(r is None for r in raws) else [b for r in raws for b in r or ()]
    sample = Sample(pa.concat_tables([p.records for p in parts], promote_options="default"),
                    pa.concat_tables([p.batches for p in parts], promote_options="default"),
                    raw, "exact", parts[0].source, [i for p in parts for i in p.issues])
    if framing == "exact":
        return sample
    return sample_from_tables(sample.records, sample.batches, framing, linger_ms=linger_ms,
                              batch_size=batch_size, issues=sample.issues)


def _single(sample: Sample) -> Sample:
    """``sample`` with every data record alone in its batch (transaction markers dropped: a
    consumer, hence the gate, never sees them)."""
    if sample.framing == "reconstructed:single":
        return sample
    exact = sample.framing == "exact"
    return sample_from_tables(sample.records, sample.batches if exact else None, "single",
                              issues=sample.issues)


def _keyed(keys: pa.Table, row: str) -> pa.Table:
    """(topic, partition, offset) without nulls (a join never matches a null), and the row."""
    return pa.table({
        "topic": pc.fill_null(pc.cast(keys.column("topic"), pa.string()), ""),
        "partition": pc.fill_null(pc.cast(keys.column("partition"), pa.int64()), -1),
        "offset": pc.fill_null(pc.cast(keys.column("offset"), pa.int64()), -1),
        row: pa.array(np.arange(keys.num_rows, dtype=np.int64))})


def _occurrence(t: pa.Table) -> pa.Array:
    """Per row, how many earlier rows have the same key (0 for the first): a stable sort by
    key, then the position within each run of equal keys."""
    n = t.num_rows
    order = pc.sort_indices(t, sort_keys=[("topic", "ascending"), ("partition", "ascending"),
                                          ("offset", "ascending")]).to_numpy()
    topic = pc.dictionary_encode(t.column("topic")).combine_chunks().indices.to_numpy()
    cols = [topic, t.column("partition").to_numpy(), t.column("offset").to_numpy()]
    same = np.ones(max(n - 1, 0), bool)
    for c in cols:
        sc = c[order]
        same &= sc[1:] == sc[:-1]
    start = np.r_[True, ~same] if n else np.zeros(0, bool)
    first = np.flatnonzero(start)
    run = np.cumsum(start) - 1
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - first[run]
    return pa.array(rank)


def _unique(t: pa.Table) -> bool:
    if not t.num_rows:
        return True
    g = t.group_by(["topic", "partition", "offset"], use_threads=False).aggregate([])
    return g.num_rows == t.num_rows


def align(target: pa.Table, source: pa.Table) -> np.ndarray:
    """For every row of ``target`` (columns topic, partition, offset) the row of ``source``
    holding the same record, -1 when ``source`` has none (e.g. a transaction marker the
    single-framed sample left out).  Records repeated under one offset are matched in order.
    A hash join (Arrow), no per-record Python."""
    t, s = _keyed(target, "_t"), _keyed(source, "_s")
    keys = ["topic", "partition", "offset"]
    if not (_unique(t) and _unique(s)):
        t = t.append_column("_n", _occurrence(t))
        s = s.append_column("_n", _occurrence(s))
        keys.append("_n")
    joined = t.join(s.select([*keys, "_s"]), keys=keys, join_type="left outer",
                    use_threads=False)
    joined = joined.sort_by("_t")
    return pc.fill_null(joined.column("_s"), -1).to_numpy().astype(np.int64)


@dataclass
class Producers:
    """Who produced each record of the sample: ``code[i]`` indexes ``labels`` (``pid 2002 ·
    checkout-b``), with the producer id (None: not idempotent / unknown) and the client
    identity read from ``header`` (None when the records carry none) of each label."""

    code: np.ndarray
    labels: list[str]
    pid: list[int | None]
    client: list[str | None]
    header: str | None

    def row(self, i: int) -> dict[str, Any]:
        """The JSON shape of one producer."""
        return {"producer": self.labels[i], "producer_id": self.pid[i],
                "client": self.client[i]}


def _client_values(records: pa.Table, header: str) -> tuple[np.ndarray, list[str]]:
    """Per record the index of its first ``header`` value in the returned list, -1 when the
    record has no such header."""
    n = records.num_rows
    lists = records.column("headers").combine_chunks()
    out = np.full(n, -1, np.int64)
    entries = lists.flatten()
    if not len(entries):
        return out, []
    parents = pc.list_parent_indices(lists).to_numpy()
    keys, values = entries.field("key"), entries.field("value")
    hit = np.flatnonzero(pc.fill_null(pc.equal(keys, header), False).to_numpy(
        zero_copy_only=False))
    if not len(hit):
        return out, []
    par = parents[hit]
    first_of, idx = np.unique(par, return_index=True)
    picked = values.take(pa.array(hit[idx]))
    enc = pc.dictionary_encode(picked, null_encoding="encode")
    words = [b.decode("utf-8", "replace") if isinstance(b, bytes) else "" for b in
             enc.dictionary.to_pylist()]
    out[first_of] = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return out, words


def header_names(records: pa.Table) -> set[str]:
    """Every header name the records carry."""
    entries = records.column("headers").combine_chunks().flatten()
    if not len(entries):
        return set()
    return {k for k in pc.unique(entries.field("key")).to_pylist() if k is not None}


def producers_of(sample: Sample, client_header: str | None) -> Producers:
    """Who produced each record of ``sample`` (records in the sample's order)."""
    rows = record_batch_rows(sample.records, sample.batches)
    pids = pc.fill_null(sample.batches.column("producer_id"), -1).to_numpy().astype(np.int64)
    pid = pids[rows] if len(rows) else np.zeros(0, np.int64)
    header = client_header
    if header == AUTO:
        names = header_names(sample.records)
        header = next((h for h in CLIENT_HEADERS if h in names), None)
    if header:
        client, words = _client_values(sample.records, header)
    else:
        client, words = np.full(len(pid), -1, np.int64), []
    both = np.stack([pid, client], axis=1) if len(pid) else np.zeros((0, 2), np.int64)
    uniq, code = np.unique(both, axis=0, return_inverse=True)
    labels, pids_out, clients = [], [], []
    for p, c in uniq.tolist():
        who = f"pid {p}" if p >= 0 else "no producer id"
        name = words[c] if c >= 0 else None
        labels.append(who + (f" · {name}" if name is not None else ""))
        pids_out.append(p if p >= 0 else None)
        clients.append(name)
    return Producers(np.asarray(code, np.int64).reshape(-1), labels, pids_out, clients, header)


class SampleReplays:
    """A sample replayed in its own framing (``upstream``) and with ``framing="single"``
    (``single``) at one clock; :meth:`run` memoises each replay.

    Parameters
    ----------
    source
        A segment file, partition folder, log directory, snapshot, records table, a
        :class:`~kqlab.validate.sample.Sample`, or a list of paths (e.g. one topic's partition
        folders), as :func:`load_samples` reads them.
    now
        The broker clock (ms); default: the sample's own (its newest batch per partition).
    framing
        The framing of the whole-batch points: ``exact`` (as read), ``linger`` or ``single``
        (a records table needs one of the latter two).
    client_header
        The header naming the producing client (:data:`AUTO`: the first of
        :data:`CLIENT_HEADERS` present; None: none).
    """

    def __init__(self, source: SampleSource | Sequence[SampleSource], *, now: int | None = None,
                 framing: str = "exact", linger_ms: int = 5, batch_size: int = 16384,
                 resolver: SchemaResolver | None = None, client_header: str | None = AUTO):
        sample = load_samples(source, framing=framing, linger_ms=linger_ms,
                              batch_size=batch_size)
        self.upstream = Replayer(sample, now=now, resolver=resolver)
        self.now = self.upstream.now
        #: where the clock came from: ``given``, ``sample`` or ``wall clock``
        self.clock = self.upstream.clock
        single = _single(sample)
        self.single = self.upstream if single is sample else Replayer(
            single, now=self.now, resolver=resolver)
        self.framing = sample.framing
        #: per record of the sample, its batch's row (the decoder's own accounting)
        self.batch_rows = record_batch_rows(sample.records, sample.batches)
        self.producers = producers_of(sample, client_header)
        self._runs: dict[tuple[str, str, bool], Verdicts] = {}

    @property
    def records(self) -> int:
        """Records in the sample (transaction markers included)."""
        return self.upstream.sample.records.num_rows

    @property
    def batches(self) -> int:
        """Batches in the sample's own framing."""
        return self.upstream.sample.batches.num_rows

    def run(self, policy: Policy, *, profile: str | None = None, single: bool = False
            ) -> Verdicts:
        """The replay of ``policy`` (its rule modes as they are) under ``profile`` (default:
        the policy's), in the sample's framing or, with ``single``, one record per batch."""
        profile = profile or policy.enforcement
        key = (policy.content_hash(), profile, single)
        if key not in self._runs:
            replayer = self.single if single else self.upstream
            self._runs[key] = replayer.run(policy, profile=profile)
        return self._runs[key]
