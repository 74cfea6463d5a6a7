"""JSON-shaped data as a type: what a policy file holds beyond its fixed fields.

Rule parameters, inline JSON Schemas, plugin options, golden example records, broker configs
and provenance samples are plain data: null, booleans, numbers, text, lists and mappings with
text keys.  YAML (or a caller's dict) gives them as ``dict`` / ``list``; the frozen model keeps
them as read-only mappings and tuples, so policies hash and compare by value.  Both forms are
:data:`PlainData`, which is why the alias names the abstract ``Sequence`` / ``Mapping``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

__all__ = ["ParamValue", "PlainData"]

#: JSON-shaped data, mutable (dict/list, as read) or frozen (read-only mapping/tuple)
PlainData: TypeAlias = (
    bool | int | float | str | Sequence["PlainData"] | Mapping[str, "PlainData"] | None
)

#: the value of one rule parameter: plain data whose type the declaring
#: :class:`~kqlab.policy.catalog.Param` states at run time (``int``, ``list[str]`` ...), so no
#: static type narrower than "any" fits every ``Rule.param(name)`` call; the loader has checked
#: it against that declaration, and each rule kernel reads the type its kind declares
ParamValue: TypeAlias = Any
