"""Items 2, 8, 9, 10, 11 and 13 of issue 15 at the edges: HTTP auth and exposure, DELETE freeing a world,
listChanged on both transports, malformed stdio lines, deadlines, secrets, malformed model-server answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
import uvicorn

from aw_mcp.backends.openai import OpenAIWorldModel, redact_url
from aw_mcp.backends.resolve import open_backend, resolve_backend
from aw_mcp.cli import main
from aw_mcp.core.model_io import BackendError, GenerationParams
from aw_mcp.load.world import load_world_text
from aw_mcp.protocol.http_guard import HttpOptions
from aw_mcp.protocol.http_timeouts import server_config
from aw_mcp.protocol.server import WorldApp, build_http_app
from aw_mcp.sim.simulator import Simulator
from aw_mcp.spec.world import ModelSettings
from tests.conftest import REPO, SMALL_WORLD, SUBPROCESS_S, ScriptedWorldModel, free_port, observation
from tests.fake_openai import Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.anyio
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


def sse_json(response: httpx.Response) -> dict:
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    return json.loads(data[-1])


@asynccontextmanager
async def http_world(
    options: HttpOptions, world_text: str = SMALL_WORLD
) -> AsyncIterator[tuple[str, Simulator]]:
    """`build_http_app` served by uvicorn in this event loop (a scripted world model answers every call)."""
    world = load_world_text(world_text)
    simulator = Simulator(world, ScriptedWorldModel(lambda *_: observation("Order cancelled.")))
    asgi = build_http_app(WorldApp(simulator, world_text), options)
    server = uvicorn.Server(server_config(asgi, "127.0.0.1", options.port))  # the product's timeouts
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        while not server.started:
            await anyio.sleep(0.02)
        yield f"http://127.0.0.1:{options.port}/mcp", simulator
        server.should_exit = True


async def test_bearer_token_is_required_and_checked() -> None:
    async with http_world(HttpOptions(port=free_port(), auth_token="s3cret")) as (url, _):
        async with httpx.AsyncClient() as http:
            missing = await http.post(url, json=INIT, headers=ACCEPT)
            wrong = await http.post(url, json=INIT, headers={**ACCEPT, "authorization": "Bearer nope"})
            right = await http.post(url, json=INIT, headers={**ACCEPT, "authorization": "Bearer s3cret"})
    assert missing.status_code == wrong.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert right.status_code == 200
    # listChanged is advertised over HTTP too, where catalog faults send notifications/tools/list_changed
    assert sse_json(right)["result"]["capabilities"]["tools"]["listChanged"] is True


async def test_delete_frees_the_world_session_and_long_meta_keys_are_refused() -> None:
    async with http_world(HttpOptions(port=free_port())) as (url, simulator):
        async with httpx.AsyncClient() as http:
            init = await http.post(url, json=INIT, headers=ACCEPT)
            sid = init.headers["mcp-session-id"]
            headers = {**ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
            await http.post(
                url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
            )
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "cancel_order", "arguments": {"order_id": "ORD-1"}}}  # fmt: skip
            answered = sse_json(await http.post(url, json=call, headers=headers))
            assert answered["result"]["content"][0]["text"] == "Order cancelled."
            assert f"http-{sid}" in {s.id for s in simulator.registry.sessions()}
            assert (await http.delete(url, headers=headers)).status_code == 200
            assert f"http-{sid}" not in {s.id for s in simulator.registry.sessions()}
    outcome_keys = {s.id for s in simulator.registry.sessions()}
    assert all(len(k) <= 128 for k in outcome_keys)


def test_non_loopback_bind_needs_a_token_or_an_explicit_opt_out(
    small_world_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["serve", "--world", str(small_world_path), "--transport", "http", "--host", "0.0.0.0"])
    assert code == 1 and "--auth-token" in capsys.readouterr().err


async def test_non_loopback_bind_keeps_host_checks_with_allowed_hosts() -> None:
    options = HttpOptions(host="0.0.0.0", port=free_port(), auth_token="t", allowed_hosts=["10.1.2.3"])
    auth = {**ACCEPT, "authorization": "Bearer t"}
    async with http_world(options) as (url, _):
        async with httpx.AsyncClient() as http:
            rebinding = await http.post(url, json=INIT, headers={**auth, "host": "evil.example:80"})
            allowed = await http.post(url, json=INIT, headers={**auth, "host": "10.1.2.3:8765"})
    assert rebinding.status_code == 421 or rebinding.status_code == 400
    assert allowed.status_code == 200


def test_stdio_answers_malformed_lines(small_world_path: Path) -> None:
    env = {**os.environ, "AW_BASE_URL": "http://127.0.0.1:9/v1", "AW_MODEL": "m"}
    lines = ["this is not json", json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
             "[" * 5000 + "]" * 5000, json.dumps({"jsonrpc": "2.0", "id": 7})]  # fmt: skip
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aw_mcp",
            "serve",
            "--world",
            str(small_world_path),
            "--backend",
            "openai",
            "--no-preflight",
        ],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=str(REPO),
        timeout=SUBPROCESS_S,
    )
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    codes = [(a.get("id"), a["error"]["code"]) for a in answers]
    assert len(codes) == 4, proc.stderr  # every line is answered; the client does not wait for a timeout
    assert codes[0] == (None, -32700) and codes[1] == (None, -32600) and codes[3] == (7, -32600)
    assert codes[2][1] in (-32700, -32600)


async def test_retry_after_past_the_deadline_fails_at_once() -> None:
    with ScriptedOpenAIServer(
        [Reply(status=503, headers={"Retry-After": "3600"}), Reply(content="x")]
    ) as server:
        model = OpenAIWorldModel(server.base_url, "m", timeout_s=30, retries=3)
        started = time.monotonic()
        with pytest.raises(BackendError, match="asked to retry after 3600 s"):
            await model.generate([{"role": "user", "content": "hi"}], GenerationParams())
        await model.aclose()
    assert time.monotonic() - started < 10


async def test_malformed_response_shapes_are_retried_not_crashes() -> None:
    bad = [
        Reply(raw_json={"choices": [5]}),
        Reply(raw_json={"choices": [{"message": {"content": 7}}]}),
        Reply(content="fine"),
    ]
    with ScriptedOpenAIServer(bad) as server:
        model = OpenAIWorldModel(server.base_url, "m", retries=3, backoff_s=0.01)
        generation = await model.generate([{"role": "user", "content": "hi"}], GenerationParams())
        await model.aclose()
    assert generation.text == "fine" and generation.extra["attempts"] == 3


async def test_api_key_goes_only_to_a_trusted_base_url_and_credentials_are_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AW_API_KEY", "sk-secret")
    monkeypatch.delenv("AW_BASE_URL", raising=False)
    settings = ModelSettings(base_url="http://collector.example/v1")
    from_world = open_backend(resolve_backend(settings, backend="openai"), settings)
    trusted = open_backend(resolve_backend(settings, backend="openai"), settings, trust_world_backend=True)
    from_cli = open_backend(resolve_backend(settings, backend="openai", base_url="http://mine/v1"), settings)
    assert from_world.api_key is None  # type: ignore[attr-defined]
    assert trusted.api_key == from_cli.api_key == "sk-secret"  # type: ignore[attr-defined]
    assert redact_url("http://user:pw@host:8000/v1") == "http://***@host:8000/v1"
    model = OpenAIWorldModel("http://user:pw@127.0.0.1:9/v1", "m", retries=0, timeout_s=5)
    with pytest.raises(BackendError) as caught:
        await model.generate([{"role": "user", "content": "hi"}], GenerationParams())
    await model.aclose()
    assert "pw" not in str(caught.value) and "user:" not in str(caught.value)


def test_a_huge_wrong_typed_argument_is_not_echoed_whole() -> None:
    world = load_world_text(SMALL_WORLD)
    problems = world.tools[0].argument_problems({"order_id": ["x" * 10_000_000]})
    assert problems and len("; ".join(problems)) < 2_000
