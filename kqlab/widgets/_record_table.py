"""``RecordTable``: a sortable, paged table of records, drawn in the page by a small
anywidget module (works in JupyterLab, Notebook 7, VS Code and marimo).

The table holds one page: the kernel answers every sort, page and filter through the
verdicts (:meth:`~kqlab.validate.view.VerdictsView.find`), so a page costs the same on a
million records or on Spark, and the page never holds more than ``page_size`` rows.  The
front end only sets :attr:`sort`, :attr:`page` and :attr:`selected`; whoever owns the table
(:class:`~kqlab.widgets.RejectionExplorer`) observes them and sends new :attr:`rows`.
Cells arrive as text already formatted for people (:mod:`kqlab.viz._people`).
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

__all__ = ["RecordTable"]

_HERE = Path(__file__).parent


class RecordTable(anywidget.AnyWidget):
    """One page of records: ``columns`` (``key``, ``label``, ``sort``: the
    :data:`~kqlab.validate.view.RECORD_ORDERS` entry the header sorts by, or ``""``;
    ``numeric``), ``rows`` (``id``, ``topic``, ``partition``, ``offset``, ``outcome``, ``cls``:
    CSS classes, ``cells``: column key -> text, ``titles``: column key -> full text), and the
    state the page sets: ``sort``, ``page``, ``selected`` (a row id, ``""`` for none)."""

    _esm = _HERE / "_record_table.js"
    _css = _HERE / "_record_table.css"

    columns = traitlets.List(traitlets.Dict()).tag(sync=True)
    rows = traitlets.List(traitlets.Dict()).tag(sync=True)
    sort = traitlets.Dict({"key": "log", "descending": False}).tag(sync=True)
    page = traitlets.Int(0).tag(sync=True)
    pages = traitlets.Int(1).tag(sync=True)
    matches = traitlets.Int(0).tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    #: shown instead of rows when the page is empty
    empty = traitlets.Unicode("").tag(sync=True)
