"""kqlab's anywidget views in marimo (the browser test serves this app with ``marimo run``).

The figure view (:class:`kqlab.widgets.PlotlyFigure`) and the record table
(:class:`kqlab.widgets.RecordTable`) are anywidgets, so they are meant to work outside
Jupyter too; this app shows both through ``mo.ui.anywidget`` on the demo ``orders`` topic.
The table is the :class:`~kqlab.widgets.RejectionExplorer`'s own: sorting and selecting in
the page set its traits, the explorer answers in the kernel (a new page of rows, the selected
record's detail), and a reactive cell prints what the kernel now holds — which is what
``e2e/tests/marimo.spec.mjs`` asserts against.
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full")


@app.cell
def _():
    import os
    import tempfile

    import marimo as mo

    import kqlab
    from kqlab.sources import demo_topics
    from kqlab.viz import rejections_by_reason
    from kqlab.widgets import PlotlyFigure, RejectionExplorer

    NOW = 1_763_700_000_000  # a fixed clock: the same verdicts on every run
    demo = demo_topics.generate(tempfile.mkdtemp(prefix="kqlab-marimo-"), NOW, scale=0.5)
    orders = tempfile.mkdtemp(prefix="kqlab-marimo-orders-")
    for name, folder in demo.folders.items():
        if name.startswith("orders-"):
            os.symlink(folder, os.path.join(orders, name))
    policy = demo_topics.load_policies()["orders"]
    replayer = kqlab.Replayer(orders, now=NOW)
    verdicts = replayer.run(policy)
    explorer = RejectionExplorer(verdicts, replayer, policy)
    figure = mo.ui.anywidget(PlotlyFigure(rejections_by_reason(verdicts)))
    table = mo.ui.anywidget(explorer.table)
    return explorer, figure, mo, table, verdicts


@app.cell
def _(figure, mo, table, verdicts):
    mo.vstack([
        mo.md(f"**kqlab in marimo** — {verdicts.by_outcome()}"),
        figure,
        table,
    ])
    return


@app.cell
def _(explorer, mo, table):
    # re-runs whenever the page changes the table (a sort, a page, a selection)
    _selected = table.value.get("selected", "")
    _detail = explorer.detail
    _id = "" if _detail is None else f"{_detail.topic}|{_detail.partition}|{_detail.offset}"
    _text = "none" if _detail is None else (
        f"{_detail.topic}-{_detail.partition} @ {_detail.offset} ({_detail.outcome}; failed: "
        + (", ".join(sorted({f["rule"] for f in _detail.failures})) or "nothing itself") + ")")
    _sort = table.value.get("sort", {})
    mo.md(f'<div class="kqlab-marimo-state" data-selected="{_selected}" data-detail="{_id}" '
          f'data-sort="{_sort.get("key", "")}:{int(bool(_sort.get("descending")))}">'
          f"selected in the kernel: {_text}</div>")
    return


if __name__ == "__main__":
    app.run()
