"""`model.timeout_s` bounds a whole tool call: the simulator's output retries share one deadline."""

from __future__ import annotations

import pytest

from aw_mcp.load.world import load_world_text
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.sim.simulator import Simulator
from tests.conftest import SMALL_WORLD, ScriptedWorldModel, observation

pytestmark = pytest.mark.anyio


async def test_output_retries_share_the_call_deadline() -> None:
    world = load_world_text(SMALL_WORLD + "model: {timeout_s: 1, output_retries: 9}\n", "tiny_shop.yaml")
    # Every answer is invalid for get_order's outputSchema and takes 0.4 s: ten attempts would take 4 s.
    model = ScriptedWorldModel(lambda messages, call: observation("not json at all"), delay_s=0.4)
    simulator = Simulator(world, model, SessionRegistry(world))
    outcome = await simulator.call("get_order", {"order_id": "ORD-1"})
    assert outcome.is_error and "timed out" in outcome.text and "1 s" in outcome.text
    assert 1 <= len(model.calls) < 10  # stopped at the deadline, not after every retry
    assert model.cancelled <= 1  # the attempt in flight, if the deadline fell inside one, was cancelled
