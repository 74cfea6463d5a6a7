"""``PlotlyFigure``: the widgets' view of a plotly figure, an anywidget that loads plotly.js
once per kernel rather than once per figure.

Why not ``go.FigureWidget``: each one is an anywidget whose front-end module *is* the whole
plotly.js bundle (5 MB in its ``_esm``), so every figure in a widget carries its own copy —
saved notebooks weighed 11 to 22 MB.  Here the figure's module is a few kB of JavaScript, and
plotly.js (the basic bundle, :mod:`kqlab.viz._plotlyjs`, 1.2 MB) sits in one shared model,
:class:`PlotlyJs`, that every figure references; the page evaluates it once.  The figure
itself travels as its JSON (numbers as typed arrays), and an update replaces that JSON, which
the view redraws with ``Plotly.react`` (same element, zoom kept).  The shared model holds the
bundle gzip-compressed (0.5 MB of base64 instead of 1.2 MB of text; the page inflates it with
the browser's ``DecompressionStream``), so a saved notebook carries half a megabyte of
plotly.js once.

What the view adds to the figure: text and grid colours from the page's theme (JupyterLab's
light or dark theme, VS Code's, or the background it sits on), redrawn when the theme
changes; the container's width (``responsive``, and a resize observer for panels and tabs that
were hidden when the figure was drawn).  Works wherever anywidget does (JupyterLab, Notebook 7,
VS Code, marimo).
"""

from __future__ import annotations

import base64
import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import anywidget
import ipywidgets as w
import traitlets

from kqlab.viz._plotlyjs import VERSION, bundle_text
from kqlab.viz._style import CONFIG, THEMES

__all__ = ["PlotlyFigure", "PlotlyJs", "plotly_js"]

_HERE = Path(__file__).parent


class PlotlyJs(w.Widget):
    """The plotly.js bundle as a widget model of its own (no view): figures reference it, so
    a page — and a saved notebook — holds one copy whatever the number of figures."""

    #: the bundle's source, gzip-compressed, base64 (text: every widget host syncs it as is)
    source_gz = traitlets.Unicode("").tag(sync=True)
    version = traitlets.Unicode("").tag(sync=True)

    @property
    def source(self) -> str:
        """The bundle's source text."""
        return gzip.decompress(base64.b64decode(self.source_gz)).decode("utf-8")


@cache
def _compressed() -> str:
    return base64.b64encode(gzip.compress(bundle_text().encode("utf-8"), 9, mtime=0)).decode()


_SHARED: PlotlyJs | None = None


def plotly_js() -> PlotlyJs:
    """The kernel's one :class:`PlotlyJs` (made on first use, again if it was closed)."""
    global _SHARED
    if _SHARED is None or _SHARED.comm is None:  # closed: its model left the page
        _SHARED = PlotlyJs(source_gz=_compressed(), version=VERSION)
    return _SHARED


class PlotlyFigure(anywidget.AnyWidget):
    """A plotly figure in a widget; :meth:`update` shows another figure in the same view.

    Parameters
    ----------
    fig
        A ``go.Figure`` (or its dict) to show.
    """

    _esm = _HERE / "_plot.js"
    _css = _HERE / "_plot.css"

    #: the figure's JSON (``data``, ``layout``), as plotly.py writes it
    figure = traitlets.Dict().tag(sync=True)
    #: plotly.js config (:data:`kqlab.viz._style.CONFIG`: responsive, no logo)
    config = traitlets.Dict().tag(sync=True)
    #: text/grid colours per page theme (:data:`kqlab.viz._style.THEMES`)
    themes = traitlets.Dict().tag(sync=True)
    _plotly = traitlets.Instance(PlotlyJs, allow_none=True).tag(
        sync=True, **w.widget_serialization)

    def __init__(self, fig: Any = None, **kwargs: Any):
        kwargs.setdefault("config", dict(CONFIG))
        kwargs.setdefault("themes", THEMES)
        super().__init__(_plotly=plotly_js(), **kwargs)
        self._text = "{}"
        if fig is not None:
            self.update(fig)

    def update(self, fig: Any) -> None:
        """Show ``fig`` (a ``go.Figure`` or its dict) instead: one message to the page."""
        text = json.dumps(fig) if isinstance(fig, dict) else fig.to_json()
        self._text = text
        self.figure = json.loads(text)

    def to_json(self) -> str:
        """The shown figure's JSON (as ``go.Figure.to_json`` gave it)."""
        return self._text

    def to_dict(self) -> dict[str, Any]:
        """The shown figure as a dict."""
        return json.loads(self._text)
