"""Shared test fixtures: anyio on asyncio, a scripted in-process world model, and a small world."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import pytest

from aw_mcp.backends.base import (
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
)

REPO = Path(__file__).resolve().parent.parent


@contextmanager
def triton_interpret_env() -> Iterator[None]:
    """TRITON_INTERPRET=1 for the duration, then as it was."""
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = previous


def _import_triton_for_the_interpreter() -> None:
    """Triton decorates its own library functions (tl.sigmoid, ...) once, at first import, in the mode that
    TRITON_INTERPRET selects then. The kernel tests run interpreted on CPU, so import it in that mode before any
    test module can, and restore the variable so every other test still sends CPU tensors to the torch references.
    """
    import torch

    if torch.cuda.is_available():
        return
    with triton_interpret_env(), suppress(ImportError):
        import triton.language  # noqa: F401


_import_triton_for_the_interpreter()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


Answer = str | Generation | BaseException | Callable[[list[ChatMessage], CallRef | None], Any]


class ScriptedWorldModel:
    """A world model that answers from a script: a list of answers consumed in order, or a function.

    Records every conversation it receives so tests can check what reached the prompt.
    """

    name = "scripted"

    def __init__(
        self, answers: list[Answer] | Callable[..., Answer], delay_s: float = 0.0, progress_steps: int = 0
    ):
        self.answers = answers
        self.delay_s = delay_s
        self.progress_steps = progress_steps
        self.calls: list[dict[str, Any]] = []
        self.cancelled = 0
        self.closed = False

    async def generate(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        on_progress: ProgressCallback | None = None,
        call: CallRef | None = None,
    ) -> Generation:
        self.calls.append({"messages": messages, "params": params, "call": call})
        try:
            for step in range(1, self.progress_steps + 1):
                if on_progress is not None:
                    await on_progress(step * 10, "generating")
                await anyio.sleep(0)
            if self.delay_s:
                await anyio.sleep(self.delay_s)
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        if callable(self.answers):
            answer = self.answers(messages, call)
        else:
            if not self.answers:
                raise BackendError("scripted world model: script exhausted")
            answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, Generation):
            return answer
        return Generation(text=str(answer), completion_tokens=len(str(answer).split()))

    async def aclose(self) -> None:
        self.closed = True


def observation(text: str, thinking: str = "Let me work out the state.") -> str:
    """An answer in the trained shape."""
    return f"<think>\n{thinking}\n</think>\n\n**Environment Observation:**\n{text}"


SMALL_WORLD = """\
name: tiny-shop
description: A small web shop's order API.
domain: mcp
seed: 7
now: 2026-03-01T09:00:00Z
facts:
  - Orders ship from Rotterdam.
  - {text: Order ids look like ORD-1234., tools: [get_order]}
state:
  orders:
    - {id: ORD-1001, status: shipped, total: 12.5}
tools:
  - name: get_order
    title: Get order
    description: Fetch one order by id.
    inputSchema:
      type: object
      properties:
        order_id: {type: string, pattern: "^ORD-[0-9]+$"}
      required: [order_id]
      additionalProperties: false
    outputSchema:
      type: object
      properties:
        id: {type: string}
        status: {enum: [pending, shipped, delivered, cancelled]}
        total: {type: number}
      required: [id, status]
    annotations: {readOnlyHint: true}
    examples:
      - arguments: {order_id: ORD-1001}
        result: {id: ORD-1001, status: shipped, total: 12.5}
  - name: cancel_order
    description: Cancel an order.
    inputSchema:
      type: object
      properties:
        order_id: {type: string}
        reason: {type: string}
      required: [order_id]
    annotations: {destructiveHint: true}
    errors:
      - {name: already_shipped, message: "Order {order_id} has already shipped", status: 409}
"""


@pytest.fixture
def small_world_path(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_shop.yaml"
    path.write_text(SMALL_WORLD)
    return path
