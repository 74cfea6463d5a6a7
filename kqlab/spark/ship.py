"""kqlab on the executors as users ship it: a packed Python environment for ``spark.archives``.

Why: on a cluster the executors run Python functions (``mapInArrow`` replaying a unit, the
``kqlab-kafka`` reader) that import kqlab, its C extensions and its dependencies.  Installing
them on every worker couples the cluster to one job; Spark's own answer is an archive of a
whole environment, unpacked next to each executor (``spark.archives=env.tar.gz#environment``)
and run as ``./environment/bin/python``.  :func:`pack_environment` builds that archive from
the environment running this code, offline:

1. a wheel of kqlab itself (``pip wheel --no-deps``: the C accelerators compiled), or the
   installed kqlab when it is not an editable checkout;
2. a fresh virtualenv (no pip) with kqlab's run-time dependency closure copied in from this
   environment's installed distributions (by their ``RECORD`` files: nothing is downloaded);
3. ``venv-pack`` (``pip install venv-pack``, in kqlab's ``dev`` extra) into a ``.tar.gz``.

venv-pack keeps the interpreter outside the archive (the workers need the same Python
version at the same path); ``conda-pack`` packs the interpreter too
(docs/spark-cluster.md shows both).  :func:`ship_conf` says what to set on a classic session;
:func:`ship_to` ships the archive over Spark Connect (``addArtifacts``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from kqlab.errors import KqlabError

#: where executors find the unpacked environment (the ``#name`` of ``spark.archives``)
ENV_NAME = "environment"


class ShipError(KqlabError):
    """The environment could not be built or packed (missing tool, unbuildable wheel)."""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str = "kqlab", extras: tuple[str, ...] = ()) -> list[metadata.Distribution]:
    """The installed distributions ``root`` (with ``extras``) needs at run time, itself
    included; a requirement not installed here raises :class:`ShipError`."""
    from packaging.requirements import Requirement

    seen: dict[str, metadata.Distribution] = {}
    todo: list[tuple[str, tuple[str, ...]]] = [(root, tuple(extras))]
    while todo:
        name, want = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise ShipError(f"{name} is required by kqlab but not installed in this "
                            f"environment ({sys.prefix}); pip install it first") from None
        key = _norm(dist.metadata["Name"])
        if key in seen and not want:
            continue
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            envs = [{"extra": e} for e in want] or [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(e) for e in envs):
                continue
            if _norm(req.name) not in seen or req.extras:
                todo.append((req.name, tuple(sorted(req.extras))))
    return sorted(seen.values(), key=lambda d: _norm(d.metadata["Name"]))


def _project_root() -> Path | None:
    """The source checkout kqlab runs from (an editable install), or None (installed)."""
    import kqlab

    root = Path(kqlab.__file__).resolve().parents[1]
    if "site-packages" in root.parts or "dist-packages" in root.parts:
        return None
    return root if (root / "pyproject.toml").is_file() and (root / "setup.py").is_file() \
        else None


def sources_hash(extras: tuple[str, ...] = ()) -> str:
    """What the archive is made of, hashed: kqlab's sources (an editable checkout) or its
    version, the dependency versions and the Python version.  A cache key."""
    h = hashlib.sha256(f"{sys.version_info[:3]}|{extras}".encode())
    for d in closure("kqlab", extras):
        h.update(f"{d.metadata['Name']}=={d.version};".encode())
    root = _project_root()
    if root is not None:
        files = [root / "pyproject.toml", root / "setup.py",
                 *sorted((root / "kqlab").rglob("*.py")), *sorted((root / "kqlab").rglob("*.c")),
                 *sorted((root / "kqlab").rglob("*.json")),
                 *sorted((root / "kqlab").rglob("*.yaml"))]
        for f in files:
            if "labextension" in f.parts:
                continue
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def build_wheel(dest: Path) -> Path:
    """A wheel of the kqlab checkout this code runs from (C extensions compiled), built in
    a copy of the sources so the checkout gets no ``build/`` folder."""
    root = _project_root()
    if root is None:
        raise ShipError("kqlab is not running from a source checkout: pass wheel= a built "
                        "kqlab wheel (pip wheel kqlab)")
    with tempfile.TemporaryDirectory(prefix="kqlab-wheel-") as tmp:
        src = Path(tmp) / "src"
        ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "node_modules",
                                        "build")
        src.mkdir()
        for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
            if (root / name).exists():
                shutil.copy2(root / name, src / name)
        shutil.copytree(root / "kqlab", src / "kqlab", ignore=ignore)
        if (root / "jupyter-config").is_dir():
            shutil.copytree(root / "jupyter-config", src / "jupyter-config")
        run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                              "--no-build-isolation", "-q", "-w", str(dest), str(src)],
                             capture_output=True, text=True)
        if run.returncode:
            raise ShipError(f"building the kqlab wheel failed: {run.stderr.strip()[-800:]}")
    wheels = sorted(dest.glob("kqlab-*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise ShipError(f"pip wheel wrote no kqlab wheel into {dest}")
    return wheels[-1]


def _copy_dist(dist: metadata.Distribution, site: Path) -> None:
    """Copy one installed distribution's files (per its RECORD) into ``site``."""
    base = Path(str(dist.locate_file("")))
    for f in dist.files or []:
        rel = Path(str(f))
        if rel.parts and rel.parts[0] == "..":  # scripts in bin/, data files: not needed
            continue
        if "__pycache__" in rel.parts:
            continue
        src = base / rel
        if src.is_file():
            dst = site / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def pack_environment(out: str | Path, *, extras: tuple[str, ...] = (),
                     wheel: str | Path | None = None, compress_level: int = 1) -> Path:
    """Build ``out`` (a ``.tar.gz``): a relocatable environment with kqlab and what it needs
    at run time, for ``spark.archives`` (see :func:`ship_conf`)."""
    try:
        import venv_pack
    except ImportError as exc:
        raise ShipError("packing an environment needs venv-pack: pip install venv-pack "
                        "(or conda-pack for a conda environment)") from exc
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kqlab-env-") as tmp:
        env = Path(tmp) / "env"
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True)
        site = next((env / "lib").glob("python3*")) / "site-packages"
        kq = metadata.distribution("kqlab")
        for dist in closure("kqlab", extras):
            if _norm(dist.metadata["Name"]) != "kqlab":
                _copy_dist(dist, site)
        if wheel is None and _project_root() is not None:
            wheel = build_wheel(Path(tmp) / "wheel")
        if wheel is not None:
            run = subprocess.run([sys.executable, "-m", "pip", "--python",
                                  str(env / "bin" / "python"), "install", "-q", "--no-deps",
                                  "--no-index", "--no-compile", str(wheel)],
                                 capture_output=True, text=True)
            if run.returncode:
                raise ShipError(f"installing {wheel} failed: {run.stderr.strip()[-800:]}")
        else:
            _copy_dist(kq, site)
        part = out.with_name(out.name + ".part")
        part.unlink(missing_ok=True)
        venv_pack.pack(prefix=str(env), output=str(part), format="tar.gz",
                       compress_level=compress_level)
        os.replace(part, out)
    return out


def ship_conf(archive: str | Path) -> dict[str, str]:
    """The session settings that ship ``archive`` to every executor and run its Python
    there (classic sessions, ``spark-submit --conf``; the driver keeps its own Python)."""
    return {"spark.archives": f"{archive}#{ENV_NAME}",
            "spark.pyspark.python": f"./{ENV_NAME}/bin/python"}


def ship_to(spark: Any, archive: str | Path) -> None:
    """Ship ``archive`` over Spark Connect: upload it as a session artifact (unpacked next
    to each executor) and run this session's Python functions with its interpreter."""
    spark.addArtifacts(f"{archive}#{ENV_NAME}", archive=True)
    spark.conf.set("spark.sql.execution.pyspark.python", f"{ENV_NAME}/bin/python")
