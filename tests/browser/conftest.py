"""The stage of the real-browser tests: a Jupyter server (JupyterLab and Notebook 7 from one
process) on a free 127.0.0.1 port over a throw-away copy of the notebooks, and the runner of
``npx playwright test`` (Debian chromium; the DOM assertions live in ``e2e/tests/``).

Why a copy: JupyterLab and Notebook 7 autosave, and executed notebooks must never land in the
repo.  JupyterLab's runtime/settings/data folders live inside the copy, so nothing is written
to the home folder.  Nothing is skipped: a machine without chromium or the npm packages fails
here with the command that installs them (``make setup-browser``, which ``make test`` and
``.ci/run`` run first).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
E2E = ROOT / "e2e"
ARTIFACTS = ROOT / "out" / "browser"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
#: the notebooks JupyterLab opens (at the server's root)
NOTEBOOKS = ("01_quickstart.ipynb", "02_authoring_a_policy.ipynb", "08_sample_checks.ipynb")
#: where Notebook 7's copy of notebook 01 lives (a server of its own: the ``notebook7`` fixture)
NOTEBOOK7_DIR = "notebook7"


def free_port() -> int:
    """A free loopback port (the servers bind 127.0.0.1 only)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_tools() -> None:
    """Fail (never skip) without chromium, node/npx or the npm packages of ``e2e/``."""
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


def kernel_env(**extra: str) -> dict[str, str]:
    """The servers' environment: kernels import this checkout's ``kqlab``."""
    return {**os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            **extra}


def wait_for(url: str, proc: subprocess.Popen[bytes], log: Path, what: str,
             timeout: float = 60) -> None:
    """Poll ``url`` until it answers; fail with the server's log if it dies or times out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{what} did not start on {url}:\n" + log.read_text()[-3000:],
                            pytrace=False)
            time.sleep(0.25)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a server shuts its kernels down itself), then SIGKILL its process group."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def jupyter_server(home: Path, notebooks: Mapping[str, str],
                   extra_args: tuple[str, ...] = ()) -> Iterator[str]:
    """A Jupyter server (JupyterLab at ``/lab``, Notebook 7 at ``/notebooks``) on a free
    loopback port, serving copies of ``notebooks`` (name in ``notebooks/`` -> path under the
    root) with its settings, workspaces and runtime folders inside ``home``."""
    require_tools()
    root = home / "notebooks"
    root.mkdir()
    for name, where in notebooks.items():
        (root / where).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "notebooks" / name, root / where)
    settings = home / "settings"
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    # no news toast over the page
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings") \
        .write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port = free_port()
    env = kernel_env(JUPYTERLAB_SETTINGS_DIR=str(settings),
                     JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
                     JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                     JUPYTER_DATA_DIR=str(home / "data"),
                     JUPYTER_PATH=str(Path(sys.prefix) / "share" / "jupyter"))
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1",
           "--port", str(port), "--allow-root", "--ServerApp.token=", "--ServerApp.password=",
           "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={root}",
           "--LabApp.expose_app_in_browser=True",
           "--JupyterNotebookApp.expose_app_in_browser=True",
           "--FileContentsManager.delete_to_trash=False", *extra_args]
    log_path = home / "lab.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(f"{url}/api/status", proc, log_path, "the Jupyter server")
            yield url
        finally:
            stop(proc)


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """JupyterLab serving a copy of the notebooks it runs."""
    with jupyter_server(tmp_path_factory.mktemp("lab"), {n: n for n in NOTEBOOKS}) as url:
        yield url


@pytest.fixture(scope="session")
def notebook7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server of its own for Notebook 7: after JupyterLab's pages, a Notebook 7 page on the
    same server tries to open JupyterLab's file browser (``filebrowser:open-path``, a command
    Notebook 7's notebook page does not have) and throws."""
    with jupyter_server(tmp_path_factory.mktemp("notebook7"),
                        {"01_quickstart.ipynb": f"{NOTEBOOK7_DIR}/01_quickstart.ipynb"}) as url:
        yield url


def run_playwright(spec: str, base_url: str, artifacts: Path,
                   extra_env: Mapping[str, str] | None = None, timeout: int = 600
                   ) -> subprocess.CompletedProcess[str]:
    """Run the ``e2e/tests/<spec>*.spec.mjs`` tests against ``base_url``; their screenshots
    land in ``artifacts`` (emptied first)."""
    if artifacts.exists():
        shutil.rmtree(artifacts)
    env = {**os.environ, "LAB_URL": base_url, "CHROMIUM": CHROMIUM,
           "KQLAB_E2E_ARTIFACTS": str(artifacts), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1",
           "CI": "1", **(extra_env or {})}
    return subprocess.run(["npx", "--no-install", "playwright", "test", spec],
                          cwd=E2E, env=env, capture_output=True, text=True, timeout=timeout)


def report(proc: subprocess.CompletedProcess[str]) -> str:
    """The tail of a Playwright run's output, for assertion messages."""
    return proc.stdout[-6000:] + proc.stderr[-3000:]
