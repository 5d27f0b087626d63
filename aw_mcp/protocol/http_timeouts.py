"""How long the HTTP server waits for a client: a request's head must arrive whole within REQUEST_HEAD_TIMEOUT_S of
its first byte (or of the connection), and its body may pause at most REQUEST_BODY_IDLE_S; past either the
connection is closed (with a 408 when no request has started). uvicorn waits forever for a partial request: 600
slow ones stayed open past 65 s, each holding a connection.

Idle keep-alive connections are closed after KEEP_ALIVE_S. uvicorn's default, 5 s, equals the keep-alive expiry of
httpx's connection pool (the MCP SDK's client and most Python clients): a client reusing a connection just as the
server closes it loses that request with a ReadError (22 of 5,760 calls in a keep-alive load run). The server keeps
idle connections longer than its clients do; a client with its own pool should keep `keepalive_expiry` below
KEEP_ALIVE_S.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_HEAD_TIMEOUT_S = 30.0
REQUEST_BODY_IDLE_S = 30.0
KEEP_ALIVE_S = 30
_TIMEOUT_BODY = b"the request did not arrive in time\n"
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    + b"content-length: %d\r\n\r\n" % len(_TIMEOUT_BODY)
    + _TIMEOUT_BODY
)


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on reading each request (see the module docstring)."""

    head_timeout_s = REQUEST_HEAD_TIMEOUT_S
    body_idle_s = REQUEST_BODY_IDLE_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None
        self._reading_head = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait_for_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY:  # a body on its way: it may pause, not stall
            self._reading_head = False
            self._arm(self.body_idle_s)
        elif (
            state is h11.IDLE and self.conn.trailing_data[0]
        ):  # part of a head: the clock runs from its start
            if not self._reading_head:
                self._wait_for_head()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _wait_for_head(self) -> None:
        self._reading_head = True
        self._arm(self.head_timeout_s)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            self.transport.write(_TIMEOUT_RESPONSE)  # no request yet: nothing else can answer it
        self.transport.close()


def server_config(app: Any, host: str, port: int, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration every aw-mcp HTTP server runs with: its timeouts (module docstring)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=TimedH11Protocol,
        timeout_keep_alive=KEEP_ALIVE_S,
        **{"log_level": "warning", **options},
    )
