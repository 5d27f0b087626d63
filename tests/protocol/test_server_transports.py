"""The real `aw-mcp serve` process over stdio and HTTP, backed by a scripted OpenAI-compatible server,
and a third-party client: the MCP Inspector CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from aw_mcp.trajectory.records import read_trajectory
from tests.conftest import REPO, listening, serving
from tests.fake_openai import Reply, ScriptedOpenAIServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # `aw-mcp serve` subprocesses on every transport
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"


def world_answers(body: dict, call_number: int) -> Reply:
    """Answers like the world model would; checks that the prompt carries what it must."""
    system = body["messages"][0]["content"]
    action = body["messages"][-1]["content"]
    assert body["messages"][0]["role"] == "system" and "Orders ship from Rotterdam." in system
    assert action.startswith(f"### Turn {len(body['messages']) // 2}")
    if '"get_order"' in action:
        return Reply(
            content='**Environment Observation:**\n{"id": "ORD-1001", "status": "shipped", "total": 12.5}',
            reasoning="The order exists in the state table.",
        )
    return Reply(content="**Environment Observation:**\nOrder cancelled.", reasoning="A write.")


def serve_env(server: ScriptedOpenAIServer) -> dict[str, str]:
    return {**os.environ, "AW_BASE_URL": server.base_url, "AW_MODEL": "aw-test"}


def serve_args(world: Path, *extra: str) -> list[str]:
    return ["-m", "aw_mcp", "serve", "--world", str(world), "--backend", "openai", *extra]


def served_over_stdio(world: Path, server: ScriptedOpenAIServer, *extra: str) -> StdioServerParameters:
    """`aw-mcp serve` as a stdio subprocess, backed by the scripted OpenAI-compatible server."""
    return StdioServerParameters(
        command=sys.executable, args=serve_args(world, *extra), env=serve_env(server), cwd=str(REPO)
    )


@pytest.fixture
def openai_server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(world_answers) as server:
        yield server


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_subprocess_list_call_bad_args_structured(
    mode: str, small_world_path: Path, openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    record = tmp_path / "trajectory.jsonl"
    params = served_over_stdio(small_world_path, openai_server, "--record", str(record))
    async with Client(params, mode=mode) as client:
        tools = (await client.list_tools()).tools
        structured = await client.call_tool("get_order", {"order_id": "ORD-1001"})
        bad = await client.call_tool("get_order", {"order_id": 7})
        text = await client.call_tool("cancel_order", {"order_id": "ORD-1001"})
    assert [t.name for t in tools] == ["get_order", "cancel_order"]
    assert structured.structured_content == {"id": "ORD-1001", "status": "shipped", "total": 12.5}
    assert bad.is_error and "order_id" in bad.content[0].text
    assert text.content[0].text == "Order cancelled." and not text.is_error
    # The second model request carried the first call as history.
    second = openai_server.requests[-1].body
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert second["temperature"] == 0.6 and second["max_tokens"] == 32768
    assert "top_p" not in second and "top_k" not in second
    lines = [r.to_json() for r in read_trajectory(record)]  # the calls (tools/list lines are beside them)
    assert [(r["tool"], r["is_error"]) for r in lines] == [
        ("get_order", False),
        ("get_order", True),
        ("cancel_order", False),
    ]
    assert lines[0]["raw"].startswith("**Environment Observation:**")
    assert lines[0]["reasoning"] == "The order exists in the state table."


async def test_resume_continues_a_recorded_session(
    small_world_path: Path, openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    record = tmp_path / "t.jsonl"
    params = served_over_stdio(small_world_path, openai_server, "--record", str(record))
    async with Client(params) as client:
        await client.call_tool("cancel_order", {"order_id": "ORD-1001"})
    params = served_over_stdio(small_world_path, openai_server, "--resume", str(record))
    async with Client(params) as client:
        await client.call_tool("get_order", {"order_id": "ORD-1001"})
    resumed = openai_server.requests[-1].body["messages"]
    assert [m["role"] for m in resumed] == ["system", "user", "assistant", "user"]
    assert resumed[2]["content"].endswith("Order cancelled.")
    assert len(list(read_trajectory(record))) == 2


async def test_replay_backend_answers_recorded_calls_and_refuses_others(
    small_world_path: Path, openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    record = tmp_path / "rec.jsonl"
    params = served_over_stdio(small_world_path, openai_server, "--record", str(record))
    async with Client(params) as client:
        live = await client.call_tool("get_order", {"order_id": "ORD-1001"})
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "aw_mcp",
            "serve",
            "--world",
            str(small_world_path),
            "--backend",
            "replay",
            "--replay",
            str(record),
        ],
        cwd=str(REPO),
    )
    served_before = len(openai_server.requests)
    async with Client(params) as client:
        replayed = await client.call_tool("get_order", {"order_id": "ORD-1001"})
        missing = await client.call_tool("get_order", {"order_id": "ORD-2"})
    assert replayed.structured_content == live.structured_content
    assert missing.is_error and "no recorded answer" in missing.content[0].text
    assert len(openai_server.requests) == served_before


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_transport(
    mode: str, small_world_path: Path, openai_server: ScriptedOpenAIServer, port: int
) -> None:
    command = [sys.executable, *serve_args(small_world_path, "--transport", "http", "--port", str(port))]
    env = serve_env(openai_server)
    with serving(command, lambda: listening(port), env=env, cwd=str(REPO), stdout=subprocess.DEVNULL):
        async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode) as client:
            tools = (await client.list_tools()).tools
            result = await client.call_tool("get_order", {"order_id": "ORD-1001"})
            bad = await client.call_tool("cancel_order", {})
    assert len(tools) == 2
    assert result.structured_content["status"] == "shipped"
    assert bad.is_error


def inspector_command() -> list[str] | None:
    local = REPO / "node_modules" / ".bin" / "inspector"
    if local.exists():
        return [str(local)]
    if shutil.which("npx") is None:
        return None
    return ["npx", "--yes", INSPECTOR]


def test_inspector_cli_lists_and_calls_over_stdio(
    small_world_path: Path, openai_server: ScriptedOpenAIServer
):
    command = inspector_command()
    if command is None:
        pytest.skip("npm/npx is not installed: the MCP Inspector CLI end-to-end test needs Node.js")
    base = [
        *command,
        "--cli",
        "-q",
        "--format",
        "json",
        "-e",
        f"AW_BASE_URL={openai_server.base_url}",
        "-e",
        "AW_MODEL=aw-test",
        "--cwd",
        str(REPO),
        sys.executable,
        *serve_args(small_world_path),
    ]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([*base, *args], capture_output=True, text=True, timeout=240)
        except subprocess.TimeoutExpired:
            pytest.fail("the Inspector CLI did not finish in 240 s")

    listed = run("--method", "tools/list")
    if listed.returncode != 0 and "npm" in listed.stderr.lower() and "ERR" in listed.stderr:
        pytest.skip(f"the Inspector could not be installed from npm: {listed.stderr[-300:]}")
    assert listed.returncode == 0, listed.stderr
    assert [t["name"] for t in json.loads(listed.stdout)["result"]["tools"]] == ["get_order", "cancel_order"]
    called = run(
        "--method", "tools/call", "--tool-name", "get_order", "--tool-args-json", '{"order_id": "ORD-1001"}'
    )
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["result"]["structuredContent"]["id"] == "ORD-1001"
    bad = run("--method", "tools/call", "--tool-name", "get_order", "--tool-args-json", '{"order_id": 1}')
    assert bad.returncode == 5  # the Inspector's exit code for an isError result
