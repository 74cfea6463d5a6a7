"""Batches rebuilt from a consumer's records (single / linger framing) are judged by the
vectorised table checks as if read from a log: for such batches (non-idempotent,
uncompressed, CreateTime, base offset 0) that gives exactly the byte-level validator's
verdicts on the producer bytes, policy included."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from kqlab.kafka.table_checks import RecordPolicy, broker_verdicts, policy_by_batch
from kqlab.kafka.validator import PartitionValidator
from kqlab.sources import demo_topics
from kqlab.validate.framing import reconstruct_framing

NOW = 1_763_700_000_000
CONFIGS = [
    {}, {"cleanup.policy": "compact"}, {"max.message.bytes": "300"},
    {"message.timestamp.before.max.ms": "600000", "message.timestamp.after.max.ms": "60000"},
    {"compression.type": "lz4", "segment.bytes": "2000"},
]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    from kqlab.kafka.log import read_log

    d = demo_topics.generate(tmp_path_factory.mktemp("demo"), NOW)
    logs = [read_log(f) for name, f in sorted(d.folders.items()) if name.startswith("clicks")]
    parts = []
    for log in logs:  # what a consumer sees: no transaction markers
        control = log.batches.column("is_control").to_pylist()
        rows = [i for i, c in enumerate(control) for _ in range(
            log.batches.column("records_decoded")[i].as_py()) if not c]
        keep = [not control[i] for i, c in enumerate(control)
                for _ in range(log.batches.column("records_decoded")[i].as_py())]
        parts.append(log.records.filter(pa.array(keep)))
        assert len(rows) == sum(keep)
    return pa.concat_tables(parts)


@pytest.mark.parametrize("framing", ["single", "linger"])
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("profile", ["kip-940", "kip-686", "kip-729"])
def test_tables_equal_the_byte_validator_on_rebuilt_batches(records, framing, config, profile):
    sample = reconstruct_framing(records, framing)
    assert sample.source == "producer" and sample.judged_as == "log"
    rng = random.Random(f"{framing}{config}{profile}")
    msgs = [f"bad {i}" if rng.random() < 0.05 else None for i in range(sample.records.num_rows)]
    rules = [None if m is None else rng.choice(["a", "b"]) for m in msgs]
    seen = set()
    for (topic, part) in sorted({(t, p) for t, p in zip(
            sample.batches.column("topic").to_pylist(),
            sample.batches.column("partition").to_pylist(), strict=True)}):
        b_rows = [i for i, (t, p) in enumerate(zip(sample.batches.column("topic").to_pylist(),
                  sample.batches.column("partition").to_pylist(), strict=True))
                  if (t, p) == (topic, part)]
        r_mask = pa.array([(t, p) == (topic, part) for t, p in zip(
            sample.records.column("topic").to_pylist(),
            sample.records.column("partition").to_pylist(), strict=True)])
        recs = sample.records.filter(r_mask)
        bats = sample.batches.take(pa.array(b_rows))
        pm = [m for m, k in zip(msgs, r_mask.to_pylist(), strict=True) if k]
        pr = [r for r, k in zip(rules, r_mask.to_pylist(), strict=True) if k]
        policy = RecordPolicy(profile, pm, pr)
        got = broker_verdicts(recs, bats, config, now=NOW, source="log", policy=policy)
        v = PartitionValidator(topic, part, config, now=NOW, source="producer")
        per = policy_by_batch(recs, bats, policy)
        want = [v.validate(sample.raw[i], position=bats.column("position")[k].as_py(),
                           policy=per[k]) for k, i in enumerate(b_rows)]
        keys = ("error_code", "error_name", "error_message", "check", "detail", "params")
        rows = got.to_pylist()
        for g, w in zip(rows, want, strict=True):
            wd = w.to_dict()
            wd["params"] = None if w.params is None else list(w.params.items())
            assert {k: g[k] for k in keys} == {k: wd[k] for k in keys}
            assert [(e["batch_index"], e["message"], e["check"], e["rule"])
                    for e in g["record_errors"]] == [
                (i, m, c, r) for (i, m), (c, r, _) in zip(
                    w.record_errors, w.record_error_ids, strict=True)]
            seen.add(g["check"])
    assert seen - {None}  # something was refused
