"""The official templates keep the world (issue 31, item 4). Qwen-AgentWorld's prompts/ have no slot for a world's
description, clock, facts or state (MCP and SWE: `{tool_definitions}` and `{demonstrations}`; search:
`{tool_definitions}` and a "Simulation Instruction" input; the screen domains: none). Templates with exactly those
slots stand in for them here (the official prose is not copied into the project): their own text is kept byte for
byte, and every prompt of a session carries the world's facts and state, in the official material's channel, with
one line introducing the per-step notes."""

from __future__ import annotations

from typing import Any

import pytest

from aw_mcp.load.world import load_world
from aw_mcp.prompt.render import render_state
from aw_mcp.prompt.world_channel import NOTES_LINE, channel
from aw_mcp.sim.simulator import Simulator
from aw_mcp.spec.bundled import worlds_dir
from tests.conftest import ScriptedWorldModel
from tests.prompt.test_golden import SESSIONS

# Each domain's official slots, around text of our own.
OFFICIAL_SLOTS = {
    "mcp": "# Role and Objective\n\nAn official-style MCP prompt.\n\n{tool_definitions}\n\n---\n\n{demonstrations}",
    "swe": "# Role and Objective\n\nAn official-style SWE prompt.\n\n{tool_definitions}\n\n{demonstrations}",
    "search": "# Role and Objective\n\nGiven a Simulation Instruction (optional).\n\n{tool_definitions}\n",
    "terminal": "# Role and Objective\n\nAn official-style terminal prompt, without slots.\n",
    "android": "# Role and Objective\n\nAn official-style Android prompt, without slots.\n",
    "web": "# Role and Objective\n\nAn official-style web prompt, without slots.\n",
    "os": "# Role and Objective\n\nAn official-style desktop prompt, without slots.\n",
}
CHANNEL_HEADING = {
    "mcp": None,  # in the {demonstrations} slot: the template's own text continues after it
    "swe": None,
    "search": "\n\n---\n\n# Simulation Instruction\n\n",
    "terminal": "\n\n---\n\n# Simulated World\n\n",
    "android": "\n\n---\n\n# Simulated World\n\n",
    "web": "\n\n---\n\n# Simulated World\n\n",
    "os": "\n\n---\n\n# Simulated World\n\n",
}


async def session_prompts(domain: str, template: str) -> tuple[Any, list[list[dict[str, str]]]]:
    world_name, calls, answers = SESSIONS[domain]
    world = load_world(worlds_dir() / f"{world_name}.yaml")
    model = ScriptedWorldModel(list(answers))
    simulator = Simulator(world, model, template=template)
    for tool, arguments in calls:
        await simulator.call(tool, arguments)
    return world, [c["messages"] for c in model.calls]


@pytest.mark.anyio
@pytest.mark.parametrize("domain", list(OFFICIAL_SLOTS))
async def test_the_official_templates_keep_the_world_in_every_prompt(domain: str) -> None:
    template = OFFICIAL_SLOTS[domain]
    world, requests = await session_prompts(domain, template)
    assert len(requests) == 3
    before_slot = template.split("{", 1)[0]
    for messages in requests:
        system = messages[0]["content"]
        assert system.startswith(before_slot)  # the template's own text, untouched
        for fact in world.facts:
            assert system.count(fact.text) == 1, fact.text
        assert render_state(world) in system
        assert world.now in system and system.count(NOTES_LINE) == 1
        heading = CHANNEL_HEADING[domain]
        if heading is None:
            assert system.index("## World Facts") > system.index(
                '"inputSchema"'
            )  # after the tool definitions
        else:
            assert heading in system and system.index(heading) >= len(before_slot.rstrip())
    assert channel(template, domain) is not None


def test_a_template_with_every_world_slot_gets_nothing_more() -> None:
    assert (
        channel("{world_description} {now} {facts} {initial_state} **World notes for this step:**", "mcp")
        is None
    )
