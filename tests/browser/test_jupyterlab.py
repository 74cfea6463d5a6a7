"""The real-browser test (issue 7): JupyterLab on 127.0.0.1, Debian chromium driven by
Playwright (``e2e/``), the quickstart notebook run in the page and the workbench used there.

The server (a throw-away copy of the notebooks on a free port) is ``conftest.py``'s; this
module runs ``npx playwright test quickstart``, whose assertions on the DOM live in
``e2e/tests/quickstart.spec.mjs``.  Screenshots are kept under ``out/browser/`` as artifacts.
"""

from __future__ import annotations

from tests.browser.conftest import ARTIFACTS, report, run_playwright


def test_quickstart_in_jupyterlab(lab: str) -> None:
    """Run notebook 01 in the page, add a rule through the PolicyEditor, see its count and the
    figures follow (full width, no background), sort the explorer's table and open a record
    detail, see a filter clear it, switch to the dark theme; run notebook 02 and edit in the
    page: the editor's figures follow every edit and undo, the form shows the edited rule's
    kind (the assertions: e2e/tests/quickstart.spec.mjs)."""
    out = ARTIFACTS / "quickstart"
    proc = run_playwright("quickstart", lab, out)
    assert proc.returncode == 0, f"playwright failed (artifacts in {out}):\n{report(proc)}"
    assert "2 passed" in proc.stdout, report(proc)
    shots = sorted(p.name for p in out.rglob("*.png"))
    assert shots == ["01-workbench.png", "02-rule-form.png", "03-rule-added.png",
                     "04-figures.png", "05-record-detail.png", "05b-dark-theme.png",
                     "06-authoring.png", "07-form-kind.png"], shots
    assert all(p.stat().st_size > 10_000 for p in out.rglob("*.png"))  # real pages, not blanks
