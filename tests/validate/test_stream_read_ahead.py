"""The streamed replay reads the next chunk on a thread while it judges the current one:
chunks arrive in order, a reading error is raised in the judging thread, and stopping early
stops the reader and closes what it was reading.  Drift baselines are read on a thread of
their own meanwhile, with the same results as read in turn."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from kqlab.policy import loads_policy
from kqlab.validate.sample import Sample
from kqlab.validate.stream import _read_ahead


def _sample(i: int) -> Sample:
    return Sample(pa.table({"i": [i]}), pa.table({"i": [i]}), None)


def test_chunks_arrive_in_order_from_another_thread():
    seen_threads = set()

    def chunks():
        for i in range(20):
            seen_threads.add(threading.current_thread().name)
            yield _sample(i)

    got = [s.records.column("i")[0].as_py() for s in _read_ahead(chunks())]
    assert got == list(range(20))
    assert seen_threads == {"kqlab-read-ahead"}


def test_a_reading_error_is_raised_where_the_chunks_are_judged():
    def chunks():
        yield _sample(0)
        raise OSError("segment vanished")

    it = _read_ahead(chunks())
    assert next(it).records.num_rows == 1
    with pytest.raises(OSError, match="segment vanished"):
        next(it)


def test_stopping_early_stops_the_reader_and_closes_its_chunks():
    closed = threading.Event()
    produced = []

    def chunks():
        try:
            for i in range(1000):
                produced.append(i)
                yield _sample(i)
        finally:
            closed.set()

    it = _read_ahead(chunks())
    next(it)
    it.close()  # the judging loop raised, or its caller stopped it
    assert closed.wait(5)
    assert len(produced) <= 3  # at most the chunk being judged and one read ahead, then stop
    assert not any(t.name == "kqlab-read-ahead" for t in threading.enumerate())


def _drift_log(tmp_path):
    from tests.validate.test_sample_checks import HEAD, T0, write_log

    write_log(tmp_path / "baseline", {0: [(b"k", {"amount": float(i % 50)}, T0 + i)
                                          for i in range(400)]})
    folder = write_log(tmp_path / "log", {p: [(b"k", {"amount": float(i % 70), "x": p}, T0 + i)
                                              for i in range(300)] for p in (0, 1)})
    policy = loads_policy(
        HEAD + "checks:\n"
        "  - {id: drift, kind: drift, field: amount, baseline: baseline, max_psi: 0.1}\n"
        "  - {id: shapes, kind: schema_drift, baseline: baseline}\n")
    return folder, policy


def test_baselines_are_read_on_their_own_thread_while_the_first_chunk_is_read(
        tmp_path, monkeypatch):
    from kqlab.validate.sample_checks import baseline as baseline_module
    from kqlab.validate.stream import replay_stream

    folder, policy = _drift_log(tmp_path)
    threads = []
    real = baseline_module._baseline_plan

    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(baseline_module, "_baseline_plan", spy)
    baseline_module.clear_baseline_cache()
    ahead = replay_stream(folder, policy, chunk_batches=3, base_dir=tmp_path)
    assert threads == ["kqlab-baselines", "kqlab-baselines"]  # drift, then schema drift
    monkeypatch.setenv("KQLAB_READ_AHEAD", "0")
    baseline_module.clear_baseline_cache()
    threads.clear()
    in_turn = replay_stream(folder, policy, chunk_batches=3, base_dir=tmp_path)
    assert threads == ["MainThread", "MainThread"]
    assert ahead.checks().to_pylist() == in_turn.checks().to_pylist()
    rows = {r["check"]: r for r in ahead.checks().to_pylist()}
    assert rows["drift"]["status"] == "fail" and rows["shapes"]["new_values"] == ["fields:amount,x"]


def test_an_error_while_reading_a_baseline_is_raised_by_the_replay(tmp_path, monkeypatch):
    from kqlab.validate.sample_checks import baseline as baseline_module
    from kqlab.validate.stream import replay_stream

    folder, policy = _drift_log(tmp_path)

    def broken(*args, **kwargs):
        raise RuntimeError("baseline reader broke")

    monkeypatch.setattr(baseline_module, "_baseline_plan", broken)
    baseline_module.clear_baseline_cache()
    with pytest.raises(RuntimeError, match="baseline reader broke"):
        replay_stream(folder, policy, chunk_batches=3, base_dir=tmp_path)
    assert not any(t.name == "kqlab-baselines" for t in threading.enumerate())
