"""Issue 34, item 8: records are JSON, and the protocol and HTTP edges behave as JSON-RPC and HTTP servers should.
NaN and infinite arguments are refused (and a record holding one writes it as a string), so a strict reader parses
every trajectory line; a notification is never answered, even one whose params cannot be read; a line that is not
UTF-8 is -32700 over stdio as over HTTP; a slow partial HTTP request is cut off; idle keep-alive connections outlive
the client pools' own expiry (the race that lost calls to ReadError)."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest

from aw_mcp.load.world import load_world_text
from aw_mcp.protocol import http_timeouts
from aw_mcp.protocol.http_guard import HttpOptions
from aw_mcp.protocol.jsonrpc_checks import check_message
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.sim.simulator import Simulator
from aw_mcp.trajectory.records import TrajectoryWriter
from tests.conftest import REPO, SMALL_WORLD, ScriptedWorldModel, free_port, observation
from tests.hardening.test_http_protocol_backend import ACCEPT, INIT, http_world
from tests.hardening.test_jsonrpc_stdio import INITIALIZE, request

BIG_REQUEST_ID = "1" * 5000
CANCELLED = (
    '{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": ' + BIG_REQUEST_ID + "}}"
)


def strict_json(line: str) -> object:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(line, parse_constant=refuse)


@pytest.mark.anyio
async def test_non_finite_numbers_never_reach_a_trajectory_line(tmp_path: Path) -> None:
    world = load_world_text(SMALL_WORLD)
    path = tmp_path / "t.jsonl"
    registry = SessionRegistry(world, TrajectoryWriter(path))
    answers = iter([observation('{"id": "ORD-1001", "status": "shipped", "total": NaN}')])
    simulator = Simulator(world, ScriptedWorldModel(lambda *_: next(answers)), registry)
    for value in (math.nan, math.inf, -math.inf):
        outcome = await simulator.call("cancel_order", {"order_id": "ORD-1", "reason": value})
        assert outcome.is_error and "is not a JSON number (JSON has no NaN or Infinity)" in outcome.text
    await simulator.call("get_order", {"order_id": "ORD-1001"})  # the world model's own NaN, in the answer
    lines = path.read_text().splitlines()
    assert len(lines) == 4
    records = [strict_json(line) for line in lines]  # every line, by a reader that refuses NaN
    assert [r["arguments"]["reason"] for r in records[:3]] == ["NaN", "Infinity", "-Infinity"]  # type: ignore[index]


def test_a_notification_is_never_answered_even_when_unreadable() -> None:
    assert check_message(CANCELLED) is None
    assert (
        check_message('{"jsonrpc": "2.0", "method": "notifications/x", "params": {"s": "\\ud800"}}') is None
    )
    answered = check_message(
        '{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"n": ' + BIG_REQUEST_ID + "}}"
    )
    assert getattr(answered, "id", None) == 7  # a request still gets its -32602


def test_over_stdio_notifications_get_no_answer_and_bytes_that_are_not_utf8_a_parse_error(
    small_world_path: Path,
) -> None:
    lines = [
        json.dumps(INITIALIZE).encode(),
        CANCELLED.encode(),
        b'{"jsonrpc": "2.0", "id": "caf\xe9", "method": "ping"}',  # before: answered as id "caf\ufffd"
        request("last").encode(),
    ]
    env = {**os.environ, "AW_BASE_URL": "http://127.0.0.1:9/v1", "AW_MODEL": "m"}
    command = [
        sys.executable,
        "-m",
        "aw_mcp",
        "serve",
        "--world",
        str(small_world_path),
        "--backend",
        "openai",
    ]
    proc = subprocess.Popen(
        [*command, "--no-preflight"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=REPO
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"\n".join(lines) + b"\n")
        proc.stdin.flush()
        answers = []
        deadline = time.monotonic() + 120  # a bound for a hang, not a speed check
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            answers.append(json.loads(line))
            if answers[-1].get("id") == "last":
                break
    finally:
        proc.kill()
        proc.wait()
    ids = [a.get("id") for a in answers]
    assert ids == ["init", None, "last"], answers  # nothing for the notification
    assert answers[1]["error"] == {"code": -32700, "message": "Parse error: the message is not UTF-8"}


@pytest.mark.anyio
async def test_over_http_an_unreadable_notification_is_accepted_without_an_answer() -> None:
    async with http_world(HttpOptions(port=free_port())) as (url, _):
        async with httpx.AsyncClient() as http:
            init = await http.post(url, json=INIT, headers=ACCEPT)
            headers = {**ACCEPT, "mcp-session-id": init.headers["mcp-session-id"]}
            answer = await http.post(url, content=CANCELLED, headers=headers)
    assert answer.status_code == 202 and answer.content == b""


def _open(port: int, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(data)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed the connection within `seconds`, and what it sent before."""
    sock.settimeout(0.2)
    got = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return True, got
        if not chunk:
            return True, got
        got += chunk
    return False, got


@pytest.mark.anyio
async def test_a_slow_partial_request_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_timeouts.TimedH11Protocol, "head_timeout_s", 0.5)
    monkeypatch.setattr(http_timeouts.TimedH11Protocol, "body_idle_s", 0.5)
    port = free_port()
    async with http_world(HttpOptions(port=port)):
        head = _open(port, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the head never ends
        body = _open(
            port, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"
        )  # nor the body
        silent = _open(port, b"")  # connected, never a byte
        results = await anyio.to_thread.run_sync(
            lambda: [_closed_within(s, 15) for s in (head, body, silent)]
        )
        for sock in (head, body, silent):
            sock.close()
    (head_closed, head_said), (body_closed, _), (silent_closed, _) = results
    assert head_closed and head_said.startswith(b"HTTP/1.1 408 Request Timeout")
    assert body_closed and silent_closed


def test_idle_connections_outlive_the_client_pools_keepalive() -> None:
    """uvicorn's 5 s equalled httpx's pool expiry (5 s): a request sent on a connection as the server closed it
    was lost with ReadError. The server now keeps idle connections 6x as long as that client default."""
    config = http_timeouts.server_config(lambda *_: None, "127.0.0.1", 1)
    client_expiry = httpx.Limits().keepalive_expiry or 0
    assert config.timeout_keep_alive >= 6 * client_expiry
    assert config.http is http_timeouts.TimedH11Protocol
