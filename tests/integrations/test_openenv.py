"""aw_mcp.integrations.openenv: a world as an OpenEnv environment, driven by OpenEnv's own clients through OpenEnv's own
server app (uvicorn, in a thread), and in-process. Skipped when OpenEnv (the `[openenv]` extra) is not installed,
except the check that the module then says how to install it."""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.anyio

WRITE = ("update_deal_stage", {"deal_id": "deal_20871", "stage": "closed_won"})
READ = ("search_contacts", {"query": "murphy"})


def test_without_openenv_importing_the_module_fails_with_one_line_saying_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in sys.modules if n == "openenv" or n.startswith("openenv.")] + ["openenv"]:
        monkeypatch.setitem(
            sys.modules, name, None
        )  # `import openenv...` now fails as if it were not installed
    monkeypatch.delitem(sys.modules, "aw_mcp.integrations.openenv", raising=False)
    with pytest.raises(ImportError) as info:
        importlib.import_module("aw_mcp.integrations.openenv")
    message = str(info.value)
    assert "\n" not in message and "not installed" in message and "pip install -e '.[openenv]'" in message
    from aw_mcp.core.errors import UserError

    assert isinstance(info.value, UserError)  # `aw-mcp` shows it as one line, no traceback


@pytest.fixture(scope="module")
def oe() -> ModuleType:
    try:
        return importlib.import_module("aw_mcp.integrations.openenv")
    except ImportError as exc:  # skipped for OpenEnv missing only: any other import error fails
        if type(exc).__name__ != "OpenEnvNotInstalledError":
            raise
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def base_url(oe: ModuleType) -> Iterator[str]:
    """OpenEnv's server app for the bundled mcp_crm world on the demo backend, served by uvicorn in a thread."""
    import uvicorn

    port = free_port()
    app = oe.create_app("mcp_crm", backend="demo", seed=3, max_concurrent_envs=16)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # a deadline for a hung start, not a speed check
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "OpenEnv's server app did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


def mcp_client(base_url: str) -> Any:
    from openenv.core.mcp_client import MCPToolClient

    return MCPToolClient(base_url=base_url)


def generic_client(base_url: str) -> Any:
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient(base_url=base_url)


def call(name: str, arguments: dict[str, Any]) -> Any:
    from openenv.core.env_server.mcp_types import CallToolAction

    return CallToolAction(tool_name=name, arguments=arguments)


def episode(oe: ModuleType, episode_id: str) -> Any:
    """The server-side world session behind an episode a client sees (the server runs in this process)."""
    return oe._live[episode_id].env


def tools_called(env: Any) -> list[str]:
    return [record.tool for record in env.trajectory]


def ledger_mentions(env: Any, tool: str) -> bool:
    return any(tool in entry.text for entry in env.session.ledger.entries(env.world.tool))


# --- through OpenEnv's server, with OpenEnv's clients -----------------------------------------------------------------


async def test_openenv_client_resets_lists_tools_and_calls_one_through_openenv_server(
    oe: ModuleType, base_url: str
) -> None:
    from openenv.core.env_server.mcp_types import CallToolObservation, ListToolsObservation, ToolErrorType

    async with mcp_client(base_url) as client:
        first = await client.reset()
        assert isinstance(first.observation, ListToolsObservation)  # reset answers with the tool list
        assert "search_contacts" in [t.name for t in first.observation.tools]
        assert not first.done and first.reward is None

        tools = await client.list_tools()
        assert {"search_contacts", "update_deal_stage"} <= {t.name for t in tools}
        assert all(t.input_schema.get("type") == "object" for t in tools)

        step = await client.step(call(*READ))
        observation = step.observation
        assert isinstance(observation, CallToolObservation) and observation.error is None
        assert observation.tool_name == "search_contacts"
        result = observation.result
        assert not result["is_error"] and result["structured_content"]["contacts"]
        assert result["data"] == result["structured_content"]
        assert result["content"][-1]["text"].startswith("[demo backend")  # labelled, as over MCP

        missing = await client.step(call("no_such_tool", {}))
        assert missing.observation.error.error_type == ToolErrorType.TOOL_NOT_FOUND
        invalid = await client.step(call("search_contacts", {"query": 5}))
        assert (
            invalid.observation.error is None and invalid.observation.result["is_error"]
        )  # the tool's own error

        state = await client.state()
        assert state.step_count == 4  # list_tools, three calls
        env = episode(oe, state.episode_id)
        assert tools_called(env) == ["search_contacts", "no_such_tool", "search_contacts"]

    async with generic_client(base_url) as raw:  # the state's world fields reach a client that keeps them
        await raw.reset(seed=5)
        state = await raw.state()
        assert state["world"] == "pipewell-crm" and state["seed"] == 5 and state["calls"] == 0
        assert state["session_id"] and state["forked_from"] is None


async def test_two_resets_give_two_independent_worlds(oe: ModuleType, base_url: str) -> None:
    async with mcp_client(base_url) as a, mcp_client(base_url) as b:  # two sessions of the server
        await a.reset()
        await b.reset()
        episode_a, episode_b = (await a.state()).episode_id, (await b.state()).episode_id
        await a.step(call(*WRITE))
        await b.step(call(*READ))
        world_a, world_b = episode(oe, episode_a), episode(oe, episode_b)
        assert world_a.id != world_b.id
        assert tools_called(world_a) == ["update_deal_stage"] and tools_called(world_b) == ["search_contacts"]
        assert ledger_mentions(world_a, "update_deal_stage") and not ledger_mentions(
            world_b, "update_deal_stage"
        )

        await a.reset()  # a second reset of one session: a fresh world, the write gone with the old one
        state = await a.state()
        assert state.episode_id != episode_a and state.step_count == 0
        assert episode_a not in oe._live
        fresh = episode(oe, state.episode_id)
        assert fresh.id not in (world_a.id, world_b.id) and tools_called(fresh) == []
        assert not ledger_mentions(fresh, "update_deal_stage")


async def test_reset_fork_from_copies_a_live_episode_into_independent_sessions(
    oe: ModuleType, base_url: str
) -> None:
    async with mcp_client(base_url) as parent:
        await parent.reset()
        for _ in range(2):
            await parent.step(call(*READ))
        parent_state = await parent.state()
        async with generic_client(base_url) as one, generic_client(base_url) as two:
            for child in (one, two):
                first = await child.reset(fork_from=parent_state.episode_id)
                assert "update_deal_stage" in [t["name"] for t in first.observation["tools"]]
            await one.step({"type": "call_tool", "tool_name": WRITE[0], "arguments": WRITE[1]})
            await two.step({"type": "call_tool", "tool_name": READ[0], "arguments": READ[1]})
            state_one, state_two = await one.state(), await two.state()
            for state in (state_one, state_two):
                assert state["forked_from"] == parent_state.episode_id
                assert state["step_count"] == 3 and state["calls"] == 3  # two inherited, one of its own
            assert state_one["episode_id"] != state_two["episode_id"] != parent_state.episode_id

            world_one, world_two = episode(oe, state_one["episode_id"]), episode(oe, state_two["episode_id"])
            world_parent = episode(oe, parent_state.episode_id)
            assert tools_called(world_one) == ["search_contacts", "search_contacts", "update_deal_stage"]
            assert tools_called(world_two) == ["search_contacts"] * 3
            assert tools_called(world_parent) == ["search_contacts"] * 2
            assert ledger_mentions(world_one, "update_deal_stage")
            assert not ledger_mentions(world_two, "update_deal_stage")
            assert not ledger_mentions(world_parent, "update_deal_stage")

            with pytest.raises(Exception, match="no live episode"):
                await one.reset(fork_from="no-such-episode")


# --- in-process ---------------------------------------------------------------------------------------------------


def test_in_process_reset_step_state_and_fork(oe: ModuleType) -> None:
    from openenv.core.env_server.mcp_types import ListToolsAction, ListToolsObservation

    env = oe.WorldEnvironment("mcp_crm", backend="demo", seed=3)
    try:
        assert env.state.episode_id is None and env.env is None
        first = env.reset(episode_id="ep-1")
        assert isinstance(first, ListToolsObservation) and first.metadata["episode_id"] == "ep-1"
        assert first.metadata["seed"] == 3 and first.metadata["world"] == "pipewell-crm"
        env.step(call(*READ))
        listed = env.step(ListToolsAction())
        assert "search_contacts" in [t.name for t in listed.tools]
        assert (env.state.step_count, env.state.calls) == (2, 1)

        a, b = env.fork(2)
        try:
            a.step(call(*WRITE))
            assert tools_called(a.env) == ["search_contacts", "update_deal_stage"]
            assert tools_called(b.env) == tools_called(env.env) == ["search_contacts"]
            assert not ledger_mentions(b.env, "update_deal_stage") and not ledger_mentions(
                env.env, "update_deal_stage"
            )
            assert a.state.forked_from == b.state.forked_from == "ep-1" and a.state.step_count == 3
            assert len({a.env.id, b.env.id, env.env.id}) == 3
        finally:
            a.close()
            b.close()

        with pytest.raises(ValueError, match="in use"):
            oe.WorldEnvironment("mcp_crm", backend="demo").reset(episode_id="ep-1")
        with pytest.raises(ValueError, match="not an action of a world"):
            from openenv.core.env_server.types import Action

            env.step(Action())
    finally:
        env.close()
    assert "ep-1" not in oe._live
    with pytest.raises(RuntimeError, match="closed"):
        env.step(call(*READ))


async def test_async_twins_step_before_reset_and_timeouts(oe: ModuleType) -> None:
    from openenv.core.env_server.mcp_types import ToolErrorType

    env = oe.WorldEnvironment("mcp_crm", backend="demo")
    try:
        observation = await env.step_async(call(*READ))  # a step before any reset opens the world first
        assert observation.error is None and env.state.episode_id is not None
        [child] = await env.fork_async(1)
        await child.reset_async(fork_from=env.state.episode_id)  # a fork of a fork's parent, in place
        assert child.state.forked_from == env.state.episode_id and child.state.calls == 1
        child.close()
        timed_out = await env.step_async(call(*READ), timeout_s=1e-9)  # a deadline nothing meets
        assert timed_out.error is not None and timed_out.error.error_type == ToolErrorType.TIMEOUT
    finally:
        env.close()


def test_create_app_refuses_an_unknown_world_or_option_at_once(oe: ModuleType) -> None:
    from aw_mcp.core.errors import UnknownWorldError

    with pytest.raises(UnknownWorldError):
        oe.create_app("no_such_world", backend="demo")
    with pytest.raises(TypeError, match="not an option"):
        oe.create_app("mcp_crm", bakend="demo")


async def test_openenv_010_mcp_tool_client_wire_lists_and_calls_tools(base_url: str) -> None:
    """What openenv 0.10's MCPToolClient sends (HTTP POST /mcp, JSON-RPC, an `openenv/session/create` session), which
    openenv-core 0.3's server answered with "Environment does not support MCP" (-32603) for a world. Spoken here with
    httpx, since 0.10 itself needs mcp<2; the real client's run is in bench/results/clients_*.log."""
    import httpx

    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:

        async def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
            response = await http.post(
                "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            )
            body = response.json()
            assert "error" not in body, body
            return body["result"]

        session = (await rpc("openenv/session/create", {}))["session_id"]
        tools = (await rpc("tools/list", {"session_id": session}))["tools"]
        assert "search_contacts" in [tool["name"] for tool in tools]
        result = await rpc("tools/call", {"name": READ[0], "arguments": READ[1], "session_id": session})
        assert (
            result["is_error"] is False and result["data"]["contacts"]
        )  # what MCPToolClient.call_tool returns
        stateless = (await rpc("tools/list", {}))["tools"]  # no session: a throwaway environment answers
        assert [tool["name"] for tool in stateless] == [tool["name"] for tool in tools]
        await rpc("openenv/session/close", {"session_id": session})


async def test_openenv_010_client_websocket_and_mcp_calls_are_one_episode(base_url: str) -> None:
    """0.10's MCPToolClient opens its WebSocket with `?session_id=` the session of its /mcp calls; 0.3's server
    makes that WebSocket a session of its own, so a reset there and a call on /mcp were two world sessions."""
    import json

    import httpx
    import websockets

    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:

        async def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
            response = await http.post(
                "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            )
            body = response.json()
            assert "error" not in body, body
            return body["result"]

        session = (await rpc("openenv/session/create", {}))["session_id"]
        ws_url = base_url.replace("http://", "ws://") + f"/ws?session_id={session}"
        async with websockets.connect(ws_url) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {}}))
            assert json.loads(await ws.recv())["type"] == "observation"
            await rpc("tools/call", {"name": READ[0], "arguments": READ[1], "session_id": session})
            await ws.send(json.dumps({"type": "state"}))
            state = json.loads(await ws.recv())["data"]
        await rpc("openenv/session/close", {"session_id": session})
    assert state["calls"] == 1 and state["step_count"] == 1  # the /mcp call went to the episode reset on /ws
