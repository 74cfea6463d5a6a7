"""The server endpoints of the kqlab-lab extension: kqlab's own loader and replay, over HTTP.

Why a server endpoint rather than a re-implementation in TypeScript: the editor's problem
markers must say exactly what ``kqlab`` says when it loads the file (one loader, one message),
and "Replay on the sample…" must give the verdict core's numbers.  The requests carry the
editor's current text (unsaved edits included) and the file's path under the server root.

``POST /kqlab/policy/validate``  ``{"path", "text"}`` →
    ``{"ok": true, "policy", "rules"}`` or ``{"ok": false, "error": {message, line, column,
    key, reason, file}}`` (the :class:`~kqlab.policy.PolicyError`'s fields)
``POST /kqlab/policy/replay``  ``{"path", "text", "sample", "now"?}`` →
    ``{"ok": true, "payload"}`` (the ``application/vnd.kqlab.verdicts+json`` payload) or the
    policy error as above; a sample outside the server root or missing is a 400 with a message.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from kqlab.errors import KqlabError


class RequestError(KqlabError, ValueError):
    """A request the endpoints cannot serve (a missing field, a path outside the root)."""


def validate_text(text: str, source: str) -> dict[str, Any]:
    """Load ``text`` as kqlab loads a policy file; the outcome as JSON-ready data."""
    from kqlab.policy import PolicyError, loads_policy

    try:
        policy = loads_policy(text, source=source)
    except PolicyError as exc:
        return {"ok": False, "error": policy_error(exc)}
    return {"ok": True, "policy": policy.name, "rules": len(policy.rules)}


def policy_error(exc: Any) -> dict[str, Any]:
    """A :class:`~kqlab.policy.PolicyError` as data (``message`` is its ``str``)."""
    return {"message": str(exc), "line": exc.line, "column": exc.column, "key": exc.key,
            "reason": exc.reason, "file": exc.file}


def replay_text(text: str, source: str, sample: Path, now: int | None) -> dict[str, Any]:
    """Replay ``sample`` through the policy ``text``; the verdicts' MIME payload."""
    from kqlab.policy import PolicyError, loads_policy
    from kqlab.validate import mime, replay

    try:
        policy = loads_policy(text, source=source)
    except PolicyError as exc:
        return {"ok": False, "error": policy_error(exc)}
    return {"ok": True, "payload": mime.replay_payload(replay(str(sample), policy, now=now))}


def inside(root: Path, relative: str, what: str) -> Path:
    """``relative`` resolved under ``root``; a path that leaves it or does not exist is refused."""
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()):
        raise RequestError(f"{what} {relative!r} is outside the server's root folder")
    if not path.exists():
        raise RequestError(f"{what} {relative!r} does not exist under the server's root folder")
    return path


class _PolicyHandler(APIHandler):
    root: Path

    def initialize(self, root: Path) -> None:
        self.root = root

    def body(self) -> dict[str, Any]:
        try:
            data = json.loads(self.request.body or b"{}")
        except ValueError as exc:
            raise RequestError(f"the request body is not JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise RequestError("expected a JSON object with 'text' (the policy)")
        return data

    def refuse(self, exc: Exception) -> None:
        """A 400 whose ``message`` is the error's text as is (no %-formatting on the way)."""
        self.set_status(400)
        self.finish(json.dumps({"message": str(exc), "reason": type(exc).__name__}))


class ValidateHandler(_PolicyHandler):
    """``POST /kqlab/policy/validate``."""

    @tornado.web.authenticated
    async def post(self) -> None:
        try:
            data = self.body()
        except RequestError as exc:
            self.refuse(exc)
            return
        source = str(data.get("path") or "<editor>")
        self.finish(json.dumps(validate_text(data["text"], source)))


class ReplayHandler(_PolicyHandler):
    """``POST /kqlab/policy/replay`` (the replay runs off the server's event loop)."""

    @tornado.web.authenticated
    async def post(self) -> None:
        try:
            data = self.body()
            source = str(data.get("path") or "<editor>")
            now = data.get("now")
            sample = inside(self.root, str(data.get("sample") or ""), "sample")
            if now is not None and not isinstance(now, int):
                raise RequestError(f"now must be epoch milliseconds, got {now!r}")
            out = await asyncio.to_thread(replay_text, data["text"], source, sample, now)
        except KqlabError as exc:
            self.refuse(exc)
            return
        self.finish(json.dumps(out))


class SchemaHandler(APIHandler):
    """``GET /kqlab/policy/schema``: the policy JSON Schema kqlab ships (hover docs)."""

    @tornado.web.authenticated
    def get(self) -> None:
        from kqlab.policy.schema import SCHEMA_FILE

        self.set_header("Content-Type", "application/json")
        self.finish(Path(SCHEMA_FILE).read_text(encoding="utf-8"))


def setup_handlers(web_app: Any, root: Path) -> None:
    """Register the endpoints under the server's base URL."""
    base = web_app.settings["base_url"]
    web_app.add_handlers(".*$", [
        (url_path_join(base, "kqlab", "policy", "validate"), ValidateHandler, {"root": root}),
        (url_path_join(base, "kqlab", "policy", "replay"), ReplayHandler, {"root": root}),
        (url_path_join(base, "kqlab", "policy", "schema"), SchemaHandler),
    ])
