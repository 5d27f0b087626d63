"""Does a world fit the prompt: its own text (system prompt with the bundled template, first screen and task) must
leave room for a call inside the model's context, or every call would be refused."""

from __future__ import annotations

from aw_mcp.prompt.budget import CHARS_PER_TOKEN, DEFAULT_CONTEXT_TOKENS, prompt_budget
from aw_mcp.prompt.catalog import CatalogForm, largest_tool
from aw_mcp.prompt.render import (
    catalog_form,
    render_demonstrations,
    render_facts,
    render_state,
    render_system_prompt,
    render_tool_definitions,
    scoped_facts,
)
from aw_mcp.spec.source import PathKey
from aw_mcp.spec.world import WorldSpec

FIRST_TURN_CHARS = 600  # a first call's action and framing, beside the system prompt, the screen and the task


def prompt_size_problems(world: WorldSpec, template: str | None = None) -> list[tuple[PathKey, str]]:
    """The world's own text (its system prompt with the bundled template, or `template`, a `prompts:` folder's:
    description, tools and examples, facts, state; plus the first screen and task) must leave room for a call, or
    every call would be refused. The tools count in the form the catalog takes at this context
    (prompt/catalog.py; compact: with the largest tool whole). Named at its largest part."""
    context = world.model.context_tokens or DEFAULT_CONTEXT_TOKENS
    budget = prompt_budget(context, world.model.token_budget)
    form = catalog_form(world, template, budget)
    called = largest_tool(world) if form is CatalogForm.COMPACT else None
    system = render_system_prompt(world, world.now or "2026-01-01T00:00:00Z", template, form, called)
    # A fact scoped to a tool is said again in that tool's action turn (transcript.py): the largest such repeat.
    repeated = max((sum(len(f) + 1 for f in scoped_facts(world, t.name)) for t in world.tools), default=0)
    chars = len(system) + len(world.screen or "") + len(world.task or "") + FIRST_TURN_CHARS + repeated
    needed = int(chars / CHARS_PER_TOKEN)
    if needed <= budget:
        return []
    parts = {
        "description": len(world.description),
        "tools": len(render_tool_definitions(world, form, called) + render_demonstrations(world)),
        "facts": len(render_facts(world)) + repeated,
        "state": len(render_state(world)),
        "screen": len(world.screen or ""),
        "task": len(world.task or ""),
        "prompts": len(template or ""),  # the template's own text
    }
    largest = max(parts, key=lambda k: parts[k])
    where = "model.context_tokens" if world.model.context_tokens else "the default context"
    way_out = "Shorten it, or set `model.context_tokens` to your model's (larger) context"
    if largest == "tools":
        way_out += (
            ", or keep fewer tools (an imported API: `aw-mcp import openapi` with --tag, --path, --operation or "
            "--max-tools)"
        )
    listed = f", the tools listed {form.value}" if largest == "tools" else ""
    return [
        (
            (largest,),
            f"the world's own text needs about {needed:,} tokens of prompt (`{largest}` alone "
            f"{int(parts[largest] / CHARS_PER_TOKEN):,}{listed}), more than {where} of {context:,} tokens leaves "
            f"beside the answer ({budget:,}): every call would be refused. {way_out}",
        )
    ]
