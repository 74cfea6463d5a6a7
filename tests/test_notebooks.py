"""The notebooks run headless and stay small.

Each notebook of ``notebooks/`` is executed once, as ``jupyter nbconvert --execute --to
notebook`` does (nbclient, widget state saved): every cell must run without an error (the
preprocessor raises ``CellExecutionError`` naming the cell), and the executed notebook (issue
16) weighs at most 2 MB — it weighed 21.6 MB (01) and 11.2 MB (02) when every
``go.FigureWidget`` carried its own 5 MB copy of plotly.js — and holds plotly.js once at
most, in the one shared model of :class:`kqlab.widgets._plot.PlotlyJs` (gzip-compressed)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbconvert.preprocessors import ExecutePreprocessor

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_BYTES = 2_000_000
#: no single widget model may carry a bundle: anything this big is plotly.js (or worse)
MAX_MODEL = 600_000


def test_every_notebook_is_checked():
    names = {p.name for p in NOTEBOOKS}
    assert {"01_quickstart.ipynb", "02_authoring_a_policy.ipynb", "03_replay_on_spark.ipynb",
            "04_export_the_vetted_policy.ipynb", "05_wire_level.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_valid_nbformat_with_cell_ids(path):
    """Committed as nbformat 4.5 wants them: valid, every cell with its own id (a cell
    added by hand without one is a warning today and an error in later nbformat), and no
    outputs (generated, never committed)."""
    raw = json.loads(path.read_text())
    ids = [c.get("id") for c in raw["cells"]]
    assert None not in ids and len(set(ids)) == len(ids), path.name
    assert all(not c.get("outputs") for c in raw["cells"] if c["cell_type"] == "code")
    nbformat.validate(nbformat.reads(path.read_text(), as_version=4))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_headless_and_weighs_at_most_2_mb(path, tmp_path):
    """One execution serves both checks (nbmake ran each notebook a second time)."""
    nb = nbformat.read(path, as_version=4)
    ExecutePreprocessor(timeout=600, kernel_name="python3").preprocess(
        nb, {"metadata": {"path": str(path.parent)}})
    out = tmp_path / path.name
    nbformat.write(nb, out)
    size = out.stat().st_size
    state = nb.metadata.get("widgets", {}).get(
        "application/vnd.jupyter.widget-state+json", {}).get("state", {})
    models = {mid: len(json.dumps(m)) for mid, m in state.items()}
    bundles = [mid for mid, m in state.items() if "source_gz" in m.get("state", {})]
    big = {mid: n for mid, n in models.items() if n > MAX_MODEL}
    assert len(bundles) <= 1, "plotly.js saved more than once"
    assert not big, f"widget models over {MAX_MODEL:,} bytes: {big}"
    assert not any(len(m["state"].get("_esm", "")) > 100_000 for m in state.values()), \
        "a widget carries a bundle in its front-end module (go.FigureWidget?)"
    assert size <= MAX_BYTES, f"{path.name} executed weighs {size:,} bytes " \
        f"({len(models)} widget models, {sum(models.values()):,} bytes of widget state)"
