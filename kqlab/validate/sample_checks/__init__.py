"""Sample-level checks (``checks:``): volume, freshness, null rate, duplicates, distinct
values, statistics, reject rate, drift and schema drift, computed in the replay's own pass.

See ``docs/sample-checks.md``.  The computation is split so any engine can take part:

* :mod:`.columns` — per-record inputs in canonical forms (groups, windows, field values);
* :mod:`.compute` — one chunk's :class:`Partial` per check (the local engine's kernels);
* :mod:`.partials` — the partial tables (:data:`PARTIAL_SCHEMAS`), mergeable by group-by;
* :mod:`.baseline` / :mod:`.shapes` — what drift and schema drift compare with;
* :mod:`.finish` — merged partials judged into results (shared by every engine);
* :mod:`.run` — :class:`CheckRun`, fed chunk by chunk by the replay;
* :mod:`.results` — the result tables (:data:`CHECK_RESULTS_SCHEMA`,
  :data:`CHECK_WINDOWS_SCHEMA`) and their text.
"""

from kqlab.validate.sample_checks.baseline import BaselinePlan, baseline_plan
from kqlab.validate.sample_checks.compute import Chunk, extent_of, partial_of
from kqlab.validate.sample_checks.finish import PSI_FLOOR, finish_check, psi
from kqlab.validate.sample_checks.partials import (
    PARTIAL_LAYOUT,
    PARTIAL_SCHEMAS,
    Extent,
    Partial,
    merge_partials,
)
from kqlab.validate.sample_checks.results import (
    CHECK_RESULTS_SCHEMA,
    CHECK_STATUSES,
    CHECK_WINDOWS_SCHEMA,
    CheckResults,
    describe_check,
    empty_check_results,
)
from kqlab.validate.sample_checks.run import CheckRun, partial_key, run_checks

__all__ = ["CHECK_RESULTS_SCHEMA", "CHECK_STATUSES", "CHECK_WINDOWS_SCHEMA", "PARTIAL_LAYOUT",
           "PARTIAL_SCHEMAS", "PSI_FLOOR", "BaselinePlan", "CheckResults", "CheckRun", "Chunk",
           "Extent", "Partial", "baseline_plan", "describe_check", "empty_check_results",
           "extent_of", "finish_check", "merge_partials", "partial_key", "partial_of", "psi",
           "run_checks"]
