"""Real APIs of ordinary and large size import and serve at the default context (issue 31, item 2): the Star Trek
API (tests/fixtures/openapi/star-trek.json, 120 operations, 222 component schemas) whole, and GitHub's REST
description (npm `@octokit/openapi`, ~1,200 operations, installed by .ci/run) with the filter its import suggests.

Each world is served in-process through the MCP client: tools/list, then one call per tool family, with the
prompt tokens of each call printed (`pytest -s` shows them) and checked against the prompt budget.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from aw_mcp.cli import main
from aw_mcp.core.model_io import ChatMessage
from aw_mcp.load.world import load_world, validate_paths
from aw_mcp.prompt.budget import DEFAULT_CONTEXT_TOKENS, estimate_tokens, prompt_budget
from aw_mcp.prompt.catalog import CatalogForm
from aw_mcp.prompt.constraint import result_schema
from aw_mcp.protocol.server import WorldApp, build_server
from aw_mcp.sim.simulator import Simulator
from aw_mcp.spec.schema_walk import walk
from aw_mcp.spec.world import ToolSpec, WorldSpec
from tests.conftest import REPO, ScriptedWorldModel, observation

STAR_TREK = REPO / "tests/fixtures/openapi/star-trek.json"
GITHUB_CANDIDATES = [
    os.environ.get("AW_GITHUB_OPENAPI", ""),
    str(REPO / "node_modules/@octokit/openapi/generated/api.github.com.json"),
]
GITHUB = next((Path(p) for p in GITHUB_CANDIDATES if p and Path(p).is_file()), None)


def sample(schema: Any, root: dict[str, Any], depth: int = 0) -> Any:
    """A small value valid for `schema` (required properties only, empty arrays): what a terse API returns."""
    if not isinstance(schema, dict) or depth > 40:
        return None
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return sample(root.get("$defs", {}).get(name, {}), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return sample(schema[key][0], root, depth + 1)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            value = sample(part, root, depth + 1)
            if isinstance(value, dict):
                merged.update(value)
        return merged
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties", {})
        return {n: sample(properties.get(n, {}), root, depth + 1) for n in schema.get("required", [])}
    if kind == "array":
        return [sample(schema.get("items", {}), root, depth + 1) for _ in range(schema.get("minItems", 0))]
    if kind in ("integer", "number"):
        return max(schema.get("minimum", 1), 1)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    formats = {"date-time": "2026-01-01T00:00:00Z", "date": "2026-01-01", "uri": "https://example.com/x"}
    return formats.get(schema.get("format", ""), "x" * max(schema.get("minLength", 1), 1))


class TerseAPI(ScriptedWorldModel):
    """Answers every call with a small valid result of the tool's output schema (an error line when none can be
    made), and keeps each call's prompt size."""

    def __init__(self, world: WorldSpec):
        super().__init__(self._answer)
        self.world = world
        self.tokens: dict[str, int] = {}

    def _answer(self, messages: list[ChatMessage], call: Any) -> str:
        self.tokens[call.tool] = estimate_tokens(messages)
        tool = self.world.tool(call.tool)
        if tool is None or tool.outputSchema is None:
            return observation("OK")
        schema = result_schema(tool.outputSchema, tool.outputWrapper)
        value = sample(schema, schema)
        if tool.output_problem(tool.wrap_result(value)) is not None:
            return observation("Error: 404 Not Found")
        return observation(json.dumps(value))


def refs_resolve_inside(schema: dict[str, Any]) -> bool:
    """Every `$ref` of a tool schema points into that schema's own `$defs` (it stands alone, as MCP needs)."""
    own = schema.get("$defs", {})
    refs = [n.schema["$ref"] for n in walk(schema) if isinstance(n.schema.get("$ref"), str)]
    return all(ref.removeprefix("#/$defs/") in own for ref in refs)


def families(world: WorldSpec, key: Any) -> dict[str, ToolSpec]:
    """One tool per family (`key(tool)`), the first of each in catalog order."""
    out: dict[str, ToolSpec] = {}
    for tool in world.tools:
        out.setdefault(key(tool), tool)
    return out


def endpoint(tool: ToolSpec) -> str:
    return re.search(r"Endpoint: \w+ (\S+)", tool.description).group(1)  # type: ignore[union-attr]


def arguments_for(tool: ToolSpec) -> dict[str, Any]:
    return sample(tool.inputSchema, tool.inputSchema)


async def serve_each_family(
    world: WorldSpec, text: str, picked: dict[str, ToolSpec]
) -> tuple[Simulator, TerseAPI, dict[str, Any]]:
    model = TerseAPI(world)
    simulator = Simulator(world, model)
    server = build_server(WorldApp(simulator, text))
    budget = prompt_budget(DEFAULT_CONTEXT_TOKENS, world.model.token_budget)
    async with Client(server) as client:
        listed = (await client.list_tools()).tools
        assert [t.name for t in listed] == [t.name for t in world.tools]
        for tool in listed:
            assert refs_resolve_inside(tool.input_schema), tool.name
            assert tool.output_schema is None or refs_resolve_inside(tool.output_schema), tool.name
        results = {}
        for family, tool in picked.items():
            results[family] = await client.call_tool(tool.name, arguments_for(tool))
    for family, tool in picked.items():
        tokens = model.tokens[tool.name]
        print(f"{world.name} {family:>24} {tool.name:<48} {tokens:>7,} prompt tokens")
        assert tokens <= budget, (tool.name, tokens)
    return simulator, model, results


def import_world(tmp_path: Path, source: Path, *flags: str) -> tuple[int, Path]:
    out = tmp_path / "world.yaml"
    return main(["import", "openapi", str(source), "-o", str(out), "--force", *flags]), out


@pytest.mark.slow  # ~15 s: a 497 KB document imported, validated and served for 40 calls
@pytest.mark.anyio
async def test_star_trek_api_imports_and_serves_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = import_world(tmp_path, STAR_TREK)
    stderr = capsys.readouterr().err
    assert code == 0 and "importer bug" not in stderr and "wrote" in stderr
    assert [i for i in validate_paths([out]) if i.severity == "error"] == []
    world = load_world(out)
    text = out.read_text(encoding="utf-8")
    assert len(world.tools) == 120 and len(world.defs) > 100
    # Each component schema is written once, at the top, and referred to (inlined it was ~471,822 prompt tokens).
    assert text.count("\n  AnimalFull:\n") == 1 and "$ref: '#/$defs/AnimalFull'" in text
    assert len(text) < 400_000
    by_family = families(world, lambda t: endpoint(t).split("/")[1])
    assert len(by_family) == 40
    simulator, model, results = await serve_each_family(world, text, by_family)
    assert all(not r.is_error for r in results.values()), [f for f, r in results.items() if r.is_error]
    # At the default context the catalog is compact: the called tool whole, the others by name, description and
    # argument names (prompt/catalog.py).
    assert simulator.catalog_form is CatalogForm.COMPACT
    system = model.calls[0]["messages"][0]["content"]
    first = next(iter(by_family.values()))
    assert f'"name": "{first.name}",\n    "description"' in system and '"inputSchema"' in system
    assert system.count('"inputSchema"') == 1 and system.count('"arguments": [') == len(world.tools) - 1
    print(
        f"stapi: {len(by_family)} families, prompt tokens {min(model.tokens.values()):,}-{max(model.tokens.values()):,}"
    )


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.skipif(
    GITHUB is None, reason="GitHub's REST description is absent: npm install @octokit/openapi (.ci/run)"
)
async def test_github_rest_api_imports_with_the_filter_its_import_suggests_and_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert GITHUB is not None
    code, _ = import_world(tmp_path, GITHUB)
    stderr = capsys.readouterr().err
    assert code == 1 and "importer bug" not in stderr
    suggestion = re.search(r"--tag (\S+) \((\d+) operations\)", stderr)
    assert suggestion is not None, stderr[-2000:]
    tag = suggestion.group(1)
    code, out = import_world(tmp_path, GITHUB, "--tag", tag)
    assert code == 0, capsys.readouterr().err[-2000:]
    world = load_world(out)
    assert len(world.tools) == int(suggestion.group(2))
    # A family: the resource after /repos/{owner}/{repo}/ (e.g. branches, commits, hooks).
    by_family = families(world, lambda t: (endpoint(t).split("/") + ["", "", "", "", ""])[4] or "repo")
    assert len(by_family) > 20
    _, model, results = await serve_each_family(world, out.read_text(encoding="utf-8"), by_family)
    succeeded = sum(not r.is_error for r in results.values())
    assert succeeded >= 0.8 * len(results), {
        f: r.content[0].text[:120] for f, r in results.items() if r.is_error
    }
    print(
        f"github {tag}: {len(by_family)} families, prompt tokens {min(model.tokens.values()):,}-"
        f"{max(model.tokens.values()):,}"
    )
