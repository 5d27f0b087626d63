"""The call pipeline moves forward only: each step's answer is returned, never stored on the call; the record comes
from the final answer; whoever called gets every committed record (the refused and the cancelled ones too)."""

from __future__ import annotations

import dataclasses
import json

import anyio
import pytest

from aw_mcp.load.world import load_world_text
from aw_mcp.sim.answer import Answer
from aw_mcp.sim.call import Call
from aw_mcp.sim.simulator import Simulator, UnknownToolError
from aw_mcp.trajectory.records import CallRecord
from tests.conftest import SMALL_WORLD, ScriptedWorldModel, observation

pytestmark = pytest.mark.anyio

ORDER = observation(json.dumps({"id": "ORD-1001", "status": "shipped", "total": 12.5}))


def simulator(answers: list[str], delay_s: float = 0.0) -> Simulator:
    return Simulator(load_world_text(SMALL_WORLD), ScriptedWorldModel(answers, delay_s=delay_s))


async def test_every_committed_record_reaches_on_commit_once() -> None:
    sim = simulator([ORDER])
    seen: list[CallRecord] = []

    async def on_commit(record: CallRecord) -> None:
        seen.append(record)

    outcome = await sim.call("get_order", {"order_id": "ORD-1001"}, on_commit=on_commit)
    with pytest.raises(UnknownToolError):
        await sim.call("no_such_tool", {}, on_commit=on_commit)
    assert [r.tool for r in seen] == ["get_order", "no_such_tool"]
    assert seen[0] is outcome.record and outcome.committed
    assert seen == sim.registry.get().records  # what was committed, in order, and nothing else


async def test_a_cancelled_call_reaches_on_commit_too() -> None:
    sim = simulator([ORDER], delay_s=60.0)
    seen: list[CallRecord] = []

    async def on_commit(record: CallRecord) -> None:
        seen.append(record)

    with anyio.move_on_after(0.05):
        await sim.call("get_order", {"order_id": "ORD-1001"}, on_commit=on_commit)
    assert [(r.error, r.in_history) for r in seen] == [("cancelled by the client", False)]


async def test_the_record_is_the_final_answer_and_the_call_keeps_none_of_it() -> None:
    sim = simulator([ORDER])
    outcome = await sim.call("get_order", {"order_id": "ORD-1001"})
    record, answer = outcome.record, outcome.answer
    assert answer.structured == {"id": "ORD-1001", "status": "shipped", "total": 12.5}
    assert record.structured == answer.structured and record.observation == answer.observation
    assert record.attempts == 1 and record.raw == ORDER and record.messages_hash is not None
    assert {f.name for f in dataclasses.fields(Answer)} >= {
        "text",
        "structured",
        "is_error",
        "error",
        "truth",
    }
    call_fields = {f.name for f in dataclasses.fields(Call)}
    assert not call_fields & {"observation", "structured", "error", "truth", "raw", "attempts", "in_history"}
    assert Call.__dataclass_params__.frozen  # type: ignore[attr-defined]
