"""Build hook for the optional C accelerator and the JupyterLab extension's shared files; all
metadata lives in pyproject.toml.

``kqlab.kafka._crecords`` speeds up ``kqlab.kafka.records_parser``; ``kqlab.serde._cjson``
reads JSON objects into Arrow columns for ``kqlab.serde.json_arrow``.  Both are ``optional``:
on a machine without a C compiler the install still succeeds and the pure-Python reference
(``kqlab.kafka._records_py``) and Arrow's JSON reader are used instead.
"""

from pathlib import Path

from setuptools import Extension, setup

# The prebuilt JupyterLab extension (built from extensions/kqlab-lab/ into kqlab/lab/labextension/,
# committed: users need no Node.js) goes where Jupyter looks for prebuilt extensions, and the
# server extension's endpoints are enabled for every Jupyter server of the environment.
LABEXT = Path("kqlab/lab/labextension")
data_files = [
    (str(Path("share/jupyter/labextensions/kqlab-lab") / d.relative_to(LABEXT)),
     sorted(str(f) for f in d.iterdir() if f.is_file()))
    for d in [LABEXT, *sorted(p for p in LABEXT.rglob("*") if p.is_dir())]
] + [("etc/jupyter/jupyter_server_config.d", ["jupyter-config/jupyter_server_config.d/kqlab.json"])]

setup(
    data_files=data_files,
    ext_modules=[
        Extension(
            "kqlab.kafka._crecords",
            ["kqlab/kafka/_crecords.c"],
            optional=True,
            extra_compile_args=["-O3"],
        ),
        Extension(
            "kqlab.serde._cjson",
            ["kqlab/serde/_cjson.c"],
            optional=True,
            extra_compile_args=["-O3"],
        ),
    ],
)
