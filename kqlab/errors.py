"""Exception types raised by kqlab.

Bad *data* never raises: corrupt bytes become verdicts or labelled decode errors.  These
exceptions are for bad *requests* — a path that does not exist, a config value that does not
parse, an option combination that makes no sense.  Each message says what to do about it.
"""

from __future__ import annotations


class KqlabError(Exception):
    """Base class of every exception kqlab raises on purpose."""


class ConfigError(KqlabError, ValueError):
    """A topic/broker config name or value is invalid (message names the key and the fix)."""


class LogPathError(KqlabError, FileNotFoundError):
    """A log segment path does not exist or holds no ``*.log`` segment files."""


class CodecError(KqlabError):
    """Encoding was asked for something the wire format cannot express."""
