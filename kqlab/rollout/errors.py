"""The rollout layer's one exception type (light: the command line's parser imports it)."""

from __future__ import annotations

from kqlab.errors import KqlabError

__all__ = ["RolloutError"]


class RolloutError(KqlabError, ValueError):
    """A what-if or rollout plan cannot be computed as asked (the message says what to give)."""
