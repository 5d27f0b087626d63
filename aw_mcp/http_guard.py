"""What stands in front of the streamable HTTP transport: a bearer token, Host/Origin checks off loopback, and
freeing a world session when its client ends the transport session (DELETE).

Binding to a non-loopback address without a token is refused unless the operator says so; the SDK turns its
DNS-rebinding protection on only for loopback hosts, so for any other bind address the allowed Host/Origin list
is built here (loopback names plus each `--allowed-host`), never switched off.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings

from aw_mcp.errors import ServeError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

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


def transport_security(options: HttpOptions) -> TransportSecuritySettings:
    """Host/Origin checks for every bind address: loopback names, the bind host itself unless it is a wildcard,
    and each `--allowed-host` (NAME or NAME:PORT)."""
    names = [*LOOPBACK_NAMES]
    if options.host not in ("0.0.0.0", "::", ""):
        names.append(options.host)
    names += options.allowed_hosts
    hosts: list[str] = []
    origins: list[str] = []
    for name in dict.fromkeys(names):
        bare = f"[{name}]" if ":" in name and not name.startswith("[") and name.count(":") > 1 else name
        pattern = bare if ":" in bare.rsplit("]", 1)[-1] else f"{bare}:*"
        hosts.append(pattern)
        origins += [f"http://{pattern}", f"https://{pattern}"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value)
    return None


class BearerAuth:
    """Every HTTP request must carry `Authorization: Bearer TOKEN` (constant-time compare), else 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"authorization") or b""
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


class ReleaseOnDelete:
    """When a client ends its transport session (DELETE with `Mcp-Session-Id`, answered 2xx), free its world."""

    def __init__(self, app: ASGIApp, release: Callable[[str], object]) -> None:
        self.app = app
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "DELETE":
            await self.app(scope, receive, send)
            return
        sid = _header(scope, b"mcp-session-id")
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await self.app(scope, receive, watch)
        if sid and 200 <= status < 300:
            self.release(sid.decode("latin-1"))
