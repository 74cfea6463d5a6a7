"""The plotly.js the views ship: the *basic* partial bundle vendored under ``vendor/``.

plotly.py carries the full plotly.js (4.8 MB, every trace type); kqlab's figures use two
trace types, ``scatter`` and ``bar`` (:data:`kqlab.viz._figures.TRACE_TYPES`), which plotly's
basic bundle holds in 1.2 MB.  The report embeds this file instead of the full bundle (a
self-contained report under 1.5 MB) and the widgets' figure view loads it once per kernel
instead of once per figure (executed notebooks stay small).  See ``vendor/README.md`` for
where it comes from and how to update it.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["CDN_URL", "FILE_NAME", "TRACES", "VERSION", "bundle_text"]

#: the vendored plotly.js version (the npm package ``plotly.js-basic-dist-min``)
VERSION = "4.1.1"
#: the file under ``kqlab/viz/vendor/``; written under this name next to a report
FILE_NAME = "plotly-basic.min.js"
#: the trace types the basic bundle registers
TRACES = frozenset({"scatter", "bar", "pie"})
#: where plotly's CDN serves the same bundle (``kqlab report --plotly-js cdn``)
CDN_URL = f"https://cdn.plot.ly/plotly-basic-{VERSION}.min.js"


@cache
def bundle_text() -> str:
    """The bundle's source (read once per process)."""
    return (resources.files("kqlab.viz") / "vendor" / FILE_NAME).read_text(encoding="utf-8")
