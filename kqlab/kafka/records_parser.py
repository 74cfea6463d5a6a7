"""Pick the hot-path kernels: the C accelerator when it is built, else the pure-Python reference.

Four kernels: ``parse_records`` (the records of v2 batches), ``RecordsParser`` (the same parse
fed piece by piece, with the decoder's bulk ``add_batches``), ``scan_batches`` (batch headers
and CRC-32C checks over a buffer of concatenated batches) and ``crc32c`` (over any buffer,
without copying).  Set ``KQLAB_PURE_PYTHON=1`` to force the references (tests hold the two
equal); ``IMPLEMENTATION`` says which one is active.

The C parser decompresses zstd and lz4 batches itself (the fast paths), with the very libraries
the exact codec readers of :mod:`kqlab.kafka.compression` use: python-zstandard's zstd (bound
from its cffi build, which exports the functions its C extension hides, when both report the
same version) and python-lz4's block decoder.  ``ZSTD_VERSION`` / ``LZ4_VERSION`` say which
(None: every batch of that codec goes to the exact reader, as gzip and snappy batches always
do).  ``KQLAB_EXACT_CODECS=1`` turns both fast paths off.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from kqlab.kafka._records_py import (
    BODY_ALLOCATION_LIMIT,
    ParsedRecords,
    ParseErrorKind,
    ReadMode,
    StreamReader,
)
from kqlab.kafka._records_py import RecordsParser as RecordsParserPy
from kqlab.kafka._records_py import parse_records as parse_records_py
from kqlab.kafka._scan_py import crc32c as crc32c_py
from kqlab.kafka._scan_py import scan_batches as scan_batches_py


class RecordsParserProtocol(Protocol):
    """What both :class:`~kqlab.kafka._records_py.RecordsParser` implementations offer."""

    def __init__(self, with_data: bool = True, reserve: int = 0, threads: int = 1
                 ) -> None: ...

    @property
    def batches(self) -> int: ...

    def add(self, regions: Sequence[bytes | memoryview], counts: Sequence[int],
            modes: int | Sequence[int] = ..., failed: Sequence[bool] | None = ...,
            codecs: Sequence[int] | None = ..., read: StreamReader | None = ...) -> None: ...

    def add_batches(self, buf: bytes | bytearray | memoryview, positions: np.ndarray,
                    sizes: np.ndarray, crcs: np.ndarray, counts: np.ndarray,
                    codecs: np.ndarray, read: StreamReader | None,
                    crc_valid: np.ndarray) -> None: ...

    def finish(self) -> ParsedRecords: ...


IMPLEMENTATION = "python"
ZSTD_VERSION: int | None = None
LZ4_VERSION: int | None = None
parse_records = parse_records_py
RecordsParser: type[RecordsParserProtocol] = RecordsParserPy
scan_batches = scan_batches_py
crc32c = crc32c_py

if not os.environ.get("KQLAB_PURE_PYTHON"):
    try:
        from kqlab.kafka import _crecords
    except ImportError:  # not built (no compiler at install time): the references are complete
        pass
    else:
        _parse_records_c = _crecords.parse_records

        def parse_records(regions, counts, modes=ReadMode.BUFFER,
                          with_data=True, failed=None, codecs=None, read=None):
            """C implementation of :func:`kqlab.kafka._records_py.parse_records`."""
            return ParsedRecords(*_parse_records_c(regions, counts, modes, with_data, failed,
                                                   codecs, read))

        class RecordsParserC:
            """C implementation of :class:`kqlab.kafka._records_py.RecordsParser`."""

            __slots__ = ("_p",)

            def __init__(self, with_data: bool = True, reserve: int = 0, threads: int = 1):
                self._p = _crecords.RecordsParser(with_data, reserve, threads)

            @property
            def batches(self) -> int:
                """Batches added so far."""
                return self._p.batches

            def add(self, regions, counts, modes=ReadMode.BUFFER, failed=None, codecs=None,
                    read=None) -> None:
                """Parse more regions (``read(i)`` indexes this call's regions)."""
                self._p.add(regions, counts, modes, failed, codecs, read)

            def add_batches(self, buf, positions, sizes, crcs, counts, codecs, read,
                            crc_valid) -> None:
                """Parse whole v2 batches of ``buf``, their CRCs checked as they are read."""
                self._p.add_batches(buf, positions, sizes, crcs, counts, codecs, read,
                                    crc_valid)

            def finish(self) -> ParsedRecords:
                """The columns over everything added; the parser is spent afterwards."""
                return ParsedRecords(*self._p.finish())

        def _bind_codecs() -> tuple[int | None, int | None]:
            """Give the C parser the exact readers' zstd and lz4 (see the module docstring)."""
            import importlib.util

            import lz4
            import lz4.block._block as lz4_block
            import zstandard

            if os.environ.get("KQLAB_EXACT_CODECS"):
                return None, None
            zstd = None
            spec = importlib.util.find_spec("zstandard._cffi")
            if spec is not None and spec.origin:
                major, minor, patch = zstandard.ZSTD_VERSION
                zstd = _crecords._bind(4, spec.origin, major * 10000 + minor * 100 + patch)
            lz4v = _crecords._bind(3, lz4_block.__file__, lz4.library_version_number())
            return zstd, lz4v

        RecordsParser = RecordsParserC
        scan_batches = _crecords.scan_batches
        crc32c = _crecords.crc32c
        IMPLEMENTATION = "c"
        ZSTD_VERSION, LZ4_VERSION = _bind_codecs()

__all__ = [
    "BODY_ALLOCATION_LIMIT",
    "IMPLEMENTATION",
    "LZ4_VERSION",
    "ZSTD_VERSION",
    "ParseErrorKind",
    "ParsedRecords",
    "ReadMode",
    "RecordsParser",
    "RecordsParserPy",
    "crc32c",
    "parse_records",
    "parse_records_py",
    "scan_batches",
    "scan_batches_py",
]
