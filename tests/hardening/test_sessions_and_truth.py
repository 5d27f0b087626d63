"""Items 2, 3 and 4 of issue 15: bounded sessions, one truth between the world and the agent, a context budget."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import anyio
import pytest

from aw_mcp.core.model_io import BackendError
from aw_mcp.load.world import load_world_text
from aw_mcp.prompt.budget import HISTORY_OBSERVATION_CHARS, HISTORY_STRING_CHARS
from aw_mcp.sim.registry import MAX_SESSION_KEY_CHARS, SessionRegistry
from aw_mcp.sim.session import SessionKeyError
from aw_mcp.sim.simulator import Simulator
from aw_mcp.trajectory.records import TrajectoryWriter, read_trajectory
from tests.conftest import SMALL_WORLD, ScriptedWorldModel, observation

pytestmark = pytest.mark.anyio


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def registry(**kw: object) -> tuple[SessionRegistry, FakeClock]:
    clock = FakeClock()
    return SessionRegistry(load_world_text(SMALL_WORLD), clock=clock, **kw), clock  # type: ignore[arg-type]


def test_idle_sessions_are_evicted_and_the_cap_makes_room_from_the_oldest() -> None:
    reg, clock = registry(max_sessions=3, idle_ttl_s=60)
    reg.get()  # the default session is never evicted
    reg.get("a")
    clock.now += 30
    reg.get("b")
    assert len(reg) == 3
    reg.get("c")  # at the cap: the least recently used idle session ("a") makes room
    assert {s.id for s in reg.sessions()} == {"default", "b", "c"}
    clock.now += 61
    reg.get()
    assert {s.id for s in reg.sessions()} == {"default"}


def test_busy_sessions_are_kept_and_a_full_registry_refuses_cleanly() -> None:
    reg, clock = registry(max_sessions=2, idle_ttl_s=1)
    reg.get("a").busy = 1
    reg.get("b").busy = 1
    clock.now += 100
    with pytest.raises(SessionKeyError, match="too many live world sessions"):
        reg.get("c")
    assert {s.id for s in reg.sessions()} == {"a", "b"}


def test_long_session_keys_are_refused_and_drop_frees_the_world() -> None:
    reg, _ = registry()
    with pytest.raises(SessionKeyError, match="at most 128"):
        reg.get("k" * (MAX_SESSION_KEY_CHARS + 1))
    reg.get("x")
    assert reg.drop("x") and not reg.drop("x") and len(reg) == 0


async def test_a_failed_recording_fails_the_call_and_leaves_history_unchanged(tmp_path: Path) -> None:
    world = load_world_text(SMALL_WORLD)
    writer = TrajectoryWriter(tmp_path / "t.jsonl")
    model = ScriptedWorldModel(lambda *_: observation("Order cancelled."))
    simulator = Simulator(world, model, SessionRegistry(world, writer))
    ok = await simulator.call("cancel_order", {"order_id": "ORD-1"})
    assert not ok.is_error

    def full_disk(record: object) -> None:
        raise OSError(28, "No space left on device")

    writer.write = full_disk  # type: ignore[method-assign]
    failed = await simulator.call("cancel_order", {"order_id": "ORD-2"})
    session = simulator.registry.get()
    assert failed.is_error and "could not be recorded" in failed.text and "No space left" in failed.text
    assert len(session.history) == 1 and len(session.records) == 1  # the world did not take it in either


async def test_an_answer_arriving_after_the_client_gave_up_stays_out_of_history() -> None:
    world = load_world_text(SMALL_WORLD)
    scope = anyio.CancelScope()

    def answer(*_: object) -> str:
        scope.cancel()  # the client gives up just as the world model's answer comes in
        return observation("Order cancelled.")

    simulator = Simulator(world, ScriptedWorldModel(answer))
    with scope:
        await simulator.call("cancel_order", {"order_id": "ORD-1"})
    session = simulator.registry.get()
    assert scope.cancelled_caught
    assert session.history == [] and session.records[0].error == "cancelled by the client"


def test_trajectory_files_are_owner_only(tmp_path: Path) -> None:
    TrajectoryWriter(tmp_path / "t.jsonl").close()
    assert stat.S_IMODE(os.stat(tmp_path / "t.jsonl").st_mode) == 0o600


def test_a_torn_last_line_is_ignored_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"type": "call", "tool": "get_order", "arguments": {}}\n{"type": "call", "to')
    assert len(list(read_trajectory(path))) == 1
    assert "torn last line" in caplog.text


async def test_history_caps_huge_arguments_and_observations_with_a_marker() -> None:
    world = load_world_text(SMALL_WORLD)
    big = "y" * (HISTORY_OBSERVATION_CHARS * 2)
    simulator = Simulator(world, ScriptedWorldModel(lambda *_: observation(big)))
    await simulator.call("cancel_order", {"order_id": "ORD-1", "reason": "x" * 200_000})
    turn = simulator.registry.get().history[0]
    assert (
        len(turn.arguments["reason"]) < HISTORY_STRING_CHARS + 100
        and "truncated in the history" in turn.arguments["reason"]
    )
    assert len(turn.observation) < HISTORY_OBSERVATION_CHARS + 100


async def test_context_budget_compacts_old_turns_and_records_it() -> None:
    world = load_world_text(SMALL_WORLD + "model: {context_tokens: 16384, max_tokens: 1024}\n")
    model = ScriptedWorldModel(lambda *_: observation("Order cancelled. " + "detail " * 1000))
    simulator = Simulator(world, model)
    for n in range(40):
        outcome = await simulator.call("cancel_order", {"order_id": f"ORD-{n}"})
        assert not outcome.is_error, outcome.text
    records = simulator.registry.get().records
    assert records[0].compacted == 0 and records[-1].compacted > 0
    last_prompt = model.calls[-1]["messages"]
    assert sum(len(m["content"]) for m in last_prompt) / 3 < 16384 - 1024
    assert "left out of this conversation" in last_prompt[-1]["content"]
    assert "What the turns left out established" in last_prompt[-1]["content"]


async def test_a_call_that_cannot_fit_fails_alone_and_later_calls_work() -> None:
    world = load_world_text(SMALL_WORLD + "model: {context_tokens: 4096, max_tokens: 1024}\n")
    model = ScriptedWorldModel(lambda *_: observation("Order cancelled."))
    simulator = Simulator(world, model)
    huge = await simulator.call("cancel_order", {"order_id": "ORD-1", "reason": "x" * 50_000})
    assert huge.is_error and "cannot be simulated" in huge.text and model.calls == []
    after = await simulator.call("cancel_order", {"order_id": "ORD-2"})
    assert not after.is_error


async def test_a_context_overflow_from_the_server_compacts_the_next_prompt() -> None:
    world = load_world_text(SMALL_WORLD)
    answers: list[object] = [observation("Order cancelled.")] * 4
    answers.append(BackendError("HTTP 400: This model's maximum context length is 4096 tokens"))
    answers.append(observation("Order cancelled."))
    model = ScriptedWorldModel(answers)  # type: ignore[arg-type]
    simulator = Simulator(world, model)
    for n in range(6):
        await simulator.call("cancel_order", {"order_id": f"ORD-{n}"})
    records = simulator.registry.get().records
    assert records[4].is_error and not records[5].is_error and records[5].compacted >= 2
