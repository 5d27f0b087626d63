"""Split generated text into thinking and answer at `</think>` (the Qwen3 convention: with thinking on, the
prompt already ends in `<think>`, so everything before `</think>` is reasoning)."""

from __future__ import annotations

THINK_START = "<think>"
THINK_END = "</think>"


def split_reasoning(text: str, thinking: bool = True) -> tuple[str, str]:
    """(reasoning, content).

    Without `</think>` and with thinking on, ALL the text is reasoning and the content is empty: the answer never
    started, e.g. generation was cut off by max_tokens inside the thinking. This is deliberate and matches vLLM's
    qwen3 reasoning parser; the server's `reasoning_content`/`content` and the local backend follow it. A caller
    that needs an answer should give a larger max_tokens or a `thinking_budget` (which forces `</think>`).
    With thinking off, text without `</think>` is all content."""
    head, sep, tail = text.partition(THINK_END)
    if not sep:
        if thinking:
            return _strip_start(head).strip(), ""
        return "", text.strip()
    return _strip_start(head).strip(), tail.strip()


def _strip_start(text: str) -> str:
    start = text.find(THINK_START)
    return text[start + len(THINK_START) :] if start != -1 else text


class ReasoningStreamSplitter:
    """Routes streamed text deltas to reasoning or content, holding back a possible partial `</think>`."""

    def __init__(self, thinking: bool = True) -> None:
        self.in_reasoning = thinking
        self._pending = ""

    def feed(self, delta: str) -> tuple[str, str]:
        """(reasoning delta, content delta) for a new piece of text."""
        if not self.in_reasoning:
            return "", delta
        text = self._pending + delta
        head, sep, tail = text.partition(THINK_END)
        if sep:
            self.in_reasoning = False
            self._pending = ""
            return head.replace(THINK_START, ""), tail.lstrip("\n")
        keep = _partial_suffix(text, THINK_END)
        self._pending = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep].replace(THINK_START, ""), ""

    def flush(self) -> tuple[str, str]:
        pending, self._pending = self._pending, ""
        return (pending, "") if self.in_reasoning else ("", pending)


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of marker."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
