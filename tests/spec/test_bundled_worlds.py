"""Every bundled world serves: its prompt renders completely, its tools list, a call round-trips, and a world with\nperturbations applies what its record says fired."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from aw_mcp.load.world import load_world
from aw_mcp.prompt.render import SYSTEM_SLOTS, render_system_prompt
from aw_mcp.protocol.server import FAULTS_URI, WorldApp, build_server
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.sim.simulator import Simulator
from aw_mcp.spec.bundled import bundled_worlds
from aw_mcp.spec.world import ToolSpec, WorldSpec
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


def minimal_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments that fill only the required properties (of the first `anyOf` branch too, as web_search's batch or
    single query), each with the simplest value its schema allows."""
    properties = schema.get("properties") or {}
    required = list(schema.get("required") or [])
    if schema.get("anyOf"):
        required += schema["anyOf"][0].get("required") or []
    return {name: simplest_value(properties.get(name) or {}) for name in required}


def simplest_value(schema: dict[str, Any]) -> Any:
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "string")
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return True
    if kind == "array":
        return [simplest_value(schema.get("items") or {})] * int(schema.get("minItems", 0))
    if kind == "object":
        return minimal_arguments(schema)
    return "x" * int(schema.get("minLength", 1))


def demonstrated_call(world: WorldSpec) -> tuple[ToolSpec, dict[str, Any], Any]:
    """A tool with a demonstration and its example (arguments, result), else the first tool with the simplest
    valid arguments and a plain answer."""
    tool = next((t for t in world.tools if t.examples), world.tools[0])
    if tool.examples:
        return tool, tool.examples[0].arguments, tool.examples[0].result
    return tool, minimal_arguments(tool.inputSchema), "ok"


def scripted_answer(answer: Any) -> ScriptedWorldModel:
    text = answer if isinstance(answer, str) else json.dumps(answer)
    return ScriptedWorldModel(lambda messages, call: observation(text))


@pytest.mark.parametrize("path", WORLDS, ids=[p.stem for p in WORLDS])
@pytest.mark.anyio
async def test_world_serves_a_demonstrated_call(path: Path) -> None:
    """Without its perturbations every world answers its demonstrated call as the world model did."""
    world = load_world(path).model_copy(update={"perturbations": [], "presets": []})
    tool, arguments, answer = demonstrated_call(world)
    assert tool.argument_problems(arguments) == []
    model = scripted_answer(answer)
    simulator = Simulator(world, model, SessionRegistry(world))
    async with Client(build_server(WorldApp(simulator, path.read_text()))) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool(tool.name, arguments)
    assert listed[: len(world.tools)] == [t.name for t in world.tools]
    assert not result.is_error, result.content[0].text
    assert result.content[0].text.strip()
    expected = (
        tool.wrap_result(answer if not isinstance(answer, str) else json.loads(answer))
        if tool.structured
        else None
    )
    assert result.structured_content == expected
    assert len(model.calls) == 1
    system = model.calls[0]["messages"][0]["content"]
    assert tool.name in system  # the called tool (and its demonstration, when it has one) reached the prompt
    shown = [str(value) for example in tool.examples for value in example.arguments.values()]
    assert [value for value in shown if value not in system] == []


PERTURBED = [p for p in WORLDS if load_world(p).all_perturbations()]
ABORTS = {"error", "hang", "protocol_error"}


def test_some_bundled_world_has_perturbations() -> None:
    assert PERTURBED, "the perturbation test below would check nothing"


@pytest.mark.parametrize("path", PERTURBED, ids=[p.stem for p in PERTURBED])
@pytest.mark.anyio
async def test_world_with_perturbations_applies_what_it_records(path: Path) -> None:
    """The demonstrated call through the perturbed world: what fired is recorded, served in `world://faults`, names
    the world's own perturbations, and decides whether the world model was asked and whether the result failed."""
    world = load_world(path)
    tool, arguments, answer = demonstrated_call(world)
    model = scripted_answer(answer)
    simulator = Simulator(world, model, SessionRegistry(world))
    async with Client(build_server(WorldApp(simulator, path.read_text()))) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool(tool.name, arguments)
        served = json.loads((await client.read_resource(FAULTS_URI)).contents[0].text)  # type: ignore[union-attr]
    assert listed[: len(world.tools)] == [t.name for t in world.tools]
    [record] = simulator.registry.get().records
    assert record.faults, "the demonstrated call of a perturbed world fired nothing: check more calls"
    assert {f.name for f in record.faults} <= {p.name for p in world.all_perturbations()}
    assert [f["name"] for f in served["faults"]] == [f.name for f in record.faults]
    aborted = any(f.kind in ABORTS and f.applied for f in record.faults)
    assert len(model.calls) == (0 if aborted else 1)
    assert result.is_error == aborted, result.content[0].text


def test_the_bundled_worlds_are_the_packages_list_not_the_folders_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the docs' "Mock an API" did (issue 32): `import ... -o worlds/tasks.yaml` made `tasks` a bundled world."""
    import shutil

    from aw_mcp.core.errors import UnknownWorldError
    from aw_mcp.spec import bundled

    folder = tmp_path / "worlds"
    shutil.copytree(bundled.worlds_dir(), folder)
    (folder / "tasks.yaml").write_text((folder / "mcp_crm.yaml").read_text())  # a user's file beside them
    monkeypatch.setattr(bundled, "worlds_dir", lambda: folder)
    assert bundled.bundled_names() == list(bundled.BUNDLED_WORLDS)
    with pytest.raises(UnknownWorldError):
        bundled.resolve_world_path("tasks")
    assert bundled.resolve_world_path("mcp_crm") == folder / "mcp_crm.yaml"
    assert (
        bundled.resolve_world_path(str(folder / "tasks.yaml")) == folder / "tasks.yaml"
    )  # a path still works


def test_the_list_names_every_world_file_the_repository_tracks() -> None:
    import subprocess

    from aw_mcp.spec.bundled import BUNDLED_WORLDS

    repo = Path(__file__).resolve().parents[2]
    listed = subprocess.run(["git", "ls-files", "worlds/*.yaml"], cwd=repo, capture_output=True, text=True)
    if listed.returncode != 0 or not listed.stdout.strip():
        pytest.skip("not a git checkout")
    assert sorted(Path(line).stem for line in listed.stdout.split()) == sorted(BUNDLED_WORLDS)
