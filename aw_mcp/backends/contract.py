"""The contract every world-model backend fulfils.

A backend turns a rendered chat conversation into the model's answer. It knows nothing about MCP, worlds or
perturbations: the simulator renders the prompt and parses the answer. What it takes and returns is
`aw_mcp/core/model_io.py`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from aw_mcp.core.model_io import CallRef, ChatMessage, Generation, GenerationParams, ProgressCallback


@runtime_checkable
class WorldModel(Protocol):
    """Anything that can answer a world-model conversation.

    ``generate`` must be cancellable: when the surrounding anyio scope is cancelled (the MCP client cancelled the
    tool call) the backend stops its work (closes the HTTP stream, stops the decode loop) and re-raises.
    ``preload`` is optional: a backend that subclasses this protocol inherits the default (nothing to load).
    """

    name: str

    async def generate(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        on_progress: ProgressCallback | None = None,
        call: CallRef | None = None,
    ) -> Generation: ...

    async def aclose(self) -> None: ...

    async def preload(self) -> bool:
        """Load ahead what the first call would otherwise wait for (the server starts this while it serves).

        True when something was loaded; a failure raises BackendError (calls report it too)."""
        return False
