"""kqlab's anywidget views in marimo (issue 16): ``marimo run`` serves
``tests/browser/marimo_view.py`` on a free 127.0.0.1 port, and ``e2e/tests/marimo.spec.mjs``
checks in Debian chromium that the figure (PlotlyFigure) and the explorer's record table
(RecordTable) render through ``mo.ui.anywidget`` and respond to sorting and selecting."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import (
    ARTIFACTS,
    free_port,
    kernel_env,
    report,
    require_tools,
    run_playwright,
    stop,
    wait_for,
)

APP = Path(__file__).with_name("marimo_view.py")


@pytest.fixture(scope="module")
def marimo_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``marimo run`` of the view app (read-only app mode, no token) on a free loopback port."""
    require_tools()
    home = tmp_path_factory.mktemp("marimo")
    port = free_port()
    cmd = [sys.executable, "-m", "marimo", "run", str(APP), "--host", "127.0.0.1",
           "--port", str(port), "--headless", "--no-token", "--no-sandbox"]
    env = kernel_env(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"),
                     XDG_CACHE_HOME=str(home / "cache"), XDG_STATE_HOME=str(home / "state"),
                     MARIMO_SKIP_UPDATE_CHECK="1")
    log_path = home / "marimo.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(f"{url}/health", proc, log_path, "marimo")
            yield url
        finally:
            stop(proc)


def test_views_in_marimo(marimo_app: str) -> None:
    """The figure's SVG has its bar traces; the table lists a page of rows; a header click
    sorts through the kernel; a row click selects, and the kernel's explorer opens that
    record (the assertions: e2e/tests/marimo.spec.mjs)."""
    out = ARTIFACTS / "marimo"
    proc = run_playwright("marimo", marimo_app, out)
    assert proc.returncode == 0, f"playwright failed (artifacts in {out}):\n{report(proc)}"
    assert "1 passed" in proc.stdout, report(proc)
    shots = sorted(p.name for p in out.rglob("*.png"))
    assert shots == ["01-marimo.png", "02-marimo-selected.png"], shots
