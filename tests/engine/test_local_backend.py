"""The `local` backend answers through the engine in-process and honours cancellation."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from aw_mcp.backends.contract import WorldModel
from aw_mcp.backends.local import LocalWorldModel, sampling_params
from aw_mcp.core.model_io import BackendError, Generation, GenerationParams

CHAT = [
    {"role": "system", "content": "You simulate tools."},
    {"role": "user", "content": "Action: list files"},
]


@pytest.fixture(scope="module")
def backend(tiny_ckpt: Path) -> LocalWorldModel:
    model = LocalWorldModel(str(tiny_ckpt), device="cpu")
    model._load()
    return model


def test_generate_returns_generation(backend: LocalWorldModel) -> None:
    assert isinstance(backend, WorldModel) and backend.name == "local"
    progress: list[tuple[int, str]] = []

    async def on_progress(tokens: int, status: str) -> None:
        progress.append((tokens, status))

    params = GenerationParams(temperature=0.6, max_tokens=30, seed=3, thinking=True)

    async def main() -> tuple[Generation, Generation]:
        first = await backend.generate(CHAT, params, on_progress)
        return first, await backend.generate(CHAT, params)

    first, second = anyio.run(main)
    assert isinstance(first, Generation)
    assert (first.text, first.reasoning) == (second.text, second.reasoning)  # seeded
    assert first.completion_tokens and first.completion_tokens <= 30 and first.prompt_tokens
    assert progress[-1] == (first.completion_tokens, "done")
    llm = backend._llm
    raw = llm.chat(CHAT, sampling_params(llm, params))[0].outputs[0].text
    assert first.reasoning == raw.partition("</think>")[0].strip()


def test_cancellation_stops_the_decode_loop(backend: LocalWorldModel) -> None:
    """Cancelled once the request is in the engine (an event, not a clock): it leaves the batch and frees its slot."""
    llm = backend._llm
    params = GenerationParams(max_tokens=100_000, seed=1, thinking=False)

    async def main() -> None:
        async with anyio.create_task_group() as group:

            async def cancel_once_running() -> None:
                while not llm.engine.scheduler.running:
                    await anyio.sleep(0.002)
                group.cancel_scope.cancel()

            group.start_soon(cancel_once_running)
            await backend.generate(CHAT, params)
            raise AssertionError("should have been cancelled")

    anyio.run(main)
    deadline = time.monotonic() + 30  # generous: the loop drops it at its next step
    while llm.cache_manager.num_free != llm.cache_manager.num_slots:
        assert time.monotonic() < deadline, "decode loop did not stop"
        time.sleep(0.01)
    assert not llm.engine.scheduler.running and not llm.engine.scheduler.waiting


def test_load_error_is_a_backend_error(tmp_path: Path) -> None:
    model = LocalWorldModel(str(tmp_path / "missing" / "model"))
    with pytest.raises(BackendError, match="cannot load the local model"):
        anyio.run(model.generate, CHAT, GenerationParams(max_tokens=4))


def test_a_session_s_next_call_reuses_the_previous_prompt(backend: LocalWorldModel) -> None:
    """The world's calls are one growing conversation (system, then user/assistant turns): call 2 restores
    call 1's prompt from the engine's prefix cache (no session id involved) and prefills only the new turns."""
    llm = backend._llm
    params = GenerationParams(temperature=0, max_tokens=6, thinking=True)
    first_turn = [
        {"role": "system", "content": "# Role and Objective\nYou are a **Tool World Model**. " * 8},
        {"role": "user", "content": '### Turn 1\n**Action:**\n```json\n{\n  "name": "ls"\n}\n```'},
    ]
    second_turn = first_turn + [
        {"role": "assistant", "content": "**Environment Observation:**\nnotes.txt"},
        {"role": "user", "content": '### Turn 2\n**Action:**\n```json\n{\n  "name": "cat"\n}\n```'},
    ]

    async def main() -> None:
        await backend.generate(first_turn, params)
        before = llm.prefix_cache.stats.hit_tokens
        await backend.generate(second_turn, params)
        first_prompt = llm.encode(llm.render_chat(first_turn))
        start = llm.processor.token_id("<|im_start|>")
        expected = max(i for i, t in enumerate(first_prompt) if t == start)
        assert llm.prefix_cache.stats.hit_tokens - before == expected

    anyio.run(main)
