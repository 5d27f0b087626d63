"""Per-step notes only where they add something (issue 31, items 3 and 5): a 32-call MCP session with reads,
writes, a scoped fact, calls that never become turns (invalid arguments, an unknown tool) and compaction."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from aw_mcp.load.world import load_world_text
from aw_mcp.prompt.frame import NOTES_HEADER
from aw_mcp.sim.ledger import LEDGER_HEADER
from aw_mcp.sim.simulator import Simulator, UnknownToolError
from tests.conftest import ScriptedWorldModel, observation

WORLD = """\
name: tickets
description: A help desk's ticket API.
now: '2026-03-01T09:00:00Z'
facts:
  - Ticket ids look like T-1, T-2, ...
  - {text: A closed ticket cannot be commented on., tools: [comment_ticket]}
model: {context_tokens: 7000, max_tokens: 1024}
tools:
  - name: open_ticket
    description: Open a ticket.
    inputSchema:
      type: object
      properties: {title: {type: string}}
      required: [title]
      additionalProperties: false
  - name: get_ticket
    description: Read a ticket.
    inputSchema:
      type: object
      properties: {id: {type: string}}
      required: [id]
    annotations: {readOnlyHint: true}
  - name: comment_ticket
    description: Comment on a ticket.
    inputSchema:
      type: object
      properties: {id: {type: string}, text: {type: string}}
      required: [id, text]
"""
PADDING = " ".join(["(a long, realistic body of the ticket, as help desks return it)"] * 12)


def answer(messages: list[dict[str, str]], call: Any) -> str:
    n = call.index + 1
    if call.tool == "open_ticket":
        return observation(json.dumps({"id": f"T-{n}", "status": "open", "title": call.arguments["title"]}))
    if call.tool == "get_ticket":
        return observation(json.dumps({"id": call.arguments["id"], "status": "open", "body": PADDING}))
    return observation(json.dumps({"ticket_id": call.arguments["id"], "comment_id": f"C-{n}"}))


def calls() -> list[tuple[str, dict[str, Any]]]:
    """32 calls: writes, reads, comments (the tool with a scoped fact), one with invalid arguments and one to a tool
    that does not exist (neither becomes a turn)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for k in range(1, 33):
        if k == 9:
            out.append(("open_ticket", {"title": 42}))  # invalid
        elif k == 14:
            out.append(("close_all", {}))  # unknown tool
        elif k % 4 == 1:
            out.append(("open_ticket", {"title": f"Printer {k}"}))
        elif k % 4 == 3:
            out.append(("comment_ticket", {"id": "T-1", "text": f"Update {k}"}))
        else:
            out.append(("get_ticket", {"id": "T-1"}))
    return out


def notes_of(prompt: str) -> str:
    return prompt.split(f"\n\n{NOTES_HEADER}\n", 1)[1] if NOTES_HEADER in prompt else ""


def kept_turns(messages: list[dict[str, str]]) -> list[int]:
    return [int(m["content"].split("\n", 1)[0].removeprefix("### Turn ")) for m in messages[1:-1:2]]


@pytest.mark.anyio
async def test_notes_only_where_they_add_something_in_a_32_call_session() -> None:
    world = load_world_text(WORLD)
    model = ScriptedWorldModel(answer)
    simulator = Simulator(world, model)
    for tool, arguments in calls():
        try:
            await simulator.call(tool, arguments)
        except UnknownToolError:
            pass
    session = simulator.registry.get()
    records = sorted(session.records, key=lambda r: r.index)
    assert len(records) == 32 and len(session.history) == 30  # two calls never became turns
    turn_of = {index: n for n, index in enumerate(session.turn_calls, start=1)}
    with_notes, compacted = 0, 0
    for request in model.calls:
        messages, ref = request["messages"], request["call"]
        prompt = messages[-1]["content"]
        turn = int(prompt.split("\n", 1)[0].removeprefix("### Turn "))
        assert turn == turn_of[ref.index]  # the current turn is numbered as the transcript numbers it
        notes = notes_of(prompt)
        shown = kept_turns(messages)
        left_out = turn - 1 - len(shown)
        scoped = ref.tool == "comment_ticket"
        # Notes exactly when they add something: the tool's scoped fact, or turns left out by compaction.
        assert bool(notes) == (scoped or left_out > 0), (turn, notes)
        with_notes += bool(notes)
        if scoped:
            assert "- A closed ticket cannot be commented on." in notes
        if left_out:
            compacted += 1
            assert shown[0] == left_out + 1  # the kept turns start right after the left-out ones
            assert f"Turns 1-{left_out} are left out" in notes or left_out == 1
            ledger = notes.split(LEDGER_HEADER, 1)[1]
            entries = [
                json.loads(line) for line in ledger.strip().splitlines() if line.strip().startswith("{")
            ]
            for entry in entries:  # numbered as the transcript numbers turns: that turn is that call
                record = next(r for r in records if turn_of.get(r.index) == entry["turn"])
                assert (entry["tool"], entry["arguments"]) == (record.tool, record.arguments)
                assert entry["turn"] < shown[0]
            # Every write of the session is still in the history shown or in the ledger.
            listed = {e["turn"] for e in entries}
            for record in records:
                n = turn_of.get(record.index)
                if n is not None and n < turn and record.tool != "get_ticket":
                    assert n in shown or n in listed, (turn, n)
        else:
            assert LEDGER_HEADER not in notes
    assert compacted > 0  # the session outgrew its context
    assert with_notes < len(model.calls)  # before: every request from the first write on (32 of 32)
    print(
        f"notes on {with_notes} of {len(model.calls)} world-model requests ({len(records)} calls; "
        f"{compacted} compacted prompts)"
    )


@pytest.mark.anyio
async def test_a_compacted_prompt_keeps_the_benchmark_shape_and_cites_only_what_the_domain_keeps() -> None:
    """Issue 31.5: after compaction the first kept turn is a mid-trajectory turn (no task again); the note counts
    calls, not turns, and names a ledger only where the domain keeps one (MCP); the task goes into the note."""
    web = load_world_text(
        "name: shop\ndomain: web\ntask: Buy a tent.\nscreen: \"RootWebArea 'Home'\"\n"
        "model: {context_tokens: 8192, max_tokens: 1024}\n"
    )
    page = "RootWebArea 'Results'\n" + "\n".join(f"[{i}] link 'Tent {i}'" for i in range(60))
    model = ScriptedWorldModel(lambda *_: f"<predicted_observation>\n{page}\n</predicted_observation>")
    simulator = Simulator(web, model)
    for _ in range(12):
        await simulator.call("go_back", {})
    await simulator.call("goto", {})  # invalid arguments: a call, never a turn
    await simulator.call("go_back", {})
    last = model.calls[-1]["messages"]
    first_kept = last[1]["content"]
    assert (
        re.match(r"### Turn \d+\n\*\*Current State:\*\*\n", first_kept)
        and "Task Instruction" not in first_kept
    )
    notes = notes_of(last[-1]["content"])
    left_out = int(first_kept.split("\n", 1)[0].removeprefix("### Turn ")) - 1
    assert f"Turns 1-{left_out} are left out of this conversation" in notes
    session = simulator.registry.get()
    assert f"({session.calls_before_turn(left_out + 1)} earlier call(s))" in notes
    assert "ledger" not in notes.lower() and "The agent's task, as turn 1 gave it: Buy a tent." in notes
