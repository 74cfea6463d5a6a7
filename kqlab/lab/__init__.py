"""kqlab's JupyterLab side: the prebuilt ``kqlab-lab`` extension and its server endpoints.

The extension (TypeScript sources in ``extensions/kqlab-lab/``, built into ``labextension/``
here and installed to ``share/jupyter/labextensions/kqlab-lab`` by ``pip install``) renders
``application/vnd.kqlab.verdicts+json`` outputs (:mod:`kqlab.validate.mime`) and treats kqlab
policy files as documents.  Its problem markers and replays come from the endpoints of
:mod:`kqlab.lab.handlers`, which run kqlab's own loader and replay, so the editor shows exactly
the messages ``kqlab`` prints.  Nothing here is imported by ``import kqlab``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: the npm name of the extension (its folder under ``share/jupyter/labextensions``)
EXTENSION = "kqlab-lab"
#: the built extension shipped in the package (``jupyter labextension build`` writes it)
LABEXTENSION_DIR = Path(__file__).parent / "labextension"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where Jupyter finds the prebuilt extension when installed from this package."""
    return [{"src": "labextension", "dest": EXTENSION}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The server extension Jupyter loads (enabled by ``jupyter-config/kqlab.json``)."""
    return [{"module": "kqlab.lab"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    """Add the ``/kqlab/...`` endpoints to the Jupyter server."""
    from kqlab.lab.handlers import setup_handlers

    setup_handlers(server_app.web_app, Path(server_app.root_dir))
    server_app.log.info("kqlab: policy endpoints at /kqlab/policy/{validate,replay}")
