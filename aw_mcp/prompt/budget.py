"""Keeping a world session's prompt inside the model's context window.

Two rules: a huge argument or observation enters the history (and the ledger) cut to a cap, with a marker saying
so; and when the next prompt would not fit `context_tokens - max_tokens`, the oldest turns are left out of it
(compacted), while the ledger, built from every record, keeps what they established. A call whose prompt cannot fit
even with no history fails on its own and leaves the session as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aw_mcp.core.model_io import ChatMessage

DEFAULT_CONTEXT_TOKENS = 131_072  # what a vLLM/SGLang deployment of the world model commonly serves
HISTORY_STRING_CHARS = 4_000  # one argument string, as the history and the ledger keep it
HISTORY_OBSERVATION_CHARS = 32_000  # one observation, as the history keeps it
CHARS_PER_TOKEN = 3.0  # a cautious estimate (JSON and code tokenize denser than prose)
MESSAGE_OVERHEAD_TOKENS = 8  # role and template tokens around each message
# Phrases servers use when a prompt is longer than the context (vLLM, SGLang, OpenAI).
CONTEXT_OVERFLOW_PHRASES = ("maximum context length", "context length", "too long", "context_length_exceeded")


def clip_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [truncated in the history: {len(text) - limit:,} more characters]"


def clip_value(value: Any, limit: int = HISTORY_STRING_CHARS) -> Any:
    """A JSON value with every string longer than `limit` cut, with a marker (iterative: values can be deep)."""
    if isinstance(value, str):
        return clip_text(value, limit)
    if not isinstance(value, dict | list):
        return value
    root: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        source, target = stack.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in items:
            if isinstance(item, dict | list):
                copy: Any = {} if isinstance(item, dict) else []
                stack.append((item, copy))
                item = copy
            elif isinstance(item, str):
                item = clip_text(item, limit)
            if isinstance(target, dict):
                target[key] = item
            else:
                target.append(item)
    return root


def estimate_tokens(messages: Sequence[ChatMessage], chars: int | None = None) -> int:
    """`chars`: the messages' total content length when the caller keeps it (transcript.py), else counted."""
    if chars is None:
        chars = sum(len(m["content"]) for m in messages)
    return int(chars / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS * len(messages)


def prompt_budget(context_tokens: int, max_tokens: int) -> int:
    """Tokens the prompt may use: the context less the answer's reservation (at least a quarter of the context)."""
    return max(context_tokens - max_tokens, context_tokens // 4)


def is_context_overflow(message: str) -> bool:
    lowered = message.lower()
    return any(phrase in lowered for phrase in CONTEXT_OVERFLOW_PHRASES)
