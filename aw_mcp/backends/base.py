"""The contract every world-model backend fulfils.

A backend turns a rendered chat conversation into the model's answer. It knows nothing about MCP, worlds or
perturbations: the simulator renders the prompt and parses the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

ChatMessage = dict[str, str]
"""One chat turn: ``{"role": "system" | "user" | "assistant", "content": "..."}``."""

ProgressCallback = Callable[[int, str], Awaitable[None]]
"""Called while generating with (tokens generated so far, a short status message)."""


@dataclass(frozen=True)
class AnswerConstraint:
    """What the answer must be, for backends that decode under a grammar (aw_mcp/constrained.py builds it).

    The answer is `prefix`, then one JSON value valid for `json_schema` (or, instead, text matching the regex
    `text_alternative`), then `suffix`. A backend that can only constrain JSON (an OpenAI-compatible server's
    `response_format`) sends `json_schema` alone, and the answer is then the bare JSON value. `name` (the tool's)
    labels the schema where a server asks for one."""

    name: str
    json_schema: dict[str, Any]
    prefix: str = ""
    suffix: str = ""
    text_alternative: str | None = None


@dataclass(frozen=True)
class GenerationParams:
    """Sampling settings; the defaults are the official evaluation's (temperature 0.6, 32768 tokens). top_p and top_k
    are None unless set: the server's own generation config decides them."""

    temperature: float = 0.6
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int = 32768
    thinking: bool = True
    seed: int | None = None
    stop: tuple[str, ...] = ()
    # Constrained decoding for this call (None: free text). Backends that cannot constrain ignore it.
    constraint: AnswerConstraint | None = None


@dataclass(frozen=True)
class CallRef:
    """Which tool call a generation answers; replay backends key recordings by it."""

    tool: str
    arguments: dict[str, Any]
    index: int  # 0-based call index within the world session


@dataclass
class Generation:
    """The model's answer. ``text`` is the content; thinking, when the server split it off, is ``reasoning``."""

    text: str
    reasoning: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class BackendError(RuntimeError):
    """The backend could not produce an answer (after its own retries). The message is shown to the agent."""


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
