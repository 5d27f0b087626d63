"""The tool catalog's forms (prompt/catalog.py): each tool standing alone, shared definitions once, or compact
with the called tool whole; the best one whose system prompt takes at most half the prompt budget."""

from __future__ import annotations

import json

from aw_mcp.load.world import load_world_text
from aw_mcp.prompt.catalog import COMPACT_INTRO, SHARED_INTRO, CatalogForm
from aw_mcp.prompt.fit import prompt_size_problems
from aw_mcp.prompt.render import catalog_form, render_tool_definitions

ADDRESS = {
    "type": "object",
    "properties": {
        f"line_{i}": {"type": "string", "description": f"Address line {i}, as printed."} for i in range(8)
    },
}


def world_text(tools: int, context: int | None = None) -> str:
    """`tools` tools sharing one `Customer` definition (which uses `Address`)."""
    lines = ["name: shop", "description: A shop API."]
    if context:
        lines.append(f"model: {{context_tokens: {context}, max_tokens: 1024}}")
    lines.append("tools:")
    for i in range(tools):
        lines += [
            f"  - name: op_{i}",
            f'    description: "Operation {i} does something useful.\\n\\nEndpoint: GET /op/{i}"',
            "    inputSchema: {type: object, properties: {customer: {$ref: '#/$defs/Customer'}, n: {type: integer}}}",
        ]
    customer = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "home": {"$ref": "#/$defs/Address"}},
    }
    lines.append("$defs: " + json.dumps({"Customer": customer, "Address": ADDRESS}))
    return "\n".join(lines) + "\n"


def test_the_three_forms() -> None:
    world = load_world_text(world_text(3))
    full = render_tool_definitions(world, CatalogForm.FULL)
    # As MCP lists them: each tool's schema carries the definitions it uses, so they repeat per tool.
    assert json.loads(full)[0]["inputSchema"]["$defs"].keys() == {"Customer", "Address"}
    assert full.count('"line_7"') == 3
    shared = render_tool_definitions(world, CatalogForm.SHARED)
    assert shared.count('"line_7"') == 1 and SHARED_INTRO in shared and '"$ref": "#/$defs/Customer"' in shared
    compact = render_tool_definitions(world, CatalogForm.COMPACT, called="op_1")
    listed = json.loads(compact.removeprefix(COMPACT_INTRO).strip())
    assert [t["name"] for t in listed] == ["op_0", "op_1", "op_2"]
    assert listed[0] == {
        "name": "op_0",
        "description": "Operation 0 does something useful.",
        "arguments": ["customer", "n"],
    }
    assert listed[1]["inputSchema"]["$defs"].keys() == {"Customer", "Address"}  # the called tool, whole


def test_the_best_form_that_fits_half_the_budget() -> None:
    small = load_world_text(world_text(3))
    assert catalog_form(small, None, 98_304) is CatalogForm.FULL
    big = load_world_text(world_text(60, context=8192))
    budget = 8192 - 1024
    assert catalog_form(big, None, 200_000) is CatalogForm.FULL
    assert catalog_form(big, None, budget * 3) is CatalogForm.SHARED
    assert catalog_form(big, None, budget) is CatalogForm.COMPACT
    assert prompt_size_problems(big) == []  # fits compactly, so it loads
