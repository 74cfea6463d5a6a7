"""The verdicts' rule table: one row per rule of a replay, its schema and the one merge of it.

Every engine (the local replay, the streamed replay, Spark's units, Spark streaming) writes
rule rows of :data:`RULES_SCHEMA`; a replay cut into chunks merges its chunks' rows with
:func:`merge_rule_rows`, so no engine sums them its own way.  Besides the counts, a row says
what the replay found out about the rule itself (:mod:`kqlab.validate.rule_health` computes
it): how many records it judged, whether every judgement errored (``broken``) and the names
it reads that no judged record has (``unseen``, as :class:`Unseen`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from kqlab.policy.model import Rule

__all__ = ["HEALTH_COLUMNS", "RULES_SCHEMA", "SUMS", "UNSEEN_TYPE", "Unseen", "health_row",
           "merge_rule_rows"]

#: one unseen name of a rule: ``what`` (``field`` or ``header``), the dotted ``name``, the
#: ``nearest`` name seen (null: none close) and how many records were ``looked_at``
UNSEEN_TYPE = pa.list_(pa.struct([("what", pa.string()), ("name", pa.string()),
                                  ("nearest", pa.string()), ("looked_at", pa.int64())]))
#: the rule-table columns this module fills (after the counts)
HEALTH_COLUMNS = (("judged_records", pa.int64()), ("broken", pa.bool_()),
                  ("unseen", UNSEEN_TYPE))
RULES_SCHEMA = pa.schema([
    ("rule", pa.string()), ("kind", pa.string()), ("mode", pa.string()),
    ("severity", pa.string()), ("exportable", pa.bool_()), ("failed_records", pa.int64()),
    ("rejected_records", pa.int64()), ("rejected_batches", pa.int64()),
    ("evaluation_errors", pa.int64()),
    # what the replay knows about the rule itself (kqlab.validate.rule_health)
    *HEALTH_COLUMNS,
])


@dataclass(frozen=True, slots=True)
class Unseen:
    """A field or header a rule reads that none of the ``looked_at`` records has."""

    what: str
    name: str
    nearest: str | None
    looked_at: int

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "name": self.name, "nearest": self.nearest,
                "looked_at": self.looked_at}


def health_row(unseen: Sequence[Unseen], judged: int, errors: int) -> dict[str, Any]:
    """A rule row's health columns: ``broken`` when it judged records and every judgement
    was an evaluation error."""
    return {"judged_records": judged, "broken": bool(judged and errors >= judged),
            "unseen": [u.to_dict() for u in unseen]}


#: the count columns a rule row sums over chunks (streamed and Spark replays)
SUMS = ("failed_records", "rejected_records", "rejected_batches", "evaluation_errors",
        "judged_records")


def merge_rule_rows(rules: Sequence[Rule], parts: Iterable[Sequence[Mapping[str, Any]]]
                    ) -> pa.Table:
    """One rule table from the rule rows of a replay's chunks (a streamed replay's chunks,
    Spark's units): counts summed; a name is unseen only when no chunk saw it (its records
    looked at summed over the chunks that looked); broken when every judgement of every
    chunk errored.  The one merge every engine uses."""
    totals = {r.id: dict.fromkeys(SUMS, 0) for r in rules}
    unseen: dict[str, dict[tuple[str, str], dict[str, Any]] | None] = {}
    for rows in parts:
        for row in rows:
            rid = row["rule"]
            if rid not in totals:
                continue
            for c in SUMS:
                totals[rid][c] += int(row.get(c) or 0)
            names = {(u["what"], u["name"]): u for u in row.get("unseen") or ()}
            have = unseen.get(rid, {}) if rid in unseen else None
            if rid not in unseen:
                unseen[rid] = {k: dict(u) for k, u in names.items()}
            elif have is not None:
                kept = {}
                for k, u in have.items():
                    if k in names:
                        u["looked_at"] += names[k]["looked_at"]
                        u["nearest"] = u["nearest"] or names[k]["nearest"]
                        kept[k] = u
                unseen[rid] = kept
    out = []
    for r in rules:
        t = totals[r.id]
        found = unseen.get(r.id) or {}
        out.append({"rule": r.id, "kind": r.kind, "mode": r.mode, "severity": r.severity,
                    "exportable": r.exportable, **t,
                    "broken": bool(t["judged_records"]
                                   and t["evaluation_errors"] >= t["judged_records"]),
                    "unseen": list(found.values())})
    return pa.Table.from_pylist(out, RULES_SCHEMA)
