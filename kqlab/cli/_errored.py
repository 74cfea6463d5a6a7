"""``kqlab replay --errors``: the records a rule could not judge, listed.

An evaluation error is a status of its own in the verdicts (a failure whose ``status`` is
``error``), not a false.  This lists those records through the one query every view uses
(:class:`~kqlab.validate.view.RecordQuery` with ``errors=True``, the explorer's "evaluation
errors" filter too), so the CLI, the explorer and records.parquet count the same records,
and each rule's rows equal the summary's ``evaluation_errors`` for it.
"""

from __future__ import annotations

from typing import Any, TextIO

__all__ = ["errored_records", "print_errored"]

#: records fetched per page of the query
_PAGE = 1000


def errored_records(verdicts: Any) -> dict[str, Any]:
    """Every errored failure of the replay: ``records`` (how many records have one),
    ``by_rule`` (errored failures per rule) and ``rows`` (topic, partition, offset, outcome,
    rule and message of each, in log order)."""
    from kqlab.validate.view import RecordQuery

    query = RecordQuery(errors=True)
    rows: list[dict[str, Any]] = []
    start, matches = 0, None
    while matches is None or start < matches:
        page = verdicts.find(query, start, _PAGE)
        matches = page.matches
        for rec in page.rows.to_pylist():
            rows.extend({"topic": rec["topic"], "partition": rec["partition"],
                         "offset": rec["offset"], "outcome": rec["outcome"],
                         "rule": f["rule"], "message": f["message"]}
                        for f in rec["failures"] or [] if f["status"] == "error")
        start += _PAGE
        if not page.rows.num_rows:
            break
    by_rule: dict[str, int] = {}
    for r in rows:
        by_rule[r["rule"]] = by_rule.get(r["rule"], 0) + 1
    return {"records": int(matches or 0), "by_rule": by_rule, "rows": rows}


def print_errored(errored: dict[str, Any], *, out: TextIO | None = None) -> None:
    """The errored records as a table, after a line saying how many."""
    from kqlab.cli._ui import console, show, styled, table

    c = console(out)
    if not errored["rows"]:
        c.print(styled("evaluation errors: none (no rule failed to judge a record)", "ok"))
        return
    per_rule = ", ".join(f"{rule} {n:,}" for rule, n in errored["by_rule"].items())
    c.print(styled(f"evaluation errors: {errored['records']:,} record(s) a rule could not "
                   f"judge ({per_rule})", "error"))
    rows = [(f"{r['topic']}-{r['partition']}", r["offset"], r["outcome"], r["rule"],
             r["message"]) for r in errored["rows"]]
    show(table(("partition", "offset", "outcome", "rule", "message"), rows,
               title="errored records", right=("offset",)), out=c)
