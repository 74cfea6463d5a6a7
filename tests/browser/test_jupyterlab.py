"""The real-browser test (issue 7): JupyterLab on 127.0.0.1, Debian chromium driven by
Playwright (``e2e/``), the quickstart notebook run in the page and the workbench used there.

This module only sets the stage — a throw-away copy of the notebooks (JupyterLab autosaves, and
executed notebooks must never land in the repo), JupyterLab's runtime/settings folders inside
it, a free port — and runs ``npx playwright test``; the assertions on the DOM live in
``e2e/tests/*.spec.mjs``.  Screenshots are kept under ``out/browser/`` as artifacts.

Nothing is skipped: a machine without chromium or the npm packages fails here with the command
that installs them (``make setup-browser``, which ``make test`` and ``.ci/run`` run first).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
E2E = ROOT / "e2e"
ARTIFACTS = ROOT / "out" / "browser"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
NOTEBOOKS = ("01_quickstart.ipynb", "02_authoring_a_policy.ipynb")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _require_tools() -> None:
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"chromium at {CHROMIUM}")
    if not (E2E / "node_modules" / "@playwright" / "test").is_dir():
        missing.append("the npm packages of e2e/ (@playwright/test, playwright-core)")
    if shutil.which("npx") is None:
        missing.append("node/npx")
    if missing:
        pytest.fail("the browser test needs " + "; ".join(missing)
                    + ": run `make setup-browser` (apt-get install chromium; npm ci in e2e/)",
                    pytrace=False)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A JupyterLab server on a free loopback port, serving a copy of the notebooks."""
    _require_tools()
    home = tmp_path_factory.mktemp("lab")
    root = home / "notebooks"
    root.mkdir()
    for name in NOTEBOOKS:
        shutil.copy(ROOT / "notebooks" / name, root / name)
    settings = home / "settings"
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    # no news toast over the page
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings") \
        .write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port = _free_port()
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTER_DATA_DIR": str(home / "data"),
           "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter")}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1",
           "--port", str(port), "--allow-root", "--ServerApp.token=", "--ServerApp.password=",
           "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={root}",
           "--LabApp.expose_app_in_browser=True",
           "--FileContentsManager.delete_to_trash=False"]
    log = (home / "lab.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start on {url}:\n"
                                + (home / "lab.log").read_text()[-3000:], pytrace=False)
                time.sleep(0.25)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down itself
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_quickstart_in_jupyterlab(lab: str) -> None:
    """Run notebook 01 in the page, add a rule through the PolicyEditor, see its count and the
    figures follow (full width, no background), sort the explorer's table and open a record
    detail, see a filter clear it, switch to the dark theme; run notebook 02 and edit in the
    page: the editor's figures follow every edit and undo, the form shows the edited rule's
    kind (the assertions: e2e/tests/quickstart.spec.mjs)."""
    out = ARTIFACTS / "quickstart"
    if out.exists():
        shutil.rmtree(out)
    env = {**os.environ, "LAB_URL": lab, "CHROMIUM": CHROMIUM,
           "KQLAB_E2E_ARTIFACTS": str(out), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1",
           "CI": "1"}
    proc = subprocess.run(["npx", "--no-install", "playwright", "test", "quickstart"],
                          cwd=E2E, env=env, capture_output=True, text=True, timeout=600)
    report = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, f"playwright failed (artifacts in {out}):\n{report}"
    assert "2 passed" in proc.stdout, report
    shots = sorted(p.name for p in out.rglob("*.png"))
    assert shots == ["01-workbench.png", "02-rule-form.png", "03-rule-added.png",
                     "04-figures.png", "05-record-detail.png", "05b-dark-theme.png",
                     "06-authoring.png", "07-form-kind.png"], shots
    assert all(p.stat().st_size > 10_000 for p in out.rglob("*.png"))  # real pages, not blanks
