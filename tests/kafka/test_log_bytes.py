"""``read_log(keep_bytes=True)`` reads each segment once and hands back, beside the tables,
every batch's bytes: exactly what a separate scan (``iter_log_batches``) finds, whatever the
read size, chunking, number of segment files, or damage in them."""

from __future__ import annotations

from pathlib import Path

import pytest

from kqlab.kafka import log as kafka_log
from kqlab.kafka.builder import BatchBuilder, Record, rewrite_header
from kqlab.kafka.compression import Codec
from kqlab.kafka.log import RawBatch, iter_log_batches, iter_log_tables, read_log

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "real-segments"
NOW = 1_700_000_000_000


def _batches(n: int, offset: int = 0) -> list[bytes]:
    out = []
    for i in range(n):
        b = BatchBuilder(base_offset=offset + i * 3, base_timestamp=NOW,
                         codec=Codec.LZ4 if i % 3 == 0 else Codec.NONE)
        for j in range(3):
            b.append(Record(key=b"k%d" % j, value=b"v" * (i * 7 % 50)))
        out.append(b.build())
    return out


def _folder(tmp_path: Path, *files: list[bytes], tail: bytes = b"") -> Path:
    folder = tmp_path / "t-0"
    folder.mkdir()
    offset = 0
    for k, batches in enumerate(files):
        data = b"".join(batches) + (tail if k == len(files) - 1 else b"")
        (folder / f"{offset:020d}.log").write_bytes(data)
        offset += 1000
    return folder


def _scanned(path: Path) -> list[bytes]:
    return [b.data for b in iter_log_batches(path) if isinstance(b, RawBatch)]


def test_bytes_equal_a_separate_scan_across_files_and_damage(tmp_path):
    good = _batches(20)
    bad = list(good)
    bad[4] = rewrite_header(bad[4], fix_crc=False, records_count=99)  # stale CRC: kept
    bad[7] = rewrite_header(bad[7], magic=7, fix_crc=False)           # invalid magic: kept
    folder = _folder(tmp_path, good[:9], bad, tail=good[0][:30])      # truncated tail
    log = read_log(folder, keep_bytes=True)
    assert log.raw == _scanned(folder)
    assert len(log.raw) == log.batches.num_rows == 29
    assert any(i.kind == "truncated_tail" for i in log.issues)
    assert read_log(folder).raw is None  # only when asked


@pytest.mark.parametrize(("read_chunk", "chunk_batches"), [(64, 4096), (200, 3), (1 << 20, 1)])
def test_bytes_survive_small_reads_and_small_chunks(tmp_path, monkeypatch, read_chunk,
                                                    chunk_batches):
    folder = _folder(tmp_path, _batches(15), _batches(6, 100))
    monkeypatch.setattr(kafka_log, "READ_CHUNK", read_chunk)
    parts = list(iter_log_tables(folder, chunk_batches=chunk_batches, keep_bytes=True))
    raw = [b for d in parts for b in d.raw]
    assert all(len(d.raw) == d.batches.num_rows for d in parts)
    assert raw == _scanned(folder)


def test_real_segments(tmp_path):
    segments = sorted(REAL.rglob("*.log"))
    assert segments, f"real-segment fixtures not found under {REAL}"
    for seg in segments:
        assert read_log(seg, keep_bytes=True).raw == _scanned(seg), seg
