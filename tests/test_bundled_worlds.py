"""Every bundled world serves: its prompt renders completely, its tools list, and a call round-trips."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mcp import Client

from aw_mcp.bundled import bundled_worlds
from aw_mcp.prompting import SYSTEM_SLOTS, render_system_prompt
from aw_mcp.server import WorldApp, build_server
from aw_mcp.session import SessionRegistry
from aw_mcp.simulator import Simulator
from aw_mcp.world import load_world
from tests.conftest import ScriptedWorldModel, observation

WORLDS = bundled_worlds()


@pytest.mark.parametrize("path", WORLDS, ids=[p.stem for p in WORLDS])
def test_system_prompt_fills_every_slot(path: Path) -> None:
    world = load_world(path)
    prompt = render_system_prompt(world, "2026-01-01T00:00:00Z")
    leftover = [slot for slot in SYSTEM_SLOTS if "{" + slot + "}" in prompt]
    assert leftover == []
    assert world.name in prompt
    assert all(tool.name in prompt for tool in world.tools)


@pytest.mark.parametrize("path", WORLDS, ids=[p.stem for p in WORLDS])
@pytest.mark.anyio
async def test_world_serves_a_demonstrated_call(path: Path) -> None:
    world = load_world(path)
    tool = next((t for t in world.tools if t.examples), world.tools[0])
    example = tool.examples[0] if tool.examples else None
    arguments = example.arguments if example else {}
    answer = example.result if example else "ok"
    text = answer if isinstance(answer, str) else json.dumps(answer)
    model = ScriptedWorldModel(lambda messages, call: observation(text))
    simulator = Simulator(world, model, SessionRegistry(world))
    async with Client(build_server(WorldApp(simulator, path.read_text()))) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool(tool.name, arguments)
    assert listed[: len(world.tools)] == [t.name for t in world.tools]
    if example is not None and not world.perturbations:
        assert not result.is_error, result.content[0].text
        assert result.content[0].text.strip()
        if tool.structured:
            assert result.structured_content == tool.wrap_result(
                answer if not isinstance(answer, str) else json.loads(answer)
            )
    if model.calls:  # the demonstration of the called tool reached the prompt
        system = model.calls[0]["messages"][0]["content"]
        assert re.search(re.escape(tool.name), system)
