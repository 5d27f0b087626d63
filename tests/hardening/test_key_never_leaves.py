"""Issue 21, item 3: AW_API_KEY never leaves by the pre-flight, and never comes back in an error or a trajectory.

- The pre-flight follows the rule calls follow: a `base_url` from the world file gets the key only with
  `--trust-world-backend`. A canary listener behind a world file's URL sees every request `aw-mcp serve` makes (the
  pre-flight's `GET /models`, the server identification, the call itself) and none carries the key.
- URL credentials (`http://user:pw@host`) are `***` in the pre-flight's one-line "cannot reach" error.
- A model server that echoes the request's Authorization header (in an error body, a stream error, the answer
  itself) puts `***` where the key was: in the agent's result text and in the trajectory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from aw_mcp.backends.preflight import PreflightError, check_openai, preflight
from aw_mcp.backends.resolve import open_backend, resolve_backend
from aw_mcp.core.redaction import redact_secrets
from aw_mcp.load.world import load_world_text
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.sim.simulator import Simulator
from aw_mcp.trajectory.records import TrajectoryWriter
from tests.conftest import REPO, SMALL_WORLD, SUBPROCESS_S, free_port
from tests.fake_openai import Reply, ScriptedOpenAIServer

KEY = "sk-canary-5f1d9e2a7b"
ANSWER = "**Environment Observation:**\nOrder ORD-1 cancelled."


@dataclass
class Canary:
    """What reached the listener: (method, path, headers with lower-case names)."""

    port: int
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/x/v1"

    def keys_received(self) -> list[str]:
        return [f"{m} {p}: {h['authorization']}" for m, p, h in self.seen if "authorization" in h]


@contextmanager
def canary_listener(models_status: int = 200) -> Iterator[Canary]:
    """An OpenAI-compatible listener that records every request and answers the model list and a completion."""
    canary = Canary(0)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, payload: dict, status: int = 200) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            canary.seen.append(("GET", self.path, {k.lower(): v for k, v in self.headers.items()}))
            listing = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "canary"}]}
            self._answer(listing, models_status)

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length") or 0))
            canary.seen.append(("POST", self.path, {k.lower(): v for k, v in self.headers.items()}))
            message = {"role": "assistant", "content": ANSWER}
            self._answer({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    canary.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield canary
    finally:
        server.shutdown()
        server.server_close()


def world_pointing_at(url: str) -> str:
    return SMALL_WORLD + f"model: {{base_url: '{url}', model: m}}\n"


def test_the_preflight_sends_the_key_only_where_calls_send_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AW_API_KEY", KEY)
    monkeypatch.delenv("AW_BASE_URL", raising=False)
    with canary_listener() as canary:
        world = load_world_text(world_pointing_at(canary.base_url), "shared.yaml")
        from_world = resolve_backend(world.model)
        preflight(from_world)
        assert [(m, p) for m, p, _ in canary.seen] == [("GET", "/x/v1/models")]
        assert canary.keys_received() == []  # before: "Bearer sk-canary-..." arrived here
        preflight(from_world, trust_world_backend=True)  # the operator trusts the world file
        preflight(resolve_backend(world.model, base_url=canary.base_url))  # the operator's own URL
    assert canary.keys_received() == [f"GET /x/v1/models: Bearer {KEY}"] * 2


def test_a_refusal_of_a_world_url_says_the_key_was_withheld(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AW_API_KEY", KEY)
    monkeypatch.delenv("AW_BASE_URL", raising=False)
    with canary_listener(models_status=401) as canary:
        choice = resolve_backend(load_world_text(world_pointing_at(canary.base_url)).model)
        with pytest.raises(
            PreflightError, match="AW_API_KEY was not sent to it, as its URL comes from the world"
        ):
            preflight(choice)
    assert canary.keys_received() == []


def test_serve_sends_no_key_to_a_world_file_s_url_the_preflight_included(tmp_path: Path) -> None:
    """`aw-mcp serve` end to end over stdio: pre-flight, identification and the call all reach the canary."""
    with canary_listener() as canary:
        world = tmp_path / "shared.yaml"
        world.write_text(world_pointing_at(canary.base_url), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AW_")}
        env["AW_API_KEY"] = KEY
        requests = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get_order", "arguments": {"order_id": "ORD-1"}}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "cancel_order", "arguments": {"order_id": "ORD-1"}}},
        ]  # fmt: skip
        record = tmp_path / "t.jsonl"
        proc = subprocess.Popen(
            [sys.executable, "-m", "aw_mcp", "serve", "--world", str(world), "--record", str(record)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(REPO),
        )
        answers = []
        try:
            assert proc.stdin is not None and proc.stdout is not None
            for request in requests:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
                if "id" in request:
                    answers.append(json.loads(proc.stdout.readline() or "null"))
        finally:
            _, stderr = proc.communicate(timeout=SUBPROCESS_S)
    assert [a and a.get("id") for a in answers] == [1, 2, 3], stderr
    paths = [(m, p) for m, p, _ in canary.seen]
    assert ("GET", "/x/v1/models") in paths and ("POST", "/x/v1/chat/completions") in paths, paths
    assert canary.keys_received() == [], stderr
    assert "AW_API_KEY is not sent to" in stderr and KEY not in stderr


def test_url_credentials_are_masked_in_the_cannot_reach_error() -> None:
    url = f"http://agent:hunter2-secret@127.0.0.1:{free_port()}/v1"
    with pytest.raises(PreflightError) as caught:
        check_openai(url, "m", timeout_s=5)
    message = str(caught.value)
    assert "cannot reach the model server at http://***@127.0.0.1:" in message
    assert "hunter2" not in message and "agent:" not in message


def echo_authorization(server: ScriptedOpenAIServer, how: str) -> Reply:
    """The reply of a server that quotes the request's Authorization header back."""
    header = server.requests[-1].headers.get("authorization", "")
    if how == "error body":
        return Reply(status=400, body=json.dumps({"error": f"bad request; you sent authorization: {header}"}))
    if how == "server error":
        return Reply(status=502, body=f"upstream said no to {header}")
    if how == "stream error":
        return Reply(error_chunk={"message": f"denied for {header}", "code": 403})
    return Reply(content=f"**Environment Observation:**\nOrder ORD-1 cancelled for {header}.")


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["error body", "server error", "stream error", "answer"])
async def test_an_echoed_key_reaches_neither_the_agent_nor_the_trajectory(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AW_API_KEY", KEY)
    server = ScriptedOpenAIServer(lambda body, n: echo_authorization(server, how))
    with server:
        world = load_world_text(SMALL_WORLD + "model: {retries: 0, output_retries: 0}\n")
        choice = resolve_backend(world.model, base_url=server.base_url, model="m")
        backend = open_backend(choice, world.model)
        record = tmp_path / "t.jsonl"
        writer = TrajectoryWriter(record)
        simulator = Simulator(world, backend, SessionRegistry(world, writer))
        outcome = await simulator.call("cancel_order", {"order_id": "ORD-1"})
        writer.close()
        await backend.aclose()
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"  # the key was sent, and echoed
    written = record.read_text(encoding="utf-8")
    assert KEY not in outcome.text and KEY not in written
    assert "Bearer ***" in outcome.text and "Bearer ***" in written


def test_redaction_takes_escaped_keys_and_leaves_placeholder_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AW_API_KEY", 'k3y"with\\quote')
    assert redact_secrets('{"e": "k3y\\"with\\\\quote"} k3y"with\\quote') == '{"e": "***"} ***'
    monkeypatch.setenv("AW_API_KEY", "EMPTY")  # vLLM's placeholder: nothing to hide, and too short to replace
    assert redact_secrets("EMPTY response") == "EMPTY response"
