"""Views of a replay: plotly figures built from verdicts, the record detail, policy impact,
and masking of the policy's sensitive data.

Every figure is a pure function of the verdicts (plus the sample where a view reads record
content) returning a plain ``plotly.graph_objects.Figure``; widgets wrap them.  The verdicts
are any :class:`~kqlab.validate.view.VerdictsView` — the local engine's or Spark's, which
aggregate natively; the views never ask which.  Names load on
first use, so ``from kqlab.viz import unmask`` (or an exporter using the masking helpers)
does not import plotly.

Examples
--------
>>> import kqlab.viz as viz
>>> viz.unmask(False)   # sensitive data stays masked (the default)
>>> viz.MASK
'•••'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: public name -> module that defines it
_EXPORTS = {
    "MASK": "kqlab.viz._masking",
    "Masker": "kqlab.viz._masking",
    "masker": "kqlab.viz._masking",
    "unmask": "kqlab.viz._masking",
    "unmasked": "kqlab.viz._masking",
    "is_unmasked": "kqlab.viz._masking",
    "ViewError": "kqlab.validate.view",
    "sample_tables": "kqlab.viz._groups",
    "rejections_by_reason": "kqlab.viz._figures",
    "rejections_by_offset": "kqlab.viz._figures",
    "rejection_timeline": "kqlab.viz._figures",
    "by_producer": "kqlab.viz._figures",
    "by_schema_id": "kqlab.viz._figures",
    "by_key_pattern": "kqlab.viz._figures",
    "RecordDetail": "kqlab.viz._detail",
    "record_detail": "kqlab.viz._detail",
    "impact_table": "kqlab.viz._impact",
    "policy_impact": "kqlab.viz._impact",
    "RuleColors": "kqlab.viz._style",
    "FailureGroup": "kqlab.viz._failures",
    "failure_groups": "kqlab.viz._failures",
}

__all__ = [
    "MASK",
    "FailureGroup",
    "Masker",
    "RecordDetail",
    "RuleColors",
    "ViewError",
    "by_key_pattern",
    "by_producer",
    "by_schema_id",
    "failure_groups",
    "impact_table",
    "is_unmasked",
    "masker",
    "policy_impact",
    "record_detail",
    "rejection_timeline",
    "rejections_by_offset",
    "rejections_by_reason",
    "sample_tables",
    "unmask",
    "unmasked",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kqlab.viz' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from kqlab.validate.view import ViewError
    from kqlab.viz._detail import RecordDetail, record_detail
    from kqlab.viz._failures import FailureGroup, failure_groups
    from kqlab.viz._figures import (
        by_key_pattern,
        by_producer,
        by_schema_id,
        rejection_timeline,
        rejections_by_offset,
        rejections_by_reason,
    )
    from kqlab.viz._groups import sample_tables
    from kqlab.viz._impact import impact_table, policy_impact
    from kqlab.viz._masking import MASK, Masker, is_unmasked, masker, unmask, unmasked
    from kqlab.viz._style import RuleColors
