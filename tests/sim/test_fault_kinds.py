"""The fault-kind table (`aw_mcp/sim/fault_kinds.py`): every kind a world file may name has one entry, and a kind
registered in that one place (here a test-only one) works end to end: a world file names it, the planner fires it
per its schedule, the phases apply it, the trajectory lists it and the scorecard grades the agent's reaction."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from aw_mcp.eval.scorecard import OUTCOMES, score_files
from aw_mcp.load.world import load_world_text
from aw_mcp.sim import fault_kinds
from aw_mcp.sim.answer import Answer, Skipped
from aw_mcp.sim.call import Call
from aw_mcp.sim.fault_planner import Firing
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.sim.simulator import Simulator
from aw_mcp.spec.faults import FAULT_SPECS, FaultSpec
from aw_mcp.spec.issues import WorldSpecError
from aw_mcp.trajectory.records import TrajectoryWriter, read_trajectory
from tests.conftest import ScriptedWorldModel, observation

WORLD = """\
name: shouting-shop
domain: mcp
seed: 5
tools:
  - name: get_report
    inputSchema: {type: object, properties: {day: {type: string}}}
    annotations: {readOnlyHint: true}
  - name: get_order
    inputSchema: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
perturbations:
  - name: loud
    match: {tool: get_report}
    fault: {kind: shout, suffix: "!!"}
    schedule: {mode: every, every: 2}
"""


class ShoutFault(FaultSpec):
    """Test only: the observation in capitals, with a suffix."""

    kind: Literal["shout"]
    suffix: str = "!"


def shout(call: Call, fault: ShoutFault, firing: Firing, answer: Answer) -> Answer | Skipped:
    if not any(c.islower() for c in answer.text):
        return Skipped("already shouting")  # fired without effect: the entry says why
    return Answer(answer.text.upper() + fault.suffix)


SHOUT = fault_kinds.ShapeKind(ShoutFault, shout, grade="content")


@pytest.fixture
def shouting() -> Iterator[fault_kinds.FaultKind]:
    fault_kinds.register(SHOUT)  # the one place a kind is added
    try:
        yield SHOUT
    finally:
        fault_kinds.unregister("shout")


def report_answer(messages: list[dict[str, str]], call: Any) -> str:
    if call.tool == "get_order":
        return observation(f"Order {call.arguments['order_id']} shipped.")
    return observation(f"Report for {call.arguments.get('day', 'today')}: all systems nominal.")


def test_every_kind_a_world_may_name_has_one_entry() -> None:
    assert set(FAULT_SPECS) == set(fault_kinds.KINDS)
    for name, kind in fault_kinds.KINDS.items():
        assert kind.name == name and FAULT_SPECS[name] is kind.spec
        assert kind.phase in fault_kinds.PHASES
        assert (kind.grade is None) != (kind.not_graded is None), name
        if isinstance(kind.grade, str):
            assert kind.grade in OUTCOMES
    assert {k.phase for k in fault_kinds.KINDS.values()} == set(fault_kinds.PHASES)


def test_a_kind_is_refused_twice_and_needs_a_grade_or_a_reason(shouting: fault_kinds.FaultKind) -> None:
    with pytest.raises(ValueError, match="already registered"):
        fault_kinds.register(fault_kinds.ShapeKind(ShoutFault, shout, grade="content"))
    with pytest.raises(ValueError, match="either grade"):
        fault_kinds.register(fault_kinds.ShapeKind(ShoutFault, shout))
    with pytest.raises(ValueError, match="grade 'loudness'"):
        fault_kinds.register(fault_kinds.ShapeKind(ShoutFault, shout, grade="loudness"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="make it one of DelayKind, AbortKind"):  # the phase is the class
        fault_kinds.register(fault_kinds.FaultKind(ShoutFault, shout, grade="content"))


@pytest.mark.anyio
async def test_a_test_only_kind_registered_in_one_place_works_end_to_end(
    shouting: fault_kinds.FaultKind, tmp_path: Path
) -> None:
    world = load_world_text(WORLD, "shouting_shop.yaml")
    [loud] = world.perturbations
    assert isinstance(loud.fault, ShoutFault) and loud.fault.suffix == "!!"  # the world file reads its spec
    path = tmp_path / "trajectory.jsonl"
    writer = TrajectoryWriter(path)
    model = ScriptedWorldModel(report_answer)
    simulator = Simulator(world, model, SessionRegistry(world, writer))

    calls = [
        ("get_report", {"day": "mon"}),  # matched call 1
        ("get_report", {"day": "mon"}),  # 2: fires (every 2nd)
        ("get_order", {"order_id": "A1"}),  # not matched
        ("get_report", {"day": "mon"}),  # 3: the agent read it again
        ("get_report", {"day": "tue"}),  # 4: fires, never read again
    ]
    outcomes = [await simulator.call(tool, arguments) for tool, arguments in calls]
    writer.close()

    # the planner fired it per its schedule; the after-phase applied it to what the agent saw
    assert [bool(o.record and o.record.faults) for o in outcomes] == [False, True, False, False, True]
    assert outcomes[1].text == "REPORT FOR MON: ALL SYSTEMS NOMINAL.!!" and not outcomes[1].is_error
    assert outcomes[3].text == "Report for mon: all systems nominal."
    assert outcomes[4].text == "REPORT FOR TUE: ALL SYSTEMS NOMINAL.!!"
    assert len(model.calls) == 5  # a shape fault changes the answer, never asks the model again

    # the trajectory lists it, and the world keeps the world model's own observation
    records = list(read_trajectory(path))
    fired = records[1]
    [entry] = fired.faults
    assert (entry.name, entry.kind, entry.applied, entry.call) == ("loud", "shout", True, 2)
    assert entry.parameters == {"suffix": "!!"}
    assert entry.schedule == {"mode": "every", "every": 2}
    assert entry.ground_truth == fired.truth == "Report for mon: all systems nominal."
    assert fired.observation == "REPORT FOR MON: ALL SYSTEMS NOMINAL.!!" and fired.in_history
    assert [r.faults[0].call for r in records if r.faults] == [2, 4]

    # the scorecard grades the reaction in the kind's category
    card = score_files([path])
    graded = [(r.call, r.kind, r.category, r.outcome) for r in card.reactions]
    assert graded == [(1, "shout", "content", "rechecked"), (4, "shout", "content", "not_rechecked")]
    assert not card.not_graded
    assert card.checks["not-rechecked"] == 1


@pytest.mark.anyio
async def test_a_kind_that_could_not_act_is_listed_as_not_graded(
    shouting: fault_kinds.FaultKind, tmp_path: Path
) -> None:
    def loud_already(messages: list[dict[str, str]], call: Any) -> str:
        return observation("REPORT: OK.")

    world = load_world_text(WORLD.replace("every: 2", "every: 1"), "shouting_shop.yaml")
    path = tmp_path / "trajectory.jsonl"
    writer = TrajectoryWriter(path)
    simulator = Simulator(world, ScriptedWorldModel(loud_already), SessionRegistry(world, writer))
    outcome = await simulator.call("get_report", {"day": "mon"})
    writer.close()
    assert outcome.text == "REPORT: OK."
    [entry] = outcome.record.faults if outcome.record else []
    assert (entry.kind, entry.applied, entry.reason) == ("shout", False, "already shouting")
    card = score_files([path])
    assert not card.reactions
    assert [(n.kind, n.reason) for n in card.not_graded] == [
        ("shout", "fired without effect: already shouting")
    ]


def test_without_its_entry_a_world_cannot_name_the_kind(tmp_path: Path) -> None:
    fault_kinds.register(SHOUT)
    fault_kinds.unregister("shout")
    with pytest.raises(WorldSpecError, match="Input tag 'shout'"):
        load_world_text(WORLD, "shouting_shop.yaml")
