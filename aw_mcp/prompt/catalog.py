"""The tool catalog as the system prompt lists it, in the form that keeps the official layout best and still fits.

The official templates list the tools as JSON in `{tool_definitions}`: the MCP tool objects, each standing alone,
as a real server lists them. A real API's catalog outgrows the context that way, because each tool repeats the
component schemas it uses. The forms, best layout first, measured on the Star Trek API (120 tools, 112 shared
definitions) and on GitHub's `--tag repos` (204 tools, 122 definitions), in estimated tokens of the tool list:

- FULL: every tool standing alone (its schemas carry the `$defs` they use). The trained layout exactly: one JSON
  list of complete tool objects. Star Trek ~338,000, GitHub repos ~1,018,000.
- SHARED: every tool complete, its schemas referring to shared definitions (`$ref: "#/$defs/NAME"`) listed once
  after the list. Every tool is still whole; the one departure is the definitions block. ~126,800 and ~366,400.
- COMPACT: the called tool standing alone, every other as its name, the first paragraph of its description and
  its argument names. The list keeps its shape and the called tool is whole (1 of N complete), but the others lose
  their schemas, and the system prompt then changes with the called tool (no prefix reuse across tools).
  ~10,000 + the called tool (at most ~9,300) and ~22,500 + at most ~33,500.

A world takes the first form whose system prompt uses at most half the prompt budget (the other half is the
session's history): both APIs are COMPACT at the default context (98,304 prompt tokens). The choice is made once
per world and context, so it does not change within a session.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from aw_mcp.spec.shared_defs import used_names, without_shared
from aw_mcp.spec.world import ToolSpec, WorldSpec

COMPACT_DESCRIPTION_CHARS = 300
COMPACT_INTRO = (
    "This API has too many tools to define them all here: the tool this call uses is defined in full, every other "
    "tool by its name, what it does and its argument names."
)
SHARED_INTRO = 'The schema definitions the tools above refer to (`"$ref": "#/$defs/NAME"`), each given once:'
CATALOG_SHARE = 0.5  # the most of the prompt budget a system prompt may take before a smaller form is used


class CatalogForm(StrEnum):
    FULL = "full"
    SHARED = "shared"
    COMPACT = "compact"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


def prompt_definition(tool: ToolSpec) -> dict[str, Any]:
    """A tool as the model reads it: the MCP wire object, the output schema unwrapped (the model writes the API's
    own value), the declared errors added (the prompt's rules name "its `errors`"; agents never see them)."""
    wire = tool.wire()
    if tool.outputWrapper and tool.outputSchema:
        inner = tool.outputSchema["properties"][tool.outputWrapper]
        defs = {k: tool.outputSchema[k] for k in ("$defs",) if k in tool.outputSchema}
        wire["outputSchema"] = {**inner, **defs} if isinstance(inner, dict) and defs else inner
    if tool.errors:
        wire["errors"] = [e.model_dump(exclude_defaults=True) for e in tool.errors]
    return wire


def _first_paragraph(text: str) -> str:
    paragraph = text.strip().split("\n\n", 1)[0].strip()
    if len(paragraph) <= COMPACT_DESCRIPTION_CHARS:
        return paragraph
    return paragraph[:COMPACT_DESCRIPTION_CHARS].rstrip() + "…"


def compact_definition(tool: ToolSpec) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": _first_paragraph(tool.description),
        "arguments": list(tool.inputSchema.get("properties") or {}),
    }


def _shared(definition: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    return {
        key: without_shared(value, defs) if key in ("inputSchema", "outputSchema") else value
        for key, value in definition.items()
    }


def render_definitions(
    tools: list[ToolSpec], defs: dict[str, Any], form: CatalogForm, called: str | None = None
) -> str:
    """The tools' JSON definitions in `form` (`called`: the tool of this call, whole in COMPACT)."""
    if form is CatalogForm.COMPACT:
        listed = [prompt_definition(t) if t.name == called else compact_definition(t) for t in tools]
        return f"{COMPACT_INTRO}\n\n{_json(listed)}"
    definitions = [prompt_definition(t) for t in tools]
    if form is CatalogForm.FULL or not defs:
        return _json(definitions)
    names: dict[str, None] = {}
    for definition in definitions:
        for key in ("inputSchema", "outputSchema"):
            names.update(dict.fromkeys(used_names(definition.get(key), defs)))
    used = {name: defs[name] for name in names}
    text = _json([_shared(d, defs) for d in definitions])
    return f"{text}\n\n{SHARED_INTRO}\n{_json({'$defs': used})}" if used else text


def largest_tool(world: WorldSpec) -> str | None:
    """The tool whose whole definition is longest: the one a COMPACT prompt can be largest with."""
    if not world.tools:
        return None
    return max(world.tools, key=lambda t: len(_json(prompt_definition(t)))).name
