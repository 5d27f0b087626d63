"""What goes into a world model and comes out of it, whichever backend answers: chat messages, sampling settings,
the grammar an answer must follow, the answer itself, and the errors a backend raises. The prompt layer builds these
and the backends (`aw_mcp/backends/`) consume them; neither needs the other."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

ChatMessage = dict[str, str]
"""One chat turn: ``{"role": "system" | "user" | "assistant", "content": "..."}``."""

ProgressCallback = Callable[[int, str], Awaitable[None]]
"""Called while generating with (tokens generated so far, a short status message)."""

DEFAULT_MAX_ANSWER_BYTES = 4 * 1024 * 1024
"""`model.max_answer_bytes` unless a world sets it (spec/world.py's ModelSettings has the same default).

4 MiB is about a million tokens of English text (~4 bytes a token): 32x the official evaluation's budget of 32768
tokens, thinking included, so no answer a model may give is cut; and an answer of that size is read, parsed and
validated in milliseconds, so no answer a server may send (a runaway or hostile one) can hold the event loop."""


@dataclass(frozen=True)
class AnswerConstraint:
    """What the answer must be, for backends that decode under a grammar (aw_mcp/prompt/constraint.py builds it).

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
    # The largest answer (text and reasoning together, UTF-8 bytes); a larger one is an AnswerTooLarge error. The
    # OpenAI backend stops reading there (answer_size_problem says the same for any backend's Generation).
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES


@dataclass(frozen=True)
class CallRef:
    """Which tool call a generation answers; replay backends key recordings by it."""

    tool: str
    arguments: dict[str, Any]
    index: int  # 0-based call index within the world session
    # The session's earlier calls, (tool, arguments) in index order: the hybrid backend replays a recorded answer
    # only after the same calls (backends/hybrid.py).
    history: tuple[tuple[str, dict[str, Any]], ...] = ()


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


class AnswerTooLarge(BackendError):
    """The answer exceeded `model.max_answer_bytes`: not retried (the same request tends to run away again).

    `what` says what was seen, e.g. "an answer of 5,000,000 bytes" or "more than 8,454,144 bytes of response
    body" (a backend that stops reading early knows only a lower bound)."""

    def __init__(self, source: str, limit: int, what: str) -> None:
        super().__init__(
            f"{source} sent {what}, over model.max_answer_bytes = {limit:,} bytes (text and reasoning together); "
            "the answer was dropped. Raise model.max_answer_bytes in the world file if answers this large are "
            "expected, or lower model.max_tokens"
        )
        self.limit = limit


def utf8_size(text: str) -> int:
    """Bytes of `text` as UTF-8 (lone surrogates, which JSON can carry, count as 3 like any other)."""
    return len(text.encode("utf-8", "surrogatepass"))


def answer_size(generation: Generation) -> int:
    """What counts against `max_answer_bytes`: the answer's text and reasoning together, in UTF-8 bytes."""
    return utf8_size(generation.text) + utf8_size(generation.reasoning)


def answer_size_problem(
    generation: Generation, limit: int, source: str = "the world model"
) -> AnswerTooLarge | None:
    """The error for an answer over `limit` (any backend's), else None. Cheap: two encodes, no parsing."""
    if len(generation.text) + len(generation.reasoning) <= limit // 4:
        return None  # no character takes more than 4 bytes
    size = answer_size(generation)
    return AnswerTooLarge(source, limit, f"an answer of {size:,} bytes") if size > limit else None
