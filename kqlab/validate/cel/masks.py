"""Row masks: numpy bool arrays over the sample, where ``None`` means "no such row".

Most sub-expressions have no null and no undecidable row; carrying ``None`` instead of an
all-false array spares an allocation and an ``|`` per operator on the hot path.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["Mask", "and_mask", "andnot", "andnot_opt", "integral", "np_bool", "nulls_of",
           "or_masks"]

Mask = npt.NDArray[np.bool_]


def or_masks(*masks: Mask | None) -> Mask | None:
    """The union of the masks given (None when all are None); never aliases an input."""
    out: Mask | None = None
    for m in masks:
        if m is None:
            continue
        out = m.copy() if out is None else (out | m)
    return out


def andnot(mask: Mask, other: Mask | None) -> Mask:
    """``mask & ~other``."""
    return mask if other is None else mask & ~other


def andnot_opt(mask: Mask | None, other: Mask) -> Mask | None:
    """``mask & ~other``, None when ``mask`` is."""
    return None if mask is None else mask & ~other


def and_mask(mask: Mask, other: Mask | None) -> Mask | None:
    """``mask & other``, None when ``other`` is."""
    return None if other is None else mask & other


def np_bool(arr: pa.Array | pa.ChunkedArray | pa.Scalar) -> Mask:
    """A boolean Arrow result as a numpy mask, null → False."""
    if isinstance(arr, pa.ChunkedArray):
        out = arr.fill_null(pa.scalar(False)).to_numpy()
    elif isinstance(arr, pa.Array):
        out = arr.fill_null(False).to_numpy(zero_copy_only=False)
    else:  # a kernel given two scalars answers with one; callers broadcast them first
        raise TypeError(f"a boolean column, not {type(arr).__name__}")
    return out.astype(bool, copy=False)


def nulls_of(arr: pa.Array) -> Mask | None:
    """The null rows of ``arr`` (None when it has none)."""
    if arr.null_count == 0:
        return None
    return np_bool(arr.is_null())


def integral(x: npt.ArrayLike) -> Mask:
    """Finite values without a fractional part (a double that may stand for an int)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(np.isfinite(x) & (np.floor(x) == x), dtype=bool)
