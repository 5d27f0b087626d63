"""Shared test fixtures: anyio on asyncio, a scripted in-process world model, a small world, free ports and
servers started as subprocesses, and the `slow` lane (`python -m pytest -m "not slow"` skips it)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import pytest

from aw_mcp.backends.contract import WorldModel
from aw_mcp.core.model_io import (
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
)

REPO = Path(__file__).resolve().parent.parent

# How long a test lets a subprocess (a Python start: `aw-mcp ...`, a server) run before calling it hung: a bound for
# "never", not a speed check. A start takes 1-3 s here, and 11-20 s on a 2-core machine with two CPU-bound processes
# beside the suite; under pytest-timeout's 300 s, so a hang fails with the subprocess's own message.
SUBPROCESS_S = 240

# Folders whose every test loads torch models or runs Triton kernels through the interpreter: the slow lane.
SLOW_FOLDERS = ("engine", "kernels")


def engine_installed() -> bool:
    """Whether the `[engine]` extra is here; without it (the base install) the engine's tests are not collected
    and the tests that need it are skipped with that reason."""
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers", "xgrammar"))


ENGINE = engine_installed()
needs_engine = pytest.mark.skipif(
    not ENGINE, reason="needs the [engine] extra (torch, transformers, xgrammar)"
)
# pytest reads this: the engine and kernel folders are not even imported in the base install.
collect_ignore = [] if ENGINE else list(SLOW_FOLDERS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = [REPO / "tests" / name for name in SLOW_FOLDERS]
    for item in items:
        if any(item.path.is_relative_to(folder) for folder in slow):
            item.add_marker(pytest.mark.slow)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


@contextmanager
def serving(
    command: Sequence[str],
    ready: Callable[[], bool],
    *,
    within_s: float = SUBPROCESS_S,
    stop_within_s: float = 60,
    **popen: Any,
) -> Iterator[subprocess.Popen[bytes]]:
    """A server subprocess (stderr piped), yielded once `ready()` holds; terminated on the way out. Fails with the
    server's stderr if it exits first, or after `within_s` (a deadline for a hung start, not a speed check)."""
    process = subprocess.Popen(list(command), stderr=subprocess.PIPE, **popen)
    try:
        deadline = time.monotonic() + within_s
        while not ready():
            if process.poll() is not None:
                stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
                pytest.fail(f"server exited with {process.returncode} before it was ready:\n{stderr[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"server not ready after {within_s}s: {' '.join(command)}")
            time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=stop_within_s)


@pytest.fixture
def port() -> int:
    return free_port()


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
    try:
        import torch
    except ImportError:  # the base install: no engine, no kernels to interpret
        return
    if torch.cuda.is_available():
        return
    with triton_interpret_env(), suppress(ImportError):
        import triton.language  # noqa: F401


_import_triton_for_the_interpreter()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


Answer = str | Generation | BaseException | Callable[[list[ChatMessage], CallRef | None], Any]


class ScriptedWorldModel(WorldModel):
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
        self.entered: anyio.Event | None = None  # see reached()

    async def generate(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        on_progress: ProgressCallback | None = None,
        call: CallRef | None = None,
    ) -> Generation:
        self.calls.append({"messages": messages, "params": params, "call": call})
        self.reached().set()
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

    def reached(self) -> anyio.Event:
        """The event set once a call has reached `generate` (a test waits on it, not on a clock)."""
        if self.entered is None:
            self.entered = anyio.Event()
        return self.entered

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


def last_call(trajectory: Path) -> dict[str, Any]:
    """The last call line of a trajectory, as written (tools/list lines may come after it)."""
    lines = [json.loads(line) for line in trajectory.read_text().splitlines() if line.strip()]
    return [line for line in lines if line.get("type", "call") == "call"][-1]
