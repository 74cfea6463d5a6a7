"""The kqlab-lab extension ships prebuilt (issue 20): the committed assets are built from the
current TypeScript sources, Jupyter finds the extension enabled in this environment (what
``make setup`` sets up), the wheel carries it to ``share/jupyter/labextensions`` with the
server extension's config, and the server extension's answers are kqlab's loader's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kqlab
from kqlab.lab import EXTENSION, LABEXTENSION_DIR, _jupyter_labextension_paths
from kqlab.lab.handlers import RequestError, inside, validate_text
from kqlab.sources.demo import demo_policy_path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_built_assets_match_the_sources():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_labextension.py"),
                           "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_built_package_names_the_extension_and_its_mime_renderer():
    meta = json.loads((LABEXTENSION_DIR / "package.json").read_text())
    assert meta["name"] == EXTENSION
    build = meta["jupyterlab"]["_build"]
    assert (LABEXTENSION_DIR / build["load"]).is_file()
    # the plugin (policy documents) and the MIME renderer are both exposed by the bundle
    assert build["extension"] == "./extension" and build["mimeExtension"] == "./mimeExtension"
    assert _jupyter_labextension_paths() == [{"src": "labextension", "dest": EXTENSION}]


def test_jupyter_lists_the_extension_enabled():
    out = subprocess.run([str(BIN / "jupyter"), "labextension", "list"],
                         capture_output=True, text=True, check=True)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    assert re.search(rf"^\s*{EXTENSION} v\S+ enabled OK", text, re.M), text
    server = subprocess.run([str(BIN / "jupyter"), "server", "extension", "list"],
                            capture_output=True, text=True, check=True)
    text = re.sub(r"\x1b\[[0-9;]*m", "", server.stdout + server.stderr)
    assert re.search(r"kqlab\.lab\s+enabled", text), text


def test_setup_ships_the_assets_and_the_server_config():
    """setup.py's data_files (what a wheel installs): every built file, under its name."""
    text = (ROOT / "setup.py").read_text()
    assert '"share/jupyter/labextensions/kqlab-lab"' in text
    assert "jupyter-config/jupyter_server_config.d/kqlab.json" in text
    config = json.loads((ROOT / "jupyter-config/jupyter_server_config.d/kqlab.json").read_text())
    assert config == {"ServerApp": {"jpserver_extensions": {"kqlab.lab": True}}}


def test_validate_gives_the_loaders_own_message():
    text = demo_policy_path().read_text().replace("kind: field_range", "kind: field_rang", 1)
    reply = validate_text(text, "policies/orders.yaml")
    with pytest.raises(kqlab.PolicyError) as err:
        kqlab.loads_policy(text, source="policies/orders.yaml")
    assert reply == {"ok": False, "error": {
        "message": str(err.value), "line": err.value.line, "column": err.value.column,
        "key": err.value.key, "reason": err.value.reason, "file": "policies/orders.yaml"}}
    ok = validate_text(demo_policy_path().read_text(), "orders.yaml")
    assert ok == {"ok": True, "policy": "orders-quality",
                  "rules": len(kqlab.load_policy(demo_policy_path()).rules)}


def test_sample_paths_stay_under_the_root(tmp_path):
    (tmp_path / "orders-0").mkdir()
    assert inside(tmp_path, "orders-0", "sample") == (tmp_path / "orders-0").resolve()
    with pytest.raises(RequestError, match=r"'\.\./x' is outside the server's root folder"):
        inside(tmp_path, "../x", "sample")
    with pytest.raises(RequestError, match="'nope' does not exist"):
        inside(tmp_path, "nope", "sample")
