"""Build the kqlab-lab JupyterLab extension (extensions/kqlab-lab/) into kqlab/lab/labextension/.

The built assets are committed, so users and CI need no Node.js; this script is for whoever
changes the TypeScript.  It runs ``npm ci`` (the pinned lockfile), ``tsc`` and the standard
JupyterLab builder against the installed JupyterLab's own package metadata (so the shared
modules match the JupyterLab kqlab runs in), then records a digest of the sources beside the
assets.  ``--check`` only compares that digest with the sources (what tests/lab runs): stale
assets fail with this command to run.

    .venv/bin/python scripts/build_labextension.py          # needs node + npm
    .venv/bin/python scripts/build_labextension.py --check
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "extensions" / "kqlab-lab"
OUT = ROOT / "kqlab" / "lab" / "labextension"
DIGEST = OUT / "sources.sha256"
#: what the built assets are made from (node_modules and tsc's output are not sources)
INPUTS = ("package.json", "package-lock.json", "tsconfig.json", "src", "style")


def sources_digest() -> str:
    """SHA-256 over the extension's source files (relative path and bytes, in path order)."""
    h = hashlib.sha256()
    files = []
    for name in INPUTS:
        p = SOURCES / name
        files.extend(sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p])
    for f in files:
        h.update(f.relative_to(SOURCES).as_posix().encode() + b"\0")
        h.update(f.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return h.hexdigest()


def check() -> int:
    """0 when the committed assets were built from the current sources."""
    want = sources_digest()
    have = DIGEST.read_text().strip() if DIGEST.exists() else "(none)"
    if have != want:
        print(f"kqlab/lab/labextension/ is stale: built from sources {have[:12]}, the sources "
              f"are {want[:12]}: run `python scripts/build_labextension.py` and commit "
              "kqlab/lab/labextension/", file=sys.stderr)
        return 1
    return 0


def build() -> int:
    """npm ci, tsc, the JupyterLab builder, the digest."""
    if shutil.which("npm") is None:
        print("building the extension needs node + npm (Node >= 20)", file=sys.stderr)
        return 1
    import jupyterlab

    core = Path(jupyterlab.__file__).parent / "staging" / "package.json"
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    run = [
        ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        ["npm", "run", "build:lib"],
        [str(Path(bin_dir) / "jupyter-builder"), "build", "--core-package-file", str(core), "."],
    ]
    if OUT.exists():
        shutil.rmtree(OUT)
    for cmd in run:
        subprocess.run(cmd, cwd=SOURCES, env=env, check=True)
    DIGEST.write_text(sources_digest() + "\n")
    size = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"built {OUT.relative_to(ROOT)} ({size:,} bytes)")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only check the assets are up to date")
    sys.exit(check() if ap.parse_args().check else build())
