"""Sample checks in a real browser (issue 21): notebook 08 run in JupyterLab, its ChecksPanel
shows each check's status and the sparklines, and a threshold typed into the panel re-judges
the check at once (the assertions: ``e2e/tests/checks.spec.mjs``)."""

from __future__ import annotations

from tests.browser.conftest import ARTIFACTS, report, run_playwright


def test_checks_panel_in_jupyterlab(lab: str) -> None:
    out = ARTIFACTS / "checks"
    proc = run_playwright("checks", lab, out)
    assert proc.returncode == 0, f"playwright failed (artifacts in {out}):\n{report(proc)}"
    assert "1 passed" in proc.stdout, report(proc)
    shots = sorted(p.name for p in out.rglob("*.png"))
    assert shots == ["01-checks-panel.png", "02-threshold-typed.png"], shots
