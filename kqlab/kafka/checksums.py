"""Batch checksums: CRC-32C for magic v2 batches, CRC-32 (IEEE) for legacy v0/v1 messages.

A wrong checksum is a *finding* (``crc_valid = False`` / CORRUPT_MESSAGE), never an exception.
"""

from __future__ import annotations

import zlib

import google_crc32c

if google_crc32c.implementation != "c":  # pragma: no cover - depends on the wheel
    import warnings

    warnings.warn("google-crc32c runs its pure-Python fallback; CRC checks will be slow",
                  RuntimeWarning, stacklevel=1)


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data`` as an unsigned int; v2 batches cover bytes [21, end)."""
    return google_crc32c.value(data if type(data) is bytes else bytes(data))


def crc32(data: bytes | bytearray | memoryview) -> int:
    """CRC-32 (IEEE) of ``data``; legacy messages cover magic through the end of the value."""
    return zlib.crc32(data) & 0xFFFFFFFF
