"""`POST /sessions/{id}/fork` over Streamable HTTP: branch a world session into N independent sessions.

Body `{"n": N}` → 200 `{"sessions": [ids], "forked_from": {"session": id, "call": k}}`. Each new id is a world
session key: a client drives it by sending `_meta: {"aw/session": ID}` with its requests (the stateless 2026-07-28
revision, or any request of a client that sets it). `{id}` is what the client knows: an `aw/session` key or a
2025-era transport session's `Mcp-Session-Id`. The route sits behind the same bearer token and Host/Origin checks as
`/mcp`; an unknown session is 404, no room under `--max-sessions` is 409 (a fork evicts only idle sessions of its
own family, never another client's world), a bad body 400, a body over MAX_FORK_BODY_BYTES 413.
"""

from __future__ import annotations

import re
from typing import Any

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from aw_mcp.sim.registry import MAX_FORKS_PER_REQUEST, TRANSPORT_SESSION_PREFIX
from aw_mcp.sim.session import SessionKeyError
from aw_mcp.sim.simulator import Simulator

FORK_PATH = re.compile(r"^/sessions/(?P<session>[^/]{1,256})/fork/?$")
# `{"n": 256}` is 10 bytes: a bigger body is refused unread (1 GiB took RSS from 83 MB to 1 GB before).
MAX_FORK_BODY_BYTES = 1024


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(ge=1, le=MAX_FORKS_PER_REQUEST, strict=True)


class ForkRoute:
    """Answers `POST /sessions/{id}/fork`; every other request goes on to `app`."""

    def __init__(
        self, app: ASGIApp, simulator: Simulator, security: TransportSecuritySettings | None = None
    ) -> None:
        self.app = app
        self.simulator = simulator
        self.security = TransportSecurityMiddleware(security)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = FORK_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        refusal = await self.security.validate_request(request, is_post=request.method == "POST")
        response = refusal or await self._fork(request, match.group("session"))
        await response(scope, receive, send)

    async def _fork(self, request: Request, given: str) -> Any:
        if request.method != "POST":
            return _error(405, 'use POST /sessions/{id}/fork with a JSON body {"n": N}')
        raw = await _bounded_body(request)
        if raw is None:
            return _error(413, f'the body is over {MAX_FORK_BODY_BYTES:,} bytes (expected {{"n": N}})')
        try:
            body = ForkRequest.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            return _error(400, f"{where}: {first['msg']} (expected a JSON body {{\"n\": N}}, 1 <= N <= "
                          f"{MAX_FORKS_PER_REQUEST})")  # fmt: skip
        key = self._session_key(given)
        if key is None:
            return _error(404, f"no live world session {given!r}")
        parent = self.simulator.registry.get(key)
        try:
            children = await self.simulator.fork(key, body.n)
        except SessionKeyError as exc:
            return _error(409, str(exc))
        return JSONResponse(
            {
                "sessions": [child.id for child in children],
                "forked_from": {"session": given, "call": parent.next_index},
            }
        )

    def _session_key(self, given: str) -> str | None:
        known = {session.id for session in self.simulator.registry.sessions()}
        if not given.startswith(TRANSPORT_SESSION_PREFIX) and given in known:
            return given
        transport = f"{TRANSPORT_SESSION_PREFIX}{given}"
        return transport if transport in known else None


async def _bounded_body(request: Request) -> bytes | None:
    """The request's body, or None once it passes MAX_FORK_BODY_BYTES (declared or sent): the rest is not read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORK_BODY_BYTES:
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORK_BODY_BYTES:
            return None
    return body


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
