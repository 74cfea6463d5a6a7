"""The table checks' bookkeeping: one verdict per batch row, decided in the broker's order
(the first check that fails a row decides it), with each decision's check and parameters kept
as data (:class:`Cascade`), plus the marker for rows the tables alone cannot judge."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.checks._check import Check, ParamsPart
from kqlab.kafka.checks.request import (
    whole_request_message,
)

#: ``check`` of rows the tables alone cannot judge (see the module docstring)
UNDETERMINED = "undetermined"
UNDET_CODE = 10_000  # internal code for undetermined rows
V2_MIN = 61
#: ``check`` of a batch with record errors, by which kinds it has (bits: P 4, R3 2, R4 1)
CHECK_LABELS = np.array(["+".join(c for c, bit in (("P", 4), ("R3", 2), ("R4", 1)) if k & bit)
                          for k in range(8)], dtype=object)

#: a decision's text: the same for every row, one per batch row, or computed per decided row
Text: TypeAlias = str | np.ndarray | Callable[[int], str] | None


def column_np(table: pa.Table, name: str, fill: object, dtype: npt.DTypeLike) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        col = pc.fill_null(col, fill)
    return np.asarray(col.to_numpy(), dtype=dtype)


class Cascade:
    """Per-batch verdict arrays filled in the broker's order: the first decision sticks."""

    def __init__(self, n: int):
        self.decided = np.zeros(n, dtype=bool)
        self.code = np.zeros(n, dtype=np.int32)
        self.check: np.ndarray = np.full(n, None, dtype=object)
        self.detail: np.ndarray = np.full(n, None, dtype=object)
        self.message: np.ndarray = np.full(n, None, dtype=object)
        #: the parameters of every decision made with a :class:`Check` (the ``params`` column)
        self.params: list[ParamsPart] = []

    def open(self, mask: np.ndarray) -> np.ndarray:
        """Indices of ``mask`` rows not decided yet."""
        return np.flatnonzero(mask & ~self.decided)

    def decide(self, mask: np.ndarray, code: int, check: str, detail: Text,
               message: Text = None) -> np.ndarray:
        """Decide the open rows of ``mask``; ``detail``/``message`` are a str, f(i) -> str or
        an object array with one entry per batch (only the decided rows' entries are read)."""
        idx = self.open(mask)
        if not len(idx):
            return idx
        self.decided[idx] = True
        self.code[idx] = code
        self.check[idx] = check
        done: dict[int, list] = {}
        for arr, val in ((self.detail, detail), (self.message, message)):
            if isinstance(val, np.ndarray):
                arr[idx] = val[idx]
            elif callable(val):
                if id(val) not in done:
                    done[id(val)] = [val(i) for i in idx.tolist()]
                arr[idx] = done[id(val)]
            elif val is not None:
                arr[idx] = val
        return idx

    def by(self, mask: np.ndarray, check: Check, params: dict[str, object] | None = None, *,
           whole_request: bool = False) -> np.ndarray:
        """Decide the open rows of ``mask`` with ``check``: the detail text is rendered from
        the check's template and ``params`` (scalars, or arrays with one entry per batch row),
        which the verdict keeps as data; ``whole_request`` also returns the text as the
        client's ``error_message`` where §5.4 keeps it."""
        idx = self.open(mask)
        if not len(idx):
            return idx
        vals = {k: (v[idx] if isinstance(v, np.ndarray) else v)
                for k, v in (params or {}).items()}
        texts = check.render_array(vals).to_numpy(zero_copy_only=False)
        if len(texts) != len(idx):  # no per-row parameter: one text for all
            texts = np.full(len(idx), texts[0], dtype=object)
        self.decided[idx] = True
        self.code[idx] = check.code
        self.check[idx] = check.step
        self.detail[idx] = texts
        if whole_request:
            self.message[idx] = [whole_request_message(check.error, t) for t in texts.tolist()]
        self.params.append((idx, vals))
        return idx

    def undetermined(self, mask: np.ndarray, why: str) -> None:
        self.decide(mask, UNDET_CODE, UNDETERMINED, why)
