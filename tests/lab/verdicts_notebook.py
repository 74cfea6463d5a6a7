"""A notebook that replays the demo partition and shows the verdicts, executed and saved as
JupyterLab would save it (nbclient, a real kernel): what the size test weighs and what the
browser test opens with the kernel stopped."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_763_700_000_000
#: the notebook's cells: the demo partition written beside it, replayed, the verdicts shown
CELLS = [
    "import kqlab\n"
    "from kqlab.sources.demo import demo_policy_path, write_demo_segment\n"
    f"NOW = {NOW}\n"
    "sample = write_demo_segment('.', NOW)  # orders-0/ beside the notebook",
    "verdicts = kqlab.replay(sample, kqlab.load_policy(demo_policy_path()), now=NOW)\n"
    "verdicts",
]


def executed_verdicts_notebook(folder: Path, name: str = "verdicts.ipynb") -> Path:
    """Write, execute and save the notebook in ``folder`` (its sample lands there too)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    env_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.environ.setdefault("PYTHONPATH", env_path)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    path = folder / name
    nbformat.write(nb, path)
    return path
