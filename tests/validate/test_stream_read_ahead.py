"""The streamed replay reads the next chunk on a thread while it judges the current one:
chunks arrive in order, a reading error is raised in the judging thread, and stopping early
stops the reader and closes what it was reading."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

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
