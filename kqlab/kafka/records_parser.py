"""Pick the records parser: the C accelerator when it is built, else the pure-Python reference.

Set ``KQLAB_PURE_PYTHON=1`` to force the reference implementation (tests run both and hold
them equal).  ``IMPLEMENTATION`` says which one is active.
"""

from __future__ import annotations

import os

from kqlab.kafka._records_py import (
    ParsedRecords,
    ParseErrorKind,
    render_parse_error,
)
from kqlab.kafka._records_py import parse_records as parse_records_py

IMPLEMENTATION = "python"
parse_records = parse_records_py

if not os.environ.get("KQLAB_PURE_PYTHON"):
    try:
        from kqlab.kafka._crecords import parse_records as _parse_records_c
    except ImportError:  # not built (no compiler at install time): the reference is complete
        pass
    else:
        def parse_records(regions, counts, strict=True, with_data=True):  # type: ignore[no-redef]
            """C implementation of :func:`kqlab.kafka._records_py.parse_records`."""
            return ParsedRecords(*_parse_records_c(regions, counts, strict, with_data))

        IMPLEMENTATION = "c"

__all__ = [
    "IMPLEMENTATION",
    "ParseErrorKind",
    "ParsedRecords",
    "parse_records",
    "parse_records_py",
    "render_parse_error",
]
