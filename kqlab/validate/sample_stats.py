"""Statistics of a sample, by Arrow and numpy kernels: the numbers rule suggestions start from.

:func:`sample_records` reduces any sample (a records table, a :class:`~kqlab.validate.Sample`,
a snapshot folder, log segments) to the records a client produced (transaction markers left
out); the helpers read quantiles without interpolation (observed values only, so results are
deterministic), count recurring values, and round bounds to powers of two or ten (head-room a
person would choose).  :mod:`kqlab.validate.rule_suggestion` turns these numbers into rules.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from kqlab.sources.files import Snapshot
    from kqlab.validate.sample import Sample

__all__ = ["SampleLike", "as_number", "pow2_ceil", "pow10_ceil", "quantiles", "recurring",
           "sample_records"]

#: what a sample can be given as: a records table, a replay ``Sample``, a ``Snapshot`` (or its
#: folder), or log segments (a segment file or a partition folder)
SampleLike: TypeAlias = "pa.Table | Sample | Snapshot | str | Path"


def _data_only(records: pa.Table, batches: pa.Table | None) -> pa.Table:
    """The records outside transaction-marker batches (what a client produced)."""
    if batches is None or not batches.num_rows or "is_control" not in batches.column_names:
        return records
    control = batches.column("is_control").to_numpy(zero_copy_only=False).astype(bool)
    if not control.any():
        return records
    from kqlab.kafka.table_checks import records_per_batch

    rows = np.repeat(np.arange(batches.num_rows), records_per_batch(batches, records.num_rows))
    return records.filter(pa.array(~control[rows]))


def sample_records(sample: SampleLike) -> pa.Table:
    """The data records of a records table, ``Sample``, snapshot folder or log segments."""
    from kqlab.validate.sample import Sample

    if isinstance(sample, pa.Table):
        return sample
    if isinstance(sample, Sample):
        return _data_only(sample.records, sample.batches)
    from kqlab.sources.files import Snapshot, is_snapshot

    if isinstance(sample, Snapshot) or (isinstance(sample, str | Path) and is_snapshot(sample)):
        snap = sample if isinstance(sample, Snapshot) else Snapshot.open(sample)
        records = snap.records()
        return _data_only(records, snap.batches()) if snap.framing == "exact" else records
    if isinstance(sample, str | Path):
        from kqlab.kafka.log import read_log

        log = read_log(sample)
        return _data_only(log.records, log.batches)
    raise TypeError(f"cannot suggest rules from a {type(sample).__name__}: pass a records "
                    "table, a Sample, a snapshot folder or a segment path")


def pow2_ceil(x: float) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 if x <= 1 else 1 << math.ceil(math.log2(x))


def pow10_ceil(x: float) -> float:
    """The smallest power of ten >= x (x > 0)."""
    return 10.0 ** math.ceil(math.log10(x) - 1e-12)


def as_number(x: float, integral: bool) -> int | float:
    """``x`` as an int when the column is integral or ``x`` is whole (``10`` not ``10.0``)."""
    return int(x) if integral or float(x).is_integer() else float(x)


def quantiles(values: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """The ``qs`` quantiles of ``values``, each an observed value ("inverted_cdf"):
    deterministic, no interpolation artefacts."""
    return [float(v) for v in np.quantile(values, qs, method="inverted_cdf")]


def recurring(arr: pa.Array, min_support: int) -> tuple[list[str], int, int]:
    """Of a text column: (values seen >= min_support times sorted, their distinct count, all
    distinct count)."""
    counts = pc.value_counts(arr.drop_null())
    values = counts.field("values").to_pylist()
    n = counts.field("counts").to_numpy(zero_copy_only=False)
    keep = sorted(str(v) for v, c in zip(values, n.tolist(), strict=True) if c >= min_support)
    return keep, len(keep), len(values)
