"""The `demo` backend: scripted answers taken from the world's own tool examples, for `aw-mcp demo` and for trying a
world's plumbing without a model. It is never the world model: every observation it produces carries `notice`, which
the server adds to each result and the trajectory records."""

from __future__ import annotations

import json

from aw_mcp.backends.base import (
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
    WorldModel,
)
from aw_mcp.world import ToolExample, WorldSpec

NOTICE = "demo backend: answers are scripted from the world's examples, not the world model's output"


def pick_example(examples: list[ToolExample], arguments: dict[str, object]) -> ToolExample:
    """The example with exactly these arguments, else the one sharing the most argument values, else the first."""
    return max(
        examples,
        key=lambda e: (e.arguments == arguments, sum(arguments.get(k) == v for k, v in e.arguments.items())),
    )


class DemoWorldModel(WorldModel):
    name = "demo"
    notice = NOTICE

    def __init__(self, world: WorldSpec) -> None:
        self.world = world

    async def generate(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        on_progress: ProgressCallback | None = None,
        call: CallRef | None = None,
    ) -> Generation:
        if call is None:
            raise BackendError("demo: the caller did not say which tool call to answer")
        tool = self.world.tool_or_added(call.tool)
        if tool is None or not tool.examples:
            raise BackendError(
                f"demo: the world has no example for tool {call.tool!r} to answer with (the demo backend only "
                "repeats the world's examples; use a model for real answers)"
            )
        result = pick_example(tool.examples, call.arguments).result
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, indent=2)
        return Generation(text=text, extra={"scripted": True})

    async def aclose(self) -> None:
        return None
