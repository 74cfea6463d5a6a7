"""A notebook view of a running stream: one row per micro-batch, added as it arrives.

Why a widget of its own: a streaming query reports from a listener thread, after the cell
that started it has returned; an ``ipywidgets.HTML`` whose value is replaced per micro-batch
updates in place in the notebook (and its last state is what a saved notebook shows).  It
reads only what each micro-batch reported (:class:`~kqlab.spark.streaming.MicroBatch`, or the
enforcer's per-batch dict), never the query itself.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["StreamView", "render_rows"]

#: rows kept on screen (the totals line counts every micro-batch)
SHOWN = 12


def _row(b: Any) -> dict[str, Any]:
    """A micro-batch as the view's plain dict (MicroBatch objects or enforcer dicts)."""
    d = b.to_dict() if hasattr(b, "to_dict") else dict(b)
    out = d.get("outcomes") or {}
    return {"batch_id": d.get("batch_id"), "records": int(d.get("records") or 0),
            "accepted": int(out.get("accepted", d.get("forwarded", 0)) or 0),
            "rejected": int(out.get("rejected", d.get("dead_lettered", 0)) or 0),
            "collateral": int(out.get("collateral", 0) or 0),
            "reject_rate": float(d.get("reject_rate") or 0.0),
            "lag": d.get("lag"), "by_rule": dict(d.get("by_rule") or {}),
            "seconds": d.get("seconds")}


def render_rows(rows: Sequence[Mapping[str, Any]], title: str) -> str:
    """The view's HTML: a totals line and the last :data:`SHOWN` micro-batches, newest
    first (rule names and ids escaped)."""
    n = sum(r["records"] for r in rows)
    bad = sum(r["rejected"] + r["collateral"] for r in rows)
    totals: dict[str, int] = {}
    for r in rows:
        for k, v in r["by_rule"].items():
            totals[k] = totals.get(k, 0) + int(v)
    top = ", ".join(f"{html.escape(k)} {v:,}" for k, v in
                    sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:4])
    head = (f"<div class='kqlab-stream-totals'><b>{html.escape(title)}</b>: "
            f"{len(rows)} micro-batches, {n:,} records, {bad:,} not appended "
            f"({bad / n:.2%})" if n else
            f"<div class='kqlab-stream-totals'><b>{html.escape(title)}</b>: waiting for the "
            "first micro-batch")
    head += (f"; by rule: {top}" if top else "") + "</div>"
    cells = []
    for r in reversed(rows[-SHOWN:]):
        rules = ", ".join(f"{html.escape(k)} {v:,}" for k, v in list(r["by_rule"].items())[:3])
        lag = "" if r["lag"] is None else f"{int(r['lag']):,}"
        cells.append(
            f"<tr><td>{r['batch_id']}</td><td>{r['records']:,}</td><td>{r['accepted']:,}</td>"
            f"<td>{r['rejected']:,}</td><td>{r['collateral']:,}</td>"
            f"<td>{r['reject_rate']:.2%}</td><td>{lag}</td><td>{rules}</td></tr>")
    table = ("<table class='kqlab-stream-batches'><thead><tr><th>batch</th><th>records</th>"
             "<th>accepted</th><th>rejected</th><th>collateral</th><th>reject rate</th>"
             "<th>lag</th><th>top rules</th></tr></thead><tbody>" + "".join(cells)
             + "</tbody></table>")
    return head + table


class StreamView:
    """The view: ``add(micro_batch)`` from any thread; display it like a widget."""

    def __init__(self, title: str = "stream") -> None:
        import ipywidgets as widgets

        self.title = title
        self.rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.widget = widgets.HTML(value=render_rows([], title))
        self.widget.add_class("kqlab-stream-view")

    def add(self, batch: Any) -> None:
        """Add one micro-batch's row and redraw."""
        with self._lock:
            self.rows.append(_row(batch))
            self.widget.value = render_rows(self.rows, self.title)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
