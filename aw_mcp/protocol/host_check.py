"""Host and Origin checks (DNS-rebinding protection) on every HTTP request, parsed as a host and a port.

The SDK's check compares text: an allowed `localhost:*` let `Host: localhost:1@evil.example` and
`Origin: http://localhost:8765.evil.example` through, refused a port-less `Host: localhost` (421), and matched
`--allowed-host` case-sensitively. Here a Host is `name[:port]` (a DNS name, an IPv4 address or a bracketed IPv6
address; the port digits, 1-65535) and an Origin `http(s)://name[:port]` with nothing else; names compare
case-insensitively (a trailing dot ignored). An allowed entry `NAME` takes any port, `NAME:PORT` that port only.
Anything else is refused: 421 for the Host, 403 for the Origin, as the SDK answers. The SDK's own check is then
switched off (`sdk_settings`); its Content-Type check stays.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import PlainTextResponse

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
_IPV6 = re.compile(r"\[[0-9a-f:.]+(%[0-9a-z._~-]+)?\]")
_PORT = re.compile(r"[0-9]{1,5}")
WILDCARD_BINDS = ("0.0.0.0", "::", "")


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of a request header (`name` in lowercase)."""
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value)
    return None


def host_and_port(value: str) -> tuple[str, int | None] | None:
    """`name[:port]` as (lowercase name, port or None); None when it is anything else."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        name, rest = value[: end + 1], value[end + 1 :]
        if end < 0 or not _IPV6.fullmatch(name):
            return None
    else:
        name, colon, port = value.partition(":")
        rest = f"{colon}{port}"
        name = name.removesuffix(".")
        if not _NAME.fullmatch(name):
            return None
    if not rest:
        return name, None
    if not rest.startswith(":") or not _PORT.fullmatch(rest[1:]) or not 0 < int(rest[1:]) < 65536:
        return None
    return name, int(rest[1:])


def origin_host(value: str) -> tuple[str, int | None] | None:
    """The (name, port) of an Origin `http(s)://name[:port]`; None for anything else (`null`, a path, userinfo)."""
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or "@" in parts.netloc:
        return None
    return host_and_port(parts.netloc)


@dataclass(frozen=True)
class HostPolicy:
    """The names (and name:port pairs) a Host or Origin may carry."""

    entries: tuple[tuple[str, int | None], ...]

    @classmethod
    def of(cls, names: Iterable[str]) -> HostPolicy:
        """From `NAME` / `NAME:PORT` entries (a bare IPv6 address is taken whole); an entry that is not one of
        those is left out."""
        entries: list[tuple[str, int | None]] = []
        for name in names:
            bare = f"[{name}]" if name.count(":") > 1 and not name.startswith("[") else name
            parsed = host_and_port(bare)
            if parsed is not None and parsed not in entries:
                entries.append(parsed)
        return cls(tuple(entries))

    def allows(self, found: tuple[str, int | None] | None) -> bool:
        if found is None:
            return False
        name, port = found
        return any(name == allowed and (want is None or want == port) for allowed, want in self.entries)

    def allows_host(self, value: str) -> bool:
        return self.allows(host_and_port(value))

    def allows_origin(self, value: str | None) -> bool:
        """No Origin at all passes: not a browser's cross-site request."""
        return value is None or self.allows(origin_host(value))


class CheckHostAndOrigin:
    """Every HTTP request's Host (421) and Origin (403) checked against the policy before anything else."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = header(scope, b"host")
            origin = header(scope, b"origin")
            if host is None or not self.policy.allows_host(host.decode("latin-1")):
                await PlainTextResponse("Invalid Host header", status_code=421)(scope, receive, send)
                return
            if not self.policy.allows_origin(None if origin is None else origin.decode("latin-1")):
                await PlainTextResponse("Invalid Origin header", status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def sdk_settings() -> TransportSecuritySettings:
    """The SDK's own check with its Host/Origin part off (CheckHostAndOrigin stands in front); it still checks
    Content-Type."""
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)
