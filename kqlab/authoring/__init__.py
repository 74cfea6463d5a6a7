"""Authoring a policy against a sample, engine- and widget-free: :class:`AuthoringSession`
holds the policy, its edit history, the sample, the verdicts, suggestions and golden
examples, and tells its observers what changed (the widgets of ``kqlab.widgets`` are views of
one).  Notebooks, the CLI and tests use it directly.
"""

from kqlab.authoring.policy_edits import EditError, check_cel, check_policy
from kqlab.authoring.session import AuthoringSession, RunInfo, SessionChange, SessionError

__all__ = ["AuthoringSession", "EditError", "RunInfo", "SessionChange", "SessionError",
           "check_cel", "check_policy"]
