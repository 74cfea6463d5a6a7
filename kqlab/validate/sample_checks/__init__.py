"""Sample-level checks (``checks:``): volume, freshness, null rate, duplicates, distinct
values, statistics, reject rate, drift and schema drift, computed in the replay's own pass.

See ``docs/sample-checks.md``.  The computation is split so any engine can take part:

* :mod:`.results` — the result tables (:data:`CHECK_RESULTS_SCHEMA`,
  :data:`CHECK_WINDOWS_SCHEMA`) and their text;
"""

from kqlab.validate.sample_checks.results import (
    CHECK_RESULTS_SCHEMA,
    CHECK_STATUSES,
    CHECK_WINDOWS_SCHEMA,
    CheckResults,
    describe_check,
    empty_check_results,
)

__all__ = ["CHECK_RESULTS_SCHEMA", "CHECK_STATUSES", "CHECK_WINDOWS_SCHEMA", "CheckResults",
           "describe_check", "empty_check_results"]
