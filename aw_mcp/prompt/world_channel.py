"""Where a system prompt template that has no slot for the world (the official Qwen-AgentWorld templates: their
only slots are `{tool_definitions}` and `{demonstrations}`, and some have none) receives it: the world's
description, clock, facts and hidden state, and the one line that introduces the per-step notes.

The official material's own channels, in order:
- the search prompt names an optional input, the **Simulation Instruction** (a target query and a reference
  answer the simulated pages must agree with): the world goes there, as a section of that name at the end;
- the MCP and SWE prompts end with `{demonstrations}`: the world follows the demonstrations in that slot;
- any other template gets one delimited section at its end.
What the template already has a slot for (`{world_description}`, `{now}`, `{facts}`, `{initial_state}`) is left to
its slot; nothing of the world is dropped.
"""

from __future__ import annotations

from aw_mcp.prompt.frame import NOTES_HEADER

NOTES_LINE = (
    f"A turn may end with {NOTES_HEADER} and a short list: facts and records that hold for that step. Follow them "
    "silently; never mention them."
)
# The slots that carry the world, and the heading its part gets when a template has no such slot.
PARTS: tuple[tuple[str, str], ...] = (
    ("world_description", "This World"),
    ("now", "Current Time"),
    ("facts", "World Facts"),
    ("initial_state", "Initial State"),
)
SEARCH_HEADINGS = {
    "world_description": "About This Session",
    "now": "Current Date",
    "facts": "Reference Answer (ground truth: every page and snippet agrees with it)",
    "initial_state": "Known Pages and State",
}


def missing_parts(template: str) -> list[str]:
    """The world's parts the template has no slot for."""
    return [slot for slot, _ in PARTS if "{" + slot + "}" not in template]


def channel(template: str, domain: str) -> str | None:
    """Where the missing parts go (for messages), or None when the template has a slot for each."""
    if not missing_parts(template) and NOTES_HEADER.strip("*") in template:
        return None
    if domain == "search":
        return "a `# Simulation Instruction` section at its end (the official search prompt's input of that name)"
    if "{demonstrations}" in template:
        return "its {demonstrations} slot, after the demonstrations"
    return "a `# Simulated World` section at its end"


def place_world(template: str, values: dict[str, str], domain: str) -> tuple[dict[str, str], str]:
    """The slot values with the world placed in the official material's channel (the module's doc), and the text
    to append after the filled template (empty when the world went into a slot, or had one for every part)."""
    missing = missing_parts(template)
    needs_notes_line = NOTES_HEADER.strip("*") not in template
    if not missing and not needs_notes_line:
        return values, ""
    headings = SEARCH_HEADINGS if domain == "search" else dict(PARTS)
    blocks = [f"## {headings[slot]}\n{values[slot]}" for slot in missing]
    if needs_notes_line:
        blocks.append(NOTES_LINE)
    body = "\n\n".join(blocks)
    if domain == "search":
        return values, f"\n\n---\n\n# Simulation Instruction\n\n{body}\n"
    if "{demonstrations}" in template:
        demos = values.get("demonstrations", "")
        return {**values, "demonstrations": f"{demos}\n\n{body}\n" if demos else f"\n{body}\n"}, ""
    return values, f"\n\n---\n\n# Simulated World\n\n{body}\n"
