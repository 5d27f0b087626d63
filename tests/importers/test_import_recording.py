"""Issue 33, item 4: `aw-mcp import recording TRAJECTORY -o WORLD.yaml`: the recorded server's listed tools as the
catalog, its real calls as examples, what they established as the state; the world validates and serves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from aw_mcp import Env
from aw_mcp.cli import main
from aw_mcp.importers.recording import established_state
from aw_mcp.load.world import load_world, load_world_text
from aw_mcp.protocol.server import WorldApp, build_server
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.sim.simulator import Simulator
from aw_mcp.trajectory.records import CallRecord, ListingRecord, TrajectoryWriter, read_lines
from tests.conftest import ScriptedWorldModel
from tests.fake_openai import Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.anyio

# The "real" server the recording was made of (here a world answered by a script).
NOTES = """\
name: notes
description: A note store.
domain: mcp
tools:
  - name: create_note
    description: Create a note.
    inputSchema: {type: object, properties: {text: {type: string}}, required: [text]}
  - name: get_note
    description: Fetch one note.
    inputSchema: {type: object, properties: {note_id: {type: string}}, required: [note_id]}
    outputSchema:
      type: object
      properties: {id: {type: string}, text: {type: string}, pinned: {type: boolean}}
      required: [id]
    annotations: {readOnlyHint: true}
  - name: delete_note
    description: Delete a note.
    inputSchema: {type: object, properties: {note_id: {type: string}}, required: [note_id]}
    annotations: {destructiveHint: true}
model: {on_contradiction: "off"}
"""

CALLS = [
    ("create_note", {"text": "buy milk"}, '{"id": "N-1", "text": "buy milk", "pinned": false}'),
    ("create_note", {"text": "call Bob"}, '{"id": "N-2", "text": "call Bob", "pinned": false}'),
    ("delete_note", {"note_id": "N-2"}, '{"deleted": true}'),
    ("get_note", {"note_id": "N-1"}, '{"id": "N-1", "text": "buy milk", "pinned": false}'),
]


async def record_session(path: Path) -> list[dict]:
    """A session through the MCP server, recorded; returns the tools the client was shown (wire form)."""
    world = load_world_text(NOTES, "notes.yaml")
    model = ScriptedWorldModel([f"**Environment Observation:**\n{answer}" for _, _, answer in CALLS])
    writer = TrajectoryWriter(path)
    simulator = Simulator(world, model, SessionRegistry(world, writer))
    async with Client(build_server(WorldApp(simulator, NOTES))) as client:
        listed = (await client.list_tools()).tools
        await client.list_tools()  # a second listing of the same tools repeats no definitions
        for tool, arguments, _ in CALLS:
            assert not (await client.call_tool(tool, arguments)).is_error
    writer.close()
    return [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in listed]


async def test_a_recording_becomes_a_world_that_validates_and_serves(tmp_path: Path) -> None:
    recording = tmp_path / "notes.jsonl"
    listed = await record_session(recording)
    listings = [line for line in read_lines(recording) if isinstance(line, ListingRecord)]
    assert [listing.definitions is not None for listing in listings] == [True, False]

    out = tmp_path / "imported.yaml"
    assert main(["import", "recording", str(recording), "-o", str(out)]) == 0
    world = load_world(out)  # validates
    assert [t.name for t in world.tools] == [t["name"] for t in listed]
    get_note = world.tool("get_note")
    assert get_note is not None and get_note.outputSchema == listed[1]["outputSchema"]
    assert get_note.annotations is not None and get_note.annotations.readOnlyHint is True
    # The real calls as the tools' examples.
    examples = {t.name: [(e.arguments, e.result) for e in t.examples] for t in world.tools}
    assert examples["create_note"] == [
        ({"text": "buy milk"}, CALLS[0][2]),
        ({"text": "call Bob"}, CALLS[1][2]),
    ]
    assert examples["get_note"] == [({"note_id": "N-1"}, json.loads(CALLS[3][2]))]
    # What the calls established: N-1 as last seen, N-2 deleted.
    assert world.state == {
        "records": [{"id": "N-1", "text": "buy milk", "pinned": False}],
        "deleted_ids": ["N-2"],
    }

    # It serves: a call of the imported world reaches the model with the examples and the state in the prompt.
    with ScriptedOpenAIServer(
        [Reply(content='**Environment Observation:**\n{"id": "N-1", "text": "buy milk"}')]
    ) as server:
        async with await Env.open(out, base_url=server.base_url, model="m", thinking=False) as env:
            result = await env.call("get_note", {"note_id": "N-1"})
        system = server.requests[0].body["messages"][0]["content"]
    assert not result.is_error and result.structured_content["id"] == "N-1"
    assert "call Bob" in system and "N-2" in system  # an example and the deleted id reached the world model


def test_a_trajectory_without_listings_still_imports_its_called_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = tmp_path / "old.jsonl"
    recording.write_text(
        json.dumps({"type": "call", "tool": "ping", "arguments": {}, "observation": "pong"}) + "\n"
    )
    out = tmp_path / "w.yaml"
    assert main(["import", "recording", str(recording), "-o", str(out)]) == 0
    world = load_world(out)
    assert [t.name for t in world.tools] == ["ping"] and world.tools[0].examples[0].result == "pong"
    assert "never listed with its definition" in capsys.readouterr().err


def test_a_bad_line_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recording = tmp_path / "bad.jsonl"
    recording.write_text('{"type": "call", "tool": "ping"}\nnot json\n{"type": "call", "tool": "x"}\n')
    assert main(["import", "recording", str(recording), "-o", str(tmp_path / "w.yaml")]) != 0
    assert f"{recording}:2: not valid JSON" in capsys.readouterr().err


def test_only_a_write_deletes_in_the_imported_state() -> None:
    calls = [
        CallRecord(index=0, tool="list", observation='[{"id": "A"}, {"id": "B"}]'),
        CallRecord(
            index=1, tool="history", arguments={"id": "A"}, observation="A was removed from the index once"
        ),
        CallRecord(index=2, tool="drop", arguments={"id": "B"}, observation="Deleted B."),
    ]
    assert established_state(calls, frozenset({"list", "history"})) == {
        "records": [{"id": "A"}],
        "deleted_ids": ["B"],
    }
