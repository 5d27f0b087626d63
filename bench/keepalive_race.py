"""The keep-alive race (issue 34, item 8): a pooled client reuses an idle connection just as the server closes it,
and that request is lost with a ReadError / RemoteProtocolError. It happens when the server's idle timeout is not
longer than the client pool's `keepalive_expiry` (uvicorn's 5 s default against httpx's 5 s default).

Scaled down to 1 s so it runs in two minutes: requests on one pooled connection to a loaded server, each after an
idle gap swept just under the client's expiry (where the client still reuses the connection). Prints the requests
lost with the server's idle timeout equal to the client's (the old setting, baseline) and 6x longer (aw-mcp's ratio,
KEEP_ALIVE_S 30 s against httpx's 5 s).

    python bench/keepalive_race.py
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import uvicorn

CLIENT_EXPIRY_S = 1.0
# Idle gaps just under the client's expiry (where it still reuses the connection), 2 ms apart. The race window is
# as wide as one turn of the server's event loop: when the keep-alive timer and the new request's bytes are due in
# the same turn, the timer may run first and close the connection with the request unread. A loaded server has
# long turns (BUSY_S of work per turn here, as under the campaign's 64 x 30 x 3 load).
GAPS_S = [CLIENT_EXPIRY_S - 0.060 + 0.002 * i for i in range(30)]
BUSY_S = 0.03


async def app(scope, receive, send) -> None:  # noqa: ANN001 -- the smallest ASGI app
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def lost_requests(server_idle_s: float, rounds: int = 2) -> tuple[int, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="error", timeout_keep_alive=server_idle_s)  # type: ignore[arg-type]
    server = uvicorn.Server(config)

    async def loaded() -> None:
        async def work() -> None:
            while not server.should_exit:
                time.sleep(BUSY_S)  # a turn of other sessions' work
                await asyncio.sleep(0.001)

        busy = asyncio.create_task(work())
        await server.serve(sockets=[sock])
        await busy

    thread = threading.Thread(target=lambda: asyncio.run(loaded()), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    lost = tried = 0
    limits = httpx.Limits(max_keepalive_connections=1, keepalive_expiry=CLIENT_EXPIRY_S)
    with httpx.Client(limits=limits) as client:
        for _ in range(rounds):
            for gap in GAPS_S:
                client.get(f"http://127.0.0.1:{port}/")  # a fresh or reused connection, now idle
                time.sleep(gap)
                tried += 1
                try:
                    client.get(f"http://127.0.0.1:{port}/")
                except httpx.TransportError:  # the server closed the connection as the request went out
                    lost += 1
    server.should_exit = True
    thread.join()
    return lost, tried


def main() -> None:
    started = time.perf_counter()
    equal = lost_requests(CLIENT_EXPIRY_S)
    longer = lost_requests(6 * CLIENT_EXPIRY_S)
    print(
        f"server idle timeout = client expiry ({CLIENT_EXPIRY_S:g} s, baseline): {equal[0]} of {equal[1]} lost"
    )
    print(
        f"server idle timeout = 6 x client expiry (aw-mcp's ratio):         {longer[0]} of {longer[1]} lost"
    )
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
