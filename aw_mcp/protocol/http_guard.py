"""What stands in front of the streamable HTTP transport: a bearer token, Host/Origin checks off loopback, every
POST body checked before the SDK reads it (a malformed JSON-RPC message answered with its error), and freeing a
world session when its client ends the transport session (DELETE).

Binding to a non-loopback address without a token is refused unless the operator says so. The allowed Host/Origin
list is built here for every bind address (loopback names, the bind host, each `--allowed-host`) and checked by
host_check.py, parsed as host and port, never switched off.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import mcp.types as types
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from starlette.requests import Request

from aw_mcp.core.errors import ServeError
from aw_mcp.protocol.host_check import (
    WILDCARD_BINDS,
    ASGIApp,
    HostPolicy,
    Message,
    Receive,
    Scope,
    Send,
    header,
)
from aw_mcp.protocol.jsonrpc_checks import check_message_off_loop

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


class HttpExposureError(ServeError, ValueError):
    """Serving on this address this way would expose the world to the network without protection."""


@dataclass
class HttpOptions:
    host: str = "127.0.0.1"
    port: int = 8765
    auth_token: str | None = None
    allow_unauthenticated: bool = False
    allowed_hosts: list[str] = field(default_factory=list)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(options: HttpOptions) -> str | None:
    """Raise when a non-loopback bind has no token and no explicit opt-out; a warning line when it is opted out."""
    if is_loopback(options.host) or options.auth_token:
        return None
    if not options.allow_unauthenticated:
        raise HttpExposureError(
            f"--host {options.host} makes the world reachable from the network: set --auth-token TOKEN "
            "(or AW_AUTH_TOKEN) so clients must send `Authorization: Bearer TOKEN`, or pass --allow-unauthenticated"
        )
    return f"warning: serving on {options.host} without authentication (--allow-unauthenticated)"


def host_policy(options: HttpOptions) -> HostPolicy:
    """Host/Origin checks for every bind address (host_check.py): loopback names, the bind host itself unless it
    is a wildcard, and each `--allowed-host` (NAME or NAME:PORT, any case)."""
    names = [*LOOPBACK_NAMES]
    if options.host not in WILDCARD_BINDS:
        names.append(options.host)
    return HostPolicy.of([*names, *options.allowed_hosts])


def bearer_token(value: bytes) -> bytes | None:
    """The token of an `Authorization: Bearer TOKEN` value; the scheme name is case-insensitive and may be
    followed by more than one space (RFC 9110 §11.1, §11.4)."""
    scheme, _, token = value.strip(b" \t").partition(b" ")
    token = token.lstrip(b" ")
    if scheme.lower() != b"bearer" or not token:
        return None
    return token


class BearerAuth:
    """Every HTTP request must carry `Authorization: Bearer TOKEN` (constant-time compare), else 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = bearer_token(header(scope, b"authorization") or b"") or b""
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32001, "message": "Unauthorized: missing or wrong bearer token"},
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="aw-mcp"'),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class CheckJsonRpcBodies:
    """Each POST to the MCP endpoint that passes the Host/Origin and Content-Type checks has its body checked by
    `stdio_guard.check_message` before the SDK reads it: a malformed message is answered here (400, its JSON-RPC
    error, the request's id when it can be read), a well-formed one goes on to the SDK unchanged. Both protocol
    eras get the same answers this way: the SDK's 2025 transport would answer a request with an id of the wrong
    type with a bare 202 and a malformed shape with -32602.

    A body over the SDK's size limit goes on unread, for the SDK's 413."""

    def __init__(
        self,
        app: ASGIApp,
        security: TransportSecuritySettings | None = None,
        path: str = "/mcp",
        max_body_size: int = DEFAULT_MAX_REQUEST_BODY_SIZE,
    ) -> None:
        self.app = app
        self.security = TransportSecurityMiddleware(security)
        self.path = path
        self.max_body_size = max_body_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or scope.get("path", "").rstrip("/") != self.path
            or await self.security.validate_request(Request(scope), is_post=True) is not None
        ):
            await self.app(scope, receive, send)  # the SDK answers these, refusals included
            return
        declared = header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_size:
            await self.app(scope, receive, send)
            return
        chunks: list[Message] = []
        size, complete = 0, False
        while not complete and size <= self.max_body_size:
            message = await receive()
            chunks.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            complete = not message.get("more_body", False)
        if complete:
            checked = await check_message_off_loop(b"".join(m.get("body", b"") for m in chunks))
            if checked is None:  # a notification it cannot read: accepted, never answered
                await _accepted(send)
                return
            if isinstance(checked, types.JSONRPCError):
                await _answer(send, checked)
                return

        async def replay() -> Message:
            return chunks.pop(0) if chunks else await receive()

        await self.app(scope, replay, send)


async def _accepted(send: Send) -> None:
    await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


async def _answer(send: Send, error: types.JSONRPCError) -> None:
    payload = error.model_dump(mode="json", by_alias=True, exclude_none=True)
    payload["id"] = error.id  # `id: null` is part of the answer when the request's could not be read
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ReleaseOnDelete:
    """When a client ends its transport session (DELETE with `Mcp-Session-Id`, answered 2xx), free its world."""

    def __init__(self, app: ASGIApp, release: Callable[[str], object]) -> None:
        self.app = app
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "DELETE":
            await self.app(scope, receive, send)
            return
        sid = header(scope, b"mcp-session-id")
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await self.app(scope, receive, watch)
        if sid and 200 <= status < 300:
            self.release(sid.decode("latin-1"))
