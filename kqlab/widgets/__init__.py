"""Jupyter widgets of kqlab, thin over the Python API: :class:`PolicyEditor`,
:class:`ReplayPanel`, :class:`RejectionExplorer`, :class:`ChecksPanel` (sample checks) and
the :class:`Workbench` composing them;
:class:`RolloutView` shows the what-if per enforcement point and the rollout plan.

The editor, the panel and the workbench are views of one
:class:`~kqlab.authoring.AuthoringSession` (policy, history, sample, verdicts, suggestions,
golden examples): they observe it and call its methods, so they cannot disagree.  Every
control's action is a method (the button calls it), so notebooks run unattended and tests
drive the widgets without a kernel.  Key controls carry the stable CSS classes listed in
:data:`CSS` (browser tests find them in the DOM).  This package is the only one importing
ipywidgets; ``import kqlab`` does not load it.
"""

from __future__ import annotations

try:
    import ipywidgets  # noqa: F401
except ImportError as exc:  # pragma: no cover - the lab extra is missing
    raise ImportError("kqlab.widgets needs ipywidgets and plotly: pip install 'kqlab[lab]'"
                      ) from exc

from kqlab.widgets._checks import CHECKS_CSS, ChecksPanel
from kqlab.widgets._common import CSS, FIGURES, slug
from kqlab.widgets._editor import EditError, PolicyEditor, RuleForm, check_cel
from kqlab.widgets._explorer import RejectionExplorer
from kqlab.widgets._plot import PlotlyFigure
from kqlab.widgets._record_table import RecordTable
from kqlab.widgets._replay import ReplayCancelled, ReplayPanel
from kqlab.widgets._rollout import ROLLOUT_CSS, RolloutView
from kqlab.widgets._workbench import Workbench

__all__ = [
    "CHECKS_CSS",
    "CSS",
    "FIGURES",
    "ROLLOUT_CSS",
    "ChecksPanel",
    "EditError",
    "PlotlyFigure",
    "PolicyEditor",
    "RecordTable",
    "RejectionExplorer",
    "ReplayCancelled",
    "ReplayPanel",
    "RolloutView",
    "RuleForm",
    "Workbench",
    "check_cel",
    "slug",
]
