"""Incremental replays equal fresh ones: a :class:`Replayer` keeps the last broker pass and
re-checks only the batches whose policy messages changed (when batches are independent), and
hands the views the per-record codes it computed; after any sequence of edits — rules added,
edited, removed, reordered, switched to observe; broker settings and the enforcement profile
changed; a new sample — every table must equal a replay from scratch."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from kqlab.kafka.builder import BatchBuilder, Record
from kqlab.policy.model import BrokerSettings, Policy, Rule
from kqlab.validate import Replayer, replay
from kqlab.validate.assemble import Assembler
from kqlab.validate.verdicts import failures_array

NOW = 1_700_000_000_000


def write_log(root, *, partitions: int = 2, batches: int = 40, seed: int = 7,
              producer_id: int = -1):
    """A log directory of ``partitions`` folders of small batches (no producer id unless
    given): some records lack the trace header, have no key, large values, odd timestamps."""
    rng = random.Random(seed)
    for p in range(partitions):
        folder = root / f"orders-{p}"
        folder.mkdir(parents=True)
        data, offset, seq = [], 0, 0
        for _ in range(batches):
            kw = {} if producer_id < 0 else {"producer_id": producer_id + p, "producer_epoch": 0,
                                              "base_sequence": seq}
            b = BatchBuilder(base_offset=offset, base_timestamp=NOW - 5_000, **kw)
            k = rng.randint(1, 6)
            for _ in range(k):
                headers = (("trace-id", b"t"),) if rng.random() > 0.1 else ()
                if rng.random() < 0.05:
                    headers += (("env", rng.choice([b"prod", b"dev"])),)
                key = None if rng.random() < 0.08 else f"k{rng.randint(0, 99)}".encode()
                value = b"v" * rng.choice([3, 10, 40, 120, 400])
                ts = NOW - rng.choice([1_000, 2_000, 90_000_000]) if rng.random() < 0.1 \
                    else None
                b.append(Record(key=key, value=value, headers=headers, timestamp=ts))
            data.append(b.build())
            offset += k
            seq += k
        (folder / "00000000000000000000.log").write_bytes(b"".join(data))
    return root


def policy(*rules: Rule, enforcement: str = "kip-940", **configs) -> Policy:
    return Policy(name="inc", enforcement=enforcement,
                  broker=BrokerSettings(version="4.0", configs=configs), rules=tuple(rules))


TRACE = Rule(id="trace", kind="header_required", params={"name": "trace-id"})
SIZE = Rule(id="size", kind="value_size", params={"max": 300})
KEY = Rule(id="key", kind="key_required")
ENV = Rule(id="env", kind="header_values", params={"name": "env", "values": ["prod"]})


def assert_same(got, want) -> None:
    """Every table and fact of two verdicts equal."""
    assert got.records.equals(want.records)
    assert got.batches.equals(want.batches)
    assert got.rules.equals(want.rules)
    assert (got.profile, got.framing, got.now, got.policy_name, got.policy_hash, got.notes) == \
        (want.profile, want.framing, want.now, want.policy_name, want.policy_hash, want.notes)
    assert got.summary() == want.summary()


def edits() -> list[Policy]:
    """A sequence of policies, each one edit away from the previous."""
    p0 = policy(TRACE, SIZE)
    p1 = p0.with_rules([TRACE, replace(SIZE, params={"max": 100})])   # edit a parameter
    p2 = p1.with_rules([*p1.rules, KEY])                                 # add
    p3 = p2.with_rules([p2.rules[2], p2.rules[0], p2.rules[1]])         # reorder
    p4 = p3.with_rules([replace(r, mode="observe") if r.id == "trace" else r
                        for r in p3.rules])                              # observe
    p5 = p4.with_rules([*p4.rules, ENV])
    p6 = p5.with_rules([r for r in p5.rules if r.id != "key"])          # remove
    p7 = replace(p6, broker=BrokerSettings(version="4.0", configs={"cleanup.policy": "compact"}))
    p8 = replace(p7, broker=BrokerSettings(version="4.0", configs={
        "cleanup.policy": "compact", "message.timestamp.before.max.ms": "3600000"}))
    p9 = replace(p8, enforcement="kip-686")
    p10 = p9.with_rules([replace(r, params={"max": 50}) if r.id == "size" else r
                         for r in p9.rules])
    p11 = replace(p10, enforcement="kip-729")
    p12 = p11.with_rules([replace(r, mode="reject") if r.id == "trace" else r
                          for r in p11.rules])
    p13 = replace(p12, broker=BrokerSettings(version="3.9", configs={}))
    p14 = p13.with_rules([])
    p15 = p13
    return [p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, p14, p15]


@pytest.fixture
def log(tmp_path):
    return write_log(tmp_path / "log")


def test_every_edit_equals_a_fresh_replay_and_only_changed_batches_are_rechecked(log):
    r = Replayer(log, now=NOW)
    nb = r.sample.batches.num_rows
    spliced = 0
    for p in edits():
        before = r.assembler.broker_batches
        v = r.run(p)
        assert_same(v, replay(log, p, now=NOW))
        ran = r.assembler.broker_batches - before
        assert ran <= nb
        spliced += 0 < ran < nb
    assert r.assembler.independent(r.assembler._last.config, NOW)
    assert spliced >= 3, "the splice path must have run"
    # the same policy again: nothing to re-check
    before = r.assembler.broker_batches
    assert_same(r.run(edits()[-1]), replay(log, edits()[-1], now=NOW))
    assert r.assembler.broker_batches == before


def test_randomised_edits_equal_fresh_replays(tmp_path):
    log = write_log(tmp_path / "log", partitions=3, batches=30, seed=11)
    r = Replayer(log, now=NOW)
    rng = random.Random(3)
    p = policy(TRACE, SIZE, KEY)
    for _ in range(12):
        choice = rng.randrange(4)
        if choice == 0:
            p = p.with_rules([replace(x, params={"max": rng.choice([20, 50, 100, 300, 500])})
                              if x.id == "size" else x for x in p.rules])
        elif choice == 1:
            rules = list(p.rules)
            rng.shuffle(rules)
            p = p.with_rules(rules)
        elif choice == 2:
            p = p.with_rules([replace(x, mode=rng.choice(["reject", "observe"]))
                              for x in p.rules])
        else:
            p = replace(p, enforcement=rng.choice(["kip-940", "kip-686", "kip-729"]))
        assert_same(r.run(p), replay(log, p, now=NOW))


def test_producer_state_makes_batches_dependent_so_every_pass_is_full(tmp_path):
    log = write_log(tmp_path / "log", producer_id=1000)
    r = Replayer(log, now=NOW)
    nb = r.sample.batches.num_rows
    for p in edits()[:4]:
        before = r.assembler.broker_batches
        assert_same(r.run(p), replay(log, p, now=NOW))
        assert r.assembler.broker_batches - before == nb
    assert not r.assembler.independent(r.assembler._last.config, NOW)


def test_a_new_sample_drops_everything_cached(tmp_path):
    a = write_log(tmp_path / "a", seed=1)
    b = write_log(tmp_path / "b", seed=2, batches=25)
    r = Replayer(a, now=NOW)
    p = policy(TRACE, SIZE)
    r.run(p)
    r.sample = Replayer(b, now=NOW).sample
    assert_same(r.run(p), replay(b, p, now=NOW))
    assert r.assembler.sample is r.sample


def test_snapshot_without_batch_bytes_and_rebuilt_framing(log):
    for framing in ("single", "linger"):
        r = Replayer(log, now=NOW, framing=framing)
        for p in edits()[:8]:
            assert_same(r.run(p), replay(log, p, now=NOW, framing=framing))


def test_views_get_the_replays_codes_equal_to_derived_ones(log):
    from kqlab.validate.verdicts import Verdicts

    r = Replayer(log, now=NOW)
    for p in edits():
        v = r.run(p)
        plain = Verdicts(v.records, v.batches, v.rules, v.profile, v.framing, v.now)
        seeded, derived = v.aggregates, plain.aggregates
        assert v.codes is not None and plain.codes is None
        assert seeded.outcome is v.codes.outcome  # the replay's own, not derived again
        assert np.array_equal(seeded.outcome, derived.outcome)
        assert np.array_equal(seeded.batch_id, derived.batch_id)
        assert seeded.reason_labels == derived.reason_labels
        assert np.array_equal(seeded.rule_codes, derived.rule_codes)
        for a, b in zip(seeded.failures, derived.failures, strict=True):
            assert (a.equals(b) if isinstance(a, pa.Array) else np.array_equal(a, b))
        assert np.array_equal(seeded.reason, derived.reason)
        assert seeded.by_reason().equals(derived.by_reason())
        assert v.by_outcome() == plain.by_outcome()


def test_failures_array_from_lists_still_builds_the_column():
    col = failures_array(3, np.array([2, 0, 2]), ["b", "a", None], np.array([87, 0, 32]),
                         ["x", "y", "z"])
    # lists say nothing of identity; a failure with no params is one the check judged
    unknown = {"kind": None, "step": None, "params": None, "status": "failed"}
    assert col.to_pylist() == [
        [{"rule": "a", "code": 0, "message": "y"} | unknown], [],
        [{"rule": "b", "code": 87, "message": "x"} | unknown,
         {"rule": None, "code": 32, "message": "z"} | unknown]]


def test_one_shot_assembler_equals_a_replayer(log):
    r = Replayer(log, now=NOW)
    p = edits()[3]
    a = Assembler(r.sample, r._rows)
    from kqlab.validate.replayer import with_implicit_rules

    eff = with_implicit_rules(p)
    assert_same(a(eff, r.evaluate(eff), NOW, p.enforcement), replay(log, p, now=NOW))



def test_a_state_seen_before_takes_its_batches_from_that_pass(log):
    """A rule switched back, an edit undone: every batch's policy input equals the one of an
    earlier pass, so nothing is re-checked; an edit that brings some batches back to an
    earlier state and changes others re-checks only the others.  Always a fresh replay."""
    r = Replayer(log, now=NOW)
    nb = r.sample.batches.num_rows
    base = policy(TRACE, SIZE, KEY)
    observe = base.with_rules([replace(TRACE, mode="observe"), SIZE, KEY])
    env = base.with_rules([*base.rules, ENV])  # fails a few records (an env: dev header)
    ran = []
    for p in (base, observe, base, observe, env, base, env):
        before = r.assembler.broker_batches
        assert_same(r.run(p), replay(log, p, now=NOW))
        ran.append(r.assembler.broker_batches - before)
    assert ran[0] == nb, ran
    assert ran[2] == ran[3] == ran[5] == ran[6] == 0  # each seen before: from its pass
    # from the observe pass: the trace failures' batches from the first pass, only those
    # with an env failure checked again
    assert 0 < ran[4] < nb / 4
    # the passes kept are bounded
    from kqlab.validate.assemble import BROKER_RUNS_KEPT

    assert len(r.assembler._runs) <= BROKER_RUNS_KEPT


def test_an_edit_that_flips_most_batches_goes_to_a_full_pass_before_comparing_texts(log):
    """A rule that fails most records flips the verdict of nearly every batch: the records
    failing in one input and passing in the other already name too many batches to splice,
    so the full pass runs without the texts of the two inputs being compared; an edit of a
    few batches still compares them and splices.  Always a fresh replay."""
    r = Replayer(log, now=NOW)
    a = r.assembler
    nb = r.sample.batches.num_rows
    compared = []
    changed_batches = a._changed_batches

    def counting(old, new):
        compared.append(1)
        return changed_batches(old, new)

    a._changed_batches = counting
    tiny = Rule(id="tiny", kind="value_size", params={"max": 5})  # most values are longer
    steps = [(policy(TRACE, SIZE), "first"), (policy(TRACE, SIZE, tiny), "full"),
             (policy(TRACE, SIZE, tiny, ENV), "splice"), (policy(TRACE, SIZE, ENV), "full")]
    for p, expect in steps:
        before, n_compared = a.broker_batches, len(compared)
        assert_same(r.run(p), replay(log, p, now=NOW))
        ran = a.broker_batches - before
        if expect == "splice":
            assert 0 < ran < nb and len(compared) > n_compared
        else:
            assert ran == nb and len(compared) == n_compared, (expect, ran)


def test_a_policy_input_made_of_the_same_results_is_the_kept_one(log):
    """A rule switched back or an edit undone makes the broker's input from the same rule
    results as a kept pass: that input is taken as it is (its keys and Arrow indices made
    already), not built again; a new result (another bound) or another order of the rules
    builds a new one.  Always a fresh replay."""
    r = Replayer(log, now=NOW)
    a = r.assembler
    base = policy(TRACE, SIZE, KEY)
    observe = base.with_rules([replace(TRACE, mode="observe"), SIZE, KEY])
    moved = base.with_rules([SIZE, TRACE, KEY])
    inputs = []
    for p in (base, observe, base, observe, moved, base):
        assert_same(r.run(p), replay(log, p, now=NOW))
        inputs.append(a._runs[-1].policy)
    assert inputs[2] is inputs[0] and inputs[3] is inputs[1] and inputs[5] is inputs[0]
    assert inputs[4] is not inputs[0] and inputs[1] is not inputs[0]
    assert_same(r.run(policy(TRACE, replace(SIZE, params={"max": 100}), KEY)),
                replay(log, policy(TRACE, replace(SIZE, params={"max": 100}), KEY), now=NOW))
    assert all(a._runs[-1].policy is not x for x in inputs)


def test_an_edit_builds_no_record_table_until_one_is_read(log):
    """An edit's verdicts hold the record table deferred: counts, outcomes, reasons, spans,
    the timeline and the impact diff read codes and coordinates only; the first read of
    ``records`` builds the table a fresh replay makes, the views then agree with it, and a
    pickled copy carries the table."""
    import pickle

    from kqlab.validate.aggregates import DeferredRecords
    from kqlab.validate.verdicts import Verdicts
    from kqlab.viz import impact_table

    r = Replayer(log, now=NOW)
    before = r.run(policy(TRACE, SIZE))
    p = policy(TRACE, replace(SIZE, params={"max": 100}), KEY)
    v = r.run(p)
    ref = v.records_ref()
    assert isinstance(ref, DeferredRecords) and not ref.built
    summary = (v.by_outcome(), v.rules.to_pylist(), v.count(), v.by_reason(),
               v.timeline(), v.spans(), v.record_reasons(), impact_table(before, v))
    assert not ref.built
    fresh = replay(log, p, now=NOW)
    assert_same(v, fresh)  # reads records: built now, equal to a fresh replay's
    assert ref.built and v.records_ref() is ref
    plain = Verdicts(fresh.records, fresh.batches, fresh.rules, fresh.profile, fresh.framing,
                     fresh.now)
    assert summary[:3] == (plain.by_outcome(), plain.rules.to_pylist(), plain.count())
    assert summary[3].equals(plain.by_reason())
    assert summary[4][0].equals(plain.timeline()[0]) and summary[4][1] == plain.timeline()[1]
    assert np.array_equal(summary[6].reason, plain.record_reasons().reason)
    assert impact_table(before, plain).equals(summary[7])
    copy = pickle.loads(pickle.dumps(r.run(policy(TRACE))))
    assert_same(copy, replay(log, policy(TRACE), now=NOW))
