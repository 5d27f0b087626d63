"""The `demo` backend: scripted answers taken from the world's own tool examples, for `aw-mcp demo` and for trying a
world's plumbing without a model. It is never the world model: every observation it produces carries `notice`, which
the server adds to each result and the trajectory records. A call whose arguments no example has is answered with the
closest example, and its notice says so (Generation.extra["notice"]): the answer is about other arguments."""

from __future__ import annotations

import json

from aw_mcp.backends.contract import WorldModel
from aw_mcp.core.model_io import (
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
)
from aw_mcp.spec.world import ToolExample, WorldSpec

NOTICE = "demo backend: answers are scripted from the world's examples, not the world model's output"


def replay_notice(tool: str, example_arguments: dict[str, object]) -> str:
    """The notice of an answer scripted for other arguments than the call's (no example has the call's)."""
    shown = json.dumps(example_arguments, ensure_ascii=False, sort_keys=True)
    if len(shown) > 200:
        shown = shown[:199] + "…"
    return (
        f"demo backend: no example of {tool} has these arguments, so this replays the example for {shown}; "
        "answers are scripted from the world's examples, not the world model's output"
    )


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
        example = pick_example(tool.examples, call.arguments)
        result = example.result
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, indent=2)
        extra: dict[str, object] = {"scripted": True}
        if example.arguments != call.arguments:
            # The answer is about other arguments (get_book BK-999 answered with BK-001's book): the call's notice
            # says so, in the MCP result and the trajectory alike (the simulator takes extra["notice"] over
            # `notice`).
            extra["notice"] = replay_notice(call.tool, example.arguments)
        return Generation(text=text, extra=extra)

    async def aclose(self) -> None:
        return None
