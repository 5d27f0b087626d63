"""The MCP server in-process, through the SDK's own Client, in both protocol eras."""

from __future__ import annotations

import json

import anyio
import pytest
from mcp import Client, MCPError

from aw_mcp.core.model_io import BackendError
from aw_mcp.load.world import load_world_text
from aw_mcp.protocol.server import SPEC_URI, TRAJECTORY_URI, WorldApp, backend_lifetime, build_server
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.sim.simulator import Simulator
from tests.conftest import SMALL_WORLD, ScriptedWorldModel, observation

pytestmark = pytest.mark.anyio
MODES = ["auto", "legacy"]


def make_server(model: ScriptedWorldModel, output_retries: int = 2):
    world = load_world_text(SMALL_WORLD, "tiny_shop.yaml")
    simulator = Simulator(world, model, SessionRegistry(world), output_retries=output_retries)
    return build_server(WorldApp(simulator, SMALL_WORLD)), simulator


@pytest.mark.parametrize("mode", MODES)
async def test_list_tools_in_yaml_order_with_schemas(mode: str) -> None:
    server, _ = make_server(ScriptedWorldModel([]))
    async with Client(server, mode=mode) as client:
        tools = (await client.list_tools()).tools
    assert [t.name for t in tools] == ["get_order", "cancel_order"]
    assert tools[0].output_schema["required"] == ["id", "status"]
    assert tools[0].annotations.read_only_hint is True
    assert tools[0].title == "Get order"


@pytest.mark.parametrize("mode", MODES)
async def test_structured_call_returns_validated_structured_content(mode: str) -> None:
    model = ScriptedWorldModel(
        [observation('```json\n{"id": "ORD-1001", "status": "shipped", "total": 12.5}\n```')]
    )
    server, _ = make_server(model)
    async with Client(server, mode=mode) as client:
        result = await client.call_tool("get_order", {"order_id": "ORD-1001"})
    assert result.is_error is False
    assert result.structured_content == {"id": "ORD-1001", "status": "shipped", "total": 12.5}
    assert json.loads(result.content[0].text) == result.structured_content


@pytest.mark.parametrize("mode", MODES)
async def test_bad_arguments_are_is_error_naming_the_field_without_a_model_call(mode: str) -> None:
    model = ScriptedWorldModel([])
    server, _ = make_server(model)
    async with Client(server, mode=mode) as client:
        result = await client.call_tool("get_order", {"order_id": "nope"})
        missing = await client.call_tool("get_order", {})
    assert result.is_error is True
    assert "order_id" in result.content[0].text and "does not match" in result.content[0].text
    assert missing.is_error is True and "'order_id' is a required property" in missing.content[0].text
    assert model.calls == []


@pytest.mark.parametrize("mode", MODES)
async def test_unknown_tool_is_protocol_error_32602(mode: str) -> None:
    server, _ = make_server(ScriptedWorldModel([]))
    async with Client(server, mode=mode) as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("launch_rocket", {})
    assert info.value.error.code == -32602
    assert "launch_rocket" in info.value.error.message


async def test_invalid_structured_output_is_retried_then_accepted() -> None:
    model = ScriptedWorldModel(
        [
            observation("Order ORD-1001 is shipped."),  # not JSON
            observation('{"id": "ORD-1001", "status": "teleported"}'),  # violates the enum
            observation('{"id": "ORD-1001", "status": "delivered"}'),
        ]
    )
    server, simulator = make_server(model, output_retries=2)
    async with Client(server) as client:
        result = await client.call_tool("get_order", {"order_id": "ORD-1001"})
    assert result.is_error is False and result.structured_content["status"] == "delivered"
    assert len(model.calls) == 3
    assert simulator.registry.get().records[-1].attempts == 3


async def test_invalid_structured_output_gives_up_with_is_error_and_no_structured_content() -> None:
    model = ScriptedWorldModel([observation('{"id": 5}')] * 2)
    server, _ = make_server(model, output_retries=1)
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("get_order", {"order_id": "ORD-1001"})
    assert result.is_error is True
    assert result.structured_content is None
    assert "outputSchema" in result.content[0].text and "2 attempts" in result.content[0].text


async def test_simulated_error_passes_through_as_is_error() -> None:
    model = ScriptedWorldModel([observation("Error: 409 Conflict - Order ORD-1001 has already shipped")])
    server, _ = make_server(model)
    async with Client(server) as client:
        result = await client.call_tool("cancel_order", {"order_id": "ORD-1001"})
    assert result.is_error is True and "already shipped" in result.content[0].text


async def test_history_and_facts_reach_the_next_prompt() -> None:
    model = ScriptedWorldModel(
        [observation("Order ORD-1001 cancelled."), observation('{"id": "ORD-1001", "status": "cancelled"}')]
    )
    server, _ = make_server(model)
    async with Client(server) as client:
        await client.call_tool("cancel_order", {"order_id": "ORD-1001", "reason": "late"})
        await client.call_tool("get_order", {"order_id": "ORD-1001"})
    second = model.calls[1]["messages"]
    assert second[0]["role"] == "system" and "Orders ship from Rotterdam." in second[0]["content"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[1]["content"].startswith("### Turn 1") and '"cancel_order"' in second[1]["content"]
    assert second[2]["content"] == "**Environment Observation:**\nOrder ORD-1001 cancelled."
    assert second[3]["content"].startswith("### Turn 2")
    assert "Order ids look like ORD-1234." in second[3]["content"]  # a fact scoped to get_order


async def test_backend_failure_is_is_error_and_server_keeps_serving() -> None:
    from aw_mcp.core.model_io import BackendError

    model = ScriptedWorldModel(
        [
            BackendError("POST http://x/v1/chat/completions -> 503"),
            RuntimeError("boom"),
            observation("Cancelled."),
        ]
    )
    server, _ = make_server(model)
    async with Client(server) as client:
        first = await client.call_tool("cancel_order", {"order_id": "ORD-1"})
        second = await client.call_tool("cancel_order", {"order_id": "ORD-2"})
        third = await client.call_tool("cancel_order", {"order_id": "ORD-3"})
    assert first.is_error and "503" in first.content[0].text
    assert second.is_error and "boom" in second.content[0].text
    assert not third.is_error and third.content[0].text == "Cancelled."


@pytest.mark.parametrize("mode", MODES)
async def test_progress_is_reported_while_generating(mode: str) -> None:
    model = ScriptedWorldModel([observation("Cancelled.")], progress_steps=3)
    server, _ = make_server(model)
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with Client(server, mode=mode) as client:
        await client.call_tool("cancel_order", {"order_id": "ORD-1"}, progress_callback=on_progress)
    assert seen == sorted(seen) and len(seen) >= 2 and seen[-1] == 30


@pytest.mark.parametrize("mode", MODES)
async def test_client_cancel_cancels_the_backend_request(mode: str) -> None:
    """The client gives up once the call has reached the world model (an event, not a clock): the backend's
    request is cancelled and the call is recorded as cancelled."""
    model = ScriptedWorldModel([observation("late")], delay_s=30)
    server, simulator = make_server(model)
    async with Client(server, mode=mode) as client:
        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "cancel_order", {"order_id": "ORD-1"})
            await model.reached().wait()
            group.cancel_scope.cancel()
        with anyio.fail_after(30):  # a bound for "never": the cancel arrives in milliseconds
            while model.cancelled == 0:
                await anyio.sleep(0.02)
    assert model.cancelled == 1
    assert simulator.registry.get().records[-1].error == "cancelled by the client"


@pytest.mark.parametrize("mode", MODES)
async def test_client_timeout_cancels_the_call(mode: str) -> None:
    """The SDK's read timeout sends the cancel itself. Whether the call had reached the world model by then
    depends on the machine's load, so either way: recorded as cancelled, and a backend request it started is
    cancelled too (none left running)."""
    model = ScriptedWorldModel([observation("late")], delay_s=30)
    server, simulator = make_server(model)
    async with Client(server, mode=mode) as client:
        with pytest.raises(MCPError):
            await client.call_tool("cancel_order", {"order_id": "ORD-1"}, read_timeout_seconds=0.3)
        with anyio.fail_after(30):
            while not simulator.registry.get().records or model.cancelled < len(model.calls):
                await anyio.sleep(0.02)
    assert model.cancelled == len(model.calls) <= 1
    assert simulator.registry.get().records[-1].error == "cancelled by the client"


async def test_resources_expose_spec_and_trajectory() -> None:
    model = ScriptedWorldModel([observation("Cancelled.")])
    server, _ = make_server(model)
    async with Client(server) as client:
        uris = [r.uri for r in (await client.list_resources()).resources]
        await client.call_tool("cancel_order", {"order_id": "ORD-9"})
        spec = (await client.read_resource(SPEC_URI)).contents[0].text
        trajectory = (await client.read_resource(TRAJECTORY_URI, cache_mode="refresh")).contents[0].text
        with pytest.raises(MCPError):
            await client.read_resource("world://nothing")
    assert uris == [SPEC_URI, TRAJECTORY_URI]
    assert "name: tiny-shop" in spec
    lines = [json.loads(line) for line in trajectory.splitlines()]
    assert lines[-1]["tool"] == "cancel_order" and lines[-1]["arguments"] == {"order_id": "ORD-9"}


async def test_meta_session_key_separates_histories() -> None:
    model = ScriptedWorldModel(lambda messages, call: observation(f"turns={len(messages)}"))
    server, simulator = make_server(model)
    async with Client(server) as client:
        await client.call_tool("cancel_order", {"order_id": "ORD-1"}, meta={"aw/session": "alice"})
        await client.call_tool("cancel_order", {"order_id": "ORD-2"}, meta={"aw/session": "alice"})
        bob = await client.call_tool("cancel_order", {"order_id": "ORD-3"}, meta={"aw/session": "bob"})
    assert bob.content[0].text == "turns=2"  # bob starts fresh: system + his action
    assert len(simulator.registry.get("alice").history) == 2


class PreloadingWorldModel(ScriptedWorldModel):
    name = "preloading"

    def __init__(self, outcome: bool | BackendError):
        super().__init__([])
        self.outcome = outcome

    async def preload(self) -> bool:
        if isinstance(self.outcome, BackendError):
            raise self.outcome
        return self.outcome


@pytest.mark.parametrize(
    ("model", "said"),
    [
        (ScriptedWorldModel([]), ""),  # the protocol's default: nothing to load, nothing said
        (PreloadingWorldModel(True), "aw-mcp: preloading model loaded\n"),
        (PreloadingWorldModel(BackendError("no weights at /m")), "aw-mcp: no weights at /m\n"),
    ],
)
async def test_serving_preloads_the_backend_and_says_what_it_loaded(
    model: ScriptedWorldModel, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, simulator = make_server(model)
    async with backend_lifetime(WorldApp(simulator, SMALL_WORLD)):
        await anyio.wait_all_tasks_blocked()  # the preload task has run
    assert capsys.readouterr().err == said
    assert model.closed
