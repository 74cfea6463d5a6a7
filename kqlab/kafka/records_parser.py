"""Pick the hot-path kernels: the C accelerator when it is built, else the pure-Python reference.

Three kernels: ``parse_records`` (the records of v2 batches), ``scan_batches`` (batch headers
and CRC-32C checks over a buffer of concatenated batches) and ``crc32c`` (over any buffer,
without copying).  Set ``KQLAB_PURE_PYTHON=1`` to force the references (tests hold the two
equal); ``IMPLEMENTATION`` says which one is active.
"""

from __future__ import annotations

import os

from kqlab.kafka._records_py import (
    BODY_ALLOCATION_LIMIT,
    ParsedRecords,
    ParseErrorKind,
    ReadMode,
)
from kqlab.kafka._records_py import parse_records as parse_records_py
from kqlab.kafka._scan_py import crc32c as crc32c_py
from kqlab.kafka._scan_py import scan_batches as scan_batches_py

IMPLEMENTATION = "python"
parse_records = parse_records_py
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

        scan_batches = _crecords.scan_batches
        crc32c = _crecords.crc32c
        IMPLEMENTATION = "c"

__all__ = [
    "BODY_ALLOCATION_LIMIT",
    "IMPLEMENTATION",
    "ParseErrorKind",
    "ParsedRecords",
    "ReadMode",
    "crc32c",
    "parse_records",
    "parse_records_py",
    "scan_batches",
    "scan_batches_py",
]
