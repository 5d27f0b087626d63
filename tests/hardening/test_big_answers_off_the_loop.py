"""Issue 21, item 2 (simulator side): a big answer is parsed and validated in a worker thread, so another
session's requests are not held; any backend's answer over `model.max_answer_bytes` is refused, not parsed.
Bounds are 10x or more what the work takes."""

from __future__ import annotations

import json
import time

import anyio
import pytest

from aw_mcp.core.model_io import Generation
from aw_mcp.load.world import load_world_text
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.sim.simulator import INLINE_ANSWER_BYTES, Simulator

pytestmark = pytest.mark.anyio

WORLD = """\
name: big-lists
seed: 1
model: {max_answer_bytes: 8388608}
tools:
  - name: list_items
    description: Every item.
    outputSchema:
      type: object
      properties:
        items:
          type: array
          items:
            type: object
            properties:
              id: {type: string, pattern: "^it_[0-9]+$"}
              n: {type: integer, minimum: 0}
              tags: {type: array, items: {type: string}}
            required: [id, n, tags]
      required: [items]
"""


def big_answer(count: int) -> str:
    items = [{"id": f"it_{i}", "n": i, "tags": ["a", "b"]} for i in range(count)]
    return "**Environment Observation:**\n" + json.dumps({"items": items})


class OneAnswer:
    name = "scripted"
    notice = None

    def __init__(self, text: str):
        self.text = text

    async def generate(self, messages, params, on_progress=None, call=None) -> Generation:  # noqa: ANN001
        return Generation(text=self.text)

    async def aclose(self) -> None:
        return None


@pytest.mark.slow  # seconds of jsonschema work on 60k objects (7-20 s on a loaded 2-core box)
async def test_validating_a_big_answer_does_not_hold_the_event_loop() -> None:
    world = load_world_text(WORLD, "big.yaml")
    text = big_answer(60_000)  # ~2.4 MB, 60k objects: seconds of jsonschema work in Python
    assert len(text) > INLINE_ANSWER_BYTES
    simulator = Simulator(world, OneAnswer(text), SessionRegistry(world))
    gaps: list[float] = []
    done = anyio.Event()

    async def ping() -> None:  # another session's requests: how long does the loop leave them waiting?
        last = time.perf_counter()
        while not done.is_set():
            await anyio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async with anyio.create_task_group() as group:
        group.start_soon(ping)
        started = time.perf_counter()
        outcome = await simulator.call("list_items", {})
        took = time.perf_counter() - started
        done.set()
    assert not outcome.is_error and len(outcome.structured["items"]) == 60_000
    # The loop answered other work while the answer was read: before, validation ran on the loop and the other
    # task did not run once until it was over. Counted in turns, not timed, so a loaded machine cannot fail it.
    assert len(gaps) >= 3, (gaps, took)


async def test_an_answer_over_the_cap_from_any_backend_is_refused_unparsed() -> None:
    world = load_world_text(WORLD.replace("8388608", "65536"), "big.yaml")
    simulator = Simulator(world, OneAnswer(big_answer(5_000)), SessionRegistry(world))
    outcome = await simulator.call("list_items", {})
    assert outcome.is_error and "model.max_answer_bytes = 65,536 bytes" in outcome.text
    record = outcome.record
    assert record is not None and record.attempts == 1 and record.observation == outcome.text
