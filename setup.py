"""Build hook for the optional C accelerator; all metadata lives in pyproject.toml.

``kqlab.kafka._crecords`` speeds up ``kqlab.kafka.records_parser``.  It is ``optional``: on a
machine without a C compiler the install still succeeds and the pure-Python reference
(``kqlab.kafka._records_py``) is used instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kqlab.kafka._crecords",
            ["kqlab/kafka/_crecords.c"],
            optional=True,
            extra_compile_args=["-O3"],
        ),
    ],
)
