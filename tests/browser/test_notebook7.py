"""The quickstart notebook in Notebook 7 (issue 16): the ``notebook`` package's UI at
``/notebooks/...``, served by a Jupyter server of its own (``conftest.py``), driven in Debian
chromium by ``e2e/tests/notebook7.spec.mjs``.

The spec also takes the README's screenshot of the workbench.  ``KQLAB_README_SHOT=<path>``
(``make readme-screenshot``) stores it there, refusing one of 150 kB or more: a picture in the
repository must stay small.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.browser.conftest import ARTIFACTS, ROOT, report, run_playwright

#: the most bytes the README's screenshot may weigh in the repository
README_SHOT_LIMIT = 150_000


def test_quickstart_in_notebook7(notebook7: str) -> None:
    """Run notebook 01 in Notebook 7: the workbench renders (figures' SVG with their bars,
    the explorer's rows) and responds (a row click selects and opens the detail; Undo
    re-judges, the outcomes and the figure follow the kernel)."""
    out = ARTIFACTS / "notebook7"
    proc = run_playwright("notebook7", notebook7, out)
    assert proc.returncode == 0, f"playwright failed (artifacts in {out}):\n{report(proc)}"
    assert "1 passed" in proc.stdout, report(proc)
    shots = {p.name: p for p in out.rglob("*.png")}
    assert sorted(shots) == ["01-notebook7.png", "02-notebook7-undone.png",
                             "readme-workbench.png"], sorted(shots)
    assert all(p.stat().st_size > 10_000 for p in shots.values())  # real pages, not blanks
    readme = shots["readme-workbench.png"]
    target = os.environ.get("KQLAB_README_SHOT")
    if target:
        size = readme.stat().st_size
        assert size < README_SHOT_LIMIT, f"the README screenshot weighs {size:,} bytes"
        dest = Path(target) if Path(target).is_absolute() else ROOT / target
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(readme, dest)
