"""Reading the ``gate.yaml`` that ``kqlab export --target gate`` writes
(:mod:`kqlab.export.gate`): ``{kqlab_gate: 1, policy: {path, content_hash}, topics: [{source,
sink, dlq}]}``.

The content hash is the point of the file: a gate refuses a policy file that was edited after
it was vetted and exported, so what runs in production is what the analyst replayed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kqlab.gate._gate import GateError, Route

__all__ = ["GateFile", "load_gate_file"]

_KNOWN = {"kqlab_gate", "policy", "topics"}


class GateFile:
    """A parsed gate.yaml: the policy's path and hash, and the routes."""

    def __init__(self, path: Path, policy_path: Path, content_hash: str | None,
                 routes: tuple[Route, ...]):
        self.path, self.policy_path, self.content_hash, self.routes = \
            path, policy_path, content_hash, routes


#: the gate config format this gate reads (``kqlab export --target gate`` writes it)
GATE_VERSION = 1


def load_gate_file(path: str | Path) -> GateFile:
    """Parse and check ``path``; a relative policy path is relative to the file's folder
    (else, when nothing is there, to the working directory)."""
    p = Path(path)
    try:
        doc: Any = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise GateError(f"{p}: cannot read the gate config: {exc}") from None
    if not isinstance(doc, dict):
        raise GateError(f"{p}: a gate config is a mapping with kqlab_gate, policy, topics")
    unknown = sorted(set(doc) - _KNOWN)
    if unknown:
        raise GateError(f"{p}: unknown key(s) {', '.join(unknown)}")
    if doc.get("kqlab_gate") != GATE_VERSION:
        raise GateError(f"{p}: kqlab_gate must be {GATE_VERSION}, got {doc.get('kqlab_gate')!r}")
    pol = doc.get("policy") or {}
    if not isinstance(pol, dict) or not pol.get("path"):
        raise GateError(f"{p}: policy.path is required")
    policy_path = Path(pol["path"])
    # a relative path is the config's own folder's (what the exporter writes: the folder
    # runs wherever it is copied); the working directory only when nothing is there
    if not policy_path.is_absolute() and ((p.parent / policy_path).exists()
                                          or not policy_path.exists()):
        policy_path = p.parent / policy_path
    routes = []
    for i, t in enumerate(doc.get("topics") or ()):
        if not isinstance(t, dict) or set(t) != {"source", "sink", "dlq"}:
            raise GateError(f"{p}: topics[{i}] needs exactly source, sink and dlq")
        routes.append(Route(source=str(t["source"]), sink=str(t["sink"]), dlq=str(t["dlq"])))
    return GateFile(p, policy_path, pol.get("content_hash"), tuple(routes))
